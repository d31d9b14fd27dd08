/* virtio-blk (virtio 1.2, 5.2) on a raw image file: read, write, flush,
 * get-id and discard, one request queue.
 *
 * Requests are served whole under machine.lock, by the machine's I/O
 * thread (ioevent.c) while no pause is requested, or at the notify exit on
 * the vCPU thread, so a pause never finds one in flight (see
 * docs/design.md, "virtio devices"): the data is in the image (or in guest
 * RAM, for a read) and the used ring says so. The status byte is written
 * last, after the data. */
#include "machine/virtio.h"
#include "machine/machine_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define TAG "blk"

#define SECTOR 512u

#define BLK_F_SEG_MAX  (1ull << 2)
#define BLK_F_FLUSH    (1ull << 9)
#define BLK_F_DISCARD  (1ull << 13)

#define BLK_T_IN       0
#define BLK_T_OUT      1
#define BLK_T_FLUSH    4
#define BLK_T_GET_ID   8
#define BLK_T_DISCARD  11

#define BLK_S_OK       0
#define BLK_S_IOERR    1
#define BLK_S_UNSUPP   2

#define BLK_SEG_MAX          (VIRTQ_MAX_SIZE - 2)
#define BLK_MAX_DISCARD_SECTORS (1u << 22)
#define BLK_MAX_DISCARD_SEG  16u

static struct virtio_blk *to_blk(struct virtio_dev *d)
{
	return (struct virtio_blk *)d;
}

/* struct virtio_blk_config, the fields of the features offered. */
static void blk_cfg_read(struct virtio_dev *d, uint32_t off, uint8_t *data, uint32_t len)
{
	struct virtio_blk *b = to_blk(d);
	uint8_t cfg[VIRTIO_DEVCFG_BYTES] = { 0 };
	uint32_t seg_max = BLK_SEG_MAX, max_discard = BLK_MAX_DISCARD_SECTORS;
	uint32_t discard_seg = BLK_MAX_DISCARD_SEG, discard_align = 1;

	memcpy(cfg + 0, &b->capacity, 8);
	memcpy(cfg + 12, &seg_max, 4);
	memcpy(cfg + 36, &max_discard, 4);
	memcpy(cfg + 40, &discard_seg, 4);
	memcpy(cfg + 44, &discard_align, 4);
	memcpy(data, cfg + off, len);
}

/* The blocks of [pos, pos + len) of the image were written by the guest. */
static void mark_blocks(struct virtio_blk *b, uint64_t pos, uint64_t len)
{
	if (!len || !b->dirty)
		return;
	for (uint64_t k = pos / MACHINE_DISK_BLOCK;
	     k <= (pos + len - 1) / MACHINE_DISK_BLOCK && k < b->nblocks; k++)
		atomic_fetch_or_explicit(&b->dirty[k / 64], 1ull << (k % 64), memory_order_relaxed);
}

/* Moves [off, off + len) of the chain's data area (readable bytes after
 * the 16-byte header for a write, writable bytes before the status byte
 * for a read) to or from the image at pos. */
static int blk_rw(struct virtio_blk *b, const struct virtq_chain *c, bool to_disk, uint64_t pos,
		  uint64_t len)
{
	uint64_t skip = to_disk ? 16 : 0;
	int first = to_disk ? 0 : c->nread, last = to_disk ? c->nread : c->nseg;

	for (int i = first; i < last && len; i++) {
		const struct virtq_seg *s = &c->seg[i];
		uint64_t n;

		if (skip >= s->len) {
			skip -= s->len;
			continue;
		}
		n = s->len - skip < len ? s->len - skip : len;
		for (uint64_t done = 0; done < n; ) {
			ssize_t r = to_disk ? pwrite(b->fd, s->hva + skip + done, n - done,
						     (off_t)(pos + done)) :
				    pread(b->fd, s->hva + skip + done, n - done, (off_t)(pos + done));

			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				return r < 0 ? -errno : -EIO;
			done += (uint64_t)r;
		}
		if (!to_disk)
			machine_mark_dirty(b->dev.m, s->ram_off + skip, n);
		else
			mark_blocks(b, pos, n);
		pos += n;
		len -= n;
		skip = 0;
	}
	return 0;
}

static bool range_ok(const struct virtio_blk *b, uint64_t sector, uint64_t nsectors)
{
	return sector <= b->capacity && nsectors <= b->capacity - sector;
}

