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
 * With a witness (primary_fence.c) this side owns the witness key from the
 * start: output leaves only while its lease is provably valid, a standby
 * it gave up is withdrawn at the witness before held output leaves, and a
 * lease that lapses fences this copy for good (state fenced). */
#include "replication/postcopy.h"
#include "replication/converge.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kmod/mutant.h"
#include "net/control.h"
#include "net/notify.h"

#define TAG "primary"

static void finish(struct repl_primary *p, int status);
static void send_handover(struct repl_primary *p);
static void throttle_off(struct repl_primary *p);
static void pause_for_handover(struct repl_primary *p, bool postcopy);

static void engine_done(struct repl_primary *p);

/* A migrated source stays a moment, so that `understudy migrate` reads
 * its summary from status. */
static void on_linger(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_primary *p = w->data;

	(void)loop;
	(void)revents;
	p->migrated_told = true;
	engine_done(p);
}

/* The engine is done: the loop ends (repl_primary_run) or the host is told. */
static void engine_done(struct repl_primary *p)
{
	/* ...and one that lost the VM in post-copy, so that it can say so. */
	if ((p->migrated || repl_pc_src_switched(p)) && !p->migrated_told) {
		if (!ev_is_active(&p->linger_w))
			ev_timer_start(p->loop, &p->linger_w);
		return;
	}
	if (!p->attached)
		ev_break(p->loop, EVBREAK_ALL);
	else if (p->host.ended)
		p->host.ended(p->host.ctx, p->exit_status);
}

/* ---- failures ---------------------------------------------------------------- */

/* This side gives the secondary up and runs on: tell it first (Fence "the
 * primary continues": stand down, do not take over), then let what is
 * queued leave and close. Epoch buffers stay until the link is closed
 * (on_closed, or the goodbye deadline if the secondary does not read). A
 * killed primary sends nothing, so a crash still fails over. */
static void say_goodbye(struct repl_primary *p, const char *why)
{
	double deadline_s = p->o->timeout_ms * 2e-3 > 10.0 ? p->o->timeout_ms * 2e-3 : 10.0;
	int r;

	if (!p->link.conn) {
		repl_pri_link_gone(p);
		return;
	}
	r = repl_send_fence(&p->link, UNDERSTUDY__FENCE_ACTION__FENCE_PRIMARY_CONTINUES,
			    p->ep.acked, why);
	if (r < 0) {
		log_error(TAG, "could not tell the secondary we go on without it (%s): closing "
			  "without a goodbye", strerror(-r));
		repl_pri_link_gone(p);
		return;
	}
	log_info(TAG, "goodbye sent: the secondary is told to stand down (no takeover)");
	net_close_flush(p->link.conn);
	ev_timer_set(&p->goodbye_w, deadline_s, 0);
	ev_timer_start(p->loop, &p->goodbye_w);
}

static void on_goodbye_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_primary *p = w->data;

	(void)loop;
	(void)revents;
	log_warn(TAG, "the goodbye did not leave before its deadline (the secondary does not "
		 "read): closing");
	repl_pri_link_gone(p);
}

static void drop_protection(struct repl_primary *p, const struct repl_fault *f)
{
	if (p->state >= P_UNPROTECTED)
		return;
	p->fault = *f;
	if (p->state <= P_HELLO && !p->attached) {
		log_error(TAG, "cannot protect the VM: %s (%s)", f->what, repl_fault_kind_name(f->kind));
		finish(p, 1);
		return;
	}
	if (p->state <= P_HELLO) {   /* attached: the host's VM runs on as before */
		log_error(TAG, "cannot protect the VM: %s (%s): it runs on unprotected", f->what,
			  repl_fault_kind_name(f->kind));
		p->state = P_UNPROTECTED;
		repl_pri_link_gone(p);
		repl_vm_set_gated(p->vm, false);
		if (p->finishing)
			finish(p, p->exit_status);
		return;
	}
	log_error(TAG, "%s: %s at epoch %llu (acked %llu): the VM runs UNPROTECTED from now on; "
		  "held output is released", repl_fault_kind_name(f->kind), f->what,
		  (unsigned long long)p->ep.epoch, (unsigned long long)p->ep.acked);
	net_notify(NET_NOTIFY_READY, "UNPROTECTED: %s", f->what);   /* the start is over */
	p->state = P_UNPROTECTED;
	repl_pri_event(p, REPL_EV_UNPROTECTED, f->what);
	ev_timer_stop(p->loop, &p->epoch_w);
	repl_sync_stop(&p->sync);
	throttle_off(p);
	say_goodbye(p, f->what);
	if (MUTANT(keep_vouch))   /* make check-mutants: the standby's vouch stays */
		p->vouch_asked = false;
	if (p->wit && p->vouch_asked) {
		/* The standby may hold a vouch: it must be withdrawn at the witness
		 * before output it never saw leaves, or it could take over later
		 * from behind that output. Until then everything stays held
		 * (on_withdrawn releases it). */
		log_info(TAG, "withdrawing the standby at the witness before releasing anything");
		repl_witness_withdraw(p->wit);
	} else {
		repl_vm_set_gated(p->vm, false);   /* releases everything held */
	}
	if (p->finishing)
		finish(p, p->exit_status);
}

/* This side cannot checkpoint any more, the secondary holds a complete one:
 * it takes over once we are silent (no Fence), from output we never let out. */
static void stop_for_takeover(struct repl_primary *p, const struct repl_fault *f)
{
	p->fault = *f;
	log_error(TAG, "%s: %s at epoch %llu: stopping this primary; the secondary takes over from "
		  "the last epoch it holds (acknowledged: %llu) after its failure timeout; output it "
		  "did not acknowledge never leaves here",
		  repl_fault_kind_name(f->kind), f->what, (unsigned long long)p->ep.epoch,
		  (unsigned long long)p->ep.acked);
	p->keep_standby = true;
	repl_link_close(&p->link);
	repl_epochs_drop(&p->ep);
	finish(p, REPL_EXIT_REPLACED);
}

/* The secondary runs the guest now: this copy must not. Nothing more is
 * released (output it did not acknowledge never leaves here). */
