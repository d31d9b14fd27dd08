/* The secondary: keeps a hot standby (memory slots registered, vCPUs created,
 * not running) at the last complete checkpoint (staging.c), and takes over
 * when the primary is silent for timeout_ms (the watch and the policy per
 * kind of failure: link.c; the primary's frames: receive.c).
 *
 *   waiting -> hello -> standby -> active (took over) -> done
 *
 * This file is the agent's life: its setup and end, the engine it protects
 * a guest it took over with (the host's, struct secondary_engine), the
 * planned switchover that makes a primary this standby or this side's
 * engine hand the guest back, what its control requests and a signal do.
 * The loop, the control socket and the signal handlers are the host's: it
 * runs the agent between secondary_new and secondary_free.
 *
 * Everything a takeover needs (today the console listener) is acquired at
 * start (repl_sec_acquire_resources): a secondary that cannot hold it does
 * not start, and a takeover only starts serving what it already holds.
 * The takeover itself (takeover.c): with --fence-cmd the old
 * primary is fenced first, with a witness the key is won first; a standby
 * the witness no longer vouches for stands down. */
#include "secondary/secondary.h"
#include "secondary/secondary_int.h"
#include "secondary/drill.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/notify.h"
#include "secondary/fence.h"

#define TAG "secondary"

static void attach_after_switch(struct repl_secondary *s);

/* ---- the engine ------------------------------------------------------------------ */

/* The engine that protects the guest we run ended: the guest stopped
 * (its last epoch committed) or this copy was told it was replaced. */
static void on_engine_ended(void *ctx, int status)
{
	struct repl_secondary *s = ctx;

	if (s->eng->switched(s->eng->ctx, &(struct repl_switch){ 0 })) {
		ev_timer_set(&s->switch_w, 0, 0);
		ev_timer_start(s->loop, &s->switch_w);   /* not inside the engine's call */
		return;
	}
	s->exit_status = status;
	s->state = S_DONE;
	ev_break(s->loop, EVBREAK_ALL);
}

/* ---- planned switchover -------------------------------------------------------- */

/* The standby holds sw->epoch of s->vm, paused: wait for the new primary's
 * resuming Hello. Silent past the failure timeout, it is a lost primary,
 * as after any link loss (the takeover resumes from that epoch). */
static void adopt_standby(struct repl_secondary *s, const struct repl_switch *sw)
{
	s->cfg = s->vm->m->cfg;
	s->hello_digest = machine_config_digest(&s->cfg);
	repl_vm_mark_standby(s->vm);
	repl_vm_set_gated(s->vm, true);
	s->vm->on_stopped = NULL;
	s->vm->cb_ctx = NULL;
	s->vm->witness = NULL;
	repl_staging_attach(&s->stage, s->vm, s->hello_digest);
	s->stage.applied = sw->epoch;
	s->stage.have_ckpt = true;
	if (s->wit && sw->token[0])  /* vouched for as the new owner won the key */
		snprintf(s->token, sizeof(s->token), "%s", sw->token);
	else if (s->wit)
		repl_sec_new_token(s);        /* the new owner vouches for it once protected */
	s->state = S_STANDBY;
	s->got_hello = s->migrating = s->switching = s->told_silent = false;
	s->await_resume = true;
	s->link.last_rx_ns = now_ns();
	s->switches++;
	s->switch_downtime_ms = sw->downtime_ms;
	s->switch_epoch = sw->epoch;
	log_info(TAG, "STANDBY after the switchover: holds epoch %llu (downtime %.3f ms); waiting "
		 "for the new primary at %s", (unsigned long long)sw->epoch, sw->downtime_ms,
		 s->listen_at);
	repl_sec_event(s, REPL_EV_SWITCHOVER, "switchover: this side is the standby now");
}

