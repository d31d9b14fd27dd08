/* Disk replication: the blocks of the virtio-blk image that the guest wrote
 * in epoch N travel with checkpoint N ("disk" Sections, proto.h) and reach
 * the secondary's image only when it commits N (docs/design.md, "Disk
 * replication").
 *
 * Primary: in the pause, the dirty-block bitmap is harvested and the dirty
 * blocks' current contents are read from the image into the capture
 * (coalesced: a block written many times in the epoch travels once).
 * Secondary: an epoch's blocks are staged with the rest of it, counted and
 * digested, and written to the image after the epoch's checkpoint applied;
 * with --disk-sync ack they are made durable (fdatasync) before the ACK.
 * Initial sync: every block of the image that may hold data (holes and
 * blocks that read zero skipped) goes straight to the standby's image,
 * then rounds of the blocks the guest wrote meanwhile, until few are left:
 * those are dirty again for the first checkpoint. */
#ifndef US_REPL_DISK_H
#define US_REPL_DISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "machine/machine.h"
#include "proto/proto.h"

/* Blocks per "disk" Section: 1 MiB of raw blocks, under any peer's frame limit. */
#define REPL_DISK_SECTION_BLOCKS 256

/* The blocks of one epoch, in the order added (block order on the primary). */
struct repl_disk_blocks {
	size_t n, cap;
	uint64_t *blocks;
	uint8_t *data;             /* n * MACHINE_DISK_BLOCK */
};

void repl_disk_blocks_init(struct repl_disk_blocks *b);
void repl_disk_blocks_fini(struct repl_disk_blocks *b);
static inline void repl_disk_blocks_reset(struct repl_disk_blocks *b) { b->n = 0; }
/* Room for n blocks (allocated and touched now, not in a pause). */
int repl_disk_blocks_reserve(struct repl_disk_blocks *b, size_t n) US_MUST_CHECK;
/* Appends a block; the copy goes to the returned slot (NULL: no memory). */
uint8_t *repl_disk_blocks_add(struct repl_disk_blocks *b, uint64_t block);

/* The primary's side: primary/primary_int.h (struct repl_disk_cap); the
 * secondary's: secondary/secondary_int.h. */

#endif
