/* The PC platform devices a Linux guest probes at boot, beside the UART and
 * PCI: the CMOS real-time clock at 0x70/0x71 with its IRQ 8, the i8042's
 * status and reset command at 0x64, and the reset control register at
 * 0xCF9, the ACPI PM1a registers (linux_acpi.c's FADT names them). An ACPI
 * power-off stops the machine with status 0, a reset with
 * MACHINE_STATUS_REBOOT (`run` then boots a fresh machine).
 *
 * The RTC tells the host's UTC time plus the offset the guest set
 * (struct platform_state), in BCD or binary and in 24- or 12-hour mode as
 * register B says. Setting the time the way Linux does (SET in register B,
 * the time registers written, SET cleared) or writing one time register
 * with SET clear moves the offset; while SET is on, the time registers
 * hold still. The rest of CMOS is plain RAM.
 *
 * Its interrupts are an MC146818's: with the time base running (register
 * A's divider 010) an update cycle ends at every second boundary of the
 * guest's clock (UF; UIP reads set for the 244 us before it; none while
 * SET is on), the alarm (AF) at the update whose hours, minutes and seconds
 * match registers 5, 3 and 1 (a value of 0xC0-0xFF matches any) and whose
 * day of the month matches register D's bits 0-5, the day alarm the FADT
 * names (DAY_ALRM, ACPI 6.0 table 4-15: a value that is no day in the
 * register's format, 0 or 0x3F say, is "don't care": a daily alarm), the
 * periodic flag (PF) at the rate register A's low bits select (256 Hz,
 * 128 Hz, then 8192 Hz >> (rate - 3)). A flag is set in register C whether
 * or not its enable bit in B is; IRQF is set while a flag and its enable
 * are, and as it goes on IRQ 8 (ISA, edge) gets an edge (KVM_IRQ_LINE 1
 * then 0); reading C clears it all. The flags are brought up to date
 * lazily, at each access (rtc_advance: what fell due since rtc_sync_ns),
 * and, for an interrupt the guest enabled, by the RTC's timer thread at
 * the moment it falls due, while the machine runs (never while it is
 * paused: a capture sees the state hold still).
 *
 * The divider in reset (register A's DV 11x, as Linux writes it while it
 * sets the time) holds the clock: no update cycle, no periodic tick, the
 * time registers hold still. Writing a running divider (010) again
 * restarts it from the time the registers hold, and the first update
 * comes half a second later: from then on the guest's second boundaries
 * fall rtc_phase_ns into the host's seconds.
 *
 * Everything but the power-off or reset request is checkpointed (the
 * "platform" section). Called with machine.lock held. */
#include "machine/devices.h"
#include "machine/machine_int.h"
#include "kmod/mutant.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TAG "machine"

#define RTC_PORT_INDEX 0x70
#define RTC_PORT_DATA  0x71
#define I8042_PORT_CMD 0x64
#define RESET_PORT     LINUX_RESET_PORT
#define RTC_IRQ 8

#define RTC_SEC 0x00
#define RTC_SEC_ALARM 0x01
#define RTC_MIN 0x02
#define RTC_MIN_ALARM 0x03
#define RTC_HOUR 0x04
#define RTC_HOUR_ALARM 0x05
#define RTC_WDAY 0x06
#define RTC_MDAY 0x07
#define RTC_MON 0x08
#define RTC_YEAR 0x09
#define RTC_REG_A 0x0a
#define RTC_REG_B 0x0b
#define RTC_REG_C 0x0c
#define RTC_REG_D 0x0d
#define RTC_CENTURY 0x32

#define RTC_A_UIP 0x80               /* update in progress: computed, never stored */
#define RTC_A_DV 0x70                /* divider: 010 is the 32.768 kHz time base running */
#define RTC_A_DV_RUN 0x20
#define RTC_A_DV_RESET 0x60          /* 11x: the divider chain held in reset */
#define RTC_A_RATE 0x0f
#define RTC_B_SET 0x80               /* the guest is setting the time */
#define RTC_B_PIE 0x40
#define RTC_B_AIE 0x20
#define RTC_B_UIE 0x10
#define RTC_B_BINARY 0x04            /* binary, not BCD */
#define RTC_B_24H 0x02
#define RTC_C_IRQF 0x80
#define RTC_C_PF 0x40
#define RTC_C_AF 0x20
#define RTC_C_UF 0x10
#define RTC_INTS 0x70                /* PIE AIE UIE in B, PF AF UF in C */
#define RTC_D_VRT 0x80               /* battery good */
#define RTC_D_DAY_ALARM 0x3f         /* the day-of-month alarm (FADT DAY_ALRM = 0x0D) */
#define RTC_UIP_NS 244000            /* UIP is set this long before an update */
#define RTC_HZ 32768
#define NS 1000000000ll
#define PM1_SCI_EN 0x0001
#define PM1_SLP_EN 0x2000
#define RESET_CTL_BITS 0x0a          /* 0xCF9: the bits that are kept */

