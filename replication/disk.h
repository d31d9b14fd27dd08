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

/* The primary's side: the capture of each epoch's dirty blocks. */
struct repl_disk_cap {
	uint64_t nblocks;          /* 0: the machine has no disk, all of this is a no-op */
	uint64_t *harvest;         /* the last capture's dirty blocks, for requeue */
	struct repl_disk_blocks blk;
	struct proto_page_enc *enc;   /* ZERO / RAW / LZ4, no XOR cache */
	struct proto_page_stats st;   /* what the sections held */
	uint64_t copy_ns;          /* the last capture's harvest + reads */
	uint64_t epochs_with_blocks, blocks_total, copy_ns_total, captures;
	uint64_t sync_blocks;      /* sent by the syncs before the first checkpoint */
};

int repl_disk_cap_init(struct repl_disk_cap *d, struct machine *m) US_MUST_CHECK;
void repl_disk_cap_fini(struct repl_disk_cap *d);
/* In the pause: harvests the dirty blocks and reads each into d->blk. */
int repl_disk_capture(struct repl_disk_cap *d, struct machine *m) US_MUST_CHECK;
/* With the guest running: more room when the last capture came near the
 * buffer's size, so that no later pause has to grow it. */
void repl_disk_grow(struct repl_disk_cap *d);
/* The capture did not reach the link: its blocks are dirty again. */
void repl_disk_requeue(struct repl_disk_cap *d, struct machine *m);
/* Appends d->blk as "disk" Sections to out; *crc accumulates the disk
 * digest (proto_digest_page over block number and data). */
int repl_disk_pack(struct repl_disk_cap *d, struct proto_buf *out, uint32_t *crc) US_MUST_CHECK;
/* Initial sync: one "disk" Section (appended to out) of up to
 * REPL_DISK_SECTION_BLOCKS blocks from *cursor on, and moves *cursor past
 * them. todo NULL: the first pass (holes skipped, blocks that read zero not
 * sent); else a dirty round: the blocks set in todo, zero or not. *sent
 * counts the blocks sent. 1: more may follow; 0: the pass is done. */
int repl_disk_sync_batch(struct repl_disk_cap *d, struct machine *m, const uint64_t *todo,
			 uint64_t *cursor, struct proto_buf *out, uint64_t *sent) US_MUST_CHECK;

/* The secondary's side. Decodes a "disk" Section into b (checked whole
 * first: a bad one adds nothing), the digest into *crc. -EBADMSG for a bad
 * section or more blocks than the image has. */
int repl_disk_stage(struct repl_disk_blocks *b, uint64_t nblocks, const void *data, size_t len,
		    uint32_t *crc) US_MUST_CHECK;
/* Writes b's blocks to m's image; durable (fdatasync) before returning if sync. */
int repl_disk_apply(struct machine *m, const struct repl_disk_blocks *b, bool sync) US_MUST_CHECK;

/* A standby's image at path for a disk of bytes bytes: a regular file,
 * writable, of that size or empty (then sized). Its content is dropped (it
 * reads zero): the initial sync sends only blocks that are not. err says
 * why not (-EINVAL: wrong size or kind; else -errno). */
int repl_disk_prepare(const char *path, uint64_t bytes, char *err, size_t errlen) US_MUST_CHECK;

#endif