static uint8_t blk_discard(struct virtio_blk *b, const struct virtq_chain *c, uint64_t dlen)
{
	if (dlen % 16 || dlen / 16 > BLK_MAX_DISCARD_SEG)
		return BLK_S_IOERR;
	for (uint64_t off = 16; off < 16 + dlen; off += 16) {
		uint8_t seg[16];
		uint64_t sector;
		uint32_t n, flags;

		virtq_chain_read(b->dev.m, c, off, seg, 16);
		memcpy(&sector, seg, 8);
		memcpy(&n, seg + 8, 4);
		memcpy(&flags, seg + 12, 4);
		if (flags)
			return BLK_S_UNSUPP;   /* unmap is for write-zeroes, not offered */
		if (n > BLK_MAX_DISCARD_SECTORS || !range_ok(b, sector, n))
			return BLK_S_IOERR;
		mark_blocks(b, sector * SECTOR, (uint64_t)n * SECTOR);
		/* Advisory: a file system that cannot punch holes keeps the data. */
		if (n && fallocate(b->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				   (off_t)(sector * SECTOR), (off_t)n * SECTOR) < 0 &&
		    errno != EOPNOTSUPP)
			return BLK_S_IOERR;
	}
	return BLK_S_OK;
}

static int blk_request(struct virtio_dev *d, int q, struct virtq_chain *c, uint32_t *written)
{
	struct virtio_blk *b = to_blk(d);
	uint8_t hdr[16], status = BLK_S_OK;
	uint32_t type;
	uint64_t sector, dlen, wdata = 0;

	(void)q;
	/* A header to read and a status byte to write, or nothing can be answered. */
	if (c->read_bytes < 16 || c->write_bytes < 1 || c->write_bytes > UINT32_MAX)
		return -EBADMSG;
	virtq_chain_read(d->m, c, 0, hdr, 16);
	memcpy(&type, hdr, 4);
	memcpy(&sector, hdr + 8, 8);
	switch (type) {
	case BLK_T_IN:
		dlen = c->write_bytes - 1;
		if (dlen % SECTOR || !range_ok(b, sector, dlen / SECTOR))
			status = BLK_S_IOERR;
		else if (blk_rw(b, c, false, sector * SECTOR, dlen) < 0)
			status = BLK_S_IOERR;
		else
			wdata = dlen;
		break;
	case BLK_T_OUT:
		dlen = c->read_bytes - 16;
		if (dlen % SECTOR || !range_ok(b, sector, dlen / SECTOR) ||
		    blk_rw(b, c, true, sector * SECTOR, dlen) < 0)
			status = BLK_S_IOERR;
		break;
	case BLK_T_FLUSH:
		if (fdatasync(b->fd) < 0)
			status = BLK_S_IOERR;
		break;
	case BLK_T_GET_ID:
		wdata = c->write_bytes - 1 < sizeof(b->serial) ? c->write_bytes - 1 : sizeof(b->serial);
		virtq_chain_write(d->m, c, 0, b->serial, wdata);
		break;
	case BLK_T_DISCARD:
		status = blk_discard(b, c, c->read_bytes - 16);
		break;
	default:
		status = BLK_S_UNSUPP;
		break;
	}
	if (status != BLK_S_OK)
		log_debug(TAG, "request type %u sector %llu: status %u", type,
			  (unsigned long long)sector, status);
	/* Status last: the driver may look at nothing before it. */
	virtq_chain_write(d->m, c, c->write_bytes - 1, &status, 1);
	*written = (uint32_t)(status == BLK_S_OK ? wdata + 1 : 1);
	return 0;
}

static const struct virtio_dev_ops blk_ops = {
	.cfg_read = blk_cfg_read,
	.request = blk_request,
};

int virtio_blk_open(struct machine *m)
{
	const char *path = m->cfg.disk;
	struct virtio_blk *b;
	const char *base;
	struct stat sb;
	off_t size;
	int r;

	m->blk = NULL;
	if (!m->cfg.ndisks)
		return 0;
	if (m->cfg.ndisks != 1 || !path[0]) {
		log_error(TAG, "the VM has a virtio-blk disk: give its image with --disk");
		return -EINVAL;
	}
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->fd = open(path, O_RDWR | O_CLOEXEC);
	if (b->fd < 0) {
		r = -errno;
		log_error(TAG, "disk %s: %s", path, strerror(-r));
		goto err;
	}
	/* One writer per image: a second VM on it would corrupt it. */
	if (flock(b->fd, LOCK_EX | LOCK_NB) < 0) {
		r = -errno;
		log_error(TAG, "disk %s: in use by another process (%s)", path, strerror(-r));
		goto err_fd;
	}
	if (fstat(b->fd, &sb) < 0 || (size = lseek(b->fd, 0, SEEK_END)) < 0) {
		r = -errno;
		log_error(TAG, "disk %s: %s", path, strerror(-r));
		goto err_fd;
	}
	if ((!S_ISREG(sb.st_mode) && !S_ISBLK(sb.st_mode)) || size < (off_t)SECTOR) {
		r = -EINVAL;
		log_error(TAG, "disk %s: not a raw image of at least one 512-byte sector", path);
		goto err_fd;
	}
	b->capacity = (uint64_t)size / SECTOR;
	m->cfg.disk_bytes = (uint64_t)size;
	b->nblocks = ((uint64_t)size + MACHINE_DISK_BLOCK - 1) / MACHINE_DISK_BLOCK;
	b->dirty = calloc((b->nblocks + 63) / 64, 8);
	if (!b->dirty) {
		r = -ENOMEM;
		goto err_fd;
	}
	snprintf(b->path, sizeof(b->path), "%s", path);
	/* The serial (GET_ID, at most 20 bytes, unterminated if 20): the
	 * image's file name. */
	base = strrchr(path, '/');
	base = base ? base + 1 : path;
	memcpy(b->serial, base, strnlen(base, sizeof(b->serial)));
	b->dev.m = m;
	b->dev.st = &m->pci.blk;
	b->dev.cfg = m->pci.cfg[PCI_SLOT_BLK];
	b->dev.type = VIRTIO_TYPE_BLOCK;
	b->dev.nqueues = 1;
	b->dev.features = VIRTIO_F_VERSION_1 | BLK_F_SEG_MAX | BLK_F_FLUSH | BLK_F_DISCARD;
	b->dev.ops = &blk_ops;
	m->blk = b;
	log_info(TAG, "disk %s: %llu sectors", path, (unsigned long long)b->capacity);
	return 0;

err_fd:
	close(b->fd);
err:
	free(b);
	return r;
}

