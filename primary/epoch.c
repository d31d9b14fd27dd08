/* The primary's epochs, top to bottom. One epoch: take a free slot, pause
 * the guest, capture its dirty pages, state and output mark, resume (the
 * only part that runs paused; it never waits on the network), encode into
 * the slot's buffer, hand that to the link. When the secondary holds the
 * epoch whole it ACKs; the epoch's output leaves (output commit) and the
 * slot, once the link no longer reads its buffer, is free again:
 *
 *   FREE [-> PRECOPY] -> CAPTURED -> ENCODED -> SENDING -> SENT -> ACKED -> RELEASED -> FREE
 *
 * PRECOPY (repl_epoch_precopy): while the guest runs, the pages it wrote so
 * far are harvested, copied and sent ahead as the start of the next epoch,
 * so that its pause copies only what was written since (pages written
 * again are sent again; the secondary commits nothing before EpochEnd).
 *
 * An ACK may overtake the link's sent() (RDMA reports local completion
 * late): the slot is then released with on_wire still set, and freed by
 * sent(). A captured epoch that cannot reach the link is undone (undo()),
 * so that the next epoch carries everything it held. */
#include "primary/primary_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kmod/mutant.h"

#define TAG "epoch"
#define BATCH_PAGES 1024
#define CONSOLE_SECTION_MAX (1u << 20)  /* frames stay under the peer's limit */
#define LINK_QUEUE_MAX (64u << 20)      /* bytes on the link before epochs stretch */
#define CAP_PAGES_FIRST 8192
#define PRECOPY_MIN_PAGES 256      /* smaller epochs: the pause copies it all (~0.1 ms) */
#define PRECOPY_WASTE_MAX 0.5      /* more sent twice than this: pre-copy rests */
#define PRECOPY_REST 32            /* ...for this many epochs, then tries again */

int repl_epochs_init(struct repl_epochs *q, struct repl_vm *vm, struct repl_link *link,
		     bool verify)
{
	uint64_t ram_pages = vm->m->ram_pages;
	const char *env;
	int r;

	memset(q, 0, sizeof(*q));
	q->vm = vm;
	q->link = link;
	q->verify = verify;
	ckpt_init(&q->cap);
	ckpt_init(&q->pre);
	for (int i = 0; i < REPL_EPOCH_SLOTS; i++) {
		q->slot[i].kind = REPL_TX_EPOCH;
		proto_buf_init(&q->slot[i].buf);
		proto_buf_init(&q->slot[i].pre);
	}
	/* UNDERSTUDY_PRECOPY=1: in every epoch; auto: when it pays; otherwise
	 * (the default until it is measured on a KVM host, docs/design.md) never. */
	env = getenv("UNDERSTUDY_PRECOPY");
	q->pre_mode = env && !strcmp(env, "auto") ? -1 : env && !strcmp(env, "1");
	q->enc = proto_page_enc_new(64, 0);
	if (!q->enc)
		return -ENOMEM;
	/* The capture buffer is allocated and touched now, not inside a pause. */
	r = ckpt_reserve(&q->cap, ram_pages < CAP_PAGES_FIRST ? ram_pages : CAP_PAGES_FIRST);
	if (r < 0)
		goto err_enc;
	if ((r = repl_disk_cap_init(&q->disk, vm->m)) < 0)
		goto err_enc;
	return 0;

err_enc:
	proto_page_enc_free(q->enc);
	q->enc = NULL;
	return r;
}

/* Safe on a zeroed q and after a failed init. */
void repl_epochs_fini(struct repl_epochs *q)
{
	ckpt_fini(&q->cap);
	ckpt_fini(&q->pre);
	repl_disk_cap_fini(&q->disk);
	for (int i = 0; i < REPL_EPOCH_SLOTS; i++) {
		proto_buf_fini(&q->slot[i].buf);
		proto_buf_fini(&q->slot[i].pre);
	}
	proto_page_enc_free(q->enc);
	q->enc = NULL;
}

/* The one place a slot becomes free: when its output has left and the link
 * no longer reads its buffer; or at once (abandon) when its epoch never
 * reached the link or the link is gone with every send queued on it. */
