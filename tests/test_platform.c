/* The platform devices' state (machine/platform.c) in a checkpoint, no KVM
 * needed:
 *  - the RTC: the guest sets the time (SET in register B, or one register),
 *    the registers hold still while SET is on, binary and 12-hour modes;
 *  - its interrupts, at a clock the test sets: register C's flags (set with
 *    or without their enables, cleared by a read), IRQF and IRQ 8's edge,
 *    UIP, SET and the divider stopping updates, the alarm with its
 *    "don't care" bytes in BCD, binary and 12-hour modes, the day-of-month
 *    alarm in register D, the divider held in reset and restarted (its first
 *    update half a second later), an alarm that
 *    fell in a gap between accesses (a failover's), every periodic rate,
 *    and the timer thread raising IRQ 8 on its own while the machine
 *    runs, never while it is paused;
 *    the offset it set travels with the state, so the guest's wall clock
 *    reads on from the same time on the machine the state goes to;
 *  - the "platform" section: fixed little-endian layout, round trip, every
 *    other length and every impossible value refused (-EBADMSG); a
 *    version 1 section (before the interrupts) still read;
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
	m->vm.fd = -1;                  /* no KVM: IRQ 8's edges are only counted */
	platform_reset(&m->platform);
	return m;
}

#define NS 1000000000ll
static const int64_t T2031_NS = 1927901106ll * NS;   /* 2031-02-03 16:05:06 UTC */

/* The registers at a host clock of the test's. */
static uint8_t cmos_get_at(struct machine *m, uint8_t reg, int64_t now_ns)
{
	uint8_t v = reg;

	assert_true(platform_io_at(m, PORT_INDEX, 1, true, &v, now_ns));
	assert_true(platform_io_at(m, PORT_DATA, 1, false, &v, now_ns));
	return v;
}

static void cmos_put_at(struct machine *m, uint8_t reg, uint8_t v, int64_t now_ns)
{
	assert_true(platform_io_at(m, PORT_INDEX, 1, true, &reg, now_ns));
	assert_true(platform_io_at(m, PORT_DATA, 1, true, &v, now_ns));
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
	/* read-only bits and registers stay as they are (mid-second: no
	 * update in progress, none ended since the last access) */
	t = time(NULL) + 1;
	cmos_put_at(m, 0x0a, 0xa6, t * NS + NS / 2);
	assert_int_equal(cmos_get_at(m, 0x0a, t * NS + NS / 2), 0x26);
	cmos_put_at(m, 0x0c, 0xff, t * NS + NS / 2);
	cmos_put_at(m, 0x0d, 0x00, t * NS + NS / 2);
	assert_int_equal(cmos_get_at(m, 0x0c, t * NS + NS / 2) & 0x80, 0);   /* flags, no IRQF */
	assert_int_equal(cmos_get_at(m, 0x0c, t * NS + NS / 2), 0);
	assert_int_equal(cmos_get_at(m, 0x0d, t * NS + NS / 2), 0x80);
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
	off = 0;
	for (int k = 0; k < 8; k++)
		off |= (uint64_t)a[144 + k] << (8 * k);
	assert_int_equal((int64_t)off, m->platform.rtc_sync_ns);
	assert_true(off > 0);                     /* the accesses above synced it */
	assert_int_equal(proto_platform_state_decode(a, sizeof(a), PROTO_STATE_PLATFORM_VERSION, &s), 0);
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
		{ "register C with IRQF and no flag", 16 + 0x0c, 0x80 },
		{ "register C with a low bit", 16 + 0x0c, 0x01 },
		{ "register C with IRQF, UF not enabled", 16 + 0x0c, 0x90 },
		{ "register B enabling UF, C's UF without IRQF", 16 + 0x0b, 0x16 },
		{ "register D battery dead", 16 + 0x0d, 0x00 },
		{ "RTC events synced at a negative time", 144 + 7, 0x80 },
		{ "register D with bit 6", 16 + 0x0d, 0xc4 },
		{ "RTC phase of more than a second", 152 + 4, 0x01 },
		{ "RTC phase negative", 152 + 7, 0x80 },
	};

	(void)state;
	program_devices(m);
	m->platform.cmos[0x0c] = 0x10;            /* UF, not enabled (B 0x06): no IRQF */
	m->platform.rtc_sync_ns = T2031_NS;
	proto_platform_state_encode(&m->platform, a);
	assert_int_equal(proto_platform_state_decode(a, PROTO_PLATFORM_STATE_BYTES,
						     PROTO_STATE_PLATFORM_VERSION, &s), 0);
	a[PROTO_PLATFORM_STATE_BYTES] = 0;
	memcpy(b, a, sizeof(a));
	/* every other length: cut anywhere, or one byte more */
	for (size_t len = 0; len <= sizeof(a); len++)
		if (len != PROTO_PLATFORM_STATE_BYTES)
			assert_int_equal(proto_platform_state_decode(a, len, PROTO_STATE_PLATFORM_VERSION, &s), -EBADMSG);
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		a[bad[k].at] = bad[k].v;
		if (proto_platform_state_decode(a, PROTO_PLATFORM_STATE_BYTES, PROTO_STATE_PLATFORM_VERSION,
						     &s) != -EBADMSG)
			fail_msg("accepted: %s", bad[k].what);
		memcpy(a, b, sizeof(a));
	}
	/* the largest offsets either way are fine */
	m->platform.rtc_offset = PLATFORM_RTC_OFFSET_MAX;
	proto_platform_state_encode(&m->platform, a);
	assert_int_equal(proto_platform_state_decode(a, PROTO_PLATFORM_STATE_BYTES, PROTO_STATE_PLATFORM_VERSION,
						     &s), 0);
	m->platform.rtc_offset = -PLATFORM_RTC_OFFSET_MAX;
	proto_platform_state_encode(&m->platform, a);
	assert_int_equal(proto_platform_state_decode(a, PROTO_PLATFORM_STATE_BYTES, PROTO_STATE_PLATFORM_VERSION,
						     &s), 0);
	assert_int_equal(s.rtc_offset, -PLATFORM_RTC_OFFSET_MAX);
	free(m);
}

