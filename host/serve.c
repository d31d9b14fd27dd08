/* A running VM (run, restore, primary): on the loop until it stops or a
 * signal, with one control socket and one signal handler whatever protects
 * it. It writes snapshot files on request, a full one and then diffs
 * against the previous one, and `understudy protect` attaches a secondary
 * to it (the protection engine of primary/, repl_primary_attach); `understudy
 * primary` starts it with the engine of its --peer attached, and a
 * `protect` replaces that engine once its secondary is gone. While
 * protected, snapshots are refused: the engine owns the dirty log. */
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
#include "kmod/mutant.h"
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
	struct repl_primary *engine;    /* attached by "protect" or --peer, or NULL */
	bool first;                     /* ...the one of --peer: it keeps that secondary */
	const struct repl_primary_opts *primary;   /* `understudy primary`'s options, or NULL */
	struct repl_witness *wit;       /* its witness (the host's, lent to each engine), or NULL */
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

/* SIGINT, SIGTERM. With an engine the guest stops through it (protected:
 * its last epoch committed, the secondary told not to take over), which
 * then ends (on_engine_ended); a hand-over waits for its outcome. */
static void on_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
	struct run_ctx *r = w->data;

	(void)revents;
	log_info("host", "signal %d: stopping the VM", w->signum);
	if (r->engine)
		repl_primary_stop(r->engine);
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

	if (MUTANT(refuse_reprotect) && r->primary)   /* make check-mutants: as `primary` was */
		return control_reply_unknown(request, "status, migrate, cancel, switchover");
	/* A migration to its own secondary (or refused, saying why). */
	if (!strncmp(request, "migrate", 7) && r->engine && repl_primary_protecting(r->engine))
		return repl_primary_migrate_request(r->engine, request);
	if (host_protect(&r->engine, r->loop, request, NULL, r->vm, r->wit, &r->ops, &host,
			 &reply) == 0) {
		r->snaps->last_id = 0;         /* the dirty log is the engine's from now on */
		r->first = false;              /* --peer's engine replaced */
	}
	if (!r->engine)
		r->first = false;
	return reply;
}

/* "cancel": a migration (or protection) not yet handed over stops; the
 * secondary is told to stand down and the VM runs on here. */
