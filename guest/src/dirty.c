/* dirty: the load for the benchmarks. Writes one word into each page of a
 * working set of mb MiB, page after page, round and round, at rate_mb MiB/s
 * (0: as fast as it can); the time left over goes to a compute loop that
 * touches no memory. Every report_ms it prints "pages <total written> <tsc>
 * work <compute units done>", so the host can measure both its dirty rate
 * and how much CPU it got. Extra vCPUs idle. With hot_mb=H (at most mb),
 * after one pass over the whole working set only its first H MiB are
 * rewritten, round and round: a hot set, as counters, stacks and hot data
 * are, rather than a round-robin writer. */
#include "glib.h"

void guest_main(int cpu, struct guest_bootinfo *bi)
{
	uint64_t mb = arg_u64(bi->args, "mb", 64);
	uint64_t rate_mb = arg_u64(bi->args, "rate_mb", 0);
	uint64_t report_ms = arg_u64(bi->args, "report_ms", 100);
	uint64_t hot_mb = arg_u64(bi->args, "hot_mb", 0);
	uint64_t tsc_per_ms = bi->tsc_khz ? bi->tsc_khz : 1000000;
	uint64_t npages, wrap, hot_pages, written = 0, p = 0, work = 0, acc = 1;
	volatile uint64_t *base;
	uint64_t t0, next_report;

	if (cpu != 0)
		for (;;)
			guest_idle(1000000);
	base = (volatile uint64_t *)bi->heap_gpa;
	npages = (mb << 20) / 4096;
	hot_pages = (hot_mb << 20) / 4096;
	if (!npages || bi->heap_gpa + (mb << 20) > bi->mem_bytes || hot_pages > npages) {
		con_puts("error: working set does not fit in memory (or hot_mb > mb)\n");
		guest_power_off(1);
	}
	wrap = npages;
	t0 = rdtsc();
	next_report = t0 + report_ms * tsc_per_ms;
	for (;;) {
		/* 64 pages a step, then check the clock. */
		for (int k = 0; k < 64; k++) {
			base[p * 512 + (written & 511)] = written;
			written++;
			if (++p == wrap) {
				p = 0;
				if (hot_pages)
					wrap = hot_pages;   /* after the first pass: the hot set only */
			}
		}
		uint64_t now = rdtsc();

		/* Ahead of the rate: compute until the clock allows more pages.
		 * pages allowed by now = elapsed_ms * rate_mb * 256 / 1000 */
		while (rate_mb && written > (now - t0) / tsc_per_ms * rate_mb * 256 / 1000 &&
		       now < next_report) {
			for (int k = 0; k < 1000; k++)
				acc = acc * 6364136223846793005ull + 1442695040888963407ull;
			work++;
			now = rdtsc();
		}
		if (now >= next_report) {
			con_puts("pages ");
			con_put_u64(written);
			con_putc(' ');
			con_put_u64(now);
			con_puts(" work ");
			con_put_u64(work + (acc & 1) * 0);
			con_putc('\n');
			next_report = now + report_ms * tsc_per_ms;
		}
	}
}
