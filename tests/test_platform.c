/* The platform devices' state (machine/platform.c) in a checkpoint, no KVM
 * needed:
 *  - the RTC: the guest sets the time (SET in register B, or one register),
 *    the registers hold still while SET is on, binary and 12-hour modes;
 *    the offset it set travels with the state, so the guest's wall clock
 *    reads on from the same time on the machine the state goes to;
 *  - the "platform" section: fixed little-endian layout, round trip, every
 *    other length and every impossible value refused (-EBADMSG);
 *  - in a state blob: decoded as sent; a blob of a build before the section
 *    (no "platform") reads as the power-on state; a platform section that
 *    is malformed, cut, repeated or of an unknown version is refused;
 *  - in a snapshot file: written and read back whole; a version 1 file of
 *    an older build (tests/fuzz/corpus/snapshot/ok-v1-diff-2pages) still
 *    restores, with the devices at power-on;
 *  - on the bus (machine/bus.h): a --kernel machine's devices claim their
 *    ports (0xCF9 a byte, PCI's 0xCF8 a dword), a built-in guest's machine
 *    has no platform ports, a power-off and a reset come back as such, and
 *    every device's state is saved and loaded through the bus. */
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

#include "checkpoint/checkpoint.h"
#include "machine/devices.h"
#include "proto/proto.h"

#define PORT_INDEX 0x70
#define PORT_DATA 0x71

static struct machine *fake_machine(void)
{
	struct machine *m = calloc(1, sizeof(*m));

	assert_non_null(m);
	platform_reset(&m->platform);
	return m;
}

static uint8_t cmos_get(struct machine *m, uint8_t reg)
{
	uint8_t v = reg;

	assert_true(platform_io(m, PORT_INDEX, 1, true, &v));
	assert_true(platform_io(m, PORT_DATA, 1, false, &v));
	return v;
}

static void cmos_put(struct machine *m, uint8_t reg, uint8_t v)
{
	assert_true(platform_io(m, PORT_INDEX, 1, true, &reg));
	assert_true(platform_io(m, PORT_DATA, 1, true, &v));
}

static int bcd(uint8_t v)
{
	return (v >> 4) * 10 + (v & 0xf);
}

/* The guest's RTC as seconds since the epoch (BCD, 24-hour). */
static time_t rtc_time(struct machine *m)
{
	struct tm tm = { 0 };

	tm.tm_sec = bcd(cmos_get(m, 0x00));
	tm.tm_min = bcd(cmos_get(m, 0x02));
	tm.tm_hour = bcd(cmos_get(m, 0x04));
	tm.tm_mday = bcd(cmos_get(m, 0x07));
	tm.tm_mon = bcd(cmos_get(m, 0x08)) - 1;
	tm.tm_year = bcd(cmos_get(m, 0x32)) * 100 + bcd(cmos_get(m, 0x09)) - 1900;
	return timegm(&tm);
}

/* 2031-02-03 16:05:06 UTC the way Linux's mc146818_set_time writes it. */
static void set_2031(struct machine *m)
{
	uint8_t b = cmos_get(m, 0x0b);

	cmos_put(m, 0x0b, b | 0x80);
	cmos_put(m, 0x00, 0x06);
	cmos_put(m, 0x02, 0x05);
	cmos_put(m, 0x04, 0x16);
	cmos_put(m, 0x07, 0x03);
	cmos_put(m, 0x08, 0x02);
	cmos_put(m, 0x09, 0x31);
	cmos_put(m, 0x32, 0x20);
	/* SET on: what was written reads back, the clock does not move it */
	assert_int_equal(cmos_get(m, 0x00), 0x06);
	assert_int_equal(cmos_get(m, 0x09), 0x31);
	cmos_put(m, 0x0b, b);
}

static const time_t T2031 = 1927901106;   /* 2031-02-03 16:05:06 UTC */

