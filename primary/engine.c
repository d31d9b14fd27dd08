/* The primary: runs the guest, brings the secondary in sync while the guest
 * runs (sync.c), then one epoch every epoch_ms (epoch.c). Guest output of
 * epoch N leaves only after ACK(N) (output commit).
 *
 *   connecting -> hello -> syncing -> first-checkpoint -> protected
 *        \__________\_________\_____________\_______________\__ unprotected / done
 *
 * Policy per kind of failure (on_fault):
 *  - peer lost (connection closed, silent for timeout_ms: no stream bytes
 *    nor beats, see the beat side channel in replication.h) or peer protocol
 *    error (bad data, refusal): the secondary cannot be counted on; say so
 *    loudly, release held output and run on UNPROTECTED. We never wait for
 *    a secondary that is gone. A link still open gets a goodbye first (Fence
 *    "the primary continues"): the secondary stands down instead of reading
 *    the close as our death. Before the secondary accepted us the VM was
 *    never protected: stop (exit 1).
 *  - the secondary says it took over (Fence from it, e.g. after this process
 *    was stopped past its failover timeout): another copy runs; stop at once,
 *    releasing nothing more (exit 1).
 *  - this process stalled (stopped, starved: its loop late by more than the
 *    shorter of the two timeouts): not the secondary's silence; the clock
 *    restarts and pending input is read first (a takeover's Fence). If the
 *    secondary is then lost without word, after a stall longer than its
 *    failover timeout while it held a checkpoint, it may have taken over:
 *    stop without a goodbye and without releasing, as for a local fatal
 *    failure (a partition at that moment is the remaining risk).
 *  - local transient (no memory for a buffer or on the link): the failed
 *    epoch or sync batch was undone; retry, output stays held. A shortage
 *    lasting longer than timeout_ms counts as fatal.
 *  - local fatal (KVM refuses to give the state, the encoder fails): when the
 *    secondary holds a checkpoint, stop this primary without a goodbye and
 *    without releasing unacknowledged output, so that the secondary takes
 *    over from its last epoch; before that, run on UNPROTECTED.
 * Until the first acknowledged checkpoint every phase (connect, TLS, Hello,
 * initial sync, first checkpoint) must make progress within
 * handshake_timeout_ms (handshake_check): missing it is a lost peer, so
 * before the secondary's Hello the primary exits 1 (no retry), later it runs
 * UNPROTECTED; held output is never held longer.
 * The reason is logged and shown by status. Without a witness, a secondary
 * that took over while this side was cut off (partition) is not detected.
 * With a witness (lease.c) this side owns the witness key from the
 * start: output leaves only while its lease is provably valid, a standby
 * it gave up is withdrawn at the witness before held output leaves, and a
 * lease that lapses fences this copy for good (state fenced). */
#include "primary/primary_int.h"
#include "primary/converge.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "kmod/mutant.h"
#include "net/control.h"
#include "net/notify.h"

#define TAG "primary"

/* ---- link callbacks ---------------------------------------------------------- */

/* The beat side channel (replication.h): a fresh key to the secondary,
 * then beats. Without it (logged), silence is judged on the stream alone. */
static void beat_begin(struct repl_primary *p)
{
	uint8_t key[REPL_BEAT_KEY_BYTES];
	int r = 0;

	if (getrandom(key, sizeof(key), 0) != (ssize_t)sizeof(key))
		r = errno ? -errno : -EIO;

	if (r == 0)
		r = repl_link_send_section(&p->link, REPL_BEAT_SECTION, key, sizeof(key));
	if (r == 0)
		repl_link_beat_start(&p->link, true, key, sizeof(key), NULL,
				     repl_beat_interval_ms(p->timing.heartbeat_ms,
							   p->peer_timing.timeout_ms));
	else
		log_warn(TAG, "no beat side channel (%s): silence is judged on the stream alone",
			 strerror(-r));
	explicit_bzero(key, sizeof(key));
}

/* The secondary accepted us (it checked our settings already); its own
 * settings are checked here too, and a refusal is told to it (Error). */