static int on_fence(struct repl_primary *p, const Understudy__Fence *f)
{
	if (f->action != UNDERSTUDY__FENCE_ACTION__FENCE_SECONDARY_TOOK_OVER) {
		log_error(TAG, "unexpected goodbye from the secondary (action %d)", f->action);
		return -EPROTO;
	}
	if (p->state == P_SWITCHING && p->final_epoch && f->epoch == p->final_epoch &&
	    repl_pc_src_switched(p)) {
		p->downtime_ms = (now_ns() - p->switch_t0_ns) / 1e6;
		log_info(TAG, "post-copy: the destination runs the guest from epoch %llu; downtime "
			 "%.3f ms", (unsigned long long)f->epoch, p->downtime_ms);
		repl_pc_src_running(p);
		return 0;
	}
	if (p->state == P_SWITCHING && p->final_epoch && f->epoch == p->final_epoch) {
		p->downtime_ms = (now_ns() - p->switch_t0_ns) / 1e6;
		p->migration_ms = (now_ns() - p->migrate_t0_ns) / 1e6;
		p->migrated = true;
		p->keep_standby = true;
		if (p->switching_over) {
			p->switched = true;
			p->migrated_told = true;   /* the standby it becomes answers status */
			log_info(TAG, "SWITCHED OVER: the secondary runs the guest from epoch %llu; "
				 "downtime %.3f ms; this VM is its standby from now on",
				 (unsigned long long)f->epoch, p->downtime_ms);
			repl_pri_link_gone(p);
			finish(p, 0);
			return -ECANCELED;
		}
		log_info(TAG, "MIGRATED: the destination runs the guest from epoch %llu; downtime %.3f "
			 "ms (the pause to its word), %llu bytes sent", (unsigned long long)f->epoch,
			 p->downtime_ms, (unsigned long long)p->link.bytes_sent);
		repl_pri_event(p, REPL_EV_MIGRATED, "the destination runs the guest");
		repl_pri_link_gone(p);
		finish(p, 0);
		return -ECANCELED;
	}
	repl_fault_set(&p->fault, REPL_FAULT_PEER_LOST, -ECANCELED,
		       "the secondary took over from epoch %llu (%s)", (unsigned long long)f->epoch,
		       f->reason);
	log_error(TAG, "%s: another copy runs the guest; this primary stops now and releases "
		  "nothing more (acknowledged: %llu)", p->fault.what, (unsigned long long)p->ep.acked);
	repl_pri_event(p, REPL_EV_FENCED, p->fault.what);
	p->keep_standby = true;     /* it owns the guest now */
	repl_pri_link_gone(p);
	finish(p, REPL_EXIT_REPLACED);
	return -ECANCELED;
}

/* True while a shortage is young enough to retry. */
static bool retry_transient(struct repl_primary *p, const struct repl_fault *f)
{
	uint64_t now = now_ns(), progress = p->ep.epoch + p->sync.batches;

	if (p->state <= P_HELLO || p->state >= P_UNPROTECTED)
		return false;
	if (!p->transient_since_ns || progress != p->transient_progress) {
		p->transient_since_ns = now;
		p->transient_progress = progress;
		p->fault = *f;
		log_warn(TAG, "%s: %s: retrying; output stays held meanwhile",
			 repl_fault_kind_name(f->kind), f->what);
	}
	return now - p->transient_since_ns <= (uint64_t)p->o->timeout_ms * 1000000ull;
}

/* The shorter of the two timeouts: a stall longer than that may have
 * cost us the secondary, or the secondary us. */
static unsigned stall_ms(const struct repl_primary *p)
{
	unsigned peer_ms = p->peer_timing.timeout_ms;

	return peer_ms && peer_ms < p->o->timeout_ms ? peer_ms : p->o->timeout_ms;
}

/* The secondary is lost right after this process stalled longer than its
 * failover timeout: it may run the guest now (its Fence did not reach us). */
static bool maybe_replaced(struct repl_primary *p, const struct repl_fault *f)
{
	uint64_t stall_ns = repl_link_stalled_ns(&p->link, stall_ms(p));

	if (f->kind != REPL_FAULT_PEER_LOST || p->state != P_PROTECTED || !p->ep.acked ||
	    stall_ns < (uint64_t)p->peer_timing.timeout_ms * 1000000ull)
		return false;
	log_error(TAG, "this process was stalled for %llu ms, longer than the secondary's failover "
		  "timeout (%u ms), and then lost it: the secondary may have taken over",
		  (unsigned long long)(stall_ns / 1000000), p->peer_timing.timeout_ms);
	return true;
}

/* A migration whose link fails once the guest is paused for the hand-over
 * (the destination died, or the link): the VM must not be lost with it.
 * The destination runs the guest only on the hand-over order (Fence
 * PRIMARY_MIGRATES) or, as any secondary, after its failover timeout of
 * silence. The guest resumes here when the order provably never reached it
 * (never sent, or dropped before the kernel had all of it, and nothing of
 * it is still queued on a live link) and this process did not stall past
 * that timeout; with a witness also whenever the key is still ours (the
 * destination cannot run without it; the vouch is withdrawn first). Else
 * the guest stays paused here (in doubt) until an operator who made sure
 * the destination does not run it says `understudy takeover`. */
static void handover_failed(struct repl_primary *p, const struct repl_fault *f)
{
	struct repl_fault what;
	bool queued = p->handover_tx && p->link.conn;
	bool stalled = !p->peer_timing.timeout_ms || repl_link_stalled_ns(&p->link, stall_ms(p)) >=
		       (uint64_t)p->peer_timing.timeout_ms * 1000000ull;
	bool safe = p->wit ? !p->resigned : !p->handover_out && !queued && !stalled;

	p->handover_tx = NULL;       /* the link's sends are dropped from here on */

	if (safe) {
		log_warn(TAG, "%s: the destination %s: the guest resumes here, UNPROTECTED",
			 f->what, p->wit ? "cannot run the guest without the witness key, which is "
			 "still ours" : "never got the hand-over order");
		p->finishing = p->final_pending = false;
		p->keep_standby = false;
		p->state = P_PROTECTED;
		drop_protection(p, f);
		machine_resume(p->vm->m);
		return;
	}
	what = *f;
	repl_fault_set(&p->fault, f->kind, f->err, "in doubt: %s after the hand-over %s", what.what,
		       p->handover_out ? "left" : queued ? "was queued" : "(a stall)");
	log_error(TAG, "MIGRATION IN DOUBT: %s: the destination may run the guest from epoch %llu. "
		  "The guest stays paused here; once the destination surely does not run it, "
		  "`understudy takeover --control` on this side resumes it here",
		  p->fault.what, (unsigned long long)p->final_epoch);
	net_notify(NET_NOTIFY_STATUS, "MIGRATION IN DOUBT: %s", p->fault.what);
	repl_event_log("in-doubt");
	p->in_doubt = true;
	p->state = P_FENCED;
	p->keep_standby = true;
	ev_timer_stop(p->loop, &p->epoch_w);
	repl_pri_link_gone(p);
	repl_pri_event(p, REPL_EV_FENCED, p->fault.what);
}

static void on_fault(struct repl_primary *p, const struct repl_fault *f)
{
	struct repl_fault fatal;

	if (repl_pc_src_switched(p) && p->state == P_SWITCHING) {
		repl_pc_src_lost(p, f);   /* neither side alone holds the VM now */
		p->keep_standby = true;
		repl_pri_link_gone(p);
		finish(p, 1);
		return;
	}
	if (f->kind == REPL_FAULT_LOCAL_TRANSIENT) {
		if (retry_transient(p, f))
			return;
		repl_fault_set(&fatal, REPL_FAULT_LOCAL_FATAL, f->err, "%s, for %llu ms", f->what,
			       (unsigned long long)((now_ns() - p->transient_since_ns) / 1000000));
		f = &fatal;
	}
	if (p->state == P_SWITCHING && !p->switching_over &&
	    (f->kind == REPL_FAULT_PEER_LOST || f->kind == REPL_FAULT_PEER_PROTOCOL)) {
		handover_failed(p, f);
		return;
	}
	/* A switchover (or a local failure) once the guest is paused for the
	 * hand-over: the secondary may take over (it has the epochs, maybe the
	 * final one), so this side never resumes: as for a local fatal failure. */
	if (p->state == P_SWITCHING || (f->kind == REPL_FAULT_LOCAL_FATAL && p->state == P_PROTECTED &&
					p->ep.acked && !p->finishing) || maybe_replaced(p, f))
		stop_for_takeover(p, f);
	else
		drop_protection(p, f);
}

