/* The secondary's staging: epoch N arrives as EpochBegin, sections, page
 * batches, EpochEnd. Pages go to a staging checkpoint, never to the
 * standby; only at EpochEnd, with the page count and digest verified and the
 * whole checkpoint validated, is it applied. A torn or bad transfer leaves
 * the standby at the previous complete checkpoint.
 *
 * Before the first checkpoint (initial sync) pages go straight into the
 * standby's RAM: there is no complete state to protect yet.
 *
 * Guest output of applied epochs that the primary may not have released yet
 * is held; on takeover it is written to the console first, so a reply whose
 * ACK raced with the primary's death still reaches the client (which may
 * then see a line twice, never a line it could not have seen). */
#include "secondary/secondary_int.h"
#include "replication/replication.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kmod/mutant.h"

#define TAG "staging"
#define HELD_OUTPUT_MAX (16u << 20)

void repl_staging_init(struct repl_staging *g)
{
	memset(g, 0, sizeof(*g));
	ckpt_init(&g->stage);
	proto_buf_init(&g->out);
	proto_buf_init(&g->held);
	repl_disk_blocks_init(&g->disk);
}

void repl_staging_fini(struct repl_staging *g)
{
	ckpt_fini(&g->stage);
	proto_buf_fini(&g->out);
	proto_buf_fini(&g->held);
	repl_disk_blocks_fini(&g->disk);
}

void repl_staging_attach(struct repl_staging *g, struct repl_vm *vm, uint64_t config_digest)
{
	g->vm = vm;
	g->max_gfn = vm ? machine_page_gfn(vm->m, vm->m->ram_pages - 1) + 1 : 0;
	g->config_digest = config_digest;
	g->have_ckpt = g->in_epoch = false;
	g->applied = 0;
	proto_buf_reset(&g->held);
	g->held_from = 0;
	g->held_based = false;
}

void repl_staging_abort(struct repl_staging *g)
{
	g->in_epoch = false;
}

int repl_staging_begin(struct repl_staging *g, uint64_t epoch)
{
	if (!g->vm || g->in_epoch || epoch != g->applied + 1)
		return -EPROTO;
	g->in_epoch = true;
	g->cur = epoch;
	/* The failover tests place their kills against this line. */
	log_debug(TAG, "epoch %llu: begins at %llu ns (monotonic)", (unsigned long long)epoch,
		  (unsigned long long)now_ns());
	g->crc = 0;
	g->has_state = g->has_verify = false;
	g->released = 0;
	proto_buf_reset(&g->out);
	repl_disk_blocks_reset(&g->disk);
	g->disk_crc = 0;
	ckpt_reset(&g->stage);
	g->stage.config_digest = g->config_digest;
	return 0;
}

/* Disk blocks: staged with the rest of the epoch, written to the image
 * only when it commits (repl_staging_end); before the first checkpoint (the
 * initial sync) straight to the image, as pages go straight to RAM. */
static int disk_section(struct repl_staging *g, const Understudy__Section *sec)
{
	struct machine *m = g->vm->m;
	uint32_t crc = 0;
	int r;

	if (g->in_epoch) {
		r = repl_disk_stage(&g->disk, machine_disk_blocks(m), sec->data.data, sec->data.len,
				    &g->disk_crc);
		/* make check-mutants: blocks written on receipt */
		if (MUTANT(disk_apply_early) && r == 0 && repl_disk_apply(m, &g->disk, false) < 0)
			return -EIO;
		return r;
	}
	if (g->have_ckpt)
		return -EPROTO;      /* blocks outside an epoch after the first checkpoint */
	repl_disk_blocks_reset(&g->disk);
	r = repl_disk_stage(&g->disk, machine_disk_blocks(m), sec->data.data, sec->data.len, &crc);
	if (r == 0)
		r = repl_disk_apply(m, &g->disk, false) < 0 ? -EIO : 0;
	repl_disk_blocks_reset(&g->disk);
	return r;
}

int repl_staging_section(struct repl_staging *g, const Understudy__Section *sec)
{
	if (g->vm && !strcmp(sec->name, PROTO_SECTION_DISK))
		return disk_section(g, sec);
	if (!g->in_epoch)
		return -EPROTO;
	if (!strcmp(sec->name, PROTO_SECTION_CONSOLE)) {
		if (g->out.len + sec->data.len > HELD_OUTPUT_MAX)
			return -EMSGSIZE;
		return proto_buf_append(&g->out, sec->data.data, sec->data.len);
	}
	if (!strcmp(sec->name, PROTO_SECTION_RELEASED))
		return proto_released_decode(sec->data.data, sec->data.len, &g->released);
	if (!strcmp(sec->name, PROTO_SECTION_VERIFY)) {
		g->has_verify = true;
		if (proto_verify_decode(sec->data.data, sec->data.len, &g->verify_want) < 0 ||
		    g->verify_want.ncpus != (uint32_t)g->vm->m->ncpus)
			return -EBADMSG;
		return 0;
	}
	if (!strcmp(sec->name, PROTO_SECTION_STATE)) {
		g->has_state = true;
		return ckpt_set_state(&g->stage, sec->data.data, sec->data.len);
	}
	return -EBADMSG;
}

