/* The roles a host plays, and where one becomes the other. Protected, the
 * primary engine (primary/) runs the epochs on a VM serve.c serves; after
 * a planned switchover the same process goes on as the new primary's
 * standby (the VM it ran holds the switch epoch: no resync). A standby that
 * took over runs its guest under an engine too: the one this file attaches
 * for it (struct secondary_engine), since secondary/ and primary/ do not
 * know each other. */
#include "host/host_int.h"
#include "primary/primary.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int engine_attach(void *ctx, struct ev_loop *loop, struct repl_vm *vm, struct repl_witness *wit,
			 const struct repl_primary_opts *o, const struct repl_primary_host *cb)
{
	struct host_engine *h = ctx;

	return repl_primary_attach(loop, vm, wit, o, cb, &h->p);
}

int host_protect(struct repl_primary **engine, struct ev_loop *loop, const char *req,
		 const char *not_now, struct repl_vm *vm, struct repl_witness *wit,
		 const struct repl_ops *ops, const struct repl_primary_host *cb, char **reply)
{
	struct repl_primary_opts o;
	char *copy = strdup(req), err[256];
	const char *why;
	int r;

	*reply = NULL;
	if (!copy)
		return -ENOMEM;
	r = repl_protect_parse(copy, &o, err, sizeof(err));
	o.ops = *ops;
	if (r == 0 && not_now) {
		snprintf(err, sizeof(err), "%s", not_now);
		r = -EINVAL;
	}
	if (r == 0 && (why = repl_protect_refusal(&o, vm->m))) {
		snprintf(err, sizeof(err), "%s", why);
		r = -EINVAL;
	}
	if (r == 0 && *engine && !repl_primary_replaceable(*engine)) {
		snprintf(err, sizeof(err), "the VM is %s%s", repl_primary_state(*engine),
			 repl_primary_protecting(*engine) ? ": one secondary at a time" :
			 ": not now (a goodbye or withdrawal pending, or handed over)");
		r = -EBUSY;
	}
	if (r == 0) {
		repl_primary_detach(*engine);
		*engine = NULL;
		r = repl_primary_attach(loop, vm, wit, &o, cb, engine);
		if (r < 0)
			snprintf(err, sizeof(err), "cannot protect: %s", strerror(-r));
	}
	free(copy);
	if (asprintf(reply, r == 0 ? "ok protecting: connecting to the secondary\n" : "error %s\n",
		     err) < 0)
		*reply = NULL;
	return r;
}

/* "protect PEER ..." on the guest a standby took over: the same engine as
 * `understudy primary`, in place of the one before if it may be replaced. */
static char *engine_protect(void *ctx, struct ev_loop *loop, const char *req, const char *not_now,
			    struct repl_vm *vm, struct repl_witness *wit, const struct repl_ops *ops,
			    const struct repl_primary_host *cb)
{
	struct host_engine *h = ctx;
	char *reply;

	(void)host_protect(&h->p, loop, req, not_now, vm, wit, ops, cb, &reply);
	return reply;
}

static void engine_detach(void *ctx)
{
	struct host_engine *h = ctx;

	repl_primary_detach(h->p);
	h->p = NULL;
}

static void engine_query(void *ctx, struct secondary_engine_state *st)
{
	struct host_engine *h = ctx;

	if (!h->p)
		return;
	st->state = repl_primary_state(h->p);
	st->protecting = repl_primary_protecting(h->p);
	st->replaceable = repl_primary_replaceable(h->p);
	st->keeps_standby = repl_primary_keeps_standby(h->p);
}

static bool engine_switched(void *ctx, struct repl_switch *sw)
{
	struct host_engine *h = ctx;

	return h->p && repl_primary_switched(h->p, sw);
}

static char *engine_request(void *ctx, const char *req)
{
	struct host_engine *h = ctx;

	if (!h->p)
		return NULL;
	if (!strncmp(req, "takeover", 8) && (!req[8] || req[8] == ' '))
		return repl_primary_resume_request(h->p);   /* NULL: the standby's takeover */
	if (!strncmp(req, "migrate ", 8) && repl_primary_protecting(h->p))
		return repl_primary_migrate_request(h->p, req);   /* to its own secondary */
	if (!strcmp(req, "cancel") && repl_primary_protecting(h->p) &&
	    strcmp(repl_primary_state(h->p), "switching")) {
		repl_primary_cancel(h->p);
		return strdup("ok cancelled: the VM runs on here\n");
	}
	if (!strncmp(req, "switchover", 10) && (!req[10] || req[10] == ' '))
		return repl_switchover_request(h->p, req);
	if (!strncmp(req, "status", 6))
		return repl_primary_status_text(h->p, req);
	return NULL;
}

void host_engine_init(struct host_engine *h)
{
	h->p = NULL;
	h->ops = (struct secondary_engine){
		.ctx = h, .attach = engine_attach, .protect = engine_protect, .detach = engine_detach,
		.query = engine_query, .switched = engine_switched, .request = engine_request,
	};
}