static void rtc_set_by_guest(void **state)
{
	struct machine *m = fake_machine();
	time_t t0 = time(NULL), t;

	(void)state;
	assert_int_equal(m->platform.rtc_offset, 0);
	t = rtc_time(m);
	assert_true(t >= t0 && t <= time(NULL) + 1);          /* the host's clock */
	set_2031(m);
	t = rtc_time(m);
	assert_true(t >= T2031 && t <= T2031 + 2);
	assert_true(m->platform.rtc_offset >= T2031 - time(NULL) - 1 &&
		    m->platform.rtc_offset <= T2031 - t0 + 1);
	/* binary mode: the same time in binary */
	cmos_put(m, 0x0b, 0x06);
	assert_int_equal(cmos_get(m, 0x09), 31);
	assert_int_equal(cmos_get(m, 0x08), 2);
	/* 12-hour BCD: 16 h is 4 PM */
	cmos_put(m, 0x0b, 0x00);
	assert_int_equal(cmos_get(m, 0x04), 0x84);
	cmos_put(m, 0x0b, 0x02);
	/* one register with SET clear: the year moves, the rest runs on */
	cmos_put(m, 0x09, 0x40);
	assert_int_equal(cmos_get(m, 0x09), 0x40);
	assert_int_equal(cmos_get(m, 0x08), 0x02);
	assert_int_equal(cmos_get(m, 0x32), 0x20);
	/* read-only bits and registers stay as they are */
	cmos_put(m, 0x0a, 0xa6);
	assert_int_equal(cmos_get(m, 0x0a), 0x26);
	cmos_put(m, 0x0c, 0xff);
	cmos_put(m, 0x0d, 0x00);
	assert_int_equal(cmos_get(m, 0x0c), 0);
	assert_int_equal(cmos_get(m, 0x0d), 0x80);
	assert_int_equal(platform_check(&m->platform), 0);
	free(m);
}

/* Every piece of platform state a guest can set, set through the ports. */
static void program_devices(struct machine *m)
{
	uint8_t d[2];

	set_2031(m);
	cmos_put(m, 0x40, 0x5a);                  /* CMOS RAM */
	cmos_put(m, 0x7f, 0xa5);
	cmos_put(m, 0x0b, 0x06);                  /* binary, 24-hour */
	d[0] = 0x21;                              /* PM1a enable: PWRBTN_EN | TMR_EN */
	d[1] = 0x01;
	assert_true(platform_io(m, LINUX_ACPI_PM1_EVT + 2, 2, true, d));
	d[0] = 0x01;
	d[1] = 0x14;                              /* PM1a control: SLP_TYP 5, no SLP_EN */
	assert_true(platform_io(m, LINUX_ACPI_PM1_CNT, 2, true, d));
	d[0] = 0x02;                              /* 0xCF9: system reset selected */
	assert_true(platform_io(m, LINUX_RESET_PORT, 1, true, d));
	d[0] = 0x33;
	assert_true(platform_io(m, PORT_INDEX, 1, true, d));   /* index left at 0x33 */
}

static void section_roundtrip(void **state)
{
	struct machine *m = fake_machine(), *n = fake_machine();
	uint8_t a[PROTO_PLATFORM_STATE_BYTES], b[PROTO_PLATFORM_STATE_BYTES];
	struct platform_state s;
	uint64_t off;

	(void)state;
	program_devices(m);
	assert_int_equal(proto_platform_state_encode(&m->platform, a), PROTO_PLATFORM_STATE_BYTES);
	/* fixed places, little-endian */
	assert_int_equal(a[0], 0x33);
	assert_int_equal(a[1], 0x02);
	assert_int_equal(a[2] | a[3] << 8, 0x0121);
	assert_int_equal(a[4] | a[5] << 8, 0x1401);
	assert_int_equal(a[6] | a[7] << 8, 0);
	off = 0;
	for (int k = 0; k < 8; k++)
		off |= (uint64_t)a[8 + k] << (8 * k);
	assert_int_equal((int64_t)off, m->platform.rtc_offset);
	assert_int_equal(a[16 + 0x40], 0x5a);
	assert_int_equal(a[16 + 0x7f], 0xa5);
	assert_int_equal(proto_platform_state_decode(a, sizeof(a), &s), 0);
	assert_int_equal(proto_platform_state_encode(&s, b), sizeof(b));
	assert_memory_equal(a, b, sizeof(a));

	/* on the machine the state goes to, the guest's clock reads on */
	n->platform = s;
	assert_int_equal(cmos_get(n, 0x0b), 0x06);
	cmos_put(n, 0x0b, 0x02);
	cmos_put(m, 0x0b, 0x02);
	{
		time_t tm = rtc_time(m), tn = rtc_time(n);

		assert_true(tn >= tm && tn <= tm + 1);
		assert_true(tn >= T2031 && tn <= T2031 + 5);
	}
	assert_int_equal(cmos_get(n, 0x40), 0x5a);
	free(m);
	free(n);
}