void virtio_blk_close(struct machine *m)
{
	if (!m->blk)
		return;
	close(m->blk->fd);
	free(m->blk->dirty);
	free(m->blk);
	m->blk = NULL;
}

/* ---- the disk's blocks, for disk replication ----------------------------- */

uint64_t machine_disk_blocks(const struct machine *m)
{
	return m->blk ? m->blk->nblocks : 0;
}

void machine_disk_harvest(struct machine *m, uint64_t *bitmap)
{
	struct virtio_blk *b = m->blk;

	if (!b)
		return;
	for (uint64_t w = 0; w < (b->nblocks + 63) / 64; w++)
		bitmap[w] |= atomic_exchange_explicit(&b->dirty[w], 0, memory_order_relaxed);
}

void machine_disk_requeue(struct machine *m, const uint64_t *bitmap)
{
	struct virtio_blk *b = m->blk;

	if (!b)
		return;
	for (uint64_t w = 0; w < (b->nblocks + 63) / 64; w++)
		if (bitmap[w])
			atomic_fetch_or_explicit(&b->dirty[w], bitmap[w], memory_order_relaxed);
}

/* Bytes of block k inside the image (MACHINE_DISK_BLOCK but for the last). */
static size_t block_len(const struct virtio_blk *b, uint64_t k)
{
	uint64_t bytes = b->capacity * SECTOR, off = k * MACHINE_DISK_BLOCK;

	return bytes - off < MACHINE_DISK_BLOCK ? (size_t)(bytes - off) : MACHINE_DISK_BLOCK;
}

static int block_io(struct virtio_blk *b, uint64_t k, void *buf, bool write)
{
	size_t len, done = 0;

	if (!b || k >= b->nblocks)
		return -EINVAL;
	len = block_len(b, k);
	while (done < len) {
		off_t at = (off_t)(k * MACHINE_DISK_BLOCK + done);
		ssize_t r = write ? pwrite(b->fd, (const uint8_t *)buf + done, len - done, at) :
			    pread(b->fd, (uint8_t *)buf + done, len - done, at);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EIO;
		done += (size_t)r;
	}
	if (!write && len < MACHINE_DISK_BLOCK)
		memset((uint8_t *)buf + len, 0, MACHINE_DISK_BLOCK - len);
	return 0;
}

int machine_disk_read(struct machine *m, uint64_t block, void *buf)
{
	return block_io(m->blk, block, buf, false);
}

int machine_disk_write(struct machine *m, uint64_t block, const void *buf)
{
	return block_io(m->blk, block, (void *)buf, true);
}

int machine_disk_sync(struct machine *m)
{
	if (!m->blk)
		return 0;
	return fdatasync(m->blk->fd) < 0 ? -errno : 0;
}

uint64_t machine_disk_next_data(struct machine *m, uint64_t block)
{
	struct virtio_blk *b = m->blk;
	off_t at;

	if (!b || block >= b->nblocks)
		return b ? b->nblocks : 0;
	at = lseek(b->fd, (off_t)(block * MACHINE_DISK_BLOCK), SEEK_DATA);
	if (at < 0)   /* ENXIO: no data from there on; else no SEEK_DATA here: read on */
		return errno == ENXIO ? b->nblocks : block;
	return (uint64_t)at / MACHINE_DISK_BLOCK > block ? (uint64_t)at / MACHINE_DISK_BLOCK : block;
}
