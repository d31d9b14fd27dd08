/* ACPI tables for a Linux guest, written at boot below 1 MiB (0xE0000, in
 * the reserved BIOS area of the e820 map): RSDP -> XSDT/RSDT -> FADT (with
 * FACS and DSDT) and MADT. What they give the kernel:
 *  - MADT: one LAPIC a vCPU, the in-kernel IOAPIC (GSI n = IOAPIC pin n, as
 *    KVM routes them by default), the SCI on GSI 9 level/active-high, NMI
 *    on every LINT1;
 *  - FADT: the PM1a event and control blocks at 0x600/0x604 (platform.c):
 *    a write of SLP_EN powers the VM off; the reset register 0xCF9;
 *    no SMI command port (the machine is always in ACPI mode), no i8042,
 *    no VGA, a CMOS RTC with a day-of-month alarm in register D;
 *  - DSDT (AML built here, a few hundred bytes): \_S5 for power-off and
 *    the PCI root bridge PCI0 (PNP0A03) with its bus, I/O and MMIO windows
 *    in _CRS, so that the kernel scans bus 0 (with ACPI on, it scans only
 *    the buses the DSDT names). */
#include "machine/linux.h"
#include "machine/machine_int.h"

#include <errno.h>
#include <string.h>

#include "kmod/le.h"

#define ACPI_BASE_GPA   LINUX_BIOS_GPA
#define ACPI_AREA_BYTES 0x10000
#define SCI_IRQ         9

struct aml {
	uint8_t *b;
	size_t n, cap;
	bool overflow;
};

static void put(struct aml *a, const void *p, size_t n)
{
	if (a->n + n > a->cap) {
		a->overflow = true;
		return;
	}
	memcpy(a->b + a->n, p, n);
	a->n += n;
}

static void put8(struct aml *a, uint8_t v)
{
	put(a, &v, 1);
}

static void put16(struct aml *a, uint16_t v)
{
	uint8_t b[2];

	le_put16(b, v);
	put(a, b, sizeof(b));
}

static void put32(struct aml *a, uint32_t v)
{
	uint8_t b[4];

	le_put32(b, v);
	put(a, b, sizeof(b));
}

static void put64(struct aml *a, uint64_t v)
{
	uint8_t b[8];

	le_put64(b, v);
	put(a, b, sizeof(b));
}

/* ---- AML: a package (PkgLength) is opened, filled, then closed, which
 * moves the body to make room for the length's encoding. ---------------- */

static size_t pkg_open(struct aml *a)
{
	return a->n;
}

static void pkg_close(struct aml *a, size_t start)
{
	size_t body = a->n - start, len;
	int extra;

	if (a->overflow)
		return;
	extra = body + 1 <= 63 ? 0 : body + 2 <= 0xfff ? 1 : 2;
	len = body + 1 + (size_t)extra;
	if (a->n + 1 + (size_t)extra > a->cap) {
		a->overflow = true;
		return;
	}
	memmove(a->b + start + 1 + extra, a->b + start, body);
	if (!extra) {
		a->b[start] = (uint8_t)len;
	} else {
		a->b[start] = (uint8_t)(extra << 6 | (len & 0xf));
		a->b[start + 1] = (uint8_t)(len >> 4);
		if (extra == 2)
			a->b[start + 2] = (uint8_t)(len >> 12);
	}
	a->n += 1 + (size_t)extra;
}

static void name(struct aml *a, const char *seg)
{
	put8(a, 0x08);            /* NameOp */
	put(a, seg, 4);
}

static void integer(struct aml *a, uint32_t v)
{
	if (v <= 0xff) {
		put8(a, 0x0a);        /* BytePrefix */
		put8(a, (uint8_t)v);
	} else {
		put8(a, 0x0c);        /* DWordPrefix */
		put32(a, v);
	}
}

/* Word address space descriptor: bus numbers (type 2) or I/O (type 1). */
static void word_space(struct aml *a, uint8_t type, uint16_t min, uint16_t max)
{
	put8(a, 0x88);
	put16(a, 13);
	put8(a, type);
	put8(a, 0x0c);            /* min and max fixed, producer */
	put8(a, type == 1 ? 3 : 0);   /* I/O: ISA and non-ISA ranges */
	put16(a, 0);              /* granularity */
	put16(a, min);
	put16(a, max);
	put16(a, 0);              /* translation */
	put16(a, (uint16_t)(max - min + 1));
}

static void dword_memory(struct aml *a, uint32_t min, uint32_t max)
{
	put8(a, 0x87);
	put16(a, 23);
	put8(a, 0);               /* memory */
	put8(a, 0x0c);
	put8(a, 0x01);            /* read-write, not cacheable */
	put32(a, 0);
	put32(a, min);
	put32(a, max);
	put32(a, 0);
	put32(a, max - min + 1);
}

