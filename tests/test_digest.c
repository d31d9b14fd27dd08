/* checkpoint/digest.c: the state digest UNDERSTUDY_VERIFY compares.
 *  - a capture applied to a fresh machine and read back from KVM digests
 *    equal to the source read at the pause; every exception digest.c makes
 *    (TSC, kvmclock, LAPIC TMCCT, PIT count_load_time) is shown to be
 *    needed: the raw field does change on that round trip;
 *  - a change in any one part is named as that part, nothing else;
 *  - a checkpoint missing a piece of state (a fresh vCPU's LAPIC, no MSRs)
 *    is caught by the digest of the standby;
 *  - the platform devices' state (CMOS, the RTC's offset, ACPI PM1a, 0xCF9)
 *    set through their ports travels in a capture to a fresh machine: equal
 *    digests, the same clock there; a bad "platform" section is refused and
 *    leaves the target's devices as they were;
 *  - the wire form round-trips and rejects bad lengths;
 *  - a parked machine's PIT does not tick (standby_pit_held). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "checkpoint/checkpoint.h"
#include "machine/devices.h"
#include "proto/proto.h"
#include "tests/harness.h"

#define MSR_IA32_TSC 0x10u
#define APIC_TMCCT 0x390u
#define MSR_STAR 0xc0000081u

struct side {
	struct machine_state ms;
	struct kvm_vcpu_state v[2];
};

static void read_side(struct machine *m, struct side *s)
{
	assert_int_equal(machine_get_state(m, &s->ms), 0);
	for (int i = 0; i < m->ncpus; i++)
		assert_int_equal(machine_get_vcpu_state(m, i, &s->v[i]), 0);
}

static uint64_t msr(const struct kvm_vcpu_state *v, uint32_t index)
{
	for (uint32_t i = 0; i < v->nmsrs; i++)
		if (v->msrs[i].index == index)
			return v->msrs[i].data;
	fail_msg("MSR 0x%x not in the state", index);
	return 0;
}

static void set_msr(struct kvm_vcpu_state *v, uint32_t index, uint64_t data)
{
	for (uint32_t i = 0; i < v->nmsrs; i++)
		if (v->msrs[i].index == index) {
			v->msrs[i].data = data;
			return;
		}
	fail_msg("MSR 0x%x not in the state", index);
}

/* The stress guest (2 vCPUs, LAPIC timer, AVX) captured at random moments,
 * applied to a fresh machine, read back. */
static void roundtrip_equal(void **state)
{
	struct side *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));
	int seen_tsc = 0, seen_clock = 0, seen_tmcct = 0, seen_pit = 0;
	const int trials = 4;

	(void)state;
	for (int t = 0; t < trials; t++) {
		struct th_vm src, dst;
		struct proto_verify da, db;
		struct ckpt c;
		char diff[512];
		int n;

		assert_int_equal(th_vm_new(&src, "stress", 16 << 20, 2, true), 0);
		assert_int_equal(th_vm_new(&dst, "stress", 16 << 20, 2, false), 0);
		ckpt_init(&c);
		machine_resume(src.m);
		th_sleep_us(60000 + (uint64_t)t * 40000);
		machine_pause(src.m);
		/* as the primary does: digest first, then the capture */
		assert_int_equal(ckpt_digest_machine(src.m, &da), 0);
		read_side(src.m, a);
		assert_int_equal(ckpt_capture(src.m, &c, true), 0);
		th_sleep_us(2000);
		assert_int_equal(ckpt_apply(dst.m, &c), 0);
		th_sleep_us(2000);
		assert_int_equal(ckpt_digest_machine(dst.m, &db), 0);
		read_side(dst.m, b);
		n = ckpt_digest_diff(&da, &db, diff, sizeof(diff));
		if (n)
			fail_msg("trial %d: round trip differs in %s", t, diff);
		/* The exceptions are needed: the raw fields moved. */
		for (int i = 0; i < 2; i++) {
			seen_tsc += msr(&b->v[i], MSR_IA32_TSC) > msr(&a->v[i], MSR_IA32_TSC);
			seen_tmcct += memcmp(a->v[i].lapic.regs + APIC_TMCCT,
					     b->v[i].lapic.regs + APIC_TMCCT, 4) != 0;
		}
		seen_clock += b->ms.vm.clock.clock > a->ms.vm.clock.clock;
		for (int ch = 0; ch < 3; ch++)
			seen_pit += a->ms.vm.pit.channels[ch].count_load_time !=
				    b->ms.vm.pit.channels[ch].count_load_time;
		ckpt_fini(&c);
		th_vm_free(&dst);
		th_vm_free(&src);
	}
	printf("roundtrip_equal: %d trials equal; raw fields that moved: TSC %d/%d, kvmclock %d/%d, "
	       "LAPIC TMCCT %d/%d, PIT count_load_time %d/%d\n", trials, seen_tsc, 2 * trials,
	       seen_clock, trials, seen_tmcct, 2 * trials, seen_pit, 3 * trials);
	assert_int_equal(seen_tsc, 2 * trials);
	assert_int_equal(seen_clock, trials);
	assert_true(seen_tmcct > 0);
	assert_true(seen_pit > 0);
	free(a);
	free(b);
}