/* ---- the RTC's interrupts ------------------------------------------------------ */

/* Flags with and without their enables, read to clear, IRQF and IRQ 8's
 * edge, UIP, and what stops the update cycle (SET, the divider). */
static void rtc_flags(void **state)
{
	struct machine *m = fake_machine();
	int64_t t = T2031_NS + NS / 2;           /* mid-second */

	(void)state;
	cmos_put_at(m, 0x0a, 0x20, t);                             /* no periodic rate: no PF */
	assert_int_equal(cmos_get_at(m, 0x0c, t), 0);
	assert_int_equal(m->platform.rtc_sync_ns, t);
	/* an update ends at the second boundary: UF, though UIE is off */
	assert_int_equal(cmos_get_at(m, 0x0c, t + NS / 4), 0);
	assert_int_equal(cmos_get_at(m, 0x0c, t + NS), 0x10);
	assert_int_equal(cmos_get_at(m, 0x0c, t + NS), 0);          /* read to clear */
	assert_int_equal(m->stats.rtc_irqs, 0);
	/* UIP for the 244 us before an update, not otherwise */
	assert_int_equal(cmos_get_at(m, 0x0a, T2031_NS + 3 * NS - 200000), 0xa0);
	assert_int_equal(cmos_get_at(m, 0x0a, T2031_NS + 3 * NS - 300000), 0x20);
	assert_int_equal(cmos_get_at(m, 0x0a, T2031_NS + 3 * NS), 0x20);
	t = T2031_NS + 3 * NS + NS / 2;
	/* a flag already set when its enable goes on: IRQF and an edge at once */
	assert_int_equal(cmos_get_at(m, 0x0c, t), 0x10);
	assert_int_equal(cmos_get_at(m, 0x0c, t + NS), 0x10 | 0);
	cmos_get_at(m, 0x0d, t + 2 * NS);                          /* UF set, not read */
	cmos_put_at(m, 0x0b, 0x12, t + 2 * NS);                    /* UIE */
	assert_int_equal(m->stats.rtc_irqs, 1);
	assert_int_equal(platform_check(&m->platform), 0);
	assert_int_equal(cmos_get_at(m, 0x0c, t + 2 * NS), 0x90);
	assert_int_equal(cmos_get_at(m, 0x0c, t + 2 * NS), 0);
	/* the next update, as the timer thread would run it: one edge */
	assert_int_equal(platform_rtc_next(&m->platform, t + 2 * NS), T2031_NS + 6 * NS);
	assert_true(platform_rtc_advance(&m->platform, T2031_NS + 6 * NS));
	assert_false(platform_rtc_advance(&m->platform, T2031_NS + 7 * NS));   /* IRQF on: no edge */
	assert_int_equal(platform_rtc_next(&m->platform, T2031_NS + 7 * NS), INT64_MAX);
	assert_int_equal(cmos_get_at(m, 0x0c, T2031_NS + 7 * NS + 1), 0x90);
	/* SET stops updates (and clears UIE); so does a divider held in reset */
	cmos_put_at(m, 0x0b, 0x92, T2031_NS + 8 * NS + NS / 2);
	assert_int_equal(cmos_get_at(m, 0x0c, T2031_NS + 8 * NS + NS / 2), 0x10);   /* 16:05:14's */
	assert_int_equal(cmos_get_at(m, 0x0b, T2031_NS + 8 * NS + NS / 2), 0x82);
	assert_int_equal(cmos_get_at(m, 0x0a, T2031_NS + 9 * NS - 100000), 0x20);   /* no UIP */
	assert_int_equal(cmos_get_at(m, 0x0c, T2031_NS + 10 * NS), 0);
	cmos_put_at(m, 0x0b, 0x12, T2031_NS + 10 * NS);
	cmos_put_at(m, 0x0a, 0x76, T2031_NS + 10 * NS);
	assert_int_equal(platform_rtc_next(&m->platform, T2031_NS + 10 * NS), INT64_MAX);
	assert_int_equal(cmos_get_at(m, 0x0c, T2031_NS + 12 * NS), 0);
	cmos_put_at(m, 0x0a, 0x20, T2031_NS + 12 * NS + 1);
	assert_int_equal(cmos_get_at(m, 0x0c, T2031_NS + 13 * NS), 0x90);
	assert_int_equal(m->stats.rtc_irqs, 3);
	assert_int_equal(platform_check(&m->platform), 0);
	free(m);
}

