/* Migration extras: the bandwidth limit of the stream before the switch,
 * and post-copy: the protocol below, the source here, the destination in
 * secondary/postcopy_dst.c.
 *
 * Post-copy, when the dirty rounds do not converge (--postcopy-after N):
 *  source:      pause for good -> harvest the pages written since the last
 *               capture (stale at the destination) -> PostcopyBegin (their
 *               list) -> final epoch (state and output, no pages) -> Fence
 *               PRIMARY_MIGRATES -> ... destination's Fence TOOK_OVER ->
 *               stream every stale page in the background, requested pages
 *               first -> PostcopyDone -> exit 0.
 *  destination: PostcopyBegin (from here on: no takeover without the
 *               source) -> final epoch applied -> Fence -> punch the stale
 *               pages out of the memfd, register RAM with userfaultfd
 *               (missing mode), take the link over, tell the source, resume
 *               -> a fault on a stale page asks the source for it
 *               (PageRequest); each page that arrives is placed with
 *               UFFDIO_COPY, unless already there -> all in: PostcopyDone,
 *               unregister: an ordinary running VM (unprotected).
 * Faults are read on the agent's loop (the fd is an ev_io watcher at the
 * highest priority), so no lock is needed; the vCPU that faults (in the
 * guest, or in KVM emulating it) waits in the kernel meanwhile.
 * A hole in RAM that is not stale was never written on either side: it is
 * served zero here without asking.
 *
 * After the announce neither side alone holds the VM: the destination's
 * vCPUs and devices have moved on, the source alone holds the pages not yet
 * sent. Losing either side loses the VM; both say so and exit 1, and the
 * destination never runs on with pages missing (output gated, vCPUs
 * stopped). It cannot be cancelled either.
 *
 * Test modes, in the source's environment: UNDERSTUDY_POSTCOPY_STALE_ALL
 * makes every page ever written stale (all fetched on demand: code, stacks
 * and page tables fault, from the guest and from KVM's own accesses).
 * UNDERSTUDY_POSTCOPY_BG_DELAY_MS=N starts the background stream N ms late
 * (pages come only on demand until then; a window to kill either side).
 * UNDERSTUDY_POSTCOPY_VERIFY: the
 * source sends a digest of all of its RAM at the switch; the destination
 * adds up the same digest from its RAM before the resume (pages not stale)
 * and from each stale page as it arrives (before the guest can write it),
 * and logs whether the two are equal. */
#include "primary/primary_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/net.h"

#define TAG "postcopy"
#define PC_QUEUE_MAX (512u << 10)    /* background bytes ahead of a request at most */
#define PC_BATCH 64                   /* pages in one background frame */
#define PC_LIST_PART 65536            /* stale gfns in one PostcopyBegin */
#define RATE_BURST_S 0.05             /* the bucket holds 50 ms of bandwidth */

/* ---- bandwidth ------------------------------------------------------------------- */

void repl_rate_init(struct repl_rate *r, unsigned mib_per_s)
{
	memset(r, 0, sizeof(*r));
	r->bytes_per_s = mib_per_s * 1048576.0;
	r->last_ns = now_ns();
}

static void refill(struct repl_rate *r)
{
	uint64_t now = now_ns();

	r->tokens += (now - r->last_ns) / 1e9 * r->bytes_per_s;
	if (r->tokens > r->bytes_per_s * RATE_BURST_S)
		r->tokens = r->bytes_per_s * RATE_BURST_S;
	r->last_ns = now;
}

uint64_t repl_rate_wait_ns(struct repl_rate *r)
{
	if (r->bytes_per_s <= 0)
		return 0;
	refill(r);
	if (r->tokens >= 0)
		return 0;
	return (uint64_t)(-r->tokens / r->bytes_per_s * 1e9) + 1;
}

void repl_rate_charge(struct repl_rate *r, size_t bytes)
{
	if (r->bytes_per_s <= 0)
		return;
	refill(r);
	r->tokens -= (double)bytes;
}

/* ---- the source -------------------------------------------------------------------- */

