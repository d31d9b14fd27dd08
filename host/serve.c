/* A VM a primary runs (run, restore, primary), served on the host's loop
 * until it stops or a signal (life.c owns the loop, the control socket and
 * the signal handlers; this file answers the requests and decides what a
 * signal does, whatever protects the VM). It writes snapshot files on
 * request, a full one and then diffs
 * against the previous one, and `understudy protect` attaches a secondary
 * to it (the protection engine of primary/, repl_primary_attach); `understudy
 * primary` starts it with the engine of its --peer attached, and a
 * `protect` replaces that engine once its secondary is gone. While
 * protected, snapshots are refused: the engine owns the dirty log. */
#include "host/host_int.h"
#include "primary/primary.h"

#include <errno.h>
#include <limits.h>
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
	/* What both engines show, as it stands with none: a reader of any VM's
	 * JSON finds these too (docs/design.md, "What status shows"). */
	proto_json_add_str(o, "peer", "");
	proto_json_add_u64(o, "epoch", 0);
	proto_json_add_u64(o, "acked", 0);
	proto_json_add_u64(o, "dirty_pages_last", 0);
	proto_json_add_fixed(o, "since_heartbeat_ms", -1, 1);
	proto_json_add_str(o, "reason", "");
	proto_json_add_str(o, "fencing", "none (no secondary)");
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

struct host_vm {
	struct ev_loop *loop;
	struct repl_vm *vm;
	struct snapshots snaps;
	struct repl_primary *engine;    /* attached by "protect" or --peer, or NULL */
	bool first;                     /* ...the one of --peer: it keeps that secondary */
	const struct repl_primary_opts *primary;   /* `understudy primary`'s options, or NULL */
	struct repl_witness *wit;       /* its witness (the host's, lent to each engine), or NULL */
	struct repl_ops ops;            /* metrics and hooks, handed to each engine */
	int status;
	bool started;                   /* the guest ran (host_vm_start) */
	bool stopped;
	bool switched;                  /* the engine switched over: become a standby */
	bool keep_standby;              /* at the end: the engine's standby is not withdrawn */
	struct repl_switch sw;
};

static void on_stopped(void *ctx, int status)
{
	struct host_vm *r = ctx;

	r->stopped = true;
	r->status = status;
	ev_break(r->loop, EVBREAK_ALL);
}

/* SIGINT, SIGTERM. With an engine the guest stops through it (protected:
 * its last epoch committed, the secondary told not to take over), which
 * then ends (on_engine_ended); a hand-over waits for its outcome. */
bool host_vm_signal(struct host_vm *r, int signum)
{
	log_info("host", "signal %d: stopping the VM", signum);
	if (!r->engine)
		return true;
	repl_primary_stop(r->engine);
	return false;
}

/* The protection engine ended: the guest stopped, its last epoch committed. */
static void on_engine_ended(void *ctx, int status)
{
	struct host_vm *r = ctx;

	if (repl_primary_switched(r->engine, &r->sw))
		r->switched = true;
	r->stopped = true;
	r->status = status;
	ev_break(r->loop, EVBREAK_ALL);
}

/* "protect PEER [key=value ...]": a new engine, unless one protects the VM
 * (host_protect, as on a guest a standby took over). */
static char *protect_request(struct host_vm *r, const char *request)
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
		r->snaps.last_id = 0;          /* the dirty log is the engine's from now on */
		r->first = false;              /* --peer's engine replaced */
	}
	if (!r->engine)
		r->first = false;
	return reply;
}

/* "cancel": a migration (or protection) not yet handed over stops; the
 * secondary is told to stand down and the VM runs on here. */
static char *cancel_request(struct host_vm *r)
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

char *host_vm_request(struct host_vm *r, const char *request)
{
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
	return snapshot_request(&r->snaps, request);
}

/* `understudy primary`: the engine of its --peer protects the VM from the
 * start; the VM ends with it if it never reaches its secondary. */
static int attach_first(struct host_vm *r)
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

