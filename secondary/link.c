/* The secondary's link to its primary: connections before their Hello,
 * the primary's connection (what its bytes come to, how it ends) and the
 * watch for its silence. The standby takes over when the primary is silent
 * for timeout_ms: neither its stream bytes nor its beats (the UDP side
 * channel of replication.h, stamped by a thread of their own as they
 * arrive) were heard, nor are any waiting unread. What the frames say is
 * receive.c's; the agent's life and role changes, standby.c's.
 *
 * Policy per kind of failure:
 *  - peer lost (connection closed): with a complete checkpoint, the watch
 *    timer takes over after timeout_ms of silence; without one, the standby
 *    is dropped and we wait for a primary again.
 *  - peer protocol error (bad frame, bad or torn epoch, bad configuration):
 *    nothing of it is applied, the standby is dropped, we wait again: a
 *    confused primary never causes a takeover while it may still run.
 *  - the primary says goodbye (Fence): it either stops (guest powered off:
 *    we end, no takeover) or goes on without us (it gave us up: we stand
 *    down, drop the standby and wait for a new primary, no takeover). Only a
 *    primary that went silent without a goodbye (killed, hung) is replaced.
 *  - this process stalled (SIGSTOP, starved: its own loop late by more than
 *    the shorter of the two timeouts): the gap is not the primary's silence.
 *    The silence clock restarts when we resume, pending input is read
 *    first, and a takeover needs a fresh full timeout of silence. A link
 *    found closed right after a stall at least as long as the primary's
 *    timeout (while connected), without a goodbye, may be a primary that
 *    gave us up as well as a dead one: we stand down, no takeover (a crash
 *    of the primary during our stall is not covered).
 *  - local failure (no memory to stage an epoch, KVM refusing to apply one):
 *    the epoch cannot be acknowledged and never will be, so this standby is
 *    no use: the primary is told why (Error) before the close, the standby
 *    is dropped, we wait again. Never a takeover from a standby KVM refused.
 * The reason of the last failure is in the log and in status.
 *
 * A connection is only a candidate until it says a valid Hello
 * (candidates.c): candidates do not block each other or a real primary.
 * The first valid Hello wins; any other candidate is closed when it speaks
 * (a Hello then is refused: already serving a primary) or, silent, at
 * handshake_timeout_ms after its connection, as a lost peer.
 *
 * The takeover itself is takeover.c's. */
#include "secondary/secondary_int.h"
#include "replication/agent.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "net/notify.h"

#define TAG "secondary"

/* The connection ends (see the policy above). */
static void end_link(struct repl_secondary *s, bool drop)
{
	if (s->pc && s->state < S_CONTENDING) {   /* announced: no takeover without the source */
		repl_link_close(&s->link);
		repl_pc_dst_lost(s, s->fault.what[0] ? s->fault.what : "the link to the source ended");
		return;
	}
	repl_link_close(&s->link);
	proto_dec_fini(&s->link.dec);
	proto_dec_init(&s->link.dec, PROTO_MAX_PAYLOAD_DEFAULT);
	repl_staging_abort(&s->stage);
	if (s->state >= S_CONTENDING)
		return;
	if (drop || !s->stage.have_ckpt) {
		if (s->vm)
			log_warn(TAG, "standby dropped: %s", drop ? s->fault.what
					 : "the primary went away before the first checkpoint");
		repl_sec_drop_standby(s);
		s->state = S_WAITING;
		net_notify(NET_NOTIFY_STATUS, "waiting for a primary on %s (standby dropped)",
			   s->listen_at);
		return;
	}
	log_warn(TAG, "primary connection lost; standby holds epoch %llu",
		 (unsigned long long)s->stage.applied);
}

/* A failure on our side: drop the standby at once (no takeover from it
 * while the Error leaves), tell the primary why, then close. */
static void fail_local(struct repl_secondary *s, const struct repl_fault *f)
{
	log_error(TAG, "%s (%s): this standby cannot go on; dropping it and telling the primary",
		  f->what, repl_fault_kind_name(f->kind));
	s->fault = *f;
	repl_staging_abort(&s->stage);
	repl_sec_drop_standby(s);
	s->state = S_WAITING;
	net_notify(NET_NOTIFY_STATUS, "waiting for a primary on %s (standby dropped)", s->listen_at);
	if (s->link.conn && repl_send_error(&s->link, f->err, f->what) == 0) {
		s->refusing = true;      /* the Error leaves, then closed() follows */
		net_close_flush(s->link.conn);
		return;
	}
	end_link(s, true);
}

/* A primary that said Hello must go on until the first checkpoint: silent
 * longer than the handshake deadline (or the failure timeout, if longer),
 * it is a lost peer; without a checkpoint the standby is dropped. */