static char *cancel_request(struct run_ctx *r)
{
	if (!r->engine || !repl_primary_protecting(r->engine))
		return fmt("error nothing to cancel");
	if (r->first)
		return fmt("error a primary agent keeps the secondary it was started with (--peer) "
			   "while it is there: it migrates only to that one (start the VM with run, "
			   "then protect, to move it anywhere; once that secondary is lost, protect "
			   "attaches another)");
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
	if (!strncmp(request, "test wedge ", 11))
		return repl_fault_test_wedge(request + 11);
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

/* `understudy primary`: the engine of its --peer protects the VM from the
 * start; the VM ends with it if it never reaches its secondary. */
static int attach_first(struct run_ctx *r)
{
	struct repl_primary_host host = { .ended = on_engine_ended, .ctx = r, .owned = true };
	const struct repl_primary_opts *o = r->primary;

	if (repl_primary_attach(r->loop, r->vm, r->wit, o, &host, &r->engine) < 0)
		return -1;
	r->first = true;
	if (r->wit)
		log_info("primary", "fencing: " REPL_FENCING_WITNESS " (key %s, lease %u ms): output "
			 "leaves only while the lease is provably valid", o->witness.key,
			 o->witness.lease_ms);
	else
		log_info("primary", "fencing: " REPL_FENCING);
	net_notify(NET_NOTIFY_STATUS, "connecting to the secondary at %s", o->peer);
	return 0;
}

/* host_serve, and for `understudy primary` (primary not NULL) the engine
 * of its options attached from the start: the VM ends with it when it
 * never reaches that secondary, "cancel" keeps it, and a "protect"
 * replaces it once it is lost. wit: primary's witness (taken before the
 * boot), the host's from now on: released at the end, or handed to the
 * standby a switchover makes of this VM. */
static int serve(struct ev_loop *loop, struct repl_vm *vm, const char *control_path,
		 const struct repl_ops *ops, const struct repl_primary_opts *primary,
		 struct repl_witness *wit)
{
	struct snapshots snaps;
	struct run_ctx ctx = { .loop = loop, .vm = vm, .snaps = &snaps, .primary = primary,
			       .wit = wit };
	struct control *control = NULL;
	ev_signal sigint_w, sigterm_w;
	bool keep_standby = false;
	const char *why = NULL;
	int status = 1;

	if (ops)
		ctx.ops = *ops;
	snapshots_init(&snaps, vm->m);
	vm->on_stopped = on_stopped;
	vm->cb_ctx = &ctx;
	ev_signal_init(&sigint_w, on_signal, SIGINT);
	ev_signal_init(&sigterm_w, on_signal, SIGTERM);
	sigint_w.data = sigterm_w.data = &ctx;
	if (control_path && control_open(loop, control_path, on_control, &ctx, &control) < 0)
		goto out;
	ev_signal_start(loop, &sigint_w);
	ev_signal_start(loop, &sigterm_w);
	if (primary && attach_first(&ctx) < 0)
		goto out;
	repl_vm_mark_running(vm);
	machine_resume(vm->m);
	if (!primary)
		net_notify(NET_NOTIFY_READY, "the VM runs (unprotected)");
	ev_run(loop, 0);
	if (ctx.engine)
		why = repl_primary_end_reason(ctx.engine);
	status = !ctx.stopped ? 0 : ctx.status < 0 ? 1 : ctx.status;
	if (!ctx.switched)   /* switched over: this process goes on as the standby */
		net_notify(NET_NOTIFY_STOPPING, "stopping (exit status %d)%s%s", status,
			   why ? ": " : "", why ? why : "");

out:
	if (!ctx.stopped)
		machine_stop(vm->m, 0);
	machine_pause(vm->m);
	keep_standby = ctx.engine && repl_primary_keeps_standby(ctx.engine);
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
		if (primary) {
			/* The key went to the new primary (resigned at the final
			 * ACK); the same witness serves the standby this is now. */
			ctx.sw.witness = primary->witness;
			ctx.sw.wit = wit;
		}
		repl_switch_secondary_opts(&ctx.sw, control_path, &so);
		so.ops = ctx.ops;
		host_engine_init(&eng);
		return secondary_adopt(loop, &so, &eng.ops, vm, &ctx.sw);
	}
	repl_vm_free(vm);           /* what it still releases passes the lease gate */
	if (wit) {
		repl_witness_release(wit, !keep_standby);
		repl_witness_free(wit);
	}
	return status;
}

int host_serve(struct ev_loop *loop, struct repl_vm *vm, const char *control_path,
	       const struct repl_ops *ops)
{
	return serve(loop, vm, control_path, ops, NULL, NULL);
}

/* The VM of `understudy primary`: the witness key first (nothing boots
 * while the witness vouches for a standby), the VM booted with its output
 * gated, then served as any VM with the engine of --peer attached. */
int host_primary_run(struct ev_loop *loop, const struct repl_primary_opts *o)
{
	struct repl_witness *wit;
	struct repl_vm *vm;
	int r;

	log_set_role("primary");
	r = repl_primary_witness_take(loop, &o->witness, &wit);
	if (r < 0)
		return r == -EBUSY ? REPL_EXIT_STANDBY_VOUCHED : 1;
	if (repl_vm_new(loop, &o->cfg, o->console, &vm) < 0)
		goto err_wit;
	vm->witness = wit;
	repl_vm_set_gated(vm, true);
	if (repl_vm_boot(vm) < 0) {
		repl_vm_free(vm);
		goto err_wit;
	}
	/* Loading a Linux kernel and initrd can take seconds: the loop's clock,
	 * read before, would start the connect and handshake deadlines late. */
	ev_now_update(loop);
	return serve(loop, vm, o->control, &o->ops, o, wit);
err_wit:
	if (wit) {
		repl_witness_release(wit, true);
		repl_witness_free(wit);
	}
	return 1;
}
