/* PCI bus 0 behind configuration mechanism #1 (ports 0xCF8/0xCFC): the host
 * bridge at 00:00.0 and, with a disk, the virtio-blk function at 00:01.0,
 * with a NIC the virtio-net function at 00:02.0.
 *
 * Each function's 256-byte configuration space is plain data in
 * m->pci.cfg (checkpointed as is); what a guest may change in it is given
 * byte by byte by write_mask(), so that a driver sizing a BAR by writing
 * all-ones reads back the size bits, as on real hardware. The BARs are
 * placed in the MMIO hole below 4 GiB at reset, as firmware would; a
 * driver may move them. Called with machine.lock held. */
#include "machine/virtio.h"
#include "machine/machine_int.h"
#include "machine/ioevent.h"

#include <errno.h>
#include <string.h>

#include "kmod/le.h"
#include "kmod/mutant.h"

#define TAG "pci"

#define PCI_VENDOR_ID     0x00
#define PCI_DEVICE_ID     0x02
#define PCI_COMMAND       0x04
#define PCI_STATUS        0x06
#define PCI_REVISION      0x08
#define PCI_CLASS_PROG    0x09
#define PCI_HEADER_TYPE   0x0e
#define PCI_BAR0          0x10
#define PCI_BAR1          0x14
#define PCI_SUBSYS_VENDOR 0x2c
#define PCI_SUBSYS_ID     0x2e
#define PCI_CAP_PTR       0x34
#define PCI_INT_LINE      0x3c

#define PCI_COMMAND_MEM   0x0002
#define PCI_STATUS_CAPS   0x0010
#define PCI_BAR_MEM64     0x4

/* Where reset places the virtio BARs: the MMIO hole starts at 3 GiB
 * (MACHINE_LOW_RAM_MAX) and the IOAPIC sits at 0xFEC00000. */
#define PCI_MMIO_BASE     0xe0000000ull

static bool slot_present(const struct machine *m, int slot)
{
	const uint8_t *cfg = m->pci.cfg[slot];

	return (cfg[PCI_VENDOR_ID] | cfg[PCI_VENDOR_ID + 1]) != 0;
}

bool pci_isr_pending(const struct machine *m)
{
	return (m->blk && m->pci.blk.isr) || (m->vnet && m->pci.net.isr);
}

/* Bits of config byte off that the guest may write. */
static uint8_t write_mask(int slot, int off)
{
	switch (off) {
	case PCI_COMMAND:
		return 0x07;              /* I/O, memory, bus master */
	case PCI_COMMAND + 1:
		return 0x04;              /* INTx disable */
	case 0x0c: case 0x0d:         /* cache line size, latency timer */
	case PCI_INT_LINE:
		return 0xff;
	default:
		break;
	}
	if (slot == 0)
		return 0;
	/* BAR0: 64-bit memory, VIRTIO_BAR_BYTES (32 KiB): bits 15..31 of BAR0
	 * and all of BAR1 hold the address, the rest reads as the BAR's type. */
	if (off >= PCI_BAR0 && off < PCI_BAR0 + 4)
		return off == PCI_BAR0 ? 0 : off == PCI_BAR0 + 1 ? 0x80 : 0xff;
	if (off >= PCI_BAR1 && off < PCI_BAR1 + 4)
		return 0xff;
	if (off == VIRTIO_CAP_MSIX + 3)
		return 0xc0;              /* MSI-X enable, function mask */
	/* virtio_pci_cap of type PCI_CFG: bar, offset and length are the driver's. */
	if (off == VIRTIO_CAP_PCI_CFG + 4 ||
	    (off >= VIRTIO_CAP_PCI_CFG + 8 && off < VIRTIO_CAP_PCI_CFG + 16))
		return 0xff;
	return 0;
}

static void cfg_read(struct machine *m, int slot, int off, uint8_t *data, int len)
{
	struct virtio_dev *d = pci_slot_virtio(m, slot);

	if (d && virtio_cfg_access(d, (uint32_t)off, data, (uint32_t)len, false))
		return;
	for (int i = 0; i < len; i++)
		data[i] = off + i < PCI_CFG_BYTES ? m->pci.cfg[slot][off + i] : 0xff;
}

static void cfg_write(struct machine *m, int slot, int off, const uint8_t *data, int len)
{
	struct virtio_dev *d = pci_slot_virtio(m, slot);
	uint8_t *cfg = m->pci.cfg[slot];

	if (d && virtio_cfg_access(d, (uint32_t)off, (uint8_t *)data, (uint32_t)len, true))
		return;
	for (int i = 0; i < len && off + i < PCI_CFG_BYTES; i++) {
		uint8_t mask = write_mask(slot, off + i);

		cfg[off + i] = (uint8_t)((cfg[off + i] & ~mask) | (data[i] & mask));
	}
	if (d) {
		virtio_msix_update(d);
		ioevent_sync(m);     /* the BAR or decoding may have moved */
	}
}

