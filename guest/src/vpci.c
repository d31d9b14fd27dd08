/* The virtio-pci modern transport of the built-in guests (see vpci.h). */
#include "vpci.h"

#include "glib.h"

#define PCI_ADDR 0xcf8
#define PCI_DATA 0xcfc

#define MMIO8(p, off) (*(volatile uint8_t *)((p) + (off)))
#define MMIO16(p, off) (*(volatile uint16_t *)((p) + (off)))
#define MMIO32(p, off) (*(volatile uint32_t *)((p) + (off)))

/* common configuration (virtio 1.2, 4.1.4.3) */
#define C_DFSELECT 0x00
#define C_DF 0x04
#define C_GFSELECT 0x08
#define C_GF 0x0c
#define C_STATUS 0x14
#define C_Q_SELECT 0x16
#define C_Q_SIZE 0x18
#define C_Q_VECTOR 0x1a
#define C_Q_ENABLE 0x1c
#define C_Q_NOFF 0x1e
#define C_Q_DESC 0x20
#define C_Q_DRIVER 0x28
#define C_Q_DEVICE 0x30

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

uint32_t vpci_cfg_read(int dev, int off)
{
	outl(PCI_ADDR, 0x80000000u | (uint32_t)dev << 11 | (uint32_t)(off & 0xfc));
	return inl(PCI_DATA) >> (8 * (off & 3));
}

void vpci_cfg_write(int dev, int off, uint32_t v)
{
	outl(PCI_ADDR, 0x80000000u | (uint32_t)dev << 11 | (uint32_t)(off & 0xfc));
	outl(PCI_DATA, v);
}

int vpci_find(uint16_t device_id)
{
	for (int dev = 0; dev < 32; dev++)
		if (vpci_cfg_read(dev, 0) == ((uint32_t)device_id << 16 | 0x1af4u))
			return dev;
	return -1;
}

int vpci_init(struct vpci *t, uint16_t device_id)
{
	int ptr, k = 0;
	uint32_t cmd;

	memset(t, 0, sizeof(*t));
	if ((t->dev = vpci_find(device_id)) < 0)
		return -1;
	/* BAR0/BAR1 as reset placed them; memory decoding and bus master on. */
	t->bar = ((uint64_t)vpci_cfg_read(t->dev, 0x14) << 32) | (vpci_cfg_read(t->dev, 0x10) & ~0xfu);
	cmd = vpci_cfg_read(t->dev, 4) & 0xffff;
	vpci_cfg_write(t->dev, 4, cmd | 2u | 4u);
	ptr = (int)(vpci_cfg_read(t->dev, 0x34) & 0xfc);
	while (ptr && k++ < 48) {
		uint32_t head = vpci_cfg_read(t->dev, ptr);

		/* vendor-specific capability on BAR 0 */
		if ((head & 0xff) == 0x09 && (vpci_cfg_read(t->dev, ptr + 4) & 0xff) == 0) {
			volatile uint8_t *at = (volatile uint8_t *)(t->bar + vpci_cfg_read(t->dev, ptr + 8));

			switch ((head >> 24) & 0xff) {
			case 1: t->common = at; break;
			case 2: t->notify_base = at; t->notify_mult = vpci_cfg_read(t->dev, ptr + 16); break;
			case 3: t->isr = at; break;
			case 4: t->devcfg = at; break;
			default: break;
			}
		}
		ptr = (int)((head >> 8) & 0xfc);
	}
	return t->common && t->notify_base && t->isr && t->devcfg ? 0 : -2;
}

uint64_t vpci_reset(struct vpci *t)
{
	volatile uint8_t *c = t->common;
	uint64_t offered;

	MMIO8(c, C_STATUS) = 0;
	while (MMIO8(c, C_STATUS) != 0)
		;
	MMIO8(c, C_STATUS) = VPCI_S_ACK;
	MMIO8(c, C_STATUS) = VPCI_S_ACK | VPCI_S_DRIVER;
	MMIO32(c, C_DFSELECT) = 0;
	offered = MMIO32(c, C_DF);
	MMIO32(c, C_DFSELECT) = 1;
	offered |= (uint64_t)MMIO32(c, C_DF) << 32;
	return offered;
}