/* 16:05:06 on 2031-02-03 at T2031_NS: the alarm registers (1, 3, 5) in
 * BCD, binary and 12-hour modes, with "don't care" bytes. */
static void rtc_alarm(void **state)
{
	struct machine *m = fake_machine();
	int64_t t = T2031_NS + NS / 2;

	(void)state;
	cmos_put_at(m, 0x0a, 0x20, t);
	cmos_put_at(m, 0x05, 0x16, t);
	cmos_put_at(m, 0x03, 0x05, t);
	cmos_put_at(m, 0x01, 0x08, t);
	cmos_put_at(m, 0x0b, 0x22, t);                             /* AIE, 24-hour BCD */
	assert_int_equal(cmos_get_at(m, 0x0c, t + NS), 0x10);       /* 16:05:07: UF only */
	assert_int_equal(m->stats.rtc_irqs, 0);
	assert_true(platform_rtc_advance(&m->platform, T2031_NS + 2 * NS));   /* 16:05:08 */
	assert_int_equal(cmos_get_at(m, 0x0c, T2031_NS + 2 * NS + 1), 0xb0);
	/* don't care: any hour (0xC0), any minute (0xFF), second 10 */
	cmos_put_at(m, 0x05, 0xc0, T2031_NS + 2 * NS + 2);
	cmos_put_at(m, 0x03, 0xff, T2031_NS + 2 * NS + 2);
	cmos_put_at(m, 0x01, 0x10, T2031_NS + 2 * NS + 2);
	assert_int_equal(cmos_get_at(m, 0x0c, T2031_NS + 3 * NS), 0x10);
	assert_int_equal(cmos_get_at(m, 0x0c, T2031_NS + 4 * NS - 1), 0);
	assert_int_equal(cmos_get_at(m, 0x0c, T2031_NS + 4 * NS), 0xb0);   /* 16:05:10 */
	/* the alarm's second fell between two accesses (a failover's gap):
	 * it is seen at the next one; and a day later, again */
	cmos_put_at(m, 0x01, 0x20, T2031_NS + 5 * NS);
	assert_int_equal(cmos_get_at(m, 0x0c, T2031_NS + 5 * NS), 0x10);
	assert_int_equal(cmos_get_at(m, 0x0c, T2031_NS + 30 * NS), 0xb0);
	assert_int_equal(cmos_get_at(m, 0x0c, T2031_NS + 40 * NS), 0x10);
	assert_int_equal(cmos_get_at(m, 0x0c, T2031_NS + 86400ll * 3 * NS), 0xb0);
	cmos_put_at(m, 0x05, 0x17, T2031_NS + 86400ll * 3 * NS);      /* 17:xx:20: not in 15 s */
	assert_int_equal(cmos_get_at(m, 0x0c, T2031_NS + (86400ll * 3 + 60) * NS), 0x10);
	/* binary: 16:05:06 is 0x10 0x05 0x06 */
	cmos_put_at(m, 0x0b, 0x26, T2031_NS + 86400ll * 4 * NS);
	cmos_put_at(m, 0x05, 16, T2031_NS + 86400ll * 4 * NS);
	cmos_put_at(m, 0x03, 5, T2031_NS + 86400ll * 4 * NS);
	cmos_put_at(m, 0x01, 7, T2031_NS + 86400ll * 4 * NS);
	assert_int_equal(cmos_get_at(m, 0x0c, T2031_NS + (86400ll * 4 + 1) * NS), 0xb0);
	/* 12-hour BCD: 4 PM is 0x84; 0x04 (4 AM) does not match */
	cmos_put_at(m, 0x0b, 0x20, T2031_NS + 86400ll * 5 * NS);
	cmos_put_at(m, 0x05, 0x04, T2031_NS + 86400ll * 5 * NS);
	cmos_put_at(m, 0x03, 0x05, T2031_NS + 86400ll * 5 * NS);
	cmos_put_at(m, 0x01, 0x07, T2031_NS + 86400ll * 5 * NS);
	assert_int_equal(cmos_get_at(m, 0x0c, T2031_NS + (86400ll * 5 + 1) * NS), 0x10);
	cmos_put_at(m, 0x05, 0x84, T2031_NS + (86400ll * 5 + 1) * NS);
	cmos_put_at(m, 0x01, 0x08, T2031_NS + (86400ll * 5 + 1) * NS);
	assert_int_equal(cmos_get_at(m, 0x0c, T2031_NS + (86400ll * 5 + 2) * NS), 0xb0);
	/* the guest's own time (its offset) is what the alarm matches */
	cmos_put_at(m, 0x0b, 0x22, T2031_NS + (86400ll * 5 + 3) * NS);
	m->platform.rtc_offset = 3600;                             /* 17:05:xx */
	cmos_put_at(m, 0x05, 0x17, T2031_NS + (86400ll * 5 + 3) * NS);
	cmos_put_at(m, 0x01, 0x10, T2031_NS + (86400ll * 5 + 3) * NS);
	assert_int_equal(cmos_get_at(m, 0x0c, T2031_NS + (86400ll * 5 + 4) * NS), 0xb0);
	assert_int_equal(platform_check(&m->platform), 0);
	free(m);
}

