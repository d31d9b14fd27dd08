/* The I/O thread (machine/ioevent.c) on a real machine with a disk:
 *  - a request made available before a capture and not served (a kick that
 *    reached the eventfd, or none at all) is served when a machine that
 *    loaded that state resumes, and not before (the machine is paused),
 *    with ioeventfd on and with UNDERSTUDY_IOEVENTFD=0;
 *  - at a post-copy destination (RAM registered with userfaultfd) that pass
 *    waits until the fd is closed: no queue is served while a page may be
 *    missing (the fault's server may wait for machine.lock), and the queue
 *    left pending is served once it is closed;
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
#define BAR 0xe0000000ull
#define RING_GPA 0x200000ull   /* desc, avail, used, then buffers */
#define QS 8

struct fixture {
	struct machine *m;
	char path[64];
	int fd;
	int ufd;       /* a userfaultfd left open by a failed assertion, or -1 */
};

static int make(void **state, const char *ioeventfd)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct machine_config cfg = { .mem_bytes = MEM, .ncpus = 1, .guest = "counter", .ndisks = 1 };

	*state = NULL;
	if (!f)
		return -1;
	f->ufd = -1;
	if (!th_kvm_available()) {
		free(f);
		return 0;   /* each test skips */
	}
	snprintf(f->path, sizeof(f->path), "/tmp/test_ioevent.XXXXXX");
	f->fd = mkstemp(f->path);
	if (f->fd < 0 || ftruncate(f->fd, 1 << 20) < 0)
		return -1;
	snprintf(cfg.disk, sizeof(cfg.disk), "%s", f->path);
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
	return make(state, "1");
}

static int setup_off(void **state)
{
	return make(state, "0");
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	if (!f)
		return 0;
	/* First: a vCPU may wait on a page of it, and would never park. */
	machine_uffd_close(f->m, f->ufd);
	machine_free(f->m);
	close(f->fd);
	unlink(f->path);
	free(f);
	return 0;
}

static void bar_wr(struct machine *m, uint32_t off, uint32_t len, uint64_t v)
{
	assert_int_equal(pci_mmio(m, BAR + off, (uint8_t *)&v, len, true), 0);
}

static uint8_t bar_rd8(struct machine *m, uint32_t off)
{
	uint8_t v = 0;

	assert_int_equal(pci_mmio(m, BAR + off, &v, 1, false), 0);
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
	};

	if (!th_kvm_available())
		printf("test_ioevent: no usable /dev/kvm, the tests skip\n");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
