/* The secondary: keeps a hot standby (memory slots registered, vCPUs created,
 * not running) at the last complete checkpoint, and takes over when the
 * primary is silent for timeout_ms.
 *
 * Epoch N arrives as EpochBegin, sections, page batches, EpochEnd. Pages go
 * to a staging checkpoint, never to the standby; only at EpochEnd, with the
 * page count and crc32c verified and the whole checkpoint validated, is it
 * applied, and then ACK(N) is sent. A torn or bad transfer leaves the standby
 * at the previous complete checkpoint.
 *
 * Guest output of acknowledged epochs that the primary may not have released
 * yet is kept; on takeover it is written to the console first, so a reply
 * whose ACK raced with the primary's death still reaches the client (which
 * may then see a line twice, never a line it could not have seen). */
#include "replication/replication.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint.h"
#include "net/control.h"

#define TAG "secondary"
#define HELD_OUTPUT_MAX (16u << 20)

enum sstate { S_WAITING, S_HELLO, S_STANDBY, S_ACTIVE, S_DONE };

static const char *const sstate_names[] = { "waiting", "hello", "standby", "active", "done" };

struct repl_secondary {
	const struct repl_secondary_opts *o;
	struct ev_loop *loop;
	struct net_listener *lis;
	struct repl_link link;
	enum sstate state;
	bool got_hello;
	bool refusing;                   /* an Error is on its way, then we close */
	uint64_t hello_digest;           /* the primary's machine configuration digest */
	struct machine_config cfg;
	struct repl_vm *vm;
	uint64_t max_gfn;

	bool have_ckpt;
	uint64_t applied;          /* last applied epoch */
	bool in_epoch;
	uint64_t cur;
	struct ckpt stage;
	uint32_t crc;
	bool stage_state;
	bool stage_verify;
	uint32_t verify_crc;
	uint64_t verify_ok, verify_failed;
	struct proto_buf stage_out;      /* console output of the epoch in flight */
	uint64_t stage_released;
	struct proto_buf held_out;       /* output of applied epochs, maybe unreleased */
	uint64_t held_from;              /* absolute offset of held_out[0] */

	uint64_t lost_ns;                /* when the primary went silent (for logs) */
	int exit_status;
	ev_timer watch_w, hb_w;
	ev_signal sigint_w, sigterm_w;
	struct control *ctl;
	struct repl_stats st;
};

static void drop_standby(struct repl_secondary *s)
{
	repl_vm_free(s->vm);
	s->vm = NULL;
	s->have_ckpt = s->in_epoch = s->got_hello = false;
	s->applied = 0;
	proto_buf_reset(&s->held_out);
	s->held_from = 0;
}

/* The connection ends. With a complete checkpoint the watch timer takes over
 * after the silence; a bad peer (proto error) loses the standby instead, so
 * a confused primary never causes a takeover while it may still run. */
static void end_link(struct repl_secondary *s, bool bad_peer)
{
	repl_link_close(&s->link);
	proto_dec_fini(&s->link.dec);
	proto_dec_init(&s->link.dec, PROTO_MAX_PAYLOAD_DEFAULT);
	s->in_epoch = false;
	if (s->state == S_ACTIVE || s->state == S_DONE)
		return;
	if (bad_peer || !s->have_ckpt) {
		if (s->vm)
			log_warn(TAG, "standby dropped: %s", bad_peer ? "the primary sent bad data"
					 : "the primary went away before the first checkpoint");
		drop_standby(s);
		s->state = S_WAITING;
		return;
	}
	log_warn(TAG, "primary connection lost; standby holds epoch %llu",
		 (unsigned long long)s->applied);
}

/* ---- takeover ----------------------------------------------------------------- */

static void on_vm_stopped(void *ctx, int status)
{
	struct repl_secondary *s = ctx;

	log_info(TAG, "guest stopped (status %d)", status);
	s->exit_status = status < 0 ? 1 : status;
	s->state = S_DONE;
	ev_break(s->loop, EVBREAK_ALL);
}

