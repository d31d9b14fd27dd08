/* PCI configuration space, the virtio-pci transport and virtio-blk, driven
 * from the host side of a real machine (KVM, vCPUs parked) on a temporary
 * raw image: BAR sizing, feature negotiation, a good request, malformed
 * descriptor chains (DEVICE_NEEDS_RESET, never a crash), the state
 * encoding's round trip and its refusal of truncated or impossible state.
 * virtio-net the same way (a machine with --net, no tap: the frames it
 * sends are caught from machine_ops.net_tx): features, queues and their
 * reset, transmit and receive, receive refused during a pause, chains
 * outside RAM, a driver that never kicks, the announce request. */
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
	struct pci_state *a, *b;
	uint8_t *buf;

	REQUIRE_KVM(f);   /* before the allocations: a skip must not leak them */
	a = calloc(1, sizeof(*a));
	b = calloc(1, sizeof(*b));
	buf = malloc(PROTO_PCI_STATE_BYTES + 1);

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

/* ---- virtio-net ------------------------------------------------------------- */

#define NBAR (BAR + VIRTIO_BAR_BYTES)   /* slot 2's BAR: after the disk's */
#define NRING 0x300000ull               /* queue q at NRING + 0x4000 q; buffers at + 0xc000 */
#define NBUF (NRING + 0xc000)

struct net_fixture {
	struct machine *m;
	uint8_t sent[2048];
	size_t sent_len;
	int nsent;
};

static void catch_tx(void *ctx, const uint8_t *frame, size_t len)
{
	struct net_fixture *f = ctx;

	memcpy(f->sent, frame, len < sizeof(f->sent) ? len : sizeof(f->sent));
	f->sent_len = len;
	f->nsent++;
}

static int net_setup(void **state)
{
	struct net_fixture *f = calloc(1, sizeof(*f));
	struct machine_config cfg = { .mem_bytes = MEM, .ncpus = 1, .guest = "counter", .nnets = 1 };
	struct machine_ops ops = { .net_tx = catch_tx };

	*state = NULL;
	if (!f)
		return -1;
	if (!th_kvm_available()) {
		free(f);
		return 0;
	}
	ops.ctx = f;
	snprintf(cfg.net_tap, sizeof(cfg.net_tap), "unused");
	if (machine_new(&cfg, &ops, &f->m) < 0)
		return -1;
	/* The vCPUs run (the guest idles on the counter's console), so
	 * machine_net_input takes frames, as it does in an agent. Booted
	 * first: a vCPU never set up starts at the reset vector, in real
	 * mode, which this KVM cannot run (an emulation failure that stops
	 * the machine at a random moment of the test). */
	if (machine_boot(f->m) < 0) {
		machine_free(f->m);
		free(f);
		return -1;
	}
	machine_resume(f->m);
	*state = f;
	return 0;
}

static int net_teardown(void **state)
{
	struct net_fixture *f = *state;

	if (!f)
		return 0;
	machine_free(f->m);
	free(f);
	return 0;
}

static uint64_t nbar_rd(struct machine *m, uint32_t off, uint32_t len)
{
	uint64_t v = 0;

	assert_int_equal(pci_mmio(m, NBAR + off, (uint8_t *)&v, len, false), 0);
	return v;
}

static void nbar_wr(struct machine *m, uint32_t off, uint32_t len, uint64_t v)
{
	assert_int_equal(pci_mmio(m, NBAR + off, (uint8_t *)&v, len, true), 0);
}

#define NET_FEATURES (VIRTIO_F_VERSION_1 | (1ull << 5) | (1ull << 16) | (1ull << 17) | (1ull << 21))

static uint8_t net_negotiate(struct machine *m, uint64_t f)
{
	nbar_wr(m, 0x14, 1, 0);
	nbar_wr(m, 0x14, 1, VIRTIO_S_ACKNOWLEDGE | VIRTIO_S_DRIVER);
	nbar_wr(m, 0x08, 4, 0);
	nbar_wr(m, 0x0c, 4, (uint32_t)f);
	nbar_wr(m, 0x08, 4, 1);
	nbar_wr(m, 0x0c, 4, (uint32_t)(f >> 32));
	nbar_wr(m, 0x14, 1, VIRTIO_S_ACKNOWLEDGE | VIRTIO_S_DRIVER | VIRTIO_S_FEATURES_OK);
	return (uint8_t)nbar_rd(m, 0x14, 1);
}

