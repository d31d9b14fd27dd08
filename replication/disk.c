/* Disk replication (disk.h): the capture of dirty blocks in the pause, their
 * Sections on the wire, their staging and application on the secondary. */
#include "replication/disk.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "replication/replication.h"

#define TAG "disk"
#define BLK MACHINE_DISK_BLOCK

void repl_disk_blocks_init(struct repl_disk_blocks *b)
{
	memset(b, 0, sizeof(*b));
}

void repl_disk_blocks_fini(struct repl_disk_blocks *b)
{
	free(b->blocks);
	free(b->data);
	memset(b, 0, sizeof(*b));
}

/* Room for n blocks (allocated and touched now, not in a pause). */
static int repl_disk_blocks_reserve(struct repl_disk_blocks *b, size_t n)
{
	uint64_t *blocks;
	uint8_t *data;

	if (n <= b->cap)
		return 0;
	blocks = realloc(b->blocks, n * sizeof(*blocks));
	if (!blocks)
		return -ENOMEM;
	b->blocks = blocks;
	data = realloc(b->data, n * BLK);
	if (!data)
		return -ENOMEM;
	/* Touched now: the first copy into it must not fault in a pause. */
	memset(data + b->cap * BLK, 0, (n - b->cap) * BLK);
	b->data = data;
	b->cap = n;
	return 0;
}

/* Appends a block; the copy goes to the returned slot (NULL: no memory). */
static uint8_t *repl_disk_blocks_add(struct repl_disk_blocks *b, uint64_t block)
{
	if (b->n == b->cap && repl_disk_blocks_reserve(b, b->cap ? b->cap * 2 : 64) < 0)
		return NULL;
	b->blocks[b->n] = block;
	return b->data + b->n++ * BLK;
}

/* ---- primary ----------------------------------------------------------------- */

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

/* ---- secondary --------------------------------------------------------------- */

struct stage_ctx {
	struct repl_disk_blocks *b;
	uint32_t crc;
};

static const void *no_base(void *ctx, uint64_t block)
{
	(void)ctx;
	(void)block;
	return NULL;
}

static int stage_block(void *ctx, uint64_t block, const void *data)
{
	struct stage_ctx *c = ctx;
	uint8_t *slot = repl_disk_blocks_add(c->b, block);

	if (!slot)
		return -ENOMEM;
	memcpy(slot, data, BLK);
	c->crc = proto_digest_page(c->crc, block, data);
	return 0;
}

int repl_disk_stage(struct repl_disk_blocks *b, uint64_t nblocks, const void *data, size_t len,
		    uint32_t *crc)
{
	struct proto_page_sink sink = { .base = no_base, .page = stage_block };
	struct stage_ctx c = { .b = b, .crc = *crc };
	size_t before = b->n, count = 0;
	int r;

	if (!nblocks)
		return -EBADMSG;             /* blocks for a machine without a disk */
	r = proto_pages_decode(data, len, nblocks, &sink, &c, &count);
	/* An epoch names every block once at most. */
	if (r == 0 && b->n > nblocks)
		r = -EBADMSG;
	if (r < 0) {
		b->n = before;
		return r == -ENOMEM ? r : -EBADMSG;
	}
	*crc = c.crc;
	return 0;
}

int repl_disk_apply(struct machine *m, const struct repl_disk_blocks *b, bool sync)
{
	int r;

	for (size_t i = 0; i < b->n; i++)
		if ((r = machine_disk_write(m, b->blocks[i], b->data + i * BLK)) < 0) {
			log_error(TAG, "writing block %llu to the image: %s",
				  (unsigned long long)b->blocks[i], strerror(-r));
			return r;
		}
	if (sync && (r = machine_disk_sync(m)) < 0) {
		log_error(TAG, "fdatasync of the image: %s", strerror(-r));
		return r;
	}
	return 0;
}

int repl_disk_prepare(const char *path, uint64_t bytes, char *err, size_t errlen)
{
	struct stat sb;
	int fd, r = 0;

	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		snprintf(err, errlen, "disk %s: %s", path, strerror(-r));
		return r;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		r = -errno;
		snprintf(err, errlen, "disk %s: in use by another process (%s)", path, strerror(-r));
	} else if (fstat(fd, &sb) < 0) {
		r = -errno;
		snprintf(err, errlen, "disk %s: %s", path, strerror(-r));
	} else if (!S_ISREG(sb.st_mode)) {
		r = -EINVAL;
		snprintf(err, errlen, "disk %s: a standby's image must be a regular file", path);
	} else if (sb.st_size && (uint64_t)sb.st_size != bytes) {
		r = -EINVAL;
		snprintf(err, errlen, "disk size differs: the primary's image is %llu bytes, this "
			 "secondary's %s is %llu bytes (give an image of that size, or an empty file)",
			 (unsigned long long)bytes, path, (unsigned long long)sb.st_size);
	} else if (ftruncate(fd, 0) < 0 || ftruncate(fd, (off_t)bytes) < 0) {
		r = -errno;
		snprintf(err, errlen, "disk %s: cannot size it to %llu bytes: %s", path,
			 (unsigned long long)bytes, strerror(-r));
	}
	close(fd);
	return r;
}