static void fault(struct repl_primary *p, enum repl_fault_kind kind, int err, const char *what)
{
	struct repl_fault f;

	repl_fault_set(&f, kind, err, "%s", what);
	on_fault(p, &f);
}

/* ---- epochs --------------------------------------------------------------- */

/* 1: an epoch left; 0: it stretched; <0: failed (handled). */
static int run_epoch(struct repl_primary *p)
{
	struct repl_fault f;
	bool throttled = p->throttle_pct && !p->finishing;
	int r;

	p->epoch_t0_ns = now_ns();
	r = repl_epoch_run(&p->ep, !p->finishing && !throttled, &f);

	/* Throttled (auto-converge): the guest stays paused after the capture
	 * for throttle_pct of the epoch; on_throttle_end resumes it. */
	if (throttled && !ev_is_active(&p->throttle_w)) {
		ev_timer_set(&p->throttle_w, p->o->epoch_ms * p->throttle_pct / 1e5, 0);
		ev_timer_start(p->loop, &p->throttle_w);
	}
	if (r > 0) {
		ev_timer_stop(p->loop, &p->precopy_w);   /* this epoch came before it */
		if (repl_epoch_precopy_wanted(&p->ep)) {
			ev_timer_set(&p->precopy_w, p->o->epoch_ms / 2e3, 0);
			ev_timer_start(p->loop, &p->precopy_w);
		}
	}
	if (r < 0) {
		on_fault(p, &f);
	} else if (r > 0 && p->transient_since_ns) {
		log_info(TAG, "epoch %llu left: recovered from %s", (unsigned long long)p->ep.epoch,
			 p->fault.what);
		p->transient_since_ns = 0;
		p->fault.kind = REPL_FAULT_NONE;
	}
	return r;
}

static void on_throttle_end(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_primary *p = w->data;

	(void)loop;
	(void)revents;
	if (!p->finishing && p->state != P_FENCED)
		machine_resume(p->vm->m);
}

/* No more throttling: the guest runs freely from now on. */
static void throttle_off(struct repl_primary *p)
{
	if (p->throttle_pct)
		log_info(TAG, "auto-converge: throttle off (was %u %%)", p->throttle_pct);
	p->throttle_pct = 0;
	if (ev_is_active(&p->throttle_w)) {
		ev_timer_stop(p->loop, &p->throttle_w);
		if (!p->finishing && p->state != P_FENCED)
			machine_resume(p->vm->m);
	}
}

/* Pre-copy, half-way through a steady epoch: not in a migration or a
 * hand-over (their final epochs have rules of their own), nor while the
 * guest is throttled or stopping. */
static void on_precopy(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_primary *p = w->data;
	struct repl_fault f;

	(void)loop;
	(void)revents;
	if (p->state != P_PROTECTED || p->finishing || p->throttle_pct || p->pc ||
	    p->ep.hot_off || p->switching_over || !repl_epoch_precopy_wanted(&p->ep))
		return;
	if (repl_epoch_precopy(&p->ep, &f) < 0)
		on_fault(p, &f);
}

/* Output-triggered epochs: held output ends the epoch early (at least
 * min_epoch_ms after the last capture), and the periodic timer starts
 * over from there. */
static void early_epoch(struct repl_primary *p)
{
	ev_timer_stop(p->loop, &p->early_w);
	if (p->state != P_PROTECTED || p->finishing || p->throttle_pct)
		return;
	if (repl_pc_src_ready(p) && !p->ep.open) {   /* an open epoch closes first */
		pause_for_handover(p, true);   /* as on_epoch_timer */
		return;
	}
	(void)run_epoch(p);
	if (p->state == P_PROTECTED)
		ev_timer_again(p->loop, &p->epoch_w);
}

static void on_early(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)revents;
	early_epoch(w->data);
}

static void on_vm_output(void *ctx)
{
	struct repl_primary *p = ctx;
	uint64_t min_ns = p->min_epoch_ms * 1000000ull, age_ns;

	if (p->state != P_PROTECTED || p->finishing || p->throttle_pct ||
	    p->min_epoch_ms >= p->o->epoch_ms || ev_is_active(&p->early_w))
		return;
	age_ns = now_ns() - p->epoch_t0_ns;
	if (age_ns >= min_ns) {
		early_epoch(p);
		return;
	}
	ev_timer_set(&p->early_w, (min_ns - age_ns) / 1e9, 0);
	ev_timer_start(p->loop, &p->early_w);
}

static void on_epoch_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_primary *p = w->data;

	(void)loop;
	(void)revents;
	if (p->state == P_PROTECTED && repl_pc_src_ready(p) && !p->ep.open)
		pause_for_handover(p, true);    /* instead of the epoch: its pages go post-copy */
	else if (p->state == P_PROTECTED || p->state == P_PROTECTING)
		(void)run_epoch(p);
}

static void try_final_epoch(struct repl_primary *p)
{
	int r;

	if (!p->final_pending)
		return;
	r = run_epoch(p);
	if (r == 0 || (r < 0 && p->state != P_UNPROTECTED && p->state != P_DONE))
		return;               /* stretched (no free slot yet) or retrying */
	p->final_pending = false;
	p->final_epoch = r > 0 ? p->ep.epoch : 0;
	if (p->state == P_SWITCHING && p->final_epoch)
		send_handover(p);
}

/* ---- migration: the hand-over to the secondary ------------------------------ */

/* The final epoch left: the secondary takes over as soon as it holds it. */
static void send_handover(struct repl_primary *p)
{
	int r;

	if (!p->switching_over && !repl_pc_src_switched(p)) {
		/* Test hook: the guest paused, the final epoch queued, the order
		 * next (sys_migrate_handover kills the destination here). */
		repl_fault_test_stop("paused");
		/* A destination that closed its end never reads the order: it is
		 * not sent, and the link's end, read next after anything the
		 * destination said before, decides (handover_failed). */
		if (p->link.conn && net_peer_closed(p->link.conn)) {
			log_warn(TAG, "migration: the destination closed the connection before the "
				 "hand-over order (epoch %llu) was sent: not sent",
				 (unsigned long long)p->final_epoch);
			return;
		}
	}
	/* A switchover: nothing more leaves here; the new primary replays the
	 * output past this mark (no line twice, none lost). */
	if (p->switching_over)
		p->ep.hold_output = true;
	/* With a witness, the standby this VM becomes is vouched for in the
	 * transaction that gives the key to the new primary: if that one dies
	 * before it protects the guest, this copy may take over. */
	if (p->switching_over && p->wit && !p->switch_token[0])
		repl_witness_new_token(p->switch_token, sizeof(p->switch_token));
	r = p->switching_over ?
		repl_send_switch(&p->link, p->final_epoch, p->switch_listen,
				 p->wit ? p->switch_token : NULL, repl_vm_released(p->vm),
				 (now_ns() - p->switch_t0_ns) / 1000) :
		repl_send_fence(&p->link, UNDERSTUDY__FENCE_ACTION__FENCE_PRIMARY_MIGRATES,
				p->final_epoch, "migration: the guest is handed over");

	if (r == 0 && !p->switching_over)
		p->handover_tx = p->link.owned;   /* the newest of the link's sends */
	if (r < 0)
		fault(p, repl_fault_send(r), r, "cannot send the hand-over");
	else
		log_info(TAG, "migration: final epoch %llu sent, %.3f ms after the pause; the "
			 "destination takes over once it holds it", (unsigned long long)p->final_epoch,
			 (now_ns() - p->switch_t0_ns) / 1e6);
}

