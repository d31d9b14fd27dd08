/* How a host runs the primary engine: attached to the VM the host runs
 * (repl_primary_attach: `understudy primary` boots the VM for it, `protect`
 * attaches it to a VM that runs), the control requests it answers, and
 * what the host asks of it (state, switchover, cancel). Top of primary/:
 * calls engine.c, cycle.c and failure.c. */
#include "primary/primary_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG "primary"

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
	p->owned = host->owned;
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
	repl_primary_watchers_init(p);
	/* Logged first: a migration's total time counts the setup below. */
	if (!p->owned)
		log_info(TAG, "protecting the running VM: connecting to the secondary at %s", p->o->peer);
	if ((r = repl_primary_init(p)) < 0) {
		repl_primary_fini(p);
		vm->on_stopped = p->host_stopped;
		vm->on_output = NULL;
		vm->cb_ctx = p->host_stopped_ctx;
		repl_vm_set_gated(vm, false);
		free(p);
		return r;
	}
	if ((o->bandwidth_mib || o->postcopy_after) &&
	    (r = repl_pc_src_new(p, o->bandwidth_mib, o->postcopy_after)) < 0) {
		repl_primary_fini(p);
		vm->on_stopped = p->host_stopped;
		vm->cb_ctx = p->host_stopped_ctx;
		repl_vm_set_gated(vm, false);
		free(p);
		return r;
	}
	repl_primary_witness_attach(p);
	p->ep.hot_off = p->migrate_ms != 0;
	repl_metrics_watch_primary(p->o->ops.metrics, p);
	repl_primary_start(p);
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
	repl_primary_reclaim_abandon(p);
	repl_primary_witness_detach(p);
	if (p->link.conn && p->state >= P_SYNC && p->state < P_UNPROTECTED &&
	    repl_send_fence(&p->link, UNDERSTUDY__FENCE_ACTION__FENCE_PRIMARY_STOPS, p->ep.acked,
			    "protection detached") < 0)
		log_warn(TAG, "could not tell the secondary we stop");
	repl_primary_fini(p);
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
	repl_primary_drop_protection(p, &f);
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
	char *reply = NULL;

	if (!p->in_doubt)
		return NULL;
	if (p->reclaim_lost)
		return strdup("error the destination won the witness key: it may run the guest\n");
	if (p->reclaiming) {
		if (asprintf(&reply, "ok contending for the witness key at epoch %llu\n",
			     (unsigned long long)p->final_epoch) < 0)
			return NULL;
		return reply;
	}
	repl_primary_resume_in_doubt(p, "takeover asked: the destination does not run the guest "
				     "(the operator says so)");
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

/* The link's strings a switch keeps, in the order of struct repl_switch's str[]. */
static const char **switch_str(struct net_config *n, int i)
{
	const char **f[5] = { &n->cert, &n->key, &n->ca, &n->peer_name, &n->rdma_provider };

	return f[i];
}

bool repl_primary_switched(const struct repl_primary *p, struct repl_switch *sw)
{
	struct net_config n = p->o->net;

	if (!p->switched)
		return false;
	memset(sw, 0, sizeof(*sw));
	sw->epoch = p->final_epoch;
	snprintf(sw->listen, sizeof(sw->listen), "%s", p->switch_listen);
	snprintf(sw->token, sizeof(sw->token), "%s", p->switch_token);
	sw->downtime_ms = p->downtime_ms;
	sw->bytes_sent = p->link.bytes_sent;
	sw->net = n;
	for (int i = 0; i < 5; i++) {
		/* no pointer into sw itself: the host copies it */
		*switch_str(&sw->net, i) = NULL;
		if (*switch_str(&n, i))
			snprintf(sw->str[i], sizeof(sw->str[i]), "%s", *switch_str(&n, i));
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
	for (int i = 0; i < 5; i++)   /* o points into this sw: it lives as long */
		*switch_str(&o->net, i) = sw->str[i][0] ? sw->str[i] : NULL;
	o->timeout_ms = sw->timeout_ms;
	o->handshake_timeout_ms = sw->handshake_timeout_ms;
	o->witness = sw->witness;
	o->disk = sw->disk[0] ? sw->disk : NULL;
}
