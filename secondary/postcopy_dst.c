/* Post-copy, the destination's side (the source's and the protocol:
 * postcopy.c). From the announce on, this standby never takes over without
 * the source; at the hand-over the stale pages are punched out of the memfd
 * and RAM is registered with userfaultfd (missing mode); a fault on a stale
 * page asks the source for it (PageRequest) and waits until it arrives and
 * is placed (UFFDIO_COPY; a page that is there already is never
 * overwritten: the guest may have written it since). Faults are read on
 * the agent's loop (an ev_io at the highest priority); the vCPU that faults,
 * in the guest or in KVM emulating it, waits in the kernel meanwhile. A
 * hole that is not stale was never written on either side: served zero at
 * once. When every stale page is in: PostcopyDone, unregister; the VM is an
 * ordinary running one (unprotected). Losing the source before that loses
 * the VM: said loudly, the guest stopped (output gated), exit 1. */
#include "secondary/secondary_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/net.h"

#define TAG "postcopy"

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

struct repl_pc_dst {
	struct repl_secondary *s;
	uint64_t epoch;            /* the final epoch */
	uint64_t *stale, *placed, *asked;   /* page bitmaps */
	uint64_t nstale, nlisted, nplaced;
	bool listed;               /* the list is complete */
	bool has_verify;
	uint64_t want_digest, digest;
	bool armed, done;
	int uffd;
	ev_io uffd_w;
	ev_timer hb_w, watch_w;
	struct repl_link link;     /* the source's, from the hand-over on */
	uint64_t *ask_ns;          /* per page: when a fault asked for it */
	uint32_t *lat_us;
	uint64_t faults, zero_faults;
	uint64_t rx_dropped0;      /* the NIC's dropped frames when the pages went missing */
	uint64_t t0_ns;
};

static const char zero_page[KVM_PAGE_SIZE];

int repl_pc_dst_begin(struct repl_secondary *s, const Understudy__PostcopyBegin *b)
{
	struct repl_pc_dst *pc = s->pc;
	struct machine *m;

	if (!s->vm || s->state != S_STANDBY || (pc && (pc->listed || b->epoch != pc->epoch)))
		return -EPROTO;
	m = s->vm->m;
	if (!pc) {
		size_t words = machine_bitmap_words(m);

		if (b->total > m->ram_pages)
			return -EBADMSG;
		pc = s->pc = calloc(1, sizeof(*pc));
		if (!pc)
			return -ENOMEM;
		pc->s = s;
		pc->uffd = -1;
		pc->epoch = b->epoch;
		pc->nstale = b->total;
		pc->stale = calloc(words, 8);
		pc->placed = calloc(words, 8);
		pc->asked = calloc(words, 8);
		pc->ask_ns = calloc(m->ram_pages, sizeof(*pc->ask_ns));
		pc->lat_us = calloc(b->total + 1, sizeof(*pc->lat_us));
		repl_link_init(&pc->link, PROTO_MAX_PAYLOAD_DEFAULT);
		if (!pc->stale || !pc->placed || !pc->asked || !pc->ask_ns || !pc->lat_us)
			return -ENOMEM;   /* the caller fails this standby; free() cleans up */
		pc->has_verify = b->has_verify;
		pc->want_digest = b->verify_digest;
		log_warn(TAG, "post-copy announced (final epoch %llu, %llu stale pages): from here on "
			 "this side never takes over without the source", (unsigned long long)b->epoch,
			 (unsigned long long)b->total);
	}
	for (size_t i = 0; i < b->n_gfns; i++) {
		int64_t pg = machine_gfn_page(m, b->gfns[i]);

		if (pg < 0 || repl_bm_test(pc->stale, (uint64_t)pg) || ++pc->nlisted > pc->nstale)
			return -EBADMSG;
		repl_bm_set(pc->stale, (uint64_t)pg);
	}
	if (b->last) {
		if (pc->nlisted != pc->nstale)
			return -EBADMSG;
		pc->listed = true;
	}
	return 0;
}