/* Our engine handed the guest over: this side becomes the standby again. */
static void on_switched(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_secondary *s = w->data;
	struct secondary_engine_state eng;
	struct repl_switch sw;
	int r;

	(void)loop;
	(void)revents;
	repl_sec_engine_state(s, &eng);
	if (!eng.state && s->state == S_ACTIVE) {
		attach_after_switch(s);
		return;
	}
	if (!s->eng->switched(s->eng->ctx, &sw))
		return;
	s->eng->detach(s->eng->ctx);
	s->con = repl_vm_take_console(s->vm);
	if (sw.listen[0])            /* switchover --listen: where to wait now */
		snprintf(s->listen_at, sizeof(s->listen_at), "%s", sw.listen);
	adopt_standby(s, &sw);
	r = net_listen(s->loop, &s->o->net, s->listen_at, repl_sec_on_accept, s, &s->lis);
	if (r < 0) {
		repl_fault_set(&s->fault, REPL_FAULT_LOCAL_FATAL, r, "cannot listen on %s after the "
			       "switchover: %s", s->listen_at, strerror(-r));
		log_error(TAG, "%s: the new primary cannot reach this standby", s->fault.what);
	}
}

static void attach_after_switch(struct repl_secondary *s)
{
	struct repl_primary_host host = { .ended = on_engine_ended, .ctx = s };
	struct repl_primary_opts o;
	int r;

	memset(&o, 0, sizeof(o));
	o.peer = s->switch_listen;
	o.net = s->o->net;
	o.epoch_ms = s->peer_timing.epoch_ms;
	o.timeout_ms = s->peer_timing.timeout_ms;
	o.handshake_timeout_ms = s->o->handshake_timeout_ms;
	o.resume_epoch = s->stage.applied;
	o.ops = s->o->ops;
	o.home_listen = s->listen_at;
	o.switch_downtime_ms = s->switch_in_ms;
	r = s->eng->attach(s->eng->ctx, s->loop, s->vm, s->wit, &o, &host);
	if (r < 0) {
		log_error(TAG, "cannot protect the guest onto the old primary (%s): it runs here "
			  "UNPROTECTED", strerror(-r));
		repl_vm_set_gated(s->vm, false);
	}
}

/* "protect PEER ...": the guest this side took over gets a secondary of its
 * own (re-protection), through the same engine as `understudy primary`. */
static char *protect_request(struct repl_secondary *s, const char *req)
{
	struct repl_primary_host host = { .ended = on_engine_ended, .ctx = s };
	char not_now[256];

	snprintf(not_now, sizeof(not_now), "this secondary is %s: only a guest it took over can be "
		 "protected", repl_sec_state_name(s));
	return s->eng->protect(s->eng->ctx, s->loop, req, s->state != S_ACTIVE ? not_now : NULL,
			       s->vm, s->wit, &s->o->ops, &host);
}

/* "switchback": a standby asks its primary for the guest back (a
 * switchover towards this side; the primary decides, see primary/cycle.c). */
static char *switchback_request(struct repl_secondary *s)
{
	if (s->state != S_STANDBY || !s->link.conn || !s->stage.have_ckpt)
		return strdup("error not a standby connected to its primary\n");
	if (repl_link_send_section(&s->link, REPL_SWITCH_REQUEST, "", 0) < 0)
		return strdup("error cannot ask the primary\n");
	log_info(TAG, "asked the primary for a switchover back to this side");
	return strdup("ok asked the primary to switch over to this side\n");
}

/* ---- what the host calls: requests, a signal, setup and end --------------------- */

char *secondary_request(struct repl_secondary *s, const char *req, bool *known)
{
	char *reply;

	*known = true;
	if ((reply = s->eng->request(s->eng->ctx, req)))
		return reply;      /* the engine's: migrate, cancel, switchover, status */
	if (!strncmp(req, "takeover", 8) && (!req[8] || req[8] == ' '))
		return repl_sec_takeover_request(s, req);
	if (!strncmp(req, "drill", 5))
		return repl_drill_request(s, req);
	if (!strcmp(req, "switchback"))
		return switchback_request(s);
	if (!strncmp(req, "protect ", 8) || !strncmp(req, "migrate ", 8))
		return protect_request(s, req);
	if (!strncmp(req, "status", 6))
		return repl_sec_status_text(s, req);
	*known = false;
	return NULL;
}

bool secondary_signal(struct repl_secondary *s, int signum)
{
	struct secondary_engine_state eng;

	log_info(TAG, "signal %d: stopping", signum);
	/* Protected again: the guest stops through the engine, which commits its
	 * last epoch and tells its secondary not to take over (on_engine_ended). */
	repl_sec_engine_state(s, &eng);
	if (eng.state && !strcmp(eng.state, "switching")) {
		log_warn(TAG, "the guest is being handed over: the signal waits for the outcome");
		return false;
	}
	if (eng.state && s->state == S_ACTIVE && eng.protecting) {
		machine_stop(s->vm->m, 0);
		return false;
	}
	s->state = S_DONE;
	return true;
}