static void section_refuses_bad(void **state)
{
	struct machine *m = fake_machine();
	uint8_t a[PROTO_PLATFORM_STATE_BYTES + 1], b[sizeof(a)];
	struct platform_state s;
	static const struct { const char *what; size_t at; uint8_t v; } bad[] = {
		{ "CMOS index with bit 7", 0, 0x80 },
		{ "0xCF9 with the reset bit", 1, 0x04 },
		{ "0xCF9 with bit 0", 1, 0x03 },
		{ "PM1a control without SCI_EN", 4, 0x00 },
		{ "PM1a control with SLP_EN", 5, 0x34 },
		{ "padding", 6, 0x01 },
		{ "RTC offset of 2^34 + 2^32 s", 12, 0x05 },
		{ "RTC offset of -2^63", 15, 0x80 },
		{ "register A with UIP", 16 + 0x0a, 0xa6 },
		{ "register C with a flag", 16 + 0x0c, 0x10 },
		{ "register D battery dead", 16 + 0x0d, 0x00 },
	};

	(void)state;
	program_devices(m);
	proto_platform_state_encode(&m->platform, a);
	a[PROTO_PLATFORM_STATE_BYTES] = 0;
	memcpy(b, a, sizeof(a));
	/* every other length: cut anywhere, or one byte more */
	for (size_t len = 0; len <= sizeof(a); len++)
		if (len != PROTO_PLATFORM_STATE_BYTES)
			assert_int_equal(proto_platform_state_decode(a, len, &s), -EBADMSG);
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		a[bad[k].at] = bad[k].v;
		if (proto_platform_state_decode(a, PROTO_PLATFORM_STATE_BYTES, &s) != -EBADMSG)
			fail_msg("accepted: %s", bad[k].what);
		memcpy(a, b, sizeof(a));
	}
	/* the largest offsets either way are fine */
	m->platform.rtc_offset = PLATFORM_RTC_OFFSET_MAX;
	proto_platform_state_encode(&m->platform, a);
	assert_int_equal(proto_platform_state_decode(a, PROTO_PLATFORM_STATE_BYTES, &s), 0);
	m->platform.rtc_offset = -PLATFORM_RTC_OFFSET_MAX;
	proto_platform_state_encode(&m->platform, a);
	assert_int_equal(proto_platform_state_decode(a, PROTO_PLATFORM_STATE_BYTES, &s), 0);
	assert_int_equal(s.rtc_offset, -PLATFORM_RTC_OFFSET_MAX);
	free(m);
}

/* ---- in a state blob ---------------------------------------------------------- */

static void plausible_image(struct ckpt_image *img, const struct platform_state *p)
{
	memset(img, 0, sizeof(*img));
	img->ncpus = 1;
	img->vcpus[0].xsave_size = 4096;
	img->vcpus[0].regs.rip = 0x100000;
	img->ms.uart.lcr = 3;
	img->ms.platform = *p;
}

enum variant { PLAT_OK, PLAT_NONE, PLAT_BAD, PLAT_CUT, PLAT_TWICE, PLAT_V2 };