/* The RAM digest changes with any one bit of any word, with the top bits
 * of two words (which a plain xor-multiply hash would cancel), with two
 * words swapped, and with the length. */
static void ram_digest_sees_changes(void **state)
{
	const size_t len = 256 << 10;
	uint8_t *p = malloc(len);
	uint32_t base;
	uint64_t seed = 12345;

	(void)state;
	assert_non_null(p);
	for (size_t i = 0; i < len; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		p[i] = (uint8_t)(seed >> 56);
	}
	base = ckpt_digest_ram(p, len);
	assert_int_equal(base, ckpt_digest_ram(p, len));
	for (size_t off = 0; off < len; off += 4093 * 8 + 8) {
		for (int bit = 0; bit < 64; bit++) {
			p[off + bit / 8] ^= (uint8_t)(1u << (bit % 8));
			assert_int_not_equal(base, ckpt_digest_ram(p, len));
			p[off + bit / 8] ^= (uint8_t)(1u << (bit % 8));
		}
	}
	p[7] ^= 0x80;
	p[len - 1] ^= 0x80;
	assert_int_not_equal(base, ckpt_digest_ram(p, len));
	p[7 + 32] ^= 0x80;
	p[len - 1] ^= 0x80;
	assert_int_not_equal(base, ckpt_digest_ram(p, len));   /* same lane, two blocks */
	p[7] ^= 0x80;
	p[7 + 32] ^= 0x80;
	for (int k = 0; k < 8; k++) {
		uint8_t t = p[4096 + k];

		p[4096 + k] = p[8192 + k];
		p[8192 + k] = t;
	}
	assert_int_not_equal(base, ckpt_digest_ram(p, len));
	assert_int_not_equal(ckpt_digest_ram(p, len), ckpt_digest_ram(p, len - 4096));
	free(p);
}

