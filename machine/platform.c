/* The PC platform devices a Linux guest probes at boot, beside the UART and
 * PCI: the CMOS real-time clock at 0x70/0x71, the i8042's status and reset
 * command at 0x64, and the reset control register at 0xCF9, the ACPI PM1a
 * registers (linux_acpi.c's FADT names them). An ACPI power-off stops the
 * machine with status 0, a reset with MACHINE_STATUS_REBOOT (`run` then
 * boots a fresh machine).
 *
 * The RTC tells the host's UTC time plus the offset the guest set
 * (struct platform_state), in BCD or binary and in 24- or 12-hour mode as
 * register B says. Setting the time the way Linux does (SET in register B,
 * the time registers written, SET cleared) or writing one time register
 * with SET clear moves the offset; while SET is on, the time registers
 * hold still. The rest of CMOS is plain RAM. Everything but the power-off
 * or reset request is checkpointed (the "platform" section).
 * Called with machine.lock held. */
#include "machine/devices.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#define TAG "machine"

#define RTC_PORT_INDEX 0x70
#define RTC_PORT_DATA  0x71
#define I8042_PORT_CMD 0x64
#define RESET_PORT     LINUX_RESET_PORT

#define RTC_SEC 0x00
#define RTC_MIN 0x02
#define RTC_HOUR 0x04
#define RTC_WDAY 0x06
#define RTC_MDAY 0x07
#define RTC_MON 0x08
#define RTC_YEAR 0x09
#define RTC_REG_A 0x0a
#define RTC_REG_B 0x0b
#define RTC_REG_C 0x0c
#define RTC_REG_D 0x0d
#define RTC_CENTURY 0x32

#define RTC_A_UIP 0x80               /* update in progress: never */
#define RTC_B_SET 0x80               /* the guest is setting the time */
#define RTC_B_BINARY 0x04            /* binary, not BCD */
#define RTC_B_24H 0x02
#define RTC_D_VRT 0x80               /* battery good */
#define PM1_SCI_EN 0x0001
#define PM1_SLP_EN 0x2000
#define RESET_CTL_BITS 0x0a          /* 0xCF9: the bits that are kept */

void platform_reset(struct platform_state *p)
{
	memset(p, 0, sizeof(*p));
	p->cmos[RTC_REG_A] = 0x26;   /* 32.768 kHz time base, 1024 Hz rate; no update in progress */
	p->cmos[RTC_REG_B] = RTC_B_24H;   /* 24-hour, BCD, no interrupts */
	p->cmos[RTC_REG_D] = RTC_D_VRT;
	p->pm1_cnt = PM1_SCI_EN;
}

int platform_check(const struct platform_state *p)
{
	if (p->cmos_index > 0x7f || (p->reset_ctl & ~RESET_CTL_BITS) ||
	    !(p->pm1_cnt & PM1_SCI_EN) || (p->pm1_cnt & PM1_SLP_EN) ||
	    p->rtc_offset > PLATFORM_RTC_OFFSET_MAX || p->rtc_offset < -PLATFORM_RTC_OFFSET_MAX ||
	    (p->cmos[RTC_REG_A] & RTC_A_UIP) || p->cmos[RTC_REG_C] || p->cmos[RTC_REG_D] != RTC_D_VRT)
		return -EINVAL;
	return 0;
}

static bool rtc_is_time(uint8_t reg)
{
	return reg == RTC_CENTURY || (reg <= RTC_YEAR && reg != 1 && reg != 3 && reg != 5);
}

static uint8_t rtc_encode(const struct platform_state *p, int v)
{
	return (p->cmos[RTC_REG_B] & RTC_B_BINARY) ? (uint8_t)v : (uint8_t)((v / 10) << 4 | v % 10);
}

static int rtc_decode(const struct platform_state *p, uint8_t v)
{
	return (p->cmos[RTC_REG_B] & RTC_B_BINARY) ? v : (v >> 4) * 10 + (v & 0xf);
}

/* 12-hour mode: 1..12, bit 7 for PM. */
static uint8_t rtc_encode_hour(const struct platform_state *p, int h)
{
	if (p->cmos[RTC_REG_B] & RTC_B_24H)
		return rtc_encode(p, h);
	return (uint8_t)(rtc_encode(p, h % 12 ? h % 12 : 12) | (h >= 12 ? 0x80 : 0));
}

static int rtc_decode_hour(const struct platform_state *p, uint8_t v)
{
	if (p->cmos[RTC_REG_B] & RTC_B_24H)
		return rtc_decode(p, v);
	return rtc_decode(p, v & 0x7f) % 12 + (v & 0x80 ? 12 : 0);
}

