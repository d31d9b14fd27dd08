/* Long-mode start of the built-in guests: the host builds GDT, IDT, TSS
 * (with an I/O bitmap, since PVM ignores IOPL at CPL3), identity page tables
 * and the boot info page, copies the image and points every vCPU at its
 * CPL0 entry. Everything CPL0 would otherwise do by itself (lgdt, ltr, paging)
 * is done here through KVM_SET_SREGS, so the emulated CPL0 part of a guest
 * is a handful of instructions. */
#include "machine/machine.h"
#include "machine/machine_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "guest/guest.h"

#define TAG "machine"

#define PTE_P   0x001ull
#define PTE_RW  0x002ull
#define PTE_US  0x004ull
#define PTE_PWT 0x008ull
#define PTE_PCD 0x010ull
#define PTE_A   0x020ull
#define PTE_D   0x040ull
#define PTE_PS  0x080ull
#define GIB     (1ull << 30)

#define CR0_PE 0x1ull
#define CR0_MP 0x2ull
#define CR0_ET 0x10ull
#define CR0_NE 0x20ull
#define CR0_WP 0x10000ull
#define CR0_PG 0x80000000ull
#define CR4_PAE 0x20ull
#define CR4_OSFXSR 0x200ull
#define CR4_OSXMMEXCPT 0x400ull
#define CR4_OSXSAVE 0x40000ull
#define EFER_LME 0x100ull
#define EFER_LMA 0x400ull

static void *gpa_ptr(struct machine *m, uint64_t gpa)
{
	return m->ram + gpa;
}

static uint64_t top_gpa(const struct machine *m)
{
	uint64_t high = m->ram_pages - m->low_pages;

	return high ? MACHINE_HIGH_RAM_GPA + high * KVM_PAGE_SIZE : m->low_pages * KVM_PAGE_SIZE;
}

/* Identity map of RAM and the APIC window, 2 MiB pages, A and D preset so
 * the CPU never writes to the tables (no dirty pages of our own making). */
static void build_page_tables(struct machine *m)
{
	uint64_t ngib = (top_gpa(m) + GIB - 1) / GIB;
	uint64_t *pml4 = gpa_ptr(m, GUEST_PT_GPA);
	uint64_t *pdpt = pml4 + 512;

	if (ngib < 4)
		ngib = 4;
	memset(pml4, 0, (2 + ngib) * KVM_PAGE_SIZE);
	pml4[0] = (GUEST_PT_GPA + 0x1000) | PTE_P | PTE_RW | PTE_US | PTE_A;
	for (uint64_t g = 0; g < ngib; g++) {
		uint64_t pd_gpa = GUEST_PT_GPA + 0x2000 + g * 0x1000;
		uint64_t *pd = gpa_ptr(m, pd_gpa);

		pdpt[g] = pd_gpa | PTE_P | PTE_RW | PTE_US | PTE_A;
		for (uint64_t i = 0; i < 512; i++) {
			uint64_t gpa = g * GIB + i * (2ull << 20);
			uint64_t flags = PTE_P | PTE_RW | PTE_US | PTE_A | PTE_D | PTE_PS;

			if (gpa >= 0xfec00000ull && gpa < 4 * GIB)
				flags |= PTE_PCD | PTE_PWT;
			pd[i] = gpa | flags;
		}
	}
	machine_mark_dirty(m, GUEST_PT_GPA, (2 + ngib) * KVM_PAGE_SIZE);
}

static void set_gate(uint64_t *idt, int vec, uint64_t handler)
{
	idt[2 * vec] = (handler & 0xffff) | ((uint64_t)GUEST_SEL_KCODE << 16) |
		       (0x8eull << 40) | (((handler >> 16) & 0xffff) << 48);
	idt[2 * vec + 1] = handler >> 32;
}