int host_vm_new(struct ev_loop *loop, struct repl_vm *vm, const struct repl_ops *ops,
		const struct repl_primary_opts *primary, struct repl_witness *wit,
		struct host_vm **out)
{
	struct host_vm *r = calloc(1, sizeof(*r));

	*out = NULL;
	if (!r) {
		machine_stop(vm->m, 0);
		machine_pause(vm->m);
		repl_vm_free(vm);
		if (wit) {
			repl_witness_release(wit, true);
			repl_witness_free(wit);
		}
		return -ENOMEM;
	}
	r->loop = loop;
	r->vm = vm;
	r->primary = primary;
	r->wit = wit;
	if (ops)
		r->ops = *ops;
	snapshots_init(&r->snaps, vm->m);
	vm->on_stopped = on_stopped;
	vm->cb_ctx = r;
	*out = r;
	return 0;
}

int host_vm_start(struct host_vm *r)
{
	if (r->primary && attach_first(r) < 0)
		return -1;
	repl_vm_mark_running(r->vm);
	machine_resume(r->vm->m);
	if (!r->primary)
		net_notify(NET_NOTIFY_READY, "the VM runs (unprotected)");
	r->started = true;
	return 0;
}

int host_vm_end(struct host_vm *r, struct repl_switch *sw, struct repl_vm **standby)
{
	const char *why = NULL;
	int status = 1;

	*standby = NULL;
	if (r->started) {
		if (r->engine)
			why = repl_primary_end_reason(r->engine);
		status = !r->stopped ? 0 : r->status < 0 ? 1 : r->status;
		if (!r->switched)   /* switched over: this process goes on as the standby */
			net_notify(NET_NOTIFY_STOPPING, "stopping (exit status %d)%s%s", status,
				   why ? ": " : "", why ? why : "");
	}
	if (!r->stopped)
		machine_stop(r->vm->m, 0);
	machine_pause(r->vm->m);
	r->keep_standby = r->engine && repl_primary_keeps_standby(r->engine);
	repl_primary_detach(r->engine);
	r->engine = NULL;
	snapshots_fini(&r->snaps);
	if (r->switched) {
		/* Paused at the switch epoch, which the new primary holds too. */
		r->vm->on_stopped = NULL;
		r->vm->cb_ctx = NULL;
		*sw = r->sw;
		if (r->primary) {
			/* The key went to the new primary (resigned at the final
			 * ACK); the same witness serves the standby this is now. */
			sw->witness = r->primary->witness;
			sw->wit = r->wit;
		}
		*standby = r->vm;
		r->vm = NULL;
		r->wit = NULL;
	}
	return status;
}

void host_vm_free(struct host_vm *r)
{
	if (!r)
		return;
	repl_vm_free(r->vm);           /* what it still releases passes the lease gate */
	if (r->wit) {
		repl_witness_release(r->wit, !r->keep_standby);
		repl_witness_free(r->wit);
	}
	free(r);
}

/* The VM of `understudy primary`: the witness key first (nothing boots
 * while the witness vouches for a standby), the VM booted with its output
 * gated. 0, or the exit status. */
int host_vm_boot_primary(struct ev_loop *loop, const struct repl_primary_opts *o,
			 struct repl_vm **vm, struct repl_witness **wit)
{
	int r;

	*vm = NULL;
	r = repl_primary_witness_take(loop, &o->witness, wit);
	if (r < 0)
		return r == -EBUSY ? REPL_EXIT_STANDBY_VOUCHED : 1;
	if (repl_vm_new(loop, &o->cfg, o->console, vm) < 0)
		goto err_wit;
	(*vm)->witness = *wit;
	repl_vm_set_gated(*vm, true);
	if (repl_vm_boot(*vm) < 0) {
		repl_vm_free(*vm);
		*vm = NULL;
		goto err_wit;
	}
	/* Loading a Linux kernel and initrd can take seconds: the loop's clock,
	 * read before, would start the connect and handshake deadlines late. */
	ev_now_update(loop);
	return 0;
err_wit:
	if (*wit) {
		repl_witness_release(*wit, true);
		repl_witness_free(*wit);
	}
	*wit = NULL;
	return 1;
}