static void take_over(struct repl_secondary *s)
{
	uint64_t t0 = now_ns();
	uint64_t silent_ms = (t0 - s->link.last_rx_ns) / 1000000;
	int r;

	repl_link_close(&s->link);
	if (s->lis) {
		net_listener_close(s->lis);
		s->lis = NULL;
	}
	r = repl_vm_open_console(s->vm, s->o->console);
	if (r < 0) {
		log_error(TAG, "takeover failed: console %s: %s", s->o->console, strerror(-r));
		s->exit_status = 1;
		s->state = S_DONE;
		ev_break(s->loop, EVBREAK_ALL);
		return;
	}
	if (s->held_out.len)
		console_write(s->vm->con, s->held_out.data, s->held_out.len);
	s->vm->on_stopped = on_vm_stopped;
	s->vm->cb_ctx = s;
	repl_vm_set_gated(s->vm, false);
	s->state = S_ACTIVE;
	machine_resume(s->vm->m);
	log_info(TAG, "TOOK OVER: primary silent for %llu ms; guest resumed from epoch %llu in "
		  "%.3f ms; %zu bytes of acknowledged output replayed", (unsigned long long)silent_ms,
		  (unsigned long long)s->applied, (now_ns() - t0) / 1e6, s->held_out.len);
	if (s->verify_ok || s->verify_failed)
		log_info(TAG, "test mode: %llu epochs verified equal to the primary, %llu differed",
			 (unsigned long long)s->verify_ok, (unsigned long long)s->verify_failed);
}

static void on_watch(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_secondary *s = w->data;

	(void)loop;
	(void)revents;
	if (s->state != S_STANDBY || !s->have_ckpt)
		return;
	if (now_ns() - s->link.last_rx_ns > (uint64_t)s->o->timeout_ms * 1000000ull)
		take_over(s);
}

static void on_hb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_secondary *s = w->data;

	(void)loop;
	(void)revents;
	if (s->link.conn && s->state == S_STANDBY &&
	    repl_send_epoch_msg(&s->link, PROTO_T_HEARTBEAT, s->applied) < 0)
		log_warn(TAG, "heartbeat could not be sent");
}

/* ---- receiving checkpoints -------------------------------------------------------- */

static const void *page_base(void *ctx, uint64_t gfn)
{
	struct repl_secondary *s = ctx;
	int64_t pg = machine_gfn_page(s->vm->m, gfn);

	return pg < 0 ? NULL : machine_page_hva(s->vm->m, (uint64_t)pg);
}

/* Initial sync: no complete checkpoint exists yet, pages go straight in. */
static int page_direct(void *ctx, uint64_t gfn, const void *data)
{
	struct repl_secondary *s = ctx;
	int64_t pg = machine_gfn_page(s->vm->m, gfn);

	if (pg < 0)
		return -EBADMSG;
	memcpy(machine_page_hva(s->vm->m, (uint64_t)pg), data, KVM_PAGE_SIZE);
	return 0;
}

static int page_staged(void *ctx, uint64_t gfn, const void *data)
{
	struct repl_secondary *s = ctx;

	/* An epoch names every page once: more pages than RAM is a bad peer. */
	if (s->stage.npages >= s->vm->m->ram_pages)
		return -EBADMSG;
	s->crc = proto_crc32c(s->crc, &gfn, sizeof(gfn));
	s->crc = proto_crc32c(s->crc, data, KVM_PAGE_SIZE);
	return ckpt_add_page(&s->stage, gfn, data);
}

