/* PCI configuration space, the virtio-pci transport and virtio-blk, driven
 * from the host side of a real machine (KVM, vCPUs parked) on a temporary
 * raw image: BAR sizing, feature negotiation, a good request, malformed
 * descriptor chains (DEVICE_NEEDS_RESET, never a crash), the state
 * encoding's round trip and its refusal of truncated or impossible state. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "machine/virtio.h"
#include "proto/proto.h"
#include "tests/harness.h"

#define MEM (16ull << 20)
#define BAR 0xe0000000ull
#define RING_GPA 0x200000ull   /* desc, avail, used, then buffers */
#define QS 8

struct fixture {
	struct machine *m;
	char path[64];
	int fd;                 /* the image, for checking what landed in it */
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct machine_config cfg = { .mem_bytes = MEM, .ncpus = 1, .guest = "counter", .ndisks = 1 };

	*state = NULL;
	if (!f)
		return -1;
	if (!th_kvm_available()) {
		free(f);
		return 0;   /* each test skips */
	}
	snprintf(f->path, sizeof(f->path), "/tmp/test_virtio.XXXXXX");
	f->fd = mkstemp(f->path);
	if (f->fd < 0 || ftruncate(f->fd, 1 << 20) < 0)
		return -1;
	snprintf(cfg.disk, sizeof(cfg.disk), "%s", f->path);
	if (machine_new(&cfg, NULL, &f->m) < 0)
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	if (!f)
		return 0;
	machine_free(f->m);
	close(f->fd);
	unlink(f->path);
	free(f);
	return 0;
}

#define REQUIRE_KVM(f) do { if (!(f)) skip(); } while (0)

static uint32_t cfg_rd(struct machine *m, int dev, int off, int size)
{
	uint32_t a = 0x80000000u | (uint32_t)dev << 11 | (uint32_t)(off & 0xfc), v = 0;

	pci_io(m, PCI_PORT_ADDR, 4, true, (uint8_t *)&a);
	pci_io(m, (uint16_t)(PCI_PORT_DATA + (off & 3)), size, false, (uint8_t *)&v);
	return v;
}

static void cfg_wr(struct machine *m, int dev, int off, int size, uint32_t v)
{
	uint32_t a = 0x80000000u | (uint32_t)dev << 11 | (uint32_t)(off & 0xfc);

	pci_io(m, PCI_PORT_ADDR, 4, true, (uint8_t *)&a);
	pci_io(m, (uint16_t)(PCI_PORT_DATA + (off & 3)), size, true, (uint8_t *)&v);
}

static uint64_t bar_rd(struct machine *m, uint32_t off, uint32_t len)
{
	uint64_t v = 0;

	assert_int_equal(pci_mmio(m, BAR + off, (uint8_t *)&v, len, false), 0);
	return v;
}

static void bar_wr(struct machine *m, uint32_t off, uint32_t len, uint64_t v)
{
	assert_int_equal(pci_mmio(m, BAR + off, (uint8_t *)&v, len, true), 0);
}

static uint8_t status(struct machine *m)
{
	return (uint8_t)bar_rd(m, 0x14, 1);
}

