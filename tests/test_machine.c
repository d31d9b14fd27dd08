/* kmod + machine on the real /dev/kvm: state round trip, dirty-log
 * exactness, pause/resume under load, bad input. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "guest/guest.h"
#include "tests/harness.h"

#define MEM (64ull << 20)

static uint64_t rng_state;

static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static int setup(void **st)
{
	(void)st;
	if (!rng_state)
		rng_state = th_seed() | 1;
	return 0;
}

#define REQUIRE_KVM() do { if (!th_kvm_available()) skip(); } while (0)

/* Moves the complete state of a paused machine into another one. */
static void move_state(struct machine *from, struct machine *to)
{
	struct machine_state ms;
	struct kvm_vcpu_state *vs = malloc(sizeof(*vs));

	assert_non_null(vs);
	memcpy(to->ram, from->ram, from->cfg.mem_bytes);
	assert_int_equal(machine_get_state(from, &ms), 0);
	assert_int_equal(machine_set_state(to, &ms), 0);
	for (int i = 0; i < from->ncpus; i++) {
		assert_int_equal(machine_get_vcpu_state(from, i, vs), 0);
		assert_int_equal(machine_set_vcpu_state(to, i, vs), 0);
	}
	free(vs);
}

/* get -> set into a fresh VM at a random moment of a busy conversation; the
 * copy then says exactly what the original says. */
static void test_state_round_trip(void **st)
{
	(void)st;
	REQUIRE_KVM();
	for (int trial = 0; trial < 8; trial++) {
		struct th_vm a, b;
		const int n = 30;
		char *oa, *ob;
		int done;
		size_t done_bytes;

		assert_int_equal(th_vm_new(&a, "counter", MEM, 1 + trial % 2, true), 0);
		assert_int_equal(th_vm_new(&b, "counter", MEM, 1 + trial % 2, false), 0);
		/* The first m requests go before the move, the rest after it to both:
		 * the move comes after at least one reply and before the last. */
		int m = 1 + (int)(rnd() % (n - 1));

		machine_resume(a.m);
		for (int i = 0; i < m; i++)
			th_vm_send(&a, i % 3 == 2 ? "get\n" : "incr\n");
		assert_true(th_vm_wait_lines(&a, 1, 20000) >= 1);
		th_sleep_us(rnd() % 20000);
		machine_pause(a.m);
		done = th_vm_lines(&a);
		pthread_mutex_lock(&a.lock);
		done_bytes = a.out_len;
		pthread_mutex_unlock(&a.lock);
		move_state(a.m, b.m);
		machine_resume(a.m);
		machine_resume(b.m);
		for (int i = m; i < n; i++) {
			th_vm_send(&a, i % 3 == 2 ? "get\n" : "incr\n");
			th_vm_send(&b, i % 3 == 2 ? "get\n" : "incr\n");
		}
		assert_int_equal(th_vm_wait_lines(&a, n, 20000), n);
		assert_int_equal(th_vm_wait_lines(&b, n - done, 20000), n - done);
		oa = th_vm_output(&a);
		ob = th_vm_output(&b);
		printf("trial %d: %d vCPU(s), moved after %d of %d replies (%d requests sent)\n", trial,
		       1 + trial % 2, done, n, m);
		assert_true(done > 0 && done < n);   /* really mid-conversation */
		assert_string_equal(oa + done_bytes, ob);
		free(oa);
		free(ob);
		th_vm_free(&a);
		th_vm_free(&b);
	}
}

static int bit(const uint64_t *bm, uint64_t p)
{
	return (int)(bm[p / 64] >> (p % 64)) & 1;
}

/* Every page whose contents changed between two pauses is in the harvest:
 * checked by content over many rounds of the dirty guest at full speed;
 * pages the VMM writes itself are in it too. With a hot-page budget, pages
 * the guest rewrites stay writable (never re-protected) and must still be
 * reported every time. */
/* A booted guest with the given hot-page budget, its boot writes
 * harvested: *bm a bitmap of its pages, *copy its RAM as of now. */