static int on_hello(struct repl_primary *p, const Understudy__Hello *h)
{
	char err[256];
	int r;

	r = repl_check_hello(h, UNDERSTUDY__ROLE__ROLE_SECONDARY, err, sizeof(err));
	if (r < 0) {
		log_error(TAG, "secondary refused: %s", err);
		return r;
	}
	p->peer_caps = h->capabilities;
	r = repl_hello_timing(h, &p->peer_timing, err, sizeof(err));
	if (r == 0)
		r = repl_check_timing(&p->timing, &p->peer_timing, err, sizeof(err));
	if (r == 0)
		r = repl_check_witness(h, p->o->witness.key, err, sizeof(err));
	if (r == 0 && p->wit &&
	    (!h->standby_token[0] || strlen(h->standby_token) >= sizeof(p->standby_token) ||
	     !strcmp(h->standby_token, "none"))) {
		snprintf(err, sizeof(err), "the secondary's Hello has no usable standby token");
		r = -EPROTO;
	}
	if (r < 0) {
		log_error(TAG, "refusing the secondary: %s", err);
		repl_fault_set(&p->rx_fault, REPL_FAULT_PEER_PROTOCOL, r, "refused the secondary: %s", err);
		if (repl_send_error(&p->link, r, err) < 0)
			log_warn(TAG, "could not tell the secondary why");
		return -ECONNREFUSED;
	}
	if (p->wit)
		snprintf(p->standby_token, sizeof(p->standby_token), "%s", h->standby_token);
	beat_begin(p);
	if (p->o->resume_epoch) {
		/* The standby holds resume_epoch: the next epoch carries every page
		 * written since the guest resumed here, and the state. */
		p->ep.epoch = p->ep.acked = p->o->resume_epoch;
		p->sync.t0_ns = now_ns();
		log_info(TAG, "the standby holds epoch %llu: no initial sync",
			 (unsigned long long)p->o->resume_epoch);
		repl_primary_on_sync_done(p);
		return 0;
	}
	repl_primary_start_sync(p);
	return 0;
}

/* Post-copy: a page request, or the end (the migration is complete). */
static int postcopy_frame(struct repl_primary *p, uint16_t type, const ProtobufCMessage *msg)
{
	int r = repl_pc_src_frame(p, type, msg);

	if (r <= 0)
		return r;
	p->migration_ms = (now_ns() - p->migrate_t0_ns) / 1e6;
	p->migrated = true;
	p->keep_standby = true;
	log_info(TAG, "MIGRATED (post-copy): the destination holds every page; downtime %.3f ms, "
		 "%llu bytes sent", p->downtime_ms, (unsigned long long)p->link.bytes_sent);
	repl_primary_link_gone(p);
	repl_primary_finish(p, 0);
	return -ECANCELED;
}

/* The standby asks for the guest back (drill switchover --back). */
static void switch_request(struct repl_primary *p)
{
	char err[200];

	if (!p->o->home_listen) {
		log_warn(TAG, "the secondary asks for a switchover back: refused, this primary knows "
			 "no address to wait at (use understudy switchover --listen)");
		return;
	}
	if (repl_primary_switchover(p, p->o->home_listen, err, sizeof(err)) < 0)
		log_warn(TAG, "the secondary asks for a switchover back: refused: %s", err);
}

static int on_frame(void *ctx, const struct proto_frame *f)
{
	struct repl_primary *p = ctx;
	ProtobufCMessage *msg = NULL;
	Understudy__Error *e;
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
		r = on_hello(p, (Understudy__Hello *)msg);
		break;
	case PROTO_T_ACK:
		repl_primary_on_ack(p, ((Understudy__Ack *)msg)->epoch);
		break;
	case PROTO_T_HEARTBEAT:
		break;
	case PROTO_T_SECTION:     /* a drill on the secondary (drill.c), or a switch back */
		if (!strcmp(((Understudy__Section *)msg)->name, REPL_SWITCH_REQUEST))
			switch_request(p);
		else
			r = repl_drill_pri_section(&p->ep, (Understudy__Section *)msg);
		break;
	case PROTO_T_FENCE:
		r = repl_primary_on_fence(p, (Understudy__Fence *)msg);
		break;
	case PROTO_T_PAGE_REQUEST:
	case PROTO_T_POSTCOPY_DONE:
		r = postcopy_frame(p, f->type, msg);
		break;
	case PROTO_T_ERROR:
		e = (Understudy__Error *)msg;
		log_error(TAG, "secondary says: %s (code %d)", e->text, e->code);
		/* In the handshake a refusal; later the secondary gives up. */
		repl_fault_set(&p->rx_fault, p->state <= P_HELLO ? REPL_FAULT_PEER_PROTOCOL :
			       REPL_FAULT_PEER_LOST, e->code, "%s by the secondary: %s",
			       p->state <= P_HELLO ? "refused" : "given up", e->text);
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
	char cfgtext[PROTO_CONFIG_MAX_BYTES];
	int n = proto_config_encode(&p->vm->m->cfg, cfgtext, sizeof(cfgtext)), r = n;

	(void)c;
	p->state = P_HELLO;
	p->link.last_rx_ns = p->link.up_ns = now_ns();
	if (n < 0 ||
	    (r = repl_send_hello_resume(&p->link, UNDERSTUDY__ROLE__ROLE_PRIMARY, &p->o->cfg,
					&p->timing, p->o->witness.key, NULL, p->o->resume_epoch,
					repl_ops_hello_name(&p->o->ops))) < 0 ||
	    (!p->o->resume_epoch &&
	     (r = repl_link_send_section(&p->link, PROTO_SECTION_MACHINE_CONFIG, cfgtext, (size_t)n)) < 0))
		repl_primary_fault(p, repl_fault_send(r), r, "cannot send hello");
}