static void test_pci_config(void **state)
{
	struct fixture *f = *state;
	struct machine *m = f ? f->m : NULL;
	int ptr, types = 0, msix = 0;

	REQUIRE_KVM(f);

	assert_int_equal(cfg_rd(m, 0, 0x08, 4) >> 24, 0x06);          /* host bridge */
	assert_int_equal(cfg_rd(m, 1, 0, 4), 0x10421af4);
	assert_int_equal(cfg_rd(m, 1, 2, 2), 0x1042);                  /* 16-bit at 0xCFE */
	assert_int_equal(cfg_rd(m, 1, 0x08, 1), 1);                    /* revision: modern */
	assert_int_equal(cfg_rd(m, 5, 0, 4), 0xffffffff);              /* empty slot */
	assert_int_equal(cfg_rd(m, 1, 0x10, 4), 0xe0000004);           /* 64-bit memory BAR */
	assert_int_equal(cfg_rd(m, 1, 0x14, 4), 0);
	/* Sizing as a driver does it: decoding off, all-ones, read, restore. */
	cfg_wr(m, 1, 0x04, 2, 0);
	assert_int_equal(pci_mmio(m, BAR, (uint8_t[8]){ 0 }, 4, false), -ENOENT);
	cfg_wr(m, 1, 0x10, 4, 0xffffffff);
	cfg_wr(m, 1, 0x14, 4, 0xffffffff);
	assert_int_equal(cfg_rd(m, 1, 0x10, 4), 0xffff8004);
	assert_int_equal(cfg_rd(m, 1, 0x14, 4), 0xffffffff);
	assert_int_equal(~(((uint64_t)cfg_rd(m, 1, 0x14, 4) << 32 | (cfg_rd(m, 1, 0x10, 4) & ~0xfu))) + 1,
			 VIRTIO_BAR_BYTES);
	/* Moved elsewhere, then back. */
	cfg_wr(m, 1, 0x10, 4, 0xd0000000);
	cfg_wr(m, 1, 0x14, 4, 0);
	cfg_wr(m, 1, 0x04, 2, 6);
	assert_int_equal(pci_mmio(m, BAR, (uint8_t[8]){ 0 }, 4, false), -ENOENT);
	assert_int_equal(pci_mmio(m, 0xd0000000 + 0x12, (uint8_t[8]){ 0 }, 2, false), 0);
	cfg_wr(m, 1, 0x10, 4, (uint32_t)BAR);
	assert_int_equal(bar_rd(m, 0x12, 2), 1);                        /* num_queues */
	/* Read-only identity. */
	cfg_wr(m, 1, 0, 4, 0x12345678);
	assert_int_equal(cfg_rd(m, 1, 0, 4), 0x10421af4);
	/* The capability list: common, notify, ISR, device, PCI_CFG; MSI-X. */
	for (ptr = (int)cfg_rd(m, 1, 0x34, 1); ptr; ptr = (int)cfg_rd(m, 1, ptr + 1, 1)) {
		if (cfg_rd(m, 1, ptr, 1) == 0x09)
			types |= 1 << cfg_rd(m, 1, ptr + 3, 1);
		else if (cfg_rd(m, 1, ptr, 1) == 0x11)
			msix = (int)(cfg_rd(m, 1, ptr + 2, 2) & 0x7ff) + 1;
	}
	assert_int_equal(types, 0x3e);
	assert_int_equal(msix, VIRTIO_MSIX_VECTORS);
	/* The PCI_CFG window reads the BAR: num_queues through config space. */
	cfg_wr(m, 1, VIRTIO_CAP_PCI_CFG + 8, 4, 0x12);
	cfg_wr(m, 1, VIRTIO_CAP_PCI_CFG + 12, 4, 2);
	assert_int_equal(cfg_rd(m, 1, VIRTIO_PCI_CFG_DATA, 4) & 0xffff, 1);
}

/* Reset, ACK, DRIVER, driver features f, FEATURES_OK: the status read back. */
static uint8_t negotiate(struct machine *m, uint64_t f)
{
	bar_wr(m, 0x14, 1, 0);
	assert_int_equal(status(m), 0);
	bar_wr(m, 0x14, 1, VIRTIO_S_ACKNOWLEDGE | VIRTIO_S_DRIVER);
	bar_wr(m, 0x08, 4, 0);
	bar_wr(m, 0x0c, 4, (uint32_t)f);
	bar_wr(m, 0x08, 4, 1);
	bar_wr(m, 0x0c, 4, (uint32_t)(f >> 32));
	bar_wr(m, 0x14, 1, VIRTIO_S_ACKNOWLEDGE | VIRTIO_S_DRIVER | VIRTIO_S_FEATURES_OK);
	return status(m);
}