/* ---- pages ------------------------------------------------------------------ */

static const void *page_base(void *ctx, uint64_t gfn)
{
	struct repl_staging *g = ctx;
	int64_t pg = machine_gfn_page(g->vm->m, gfn);

	return pg < 0 ? NULL : machine_page_hva(g->vm->m, (uint64_t)pg);
}

/* Initial sync: no complete checkpoint exists yet, pages go straight in. */
static int page_direct(void *ctx, uint64_t gfn, const void *data)
{
	struct repl_staging *g = ctx;
	int64_t pg = machine_gfn_page(g->vm->m, gfn);

	if (pg < 0)
		return -EBADMSG;
	machine_fill_page(g->vm->m, (uint64_t)pg, data);
	return 0;
}

static int page_staged(void *ctx, uint64_t gfn, const void *data)
{
	struct repl_staging *g = ctx;

	/* An epoch names a page at most twice (its pre-copy, then the pause):
	 * more is a bad peer. The later copy wins at the apply. */
	if (g->stage.npages >= 2 * g->vm->m->ram_pages)
		return -EBADMSG;
	g->crc = proto_digest_page(g->crc, gfn, data);
	/* make check-mutants: applied as it arrives */
	if (MUTANT(apply_partial) && page_direct(ctx, gfn, data) < 0)
		return -EBADMSG;
	return ckpt_add_page(&g->stage, gfn, data);
}

int repl_staging_pages(struct repl_staging *g, const struct proto_frame *f)
{
	struct proto_page_sink sink = { .base = page_base, .st = &g->st.pages };

	if (!g->vm)
		return -EPROTO;
	if (g->in_epoch)
		sink.page = page_staged;
	else if (!g->have_ckpt)
		sink.page = page_direct;
	else
		return -EPROTO;   /* pages outside an epoch after the first checkpoint */
	return proto_pages_decode(f->payload, f->len, g->max_gfn, &sink, g, NULL);
}

/* ---- the end of an epoch --------------------------------------------------------- */

/* Keeps the epoch's output with the rest not known to be released. */
static void drop_held(struct repl_staging *g, uint64_t n)
{
	if (n > g->held.len)
		n = g->held.len;
	if (!n)
		return;              /* held may be empty and unallocated */
	memmove(g->held.data, g->held.data + n, g->held.len - n);
	g->held.len -= n;
	g->held_from += n;
}

void repl_staging_released(struct repl_staging *g, uint64_t mark)
{
	if (g->held_based && mark > g->held_from)
		drop_held(g, mark - g->held_from);
}

static int hold_output(struct repl_staging *g)
{
	int r;

	/* A primary's output counts from its boot, not from this standby: an
	 * engine attached to a VM that ran (protect, a switchover) closes the
	 * gate with everything before released, so the first epoch's release
	 * mark is where its output starts. */
	if (!g->held_based) {
		g->held_from = g->released;
		g->held_based = true;
	}
	r = proto_buf_append(&g->held, g->out.data, g->out.len);

	if (r < 0)
		return r;
	log_debug(TAG, "epoch %llu: output +%zu, primary released up to %llu",
		  (unsigned long long)g->cur, g->out.len, (unsigned long long)g->released);
	if (g->released > g->held_from)
		drop_held(g, g->released - g->held_from);
	if (g->held.len > HELD_OUTPUT_MAX) {
		/* The primary says nothing of releases: keep the newest bytes. */
		log_warn(TAG, "more than %u bytes of unreleased output held: oldest %zu dropped",
			 HELD_OUTPUT_MAX, g->held.len - HELD_OUTPUT_MAX);
		drop_held(g, g->held.len - HELD_OUTPUT_MAX);
	}
	return 0;
}

/* Test mode (UNDERSTUDY_VERIFY): the standby equals the primary at every
 * acknowledged epoch. The primary sends its digest of RAM and the complete
 * machine state read in the pause (the epoch's "verify" section); after
 * applying the epoch the standby is read back from KVM, digested the same
 * way (checkpoint/digest.c) and compared. */
bool repl_verify_standby(struct machine *m, const struct proto_verify *want, uint64_t epoch)
{
	struct proto_verify got;
	char diff[512];
	int r, n;

	if ((r = ckpt_digest_machine(m, &got)) < 0) {
		log_error("verify", "VERIFY FAILED at epoch %llu: the standby's state cannot be read: %s",
			  (unsigned long long)epoch, strerror(-r));
		return false;
	}
	n = ckpt_digest_diff(want, &got, diff, sizeof(diff));
	if (!n)
		return true;
	log_error("verify", "VERIFY FAILED at epoch %llu: the standby differs from the primary in "
		  "%d part(s): %s", (unsigned long long)epoch, n, diff);
	return false;
}

/* The standby, read back from KVM, equals the primary's RAM and complete
 * state at this acknowledged epoch. */
