/* The secondary's takeover and everything it needs: the resources held
 * from the start (the console), the fence command, the witness key to win
 * first, the takeover itself, and the fencing of a copy that lost its
 * lease. The agent's state machine is standby.c and link.c; nothing here
 * calls back into them. */
#include "secondary/secondary_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kmod/mutant.h"
#include "net/notify.h"
#include "secondary/fence.h"

#define TAG "secondary"

static void on_vm_stopped(void *ctx, int status);

void repl_sec_drop_standby(struct repl_secondary *s)
{
	repl_vm_free(s->vm);
	s->vm = NULL;
	s->got_hello = false;
	repl_staging_attach(&s->stage, NULL, 0);
}

/* The guest this side took over asked for a reset, no engine protecting
 * it: it boots again on the same machine, as on a booting primary, from
 * the power-on state kept when the standby was built
 * (repl_vm_keep_poweron). false: the reset failed part-way. */
static bool reboot_here(struct repl_secondary *s)
{
	int r;

	if ((r = repl_vm_reboot(s->vm)) < 0) {
		log_error(TAG, "the guest rebooted and could not be booted again here (%s): the VM "
			  "ends", strerror(-r));
		return false;
	}
	s->vm->on_stopped = on_vm_stopped;   /* on_wake took it off */
	log_info(TAG, "the guest rebooted (after epoch %llu): booted again on this machine "
		 "(no standby holds it)", (unsigned long long)s->stage.applied);
	net_notify(NET_NOTIFY_STATUS, "the guest rebooted: booted again here (unprotected)");
	machine_resume(s->vm->m);
	return true;
}

/* Whether the guest's reset may boot it again here: only a copy that runs
 * the guest by right does. Not one fenced or paused for a lapsed lease
 * (a reset that raced the fence must not resume it), nor a post-copy
 * destination still missing pages (clearing RAM under the page-fault
 * handler's registration would hang the loader on its own thread). */
static bool may_reboot_here(const struct repl_secondary *s, const char **why)
{
	*why = !s->vm->poweron ? "no power-on state is kept here" :
	       s->state != S_ACTIVE ? "this side does not run the guest by right (fenced)" :
	       s->lapsed || (s->wit && !repl_witness_valid(s->wit)) ? "the witness lease lapsed" :
	       repl_pc_dst_pending(s) ? "post-copy pages are still coming" : NULL;
	return !*why;
}

static void on_vm_stopped(void *ctx, int status)
{
	struct repl_secondary *s = ctx;
	const char *why;

	/* Else the reset ends the VM, as a power-off. */
	if (status == MACHINE_STATUS_REBOOT) {
		if (may_reboot_here(s, &why)) {
			if (reboot_here(s))
				return;
			status = 1;
		} else {
			log_warn(TAG, "the guest rebooted and is not booted again here: %s", why);
		}
	}
	log_info(TAG, "guest stopped (status %d)", status);
	s->exit_status = status < 0 ? 1 : status;
	s->state = S_DONE;
	ev_break(s->loop, EVBREAK_ALL);
}

/* A primary that is only stopped or slow still holds the link: the last
 * thing it reads from it says that this side runs the guest now, so that
 * it stops instead of running on (see primary/failure.c on_fence). */
static void tell_primary_took_over(struct repl_secondary *s, uint64_t silent_ms)
{
	char why[64];

	if (!s->link.conn)
		return;
	snprintf(why, sizeof(why), "the primary was silent for %llu ms", (unsigned long long)silent_ms);
	if (repl_send_fence(&s->link, UNDERSTUDY__FENCE_ACTION__FENCE_SECONDARY_TOOK_OVER,
			    s->stage.applied, why) == 0) {
		net_close_flush(s->link.conn);   /* closed() follows; nothing read counts */
		return;
	}
	log_warn(TAG, "could not tell the primary that this side took over");
	repl_link_close(&s->link);
}

