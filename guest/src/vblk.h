/* A virtio-blk driver for the built-in guests (virtio 1.2, 5.2, over the
 * modern PCI transport), polled: no MSI-X, one request at a time (header,
 * data, status: three descriptors). Transfers are in 512-byte sectors; a
 * 4 KiB block is VBLK_BLOCK_SECTORS of them. Buffers are guest-physical
 * (the built-in guests are identity-mapped), at most VBLK_MAX_BYTES a
 * request. A write is in the image once vblk_write returns 0; it is durable
 * (the host's fdatasync) once vblk_flush returns 0. */
#ifndef US_GUEST_VBLK_H
#define US_GUEST_VBLK_H

#include <stddef.h>
#include <stdint.h>

#define VBLK_QSIZE 16
#define VBLK_SECTOR 512u
#define VBLK_BLOCK_SECTORS 8u
#define VBLK_MAX_BYTES (64u << 10)
#define VBLK_MEM_BYTES 0x4000   /* rings + request header and status */

/* vblk_* results besides 0 */
#define VBLK_EIO -1       /* the device answered with an error status */
#define VBLK_ERESET -2    /* the device needs a reset (it refused the request) */
#define VBLK_ETIMEDOUT -3 /* no answer */
#define VBLK_ERANGE -4    /* past the end of the disk, or too large */

struct vblk_desc;
struct vblk_hdr;

struct vblk {
	int dev;
	uint64_t bar;
	volatile uint8_t *common, *isr, *devcfg;
	volatile uint16_t *notify;
	uint64_t features, capacity;     /* capacity in sectors */
	struct vblk_desc *desc;
	volatile uint16_t *avail;        /* flags, idx, ring[] */
	volatile uint16_t *used;         /* flags, idx, then {u32 id, u32 len}[] */
	uint16_t avail_idx, used_seen;
	struct vblk_hdr *hdr;
	volatile uint8_t *status;
	uint64_t reads, writes, flushes;
};

/* Finds 1af4:1042 on bus 0 and brings it up with mem (VBLK_MEM_BYTES,
 * identity-mapped) for its ring; 0, or -1 when there is no device, < -1
 * when it would not come up. */
int vblk_init(struct vblk *b, uint8_t *mem);
/* n sectors from sector into buf; 0 or a VBLK_E* value. */
int vblk_read(struct vblk *b, uint64_t sector, void *buf, uint32_t n);
/* n sectors from buf to sector; 0 or a VBLK_E* value. */
int vblk_write(struct vblk *b, uint64_t sector, const void *buf, uint32_t n);
/* Everything written so far made durable; 0 (also when the device has no
 * cache to flush: without VIRTIO_BLK_F_FLUSH it writes through) or a
 * VBLK_E* value. */
int vblk_flush(struct vblk *b);
/* The device status byte (bit 0x40: it needs a reset). */
uint8_t vblk_status(struct vblk *b);
/* A short name of a vblk_* result. */
const char *vblk_strerror(int r);

#endif