/* Every part is digested, and a change in one is named as that one. */
static void names_the_part(void **state)
{
	struct th_vm vm;
	struct side *s = malloc(sizeof(*s)), *x = malloc(sizeof(*x));
	struct proto_verify base, d;
	char diff[512];
	const char *want[] = {
		"vcpu1.regs", "vcpu1.sregs", "vcpu1.xsave", "vcpu1.xcrs", "vcpu1.msrs",
		"vcpu1.lapic", "vcpu1.events", "vcpu1.mp_state", "vcpu1.debugregs",
		"pic-master", "pic-slave", "ioapic", "pit", "uart",
		"vcpu1.tsc(backward)", "clock(backward)", "memory", "pci", "pci", "platform",
		"platform", "platform", "platform",
	};

	(void)state;
	assert_int_equal(th_vm_new(&vm, "stress", 16 << 20, 2, true), 0);
	machine_resume(vm.m);
	th_sleep_us(50000);
	machine_pause(vm.m);
	read_side(vm.m, s);
	th_vm_free(&vm);
	memset(&base, 0, sizeof(base));
	base.ncpus = 2;
	ckpt_digest_vm(&s->ms, &base);
	for (int i = 0; i < 2; i++)
		ckpt_digest_vcpu(&s->v[i], &base.vcpu[i]);
	for (size_t k = 0; k < sizeof(want) / sizeof(want[0]); k++) {
		struct kvm_vcpu_state *v = &x->v[1];

		memcpy(x, s, sizeof(*x));
		switch (k) {
		case 0: v->regs.rip ^= 1; break;
		case 1: v->sregs.cr3 ^= 0x1000; break;
		case 2: v->xsave[160 + 5] ^= 1; break;             /* xmm0 */
		case 3: v->xcrs.xcrs[0].value ^= 4; break;
		case 4: v->msrs[v->nmsrs - 1].data ^= 1; break;
		case 5: v->lapic.regs[0x80] ^= 0x10; break;         /* TPR */
		case 6: v->events.nmi.pending ^= 1; break;
		case 7: v->mp_state.mp_state ^= 1; break;
		case 8: v->debugregs.dr7 ^= 1; break;
		case 9: x->ms.vm.pic_master.chip.pic.imr ^= 1; break;
		case 10: x->ms.vm.pic_slave.chip.pic.irr ^= 1; break;
		case 11: x->ms.vm.ioapic.chip.ioapic.redirtbl[3].bits ^= 1ull << 16; break;
		case 12: x->ms.vm.pit.channels[0].count ^= 1; break;
		case 13: x->ms.uart.scr ^= 1; break;
		case 14:
			for (uint32_t i = 0; i < v->nmsrs; i++)
				if (v->msrs[i].index == MSR_IA32_TSC)
					v->msrs[i].data -= 1;
			break;
		case 15: x->ms.vm.clock.clock -= 1; break;
		case 17: x->ms.pci.net.q[0].last_avail ^= 1; break;   /* the NIC's transport */
		case 18: x->ms.pci.net.dev_flags ^= 1; break;
		case 19: x->ms.platform.cmos[0x40] ^= 1; break;
		case 20: x->ms.platform.rtc_offset += 1; break;
		case 21: x->ms.platform.cmos[0x0c] ^= 0x10; break;   /* the RTC's UF */
		case 22: x->ms.platform.rtc_sync_ns += 1; break;
		default: break;
		}
		memset(&d, 0, sizeof(d));
		d.ncpus = 2;
		d.mem = base.mem ^ (k == 16);
		ckpt_digest_vm(&x->ms, &d);
		for (int i = 0; i < 2; i++)
			ckpt_digest_vcpu(&x->v[i], &d.vcpu[i]);
		assert_int_equal(ckpt_digest_diff(&base, &d, diff, sizeof(diff)), 1);
		assert_string_equal(diff, want[k]);
	}
	/* What the exceptions leave out changes nothing; time running on is fine. */
	memcpy(x, s, sizeof(*x));
	x->v[0].lapic.regs[APIC_TMCCT] ^= 1;
	x->ms.vm.pit.channels[1].count_load_time += 12345;
	x->ms.vm.clock.clock += 1000000;
	x->ms.platform.stop_req = 1;      /* acted on at once, not carried */
	x->ms.vm.clock.realtime += 1000000;
	x->ms.vm.clock.host_tsc += 1000000;
	for (uint32_t i = 0; i < x->v[0].nmsrs; i++)
		if (x->v[0].msrs[i].index == MSR_IA32_TSC)
			x->v[0].msrs[i].data += 1000000;
	memset(&d, 0, sizeof(d));
	d.ncpus = 2;
	d.mem = base.mem;
	ckpt_digest_vm(&x->ms, &d);
	for (int i = 0; i < 2; i++)
		ckpt_digest_vcpu(&x->v[i], &d.vcpu[i]);
	assert_int_equal(ckpt_digest_diff(&base, &d, diff, sizeof(diff)), 0);
	free(s);
	free(x);
}

/* A checkpoint missing a piece of state leaves a standby the digest tells
 * apart from the source, naming the piece. */
static void missing_state_caught(void **state)
{
	struct kvm_vcpu_state *st = malloc(sizeof(*st)), *fresh = malloc(sizeof(*fresh));
	const char *what[] = { "vcpu1.lapic", "vcpu0.msrs" };
	struct th_vm src, f;
	struct ckpt c;
	struct proto_verify da, db;

	(void)state;
	assert_int_equal(th_vm_new(&f, "stress", 16 << 20, 2, false), 0);
	assert_int_equal(machine_get_vcpu_state(f.m, 1, fresh), 0);
	th_vm_free(&f);
	assert_int_equal(th_vm_new(&src, "stress", 16 << 20, 2, true), 0);
	ckpt_init(&c);
	machine_resume(src.m);
	th_sleep_us(80000);
	machine_pause(src.m);
	assert_int_equal(ckpt_digest_machine(src.m, &da), 0);
	assert_int_equal(ckpt_capture(src.m, &c, true), 0);
	for (int k = 0; k < 2; k++) {
		struct th_vm dst;
		char diff[512];

		if (k == 1) {
			/* The stress guest sets no MSR a fresh vCPU lacks (and here a
			 * fresh vCPU's TSC is the host's, never behind): give the
			 * source one, as a guest using syscall would. */
			assert_int_equal(machine_get_vcpu_state(src.m, 0, st), 0);
			set_msr(st, MSR_STAR, 0x0023001000000000ull);
			assert_int_equal(machine_set_vcpu_state(src.m, 0, st), 0);
			assert_int_equal(ckpt_digest_machine(src.m, &da), 0);
			assert_int_equal(ckpt_capture(src.m, &c, true), 0);
		}
		assert_int_equal(ckpt_get_vcpu_state(&c, k == 0 ? 1 : 0, st), 0);
		if (k == 0)
			st->lapic = fresh->lapic;    /* LAPIC not captured */
		else
			st->nmsrs = 0;               /* MSRs not sent */
		assert_int_equal(ckpt_put_vcpu_state(&c, k == 0 ? 1 : 0, st), 0);
		assert_int_equal(th_vm_new(&dst, "stress", 16 << 20, 2, false), 0);
		assert_int_equal(ckpt_apply(dst.m, &c), 0);
		assert_int_equal(ckpt_digest_machine(dst.m, &db), 0);
		assert_true(ckpt_digest_diff(&da, &db, diff, sizeof(diff)) >= 1);
		printf("missing_state_caught: %s -> differs in: %s\n", what[k], diff);
		assert_non_null(strstr(diff, what[k]));
		th_vm_free(&dst);
	}
	ckpt_fini(&c);
	th_vm_free(&src);
	free(st);
	free(fresh);
}