/* The guest's NIC now sits behind this host's tap: the guest is asked to
 * announce itself (gratuitous ARP), so that switches and peers learn where
 * its MAC went, as QEMU does after a migration. */
static void announce(struct repl_secondary *s)
{
	repl_vm_net_announce(s->vm);
	if (machine_net_announce(s->vm->m))
		log_info(TAG, "the guest is asked to announce its MAC on this host's tap");
	else if (s->vm->m->vnet)
		log_warn(TAG, "the guest's NIC driver did not take GUEST_ANNOUNCE: peers learn its "
			 "new port from this host's RARP and its next frame");
}

/* The old primary handed the guest over (Fence SWITCHES) and this side
 * took it: the guest resumes protected onto the old primary, which waits as
 * a standby holding the same epoch (no resync). The dirty log is emptied
 * first, so the first epoch carries exactly the pages written from here on. */
static void protect_after_switch(struct repl_secondary *s)
{
	struct machine *m = s->vm->m;
	uint64_t *bm = calloc((m->ram_pages + 63) / 64, sizeof(uint64_t));
	int r = bm ? machine_harvest_dirty(m, bm) : -ENOMEM;

	free(bm);
	s->switching = false;
	s->switches++;
	if (r < 0) {
		log_error(TAG, "cannot empty the dirty log (%s): the guest runs here UNPROTECTED",
			  strerror(-r));
		repl_vm_set_gated(s->vm, false);
		machine_resume(m);
		return;
	}
	/* The guest runs from here (output gated, writes logged); the engine is
	 * attached once the loop has sent the old primary our word. */
	announce(s);
	repl_vm_mark_running(s->vm);
	machine_resume(m);
	s->switch_in_ms = s->switch_paused_us / 1e3 + (now_ns() - s->switch_fence_ns) / 1e6;
	/* A moment later: the loop first sends the old primary our word (its
	 * measure of the downtime ends there), then builds the engine. */
	ev_timer_set(&s->switch_w, 0.002, 0);
	repl_sec_event(s, REPL_EV_SWITCHOVER, "switchover: this side runs the guest now");
	ev_timer_start(s->loop, &s->switch_w);
}

static void take_over(struct repl_secondary *s)
{
	struct repl_staging *g = &s->stage;
	uint64_t t0 = now_ns();
	uint64_t silent_ms = (t0 - s->link.last_rx_ns) / 1000000;

	/* Won, but the lease is no longer provably valid (this side was slow):
	 * resuming could release nothing, so do not resume at all. */
	if (s->wit && !repl_witness_valid(s->wit)) {
		log_error(TAG, "the witness lease lapsed between winning the key and the takeover");
		repl_sec_fence(s);
		return;
	}
	tell_primary_took_over(s, silent_ms);
	if (s->lis) {
		net_listener_close(s->lis);
		s->lis = NULL;
	}
	/* make check-mutants: bound here, as it was: a taken port fails the takeover */
	if (MUTANT(console_at_takeover) && console_bind(s->loop, s->o->console, &s->con) < 0) {
		s->exit_status = 1;
		s->state = S_DONE;
		ev_break(s->loop, EVBREAK_ALL);
		return;
	}
	repl_vm_serve_console(s->vm, s->con);
	s->con = NULL;                   /* the VM owns it now */
	if (g->held.len && (!s->wit || repl_witness_valid(s->wit))) {
		console_write(s->vm->con, g->held.data, g->held.len);
		repl_event_log("replay %llu %llu", (unsigned long long)g->held_from,
			       (unsigned long long)(g->held_from + g->held.len));
	}
	s->vm->on_stopped = on_vm_stopped;
	s->vm->cb_ctx = s;
	s->vm->witness = s->wit;
	s->state = S_ACTIVE;
	if (s->switching) {
		/* A switchover: the guest resumes once protected onto the old
		 * primary (secondary.c); its output stays gated until then. */
		log_info(TAG, "SWITCHOVER: this side runs the guest from epoch %llu (%.3f ms); "
			 "protecting it onto the old primary at %s", (unsigned long long)g->applied,
			 (now_ns() - t0) / 1e6, s->switch_listen);
		protect_after_switch(s);
		return;
	}
	repl_vm_set_gated(s->vm, false);
	/* Test mode: what resumes is still the last applied epoch. */
	if (g->verify_ok && !repl_verify_standby(s->vm->m, &g->verify_last, g->applied))
		g->verify_failed++;
	announce(s);
	repl_vm_mark_running(s->vm);
	repl_vm_mark_took_over(s->vm, g->applied, (t0 - s->link.last_rx_ns) / 1e6);
	s->fault_at_takeover = s->fault;
	machine_resume(s->vm->m);
	net_notify(NET_NOTIFY_STATUS, "TOOK OVER: runs the guest from epoch %llu",
		   (unsigned long long)g->applied);
	log_info(TAG, "TOOK OVER: primary silent for %llu ms; guest resumed from epoch %llu in "
		  "%.3f ms; %zu bytes of acknowledged output replayed", (unsigned long long)silent_ms,
		  (unsigned long long)g->applied, (now_ns() - t0) / 1e6, g->held.len);
	if (g->verify_ok || g->verify_failed)
		log_info(TAG, "test mode: %llu epochs verified equal to the primary, %llu differed",
			 (unsigned long long)g->verify_ok, (unsigned long long)g->verify_failed);
	char why[64];

	snprintf(why, sizeof(why), "the primary was silent for %llu ms", (unsigned long long)silent_ms);
	repl_sec_event(s, REPL_EV_TAKEOVER, why);
	repl_sec_event(s, REPL_EV_UNPROTECTED, "took over: no standby until protected again");
}

