/* The primary: runs the guest, brings the secondary in sync while the guest
 * runs (full copy, dirty rounds, first checkpoint), then one epoch every
 * epoch_ms: pause, capture the incremental checkpoint, resume, send. Guest
 * output of epoch N leaves only after ACK(N) (output commit).
 *
 * Policy when the secondary is lost (connection closed, or silent for
 * timeout_ms): the primary says so loudly, releases held output and runs on
 * UNPROTECTED; it never waits for a secondary that is gone. Fencing against
 * split brain (a secondary that took over while we still run) is left to
 * the fencing work: lose_secondary() is where the fence check belongs. */
#include "replication/replication.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint.h"
#include "net/control.h"

#define TAG "primary"
#define MAX_INFLIGHT 8
#define BATCH_PAGES 1024
#define SYNC_QUEUE_MAX (16u << 20)   /* bytes queued before sync waits */
#define SYNC_ROUNDS_MAX 4
#define SYNC_DONE_PAGES 2048         /* dirty set small enough for the first checkpoint */
#define CONSOLE_SECTION_MAX (1u << 20)

enum pstate { P_CONNECTING, P_HELLO, P_SYNC, P_PROTECTING, P_PROTECTED, P_UNPROTECTED, P_DONE };

static const char *const pstate_names[] = {
	"connecting", "hello", "syncing", "first-checkpoint", "protected", "unprotected", "done",
};

struct epoch_tx {
	int kind;                  /* REPL_TX_EPOCH */
	bool busy, sending;
	uint64_t epoch;
	uint64_t out_mark;         /* guest output produced up to the pause */
	uint64_t capture_ns;
	struct proto_buf buf;
};

struct repl_primary {
	const struct repl_primary_opts *o;
	struct ev_loop *loop;
	struct repl_vm *vm;
	struct repl_link link;
	enum pstate state;
	struct proto_page_enc *enc;
	struct ckpt cap;

	/* Initial sync: pages of `todo` are sent from `cursor` on. */
	uint64_t *todo;
	uint64_t cursor;
	int round;
	uint64_t round_pages;
	uint8_t *snap;             /* stable copies of pages being sent */
	size_t sync_inflight;
	uint64_t sync_t0;

	uint64_t epoch;            /* last captured */
	uint64_t acked;
	uint64_t out_mark_prev;
	bool verify;               /* test mode: digest of all RAM in every epoch */
	struct ckpt_digest verify_digest;   /* issue 13: RAM + complete state at the pause */
	struct epoch_tx tx[MAX_INFLIGHT];
	bool finishing;            /* guest stopped: last epoch in flight */
	bool final_pending;        /* ...not captured yet (no free slot) */
	uint64_t final_epoch;
	int exit_status;

	ev_timer epoch_w, hb_w, finish_w;
	ev_idle sync_w;
	ev_signal sigint_w, sigterm_w;
	struct control *ctl;
	struct repl_stats st;
	struct ckpt_stats worst;   /* breakdown of the longest pause */
	uint64_t worst_pages;
};

static void finish(struct repl_primary *p, int status);

/* The secondary is gone: run on, unprotected, and say so. */
static void lose_secondary(struct repl_primary *p, const char *why)
{
	if (p->state == P_UNPROTECTED || p->state == P_DONE)
		return;
	if (p->state <= P_HELLO) {
		log_error(TAG, "cannot protect the VM: %s", why);
		finish(p, 1);
		return;
	}
	log_error(TAG, "secondary lost (%s) at epoch %llu (acked %llu): the VM runs UNPROTECTED "
		  "from now on; held output is released", why, (unsigned long long)p->epoch,
		  (unsigned long long)p->acked);
	p->state = P_UNPROTECTED;
	ev_timer_stop(p->loop, &p->epoch_w);
	ev_idle_stop(p->loop, &p->sync_w);
	repl_link_close(&p->link);
	for (int i = 0; i < MAX_INFLIGHT; i++)
		p->tx[i].busy = p->tx[i].sending = false;
	repl_vm_set_gated(p->vm, false);   /* releases everything held */
	if (p->finishing)
		finish(p, p->exit_status);
}