static int build_standby(struct repl_secondary *s, const Understudy__Section *sec)
{
	const struct machine_config *pin = &s->o->pin;
	char err[256];
	int r;

	if (strcmp(sec->name, "machine-config") || repl_config_decode(sec->data.data, sec->data.len,
								     &s->cfg) < 0) {
		log_error(TAG, "refusing primary: bad machine configuration section");
		return -EBADMSG;
	}
	if (machine_config_digest(&s->cfg) != s->hello_digest) {
		log_error(TAG, "refusing primary: its configuration does not match its digest");
		return -EBADMSG;
	}
	if (pin->guest[0] && (pin->mem_bytes != s->cfg.mem_bytes || pin->ncpus != s->cfg.ncpus ||
			      strcmp(pin->guest, s->cfg.guest))) {
		snprintf(err, sizeof(err), "machine configuration differs: primary has %s with %llu MiB "
			 "and %d vCPUs, this secondary is for %s with %llu MiB and %d vCPUs",
			 s->cfg.guest, (unsigned long long)(s->cfg.mem_bytes >> 20), s->cfg.ncpus,
			 pin->guest, (unsigned long long)(pin->mem_bytes >> 20), pin->ncpus);
		log_error(TAG, "refusing primary: %s", err);
		if (repl_send_error(&s->link, -EINVAL, err) < 0)
			log_warn(TAG, "could not tell the primary why");
		return -ECONNREFUSED;
	}
	r = repl_vm_new(s->loop, &s->cfg, NULL, &s->vm);
	if (r < 0)
		return r;
	repl_vm_set_gated(s->vm, true);
	s->max_gfn = machine_page_gfn(s->vm->m, s->vm->m->ram_pages - 1) + 1;
	s->state = S_STANDBY;
	log_info(TAG, "standby built: guest %s, %llu MiB, %d vCPU(s); syncing", s->cfg.guest,
		 (unsigned long long)(s->cfg.mem_bytes >> 20), s->cfg.ncpus);
	return repl_send_hello(&s->link, UNDERSTUDY__ROLE__ROLE_SECONDARY, &s->cfg);
}

static int on_section(struct repl_secondary *s, const Understudy__Section *sec)
{
	if (!s->in_epoch)
		return -EPROTO;
	if (!strcmp(sec->name, "console")) {
		if (s->stage_out.len + sec->data.len > HELD_OUTPUT_MAX)
			return -EMSGSIZE;
		return proto_buf_append(&s->stage_out, sec->data.data, sec->data.len);
	}
	if (!strcmp(sec->name, "released")) {
		if (sec->data.len != sizeof(uint64_t))
			return -EBADMSG;
		memcpy(&s->stage_released, sec->data.data, sizeof(uint64_t));
		return 0;
	}
	if (!strcmp(sec->name, "verify")) {
		if (sec->data.len != sizeof(uint32_t))
			return -EBADMSG;
		memcpy(&s->verify_crc, sec->data.data, sizeof(uint32_t));
		s->stage_verify = true;
		return 0;
	}
	if (!strcmp(sec->name, "state")) {
		s->stage_state = true;
		return ckpt_set_state(&s->stage, sec->data.data, sec->data.len);
	}
	return -EBADMSG;
}

/* Keeps the epoch's output with the rest not known to be released. */
static void drop_held(struct repl_secondary *s, uint64_t n)
{
	if (n > s->held_out.len)
		n = s->held_out.len;
	memmove(s->held_out.data, s->held_out.data + n, s->held_out.len - n);
	s->held_out.len -= n;
	s->held_from += n;
}

static int hold_output(struct repl_secondary *s)
{
	int r = proto_buf_append(&s->held_out, s->stage_out.data, s->stage_out.len);

	if (r < 0)
		return r;
	log_debug(TAG, "epoch %llu: output +%zu, primary released up to %llu",
		  (unsigned long long)s->cur, s->stage_out.len,
		  (unsigned long long)s->stage_released);
	if (s->stage_released > s->held_from)
		drop_held(s, s->stage_released - s->held_from);
	if (s->held_out.len > HELD_OUTPUT_MAX) {
		/* The primary says nothing of releases: keep the newest bytes. */
		log_warn(TAG, "more than %u bytes of unreleased output held: oldest %zu dropped",
			 HELD_OUTPUT_MAX, s->held_out.len - HELD_OUTPUT_MAX);
		drop_held(s, s->held_out.len - HELD_OUTPUT_MAX);
	}
	return 0;
}

/* Test mode: the standby's memory and vCPU registers equal the primary's at
 * this acknowledged epoch. */
