/* The primary engine's epoch cycle: the epoch timer (or guest output)
 * starts an epoch (epoch.c captures and sends it), the ACK releases it
 * and decides the next step of a migration or switchover (the hand-over).
 * The initial sync's outcome starts the first epoch. Below engine.c (the
 * link's callbacks) and run.c; calls failure.c. */
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

static void send_handover(struct repl_primary *p);
static void pause_for_handover(struct repl_primary *p, bool postcopy);

/* ---- epochs --------------------------------------------------------------- */

/* What starts an epoch, counted apart (status epochs_timer, epochs_output):
 * the timer, waiting guest output, or neither (the first epoch after the
 * sync, the final one). */
enum epoch_trigger { EPOCH_BY_OTHER, EPOCH_BY_TIMER, EPOCH_BY_OUTPUT };

/* 1: an epoch left; 0: it stretched; <0: failed (handled). */
static int run_epoch(struct repl_primary *p, enum epoch_trigger by)
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
		if (by == EPOCH_BY_TIMER)
			p->epochs_timer++;
		else if (by == EPOCH_BY_OUTPUT)
			p->epochs_output++;
		ev_timer_stop(p->loop, &p->precopy_w);   /* this epoch came before it */
		if (repl_epoch_precopy_wanted(&p->ep)) {
			ev_timer_set(&p->precopy_w, p->o->epoch_ms / 2e3, 0);
			ev_timer_start(p->loop, &p->precopy_w);
		}
	}
	if (r < 0) {
		repl_primary_on_fault(p, &f);
	} else if (r > 0 && p->transient_since_ns) {
		log_info(TAG, "epoch %llu left: recovered from %s", (unsigned long long)p->ep.epoch,
			 p->fault.what);
		p->transient_since_ns = 0;
		p->fault.kind = REPL_FAULT_NONE;
	}
	return r;
}

/* Pre-copy, half-way through a steady epoch: not in a migration or a
 * hand-over (their final epochs have rules of their own), nor while the
 * guest is throttled or stopping. */
void repl_primary_on_precopy(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_primary *p = w->data;
	struct repl_fault f;

	(void)loop;
	(void)revents;
	if (p->state != P_PROTECTED || p->finishing || p->throttle_pct || p->pc ||
	    p->ep.hot_off || p->switching_over || !repl_epoch_precopy_wanted(&p->ep))
		return;
	if (repl_epoch_precopy(&p->ep, &f) < 0)
		repl_primary_on_fault(p, &f);
}

/* Output-triggered epochs: held output ends the epoch early (at least
 * min_epoch_ms after the last capture), and the periodic timer starts
 * over from there. */
static void early_epoch(struct repl_primary *p)
{
	ev_timer_stop(p->loop, &p->early_w);
	if (p->state != P_PROTECTED || p->finishing || p->throttle_pct)
		return;
	if (p->pc && repl_pc_src_ready(p) && !p->ep.open) {   /* an open epoch closes first */
		pause_for_handover(p, true);   /* as on_epoch_timer */
		return;
	}
	(void)run_epoch(p, EPOCH_BY_OUTPUT);
	if (p->state == P_PROTECTED)
		ev_timer_again(p->loop, &p->epoch_w);
}

void repl_primary_on_early(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)revents;
	early_epoch(w->data);
}

void repl_primary_on_vm_output(void *ctx)
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

void repl_primary_on_epoch_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_primary *p = w->data;

	(void)loop;
	(void)revents;
	if (p->state == P_PROTECTED && p->pc && repl_pc_src_ready(p) && !p->ep.open)
		pause_for_handover(p, true);    /* instead of the epoch: its pages go post-copy */
	else if (p->state == P_PROTECTED || p->state == P_PROTECTING)
		(void)run_epoch(p, EPOCH_BY_TIMER);
}

void repl_primary_try_final_epoch(struct repl_primary *p)
{
	int r;

	if (!p->final_pending)
		return;
	r = run_epoch(p, EPOCH_BY_OTHER);
	if (r == 0 || (r < 0 && p->state != P_UNPROTECTED && p->state != P_DONE))
		return;               /* stretched (no free slot yet) or retrying */
	p->final_pending = false;
	p->final_epoch = r > 0 ? p->ep.epoch : 0;
	if (p->state == P_SWITCHING && p->final_epoch)
		send_handover(p);
}