/* ---- epochs --------------------------------------------------------------- */

static struct epoch_tx *free_slot(struct repl_primary *p)
{
	for (int i = 0; i < MAX_INFLIGHT; i++)
		if (!p->tx[i].busy && !p->tx[i].sending)
			return &p->tx[i];
	return NULL;
}

/* Encodes the captured checkpoint as one epoch: EpochBegin, console output
 * of the epoch, page batches, state, EpochEnd (page count + crc32c of every
 * gfn and page, checked by the secondary after decoding). */
static int encode_epoch(struct repl_primary *p, struct epoch_tx *tx)
{
	Understudy__EpochBegin eb = UNDERSTUDY__EPOCH_BEGIN__INIT;
	Understudy__EpochEnd ee = UNDERSTUDY__EPOCH_END__INIT;
	struct proto_buf out;
	const void *ptrs[BATCH_PAGES];
	uint64_t released = p->vm->released;
	uint32_t crc = 0;
	int r;

	proto_buf_reset(&tx->buf);
	eb.epoch = tx->epoch;
	if ((r = proto_msg_pack(&tx->buf, PROTO_T_EPOCH_BEGIN, &eb.base)) < 0)
		return r;
	proto_buf_init(&out);
	r = repl_vm_output_copy(p->vm, p->out_mark_prev, tx->out_mark, &out);
	/* Sections of at most 1 MiB: frames stay under the peer's limit. */
	for (size_t off = 0; r == 0 && (off < out.len || off == 0); off += CONSOLE_SECTION_MAX) {
		size_t n = out.len - off < CONSOLE_SECTION_MAX ? out.len - off : CONSOLE_SECTION_MAX;

		r = repl_section_pack(&tx->buf, "console", out.data + off, n);
		if (out.len == 0)
			break;
	}
	proto_buf_fini(&out);
	if (r < 0 || (r = repl_section_pack(&tx->buf, "released", &released, sizeof(released))) < 0)
		return r;
	for (size_t i = 0; i < p->cap.npages; i += BATCH_PAGES) {
		size_t n = p->cap.npages - i < BATCH_PAGES ? p->cap.npages - i : BATCH_PAGES;

		for (size_t k = 0; k < n; k++) {
			ptrs[k] = p->cap.pages + (i + k) * CKPT_PAGE_SIZE;
			crc = proto_crc32c(crc, &p->cap.gfns[i + k], sizeof(uint64_t));
			crc = proto_crc32c(crc, ptrs[k], CKPT_PAGE_SIZE);
		}
		if ((r = proto_pages_encode(p->enc, p->cap.gfns + i, ptrs, n, &tx->buf, NULL)) < 0)
			return r;
	}
	if ((r = repl_section_pack(&tx->buf, "state", p->cap.state, p->cap.state_len)) < 0)
		return r;
	if (p->verify && (r = repl_verify_pack(&tx->buf, &p->verify_digest)) < 0)   /* issue 13 */
		return r;
	ee.epoch = tx->epoch;
	ee.npages = p->cap.npages;
	ee.digest.data = (uint8_t *)&crc;
	ee.digest.len = sizeof(crc);
	return proto_msg_pack(&tx->buf, PROTO_T_EPOCH_END, &ee.base);
}

