/* A VM served unprotected (run, restore): on the loop until it stops or a
 * signal, with a control socket on which it writes snapshot files on
 * request, a full one and then diffs against the previous one, and on
 * which `understudy protect` attaches a secondary (the protection engine
 * of replication/, repl_primary_attach). While protected, snapshots are
 * refused: the engine owns the dirty log. */
#include "host/host_int.h"
#include "primary/primary.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "checkpoint/checkpoint.h"
#include "net/control.h"
#include "net/notify.h"

#define TAG "snapshot"

/* The snapshots a running VM writes on request. */
struct snapshots {
	struct machine *m;
	struct ckpt *ckpt;        /* reused buffers */
	uint64_t last_id;         /* id of the last snapshot written, 0 if none */
	uint64_t count;
};

static void snapshots_init(struct snapshots *s, struct machine *m)
{
	memset(s, 0, sizeof(*s));
	s->m = m;
}

static void snapshots_fini(struct snapshots *s)
{
	if (s->ckpt) {
		ckpt_fini(s->ckpt);
		free(s->ckpt);
	}
	s->ckpt = NULL;
}

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...)
{
	va_list ap;
	char *s = NULL;

	va_start(ap, f);
	if (vasprintf(&s, f, ap) < 0)
		s = NULL;
	va_end(ap);
	return s;
}

/* status of a VM no secondary protects: no engine to ask, what the VM is. */
static char *unprotected_status(const char *request, const char *name, const struct repl_vm *vm)
{
	char text[1024];
	size_t n;
	json_object *o;

	if (!strstr(request, "json")) {
		n = (size_t)snprintf(text, sizeof(text), "role primary\nstate unprotected\nname %s\n",
				     name);
		repl_vm_status_text(vm, &vm->m->cfg, text, sizeof(text), &n);
		return fmt("%sfencing: none (no secondary)\n", text);
	}
	o = json_object_new_object();
	proto_json_add_str(o, "role", "primary");
	proto_json_add_str(o, "state", "unprotected");
	proto_json_add_str(o, "name", name);
	repl_vm_status_json(vm, &vm->m->cfg, o);
	return proto_json_line(o);
}

/* Control request "snapshot full|full+disk|incremental FILE" -> reply text
 * (malloc'd). The pause covers the capture only (with the disk: its
 * non-zero blocks too); the file is written after resume (on the loop
 * thread, which is idle otherwise in `run`). */
static char *snapshot_request(struct snapshots *s, const char *request)
{
	struct ckpt_file_info info;
	struct ckpt_disk disk;
	char kind[16], path[PATH_MAX];
	bool full, with_disk;
	int r;

	if (sscanf(request, "snapshot %15s %4095[^\n]", kind, path) != 2 ||
	    (strcmp(kind, "full") && strcmp(kind, "full+disk") && strcmp(kind, "incremental")))
		return fmt("error unknown request (want: snapshot full|full+disk|incremental FILE)");
	full = strcmp(kind, "incremental") != 0;
	with_disk = !strcmp(kind, "full+disk");
	if (with_disk && !machine_disk_blocks(s->m))
		return fmt("error usage: --with-disk: the VM has no disk");
	if (!full && !s->last_id)
		return fmt("error no previous snapshot to diff against: take a full one first");
	if (!s->ckpt) {
		s->ckpt = malloc(sizeof(*s->ckpt));
		if (!s->ckpt)
			return fmt("error out of memory");
		ckpt_init(s->ckpt);
	}
	ckpt_disk_init(&disk);
	r = with_disk ? ckpt_take_disk(s->m, s->ckpt, &disk) : ckpt_take(s->m, s->ckpt, full);
	if (r < 0) {
		ckpt_disk_fini(&disk);
		return fmt("error capturing the machine: %s", strerror(-r));
	}
	memset(&info, 0, sizeof(info));
	info.id = ckpt_file_new_id();
	info.parent_id = full ? 0 : s->last_id;
	r = ckpt_file_write_disk(path, s->ckpt, &s->m->cfg, &info, with_disk ? &disk : NULL);
	if (with_disk)
		log_info(TAG, "disk: %zu non-zero blocks of %llu in the snapshot", disk.n,
			 (unsigned long long)machine_disk_blocks(s->m));
	ckpt_disk_fini(&disk);
	if (r < 0) {
		/* The next diff is against the last good file: keep its pages. */
		ckpt_requeue(s->m, s->ckpt);
		if (r == -ELOOP || r == -EEXIST || r == -EISDIR)
			return fmt("error usage: --out %s: not a regular file (the previous snapshot "
				   "is unchanged)", path);
		return fmt("error writing %s: %s (the previous snapshot is unchanged)", path,
			   strerror(-r));
	}
	s->last_id = info.id;
	s->count++;
	log_info(TAG, "%s snapshot %s: %zu pages, pause %.0f us (copy %.0f us)", kind, path,
		 s->ckpt->npages, s->ckpt->stats.pause_ns / 1e3, s->ckpt->stats.copy_ns / 1e3);
	return fmt("ok %s %s pages=%zu pause_us=%.0f", full ? "full" : kind, path, s->ckpt->npages,
		   s->ckpt->stats.pause_ns / 1e3);
}