static void verify_applied(struct repl_secondary *s)
{
	struct machine *m = s->vm->m;
	struct kvm_vcpu_state *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));
	uint32_t crc = proto_crc32c(0, m->ram, m->cfg.mem_bytes);
	bool regs_ok = a && b;

	for (int i = 0; regs_ok && i < m->ncpus; i++)
		regs_ok = ckpt_get_vcpu_state(&s->stage, i, a) == 0 &&
			  machine_get_vcpu_state(m, i, b) == 0 &&
			  !memcmp(&a->regs, &b->regs, sizeof(a->regs)) &&
			  !memcmp(&a->sregs, &b->sregs, sizeof(a->sregs));
	free(a);
	free(b);
	if (crc == s->verify_crc && regs_ok) {
		s->verify_ok++;
		return;
	}
	s->verify_failed++;
	log_error(TAG, "VERIFY FAILED at epoch %llu: memory %s, vCPU registers %s",
		  (unsigned long long)s->cur, crc == s->verify_crc ? "equal" : "DIFFER",
		  regs_ok ? "equal" : "DIFFER");
}

static int end_epoch(struct repl_secondary *s, const Understudy__EpochEnd *ee)
{
	uint32_t digest;
	uint64_t t0 = now_ns();
	int r;

	if (!s->in_epoch || ee->epoch != s->cur || ee->npages != s->stage.npages ||
	    ee->digest.len != sizeof(digest) || !s->stage_state) {
		log_error(TAG, "epoch %llu incomplete: %llu of %llu pages%s",
			  (unsigned long long)ee->epoch, (unsigned long long)s->stage.npages,
			  (unsigned long long)ee->npages, s->stage_state ? "" : ", no state");
		return -EBADMSG;
	}
	memcpy(&digest, ee->digest.data, sizeof(digest));
	if (digest != s->crc) {
		log_error(TAG, "epoch %llu: page digest mismatch", (unsigned long long)s->cur);
		return -EBADMSG;
	}
	r = ckpt_apply(s->vm->m, &s->stage);
	if (r < 0) {
		log_error(TAG, "epoch %llu cannot be applied: %s", (unsigned long long)s->cur,
			  strerror(-r));
		return r;
	}
	if (s->stage_verify)
		verify_applied(s);
	if ((r = hold_output(s)) < 0)
		return r;
	s->applied = s->cur;
	s->have_ckpt = true;
	s->in_epoch = false;
	repl_stats_add_pause(&s->st, now_ns() - t0);
	s->st.epochs++;
	s->st.last_dirty_pages = s->stage.npages;
	s->st.dirty_pages_total += s->stage.npages;
	if (s->applied == 1)
		log_info(TAG, "first checkpoint applied: the VM is protected");
	return repl_send_epoch_msg(&s->link, PROTO_T_ACK, s->applied);
}

static int on_message(struct repl_secondary *s, uint16_t type, ProtobufCMessage *msg)
{
	char err[256];
	int r;

	if (type == PROTO_T_HELLO) {
		if (s->got_hello)
			return -EPROTO;
		r = repl_check_hello((Understudy__Hello *)msg, UNDERSTUDY__ROLE__ROLE_PRIMARY, err,
				     sizeof(err));
		if (r < 0) {
			log_error(TAG, "refusing primary: %s", err);
			if (repl_send_error(&s->link, r, err) < 0)
				log_warn(TAG, "could not tell the primary why");
			return -ECONNREFUSED;
		}
		s->got_hello = true;
		s->hello_digest = ((Understudy__Hello *)msg)->config_digest64;
		return 0;
	}
	if (!s->got_hello)
		return -EPROTO;
	if (!s->vm)
		return type == PROTO_T_SECTION ? build_standby(s, (Understudy__Section *)msg) : -EPROTO;
	switch (type) {
	case PROTO_T_EPOCH_BEGIN:
		if (s->in_epoch || ((Understudy__EpochBegin *)msg)->epoch != s->applied + 1)
			return -EPROTO;
		s->in_epoch = true;
		s->cur = s->applied + 1;
		log_debug(TAG, "epoch %llu: begins at %llu ns (monotonic)",
			  (unsigned long long)s->cur, (unsigned long long)now_ns());
		s->crc = 0;
		s->stage_state = s->stage_verify = false;
		s->stage_released = 0;
		proto_buf_reset(&s->stage_out);
		ckpt_reset(&s->stage);
		s->stage.config_digest = s->hello_digest;
		return 0;
	case PROTO_T_SECTION:
		return on_section(s, (Understudy__Section *)msg);
	case PROTO_T_EPOCH_END:
		return end_epoch(s, (Understudy__EpochEnd *)msg);
	case PROTO_T_HEARTBEAT:
		return 0;
	case PROTO_T_FENCE:
		log_info(TAG, "primary stops (%s): no takeover", ((Understudy__Fence *)msg)->reason);
		s->state = S_DONE;
		ev_break(s->loop, EVBREAK_ALL);
		return 0;
	default:
		return -EPROTO;
	}
}