/* The day-of-month alarm in register D's bits 0-5 (the FADT's DAY_ALRM):
 * AF only on that day, in BCD and binary; a value that is no day is "don't
 * care" (a daily alarm); a gap between accesses as long as two months
 * still finds the day. */
static void rtc_day_alarm(void **state)
{
	struct machine *m = fake_machine();
	const int64_t day = 86400ll * NS;
	int64_t t = T2031_NS + NS / 2;            /* 2031-02-03 16:05:06.5, a Monday the 3rd */

	(void)state;
	cmos_put_at(m, 0x0a, 0x20, t);
	cmos_put_at(m, 0x05, 0x16, t);
	cmos_put_at(m, 0x03, 0x05, t);
	cmos_put_at(m, 0x01, 0x08, t);
	cmos_put_at(m, 0x0d, 0x04, t);                             /* the 4th */
	cmos_put_at(m, 0x0b, 0x22, t);                             /* AIE, 24-hour BCD */
	assert_int_equal(cmos_get_at(m, 0x0d, t), 0x84);           /* VRT kept */
	assert_int_equal(cmos_get_at(m, 0x0c, T2031_NS + 2 * NS), 0x10);   /* 16:05:08 on the 3rd */
	assert_int_equal(cmos_get_at(m, 0x0c, T2031_NS + day + 1 * NS), 0x10);
	assert_int_equal(cmos_get_at(m, 0x0c, T2031_NS + day + 2 * NS), 0xb0);   /* on the 4th */
	/* "don't care" (0x3F, and 0): every day */
	cmos_put_at(m, 0x0d, 0xff, T2031_NS + day + 3 * NS);
	assert_int_equal(cmos_get_at(m, 0x0d, T2031_NS + day + 3 * NS), 0xbf);
	assert_int_equal(cmos_get_at(m, 0x0c, T2031_NS + 2 * day + 2 * NS), 0xb0);
	cmos_put_at(m, 0x0d, 0x00, T2031_NS + 2 * day + 3 * NS);
	assert_int_equal(cmos_get_at(m, 0x0c, T2031_NS + 3 * day + 2 * NS), 0xb0);
	/* the 31st, across gaps: none from the 3rd of February to the 30th of
	 * March (2031: February has 28 days), one by the 1st of April */
	cmos_put_at(m, 0x0d, 0x31, T2031_NS + 3 * day + 3 * NS);
	assert_int_equal(cmos_get_at(m, 0x0c, T2031_NS + 55 * day), 0x10);
	assert_int_equal(cmos_get_at(m, 0x0c, T2031_NS + 57 * day), 0xb0);
	/* and after a gap of a year, too */
	assert_int_equal(cmos_get_at(m, 0x0c, T2031_NS + 420 * day), 0xb0);
	/* binary: the 10th is 10 (0x0A, no BCD day); 420 days on is the 29th of March 2032 */
	cmos_put_at(m, 0x0b, 0x26, T2031_NS + 420 * day);
	cmos_put_at(m, 0x05, 16, T2031_NS + 420 * day);
	cmos_put_at(m, 0x03, 5, T2031_NS + 420 * day);
	cmos_put_at(m, 0x01, 8, T2031_NS + 420 * day);
	cmos_put_at(m, 0x0d, 10, T2031_NS + 420 * day);
	assert_int_equal(cmos_get_at(m, 0x0c, T2031_NS + 430 * day + 2 * NS), 0x10);   /* the 8th of April 2032 */
	assert_int_equal(cmos_get_at(m, 0x0c, T2031_NS + 432 * day + 2 * NS), 0xb0);   /* the 10th */
	assert_int_equal(platform_check(&m->platform), 0);
	free(m);
}