/* The contend transaction that won the key wrote K/standby = none. While
 * the fence command fails nothing runs, so this standby is still the newest
 * copy: the witness names it again (vouched by itself, the owner), so that
 * it can win the key back later should the lease lapse meanwhile (an etcd
 * outage, a takeover only days later). Undone before the guest resumes. */
static void vouch_self(struct repl_secondary *s)
{
	if (!s->wit || !repl_witness_valid(s->wit) || s->self_vouched)
		return;
	s->self_vouched = true;
	repl_witness_vouch(s->wit, s->token);
}

static void on_vouched(void *ctx)
{
	struct repl_secondary *s = ctx;

	if (s->self_vouched)
		log_info(TAG, "the witness names this standby again (%s/standby): it can win the key "
			 "back for a later takeover", repl_witness_key(s->wit));
}

static void on_lost(void *ctx)
{
	struct repl_secondary *s = ctx;

	if (s->withdrawing && s->state == S_CONTENDING) {
		/* The lease lapsed before the withdrawal: K/standby still names
		 * this side, so the key can be won again (that transaction
		 * writes K/standby = none itself). */
		s->withdrawing = false;
		log_warn(TAG, "the witness lease lapsed before the standby was withdrawn: contending "
			 "for the key again");
		repl_witness_contend(s->wit, s->token, s->switching ? s->switch_token : NULL);
		return;
	}
	if (s->self_vouched && s->state == S_FENCE_FAILED)
		log_error(TAG, "the witness key lapsed before this standby was named again: a later "
			  "takeover cannot win it");
}

static void on_withdrawn(void *ctx)
{
	struct repl_secondary *s = ctx;

	if (!s->withdrawing || s->state != S_CONTENDING)
		return;
	s->withdrawing = false;
	log_info(TAG, "the witness names no standby %.1f ms after the request: the guest resumes",
		 (now_ns() - s->contend_t0_ns) / 1e6);
	take_over(s);
}

static void on_fence_retry(struct ev_loop *loop, ev_timer *w, int revents);

/* The fence command failed: run it again after a pause (bounded, fence.h),
 * or, the retries spent, stay fence-failed until a person decides. The
 * link is closed either way: nothing more of the old primary counts. */
