/* The primary's fencing with a witness (witness.c says what the keys
 * mean): the key is taken before the guest runs, the lease is checked
 * every few milliseconds and on every release (vm.c), and a primary whose
 * lease is no longer provably valid fences itself: the guest is paused for
 * good and nothing more leaves. Unprotected, with no standby vouched for,
 * it is the only copy: it pauses until the witness re-takes the key, and
 * fences only if that is refused. The engine's state machine is engine.c;
 * nothing here calls back into it. */
#include "primary/primary_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "net/notify.h"

#define TAG "primary"

/* The epochs on the link are freed once nothing reads them any more. */
void repl_primary_link_gone(struct repl_primary *p)
{
	ev_timer_stop(p->loop, &p->goodbye_w);
	repl_link_close(&p->link);
	repl_epochs_drop(&p->ep);
}

/* The lease is not provably valid any more: this copy may have been
 * replaced. The guest is paused for good and nothing more leaves; the link
 * closes without a goodbye (the secondary contends for the key once our
 * lease runs out at etcd). Only a restart brings this side back. */
void repl_primary_fence(struct repl_primary *p)
{
	int64_t left = repl_witness_left_ms(p->wit);

	if (p->state == P_FENCED || p->state == P_DONE || p->state == P_SWITCHING)
		return;   /* switching: the key was given up on purpose, the guest is paused */
	repl_fault_set(&p->fault, REPL_FAULT_LOCAL_FATAL, -ETIMEDOUT, "fenced: the witness lease "
		       "was not renewed in time (%lld ms past its deadline)", (long long)-left);
	log_error(TAG, "FENCED at epoch %llu (acked %llu): %s; the guest is paused for good and "
		  "nothing more is released; restart this side to bring it back",
		  (unsigned long long)p->ep.epoch, (unsigned long long)p->ep.acked, p->fault.what);
	repl_event_log("fenced");
	net_notify(NET_NOTIFY_STATUS, "FENCED: %s; the guest is paused for good", p->fault.what);
	p->state = P_FENCED;
	p->lapsed = false;
	p->keep_standby = true;
	machine_pause(p->vm->m);
	ev_timer_stop(p->loop, &p->epoch_w);
	ev_timer_stop(p->loop, &p->lease_w);
	repl_sync_stop(&p->sync);
	repl_witness_stop(p->wit);
	repl_primary_link_gone(p);
	repl_primary_event(p, REPL_EV_FENCED, p->fault.what);
}

static void on_vouched(void *ctx)
{
	struct repl_primary *p = ctx;

	if (p->state != P_PROTECTED && p->state != P_PROTECTING)
		return;                  /* a withdrawal follows */
	p->vouched = true;
	log_info(TAG, "the witness vouches for the standby (token %s): it may take over if this "
		 "side dies", p->standby_token);
}

static void on_withdrawn(void *ctx)
{
	struct repl_primary *p = ctx;

	p->vouched = false;
	p->withdrawn = true;
	if (p->state != P_UNPROTECTED)
		return;
	log_info(TAG, "the witness no longer vouches for the standby: releasing held output");
	repl_vm_set_gated(p->vm, false);
}

static void on_lost(void *ctx)
{
	struct repl_primary *p = ctx;

	log_error(TAG, "the witness key is not ours any more");
	repl_primary_fence(p);
}

/* The guest of a migration in doubt resumes here, unprotected: the
 * destination provably does not run it (how says why). */
void repl_primary_resume_in_doubt(struct repl_primary *p, const char *how)
{
	log_warn(TAG, "%s: the guest resumes here from epoch %llu, UNPROTECTED", how,
		 (unsigned long long)p->final_epoch);
	p->in_doubt = p->finishing = p->keep_standby = false;
	p->reclaiming = false;
	p->state = P_UNPROTECTED;
	repl_primary_event(p, REPL_EV_UNPROTECTED, "resumed after a migration in doubt");
	net_notify(NET_NOTIFY_STATUS, "UNPROTECTED: resumed after a migration in doubt");
	repl_vm_set_gated(p->vm, false);
	machine_resume(p->vm->m);
}

/* A migration in doubt after this side gave the key up for the destination
 * (resigned at the final ACK): the destination runs the guest only once it
 * has won the key, and its win rewrites K/standby (to "none": a migration's
 * new primary vouches for nobody yet). So this side contends as if it were
 * that standby, with the destination's own token: the transaction succeeds
 * only while K/owner is absent and K/standby still names the destination,
 * which proves the destination never won, and it shuts the destination out
 * for good (K/standby becomes "none"). A lost contest means the destination
 * won: it may run the guest, and this copy stays paused. */
void repl_primary_reclaim(struct repl_primary *p)
{
	log_warn(TAG, "migration in doubt after the key was given up: contending for %s with the "
		 "destination's token (won only if the destination never took the key)",
		 repl_witness_key(p->wit));
	p->reclaiming = true;
	repl_witness_contend(p->wit, p->standby_token, "none");
}