static void pci_root(struct aml *a)
{
	size_t dev, buf, body;

	put8(a, 0x5b);            /* DeviceOp */
	put8(a, 0x82);
	dev = pkg_open(a);
	put(a, "PCI0", 4);
	name(a, "_HID");
	put8(a, 0x0c);
	put32(a, 0x030ad041);     /* EisaId("PNP0A03") */
	name(a, "_ADR");
	integer(a, 0);
	name(a, "_UID");
	integer(a, 0);
	name(a, "_CRS");
	put8(a, 0x11);            /* BufferOp */
	buf = pkg_open(a);
	put8(a, 0x0a);
	body = a->n;
	put8(a, 0);               /* buffer size, set below */
	word_space(a, 2, 0, 0xff);
	put8(a, 0x47);            /* I/O port 0xCF8..0xCFF, the configuration mechanism */
	put8(a, 0x01);
	put16(a, 0xcf8);
	put16(a, 0xcf8);
	put8(a, 1);
	put8(a, 8);
	word_space(a, 1, 0x0000, 0x0cf7);
	word_space(a, 1, 0x0d00, 0xffff);
	dword_memory(a, 0x000a0000, 0x000bffff);
	dword_memory(a, (uint32_t)MACHINE_LOW_RAM_MAX, 0xfebfffff);
	put8(a, 0x79);            /* end tag */
	put8(a, 0);
	if (!a->overflow)
		a->b[body] = (uint8_t)(a->n - body - 1);
	pkg_close(a, buf);
	pkg_close(a, dev);
}

static void build_dsdt_aml(struct aml *a)
{
	size_t scope, pkg;

	put8(a, 0x10);            /* ScopeOp \_SB_ */
	scope = pkg_open(a);
	put(a, "\\_SB_", 5);
	pci_root(a);
	pkg_close(a, scope);
	/* \_S5: SLP_TYP 5 for PM1a and PM1b. */
	name(a, "_S5_");
	put8(a, 0x12);            /* PackageOp */
	pkg = pkg_open(a);
	put8(a, 4);
	integer(a, 5);
	integer(a, 5);
	integer(a, 0);
	integer(a, 0);
	pkg_close(a, pkg);
}

/* ---- tables --------------------------------------------------------------- */

static uint8_t sum(const uint8_t *p, size_t n)
{
	uint8_t s = 0;

	while (n--)
		s = (uint8_t)(s + *p++);
	return s;
}

static size_t header(struct aml *a, const char *sig, uint8_t rev)
{
	size_t start = a->n;

	put(a, sig, 4);
	put32(a, 0);              /* length, set by finish */
	put8(a, rev);
	put8(a, 0);               /* checksum, set by finish */
	put(a, "UNDRST", 6);
	put(a, "UNDRSTDY", 8);
	put32(a, 1);
	put(a, "UDST", 4);
	put32(a, 1);
	return start;
}

static void finish(struct aml *a, size_t start)
{
	uint32_t len = (uint32_t)(a->n - start);

	if (a->overflow)
		return;
	memcpy(a->b + start + 4, &len, 4);
	a->b[start + 9] = (uint8_t)-sum(a->b + start, len);
}

static void align(struct aml *a, size_t to)
{
	while (a->n % to && !a->overflow)
		put8(a, 0);
}

/* Generic address structure of a system I/O register. */
static void gas_io(struct aml *a, uint8_t bits, uint16_t port)
{
	put8(a, 1);
	put8(a, bits);
	put8(a, 0);
	put8(a, bits == 8 ? 1 : bits == 16 ? 2 : 3);
	put64(a, port);
}

