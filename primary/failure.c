/* The primary engine's failures and its end (engine.c says the policy per
 * kind of failure): a fault is classified (on_fault), protection dropped
 * with a goodbye, or the engine stopped (finish). Calls nothing above it
 * (cycle.c, engine.c, run.c call in). */
#include "primary/primary_int.h"
#include "primary/converge.h"

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

/* A migrated source stays a moment, so that `understudy migrate` reads
 * its summary from status. */
void repl_primary_on_linger(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_primary *p = w->data;

	(void)loop;
	(void)revents;
	p->migrated_told = true;
	repl_primary_done(p);
}

/* The engine is done: the host is told. */
void repl_primary_done(struct repl_primary *p)
{
	/* ...and one that lost the VM in post-copy, so that it can say so. */
	if ((p->migrated || repl_pc_src_switched(p)) && !p->migrated_told) {
		if (!ev_is_active(&p->linger_w))
			ev_timer_start(p->loop, &p->linger_w);
		return;
	}
	if (p->host.ended)
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
		repl_primary_link_gone(p);
		return;
	}
	r = repl_send_fence(&p->link, UNDERSTUDY__FENCE_ACTION__FENCE_PRIMARY_CONTINUES,
			    p->ep.acked, why);
	if (r < 0) {
		log_error(TAG, "could not tell the secondary we go on without it (%s): closing "
			  "without a goodbye", strerror(-r));
		repl_primary_link_gone(p);
		return;
	}
	log_info(TAG, "goodbye sent: the secondary is told to stand down (no takeover)");
	net_close_flush(p->link.conn);
	ev_timer_set(&p->goodbye_w, deadline_s, 0);
	ev_timer_start(p->loop, &p->goodbye_w);
}

void repl_primary_on_goodbye_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_primary *p = w->data;

	(void)loop;
	(void)revents;
	log_warn(TAG, "the goodbye did not leave before its deadline (the secondary does not "
		 "read): closing");
	repl_primary_link_gone(p);
}

void repl_primary_drop_protection(struct repl_primary *p, const struct repl_fault *f)
{
	if (p->state >= P_UNPROTECTED)
		return;
	p->fault = *f;
	if (p->state <= P_HELLO && p->owned) {   /* never protected: the VM ends */
		log_error(TAG, "cannot protect the VM: %s (%s)", f->what, repl_fault_kind_name(f->kind));
		repl_primary_finish(p, 1);
		return;
	}
	if (p->state <= P_HELLO) {   /* protect: the host's VM runs on as before */
		log_error(TAG, "cannot protect the VM: %s (%s): it runs on unprotected", f->what,
			  repl_fault_kind_name(f->kind));
		p->state = P_UNPROTECTED;
		repl_primary_link_gone(p);
		repl_vm_set_gated(p->vm, false);
		if (p->finishing)
			repl_primary_finish(p, p->exit_status);
		return;
	}
	log_error(TAG, "%s: %s at epoch %llu (acked %llu): the VM runs UNPROTECTED from now on; "
		  "held output is released", repl_fault_kind_name(f->kind), f->what,
		  (unsigned long long)p->ep.epoch, (unsigned long long)p->ep.acked);
	net_notify(NET_NOTIFY_READY, "UNPROTECTED: %s", f->what);   /* the start is over */
	p->state = P_UNPROTECTED;
	repl_primary_event(p, REPL_EV_UNPROTECTED, f->what);
	ev_timer_stop(p->loop, &p->epoch_w);
	repl_sync_stop(&p->sync);
	repl_primary_throttle_off(p);
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
		repl_primary_finish(p, p->exit_status);
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
	repl_primary_finish(p, REPL_EXIT_REPLACED);
}

/* The secondary runs the guest now: this copy must not. Nothing more is
 * released (output it did not acknowledge never leaves here). */
int repl_primary_on_fence(struct repl_primary *p, const Understudy__Fence *f)
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
			repl_primary_link_gone(p);
			repl_primary_finish(p, 0);
			return -ECANCELED;
		}
		log_info(TAG, "MIGRATED: the destination runs the guest from epoch %llu; downtime %.3f "
			 "ms (the pause to its word), %llu bytes sent", (unsigned long long)f->epoch,
			 p->downtime_ms, (unsigned long long)p->link.bytes_sent);
		repl_primary_event(p, REPL_EV_MIGRATED, "the destination runs the guest");
		repl_primary_link_gone(p);
		repl_primary_finish(p, 0);
		return -ECANCELED;
	}
	repl_fault_set(&p->fault, REPL_FAULT_PEER_LOST, -ECANCELED,
		       "the secondary took over from epoch %llu (%s)", (unsigned long long)f->epoch,
		       f->reason);
	log_error(TAG, "%s: another copy runs the guest; this primary stops now and releases "
		  "nothing more (acknowledged: %llu)", p->fault.what, (unsigned long long)p->ep.acked);
	repl_primary_event(p, REPL_EV_FENCED, p->fault.what);
	p->keep_standby = true;     /* it owns the guest now */
	repl_primary_link_gone(p);
	repl_primary_finish(p, REPL_EXIT_REPLACED);
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

/* The secondary is lost right after this process stalled longer than its
 * failover timeout: it may run the guest now (its Fence did not reach us). */
static bool maybe_replaced(struct repl_primary *p, const struct repl_fault *f)
{
	uint64_t stall_ns = repl_link_stalled_ns(&p->link, repl_primary_stall_ms(p));

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
 * destination cannot run without it; the vouch is withdrawn first), and,
 * when it was given up for the destination already, once this side wins it
 * back with the destination's own token (lease.c: proof that the
 * destination never took it). Else the guest stays paused here (in doubt)
 * until an operator who made sure the destination does not run it says
 * `understudy takeover`. */
static void handover_failed(struct repl_primary *p, const struct repl_fault *f)
{
	struct repl_fault what;
	bool queued = p->handover_tx && p->link.conn;
	bool stalled = !p->peer_timing.timeout_ms || repl_link_stalled_ns(&p->link, repl_primary_stall_ms(p)) >=
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
		repl_primary_drop_protection(p, f);
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
	repl_primary_link_gone(p);
	repl_primary_event(p, REPL_EV_FENCED, p->fault.what);
	if (p->wit)
		repl_primary_reclaim(p);   /* the key decides: resumed once won back */
}

void repl_primary_on_fault(struct repl_primary *p, const struct repl_fault *f)
{
	struct repl_fault fatal;

	if (repl_pc_src_switched(p) && p->state == P_SWITCHING) {
		repl_pc_src_lost(p, f);   /* neither side alone holds the VM now */
		p->keep_standby = true;
		repl_primary_link_gone(p);
		repl_primary_finish(p, 1);
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
		repl_primary_drop_protection(p, f);
}

void repl_primary_fault(struct repl_primary *p, enum repl_fault_kind kind, int err, const char *what)
{
	struct repl_fault f;

	repl_fault_set(&f, kind, err, "%s", what);
	repl_primary_on_fault(p, &f);
}

void repl_primary_on_throttle_end(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_primary *p = w->data;

	(void)loop;
	(void)revents;
	if (!p->finishing && p->state != P_FENCED)
		machine_resume(p->vm->m);
}

/* No more throttling: the guest runs freely from now on. */
void repl_primary_throttle_off(struct repl_primary *p)
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

void repl_primary_finish(struct repl_primary *p, int status)
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
	repl_primary_done(p);
}