static void on_won(void *ctx)
{
	struct repl_primary *p = ctx;

	if (!p->reclaiming)
		return;
	p->resigned = false;
	/* The winning transaction wrote K/standby = none: no vouch pending. */
	p->vouch_asked = p->vouched = false;
	p->withdrawn = true;
	ev_timer_start(p->loop, &p->lease_w);
	repl_primary_resume_in_doubt(p, "won the witness key back: the destination never took it");
}

static void on_revoked(void *ctx)
{
	struct repl_primary *p = ctx;

	if (!p->reclaiming)
		return;
	p->reclaiming = false;
	p->reclaim_lost = true;
	repl_fault_set(&p->fault, REPL_FAULT_LOCAL_FATAL, -EEXIST, "in doubt: the witness key was "
		       "not won back (K/standby no longer names the destination: it took the key "
		       "and may run the guest from epoch %llu)", (unsigned long long)p->final_epoch);
	log_error(TAG, "%s; this copy stays paused for good", p->fault.what);
	net_notify(NET_NOTIFY_STATUS, "MIGRATION IN DOUBT: %s", p->fault.what);
}

/* This side ends (a signal, or its host stops) while it contends for the
 * key back: a win the loop never saw must not shut the destination out
 * (it may be alive and hold the guest): K/standby names it again before
 * the key is let go, as before the contest. */
void repl_primary_reclaim_abandon(struct repl_primary *p)
{
	if (!p->wit || !p->reclaiming)
		return;
	log_warn(TAG, "ending while contending for the witness key: %s names the destination "
		 "again", repl_witness_key(p->wit));
	p->reclaiming = false;
	repl_witness_hand_back(p->wit, p->standby_token);
}

/* The callbacks the engine takes on its witness. */
static void witness_cbs(struct repl_primary *p)
{
	repl_witness_set_cbs(p->wit, &(struct repl_witness_cbs){
		.vouched = on_vouched, .withdrawn = on_withdrawn, .lost = on_lost, .won = on_won,
		.revoked = on_revoked, .ctx = p });
}

/* The lease lapsed while this side runs unprotected and vouches for no
 * standby (an etcd outage longer than the lease, or a hung loop): nobody
 * else may take the key, so the guest only pauses until it is re-taken. */
static void pause_for_key(struct repl_primary *p)
{
	log_error(TAG, "the witness lease lapsed (%lld ms past its deadline) while this side runs "
		  "UNPROTECTED and vouches for no standby: the guest is paused and nothing is "
		  "released until the key is re-taken (once etcd answers and the key is free)",
		  (long long)-repl_witness_left_ms(p->wit));
	net_notify(NET_NOTIFY_STATUS, "UNPROTECTED, paused: the witness lease lapsed; re-taking "
		   "the key once etcd answers");
	p->lapsed = true;
	machine_pause(p->vm->m);
}

void repl_primary_lease_check(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_primary *p = w->data;

	(void)loop;
	(void)revents;
	if (repl_witness_valid(p->wit)) {
		if (!p->lapsed)
			return;
		p->lapsed = false;
		log_warn(TAG, "re-took the witness key: the guest runs on, UNPROTECTED");
		net_notify(NET_NOTIFY_STATUS, "UNPROTECTED: the witness key was re-taken");
		machine_resume(p->vm->m);
		repl_vm_set_gated(p->vm, false);   /* what waited for the lease leaves */
		return;
	}
	if (p->lapsed && repl_witness_retakes(p->wit))
		return;
	if (!p->lapsed && p->state == P_UNPROTECTED && repl_witness_retakes(p->wit)) {
		pause_for_key(p);
		return;
	}
	repl_primary_fence(p);
}

int repl_primary_witness_take(struct ev_loop *loop, const struct repl_witness_opts *o,
			      struct repl_witness **out)
{
	char self[REPL_WITNESS_ID_MAX], host[64] = "?", err[320];
	struct repl_witness *w;
	int r;

	*out = NULL;
	if (!o->endpoints)
		return 0;
	gethostname(host, sizeof(host) - 1);
	snprintf(self, sizeof(self), "primary %s pid %d", host, (int)getpid());
	r = repl_witness_new(loop, o, self, &w);
	if (r < 0) {
		log_error(TAG, "witness: bad settings (%s)", strerror(-r));
		return r;
	}
	r = repl_witness_acquire(w, err, sizeof(err));
	if (r == -EBUSY) {
		log_error(TAG, "witness: %s: refusing to run the guest (exit %d)", err,
			  REPL_EXIT_STANDBY_VOUCHED);
		net_notify(NET_NOTIFY_STATUS, "refused: the witness vouches for a standby; run "
			   "understudy takeover on it");
	} else if (r < 0) {
		log_error(TAG, "witness: %s: refusing to run the guest", err);
	} else {
		r = repl_witness_start(w);
	}
	if (r < 0) {
		repl_witness_release(w, true);
		repl_witness_free(w);
		return r;
	}
	*out = w;
	return 0;
}

void repl_primary_witness_attach(struct repl_primary *p)
{
	if (!p->wit)
		return;
	repl_witness_get_cbs(p->wit, &p->host_cbs);
	witness_cbs(p);
}

void repl_primary_witness_detach(struct repl_primary *p)
{
	if (p->wit)
		repl_witness_set_cbs(p->wit, &p->host_cbs);
}