static void dirty_start(struct th_vm *t, const char *guest, uint64_t hot_budget, uint64_t **bm,
			uint8_t **copy)
{
	assert_int_equal(th_vm_new(t, guest, MEM, 1, true), 0);
	assert_int_equal(machine_set_hot_budget(t->m, hot_budget), 0);
	*bm = calloc((t->m->ram_pages + 63) / 64, 8);
	*copy = malloc(MEM);
	assert_non_null(*bm);
	assert_non_null(*copy);
	assert_int_equal(machine_harvest_dirty(t->m, *bm), 0);
	memcpy(*copy, t->m->ram, MEM);
}

static void dirty_log_exact(const char *guest, uint64_t hot_budget)
{
	struct th_vm t;
	uint64_t pages, *bm, hot_max = 0;
	uint8_t *shadow;
	uint64_t changed_total = 0, extra_total = 0, reported_total = 0;
	int guest_rounds = 0;   /* rounds in which the guest itself changed a page */

	REQUIRE_KVM();
	dirty_start(&t, guest, hot_budget, &bm, &shadow);
	pages = t.m->ram_pages;
	for (int round = 0; round < 60; round++) {
		uint64_t vmm_page = 2048 + rnd() % 1024, changed = 0, extra = 0, reported = 0;

		machine_resume(t.m);
		th_sleep_us(1000 + rnd() % 4000);
		machine_pause(t.m);
		/* A device write the guest did not make. */
		t.m->ram[vmm_page * 4096 + 8] ^= 0x5a;
		machine_mark_dirty(t.m, vmm_page * 4096 + 8, 1);
		assert_int_equal(machine_harvest_dirty(t.m, bm), 0);
		for (uint64_t p = 0; p < pages; p++) {
			int diff = memcmp(shadow + p * 4096, t.m->ram + p * 4096, 4096) != 0;

			if (diff && !bit(bm, p))
				fail_msg("round %d: page %llu changed but was not reported", round,
					 (unsigned long long)p);
			changed += diff;
			reported += bit(bm, p);
			extra += bit(bm, p) && !diff;
		}
		assert_true(bit(bm, vmm_page));
		for (uint64_t p = 0; p < pages && t.m->hot; p++)
			if (bit(t.m->hot, p) && !bit(bm, p))
				fail_msg("round %d: hot page %llu not reported", round,
					 (unsigned long long)p);
		if (t.m->hot_pages > hot_max)
			hot_max = t.m->hot_pages;
		assert_true(t.m->hot_pages <= hot_budget);
		changed_total += changed;
		guest_rounds += changed > 1;    /* more than the VMM's page */
		extra_total += extra;
		reported_total += reported;
		memcpy(shadow, t.m->ram, MEM);
	}
	printf("%s, hot budget %llu: 60 rounds (the guest wrote in %d): %llu pages changed, %llu "
	       "reported, 0 missed, %llu extra (written with the same contents or hot), hot set up "
	       "to %llu pages\n", guest, (unsigned long long)hot_budget, guest_rounds,
	       (unsigned long long)changed_total, (unsigned long long)reported_total,
	       (unsigned long long)extra_total, (unsigned long long)hot_max);
	/* Exercised, however slow the host: a count of pages would depend on
	 * how far the guest gets in a few ms (a nested KVM: a few a round). */
	assert_true(guest_rounds >= 30);
	if (hot_budget)
		assert_true(hot_max > 0);        /* the mechanism was exercised */
	free(shadow);
	free(bm);
	th_vm_free(&t);
}

static void test_dirty_log_exact(void **st)
{
	(void)st;
	dirty_log_exact("dirty:mb=16,report_ms=5", 0);
}

/* A small working set rewritten all the time: it becomes hot. */
static void test_dirty_log_exact_hot(void **st)
{
	(void)st;
	dirty_log_exact("dirty:mb=2,report_ms=5", 256);
	dirty_log_exact("dirty:mb=16,report_ms=5", 2048);
}

/* Pre-copy (machine_harvest_running): a harvest while the guest runs, its
 * pages copied while the guest goes on writing, then the pause's harvest
 * and copy: together they leave a copy equal to the paused guest's RAM,
 * page for page, in every round (with and without hot pages). */
