/* What a Linux guest learns about the machine from firmware: the MP table
 * (Intel MultiProcessor Specification 1.4) with the vCPUs' LAPICs, the
 * in-kernel IOAPIC and the ISA interrupts wired to it one to one (KVM's
 * default GSI routing), and CPUID as KVM supports it with each vCPU's APIC
 * ID and the topology of --cpus filled in. */
#include "machine/linux.h"
#include "machine/machine_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MP_LAPIC_GPA    0xfee00000u
#define MP_IOAPIC_GPA   0xfec00000u
#define MP_IOAPIC_PINS  24
#define MP_ISA_IRQS     16

struct mpf {                 /* the floating pointer */
	char signature[4];
	uint32_t physptr;
	uint8_t length, spec, checksum, feature[5];
} __attribute__((packed));

struct mpc {                 /* the configuration table's header */
	char signature[4];
	uint16_t length;
	uint8_t spec, checksum;
	char oem[8], product[12];
	uint32_t oemptr;
	uint16_t oemsize, count;
	uint32_t lapic;
	uint16_t extlength;
	uint8_t extchecksum, reserved;
} __attribute__((packed));

struct mpc_cpu {
	uint8_t type, apicid, apicver, cpuflag;
	uint32_t cpufeature, featureflag, reserved[2];
} __attribute__((packed));

struct mpc_bus {
	uint8_t type, busid;
	char bustype[6];
} __attribute__((packed));

struct mpc_ioapic {
	uint8_t type, apicid, apicver, flags;
	uint32_t apicaddr;
} __attribute__((packed));

struct mpc_intsrc {          /* I/O and local interrupt entries alike */
	uint8_t type, irqtype;
	uint16_t irqflag;
	uint8_t srcbus, srcbusirq, dstapic, dstirq;
} __attribute__((packed));

enum { MP_CPU = 0, MP_BUS = 1, MP_IOAPIC = 2, MP_INTSRC = 3, MP_LINTSRC = 4 };
enum { MP_INT = 0, MP_NMI = 1, MP_EXTINT = 3 };

static uint8_t checksum(const void *p, size_t n)
{
	const uint8_t *b = p;
	uint8_t sum = 0;

	while (n--)
		sum = (uint8_t)(sum + *b++);
	return (uint8_t)-sum;
}

/* At 0x9fc00, the last KiB of base memory, where Linux looks. */
static int build_mptable(struct machine *m)
{
	uint8_t *base = m->ram + LINUX_EBDA_GPA;
	struct mpf *f = (struct mpf *)base;
	struct mpc *c = (struct mpc *)(base + sizeof(*f));
	uint8_t *p = (uint8_t *)(c + 1);
	uint8_t ioapic_id = (uint8_t)m->ncpus;
	uint16_t count = 0;
	struct mpc_bus bus = { .type = MP_BUS, .busid = 0, .bustype = { 'I', 'S', 'A', ' ', ' ', ' ' } };
	struct mpc_ioapic io = { .type = MP_IOAPIC, .apicid = ioapic_id, .apicver = 0x11,
				 .flags = 1, .apicaddr = MP_IOAPIC_GPA };

	memset(base, 0, 0x400);
	for (int i = 0; i < m->ncpus; i++, count++) {
		struct mpc_cpu cpu = {
			.type = MP_CPU, .apicid = (uint8_t)i, .apicver = 0x14,
			.cpuflag = (uint8_t)(1 | (i == 0 ? 2 : 0)),   /* enabled, bootstrap */
			.cpufeature = 0x600, .featureflag = 0x201,     /* FPU, APIC */
		};

		memcpy(p, &cpu, sizeof(cpu));
		p += sizeof(cpu);
	}
	memcpy(p, &bus, sizeof(bus));
	p += sizeof(bus);
	count++;
	memcpy(p, &io, sizeof(io));
	p += sizeof(io);
	count++;
	/* ISA IRQ n on IOAPIC pin n, edge and active high as the ISA bus has them. */
	for (uint8_t irq = 0; irq < MP_ISA_IRQS; irq++, count++) {
		struct mpc_intsrc s = { .type = MP_INTSRC, .irqtype = MP_INT, .srcbus = 0,
					.srcbusirq = irq, .dstapic = ioapic_id, .dstirq = irq };

		memcpy(p, &s, sizeof(s));
		p += sizeof(s);
	}
	/* Every LAPIC: LINT0 the PIC's ExtINT, LINT1 the NMI. */
	for (uint8_t lint = 0; lint < 2; lint++, count++) {
		struct mpc_intsrc s = { .type = MP_LINTSRC, .irqtype = lint ? MP_NMI : MP_EXTINT,
					.dstapic = 0xff, .dstirq = lint };

		memcpy(p, &s, sizeof(s));
		p += sizeof(s);
	}
	if (p > base + 0x400)
		return -E2BIG;
	memcpy(c->signature, "PCMP", 4);
	c->length = (uint16_t)(p - (uint8_t *)c);
	c->spec = 4;
	memcpy(c->oem, "UNDRSTDY", 8);
	memcpy(c->product, "understudy  ", 12);
	c->count = count;
	c->lapic = MP_LAPIC_GPA;
	c->checksum = checksum(c, c->length);
	memcpy(f->signature, "_MP_", 4);
	f->physptr = (uint32_t)(LINUX_EBDA_GPA + sizeof(*f));
	f->length = 1;
	f->spec = 4;
	f->checksum = checksum(f, sizeof(*f));
	machine_mark_dirty(m, LINUX_EBDA_GPA, 0x400);
	return 0;
}

int linux_tables_build(struct machine *m, uint64_t *rsdp)
{
	int r;

	*rsdp = 0;
	if ((r = build_mptable(m)) < 0)
		return r;
	return linux_acpi_build(m, rsdp);
}

/* ---- CPUID -------------------------------------------------------------- */

static unsigned bits_for(unsigned n)
{
	unsigned b = 0;

	while ((1u << b) < n)
		b++;
	return b;
}

int linux_cpuid_set(struct machine *m, int cpu)
{
	const struct kvm_cpuid2 *sup = m->sys.cpuid;
	size_t bytes = sizeof(*sup) + sup->nent * sizeof(sup->entries[0]);
	struct kvm_cpuid2 *c = malloc(bytes);
	unsigned n = (unsigned)m->ncpus;
	int r;

	if (!c)
		return -ENOMEM;
	memcpy(c, sup, bytes);
	for (uint32_t i = 0; i < c->nent; i++) {
		struct kvm_cpuid_entry2 *e = &c->entries[i];

		switch (e->function) {
		case 1:
			/* Initial APIC ID, logical processors in the package. */
			e->ebx = (e->ebx & 0xffff) | (uint32_t)cpu << 24 | (n & 0xff) << 16;
			if (n > 1)
				e->edx |= 1u << 28;     /* HTT: the count above is valid */
			e->ecx |= 1u << 31;         /* running under a hypervisor */
			break;
		case 0xb:
		case 0x1f:
			/* One thread per core, n cores in one package. */
			e->edx = (uint32_t)cpu;
			if (e->index == 0) {
				e->eax = 0;
				e->ebx = 1;
				e->ecx = 1u << 8;
			} else if (e->index == 1) {
				e->eax = bits_for(n);
				e->ebx = n;
				e->ecx = 2u << 8 | 1;
			} else {
				e->eax = e->ebx = 0;
				e->ecx = e->index;
			}
			break;
		default:
			break;
		}
	}
	r = kvm_vcpu_set_cpuid(&m->vcpus[cpu].kvm, c);
	free(c);
	return r;
}