static uint8_t *qmem(struct machine *m, int q, uint32_t off)
{
	return m->ram + NRING + 0x4000ull * q + off;
}

/* Features f, the three queues of QS entries, DRIVER_OK. */
static void net_up(struct machine *m, uint64_t f)
{
	assert_true(net_negotiate(m, f) & VIRTIO_S_FEATURES_OK);
	memset(m->ram + NRING, 0, 0xc000);
	for (int q = 0; q < 3; q++) {
		nbar_wr(m, 0x16, 2, (uint64_t)q);
		nbar_wr(m, 0x18, 2, QS);
		nbar_wr(m, 0x20, 8, NRING + 0x4000ull * q);
		nbar_wr(m, 0x28, 8, NRING + 0x4000ull * q + 0x1000);
		nbar_wr(m, 0x30, 8, NRING + 0x4000ull * q + 0x2000);
		nbar_wr(m, 0x1c, 2, 1);
	}
	nbar_wr(m, 0x14, 1, 0x0f);
	assert_int_equal(nbar_rd(m, 0x14, 1), 0x0f);
}

static void nset_desc(struct machine *m, int q, int i, uint64_t addr, uint32_t len, uint16_t flags,
		      uint16_t next)
{
	uint8_t *d = qmem(m, q, 16 * (uint32_t)i);

	memcpy(d, &addr, 8);
	memcpy(d + 8, &len, 4);
	memcpy(d + 12, &flags, 2);
	memcpy(d + 14, &next, 2);
}

/* head made available as the n-th entry of queue q; notified when kick. */
static void nkick(struct machine *m, int q, uint16_t head, uint16_t n, bool kick)
{
	memcpy(qmem(m, q, 0x1000 + 4 + 2 * ((n - 1) % QS)), &head, 2);
	memcpy(qmem(m, q, 0x1000 + 2), &n, 2);
	if (kick)
		nbar_wr(m, VIRTIO_NOTIFY_OFF + VIRTIO_NOTIFY_MULT * (uint32_t)q, 2, (uint64_t)q);
}

static uint16_t nused(struct machine *m, int q)
{
	uint16_t v;

	memcpy(&v, qmem(m, q, 0x2002), 2);
	return v;
}

static const uint8_t frame60[60] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x08, 0x06, 0x42 };

static void test_net_features(void **state)
{
	struct net_fixture *f = *state;
	struct machine *m = f ? f->m : NULL;
	struct machine_config other;
	uint8_t mac[6], cfgmac[6];
	uint64_t offered;

	REQUIRE_KVM(f);
	assert_int_equal(cfg_rd(m, 2, 0, 4), 0x10411af4);
	assert_int_equal(cfg_rd(m, 2, 0x08, 4) >> 24, 0x02);            /* network controller */
	assert_int_equal(cfg_rd(m, 1, 0, 4), 0xffffffff);                /* no disk */
	assert_int_equal(cfg_rd(m, 2, 0x10, 4), (uint32_t)NBAR | 4);
	assert_int_equal(nbar_rd(m, 0x12, 2), 3);                        /* rx, tx, control */
	nbar_wr(m, 0x00, 4, 0);
	offered = nbar_rd(m, 0x04, 4);
	nbar_wr(m, 0x00, 4, 1);
	offered |= nbar_rd(m, 0x04, 4) << 32;
	/* Exactly these: no checksum (bits 0, 1) or segmentation offload. */
	assert_int_equal(offered, NET_FEATURES);
	assert_false(net_negotiate(m, VIRTIO_F_VERSION_1 | 1) & VIRTIO_S_FEATURES_OK);
	assert_false(net_negotiate(m, VIRTIO_F_VERSION_1 | (1ull << 11)) & VIRTIO_S_FEATURES_OK);
	assert_false(net_negotiate(m, 1ull << 5) & VIRTIO_S_FEATURES_OK);   /* legacy */
	assert_true(net_negotiate(m, NET_FEATURES) & VIRTIO_S_FEATURES_OK);
	/* The MAC in the device configuration, derived from the configuration. */
	for (int i = 0; i < 6; i++)
		cfgmac[i] = (uint8_t)nbar_rd(m, VIRTIO_DEVCFG_OFF + (uint32_t)i, 1);
	machine_net_mac(&m->cfg, mac);
	assert_memory_equal(cfgmac, mac, 6);
	assert_int_equal(mac[0], 0x52);
	assert_int_equal(nbar_rd(m, VIRTIO_DEVCFG_OFF + 6, 2), 1);    /* LINK_UP, no ANNOUNCE */
	other = m->cfg;
	snprintf(other.net_tap, sizeof(other.net_tap), "elsewhere");   /* another host's tap */
	machine_net_mac(&other, cfgmac);
	assert_memory_equal(cfgmac, mac, 6);
	assert_int_equal(machine_config_digest(&other), machine_config_digest(&m->cfg));
	memcpy(other.net_mac, (uint8_t[6]){ 2, 1, 2, 3, 4, 5 }, 6);
	machine_net_mac(&other, cfgmac);
	assert_memory_equal(cfgmac, ((uint8_t[6]){ 2, 1, 2, 3, 4, 5 }), 6);
	assert_true(machine_config_digest(&other) != machine_config_digest(&m->cfg));
	other.nnets = 0;
	assert_true(machine_config_digest(&other) != machine_config_digest(&m->cfg));
}