static void on_recv(struct net_conn *c, const void *data, size_t len, void *ctx)
{
	struct repl_primary *p = ctx;
	int r;

	(void)c;
	if (p->state >= P_UNPROTECTED)
		return;               /* the secondary was given up: nothing it says counts */
	p->rx_fault.kind = REPL_FAULT_NONE;
	r = repl_link_feed(&p->link, data, len, on_frame, p);
	if (r >= 0 || !p->link.conn)
		return;
	if (r == -ECONNREFUSED && p->rx_fault.kind != REPL_FAULT_NONE) {
		repl_primary_on_fault(p, &p->rx_fault);
	} else if (r == -ECONNREFUSED) {
		repl_primary_fault(p, REPL_FAULT_PEER_PROTOCOL, r, "refused by the secondary");
	} else if (r == -ENOMEM) {
		/* The decoder stops for good: this link cannot be read any more. */
		repl_primary_fault(p, REPL_FAULT_LOCAL_FATAL, r, "out of memory reading from the secondary");
	} else {
		log_error(TAG, "bad data from the secondary: %s", proto_strerror(r));
		repl_fault_set(&p->rx_fault, REPL_FAULT_PEER_PROTOCOL, r, "protocol error: %s",
			       proto_strerror(r));
		repl_primary_on_fault(p, &p->rx_fault);
	}
}

static void on_sent(struct net_conn *c, void *cookie, int status, void *ctx)
{
	struct repl_primary *p = ctx;
	int kind = cookie ? *(int *)cookie : 0;

	(void)c;
	p->ep.st.bytes_sent = p->link.bytes_sent;
	if (cookie && cookie == p->handover_tx) {
		/* Whole in the kernel (0), or dropped with the connection: then
		 * the destination never got the order to run the guest. */
		p->handover_tx = NULL;
		p->handover_out = status == 0;
		log_info(TAG, "migration: the hand-over %s", status == 0 ? "left for the destination" :
			 "never left this host (the connection died first)");
	}
	if (repl_link_sent_owned(cookie)) {
		if (p->state == P_SYNC)
			repl_sync_room(&p->sync);
		else
			repl_pc_src_room(p);
	} else if (kind == REPL_TX_EPOCH) {
		repl_epoch_sent(&p->ep, cookie);
		repl_primary_try_final_epoch(p);
	}
}

static void on_closed(struct net_conn *c, int reason, void *ctx)
{
	struct repl_primary *p = ctx;
	char why[128];

	(void)c;
	repl_link_closed(&p->link);
	if (p->state == P_DONE) {
		repl_primary_done(p);
		return;
	}
	if (p->state == P_FENCED) {
		repl_primary_link_gone(p);
		return;
	}
	if (p->state == P_UNPROTECTED) {
		log_info(TAG, "link to the secondary closed after the goodbye (%s)",
			 reason ? strerror(-reason) : "delivered");
		repl_primary_link_gone(p);
		return;
	}
	if (p->state == P_CONNECTING && p->o->resume_epoch && reason == -ECONNREFUSED) {
		/* After a switchover the old primary listens once it has heard
		 * that this side took over: try again until the handshake deadline.
		 * (Set again: restarted as it is, libev keeps what was left of its
		 * last run, nothing, and the retries would spin and starve the
		 * deadline's watcher, which has the lowest priority.) */
		ev_timer_set(&p->reconnect_w, 0.02, 0);
		ev_timer_start(p->loop, &p->reconnect_w);
		return;
	}
	snprintf(why, sizeof(why), "connection to the secondary %s",
		 reason ? strerror(-reason) : "closed");
	repl_primary_fault(p, REPL_FAULT_PEER_LOST, reason, why);
}

