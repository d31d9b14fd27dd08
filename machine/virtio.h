/* The virtio-pci transport (virtio_pci.c) and the devices behind it
 * (virtio_blk.c, virtio_net.c): their state, as the tests see it; their
 * functions machine/ alone calls are in machine_int.h.
 *
 * Layout of a virtio function (virtio 1.2, 4.1 "Virtio Over PCI Bus"): one
 * 64-bit memory BAR (BAR0/BAR1) of VIRTIO_BAR_BYTES holding, at the offsets
 * below, the common configuration, the ISR byte, the device configuration,
 * the notification area and the MSI-X table and pending bit array; the
 * capabilities in PCI config space point into it. All state is in
 * struct virtio_state (checkpointed); what is here besides is derived from
 * the configuration (the disk's size) or is scratch. */
#ifndef US_MACHINE_VIRTIO_H
#define US_MACHINE_VIRTIO_H

#include "kmod/le.h"
#include "machine/devices.h"

#define VIRTIO_PCI_VENDOR     0x1af4
#define VIRTIO_PCI_DEVICE_BASE 0x1040   /* + virtio device type */
#define VIRTIO_TYPE_NET       1
#define VIRTIO_TYPE_BLOCK     2

#define VIRTIO_BAR_BYTES      0x8000u
#define VIRTIO_COMMON_OFF     0x0000u
#define VIRTIO_COMMON_BYTES   0x38u
#define VIRTIO_ISR_OFF        0x1000u
#define VIRTIO_DEVCFG_OFF     0x2000u
#define VIRTIO_DEVCFG_BYTES   0x40u
#define VIRTIO_NOTIFY_OFF     0x3000u
#define VIRTIO_NOTIFY_MULT    4u
#define VIRTIO_MSIX_TABLE_OFF 0x4000u
#define VIRTIO_MSIX_PBA_OFF   0x5000u

/* Capabilities in config space (pci.c lays out the header, these follow). */
#define VIRTIO_CAP_COMMON     0x40
#define VIRTIO_CAP_NOTIFY     0x50
#define VIRTIO_CAP_ISR        0x64
#define VIRTIO_CAP_DEVICE     0x74
#define VIRTIO_CAP_PCI_CFG    0x84    /* 20 bytes: window into the BAR */
#define VIRTIO_CAP_MSIX       0x98
#define VIRTIO_PCI_CFG_DATA   (VIRTIO_CAP_PCI_CFG + 16)

/* Device status bits (2.1) and feature bits used here. */
#define VIRTIO_S_ACKNOWLEDGE  0x01
#define VIRTIO_S_DRIVER       0x02
#define VIRTIO_S_DRIVER_OK    0x04
#define VIRTIO_S_FEATURES_OK  0x08
#define VIRTIO_S_NEEDS_RESET  0x40
#define VIRTIO_S_FAILED       0x80
#define VIRTIO_F_VERSION_1    (1ull << 32)
#define VIRTIO_NO_VECTOR      0xffff

#define VIRTQ_MAX_SIZE        VIRTIO_QUEUE_MAX
#define VIRTQ_DESC_F_NEXT     1
#define VIRTQ_DESC_F_WRITE    2
#define VIRTQ_DESC_F_INDIRECT 4
#define VIRTQ_AVAIL_F_NO_INTERRUPT 1

/* One request: its descriptors, device-readable ones first. */
struct virtq_seg {
	uint8_t *hva;
	uint64_t ram_off;   /* offset in guest RAM (for the dirty log) */
	uint32_t len;
	bool write;
};

struct virtq_chain {
	uint16_t head;
	uint16_t nseg;
	uint16_t nread;     /* segments [0, nread) are readable, the rest writable */
	uint64_t read_bytes, write_bytes;
	struct virtq_seg seg[VIRTQ_MAX_SIZE];
};

struct virtio_dev;

struct virtio_dev_ops {
	/* Reads len bytes of the device configuration at off (< VIRTIO_DEVCFG_BYTES). */
	void (*cfg_read)(struct virtio_dev *d, uint32_t off, uint8_t *data, uint32_t len);
	/* Serves one request of queue q; *written: bytes it wrote into the
	 * writable part. -EBADMSG: the request cannot even be answered (the
	 * device then needs a reset). */
	int (*request)(struct virtio_dev *d, int q, struct virtq_chain *c, uint32_t *written);
};

struct virtio_dev {
	struct machine *m;
	struct virtio_state *st;   /* in m->pci */
	uint8_t *cfg;              /* its PCI config space, in m->pci */
	uint16_t type;
	uint16_t nqueues;
	uint64_t features;         /* offered */
	const struct virtio_dev_ops *ops;
	uint32_t passive_queues;   /* queues the device fills on its own (not at a kick) */
	struct virtq_chain chain;  /* scratch for the request being served */
	uint64_t requests;         /* served since the machine was built */
	/* Queues notified (by an exit) while post-copy pages were missing:
	 * left to the I/O thread (ioevent.c), which serves them once the last
	 * page is in; and how many such notifies since the machine was built. */
	uint32_t held;
	uint64_t held_notifies;
};

/* The runtime part of the disk. */
struct virtio_blk {
	struct virtio_dev dev;
	int fd;
	uint64_t capacity;         /* 512-byte sectors */
	uint64_t nblocks;          /* MACHINE_DISK_BLOCK blocks (the last may be partial) */
	_Atomic uint64_t *dirty;   /* blocks written by the guest since the last harvest */
	char serial[20];
	char path[256];
};

/* The runtime part of the NIC (virtio_net.c). */
#define VNET_HDR_BYTES 12          /* struct virtio_net_hdr with num_buffers (1.x) */
#define VNET_FRAME_MAX 1514        /* no GSO: an Ethernet frame without FCS */
struct virtio_net {
	struct virtio_dev dev;
	uint8_t mac[6];
	uint64_t rx_frames, rx_dropped, tx_frames, tx_dropped;
	uint8_t frame[VNET_HDR_BYTES + 65536];   /* scratch for the frame being sent */
};
/* The ANNOUNCE request in virtio_state.dev_flags of the NIC. */
#define VNET_FLAG_ANNOUNCE 1u




#endif