static void test_net_tx_rx(void **state)
{
	struct net_fixture *f = *state;
	struct machine *m = f ? f->m : NULL;
	uint8_t hdr[12] = { 0 }, got[12 + 60];
	uint32_t used_len;

	REQUIRE_KVM(f);
	/* Before DRIVER_OK nothing is taken. */
	assert_int_equal(machine_net_input(m, frame60, 60), -ENODEV);
	net_up(m, NET_FEATURES);
	/* Transmit: header then frame in two descriptors. */
	memcpy(m->ram + NBUF, hdr, 12);
	memcpy(m->ram + NBUF + 0x100, frame60, 60);
	nset_desc(m, 1, 0, NBUF, 12, VIRTQ_DESC_F_NEXT, 1);
	nset_desc(m, 1, 1, NBUF + 0x100, 60, 0, 0);
	nkick(m, 1, 0, 1, true);
	assert_int_equal(nused(m, 1), 1);
	assert_int_equal(f->nsent, 1);
	assert_int_equal(f->sent_len, 60);
	assert_memory_equal(f->sent, frame60, 60);
	/* A runt (no Ethernet header) is completed and not sent. */
	nset_desc(m, 1, 1, NBUF + 0x100, 8, 0, 0);
	nkick(m, 1, 0, 2, true);
	assert_int_equal(nused(m, 1), 2);
	assert_int_equal(f->nsent, 1);
	/* Receive: no buffer yet. */
	assert_int_equal(machine_net_input(m, frame60, 60), -ENOBUFS);
	/* A buffer too small for header + frame stays available. */
	nset_desc(m, 0, 0, NBUF + 0x1000, 40, VIRTQ_DESC_F_WRITE, 0);
	nkick(m, 0, 0, 1, false);
	assert_int_equal(machine_net_input(m, frame60, 60), -EMSGSIZE);
	assert_int_equal(nused(m, 0), 0);
	/* A big enough one (no kick needed: the device takes buffers when a
	 * frame comes). */
	nset_desc(m, 0, 0, NBUF + 0x1000, 2048, VIRTQ_DESC_F_WRITE, 0);
	nbar_rd(m, VIRTIO_ISR_OFF, 1);
	{
		uint64_t *bm = calloc(machine_bitmap_words(m), 8);

		assert_non_null(bm);
		machine_pause(m);
		assert_int_equal(machine_harvest_dirty(m, bm), 0);
		/* Never during a pause: nothing written. */
		assert_int_equal(machine_net_input(m, frame60, 60), -EAGAIN);
		assert_int_equal(nused(m, 0), 0);
		machine_resume(m);
		assert_int_equal(machine_net_input(m, frame60, 60), 0);
		machine_pause(m);
		assert_int_equal(machine_harvest_dirty(m, bm), 0);
		/* The buffer's page and the used ring's are in the dirty set. */
		assert_true(bm[(NBUF + 0x1000) / 4096 / 64] >> ((NBUF + 0x1000) / 4096 % 64) & 1);
		assert_true(bm[(NRING + 0x2000) / 4096 / 64] >> ((NRING + 0x2000) / 4096 % 64) & 1);
		machine_resume(m);
		free(bm);
	}
	assert_int_equal(nused(m, 0), 1);
	memcpy(&used_len, qmem(m, 0, 0x2008), 4);
	assert_int_equal(used_len, 12 + 60);
	memcpy(got, m->ram + NBUF + 0x1000, sizeof(got));
	assert_int_equal(got[10], 1);                       /* num_buffers */
	assert_int_equal(got[0], 0);                        /* no flags, no GSO */
	assert_memory_equal(got + 12, frame60, 60);
	assert_int_equal(nbar_rd(m, VIRTIO_ISR_OFF, 1), 1);
	assert_true(pci_isr_pending(m) == false);
	/* Queue reset: status 0 disables the queues; input is refused. */
	nbar_wr(m, 0x14, 1, 0);
	nbar_wr(m, 0x16, 2, 0);
	assert_int_equal(nbar_rd(m, 0x1c, 2), 0);
	assert_int_equal(nbar_rd(m, 0x18, 2), VIRTQ_MAX_SIZE);
	assert_int_equal(machine_net_input(m, frame60, 60), -ENODEV);
	/* A frame longer than Ethernet's is refused at the door. */
	net_up(m, NET_FEATURES);
	assert_int_equal(machine_net_input(m, m->ram, 1515), -EMSGSIZE);
}