static void build_descriptors(struct machine *m, const struct guest_header *h)
{
	uint64_t *gdt = gpa_ptr(m, GUEST_GDT_GPA);
	uint64_t *idt = gpa_ptr(m, GUEST_IDT_GPA);
	uint64_t tss_limit = 104 + GUEST_TSS_IOMAP_BYTES;

	memset(gdt, 0, KVM_PAGE_SIZE);
	gdt[1] = 0x00af9a000000ffffull;   /* kernel code, 64-bit */
	gdt[2] = 0x00cf92000000ffffull;   /* kernel data */
	gdt[3] = 0x00cff2000000ffffull;   /* user data, DPL 3 */
	gdt[4] = 0x00affa000000ffffull;   /* user code, 64-bit, DPL 3 */
	for (int i = 0; i < m->ncpus; i++) {
		uint64_t base = GUEST_TSS_GPA + (uint64_t)i * GUEST_TSS_STRIDE;
		uint8_t *tss = gpa_ptr(m, base);
		uint64_t rsp0 = GUEST_STACK_GPA + (uint64_t)i * GUEST_STACK_STRIDE + 0x1000;

		memset(tss, 0, GUEST_TSS_STRIDE);
		memcpy(tss + 4, &rsp0, 8);
		tss[102] = 104;                         /* I/O bitmap offset */
		tss[tss_limit] = 0xff;                  /* bitmap terminator */
		gdt[5 + 2 * i] = (tss_limit & 0xffff) | ((base & 0xffffff) << 16) | (0x89ull << 40) |
				 (((base >> 24) & 0xff) << 56);
		gdt[6 + 2 * i] = base >> 32;
	}
	memset(idt, 0, KVM_PAGE_SIZE);
	for (int v = 0; v < 32; v++)
		set_gate(idt, v, h->exc_stubs + 16 * (uint64_t)v);
	if (h->timer_isr)
		set_gate(idt, GUEST_TIMER_VECTOR, h->timer_isr);
	if (h->spurious_isr)
		set_gate(idt, 0xff, h->spurious_isr);
	machine_mark_dirty(m, GUEST_GDT_GPA, 2 * KVM_PAGE_SIZE);
	machine_mark_dirty(m, GUEST_TSS_GPA, (uint64_t)m->ncpus * GUEST_TSS_STRIDE);
}

static uint32_t measure_tsc_khz(void)
{
	struct timespec d = { 0, 20000000 };
	uint64_t t0 = now_ns(), c0 = __builtin_ia32_rdtsc();

	nanosleep(&d, NULL);
	return (uint32_t)((__builtin_ia32_rdtsc() - c0) * 1000000ull / (now_ns() - t0));
}

static int boot_vcpu(struct machine *m, int i, const struct guest_header *h)
{
	struct kvm_vcpu *v = &m->vcpus[i].kvm;
	struct kvm_segment code = {
		.base = 0, .limit = 0xffffffff, .selector = GUEST_SEL_KCODE, .type = 11,
		.present = 1, .dpl = 0, .db = 0, .s = 1, .l = 1, .g = 1,
	};
	struct kvm_segment data = code;
	struct kvm_segment udata;
	uint64_t stack = GUEST_STACK_GPA + (uint64_t)i * GUEST_STACK_STRIDE;
	struct kvm_sregs s;
	struct kvm_regs r = {
		.rip = h->entry,
		.rsp = stack + 0x1000,
		.rflags = 2,
		.rdi = (uint64_t)i,
		.rsi = GUEST_BOOTINFO_GPA,
		.rdx = stack + GUEST_STACK_STRIDE,
		.rcx = h->user_entry,
	};
	int rc;

	data.selector = GUEST_SEL_KDATA;
	data.type = 3;
	data.l = 0;
	data.db = 1;
	udata = data;
	udata.selector = GUEST_SEL_UDATA;
	udata.dpl = 3;
	if ((rc = kvm_vcpu_get_sregs(v, &s)) < 0)
		return rc;
	s.cs = code;
	s.ss = data;
	s.ds = s.es = s.fs = s.gs = udata;
	s.tr = (struct kvm_segment){
		.base = GUEST_TSS_GPA + (uint64_t)i * GUEST_TSS_STRIDE,
		.limit = 104 + GUEST_TSS_IOMAP_BYTES,
		.selector = (uint16_t)GUEST_SEL_TSS(i), .type = 11, .present = 1,
	};
	s.ldt = (struct kvm_segment){ .type = 2, .present = 1, .unusable = 1 };
	s.gdt.base = GUEST_GDT_GPA;
	s.gdt.limit = (uint16_t)((5 + 2 * m->ncpus) * 8 - 1);
	s.idt.base = GUEST_IDT_GPA;
	s.idt.limit = 256 * 16 - 1;
	s.cr0 = CR0_PE | CR0_MP | CR0_ET | CR0_NE | CR0_WP | CR0_PG;
	s.cr3 = GUEST_PT_GPA;
	s.cr4 = CR4_PAE | CR4_OSFXSR | CR4_OSXMMEXCPT | CR4_OSXSAVE;
	s.efer = EFER_LME | EFER_LMA;
	if ((rc = kvm_vcpu_set_sregs(v, &s)) < 0 || (rc = kvm_vcpu_set_regs(v, &r)) < 0)
		return rc;
	/* x87 | SSE | AVX where the host has it, else x87 | SSE. */
	if (kvm_vcpu_set_xcr0(v, 7) < 0 && (rc = kvm_vcpu_set_xcr0(v, 3)) < 0)
		return rc;
	if (i > 0 && (rc = kvm_vcpu_set_mp_state(v, KVM_MP_STATE_RUNNABLE)) < 0)
		return rc;
	return 0;
}