/* One epoch: the guest is paused only for the capture. */
static int run_epoch(struct repl_primary *p)
{
	struct epoch_tx *tx = free_slot(p);
	uint64_t t0, pause_ns;
	int r;

	if (!tx || net_queued_bytes(p->link.conn) > (64u << 20)) {
		p->st.stretched++;    /* link slower than the guest: the epoch stretches */
		return 0;
	}
	t0 = now_ns();
	machine_pause(p->vm->m);
	/* issue 13: read from KVM, not from the capture; before it, so the time
	 * read here is a lower bound of the time the standby is given. */
	r = p->verify ? ckpt_digest_machine(p->vm->m, &p->verify_digest) : 0;
	if (r == 0)
		r = ckpt_capture(p->vm->m, &p->cap, false);
	tx->out_mark = repl_vm_output_mark(p->vm);
	if (!p->finishing)
		machine_resume(p->vm->m);
	pause_ns = now_ns() - t0;
	if (r < 0) {
		log_error(TAG, "capture of epoch %llu failed: %s", (unsigned long long)(p->epoch + 1),
			  strerror(-r));
		return r;
	}
	tx->epoch = ++p->epoch;
	tx->capture_ns = t0;
	repl_event_log("capture %llu", (unsigned long long)tx->epoch);   /* issue 13 */
#ifdef UNDERSTUDY_MUTANT_release_early   /* make check-mutants: output leaves before ACK */
	repl_release_epoch(p->vm, tx->epoch, tx->out_mark);
#endif
	tx->busy = true;
	repl_stats_add_pause(&p->st, pause_ns);
	if (pause_ns > p->worst.pause_ns) {
		p->worst = p->cap.stats;
		p->worst.pause_ns = pause_ns;
		p->worst_pages = p->cap.npages;
	}
	p->st.epochs++;
	p->st.last_dirty_pages = p->cap.npages;
	p->st.dirty_pages_total += p->cap.npages;
	/* Everything below runs while the guest runs. Grow the epoch buffer
	 * here, not inside a later pause, when this epoch came near its size. */
	if (p->cap.npages * 4 > p->cap.cap_pages * 3 && p->cap.cap_pages < p->vm->m->ram_pages &&
	    ckpt_reserve(&p->cap, p->cap.cap_pages * 2 < p->vm->m->ram_pages ?
			 p->cap.cap_pages * 2 : p->vm->m->ram_pages) < 0)
		log_warn(TAG, "cannot grow the epoch buffer beyond %zu pages", p->cap.cap_pages);
	r = encode_epoch(p, tx);
	p->out_mark_prev = tx->out_mark;
	if (r == 0) {
		tx->sending = true;
		r = repl_link_send_buf(&p->link, tx->buf.data, tx->buf.len, tx);
		if (r < 0)
			tx->sending = false;
	}
	if (r < 0)
		log_error(TAG, "sending epoch %llu: %s", (unsigned long long)tx->epoch, strerror(-r));
	return r;
}

static void on_epoch_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_primary *p = w->data;

	(void)loop;
	(void)revents;
	if (p->state != P_PROTECTED && p->state != P_PROTECTING)
		return;
	if (run_epoch(p) < 0)
		lose_secondary(p, "epoch could not be sent");
}

static void try_final_epoch(struct repl_primary *p)
{
	uint64_t before = p->epoch;

	if (!p->final_pending)
		return;
	if (run_epoch(p) < 0) {
		p->final_pending = false;
		lose_secondary(p, "the last epoch could not be sent");
		return;
	}
	if (p->epoch == before)
		return;               /* stretched: no free slot yet */
	p->final_pending = false;
	p->final_epoch = p->epoch;
}

static void on_ack(struct repl_primary *p, uint64_t epoch)
{
	if (epoch <= p->acked || epoch > p->epoch) {
		log_warn(TAG, "ignoring ACK(%llu) (acked %llu, captured %llu)",
			 (unsigned long long)epoch, (unsigned long long)p->acked,
			 (unsigned long long)p->epoch);
		return;
	}
	repl_event_log("ack %llu", (unsigned long long)epoch);   /* issue 13 */
	for (int i = 0; i < MAX_INFLIGHT; i++) {
		struct epoch_tx *tx = &p->tx[i];

		if (tx->busy && tx->epoch <= epoch) {
			repl_release_epoch(p->vm, tx->epoch, tx->out_mark);   /* issue 13: logged */
			if (tx->epoch == epoch)
				p->st.lag_ns = now_ns() - tx->capture_ns;
			tx->busy = false;
		}
	}
	p->acked = epoch;
	p->st.acked = epoch;
	if (p->state == P_PROTECTING) {
		p->state = P_PROTECTED;
		log_info(TAG, "protected: secondary holds epoch %llu, %.1f ms after sync began",
			 (unsigned long long)epoch, (now_ns() - p->sync_t0) / 1e6);
	}
	try_final_epoch(p);
	if (p->finishing && !p->final_pending && p->final_epoch && p->acked >= p->final_epoch)
		finish(p, p->exit_status);
}

