/* Invariant 3: a page written while the capture copies it is never lost
 * (dirty bits are cleared before the copy, never after).
 *
 * The guest is paused during a capture, so the writers that can race the
 * copy are the VMM's own (device models, DMA), which mark what they write
 * (machine_mark_dirty). Here a host thread plays that part, deterministic
 * enough to be sure of a race: every page of a region is dirtied first, then
 * while the capture copies the region in ascending order the writer gives
 * every page a new value, ascending and slower than the copy, so most of its
 * writes land on pages already copied. A second, quiet capture must bring
 * every one of them: the standby then holds the new value everywhere.
 * (A writer that keeps rewriting the same pages, as test_checkpoint's
 * standby_no_lost_write does, heals a lost write with the next one.) */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "checkpoint/checkpoint.h"
#include "tests/harness.h"

#define REGION_PAGE0 2048u       /* 8 MiB in, clear of the guest image */
#define REGION_PAGES 8192u
#define ROUNDS 24

struct writer {
	struct machine *m;
	uint64_t value;
	atomic_bool ready, go;
	atomic_uint_fast64_t done;   /* pages written */
	uint64_t per_page_ns;
	uint64_t first_ns;       /* when the first write was done */
};

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void write_page(struct machine *m, uint64_t page, uint64_t value)
{
	uint64_t *p = machine_page_hva(m, page);

	p[0] = value;
	p[511] = value;
	machine_mark_dirty(m, page * KVM_PAGE_SIZE, KVM_PAGE_SIZE);
}

static void *writer_main(void *arg)
{
	struct writer *w = arg;

	atomic_store(&w->ready, true);
	while (!atomic_load(&w->go))
		;
	w->first_ns = mono_ns();
	for (uint64_t i = 0; i < REGION_PAGES; i++) {
		uint64_t until = mono_ns() + w->per_page_ns;

		write_page(w->m, REGION_PAGE0 + i, w->value);
		atomic_store(&w->done, i + 1);
		while (mono_ns() < until)
			;
	}
	return NULL;
}

static void no_write_lost_during_copy(void **state)
{
	struct th_vm src, dst;
	struct ckpt c;
	int raced_rounds = 0;

	(void)state;
	assert_int_equal(th_vm_new(&src, "counter", 64 << 20, 1, true), 0);
	assert_int_equal(th_vm_new(&dst, "counter", 64 << 20, 1, false), 0);
	ckpt_init(&c);
	machine_pause(src.m);
	assert_int_equal(ckpt_reserve(&c, src.m->ram_pages), 0);
	assert_int_equal(ckpt_capture(src.m, &c, true), 0);
	assert_int_equal(ckpt_apply(dst.m, &c), 0);
	for (int r = 0; r < ROUNDS; r++) {
		struct writer w = { .m = src.m, .value = 2 * (uint64_t)r + 2 };
		uint64_t t0, t1;
		pthread_t t;
		size_t lost = 0;

		/* every page of the region dirty, so the capture copies it */
		for (uint64_t i = 0; i < REGION_PAGES; i++)
			write_page(src.m, REGION_PAGE0 + i, w.value - 1);
		/* the writer slower than the copy (~0.2 us a page here) */
		w.per_page_ns = 500;
		assert_int_equal(pthread_create(&t, NULL, writer_main, &w), 0);
		while (!atomic_load(&w.ready))
			;
		t0 = mono_ns();
		atomic_store(&w.go, true);
		/* the writer is under way (a few pages ahead) when the capture begins */
		while (atomic_load(&w.done) < 32)
			;
		assert_int_equal(ckpt_capture(src.m, &c, false), 0);
		t1 = mono_ns();
		pthread_join(t, NULL);
		raced_rounds += w.first_ns < t1;
		assert_int_equal(ckpt_apply(dst.m, &c), 0);
		/* a quiet capture: what was written during the first one comes now */
		assert_int_equal(ckpt_capture(src.m, &c, false), 0);
		assert_int_equal(ckpt_apply(dst.m, &c), 0);
		for (uint64_t i = 0; i < REGION_PAGES; i++)
			lost += memcmp(machine_page_hva(src.m, REGION_PAGE0 + i),
				       machine_page_hva(dst.m, REGION_PAGE0 + i), KVM_PAGE_SIZE) != 0;
		printf("round %d: capture %.2f ms (copy %.2f ms), writer began %+.2f ms into it; "
		       "%zu of %u pages differ on the standby\n", r, (t1 - t0) / 1e6,
		       c.stats.copy_ns / 1e6, ((double)w.first_ns - (double)t0) / 1e6, lost, REGION_PAGES);
		if (lost)
			fail_msg("round %d: %zu pages written during the copy were lost", r, lost);
	}
	/* the writer has to have run during captures for this to prove anything */
	printf("%d of %d rounds had the writer start inside the capture\n", raced_rounds, ROUNDS);
	assert_true(raced_rounds > 0);
	ckpt_fini(&c);
	th_vm_free(&dst);
	th_vm_free(&src);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(no_write_lost_during_copy),
	};

	if (!th_kvm_available())
		return 77;
	log_set_level(LOG_WARN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