/* A hole punched over the whole memfd: the mapping, and so the guest, reads
 * zeros, and the memory goes back to the host. */
int machine_ram_clear(struct machine *m)
{
	if (m->ram_private)
		return -EINVAL;   /* a clone's pages are not its own to punch */
	if (fallocate(m->memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
		      (off_t)m->cfg.mem_bytes) < 0)
		return -errno;
	return 0;
}

int machine_boot(struct machine *m)
{
	const struct guest_image *img = guest_find(m->cfg.guest);
	const struct guest_header *h;
	struct guest_bootinfo *bi;
	int rc;

	if (m->cfg.kernel[0])
		return machine_boot_linux(m);
	if (!img) {
		log_error(TAG, "unknown guest '%s'", m->cfg.guest);
		return -ENOENT;
	}
	h = (const struct guest_header *)img->data;
	if (img->size < sizeof(*h) || img->size > GUEST_IMAGE_MAX || h->magic != GUEST_HEADER_MAGIC ||
	    h->entry < GUEST_IMAGE_GPA || h->entry >= GUEST_IMAGE_GPA + img->size) {
		log_error(TAG, "guest image '%s' is malformed", img->name);
		return -ENOEXEC;
	}
	if (m->low_pages * KVM_PAGE_SIZE < GUEST_HEAP_GPA + (1ull << 20)) {
		log_error(TAG, "--mem too small for guest '%s': need at least 5 MiB", img->name);
		return -EINVAL;
	}
	memcpy(gpa_ptr(m, GUEST_IMAGE_GPA), img->data, img->size);
	machine_mark_dirty(m, GUEST_IMAGE_GPA, img->size);
	build_page_tables(m);
	build_descriptors(m, h);

	bi = gpa_ptr(m, GUEST_BOOTINFO_GPA);
	memset(bi, 0, sizeof(*bi));
	bi->magic = GUEST_BOOTINFO_MAGIC;
	bi->mem_bytes = m->low_pages * KVM_PAGE_SIZE;
	bi->heap_gpa = GUEST_HEAP_GPA;
	bi->ncpus = (uint32_t)m->ncpus;
	bi->tsc_khz = m->sys.tsc_khz ? m->sys.tsc_khz : measure_tsc_khz();
	snprintf(bi->args, sizeof(bi->args), "%s", m->cfg.guest_args);
	machine_mark_dirty(m, GUEST_BOOTINFO_GPA, sizeof(*bi));

	for (int i = 0; i < m->ncpus; i++) {
		if (i == 0)
			machine_snap_drop(m);   /* what it read is about to change */
		rc = boot_vcpu(m, i, h);
		if (rc < 0) {
			log_error(TAG, "setting boot state of vCPU %d: %s", i, strerror(-rc));
			return rc;
		}
	}
	return 0;
}
