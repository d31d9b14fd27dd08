/* vCPUs: creation, KVM_RUN, and the complete state as one plain struct. */
#include "kmod/kmod.h"
#include "kmod/ioctl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#define TAG "kmod"

struct msr_buf {
	struct kvm_msrs hdr;
	struct kvm_msr_entry entries[KVM_MAX_MSRS];
};

/* Keeps the MSRs of KVM_GET_MSR_INDEX_LIST that this vCPU lets us read, once
 * per system: the same list is then saved and restored everywhere. */
static int probe_msrs(struct kvm_sys *sys, int vcpu_fd)
{
	struct kvm_msr_list *list;
	struct kvm_msr_list probe = { .nmsrs = 0 };
	int r;

	if (sys->msrs_probed)
		return 0;
	r = kvm_ioctl(sys->fd, KVM_GET_MSR_INDEX_LIST, &probe);
	if (r < 0 && r != -E2BIG)
		return r;
	list = calloc(1, sizeof(*list) + probe.nmsrs * sizeof(uint32_t));
	if (!list)
		return -ENOMEM;
	list->nmsrs = probe.nmsrs;
	r = kvm_ioctl(sys->fd, KVM_GET_MSR_INDEX_LIST, list);
	if (r < 0)
		goto out;
	sys->nmsrs = 0;
	if (list->nmsrs > KVM_MAX_MSRS) {
		log_error(TAG, "KVM lists %u MSRs, more than the %d a vCPU state holds",
			  list->nmsrs, KVM_MAX_MSRS);
		r = -E2BIG;
		goto out;
	}
	for (uint32_t i = 0; i < list->nmsrs; i++) {
		struct msr_buf one = { .hdr.nmsrs = 1 };

		one.entries[0].index = list->indices[i];
		if (kvm_ioctl(vcpu_fd, KVM_GET_MSRS, &one) == 1)
			sys->msrs[sys->nmsrs++] = list->indices[i];
	}
	sys->msrs_probed = true;
	log_debug(TAG, "%u of %u MSRs readable", sys->nmsrs, list->nmsrs);
	r = 0;
out:
	free(list);
	return r;
}

int kvm_vcpu_create(struct kvm_vcpu *vcpu, struct kvm_vm *vm, int index)
{
	struct kvm_sys *sys = vm->sys;
	int r;

	memset(vcpu, 0, sizeof(*vcpu));
	vcpu->vm = vm;
	vcpu->index = index;
	vcpu->fd = kvm_ioctl(vm->fd, KVM_CREATE_VCPU, (void *)(uintptr_t)index);
	if (vcpu->fd < 0) {
		r = vcpu->fd;
		log_error(TAG, "KVM_CREATE_VCPU %d: %s", index, strerror(-r));
		return r;
	}
	r = kvm_ioctl(vcpu->fd, KVM_SET_CPUID2, sys->cpuid);
	if (r < 0) {
		log_error(TAG, "KVM_SET_CPUID2: %s", strerror(-r));
		goto err_fd;
	}
	vcpu->run = mmap(NULL, (size_t)sys->vcpu_mmap_size, PROT_READ | PROT_WRITE, MAP_SHARED,
			 vcpu->fd, 0);
	if (vcpu->run == MAP_FAILED) {
		r = -errno;
		vcpu->run = NULL;
		goto err_fd;
	}
	r = probe_msrs(sys, vcpu->fd);
	if (r < 0) {
		log_error(TAG, "probing MSRs: %s", strerror(-r));
		goto err_run;
	}
	if (!sys->tsc_khz) {
		r = ioctl(vcpu->fd, KVM_GET_TSC_KHZ, 0);
		sys->tsc_khz = r > 0 ? (uint32_t)r : 0;
	}
	return 0;

err_run:
	munmap(vcpu->run, (size_t)sys->vcpu_mmap_size);
	vcpu->run = NULL;
err_fd:
	close(vcpu->fd);
	vcpu->fd = -1;
	return r;
}