static void cmos_io(struct machine *m, uint8_t reg, bool write, uint8_t *v)
{
	pthread_mutex_lock(&m->lock);          /* as machine.c's port_io calls it */
	assert_true(platform_io(m, 0x70, 1, true, &reg));
	assert_true(platform_io(m, 0x71, 1, write, v));
	pthread_mutex_unlock(&m->lock);
}

static uint8_t cmos_get(struct machine *m, uint8_t reg)
{
	uint8_t v = 0;

	cmos_io(m, reg, false, &v);
	return v;
}

static void cmos_put(struct machine *m, uint8_t reg, uint8_t v)
{
	cmos_io(m, reg, true, &v);
}

static void port_put(struct machine *m, uint16_t port, int size, uint16_t v)
{
	uint8_t d[2] = { (uint8_t)v, (uint8_t)(v >> 8) };

	pthread_mutex_lock(&m->lock);
	assert_true(platform_io(m, port, size, true, d));
	pthread_mutex_unlock(&m->lock);
}

/* The platform devices programmed through their ports on a running
 * machine, captured at a pause, applied to a fresh one: the same state,
 * the same digest, the guest's clock reading on from the same offset. */
static void platform_travels(void **state)
{
	struct th_vm src, dst;
	struct proto_verify da, db;
	struct platform_state want, fresh;
	struct ckpt_image *img = malloc(sizeof(*img));
	struct ckpt c, bad;
	char diff[512];

	(void)state;
	assert_non_null(img);
	assert_int_equal(th_vm_new(&src, "stress", 16 << 20, 2, true), 0);
	assert_int_equal(th_vm_new(&dst, "stress", 16 << 20, 2, false), 0);
	fresh = dst.m->platform;
	machine_resume(src.m);
	/* Linux's way of setting the RTC: SET, the time registers, SET off
	 * (2031-02-03 16:05:06 UTC) */
	cmos_put(src.m, 0x0b, 0x82);
	cmos_put(src.m, 0x00, 0x06);
	cmos_put(src.m, 0x02, 0x05);
	cmos_put(src.m, 0x04, 0x16);
	cmos_put(src.m, 0x07, 0x03);
	cmos_put(src.m, 0x08, 0x02);
	cmos_put(src.m, 0x09, 0x31);
	cmos_put(src.m, 0x32, 0x20);
	cmos_put(src.m, 0x0b, 0x02);
	cmos_put(src.m, 0x40, 0x5a);
	port_put(src.m, LINUX_ACPI_PM1_EVT + 2, 2, 0x0121);    /* PM1a enable */
	port_put(src.m, LINUX_ACPI_PM1_CNT, 2, 0x1401);        /* SLP_TYP 5, no SLP_EN */
	port_put(src.m, LINUX_RESET_PORT, 1, 0x02);
	th_sleep_us(50000);
	machine_pause(src.m);
	want = src.m->platform;
	assert_int_not_equal(want.rtc_offset, 0);
	ckpt_init(&c);
	assert_int_equal(ckpt_digest_machine(src.m, &da), 0);
	assert_int_equal(ckpt_capture(src.m, &c, true), 0);
	assert_int_equal(ckpt_apply(dst.m, &c), 0);
	assert_int_equal(ckpt_digest_machine(dst.m, &db), 0);
	if (ckpt_digest_diff(&da, &db, diff, sizeof(diff)))
		fail_msg("the restored machine differs in %s", diff);
	assert_int_equal(dst.m->platform.rtc_offset, want.rtc_offset);
	assert_int_equal(dst.m->platform.pm1_en, 0x0121);
	assert_int_equal(dst.m->platform.pm1_cnt, 0x1401);
	assert_int_equal(dst.m->platform.reset_ctl, 0x02);
	assert_int_equal(cmos_get(dst.m, 0x40), 0x5a);
	assert_int_equal(cmos_get(dst.m, 0x32), 0x20);
	assert_int_equal(cmos_get(dst.m, 0x09), 0x31);
	assert_int_equal(cmos_get(dst.m, 0x08), 0x02);
	printf("platform_travels: RTC offset %lld s, digests equal\n", (long long)want.rtc_offset);

	/* a "platform" section with a valid checksum and an impossible value
	 * (SLP_EN set) is refused before anything is applied */
	th_vm_free(&dst);
	assert_int_equal(th_vm_new(&dst, "stress", 16 << 20, 2, false), 0);
	ckpt_init(&bad);
	bad.config_digest = c.config_digest;
	bad.full = c.full;
	for (size_t i = 0; i < c.npages; i++)
		assert_int_equal(ckpt_add_page(&bad, c.gfns[i], c.pages + i * CKPT_PAGE_SIZE), 0);
	assert_int_equal(ckpt_state_decode(c.state, c.state_len, c.config_digest, 2, img), 0);
	img->ms.platform.pm1_cnt |= 0x2000;
	assert_int_equal(ckpt_state_encode(&bad, img), 0);
	assert_int_equal(ckpt_validate(dst.m, &bad), -EBADMSG);
	assert_int_equal(ckpt_apply(dst.m, &bad), -EBADMSG);
	assert_memory_equal(&dst.m->platform, &fresh, sizeof(fresh));
	ckpt_fini(&bad);
	ckpt_fini(&c);
	th_vm_free(&dst);
	th_vm_free(&src);
	free(img);
}