static void dirty_log_precopy(const char *guest, uint64_t hot_budget)
{
	struct th_vm t;
	uint64_t *bm, pages, pre_total = 0, pause_total = 0;
	uint8_t *standby;
	int pre_rounds = 0;     /* rounds whose running harvest found pages */

	REQUIRE_KVM();
	dirty_start(&t, guest, hot_budget, &bm, &standby);
	pages = t.m->ram_pages;
	for (int round = 0; round < 60; round++) {
		uint64_t vmm_page = 2048 + rnd() % 1024, found;

		machine_resume(t.m);
		th_sleep_us(1000 + rnd() % 3000);
		/* The VMM's write is left for the pause's harvest. */
		t.m->ram[vmm_page * 4096 + 8] ^= 0x5a;
		machine_mark_dirty(t.m, vmm_page * 4096 + 8, 1);
		assert_int_equal(machine_harvest_running(t.m, bm), 0);
		found = 0;
		for (uint64_t p = 0; p < pages; p++)
			if (bit(bm, p)) {
				memcpy(standby + p * 4096, t.m->ram + p * 4096, 4096);
				found++;
				if (t.m->hot && bit(t.m->hot, p))
					fail_msg("round %d: hot page %llu pre-copied", round,
						 (unsigned long long)p);
			}
		pre_total += found;
		pre_rounds += found > 0;
		th_sleep_us(1000 + rnd() % 3000);
		machine_pause(t.m);
		assert_int_equal(machine_harvest_dirty(t.m, bm), 0);
		assert_true(bit(bm, vmm_page));
		for (uint64_t p = 0; p < pages; p++)
			if (bit(bm, p)) {
				memcpy(standby + p * 4096, t.m->ram + p * 4096, 4096);
				pause_total++;
			}
		for (uint64_t p = 0; p < pages; p++)
			if (memcmp(standby + p * 4096, t.m->ram + p * 4096, 4096))
				fail_msg("round %d: page %llu differs after pre-copy and pause", round,
					 (unsigned long long)p);
	}
	printf("%s, hot budget %llu: 60 rounds (pages pre-copied in %d): %llu pages pre-copied, "
	       "%llu at the pause, copy equal to RAM every round\n", guest,
	       (unsigned long long)hot_budget, pre_rounds, (unsigned long long)pre_total,
	       (unsigned long long)pause_total);
	assert_true(pre_rounds >= 30);       /* the running harvest was exercised */
	free(standby);
	free(bm);
	th_vm_free(&t);
}

static void test_dirty_log_precopy(void **st)
{
	(void)st;
	dirty_log_precopy("dirty:mb=16,report_ms=5", 0);
	dirty_log_precopy("dirty:mb=16,report_ms=5", 2048);
}

/* Parses the last complete "pages N ..." progress line of the dirty guest
 * (the output may end in the middle of a line). */
