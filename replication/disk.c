/* Disk replication (disk.h): the blocks of an epoch, which the primary
 * captures into (primary/disk.c) and the secondary stages into
 * (secondary/disk.c). */
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

int repl_disk_blocks_reserve(struct repl_disk_blocks *b, size_t n)
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

uint8_t *repl_disk_blocks_add(struct repl_disk_blocks *b, uint64_t block)
{
	if (b->n == b->cap && repl_disk_blocks_reserve(b, b->cap ? b->cap * 2 : 64) < 0)
		return NULL;
	b->blocks[b->n] = block;
	return b->data + b->n++ * BLK;
}
