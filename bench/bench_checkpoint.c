/* Pause time of an incremental checkpoint against the number of dirty pages.
 *
 * The `dirty` guest sweeps a working set of exactly N pages at full speed;
 * after it has had time to touch every page, the host pauses the machine,
 * harvests, copies the dirty pages, reads the state and resumes (ckpt_take).
 * Reference, measured in the same run: memcpy of the same number of bytes
 * between two prefaulted buffers, with the caches flushed first by writing
 * a 64 MiB scratch buffer (the guest's pages are not cache-hot either).
 * Figures are medians of ROUNDS captures. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"

#define ROUNDS 7

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_u64);
	return v[n / 2];
}

static void sleep_ms(unsigned ms)
{
	struct timespec d = { ms / 1000, (long)(ms % 1000) * 1000000 };

	nanosleep(&d, NULL);
}

static uint64_t memcpy_ns(size_t bytes)
{
	uint8_t *src = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	uint8_t *dst = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	size_t scratch_len = 64u << 20;
	uint8_t *scratch = malloc(scratch_len);
	uint64_t t[ROUNDS];

	if (src == MAP_FAILED || dst == MAP_FAILED || !scratch)
		return 0;
	memset(src, 0x5a, bytes);
	memset(dst, 0xa5, bytes);
	for (int r = 0; r < ROUNDS; r++) {
		uint64_t t0;

		memset(scratch, r, scratch_len);
		t0 = now_ns();
		memcpy(dst, src, bytes);
		__asm__ volatile("" : : "r"(dst) : "memory");
		t[r] = now_ns() - t0;
		src[r] ^= 1;
	}
	free(scratch);
	munmap(src, bytes);
	munmap(dst, bytes);
	return median(t, ROUNDS);
}

static int bench(size_t npages)
{
	struct machine_config cfg;
	struct machine *m;
	struct ckpt c;
	uint64_t pause[ROUNDS], stop[ROUNDS], harvest[ROUNDS], copy[ROUNDS], state[ROUNDS], pages[ROUNDS];
	uint64_t mb = (npages * 4096 + (1 << 20) - 1) >> 20, ref;
	unsigned settle_ms;
	int r;

	memset(&cfg, 0, sizeof(cfg));
	cfg.mem_bytes = ((mb + 8 + 1) & ~1ull) << 20;
	cfg.ncpus = 1;
	snprintf(cfg.guest, sizeof(cfg.guest), "dirty");
	snprintf(cfg.guest_args, sizeof(cfg.guest_args), "mb=%llu,report_ms=100000",
		 (unsigned long long)mb);
	if ((r = machine_new(&cfg, NULL, &m)) < 0 || (r = machine_boot(m)) < 0) {
		fprintf(stderr, "bench_checkpoint: machine: %d\n", r);
		return 1;
	}
	ckpt_init(&c);
	machine_resume(m);
	/* the first full capture allocates and faults in every buffer */
	if ((r = ckpt_take(m, &c, true)) < 0)
		goto out;
	/* time for the guest to write every page of its set once: ~5 us a page here */
	settle_ms = (unsigned)(npages * 6 / 1000) + 20;
	for (int i = 0; i < ROUNDS; i++) {
		sleep_ms(settle_ms);
		if ((r = ckpt_take(m, &c, false)) < 0)
			goto out;
		pause[i] = c.stats.pause_ns;
		stop[i] = c.stats.stop_ns;
		harvest[i] = c.stats.harvest_ns;
		copy[i] = c.stats.copy_ns;
		state[i] = c.stats.state_ns;
		pages[i] = c.npages;
	}
	machine_pause(m);
	{
		uint64_t p = median(pages, ROUNDS), pa = median(pause, ROUNDS);
		uint64_t co = median(copy, ROUNDS);

		ref = memcpy_ns(p * 4096);
		printf("%7llu pages (%4llu MiB): pause %8.1f us [stop %6.1f harvest %6.1f copy %8.1f state %5.1f]"
		       "  memcpy %8.1f us  pause/memcpy %5.2fx  copy/memcpy %4.2fx  fixed %6.1f us\n",
		       (unsigned long long)p, (unsigned long long)(p * 4096 >> 20), pa / 1e3,
		       median(stop, ROUNDS) / 1e3, median(harvest, ROUNDS) / 1e3, co / 1e3,
		       median(state, ROUNDS) / 1e3, ref / 1e3, ref ? (double)pa / (double)ref : 0,
		       ref ? (double)co / (double)ref : 0, (pa > co ? pa - co : 0) / 1e3);
		/* bench/figures.py: the same as a FIGURE line for results.json */
		printf("FIGURE {\"name\": \"checkpoint pause, %llu dirty pages, median\", \"value\": %.1f, "
		       "\"unit\": \"us\", \"reference\": \"memcpy of the same bytes\", "
		       "\"reference_value\": %.1f, \"ratio\": %.4f, \"goal\": \"<= 1.5x memcpy\", "
		       "\"met\": %s}\n", (unsigned long long)p, pa / 1e3, ref / 1e3,
		       ref ? (double)pa / (double)ref : 0, ref && pa <= 1.5 * ref ? "true" : "false");
	}
out:
	ckpt_fini(&c);
	machine_free(m);
	if (r < 0)
		fprintf(stderr, "bench_checkpoint: capture failed: %d\n", r);
	return r < 0;
}

int main(void)
{
	static const size_t sizes[] = { 1000, 10000, 100000 };

	if (access("/dev/kvm", R_OK | W_OK) != 0) {
		printf("bench_checkpoint: /dev/kvm not usable, nothing measured\n");
		return 0;
	}
	log_set_level(LOG_WARN);
	printf("checkpoint pause time vs dirty pages (dirty guest, 1 vCPU, median of %d)\n", ROUNDS);
	printf("goal: pause within 1.5x memcpy of the same bytes plus a small fixed cost\n");
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		if (bench(sizes[i]))
			return 1;
	return 0;
}