#define SYNC_BW_MIN_BYTES (16ull << 20)

/* The decision's inputs (converge.h): the pause, the link's round trip (the
 * smallest an epoch showed), the last epoch's bytes at the link's bandwidth
 * (measured by the initial sync, capped by --bandwidth). Without one, the
 * last epoch's capture-to-ACK time beyond the smallest counts as its bytes. */
static void converge_inputs(const struct repl_primary *p, struct repl_converge *c)
{
	uint64_t p50, p99;
	double cap = repl_pc_src_cap_bytes_per_ms(p), lag_ms = p->ep.st.lag_ns / 1e6;

	repl_stats_pause_pct(&p->ep.st, &p50, &p99);
	c->pause_ms = p50 / 1e6;
	c->bytes = (double)p->ep.st.lag_bytes;
	c->target_ms = p->migrate_ms;
	c->bytes_per_ms = p->link_bytes_per_ms;
	if (cap > 0 && (c->bytes_per_ms <= 0 || cap < c->bytes_per_ms))
		c->bytes_per_ms = cap;
	c->rtt_ms = p->rtt_ms >= 0 && p->rtt_ms < lag_ms ? p->rtt_ms : lag_ms;
	if (c->bytes_per_ms <= 0) {
		/* Bandwidth not known: the smallest capture-to-ACK time an epoch
		 * showed is the floor, what the last one took beyond it its bytes. */
		c->bytes_per_ms = lag_ms > c->rtt_ms && c->bytes > 0 ?
				  c->bytes / (lag_ms - c->rtt_ms) : 0;
	}
}

/* An ACK: the round trip this epoch shows, the smallest kept. */
static void note_rtt(struct repl_primary *p)
{
	double cap = repl_pc_src_cap_bytes_per_ms(p), bw = p->link_bytes_per_ms, rtt;

	if (cap > 0 && (bw <= 0 || cap < bw))
		bw = cap;
	rtt = repl_converge_rtt_sample(p->ep.st.lag_ns / 1e6, (double)p->ep.st.lag_bytes, bw);
	if (p->rtt_ms < 0 || rtt < p->rtt_ms)
		p->rtt_ms = rtt;
}

static void maybe_switch(struct repl_primary *p)
{
	struct repl_converge c;
	double predicted_ms, goal_ms;
	enum repl_converge_step step;

	if (p->wit && !p->vouched)
		return;                  /* the destination could not win the key yet */
	converge_inputs(p, &c);
	step = repl_converge_decide(&c, &predicted_ms, &goal_ms);
	p->predicted_ms = predicted_ms;
	if (p->switching_over) {
		log_info(TAG, "switchover: pausing the guest for the final epoch after epoch %llu "
			 "(predicted downtime %.2f ms); the secondary takes over and this VM becomes "
			 "its standby at %s", (unsigned long long)p->ep.epoch, predicted_ms,
			 p->switch_listen);
	} else if (step == REPL_CONVERGE_THROTTLE) {
		if (repl_pc_src_due(p)) {
			log_info(TAG, "migration: predicted downtime %.2f ms > %.2f ms after %llu epochs: "
				 "post-copy at the next epoch the link has room for", predicted_ms,
				 goal_ms, (unsigned long long)p->ep.epoch);
			return;
		}
		if (!p->auto_converge || ++p->converge_misses < 8 || p->throttle_pct >= 99)
			return;
		p->converge_misses = 0;
		p->throttle_pct = p->throttle_pct ? p->throttle_pct + 10 : 20;
		if (p->throttle_pct > 99)
			p->throttle_pct = 99;
		log_info(TAG, "auto-converge: predicted downtime %.2f ms > %.2f ms (pause %.2f + round "
			 "trip %.2f + %.0f bytes of the last epoch %.2f ms): throttle %u %%", predicted_ms,
			 goal_ms, c.pause_ms, c.rtt_ms, c.bytes, predicted_ms - c.pause_ms - c.rtt_ms,
			 p->throttle_pct);
		return;
	} else {
		if (goal_ms > p->migrate_ms)
			log_info(TAG, "migration: the pause and one round trip alone take %.2f ms, more "
				 "than half of the %u ms asked for: the hand-over waits only for the guest's "
				 "writes to fit in half of it", c.pause_ms + c.rtt_ms, p->migrate_ms);
		log_info(TAG, "migration: predicted downtime %.2f ms <= %.2f ms after %llu epochs "
			 "(pause %.2f + round trip %.2f + last epoch %.2f ms): pausing the guest for "
			 "the final epoch (from here on it cannot be cancelled)", predicted_ms, goal_ms,
			 (unsigned long long)p->ep.epoch, c.pause_ms, c.rtt_ms,
			 predicted_ms - c.pause_ms - c.rtt_ms);
	}
	pause_for_handover(p, false);
}

/* The guest is paused for good; post-copy first names the stale pages. */
static void pause_for_handover(struct repl_primary *p, bool postcopy)
{
	int r;

	repl_event_log("switch");
	p->state = P_SWITCHING;
	p->keep_standby = true;      /* from here on the destination may take over */
	p->switch_t0_ns = now_ns();
	ev_timer_stop(p->loop, &p->epoch_w);
	p->finishing = true;         /* the final capture does not resume the guest */
	p->final_pending = true;
	throttle_off(p);
	if (postcopy && (r = repl_pc_src_announce(p)) < 0) {
		fault(p, repl_fault_send(r), r, "post-copy: the stale pages could not be named");
		return;
	}
	try_final_epoch(p);
}

/* After this process stalled past the secondary's failover timeout, the
 * secondary may run the guest already: ACKs it sent before deciding (read
 * now, before its Fence) release nothing until it acknowledges an epoch
 * captured after the stall, which a secondary that took over never does. */
static void hold_after_stall(struct repl_primary *p, uint64_t epoch)
{
	uint64_t now = now_ns(), window = 2ull * stall_ms(p) * 1000000ull;

	if (!p->release_after && p->peer_timing.timeout_ms && now - p->stall_seen_ns > window &&
	    repl_link_stalled_ns(&p->link, stall_ms(p)) >=
	    (uint64_t)p->peer_timing.timeout_ms * 1000000ull) {
		p->stall_seen_ns = now;
		p->release_after = p->ep.epoch + 1;
		p->ep.hold_output = true;
		log_warn(TAG, "stalled past the secondary's failover timeout: output stays held until "
			 "it acknowledges epoch %llu (captured after the stall)",
			 (unsigned long long)p->release_after);
	}
	if (p->release_after && epoch >= p->release_after) {
		p->release_after = 0;
		p->ep.hold_output = p->switching_over;   /* a switchover keeps it held */
	}
}