static void test_net_bad_chains_and_no_kick(void **state)
{
	struct net_fixture *f = *state;
	struct machine *m = f ? f->m : NULL;

	REQUIRE_KVM(f);
	/* A guest that never kicks: frames made available are not sent, and
	 * nothing else happens (no thread polls its rings). */
	net_up(m, NET_FEATURES);
	nset_desc(m, 1, 0, NBUF, 72, 0, 0);
	nkick(m, 1, 0, 1, false);
	machine_pause(m);
	machine_resume(m);
	assert_int_equal(f->nsent, 0);
	assert_int_equal(nused(m, 1), 0);
	/* A transmit buffer outside RAM: the device needs a reset, the VM runs on. */
	nset_desc(m, 1, 0, 0x7f0000000000ull, 72, 0, 0);
	nbar_wr(m, VIRTIO_NOTIFY_OFF + VIRTIO_NOTIFY_MULT, 2, 1);
	assert_true(nbar_rd(m, 0x14, 1) & VIRTIO_S_NEEDS_RESET);
	assert_int_equal(f->nsent, 0);
	assert_int_equal(machine_net_input(m, frame60, 60), -EIO);
	assert_false(machine_stopped(m, NULL));
	/* A header shorter than virtio_net_hdr. */
	net_up(m, NET_FEATURES);
	nset_desc(m, 1, 0, NBUF, 10, 0, 0);
	nkick(m, 1, 0, 1, true);
	assert_true(nbar_rd(m, 0x14, 1) & VIRTIO_S_NEEDS_RESET);
	/* A receive buffer the device may not write; one straddling RAM's end;
	 * a chain that loops. */
	for (int k = 0; k < 3; k++) {
		net_up(m, NET_FEATURES);
		if (k == 0)
			nset_desc(m, 0, 0, NBUF, 2048, 0, 0);
		else if (k == 1)
			nset_desc(m, 0, 0, MEM - 100, 2048, VIRTQ_DESC_F_WRITE, 0);
		else
			nset_desc(m, 0, 0, NBUF, 2048, VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 0);
		nkick(m, 0, 0, 1, true);
		assert_int_equal(machine_net_input(m, frame60, 60), -EIO);
		assert_true(nbar_rd(m, 0x14, 1) & VIRTIO_S_NEEDS_RESET);
		assert_int_equal(nused(m, 0), 0);
	}
	/* After a reset it works again. */
	net_up(m, NET_FEATURES);
	nset_desc(m, 0, 0, NBUF, 2048, VIRTQ_DESC_F_WRITE, 0);
	nkick(m, 0, 0, 1, false);
	assert_int_equal(machine_net_input(m, frame60, 60), 0);
	assert_false(machine_stopped(m, NULL));
}