static void settle(struct repl_epoch *e, bool abandon)
{
	if (!abandon && (e->state != REPL_EPOCH_RELEASED || e->on_wire))
		return;
	e->state = REPL_EPOCH_FREE;
	e->on_wire = 0;
	proto_buf_reset(&e->buf);
	proto_buf_reset(&e->pre);
}

void repl_epochs_drop(struct repl_epochs *q)
{
	/* An open epoch's pre-copied pages never committed: dirty again. */
	if (q->open)
		ckpt_requeue(q->vm->m, &q->pre);
	q->open = NULL;
	for (int i = 0; i < REPL_EPOCH_SLOTS; i++)
		settle(&q->slot[i], true);
}

static struct repl_epoch *slot_claim(struct repl_epochs *q)
{
	for (int i = 0; i < REPL_EPOCH_SLOTS; i++)
		if (q->slot[i].state == REPL_EPOCH_FREE)
			return &q->slot[i];
	return NULL;
}

static void count_pause(struct repl_epochs *q, uint64_t pause_ns)
{
	repl_stats_add_pause(&q->st, pause_ns);
	if (pause_ns > q->worst.pause_ns) {
		q->worst = q->cap.stats;
		q->worst.pause_ns = pause_ns;
		q->worst_pages = q->cap.npages;
	}
	/* An open epoch's pre-copied pages count once (not again at a retry). */
	repl_stats_add_epoch(&q->st, q->cap.npages + (q->open && !q->pre_retry ? q->pre.npages : 0));
}

/* The hot set's budget (machine_set_hot_budget): as many pages as the pause
 * copies in REPL_HOT_PAUSE_US at the copy speed measured in the pauses (a
 * hot page costs a copy per epoch in the pause; a re-protected one a write
 * fault, ~50x more here, every time it is rewritten).
 * UNDERSTUDY_HOT_PAUSE_US overrides it (0: no hot set), for benchmarks. */
#define REPL_HOT_PAUSE_US 1000
static void hot_budget(struct repl_epochs *q)
{
	struct machine *m = q->vm->m;
	const char *env = getenv("UNDERSTUDY_HOT_PAUSE_US");
	uint64_t us = env ? strtoull(env, NULL, 10) : REPL_HOT_PAUSE_US, pages;
	double per_page;

	if (q->hot_off) {
		if (m->hot_budget && machine_set_hot_budget(m, 0) < 0)
			log_warn(TAG, "cannot empty the hot-page set");
		return;
	}
	if (q->cap.npages < 64)
		return;
	per_page = (double)q->cap.stats.copy_ns / q->cap.npages;
	q->copy_page_ns = q->copy_page_ns ? 0.8 * q->copy_page_ns + 0.2 * per_page : per_page;
	pages = q->copy_page_ns > 0 ? (uint64_t)(us * 1000.0 / q->copy_page_ns) : 0;
	if (pages > m->ram_pages / 4)
		pages = m->ram_pages / 4;
	if (pages != m->hot_budget && machine_set_hot_budget(m, pages) < 0)
		log_warn(TAG, "no memory for the hot-page set: every page is re-protected");
}

/* FREE -> CAPTURED. The guest is paused only here; resume is false for the
 * last epoch of a guest that stopped. */