/* ---- initial sync ----------------------------------------------------------- */

static void sync_done_round(struct repl_primary *p)
{
	uint64_t words = (p->vm->m->ram_pages + 63) / 64, dirty = 0;
	int r;

	machine_pause(p->vm->m);
	r = machine_harvest_dirty(p->vm->m, p->todo);
	machine_resume(p->vm->m);
	if (r < 0) {
		lose_secondary(p, "dirty log failed during sync");
		return;
	}
	for (uint64_t w = 0; w < words; w++)
		dirty += (uint64_t)__builtin_popcountll(p->todo[w]);
	log_info(TAG, "sync round %d: %llu pages sent, %llu dirtied meanwhile", p->round,
		 (unsigned long long)p->round_pages, (unsigned long long)dirty);
	p->round++;
	p->cursor = 0;
	p->round_pages = 0;
	if (dirty <= SYNC_DONE_PAGES || p->round > SYNC_ROUNDS_MAX) {
		/* The rest goes in the first checkpoint: requeue what we harvested. */
		for (uint64_t w = 0; w < words; w++)
			for (uint64_t b = p->todo[w]; b; b &= b - 1)
				machine_mark_dirty(p->vm->m,
						   (w * 64 + (uint64_t)__builtin_ctzll(b)) * KVM_PAGE_SIZE, 1);
		ev_idle_stop(p->loop, &p->sync_w);
		p->state = P_PROTECTING;
		if (run_epoch(p) < 0)
			lose_secondary(p, "first checkpoint could not be sent");
		ev_timer_start(p->loop, &p->epoch_w);
	}
}

/* Sends the next batch of the current sync round. Pages are copied first:
 * the guest keeps writing them, and the XOR cache must hold what was sent. */
static void on_sync_idle(struct ev_loop *loop, ev_idle *w, int revents)
{
	struct repl_primary *p = w->data;
	struct machine *m = p->vm->m;
	uint64_t gfns[BATCH_PAGES];
	const void *ptrs[BATCH_PAGES];
	struct proto_buf batch;
	size_t n = 0;

	(void)loop;
	(void)revents;
	if (p->state != P_SYNC || !p->link.conn) {
		ev_idle_stop(p->loop, &p->sync_w);
		return;
	}
	if (net_queued_bytes(p->link.conn) > SYNC_QUEUE_MAX) {
		ev_idle_stop(p->loop, &p->sync_w);   /* on_sent restarts it */
		return;
	}
	while (p->cursor < m->ram_pages && n < BATCH_PAGES) {
		uint64_t pg = p->cursor++;

		if (!(p->todo[pg / 64] >> (pg % 64) & 1))
			continue;
		memcpy(p->snap + n * KVM_PAGE_SIZE, machine_page_hva(m, pg), KVM_PAGE_SIZE);
		gfns[n] = machine_page_gfn(m, pg);
		ptrs[n] = p->snap + n * KVM_PAGE_SIZE;
		n++;
	}
	if (n) {
		proto_buf_init(&batch);
		if (proto_pages_encode(p->enc, gfns, ptrs, n, &batch, NULL) < 0) {
			proto_buf_fini(&batch);
			lose_secondary(p, "sync batch could not be encoded");
			return;
		}
		if (repl_link_send_owned(&p->link, &batch) < 0) {
			lose_secondary(p, "sync batch could not be sent");
			return;
		}
		p->round_pages += n;
	}
	if (p->cursor >= m->ram_pages)
		sync_done_round(p);
}

