/* The virtio-pci modern transport (virtio 1.2, 4.1) as the built-in guests
 * use it: the function found by id on bus 0 through ports 0xCF8/0xCFC, its
 * BAR as reset placed it, its common/notify/ISR/device configuration
 * capabilities mapped (the guests are identity-mapped), polled split queues
 * (no MSI-X vector unless asked for). One queue's rings take 12 KiB: the
 * descriptor table at 0, the available ring at 0x1000, the used ring at
 * 0x2000. */
#ifndef US_GUEST_VPCI_H
#define US_GUEST_VPCI_H

#include <stddef.h>
#include <stdint.h>

#define VPCI_QUEUE_BYTES 0x3000

#define VPCI_S_ACK 1
#define VPCI_S_DRIVER 2
#define VPCI_S_DRIVER_OK 4
#define VPCI_S_FEATURES_OK 8
#define VPCI_S_NEEDS_RESET 0x40

#define VPCI_F_VERSION_1 (1ull << 32)

#define VPCI_DESC_NEXT 1
#define VPCI_DESC_WRITE 2   /* the device writes the buffer */

struct vpci_desc {
	uint64_t addr;
	uint32_t len;
	uint16_t flags, next;
};

struct vpci {
	int dev;                         /* device number on bus 0 */
	uint64_t bar;
	volatile uint8_t *common, *isr, *devcfg, *notify_base;
	uint32_t notify_mult;
};

struct vpci_queue {
	struct vpci_desc *desc;
	volatile uint16_t *avail;        /* flags, idx, ring[] */
	volatile uint16_t *used;         /* flags, idx, then {u32 id, u32 len}[] */
	volatile uint16_t *notify;
	uint16_t index, size, avail_idx, used_seen;
};

/* PCI configuration space of device dev on bus 0 (off any byte offset for
 * reads: the value is shifted down to it). */
uint32_t vpci_cfg_read(int dev, int off);
void vpci_cfg_write(int dev, int off, uint32_t v);
/* The device number of vendor 1af4, device device_id on bus 0, or -1. */
int vpci_find(uint16_t device_id);
/* Finds the function, turns on memory decoding and bus master, maps its
 * capabilities; 0, -1 when there is no such device, -2 when a capability
 * is missing. */
int vpci_init(struct vpci *t, uint16_t device_id);
/* Resets the device and acknowledges it (ACK, DRIVER): the features it
 * offers. */
uint64_t vpci_reset(struct vpci *t);
/* Writes the driver features and sets FEATURES_OK; 0, or -1 when the device
 * did not keep it. */
int vpci_set_features(struct vpci *t, uint64_t features);
/* Queue index of size entries with its rings in mem (VPCI_QUEUE_BYTES,
 * zeroed here); polled (no interrupts asked for) when no_intr. 0, or -1 when
 * the device's queue is smaller. */
int vpci_queue_setup(struct vpci *t, struct vpci_queue *q, uint16_t index, uint16_t size,
		     uint8_t *mem, int no_intr);
/* The device may run (DRIVER_OK). */
void vpci_driver_ok(struct vpci *t);
/* The device status byte (VPCI_S_NEEDS_RESET: it needs a reset). */
uint8_t vpci_status(struct vpci *t);
/* Reads (and so clears) the ISR: bit 0 a queue, bit 1 the configuration. */
uint8_t vpci_isr(struct vpci *t);
uint8_t vpci_devcfg_read8(struct vpci *t, int off);
uint16_t vpci_devcfg_read16(struct vpci *t, int off);
uint32_t vpci_devcfg_read32(struct vpci *t, int off);
/* Sets queue index's MSI-X vector (0xffff: none); 0, or -1 when the device
 * refused it. */
int vpci_queue_set_vector(struct vpci *t, uint16_t index, uint16_t vector);

/* Asks for interrupts on the queue's used buffers, or not. */
void vpci_queue_interrupts(struct vpci_queue *q, int on);
/* Makes the chain from descriptor head available (no notify yet). */
void vpci_queue_push(struct vpci_queue *q, uint16_t head);
/* Tells the device the queue has new buffers. */
void vpci_queue_notify(struct vpci_queue *q);
/* The next used element into id and len: 1, or 0 when there is none. */
int vpci_queue_take(struct vpci_queue *q, uint32_t *id, uint32_t *len);
/* Every used element so far taken; 0 when the device used all that was made
 * available, else -1. */
int vpci_queue_drain(struct vpci_queue *q);
/* True when a used element is waiting. */
int vpci_queue_pending(const struct vpci_queue *q);

#endif
