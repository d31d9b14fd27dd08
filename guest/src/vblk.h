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

#include "vpci.h"

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

/* optional features a caller may ask for besides VERSION_1 and FLUSH */
#define VBLK_F_DISCARD (1ull << 13)

/* request types (virtio 1.2, 5.2.6) */
#define VBLK_T_IN 0
#define VBLK_T_OUT 1
#define VBLK_T_FLUSH 4
#define VBLK_T_GET_ID 8
#define VBLK_T_DISCARD 11

struct vblk_hdr {
	uint32_t type, reserved;
	uint64_t sector;
};

struct vblk {
	struct vpci pci;
	struct vpci_queue q;
	uint64_t features, capacity;     /* capacity in sectors */
	uint32_t timeout_spins;          /* 100 us waits for an answer */
	struct vblk_hdr *hdr;
	volatile uint8_t *status;        /* the last request's status byte */
	uint64_t reads, writes, flushes;
};

/* Finds 1af4:1042 on bus 0 and brings it up with mem (VBLK_MEM_BYTES,
 * identity-mapped) for its ring, asking for VERSION_1, FLUSH and the
 * optional features (VBLK_F_*) the device offers; 0, or -1 when there is no
 * device, -2 when its virtio capabilities are missing, < -2 when it would
 * not come up. */
int vblk_init(struct vblk *b, uint8_t *mem, uint64_t optional);
/* One request of type (VBLK_T_*) on len bytes at buf (none when len is 0;
 * the device writes them when dev_writes), unchecked, waited for; 0 or a
 * VBLK_E* value (VBLK_EIO: the status byte is in *b->status). */
int vblk_request(struct vblk *b, uint32_t type, uint64_t sector, void *buf, uint32_t len,
		 int dev_writes);
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