struct run_ctx {
	struct ev_loop *loop;
	struct repl_vm *vm;
	struct snapshots *snaps;
	struct repl_primary *engine;    /* attached by "protect", or NULL */
	struct repl_ops ops;            /* metrics and hooks, handed to each engine */
	int status;
	bool stopped;
	bool switched;                  /* the engine switched over: become a standby */
	struct repl_switch sw;
};

static void on_stopped(void *ctx, int status)
{
	struct run_ctx *r = ctx;

	r->stopped = true;
	r->status = status;
	ev_break(r->loop, EVBREAK_ALL);
}

static void on_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
	struct run_ctx *r = w->data;

	(void)revents;
	log_info("run", "signal %d: stopping the VM", w->signum);
	/* Protected: the guest stops through the engine, which commits its
	 * last epoch and tells the secondary not to take over. */
	if (r->engine && !strcmp(repl_primary_state(r->engine), "switching"))
		log_warn("run", "the guest is being handed over: the signal waits for the outcome");
	else if (r->engine && repl_primary_protecting(r->engine))
		machine_stop(r->vm->m, 0);
	else
		ev_break(loop, EVBREAK_ALL);
}

/* The protection engine ended: the guest stopped, its last epoch committed. */
static void on_engine_ended(void *ctx, int status)
{
	struct run_ctx *r = ctx;

	if (repl_primary_switched(r->engine, &r->sw))
		r->switched = true;
	r->stopped = true;
	r->status = status;
	ev_break(r->loop, EVBREAK_ALL);
}

/* "protect PEER [key=value ...]": a new engine, unless one protects the VM
 * (host_protect, as on a guest a standby took over). */
static char *protect_request(struct run_ctx *r, const char *request)
{
	struct repl_primary_host host = { .ended = on_engine_ended, .ctx = r };
	char *reply;

	/* A migration to its own secondary (or refused, saying why). */
	if (!strncmp(request, "migrate", 7) && r->engine && repl_primary_protecting(r->engine))
		return repl_primary_migrate_request(r->engine, request);
	if (host_protect(&r->engine, r->loop, request, NULL, r->vm, NULL, &r->ops, &host, &reply) == 0)
		r->snaps->last_id = 0;         /* the dirty log is the engine's from now on */
	return reply;
}

/* "cancel": a migration (or protection) not yet handed over stops; the
 * secondary is told to stand down and the VM runs on here. */
static char *cancel_request(struct run_ctx *r)
{
	if (!r->engine || !repl_primary_protecting(r->engine))
		return fmt("error nothing to cancel");
	if (!strcmp(repl_primary_state(r->engine), "switching"))
		return fmt("error the guest is being handed over: too late to cancel");
	repl_primary_cancel(r->engine);
	return fmt("ok cancelled: the VM runs on here");
}