/* Stops a guest that may have run with pages missing: nothing more leaves
 * (output gated), the vCPUs are asked to stop, then the faults still
 * waiting are let go (they read zeros, seen by nobody) so that they park. */
static void stop_guest(struct repl_secondary *s)
{
	struct repl_pc_dst *pc = s->pc;

	repl_vm_set_gated(s->vm, true);
	machine_stop(s->vm->m, -ECONNRESET);
	if (pc->armed) {
		ev_io_stop(s->loop, &pc->uffd_w);
		machine_uffd_close(s->vm->m, pc->uffd);
		pc->uffd = -1;
	}
}

void repl_pc_dst_lost(struct repl_secondary *s, const char *why)
{
	struct repl_pc_dst *pc = s->pc;

	repl_fault_set(&s->fault, REPL_FAULT_PEER_LOST, -ECONNRESET, "VM LOST in post-copy: %s "
		       "(%llu of %llu stale pages in)", why, (unsigned long long)pc->nplaced,
		       (unsigned long long)pc->nstale);
	log_error(TAG, "%s. THE VM IS LOST: %s; the guest is stopped here and does not run on with "
		  "pages missing (exit 1)", s->fault.what, pc->armed ?
		  "only the source held the missing pages" : "the hand-over was not complete and the "
		  "last checkpoint here misses pages (no takeover from it)");
	if (s->vm)
		stop_guest(s);
	ev_timer_stop(s->loop, &pc->hb_w);
	ev_timer_stop(s->loop, &pc->watch_w);
	repl_link_close(&pc->link);
	s->exit_status = 1;
	s->state = S_DONE;
	ev_break(s->loop, EVBREAK_ALL);
}

static void percentiles(struct repl_pc_dst *pc, uint64_t *p50, uint64_t *p99)
{
	*p50 = *p99 = 0;
	if (!pc->faults)
		return;
	qsort(pc->lat_us, pc->faults, sizeof(*pc->lat_us), cmp_u32);
	*p50 = pc->lat_us[(pc->faults - 1) / 2];
	*p99 = pc->lat_us[(pc->faults - 1) * 99 / 100];
}

static void complete(struct repl_secondary *s)
{
	struct repl_pc_dst *pc = s->pc;
	Understudy__PostcopyDone d = UNDERSTUDY__POSTCOPY_DONE__INIT;
	uint64_t p50, p99;

	pc->done = true;
	percentiles(pc, &p50, &p99);
	ev_io_stop(s->loop, &pc->uffd_w);
	machine_uffd_close(s->vm->m, pc->uffd);   /* holes left fault as usual again */
	pc->uffd = -1;
	ev_timer_stop(s->loop, &pc->hb_w);
	ev_timer_stop(s->loop, &pc->watch_w);
	log_info(TAG, "POST-COPY COMPLETE: %llu pages in %.1f ms after the resume; %llu faults "
		 "fetched (wait p50 %llu us, p99 %llu us), %llu zero holes served here; the VM runs "
		 "here, unprotected", (unsigned long long)pc->nstale, (now_ns() - pc->t0_ns) / 1e6,
		 (unsigned long long)pc->faults, (unsigned long long)p50, (unsigned long long)p99,
		 (unsigned long long)pc->zero_faults);
	/* The tap's frames are not written into guest RAM while pages may be
	 * missing (machine_net_input): dropped, as by a full ring. */
	if (s->vm->m->cfg.nnets)
		log_info(TAG, "post-copy: %llu frames for the guest dropped while pages were missing",
			 (unsigned long long)(machine_net_rx_dropped(s->vm->m) - pc->rx_dropped0));
	if (pc->has_verify && pc->digest == pc->want_digest)
		log_info(TAG, "post-copy verify: the RAM at the switch equals the source's (digest "
			 "%016llx)", (unsigned long long)pc->digest);
	else if (pc->has_verify)
		log_error(TAG, "post-copy verify: the RAM at the switch DIFFERS from the source's "
			  "(%016llx here, %016llx there)", (unsigned long long)pc->digest,
			  (unsigned long long)pc->want_digest);
	d.pages = pc->nplaced;
	d.faults = pc->faults;
	d.fault_p50_us = p50;
	d.fault_p99_us = p99;
	if (repl_link_send_msg(&pc->link, PROTO_T_POSTCOPY_DONE, &d.base) < 0)
		log_warn(TAG, "could not tell the source that post-copy is complete");
	if (pc->link.conn)
		net_close_flush(pc->link.conn);
}