struct repl_pc_src {
	struct repl_rate rate;
	unsigned after;            /* rounds without convergence before post-copy; 0 never */
	unsigned misses;
	bool pending;              /* due: at the next epoch the link has room for */
	bool announced;            /* the stale list left: no way back */
	bool running;              /* the destination runs the guest */
	bool complete;
	uint64_t *stale;           /* page bitmap */
	uint64_t *sent;            /* ...of those, sent at least once */
	uint64_t nstale, cursor, nrequested, nbackground;
	struct proto_page_enc *enc;   /* LZ4 and zero pages, no XOR (nothing cached there) */
	ev_idle idle_w;
	ev_timer delay_w;          /* test mode: the background stream starts late */
	struct repl_primary *p;
	uint64_t run_t0_ns;
	double postcopy_ms;        /* the destination running -> every page in */
	uint64_t faults, fault_p50_us, fault_p99_us;
};

static void src_idle(struct ev_loop *loop, ev_idle *w, int revents);
static void src_delay_end(struct ev_loop *loop, ev_timer *w, int revents);

int repl_pc_src_new(struct repl_primary *p, unsigned bandwidth_mib, unsigned postcopy_after)
{
	struct repl_pc_src *pc;
	size_t words = machine_bitmap_words(p->vm->m);

	repl_pc_src_free(p);
	pc = calloc(1, sizeof(*pc));
	if (!pc)
		return -ENOMEM;
	pc->p = p;
	pc->after = postcopy_after;
	repl_rate_init(&pc->rate, bandwidth_mib);
	if (postcopy_after) {
		pc->stale = calloc(words, 8);
		pc->sent = calloc(words, 8);
		pc->enc = proto_page_enc_new(0, 0);
		if (!pc->stale || !pc->sent || !pc->enc) {
			p->pc = pc;
			repl_pc_src_free(p);
			return -ENOMEM;
		}
	}
	ev_idle_init(&pc->idle_w, src_idle);
	ev_timer_init(&pc->delay_w, src_delay_end, 0, 0);
	pc->idle_w.data = pc->delay_w.data = pc;
	p->pc = pc;
	if (bandwidth_mib) {
		p->ep.rate = p->sync.rate = &pc->rate;
		log_info(TAG, "migration stream limited to %u MiB/s until the switch", bandwidth_mib);
	}
	if (postcopy_after)
		log_info(TAG, "post-copy after %u rounds without convergence", postcopy_after);
	return 0;
}

void repl_pc_src_free(struct repl_primary *p)
{
	struct repl_pc_src *pc = p->pc;

	if (!pc)
		return;
	ev_idle_stop(p->loop, &pc->idle_w);
	ev_timer_stop(p->loop, &pc->delay_w);
	p->ep.rate = p->sync.rate = NULL;
	proto_page_enc_free(pc->enc);
	free(pc->stale);
	free(pc->sent);
	free(pc);
	p->pc = NULL;
}

bool repl_pc_src_due(struct repl_primary *p)
{
	struct repl_pc_src *pc = p->pc;

	if (!pc || !pc->after || pc->announced || pc->pending || ++pc->misses < pc->after)
		return false;
	pc->pending = true;
	return true;
}

bool repl_pc_src_ready(struct repl_primary *p)
{
	struct repl_pc_src *pc = p->pc;

	return pc && pc->pending && !pc->announced && !repl_rate_wait_ns(&pc->rate);
}

double repl_pc_src_cap_bytes_per_ms(const struct repl_primary *p)
{
	return p->pc ? p->pc->rate.bytes_per_s / 1e3 : 0;
}

bool repl_pc_src_switched(const struct repl_primary *p)
{
	return p->pc && p->pc->announced;
}

static uint64_t ram_digest(struct machine *m)
{
	uint64_t sum = 0;

	for (uint64_t pg = 0; pg < m->ram_pages; pg++)
		sum += repl_pc_page_sum(machine_page_gfn(m, pg), machine_page_hva(m, pg));
	return sum;
}