static void handshake_overdue(struct repl_secondary *s)
{
	unsigned limit_ms = s->o->handshake_timeout_ms > s->o->timeout_ms ?
			    s->o->handshake_timeout_ms : s->o->timeout_ms;
	uint64_t silent_ms = repl_link_silent_ns(&s->link) / 1000000;

	if (!s->link.conn || s->refusing || s->stage.have_ckpt ||
	    (s->state != S_HELLO && s->state != S_STANDBY) || silent_ms <= limit_ms)
		return;
	log_warn(TAG, "the primary was silent for %llu ms before the first checkpoint: a lost peer",
		 (unsigned long long)silent_ms);
	repl_fault_set(&s->fault, REPL_FAULT_PEER_LOST, -ETIMEDOUT,
		       "primary silent for %llu ms before the first checkpoint",
		       (unsigned long long)silent_ms);
	end_link(s, false);
}

/* The shorter of the two timeouts: a stall longer than that may have made
 * the primary give us up, or us it. */
static unsigned stall_ms(const struct repl_secondary *s)
{
	unsigned peer_ms = s->peer_timing.timeout_ms;

	return peer_ms && peer_ms < s->o->timeout_ms ? peer_ms : s->o->timeout_ms;
}

/* The silence check's period: at most a quarter of the timeout, 5 ms. */
static double watch_tick(const struct repl_secondary *s)
{
	return s->o->timeout_ms / 4e3 < 0.005 ? s->o->timeout_ms / 4e3 : 0.005;
}

/* The next check exactly when the timeout would run out (plus a little),
 * if that comes before the next tick: a takeover is not late by a tick. */
static void watch_at(struct repl_secondary *s, uint64_t left_ns)
{
	double at = left_ns / 1e9 + 0.0002;

	if (at < watch_tick(s)) {
		s->watch_w.repeat = at;
		ev_timer_again(s->loop, &s->watch_w);
	}
}

static void on_watch(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_secondary *s = w->data;
	struct secondary_engine_state eng;
	uint64_t stall_ns, silent_ns, timeout_ns = (uint64_t)s->o->timeout_ms * 1000000ull;

	(void)loop;
	(void)revents;
	w->repeat = watch_tick(s);
	stall_ns = repl_link_tick(&s->link, stall_ms(s));
	if (stall_ns) {
		log_warn(TAG, "this process was stalled for %llu ms (stopped or starved): not counted as "
			 "the primary's silence; reading what is pending, then a fresh %u ms",
			 (unsigned long long)(stall_ns / 1000000), s->o->timeout_ms);
		return;
	}
	repl_candidates_expire(&s->cands);
	handshake_overdue(s);
	if (s->wit && s->state == S_ACTIVE) {
		repl_sec_engine_state(s, &eng);
		/* Not a source that gave the key up on purpose: handing over, or
		 * in doubt after the hand-over (contending for it back). */
		if (!(eng.state && (!strcmp(eng.state, "switching") || !strcmp(eng.state, "migrated") ||
				    !strcmp(eng.state, "contending") || !strcmp(eng.state, "in-doubt"))))
			repl_sec_lease_check(s);
	}
	if (s->state != S_STANDBY || !s->stage.have_ckpt)
		return;
	/* Judged by what arrived (a beat is stamped by its own thread), not by
	 * when this loop got round to reading it. */
	silent_ns = repl_link_silent_ns(&s->link);
	if (silent_ns <= timeout_ns) {
		watch_at(s, timeout_ns - silent_ns);
		return;
	}
	if (repl_link_heard_late(&s->link, timeout_ns))
		return;
	if (s->pc) {
		repl_pc_dst_lost(s, "the source went silent during the post-copy hand-over");
		return;
	}
	if (s->await_resume) {
		/* After a switchover the new primary runs the guest already: until
		 * it has connected, its silence proves nothing (it may be alive and
		 * unable to reach us). No takeover on silence: a person decides. */
		if (!s->told_silent) {
			s->told_silent = true;
			log_warn(TAG, "the new primary has not connected within %u ms of the switchover: "
				 "no automatic takeover from this standby (it may run unprotected); "
				 "`understudy takeover` if it is gone", s->o->timeout_ms);
		}
		return;
	}
	if (!s->o->manual_takeover) {
		repl_sec_begin_takeover(s);
	} else if (!s->told_silent) {
		s->told_silent = true;
		log_warn(TAG, "the primary is silent (%u ms): takeover is manual, waiting to be told "
			 "(understudy takeover)", s->o->timeout_ms);
	}
}

