/* The PC platform devices a Linux guest probes at boot, beside the UART and
 * PCI: the CMOS real-time clock at 0x70/0x71 (the wall clock at boot, read
 * from the host's clock in BCD, 24-hour mode; the rest of CMOS is plain
 * RAM), the i8042's status and reset command at 0x64, and the reset
 * control register at 0xCF9, the ACPI PM1a registers (linux_acpi.c's
 * FADT names them). An ACPI power-off stops the machine with status 0, a
 * reset with MACHINE_STATUS_REBOOT (`run` then boots a fresh machine).
 * Called with machine.lock held. */
#include "machine/machine.h"

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

void platform_reset(struct platform_state *p)
{
	memset(p, 0, sizeof(*p));
	p->cmos[RTC_REG_A] = 0x26;   /* 32.768 kHz time base, 1024 Hz rate; no update in progress */
	p->cmos[RTC_REG_B] = 0x02;   /* 24-hour, BCD, no interrupts */
	p->cmos[RTC_REG_D] = 0x80;   /* battery good */
	p->pm1_cnt = 1;              /* SCI_EN */
}

static uint8_t bcd(int v)
{
	return (uint8_t)((v / 10) << 4 | v % 10);
}

static uint8_t rtc_read(struct platform_state *p, uint8_t reg)
{
	time_t now = time(NULL);
	struct tm tm;

	gmtime_r(&now, &tm);
	switch (reg) {
	case RTC_SEC: return bcd(tm.tm_sec);
	case RTC_MIN: return bcd(tm.tm_min);
	case RTC_HOUR: return bcd(tm.tm_hour);
	case RTC_WDAY: return bcd(tm.tm_wday + 1);
	case RTC_MDAY: return bcd(tm.tm_mday);
	case RTC_MON: return bcd(tm.tm_mon + 1);
	case RTC_YEAR: return bcd(tm.tm_year % 100);
	case RTC_CENTURY: return bcd(19 + tm.tm_year / 100);
	case RTC_REG_C: return 0;    /* no interrupt flags */
	default: return p->cmos[reg];
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
		if (reg == &p->pm1_cnt && (p->pm1_cnt & 0x2000)) {
			log_info(TAG, "guest powered off (ACPI S%u)", (p->pm1_cnt >> 10) & 7);
			p->pm1_cnt &= (uint16_t)~0x2000;
			p->stop_req = 1;
		}
		p->pm1_cnt |= 1;
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
		else if (p->cmos_index >= RTC_REG_A && p->cmos_index != RTC_REG_C &&
			 p->cmos_index != RTC_REG_D)
			p->cmos[p->cmos_index] = *data;  /* the clock itself stays the host's */
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
			p->reset_ctl = *data & 0x0a;
		return true;
	default:
		return false;
	}
}