static const struct net_conn_ops conn_ops = {
	.connected = on_connected, .recv = on_recv, .sent = on_sent, .closed = on_closed,
};

static void on_reconnect(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_primary *p = w->data;
	int r;

	(void)loop;
	(void)revents;
	if (p->state != P_CONNECTING || p->link.conn)
		return;
	r = net_connect(p->loop, &p->o->net, p->o->peer, &conn_ops, p, &p->link.conn);
	if (r < 0)
		repl_primary_fault(p, REPL_FAULT_PEER_LOST, r, "cannot connect to the old primary's standby");
}

/* ---- handshake deadline ------------------------------------------------------- */

static const char *phase_what(enum pstate st)
{
	switch (st) {
	case P_CONNECTING: return "no connection to the secondary (TCP connect, TLS handshake)";
	case P_HELLO: return "no Hello from the secondary";
	case P_SYNC: return "initial sync stalled";
	default: return "no acknowledgement of the first checkpoint";
	}
}

/* Progress: a new phase, a sync batch, or bytes that left (net_unsent_bytes
 * changes while a slow link drains; it stays put when the secondary reads
 * nothing, and at 0 when it reads everything and never acknowledges). */
static void handshake_check(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_primary *p = w->data;
	size_t queued = p->link.conn ? net_unsent_bytes(p->link.conn) : 0;
	uint64_t now = now_ns();
	char why[160];

	(void)revents;
	if (p->state >= P_PROTECTED) {
		ev_timer_stop(loop, w);
		return;
	}
	if (p->hs.state != p->state || p->hs.batches != p->sync.batches || p->hs.queued != queued) {
		p->hs.state = p->state;
		p->hs.batches = p->sync.batches;
		p->hs.queued = queued;
		p->hs.since_ns = now;
		return;
	}
	if (now - p->hs.since_ns <= (uint64_t)p->o->handshake_timeout_ms * 1000000ull)
		return;
	snprintf(why, sizeof(why), "%s within %u ms", phase_what(p->state), p->o->handshake_timeout_ms);
	log_error(TAG, "handshake deadline: %s: a lost peer; %s", why, p->state <= P_HELLO ?
		  "before protection: exit 1, no retry" : "the VM goes on UNPROTECTED");
	ev_timer_stop(loop, w);
	repl_primary_fault(p, REPL_FAULT_PEER_LOST, -ETIMEDOUT, why);
}

static void handshake_start(struct repl_primary *p)
{
	p->hs.state = p->state;
	p->hs.since_ns = now_ns();
	ev_timer_start(p->loop, &p->handshake_w);
}

/* ---- heartbeat, shutdown, status ------------------------------------------------ */

static void on_hb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_primary *p = w->data;
	uint64_t silent_ns, stall_ns;
	char why[96];
	int r;

	(void)loop;
	(void)revents;
	stall_ns = repl_link_tick(&p->link, repl_primary_stall_ms(p));
	if (stall_ns) {
		log_warn(TAG, "this process was stalled for %llu ms (stopped or starved): not counted as "
			 "the secondary's silence; reading what is pending first",
			 (unsigned long long)(stall_ns / 1000000));
		return;
	}
	if (p->state < P_HELLO || p->state >= P_UNPROTECTED || !p->link.conn)
		return;
	silent_ns = repl_link_silent_ns(&p->link);
	if (silent_ns > (uint64_t)p->o->timeout_ms * 1000000ull &&
	    !repl_link_heard_late(&p->link, (uint64_t)p->o->timeout_ms * 1000000ull)) {
		snprintf(why, sizeof(why), "secondary silent for %llu ms",
			 (unsigned long long)(silent_ns / 1000000));
		repl_primary_fault(p, REPL_FAULT_PEER_LOST, -ETIMEDOUT, why);
		return;
	}
	if ((r = repl_send_epoch_msg(&p->link, PROTO_T_HEARTBEAT, p->ep.epoch)) < 0)
		repl_primary_fault(p, repl_fault_send(r), r, "heartbeat could not be sent");
}

static void on_finish_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_primary *p = w->data;

	(void)loop;
	(void)revents;
	if (p->state == P_DONE) {
		repl_primary_done(p);          /* the goodbye did not leave in time */
		return;
	}
	log_warn(TAG, "no ACK for the last epoch: stopping anyway");
	repl_primary_finish(p, p->exit_status);
}

static void on_vm_stopped(void *ctx, int status);