static void on_ack(struct repl_primary *p, uint64_t epoch)
{
	hold_after_stall(p, epoch);
	if (!repl_epoch_ack(&p->ep, epoch))
		return;
	note_rtt(p);
	if (p->state == P_PROTECTING) {
		p->state = P_PROTECTED;
		log_info(TAG, "protected: secondary holds epoch %llu, %.1f ms after sync began",
			 (unsigned long long)epoch, (now_ns() - p->sync.t0_ns) / 1e6);
		net_notify(NET_NOTIFY_READY, "protected by %s (epoch %llu acknowledged)", p->o->peer,
			   (unsigned long long)epoch);
		repl_pri_event(p, REPL_EV_PROTECTED, "the secondary holds the first checkpoint");
		if (p->wit) {
			p->vouch_asked = true;
			repl_witness_vouch(p->wit, p->standby_token);
		}
	}
	try_final_epoch(p);
	if (p->state == P_SWITCHING) {
		if (p->final_epoch && p->ep.acked >= p->final_epoch && p->wit) {
			/* The destination may win the key: give it up without waiting
			 * (nothing leaves here from now on: the lease gate is shut). */
			ev_timer_stop(p->loop, &p->lease_w);
			p->resigned = true;
			repl_witness_resign(p->wit);
		}
		return;
	}
	if (p->finishing && !p->final_pending && p->final_epoch && p->ep.acked >= p->final_epoch)
		finish(p, p->exit_status);
	else if ((p->migrate_ms || p->switching_over) && p->state == P_PROTECTED && !p->finishing)
		maybe_switch(p);
}

/* ---- initial sync ------------------------------------------------------------ */

static void on_sync_done(void *ctx)
{
	struct repl_primary *p = ctx;
	double ms = (now_ns() - p->sync.t0_ns) / 1e6;

	/* What the link carried while the sync filled it: its bandwidth, when
	 * the sync was big enough to fill it (a guest of zero pages sends a few
	 * bytes a page, and its sync is bound by the CPU, not the link). */
	if (!p->o->resume_epoch && ms > 0 && p->link.bytes_sent - p->sync_bytes0 >= SYNC_BW_MIN_BYTES)
		p->link_bytes_per_ms = (double)(p->link.bytes_sent - p->sync_bytes0) / ms;
	p->state = P_PROTECTING;
	p->transient_since_ns = 0;
	(void)run_epoch(p);
	if (p->state == P_PROTECTING)
		ev_timer_start(p->loop, &p->epoch_w);
}

static void on_sync_failed(void *ctx, const struct repl_fault *f)
{
	on_fault(ctx, f);
}

static void start_sync(struct repl_primary *p)
{
	struct repl_fault f;

	p->sync_bytes0 = p->link.bytes_sent;
	if (repl_sync_start(&p->sync, &f) < 0) {
		on_fault(p, &f);
		return;
	}
	p->state = P_SYNC;
	net_notify(NET_NOTIFY_STATUS, "initial sync to %s", p->o->peer);
}

/* ---- link callbacks ---------------------------------------------------------- */

/* The beat side channel (replication.h): a fresh key to the secondary,
 * then beats. Without it (logged), silence is judged on the stream alone. */
static void beat_begin(struct repl_primary *p)
{
	uint8_t key[REPL_BEAT_KEY_BYTES];
	int r = repl_beat_key_new(key);

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
		on_sync_done(p);
		return 0;
	}
	start_sync(p);
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
	repl_pri_link_gone(p);
	finish(p, 0);
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
		on_ack(p, ((Understudy__Ack *)msg)->epoch);
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
		r = on_fence(p, (Understudy__Fence *)msg);
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
	char cfgtext[512];
	int n = proto_config_encode(&p->vm->m->cfg, cfgtext, sizeof(cfgtext)), r = n;

	(void)c;
	p->state = P_HELLO;
	p->link.last_rx_ns = p->link.up_ns = now_ns();
	if (n < 0 ||
	    (r = repl_send_hello_resume(&p->link, UNDERSTUDY__ROLE__ROLE_PRIMARY, &p->o->cfg,
					&p->timing, p->o->witness.key, NULL, p->o->resume_epoch)) < 0 ||
	    (!p->o->resume_epoch &&
	     (r = repl_link_send_section(&p->link, PROTO_SECTION_MACHINE_CONFIG, cfgtext, (size_t)n)) < 0))
		fault(p, repl_fault_send(r), r, "cannot send hello");
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
		on_fault(p, &p->rx_fault);
	} else if (r == -ECONNREFUSED) {
		fault(p, REPL_FAULT_PEER_PROTOCOL, r, "refused by the secondary");
	} else if (r == -ENOMEM) {
		/* The decoder stops for good: this link cannot be read any more. */
		fault(p, REPL_FAULT_LOCAL_FATAL, r, "out of memory reading from the secondary");
	} else {
		log_error(TAG, "bad data from the secondary: %s", proto_strerror(r));
		repl_fault_set(&p->rx_fault, REPL_FAULT_PEER_PROTOCOL, r, "protocol error: %s",
			       proto_strerror(r));
		on_fault(p, &p->rx_fault);
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
		engine_done(p);
		return;
	}
	if (p->state == P_FENCED) {
		repl_pri_link_gone(p);
		return;
	}
	if (p->state == P_UNPROTECTED) {
		log_info(TAG, "link to the secondary closed after the goodbye (%s)",
			 reason ? strerror(-reason) : "delivered");
		repl_pri_link_gone(p);
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
	fault(p, REPL_FAULT_PEER_LOST, reason, why);
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
		fault(p, REPL_FAULT_PEER_LOST, r, "cannot connect to the old primary's standby");
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
	fault(p, REPL_FAULT_PEER_LOST, -ETIMEDOUT, why);
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
	stall_ns = repl_link_tick(&p->link, stall_ms(p));
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
		fault(p, REPL_FAULT_PEER_LOST, -ETIMEDOUT, why);
		return;
	}
	if ((r = repl_send_epoch_msg(&p->link, PROTO_T_HEARTBEAT, p->ep.epoch)) < 0)
		fault(p, repl_fault_send(r), r, "heartbeat could not be sent");
}

static void finish(struct repl_primary *p, int status)
{
	if (p->state == P_DONE)
		return;
	if (p->in_doubt)
		status = REPL_EXIT_REPLACED;   /* the destination may run the guest */
	if (p->link.conn && p->state >= P_SYNC && p->state != P_UNPROTECTED &&
	    p->state != P_SWITCHING) {
		if (repl_send_fence(&p->link, UNDERSTUDY__FENCE_ACTION__FENCE_PRIMARY_STOPS, p->ep.acked,
				    "primary shutting down: the guest stopped") < 0)
			log_warn(TAG, "could not tell the secondary we stop");
	}
	p->state = P_DONE;
	p->exit_status = status;
	ev_timer_stop(p->loop, &p->epoch_w);
	repl_sync_stop(&p->sync);
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
	engine_done(p);
}