static void wire_form(void **state)
{
	struct proto_verify d, e;
	uint8_t buf[PROTO_VERIFY_MAX_BYTES];
	size_t n;

	(void)state;
	memset(&d, 0, sizeof(d));
	d.ncpus = 3;
	d.mem = 0x11223344;
	d.clock_ns = 0x0102030405060708ull;
	for (int k = 0; k < PROTO_VERIFY_VM_PARTS; k++)
		d.vm[k] = 0xa0000000u + (uint32_t)k;
	for (int i = 0; i < 3; i++) {
		for (int k = 0; k < PROTO_VERIFY_VCPU_PARTS; k++)
			d.vcpu[i].part[k] = (uint32_t)(i * 100 + k);
		d.vcpu[i].tsc = 0xfedcba9876543210ull + (uint64_t)i;
	}
	n = proto_verify_encode(&d, buf, sizeof(buf));
	assert_true(n > 0);
	assert_int_equal(buf[8], 0x44);   /* mem, little-endian */
	assert_int_equal(proto_verify_decode(buf, n, &e), 0);
	assert_memory_equal(&d, &e, sizeof(d));
	assert_int_equal(proto_verify_decode(buf, n - 1, &e), -EBADMSG);
	assert_int_equal(proto_verify_decode(buf, 4, &e), -EBADMSG);
	buf[4] = 9;                      /* ncpus beyond the bytes */
	assert_int_equal(proto_verify_decode(buf, n, &e), -EBADMSG);
	assert_int_equal(proto_verify_encode(&d, buf, 8), 0);
}

static bool has_msr(const struct kvm_vcpu_state *v, uint32_t index)
{
	for (uint32_t i = 0; i < v->nmsrs; i++)
		if (v->msrs[i].index == index)
			return true;
	return false;
}

/* Two things KVM does on a restore that a Linux guest showed in verify
 * mode: it writes the paravirtual wall clock into guest RAM where
 * MSR_KVM_WALL_CLOCK_NEW points (the machine puts those bytes back), and
 * on AMD it keeps only the low half of SYSENTER_ESP (the digest compares
 * that half). Each part fails if its handling is taken out. */