/* The guest asked for a reset: the same machine boots it again
 * (repl_vm_reboot) and the protection goes on. Protected, the next epoch
 * says so (EpochEnd.reboot): the secondary clears the standby's RAM before
 * it applies that epoch, which carries the pages written since the reset
 * (the loader's, the guest's) and the power-on state of vCPUs and devices,
 * and is staged whole like any epoch: a standby holds the guest from
 * before the reset or from after it, never a mix. The encoder forgets the
 * pages it cached (they were the standby's); pre-copied pages of an open
 * epoch are taken again. During the initial sync every page is marked
 * dirty instead (the next round sends all of RAM). Output commit is
 * unchanged. false: not here (a hand-over, the last epoch of a stop in
 * flight, a VM not booted by this process's repl_vm_boot, a secondary
 * that does not apply a reboot epoch: no PROTO_CAP_REBOOT in its Hello):
 * the guest's stop ends the VM as before. */
static bool reboot_in_place(struct repl_primary *p)
{
	bool epochs = p->state == P_PROTECTING || p->state == P_PROTECTED;
	struct machine *m = p->vm->m;
	uint64_t *all;
	int r;

	if (p->finishing || !p->vm->poweron ||
	    (!epochs && p->state != P_SYNC && p->state != P_CONNECTING && p->state != P_HELLO &&
	     p->state != P_UNPROTECTED))
		return false;
	if (epochs && !(p->peer_caps & PROTO_CAP_REBOOT)) {
		log_warn(TAG, "the guest rebooted, and the secondary cannot take a reboot epoch (an "
			 "older understudy): the VM ends as it did there");
		return false;
	}
	if ((r = repl_vm_reboot(p->vm)) < 0) {
		/* Half reset: nothing of it may be captured or run. A standby
		 * holding a checkpoint takes over from it; else the VM ends. */
		repl_primary_fault(p, REPL_FAULT_LOCAL_FATAL, r, "rebooting the guest");
		repl_primary_finish(p, 1);
		return true;
	}
	if (epochs) {
		p->ep.reboot = true;
		proto_page_enc_reset(p->ep.enc);
		if (p->ep.open)
			ckpt_requeue(m, &p->ep.pre);
	} else if (p->state == P_SYNC) {
		if (!(all = malloc(machine_bitmap_words(m) * sizeof(uint64_t)))) {
			repl_primary_fault(p, REPL_FAULT_LOCAL_FATAL, -ENOMEM, "rebooting the guest");
			repl_primary_finish(p, 1);
			return true;
		}
		machine_bitmap_fill(m, all);
		machine_requeue_dirty(m, all);
		free(all);
	}
	p->vm->on_stopped = on_vm_stopped;   /* on_wake took it off */
	log_info(TAG, "the guest rebooted (after epoch %llu): booted again on the same machine%s",
		 (unsigned long long)p->ep.epoch, epochs ? "; the next epoch carries it to the "
		 "secondary" : p->state == P_UNPROTECTED ? " (no standby holds it)" : "");
	net_notify(NET_NOTIFY_STATUS, "the guest rebooted after epoch %llu%s",
		   (unsigned long long)p->ep.epoch, epochs ? ": protection goes on" : "");
	machine_resume(m);
	return true;
}

/* The guest stopped: its last effects are committed like any epoch's.
 * When the link is full the capture waits for a free slot (on_ack/on_sent). */
static void on_vm_stopped(void *ctx, int status)
{
	struct repl_primary *p = ctx;

	if (status == MACHINE_STATUS_REBOOT && reboot_in_place(p))
		return;
	p->exit_status = status < 0 ? 1 : status;
	p->finishing = true;
	if (p->state == P_PROTECTED || p->state == P_PROTECTING) {
		ev_timer_stop(p->loop, &p->epoch_w);
		ev_timer_start(p->loop, &p->finish_w);
		p->final_pending = true;
		repl_primary_try_final_epoch(p);
		return;
	}
	repl_primary_finish(p, p->exit_status);
}

void repl_primary_stop(struct repl_primary *p)
{
	if (p->state == P_SWITCHING) {
		log_warn(TAG, "the guest is being handed over: the signal waits for the outcome");
		return;
	}
	if (p->state == P_FENCED) {
		repl_primary_finish(p, REPL_EXIT_REPLACED);   /* the guest is paused for good */
		return;
	}
	machine_stop(p->vm->m, 0);
}

/* ---- setup ------------------------------------------------------------------ */