/* ---- migration: the hand-over to the secondary ------------------------------ */

/* Fence SWITCHES: epoch was the last; the old primary's standby waits at
 * listen, under token with a witness (NULL: none). */
static int send_switch(struct repl_link *l, uint64_t epoch, const char *listen, const char *token,
		       uint64_t released, uint64_t paused_us)
{
	Understudy__Fence f = UNDERSTUDY__FENCE__INIT;

	f.released = released;
	f.paused_us = paused_us;
	f.action = UNDERSTUDY__FENCE_ACTION__FENCE_PRIMARY_SWITCHES;
	f.epoch = epoch;
	f.reason = (char *)"switchover: the guest is handed over";
	f.listen = (char *)listen;
	f.standby_token = (char *)(token ? token : "");
	return repl_link_send_msg(l, PROTO_T_FENCE, &f.base);
}

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
		send_switch(&p->link, p->final_epoch, p->switch_listen,
			    p->wit ? p->switch_token : NULL, repl_vm_released(p->vm),
			    (now_ns() - p->switch_t0_ns) / 1000) :
		repl_send_fence(&p->link, UNDERSTUDY__FENCE_ACTION__FENCE_PRIMARY_MIGRATES,
				p->final_epoch, "migration: the guest is handed over");

	if (r == 0 && !p->switching_over)
		p->handover_tx = p->link.owned;   /* the newest of the link's sends */
	if (r < 0)
		repl_primary_fault(p, repl_fault_send(r), r, "cannot send the hand-over");
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

/* An ACK: the round trip this epoch shows, the smallest kept. The
 * bandwidth cap is a migration's (p->pc): without one, postcopy_src.c is
 * not asked. */
static void note_rtt(struct repl_primary *p)
{
	double cap = p->pc ? repl_pc_src_cap_bytes_per_ms(p) : 0, bw = p->link_bytes_per_ms, rtt;

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
	repl_primary_throttle_off(p);
	if (postcopy && (r = repl_pc_src_announce(p)) < 0) {
		repl_primary_fault(p, repl_fault_send(r), r, "post-copy: the stale pages could not be named");
		return;
	}
	repl_primary_try_final_epoch(p);
}

/* After this process stalled past the secondary's failover timeout, the
 * secondary may run the guest already: ACKs it sent before deciding (read
 * now, before its Fence) release nothing until it acknowledges an epoch
 * captured after the stall, which a secondary that took over never does. */
static void hold_after_stall(struct repl_primary *p, uint64_t epoch)
{
	uint64_t now = now_ns(), window = 2ull * repl_primary_stall_ms(p) * 1000000ull;

	if (!p->release_after && p->peer_timing.timeout_ms && now - p->stall_seen_ns > window &&
	    repl_link_stalled_ns(&p->link, repl_primary_stall_ms(p)) >=
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

void repl_primary_on_ack(struct repl_primary *p, uint64_t epoch)
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
		repl_primary_event(p, REPL_EV_PROTECTED, "the secondary holds the first checkpoint");
		if (p->wit) {
			p->vouch_asked = true;
			repl_witness_vouch(p->wit, p->standby_token);
		}
	}
	repl_primary_try_final_epoch(p);
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
		repl_primary_finish(p, p->exit_status);
	else if ((p->migrate_ms || p->switching_over) && p->state == P_PROTECTED && !p->finishing)
		maybe_switch(p);
}

/* ---- initial sync ------------------------------------------------------------ */

void repl_primary_on_sync_done(void *ctx)
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
	(void)run_epoch(p, EPOCH_BY_OTHER);
	if (p->state == P_PROTECTING)
		ev_timer_start(p->loop, &p->epoch_w);
}

void repl_primary_on_sync_failed(void *ctx, const struct repl_fault *f)
{
	repl_primary_on_fault(ctx, f);
}

void repl_primary_start_sync(struct repl_primary *p)
{
	struct repl_fault f;

	p->sync_bytes0 = p->link.bytes_sent;
	if (repl_sync_start(&p->sync, &f) < 0) {
		repl_primary_on_fault(p, &f);
		return;
	}
	p->state = P_SYNC;
	net_notify(NET_NOTIFY_STATUS, "initial sync to %s", p->o->peer);
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