static void verify_applied(struct repl_staging *g)
{
	g->verify_last = g->verify_want;
	if (repl_verify_standby(g->vm->m, &g->verify_want, g->cur))
		g->verify_ok++;
	else
		g->verify_failed++;
}

/* The staged epoch is whole: every page counted and digested as announced. */
static int check_complete(struct repl_staging *g, const Understudy__EpochEnd *ee,
			  struct repl_fault *f)
{
	uint32_t digest;

	if (!g->in_epoch || ee->epoch != g->cur || ee->npages != g->stage.npages || !g->has_state ||
	    proto_digest_decode(ee->digest.data, ee->digest.len, &digest) < 0) {
		repl_fault_set(f, REPL_FAULT_PEER_PROTOCOL, -EBADMSG,
			       "epoch %llu incomplete: %llu of %llu pages%s",
			       (unsigned long long)ee->epoch, (unsigned long long)g->stage.npages,
			       (unsigned long long)ee->npages, g->has_state ? "" : ", no state");
		return -EBADMSG;
	}
	if (digest != g->crc) {
		repl_fault_set(f, REPL_FAULT_PEER_PROTOCOL, -EBADMSG, "epoch %llu: page digest mismatch",
			       (unsigned long long)g->cur);
		return -EBADMSG;
	}
	if (ee->disk_blocks != g->disk.n ||
	    (g->disk.n && (proto_digest_decode(ee->disk_digest.data, ee->disk_digest.len,
					       &digest) < 0 || digest != g->disk_crc))) {
		repl_fault_set(f, REPL_FAULT_PEER_PROTOCOL, -EBADMSG,
			       "epoch %llu: disk blocks incomplete or corrupt (%zu of %llu)",
			       (unsigned long long)g->cur, g->disk.n,
			       (unsigned long long)ee->disk_blocks);
		return -EBADMSG;
	}
	return 0;
}

/* Whose fault a failed apply is: validation refused the peer's checkpoint,
 * or memory ran out here, or KVM refused a valid one (the standby is now
 * inconsistent). */
static enum repl_fault_kind apply_fault(int err)
{
	if (err == -EIO)
		return REPL_FAULT_LOCAL_FATAL;
	return err == -ENOMEM ? REPL_FAULT_LOCAL_TRANSIENT : REPL_FAULT_PEER_PROTOCOL;
}

/* The primary's guest rebooted: its RAM is zero but for the pages of this
 * epoch. The standby's is cleared as well, once the epoch is known good (a
 * refused one leaves the standby as it was). */
static int clear_for_reboot(struct repl_staging *g, struct repl_fault *f)
{
	int r = ckpt_validate(g->vm->m, &g->stage);

	if (r < 0) {
		repl_fault_set(f, apply_fault(r), r, "epoch %llu cannot be applied: %s",
			       (unsigned long long)g->cur, strerror(-r));
		return r;
	}
	if ((r = machine_ram_clear(g->vm->m)) < 0)
		repl_fault_set(f, REPL_FAULT_LOCAL_FATAL, r, "epoch %llu: clearing the standby's RAM "
			       "for the guest's reboot: %s", (unsigned long long)g->cur, strerror(-r));
	return r;
}

int repl_staging_end(struct repl_staging *g, const Understudy__EpochEnd *ee, struct repl_fault *f)
{
	uint64_t t0 = now_ns();
	int r;

	if ((r = check_complete(g, ee, f)) < 0)
		return r;
	if (ee->reboot && (r = clear_for_reboot(g, f)) < 0)
		return r;
	if ((r = ckpt_apply(g->vm->m, &g->stage)) < 0) {
		repl_fault_set(f, apply_fault(r), r, "epoch %llu cannot be applied: %s",
			       (unsigned long long)g->cur, strerror(-r));
		return r;
	}
	/* The epoch's disk blocks reach the image now that it commits; with
	 * --disk-sync ack durably (the first time with the initial sync's). */
	if (g->disk.n || (g->disk_sync && !g->have_ckpt)) {
		if ((r = repl_disk_apply(g->vm->m, &g->disk, g->disk_sync)) < 0) {
			repl_fault_set(f, REPL_FAULT_LOCAL_FATAL, r, "epoch %llu: writing its disk "
				       "blocks: %s", (unsigned long long)g->cur, strerror(-r));
			return r;
		}
		repl_event_log("disk-commit %llu %zu %s", (unsigned long long)g->cur, g->disk.n,
			       g->disk_sync ? "durable" : "written");
	}
	if (g->has_verify)
		verify_applied(g);
	if ((r = hold_output(g)) < 0) {
		repl_fault_set(f, repl_fault_local(r), r, "epoch %llu: holding its output: %s",
			       (unsigned long long)g->cur, strerror(-r));
		return r;
	}
	g->applied = g->cur;
	log_set_epoch(g->applied);    /* for the JSON log lines */
	g->have_ckpt = true;
	g->in_epoch = false;
	repl_stats_add_pause(&g->st, now_ns() - t0);
	repl_stats_add_epoch(&g->st, g->stage.npages);
	return 0;
}