static uint64_t count_bits(const uint64_t *bm, uint64_t words)
{
	uint64_t n = 0;

	for (uint64_t w = 0; w < words; w++)
		n += (uint64_t)__builtin_popcountll(bm[w]);
	return n;
}

static void start_sync(struct repl_primary *p)
{
	uint64_t words = (p->vm->m->ram_pages + 63) / 64;
	uint64_t *scratch = p->todo;

	/* Round 0 is every page; clear the log first so later writes show. */
	machine_pause(p->vm->m);
	if (machine_harvest_dirty(p->vm->m, scratch) < 0) {
		machine_resume(p->vm->m);
		lose_secondary(p, "dirty log failed");
		return;
	}
	/* The standby's RAM is fresh and zero: pages never written (holes in
	 * the memfd) need not travel, nor be faulted in here by reading them. */
	if (machine_ram_populated(p->vm->m, p->todo) < 0) {
		memset(p->todo, 0xff, words * 8);
		if (p->vm->m->ram_pages % 64)
			p->todo[words - 1] = (1ull << (p->vm->m->ram_pages % 64)) - 1;
	}
	p->state = P_SYNC;
	p->sync_t0 = now_ns();
	machine_resume(p->vm->m);
	ev_idle_start(p->loop, &p->sync_w);
	log_info(TAG, "secondary accepted us: initial sync while the guest runs (%llu pages, "
		 "%llu of them ever written)", (unsigned long long)p->vm->m->ram_pages,
		 (unsigned long long)count_bits(p->todo, words));
}

/* ---- link callbacks ---------------------------------------------------------- */

static int on_frame(void *ctx, const struct proto_frame *f)
{
	struct repl_primary *p = ctx;
	ProtobufCMessage *msg = NULL;
	char err[256];
	int r;

	if (f->type == PROTO_T_PAGES)
		return -EPROTO;
	r = proto_msg_unpack(f->type, f->payload, f->len, &msg);
	if (r < 0)
		return r;
	switch (f->type) {
	case PROTO_T_HELLO:
		if (p->state != P_HELLO) {
			r = -EPROTO;
			break;
		}
		r = repl_check_hello((Understudy__Hello *)msg, UNDERSTUDY__ROLE__ROLE_SECONDARY, err,
				     sizeof(err));
		if (r < 0) {
			log_error(TAG, "secondary refused: %s", err);
			break;
		}
		start_sync(p);
		break;
	case PROTO_T_ACK:
		on_ack(p, ((Understudy__Ack *)msg)->epoch);
		break;
	case PROTO_T_HEARTBEAT:
		break;
	case PROTO_T_ERROR:
		log_error(TAG, "secondary says: %s (code %d)", ((Understudy__Error *)msg)->text,
			  ((Understudy__Error *)msg)->code);
		r = -ECONNREFUSED;
		break;
	default:
		log_error(TAG, "unexpected %s from the secondary", proto_type_name(f->type));
		r = -EPROTO;
		break;
	}
	proto_msg_free(msg);
	return r;
}

static void on_connected(struct net_conn *c, void *ctx)
{
	struct repl_primary *p = ctx;
	char cfgtext[512];
	int n = repl_config_encode(&p->o->cfg, cfgtext, sizeof(cfgtext));

	(void)c;
	p->state = P_HELLO;
	p->link.last_rx_ns = now_ns();
	if (n < 0 || repl_send_hello(&p->link, UNDERSTUDY__ROLE__ROLE_PRIMARY, &p->o->cfg) < 0 ||
	    repl_link_send_section(&p->link, "machine-config", cfgtext, (size_t)n) < 0)
		lose_secondary(p, "cannot send hello");
}