void pci_io(struct machine *m, uint16_t port, int size, bool write, uint8_t *data)
{
	uint32_t a = m->pci.addr;
	int slot, off;

	if (port >= PCI_PORT_ADDR && port < PCI_PORT_ADDR + 4) {
		/* Only a 32-bit access at 0xCF8 is the address register. */
		if (port != PCI_PORT_ADDR || size != 4) {
			if (!write)
				memset(data, 0xff, (size_t)size);
			return;
		}
		if (write) {
			memcpy(&a, data, 4);
			m->pci.addr = a & 0x80fffffcu;
		} else {
			memcpy(data, &a, 4);
		}
		return;
	}
	slot = (int)((a >> 11) & 0x1f);
	off = (int)(a & 0xfc) + (port - PCI_PORT_DATA);
	/* Enabled, bus 0, function 0 of a slot that holds a function. */
	if (!(a & 0x80000000u) || ((a >> 16) & 0xff) || ((a >> 8) & 7) || slot >= PCI_NSLOTS ||
	    !slot_present(m, slot)) {
		if (!write)
			memset(data, 0xff, (size_t)size);
		return;
	}
	if (write)
		cfg_write(m, slot, off, data, size);
	else
		cfg_read(m, slot, off, data, size);
}

int pci_mmio(struct machine *m, uint64_t gpa, uint8_t *data, uint32_t len, bool write)
{
	for (int slot = 1; slot < PCI_NSLOTS; slot++) {
		struct virtio_dev *d = pci_slot_virtio(m, slot);
		uint64_t base;

		if (!d || !(base = pci_bar0_base(m, slot)))
			continue;
		if (gpa < base || gpa - base >= VIRTIO_BAR_BYTES || len > 8 ||
		    gpa - base + len > VIRTIO_BAR_BYTES)
			continue;
		virtio_bar_access(d, (uint32_t)(gpa - base), data, len, write);
		return 0;
	}
	return -ENOENT;
}

static void bridge_init(uint8_t *cfg)
{
	/* QEMU's generic PCIe host bridge IDs: no driver binds anything to it. */
	le_put16(cfg + PCI_VENDOR_ID, 0x1b36);
	le_put16(cfg + PCI_DEVICE_ID, 0x0008);
	le_put16(cfg + PCI_COMMAND, PCI_COMMAND_MEM);
	cfg[PCI_CLASS_PROG + 2] = 0x06;   /* class: bridge, subclass 0: host */
	cfg[PCI_HEADER_TYPE] = 0;
}

void virtio_pci_cfg_init(uint8_t *cfg, uint16_t type)
{
	memset(cfg, 0, PCI_CFG_BYTES);
	le_put16(cfg + PCI_VENDOR_ID, VIRTIO_PCI_VENDOR);
	le_put16(cfg + PCI_DEVICE_ID, (uint16_t)(VIRTIO_PCI_DEVICE_BASE + type));
	le_put16(cfg + PCI_STATUS, PCI_STATUS_CAPS);
	cfg[PCI_REVISION] = 1;            /* modern-only device (4.1.2.1) */
	/* class: mass storage, network */
	cfg[PCI_CLASS_PROG + 2] = type == VIRTIO_TYPE_BLOCK ? 0x01 : type == VIRTIO_TYPE_NET ? 0x02 : 0xff;
	le_put32(cfg + PCI_BAR0, PCI_BAR_MEM64);
	le_put16(cfg + PCI_SUBSYS_VENDOR, VIRTIO_PCI_VENDOR);
	le_put16(cfg + PCI_SUBSYS_ID, (uint16_t)(VIRTIO_PCI_DEVICE_BASE + type));
	cfg[PCI_CAP_PTR] = VIRTIO_CAP_COMMON;

	/* struct virtio_pci_cap: vndr 0x09, next, len, cfg_type, bar, id,
	 * padding[2], offset, length (+ notify_off_multiplier for NOTIFY). */
	static const struct { uint8_t at, next, len, type; uint32_t off, bytes; } caps[] = {
		{ VIRTIO_CAP_COMMON, VIRTIO_CAP_NOTIFY, 16, 1, VIRTIO_COMMON_OFF, VIRTIO_COMMON_BYTES },
		{ VIRTIO_CAP_NOTIFY, VIRTIO_CAP_ISR, 20, 2, VIRTIO_NOTIFY_OFF,
		  VIRTIO_MAX_QUEUES * VIRTIO_NOTIFY_MULT },
		{ VIRTIO_CAP_ISR, VIRTIO_CAP_DEVICE, 16, 3, VIRTIO_ISR_OFF, 4 },
		{ VIRTIO_CAP_DEVICE, VIRTIO_CAP_PCI_CFG, 16, 4, VIRTIO_DEVCFG_OFF, VIRTIO_DEVCFG_BYTES },
		{ VIRTIO_CAP_PCI_CFG, VIRTIO_CAP_MSIX, 20, 5, 0, 0 },
	};
	for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
		uint8_t *c = cfg + caps[i].at;

		c[0] = 0x09;
		c[1] = caps[i].next;
		c[2] = caps[i].len;
		c[3] = caps[i].type;
		c[4] = 0;                 /* BAR0 */
		le_put32(c + 8, caps[i].off);
		le_put32(c + 12, caps[i].bytes);
	}
	le_put32(cfg + VIRTIO_CAP_NOTIFY + 16, VIRTIO_NOTIFY_MULT);

	/* MSI-X: table size - 1, table and PBA in BAR0. */
	cfg[VIRTIO_CAP_MSIX] = 0x11;
	cfg[VIRTIO_CAP_MSIX + 1] = 0;
	le_put16(cfg + VIRTIO_CAP_MSIX + 2, VIRTIO_MSIX_VECTORS - 1);
	le_put32(cfg + VIRTIO_CAP_MSIX + 4, VIRTIO_MSIX_TABLE_OFF);
	le_put32(cfg + VIRTIO_CAP_MSIX + 8, VIRTIO_MSIX_PBA_OFF);
}