/* The stale list in parts of at most PC_LIST_PART gfns (frames stay small). */
static int send_list(struct repl_primary *p, bool verify, uint64_t digest)
{
	struct repl_pc_src *pc = p->pc;
	struct machine *m = p->vm->m;
	uint64_t *gfns = malloc(PC_LIST_PART * sizeof(*gfns)), pg = 0, listed = 0;
	int r = 0;

	if (!gfns)
		return -ENOMEM;
	do {
		Understudy__PostcopyBegin b = UNDERSTUDY__POSTCOPY_BEGIN__INIT;
		size_t n = 0;

		for (; pg < m->ram_pages && n < PC_LIST_PART; pg++)
			if (repl_bm_test(pc->stale, pg))
				gfns[n++] = machine_page_gfn(m, pg);
		listed += n;
		b.epoch = p->ep.epoch + 1;
		b.gfns = gfns;
		b.n_gfns = n;
		b.total = pc->nstale;
		b.last = listed == pc->nstale;
		b.has_verify = verify;
		b.verify_digest = digest;
		r = repl_link_send_msg(&p->link, PROTO_T_POSTCOPY_BEGIN, &b.base);
	} while (r == 0 && listed < pc->nstale);
	free(gfns);
	return r;
}

/* Test mode: every page ever written counts as stale (the destination
 * holds them current, but fetches them all on demand): the guest's code,
 * stacks and page tables, read by KVM as much as by the guest, all fault. */
static int stale_all(struct machine *m, uint64_t *stale)
{
	size_t words = machine_bitmap_words(m);
	uint64_t *populated = calloc(words, 8);
	int r;

	if (!populated)
		return -ENOMEM;
	r = machine_ram_populated(m, populated);
	for (size_t i = 0; r == 0 && i < words; i++)
		stale[i] |= populated[i];
	free(populated);
	return r;
}

int repl_pc_src_announce(struct repl_primary *p)
{
	struct repl_pc_src *pc = p->pc;
	struct machine *m = p->vm->m;
	bool verify = getenv("UNDERSTUDY_POSTCOPY_VERIFY") != NULL;
	uint64_t digest = 0;
	int r;

	machine_pause(m);
	/* Everything written since the last capture: the final epoch then
	 * finds nothing dirty and carries only state and output. */
	if ((r = machine_harvest_dirty(m, pc->stale)) < 0)
		return r;
	if (getenv("UNDERSTUDY_POSTCOPY_STALE_ALL") && (r = stale_all(m, pc->stale)) < 0)
		return r;
	pc->nstale = machine_bitmap_count(pc->stale, machine_bitmap_words(m));
	if (verify)
		digest = ram_digest(m);
	pc->announced = true;          /* a part may have left even if a later one fails */
	if ((r = send_list(p, verify, digest)) < 0)
		return r;
	log_warn(TAG, "POST-COPY: %llu pages (%.1f MiB) are stale at the destination; it will run "
		 "the guest and fetch them from here. From now on the migration cannot be cancelled, "
		 "and if either side dies before every page is in, the VM is lost%s",
		 (unsigned long long)pc->nstale, pc->nstale * KVM_PAGE_SIZE / 1048576.0,
		 verify ? " (test mode: RAM digest sent)" : "");
	return 0;
}

static int send_pages(struct repl_primary *p, const uint64_t *pages, size_t n)
{
	struct repl_pc_src *pc = p->pc;
	struct machine *m = p->vm->m;
	uint64_t gfns[PC_BATCH];
	const void *ptrs[PC_BATCH];
	struct proto_buf buf;
	int r;

	for (size_t i = 0; i < n; i++) {
		gfns[i] = machine_page_gfn(m, pages[i]);
		ptrs[i] = machine_page_hva(m, pages[i]);   /* the guest never runs here again */
		repl_bm_set(pc->sent, pages[i]);
	}
	proto_buf_init(&buf);
	if ((r = proto_pages_encode(pc->enc, gfns, ptrs, n, &buf, NULL)) == 0)
		r = repl_link_send_owned(&p->link, &buf);
	proto_buf_fini(&buf);
	return r;
}