int secondary_new(struct ev_loop *loop, const struct repl_secondary_opts *o,
		  const struct secondary_engine *eng, struct repl_vm *vm,
		  const struct repl_switch *sw, struct repl_secondary **out)
{
	struct repl_secondary *s = calloc(1, sizeof(*s));
	int r;

	*out = NULL;
	if (!s) {
		repl_vm_free(vm);
		return -ENOMEM;
	}
	s->o = o;
	s->eng = eng;
	s->loop = loop;
	snprintf(s->listen_at, sizeof(s->listen_at), "%s", o->listen);
	repl_timing_init(&s->timing, o->timeout_ms, 0);
	repl_link_init(&s->link, PROTO_MAX_PAYLOAD_DEFAULT);
	repl_staging_init(&s->stage);
	repl_sec_link_init(s);        /* candidates, the watch and heartbeat timers */
	ev_timer_init(&s->switch_w, on_switched, 0, 0);
	s->switch_w.data = s;
	repl_metrics_watch_secondary(o->ops.metrics, s);
	if (vm) {
		/* A primary that switched over: its VM and console are the standby's. */
		s->vm = vm;
		s->con = repl_vm_take_console(vm);
		if (sw->wit)
			repl_sec_witness_adopt(s, sw->wit);
		adopt_standby(s, sw);
	} else if ((r = repl_sec_acquire_resources(s)) < 0 || (r = repl_sec_witness_setup(s)) < 0) {
		goto err;
	} else if (o->pin.guest[0]) {
		repl_sec_build_spare(s);
	}
	r = net_listen(s->loop, &o->net, o->listen, repl_sec_on_accept, s, &s->lis);
	if (r < 0) {
		log_error(TAG, "cannot listen on %s: %s", o->listen, strerror(-r));
		goto err;
	}
	*out = s;
	return 0;
err:
	secondary_free(s);
	return r < 0 ? r : -EINVAL;
}

void secondary_start(struct repl_secondary *s)
{
	const struct repl_secondary_opts *o = s->o;

	if (o->manual_takeover)
		log_info(TAG, "waiting for a primary on %s (takeover only when told: --takeover manual)",
			 o->listen);
	else
		log_info(TAG, "waiting for a primary on %s (takeover after %u ms of silence)", o->listen,
			 o->timeout_ms);
	net_notify(NET_NOTIFY_STATUS, "waiting for a primary on %s", o->listen);
	if (s->wit)
		log_info(TAG, "fencing: " REPL_FENCING_WITNESS " (key %s, lease %u ms): a takeover "
			 "only after winning the key", o->witness.key, o->witness.lease_ms);
	else
		log_info(TAG, "fencing: " REPL_FENCING);
	ev_timer_start(s->loop, &s->watch_w);
	ev_timer_start(s->loop, &s->hb_w);
}

int secondary_exit_status(const struct repl_secondary *s)
{
	return s->exit_status;
}

void secondary_free(struct repl_secondary *s)
{
	struct secondary_engine_state est;
	bool withdraw;

	if (!s)
		return;
	ev_timer_stop(s->loop, &s->watch_w);
	ev_timer_stop(s->loop, &s->hb_w);
	ev_timer_stop(s->loop, &s->switch_w);
	repl_sec_fence_retry_stop(s);
	console_free(s->con);
	repl_candidates_close_all(&s->cands, "stopping");
	if (s->lis)
		net_listener_close(s->lis);
	repl_drill_free(s);
	repl_link_fini(&s->link);
	repl_pc_dst_free(s);         /* before the stop: no vCPU waits on a missing page */
	if (s->vm) {
		machine_stop(s->vm->m, 0);
		machine_pause(s->vm->m);
	}
	repl_sec_engine_state(s, &est);
	withdraw = est.state && !est.keeps_standby;
	s->eng->detach(s->eng->ctx);
	repl_vm_free(s->vm);
	repl_vm_free(s->spare);
	if (s->wit) {
		repl_witness_release(s->wit, withdraw);
		repl_witness_free(s->wit);
	}
	repl_staging_fini(&s->stage);
	repl_metrics_watch_secondary(s->o->ops.metrics, NULL);
	free(s);
}