static void on_recv(struct net_conn *c, const void *data, size_t len, void *ctx)
{
	struct repl_primary *p = ctx;
	int r = repl_link_feed(&p->link, data, len, on_frame, p);

	(void)c;
	if (r < 0 && p->link.conn) {
		if (r != -ECONNREFUSED)
			log_error(TAG, "bad data from the secondary: %s", proto_strerror(r));
		lose_secondary(p, r == -ECONNREFUSED ? "refused by the secondary" : "protocol error");
	}
}

static void on_sent(struct net_conn *c, void *cookie, int status, void *ctx)
{
	struct repl_primary *p = ctx;
	int kind = cookie ? *(int *)cookie : 0;

	(void)c;
	(void)status;
	p->st.bytes_sent = p->link.bytes_sent;
	if (repl_link_sent_owned(cookie)) {
		if (p->state == P_SYNC && !ev_is_active(&p->sync_w) && p->link.conn &&
		    net_queued_bytes(p->link.conn) <= SYNC_QUEUE_MAX)
			ev_idle_start(p->loop, &p->sync_w);
	} else if (kind == REPL_TX_EPOCH) {
		((struct epoch_tx *)cookie)->sending = false;
		try_final_epoch(p);
	}
}

static void on_closed(struct net_conn *c, int reason, void *ctx)
{
	struct repl_primary *p = ctx;
	char why[128];

	(void)c;
	repl_link_closed(&p->link);
	if (p->state == P_DONE) {
		ev_break(p->loop, EVBREAK_ALL);
		return;
	}
	snprintf(why, sizeof(why), "connection %s", reason ? strerror(-reason) : "closed");
	lose_secondary(p, why);
}

static const struct net_conn_ops conn_ops = {
	.connected = on_connected, .recv = on_recv, .sent = on_sent, .closed = on_closed,
};

/* ---- heartbeat, shutdown, status ------------------------------------------------ */

static void on_hb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_primary *p = w->data;
	uint64_t silent_ns;

	(void)loop;
	(void)revents;
	if (p->state < P_HELLO || p->state >= P_UNPROTECTED || !p->link.conn)
		return;
	silent_ns = now_ns() - p->link.last_rx_ns;
	if (silent_ns > (uint64_t)p->o->timeout_ms * 1000000ull) {
		char why[96];

		snprintf(why, sizeof(why), "silent for %llu ms", (unsigned long long)(silent_ns / 1000000));
		lose_secondary(p, why);
		return;
	}
	if (repl_send_epoch_msg(&p->link, PROTO_T_HEARTBEAT, p->epoch) < 0)
		lose_secondary(p, "heartbeat could not be sent");
}

static void finish(struct repl_primary *p, int status)
{
	if (p->state == P_DONE)
		return;
	if (p->link.conn && p->state >= P_SYNC && p->state != P_UNPROTECTED) {
		Understudy__Fence f = UNDERSTUDY__FENCE__INIT;

		f.epoch = p->acked;
		f.reason = "primary shutting down: the guest stopped";
		if (repl_link_send_msg(&p->link, PROTO_T_FENCE, &f.base) < 0)
			log_warn(TAG, "could not tell the secondary we stop");
	}
	p->state = P_DONE;
	p->exit_status = status;
	ev_timer_stop(p->loop, &p->epoch_w);
	ev_idle_stop(p->loop, &p->sync_w);
	/* No release here: output the secondary never acknowledged never leaves
	 * (when unprotected, output is not held in the first place). */
	if (p->link.conn) {
		/* Let the Fence leave; closed() or the timer ends the loop. */
		net_close_flush(p->link.conn);
		ev_timer_stop(p->loop, &p->finish_w);
		ev_timer_set(&p->finish_w, 1.0, 0);
		ev_timer_start(p->loop, &p->finish_w);
		return;
	}
	ev_break(p->loop, EVBREAK_ALL);
}