static void src_idle(struct ev_loop *loop, ev_idle *w, int revents)
{
	struct repl_pc_src *pc = w->data;
	struct repl_primary *p = pc->p;
	struct machine *m = p->vm->m;
	uint64_t pages[PC_BATCH];
	size_t n = 0;

	(void)revents;
	if (!p->link.conn || pc->complete || net_queued_bytes(p->link.conn) > PC_QUEUE_MAX) {
		ev_idle_stop(loop, w);     /* repl_pc_src_room goes on */
		return;
	}
	for (; pc->cursor < m->ram_pages && n < PC_BATCH; pc->cursor++)
		if (repl_bm_test(pc->stale, pc->cursor) && !repl_bm_test(pc->sent, pc->cursor))
			pages[n++] = pc->cursor;
	if (n && send_pages(p, pages, n) < 0) {
		log_error(TAG, "cannot send pages in the background");
		ev_idle_stop(loop, w);     /* the link's failure is handled as a fault */
		return;
	}
	pc->nbackground += n;
	if (pc->cursor >= m->ram_pages) {
		log_info(TAG, "post-copy: every stale page sent (%llu in the background, %llu on "
			 "request), %.1f ms after the destination started", (unsigned long long)pc->nbackground,
			 (unsigned long long)pc->nrequested, (now_ns() - pc->run_t0_ns) / 1e6);
		ev_idle_stop(loop, w);
	}
}

static void src_delay_end(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_pc_src *pc = w->data;

	(void)loop;
	(void)revents;
	log_info(TAG, "post-copy: the background stream starts (test mode delay over)");
	repl_pc_src_room(pc->p);
}

void repl_pc_src_running(struct repl_primary *p)
{
	struct repl_pc_src *pc = p->pc;
	const char *delay = getenv("UNDERSTUDY_POSTCOPY_BG_DELAY_MS");

	pc->running = true;
	pc->run_t0_ns = now_ns();
	log_info(TAG, "post-copy: the destination runs the guest; streaming %llu pages, requested "
		 "ones first", (unsigned long long)pc->nstale);
	if (delay && atoi(delay) > 0) {
		/* Test mode: until then every page the guest touches is a fault. */
		ev_timer_set(&pc->delay_w, atoi(delay) / 1e3, 0);
		ev_timer_start(p->loop, &pc->delay_w);
		return;
	}
	ev_idle_start(p->loop, &pc->idle_w);
}

void repl_pc_src_room(struct repl_primary *p)
{
	struct repl_pc_src *pc = p->pc;

	if (pc && pc->running && !pc->complete && !ev_is_active(&pc->delay_w) && pc->cursor < p->vm->m->ram_pages &&
	    !ev_is_active(&pc->idle_w) && p->link.conn &&
	    net_queued_bytes(p->link.conn) <= PC_QUEUE_MAX)
		ev_idle_start(p->loop, &pc->idle_w);
}

static int on_request(struct repl_primary *p, const Understudy__PageRequest *rq)
{
	struct repl_pc_src *pc = p->pc;
	uint64_t pages[PC_BATCH];
	size_t n = 0;
	int r;

	for (size_t i = 0; i < rq->n_gfns; i++) {
		int64_t pg = machine_gfn_page(p->vm->m, rq->gfns[i]);

		if (pg < 0 || !repl_bm_test(pc->stale, (uint64_t)pg)) {
			log_error(TAG, "the destination asks for gfn %llu, which it holds",
				  (unsigned long long)rq->gfns[i]);
			return -EPROTO;
		}
		pages[n++] = (uint64_t)pg;
		pc->nrequested++;
		if (n == PC_BATCH || i + 1 == rq->n_gfns) {
			if ((r = send_pages(p, pages, n)) < 0)
				return r;
			n = 0;
		}
	}
	return 0;
}