static void on_hb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_secondary *s = w->data;

	(void)loop;
	(void)revents;
	if (s->link.conn && s->state == S_STANDBY &&
	    repl_send_epoch_msg(&s->link, PROTO_T_HEARTBEAT, s->stage.applied) < 0)
		log_warn(TAG, "heartbeat could not be sent");
}

/* ---- connection ------------------------------------------------------------------ */

/* What the frames of one chunk from the primary came to (r: the feed's result). */
static void after_feed(struct repl_secondary *s, int r)
{
	if (s->migrate_now && s->state == S_STANDBY && s->stage.have_ckpt) {
		s->migrate_now = false;
		s->migrating = true;
		s->switching = s->switch_now;
		s->switch_now = false;
		if (s->pc && repl_pc_dst_arm(s) < 0)
			return;              /* the VM is lost (reported) */
		repl_sec_begin_takeover(s);   /* a switchover resumes protected */
		return;
	}
	if (s->standing_down) {
		s->standing_down = false;
		end_link(s, true);
		return;
	}
	if (r == -ECONNREFUSED && s->link.conn) {
		s->refusing = true;      /* the Error leaves, then closed() follows */
		net_close_flush(s->link.conn);
		return;
	}
	if (r >= 0 || r == -ECANCELED || s->state == S_DONE)
		return;
	if (s->rx_fault.kind == REPL_FAULT_NONE && r == -ENOMEM)
		repl_fault_set(&s->rx_fault, REPL_FAULT_LOCAL_TRANSIENT, r, "receiving: %s",
			       strerror(-r));
	if (s->rx_fault.kind == REPL_FAULT_LOCAL_TRANSIENT || s->rx_fault.kind == REPL_FAULT_LOCAL_FATAL) {
		fail_local(s, &s->rx_fault);
		return;
	}
	log_error(TAG, "bad data from the primary (%s): closing, nothing of it applied",
		  proto_strerror(r));
	if (s->rx_fault.kind == REPL_FAULT_PEER_PROTOCOL)
		s->fault = s->rx_fault;
	else
		repl_fault_set(&s->fault, REPL_FAULT_PEER_PROTOCOL, r, "the primary sent bad data (%s)",
			       proto_strerror(r));
	end_link(s, true);
}

static void on_recv(struct net_conn *c, const void *data, size_t len, void *ctx)
{
	struct repl_secondary *s = ctx;

	(void)c;
	if (s->refusing || s->state >= S_CONTENDING)
		return;                  /* after the decision nothing the old primary says counts */
	s->rx_fault.kind = REPL_FAULT_NONE;
	after_feed(s, repl_link_feed(&s->link, data, len, repl_sec_frame, s));
}

/* The rest of a large frame is read straight into the decoder's buffer
 * (net/net.h recv_buf): no copy between the socket and the decoder. */
static void *on_recv_buf(struct net_conn *c, size_t *len, void *ctx)
{
	struct repl_secondary *s = ctx;

	(void)c;
	if (s->refusing || s->state >= S_CONTENDING)
		return NULL;
	return proto_dec_rbuf(&s->link.dec, 16384, len);
}

static void on_sent(struct net_conn *c, void *cookie, int status, void *ctx)
{
	(void)c;
	(void)status;
	(void)ctx;
	repl_link_sent_owned(cookie);
}

/* A close found right after our own stall, without a goodbye: the primary
 * may have given us up while we were stopped and run on (its goodbye lost
 * or not sent in time). That alone is no ground for a takeover: stand down. */
static bool closed_after_stall(struct repl_secondary *s)
{
	uint64_t stall_ns = repl_link_stalled_ns(&s->link, stall_ms(s));

	/* A stall shorter than the primary's timeout cannot have made it give us up. */
	if (stall_ns < (uint64_t)s->peer_timing.timeout_ms * 1000000ull || !stall_ns ||
	    s->state != S_STANDBY || !s->stage.have_ckpt)
		return false;
	repl_fault_set(&s->fault, REPL_FAULT_PEER_LOST, 0, "stood down: the link closed after this "
		       "process was stalled for %llu ms; a primary that gave it up cannot be told from "
		       "a dead one", (unsigned long long)(stall_ns / 1000000));
	log_warn(TAG, "%s: no takeover, waiting for a new primary", s->fault.what);
	end_link(s, true);
	return true;
}

static void on_closed(struct net_conn *c, int reason, void *ctx)
{
	struct repl_secondary *s = ctx;

	(void)c;
	repl_link_closed(&s->link);
	if (s->state >= S_CONTENDING)
		return;                  /* the link of the primary we replace */
	log_info(TAG, "primary connection closed (%s)", reason ? strerror(-reason) : "EOF");
	if (!s->refusing && closed_after_stall(s))
		return;
	if (!s->refusing)
		repl_fault_set(&s->fault, REPL_FAULT_PEER_LOST, reason, "primary connection closed (%s)",
			       reason ? strerror(-reason) : "EOF");
	end_link(s, s->refusing);
	s->refusing = false;
}