static void fence_failed(struct repl_secondary *s, int r, const char *why)
{
	unsigned tries = s->o->fence_retries, ms;

	repl_link_close(&s->link);
	vouch_self(s);
	s->state = S_FENCE_FAILED;
	if (s->fence_failures <= tries) {
		ms = repl_fence_retry_ms(s->fence_failures);
		repl_fault_set(&s->fault, REPL_FAULT_LOCAL_FATAL, r, "no takeover yet at epoch %llu: "
			       "retry %u of %u in %u ms; the fence command failed: %s",
			       (unsigned long long)s->stage.applied, s->fence_failures, tries, ms, why);
		log_warn(TAG, "NO TAKEOVER yet: %s", s->fault.what);
		ev_timer_init(&s->fence_w, on_fence_retry, ms / 1e3, 0);
		s->fence_w.data = s;
		ev_timer_start(s->loop, &s->fence_w);
		net_notify(NET_NOTIFY_STATUS, "NO TAKEOVER yet: fence command failed: %s", why);
		return;
	}
	/* (what to do first: the fault's text is cut at 160 bytes) */
	repl_fault_set(&s->fault, REPL_FAULT_LOCAL_FATAL, r, "no takeover at epoch %llu after %u "
		       "failed fence run%s (takeover --fenced-by-operator once the old primary is "
		       "off): %s", (unsigned long long)s->stage.applied, s->fence_failures,
		       s->fence_failures == 1 ? "" : "s", why);
	log_error(TAG, "NO TAKEOVER: %s; the old primary may still run", s->fault.what);
	net_notify(NET_NOTIFY_STATUS, "NO TAKEOVER: fence command failed: %s", why);
}

/* With --fence-cmd, the old primary is powered off before the guest
 * resumes here; a command that fails or overruns its deadline means no
 * takeover, loudly: the standby stays (state fence-failed), nothing runs,
 * and the command is tried again a few times (fence_failed). A person who
 * made sure the old primary is off skips it (takeover --fenced-by-operator). */
static void fence_and_take_over(struct repl_secondary *s, const char *reason)
{
	struct repl_fence_peer peer = { .peer_addr = s->peer_addr,
					.vm_name = repl_ops_vm(&s->o->ops, s->cfg.guest),
					.guest = s->cfg.guest, .epoch = s->stage.applied,
					.reason = reason };
	char why[256];
	int r;

	s->fence_reason = reason;
	if (s->o->fence_cmd && !s->migrating && !s->operator_fenced) {   /* a migrating primary hands over */
		r = repl_fence_run(s->o->fence_cmd, s->o->fence_timeout_ms, &peer, why, sizeof(why));
		if (r < 0) {
			s->fence_failures++;
			fence_failed(s, r, why);
			return;
		}
	}
	if (s->self_vouched) {
		/* As a takeover leaves it: nobody stands by. The guest resumes
		 * only once etcd says so (on_withdrawn): resumed first, a copy
		 * that ran and died before the withdrawal arrived would leave
		 * K/standby naming this side, and a migration's source in doubt,
		 * which contends with this side's token, could then win the key
		 * and resume an older copy behind output this one released. */
		s->self_vouched = false;
		s->withdrawing = true;
		s->state = S_CONTENDING;
		s->contend_t0_ns = now_ns();
		log_info(TAG, "the witness is to name no standby (%s/standby) before the guest resumes",
			 repl_witness_key(s->wit));
		repl_witness_withdraw(s->wit);
		return;
	}
	take_over(s);
}

/* The fence command's next run. A lease that lapsed meanwhile is won back
 * first (this standby is named in K/standby, vouch_self). */
