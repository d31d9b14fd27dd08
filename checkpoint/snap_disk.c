/* A snapshot's disk contents (snapshot --with-disk): every non-zero block
 * of the VM's image, captured in the same pause as the checkpoint, for
 * checkpoint/file.c to write beside it. */
#include "checkpoint/checkpoint.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kmod/log.h"

#define BLK MACHINE_DISK_BLOCK

void ckpt_disk_init(struct ckpt_disk *d)
{
	memset(d, 0, sizeof(*d));
}

void ckpt_disk_fini(struct ckpt_disk *d)
{
	free(d->blocks);
	free(d->data);
	memset(d, 0, sizeof(*d));
}

static uint8_t *disk_slot(struct ckpt_disk *d, uint64_t block)
{
	if (d->n == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 256;
		uint64_t *blocks = realloc(d->blocks, cap * sizeof(*blocks));
		uint8_t *data;

		if (!blocks)
			return NULL;
		d->blocks = blocks;
		if (!(data = realloc(d->data, cap * BLK)))
			return NULL;
		d->data = data;
		d->cap = cap;
	}
	d->blocks[d->n] = block;
	return d->data + d->n * BLK;
}

static bool all_zero(const uint8_t *p)
{
	for (size_t i = 0; i < BLK; i++)
		if (p[i])
			return false;
	return true;
}

/* Every non-zero block of m's image into d (the guest paused). */
static int disk_capture(struct machine *m, struct ckpt_disk *d)
{
	uint64_t nblocks = machine_disk_blocks(m);
	int r;

	d->n = 0;
	d->disk_bytes = m->cfg.disk_bytes;
	for (uint64_t k = machine_disk_next_data(m, 0); k < nblocks;
	     k = machine_disk_next_data(m, k + 1)) {
		uint8_t *slot = disk_slot(d, k);

		if (!slot)
			return -ENOMEM;
		if ((r = machine_disk_read(m, k, slot)) < 0)
			return r;
		if (!all_zero(slot))
			d->n++;
	}
	return 0;
}

int ckpt_take_disk(struct machine *m, struct ckpt *c, struct ckpt_disk *d)
{
	uint64_t t0, t1;
	int r;

	if (!machine_disk_blocks(m))
		return -ENODEV;
	if ((r = ckpt_reserve(c, m->ram_pages)) < 0)
		return r;
	t0 = now_ns();
	machine_pause(m);
	t1 = now_ns();
	r = ckpt_capture(m, c, true);
	if (r == 0 && (r = disk_capture(m, d)) < 0)
		ckpt_requeue(m, c);
	machine_resume(m);
	c->stats.stop_ns = t1 - t0;
	c->stats.pause_ns = now_ns() - t0;
	return r;
}