/* The RTC's runtime part: a thread that runs the interrupts the guest
 * enabled when they fall due (it waits on machine.cond, which a resume, a
 * state load and a stop broadcast). */
struct rtc_timer {
	pthread_t thread;
	bool quit;
	int64_t armed_ns;            /* the host UTC time it waits for; INT64_MAX: none */
};

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
	uint8_t c = p->cmos[RTC_REG_C];
	bool irqf = p->cmos[RTC_REG_B] & c & RTC_INTS;

	if (p->cmos_index > 0x7f || (p->reset_ctl & ~RESET_CTL_BITS) ||
	    !(p->pm1_cnt & PM1_SCI_EN) || (p->pm1_cnt & PM1_SLP_EN) ||
	    p->rtc_offset > PLATFORM_RTC_OFFSET_MAX || p->rtc_offset < -PLATFORM_RTC_OFFSET_MAX ||
	    p->rtc_sync_ns < 0 || (p->cmos[RTC_REG_A] & RTC_A_UIP) || (c & 0x0f) ||
	    !(c & RTC_C_IRQF) != !irqf || (p->cmos[RTC_REG_D] & ~RTC_D_DAY_ALARM) != RTC_D_VRT ||
	    p->rtc_phase_ns < 0 || p->rtc_phase_ns >= NS)
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

/* The guest's second boundaries fall rtc_phase_ns into the host's: the
 * number of the guest's second at host time t_ns, before the offset. */
static int64_t rtc_second(const struct platform_state *p, int64_t t_ns)
{
	int64_t t = t_ns - p->rtc_phase_ns;

	return t >= 0 ? t / NS : -((-t + NS - 1) / NS);
}

/* How far into its second the guest's clock is at host time t_ns. */
static int64_t rtc_subsecond_ns(const struct platform_state *p, int64_t t_ns)
{
	return t_ns - p->rtc_phase_ns - rtc_second(p, t_ns) * NS;
}

static bool rtc_divider_reset(const struct platform_state *p)
{
	return (p->cmos[RTC_REG_A] & RTC_A_DV_RESET) == RTC_A_DV_RESET &&
	       !MUTANT(divider_reset_runs);   /* make check-mutants: the clock runs on in reset */
}

/* The time registers hold still: the guest is setting the time, or the
 * divider is in reset. */
static bool rtc_holds(const struct platform_state *p)
{
	return (p->cmos[RTC_REG_B] & RTC_B_SET) || rtc_divider_reset(p);
}

/* The guest's time at host time now_ns into the time registers. */
static void rtc_latch(struct platform_state *p, int64_t now_ns)
{
	time_t now = (time_t)rtc_second(p, now_ns) + (time_t)p->rtc_offset;
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
static void rtc_commit(struct platform_state *p, int64_t now_ns)
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
	off = (int64_t)t - rtc_second(p, now_ns);
	if (off > PLATFORM_RTC_OFFSET_MAX)
		off = PLATFORM_RTC_OFFSET_MAX;
	if (off < -PLATFORM_RTC_OFFSET_MAX)
		off = -PLATFORM_RTC_OFFSET_MAX;
	p->rtc_offset = off;
}

/* ---- interrupts --------------------------------------------------------------- */

static bool rtc_base_runs(const struct platform_state *p)
{
	return (p->cmos[RTC_REG_A] & RTC_A_DV) == RTC_A_DV_RUN;
}

static bool rtc_updates(const struct platform_state *p)
{
	return rtc_base_runs(p) && !(p->cmos[RTC_REG_B] & RTC_B_SET);
}

