/* The I/O thread (machine/ioevent.c) on a real machine with a disk:
 *  - a request made available before a capture and not served (a kick that
 *    reached the eventfd, or none at all) is served when a machine that
 *    loaded that state resumes, and not before (the machine is paused),
 *    with ioeventfd on and with UNDERSTUDY_IOEVENTFD=0;
 *  - at a post-copy destination (RAM registered with userfaultfd) that pass
 *    waits until the fd is closed: no queue is served while a page may be
 *    missing (the fault's server may wait for machine.lock), and the queue
 *    left pending is served once it is closed;
 *  - the same with a notify that exits (no ioeventfd): not served on the
 *    vCPU thread while pages may be missing, served once after;
 *  - a frame for the NIC while pages may be missing is dropped and
 *    counted (its caller places the pages), one after is delivered;
 *  - the notify ioeventfds follow the BAR: assigned at build, gone while
 *    memory decoding is off, back at the moved BAR, none with
 *    UNDERSTUDY_IOEVENTFD=0. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "machine/ioevent.h"
#include "machine/virtio.h"
#include "tests/harness.h"

#define MEM (16ull << 20)
#define BAR 0xe0000000ull       /* the disk's BAR0 after reset */
#define NET_BAR 0xe0008000ull   /* the NIC's */
#define RING_GPA 0x200000ull   /* desc, avail, used, then buffers */
#define QS 8

struct fixture {
	struct machine *m;
	char path[64];
	int fd;
	int ufd;       /* a userfaultfd left open by a failed assertion, or -1 */
};

/* A machine with a disk, or with a NIC and no disk. */
static int make(void **state, const char *ioeventfd, bool nic)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct machine_config cfg = { .mem_bytes = MEM, .ncpus = 1, .guest = "counter",
				      .ndisks = nic ? 0 : 1, .nnets = nic ? 1 : 0 };

	*state = NULL;
	if (!f)
		return -1;
	f->ufd = -1;
	f->fd = -1;
	if (!th_kvm_available()) {
		free(f);
		return 0;   /* each test skips */
	}
	if (!nic) {
		snprintf(f->path, sizeof(f->path), "/tmp/test_ioevent.XXXXXX");
		f->fd = mkstemp(f->path);
		if (f->fd < 0 || ftruncate(f->fd, 1 << 20) < 0)
			return -1;
		snprintf(cfg.disk, sizeof(cfg.disk), "%s", f->path);
	}
	setenv(IOEVENT_ENV, ioeventfd, 1);
	if (machine_new(&cfg, NULL, &f->m) < 0)
		return -1;
	unsetenv(IOEVENT_ENV);
	/* Booted, so that a resume runs a guest (the counter idles on its
	 * console), not a vCPU at the reset vector. */
	if (machine_boot(f->m) < 0)
		return -1;
	*state = f;
	return 0;
}

static int setup_on(void **state)
{
	return make(state, "1", false);
}

static int setup_off(void **state)
{
	return make(state, "0", false);
}

static int setup_nic(void **state)
{
	return make(state, "0", true);
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	if (!f)
		return 0;
	/* First: a vCPU may wait on a page of it, and would never park. */
	machine_uffd_close(f->m, f->ufd);
	machine_free(f->m);
	if (f->fd >= 0) {
		close(f->fd);
		unlink(f->path);
	}
	free(f);
	return 0;
}

/* The function the fixture has: the disk's BAR0, or the NIC's. */
static uint64_t bar_of(struct machine *m)
{
	return m->blk ? BAR : NET_BAR;
}

static void bar_wr(struct machine *m, uint32_t off, uint32_t len, uint64_t v)
{
	assert_int_equal(pci_mmio(m, bar_of(m) + off, (uint8_t *)&v, len, true), 0);
}

static uint8_t bar_rd8(struct machine *m, uint32_t off)
{
	uint8_t v = 0;

	assert_int_equal(pci_mmio(m, bar_of(m) + off, &v, 1, false), 0);
	return v;
}

static void cfg_wr(struct machine *m, int off, uint32_t v)
{
	uint32_t a = 0x80000000u | (uint32_t)PCI_SLOT_BLK << 11 | (uint32_t)off;

	pci_io(m, PCI_PORT_ADDR, 4, true, (uint8_t *)&a);
	pci_io(m, PCI_PORT_DATA, 4, true, (uint8_t *)&v);
}