static void on_finish_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_primary *p = w->data;

	(void)loop;
	(void)revents;
	if (p->state == P_DONE) {
		ev_break(p->loop, EVBREAK_ALL);   /* the goodbye did not leave in time */
		return;
	}
	log_warn(TAG, "no ACK for the last epoch: stopping anyway");
	finish(p, p->exit_status);
}

/* The guest stopped: its last effects are committed like any epoch's.
 * When the link is full the capture waits for a free slot (on_ack/on_sent). */
static void on_vm_stopped(void *ctx, int status)
{
	struct repl_primary *p = ctx;

	p->exit_status = status < 0 ? 1 : status;
	p->finishing = true;
	if (p->state == P_PROTECTED || p->state == P_PROTECTING) {
		ev_timer_stop(p->loop, &p->epoch_w);
		ev_timer_start(p->loop, &p->finish_w);
		p->final_pending = true;
		try_final_epoch(p);
		return;
	}
	finish(p, p->exit_status);
}

static void on_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
	struct repl_primary *p = w->data;

	(void)loop;
	(void)revents;
	log_info(TAG, "signal %d: stopping", w->signum);
	machine_stop(p->vm->m, 0);
}

static int status_format(void *ctx, const char *req, char *out, size_t len)
{
	struct repl_primary *p = ctx;
	uint64_t p50, p99;
	bool json = strstr(req, "json") != NULL;
	double hb_ms = p->link.conn ? (now_ns() - p->link.last_rx_ns) / 1e6 : -1;

	repl_stats_pause_pct(&p->st, &p50, &p99);
	return snprintf(out, len, json ?
			"{\"role\":\"primary\",\"state\":\"%s\",\"epoch\":%llu,\"acked\":%llu,"
			"\"pause_p50_us\":%.1f,\"pause_p99_us\":%.1f,\"dirty_pages_last\":%llu,"
			"\"dirty_pages_avg\":%.1f,\"bytes_sent\":%llu,\"lag_ms\":%.3f,"
			"\"stretched\":%llu,\"since_heartbeat_ms\":%.1f,\"pause_max_us\":%.1f,"
			"\"pause_max_pages\":%llu,\"pause_max_harvest_us\":%.1f,\"pause_max_copy_us\":%.1f,"
			"\"pause_max_state_us\":%.1f}\n" :
			"role primary\nstate %s\nepoch %llu\nacked %llu\npause p50 %.1f us\n"
			"pause p99 %.1f us\ndirty pages last %llu\ndirty pages avg %.1f\n"
			"bytes sent %llu\nlag %.3f ms\nstretched epochs %llu\n"
			"since heartbeat %.1f ms\nlongest pause %.1f us: %llu pages, harvest %.1f us, "
			"copy %.1f us, state %.1f us\n",
			pstate_names[p->state], (unsigned long long)p->epoch,
			(unsigned long long)p->acked, p50 / 1e3, p99 / 1e3,
			(unsigned long long)p->st.last_dirty_pages,
			p->st.epochs ? (double)p->st.dirty_pages_total / (double)p->st.epochs : 0.0,
			(unsigned long long)p->link.bytes_sent, p->st.lag_ns / 1e6,
			(unsigned long long)p->st.stretched, hb_ms, p->worst.pause_ns / 1e3,
			(unsigned long long)p->worst_pages, p->worst.harvest_ns / 1e3,
			p->worst.copy_ns / 1e3, p->worst.state_ns / 1e3);
}

static char *status_text(void *ctx, const char *req)
{
	return repl_status_reply(status_format, ctx, req);
}

/* ---- setup ------------------------------------------------------------------ */