/* The periodic interrupt's period in ticks of the 32.768 kHz base; 0: off. */
static int64_t rtc_period_ticks(const struct platform_state *p)
{
	unsigned rate = p->cmos[RTC_REG_A] & RTC_A_RATE;

	if (!rate || !rtc_base_runs(p))
		return 0;
	return rate <= 2 ? 1ll << (rate + 6) : 1ll << (rate - 1);
}

static int64_t ns_to_ticks(int64_t ns)
{
	return ns / NS * RTC_HZ + ns % NS * RTC_HZ / NS;
}

/* The first host time at or after the start of tick number ticks. */
static int64_t ticks_to_ns(int64_t ticks)
{
	return ticks / RTC_HZ * NS + (ticks % RTC_HZ * NS + RTC_HZ - 1) / RTC_HZ;
}

static bool alarm_field(uint8_t alarm, uint8_t now)
{
	return (alarm & 0xc0) == 0xc0 || alarm == now;
}

/* Whether the seconds, minutes and hours alarm match time of day tod. */
static bool rtc_alarm_tod(const struct platform_state *p, int64_t tod)
{
	return alarm_field(p->cmos[RTC_SEC_ALARM], rtc_encode(p, (int)(tod % 60))) &&
	       alarm_field(p->cmos[RTC_MIN_ALARM], rtc_encode(p, (int)(tod / 60 % 60))) &&
	       alarm_field(p->cmos[RTC_HOUR_ALARM], rtc_encode_hour(p, (int)(tod / 3600)));
}

/* The day of the month register D's alarm names, 0 for "don't care" (a
 * value that is no day 1..31 in the register's format). */
static int rtc_day_alarm(const struct platform_state *p)
{
	uint8_t v = p->cmos[RTC_REG_D] & RTC_D_DAY_ALARM;
	int day;

	if (MUTANT(day_alarm_ignored))   /* make check-mutants: the day alarm is not looked at */
		return 0;
	if (!(p->cmos[RTC_REG_B] & RTC_B_BINARY) && (v & 0x0f) > 9)
		return 0;
	day = rtc_decode(p, v);
	return day >= 1 && day <= 31 ? day : 0;
}

static int64_t floor_div(int64_t a, int64_t b)
{
	return a >= 0 ? a / b : -((-a + b - 1) / b);
}

/* Whether an update in the guest's seconds [from, to] sets AF. A daily
 * alarm repeats within any day, one on a day of the month within any 62
 * days (every day 1..31 comes within two months), so a longer gap is
 * looked at over its end; days are looked at whole, seconds only on the
 * days the day alarm lets through. */
static bool rtc_alarm_in(const struct platform_state *p, int64_t from, int64_t to)
{
	int day = rtc_day_alarm(p);
	int64_t span = day ? 62 * 86400 : 86400;

	if (to - from >= span)
		from = to - span + 1;
	for (int64_t d0 = floor_div(from, 86400) * 86400; d0 <= to; d0 += 86400) {
		int64_t s = from > d0 ? from : d0, e = to < d0 + 86399 ? to : d0 + 86399;

		if (day) {
			time_t t = (time_t)d0;
			struct tm tm;

			if (!gmtime_r(&t, &tm) || tm.tm_mday != day)
				continue;
		}
		for (; s <= e; s++)
			if (rtc_alarm_tod(p, s - d0))
				return true;
	}
	return false;
}

/* IRQF from the flags and their enables; true when it has just gone on
 * (IRQ 8 then gets an edge). */
static bool rtc_irqf(struct platform_state *p)
{
	uint8_t c = p->cmos[RTC_REG_C];
	bool on = p->cmos[RTC_REG_B] & c & RTC_INTS;

	p->cmos[RTC_REG_C] = (uint8_t)(on ? c | RTC_C_IRQF : c & ~RTC_C_IRQF);
	return on && !(c & RTC_C_IRQF);
}

/* Runs what fell due in (rtc_sync_ns, now_ns]: a periodic tick sets PF,
 * an update cycle UF and, if the alarm matches the time it makes, AF. The
 * alarm repeats every day at most, so a longer gap is looked at over its
 * last day. A clock gone back runs nothing. True when IRQF went on. */