static void on_fence_retry(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_secondary *s = w->data;

	(void)loop;
	(void)revents;
	if (s->state != S_FENCE_FAILED)
		return;
	log_warn(TAG, "fence command: retry %u of %u", s->fence_failures, s->o->fence_retries);
	if (s->wit && !repl_witness_valid(s->wit)) {
		log_warn(TAG, "the witness lease lapsed while the fence command failed: contending "
			 "for the key again");
		s->state = S_CONTENDING;
		s->contend_t0_ns = now_ns();
		repl_witness_contend(s->wit, s->token, s->switching ? s->switch_token : NULL);
		return;
	}
	fence_and_take_over(s, s->fence_reason ? s->fence_reason : "the primary is silent");
}

void repl_sec_fence_retry_stop(struct repl_secondary *s)
{
	ev_timer_stop(s->loop, &s->fence_w);
}


/* The takeover decision. Heartbeat only: take over now. With a witness:
 * nothing more of the old primary is read (the link closes) and this side
 * contends for the key; only a win resumes the guest (on_witness_done). */
void repl_sec_begin_takeover(struct repl_secondary *s)
{
	if (MUTANT(takeover_without_key)) {   /* make check-mutants: the key is not won first */
		fence_and_take_over(s, "the primary is silent");
		return;
	}
	s->fence_failures = 0;
	if (!s->wit) {
		fence_and_take_over(s, "the primary is silent");
		return;
	}
	log_warn(TAG, "%s: contending for the witness key before any takeover (standby at epoch "
		 "%llu)", s->migrating ? "a migration" : "the primary is silent",
		 (unsigned long long)s->stage.applied);
	repl_event_log("contend");
	if (!s->migrating)           /* a migrating primary waits for our word on it */
		repl_link_close(&s->link);
	s->state = S_CONTENDING;
	s->contend_t0_ns = now_ns();
	/* A switchover: the old primary, our standby from now on, is vouched
	 * for in the same transaction (it holds exactly the switch epoch). */
	repl_witness_contend(s->wit, s->token, s->switching ? s->switch_token : NULL);
}

static void on_won(void *ctx)
{
	struct repl_secondary *s = ctx;

	if (s->state != S_CONTENDING)
		return;
	s->self_vouched = false;         /* the winning transaction wrote K/standby = none */
	log_info(TAG, "won the witness key %.1f ms after the takeover decision",
		 (now_ns() - s->contend_t0_ns) / 1e6);
	fence_and_take_over(s, s->migrating ? "the primary handed the guest over" :
			    "the primary is silent and its witness lease ran out");
}

static void on_revoked(void *ctx)
{
	struct repl_secondary *s = ctx;

	if (s->state != S_CONTENDING)
		return;
	s->operator_fenced = false;
	s->fence_failures = 0;
	repl_fault_set(&s->fault, REPL_FAULT_PEER_LOST, 0, "stood down: the witness no longer "
		       "vouches for this standby (the primary went on without it)");
	log_warn(TAG, "%s; no takeover, waiting for a new primary", s->fault.what);
	repl_sec_drop_standby(s);
	s->state = S_WAITING;
	net_notify(NET_NOTIFY_STATUS, "waiting for a primary on %s (stood down)", s->listen_at);
}

void repl_sec_engine_state(const struct repl_secondary *s, struct secondary_engine_state *st)
{
	memset(st, 0, sizeof(*st));
	s->eng->query(s->eng->ctx, st);
}

/* The copy this side runs, with a witness: fenced once the lease is not
 * provably valid, unless it runs unprotected and vouches for no standby
 * (the only copy): then paused until the witness re-takes the key. */