static uint64_t last_progress(struct th_vm *t)
{
	char *o = th_vm_output(t), *end = strrchr(o, '\n'), *p, *last = NULL;
	uint64_t v = 0;

	if (end)
		end[1] = 0;
	for (p = strstr(o, "pages "); p; p = strstr(p + 1, "pages "))
		last = p;
	if (last)
		v = strtoull(last + 6, NULL, 10);
	free(o);
	return v;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* 1000 pause/resume cycles of a running dirty guest: frozen while paused,
 * progressing after, and no write lost (checked by content). */
static void run_pause_resume(int ncpus)
{
	struct th_vm t;
	uint64_t *lat = calloc(1000, sizeof(uint64_t));
	uint64_t *bm, prog0, prog1, pages;
	uint8_t *shadow;
	int frozen_checks = 0;

	assert_int_equal(th_vm_new(&t, "dirty:mb=8,report_ms=20", MEM, ncpus, true), 0);
	pages = t.m->ram_pages;
	bm = calloc((pages + 63) / 64, 8);
	shadow = malloc(MEM);
	machine_resume(t.m);
	th_sleep_us(50000);
	prog0 = last_progress(&t);
	machine_pause(t.m);
	assert_int_equal(machine_harvest_dirty(t.m, bm), 0);
	memcpy(shadow, t.m->ram, MEM);
	machine_resume(t.m);
	for (int i = 0; i < 1000; i++) {
		uint64_t t0;

		th_sleep_us(200 + rnd() % 800);
		t0 = now_ns();
		machine_pause(t.m);
		lat[i] = now_ns() - t0;
		if (i % 100 == 0) {
			/* Nothing moves while paused. */
			uint64_t sum0 = 0, sum1 = 0;

			for (uint64_t w = 0; w < (8ull << 20) / 8; w += 64)
				sum0 += ((uint64_t *)(t.m->ram + GUEST_HEAP_GPA))[w];
			th_sleep_us(2000);
			for (uint64_t w = 0; w < (8ull << 20) / 8; w += 64)
				sum1 += ((uint64_t *)(t.m->ram + GUEST_HEAP_GPA))[w];
			assert_true(sum0 == sum1);
			frozen_checks++;
			assert_int_equal(machine_harvest_dirty(t.m, bm), 0);
			for (uint64_t p = 0; p < pages; p++)
				if (!bit(bm, p) && memcmp(shadow + p * 4096, t.m->ram + p * 4096, 4096))
					fail_msg("cycle %d: page %llu changed, not reported", i,
						 (unsigned long long)p);
			memcpy(shadow, t.m->ram, MEM);
		}
		machine_resume(t.m);
	}
	th_sleep_us(100000);
	prog1 = last_progress(&t);
	qsort(lat, 1000, sizeof(uint64_t), cmp_u64);
	printf("%d vCPU(s): 1000 pause/resume cycles, pause p50 %.1f us p99 %.1f us max %.1f us; "
	       "guest progress %llu -> %llu pages; %d frozen checks\n", ncpus, lat[500] / 1e3,
	       lat[990] / 1e3, lat[999] / 1e3, (unsigned long long)prog0,
	       (unsigned long long)prog1, frozen_checks);
	assert_true(prog1 > prog0);
	assert_false(t.stopped);
	free(shadow);
	free(bm);
	free(lat);
	th_vm_free(&t);
}

static void test_pause_resume_1000(void **st)
{
	(void)st;
	REQUIRE_KVM();
	run_pause_resume(1);
	run_pause_resume(2);
}

/* The state a capture gets was read at the pause by the vCPU thread that
 * parked last (machine_get_state), and there the XCRs, xsave area and debug
 * registers of a vCPU that has not run since the last state read are taken
 * from that read (kvm_vcpu_get_state). At random pauses of guests that run,
 * idle, take timer interrupts and run on two vCPUs, the state got so equals
 * what the ioctls read now; after a set neither shortcut is used. */
static void state_reuse_equal(const char *guest, int ncpus, bool console, uint64_t min_own,
			      uint64_t min_snap)
{
	struct kvm_vcpu_state *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));
	uint64_t reads0 = 0, reads1 = 0, own0 = 0, own1 = 0, snap0;
	struct machine_state *ms = malloc(sizeof(*ms));
	struct kvm_vm_state *vs = malloc(sizeof(*vs));
	struct th_vm t;

	assert_non_null(a);
	assert_non_null(b);
	assert_int_equal(th_vm_new(&t, guest, MEM, ncpus, true), 0);
	for (int c = 0; c < ncpus; c++) {
		reads0 += t.m->vcpus[c].kvm.state_reads;
		own0 += t.m->vcpus[c].kvm.state_reads_own;
	}
	snap0 = t.m->stats.snap_used;
	machine_resume(t.m);
	for (int i = 0; i < 200; i++) {
		th_sleep_us(rnd() % 3000);
		if (console && i % 4 == 0)
			th_vm_send(&t, i % 8 ? "incr\n" : "get\n");
		machine_pause(t.m);
		/* the VM state read at the pause (snapshot) is the VM's now */
		assert_int_equal(machine_get_state(t.m, ms), 0);
		assert_int_equal(kvm_vm_get_state(&t.m->vm, vs), 0);
		assert_memory_equal(&ms->vm.pic_master, &vs->pic_master, sizeof(vs->pic_master));
		assert_memory_equal(&ms->vm.pic_slave, &vs->pic_slave, sizeof(vs->pic_slave));
		assert_memory_equal(&ms->vm.ioapic, &vs->ioapic, sizeof(vs->ioapic));
		for (int c = 0; c < ncpus; c++) {
			assert_int_equal(machine_get_vcpu_state(t.m, c, a), 0);
			assert_int_equal(kvm_vcpu_get_state_full(&t.m->vcpus[c].kvm, b), 0);
			assert_memory_equal(&a->regs, &b->regs, sizeof(a->regs));
			assert_memory_equal(&a->sregs, &b->sregs, sizeof(a->sregs));
			assert_memory_equal(&a->events, &b->events, sizeof(a->events));
			assert_memory_equal(&a->mp_state, &b->mp_state, sizeof(a->mp_state));
			assert_memory_equal(&a->xcrs, &b->xcrs, sizeof(a->xcrs));
			assert_memory_equal(a->xsave, b->xsave, a->xsave_size);
			assert_memory_equal(&a->debugregs, &b->debugregs, sizeof(a->debugregs));
		}
		if (i % 50 == 49) {
			/* A set makes the last read stale: the next read must not use it. */
			uint64_t o;

			assert_int_equal(machine_get_vcpu_state(t.m, 0, a), 0);
			a->debugregs.db[0] ^= 0x5a5a000;
			assert_int_equal(machine_set_vcpu_state(t.m, 0, a), 0);
			o = t.m->vcpus[0].kvm.state_reads_own;
			assert_int_equal(machine_get_vcpu_state(t.m, 0, b), 0);
			assert_int_equal(t.m->vcpus[0].kvm.state_reads_own, o);
			assert_true(b->debugregs.db[0] == a->debugregs.db[0]);
			b->debugregs.db[0] ^= 0x5a5a000;   /* put it back before the guest runs */
			assert_int_equal(machine_set_vcpu_state(t.m, 0, b), 0);
		}
		machine_resume(t.m);
	}
	machine_pause(t.m);
	for (int c = 0; c < ncpus; c++) {
		reads1 += t.m->vcpus[c].kvm.state_reads;
		own1 += t.m->vcpus[c].kvm.state_reads_own;
	}
	printf("%s, %d vCPU(s): of %llu state reads, %llu took the XCRs, xsave and debug registers "
	       "from the last read; %llu reads answered from the pause's snapshot\n", guest, ncpus,
	       (unsigned long long)(reads1 - reads0), (unsigned long long)(own1 - own0),
	       (unsigned long long)(t.m->stats.snap_used - snap0));
	assert_true(own1 - own0 >= min_own);   /* the shortcuts are really taken */
	assert_true(t.m->stats.snap_used - snap0 >= min_snap);
	assert_false(t.stopped);
	th_vm_free(&t);
	free(ms);
	free(vs);
	free(a);
	free(b);
}