void kvm_vcpu_destroy(struct kvm_vcpu *vcpu)
{
	if (vcpu->run)
		munmap(vcpu->run, (size_t)vcpu->vm->sys->vcpu_mmap_size);
	if (vcpu->fd >= 0)
		close(vcpu->fd);
	vcpu->run = NULL;
	vcpu->fd = -1;
}

int kvm_vcpu_run(struct kvm_vcpu *vcpu)
{
	if (ioctl(vcpu->fd, KVM_RUN, 0) < 0)
		return -errno;
	return 0;
}

int kvm_vcpu_settle(struct kvm_vcpu *vcpu)
{
	uint8_t saved = vcpu->run->immediate_exit;
	int r;

	vcpu->run->immediate_exit = 1;
	r = ioctl(vcpu->fd, KVM_RUN, 0) < 0 ? -errno : 0;
	vcpu->run->immediate_exit = saved;
	return r == -EINTR || r == 0 ? 0 : r;
}

int kvm_vcpu_get_regs(struct kvm_vcpu *vcpu, struct kvm_regs *regs)
{
	return kvm_ioctl(vcpu->fd, KVM_GET_REGS, regs);
}

int kvm_vcpu_set_regs(struct kvm_vcpu *vcpu, const struct kvm_regs *regs)
{
	return kvm_ioctl(vcpu->fd, KVM_SET_REGS, (void *)regs);
}

int kvm_vcpu_get_sregs(struct kvm_vcpu *vcpu, struct kvm_sregs *sregs)
{
	return kvm_ioctl(vcpu->fd, KVM_GET_SREGS, sregs);
}

int kvm_vcpu_set_sregs(struct kvm_vcpu *vcpu, const struct kvm_sregs *sregs)
{
	return kvm_ioctl(vcpu->fd, KVM_SET_SREGS, (void *)sregs);
}

int kvm_vcpu_set_xcr0(struct kvm_vcpu *vcpu, uint64_t xcr0)
{
	struct kvm_xcrs x = { .nr_xcrs = 1 };

	x.xcrs[0].xcr = 0;
	x.xcrs[0].value = xcr0;
	return kvm_ioctl(vcpu->fd, KVM_SET_XCRS, &x);
}

int kvm_vcpu_set_mp_state(struct kvm_vcpu *vcpu, uint32_t mp_state)
{
	struct kvm_mp_state mp = { .mp_state = mp_state };

	return kvm_ioctl(vcpu->fd, KVM_SET_MP_STATE, &mp);
}

/* Call on a vCPU that is out of KVM_RUN with no I/O pending (kvm_vcpu_settle). */
int kvm_vcpu_get_state(struct kvm_vcpu *vcpu, struct kvm_vcpu_state *st)
{
	struct kvm_sys *sys = vcpu->vm->sys;
	struct msr_buf msrs = { .hdr.nmsrs = sys->nmsrs };
	bool xsave2 = sys->xsave_size > 4096;
	int r;

	/* mp_state first: reading it lets KVM apply a pending INIT/SIPI, which
	 * changes CS:RIP; the registers read after it then agree with it. */
	if ((r = KVM_VCPU_IOCTL(vcpu, KVM_GET_MP_STATE, &st->mp_state)) < 0 ||
	    (r = KVM_VCPU_IOCTL(vcpu, KVM_GET_REGS, &st->regs)) < 0 ||
	    (r = KVM_VCPU_IOCTL(vcpu, KVM_GET_SREGS, &st->sregs)) < 0 ||
	    (r = KVM_VCPU_IOCTL(vcpu, KVM_GET_XCRS, &st->xcrs)) < 0 ||
	    (r = kvm_ioctl_logged(vcpu->fd, xsave2 ? KVM_GET_XSAVE2 : KVM_GET_XSAVE, st->xsave,
				  xsave2 ? "KVM_GET_XSAVE2" : "KVM_GET_XSAVE", vcpu->index)) < 0 ||
	    (r = KVM_VCPU_IOCTL(vcpu, KVM_GET_LAPIC, &st->lapic)) < 0 ||
	    (r = KVM_VCPU_IOCTL(vcpu, KVM_GET_VCPU_EVENTS, &st->events)) < 0 ||
	    (r = KVM_VCPU_IOCTL(vcpu, KVM_GET_DEBUGREGS, &st->debugregs)) < 0)
		return r;
	st->xsave_size = (uint32_t)sys->xsave_size;
	for (uint32_t i = 0; i < sys->nmsrs; i++)
		msrs.entries[i].index = sys->msrs[i];
	r = KVM_VCPU_IOCTL(vcpu, KVM_GET_MSRS, &msrs);
	if (r != (int)sys->nmsrs) {
		if (r >= 0)
			log_error(TAG, "KVM_GET_MSRS on vCPU %d: read %d of %u MSRs", vcpu->index, r,
				  sys->nmsrs);
		return r < 0 ? r : -EIO;
	}
	st->nmsrs = sys->nmsrs;
	memcpy(st->msrs, msrs.entries, sys->nmsrs * sizeof(msrs.entries[0]));
	return 0;
}

