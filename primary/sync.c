/* The initial sync: the secondary's standby gets the guest's RAM while the
 * guest runs. Round 0 sends every page ever written (the standby's RAM is
 * fresh and zero); each later round the pages dirtied meanwhile; when few
 * are left (or after SYNC_ROUNDS_MAX rounds) they are marked dirty again for
 * the first checkpoint and done() hands over to the epochs. A disk goes
 * first, the same way: every block that may hold data, then rounds of the
 * blocks written meanwhile.
 *
 * Batches leave from an idle watcher, SYNC_QUEUE_MAX bytes ahead of the link
 * at most; repl_sync_room() goes on when sends complete. A batch that fails
 * for want of memory is retried the same way, from where it began. */
#include "primary/primary_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define TAG "sync"
#define BATCH_PAGES 1024
#define SYNC_QUEUE_MAX (16u << 20)   /* bytes queued before sync waits */
#define SYNC_ROUNDS_MAX 4
#define SYNC_DONE_PAGES 2048         /* dirty set small enough for the first checkpoint */
#define SYNC_DISK_DONE_BLOCKS 1024   /* the same for disk blocks (4 MiB) */

static void on_idle(struct ev_loop *loop, ev_idle *w, int revents);
static void on_rate(struct ev_loop *loop, ev_timer *w, int revents);

int repl_sync_init(struct repl_sync *s, struct ev_loop *loop, struct repl_vm *vm,
		   struct repl_link *link, struct proto_page_enc *enc)
{
	memset(s, 0, sizeof(*s));
	s->loop = loop;
	s->vm = vm;
	s->link = link;
	s->enc = enc;
	ev_idle_init(&s->idle_w, on_idle);
	ev_timer_init(&s->rate_w, on_rate, 0.01, 0);
	s->idle_w.data = s->rate_w.data = s;
	s->todo = calloc(machine_bitmap_words(s->vm->m), 8);
	if (!s->todo)
		return -ENOMEM;
	s->snap = malloc(BATCH_PAGES * KVM_PAGE_SIZE);
	if (!s->snap)
		goto err_todo;
	return 0;

err_todo:
	free(s->todo);
	s->todo = NULL;
	return -ENOMEM;
}

/* Safe on a zeroed s and after a failed init. */
void repl_sync_fini(struct repl_sync *s)
{
	if (s->loop)
		repl_sync_stop(s);
	free(s->todo);
	free(s->snap);
	s->todo = NULL;
	s->snap = NULL;
}

void repl_sync_stop(struct repl_sync *s)
{
	if (s->running)
		proto_page_enc_cache(s->enc, true);   /* the epochs' pages are */
	s->running = false;
	ev_idle_stop(s->loop, &s->idle_w);
	ev_timer_stop(s->loop, &s->rate_w);
}

/* Until repl_sync_room() finds room on the link. */
static void wait_room(struct repl_sync *s)
{
	ev_idle_stop(s->loop, &s->idle_w);
}

void repl_sync_room(struct repl_sync *s)
{
	if (s->running && s->link->conn && !ev_is_active(&s->idle_w) &&
	    net_queued_bytes(s->link->conn) <= SYNC_QUEUE_MAX)
		ev_idle_start(s->loop, &s->idle_w);
}

static void fail(struct repl_sync *s, enum repl_fault_kind kind, int err, const char *what)
{
	struct repl_fault f;

	repl_fault_set(&f, kind, err, "%s during sync round %d: %s", what, s->round, strerror(-err));
	if (kind == REPL_FAULT_LOCAL_TRANSIENT)
		wait_room(s);
	else
		repl_sync_stop(s);
	s->failed(s->ctx, &f);
}

static void done_round(struct repl_sync *s)
{
	uint64_t words = machine_bitmap_words(s->vm->m), dirty;
	int r;

	machine_pause(s->vm->m);
	r = machine_harvest_dirty(s->vm->m, s->todo);
	machine_resume(s->vm->m);
	if (r < 0) {
		fail(s, repl_fault_local(r), r, "dirty log failed");
		return;
	}
	dirty = machine_bitmap_count(s->todo, words);
	log_info(TAG, "sync round %d: %llu pages sent, %llu dirtied meanwhile", s->round,
		 (unsigned long long)s->round_pages, (unsigned long long)dirty);
	s->round++;
	s->cursor = 0;
	s->round_pages = 0;
	if (dirty <= SYNC_DONE_PAGES || s->round > SYNC_ROUNDS_MAX) {
		/* The rest goes in the first checkpoint. */
		machine_requeue_dirty(s->vm->m, s->todo);   /* into the first checkpoint */
		repl_sync_stop(s);
		s->done(s->ctx);
	}
}

