/* virtio-net driver of the built-in guests (see vnet.h). */
#include "vnet.h"

#include "glib.h"

#define PCI_ADDR 0xcf8
#define PCI_DATA 0xcfc

#define S_ACK 1
#define S_DRIVER 2
#define S_DRIVER_OK 4
#define S_FEATURES_OK 8

#define F_MAC (1ull << 5)
#define F_STATUS (1ull << 16)
#define F_CTRL_VQ (1ull << 17)
#define F_GUEST_ANNOUNCE (1ull << 21)
#define F_VERSION_1 (1ull << 32)

#define HDR 12

struct vnet_desc {
	uint64_t addr;
	uint32_t len;
	uint16_t flags, next;
};

#define MMIO8(p, off) (*(volatile uint8_t *)((p) + (off)))
#define MMIO16(p, off) (*(volatile uint16_t *)((p) + (off)))
#define MMIO32(p, off) (*(volatile uint32_t *)((p) + (off)))

static inline uint32_t inl(uint16_t port)
{
	uint32_t v;

	__asm__ volatile("inl %1, %0" : "=a"(v) : "Nd"(port));
	return v;
}

static void barrier(void)
{
	__asm__ volatile("mfence" ::: "memory");
}

static uint32_t cfg_read(int dev, int off)
{
	outl(PCI_ADDR, 0x80000000u | (uint32_t)dev << 11 | (uint32_t)(off & 0xfc));
	return inl(PCI_DATA) >> (8 * (off & 3));
}

static void cfg_write(int dev, int off, uint32_t v)
{
	outl(PCI_ADDR, 0x80000000u | (uint32_t)dev << 11 | (uint32_t)(off & 0xfc));
	outl(PCI_DATA, v);
}

static int pci_setup(struct vnet *n)
{
	int ptr, k = 0;
	uint32_t cmd;

	for (n->dev = 0; n->dev < 32; n->dev++)
		if (cfg_read(n->dev, 0) == 0x10411af4u)
			break;
	if (n->dev == 32)
		return -1;
	/* BAR0/BAR1 as reset placed them; memory decoding and bus master on. */
	n->bar = ((uint64_t)cfg_read(n->dev, 0x14) << 32) | (cfg_read(n->dev, 0x10) & ~0xfu);
	cmd = cfg_read(n->dev, 4) & 0xffff;
	cfg_write(n->dev, 4, cmd | 2u | 4u);
	ptr = (int)(cfg_read(n->dev, 0x34) & 0xfc);
	while (ptr && k++ < 48) {
		uint32_t head = cfg_read(n->dev, ptr);

		if ((head & 0xff) == 0x09 && (cfg_read(n->dev, ptr + 4) & 0xff) == 0) {
			volatile uint8_t *at = (volatile uint8_t *)(n->bar + cfg_read(n->dev, ptr + 8));

			switch ((head >> 24) & 0xff) {
			case 1: n->common = at; break;
			case 2: n->notify_base = at; n->notify_mult = cfg_read(n->dev, ptr + 16); break;
			case 3: n->isr = at; break;
			case 4: n->devcfg = at; break;
			default: break;
			}
		}
		ptr = (int)((head >> 8) & 0xfc);
	}
	return n->common && n->notify_base && n->isr && n->devcfg ? 0 : -2;
}

/* Queue qi of size VNET_QSIZE in 12 KiB at mem; no_intr: the driver polls it. */
static int queue_setup(struct vnet *n, struct vnet_q *q, int qi, uint8_t *mem, uint8_t *bufs,
		       int no_intr)
{
	volatile uint8_t *c = n->common;

	memset(mem, 0, 0x3000);
	q->desc = (struct vnet_desc *)mem;
	q->avail = (volatile uint16_t *)(mem + 0x1000);
	q->used = (volatile uint16_t *)(mem + 0x2000);
	q->bufs = bufs;
	q->avail_idx = 0;
	q->used_seen = 0;
	q->avail[0] = (uint16_t)(no_intr ? 1 : 0);
	MMIO16(c, 0x16) = (uint16_t)qi;
	if (MMIO16(c, 0x18) < VNET_QSIZE)
		return -1;
	MMIO16(c, 0x18) = VNET_QSIZE;
	MMIO16(c, 0x1a) = 0xffff;
	MMIO32(c, 0x20) = (uint32_t)(uint64_t)q->desc;
	MMIO32(c, 0x24) = 0;
	MMIO32(c, 0x28) = (uint32_t)(uint64_t)q->avail;
	MMIO32(c, 0x2c) = 0;
	MMIO32(c, 0x30) = (uint32_t)(uint64_t)q->used;
	MMIO32(c, 0x34) = 0;
	q->notify = (volatile uint16_t *)(n->notify_base + MMIO16(c, 0x1e) * n->notify_mult);
	MMIO16(c, 0x1c) = 1;
	return 0;
}

static void rx_post(struct vnet_q *q, uint16_t id)
{
	q->desc[id] = (struct vnet_desc){ (uint64_t)(q->bufs + (size_t)id * VNET_BUF), VNET_BUF, 2, 0 };
	q->avail[2 + q->avail_idx % VNET_QSIZE] = id;
	barrier();
	q->avail[1] = ++q->avail_idx;
}