static void restore_quirks(void **state)
{
	struct th_vm vm;
	struct kvm_vcpu_state *v = malloc(sizeof(*v)), *w = malloc(sizeof(*w));
	struct proto_verify_vcpu da, db;
	const uint64_t gpa = (16 << 20) - 4096;   /* the counter guest's last page: unused */
	static const uint8_t mark[12] = "restore-me!";
	uint8_t *ram;

	(void)state;
	assert_non_null(v);
	assert_non_null(w);
	assert_int_equal(th_vm_new(&vm, "counter", 16 << 20, 1, true), 0);
	machine_resume(vm.m);
	th_sleep_us(20000);
	machine_pause(vm.m);
	assert_int_equal(machine_get_vcpu_state(vm.m, 0, v), 0);
	ram = vm.m->ram + gpa;
	if (has_msr(v, 0x4b564d00)) {
		set_msr(v, 0x4b564d00, gpa);
		memcpy(ram, mark, sizeof(mark));
		assert_int_equal(kvm_vcpu_set_state(&vm.m->vcpus[0].kvm, v), 0);
		/* needed: KVM itself writes the struct */
		assert_memory_not_equal(ram, mark, sizeof(mark));
		memcpy(ram, mark, sizeof(mark));
		assert_int_equal(machine_set_vcpu_state(vm.m, 0, v), 0);
		assert_memory_equal(ram, mark, sizeof(mark));
		printf("restore_quirks: KVM wrote the wall clock on a restore; the machine put the 12 bytes back\n");
	} else {
		printf("SKIP: this KVM lists no MSR_KVM_WALL_CLOCK_NEW (PVM): the wall-clock part\n");
	}
	/* the digest: SYSENTER_ESP's upper half does not count, its lower does */
	if (!has_msr(v, 0x175))
		fail_msg("SYSENTER_ESP (0x175) is not among this KVM's MSRs");
	*w = *v;
	set_msr(v, 0x175, 0x3000);
	set_msr(w, 0x175, 0xfffffe0000003000ull);
	ckpt_digest_vcpu(v, &da);
	ckpt_digest_vcpu(w, &db);
	assert_int_equal(da.part[PROTO_VERIFY_MSRS], db.part[PROTO_VERIFY_MSRS]);
	set_msr(w, 0x175, 0xfffffe0000004000ull);
	ckpt_digest_vcpu(w, &db);
	assert_int_not_equal(da.part[PROTO_VERIFY_MSRS], db.part[PROTO_VERIFY_MSRS]);
	th_vm_free(&vm);
	free(v);
	free(w);
}

#define PIT_VECTOR 0x30u
#define APIC_SVR 0xf0u
#define APIC_TPR 0x80u
#define APIC_IRR 0x200u

static bool irr_has(const struct kvm_vcpu_state *v, unsigned vec)
{
	uint32_t w;

	memcpy(&w, v->lapic.regs + APIC_IRR + (vec / 32) * 0x10, 4);
	return w & (1u << (vec % 32));
}

static void pit_diag(const struct side *r)
{
	const struct kvm_pit_channel_state *ch = &r->ms.vm.pit.channels[0];
	const struct kvm_ioapic_state *io = &r->ms.vm.ioapic.chip.ioapic;
	uint32_t w[8], svr;

	for (int i = 0; i < 8; i++)
		memcpy(&w[i], r->v[0].lapic.regs + APIC_IRR + i * 0x10, 4);
	memcpy(&svr, r->v[0].lapic.regs + APIC_SVR, 4);
	printf("pit: flags %#x mode %u count %u gate %u; ioapic irr %#x pin0 %#llx pin2 %#llx; "
	       "pic irr %#x imr %#x; lapic svr %#x irr %08x %08x %08x; apic_base %#llx rflags %#llx "
	       "mp_state %u\n", r->ms.vm.pit.flags, ch->mode, ch->count, ch->gate, io->irr,
	       (unsigned long long)io->redirtbl[0].bits, (unsigned long long)io->redirtbl[2].bits,
	       r->ms.vm.pic_master.chip.pic.irr, r->ms.vm.pic_master.chip.pic.imr, svr, w[0], w[1],
	       w[2], (unsigned long long)r->v[0].sregs.apic_base,
	       (unsigned long long)r->v[0].regs.rflags, r->v[0].mp_state.mp_state);
}

/* A standby's PIT does not tick: state set into a machine whose vCPUs are
 * parked has the PIT's timer held, so IRQ 0 never reaches the LAPIC's IRR
 * (in verify mode a Linux standby showed vector 0x30 pending that its
 * primary did not have); machine_resume arms it, and the same state then
 * does raise it. (KVM re-injects the PIT's IRQ only after the guest's EOI,
 * and KVM_SET_PIT2 starts that over: one tick each set, which must come
 * after the LAPIC is set, as on a standby between epochs.) The PIT runs in
 * mode 2 every 55 ms, IOAPIC pins 0 and 2 to
 * vector 0x30 on vCPU 0, whose LAPIC is enabled with a task priority that
 * keeps every vector pending (the guest takes none while it runs). */