/* A virtio function at power-on: BAR0 at base, memory decoding on, the
 * device reset, every MSI-X vector masked. */
static void function_reset(struct machine *m, int slot, struct virtio_dev *d, uint64_t base)
{
	uint8_t *cfg = m->pci.cfg[slot];

	virtio_pci_cfg_init(cfg, d->type);
	le_put32(cfg + PCI_BAR0, (uint32_t)base | PCI_BAR_MEM64);
	le_put32(cfg + PCI_BAR1, (uint32_t)(base >> 32));
	le_put16(cfg + PCI_COMMAND, PCI_COMMAND_MEM);
	virtio_reset(d);
	for (int v = 0; v < VIRTIO_MSIX_VECTORS; v++)
		d->st->msix[v].ctrl = 1;
}

void pci_reset(struct machine *m)
{
	memset(&m->pci, 0, sizeof(m->pci));
	bridge_init(m->pci.cfg[0]);
	if (m->blk)
		function_reset(m, PCI_SLOT_BLK, &m->blk->dev, PCI_MMIO_BASE);
	if (m->vnet)
		function_reset(m, PCI_SLOT_NET, &m->vnet->dev, PCI_MMIO_BASE + VIRTIO_BAR_BYTES);
}

/* ---- on the bus: the functions and the virtio devices behind them -------------- */

static int pci_bus_io(struct machine *m, uint64_t addr, int size, bool write, uint8_t *data)
{
	pci_io(m, (uint16_t)addr, size, write, data);
	return 0;
}

static int pci_bus_mmio(struct machine *m, uint64_t addr, int size, bool write, uint8_t *data)
{
	return pci_mmio(m, addr, data, (uint32_t)size, write);
}

static void pci_detach(struct machine *m)
{
	virtio_blk_close(m);
	virtio_net_close(m);
}

static int pci_attach(struct machine *m)
{
	int r;

	if ((r = virtio_blk_open(m)) < 0 || (r = virtio_net_open(m)) < 0)
		goto err;
	pci_reset(m);
	/* BARs may be moved anywhere: pci_mmio decodes them. */
	if ((r = machine_bus_add(m, MACHINE_PIO, PCI_PORT_ADDR, 8, pci_bus_io)) < 0 ||
	    (r = machine_bus_add(m, MACHINE_MMIO, 0, UINT64_MAX, pci_bus_mmio)) < 0)
		goto err;
	return 0;
err:
	pci_detach(m);
	return r;
}

static void pci_save(struct machine *m, struct machine_state *st)
{
	st->pci = m->pci;
}

/* The state was made by a machine of the same configuration (the digest
 * says so); a function this one lacks stays absent all the same. */
static void pci_load(struct machine *m, const struct machine_state *st)
{
	m->pci = st->pci;
	if (!m->blk)
		memset(m->pci.cfg[PCI_SLOT_BLK], 0, PCI_CFG_BYTES);
	if (!m->vnet)
		memset(m->pci.cfg[PCI_SLOT_NET], 0, PCI_CFG_BYTES);
	ioevent_sync(m);
	if (!MUTANT(resume_forgets_kicks))   /* make check-mutants: a kick in no checkpoint is lost */
		ioevent_serve_all(m);
}

const struct machine_device pci_device = {
	"pci", pci_attach, pci_detach, pci_save, pci_load, pci_isr_pending,
};