static void on_finish_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_primary *p = w->data;

	(void)loop;
	(void)revents;
	if (p->state == P_DONE) {
		engine_done(p);          /* the goodbye did not leave in time */
		return;
	}
	log_warn(TAG, "no ACK for the last epoch: stopping anyway");
	finish(p, p->exit_status);
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
		fault(p, REPL_FAULT_LOCAL_FATAL, r, "rebooting the guest");
		finish(p, 1);
		return true;
	}
	if (epochs) {
		p->ep.reboot = true;
		proto_page_enc_reset(p->ep.enc);
		if (p->ep.open)
			ckpt_requeue(m, &p->ep.pre);
	} else if (p->state == P_SYNC) {
		if (!(all = malloc(machine_bitmap_words(m) * sizeof(uint64_t)))) {
			fault(p, REPL_FAULT_LOCAL_FATAL, -ENOMEM, "rebooting the guest");
			finish(p, 1);
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
	if (p->state == P_SWITCHING) {
		log_warn(TAG, "the guest is being handed over: the signal waits for the outcome");
		return;
	}
	if (p->state == P_FENCED) {
		finish(p, REPL_EXIT_REPLACED);   /* the guest is paused for good */
		return;
	}
	machine_stop(p->vm->m, 0);
}

/* ---- setup ------------------------------------------------------------------ */

/* The engine on p->vm (running or about to): link, epochs, sync, connect. */
static int engine_init(struct repl_primary *p)
{
	int r;

	p->vm->on_stopped = on_vm_stopped;
	p->vm->on_output = on_vm_output;
	p->vm->cb_ctx = p;
	p->min_epoch_ms = p->o->min_epoch_ms ? p->o->min_epoch_ms : REPL_MIN_EPOCH_MS;
	p->rtt_ms = -1;
	repl_vm_set_gated(p->vm, true);
	repl_link_init(&p->link, PROTO_MAX_PAYLOAD_DEFAULT);
	if ((r = repl_epochs_init(&p->ep, p->vm, &p->link, getenv("UNDERSTUDY_VERIFY") != NULL)) < 0 ||
	    (r = repl_sync_init(&p->sync, p->loop, p->vm, &p->link, p->ep.enc)) < 0)
		return r;
	p->sync.disk = &p->ep.disk;
	p->sync.done = on_sync_done;
	p->sync.failed = on_sync_failed;
	p->sync.ctx = p;
	r = net_connect(p->loop, &p->o->net, p->o->peer, &conn_ops, p, &p->link.conn);
	if (r < 0)
		log_error(TAG, "cannot connect to the secondary at %s: %s", p->o->peer, strerror(-r));
	return r;
}

static void engine_start(struct repl_primary *p)
{
	ev_timer_start(p->loop, &p->hb_w);
	if (p->wit)
		ev_timer_start(p->loop, &p->lease_w);
	handshake_start(p);
	p->link.last_tick_ns = now_ns();   /* the stall check starts now, not at setup */
}

static void engine_fini(struct repl_primary *p)
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

char *repl_primary_migrate_request(struct repl_primary *p, const char *req)
{
	struct repl_primary_opts o;
	char *copy = strdup(req), err[256], *reply = NULL;
	const char *why;
	int r;

	if (!copy)
		return NULL;
	r = repl_protect_parse(copy, &o, err, sizeof(err));
	if (r == 0 && (why = repl_protect_refusal(&o, p->vm->m))) {
		snprintf(err, sizeof(err), "%s", why);
		r = -EINVAL;
	}
	if (r == 0 && strcmp(o.peer, p->o->peer)) {
		snprintf(err, sizeof(err), "the VM is protected by %s: it hands over only to that "
			 "secondary (understudy migrate drops it first when the destination is another)",
			 p->o->peer);
		r = -EINVAL;
	}
	if (r == 0 && p->state != P_PROTECTED && p->state != P_PROTECTING) {
		snprintf(err, sizeof(err), "the VM is %s, not protected", repl_primary_state(p));
		r = -EINVAL;
	}
	if (r == 0 && (o.bandwidth_mib || o.postcopy_after) &&
	    (r = repl_pc_src_new(p, o.bandwidth_mib, o.postcopy_after)) < 0)
		snprintf(err, sizeof(err), "cannot set the migration up: %s", strerror(-r));
	if (r == 0)
		repl_primary_migrate(p, o.migrate_downtime_ms, !o.no_auto_converge);
	free(copy);
	if (asprintf(&reply, r == 0 ? "ok migrating to %s\n" : "error %s\n", r == 0 ? p->o->peer : err) < 0)
		return NULL;
	return reply;
}

static char *control_text(void *ctx, const char *req)
{
	char *reply;

	if (!strcmp(req, "takeover") && (reply = repl_primary_resume_request(ctx)))
		return reply;
	if (!strncmp(req, "migrate ", 8))
		return repl_primary_migrate_request(ctx, req);
	if (!strcmp(req, "cancel"))
		return strdup("error a primary agent keeps the secondary it was started with (--peer): "
			      "it migrates only to that one (start the VM with run, then protect, to move "
			      "it anywhere)\n");
	if (!strncmp(req, "switchover", 10) && (!req[10] || req[10] == ' '))
		return repl_switchover_request(ctx, req);
	if (!strncmp(req, "test wedge ", 11))
		return repl_fault_test_wedge(req + 11);
	if (!strncmp(req, "status", 6))
		return repl_primary_status_text(ctx, req);
	return control_reply_unknown(req, "status, migrate, cancel, switchover");
}

/* repl_primary_run: the VM, its witness and control socket are the engine's. */
static int setup(struct repl_primary *p)
{
	int r;

	if ((r = repl_pri_witness_setup(p)) < 0)
		return r;
	if ((r = repl_vm_new(p->loop, &p->o->cfg, p->o->console, &p->vm)) < 0)
		return r;
	p->vm->witness = p->wit;
	repl_vm_set_gated(p->vm, true);
	if ((r = repl_vm_boot(p->vm)) < 0)
		return r;
	/* Loading a Linux kernel and initrd can take seconds: the loop's clock,
	 * read before, would start the connect and handshake deadlines late. */
	ev_now_update(p->loop);
	if (p->o->control &&
	    (r = control_open(p->loop, p->o->control, control_text, p, &p->ctl)) < 0)
		return r;
	return engine_init(p);
}

static void watchers_init(struct repl_primary *p)
{
	const struct repl_primary_opts *o = p->o;

	ev_timer_init(&p->epoch_w, on_epoch_timer, o->epoch_ms / 1e3, o->epoch_ms / 1e3);
	ev_timer_init(&p->hb_w, on_hb, 0.01, repl_heartbeat_interval(o->timeout_ms));
	ev_timer_init(&p->finish_w, on_finish_timeout, 2.0, 0);
	ev_timer_init(&p->linger_w, on_linger, 1.5, 0);
	ev_timer_init(&p->throttle_w, on_throttle_end, 0.01, 0);
	ev_timer_init(&p->reconnect_w, on_reconnect, 0.02, 0);
	ev_timer_init(&p->early_w, on_early, 0.002, 0);
	ev_timer_init(&p->precopy_w, on_precopy, 0.001, 0);
	p->linger_w.data = p->throttle_w.data = p->reconnect_w.data = p->early_w.data = p;
	p->precopy_w.data = p;
	ev_timer_init(&p->goodbye_w, on_goodbye_timeout, 10.0, 0);
	/* Silence is judged after pending reads are handled: libev runs higher
	 * priorities first, so a stall of our own loop is not the peer's. */
	ev_set_priority(&p->hb_w, EV_MINPRI);
	ev_timer_init(&p->handshake_w, handshake_check, o->handshake_timeout_ms / 10e3,
		      o->handshake_timeout_ms / 10e3);
	ev_set_priority(&p->handshake_w, EV_MINPRI);
	ev_timer_init(&p->lease_w, repl_pri_lease_check, 0.005, 0.005);
	ev_signal_init(&p->sigint_w, on_signal, SIGINT);
	ev_signal_init(&p->sigterm_w, on_signal, SIGTERM);
	p->epoch_w.data = p->hb_w.data = p->finish_w.data = p->goodbye_w.data = p;
	p->handshake_w.data = p->lease_w.data = p;
	p->sigint_w.data = p->sigterm_w.data = p;
}

int repl_primary_run(struct ev_loop *loop, const struct repl_primary_opts *o)
{
	struct repl_switch sw;
	struct repl_vm *vm = NULL;
	int status = repl_primary_run_switch(loop, o, &vm, &sw);

	if (vm) {                   /* nobody to hand it to: it stops here */
		machine_stop(vm->m, 0);
		repl_vm_free(vm);
	}
	return status;
}

int repl_primary_run_switch(struct ev_loop *loop, const struct repl_primary_opts *o,
			    struct repl_vm **vm, struct repl_switch *sw)
{
	struct repl_primary *p = calloc(1, sizeof(*p));
	int status, r;

	*vm = NULL;
	if (!p)
		return 1;
	p->o = o;
	p->loop = loop;
	p->state = P_CONNECTING;
	repl_metrics_watch_primary(o->ops.metrics, p);
	repl_timing_init(&p->timing, o->timeout_ms, o->epoch_ms);
	watchers_init(p);
	if ((r = setup(p)) < 0) {
		status = r == -EBUSY && p->wit ? REPL_EXIT_STANDBY_VOUCHED : 1;
		goto out;
	}
	ev_signal_start(p->loop, &p->sigint_w);
	ev_signal_start(p->loop, &p->sigterm_w);
	if (p->wit)
		log_info(TAG, "fencing: " REPL_FENCING_WITNESS " (key %s, lease %u ms): output leaves "
			 "only while the lease is provably valid", o->witness.key, o->witness.lease_ms);
	else
		log_info(TAG, "fencing: " REPL_FENCING);
	net_notify(NET_NOTIFY_STATUS, "connecting to the secondary at %s", o->peer);
	engine_start(p);
	repl_vm_mark_running(p->vm);
	machine_resume(p->vm->m);
	ev_run(p->loop, 0);
	status = p->exit_status;
	if (!p->switched)   /* switched over: this process goes on as the standby */
		net_notify(NET_NOTIFY_STOPPING, "stopping (exit status %d): %s", status, p->migrated ?
			   "migrated" : p->fault.kind ? p->fault.what : "the guest stopped");
out:
	ev_signal_stop(p->loop, &p->sigint_w);
	ev_signal_stop(p->loop, &p->sigterm_w);
	engine_fini(p);
	control_free(p->ctl);
	if (p->vm && repl_primary_switched(p, sw)) {
		/* Paused at the final epoch, which the new primary holds too. */
		p->vm->on_stopped = NULL;
		p->vm->on_output = NULL;
		p->vm->cb_ctx = NULL;
		*vm = p->vm;
		p->vm = NULL;
		/* The key went to the new primary (resigned at the final ACK); the
		 * same witness serves the standby this process becomes. */
		sw->witness = o->witness;
		sw->wit = p->wit;
		p->wit = NULL;
	}
	if (p->vm) {
		machine_stop(p->vm->m, 0);
		machine_pause(p->vm->m);
	}
	repl_vm_free(p->vm);        /* what it still releases passes the lease gate */
	if (p->wit) {
		repl_witness_release(p->wit, !p->keep_standby);
		repl_witness_free(p->wit);
	}
	repl_metrics_watch_primary(o->ops.metrics, NULL);
	free(p);
	return status;
}

/* ---- on a host's running VM (understudy protect) ------------------------------- */

/* Copies src into the engine's own storage (slot i); NULL stays NULL. */
static const char *own_string(struct repl_primary *p, int i, const char *src)
{
	if (!src)
		return NULL;
	snprintf(p->own_strings[i], sizeof(p->own_strings[i]), "%s", src);
	return p->own_strings[i];
}

int repl_primary_attach(struct ev_loop *loop, struct repl_vm *vm, struct repl_witness *wit,
			const struct repl_primary_opts *o, const struct repl_primary_host *host,
			struct repl_primary **out)
{
	const char *why = repl_protect_refusal(o, vm->m);
	struct repl_primary *p;
	int r;

	if (why) {
		log_error(TAG, "%s", why);
		return -EINVAL;
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->attached = true;
	p->own = *o;
	p->own.peer = own_string(p, 0, o->peer);
	p->own.net.cert = own_string(p, 1, o->net.cert);
	p->own.net.key = own_string(p, 2, o->net.key);
	p->own.net.ca = own_string(p, 3, o->net.ca);
	p->own.net.peer_name = own_string(p, 4, o->net.peer_name);
	p->own.net.rdma_provider = own_string(p, 5, o->net.rdma_provider);
	p->own.home_listen = own_string(p, 6, o->home_listen);
	p->own.control = p->own.console = NULL;
	p->own.cfg = vm->m->cfg;     /* what the secondary builds its standby from */
	p->own.witness = (struct repl_witness_opts){ .key = wit ? repl_witness_key(wit) : NULL };
	p->o = &p->own;
	p->loop = loop;
	p->vm = vm;
	p->wit = wit;
	/* Resuming after a switchover: the key was won with the old primary's
	 * standby vouched for (secondary/takeover.c), so it is withdrawn before
	 * anything this side produces leaves unprotected. */
	p->vouch_asked = wit && o->resume_epoch;
	p->host = *host;
	p->state = P_CONNECTING;
	p->attach_t0_ns = now_ns();
	p->migrate_ms = o->migrate_downtime_ms;
	p->migrate_t0_ns = p->attach_t0_ns;
	p->auto_converge = !o->no_auto_converge;
	p->host_stopped = vm->on_stopped;
	p->host_stopped_ctx = vm->cb_ctx;
	repl_timing_init(&p->timing, p->o->timeout_ms, p->o->epoch_ms);
	watchers_init(p);
	/* Logged first: a migration's total time counts the setup below. */
	log_info(TAG, "protecting the running VM: connecting to the secondary at %s", p->o->peer);
	if ((r = engine_init(p)) < 0) {
		engine_fini(p);
		vm->on_stopped = p->host_stopped;
		vm->on_output = NULL;
		vm->cb_ctx = p->host_stopped_ctx;
		repl_vm_set_gated(vm, false);
		free(p);
		return r;
	}
	if ((o->bandwidth_mib || o->postcopy_after) &&
	    (r = repl_pc_src_new(p, o->bandwidth_mib, o->postcopy_after)) < 0) {
		engine_fini(p);
		vm->on_stopped = p->host_stopped;
		vm->cb_ctx = p->host_stopped_ctx;
		repl_vm_set_gated(vm, false);
		free(p);
		return r;
	}
	repl_pri_witness_attach(p);
	p->ep.hot_off = p->migrate_ms != 0;
	repl_metrics_watch_primary(p->o->ops.metrics, p);
	engine_start(p);
	*out = p;
	return 0;
}

void repl_primary_detach(struct repl_primary *p)
{
	bool release;

	if (!p)
		return;
	/* Held output of epochs the secondary may not hold never leaves; before
	 * the first checkpoint nothing was protected, so nothing is held back.
	 * With a witness, not before the standby's vouch is withdrawn. */
	release = (p->state < P_PROTECTING || p->state == P_UNPROTECTED) &&
		  !(p->wit && p->vouch_asked && !p->withdrawn);
	repl_pri_witness_detach(p);
	if (p->link.conn && p->state >= P_SYNC && p->state < P_UNPROTECTED &&
	    repl_send_fence(&p->link, UNDERSTUDY__FENCE_ACTION__FENCE_PRIMARY_STOPS, p->ep.acked,
			    "protection detached") < 0)
		log_warn(TAG, "could not tell the secondary we stop");
	engine_fini(p);
	p->vm->on_stopped = p->host_stopped;
	p->vm->on_output = NULL;
	p->vm->cb_ctx = p->host_stopped_ctx;
	if (release)
		repl_vm_set_gated(p->vm, false);
	repl_metrics_watch_primary(p->o->ops.metrics, NULL);
	free(p);
}

void repl_primary_cancel(struct repl_primary *p)
{
	struct repl_fault f;

	p->migrate_ms = 0;
	p->ep.hot_off = false;
	repl_fault_set(&f, REPL_FAULT_PEER_LOST, -ECANCELED, "cancelled by the operator");
	drop_protection(p, &f);
}

void repl_primary_migrate(struct repl_primary *p, unsigned downtime_ms, bool auto_converge)
{
	p->migrate_ms = downtime_ms;
	p->ep.hot_off = true;
	p->migrate_t0_ns = now_ns();
	p->auto_converge = auto_converge;
	log_info(TAG, "migration to the secondary asked for: hand-over once the predicted downtime "
		 "is at most %u ms", downtime_ms);
}

char *repl_primary_resume_request(struct repl_primary *p)
{
	if (!p->in_doubt)
		return NULL;
	if (p->wit && p->resigned)
		return strdup("error the witness key was given up for the destination: it may win "
			      "it; restart this VM from a copy instead\n");
	log_warn(TAG, "takeover asked: the destination does not run the guest (the operator says "
		 "so); the guest resumes here from epoch %llu, UNPROTECTED",
		 (unsigned long long)p->final_epoch);
	p->in_doubt = p->finishing = p->keep_standby = false;
	p->state = P_UNPROTECTED;
	repl_pri_event(p, REPL_EV_UNPROTECTED, "resumed after a migration in doubt");
	net_notify(NET_NOTIFY_STATUS, "UNPROTECTED: resumed after a migration in doubt");
	repl_vm_set_gated(p->vm, false);
	machine_resume(p->vm->m);
	return strdup("ok took over: the guest runs here, unprotected\n");
}

bool repl_primary_replaceable(const struct repl_primary *p)
{
	return p->state == P_UNPROTECTED && !p->link.conn && !p->migrated &&
	       !(p->wit && p->vouch_asked && !p->withdrawn);
}

bool repl_primary_protecting(const struct repl_primary *p)
{
	return p->state < P_UNPROTECTED;
}

bool repl_primary_keeps_standby(const struct repl_primary *p)
{
	return p->keep_standby;
}

int repl_primary_switchover(struct repl_primary *p, const char *listen, char *err, size_t errlen)
{
	const char *why = NULL;
	char host[256];
	int port;

	/* As the command line's --listen: the new primary connects there, so a
	 * port 0 (a port nobody knows) would leave it unprotected for good. */
	if (!listen || !listen[0] || strlen(listen) >= sizeof(p->switch_listen))
		why = "listen=HOST:PORT is needed: where this VM waits as the new standby";
	else if (net_parse_host_port(listen, false, host, sizeof(host), &port) == -ERANGE)
		why = "listen=HOST:PORT: bad port, need 1..65535";
	else if (net_parse_host_port(listen, false, host, sizeof(host), &port) < 0)
		why = "listen=HOST:PORT: need HOST:PORT";
	else if (p->state != P_PROTECTED)
		why = "the VM is not protected (a switchover needs a standby that holds an epoch)";
	else if (p->migrate_ms || p->switching_over || p->finishing)
		why = "a migration or switchover is already under way";
	if (why) {
		snprintf(err, errlen, "%s", why);
		return -EINVAL;
	}
	snprintf(p->switch_listen, sizeof(p->switch_listen), "%s", listen);
	p->switching_over = true;
	p->ep.hot_off = true;
	p->migrate_t0_ns = now_ns();
	log_info(TAG, "switchover asked: the secondary takes the guest over at the next epoch; "
		 "this VM then waits at %s as its standby", listen);
	return 0;
}

char *repl_switchover_request(struct repl_primary *p, const char *req)
{
	char listen[128] = "", err[256], *reply = NULL;
	int r = -EINVAL, end = 0;

	if (sscanf(req, "switchover listen=%127s%n", listen, &end) != 1 || req[end])
		snprintf(err, sizeof(err), "usage: switchover listen=HOST:PORT");
	else
		r = repl_primary_switchover(p, listen, err, sizeof(err));
	if (asprintf(&reply, r == 0 ? "ok switching over: standby at %s\n" : "error %s\n",
		     r == 0 ? listen : err) < 0)
		return NULL;
	return reply;
}

bool repl_primary_switched(const struct repl_primary *p, struct repl_switch *sw)
{
	const struct net_config *n = &p->o->net;
	const char *strs[5] = { n->cert, n->key, n->ca, n->peer_name, n->rdma_provider };
	const char **dst[5];

	if (!p->switched)
		return false;
	memset(sw, 0, sizeof(*sw));
	sw->epoch = p->final_epoch;
	snprintf(sw->listen, sizeof(sw->listen), "%s", p->switch_listen);
	snprintf(sw->token, sizeof(sw->token), "%s", p->switch_token);
	sw->downtime_ms = p->downtime_ms;
	sw->bytes_sent = p->link.bytes_sent;
	sw->net = *n;
	dst[0] = &sw->net.cert;
	dst[1] = &sw->net.key;
	dst[2] = &sw->net.ca;
	dst[3] = &sw->net.peer_name;
	dst[4] = &sw->net.rdma_provider;
	for (int i = 0; i < 5; i++) {
		*dst[i] = NULL;
		if (strs[i]) {
			snprintf(sw->str[i], sizeof(sw->str[i]), "%s", strs[i]);
			*dst[i] = sw->str[i];
		}
	}
	sw->timeout_ms = p->o->timeout_ms;
	sw->handshake_timeout_ms = p->o->handshake_timeout_ms;
	/* The VM's own image goes on as the standby's: the epochs' blocks are
	 * written to it from the switch epoch on (no resync). */
	snprintf(sw->disk, sizeof(sw->disk), "%s", p->vm->m->cfg.ndisks ? p->vm->m->cfg.disk : "");
	return true;
}

void repl_switch_secondary_opts(const struct repl_switch *sw, const char *control,
				struct repl_secondary_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->listen = sw->listen;
	o->control = control;
	o->net = sw->net;
	o->timeout_ms = sw->timeout_ms;
	o->handshake_timeout_ms = sw->handshake_timeout_ms;
	o->witness = sw->witness;
	o->disk = sw->disk[0] ? sw->disk : NULL;
}