/* A blob of img's sections as a build writes them, its "platform" as variant. */
static size_t build_blob(uint8_t *buf, const struct ckpt_image *img, enum variant v)
{
	static uint8_t data[sizeof(struct kvm_vcpu_state) + PROTO_UART_STATE_BYTES];
	size_t len = PROTO_STATE_HDR_BYTES, n;
	struct proto_state_hdr h = { .digest = 0x1234, .ncpus = 1 };

#define ADD(name, version, bytes) do { \
		memcpy(buf + len + PROTO_SECTION_HDR_BYTES, data, (bytes)); \
		proto_section_seal(buf + len, (name), (version), 0, (bytes)); \
		len += proto_section_bytes(bytes); \
		h.nsections++; \
	} while (0)
	n = proto_vcpu_state_encode(&img->vcpus[0], data);
	ADD(PROTO_STATE_VCPU, PROTO_STATE_VCPU_VERSION, n);
	ADD(PROTO_STATE_VM, PROTO_STATE_VM_VERSION, proto_vm_state_encode(&img->ms.vm, data));
	ADD(PROTO_STATE_UART, PROTO_STATE_UART_VERSION, proto_uart_state_encode(&img->ms.uart, data));
	ADD(PROTO_STATE_PCI, PROTO_STATE_PCI_VERSION, proto_pci_state_encode(&img->ms.pci, data));
	n = proto_platform_state_encode(&img->ms.platform, data);
	if (v == PLAT_BAD)
		data[4] = 0;                       /* PM1a control without SCI_EN */
	if (v == PLAT_CUT)
		n--;
	if (v != PLAT_NONE)
		ADD(PROTO_STATE_PLATFORM, v == PLAT_V2 ? 2 : PROTO_STATE_PLATFORM_VERSION, n);
	if (v == PLAT_TWICE)
		ADD(PROTO_STATE_PLATFORM, PROTO_STATE_PLATFORM_VERSION, n);
#undef ADD
	h.total_len = len;
	proto_state_hdr_encode(buf, &h);
	return len;
}

static void blob_sections(void **state)
{
	struct machine *m = fake_machine();
	struct ckpt_image *img = malloc(sizeof(*img)), *got = malloc(sizeof(*got));
	uint8_t *buf = malloc(1 << 20);
	struct platform_state fresh;
	struct ckpt c;
	size_t len;

	(void)state;
	assert_non_null(img);
	assert_non_null(got);
	assert_non_null(buf);
	program_devices(m);
	plausible_image(img, &m->platform);
	platform_reset(&fresh);

	/* what the build writes carries the section, and it decodes as sent */
	ckpt_init(&c);
	c.config_digest = 0x1234;
	assert_int_equal(ckpt_state_encode(&c, img), 0);
	memset(got, 0xee, sizeof(*got));
	assert_int_equal(ckpt_state_decode(c.state, c.state_len, 0x1234, 1, got), 0);
	assert_memory_equal(&got->ms.platform.cmos, &m->platform.cmos, 128);
	assert_int_equal(got->ms.platform.rtc_offset, m->platform.rtc_offset);
	assert_int_equal(got->ms.platform.pm1_en, 0x0121);
	assert_int_equal(got->ms.platform.pm1_cnt, 0x1401);
	assert_int_equal(got->ms.platform.reset_ctl, 0x02);
	assert_int_equal(got->ms.platform.cmos_index, 0x33);
	assert_int_equal(got->ms.platform.stop_req, 0);
	ckpt_fini(&c);

	len = build_blob(buf, img, PLAT_OK);
	assert_int_equal(ckpt_state_decode(buf, len, 0x1234, 1, got), 0);
	assert_int_equal(got->ms.platform.rtc_offset, m->platform.rtc_offset);

	/* a build before the section: the devices at power-on, as its restore left them */
	len = build_blob(buf, img, PLAT_NONE);
	memset(got, 0xee, sizeof(*got));
	assert_int_equal(ckpt_state_decode(buf, len, 0x1234, 1, got), 0);
	assert_memory_equal(&got->ms.platform, &fresh, sizeof(fresh));

	/* malformed, cut, repeated, unknown version: refused */
	len = build_blob(buf, img, PLAT_BAD);
	assert_int_equal(ckpt_state_decode(buf, len, 0x1234, 1, got), -EBADMSG);
	len = build_blob(buf, img, PLAT_CUT);
	assert_int_equal(ckpt_state_decode(buf, len, 0x1234, 1, got), -EBADMSG);
	len = build_blob(buf, img, PLAT_TWICE);
	assert_int_equal(ckpt_state_decode(buf, len, 0x1234, 1, got), -EBADMSG);
	len = build_blob(buf, img, PLAT_V2);
	assert_int_equal(ckpt_state_decode(buf, len, 0x1234, 1, got), -EPROTONOSUPPORT);
	/* the blob cut anywhere in its platform section */
	len = build_blob(buf, img, PLAT_OK);
	for (size_t cut = len - proto_section_bytes(PROTO_PLATFORM_STATE_BYTES); cut < len; cut++)
		assert_true(ckpt_state_decode(buf, cut, 0x1234, 1, got) < 0);
	free(img);
	free(got);
	free(buf);
	free(m);
}