static void test_state_reuse_equal(void **st)
{
	(void)st;
	REQUIRE_KVM();
	/* vCPU 1 of dirty idles for seconds: its last read is reused. A pause
	 * that finds every vCPU idle (counter, mostly) has no snapshot. */
	state_reuse_equal("dirty:mb=8,rate_mb=50,report_ms=1000", 2, false, 100, 300);
	state_reuse_equal("counter", 1, true, 0, 20);
	state_reuse_equal("stress", 2, false, 0, 300);
}

static void test_missing_kvm(void **st)
{
	struct machine_config cfg = { .mem_bytes = MEM, .ncpus = 1, .guest = "counter" };
	struct machine *m = NULL;

	(void)st;
	setenv("UNDERSTUDY_KVM", "/nonexistent/kvm", 1);
	assert_int_equal(machine_new(&cfg, NULL, &m), -ENOENT);
	assert_null(m);
	unsetenv("UNDERSTUDY_KVM");
}

static void test_bad_config(void **st)
{
	struct machine_config cfg = { .mem_bytes = 0, .ncpus = 1, .guest = "counter" };
	struct machine *m = NULL;
	uint64_t v;
	char err[256];

	(void)st;
	assert_int_equal(machine_new(&cfg, NULL, &m), -EINVAL);
	cfg.mem_bytes = MEM;
	cfg.ncpus = 0;
	assert_int_equal(machine_new(&cfg, NULL, &m), -EINVAL);
	cfg.ncpus = 99;
	assert_int_equal(machine_new(&cfg, NULL, &m), -EINVAL);
	assert_null(m);
	assert_int_equal(machine_parse_guest(&cfg, "nosuch", err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "counter"));
	assert_int_equal(machine_parse_guest(&cfg, "dirty:mb=4", err, sizeof(err)), 0);
	assert_string_equal(cfg.guest_args, "mb=4");
	/* The guests ignore what they do not know: the parser does not. */
	assert_int_equal(machine_parse_guest(&cfg, "dirty:mb=64,hot_mb=8,rate_mb=50", err,
					     sizeof(err)), 0);
	assert_int_equal(machine_parse_guest(&cfg, "dirty:mb=64,bogus=1", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "unknown argument 'bogus'"));
	assert_int_equal(machine_parse_guest(&cfg, "dirty:mb=6x4", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "bad value for 'mb'"));
	assert_int_equal(machine_parse_guest(&cfg, "dirty:mb", err, sizeof(err)), -EINVAL);
	assert_int_equal(machine_parse_guest(&cfg, "stress:x=1", err, sizeof(err)), -EINVAL);
	assert_int_equal(machine_parse_guest(&cfg, "counter:area_mb=240,dense=1", err, sizeof(err)), 0);
	assert_int_equal(machine_parse_size("64M", &v), 0);
	assert_int_equal(v, 64ull << 20);
	assert_int_equal(machine_parse_size("1GiB", &v), 0);
	assert_int_equal(v, 1ull << 30);
	assert_int_equal(machine_parse_size("12Q", &v), -EINVAL);
	assert_int_equal(machine_parse_size("-1", &v), -EINVAL);
	assert_int_equal(machine_parse_size("", &v), -EINVAL);
}

