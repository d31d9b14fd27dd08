/* virtio-blk driver of the built-in guests (see vblk.h). */
#include "vblk.h"

#include "glib.h"

#define F_FLUSH (1ull << 9)

int vblk_init(struct vblk *b, uint8_t *mem, uint64_t optional)
{
	uint64_t want;
	int r;

	memset(b, 0, sizeof(*b));
	b->timeout_spins = 10000;
	if ((r = vpci_init(&b->pci, 0x1042)) < 0)
		return r;
	want = vpci_reset(&b->pci) & (VPCI_F_VERSION_1 | F_FLUSH | optional);
	if (!(want & VPCI_F_VERSION_1))
		return -3;
	if (vpci_set_features(&b->pci, want) < 0)
		return -4;
	b->features = want;
	memset(mem, 0, VBLK_MEM_BYTES);
	b->hdr = (struct vblk_hdr *)(mem + VPCI_QUEUE_BYTES);
	b->status = mem + VPCI_QUEUE_BYTES + 0x10;
	if (vpci_queue_setup(&b->pci, &b->q, 0, VBLK_QSIZE, mem, 1) < 0)
		return -5;
	vpci_driver_ok(&b->pci);
	b->capacity = vpci_devcfg_read32(&b->pci, 0) | (uint64_t)vpci_devcfg_read32(&b->pci, 4) << 32;
	return 0;
}

/* The device serves the request at the notify's exit, or soon after on
 * the VMM's I/O thread (an ioeventfd): polled, idling between looks. */
int vblk_request(struct vblk *b, uint32_t type, uint64_t sector, void *buf, uint32_t len,
		 int dev_writes)
{
	struct vpci_desc *d = b->q.desc;
	uint32_t id, used_len;
	int n;

	b->hdr->type = type;
	b->hdr->reserved = 0;
	b->hdr->sector = sector;
	*b->status = 0xff;
	d[0] = (struct vpci_desc){ (uint64_t)b->hdr, 16, VPCI_DESC_NEXT, 1 };
	n = 1;
	if (len)
		d[n++] = (struct vpci_desc){ (uint64_t)buf, len,
					     (uint16_t)(VPCI_DESC_NEXT | (dev_writes ? VPCI_DESC_WRITE : 0)), 2 };
	d[n] = (struct vpci_desc){ (uint64_t)b->status, 1, VPCI_DESC_WRITE, 0 };
	vpci_queue_push(&b->q, 0);
	vpci_queue_notify(&b->q);
	for (uint32_t spin = 0; !vpci_queue_take(&b->q, &id, &used_len); spin++) {
		if (vpci_status(&b->pci) & VPCI_S_NEEDS_RESET)
			return VBLK_ERESET;
		if (spin > b->timeout_spins)
			return VBLK_ETIMEDOUT;
		guest_idle(100);
	}
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
	return vblk_request(b, VBLK_T_IN, sector, buf, n * VBLK_SECTOR, 1);
}

int vblk_write(struct vblk *b, uint64_t sector, const void *buf, uint32_t n)
{
	int r = check(b, sector, n);

	if (r)
		return r;
	b->writes++;
	return vblk_request(b, VBLK_T_OUT, sector, (void *)buf, n * VBLK_SECTOR, 0);
}

int vblk_flush(struct vblk *b)
{
	if (!(b->features & F_FLUSH))
		return 0;
	b->flushes++;
	return vblk_request(b, VBLK_T_FLUSH, 0, 0, 0, 0);
}

uint8_t vblk_status(struct vblk *b)
{
	return vpci_status(&b->pci);
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