/* Copies the next pages of the round into snap: the guest keeps writing
 * them, and the XOR cache must hold exactly what was sent. */
static size_t snap_batch(struct repl_sync *s, uint64_t *gfns, const void **ptrs)
{
	struct machine *m = s->vm->m;
	size_t n = 0;

	while (s->cursor < m->ram_pages && n < BATCH_PAGES) {
		uint64_t pg = s->cursor++;

		if (!(s->todo[pg / 64] >> (pg % 64) & 1))
			continue;
		memcpy(s->snap + n * KVM_PAGE_SIZE, machine_page_hva(m, pg), KVM_PAGE_SIZE);
		gfns[n] = machine_page_gfn(m, pg);
		ptrs[n] = s->snap + n * KVM_PAGE_SIZE;
		n++;
	}
	return n;
}

/* A batch that did not leave: the encoder forgets it, the round goes on
 * from where the batch began once a send completes (repl_sync_room). */
static void retry_batch(struct repl_sync *s, uint64_t from, int err, const char *what)
{
	proto_page_enc_reset(s->enc);
	s->cursor = from;
	fail(s, REPL_FAULT_LOCAL_TRANSIENT, err, what);
}

/* The end of a pass over the disk: the blocks written meanwhile are the
 * next round's, or, when few (or after SYNC_ROUNDS_MAX rounds), dirty
 * again for the first checkpoint. No pause needed: a write sets its bit
 * after its data is in the image, so a bit taken here is read after its
 * write, and one set later stays for the next round or checkpoint. */
static void disk_round_end(struct repl_sync *s)
{
	struct repl_disk_cap *d = s->disk;
	const char *env = getenv("UNDERSTUDY_DISK_SYNC_DONE_BLOCKS");   /* tests: more rounds */
	uint64_t words = (d->nblocks + 63) / 64, dirty;
	uint64_t done = env ? strtoull(env, NULL, 10) : SYNC_DISK_DONE_BLOCKS;

	memset(d->harvest, 0, words * 8);
	machine_disk_harvest(s->vm->m, d->harvest);
	dirty = machine_bitmap_count(d->harvest, words);
	log_info(TAG, "disk round %d: %llu blocks sent, %llu written meanwhile", s->disk_round,
		 (unsigned long long)s->disk_sent, (unsigned long long)dirty);
	s->disk_round++;
	s->disk_cursor = 0;
	s->disk_sent = 0;
	if (dirty <= done || s->disk_round > SYNC_ROUNDS_MAX) {
		machine_disk_requeue(s->vm->m, d->harvest);   /* into the first checkpoint */
		s->disk_done = true;
	}
}

/* The disk goes first, a Section at a time, straight to the standby's
 * image (replication/disk.h). 1: a batch left (or the pass is done); <0: failed. */
static int disk_batch(struct repl_sync *s)
{
	struct proto_buf batch;
	uint64_t from = s->disk_cursor, sent = s->disk_sent;
	enum repl_fault_kind kind;
	size_t bytes;
	int r;

	proto_buf_init(&batch);
	r = repl_disk_sync_batch(s->disk, s->vm->m, s->disk_round ? s->disk->harvest : NULL,
				 &s->disk_cursor, &batch, &s->disk_sent);
	kind = repl_fault_local(r);              /* reading the image, encoding */
	bytes = batch.len;
	if (r >= 0 && batch.len && (r = repl_link_send_owned(s->link, &batch)) < 0)
		kind = repl_fault_send(r);
	if (r >= 0 && s->rate)
		repl_rate_charge(s->rate, bytes);   /* --bandwidth counts the disk too */
	if (r >= 0)
		s->disk->sync_blocks += s->disk_sent - sent;
	proto_buf_fini(&batch);
	if (r < 0) {
		s->disk_cursor = from;
		fail(s, kind, r, "sending disk blocks");
		return r;
	}
	s->batches++;
	if (s->disk_cursor < s->disk->nblocks)
		return 1;
	if (!s->disk_round)
		log_info(TAG, "disk: %llu non-zero blocks of %llu sent", (unsigned long long)s->disk_sent,
			 (unsigned long long)s->disk->nblocks);
	disk_round_end(s);
	return 1;
}