static int place_page(void *ctx, uint64_t gfn, const void *data)
{
	struct repl_secondary *s = ctx;
	struct repl_pc_dst *pc = s->pc;
	int64_t pg = machine_gfn_page(s->vm->m, gfn);
	int r;

	if (pg < 0 || !repl_bm_test(pc->stale, (uint64_t)pg))
		return -EBADMSG;
	if (repl_bm_test(pc->placed, (uint64_t)pg))
		return 0;          /* sent twice (asked for while on its way): the first counts */
	r = machine_uffd_fill(s->vm->m, pc->uffd, (uint64_t)pg, data);
	if (r < 0 && r != -EEXIST)
		return r;
	repl_bm_set(pc->placed, (uint64_t)pg);
	pc->nplaced++;
	if (pc->has_verify)
		pc->digest += repl_pc_page_sum(gfn, data);
	if (pc->ask_ns[pg] && pc->faults < pc->nstale + 1)
		pc->lat_us[pc->faults++] = (uint32_t)((now_ns() - pc->ask_ns[pg]) / 1000);
	return 0;
}

static const void *no_base(void *ctx, uint64_t gfn)
{
	(void)ctx;
	(void)gfn;
	return NULL;              /* the source sends no XOR deltas here */
}

static int dst_frame(void *ctx, const struct proto_frame *f)
{
	struct repl_secondary *s = ctx;
	struct proto_page_sink sink = { .base = no_base, .page = place_page };
	ProtobufCMessage *msg;
	int r;

	if (s->pc->done)
		return 0;
	if (f->type == PROTO_T_PAGES)
		return proto_pages_decode(f->payload, f->len, s->stage.max_gfn, &sink, s, NULL);
	if (f->type == PROTO_T_HEARTBEAT)
		return 0;
	if ((r = proto_msg_unpack(f->type, f->payload, f->len, &msg)) < 0)
		return r;
	if (f->type == PROTO_T_FENCE)
		log_error(TAG, "the source says goodbye during post-copy: %s",
			  ((Understudy__Fence *)msg)->reason);
	else if (f->type == PROTO_T_ERROR)
		log_error(TAG, "the source says: %s", ((Understudy__Error *)msg)->text);
	proto_msg_free(msg);
	return -EPROTO;
}

static void dst_recv(struct net_conn *c, const void *data, size_t len, void *ctx)
{
	struct repl_secondary *s = ctx;
	struct repl_pc_dst *pc = s->pc;
	char why[96];
	int r;

	(void)c;
	if (pc->done)
		return;
	r = repl_link_feed(&pc->link, data, len, dst_frame, s);
	if (r < 0) {
		snprintf(why, sizeof(why), "bad data from the source (%s)", proto_strerror(r));
		repl_pc_dst_lost(s, why);
	} else if (pc->nplaced == pc->nstale) {
		complete(s);
	}
}

static void dst_sent(struct net_conn *c, void *cookie, int status, void *ctx)
{
	(void)c;
	(void)status;
	(void)ctx;
	repl_link_sent_owned(cookie);
}

static void dst_closed(struct net_conn *c, int reason, void *ctx)
{
	struct repl_secondary *s = ctx;
	char why[96];

	(void)c;
	repl_link_closed(&s->pc->link);
	if (s->pc->done || s->state == S_DONE)
		return;
	snprintf(why, sizeof(why), "the connection to the source %s",
		 reason ? strerror(-reason) : "closed");
	repl_pc_dst_lost(s, why);
}