static int on_frame(void *ctx, const struct proto_frame *f)
{
	struct repl_secondary *s = ctx;
	struct proto_page_sink sink = { .base = page_base };
	ProtobufCMessage *msg;
	int r;

	if (s->state == S_DONE)
		return -ECANCELED;
	if (f->type == PROTO_T_PAGES) {
		if (!s->vm)
			return -EPROTO;
		if (s->in_epoch)
			sink.page = page_staged;
		else if (!s->have_ckpt)
			sink.page = page_direct;
		else
			return -EPROTO;   /* pages outside an epoch after the first checkpoint */
		return proto_pages_decode(f->payload, f->len, s->max_gfn, &sink, s, NULL);
	}
	r = proto_msg_unpack(f->type, f->payload, f->len, &msg);
	if (r < 0)
		return r;
	r = on_message(s, f->type, msg);
	proto_msg_free(msg);
	return r;
}

/* ---- connection ------------------------------------------------------------------ */

static void on_recv(struct net_conn *c, const void *data, size_t len, void *ctx)
{
	struct repl_secondary *s = ctx;
	int r;

	(void)c;
	if (s->refusing)
		return;
	r = repl_link_feed(&s->link, data, len, on_frame, s);
	if (r == -ECONNREFUSED && s->link.conn) {
		s->refusing = true;      /* the Error leaves, then closed() follows */
		net_close_flush(s->link.conn);
		return;
	}
	if (r < 0 && r != -ECANCELED && s->state != S_DONE) {
		if (r != -ECONNREFUSED)
			log_error(TAG, "bad data from the primary (%s): closing, nothing of it applied",
				  proto_strerror(r));
		end_link(s, true);
	}
}

static void on_sent(struct net_conn *c, void *cookie, int status, void *ctx)
{
	(void)c;
	(void)status;
	(void)ctx;
	repl_link_sent_owned(cookie);
}

static void on_closed(struct net_conn *c, int reason, void *ctx)
{
	struct repl_secondary *s = ctx;

	(void)c;
	repl_link_closed(&s->link);
	log_info(TAG, "primary connection closed (%s)", reason ? strerror(-reason) : "EOF");
	end_link(s, s->refusing);
	s->refusing = false;
}

static const struct net_conn_ops conn_ops = {
	.recv = on_recv, .sent = on_sent, .closed = on_closed,
};

static void on_accept(struct net_listener *l, struct net_conn *c, void *ctx)
{
	struct repl_secondary *s = ctx;

	(void)l;
	if (s->link.conn || s->state != S_WAITING) {
		log_warn(TAG, "refusing %s: already serving a primary", net_peer_name(c));
		net_close(c);
		return;
	}
	log_info(TAG, "primary %s connected", net_peer_name(c));
	s->link.conn = c;
	s->refusing = false;
	s->link.last_rx_ns = now_ns();
	s->state = S_HELLO;
	net_conn_set_ops(c, &conn_ops, s);
}