/* The divider held in reset (A's DV 11x): the clock stops, no update, no
 * periodic tick, no UIP; the time written meanwhile is where it restarts
 * when a running divider is written again, and its first update comes half
 * a second later; the new second boundary travels with the state. */
static void rtc_divider_reset(void **state)
{
	struct machine *m = fake_machine(), *n = fake_machine();
	uint8_t a[PROTO_PLATFORM_STATE_BYTES];
	int64_t t = T2031_NS + NS / 4, r = t + 5 * NS, ms = NS / 1000;

	(void)state;
	cmos_put_at(m, 0x0b, 0x02, t);                             /* 24-hour BCD */
	assert_int_equal(cmos_get_at(m, 0x00, t), 0x06);
	cmos_put_at(m, 0x0a, 0x76, t);                             /* reset, rate 6 */
	assert_int_equal(cmos_get_at(m, 0x00, t + 3 * NS), 0x06);  /* held */
	assert_int_equal(cmos_get_at(m, 0x0c, t + 3 * NS), 0);     /* no UF, no PF */
	assert_int_equal(cmos_get_at(m, 0x0a, t + 4 * NS - 100000), 0x76);   /* no UIP */
	cmos_put_at(m, 0x00, 0x30, t + 3 * NS);
	assert_int_equal(cmos_get_at(m, 0x00, t + 4 * NS), 0x30);
	/* restarted at r: 16:05:30 for half a second, then 31, 32 a second later */
	cmos_put_at(m, 0x0a, 0x26, r);
	assert_int_equal(cmos_get_at(m, 0x0c, r + 400 * ms), 0x40);          /* PF only: no update yet */
	assert_int_equal(cmos_get_at(m, 0x00, r + 400 * ms), 0x30);
	assert_int_equal(cmos_get_at(m, 0x0a, r + 200 * ms) & 0x80, 0);
	assert_int_equal(cmos_get_at(m, 0x0a, r + 500 * ms - 100000) & 0x80, 0x80);   /* UIP */
	assert_int_equal(cmos_get_at(m, 0x0c, r + 600 * ms) & 0x10, 0x10);   /* UF */
	assert_int_equal(cmos_get_at(m, 0x00, r + 600 * ms), 0x31);
	assert_int_equal(cmos_get_at(m, 0x00, r + 1400 * ms), 0x31);
	assert_int_equal(cmos_get_at(m, 0x00, r + 1600 * ms), 0x32);
	assert_int_equal(cmos_get_at(m, 0x02, r + 1600 * ms), 0x05);
	/* the next update is due on the new boundary */
	cmos_put_at(m, 0x0b, 0x12, r + 1700 * ms);                 /* UIE */
	(void)cmos_get_at(m, 0x0c, r + 1700 * ms);
	assert_int_equal(platform_rtc_next(&m->platform, r + 1700 * ms), r + 2500 * ms);
	/* and goes with the state */
	assert_int_equal(m->platform.rtc_phase_ns, (r + NS / 2) % NS);
	proto_platform_state_encode(&m->platform, a);
	assert_int_equal(proto_platform_state_decode(a, sizeof(a), PROTO_STATE_PLATFORM_VERSION,
						     &n->platform), 0);
	assert_int_equal(n->platform.rtc_phase_ns, m->platform.rtc_phase_ns);
	cmos_put_at(n, 0x0b, 0x02, r + 1800 * ms);
	assert_int_equal(cmos_get_at(n, 0x00, r + 2400 * ms), 0x32);
	assert_int_equal(cmos_get_at(n, 0x00, r + 2600 * ms), 0x33);
	assert_int_equal(platform_check(&m->platform), 0);
	free(m);
	free(n);
}

