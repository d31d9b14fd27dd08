/* Benchmarks of the machine layer (figure, reference from the same run, ratio):
 *  - pause+resume of a running guest, 1 and 2 vCPUs, p50/p99, against a
 *    condition-variable hand-off between two host threads;
 *  - dirty-log harvest (GET + CLEAR + merge) of 1 GiB and 4 GiB guests with
 *    a given number of dirty pages, against scanning the same bitmap in memory. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "machine/machine.h"

#define ITER 2000

static void sleep_us(uint64_t us)
{
	struct timespec d = { (time_t)(us / 1000000), (long)(us % 1000000) * 1000 };

	nanosleep(&d, NULL);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Reference: wake a waiting thread and wait for its answer (cond + mutex). */
struct pingpong {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int turn;
	bool stop;
};

static void *pong(void *arg)
{
	struct pingpong *p = arg;

	pthread_mutex_lock(&p->lock);
	while (!p->stop) {
		while (p->turn != 1 && !p->stop)
			pthread_cond_wait(&p->cond, &p->lock);
		p->turn = 0;
		pthread_cond_broadcast(&p->cond);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

static void handoff_reference(uint64_t *p50, uint64_t *p99)
{
	struct pingpong p = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, false };
	uint64_t *lat = calloc(ITER, sizeof(uint64_t));
	pthread_t th;

	pthread_create(&th, NULL, pong, &p);
	for (int i = 0; i < ITER; i++) {
		uint64_t t0;

		sleep_us(200 + (uint64_t)(rand() % 300));
		t0 = now_ns();
		pthread_mutex_lock(&p.lock);
		p.turn = 1;
		pthread_cond_broadcast(&p.cond);
		while (p.turn != 0)
			pthread_cond_wait(&p.cond, &p.lock);
		pthread_mutex_unlock(&p.lock);
		lat[i] = now_ns() - t0;
	}
	pthread_mutex_lock(&p.lock);
	p.stop = true;
	pthread_cond_broadcast(&p.cond);
	pthread_mutex_unlock(&p.lock);
	pthread_join(th, NULL);
	qsort(lat, ITER, sizeof(uint64_t), cmp_u64);
	*p50 = lat[ITER / 2];
	*p99 = lat[ITER * 99 / 100];
	free(lat);
}

static struct machine *boot(const char *guest, uint64_t mem, int ncpus)
{
	struct machine_config cfg = { .mem_bytes = mem, .ncpus = ncpus };
	struct machine *m;
	char err[256];

	if (machine_parse_guest(&cfg, guest, err, sizeof(err)) < 0 ||
	    machine_new(&cfg, NULL, &m) < 0 || machine_boot(m) < 0) {
		fprintf(stderr, "cannot start guest %s\n", guest);
		exit(1);
	}
	return m;
}

static void bench_pause(int ncpus, uint64_t ref50, uint64_t ref99)
{
	struct machine *m = boot("dirty:mb=16,report_ms=1000", 64ull << 20, ncpus);
	uint64_t *lat = calloc(ITER, sizeof(uint64_t));

	machine_resume(m);
	sleep_us(50000);
	for (int i = 0; i < ITER; i++) {
		uint64_t t0;

		sleep_us(200 + (uint64_t)(rand() % 800));
		t0 = now_ns();
		machine_pause(m);
		machine_resume(m);
		lat[i] = now_ns() - t0;
	}
	qsort(lat, ITER, sizeof(uint64_t), cmp_u64);
	printf("pause+resume, %d vCPU(s), running dirty guest: p50 %7.1f us  p99 %7.1f us | "
	       "reference thread hand-off p50 %5.1f us p99 %5.1f us | ratio p50 %.1fx\n",
	       ncpus, lat[ITER / 2] / 1e3, lat[ITER * 99 / 100] / 1e3, ref50 / 1e3, ref99 / 1e3,
	       (double)lat[ITER / 2] / (double)ref50);
	free(lat);
	machine_free(m);
}

static void bench_harvest(uint64_t mem, uint64_t set_mb, uint64_t run_ms)
{
	char guest[64];
	struct machine *m;
	uint64_t *bm, t0, t_harvest = 0, t_scan = 0, dirty = 0, sink = 0;
	const int rounds = 5;

	snprintf(guest, sizeof(guest), "dirty:mb=%llu,report_ms=1000", (unsigned long long)set_mb);
	m = boot(guest, mem, 1);
	bm = calloc(machine_bitmap_words(m), 8);
	machine_resume(m);
	sleep_us(300000);   /* first touch of the whole set */
	for (int r = 0; r < rounds; r++) {
		machine_pause(m);
		if (machine_harvest_dirty(m, bm) < 0)
			exit(1);
		machine_resume(m);
		sleep_us(run_ms * 1000);  /* first writes after re-protect fault: ~3 us each */
		machine_pause(m);
		t0 = now_ns();
		if (machine_harvest_dirty(m, bm) < 0)
			exit(1);
		t_harvest += now_ns() - t0;
		/* Reference: find the set bits of the same bitmap in memory. */
		t0 = now_ns();
		dirty = 0;
		for (size_t w = 0; w < machine_bitmap_words(m); w++) {
			uint64_t b = bm[w];

			while (b) {
				sink += w * 64 + (uint64_t)__builtin_ctzll(b);
				b &= b - 1;
				dirty++;
			}
		}
		t_scan += now_ns() - t0;
		machine_resume(m);
	}
	printf("harvest %llu GiB guest, %6llu dirty pages: %8.1f us | reference bitmap scan "
	       "%6.1f us | ratio %.1fx%s\n", (unsigned long long)(mem >> 30),
	       (unsigned long long)dirty, t_harvest / rounds / 1e3, t_scan / rounds / 1e3,
	       (double)t_harvest / (double)(t_scan ? t_scan : 1), sink == 1 ? " " : "");
	free(bm);
	machine_free(m);
}

int main(void)
{
	uint64_t ref50, ref99;

	srand(1);
	handoff_reference(&ref50, &ref99);
	bench_pause(1, ref50, ref99);
	bench_pause(2, ref50, ref99);
	for (int g = 1; g <= 4; g += 3) {
		bench_harvest((uint64_t)g << 30, 4, 30);
		bench_harvest((uint64_t)g << 30, 64, 150);
		bench_harvest((uint64_t)g << 30, 512, 600);
	}
	return 0;
}