static void on_idle(struct ev_loop *loop, ev_idle *w, int revents)
{
	struct repl_sync *s = w->data;
	uint64_t gfns[BATCH_PAGES], from = s->cursor;
	const void *ptrs[BATCH_PAGES];
	struct proto_buf batch;
	uint64_t wait_ns;
	size_t n, bytes;
	int r;

	(void)loop;
	(void)revents;
	if (!s->link->conn || net_queued_bytes(s->link->conn) > SYNC_QUEUE_MAX) {
		wait_room(s);
		return;
	}
	if (s->rate && (wait_ns = repl_rate_wait_ns(s->rate))) {   /* bandwidth limit */
		wait_room(s);
		ev_timer_set(&s->rate_w, wait_ns / 1e9, 0);
		ev_timer_start(s->loop, &s->rate_w);
		return;
	}
	if (!s->disk_done) {
		(void)disk_batch(s);
		return;
	}
	n = snap_batch(s, gfns, ptrs);
	if (n) {
		proto_buf_init(&batch);
		if ((r = proto_pages_encode(s->enc, gfns, ptrs, n, &batch, &s->pages)) < 0) {
			proto_buf_fini(&batch);
			if (repl_fault_local(r) == REPL_FAULT_LOCAL_TRANSIENT)
				retry_batch(s, from, r, "encoding a batch");
			else
				fail(s, REPL_FAULT_LOCAL_FATAL, r, "encoding a batch");
			return;
		}
		bytes = batch.len;
		if ((r = repl_link_send_owned(s->link, &batch)) < 0) {
			if (repl_fault_send(r) == REPL_FAULT_LOCAL_TRANSIENT)
				retry_batch(s, from, r, "sending a batch");
			else
				fail(s, repl_fault_send(r), r, "sending a batch");
			return;
		}
		if (s->rate)
			repl_rate_charge(s->rate, bytes);
		s->round_pages += n;
		s->batches++;
	}
	if (s->cursor >= s->vm->m->ram_pages)
		done_round(s);
}

static void on_rate(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)revents;
	repl_sync_room(w->data);
}

int repl_sync_start(struct repl_sync *s, struct repl_fault *f)
{
	struct machine *m = s->vm->m;
	uint64_t words = machine_bitmap_words(s->vm->m);
	int r;

	/* Round 0 is every page; clear the log first so later writes show. */
	machine_pause(m);
	if ((r = machine_harvest_dirty(m, s->todo)) < 0) {
		machine_resume(m);
		repl_fault_set(f, repl_fault_local(r), r, "dirty log failed before sync: %s",
			       strerror(-r));
		return r;
	}
	/* The standby's RAM is fresh and zero: pages never written (holes in
	 * the memfd) need not travel, nor be faulted in here by reading them. */
	if (machine_ram_populated(m, s->todo) < 0) {
		memset(s->todo, 0xff, words * 8);
		if (m->ram_pages % 64)
			s->todo[words - 1] = (1ull << (m->ram_pages % 64)) - 1;
	}
	/* The disk: every block now, the ones written from here on again in
	 * the first checkpoint (their dirty bits start clear now). */
	if (s->disk && s->disk->nblocks) {
		memset(s->disk->harvest, 0, (s->disk->nblocks + 63) / 64 * 8);
		machine_disk_harvest(m, s->disk->harvest);
	}
	s->disk_cursor = s->disk_sent = 0;
	s->disk_round = 0;
	s->disk_done = !s->disk || !s->disk->nblocks;
	s->t0_ns = now_ns();
	s->cursor = 0;
	s->running = true;
	proto_page_enc_cache(s->enc, false);   /* most pages travel once */
	machine_resume(m);
	ev_idle_start(s->loop, &s->idle_w);
	log_info(TAG, "secondary accepted us: initial sync while the guest runs (%llu pages, "
		 "%llu of them ever written)", (unsigned long long)m->ram_pages,
		 (unsigned long long)machine_bitmap_count(s->todo, words));
	return 0;
}

uint64_t repl_sync_left(const struct repl_sync *s)
{
	uint64_t words, w;

	if (!s->running || !s->todo || s->cursor >= s->vm->m->ram_pages)
		return 0;
	words = machine_bitmap_words(s->vm->m);
	w = s->cursor / 64;
	/* the cursor's word from the cursor on, then the words after it */
	return (uint64_t)__builtin_popcountll(s->todo[w] >> (s->cursor % 64)) +
	       machine_bitmap_count(s->todo + w + 1, words - w - 1);
}