static void build_fadt(struct aml *a, uint32_t facs, uint32_t dsdt)
{
	size_t t = header(a, "FACP", 3);

	put32(a, facs);
	put32(a, dsdt);
	put8(a, 0);               /* reserved */
	put8(a, 0);               /* preferred PM profile: unspecified */
	put16(a, SCI_IRQ);
	put32(a, 0);              /* SMI_CMD: none, always in ACPI mode */
	put32(a, 0);              /* ACPI_ENABLE, ACPI_DISABLE, S4BIOS_REQ, PSTATE_CNT */
	put32(a, LINUX_ACPI_PM1_EVT);
	put32(a, 0);
	put32(a, LINUX_ACPI_PM1_CNT);
	put32(a, 0);
	put32(a, 0);              /* PM2 */
	put32(a, 0);              /* PM timer: none (kvmclock is the clock) */
	put32(a, 0);              /* GPE0 */
	put32(a, 0);              /* GPE1 */
	put8(a, 4);               /* PM1_EVT_LEN */
	put8(a, 2);               /* PM1_CNT_LEN */
	put8(a, 0);
	put8(a, 0);
	put8(a, 0);
	put8(a, 0);
	put8(a, 0);
	put8(a, 0);               /* CST_CNT */
	put16(a, 101);            /* no C2 */
	put16(a, 1001);           /* no C3 */
	put16(a, 0);
	put16(a, 0);
	put8(a, 0);               /* DUTY_OFFSET */
	put8(a, 0);               /* DUTY_WIDTH */
	put8(a, 0x0d);            /* DAY_ALRM: register D's bits 0-5 (platform.c) */
	put8(a, 0);               /* MON_ALRM: none */
	put8(a, 0x32);            /* CMOS century register */
	put16(a, 1u << 2);        /* IAPC_BOOT_ARCH: no VGA; no 8042, no legacy devices */
	put8(a, 0);
	/* WBINVD, C1 on all CPUs, power and sleep buttons absent, reset register. */
	put32(a, 1u << 0 | 1u << 2 | 1u << 4 | 1u << 5 | 1u << 10);
	gas_io(a, 8, LINUX_RESET_PORT);
	put8(a, 0x06);            /* reset value: hard reset */
	put16(a, 0);
	put8(a, 0);
	put64(a, 0);              /* X_FIRMWARE_CTRL: the 32-bit one is used */
	put64(a, 0);              /* X_DSDT: the same */
	for (int i = 0; i < 8; i++) {     /* X_PM1a_EVT .. X_GPE1: zero, the 32-bit ones are used */
		put64(a, 0);
		put32(a, 0);
	}
	finish(a, t);
}

static void build_madt(struct aml *a, int ncpus)
{
	size_t t = header(a, "APIC", 3);

	put32(a, 0xfee00000);
	put32(a, 1);              /* PCAT_COMPAT: the 8259s are there */
	for (int i = 0; i < ncpus; i++) {
		put8(a, 0);           /* processor local APIC */
		put8(a, 8);
		put8(a, (uint8_t)i);
		put8(a, (uint8_t)i);
		put32(a, 1);          /* enabled */
	}
	put8(a, 1);               /* IOAPIC */
	put8(a, 12);
	put8(a, (uint8_t)ncpus);
	put8(a, 0);
	put32(a, 0xfec00000);
	put32(a, 0);
	put8(a, 2);               /* interrupt source override: the SCI */
	put8(a, 10);
	put8(a, 0);
	put8(a, SCI_IRQ);
	put32(a, SCI_IRQ);
	put16(a, 0x000d);         /* active high, level */
	put8(a, 4);               /* LAPIC NMI on LINT1 of every processor */
	put8(a, 6);
	put8(a, 0xff);
	put16(a, 0);
	put8(a, 1);
	finish(a, t);
}

int linux_acpi_build(struct machine *m, uint64_t *rsdp_gpa)
{
	struct aml a = { .b = m->ram + ACPI_BASE_GPA, .cap = ACPI_AREA_BYTES };
	uint32_t base = (uint32_t)ACPI_BASE_GPA, facs, dsdt, fadt, madt, xsdt, rsdt;
	size_t t, rsdp;

	memset(a.b, 0, ACPI_AREA_BYTES);
	rsdp = a.n;
	a.n = 64;
	facs = base + (uint32_t)a.n;
	put(&a, "FACS", 4);
	put32(&a, 64);
	for (int i = 0; i < 14; i++)
		put32(&a, 0);         /* hardware signature, waking vectors, lock, flags */
	dsdt = base + (uint32_t)a.n;
	t = header(&a, "DSDT", 2);
	build_dsdt_aml(&a);
	finish(&a, t);
	align(&a, 8);
	fadt = base + (uint32_t)a.n;
	build_fadt(&a, facs, dsdt);
	align(&a, 8);
	madt = base + (uint32_t)a.n;
	build_madt(&a, m->ncpus);
	align(&a, 8);
	xsdt = base + (uint32_t)a.n;
	t = header(&a, "XSDT", 1);
	put64(&a, fadt);
	put64(&a, madt);
	finish(&a, t);
	rsdt = base + (uint32_t)a.n;
	t = header(&a, "RSDT", 1);
	put32(&a, fadt);
	put32(&a, madt);
	finish(&a, t);
	if (a.overflow)
		return -E2BIG;

	/* RSDP, revision 2: both checksums. */
	memcpy(a.b + rsdp, "RSD PTR ", 8);
	memcpy(a.b + rsdp + 9, "UNDRST", 6);
	a.b[rsdp + 15] = 2;
	memcpy(a.b + rsdp + 16, &rsdt, 4);
	a.b[rsdp + 20] = 36;
	memcpy(a.b + rsdp + 24, &xsdt, 4);
	a.b[rsdp + 8] = (uint8_t)-sum(a.b + rsdp, 20);
	a.b[rsdp + 32] = (uint8_t)-sum(a.b + rsdp, 36);
	machine_mark_dirty(m, ACPI_BASE_GPA, a.n);
	*rsdp_gpa = ACPI_BASE_GPA + rsdp;
	return 0;
}