int vpci_set_features(struct vpci *t, uint64_t features)
{
	volatile uint8_t *c = t->common;

	MMIO32(c, C_GFSELECT) = 0;
	MMIO32(c, C_GF) = (uint32_t)features;
	MMIO32(c, C_GFSELECT) = 1;
	MMIO32(c, C_GF) = (uint32_t)(features >> 32);
	MMIO8(c, C_STATUS) = VPCI_S_ACK | VPCI_S_DRIVER | VPCI_S_FEATURES_OK;
	return MMIO8(c, C_STATUS) & VPCI_S_FEATURES_OK ? 0 : -1;
}

int vpci_queue_setup(struct vpci *t, struct vpci_queue *q, uint16_t index, uint16_t size,
		     uint8_t *mem, int no_intr)
{
	volatile uint8_t *c = t->common;

	memset(mem, 0, VPCI_QUEUE_BYTES);
	q->desc = (struct vpci_desc *)mem;
	q->avail = (volatile uint16_t *)(mem + 0x1000);
	q->used = (volatile uint16_t *)(mem + 0x2000);
	q->index = index;
	q->size = size;
	q->avail_idx = 0;
	q->used_seen = 0;
	vpci_queue_interrupts(q, !no_intr);
	MMIO16(c, C_Q_SELECT) = index;
	if (MMIO16(c, C_Q_SIZE) < size)
		return -1;
	MMIO16(c, C_Q_SIZE) = size;
	MMIO16(c, C_Q_VECTOR) = 0xffff;  /* no MSI-X vector */
	MMIO32(c, C_Q_DESC) = (uint32_t)(uint64_t)q->desc;
	MMIO32(c, C_Q_DESC + 4) = 0;
	MMIO32(c, C_Q_DRIVER) = (uint32_t)(uint64_t)q->avail;
	MMIO32(c, C_Q_DRIVER + 4) = 0;
	MMIO32(c, C_Q_DEVICE) = (uint32_t)(uint64_t)q->used;
	MMIO32(c, C_Q_DEVICE + 4) = 0;
	q->notify = (volatile uint16_t *)(t->notify_base + MMIO16(c, C_Q_NOFF) * t->notify_mult);
	MMIO16(c, C_Q_ENABLE) = 1;
	return 0;
}

void vpci_driver_ok(struct vpci *t)
{
	MMIO8(t->common, C_STATUS) = VPCI_S_ACK | VPCI_S_DRIVER | VPCI_S_FEATURES_OK | VPCI_S_DRIVER_OK;
}

uint8_t vpci_status(struct vpci *t)
{
	return MMIO8(t->common, C_STATUS);
}

uint8_t vpci_isr(struct vpci *t)
{
	return MMIO8(t->isr, 0);
}

uint8_t vpci_devcfg_read8(struct vpci *t, int off)
{
	return MMIO8(t->devcfg, off);
}

uint16_t vpci_devcfg_read16(struct vpci *t, int off)
{
	return MMIO16(t->devcfg, off);
}

uint32_t vpci_devcfg_read32(struct vpci *t, int off)
{
	return MMIO32(t->devcfg, off);
}

int vpci_queue_set_vector(struct vpci *t, uint16_t index, uint16_t vector)
{
	MMIO16(t->common, C_Q_SELECT) = index;
	MMIO16(t->common, C_Q_VECTOR) = vector;
	return MMIO16(t->common, C_Q_VECTOR) == vector ? 0 : -1;
}

void vpci_queue_interrupts(struct vpci_queue *q, int on)
{
	q->avail[0] = (uint16_t)(on ? 0 : 1);  /* VIRTQ_AVAIL_F_NO_INTERRUPT */
}

void vpci_queue_push(struct vpci_queue *q, uint16_t head)
{
	q->avail[2 + q->avail_idx % q->size] = head;
	barrier();
	q->avail[1] = ++q->avail_idx;
}

void vpci_queue_notify(struct vpci_queue *q)
{
	barrier();
	*q->notify = q->index;
}

int vpci_queue_take(struct vpci_queue *q, uint32_t *id, uint32_t *len)
{
	uint16_t at;

	if (q->used[1] == q->used_seen)
		return 0;
	barrier();
	at = q->used_seen % q->size;
	*id = *(volatile uint32_t *)(q->used + 2 + 4 * at);
	*len = *(volatile uint32_t *)(q->used + 4 + 4 * at);
	q->used_seen++;
	return 1;
}

int vpci_queue_drain(struct vpci_queue *q)
{
	barrier();
	q->used_seen = q->used[1];
	return q->used_seen == q->avail_idx ? 0 : -1;
}

int vpci_queue_pending(const struct vpci_queue *q)
{
	return q->used[1] != q->used_seen;
}