static const struct net_conn_ops conn_ops = {
	.recv = on_recv, .sent = on_sent, .closed = on_closed, .recv_buf = on_recv_buf,
};

/* ---- connections before their Hello (candidates.c) ------------------------------ */

/* A candidate's Hello: refused while a primary is served. */
static int cand_hello(void *ctx, struct repl_link *l, const struct proto_frame *f)
{
	struct repl_secondary *s = ctx;
	ProtobufCMessage *msg;
	int r;

	if (s->link.conn || (s->state != S_WAITING && s->state != S_STANDBY)) {
		log_warn(TAG, "refusing %s: already serving a primary", net_peer_name(l->conn));
		if (repl_send_error(l, -EBUSY, "already serving a primary") < 0)
			log_warn(TAG, "could not tell it why");
		return -ECONNREFUSED;
	}
	if ((r = proto_msg_unpack(f->type, f->payload, f->len, &msg)) < 0)
		return r;
	memset(&s->peer_timing, 0, sizeof(s->peer_timing));   /* the Hello brings them */
	r = repl_sec_hello(s, l, (Understudy__Hello *)msg);
	proto_msg_free(msg);
	return r;
}

/* A candidate that said a valid Hello becomes the primary's link. Frames
 * after its Hello go to repl_sec_frame() (receive.c). */
static void cand_promote(void *ctx, struct net_conn *c)
{
	struct repl_secondary *s = ctx;
	int port;

	log_info(TAG, "primary %s connected", net_peer_name(c));
	/* Its host only: the port it connected from is an ephemeral one that
	 * nothing (a fence command, a hook, status) can use. */
	if (net_parse_host_port(net_peer_name(c), true, s->peer_addr, sizeof(s->peer_addr), &port))
		snprintf(s->peer_addr, sizeof(s->peer_addr), "%s", net_peer_name(c));
	s->fault.kind = REPL_FAULT_NONE;   /* the reason was the last connection's */
	s->rx_fault.kind = REPL_FAULT_NONE;
	s->link.conn = c;
	s->refusing = false;
	s->told_silent = false;
	s->link.last_rx_ns = s->link.up_ns = now_ns();
	s->state = s->resuming ? S_STANDBY : S_HELLO;
	net_conn_set_ops(c, &conn_ops, s);
	if (s->resuming) {
		s->resuming = false;
		s->await_resume = false;
		if (repl_sec_send_hello(s) < 0) {
			log_error(TAG, "cannot answer the resuming primary");
			repl_link_close(&s->link);
		}
	}
}

/* The decoder that read the Hello goes on with the primary's stream. */
static void cand_adopt(void *ctx, struct repl_link *l)
{
	struct repl_secondary *s = ctx;

	proto_dec_fini(&s->link.dec);
	s->link.dec = l->dec;
	proto_dec_init(&l->dec, 0);
	s->link.bytes_rcvd += l->bytes_rcvd;
	s->link.last_rx_ns = now_ns();
}

static void cand_fed(void *ctx, int r)
{
	after_feed(ctx, r);
}

static const struct repl_candidates_ops cand_ops = {
	.hello = cand_hello, .promote = cand_promote, .frame = repl_sec_frame, .adopt = cand_adopt,
	.fed = cand_fed,
};

void repl_sec_on_accept(struct net_listener *l, struct net_conn *c, void *ctx)
{
	struct repl_secondary *s = ctx;

	(void)l;
	/* A standby without a link may hear a primary resuming it (switchover);
	 * its Hello decides (resume_hello). */
	if (s->link.conn || (s->state != S_WAITING && s->state != S_STANDBY)) {
		log_warn(TAG, "refusing %s: already serving a primary", net_peer_name(c));
		net_close(c);
		return;
	}
	repl_candidates_add(&s->cands, c);
}

void repl_sec_link_init(struct repl_secondary *s)
{
	double hb = repl_heartbeat_interval(s->o->timeout_ms);
	double tick = watch_tick(s);

	repl_candidates_init(&s->cands, &cand_ops, s, s->o->handshake_timeout_ms, &s->fault);
	ev_timer_init(&s->watch_w, on_watch, tick, tick);
	ev_timer_init(&s->hb_w, on_hb, hb, hb);
	/* Silence is judged after pending reads are handled (see primary/engine.c);
	 * the same timer notices a stall of this process (repl_link_tick). */
	ev_set_priority(&s->watch_w, EV_MINPRI);
	s->watch_w.data = s->hb_w.data = s;
}
