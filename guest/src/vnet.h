/* A virtio-net driver for the built-in guests (virtio 1.2, 5.1, over the
 * modern PCI transport), polled: no MSI-X. Receive buffers are posted at
 * init and re-posted as frames are taken; a frame is sent in one
 * descriptor (header + frame) and the device has it before the notify
 * returns. The receive queue asks for notifications (ISR bit 0), so
 * vnet_wait() returns as soon as a frame is in; the others do not. */
#ifndef US_GUEST_VNET_H
#define US_GUEST_VNET_H

#include <stddef.h>
#include <stdint.h>

#include "vpci.h"

#define VNET_QSIZE 32
#define VNET_BUF 2048
#define VNET_MEM_BYTES (0x10000 + 2 * VNET_QSIZE * VNET_BUF)   /* rings + buffers */

struct vnet {
	struct vpci pci;
	uint64_t features;
	uint8_t mac[6];
	struct vpci_queue rx, tx, ctrl;
	uint8_t *rx_bufs, *tx_bufs, *ctrl_buf;
	uint64_t rx_frames, tx_frames;
};

/* Finds 1af4:1041 on bus 0 and brings it up with mem (VNET_MEM_BYTES,
 * identity-mapped) for its rings and buffers; 0, or < 0 (no device, the
 * device refused the features, ...). */
int vnet_init(struct vnet *n, uint8_t *mem);
/* The next received frame copied to buf (at most size bytes): its length,
 * 0 when none is waiting. */
size_t vnet_recv(struct vnet *n, void *buf, size_t size);
/* Sends one frame (at most 1514 bytes); 0, or -1 when the device dropped
 * out (needs a reset). */
int vnet_send(struct vnet *n, const void *frame, size_t len);
/* Reads (and so clears) the ISR: true when the device asked to announce
 * (VIRTIO_NET_S_ANNOUNCE set after a configuration interrupt). */
int vnet_announce_wanted(struct vnet *n);
/* Tells the device the announcement is done (control queue ANNOUNCE_ACK). */
int vnet_announce_ack(struct vnet *n);
/* Waits at most usec for a frame (or console input). */
void vnet_wait(struct vnet *n, uint32_t usec);
/* The device status byte (bit 0x40: it needs a reset). */
uint8_t vnet_status(struct vnet *n);

#endif