static void standby_pit_held(void **state)
{
	struct th_vm vm;
	struct side *s = malloc(sizeof(*s)), *r = malloc(sizeof(*r));
	struct kvm_pit_state2 raw;
	struct kvm_vm_state kv;
	uint32_t svr = 0x1ff, tpr = 0xf0;

	(void)state;
	assert_non_null(s);
	assert_non_null(r);
	assert_int_equal(th_vm_new(&vm, "counter", 16 << 20, 1, true), 0);
	read_side(vm.m, s);
	s->ms.vm.pit.flags = 0;
	s->ms.vm.pit.channels[0].mode = 2;
	s->ms.vm.pit.channels[0].count = 0xffff;   /* 55 ms: its first tick after the LAPIC is set */
	s->ms.vm.pit.channels[0].gate = 1;
	s->ms.vm.ioapic.chip.ioapic.redirtbl[0].bits = PIT_VECTOR;
	s->ms.vm.ioapic.chip.ioapic.redirtbl[2].bits = PIT_VECTOR;
	s->ms.vm.pic_master.chip.pic.imr = 0xff;
	memcpy(s->v[0].lapic.regs + APIC_SVR, &svr, 4);
	memcpy(s->v[0].lapic.regs + APIC_TPR, &tpr, 4);   /* pending stays pending */
	assert_int_equal(machine_set_state(vm.m, &s->ms), 0);
	assert_int_equal(machine_set_vcpu_state(vm.m, 0, &s->v[0]), 0);
	th_sleep_us(200000);
	read_side(vm.m, r);
	if (irr_has(&r->v[0], PIT_VECTOR))
		fail_msg("the parked machine's PIT ticked: vector 0x%x pending", PIT_VECTOR);
	assert_int_equal(r->ms.vm.pit.channels[0].mode, 2);
	assert_int_equal(r->ms.vm.pit.flags, 0);   /* the hold's flag is not shown */
	assert_int_equal(kvm_vm_get_state(&vm.m->vm, &kv), 0);
	raw = kv.pit;
	assert_true(raw.flags & KVM_PIT_FLAGS_HPET_LEGACY);
	machine_resume(vm.m);
	th_sleep_us(20000);
	machine_pause(vm.m);
	th_sleep_us(200000);
	machine_snap_drop(vm.m);   /* the state now, not the pause's snapshot of it */
	read_side(vm.m, r);
	if (!irr_has(&r->v[0], PIT_VECTOR))
		pit_diag(r);
	if (!irr_has(&r->v[0], PIT_VECTOR))
		fail_msg("after machine_resume the PIT still did not raise vector 0x%x", PIT_VECTOR);
	assert_int_equal(kvm_vm_get_state(&vm.m->vm, &kv), 0);
	assert_false(kv.pit.flags & KVM_PIT_FLAGS_HPET_LEGACY);
	printf("standby_pit_held: no PIT tick while parked after a restore; ticks after resume\n");
	th_vm_free(&vm);
	free(s);
	free(r);
}

/* The steal-time record's "preempted" byte, which KVM writes from a host's
 * vCPU ioctl, does not count in the RAM's digest; the byte beside it does. */
static void steal_flag_skipped(void **state)
{
	struct th_vm vm;
	struct kvm_vcpu_state *v = malloc(sizeof(*v));
	struct proto_verify a, b;
	const uint64_t gpa = (16 << 20) - 8192;   /* the counter guest leaves it unused */

	(void)state;
	assert_non_null(v);
	assert_int_equal(th_vm_new(&vm, "counter", 16 << 20, 1, true), 0);
	assert_int_equal(machine_get_vcpu_state(vm.m, 0, v), 0);
	if (!has_msr(v, 0x4b564d03)) {
		printf("SKIP: this KVM lists no MSR_KVM_STEAL_TIME (PVM)\n");
		th_vm_free(&vm);
		free(v);
		return;
	}
	set_msr(v, 0x4b564d03, gpa | 1);
	assert_int_equal(machine_set_vcpu_state(vm.m, 0, v), 0);
	assert_int_equal(ckpt_digest_machine(vm.m, &a), 0);
	vm.m->ram[gpa + 16] ^= 1;                  /* "preempted" */
	assert_int_equal(ckpt_digest_machine(vm.m, &b), 0);
	assert_int_equal(a.mem, b.mem);
	vm.m->ram[gpa + 17] ^= 1;                  /* its padding: counts */
	assert_int_equal(ckpt_digest_machine(vm.m, &b), 0);
	assert_int_not_equal(a.mem, b.mem);
	vm.m->ram[gpa + 17] ^= 1;
	set_msr(v, 0x4b564d03, gpa);               /* not enabled: the byte counts */
	assert_int_equal(machine_set_vcpu_state(vm.m, 0, v), 0);
	assert_int_equal(ckpt_digest_machine(vm.m, &b), 0);
	vm.m->ram[gpa + 16] ^= 1;
	assert_int_equal(ckpt_digest_machine(vm.m, &a), 0);
	assert_int_not_equal(a.mem, b.mem);
	printf("steal_flag_skipped: the preempted byte is left out while steal time is on\n");
	th_vm_free(&vm);
	free(v);
}

/* A standby applies epoch after epoch; each apply sets the guest TSC to the
 * saved value, even when that lands within KVM's one-second window of where
 * the standby's TSC runs since the last apply (where a write of IA32_TSC
 * alone keeps the old offset). vCPUs saved within a second of each other
 * share an offset; one saved far from vCPU 0 gets its own. */