/* Restore order matters:
 *  1. sregs first: CR0/CR4/EFER decide how everything after is interpreted,
 *     and sregs.apic_base puts the LAPIC in xAPIC or x2APIC mode, which
 *     KVM_SET_LAPIC decodes the register page by;
 *  2. regs;
 *  3. XCRs before xsave: XCR0 says which xsave components are valid;
 *  4. LAPIC before the MSRs: KVM ignores a write to IA32_TSC_DEADLINE
 *     unless the LAPIC timer is already in TSC-deadline mode;
 *  5. MSRs, then vcpu_events (pending exceptions/interrupts/NMI refer to
 *     the LAPIC's view), then mp_state last (it may be RUNNABLE only once
 *     the rest is in place);
 *  6. debug registers. */
int kvm_vcpu_set_state(struct kvm_vcpu *vcpu, const struct kvm_vcpu_state *st)
{
	struct kvm_sys *sys = vcpu->vm->sys;
	struct msr_buf msrs;
	struct kvm_vcpu_events events = st->events;
	int r;

	if (st->nmsrs > KVM_MAX_MSRS || st->xsave_size != (uint32_t)sys->xsave_size) {
		log_error(TAG, "vCPU state does not fit this host (msrs %u, xsave %u bytes)",
			  st->nmsrs, st->xsave_size);
		return -EINVAL;
	}
	if ((r = KVM_VCPU_IOCTL(vcpu, KVM_SET_SREGS, &st->sregs)) < 0 ||
	    (r = KVM_VCPU_IOCTL(vcpu, KVM_SET_REGS, &st->regs)) < 0 ||
	    (r = KVM_VCPU_IOCTL(vcpu, KVM_SET_XCRS, &st->xcrs)) < 0 ||
	    (r = KVM_VCPU_IOCTL(vcpu, KVM_SET_XSAVE, st->xsave)) < 0 ||
	    (r = KVM_VCPU_IOCTL(vcpu, KVM_SET_LAPIC, &st->lapic)) < 0)
		return r;
	msrs.hdr = (struct kvm_msrs){ .nmsrs = st->nmsrs };
	memcpy(msrs.entries, st->msrs, st->nmsrs * sizeof(msrs.entries[0]));
	r = KVM_VCPU_IOCTL(vcpu, KVM_SET_MSRS, &msrs);
	if (r != (int)st->nmsrs) {
		if (r >= 0)
			log_error(TAG, "KVM_SET_MSRS on vCPU %d: MSR 0x%x refused", vcpu->index,
				  st->msrs[r].index);
		return r < 0 ? r : -EINVAL;
	}
	/* Apply every part of the events, not only what was valid by default. */
	events.flags |= KVM_VCPUEVENT_VALID_NMI_PENDING | KVM_VCPUEVENT_VALID_SIPI_VECTOR |
			KVM_VCPUEVENT_VALID_SHADOW;
	if ((r = KVM_VCPU_IOCTL(vcpu, KVM_SET_VCPU_EVENTS, &events)) < 0 ||
	    (r = KVM_VCPU_IOCTL(vcpu, KVM_SET_MP_STATE, &st->mp_state)) < 0 ||
	    (r = KVM_VCPU_IOCTL(vcpu, KVM_SET_DEBUGREGS, &st->debugregs)) < 0)
		return r;
	return 0;
}
