/* kmod: the project's interface to the KVM kernel driver (/dev/kvm).
 * The only code that issues KVM ioctls. Everything else sees plain structs. */
#ifndef US_KMOD_H
#define US_KMOD_H

#include <linux/kvm.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kmod/log.h"

#define KVM_PAGE_SIZE   4096ull
#define KVM_PAGE_SHIFT  12
#define KVM_MAX_SLOTS   2
#define KVM_MAX_VCPUS   8
#define KVM_MAX_MSRS    256   /* KVM lists 97 on Linux 6.1 kvm_amd (nested), ~60-150 elsewhere */
#define KVM_XSAVE_MAX   16384

/* The system: /dev/kvm, checked once. */
struct kvm_sys {
	int fd;
	int vcpu_mmap_size;
	int xsave_size;               /* 4096 (KVM_GET_XSAVE) or KVM_CAP_XSAVE2 size */
	uint32_t tsc_khz;
	int tsc_offset_attr;          /* KVM_VCPU_TSC_OFFSET: 1 has it, -1 not, 0 not probed */
	struct kvm_cpuid2 *cpuid;     /* KVM_GET_SUPPORTED_CPUID */
	uint32_t nmsrs;               /* readable MSRs of KVM_GET_MSR_INDEX_LIST */
	uint32_t msrs[KVM_MAX_MSRS];
	bool msrs_probed;
};

/* Opens path (normally "/dev/kvm"; $UNDERSTUDY_KVM overrides it), checks API
 * version 12 and every capability the project needs; on failure logs which. */
int kvm_sys_open(struct kvm_sys *sys, const char *path) US_MUST_CHECK;
void kvm_sys_close(struct kvm_sys *sys);

struct kvm_slot {
	uint32_t id;
	uint64_t gpa;
	uint64_t size;
	void *hva;
};

struct kvm_vm {
	struct kvm_sys *sys;
	int fd;
	int nslots;
	struct kvm_slot slots[KVM_MAX_SLOTS];
	/* Each vCPU's fd, and the TSC its state set last carried and the offset
	 * that gave it (kvm_vcpu_set_state). */
	int nvcpus;
	int vcpu_fd[KVM_MAX_VCPUS];
	uint64_t tsc_set[KVM_MAX_VCPUS];
	int64_t tsc_offset[KVM_MAX_VCPUS];
};

/* Creates a VM with in-kernel irqchip and PIT, and manual-protect dirty logging. */
int kvm_vm_create(struct kvm_vm *vm, struct kvm_sys *sys) US_MUST_CHECK;
void kvm_vm_destroy(struct kvm_vm *vm);
/* Registers hva as guest memory at gpa, dirty-logged. */
int kvm_vm_add_slot(struct kvm_vm *vm, uint64_t gpa, uint64_t size, void *hva) US_MUST_CHECK;
/* Writes the slot's dirty bits into bitmap (one bit a page) without
 * re-protecting anything (KVM_GET_DIRTY_LOG under manual protect). */
int kvm_vm_get_dirty_log(struct kvm_vm *vm, int slot, uint64_t *bitmap) US_MUST_CHECK;
/* Re-protects the pages set in bitmap (KVM_CLEAR_DIRTY_LOG): later writes to
 * them are logged again. Call before copying the pages, never after. */
int kvm_vm_clear_dirty_log(struct kvm_vm *vm, int slot, const uint64_t *bitmap) US_MUST_CHECK;
int kvm_vm_irq_line(struct kvm_vm *vm, uint32_t irq, int level) US_MUST_CHECK;
/* One MSI message (an MSI-X entry's address and data) into the in-kernel irqchip. */
int kvm_vm_signal_msi(struct kvm_vm *vm, uint64_t addr, uint32_t data) US_MUST_CHECK;

/* A write of len bytes (0: any length) to guest-physical gpa, MMIO,
 * signals eventfd fd in the kernel instead of exiting to userspace
 * (KVM_IOEVENTFD); assign false removes it again. Not logged: the caller
 * falls back to the exit. */
int kvm_vm_ioeventfd(struct kvm_vm *vm, uint64_t gpa, uint32_t len, int fd, bool assign) US_MUST_CHECK;

/* Interrupt controllers, PIT and clock: plain data, checkpointed as is. */
struct kvm_vm_state {
	struct kvm_irqchip pic_master;
	struct kvm_irqchip pic_slave;
	struct kvm_irqchip ioapic;
	struct kvm_pit_state2 pit;
	struct kvm_clock_data clock;
};

int kvm_vm_get_state(struct kvm_vm *vm, struct kvm_vm_state *st) US_MUST_CHECK;
/* pit_stopped: the PIT's state without its timer (kvm_vm_set_pit). */
int kvm_vm_set_state(struct kvm_vm *vm, const struct kvm_vm_state *st, bool pit_stopped) US_MUST_CHECK;
int kvm_vm_set_pit(struct kvm_vm *vm, const struct kvm_pit_state2 *pit, bool stopped) US_MUST_CHECK;