/* ---- in a snapshot file ------------------------------------------------------- */

static void snapshot_file(void **state)
{
	struct machine_config cfg, rcfg;
	struct machine *m = fake_machine();
	struct ckpt_image *img = malloc(sizeof(*img)), *got = malloc(sizeof(*got));
	struct platform_state fresh;
	char dir[] = "/tmp/test_platform.XXXXXX", path[64];
	uint8_t page[CKPT_PAGE_SIZE];
	struct proto_state_hdr h;
	struct ckpt c, r;

	(void)state;
	assert_non_null(img);
	assert_non_null(got);
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/snap", dir);
	memset(&cfg, 0, sizeof(cfg));
	cfg.mem_bytes = 16 << 20;
	cfg.ncpus = 1;
	snprintf(cfg.guest, sizeof(cfg.guest), "%s", MACHINE_LINUX_GUEST);
	program_devices(m);
	plausible_image(img, &m->platform);
	ckpt_init(&c);
	ckpt_init(&r);
	c.config_digest = machine_config_digest(&cfg);
	memset(page, 0x42, sizeof(page));
	assert_int_equal(ckpt_add_page(&c, 7, page), 0);
	assert_int_equal(ckpt_state_encode(&c, img), 0);
	assert_int_equal(ckpt_file_write(path, &c, &cfg), 0);
	assert_int_equal(ckpt_file_read(path, &r, &rcfg), 0);
	assert_int_equal(ckpt_state_decode(r.state, r.state_len, machine_config_digest(&rcfg), 1,
					   got), 0);
	assert_memory_equal(&got->ms.platform.cmos, &m->platform.cmos, 128);
	assert_int_equal(got->ms.platform.rtc_offset, m->platform.rtc_offset);
	assert_int_equal(got->ms.platform.pm1_en, m->platform.pm1_en);
	unlink(path);
	rmdir(dir);

	/* a file of an older build: read, and its state decodes to power-on
	 * devices (the corpus's blobs carry a digest of their own, 0x1234) */
	platform_reset(&fresh);
	assert_int_equal(ckpt_file_read("tests/fuzz/corpus/snapshot/ok-v1-diff-2pages", &r, &rcfg), 0);
	assert_int_equal(proto_state_hdr_decode(r.state, r.state_len, &h), 0);
	memset(got, 0xee, sizeof(*got));
	assert_int_equal(ckpt_state_decode(r.state, r.state_len, h.digest, rcfg.ncpus, got), 0);
	assert_memory_equal(&got->ms.platform, &fresh, sizeof(fresh));
	ckpt_fini(&c);
	ckpt_fini(&r);
	free(img);
	free(got);
	free(m);
}

/* ---- on the bus ---------------------------------------------------------------- */

static struct machine *bus_machine(bool linux_guest)
{
	struct machine *m = calloc(1, sizeof(*m));