void repl_sec_lease_check(struct repl_secondary *s)
{
	struct secondary_engine_state eng;
	bool alone;

	repl_sec_engine_state(s, &eng);
	alone = !eng.state || !strcmp(eng.state, "unprotected");

	if (repl_witness_valid(s->wit)) {
		if (s->lapsed) {
			s->lapsed = false;
			log_warn(TAG, "re-took the witness key: the guest runs on, UNPROTECTED");
			machine_resume(s->vm->m);
			repl_vm_set_gated(s->vm, false);
		}
		return;
	}
	if (s->lapsed && repl_witness_retakes(s->wit))
		return;
	if (!s->lapsed && alone && repl_witness_retakes(s->wit)) {
		log_error(TAG, "the witness lease lapsed while this side runs UNPROTECTED and vouches "
			  "for no standby: the guest is paused and nothing is released until the key "
			  "is re-taken (once etcd answers and the key is free)");
		s->lapsed = true;
		machine_pause(s->vm->m);
		return;
	}
	repl_sec_fence(s);
}

/* The copy we run lost its lease: pause it for good, release nothing more. */
void repl_sec_fence(struct repl_secondary *s)
{
	repl_fault_set(&s->fault, REPL_FAULT_LOCAL_FATAL, -ETIMEDOUT, "fenced: the witness lease "
		       "was not renewed in time");
	log_error(TAG, "FENCED: %s; the guest is paused for good and nothing more is released",
		  s->fault.what);
	repl_event_log("fenced");
	machine_pause(s->vm->m);
	repl_witness_stop(s->wit);
	s->state = S_FENCED;
	net_notify(NET_NOTIFY_STATUS, "FENCED: %s; the guest is paused for good", s->fault.what);
	repl_sec_event(s, REPL_EV_FENCED, s->fault.what);
}

/* Binds the console now, so that a takeover cannot fail on its port. */
int repl_sec_acquire_resources(struct repl_secondary *s)
{
	int r;

	if (MUTANT(console_at_takeover))   /* make check-mutants: bound at takeover */
		return 0;
	r = console_bind(s->loop, s->o->console, &s->con);
	if (r < 0) {
		log_error(TAG, "cannot bind the console %s (%s): a takeover could not serve it; "
			  "refusing to start", s->o->console, strerror(-r));
		return r;
	}
	log_info(TAG, "console %s bound (port %d); served from a takeover on", s->o->console,
		 console_port(s->con));
	return 0;
}

/* With --witness: the lease thread starts now; the key is contended for
 * only at a takeover. */
int repl_sec_witness_setup(struct repl_secondary *s)
{
	char self[REPL_WITNESS_ID_MAX], host[64] = "?";
	int r;

	if (!s->o->witness.endpoints)
		return 0;
	gethostname(host, sizeof(host) - 1);
	snprintf(self, sizeof(self), "secondary %s pid %d", host, (int)getpid());
	r = repl_witness_new(s->loop, &s->o->witness, self, &s->wit);
	if (r < 0) {
		log_error(TAG, "witness: bad settings (%s)", strerror(-r));
		return r;
	}
	repl_witness_set_cbs(s->wit, &(struct repl_witness_cbs){
		.won = on_won, .revoked = on_revoked, .vouched = on_vouched, .lost = on_lost,
		.withdrawn = on_withdrawn, .ctx = s });
	return repl_witness_start(s->wit);
}


void repl_sec_witness_adopt(struct repl_secondary *s, struct repl_witness *w)
{
	s->wit = w;
	repl_witness_set_cbs(w, &(struct repl_witness_cbs){
		.won = on_won, .revoked = on_revoked, .vouched = on_vouched, .lost = on_lost,
		.withdrawn = on_withdrawn, .ctx = s });
}

/* The reply to a takeover request, from the state it left. */
static char *takeover_reply(struct repl_secondary *s)
{
	char *reply = NULL;
	int n;

	if (s->state == S_CONTENDING)
		n = asprintf(&reply, "ok contending for the witness key at epoch %llu\n",
			     (unsigned long long)s->stage.applied);
	else if (s->state == S_ACTIVE)
		n = asprintf(&reply, "ok took over at epoch %llu\n", (unsigned long long)s->stage.applied);
	else
		n = asprintf(&reply, "error no takeover: this secondary is %s: %s\n",
			     repl_sec_state_name(s), s->fault.what);
	return n < 0 ? NULL : reply;
}