/* The guest's time now into the time registers. */
static void rtc_latch(struct platform_state *p)
{
	time_t now = time(NULL) + (time_t)p->rtc_offset;
	struct tm tm;

	gmtime_r(&now, &tm);
	p->cmos[RTC_SEC] = rtc_encode(p, tm.tm_sec);
	p->cmos[RTC_MIN] = rtc_encode(p, tm.tm_min);
	p->cmos[RTC_HOUR] = rtc_encode_hour(p, tm.tm_hour);
	p->cmos[RTC_WDAY] = rtc_encode(p, tm.tm_wday + 1);
	p->cmos[RTC_MDAY] = rtc_encode(p, tm.tm_mday);
	p->cmos[RTC_MON] = rtc_encode(p, tm.tm_mon + 1);
	p->cmos[RTC_YEAR] = rtc_encode(p, tm.tm_year % 100);
	p->cmos[RTC_CENTURY] = rtc_encode(p, 19 + tm.tm_year / 100);
}

/* The time registers as the guest set them: the offset from the host's
 * clock from now on (kept within what a checkpoint accepts). */
static void rtc_commit(struct platform_state *p)
{
	struct tm tm = { 0 };
	time_t t;
	int64_t off;

	tm.tm_sec = rtc_decode(p, p->cmos[RTC_SEC]);
	tm.tm_min = rtc_decode(p, p->cmos[RTC_MIN]);
	tm.tm_hour = rtc_decode_hour(p, p->cmos[RTC_HOUR]);
	tm.tm_mday = rtc_decode(p, p->cmos[RTC_MDAY]);
	tm.tm_mon = rtc_decode(p, p->cmos[RTC_MON]) - 1;
	tm.tm_year = rtc_decode(p, p->cmos[RTC_CENTURY]) * 100 + rtc_decode(p, p->cmos[RTC_YEAR]) -
		     1900;
	t = timegm(&tm);
	off = (int64_t)t - (int64_t)time(NULL);
	if (off > PLATFORM_RTC_OFFSET_MAX)
		off = PLATFORM_RTC_OFFSET_MAX;
	if (off < -PLATFORM_RTC_OFFSET_MAX)
		off = -PLATFORM_RTC_OFFSET_MAX;
	p->rtc_offset = off;
}

static uint8_t rtc_read(struct platform_state *p, uint8_t reg)
{
	if (rtc_is_time(reg) && !(p->cmos[RTC_REG_B] & RTC_B_SET))
		rtc_latch(p);
	return p->cmos[reg];         /* reg C: no interrupt flags, ever */
}

static void rtc_write(struct platform_state *p, uint8_t reg, uint8_t v)
{
	bool setting = p->cmos[RTC_REG_B] & RTC_B_SET;

	if (rtc_is_time(reg)) {
		if (!setting)
			rtc_latch(p);        /* one register changes, the rest is now */
		p->cmos[reg] = v;
		if (!setting)
			rtc_commit(p);
		return;
	}
	switch (reg) {
	case RTC_REG_A:
		p->cmos[reg] = v & (uint8_t)~RTC_A_UIP;
		return;
	case RTC_REG_B:
		p->cmos[reg] = v;
		if ((v & RTC_B_SET) && !setting)
			rtc_latch(p);        /* the registers hold still from here */
		else if (!(v & RTC_B_SET) && setting)
			rtc_commit(p);
		return;
	case RTC_REG_C:
	case RTC_REG_D:
		return;                  /* read-only */
	default:
		p->cmos[reg] = v;
		return;
	}
}

static void reset(struct machine *m, const char *how)
{
	log_info(TAG, "guest reset (%s)", how);
	m->platform.stop_req = 2;
}

/* PM1a status (write 1 to clear: nothing is ever set), enable, control.
 * SLP_EN (control bit 13) enters the sleep state SLP_TYP names: the DSDT
 * names only S5 (power-off). SCI_EN (bit 0) reads set: always ACPI mode. */
static void pm1_io(struct machine *m, uint16_t port, int size, bool write, uint8_t *data)
{
	struct platform_state *p = &m->platform;

	for (int i = 0; i < size && i < 4; i++) {
		unsigned off = (unsigned)(port + i - LINUX_ACPI_PM1_EVT);
		uint16_t *reg = off < 2 ? NULL : off < 4 ? &p->pm1_en : off < 6 ? &p->pm1_cnt : NULL;
		unsigned shift = 8 * (off & 1);

		if (!write) {
			data[i] = reg ? (uint8_t)(*reg >> shift) : 0;
			continue;
		}
		if (!reg)
			continue;
		*reg = (uint16_t)((*reg & ~(0xffu << shift)) | (unsigned)data[i] << shift);
		if (reg == &p->pm1_cnt && (p->pm1_cnt & PM1_SLP_EN)) {
			log_info(TAG, "guest powered off (ACPI S%u)", (p->pm1_cnt >> 10) & 7);
			p->pm1_cnt &= (uint16_t)~PM1_SLP_EN;
			p->stop_req = 1;
		}
		p->pm1_cnt |= PM1_SCI_EN;
	}
}