/* Queue 0 of QS entries at RING_GPA, enabled, DRIVER_OK (VERSION_1). */
static void queue_up(struct machine *m)
{
	uint8_t ok = VIRTIO_S_ACKNOWLEDGE | VIRTIO_S_DRIVER | VIRTIO_S_FEATURES_OK;

	bar_wr(m, 0x14, 1, 0);
	bar_wr(m, 0x14, 1, VIRTIO_S_ACKNOWLEDGE | VIRTIO_S_DRIVER);
	bar_wr(m, 0x08, 4, 1);
	bar_wr(m, 0x0c, 4, 1);       /* VERSION_1 */
	bar_wr(m, 0x14, 1, ok);
	memset(m->ram + RING_GPA, 0, 0x4000);
	bar_wr(m, 0x16, 2, 0);
	bar_wr(m, 0x18, 2, QS);
	bar_wr(m, 0x20, 8, RING_GPA);
	bar_wr(m, 0x28, 8, RING_GPA + 0x1000);
	bar_wr(m, 0x30, 8, RING_GPA + 0x2000);
	bar_wr(m, 0x1c, 2, 1);
	bar_wr(m, 0x14, 1, ok | VIRTIO_S_DRIVER_OK);
	assert_true(bar_rd8(m, 0x14) & VIRTIO_S_DRIVER_OK);
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

/* A 512-byte write of sector 3 made available as avail idx 1, no notify. */
static void write_available(struct machine *m)
{
	uint8_t hdr[16] = { 1 };   /* VIRTIO_BLK_T_OUT */
	uint64_t sector = 3;
	uint16_t head = 0, idx = 1;

	memcpy(hdr + 8, &sector, 8);
	memcpy(m->ram + RING_GPA + 0x3000, hdr, 16);
	memset(m->ram + RING_GPA + 0x3200, 0x5a, 512);
	m->ram[RING_GPA + 0x3100] = 0xff;
	set_desc(m, 0, RING_GPA + 0x3000, 16, VIRTQ_DESC_F_NEXT, 1);
	set_desc(m, 1, RING_GPA + 0x3200, 512, VIRTQ_DESC_F_NEXT, 2);
	set_desc(m, 2, RING_GPA + 0x3100, 1, VIRTQ_DESC_F_WRITE, 0);
	memcpy(m->ram + RING_GPA + 0x1000 + 4, &head, 2);
	__atomic_store_n((uint16_t *)(m->ram + RING_GPA + 0x1000 + 2), idx, __ATOMIC_RELEASE);
}

static uint16_t used_idx(struct machine *m)
{
	return __atomic_load_n((uint16_t *)(m->ram + RING_GPA + 0x2000 + 2), __ATOMIC_ACQUIRE);
}

static void sleep_ms(int ms)
{
	struct timespec ts = { 0, ms * 1000000L };

	nanosleep(&ts, NULL);
}

/* The standby's case: state captured with a request available and not
 * served, loaded, resumed: the request is served then, and not while the
 * machine stays paused. */
static void test_served_at_resume(void **state)
{
	struct fixture *f = *state;
	struct machine_state *ms;
	struct machine *m;
	uint8_t sector[512];
	uint64_t kicks, served;
	int waited = 0;

	if (!f)
		skip();
	m = f->m;
	ms = malloc(sizeof(*ms));
	assert_non_null(ms);
	queue_up(m);
	write_available(m);
	assert_int_equal(machine_get_state(m, ms), 0);
	assert_int_equal(machine_set_state(m, ms), 0);
	free(ms);
	/* Paused: nothing is served, however long. */
	sleep_ms(100);
	assert_int_equal(used_idx(m), 0);
	assert_int_equal(m->ram[RING_GPA + 0x3100], 0xff);
	machine_resume(m);
	while (used_idx(m) != 1 && waited++ < 5000)
		sleep_ms(1);
	machine_pause(m);
	assert_int_equal(used_idx(m), 1);
	assert_int_equal(m->ram[RING_GPA + 0x3100], 0);     /* VIRTIO_BLK_S_OK */
	assert_int_equal(pread(f->fd, sector, 512, 3 * 512), 512);
	assert_int_equal(sector[0], 0x5a);
	assert_int_equal(sector[511], 0x5a);
	ioevent_counts(m, &kicks, &served);
	assert_true(served >= 1);           /* by the I/O thread, not a notify */
	assert_int_equal(kicks, 0);
	/* Served once: the next resume has nothing more to take. */
	machine_resume(m);
	sleep_ms(50);
	machine_pause(m);
	assert_int_equal(used_idx(m), 1);
	assert_int_equal(m->pci.blk.q[0].last_avail, 1);
}

/* The post-copy destination's case: the same loaded state, but resumed
 * with RAM registered with userfaultfd. Nothing is served while it is
 * (every page the request touches is in, so a served request would show);
 * closing it serves the request, once. */
static void test_held_while_pages_missing(void **state)
{
	struct fixture *f = *state;
	struct machine_state *ms;
	struct machine *m;
	int waited = 0, r;

	if (!f)
		skip();
	m = f->m;
	ms = malloc(sizeof(*ms));
	assert_non_null(ms);
	queue_up(m);
	write_available(m);
	assert_int_equal(machine_get_state(m, ms), 0);
	assert_int_equal(machine_set_state(m, ms), 0);
	free(ms);
	if ((r = machine_uffd_open(m, &f->ufd)) < 0) {
		printf("SKIP test_held_while_pages_missing: userfaultfd: %s\n", strerror(-r));
		skip();
	}
	machine_resume(m);
	sleep_ms(200);
	assert_int_equal(used_idx(m), 0);
	assert_int_equal(m->ram[RING_GPA + 0x3100], 0xff);
	machine_uffd_close(m, f->ufd);
	f->ufd = -1;
	while (used_idx(m) != 1 && waited++ < 5000)
		sleep_ms(1);
	machine_pause(m);
	assert_int_equal(used_idx(m), 1);
	assert_int_equal(m->ram[RING_GPA + 0x3100], 0);     /* VIRTIO_BLK_S_OK */
	assert_int_equal(m->pci.blk.q[0].last_avail, 1);
}

/* A notify that exits to a vCPU thread (UNDERSTUDY_IOEVENTFD=0, as the
 * built-in guests run) while RAM is registered with userfaultfd: not
 * served there, with machine.lock held (the page it touches could be
 * missing, and the loop that places it wait for the lock), but left to the
 * I/O thread, which serves it once the fd is closed, and once only
 * however many notifies came meanwhile. */
static void test_exit_held_while_pages_missing(void **state)
{
	struct fixture *f = *state;
	struct machine *m;
	uint64_t served0, served, requests0;
	uint16_t q0 = 0;
	int waited = 0, r;

	if (!f)
		skip();
	m = f->m;
	assert_false(ioevent_active(m));      /* every notify exits */
	queue_up(m);
	write_available(m);
	machine_resume(m);
	ioevent_counts(m, NULL, &served0);
	requests0 = m->blk->dev.requests;
	if ((r = machine_uffd_open(m, &f->ufd)) < 0) {
		printf("SKIP test_exit_held_while_pages_missing: userfaultfd: %s\n", strerror(-r));
		skip();
	}
	/* As the vCPU thread serves its MMIO exit: the bus, under the lock. */
	for (int i = 0; i < 2; i++)
		assert_int_equal(machine_bus_io(m, MACHINE_MMIO, BAR + VIRTIO_NOTIFY_OFF, 2, true,
						(uint8_t *)&q0), 0);
	sleep_ms(200);
	assert_int_equal(used_idx(m), 0);
	assert_int_equal(m->ram[RING_GPA + 0x3100], 0xff);
	ioevent_counts(m, NULL, &served);
	assert_int_equal(m->blk->dev.held_notifies, 2);
	assert_int_equal(served, served0);
	machine_uffd_close(m, f->ufd);
	f->ufd = -1;
	while (used_idx(m) != 1 && waited++ < 5000)
		sleep_ms(1);
	sleep_ms(50);
	machine_pause(m);
	assert_int_equal(used_idx(m), 1);
	assert_int_equal(m->ram[RING_GPA + 0x3100], 0);     /* VIRTIO_BLK_S_OK */
	assert_int_equal(m->blk->dev.requests, requests0 + 1);
	ioevent_counts(m, NULL, &served);
	assert_int_equal(served, served0 + 1);
	/* Held no more: the next notify is served at the exit itself. */
	write_available(m);
	__atomic_store_n((uint16_t *)(m->ram + RING_GPA + 0x1000 + 2), 2, __ATOMIC_RELEASE);
	memset(m->ram + RING_GPA + 0x1000 + 6, 0, 2);
	assert_int_equal(machine_bus_io(m, MACHINE_MMIO, BAR + VIRTIO_NOTIFY_OFF, 2, true,
					(uint8_t *)&q0), 0);
	assert_int_equal(used_idx(m), 2);
}

/* A frame offered to the NIC while RAM is registered with userfaultfd: the
 * caller is the loop that places missing pages, so it is dropped and
 * counted (as a full ring drops it), its receive buffer untouched; one
 * offered after the fd is closed is delivered. */
static void test_rx_dropped_while_pages_missing(void **state)
{
	struct fixture *f = *state;
	struct machine *m;
	uint8_t frame[60], got[60];
	uint32_t buflen = 2048;
	uint16_t head = 0, one = 1, flags = VIRTQ_DESC_F_WRITE;
	uint64_t buf = RING_GPA + 0x3000, dropped0;
	int r;

	if (!f)
		skip();
	m = f->m;
	assert_non_null(m->vnet);
	queue_up(m);                          /* queue 0: receive */
	memset(frame, 0xa5, sizeof(frame));
	memset(m->ram + buf, 0xff, buflen);
	memcpy(m->ram + RING_GPA, &buf, 8);
	memcpy(m->ram + RING_GPA + 8, &buflen, 4);
	memcpy(m->ram + RING_GPA + 12, &flags, 2);
	memcpy(m->ram + RING_GPA + 0x1000 + 4, &head, 2);
	__atomic_store_n((uint16_t *)(m->ram + RING_GPA + 0x1000 + 2), one, __ATOMIC_RELEASE);
	machine_resume(m);
	dropped0 = machine_net_rx_dropped(m);
	if ((r = machine_uffd_open(m, &f->ufd)) < 0) {
		printf("SKIP test_rx_dropped_while_pages_missing: userfaultfd: %s\n", strerror(-r));
		skip();
	}
	assert_int_equal(machine_net_input(m, frame, sizeof(frame)), -EAGAIN);
	assert_int_equal(machine_net_rx_dropped(m), dropped0 + 1);
	assert_int_equal(used_idx(m), 0);
	assert_int_equal(m->ram[buf], 0xff);
	machine_uffd_close(m, f->ufd);
	f->ufd = -1;
	assert_int_equal(machine_net_input(m, frame, sizeof(frame)), 0);
	assert_int_equal(machine_net_rx_dropped(m), dropped0 + 1);
	assert_int_equal(used_idx(m), 1);
	memcpy(got, m->ram + buf + 12, sizeof(got));     /* after the virtio_net_hdr */
	assert_memory_equal(got, frame, sizeof(frame));
	machine_pause(m);
}

/* The notify ioeventfds follow BAR0 and memory decoding. */
static void test_follows_bar(void **state)
{
	struct fixture *f = *state;
	struct machine *m;

	if (!f)
		skip();
	m = f->m;
	if (!ioevent_active(m))
		skip();     /* this KVM refused KVM_IOEVENTFD: the exit path serves (logged) */
	cfg_wr(m, 0x04, 0);                   /* decoding off */
	assert_false(ioevent_active(m));
	cfg_wr(m, 0x10, 0xd0000000u);
	cfg_wr(m, 0x04, 6);                   /* on, at the moved BAR */
	assert_true(ioevent_active(m));
	cfg_wr(m, 0x10, (uint32_t)BAR);
	assert_true(ioevent_active(m));
	queue_up(m);                          /* the transport still answers at BAR */
}

static void test_off_by_env(void **state)
{
	struct fixture *f = *state;

	if (!f)
		skip();
	assert_false(ioevent_active(f->m));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_served_at_resume, setup_on, teardown),
		cmocka_unit_test_setup_teardown(test_follows_bar, setup_on, teardown),
		cmocka_unit_test_setup_teardown(test_held_while_pages_missing, setup_on, teardown),
		cmocka_unit_test_setup_teardown(test_served_at_resume, setup_off, teardown),
		cmocka_unit_test_setup_teardown(test_off_by_env, setup_off, teardown),
		cmocka_unit_test_setup_teardown(test_exit_held_while_pages_missing, setup_off, teardown),
		cmocka_unit_test_setup_teardown(test_rx_dropped_while_pages_missing, setup_nic, teardown),
	};

	if (!th_kvm_available())
		printf("test_ioevent: no usable /dev/kvm, the tests skip\n");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
