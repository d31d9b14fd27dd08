/* The life of a host process, whatever roles it plays in turn: one loop,
 * one control socket and one pair of SIGINT/SIGTERM handlers from its
 * start to its end. A VM a primary runs (serve.c) becomes its new
 * primary's standby at a switchover, with the socket open throughout (a
 * request that arrives meanwhile waits for the standby to answer it); a
 * standby (secondary/) stays the agent it is, whatever it runs in between
 * (a guest it took over, handed back at a switchover). The dispatcher and
 * the signal handler ask the role of the moment. */
#include "host/host_int.h"
#include "primary/primary.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "net/control.h"
#include "net/notify.h"

struct life {
	struct ev_loop *loop;
	struct control *control;
	ev_signal sigint_w, sigterm_w;
	bool open;                       /* the two above are there (life_open) */
	struct host_vm *served;          /* the role now: a VM a primary runs, */
	struct repl_secondary *standby;  /* ...or a standby agent (NULL between the two) */
};

static char *on_control(void *ctx, const char *request)
{
	struct life *l = ctx;
	bool known = false;
	char *reply = NULL;

	if (l->served)
		return host_vm_request(l->served, request);
	if (l->standby)
		reply = secondary_request(l->standby, request, &known);
	return known ? reply : control_reply_unknown(request, SECONDARY_REQUESTS);
}

static void on_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
	struct life *l = w->data;
	bool stop = true;

	(void)revents;
	if (l->served)
		stop = host_vm_signal(l->served, w->signum);
	else if (l->standby)
		stop = secondary_signal(l->standby, w->signum);
	if (stop)
		ev_break(loop, EVBREAK_ALL);
}

static void life_init(struct life *l, struct ev_loop *loop)
{
	memset(l, 0, sizeof(*l));
	l->loop = loop;
	ev_signal_init(&l->sigint_w, on_signal, SIGINT);
	ev_signal_init(&l->sigterm_w, on_signal, SIGTERM);
	l->sigint_w.data = l->sigterm_w.data = l;
}

/* The control socket at path (if set) and the signal handlers, once. */
static int life_open(struct life *l, const char *path)
{
	if (path && control_open(l->loop, path, on_control, l, &l->control) < 0)
		return -1;
	ev_signal_start(l->loop, &l->sigint_w);
	ev_signal_start(l->loop, &l->sigterm_w);
	l->open = true;
	return 0;
}

static void life_close(struct life *l)
{
	control_free(l->control);
	l->control = NULL;
	ev_signal_stop(l->loop, &l->sigint_w);
	ev_signal_stop(l->loop, &l->sigterm_w);
	l->open = false;
}

/* The standby agent of o (with vm and sw: the one a switchover made of
 * this VM; see secondary_new) until it ends: the exit status. The control
 * socket opens once it listens, unless open already. */
static int standby_run(struct life *l, const struct repl_secondary_opts *o, struct repl_vm *vm,
		       const struct repl_switch *sw)
{
	struct host_engine eng;
	int status = 1;

	host_engine_init(&eng);
	if (secondary_new(l->loop, o, &eng.ops, vm, sw, &l->standby) < 0) {
		life_close(l);
		return 1;
	}
	if (!l->open && life_open(l, o->control) < 0)
		goto out;
	secondary_start(l->standby);
	ev_run(l->loop, 0);
	status = secondary_exit_status(l->standby);
	net_notify(NET_NOTIFY_STOPPING, "stopping (exit status %d)", status);
out:
	life_close(l);
	secondary_free(l->standby);
	l->standby = NULL;
	return status;
}

/* A VM a primary runs (primary: `understudy primary`'s options, or NULL;
 * wit: its witness) until it stops, and after a switchover the standby it
 * becomes. */
static int serve(struct ev_loop *loop, struct repl_vm *vm, const char *control_path,
		 const struct repl_ops *ops, const struct repl_primary_opts *primary,
		 struct repl_witness *wit)
{
	struct repl_secondary_opts so;
	struct repl_switch sw;
	struct repl_vm *standby;
	struct life l;
	int status;

	life_init(&l, loop);
	if (host_vm_new(loop, vm, ops, primary, wit, &l.served) < 0)
		return 1;
	if (life_open(&l, control_path) == 0 && host_vm_start(l.served) == 0)
		ev_run(loop, 0);
	status = host_vm_end(l.served, &sw, &standby);
	if (!standby) {
		life_close(&l);
		host_vm_free(l.served);
		return status;
	}
	host_vm_free(l.served);
	l.served = NULL;
	/* Switched over: paused at the switch epoch, which the new primary
	 * holds too; this process goes on as its standby. */
	log_set_role("secondary");
	repl_switch_secondary_opts(&sw, control_path, &so);
	if (ops)
		so.ops = *ops;
	return standby_run(&l, &so, standby, &sw);
}

int host_serve(struct ev_loop *loop, struct repl_vm *vm, const char *control_path,
	       const struct repl_ops *ops)
{
	return serve(loop, vm, control_path, ops, NULL, NULL);
}

int host_primary_run(struct ev_loop *loop, const struct repl_primary_opts *o)
{
	struct repl_witness *wit;
	struct repl_vm *vm;
	int r;

	log_set_role("primary");
	r = host_vm_boot_primary(loop, o, &vm, &wit);
	if (r)
		return r;
	return serve(loop, vm, o->control, &o->ops, o, wit);
}

int host_secondary_run(struct ev_loop *loop, const struct repl_secondary_opts *o)
{
	struct life l;

	log_set_role("secondary");
	life_init(&l, loop);
	return standby_run(&l, o, NULL, NULL);
}