static int status_format(void *ctx, const char *req, char *out, size_t len)
{
	struct repl_secondary *s = ctx;
	uint64_t p50, p99;
	bool json = strstr(req, "json") != NULL;
	double hb_ms = (now_ns() - s->link.last_rx_ns) / 1e6;

	repl_stats_pause_pct(&s->st, &p50, &p99);
	return snprintf(out, len, json ?
			"{\"role\":\"secondary\",\"state\":\"%s\",\"epoch\":%llu,\"acked\":%llu,"
			"\"apply_p50_us\":%.1f,\"apply_p99_us\":%.1f,\"dirty_pages_last\":%llu,"
			"\"bytes_received\":%llu,\"since_heartbeat_ms\":%.1f,\"verify_ok\":%llu,"
			"\"verify_failed\":%llu}\n" :
			"role secondary\nstate %s\nepoch %llu\nacked %llu\napply p50 %.1f us\n"
			"apply p99 %.1f us\ndirty pages last %llu\nbytes received %llu\n"
			"since heartbeat %.1f ms\nverified epochs %llu\nverify failures %llu\n",
			sstate_names[s->state], (unsigned long long)s->applied,
			(unsigned long long)s->applied, p50 / 1e3, p99 / 1e3,
			(unsigned long long)s->st.last_dirty_pages,
			(unsigned long long)s->link.bytes_rcvd, hb_ms,
			(unsigned long long)s->verify_ok, (unsigned long long)s->verify_failed);
}

static char *status_text(void *ctx, const char *req)
{
	return repl_status_reply(status_format, ctx, req);
}

static void on_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
	struct repl_secondary *s = w->data;

	(void)revents;
	log_info(TAG, "signal %d: stopping", w->signum);
	s->state = S_DONE;
	ev_break(loop, EVBREAK_ALL);
}

int repl_secondary_run(const struct repl_secondary_opts *o)
{
	struct repl_secondary *s = calloc(1, sizeof(*s));
	double hb = o->timeout_ms / 4e3 > 0.005 ? o->timeout_ms / 4e3 : 0.005;
	int r, status = 1;

	if (!s)
		return 1;
	s->o = o;
	s->loop = ev_default_loop(0);
	repl_link_init(&s->link, PROTO_MAX_PAYLOAD_DEFAULT);
	ckpt_init(&s->stage);
	proto_buf_init(&s->stage_out);
	proto_buf_init(&s->held_out);
	ev_timer_init(&s->watch_w, on_watch, 0.005, 0.005);
	ev_timer_init(&s->hb_w, on_hb, hb, hb);
	/* Silence is judged after pending reads are handled (see primary.c). */
	ev_set_priority(&s->watch_w, EV_MINPRI);
	ev_signal_init(&s->sigint_w, on_signal, SIGINT);
	ev_signal_init(&s->sigterm_w, on_signal, SIGTERM);
	s->watch_w.data = s->hb_w.data = s->sigint_w.data = s->sigterm_w.data = s;
	r = net_listen(s->loop, &o->net, o->listen, on_accept, s, &s->lis);
	if (r < 0) {
		log_error(TAG, "cannot listen on %s: %s", o->listen, strerror(-r));
		goto out;
	}
	if (o->control && control_open(s->loop, o->control, status_text, s, &s->ctl) < 0)
		goto out;
	log_info(TAG, "waiting for a primary on %s (takeover after %u ms of silence)", o->listen,
		 o->timeout_ms);
	ev_timer_start(s->loop, &s->watch_w);
	ev_timer_start(s->loop, &s->hb_w);
	ev_signal_start(s->loop, &s->sigint_w);
	ev_signal_start(s->loop, &s->sigterm_w);
	ev_run(s->loop, 0);
	status = s->exit_status;
out:
	ev_timer_stop(s->loop, &s->watch_w);
	ev_timer_stop(s->loop, &s->hb_w);
	ev_signal_stop(s->loop, &s->sigint_w);
	ev_signal_stop(s->loop, &s->sigterm_w);
	control_free(s->ctl);
	if (s->lis)
		net_listener_close(s->lis);
	repl_link_fini(&s->link);
	if (s->vm) {
		machine_stop(s->vm->m, 0);
		machine_pause(s->vm->m);
	}
	repl_vm_free(s->vm);
	ckpt_fini(&s->stage);
	proto_buf_fini(&s->stage_out);
	proto_buf_fini(&s->held_out);
	free(s);
	return status;
}