static int capture(struct repl_epochs *q, struct repl_epoch *e, bool resume)
{
	struct machine *m = q->vm->m;
	uint64_t t0 = now_ns(), pause_ns;
	int r;

	machine_pause(m);
	r = ckpt_capture(m, &q->cap, false);   /* requeues its harvest on failure */
	/* The blocks the guest wrote in the epoch, as the image holds them now:
	 * every write the guest saw complete is in (served on its vCPU thread). */
	if (r == 0 && repl_disk_cap_on(&q->disk) && (r = repl_disk_capture(&q->disk, m)) < 0)
		ckpt_requeue(m, &q->cap);
	/* Test mode: a digest of exactly what was captured (with the RAM, still
	 * paused); the secondary compares it with its standby read from KVM. */
	if (r == 0 && q->verify && (r = ckpt_digest_capture(m, &q->cap, &q->verify_digest)) < 0) {
		ckpt_requeue(m, &q->cap);
		repl_disk_requeue(&q->disk, m);
	}
	if (r == 0 && q->drill.want_digest)
		repl_drill_pri_capture(q);
	e->out_mark = repl_vm_output_mark(q->vm);
	e->net_mark = repl_vm_net_mark(q->vm);
	if (resume)
		machine_resume(m);
	pause_ns = now_ns() - t0;
	if (r < 0)
		return r;
	e->epoch = ++q->epoch;
	log_set_epoch(e->epoch);      /* for the JSON log lines */
	e->capture_ns = t0;
	e->state = REPL_EPOCH_CAPTURED;
	if (repl_event_log_on())
		repl_event_log("capture %llu", (unsigned long long)e->epoch);
	if (MUTANT(release_early))   /* make check-mutants: output leaves before ACK */
		repl_release_epoch(q->vm, e->epoch, e->out_mark);
	if (MUTANT(net_release_early))   /* make check-mutants: frames leave before ACK */
		repl_vm_net_release(q->vm, e->epoch, e->net_mark);
	count_pause(q, pause_ns);
	hot_budget(q);
	return 0;
}

/* With the guest running: grow the capture buffer when this epoch came near
 * its size, so that no later pause has to. */
static void grow_capture(struct repl_epochs *q)
{
	uint64_t ram_pages = q->vm->m->ram_pages;
	size_t want = q->cap.cap_pages * 2 < ram_pages ? q->cap.cap_pages * 2 : ram_pages;

	if (q->cap.npages * 4 > q->cap.cap_pages * 3 && q->cap.cap_pages < ram_pages &&
	    ckpt_reserve(&q->cap, want) < 0)
		log_warn(TAG, "cannot grow the epoch buffer beyond %zu pages", q->cap.cap_pages);
}

/* The epoch's console output, in sections of at most 1 MiB (one, maybe
 * empty, when there is little). */
static int pack_output(struct repl_epochs *q, struct repl_epoch *e)
{
	struct proto_buf out;
	int r;

	proto_buf_init(&out);
	r = repl_vm_output_copy(q->vm, q->out_mark_prev, e->out_mark, &out);
	for (size_t off = 0; r == 0 && (off < out.len || off == 0); off += CONSOLE_SECTION_MAX) {
		size_t n = out.len - off < CONSOLE_SECTION_MAX ? out.len - off : CONSOLE_SECTION_MAX;

		r = repl_section_pack(&e->buf, PROTO_SECTION_CONSOLE, out.data + off, n);
		if (out.len == 0)
			break;
	}
	proto_buf_fini(&out);
	return r;
}

/* Page batches of c into out; *crc accumulates the epoch digest over every
 * gfn and page. */
static int pack_pages(struct repl_epochs *q, const struct ckpt *c, struct proto_buf *out,
		      uint32_t *crc)
{
	const void *ptrs[BATCH_PAGES];
	int r;

	for (size_t i = 0; i < c->npages; i += BATCH_PAGES) {
		size_t n = c->npages - i < BATCH_PAGES ? c->npages - i : BATCH_PAGES;

		for (size_t k = 0; k < n; k++) {
			ptrs[k] = c->pages + (i + k) * CKPT_PAGE_SIZE;
			*crc = proto_digest_page(*crc, c->gfns[i + k], ptrs[k]);
		}
		if ((r = proto_pages_encode(q->enc, c->gfns + i, ptrs, n, out, &q->st.pages)) < 0)
			return r;
	}
	return 0;
}

/* The pages the pause took again after the open epoch's pre-copy sent
 * them: not as XOR deltas (the secondary's base is its last complete
 * checkpoint, not the first copy), and counted for the adaptation. */