int vnet_init(struct vnet *n, uint8_t *mem)
{
	volatile uint8_t *c;
	uint64_t offered, want;
	int r;

	memset(n, 0, sizeof(*n));
	if ((r = pci_setup(n)) < 0)
		return r;
	c = n->common;
	MMIO8(c, 0x14) = 0;
	while (MMIO8(c, 0x14) != 0)
		;
	MMIO8(c, 0x14) = S_ACK;
	MMIO8(c, 0x14) = S_ACK | S_DRIVER;
	MMIO32(c, 0x00) = 0;
	offered = MMIO32(c, 0x04);
	MMIO32(c, 0x00) = 1;
	offered |= (uint64_t)MMIO32(c, 0x04) << 32;
	want = offered & (F_VERSION_1 | F_MAC | F_STATUS | F_CTRL_VQ | F_GUEST_ANNOUNCE);
	if (!(want & F_VERSION_1) || !(want & F_MAC))
		return -3;
	if (!(want & F_CTRL_VQ))
		want &= ~F_GUEST_ANNOUNCE;    /* it needs the control queue */
	MMIO32(c, 0x08) = 0;
	MMIO32(c, 0x0c) = (uint32_t)want;
	MMIO32(c, 0x08) = 1;
	MMIO32(c, 0x0c) = (uint32_t)(want >> 32);
	MMIO8(c, 0x14) = S_ACK | S_DRIVER | S_FEATURES_OK;
	if (!(MMIO8(c, 0x14) & S_FEATURES_OK))
		return -4;
	n->features = want;
	if (queue_setup(n, &n->rx, 0, mem, mem + 0x10000, 0) < 0 ||
	    queue_setup(n, &n->tx, 1, mem + 0x3000, mem + 0x10000 + VNET_QSIZE * VNET_BUF, 1) < 0)
		return -5;
	n->ctrl_buf = mem + 0xf000;
	if ((want & F_CTRL_VQ) && queue_setup(n, &n->ctrl, 2, mem + 0x6000, n->ctrl_buf, 1) < 0)
		return -5;
	for (uint16_t i = 0; i < VNET_QSIZE; i++)
		rx_post(&n->rx, i);
	for (int i = 0; i < 6; i++)
		n->mac[i] = MMIO8(n->devcfg, i);
	MMIO8(c, 0x14) = S_ACK | S_DRIVER | S_FEATURES_OK | S_DRIVER_OK;
	*n->rx.notify = 0;
	return 0;
}

size_t vnet_recv(struct vnet *n, void *buf, size_t size)
{
	struct vnet_q *q = &n->rx;
	uint32_t id, len;
	size_t flen;

	if (q->used[1] == q->used_seen)
		return 0;
	barrier();
	id = *(volatile uint32_t *)(q->used + 2 + 4 * (q->used_seen % VNET_QSIZE));
	len = *(volatile uint32_t *)(q->used + 4 + 4 * (q->used_seen % VNET_QSIZE));
	q->used_seen++;
	if (id >= VNET_QSIZE)
		return 0;
	flen = len > HDR ? len - HDR : 0;
	if (flen > size)
		flen = size;
	memcpy(buf, q->bufs + (size_t)id * VNET_BUF + HDR, flen);
	rx_post(q, (uint16_t)id);
	barrier();
	*q->notify = 0;
	n->rx_frames++;
	return flen;
}

int vnet_send(struct vnet *n, const void *frame, size_t len)
{
	struct vnet_q *q = &n->tx;
	uint16_t id = q->avail_idx % VNET_QSIZE;
	uint8_t *b = q->bufs + (size_t)id * VNET_BUF;

	if (len > VNET_BUF - HDR)
		return -1;
	memset(b, 0, HDR);
	memcpy(b + HDR, frame, len);
	q->desc[id] = (struct vnet_desc){ (uint64_t)b, (uint32_t)(HDR + len), 0, 0 };
	q->avail[2 + q->avail_idx % VNET_QSIZE] = id;
	barrier();
	q->avail[1] = ++q->avail_idx;
	barrier();
	*q->notify = 1;
	/* The device serves the queue at the notify: it is done by now. */
	barrier();
	q->used_seen = q->used[1];
	if (q->used_seen != q->avail_idx)
		return -1;
	n->tx_frames++;
	return 0;
}

int vnet_announce_wanted(struct vnet *n)
{
	uint8_t isr = MMIO8(n->isr, 0);

	if (!(isr & 2) || !(n->features & F_GUEST_ANNOUNCE))
		return 0;
	return (MMIO16(n->devcfg, 6) & 2) != 0;
}

int vnet_announce_ack(struct vnet *n)
{
	struct vnet_q *q = &n->ctrl;
	uint8_t *b = n->ctrl_buf;

	if (!(n->features & F_CTRL_VQ))
		return -1;
	b[0] = 3;          /* VIRTIO_NET_CTRL_ANNOUNCE */
	b[1] = 0;          /* VIRTIO_NET_CTRL_ANNOUNCE_ACK */
	b[16] = 0xff;
	q->desc[0] = (struct vnet_desc){ (uint64_t)b, 2, 1, 1 };
	q->desc[1] = (struct vnet_desc){ (uint64_t)(b + 16), 1, 2, 0 };
	q->avail[2 + q->avail_idx % VNET_QSIZE] = 0;
	barrier();
	q->avail[1] = ++q->avail_idx;
	barrier();
	*q->notify = 2;
	barrier();
	q->used_seen = q->used[1];
	return b[16] == 0 ? 0 : -1;
}

void vnet_wait(struct vnet *n, uint32_t usec)
{
	if (n->rx.used[1] != n->rx.used_seen)
		return;
	guest_idle(usec);
}

uint8_t vnet_status(struct vnet *n)
{
	return MMIO8(n->common, 0x14);
}