static void test_feature_negotiation(void **state)
{
	struct fixture *f = *state;
	struct machine *m = f ? f->m : NULL;
	uint64_t offered;

	REQUIRE_KVM(f);

	bar_wr(m, 0x00, 4, 0);
	offered = bar_rd(m, 0x04, 4);
	bar_wr(m, 0x00, 4, 1);
	offered |= bar_rd(m, 0x04, 4) << 32;
	assert_true(offered & VIRTIO_F_VERSION_1);
	assert_true(offered & (1ull << 9));                        /* FLUSH */
	/* A legacy driver (no VERSION_1) and an unoffered bit are refused. */
	assert_false(negotiate(m, 1ull << 9) & VIRTIO_S_FEATURES_OK);
	assert_false(negotiate(m, VIRTIO_F_VERSION_1 | (1ull << 5)) & VIRTIO_S_FEATURES_OK);
	/* DRIVER_OK without FEATURES_OK does not take. */
	bar_wr(m, 0x14, 1, VIRTIO_S_ACKNOWLEDGE | VIRTIO_S_DRIVER | VIRTIO_S_DRIVER_OK);
	assert_false(status(m) & VIRTIO_S_DRIVER_OK);
	/* A subset with VERSION_1 is accepted and then fixed. */
	assert_true(negotiate(m, VIRTIO_F_VERSION_1 | (1ull << 9)) & VIRTIO_S_FEATURES_OK);
	bar_wr(m, 0x08, 4, 0);
	bar_wr(m, 0x0c, 4, 0);
	assert_int_equal(bar_rd(m, 0x0c, 4), 1u << 9);
	assert_int_equal(m->pci.blk.driver_features, VIRTIO_F_VERSION_1 | (1ull << 9));
	/* Reset clears it all. */
	bar_wr(m, 0x14, 1, 0);
	assert_int_equal(status(m), 0);
	assert_int_equal(m->pci.blk.driver_features, 0);
	assert_int_equal(bar_rd(m, 0x18, 2), VIRTQ_MAX_SIZE);
	/* Queue sizes: powers of 2 up to the maximum. */
	bar_wr(m, 0x16, 2, 0);
	bar_wr(m, 0x18, 2, 12);
	assert_int_equal(bar_rd(m, 0x18, 2), VIRTQ_MAX_SIZE);
	bar_wr(m, 0x18, 2, 512);
	assert_int_equal(bar_rd(m, 0x18, 2), VIRTQ_MAX_SIZE);
	bar_wr(m, 0x18, 2, 16);
	assert_int_equal(bar_rd(m, 0x18, 2), 16);
}

/* Queue 0 of QS entries at RING_GPA, enabled, DRIVER_OK. */
static void queue_up(struct machine *m)
{
	assert_true(negotiate(m, VIRTIO_F_VERSION_1 | (1ull << 9)) & VIRTIO_S_FEATURES_OK);
	memset(m->ram + RING_GPA, 0, 0x4000);
	bar_wr(m, 0x16, 2, 0);
	bar_wr(m, 0x18, 2, QS);
	bar_wr(m, 0x20, 4, RING_GPA);
	bar_wr(m, 0x24, 4, 0);
	bar_wr(m, 0x28, 4, RING_GPA + 0x1000);
	bar_wr(m, 0x2c, 4, 0);
	bar_wr(m, 0x30, 8, RING_GPA + 0x2000);   /* a 64-bit field whole */
	assert_int_equal(bar_rd(m, 0x30, 8), RING_GPA + 0x2000);
	assert_int_equal(bar_rd(m, 0x34, 4), 0);
	bar_wr(m, 0x1c, 2, 1);
	bar_wr(m, 0x14, 1, VIRTIO_S_ACKNOWLEDGE | VIRTIO_S_DRIVER | VIRTIO_S_FEATURES_OK |
	       VIRTIO_S_DRIVER_OK);
	assert_true(status(m) & VIRTIO_S_DRIVER_OK);
}

static void set_desc(struct machine *m, int i, uint64_t addr, uint32_t len, uint16_t flags,
		     uint16_t next)
{
	uint8_t *d = m->ram + RING_GPA + 16 * i;

	memcpy(d, &addr, 8);
	memcpy(d + 8, &len, 4);
	memcpy(d + 12, &flags, 2);
	memcpy(d + 14, &next, 2);
}

/* Makes head available (avail idx n after it) and notifies queue 0. */
static void kick(struct machine *m, uint16_t head, uint16_t n)
{
	uint8_t *avail = m->ram + RING_GPA + 0x1000;

	memcpy(avail + 4 + 2 * ((n - 1) % QS), &head, 2);
	memcpy(avail + 2, &n, 2);
	bar_wr(m, VIRTIO_NOTIFY_OFF, 2, 0);
}

static uint16_t used_idx(struct machine *m)
{
	uint16_t v;

	memcpy(&v, m->ram + RING_GPA + 0x2000 + 2, 2);
	return v;
}

/* A 512-byte write of sector 3: header, data, status. */
static void good_write(struct machine *m, uint16_t n)
{
	uint8_t hdr[16] = { 1 };   /* VIRTIO_BLK_T_OUT */
	uint64_t sector = 3;

	memcpy(hdr + 8, &sector, 8);
	memcpy(m->ram + RING_GPA + 0x3000, hdr, 16);
	memset(m->ram + RING_GPA + 0x3200, 0xa5, 512);
	m->ram[RING_GPA + 0x3100] = 0xff;
	set_desc(m, 0, RING_GPA + 0x3000, 16, VIRTQ_DESC_F_NEXT, 1);
	set_desc(m, 1, RING_GPA + 0x3200, 512, VIRTQ_DESC_F_NEXT, 2);
	set_desc(m, 2, RING_GPA + 0x3100, 1, VIRTQ_DESC_F_WRITE, 0);
	kick(m, 0, n);
}