bool platform_rtc_advance(struct platform_state *p, int64_t now_ns)
{
	int64_t last = p->rtc_sync_ns, period = rtc_period_ticks(p);

	p->rtc_sync_ns = now_ns;
	if (last <= 0 || now_ns <= last)
		return false;
	if (period && ns_to_ticks(now_ns) / period != ns_to_ticks(last) / period)
		p->cmos[RTC_REG_C] |= RTC_C_PF;
	if (rtc_updates(p) && rtc_second(p, now_ns) > rtc_second(p, last)) {
		p->cmos[RTC_REG_C] |= RTC_C_UF;
		if (!(p->cmos[RTC_REG_C] & RTC_C_AF) &&
		    rtc_alarm_in(p, rtc_second(p, last) + 1 + p->rtc_offset,
				 rtc_second(p, now_ns) + p->rtc_offset))
			p->cmos[RTC_REG_C] |= RTC_C_AF;
	}
	return rtc_irqf(p);
}

/* The host time of the next event that would turn IRQF on, INT64_MAX if
 * none can (it is on already, or no flag that would is enabled). The alarm
 * is looked for at every update while AIE is on. */
int64_t platform_rtc_next(const struct platform_state *p, int64_t now_ns)
{
	uint8_t b = p->cmos[RTC_REG_B], c = p->cmos[RTC_REG_C];
	uint8_t want = b & RTC_INTS & ~c;
	int64_t next = INT64_MAX, period = rtc_period_ticks(p);

	if (c & RTC_C_IRQF)
		return INT64_MAX;
	if ((want & RTC_B_PIE) && period)
		next = ticks_to_ns((ns_to_ticks(now_ns) / period + 1) * period);
	if ((want & (RTC_B_AIE | RTC_B_UIE)) && rtc_updates(p) &&
	    (rtc_second(p, now_ns) + 1) * NS + p->rtc_phase_ns < next)
		next = (rtc_second(p, now_ns) + 1) * NS + p->rtc_phase_ns;
	return next;
}

static void rtc_pulse(struct machine *m)
{
	m->stats.rtc_irqs++;
	if (kvm_vm_irq_line(&m->vm, RTC_IRQ, 1) < 0 || kvm_vm_irq_line(&m->vm, RTC_IRQ, 0) < 0)
		log_warn(TAG, "raising IRQ %d (RTC) failed", RTC_IRQ);
}

static uint8_t rtc_read(struct platform_state *p, uint8_t reg, int64_t now_ns)
{
	uint8_t v;

	if (rtc_is_time(reg) && !rtc_holds(p))
		rtc_latch(p, now_ns);
	switch (reg) {
	case RTC_REG_A:
		v = p->cmos[reg];
		if (rtc_updates(p) && rtc_subsecond_ns(p, now_ns) >= NS - RTC_UIP_NS)
			v |= RTC_A_UIP;
		return v;
	case RTC_REG_C:
		v = p->cmos[reg];
		p->cmos[reg] = 0;            /* read to clear; IRQF goes off with the flags */
		return v;
	default:
		return p->cmos[reg];
	}
}

/* True when IRQF went on (the enable of a flag that is set). */
static bool rtc_write(struct platform_state *p, uint8_t reg, uint8_t v, int64_t now_ns)
{
	bool setting = p->cmos[RTC_REG_B] & RTC_B_SET, held = rtc_holds(p);

	if (rtc_is_time(reg)) {
		if (!held)
			rtc_latch(p, now_ns);   /* one register changes, the rest is now */
		p->cmos[reg] = v;
		if (!held)
			rtc_commit(p, now_ns);
		return false;
	}
	switch (reg) {
	case RTC_REG_A: {
		bool was_reset = rtc_divider_reset(p);

		if (!held)
			rtc_latch(p, now_ns);   /* a reset holds the time it reads now */
		p->cmos[reg] = v & (uint8_t)~RTC_A_UIP;
		if (was_reset && rtc_base_runs(p)) {
			/* Restarted: the registers' time now, the next second
			 * half a second from now. */
			p->rtc_phase_ns = (now_ns + NS / 2) % NS;
			if (!setting)
				rtc_commit(p, now_ns);
		}
		return false;
	}
	case RTC_REG_B:
		/* SET stops the update cycle (UIE then means nothing) */
		if (v & RTC_B_SET)
			v &= (uint8_t)~RTC_B_UIE;
		p->cmos[reg] = v;
		if ((v & RTC_B_SET) && !held)
			rtc_latch(p, now_ns);   /* the registers hold still from here */
		else if (!(v & RTC_B_SET) && setting && !rtc_divider_reset(p))
			rtc_commit(p, now_ns);  /* (in reset: at the divider's restart) */
		return rtc_irqf(p);
	case RTC_REG_D:
		/* VRT reads set, bit 6 clear; bits 0-5 are the day alarm */
		p->cmos[reg] = (uint8_t)(RTC_D_VRT | (v & RTC_D_DAY_ALARM));
		return false;
	case RTC_REG_C:
		return false;            /* read-only */
	default:
		p->cmos[reg] = v;
		return false;
	}
}

