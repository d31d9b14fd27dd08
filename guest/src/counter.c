/* counter: the consistency oracle of the failover tests.
 *
 * One request a line on the console, one reply a line:
 *   incr  n += 1, then rewrite the working area from n; reply "<n> <digest>"
 *   get   reply "<n> <digest>" and change nothing
 *   halt  power off (no reply)
 *   fault read a non-canonical address at CPL3: a real #GP (vector 13) that
 *         the runtime's exception stub reports to the VMM (tests: a guest
 *         fault is reported and stops the machine)
 * digest is a 64-bit hash of the working area (area_mb MiB, default 4), so a
 * lost page write changes it. With dense=1 every incr also rewrites each page
 * of the area whole with values that do not compress: an epoch with an incr
 * then carries area_mb MiB that no encoding shrinks (long transfers for the
 * failover tests). Deterministic: the k-th incr replies the same in every
 * run. With churn_mb=M (and --cpus 2) vCPU 1 writes one word into each page
 * of M MiB after the area, round and round, at churn_rate_mb MiB/s (default
 * 8): a dirty load for slow-link tests that leaves n and digest as they are.
 * Other extra vCPUs idle. */

#include "glib.h"

struct counter {
	uint64_t n;
	uint64_t *area;
	size_t area_bytes;
	int dense;
};

/* Every page of the area gets 4 words that depend on n and the page, and the
 * first word of the next page depends on the previous page's: an older copy of
 * any single page shows in the digest. */
static void mutate(struct counter *c)
{
	size_t npages = c->area_bytes / 4096;
	uint64_t carry = c->n;

	for (size_t p = 0; p < npages; p++) {
		uint64_t *page = c->area + p * 512;
		uint64_t h = mix64(c->n * 0x9e3779b97f4a7c15ull + p);

		for (int k = 0; k < 4; k++) {
			size_t off = (h >> (k * 9)) & 511;

			page[off] += h ^ carry;
			h = mix64(h + k);
		}
		if (c->dense)
			for (int w = 0; w < 512; w++)
				page[w] ^= mix64(h + (uint64_t)w);
		carry = page[0] ^ page[511];
	}
}

static void reply(const struct counter *c)
{
	con_put_u64(c->n);
	con_putc(' ');
	con_put_hex64(digest64(c->area, c->area_bytes));
	con_putc('\n');
}

/* vCPU 1 with churn_mb: dirties pages at a rate, outside the digest. */
static void churn(struct guest_bootinfo *bi)
{
	uint64_t area = arg_u64(bi->args, "area_mb", 4) << 20;
	uint64_t bytes = arg_u64(bi->args, "churn_mb", 0) << 20;
	uint64_t rate_mb = arg_u64(bi->args, "churn_rate_mb", 8);
	uint64_t tsc_per_ms = bi->tsc_khz ? bi->tsc_khz : 1000000, written = 0, p = 0, t0;
	volatile uint64_t *base = (volatile uint64_t *)(bi->heap_gpa + area);
	uint64_t npages = bytes / 4096;

	if (!npages || bi->heap_gpa + area + bytes > bi->mem_bytes)
		for (;;)
			guest_idle(1000000);
	t0 = rdtsc();
	for (;;) {
		/* pages allowed by now = elapsed_ms * rate_mb * 256 / 1000 */
		while (rate_mb && written > (rdtsc() - t0) / tsc_per_ms * rate_mb * 256 / 1000)
			guest_idle(1000);
		for (int k = 0; k < 64; k++) {
			base[p * 512 + (written & 511)] = mix64(written);
			written++;
			if (++p == npages)
				p = 0;
		}
	}
}

void guest_main(int cpu, struct guest_bootinfo *bi)
{
	struct counter c;
	char line[64];

	if (cpu == 1)
		churn(bi);
	if (cpu != 0)
		for (;;)
			guest_idle(1000000);
	c.n = 0;
	c.area = (uint64_t *)bi->heap_gpa;
	c.area_bytes = arg_u64(bi->args, "area_mb", 4) << 20;
	c.dense = arg_u64(bi->args, "dense", 0) != 0;
	if (bi->heap_gpa + c.area_bytes > bi->mem_bytes) {
		con_puts("error: memory too small for the working area\n");
		guest_power_off(1);
	}
	memset(c.area, 0, c.area_bytes);
	for (;;) {
		con_getline(line, sizeof(line));
		if (str_eq(line, "incr")) {
			c.n++;
			mutate(&c);
			reply(&c);
		} else if (str_eq(line, "get")) {
			reply(&c);
		} else if (str_eq(line, "halt")) {
			guest_power_off(0);
		} else if (str_eq(line, "fault")) {
			(void)*(volatile uint64_t *)0x8000000000000000ull;
		} else if (line[0]) {
			con_puts("error unknown request\n");
		}
	}
}