/* Every rate of register A: 256 and 128 Hz for 1 and 2, 8192 Hz >> (r - 3)
 * from 3 on; none for 0. PF is set without PIE; the deadline is only for PIE. */
static void rtc_periodic(void **state)
{
	struct machine *m = fake_machine();

	(void)state;
	for (int r = 0; r < 16; r++) {
		int want = r == 0 ? 0 : r <= 2 ? 256 >> (r - 1) : 65536 >> r, n = 0;
		int64_t now = T2031_NS, next;

		platform_reset(&m->platform);
		m->platform.cmos[0x0a] = (uint8_t)(0x20 | r);
		m->platform.cmos[0x0b] = 0x42;                     /* PIE */
		m->platform.rtc_sync_ns = now;
		while ((next = platform_rtc_next(&m->platform, now)) <= T2031_NS + NS) {
			assert_true(next > now);
			assert_true(platform_rtc_advance(&m->platform, next));
			assert_true(m->platform.cmos[0x0c] & 0x40);
			assert_false(platform_rtc_advance(&m->platform, next));   /* once */
			m->platform.cmos[0x0c] = 0;                    /* read */
			now = next;
			n++;
		}
		if (n != want)
			fail_msg("rate %d: %d periodic interrupts in a second, want %d", r, n, want);
		/* half a period on from a tick: no PF; a whole one: PF, PIE or not */
		if (r) {
			m->platform.cmos[0x0b] = 0x02;
			m->platform.rtc_sync_ns = T2031_NS;
			assert_false(platform_rtc_advance(&m->platform, T2031_NS + NS / want / 2 - 1));
			assert_int_equal(m->platform.cmos[0x0c], 0);
			assert_false(platform_rtc_advance(&m->platform, T2031_NS + NS / want + 1));
			assert_int_equal(m->platform.cmos[0x0c], 0x40);
		}
	}
	free(m);
}

/* The RTC's state in the section: flags, IRQF and where its events stand
 * travel; a version 1 section reads with events from the first access. */