static char *on_control(void *ctx, const char *request)
{
	struct run_ctx *r = ctx;
	char *reply;

	if (!strcmp(request, "takeover") && r->engine &&
	    (reply = repl_primary_resume_request(r->engine)))
		return reply;
	if ((!strncmp(request, "protect", 7) || !strncmp(request, "migrate", 7)) &&
	    (!request[7] || request[7] == ' '))
		return protect_request(r, request);
	if (!strcmp(request, "cancel"))
		return cancel_request(r);
	if (!strncmp(request, "switchover", 10) && (!request[10] || request[10] == ' ')) {
		if (!r->engine)
			return fmt("error the VM is not protected: nothing to switch over to");
		return repl_switchover_request(r->engine, request);
	}
	if (!strncmp(request, "status", 6)) {
		if (r->engine)
			return repl_primary_status_text(r->engine, request);
		return unprotected_status(request, repl_ops_vm(&r->ops, r->vm->m->cfg.guest), r->vm);
	}
	if (strncmp(request, "snapshot", 8) || (request[8] && request[8] != ' '))
		return control_reply_unknown(request, "status, snapshot, protect, migrate, cancel, "
					     "switchover");
	if (r->engine && repl_primary_protecting(r->engine))
		return fmt("error the VM is %s: snapshots are not taken while a secondary is "
			   "attached (it owns the dirty log)", repl_primary_state(r->engine));
	return snapshot_request(r->snaps, request);
}

int host_serve(struct ev_loop *loop, struct repl_vm *vm, const char *control_path,
	       const struct repl_ops *ops)
{
	struct snapshots snaps;
	struct run_ctx ctx = { .loop = loop, .vm = vm, .snaps = &snaps };
	struct control *control = NULL;
	ev_signal sigint_w, sigterm_w;

	if (ops)
		ctx.ops = *ops;
	snapshots_init(&snaps, vm->m);
	vm->on_stopped = on_stopped;
	vm->cb_ctx = &ctx;
	if (control_path && control_open(loop, control_path, on_control, &ctx, &control) < 0) {
		snapshots_fini(&snaps);
		repl_vm_free(vm);
		return 1;
	}
	ev_signal_init(&sigint_w, on_signal, SIGINT);
	ev_signal_init(&sigterm_w, on_signal, SIGTERM);
	sigint_w.data = sigterm_w.data = &ctx;
	ev_signal_start(loop, &sigint_w);
	ev_signal_start(loop, &sigterm_w);
	repl_vm_mark_running(vm);
	machine_resume(vm->m);
	net_notify(NET_NOTIFY_READY, "the VM runs (unprotected)");
	ev_run(loop, 0);
	if (!ctx.switched)   /* switched over: this process goes on as the standby */
		net_notify(NET_NOTIFY_STOPPING, "stopping");

	if (!ctx.stopped)
		machine_stop(vm->m, 0);
	machine_pause(vm->m);
	repl_primary_detach(ctx.engine);
	control_free(control);
	ev_signal_stop(loop, &sigint_w);
	ev_signal_stop(loop, &sigterm_w);
	snapshots_fini(&snaps);
	if (ctx.switched) {
		/* Paused at the switch epoch, which the new primary holds too. */
		struct repl_secondary_opts so;
		struct host_engine eng;

		vm->on_stopped = NULL;
		vm->cb_ctx = NULL;
		log_set_role("secondary");
		repl_switch_secondary_opts(&ctx.sw, control_path, &so);
		so.ops = ctx.ops;
		host_engine_init(&eng);
		return secondary_adopt(loop, &so, &eng.ops, vm, &ctx.sw);
	}
	repl_vm_free(vm);
	if (!ctx.stopped)
		return 0;
	return ctx.status < 0 ? 1 : ctx.status;
}