/* The parts of a vCPU's state that only its own execution in KVM_RUN, an
 * INIT, or a set by us change, as last read (kvm_vcpu_get_state). */
struct kvm_vcpu_own {
	bool valid;
	uint32_t runs, sets;          /* the vCPU's counts when they were read */
	struct kvm_xcrs xcrs;
	struct kvm_debugregs debugregs;
	uint8_t xsave[KVM_XSAVE_MAX] __attribute__((aligned(64)));
};

struct kvm_vcpu {
	struct kvm_vm *vm;
	int index;
	int fd;
	struct kvm_run *run;
	/* Counts for kvm_vcpu_own: set functions (after their ioctl) and
	 * KVM_RUN calls (before it). */
	_Atomic uint32_t sets;
	_Atomic uint32_t runs;        /* KVM_RUN calls */
	struct kvm_vcpu_own *own;     /* reused while runs and sets stay the same */
	uint64_t state_reads, state_reads_own;   /* kvm_vcpu_get_state calls; with own reused */
};

int kvm_vcpu_create(struct kvm_vcpu *vcpu, struct kvm_vm *vm, int index) US_MUST_CHECK;
void kvm_vcpu_destroy(struct kvm_vcpu *vcpu);
/* KVM_RUN once. Returns 0 on an exit (see vcpu->run), -EINTR when kicked. */
int kvm_vcpu_run(struct kvm_vcpu *vcpu) US_MUST_CHECK;
/* Completes a pending I/O or MMIO exit without entering the guest
 * (KVM_RUN with immediate_exit = 1): afterwards the state is readable.
 * immediate_exit stays 1: a kick (immediate_exit = 1 and a signal) that
 * came meanwhile must not be undone by restoring an older value, so the
 * caller clears it, under its own lock, when the vCPU may run again. */
int kvm_vcpu_settle(struct kvm_vcpu *vcpu) US_MUST_CHECK;

/* The complete state of one vCPU, plain data without pointers. */
struct kvm_vcpu_state {
	struct kvm_regs regs;
	struct kvm_sregs sregs;
	struct kvm_xcrs xcrs;
	struct kvm_lapic_state lapic;
	struct kvm_vcpu_events events;
	struct kvm_mp_state mp_state;
	struct kvm_debugregs debugregs;
	uint32_t nmsrs;
	struct kvm_msr_entry msrs[KVM_MAX_MSRS];
	uint32_t xsave_size;
	uint8_t xsave[KVM_XSAVE_MAX] __attribute__((aligned(64)));
};

/* The complete state; every vCPU of the VM must be out of KVM_RUN. */
int kvm_vcpu_get_state(struct kvm_vcpu *vcpu, struct kvm_vcpu_state *st) US_MUST_CHECK;
/* The same, always with one ioctl a part (what kvm_vcpu_get_state falls back
 * to): for tests, which compare the two. */
int kvm_vcpu_get_state_full(struct kvm_vcpu *vcpu, struct kvm_vcpu_state *st) US_MUST_CHECK;
int kvm_vcpu_set_state(struct kvm_vcpu *vcpu, const struct kvm_vcpu_state *st) US_MUST_CHECK;
/* The vCPU's TSC offset from this host's TSC (KVM_VCPU_TSC_OFFSET);
 * -ENXIO when this KVM has no such attribute. */
int kvm_vcpu_get_tsc_offset(struct kvm_vcpu *vcpu, int64_t *offset) US_MUST_CHECK;

/* Pieces of vCPU state the machine sets up at boot. */
int kvm_vcpu_get_regs(struct kvm_vcpu *vcpu, struct kvm_regs *regs) US_MUST_CHECK;
int kvm_vcpu_set_regs(struct kvm_vcpu *vcpu, const struct kvm_regs *regs) US_MUST_CHECK;
int kvm_vcpu_get_sregs(struct kvm_vcpu *vcpu, struct kvm_sregs *sregs) US_MUST_CHECK;
int kvm_vcpu_set_sregs(struct kvm_vcpu *vcpu, const struct kvm_sregs *sregs) US_MUST_CHECK;
int kvm_vcpu_set_xcr0(struct kvm_vcpu *vcpu, uint64_t xcr0) US_MUST_CHECK;
int kvm_vcpu_set_mp_state(struct kvm_vcpu *vcpu, uint32_t mp_state) US_MUST_CHECK;
/* Replaces the CPUID table the vCPU was created with (sys->cpuid, as KVM
 * supports it): before its first entry into the guest. */
int kvm_vcpu_set_cpuid(struct kvm_vcpu *vcpu, const struct kvm_cpuid2 *cpuid) US_MUST_CHECK;

#endif
