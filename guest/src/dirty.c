/* dirty: the load for the benchmarks. Writes one word into each page of a
 * working set of mb MiB, page after page, round and round, at rate_mb MiB/s
 * (0: as fast as it can), and every report_ms prints "pages <total written>
 * <tsc>" so the host can measure its throughput. Extra vCPUs idle. */
#include "glib.h"

void guest_main(int cpu, struct guest_bootinfo *bi)
{
	uint64_t mb = arg_u64(bi->args, "mb", 64);
	uint64_t rate_mb = arg_u64(bi->args, "rate_mb", 0);
	uint64_t report_ms = arg_u64(bi->args, "report_ms", 100);
	uint64_t tsc_per_ms = bi->tsc_khz ? bi->tsc_khz : 1000000;
	uint64_t npages, written = 0, p = 0;
	volatile uint64_t *base;
	uint64_t t0, next_report;

	if (cpu != 0)
		for (;;)
			guest_idle(1000000);
	base = (volatile uint64_t *)bi->heap_gpa;
	npages = (mb << 20) / 4096;
	if (!npages || bi->heap_gpa + (mb << 20) > bi->mem_bytes) {
		con_puts("error: working set does not fit in memory\n");
		guest_power_off(1);
	}
	t0 = rdtsc();
	next_report = t0 + report_ms * tsc_per_ms;
	for (;;) {
		/* 64 pages a step, then check the clock. */
		for (int k = 0; k < 64; k++) {
			base[p * 512 + (written & 511)] = written;
			written++;
			if (++p == npages)
				p = 0;
		}
		uint64_t now = rdtsc();

		if (rate_mb) {
			/* pages allowed by now = elapsed_ms * rate_mb * 256 / 1000 */
			uint64_t allowed = (now - t0) / tsc_per_ms * rate_mb * 256 / 1000;

			if (written > allowed + 64)
				guest_idle(500);
		}
		if (now >= next_report) {
			con_puts("pages ");
			con_put_u64(written);
			con_putc(' ');
			con_put_u64(now);
			con_putc('\n');
			next_report = now + report_ms * tsc_per_ms;
		}
	}
}