static void rtc_section(void **state)
{
	struct machine *m = fake_machine(), *n = fake_machine();
	uint8_t a[PROTO_PLATFORM_STATE_BYTES];
	struct platform_state s;

	(void)state;
	cmos_put_at(m, 0x0a, 0x20, T2031_NS - NS / 2);
	cmos_put_at(m, 0x01, 0x20, T2031_NS - NS / 2);
	cmos_put_at(m, 0x03, 0x05, T2031_NS - NS / 2);
	cmos_put_at(m, 0x05, 0x16, T2031_NS - NS / 2);
	cmos_put_at(m, 0x0b, 0x22, T2031_NS - NS / 2);
	assert_int_equal(cmos_get_at(m, 0x0d, T2031_NS + NS / 2), 0x80);   /* UF set */
	proto_platform_state_encode(&m->platform, a);
	assert_int_equal(proto_platform_state_decode(a, sizeof(a), PROTO_STATE_PLATFORM_VERSION, &s), 0);
	assert_int_equal(s.cmos[0x0c], 0x10);
	assert_int_equal(s.rtc_sync_ns, T2031_NS + NS / 2);
	/* the machine that takes over runs the alarm due at 16:05:20, which
	 * fell while no one ran the RTC: an edge at its first look */
	n->platform = s;
	assert_true(platform_rtc_advance(&n->platform, T2031_NS + 15 * NS));
	assert_int_equal(cmos_get_at(n, 0x0c, T2031_NS + 15 * NS), 0xb0);
	/* version 1: 144 bytes, no sync time, C 0 */
	m->platform.cmos[0x0c] = 0;
	proto_platform_state_encode(&m->platform, a);
	assert_int_equal(proto_platform_state_decode(a, PROTO_PLATFORM_STATE_V1_BYTES, 1, &s), 0);
	assert_int_equal(s.rtc_sync_ns, 0);
	assert_int_equal(proto_platform_state_decode(a, PROTO_PLATFORM_STATE_BYTES, 1, &s), -EBADMSG);
	assert_int_equal(proto_platform_state_decode(a, PROTO_PLATFORM_STATE_V1_BYTES,
						     PROTO_STATE_PLATFORM_VERSION, &s), -EBADMSG);
	assert_int_equal(proto_platform_state_decode(a, PROTO_PLATFORM_STATE_BYTES, 4, &s),
			 -EPROTONOSUPPORT);
	assert_int_equal(proto_platform_state_decode(a, PROTO_PLATFORM_STATE_V2_BYTES,
						     PROTO_STATE_PLATFORM_VERSION, &s), -EBADMSG);
	a[16 + 0x0c] = 0x10;
	assert_int_equal(proto_platform_state_decode(a, PROTO_PLATFORM_STATE_V1_BYTES, 1, &s), -EBADMSG);
	/* from the first access on */
	a[16 + 0x0c] = 0;
	assert_int_equal(proto_platform_state_decode(a, PROTO_PLATFORM_STATE_V1_BYTES, 1, &s), 0);
	n->platform = s;
	assert_int_equal(cmos_get_at(n, 0x0c, T2031_NS + 30 * NS), 0);
	assert_int_equal(cmos_get_at(n, 0x0c, T2031_NS + 31 * NS), 0x10);
	free(m);
	free(n);
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

enum variant { PLAT_OK, PLAT_NONE, PLAT_BAD, PLAT_CUT, PLAT_TWICE, PLAT_V4, PLAT_V1, PLAT_V2 };

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
	if (v == PLAT_V1)
		n = PROTO_PLATFORM_STATE_V1_BYTES;  /* the layout before the RTC's interrupts */
	if (v == PLAT_V2)
		n = PROTO_PLATFORM_STATE_V2_BYTES;  /* before the divider's restart */
	if (v != PLAT_NONE)
		ADD(PROTO_STATE_PLATFORM, v == PLAT_V4 ? 4 : v == PLAT_V1 ? 1 : v == PLAT_V2 ? 2 :
		    PROTO_STATE_PLATFORM_VERSION, n);
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
	len = build_blob(buf, img, PLAT_V4);
	assert_int_equal(ckpt_state_decode(buf, len, 0x1234, 1, got), -EPROTONOSUPPORT);
	/* a version 2 section (a build before the divider's restart): read, phase 0 */
	len = build_blob(buf, img, PLAT_V2);
	assert_int_equal(ckpt_state_decode(buf, len, 0x1234, 1, got), 0);
	assert_int_equal(got->ms.platform.rtc_sync_ns, m->platform.rtc_sync_ns);
	assert_int_equal(got->ms.platform.rtc_phase_ns, 0);
	/* a version 1 section (a build before the RTC's interrupts): read */
	len = build_blob(buf, img, PLAT_V1);
	assert_int_equal(ckpt_state_decode(buf, len, 0x1234, 1, got), 0);
	assert_int_equal(got->ms.platform.rtc_offset, m->platform.rtc_offset);
	assert_int_equal(got->ms.platform.rtc_sync_ns, 0);
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

	pthread_condattr_t ca;

	assert_non_null(m);
	m->linux_guest = linux_guest;
	m->vm.fd = -1;
	m->pause_req = true;                       /* as machine_new leaves it */
	assert_int_equal(pthread_mutex_init(&m->lock, NULL), 0);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);   /* as machine.c's */
	assert_int_equal(pthread_cond_init(&m->cond, &ca), 0);
	pthread_condattr_destroy(&ca);
	assert_int_equal(machine_devices_attach(m), 0);
	return m;
}