static void forget_resent(struct repl_epochs *q)
{
	struct machine *m = q->vm->m;
	uint64_t resent = 0;

	for (size_t w = 0; w < q->cap.harvest_words && w < q->pre.harvest_words; w++) {
		uint64_t both = q->cap.harvest[w] & q->pre.harvest[w];

		while (both) {
			uint64_t page = w * 64 + (uint64_t)__builtin_ctzll(both);

			both &= both - 1;
			/* make check-mutants: precopy_keep_delta, delta against the first copy */
			if (!MUTANT(precopy_keep_delta))
				proto_page_enc_forget(q->enc, machine_page_gfn(m, page));
			resent++;
		}
	}
	if (q->pre_retry)
		return;              /* counted at the first try */
	q->st.pre_resent += resent;
	q->pre_waste = 0.7 * q->pre_waste + 0.3 * (q->pre.npages ? (double)resent / q->pre.npages : 0);
	if (q->pre_mode < 0 && q->pre_waste > PRECOPY_WASTE_MAX) {
		log_debug(TAG, "pre-copy: %.0f %% of its pages sent again: resting %d epochs",
			  q->pre_waste * 100, PRECOPY_REST);
		q->pre_skip = PRECOPY_REST;
		q->pre_waste = 0;
	}
}

bool repl_epoch_precopy_wanted(const struct repl_epochs *q)
{
	if (q->pre_mode >= 0)
		return q->pre_mode;
	return !q->pre_skip && q->st.last_dirty_pages >= PRECOPY_MIN_PAGES;
}

/* A pre-copy that did not reach the link: its pages are dirty again and
 * the encoder forgets what it cached (the secondary never got them). */
static void undo_pre(struct repl_epochs *q, struct repl_epoch *e)
{
	ckpt_requeue(q->vm->m, &q->pre);
	proto_page_enc_reset(q->enc);
	proto_buf_reset(&e->pre);
}

/* A pre-copy is optional: a local failure (memory, the dirty log) only
 * rests it; the pause takes everything, and fails loudly if it must. */
static int pre_rest(struct repl_epochs *q, const char *what, int err)
{
	log_warn(TAG, "pre-copy of epoch %llu: %s failed (%s): none for %d epochs",
		 (unsigned long long)(q->epoch + 1), what, strerror(-err), PRECOPY_REST);
	q->pre_skip = PRECOPY_REST;
	return 0;
}

int repl_epoch_precopy(struct repl_epochs *q, struct repl_fault *f)
{
	Understudy__EpochBegin eb = UNDERSTUDY__EPOCH_BEGIN__INIT;
	struct repl_epoch *e;
	uint32_t crc = 0;
	int r;

	if (q->open || !(e = slot_claim(q)) ||
	    (q->link->conn && net_queued_bytes(q->link->conn) > LINK_QUEUE_MAX))
		return 0;
	if ((r = ckpt_precopy(q->vm->m, &q->pre)) < 0)
		return pre_rest(q, "harvest and copy", r);    /* its pages are dirty again */
	if (!q->pre.npages)
		return 0;
	proto_buf_reset(&e->pre);
	eb.epoch = q->epoch + 1;
	if ((r = proto_msg_pack(&e->pre, PROTO_T_EPOCH_BEGIN, &eb.base)) < 0 ||
	    (r = pack_pages(q, &q->pre, &e->pre, &crc)) < 0) {
		undo_pre(q, e);
		return pre_rest(q, "encoding", r);
	}
	if ((r = repl_link_send_buf(q->link, e->pre.data, e->pre.len, e)) < 0) {
		repl_fault_set(f, repl_fault_send(r), r, "sending the pre-copy of epoch %llu "
			       "failed: %s", (unsigned long long)eb.epoch, strerror(-r));
		undo_pre(q, e);
		return r;
	}
	e->on_wire++;
	e->epoch = eb.epoch;
	e->state = REPL_EPOCH_PRECOPY;
	q->open = e;
	q->pre_retry = false;
	q->pre_crc = crc;
	if (!q->st.pre_passes++)
		log_info(TAG, "pre-copy: epoch %llu opened with %zu pages while the guest ran",
			 (unsigned long long)eb.epoch, q->pre.npages);
	q->st.pre_pages += q->pre.npages;
	return 1;
}

/* Test mode (UNDERSTUDY_VERIFY): the "verify" section holding the digest of
 * RAM and the complete machine state read from KVM in the pause
 * (checkpoint/digest.c); the secondary reads its standby back after
 * applying the epoch and compares (secondary/staging.c). Costs a full-RAM
 * CRC in every pause: tests run failover trials with and without. */