static void test_requests_and_bad_chains(void **state)
{
	struct fixture *f = *state;
	struct machine *m = f ? f->m : NULL;
	uint8_t sector[512];

	REQUIRE_KVM(f);

	/* A good write lands in the image, status 0, used entry written. */
	queue_up(m);
	good_write(m, 1);
	assert_int_equal(used_idx(m), 1);
	assert_int_equal(m->ram[RING_GPA + 0x3100], 0);
	assert_int_equal(pread(f->fd, sector, 512, 3 * 512), 512);
	assert_int_equal(sector[0], 0xa5);
	assert_int_equal(sector[511], 0xa5);
	/* Past the end of the disk: IOERR, not NEEDS_RESET. */
	memcpy(m->ram + RING_GPA + 0x3008, &(uint64_t){ 1 << 20 }, 8);
	set_desc(m, 0, RING_GPA + 0x3000, 16, VIRTQ_DESC_F_NEXT, 1);
	kick(m, 0, 2);
	assert_int_equal(used_idx(m), 2);
	assert_int_equal(m->ram[RING_GPA + 0x3100], 1);
	assert_false(status(m) & VIRTIO_S_NEEDS_RESET);

	/* A buffer outside RAM. */
	good_write(m, 3);
	assert_int_equal(used_idx(m), 3);
	set_desc(m, 1, 0x7f0000000000ull, 512, VIRTQ_DESC_F_NEXT, 2);
	kick(m, 0, 4);
	assert_true(status(m) & VIRTIO_S_NEEDS_RESET);
	assert_int_equal(used_idx(m), 3);
	/* Further notifications are ignored until a reset. */
	good_write(m, 5);
	assert_int_equal(used_idx(m), 3);

	/* A buffer straddling the end of low RAM. */
	queue_up(m);
	set_desc(m, 0, MEM - 8, 16, 0, 0);
	kick(m, 0, 1);
	assert_true(status(m) & VIRTIO_S_NEEDS_RESET);

	/* A chain that loops. */
	queue_up(m);
	good_write(m, 1);
	set_desc(m, 0, RING_GPA + 0x3000, 16, VIRTQ_DESC_F_NEXT, 0);
	kick(m, 0, 2);
	assert_true(status(m) & VIRTIO_S_NEEDS_RESET);
	assert_int_equal(used_idx(m), 1);

	/* A next index beyond the table; an indirect descriptor; a readable
	 * descriptor after a writable one; no status byte; an avail index
	 * that ran ahead of the queue. */
	for (int k = 0; k < 5; k++) {
		queue_up(m);
		good_write(m, 1);
		assert_int_equal(used_idx(m), 1);
		switch (k) {
		case 0: set_desc(m, 1, RING_GPA + 0x3200, 512, VIRTQ_DESC_F_NEXT, QS); break;
		case 1: set_desc(m, 0, RING_GPA + 0x3000, 16, VIRTQ_DESC_F_INDIRECT, 0); break;
		case 2: set_desc(m, 1, RING_GPA + 0x3200, 512, VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 2);
			set_desc(m, 2, RING_GPA + 0x3100, 1, 0, 0); break;
		case 3: set_desc(m, 1, RING_GPA + 0x3200, 512, 0, 0); break;
		default: break;
		}
		kick(m, 0, k == 4 ? 1 + QS + 1 : 2);
		assert_true(status(m) & VIRTIO_S_NEEDS_RESET);
		assert_int_equal(used_idx(m), 1);
	}
	/* Rings outside RAM. */
	assert_true(negotiate(m, VIRTIO_F_VERSION_1) & VIRTIO_S_FEATURES_OK);
	bar_wr(m, 0x18, 2, QS);
	bar_wr(m, 0x20, 4, 0xfffff000);
	bar_wr(m, 0x1c, 2, 1);
	bar_wr(m, 0x14, 1, 0x0f);
	bar_wr(m, VIRTIO_NOTIFY_OFF, 2, 0);
	assert_true(status(m) & VIRTIO_S_NEEDS_RESET);
	/* And after all that the device works. */
	queue_up(m);
	good_write(m, 1);
	assert_int_equal(used_idx(m), 1);
	assert_int_equal(m->ram[RING_GPA + 0x3100], 0);
}