#define MSR_TSC 0x10u

static void standby_tsc_follows(void **state)
{
	struct th_vm vm;
	struct side *s = malloc(sizeof(*s)), *r = malloc(sizeof(*r));
	const uint64_t behind_ms = 300, slack_ms = 150;
	uint64_t hz, t0, w_ns, want, got;
	int64_t off0, off1;
	bool stable;

	(void)state;
	assert_non_null(s);
	assert_non_null(r);
	assert_int_equal(th_vm_new(&vm, "counter", 16 << 20, 2, true), 0);
	hz = (uint64_t)vm.m->sys.tsc_khz * 1000;
	if (!hz || kvm_vcpu_get_tsc_offset(&vm.m->vcpus[0].kvm, &off0) == -ENXIO) {
		printf("SKIP: this KVM reports no TSC rate or has no KVM_VCPU_TSC_OFFSET\n");
		goto out;
	}
	read_side(vm.m, s);
	for (int i = 0; i < 2; i++)
		assert_int_equal(machine_set_vcpu_state(vm.m, i, &s->v[i]), 0);
	t0 = now_ns();
	th_sleep_us(behind_ms * 2000);
	/* the next epoch's TSC: behind_ms short of where this one runs now */
	w_ns = now_ns() - t0;
	want = msr(&s->v[0], MSR_TSC) + w_ns / 1000000 * (hz / 1000) - behind_ms * (hz / 1000);
	set_msr(&s->v[0], MSR_TSC, want);
	set_msr(&s->v[1], MSR_TSC, want + hz / 100);            /* 10 ms: shares vCPU 0's */
	for (int i = 0; i < 2; i++)
		assert_int_equal(machine_set_vcpu_state(vm.m, i, &s->v[i]), 0);
	machine_snap_drop(vm.m);
	assert_int_equal(machine_get_vcpu_state(vm.m, 0, &r->v[0]), 0);
	got = msr(&r->v[0], MSR_TSC);
	if (got < want || got - want >= slack_ms * (hz / 1000))
		fail_msg("vCPU 0's TSC reads %lld ms from the one just set (want 0..%llu)",
			 (long long)((int64_t)(got - want) / (int64_t)(hz / 1000)),
			 (unsigned long long)slack_ms);
	/* Where KVM finds the host's TSC unstable (the emulator's nested VM),
	 * it re-derives a vCPU's offset at each of its ioctls, from where its
	 * TSC stopped: offsets are not kept there, and two reads differ. */
	assert_int_equal(kvm_vcpu_get_tsc_offset(&vm.m->vcpus[1].kvm, &off1), 0);
	th_sleep_us(10000);
	assert_int_equal(kvm_vcpu_get_tsc_offset(&vm.m->vcpus[1].kvm, &off0), 0);
	stable = off0 == off1;
	assert_int_equal(kvm_vcpu_get_tsc_offset(&vm.m->vcpus[0].kvm, &off0), 0);
	if (stable && off0 != off1)
		fail_msg("vCPUs saved 10 ms apart got offsets %lld apart", (long long)(off1 - off0));
	set_msr(&s->v[1], MSR_TSC, want + 10 * hz);             /* 10 s: its own */
	for (int i = 0; i < 2; i++)
		assert_int_equal(machine_set_vcpu_state(vm.m, i, &s->v[i]), 0);
	assert_int_equal(kvm_vcpu_get_tsc_offset(&vm.m->vcpus[0].kvm, &off0), 0);
	assert_int_equal(kvm_vcpu_get_tsc_offset(&vm.m->vcpus[1].kvm, &off1), 0);
	assert_true(off1 - off0 > (int64_t)(9 * hz) && off1 - off0 < (int64_t)(11 * hz));
	printf("standby_tsc_follows: a re-applied TSC reads %lld us after its set; "
	       "%s\n", (long long)((got - want) / (hz / 1000000)),
	       stable ? "vCPUs share one offset" : "this KVM finds the TSC unstable: offsets not compared");
out:
	th_vm_free(&vm);
	free(s);
	free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(wire_form),
		cmocka_unit_test(ram_digest_sees_changes),
		cmocka_unit_test(names_the_part),
		cmocka_unit_test(roundtrip_equal),
		cmocka_unit_test(missing_state_caught),
		cmocka_unit_test(platform_travels),
		cmocka_unit_test(restore_quirks),
		cmocka_unit_test(standby_pit_held),
		cmocka_unit_test(steal_flag_skipped),
		cmocka_unit_test(standby_tsc_follows),
	};

	if (!th_kvm_available())
		return 77;
	log_set_level(LOG_WARN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
