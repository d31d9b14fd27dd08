/* virtio-blk driver of the built-in guests (see vblk.h). */
#include "vblk.h"

#include "glib.h"

#define PCI_ADDR 0xcf8
#define PCI_DATA 0xcfc

#define S_ACK 1
#define S_DRIVER 2
#define S_DRIVER_OK 4
#define S_FEATURES_OK 8
#define S_NEEDS_RESET 0x40

#define F_FLUSH (1ull << 9)
#define F_VERSION_1 (1ull << 32)

#define T_IN 0
#define T_OUT 1
#define T_FLUSH 4

struct vblk_desc {
	uint64_t addr;
	uint32_t len;
	uint16_t flags, next;
};

struct vblk_hdr {
	uint32_t type, reserved;
	uint64_t sector;
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

/* The function, its BAR as reset placed it, its virtio capabilities. */
static int pci_setup(struct vblk *b)
{
	volatile uint8_t *notify_base = 0;
	uint32_t mult = 0, cmd;
	int ptr, k = 0;

	for (b->dev = 0; b->dev < 32; b->dev++)
		if (cfg_read(b->dev, 0) == 0x10421af4u)
			break;
	if (b->dev == 32)
		return -1;
	b->bar = ((uint64_t)cfg_read(b->dev, 0x14) << 32) | (cfg_read(b->dev, 0x10) & ~0xfu);
	cmd = cfg_read(b->dev, 4) & 0xffff;
	cfg_write(b->dev, 4, cmd | 2u | 4u);    /* memory decoding, bus master */
	ptr = (int)(cfg_read(b->dev, 0x34) & 0xfc);
	while (ptr && k++ < 48) {
		uint32_t head = cfg_read(b->dev, ptr);

		if ((head & 0xff) == 0x09 && (cfg_read(b->dev, ptr + 4) & 0xff) == 0) {
			volatile uint8_t *at = (volatile uint8_t *)(b->bar + cfg_read(b->dev, ptr + 8));

			switch ((head >> 24) & 0xff) {
			case 1: b->common = at; break;
			case 2: notify_base = at; mult = cfg_read(b->dev, ptr + 16); break;
			case 3: b->isr = at; break;
			case 4: b->devcfg = at; break;
			default: break;
			}
		}
		ptr = (int)((head >> 8) & 0xfc);
	}
	if (!b->common || !notify_base || !b->isr || !b->devcfg)
		return -2;
	MMIO16(b->common, 0x16) = 0;
	b->notify = (volatile uint16_t *)(notify_base + MMIO16(b->common, 0x1e) * mult);
	return 0;
}

int vblk_init(struct vblk *b, uint8_t *mem)
{
	volatile uint8_t *c;
	uint64_t offered, want;
	int r;

	memset(b, 0, sizeof(*b));
	if ((r = pci_setup(b)) < 0)
		return r;
	c = b->common;
	MMIO8(c, 0x14) = 0;
	while (MMIO8(c, 0x14) != 0)
		;
	MMIO8(c, 0x14) = S_ACK;
	MMIO8(c, 0x14) = S_ACK | S_DRIVER;
	MMIO32(c, 0x00) = 0;
	offered = MMIO32(c, 0x04);
	MMIO32(c, 0x00) = 1;
	offered |= (uint64_t)MMIO32(c, 0x04) << 32;
	want = offered & (F_VERSION_1 | F_FLUSH);
	if (!(want & F_VERSION_1))
		return -3;
	MMIO32(c, 0x08) = 0;
	MMIO32(c, 0x0c) = (uint32_t)want;
	MMIO32(c, 0x08) = 1;
	MMIO32(c, 0x0c) = (uint32_t)(want >> 32);
	MMIO8(c, 0x14) = S_ACK | S_DRIVER | S_FEATURES_OK;
	if (!(MMIO8(c, 0x14) & S_FEATURES_OK))
		return -4;
	b->features = want;

	memset(mem, 0, VBLK_MEM_BYTES);
	b->desc = (struct vblk_desc *)mem;
	b->avail = (volatile uint16_t *)(mem + 0x1000);
	b->used = (volatile uint16_t *)(mem + 0x2000);
	b->hdr = (struct vblk_hdr *)(mem + 0x3000);
	b->status = mem + 0x3010;
	b->avail[0] = 1;                 /* VIRTQ_AVAIL_F_NO_INTERRUPT: polled */
	MMIO16(c, 0x16) = 0;
	if (MMIO16(c, 0x18) < VBLK_QSIZE)
		return -5;
	MMIO16(c, 0x18) = VBLK_QSIZE;
	MMIO16(c, 0x1a) = 0xffff;        /* no MSI-X vector */
	MMIO32(c, 0x20) = (uint32_t)(uint64_t)b->desc;
	MMIO32(c, 0x24) = 0;
	MMIO32(c, 0x28) = (uint32_t)(uint64_t)b->avail;
	MMIO32(c, 0x2c) = 0;
	MMIO32(c, 0x30) = (uint32_t)(uint64_t)b->used;
	MMIO32(c, 0x34) = 0;
	MMIO16(c, 0x1c) = 1;
	MMIO8(c, 0x14) = S_ACK | S_DRIVER | S_FEATURES_OK | S_DRIVER_OK;
	b->capacity = MMIO32(b->devcfg, 0) | (uint64_t)MMIO32(b->devcfg, 4) << 32;
	return 0;
}

/* One request, waited for. The device serves it at the notify; the wait is
 * for a device that does not. */
static int request(struct vblk *b, uint32_t type, uint64_t sector, void *buf, uint32_t len,
		   int dev_writes)
{
	int n;

	b->hdr->type = type;
	b->hdr->reserved = 0;
	b->hdr->sector = sector;
	*b->status = 0xff;
	b->desc[0] = (struct vblk_desc){ (uint64_t)b->hdr, 16, 1, 1 };
	n = 1;
	if (len)
		b->desc[n++] = (struct vblk_desc){ (uint64_t)buf, len,
						   (uint16_t)(1 | (dev_writes ? 2 : 0)), 2 };
	b->desc[n] = (struct vblk_desc){ (uint64_t)b->status, 1, 2, 0 };
	b->avail[2 + b->avail_idx % VBLK_QSIZE] = 0;
	barrier();
	b->avail[1] = ++b->avail_idx;
	barrier();
	*b->notify = 0;
	for (int spin = 0; b->used[1] == b->used_seen; spin++) {
		if (MMIO8(b->common, 0x14) & S_NEEDS_RESET)
			return VBLK_ERESET;
		if (spin > 10000)
			return VBLK_ETIMEDOUT;
		guest_idle(100);
	}
	barrier();
	b->used_seen++;
	return *b->status == 0 ? 0 : VBLK_EIO;
}

static int check(struct vblk *b, uint64_t sector, uint32_t n)
{
	if (n == 0 || n > VBLK_MAX_BYTES / VBLK_SECTOR || sector >= b->capacity ||
	    b->capacity - sector < n)
		return VBLK_ERANGE;
	return 0;
}

int vblk_read(struct vblk *b, uint64_t sector, void *buf, uint32_t n)
{
	int r = check(b, sector, n);

	if (r)
		return r;
	b->reads++;
	return request(b, T_IN, sector, buf, n * VBLK_SECTOR, 1);
}

int vblk_write(struct vblk *b, uint64_t sector, const void *buf, uint32_t n)
{
	int r = check(b, sector, n);

	if (r)
		return r;
	b->writes++;
	return request(b, T_OUT, sector, (void *)buf, n * VBLK_SECTOR, 0);
}

int vblk_flush(struct vblk *b)
{
	if (!(b->features & F_FLUSH))
		return 0;
	b->flushes++;
	return request(b, T_FLUSH, 0, 0, 0, 0);
}

uint8_t vblk_status(struct vblk *b)
{
	return MMIO8(b->common, 0x14);
}

const char *vblk_strerror(int r)
{
	switch (r) {
	case 0: return "ok";
	case VBLK_EIO: return "io-error";
	case VBLK_ERESET: return "device-needs-reset";
	case VBLK_ETIMEDOUT: return "timeout";
	case VBLK_ERANGE: return "out-of-range";
	default: return "error";
	}
}