static int verify_pack(struct proto_buf *b, const struct proto_verify *d)
{
	uint8_t buf[PROTO_VERIFY_MAX_BYTES];
	size_t n = proto_verify_encode(d, buf, sizeof(buf));

	if (!n)
		return -EINVAL;
	return repl_section_pack(b, PROTO_SECTION_VERIFY, buf, n);
}

/* CAPTURED -> ENCODED: EpochBegin, console output, the primary's release
 * mark, page batches, state, (test mode: RAM digest), EpochEnd with the page
 * count and digest that the secondary checks after decoding. */
static int encode(struct repl_epochs *q, struct repl_epoch *e)
{
	Understudy__EpochBegin eb = UNDERSTUDY__EPOCH_BEGIN__INIT;
	Understudy__EpochEnd ee = UNDERSTUDY__EPOCH_END__INIT;
	uint8_t released[PROTO_META_U64_BYTES];
	uint8_t digest[PROTO_META_U32_BYTES], disk_digest[PROTO_META_U32_BYTES];
	uint32_t crc = q->open ? q->pre_crc : 0, disk_crc = 0;
	int r;

	proto_buf_reset(&e->buf);
	eb.epoch = e->epoch;
	proto_released_encode(q->vm->released, released);
	if (q->open)
		forget_resent(q);
	if ((!q->open && (r = proto_msg_pack(&e->buf, PROTO_T_EPOCH_BEGIN, &eb.base)) < 0) ||
	    (r = pack_output(q, e)) < 0 ||
	    (r = repl_section_pack(&e->buf, PROTO_SECTION_RELEASED, released, sizeof(released))) < 0 ||
	    (repl_disk_cap_on(&q->disk) && (r = repl_disk_pack(&q->disk, &e->buf, &disk_crc)) < 0) ||
	    (r = pack_pages(q, &q->cap, &e->buf, &crc)) < 0 ||
	    (r = repl_section_pack(&e->buf, PROTO_SECTION_STATE, q->cap.state, q->cap.state_len)) < 0)
		return r;
	if (q->verify && (r = verify_pack(&e->buf, &q->verify_digest)) < 0)
		return r;
	ee.epoch = e->epoch;
	ee.npages = q->cap.npages + (q->open ? q->pre.npages : 0);
	ee.reboot = q->reboot;
	proto_digest_encode(crc, digest);
	ee.digest.data = digest;
	ee.digest.len = sizeof(digest);
	if (q->disk.blk.n) {
		ee.disk_blocks = q->disk.blk.n;
		proto_digest_encode(disk_crc, disk_digest);
		ee.disk_digest.data = disk_digest;
		ee.disk_digest.len = sizeof(disk_digest);
	}
	if ((r = proto_msg_pack(&e->buf, PROTO_T_EPOCH_END, &ee.base)) < 0)
		return r;
	e->state = REPL_EPOCH_ENCODED;
	return 0;
}

/* ENCODED -> SENDING: the output up to the mark now travels with it. */
static int send_epoch(struct repl_epochs *q, struct repl_epoch *e)
{
	int r = repl_link_send_buf(q->link, e->buf.data, e->buf.len, e);

	if (r < 0)
		return r;
	e->state = REPL_EPOCH_SENDING;
	e->bytes = e->buf.len;
	e->on_wire++;
	q->out_mark_prev = e->out_mark;
	q->open = NULL;              /* the epoch is whole on the link */
	if (q->reboot) {
		log_info(TAG, "epoch %llu carries the guest's reboot: %zu pages written since and the "
			 "power-on state (the secondary clears the rest)", (unsigned long long)e->epoch,
			 q->cap.npages);
		q->reboot = false;
	}
	if (q->pre_skip)
		q->pre_skip--;
	return 0;
}

/* A captured epoch that cannot reach the link: its pages are dirty again,
 * the encoder forgets what it cached (the secondary never saw those pages),
 * and its number and output go with the next epoch. */
static void undo(struct repl_epochs *q, struct repl_epoch *e)
{
	ckpt_requeue(q->vm->m, &q->cap);
	repl_disk_requeue(&q->disk, q->vm->m);
	proto_page_enc_reset(q->enc);
	q->epoch--;
	if (q->drill.digest_ready) {     /* the retry's capture digests again */
		q->drill.digest_ready = false;
		q->drill.want_digest = true;
	}
	if (q->open == e) {
		e->state = REPL_EPOCH_PRECOPY;   /* its start is on the link: the next capture ends it */
		q->pre_retry = true;
	} else {
		settle(e, true);
	}
}