/* An unknown request gets an error reply; halt stops the machine with status 0. */
static void test_counter_halt_status(void **st)
{
	struct th_vm t;

	(void)st;
	REQUIRE_KVM();
	assert_int_equal(th_vm_new(&t, "counter", MEM, 1, true), 0);
	machine_resume(t.m);
	th_vm_send(&t, "incr\nbogus\nhalt\n");
	th_vm_wait_lines(&t, 99, 5000);
	assert_true(t.stopped);
	assert_int_equal(t.status, 0);
	char *o = th_vm_output(&t);
	assert_non_null(strstr(o, "error unknown request"));
	free(o);
	th_vm_free(&t);
}

/* A real guest fault (the counter guest's "fault": a #GP at CPL3) is reported
 * with its vector and stops the machine with an error; it does not hang and
 * nothing after it runs. */
static void test_guest_fault_reported(void **st)
{
	char logpath[] = "/tmp/test-machine-log-XXXXXX", log[4096] = "";
	int saved, fd;
	ssize_t len;
	struct th_vm t;
	char *o;

	(void)st;
	REQUIRE_KVM();
	fd = mkstemp(logpath);
	assert_true(fd >= 0);
	fflush(stderr);
	saved = dup(2);
	dup2(fd, 2);   /* the machine's log, to read its report */
	assert_int_equal(th_vm_new(&t, "counter", MEM, 1, true), 0);
	machine_resume(t.m);
	th_vm_send(&t, "incr\nfault\nincr\n");
	th_vm_wait_lines(&t, 99, 5000);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	len = pread(fd, log, sizeof(log) - 1, 0);
	close(fd);
	unlink(logpath);
	log[len > 0 ? len : 0] = 0;
	printf("log: %s", log);
	assert_true(t.stopped);
	assert_int_equal(t.status, -EFAULT);
	assert_non_null(strstr(log, "guest exception 13 on vCPU 0"));
	o = th_vm_output(&t);
	assert_int_equal(strncmp(o, "1 ", 2), 0);   /* the incr before it, */
	assert_null(strchr(strchr(o, '\n') + 1, '\n'));   /* nothing after it */
	free(o);
	th_vm_free(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_config),
		cmocka_unit_test(test_missing_kvm),
		cmocka_unit_test(test_counter_halt_status),
		cmocka_unit_test(test_guest_fault_reported),
		cmocka_unit_test(test_state_round_trip),
		cmocka_unit_test(test_dirty_log_exact),
		cmocka_unit_test(test_dirty_log_exact_hot),
		cmocka_unit_test(test_dirty_log_precopy),
		cmocka_unit_test(test_pause_resume_1000),
		cmocka_unit_test(test_state_reuse_equal),
	};

	return cmocka_run_group_tests_name("machine", tests, setup, NULL);
}
