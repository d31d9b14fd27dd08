/* Built-in guests: the ABI between machine/ and the freestanding programs in
 * guest/src/, and the table of images embedded in the binary.
 *
 * Guest physical layout (all built-in guests):
 *   0x1000  GDT            0x2000 IDT        0x3000 TSS, GUEST_TSS_STRIDE per vCPU
 *   0x6000  struct guest_bootinfo            0x10000 page tables (identity, 2 MiB pages)
 *   0x80000 stacks (kernel + user per vCPU)  0x100000 image (struct guest_header first)
 *   GUEST_HEAP_GPA and up: working memory for the workload
 * The vCPU starts at CPL0 in long mode at header.entry with rdi = cpu index,
 * rsi = bootinfo, rdx = user stack, rcx = header.user_entry; the entry drops to CPL3.
 * CPL3 code reaches the VMM through the ports below (the TSS I/O bitmap allows
 * ports 0..0xfff at CPL3: PVM ignores IOPL). */
#ifndef US_GUEST_H
#define US_GUEST_H

/* RFLAGS of the guests' CPL3 code: IF, IOPL 0 (ports through the TSS's I/O
 * bitmap). `make GUEST_IOPL=3` builds guests whose CPL3 code has IOPL 3, for
 * nested KVM under QEMU's emulator (tests/nested/): its SVM checks the I/O
 * bitmap only for a TSS marked available, not for the busy one KVM loads.
 * An assembler expression, so top-level asm strings can use it too. */
#ifndef GUEST_IOPL
#define GUEST_IOPL 0
#endif
#define GUEST_USER_RFLAGS (0x202 | (GUEST_IOPL << 12))
#define GUEST_STR_(x) #x
#define GUEST_STR(x) GUEST_STR_(x)

#ifndef __ASSEMBLER__
#include <stdint.h>
#endif

#define GUEST_GDT_GPA       0x1000ull
#define GUEST_IDT_GPA       0x2000ull
#define GUEST_TSS_GPA       0x3000ull
#define GUEST_TSS_STRIDE    0x400ull
#define GUEST_TSS_IOMAP_BYTES 512           /* ports 0..0xfff (PCI config at 0xcf8) */
#define GUEST_BOOTINFO_GPA  0x6000ull
#define GUEST_PT_GPA        0x10000ull
#define GUEST_STACK_GPA     0x80000ull      /* 4 KiB kernel + 12 KiB user stack per vCPU */
#define GUEST_STACK_STRIDE  0x4000ull
#define GUEST_IMAGE_GPA     0x100000ull
#define GUEST_IMAGE_MAX     (3ull << 20)
#define GUEST_HEAP_GPA      0x400000ull
#define GUEST_MAX_CPUS      8

/* Selectors of the GDT machine/ builds. */
#define GUEST_SEL_KCODE 0x08
#define GUEST_SEL_KDATA 0x10
#define GUEST_SEL_UDATA 0x1b
#define GUEST_SEL_UCODE 0x23
#define GUEST_SEL_TSS(i) (0x28 + 0x10 * (i))

/* Paravirtual ports. */
#define GUEST_PORT_POWER 0x500   /* out: guest is done, the machine stops (value = exit status) */
#define GUEST_PORT_IDLE  0x501   /* out32 usec: wait until console input, that long, or a pause */
#define GUEST_PORT_PANIC 0x502   /* out32 vector: CPL0 exception stub, the machine stops with an error */

#define GUEST_HEADER_MAGIC 0x3174736575677375 /* "usguest1" */
#define GUEST_TIMER_VECTOR 0x20
#define GUEST_BOOTINFO_MAGIC 0x6f666e69746f6f62ull /* "bootinfo" */

#ifndef __ASSEMBLER__
struct guest_header {
	uint64_t magic;
	uint64_t entry;       /* CPL0 entry */
	uint64_t user_entry;  /* CPL3 main: void main(int cpu, struct guest_bootinfo *) */
	uint64_t exc_stubs;   /* 32 exception stubs, 16 bytes apart */
	uint64_t timer_isr;   /* handler for GUEST_TIMER_VECTOR, 0 if none */
	uint64_t spurious_isr;
};

struct guest_bootinfo {
	uint64_t magic;
	uint64_t mem_bytes;
	uint64_t heap_gpa;
	uint32_t ncpus;
	uint32_t tsc_khz;
	char args[256];   /* "key=value,key=value" from --guest NAME:ARGS */
};
#endif

#if !defined(GUEST_FREESTANDING) && !defined(__ASSEMBLER__)
#include <stddef.h>

struct guest_image {
	const char *name;
	const char *summary;
	const char *keys;        /* its arguments, "k1,k2,...": each takes a number */
	const uint8_t *data;
	size_t size;
};

/* The embedded image called name, or NULL. */
const struct guest_image *guest_find(const char *name);
/* All images, terminated by an entry with name NULL. */
const struct guest_image *guest_list(void);
#endif

#endif