int repl_epoch_run(struct repl_epochs *q, bool resume, struct repl_fault *f)
{
	struct repl_epoch *e = q->open ? q->open : slot_claim(q);
	int r;

	/* A migration's bandwidth limit holds epochs back like a full link;
	 * not the final one (resume false): the guest is paused for it. */
	if (!e || (q->link->conn && net_queued_bytes(q->link->conn) > LINK_QUEUE_MAX) ||
	    (resume && q->rate && repl_rate_wait_ns(q->rate))) {
		q->st.stretched++;    /* link slower than the guest: the epoch stretches */
		return 0;
	}
	if ((r = capture(q, e, resume)) < 0) {
		repl_fault_set(f, repl_fault_local(r), r, "capture of epoch %llu failed: %s",
			       (unsigned long long)(q->epoch + 1), strerror(-r));
		return r;
	}
	/* Everything below runs while the guest runs. */
	grow_capture(q);
	if (repl_disk_cap_on(&q->disk))
		repl_disk_grow(&q->disk);
	if ((r = encode(q, e)) < 0) {
		repl_fault_set(f, repl_fault_local(r), r, "encoding epoch %llu failed: %s",
			       (unsigned long long)e->epoch, strerror(-r));
		goto err_undo;
	}
	if ((r = send_epoch(q, e)) < 0) {
		repl_fault_set(f, repl_fault_send(r), r, "sending epoch %llu failed: %s",
			       (unsigned long long)e->epoch, strerror(-r));
		goto err_undo;
	}
	if (q->rate)
		repl_rate_charge(q->rate, e->buf.len);
	if (q->drill.digest_ready)
		repl_drill_pri_sent(q);
	return 1;

err_undo:
	undo(q, e);
	return r;
}

/* SENDING -> SENT: the link no longer reads the buffer. */
void repl_epoch_sent(struct repl_epochs *q, void *cookie)
{
	struct repl_epoch *e = cookie;

	(void)q;
	if (e->on_wire)
		e->on_wire--;
	if (e->state == REPL_EPOCH_SENDING && !e->on_wire)
		e->state = REPL_EPOCH_SENT;
	settle(e, false);
}

/* ACKED -> RELEASED: the epoch's output leaves (output commit). */
static void commit(struct repl_epochs *q, struct repl_epoch *e)
{
	if (!q->hold_output) {
		repl_release_epoch(q->vm, e->epoch, e->out_mark);
		repl_vm_net_release(q->vm, e->epoch, e->net_mark);
	}
	e->state = REPL_EPOCH_RELEASED;
	settle(e, false);
}

/* SENDING or SENT -> ACKED for every epoch up to the acknowledged one. */
int repl_epoch_ack(struct repl_epochs *q, uint64_t epoch)
{
	if (epoch <= q->acked || epoch > q->epoch) {
		log_warn(TAG, "ignoring ACK(%llu) (acked %llu, captured %llu)",
			 (unsigned long long)epoch, (unsigned long long)q->acked,
			 (unsigned long long)q->epoch);
		return 0;
	}
	if (repl_event_log_on())
		repl_event_log("ack %llu", (unsigned long long)epoch);
	for (int i = 0; i < REPL_EPOCH_SLOTS; i++) {
		struct repl_epoch *e = &q->slot[i];

		if ((e->state == REPL_EPOCH_SENDING || e->state == REPL_EPOCH_SENT) &&
		    e->epoch <= epoch) {
			e->state = REPL_EPOCH_ACKED;
			if (e->epoch == epoch) {
				q->st.lag_ns = now_ns() - e->capture_ns;
				q->st.lag_bytes = e->bytes;
				if (q->drill.id)      /* only while a drill runs */
					repl_drill_pri_acked(q);
			}
			repl_hist_add(&q->st.commit_h, now_ns() - e->capture_ns);
			commit(q, e);
		}
	}
	q->acked = epoch;
	q->st.acked = epoch;
	return 1;
}