static const struct net_conn_ops dst_ops = {
	.recv = dst_recv, .sent = dst_sent, .closed = dst_closed,
};

/* Faults: a stale page is asked for once; a hole that is not stale was
 * never written anywhere and is served zero at once. */
static void on_uffd(struct ev_loop *loop, ev_io *w, int revents)
{
	struct repl_secondary *s = w->data;
	struct repl_pc_dst *pc = s->pc;
	struct machine *m = s->vm->m;
	uint64_t pages[64], gfns[64];
	Understudy__PageRequest rq = UNDERSTUDY__PAGE_REQUEST__INIT;
	int n;

	(void)loop;
	(void)revents;
	while ((n = machine_uffd_read(m, pc->uffd, pages, 64)) > 0) {
		size_t nask = 0;

		for (int i = 0; i < n; i++) {
			uint64_t pg = pages[i];

			if (repl_bm_test(pc->placed, pg) || !repl_bm_test(pc->stale, pg)) {
				int r = machine_uffd_fill(m, pc->uffd, pg, NULL);

				if (r == 0) {
					pc->zero_faults++;
				} else if (r != -EEXIST) {   /* else: there already, its waiters woken */
					log_error(TAG, "serving a zero page: %s", strerror(-r));
					repl_pc_dst_lost(s, "a fault could not be served");
					return;
				}
				continue;
			}
			if (repl_bm_test(pc->asked, pg))
				continue;
			repl_bm_set(pc->asked, pg);
			pc->ask_ns[pg] = now_ns();
			gfns[nask++] = machine_page_gfn(m, pg);
		}
		rq.gfns = gfns;
		rq.n_gfns = nask;
		if (nask && repl_link_send_msg(&pc->link, PROTO_T_PAGE_REQUEST, &rq.base) < 0) {
			repl_pc_dst_lost(s, "a page request could not be sent");
			return;
		}
	}
	if (n < 0) {
		log_error(TAG, "reading userfaultfd: %s", strerror(-n));
		repl_pc_dst_lost(s, "the fault channel failed");
	}
}

static void dst_hb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_secondary *s = w->data;

	(void)loop;
	(void)revents;
	if (repl_send_epoch_msg(&s->pc->link, PROTO_T_HEARTBEAT, s->stage.applied) < 0)
		log_warn(TAG, "heartbeat could not be sent");
}

static void dst_watch(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_secondary *s = w->data;
	uint64_t silent_ms = (now_ns() - s->pc->link.last_rx_ns) / 1000000;
	char why[96];

	(void)loop;
	(void)revents;
	if (silent_ms <= s->o->timeout_ms)
		return;
	snprintf(why, sizeof(why), "the source was silent for %llu ms", (unsigned long long)silent_ms);
	repl_pc_dst_lost(s, why);
}

/* Test mode: the pages held here that are not stale, before the resume. */
static int digest_held(struct repl_secondary *s)
{
	struct repl_pc_dst *pc = s->pc;
	struct machine *m = s->vm->m;
	uint64_t *populated = calloc(machine_bitmap_words(m), 8);
	int r;

	if (!populated)
		return -ENOMEM;
	if ((r = machine_ram_populated(m, populated)) < 0) {
		free(populated);
		return r;
	}
	for (uint64_t pg = 0; pg < m->ram_pages; pg++)
		if (!repl_bm_test(pc->stale, pg))
			pc->digest += repl_pc_page_sum(machine_page_gfn(m, pg), repl_bm_test(populated, pg) ?
					       machine_page_hva(m, pg) : zero_page);
	free(populated);
	return 0;
}

/* The source's link becomes post-copy's: its decoder (maybe holding part
 * of a frame) comes along. */
