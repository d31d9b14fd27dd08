/* virtio-net driver of the built-in guests (see vnet.h). */
#include "vnet.h"

#include "glib.h"

#define F_MAC (1ull << 5)
#define F_STATUS (1ull << 16)
#define F_CTRL_VQ (1ull << 17)
#define F_GUEST_ANNOUNCE (1ull << 21)

#define HDR 12

static void rx_post(struct vnet *n, uint16_t id)
{
	n->rx.desc[id] = (struct vpci_desc){ (uint64_t)(n->rx_bufs + (size_t)id * VNET_BUF), VNET_BUF,
					     VPCI_DESC_WRITE, 0 };
	vpci_queue_push(&n->rx, id);
}

int vnet_init(struct vnet *n, uint8_t *mem)
{
	uint64_t want;
	int r;

	memset(n, 0, sizeof(*n));
	if ((r = vpci_init(&n->pci, 0x1041)) < 0)
		return r;
	want = vpci_reset(&n->pci) &
	       (VPCI_F_VERSION_1 | F_MAC | F_STATUS | F_CTRL_VQ | F_GUEST_ANNOUNCE);
	if (!(want & VPCI_F_VERSION_1) || !(want & F_MAC))
		return -3;
	if (!(want & F_CTRL_VQ))
		want &= ~F_GUEST_ANNOUNCE;    /* it needs the control queue */
	if (vpci_set_features(&n->pci, want) < 0)
		return -4;
	n->features = want;
	n->rx_bufs = mem + 0x10000;
	n->tx_bufs = mem + 0x10000 + VNET_QSIZE * VNET_BUF;
	n->ctrl_buf = mem + 0xf000;
	/* the receive queue asks for interrupts: vnet_wait() wakes on a frame */
	if (vpci_queue_setup(&n->pci, &n->rx, 0, VNET_QSIZE, mem, 0) < 0 ||
	    vpci_queue_setup(&n->pci, &n->tx, 1, VNET_QSIZE, mem + 0x3000, 1) < 0)
		return -5;
	if ((want & F_CTRL_VQ) && vpci_queue_setup(&n->pci, &n->ctrl, 2, VNET_QSIZE, mem + 0x6000, 1) < 0)
		return -5;
	for (uint16_t i = 0; i < VNET_QSIZE; i++)
		rx_post(n, i);
	for (int i = 0; i < 6; i++)
		n->mac[i] = vpci_devcfg_read8(&n->pci, i);
	vpci_driver_ok(&n->pci);
	vpci_queue_notify(&n->rx);
	return 0;
}

size_t vnet_recv(struct vnet *n, void *buf, size_t size)
{
	uint32_t id, len;
	size_t flen;

	if (!vpci_queue_take(&n->rx, &id, &len) || id >= VNET_QSIZE)
		return 0;
	flen = len > HDR ? len - HDR : 0;
	if (flen > size)
		flen = size;
	memcpy(buf, n->rx_bufs + (size_t)id * VNET_BUF + HDR, flen);
	rx_post(n, (uint16_t)id);
	vpci_queue_notify(&n->rx);
	n->rx_frames++;
	return flen;
}

/* Until the device used every buffer made available on q: 0, or -1 after
 * about a second (no device answers). */
static int drain_wait(struct vpci_queue *q)
{
	for (uint32_t spin = 0; vpci_queue_drain(q) < 0; spin++) {
		if (spin > 10000)
			return -1;
		guest_idle(100);
	}
	return 0;
}

int vnet_send(struct vnet *n, const void *frame, size_t len)
{
	struct vpci_queue *q = &n->tx;
	uint16_t id = q->avail_idx % VNET_QSIZE;
	uint8_t *b = n->tx_bufs + (size_t)id * VNET_BUF;

	if (len > VNET_BUF - HDR)
		return -1;
	memset(b, 0, HDR);
	memcpy(b + HDR, frame, len);
	q->desc[id] = (struct vpci_desc){ (uint64_t)b, (uint32_t)(HDR + len), 0, 0 };
	vpci_queue_push(q, id);
	vpci_queue_notify(q);
	/* Served at the notify's exit, or soon after by the VMM's I/O thread
	 * (an ioeventfd): the buffer is reused only once the device is done. */
	if (drain_wait(q) < 0)
		return -1;
	n->tx_frames++;
	return 0;
}

int vnet_announce_wanted(struct vnet *n)
{
	uint8_t isr = vpci_isr(&n->pci);

	if (!(isr & 2) || !(n->features & F_GUEST_ANNOUNCE))
		return 0;
	return (vpci_devcfg_read16(&n->pci, 6) & 2) != 0;
}

int vnet_announce_ack(struct vnet *n)
{
	struct vpci_queue *q = &n->ctrl;
	uint8_t *b = n->ctrl_buf;

	if (!(n->features & F_CTRL_VQ))
		return -1;
	b[0] = 3;          /* VIRTIO_NET_CTRL_ANNOUNCE */
	b[1] = 0;          /* VIRTIO_NET_CTRL_ANNOUNCE_ACK */
	b[16] = 0xff;
	q->desc[0] = (struct vpci_desc){ (uint64_t)b, 2, VPCI_DESC_NEXT, 1 };
	q->desc[1] = (struct vpci_desc){ (uint64_t)(b + 16), 1, VPCI_DESC_WRITE, 0 };
	vpci_queue_push(q, 0);
	vpci_queue_notify(q);
	if (drain_wait(q) < 0)
		return -1;
	return b[16] == 0 ? 0 : -1;
}

void vnet_wait(struct vnet *n, uint32_t usec)
{
	if (vpci_queue_pending(&n->rx))
		return;
	guest_idle(usec);
}

uint8_t vnet_status(struct vnet *n)
{
	return vpci_status(&n->pci);
}