/* Control command class/cmd on queue 2 (the n-th); returns the ack byte. */
static uint8_t net_ctrl(struct machine *m, uint8_t class, uint8_t cmd, uint16_t n)
{
	m->ram[NBUF] = class;
	m->ram[NBUF + 1] = cmd;
	m->ram[NBUF + 16] = 0xff;
	nset_desc(m, 2, 0, NBUF, 2, VIRTQ_DESC_F_NEXT, 1);
	nset_desc(m, 2, 1, NBUF + 16, 1, VIRTQ_DESC_F_WRITE, 0);
	nkick(m, 2, 0, n, true);
	assert_int_equal(nused(m, 2), n);
	return m->ram[NBUF + 16];
}

static void test_net_announce(void **state)
{
	struct net_fixture *f = *state;
	struct machine *m = f ? f->m : NULL;
	struct pci_state *a, *b;
	uint8_t *buf, gen;

	REQUIRE_KVM(f);   /* before the allocations: a skip must not leak them */
	a = calloc(1, sizeof(*a));
	b = calloc(1, sizeof(*b));
	buf = malloc(PROTO_PCI_STATE_BYTES);
	assert_non_null(buf);
	/* Not negotiated: the device cannot ask. */
	net_up(m, NET_FEATURES & ~(1ull << 21));
	assert_false(machine_net_announce(m));
	assert_int_equal(nbar_rd(m, VIRTIO_DEVCFG_OFF + 6, 2), 1);
	assert_int_equal(net_ctrl(m, 3, 0, 1), 1);              /* ANNOUNCE_ACK: error */
	/* Negotiated: ANNOUNCE set, a new generation, a configuration interrupt. */
	net_up(m, NET_FEATURES);
	gen = (uint8_t)nbar_rd(m, 0x15, 1);
	nbar_rd(m, VIRTIO_ISR_OFF, 1);
	assert_true(machine_net_announce(m));
	assert_int_equal(nbar_rd(m, VIRTIO_DEVCFG_OFF + 6, 2), 3);
	assert_int_equal((uint8_t)nbar_rd(m, 0x15, 1), (uint8_t)(gen + 1));
	/* In the checkpointed state, and back. */
	*a = m->pci;
	assert_int_equal(proto_pci_state_encode(a, buf), PROTO_PCI_STATE_BYTES);
	assert_int_equal(proto_pci_state_decode(buf, PROTO_PCI_STATE_BYTES, b), 0);
	assert_memory_equal(a, b, sizeof(*a));
	assert_int_equal(b->net.dev_flags, 1);
	assert_int_equal(b->net.q[2].size, QS);
	b->net.dev_flags = 2;
	proto_pci_state_encode(b, buf);
	assert_int_equal(proto_pci_state_decode(buf, PROTO_PCI_STATE_BYTES, b), -EBADMSG);
	assert_int_equal(nbar_rd(m, VIRTIO_ISR_OFF, 1), 2);
	/* An unknown command is refused; ANNOUNCE_ACK clears the request. */
	assert_int_equal(net_ctrl(m, 1, 0, 1), 1);
	assert_int_equal(nbar_rd(m, VIRTIO_DEVCFG_OFF + 6, 2), 3);
	assert_int_equal(net_ctrl(m, 3, 0, 2), 0);
	assert_int_equal(nbar_rd(m, VIRTIO_DEVCFG_OFF + 6, 2), 1);
	/* A reset forgets a request. */
	assert_true(machine_net_announce(m));
	nbar_wr(m, 0x14, 1, 0);
	assert_int_equal(m->pci.net.dev_flags, 0);
	free(a);
	free(b);
	free(buf);
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
		cmocka_unit_test_setup_teardown(test_net_features, net_setup, net_teardown),
		cmocka_unit_test_setup_teardown(test_net_tx_rx, net_setup, net_teardown),
		cmocka_unit_test_setup_teardown(test_net_bad_chains_and_no_kick, net_setup, net_teardown),
		cmocka_unit_test_setup_teardown(test_net_announce, net_setup, net_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
