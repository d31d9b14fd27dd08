/* Disk replication, the secondary's side (replication/disk.h says how): an
 * epoch's "disk" Sections staged, then written to the standby's image. */
#include "secondary/secondary_int.h"

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