static void adopt_link(struct repl_secondary *s)
{
	struct repl_pc_dst *pc = s->pc;

	pc->link.conn = s->link.conn;
	s->link.conn = NULL;
	proto_dec_fini(&pc->link.dec);
	pc->link.dec = s->link.dec;
	proto_dec_init(&s->link.dec, PROTO_MAX_PAYLOAD_DEFAULT);
	pc->link.last_rx_ns = now_ns();
	net_conn_set_ops(pc->link.conn, &dst_ops, s);
}

int repl_pc_dst_arm(struct repl_secondary *s)
{
	struct repl_pc_dst *pc = s->pc;
	struct machine *m = s->vm->m;
	double hb = repl_heartbeat_interval(s->o->timeout_ms);
	char why[128];
	int r;

	if (!pc->listed || s->stage.applied < pc->epoch || !s->link.conn) {
		repl_pc_dst_lost(s, "the hand-over is incomplete (stale list or final epoch missing)");
		return -EPROTO;
	}
	pc->t0_ns = now_ns();
	if (pc->has_verify && (r = digest_held(s)) < 0) {
		snprintf(why, sizeof(why), "test-mode digest failed: %s", strerror(-r));
		repl_pc_dst_lost(s, why);
		return r;
	}
	pc->rx_dropped0 = machine_net_rx_dropped(m);
	if ((r = machine_punch_pages(m, pc->stale)) < 0 || (r = machine_uffd_open(m, &pc->uffd)) < 0) {
		snprintf(why, sizeof(why), "cannot make the stale pages missing (%s)", strerror(-r));
		repl_pc_dst_lost(s, why);
		return r;
	}
	pc->armed = true;
	adopt_link(s);
	ev_io_init(&pc->uffd_w, on_uffd, pc->uffd, EV_READ);
	ev_set_priority(&pc->uffd_w, EV_MAXPRI);
	ev_timer_init(&pc->hb_w, dst_hb, hb, hb);
	ev_timer_init(&pc->watch_w, dst_watch, 0.005, 0.005);
	ev_set_priority(&pc->watch_w, EV_MINPRI);
	pc->uffd_w.data = pc->hb_w.data = pc->watch_w.data = s;
	ev_io_start(s->loop, &pc->uffd_w);
	ev_timer_start(s->loop, &pc->hb_w);
	ev_timer_start(s->loop, &pc->watch_w);
	if ((r = repl_send_fence(&pc->link, UNDERSTUDY__FENCE_ACTION__FENCE_SECONDARY_TOOK_OVER,
				 s->stage.applied, "post-copy: the destination runs the guest")) < 0) {
		repl_pc_dst_lost(s, "cannot tell the source");
		return r;
	}
	log_warn(TAG, "post-copy: %llu stale pages made missing (%.1f ms); the guest resumes here "
		 "now and fetches them from the source; this cannot be cancelled",
		 (unsigned long long)pc->nstale, (now_ns() - pc->t0_ns) / 1e6);
	if (pc->nstale == 0)
		complete(s);
	return 0;
}

bool repl_pc_dst_pending(const struct repl_secondary *s)
{
	return s->pc && !s->pc->done;
}

void repl_pc_dst_free(struct repl_secondary *s)
{
	struct repl_pc_dst *pc = s->pc;

	if (!pc)
		return;
	if (pc->armed && !pc->done && pc->uffd >= 0 && s->vm) {
		log_error(TAG, "stopping during post-copy (%llu of %llu stale pages in): THE VM IS LOST",
			  (unsigned long long)pc->nplaced, (unsigned long long)pc->nstale);
		stop_guest(s);
	} else if (pc->uffd >= 0 && s->vm) {
		ev_io_stop(s->loop, &pc->uffd_w);
		machine_uffd_close(s->vm->m, pc->uffd);
	}
	ev_timer_stop(s->loop, &pc->hb_w);
	ev_timer_stop(s->loop, &pc->watch_w);
	repl_link_fini(&pc->link);
	free(pc->stale);
	free(pc->placed);
	free(pc->asked);
	free(pc->ask_ns);
	free(pc->lat_us);
	free(pc);
	s->pc = NULL;
}