int repl_pc_src_frame(struct repl_primary *p, uint16_t type, const ProtobufCMessage *msg)
{
	struct repl_pc_src *pc = p->pc;
	const Understudy__PostcopyDone *d;

	if (!pc || !pc->running || pc->complete)
		return -EPROTO;
	if (type == PROTO_T_PAGE_REQUEST)
		return on_request(p, (const Understudy__PageRequest *)msg);
	d = (const Understudy__PostcopyDone *)msg;
	if (d->pages != pc->nstale) {
		log_error(TAG, "the destination says post-copy is done with %llu of %llu pages",
			  (unsigned long long)d->pages, (unsigned long long)pc->nstale);
		return -EPROTO;
	}
	pc->complete = true;
	ev_idle_stop(p->loop, &pc->idle_w);
	pc->postcopy_ms = (now_ns() - pc->run_t0_ns) / 1e6;
	pc->faults = d->faults;
	pc->fault_p50_us = d->fault_p50_us;
	pc->fault_p99_us = d->fault_p99_us;
	log_info(TAG, "POST-COPY COMPLETE: %llu pages in %.1f ms (%llu requested by %llu faults: "
		 "wait p50 %llu us, p99 %llu us)", (unsigned long long)pc->nstale, pc->postcopy_ms,
		 (unsigned long long)pc->nrequested, (unsigned long long)pc->faults,
		 (unsigned long long)pc->fault_p50_us, (unsigned long long)pc->fault_p99_us);
	return 1;
}

void repl_pc_src_lost(struct repl_primary *p, const struct repl_fault *f)
{
	struct repl_pc_src *pc = p->pc;

	ev_idle_stop(p->loop, &pc->idle_w);
	repl_fault_set(&p->fault, f->kind, f->err, "VM LOST in post-copy: %s", f->what);
	log_error(TAG, "%s. THE VM IS LOST: %s; this source cannot resume it (the destination's "
		  "vCPUs and devices moved on past the switch) and the destination misses pages only "
		  "this source held (%llu of %llu sent). Nothing resumes here.", p->fault.what,
		  pc->running ? "the destination ran the guest" : "the destination may have resumed "
		  "the guest", (unsigned long long)(pc->nbackground + pc->nrequested),
		  (unsigned long long)pc->nstale);
}

const char *repl_pc_src_state(const struct repl_primary *p)
{
	return p->pc && p->pc->running && !p->pc->complete && !p->migrated ? "postcopy" : NULL;
}

void repl_pc_src_status(const struct repl_primary *p, char *out, size_t len)
{
	const struct repl_pc_src *pc = p->pc;

	out[0] = 0;
	if (!pc)
		return;
	snprintf(out, len,
		 "bandwidth %.0f MiB/s\npost-copy %s\npost-copy pages %llu\npost-copy requested %llu\n"
		 "post-copy faults %llu\nfault p50 %llu us\nfault p99 %llu us\npost-copy %.3f ms\n",
		 pc->rate.bytes_per_s / 1048576.0, pc->announced ? "true" : "false",
		 (unsigned long long)pc->nstale, (unsigned long long)pc->nrequested,
		 (unsigned long long)pc->faults, (unsigned long long)pc->fault_p50_us,
		 (unsigned long long)pc->fault_p99_us, pc->postcopy_ms);
}

void repl_pc_src_status_json(const struct repl_primary *p, struct json_object *o)
{
	const struct repl_pc_src *pc = p->pc;

	if (!pc)
		return;
	proto_json_add_fixed(o, "bandwidth_mib", pc->rate.bytes_per_s / 1048576.0, 0);
	proto_json_add_bool(o, "postcopy", pc->announced);
	proto_json_add_u64(o, "postcopy_pages", pc->nstale);
	proto_json_add_u64(o, "postcopy_requested", pc->nrequested);
	proto_json_add_u64(o, "postcopy_faults", pc->faults);
	proto_json_add_u64(o, "fault_p50_us", pc->fault_p50_us);
	proto_json_add_u64(o, "fault_p99_us", pc->fault_p99_us);
	proto_json_add_fixed(o, "postcopy_ms", pc->postcopy_ms, 3);
}