/* Interrupts: a vector past the table reads back as NO_VECTOR; with MSI-X
 * on, a masked entry leaves its pending bit set, unmasking sends it
 * (KVM_SIGNAL_MSI) and clears it; the ISR says why and clears on read. */
static void test_msix_and_isr(void **state)
{
	struct fixture *f = *state;
	struct machine *m = f ? f->m : NULL;

	REQUIRE_KVM(f);

	queue_up(m);
	bar_wr(m, 0x1a, 2, VIRTIO_MSIX_VECTORS);
	assert_int_equal(bar_rd(m, 0x1a, 2), VIRTIO_NO_VECTOR);
	bar_wr(m, 0x10, 2, 1);
	assert_int_equal(bar_rd(m, 0x10, 2), 1);
	bar_wr(m, 0x1a, 2, 0);
	assert_int_equal(bar_rd(m, 0x1a, 2), 0);
	/* MSI-X off: no message, the ISR still says "queue". */
	good_write(m, 1);
	assert_int_equal(bar_rd(m, VIRTIO_ISR_OFF, 1), 1);
	assert_int_equal(bar_rd(m, VIRTIO_ISR_OFF, 1), 0);   /* read-to-clear */
	assert_int_equal(bar_rd(m, VIRTIO_MSIX_PBA_OFF, 8), 0);
	/* MSI-X on, entry 0 masked (its power-on state). */
	cfg_wr(m, 1, VIRTIO_CAP_MSIX + 2, 2, 0x8000);
	assert_int_equal(cfg_rd(m, 1, VIRTIO_CAP_MSIX + 2, 2), 0x8000 | (VIRTIO_MSIX_VECTORS - 1));
	bar_wr(m, VIRTIO_MSIX_TABLE_OFF, 8, 0xfee00000ull);
	bar_wr(m, VIRTIO_MSIX_TABLE_OFF + 8, 4, 0x31);
	assert_int_equal(bar_rd(m, VIRTIO_MSIX_TABLE_OFF + 12, 4), 1);
	good_write(m, 2);
	assert_int_equal(bar_rd(m, VIRTIO_MSIX_PBA_OFF, 8), 1);
	bar_wr(m, VIRTIO_MSIX_TABLE_OFF + 12, 4, 0);        /* unmask: sent */
	assert_int_equal(bar_rd(m, VIRTIO_MSIX_PBA_OFF, 8), 0);
	/* The function mask holds it too. */
	cfg_wr(m, 1, VIRTIO_CAP_MSIX + 2, 2, 0xc000);
	good_write(m, 3);
	assert_int_equal(bar_rd(m, VIRTIO_MSIX_PBA_OFF, 8), 1);
	cfg_wr(m, 1, VIRTIO_CAP_MSIX + 2, 2, 0x8000);
	assert_int_equal(bar_rd(m, VIRTIO_MSIX_PBA_OFF, 8), 0);
	/* A driver that asked for no interrupts gets none. */
	cfg_wr(m, 1, VIRTIO_CAP_MSIX + 2, 2, 0xc000);
	m->ram[RING_GPA + 0x1000] = VIRTQ_AVAIL_F_NO_INTERRUPT;
	bar_rd(m, VIRTIO_ISR_OFF, 1);
	good_write(m, 4);
	assert_int_equal(used_idx(m), 4);
	assert_int_equal(bar_rd(m, VIRTIO_MSIX_PBA_OFF, 8), 0);
	assert_int_equal(bar_rd(m, VIRTIO_ISR_OFF, 1), 0);
}

