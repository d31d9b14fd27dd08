/* What both halves of a failover drill compute alike (the drill:
 * secondary/drill.c; the primary's part: primary/drill.c): the digest of
 * the RAM they compare, and pause figures from the stats' ring. */
#include "replication/replication.h"

#include <stdlib.h>
#include <unistd.h>

static bool page_is_zero(const uint8_t *p)
{
	const uint64_t *w = (const uint64_t *)p;
	uint64_t acc = 0;

	for (size_t i = 0; i < KVM_PAGE_SIZE / 8; i++)
		acc |= w[i];
	return acc == 0;
}

/* Defined by content, so that two machines with equal RAM agree whatever
 * their memfds hold as holes: crc32c over every non-zero page, each as its
 * index (u64) then its bytes. Holes are skipped without being read (reading
 * would allocate shmem pages), so the cost follows the populated RAM, not
 * its size: what matters inside the primary's pause. */
uint32_t repl_drill_ram_crc(struct machine *m)
{
	uint64_t end = m->cfg.mem_bytes, pos = 0;
	uint32_t crc = 0;

	while (pos < end) {
		off_t data = lseek(m->memfd, (off_t)pos, SEEK_DATA), hole;

		if (data < 0 || (uint64_t)data >= end)
			break;                  /* ENXIO: only a hole is left */
		hole = lseek(m->memfd, data, SEEK_HOLE);
		if (hole < 0 || (uint64_t)hole > end)
			hole = (off_t)end;
		for (uint64_t pg = (uint64_t)data / KVM_PAGE_SIZE;
		     pg < ((uint64_t)hole + KVM_PAGE_SIZE - 1) / KVM_PAGE_SIZE; pg++) {
			const uint8_t *p = machine_page_hva(m, pg);

			if (page_is_zero(p))
				continue;
			crc = proto_crc32c(crc, &pg, sizeof(pg));
			crc = proto_crc32c(crc, p, KVM_PAGE_SIZE);
		}
		pos = (uint64_t)hole;
	}
	return crc;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* p50, p99 and max of the pauses numbered [from, to) (counting from the
 * first), or false when the ring no longer holds them all. */
bool repl_drill_pauses_range(const struct repl_stats *st, uint64_t from, uint64_t to, uint64_t *p50,
			 uint64_t *p99, uint64_t *max)
{
	uint64_t count = to - from, v[REPL_STATS_WINDOW];

	if (to > st->npause || st->npause - from > REPL_STATS_WINDOW)
		return false;             /* *p50.. keep what they held */
	*p50 = *p99 = *max = 0;
	if (!count)
		return true;
	for (uint64_t i = 0; i < count; i++)
		v[i] = st->pause_ns[(from + i) % REPL_STATS_WINDOW];
	qsort(v, count, sizeof(v[0]), cmp_u64);
	*p50 = v[count / 2];
	*p99 = v[(count * 99) / 100 < count ? (count * 99) / 100 : count - 1];
	*max = v[count - 1];
	return true;
}