bool platform_io(struct machine *m, uint16_t port, int size, bool write, uint8_t *data)
{
	struct platform_state *p = &m->platform;

	if (port >= LINUX_ACPI_PM1_EVT && port < LINUX_ACPI_PM1_CNT + 2) {
		pm1_io(m, port, size, write, data);
		return true;
	}
	switch (port) {
	case RTC_PORT_INDEX:
		if (write)
			p->cmos_index = *data & 0x7f;   /* bit 7: NMI mask */
		else
			*data = p->cmos_index;
		return true;
	case RTC_PORT_DATA:
		if (!write)
			*data = rtc_read(p, p->cmos_index);
		else
			rtc_write(p, p->cmos_index, *data);
		return true;
	case I8042_PORT_CMD:
		/* No keyboard: status reads "input buffer empty, no output", so
		 * a driver waiting to send a command does not wait; 0xFE pulses
		 * the reset line. */
		if (!write)
			*data = 0;
		else if (*data == 0xfe)
			reset(m, "i8042");
		return true;
	case RESET_PORT:
		if (size != 1)
			return false;            /* a 32-bit access at 0xCF8 is PCI's */
		if (!write)
			*data = p->reset_ctl;
		else if ((*data & 0x04) && !(p->reset_ctl & 0x04))
			reset(m, "port 0xcf9");
		else
			p->reset_ctl = *data & RESET_CTL_BITS;
		return true;
	default:
		return false;
	}
}

/* ---- on the bus: a --kernel machine's only ------------------------------------- */

static int platform_bus_io(struct machine *m, uint64_t addr, int size, bool write, uint8_t *data)
{
	if (!platform_io(m, (uint16_t)addr, size, write, data))
		return -ENOENT;                   /* 0xCF9 as part of PCI's 0xCF8 */
	if (m->platform.stop_req)
		return m->platform.stop_req == 2 ? MACHINE_IO_RESET : MACHINE_IO_POWEROFF;
	return 0;
}

static int platform_attach(struct machine *m)
{
	int r;

	platform_reset(&m->platform);
	if (!m->linux_guest)
		return 0;
	if ((r = machine_bus_add(m, MACHINE_PIO, RTC_PORT_INDEX, 2, platform_bus_io)) < 0 ||
	    (r = machine_bus_add(m, MACHINE_PIO, I8042_PORT_CMD, 1, platform_bus_io)) < 0 ||
	    (r = machine_bus_add(m, MACHINE_PIO, RESET_PORT, 1, platform_bus_io)) < 0 ||
	    (r = machine_bus_add(m, MACHINE_PIO, LINUX_ACPI_PM1_EVT,
				 LINUX_ACPI_PM1_CNT + 2 - LINUX_ACPI_PM1_EVT, platform_bus_io)) < 0)
		return r;
	return 0;
}

static void platform_save(struct machine *m, struct machine_state *st)
{
	st->platform = m->platform;
}

static void platform_load(struct machine *m, const struct machine_state *st)
{
	m->platform = st->platform;
	m->platform.stop_req = 0;    /* a request of the machine that made it */
}

const struct machine_device platform_device = {
	"platform", platform_attach, NULL, platform_save, platform_load, NULL,
};

/* KVM's paravirtual wall clock (struct pvclock_wall_clock: version, seconds,
 * nanoseconds, 12 bytes) lives in guest RAM where MSR_KVM_WALL_CLOCK or its
 * _NEW twin points, and KVM writes it there, from this host's clock, on any
 * write of that MSR, a host's restore included (kvm_write_wall_clock). So
 * applying a checkpoint's vCPU state would change RAM the checkpoint has
 * just set: verify mode found a Linux standby's page 0x4200 differing from
 * its primary's at every epoch, in those 12 bytes alone. The guest writes
 * the MSR again before each read of the struct, so the bytes the
 * checkpoint carries are as good as KVM's and are the ones kept. */
#define MSR_KVM_WALL_CLOCK     0x11u
#define MSR_KVM_WALL_CLOCK_NEW 0x4b564d00u
#define PV_WALL_CLOCK_BYTES    12

int platform_set_vcpu_state(struct machine *m, int cpu, const struct kvm_vcpu_state *st)
{
	uint8_t keep[2][PV_WALL_CLOCK_BYTES], *at[2];
	int n = 0, r;

	for (uint32_t i = 0; i < st->nmsrs && i < KVM_MAX_MSRS && n < 2; i++) {
		uint32_t index = st->msrs[i].index;

		if ((index == MSR_KVM_WALL_CLOCK || index == MSR_KVM_WALL_CLOCK_NEW) && st->msrs[i].data &&
		    (at[n] = machine_gpa_ram(m, st->msrs[i].data, PV_WALL_CLOCK_BYTES, NULL))) {
			memcpy(keep[n], at[n], PV_WALL_CLOCK_BYTES);
			n++;
		}
	}
	r = kvm_vcpu_set_state(&m->vcpus[cpu].kvm, st);
	while (n-- > 0)   /* the first saved last: the two may name one address */
		memcpy(at[n], keep[n], PV_WALL_CLOCK_BYTES);
	return r;
}