static void test_state_encoding(void **state)
{
	struct fixture *f = *state;
	struct machine *m = f ? f->m : NULL;
	struct pci_state *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
	uint8_t *buf = malloc(PROTO_PCI_STATE_BYTES + 1);

	REQUIRE_KVM(f);

	assert_non_null(a);
	assert_non_null(b);
	assert_non_null(buf);
	queue_up(m);
	good_write(m, 1);
	bar_wr(m, VIRTIO_MSIX_TABLE_OFF + 16, 8, 0xfee00000ull);
	bar_wr(m, VIRTIO_MSIX_TABLE_OFF + 24, 4, 0x41);
	*a = m->pci;
	assert_int_equal(proto_pci_state_encode(a, buf), PROTO_PCI_STATE_BYTES);
	assert_int_equal(proto_pci_state_decode(buf, PROTO_PCI_STATE_BYTES, b), 0);
	assert_memory_equal(a, b, sizeof(*a));
	assert_int_equal(b->blk.q[0].last_avail, 1);
	assert_int_equal(b->blk.msix[1].data, 0x41);
	/* Short, long. */
	assert_int_equal(proto_pci_state_decode(buf, PROTO_PCI_STATE_BYTES - 1, b), -EBADMSG);
	assert_int_equal(proto_pci_state_decode(buf, 0, b), -EBADMSG);
	assert_int_equal(proto_pci_state_decode(buf, PROTO_PCI_STATE_BYTES + 1, b), -EBADMSG);
	/* Impossible values: a queue larger than the device offers, enabled
	 * with no size, a vector past the table, an ISR with unknown bits. */
	{
		struct pci_state bad;

		bad = *a, bad.blk.q[0].size = VIRTIO_QUEUE_MAX + 1;
		proto_pci_state_encode(&bad, buf);
		assert_int_equal(proto_pci_state_decode(buf, PROTO_PCI_STATE_BYTES, b), -EBADMSG);
		bad = *a, bad.blk.q[0].size = 12;
		proto_pci_state_encode(&bad, buf);
		assert_int_equal(proto_pci_state_decode(buf, PROTO_PCI_STATE_BYTES, b), -EBADMSG);
		bad = *a, bad.blk.q[0].size = 0;
		proto_pci_state_encode(&bad, buf);
		assert_int_equal(proto_pci_state_decode(buf, PROTO_PCI_STATE_BYTES, b), -EBADMSG);
		bad = *a, bad.blk.q[1].msix_vector = VIRTIO_MSIX_VECTORS;
		proto_pci_state_encode(&bad, buf);
		assert_int_equal(proto_pci_state_decode(buf, PROTO_PCI_STATE_BYTES, b), -EBADMSG);
		bad = *a, bad.blk.isr = 4;
		proto_pci_state_encode(&bad, buf);
		assert_int_equal(proto_pci_state_decode(buf, PROTO_PCI_STATE_BYTES, b), -EBADMSG);
	}
	/* Through the machine: the state set into it is what it reports, and
	 * the queue goes on from there. */
	{
		struct machine_state *ms = malloc(sizeof(*ms));

		assert_non_null(ms);
		assert_int_equal(machine_get_state(m, ms), 0);
		bar_wr(m, 0x14, 1, 0);                      /* lose it all */
		assert_int_equal(machine_set_state(m, ms), 0);
		assert_memory_equal(&m->pci, a, sizeof(*a));
		good_write(m, 2);
		assert_int_equal(used_idx(m), 2);
		free(ms);
	}
	free(a);
	free(b);
	free(buf);
}

static void test_bad_disk(void **state)
{
	struct machine_config cfg = { .mem_bytes = MEM, .ncpus = 1, .guest = "counter", .ndisks = 1 };
	struct fixture *f = *state;
	struct machine *m = NULL;

	REQUIRE_KVM(f);
	snprintf(cfg.disk, sizeof(cfg.disk), "/nonexistent/disk.img");
	assert_int_equal(machine_new(&cfg, NULL, &m), -ENOENT);
	cfg.disk[0] = 0;
	assert_int_equal(machine_new(&cfg, NULL, &m), -EINVAL);
	/* Locked by the fixture's machine. */
	snprintf(cfg.disk, sizeof(cfg.disk), "%s", f->path);
	assert_int_equal(machine_new(&cfg, NULL, &m), -EWOULDBLOCK);
	/* No disk: no function in slot 1, and a different config digest. */
	cfg.ndisks = 0;
	assert_int_equal(machine_new(&cfg, NULL, &m), 0);
	assert_int_equal(cfg_rd(m, 1, 0, 4), 0xffffffff);
	assert_int_equal(pci_mmio(m, BAR, (uint8_t[8]){ 0 }, 4, false), -ENOENT);
	assert_true(machine_config_digest(&cfg) != machine_config_digest(&f->m->cfg));
	machine_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_pci_config, setup, teardown),
		cmocka_unit_test_setup_teardown(test_feature_negotiation, setup, teardown),
		cmocka_unit_test_setup_teardown(test_requests_and_bad_chains, setup, teardown),
		cmocka_unit_test_setup_teardown(test_msix_and_isr, setup, teardown),
		cmocka_unit_test_setup_teardown(test_state_encoding, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_disk, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