static int setup(struct repl_primary *p)
{
	struct machine *m;
	int r;

	if ((r = repl_vm_new(p->loop, &p->o->cfg, p->o->console, &p->vm)) < 0)
		return r;
	m = p->vm->m;
	p->vm->on_stopped = on_vm_stopped;
	p->vm->cb_ctx = p;
	repl_vm_set_gated(p->vm, true);
	if ((r = machine_boot(m)) < 0)
		return r;
	p->enc = proto_page_enc_new(64, 0);
	p->todo = calloc((m->ram_pages + 63) / 64, 8);
	p->snap = malloc(BATCH_PAGES * KVM_PAGE_SIZE);
	if (!p->enc || !p->todo || !p->snap)
		return -ENOMEM;
	ckpt_init(&p->cap);
	/* Epoch buffers are allocated and touched now, not inside a pause. */
	if ((r = ckpt_reserve(&p->cap, m->ram_pages < 8192 ? m->ram_pages : 8192)) < 0)
		return r;
	for (int i = 0; i < MAX_INFLIGHT; i++) {
		p->tx[i].kind = REPL_TX_EPOCH;
		proto_buf_init(&p->tx[i].buf);
	}
	repl_link_init(&p->link, PROTO_MAX_PAYLOAD_DEFAULT);
	if (p->o->control &&
	    (r = control_open(p->loop, p->o->control, status_text, p, &p->ctl)) < 0)
		return r;
	r = net_connect(p->loop, &p->o->net, p->o->peer, &conn_ops, p, &p->link.conn);
	if (r < 0)
		log_error(TAG, "cannot connect to the secondary at %s: %s", p->o->peer, strerror(-r));
	return r;
}

int repl_primary_run(const struct repl_primary_opts *o)
{
	struct repl_primary *p = calloc(1, sizeof(*p));
	int status;

	if (!p)
		return 1;
	p->o = o;
	p->loop = ev_default_loop(0);
	p->state = P_CONNECTING;
	p->verify = getenv("UNDERSTUDY_VERIFY") != NULL;
	ev_timer_init(&p->epoch_w, on_epoch_timer, o->epoch_ms / 1e3, o->epoch_ms / 1e3);
	ev_timer_init(&p->hb_w, on_hb, 0.01, o->timeout_ms / 4e3 > 0.005 ? o->timeout_ms / 4e3 : 0.005);
	ev_timer_init(&p->finish_w, on_finish_timeout, 2.0, 0);
	ev_idle_init(&p->sync_w, on_sync_idle);
	/* Silence is judged after pending reads are handled: libev runs higher
	 * priorities first, so a stall of our own loop is not the peer's. */
	ev_set_priority(&p->hb_w, EV_MINPRI);
	ev_signal_init(&p->sigint_w, on_signal, SIGINT);
	ev_signal_init(&p->sigterm_w, on_signal, SIGTERM);
	p->epoch_w.data = p->hb_w.data = p->finish_w.data = p->sync_w.data = p;
	p->sigint_w.data = p->sigterm_w.data = p;
	if (setup(p) < 0) {
		status = 1;
		goto out;
	}
	ev_signal_start(p->loop, &p->sigint_w);
	ev_signal_start(p->loop, &p->sigterm_w);
	ev_timer_start(p->loop, &p->hb_w);
	machine_resume(p->vm->m);
	ev_run(p->loop, 0);
	status = p->exit_status;
out:
	ev_timer_stop(p->loop, &p->epoch_w);
	ev_timer_stop(p->loop, &p->hb_w);
	ev_timer_stop(p->loop, &p->finish_w);
	ev_idle_stop(p->loop, &p->sync_w);
	ev_signal_stop(p->loop, &p->sigint_w);
	ev_signal_stop(p->loop, &p->sigterm_w);
	control_free(p->ctl);
	if (p->vm) {
		machine_stop(p->vm->m, 0);
		machine_pause(p->vm->m);
	}
	repl_link_fini(&p->link);
	repl_vm_free(p->vm);
	ckpt_fini(&p->cap);
	for (int i = 0; i < MAX_INFLIGHT; i++)
		proto_buf_fini(&p->tx[i].buf);
	proto_page_enc_free(p->enc);
	free(p->todo);
	free(p->snap);
	free(p);
	return status;
}
