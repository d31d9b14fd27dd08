/* Disk replication, the primary's side (replication/disk.h says how): the
 * capture of dirty blocks in the pause and their "disk" Sections. */
#include "primary/primary_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define TAG "disk"
#define BLK MACHINE_DISK_BLOCK

int repl_disk_cap_init(struct repl_disk_cap *d, struct machine *m)
{
	memset(d, 0, sizeof(*d));
	repl_disk_blocks_init(&d->blk);
	d->nblocks = machine_disk_blocks(m);
	if (!d->nblocks)
		return 0;
	d->harvest = calloc((d->nblocks + 63) / 64, 8);
	d->enc = proto_page_enc_new(0, 0);
	if (!d->harvest || !d->enc || repl_disk_blocks_reserve(&d->blk, 256) < 0) {
		repl_disk_cap_fini(d);
		return -ENOMEM;
	}
	return 0;
}

void repl_disk_cap_fini(struct repl_disk_cap *d)
{
	free(d->harvest);
	d->harvest = NULL;
	proto_page_enc_free(d->enc);
	d->enc = NULL;
	repl_disk_blocks_fini(&d->blk);
}

int repl_disk_capture(struct repl_disk_cap *d, struct machine *m)
{
	uint64_t t0 = now_ns(), words = (d->nblocks + 63) / 64;
	int r = 0;

	repl_disk_blocks_reset(&d->blk);
	if (!d->nblocks)
		return 0;
	memset(d->harvest, 0, words * 8);
	machine_disk_harvest(m, d->harvest);
	for (uint64_t w = 0; w < words && r == 0; w++)
		for (uint64_t bits = d->harvest[w]; bits && r == 0; bits &= bits - 1) {
			uint64_t k = w * 64 + (uint64_t)__builtin_ctzll(bits);
			uint8_t *slot = repl_disk_blocks_add(&d->blk, k);

			r = slot ? machine_disk_read(m, k, slot) : -ENOMEM;
		}
	if (r < 0) {
		machine_disk_requeue(m, d->harvest);
		repl_disk_blocks_reset(&d->blk);
		return r;
	}
	d->copy_ns = now_ns() - t0;
	d->captures++;
	if (d->blk.n) {
		d->epochs_with_blocks++;
		d->blocks_total += d->blk.n;
		d->copy_ns_total += d->copy_ns;
	}
	return 0;
}

void repl_disk_grow(struct repl_disk_cap *d)
{
	if (d->blk.n * 4 > d->blk.cap * 3 && repl_disk_blocks_reserve(&d->blk, d->blk.cap * 2) < 0)
		log_warn(TAG, "cannot grow the disk capture beyond %zu blocks", d->blk.cap);
}

void repl_disk_requeue(struct repl_disk_cap *d, struct machine *m)
{
	if (d->nblocks && d->blk.n)
		machine_disk_requeue(m, d->harvest);
}

/* One Section of n blocks. */
static int pack_section(struct repl_disk_cap *d, const uint64_t *blocks, const void *const *ptrs,
			size_t n, struct proto_buf *out)
{
	struct proto_buf data;
	int r;

	proto_buf_init(&data);
	r = proto_blocks_encode(d->enc, blocks, ptrs, n, &data, &d->st);
	if (r == 0)
		r = repl_section_pack(out, PROTO_SECTION_DISK, data.data, data.len);
	proto_buf_fini(&data);
	return r;
}

int repl_disk_pack(struct repl_disk_cap *d, struct proto_buf *out, uint32_t *crc)
{
	const void *ptrs[REPL_DISK_SECTION_BLOCKS];
	const struct repl_disk_blocks *b = &d->blk;
	int r;

	for (size_t i = 0; i < b->n; i += REPL_DISK_SECTION_BLOCKS) {
		size_t n = b->n - i < REPL_DISK_SECTION_BLOCKS ? b->n - i : REPL_DISK_SECTION_BLOCKS;

		for (size_t k = 0; k < n; k++) {
			ptrs[k] = b->data + (i + k) * BLK;
			*crc = proto_digest_page(*crc, b->blocks[i + k], ptrs[k]);
		}
		if ((r = pack_section(d, b->blocks + i, ptrs, n, out)) < 0)
			return r;
	}
	return 0;
}

static bool block_zero(const uint8_t *p)
{
	static const uint8_t zero[BLK];

	return !memcmp(p, zero, BLK);
}

/* The next block of the pass at or after from: one that may hold data
 * (first pass), or one set in todo (a dirty round); nblocks when none is. */
static uint64_t next_block(struct repl_disk_cap *d, struct machine *m, const uint64_t *todo,
			   uint64_t from)
{
	if (!todo)
		return machine_disk_next_data(m, from);
	while (from < d->nblocks) {
		uint64_t bits = todo[from / 64] >> (from % 64);

		if (bits)
			return from + (uint64_t)__builtin_ctzll(bits);
		from = (from / 64 + 1) * 64;
	}
	return d->nblocks;
}

int repl_disk_sync_batch(struct repl_disk_cap *d, struct machine *m, const uint64_t *todo,
			 uint64_t *cursor, struct proto_buf *out, uint64_t *sent)
{
	const void *ptrs[REPL_DISK_SECTION_BLOCKS];
	size_t n = 0;
	int r;

	repl_disk_blocks_reset(&d->blk);
	while (*cursor < d->nblocks && n < REPL_DISK_SECTION_BLOCKS) {
		uint64_t k = next_block(d, m, todo, *cursor);
		uint8_t *slot;

		if (k >= d->nblocks) {
			*cursor = d->nblocks;
			break;
		}
		*cursor = k + 1;
		if (!(slot = repl_disk_blocks_add(&d->blk, k)))
			return -ENOMEM;
		if ((r = machine_disk_read(m, k, slot)) < 0)
			return r;
		/* First pass: the standby's image reads zero there already. A
		 * dirty round sends it (ZERO, a few bytes): it may have been
		 * sent non-zero before. */
		if (!todo && block_zero(slot))
			d->blk.n--;
		else
			n++;
	}
	for (size_t i = 0; i < n; i++)   /* now: adding may have moved the data */
		ptrs[i] = d->blk.data + i * BLK;
	if (n && (r = pack_section(d, d->blk.blocks, ptrs, n, out)) < 0)
		return r;
	*sent += n;
	return *cursor < d->nblocks;
}