static void bus_free(struct machine *m)
{
	machine_devices_detach(m);
	pthread_cond_destroy(&m->cond);
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

static uint64_t rtc_irqs(struct machine *m)
{
	uint64_t n;

	pthread_mutex_lock(&m->lock);
	n = m->stats.rtc_irqs;
	pthread_mutex_unlock(&m->lock);
	return n;
}

/* A --kernel machine's RTC timer thread, at the host's clock: with UIE on
 * it raises IRQ 8 at the next update on its own (no access in between),
 * not while the machine is paused, and once per clearing of register C. */
static void rtc_timer_thread(void **state)
{
	struct machine *m = bus_machine(true);
	uint32_t v;
	int i;

	(void)state;
	assert_non_null(m->rtc);
	v = 0x0b;
	assert_int_equal(pio(m, 0x70, 1, true, &v), 0);
	v = 0x12;                                  /* UIE */
	assert_int_equal(pio(m, 0x71, 1, true, &v), 0);
	v = 0x0c;
	assert_int_equal(pio(m, 0x70, 1, true, &v), 0);
	assert_int_equal(pio(m, 0x71, 1, false, &v), 0);   /* C read: no flag pending */
	usleep(1300000);                           /* paused: an update ends, no edge */
	assert_int_equal(rtc_irqs(m), 0);
	pthread_mutex_lock(&m->lock);
	m->pause_req = false;                      /* machine_resume */
	pthread_cond_broadcast(&m->cond);
	pthread_mutex_unlock(&m->lock);
	for (i = 0; i < 300 && rtc_irqs(m) == 0; i++)
		usleep(10000);
	assert_int_equal(rtc_irqs(m), 1);          /* the update missed while paused, at resume */
	usleep(1500000);
	assert_int_equal(rtc_irqs(m), 1);          /* IRQF still on: no new edge */
	v = 0;
	assert_int_equal(pio(m, 0x71, 1, false, &v), 0);
	assert_int_equal(v & 0x90, 0x90);
	for (i = 0; i < 150 && rtc_irqs(m) == 1; i++)
		usleep(10000);
	assert_int_equal(rtc_irqs(m), 2);          /* the next update, within a second */
	bus_free(m);                               /* joins the thread */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(rtc_set_by_guest),
		cmocka_unit_test(rtc_flags),
		cmocka_unit_test(rtc_alarm),
		cmocka_unit_test(rtc_day_alarm),
		cmocka_unit_test(rtc_divider_reset),
		cmocka_unit_test(rtc_periodic),
		cmocka_unit_test(rtc_section),
		cmocka_unit_test(section_roundtrip),
		cmocka_unit_test(section_refuses_bad),
		cmocka_unit_test(blob_sections),
		cmocka_unit_test(snapshot_file),
		cmocka_unit_test(bus_dispatch),
		cmocka_unit_test(rtc_timer_thread),
	};

	log_set_level(LOG_WARN);
	log_set_level(LOG_ERROR);   /* no KVM: "raising IRQ 8 failed" is expected */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