/* The engine on p->vm (running or about to): link, epochs, sync, connect. */
int repl_primary_init(struct repl_primary *p)
{
	int r;

	p->vm->on_stopped = on_vm_stopped;
	p->vm->on_output = repl_primary_on_vm_output;
	p->vm->cb_ctx = p;
	p->min_epoch_ms = p->o->min_epoch_ms ? p->o->min_epoch_ms : REPL_MIN_EPOCH_MS;
	p->rtt_ms = -1;
	repl_vm_set_gated(p->vm, true);
	repl_link_init(&p->link, PROTO_MAX_PAYLOAD_DEFAULT);
	if ((r = repl_epochs_init(&p->ep, p->vm, &p->link, getenv("UNDERSTUDY_VERIFY") != NULL)) < 0 ||
	    (r = repl_sync_init(&p->sync, p->loop, p->vm, &p->link, p->ep.enc)) < 0)
		return r;
	p->sync.disk = &p->ep.disk;
	p->sync.done = repl_primary_on_sync_done;
	p->sync.failed = repl_primary_on_sync_failed;
	p->sync.ctx = p;
	r = net_connect(p->loop, &p->o->net, p->o->peer, &conn_ops, p, &p->link.conn);
	if (r < 0)
		log_error(TAG, "cannot connect to the secondary at %s: %s", p->o->peer, strerror(-r));
	return r;
}

void repl_primary_start(struct repl_primary *p)
{
	ev_timer_start(p->loop, &p->hb_w);
	if (p->wit)
		ev_timer_start(p->loop, &p->lease_w);
	handshake_start(p);
	p->link.last_tick_ns = now_ns();   /* the stall check starts now, not at setup */
}

void repl_primary_fini(struct repl_primary *p)
{
	ev_timer_stop(p->loop, &p->epoch_w);
	ev_timer_stop(p->loop, &p->hb_w);
	ev_timer_stop(p->loop, &p->finish_w);
	ev_timer_stop(p->loop, &p->handshake_w);
	ev_timer_stop(p->loop, &p->goodbye_w);
	ev_timer_stop(p->loop, &p->lease_w);
	ev_timer_stop(p->loop, &p->linger_w);
	ev_timer_stop(p->loop, &p->throttle_w);
	ev_timer_stop(p->loop, &p->reconnect_w);
	ev_timer_stop(p->loop, &p->early_w);
	ev_timer_stop(p->loop, &p->precopy_w);
	repl_pc_src_free(p);
	repl_sync_fini(&p->sync);
	repl_link_fini(&p->link);
	repl_epochs_fini(&p->ep);
}

void repl_primary_watchers_init(struct repl_primary *p)
{
	const struct repl_primary_opts *o = p->o;

	ev_timer_init(&p->epoch_w, repl_primary_on_epoch_timer, o->epoch_ms / 1e3, o->epoch_ms / 1e3);
	ev_timer_init(&p->hb_w, on_hb, 0.01, repl_heartbeat_interval(o->timeout_ms));
	ev_timer_init(&p->finish_w, on_finish_timeout, 2.0, 0);
	ev_timer_init(&p->linger_w, repl_primary_on_linger, 1.5, 0);
	ev_timer_init(&p->throttle_w, repl_primary_on_throttle_end, 0.01, 0);
	ev_timer_init(&p->reconnect_w, on_reconnect, 0.02, 0);
	ev_timer_init(&p->early_w, repl_primary_on_early, 0.002, 0);
	ev_timer_init(&p->precopy_w, repl_primary_on_precopy, 0.001, 0);
	p->linger_w.data = p->throttle_w.data = p->reconnect_w.data = p->early_w.data = p;
	p->precopy_w.data = p;
	ev_timer_init(&p->goodbye_w, repl_primary_on_goodbye_timeout, 10.0, 0);
	/* Silence is judged after pending reads are handled: libev runs higher
	 * priorities first, so a stall of our own loop is not the peer's. */
	ev_set_priority(&p->hb_w, EV_MINPRI);
	ev_timer_init(&p->handshake_w, handshake_check, o->handshake_timeout_ms / 10e3,
		      o->handshake_timeout_ms / 10e3);
	ev_set_priority(&p->handshake_w, EV_MINPRI);
	ev_timer_init(&p->lease_w, repl_primary_lease_check, 0.005, 0.005);
	p->epoch_w.data = p->hb_w.data = p->finish_w.data = p->goodbye_w.data = p;
	p->handshake_w.data = p->lease_w.data = p;
}
