/* The device bus: the ranges devices claim and the dispatch of the
 * guest's port and MMIO accesses to them (see machine/bus.h). The list of
 * devices is devices.c's. */
#include "machine/bus.h"

#include <errno.h>

int machine_bus_add(struct machine *m, enum machine_space space, uint64_t base, uint64_t len,
		    int (*io)(struct machine *m, uint64_t addr, int size, bool write, uint8_t *data))
{
	if (m->nranges >= MACHINE_MAX_RANGES)
		return -ENOSPC;
	m->ranges[m->nranges++] = (struct machine_io_range){ space, base, len, io };
	return 0;
}

int machine_bus_io(struct machine *m, enum machine_space space, uint64_t addr, int size,
		   bool write, uint8_t *data)
{
	int r = -ENOENT;

	pthread_mutex_lock(&m->lock);
	for (int i = 0; i < m->nranges && r == -ENOENT; i++) {
		const struct machine_io_range *g = &m->ranges[i];

		if (g->space == space && addr >= g->base && addr - g->base < g->len)
			r = g->io(m, addr, size, write, data);
	}
	pthread_mutex_unlock(&m->lock);
	return r;
}