/* Why a takeover is refused now, or NULL. A side that handed the guest
 * over (switchover) while its successor has never connected since may
 * have a live successor, which it cannot see: without a witness (the key
 * would arbitrate) or a fence command (it powers the successor off), only
 * a person who made sure that it is off resumes it. */
static const char *takeover_refusal(const struct repl_secondary *s, bool by_operator)
{
	if (s->state == S_FENCE_FAILED && !by_operator)
		return "the fence command failed, so the old primary may still run; once it is "
		       "known to be off: understudy takeover --fenced-by-operator";
	if (s->state == S_STANDBY && s->await_resume && !s->wit && !s->o->fence_cmd && !by_operator)
		return "this side handed the guest over (switchover) and its successor has not "
		       "connected since: it may run the guest. Once it is known to be off: "
		       "understudy takeover --fenced-by-operator";
	return NULL;
}

/* Control request "takeover [fenced-by-operator]": a standby that holds a
 * complete checkpoint resumes the guest now (a cluster manager decided,
 * e.g. Pacemaker's promote); anything else is refused and nothing changes.
 * fenced-by-operator: a person made sure the old primary is off, so the
 * fence command is skipped (a fence-failed standby resumes); with a witness
 * the key is still won first. */
char *repl_sec_takeover_request(struct repl_secondary *s, const char *req)
{
	const char *arg = req + strlen("takeover"), *why;
	char *reply = NULL;
	bool by_operator;

	while (*arg == ' ')
		arg++;
	by_operator = !strcmp(arg, "fenced-by-operator");
	if (*arg && !by_operator)
		return strdup("error usage: takeover [fenced-by-operator]\n");
	if (s->state == S_CONTENDING || s->state == S_ACTIVE) {
		s->operator_fenced |= by_operator && s->state == S_CONTENDING;
		if (asprintf(&reply, s->state == S_ACTIVE ? "ok already active (took over at epoch "
			     "%llu)\n" : "ok contending for the witness key at epoch %llu\n",
			     (unsigned long long)s->stage.applied) < 0)
			return NULL;
		return reply;
	}
	if ((s->state != S_STANDBY && s->state != S_FENCE_FAILED) || !s->stage.have_ckpt ||
	    !s->con || !s->vm) {
		if (asprintf(&reply, "error no takeover: this secondary is %s and %s\n",
			     repl_sec_state_name(s), s->stage.have_ckpt ? "holds a checkpoint" :
			     "holds no complete checkpoint") < 0)
			return NULL;
		return reply;
	}
	if ((why = takeover_refusal(s, by_operator))) {
		log_warn(TAG, "takeover refused: %s", why);
		if (asprintf(&reply, "error no takeover: %s\n", why) < 0)
			return NULL;
		return reply;
	}
	if (by_operator) {
		log_warn(TAG, "takeover on the operator's word that the old primary is off (standby "
			 "at epoch %llu, %s): no fence command", (unsigned long long)s->stage.applied,
			 repl_sec_state_name(s));
		repl_event_log("fenced-by-operator");
	} else {
		log_warn(TAG, "takeover requested on the control socket (standby at epoch %llu)",
			 (unsigned long long)s->stage.applied);
	}
	s->operator_fenced = by_operator;
	if (s->state == S_FENCE_FAILED) {
		/* The key won before the fence may have lapsed since: win it back. */
		ev_timer_stop(s->loop, &s->fence_w);
		if (s->wit && !repl_witness_valid(s->wit)) {
			s->state = S_CONTENDING;
			s->contend_t0_ns = now_ns();
			repl_witness_contend(s->wit, s->token, s->switching ? s->switch_token : NULL);
		} else {
			fence_and_take_over(s, s->fence_reason ? s->fence_reason : "takeover requested");
		}
		return takeover_reply(s);
	}
	repl_sec_begin_takeover(s);
	return takeover_reply(s);
}