/* One access to the data port at host time now_ns: what fell due is run
 * first, so the access sees (and a read of C clears) it, and the timer
 * thread is told when the next interrupt's time changed. */
static void rtc_data_io(struct machine *m, bool write, uint8_t *data, int64_t now_ns)
{
	struct platform_state *p = &m->platform;
	bool edge = platform_rtc_advance(p, now_ns);

	if (!write)
		*data = rtc_read(p, p->cmos_index, now_ns);
	else if (rtc_write(p, p->cmos_index, *data, now_ns))
		edge = true;
	if (edge)
		rtc_pulse(m);
	if (m->rtc && platform_rtc_next(p, now_ns) != m->rtc->armed_ns)
		pthread_cond_broadcast(&m->cond);
}

static int64_t utc_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * NS + ts.tv_nsec;
}

static void *rtc_thread(void *arg)
{
	struct machine *m = arg;
	struct rtc_timer *t = m->rtc;

	pthread_mutex_lock(&m->lock);
	while (!t->quit) {
		int64_t now = utc_now_ns(), next = INT64_MAX;

		if (!m->pause_req && !m->stopping) {
			if (platform_rtc_advance(&m->platform, now))
				rtc_pulse(m);
			next = platform_rtc_next(&m->platform, now);
		}
		t->armed_ns = next;
		if (next == INT64_MAX) {
			pthread_cond_wait(&m->cond, &m->lock);
		} else {
			/* machine.cond runs on CLOCK_MONOTONIC */
			struct timespec until;
			int64_t at;

			clock_gettime(CLOCK_MONOTONIC, &until);
			at = (int64_t)until.tv_sec * NS + until.tv_nsec + (next - now);
			until.tv_sec = (time_t)(at / NS);
			until.tv_nsec = (long)(at % NS);
			pthread_cond_timedwait(&m->cond, &m->lock, &until);
		}
	}
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

static int rtc_timer_start(struct machine *m)
{
	int r;

	m->rtc = calloc(1, sizeof(*m->rtc));
	if (!m->rtc)
		return -ENOMEM;
	m->rtc->armed_ns = INT64_MAX;
	if ((r = -pthread_create(&m->rtc->thread, NULL, rtc_thread, m)) < 0) {
		log_error(TAG, "RTC timer thread: %s", strerror(-r));
		free(m->rtc);
		m->rtc = NULL;
	}
	return r;
}

static void platform_detach(struct machine *m)
{
	if (!m->rtc)
		return;
	pthread_mutex_lock(&m->lock);
	m->rtc->quit = true;
	pthread_cond_broadcast(&m->cond);
	pthread_mutex_unlock(&m->lock);
	pthread_join(m->rtc->thread, NULL);
	free(m->rtc);
	m->rtc = NULL;
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
	return platform_io_at(m, port, size, write, data, utc_now_ns());
}

bool platform_io_at(struct machine *m, uint16_t port, int size, bool write, uint8_t *data,
		    int64_t now_ns)
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
		rtc_data_io(m, write, data, now_ns);
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
	return rtc_timer_start(m);
}

static void platform_save(struct machine *m, struct machine_state *st)
{
	st->platform = m->platform;
}

static void platform_load(struct machine *m, const struct machine_state *st)
{
	m->platform = st->platform;
	m->platform.stop_req = 0;    /* a request of the machine that made it */
	/* IRQ 8 is edge-triggered: an edge already raised is in the
	 * irqchip's state, which the VM's part of the state carries. The
	 * timer thread looks at the new state (when the machine runs). */
	pthread_cond_broadcast(&m->cond);
}

const struct machine_device platform_device = {
	"platform", platform_attach, platform_detach, platform_save, platform_load, NULL,
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