	assert_non_null(m);
	m->linux_guest = linux_guest;
	assert_int_equal(pthread_mutex_init(&m->lock, NULL), 0);
	assert_int_equal(machine_devices_attach(m), 0);
	return m;
}

static void bus_free(struct machine *m)
{
	machine_devices_detach(m);
	pthread_mutex_destroy(&m->lock);
	free(m);
}

static int pio(struct machine *m, uint16_t port, int size, bool write, uint32_t *v)
{
	return machine_bus_io(m, MACHINE_PIO, port, size, write, (uint8_t *)v);
}

static void bus_dispatch(void **state)
{
	struct machine *m = bus_machine(true), *g = bus_machine(false);
	struct machine_state *st = malloc(sizeof(*st));
	uint32_t v;

	(void)state;
	assert_non_null(st);
	/* the CMOS through the bus */
	v = 0x40;
	assert_int_equal(pio(m, 0x70, 1, true, &v), 0);
	v = 0x77;
	assert_int_equal(pio(m, 0x71, 1, true, &v), 0);
	assert_int_equal(m->platform.cmos[0x40], 0x77);
	/* 0xCF9 is a byte of the platform's; a dword at 0xCF8 is PCI's address */
	v = 0x02;
	assert_int_equal(pio(m, 0xcf9, 1, true, &v), 0);
	assert_int_equal(m->platform.reset_ctl, 0x02);
	v = 0x80000000u;
	assert_int_equal(pio(m, 0xcf8, 4, true, &v), 0);
	assert_int_equal(m->pci.addr, 0x80000000u);
	v = 0;
	assert_int_equal(pio(m, 0xcfc, 4, false, &v), 0);
	assert_int_equal(v & 0xffff, 0x1b36);                 /* the host bridge's vendor */
	/* the UART's scratch register */
	v = 0x5a;
	assert_int_equal(pio(m, 0x3ff, 1, true, &v), 0);
	assert_int_equal(m->uart.scr, 0x5a);
	/* nobody's port, nobody's memory */
	assert_int_equal(pio(m, 0x80, 1, true, &v), -ENOENT);
	assert_int_equal(machine_bus_io(m, MACHINE_MMIO, 0xe0000000ull, 4, false, (uint8_t *)&v),
			 -ENOENT);                             /* no virtio function */
	/* a built-in guest's machine: no platform ports, the rest as before */
	assert_int_equal(pio(g, 0x70, 1, true, &v), -ENOENT);
	assert_int_equal(pio(g, 0x604, 2, true, &v), -ENOENT);
	assert_int_equal(pio(g, 0x3ff, 1, true, &v), 0);
	/* state through the bus: saved, changed, loaded back */
	machine_devices_save(m, st);
	m->platform.cmos[0x40] = 0;
	m->uart.scr = 0;
	m->pci.addr = 0;
	m->platform.stop_req = 1;
	machine_devices_load(m, st);
	assert_int_equal(m->platform.cmos[0x40], 0x77);
	assert_int_equal(m->uart.scr, 0x5a);
	assert_int_equal(m->pci.addr, 0x80000000u);
	assert_int_equal(m->platform.stop_req, 0);
	assert_false(machine_devices_wake(m));
	/* ACPI S5 and a reset: the machine is asked to stop, as such */
	v = 0x3401;
	assert_int_equal(pio(m, 0x604, 2, true, &v), MACHINE_IO_POWEROFF);
	bus_free(m);
	m = bus_machine(true);
	v = 0xfe;
	assert_int_equal(pio(m, 0x64, 1, true, &v), MACHINE_IO_RESET);
	bus_free(m);
	bus_free(g);
	free(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(rtc_set_by_guest),
		cmocka_unit_test(section_roundtrip),
		cmocka_unit_test(section_refuses_bad),
		cmocka_unit_test(blob_sections),
		cmocka_unit_test(snapshot_file),
		cmocka_unit_test(bus_dispatch),
	};

	log_set_level(LOG_WARN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
