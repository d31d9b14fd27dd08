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
	vcpu->own = calloc(1, sizeof(*vcpu->own));
	if (!vcpu->own) {
		r = -ENOMEM;
		goto err_run;
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
	if (index >= 0 && index < KVM_MAX_VCPUS) {
		vm->vcpu_fd[index] = vcpu->fd;
		if (index >= vm->nvcpus)
			vm->nvcpus = index + 1;
	}
	return 0;

err_run:
	free(vcpu->own);
	vcpu->own = NULL;
	munmap(vcpu->run, (size_t)sys->vcpu_mmap_size);
	vcpu->run = NULL;
err_fd:
	close(vcpu->fd);
	vcpu->fd = -1;
	return r;
}

void kvm_vcpu_destroy(struct kvm_vcpu *vcpu)
{
	free(vcpu->own);
	vcpu->own = NULL;
	if (vcpu->run)
		munmap(vcpu->run, (size_t)vcpu->vm->sys->vcpu_mmap_size);
	if (vcpu->fd >= 0)
		close(vcpu->fd);
	vcpu->run = NULL;
	vcpu->fd = -1;
}

/* KVM_RUN, counted (kvm_vcpu_own). */
static int run_once(struct kvm_vcpu *vcpu)
{
	vcpu->runs++;
	return ioctl(vcpu->fd, KVM_RUN, 0) < 0 ? -errno : 0;
}

int kvm_vcpu_run(struct kvm_vcpu *vcpu)
{
	return run_once(vcpu);
}

int kvm_vcpu_settle(struct kvm_vcpu *vcpu)
{
	int r;

	vcpu->run->immediate_exit = 1;
	r = run_once(vcpu);
	return r == -EINTR || r == 0 ? 0 : r;
}

/* After every set: kvm_vcpu_own from before it is stale. */
static int count_set(struct kvm_vcpu *vcpu, int r)
{
	vcpu->sets++;
	return r;
}

int kvm_vcpu_get_regs(struct kvm_vcpu *vcpu, struct kvm_regs *regs)
{
	return kvm_ioctl(vcpu->fd, KVM_GET_REGS, regs);
}

int kvm_vcpu_set_regs(struct kvm_vcpu *vcpu, const struct kvm_regs *regs)
{
	return count_set(vcpu, kvm_ioctl(vcpu->fd, KVM_SET_REGS, (void *)regs));
}

int kvm_vcpu_get_sregs(struct kvm_vcpu *vcpu, struct kvm_sregs *sregs)
{
	return kvm_ioctl(vcpu->fd, KVM_GET_SREGS, sregs);
}

int kvm_vcpu_set_sregs(struct kvm_vcpu *vcpu, const struct kvm_sregs *sregs)
{
	return count_set(vcpu, kvm_ioctl(vcpu->fd, KVM_SET_SREGS, (void *)sregs));
}

int kvm_vcpu_set_xcr0(struct kvm_vcpu *vcpu, uint64_t xcr0)
{
	struct kvm_xcrs x = { .nr_xcrs = 1 };

	x.xcrs[0].xcr = 0;
	x.xcrs[0].value = xcr0;
	return count_set(vcpu, kvm_ioctl(vcpu->fd, KVM_SET_XCRS, &x));
}

int kvm_vcpu_set_cpuid(struct kvm_vcpu *vcpu, const struct kvm_cpuid2 *cpuid)
{
	return count_set(vcpu, KVM_VCPU_IOCTL(vcpu, KVM_SET_CPUID2, cpuid));
}

int kvm_vcpu_set_mp_state(struct kvm_vcpu *vcpu, uint32_t mp_state)
{
	struct kvm_mp_state mp = { .mp_state = mp_state };

	return count_set(vcpu, kvm_ioctl(vcpu->fd, KVM_SET_MP_STATE, &mp));
}

/* XCRs, xsave area, debug registers: from the last read when the vCPU has
 * not entered KVM_RUN and nothing was set since (reuse, on the fast path of
 * kvm_vcpu_get_state, where no INIT is applied), else read, and kept. */
static int get_own(struct kvm_vcpu *vcpu, struct kvm_vcpu_state *st, bool reuse)
{
	struct kvm_sys *sys = vcpu->vm->sys;
	struct kvm_vcpu_own *own = vcpu->own;
	bool xsave2 = sys->xsave_size > 4096;
	uint32_t runs = vcpu->runs, sets = vcpu->sets;   /* before the reads */
	int r;

	st->xsave_size = (uint32_t)sys->xsave_size;
	if (reuse && own->valid && own->runs == runs && own->sets == sets) {
		st->xcrs = own->xcrs;
		st->debugregs = own->debugregs;
		memcpy(st->xsave, own->xsave, st->xsave_size);
		vcpu->state_reads_own++;
		return 0;
	}
	own->valid = false;
	if ((r = KVM_VCPU_IOCTL(vcpu, KVM_GET_XCRS, &st->xcrs)) < 0 ||
	    (r = kvm_ioctl_logged(vcpu->fd, xsave2 ? KVM_GET_XSAVE2 : KVM_GET_XSAVE, st->xsave,
				  xsave2 ? "KVM_GET_XSAVE2" : "KVM_GET_XSAVE", vcpu->index)) < 0 ||
	    (r = KVM_VCPU_IOCTL(vcpu, KVM_GET_DEBUGREGS, &st->debugregs)) < 0)
		return r;
	own->xcrs = st->xcrs;
	own->debugregs = st->debugregs;
	memcpy(own->xsave, st->xsave, st->xsave_size);
	own->runs = runs;
	own->sets = sets;
	own->valid = true;
	return 0;
}

/* The parts that are read the same way on both paths, after mp_state. */
static int get_rest(struct kvm_vcpu *vcpu, struct kvm_vcpu_state *st, bool events, bool reuse)
{
	struct kvm_sys *sys = vcpu->vm->sys;
	struct msr_buf msrs = { .hdr.nmsrs = sys->nmsrs };
	int r;

	if ((r = get_own(vcpu, st, reuse)) < 0 ||
	    (r = KVM_VCPU_IOCTL(vcpu, KVM_GET_LAPIC, &st->lapic)) < 0 ||
	    (events && (r = KVM_VCPU_IOCTL(vcpu, KVM_GET_VCPU_EVENTS, &st->events)) < 0))
		return r;
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

int kvm_vcpu_get_state_full(struct kvm_vcpu *vcpu, struct kvm_vcpu_state *st)
{
	int r;

	/* mp_state first: reading it lets KVM apply a pending INIT/SIPI, which
	 * changes CS:RIP; the registers read after it then agree with it. */
	if ((r = KVM_VCPU_IOCTL(vcpu, KVM_GET_MP_STATE, &st->mp_state)) < 0 ||
	    (r = KVM_VCPU_IOCTL(vcpu, KVM_GET_REGS, &st->regs)) < 0 ||
	    (r = KVM_VCPU_IOCTL(vcpu, KVM_GET_SREGS, &st->sregs)) < 0)
		return r;
	return get_rest(vcpu, st, true, false);
}

/* Whether the IOAPIC could deliver an INIT or a start-up IPI (delivery
 * modes 5 and 6 in a redirection entry). */
static int ioapic_sends_init(struct kvm_vm *vm, bool *init)
{
	struct kvm_irqchip chip = { .chip_id = KVM_IRQCHIP_IOAPIC };
	int r = KVM_VM_IOCTL(vm, KVM_GET_IRQCHIP, &chip);

	*init = true;
	if (r < 0)
		return r;
	*init = false;
	for (int i = 0; i < KVM_IOAPIC_NUM_PINS; i++) {
		unsigned mode = chip.chip.ioapic.redirtbl[i].fields.delivery_mode;

		*init |= mode == 5 || mode == 6;
	}
	return 0;
}

/* Each vCPU ioctl costs ~9 us on this software KVM whatever it moves. The
 * XCRs, xsave area and debug registers change only when the vCPU runs, when
 * we set them, or when an INIT is applied (by KVM_RUN or KVM_GET_MP_STATE):
 * for a vCPU that has not entered KVM_RUN since the last read (idle) they
 * are taken from that read when no INIT can be applied now. With every vCPU
 * out of KVM_RUN no vCPU sends IPIs, the PIC and the LAPIC's own LVTs do
 * not deliver INIT, and the VMM raises lines only through the IOAPIC: if no
 * IOAPIC entry sends INIT, none arrives from now on, and one that arrived
 * earlier is latched, which vcpu_events (read first) says. A SIPI changes
 * CS:RIP only, read below.
 *
 * Not taken: the registers KVM copies into kvm_run at each exit
 * (KVM_CAP_SYNC_REGS) would save KVM_GET_REGS and KVM_GET_SREGS, but here
 * that copy is not always what KVM_GET_SREGS says after the exit (an
 * injected interrupt in interrupt_bitmap seen undone later, test_machine
 * caught it with the stress guest). */
int kvm_vcpu_get_state(struct kvm_vcpu *vcpu, struct kvm_vcpu_state *st)
{
	struct kvm_vcpu_own *own = vcpu->own;
	bool reuse = own->valid && own->runs == vcpu->runs && own->sets == vcpu->sets, init;
	int r;

	vcpu->state_reads++;
	if (reuse) {
		if ((r = ioapic_sends_init(vcpu->vm, &init)) < 0)
			return r;
		reuse = !init;
	}
	if (reuse) {
		if ((r = KVM_VCPU_IOCTL(vcpu, KVM_GET_VCPU_EVENTS, &st->events)) < 0)
			return r;
		reuse = !st->events.smi.latched_init;
	}
	if (!reuse)
		return kvm_vcpu_get_state_full(vcpu, st);
	if ((r = KVM_VCPU_IOCTL(vcpu, KVM_GET_MP_STATE, &st->mp_state)) < 0 ||
	    (r = KVM_VCPU_IOCTL(vcpu, KVM_GET_REGS, &st->regs)) < 0 ||
	    (r = KVM_VCPU_IOCTL(vcpu, KVM_GET_SREGS, &st->sregs)) < 0)
		return r;
	return get_rest(vcpu, st, false, true);
}

#define MSR_IA32_TSC 0x10u

static int set_tsc_offset(struct kvm_vcpu *vcpu, int fd, int64_t offset)
{
	struct kvm_device_attr attr = {
		.group = KVM_VCPU_TSC_CTRL,
		.attr = KVM_VCPU_TSC_OFFSET,
		.addr = (uint64_t)(uintptr_t)&offset,
	};
	int r = kvm_ioctl(fd, KVM_SET_DEVICE_ATTR, &attr);

	if (r < 0)
		log_error(TAG, "KVM_VCPU_TSC_OFFSET on vCPU %d: %s", vcpu->index, strerror(-r));
	return r;
}

/* The guest's TSC, set as an offset from this host's (KVM_VCPU_TSC_OFFSET:
 * guest TSC = host TSC + offset, no TSC scaling here), not by writing
 * IA32_TSC. KVM takes a host's write of IA32_TSC that lands within a second
 * of where the VM's TSC already runs as a synchronization and keeps the old
 * offset (kvm_synchronize_tsc): a standby applying epoch after epoch kept
 * the offset of its first apply, its guest TSC behind the primary's by that
 * apply's delay (verify found it on a one-vCPU nested host). With the offset
 * taken from the host TSC read here, the guest's TSC reads the saved value
 * at this moment and runs on from it.
 *
 * The vCPUs of a VM share one offset, as KVM keeps them (and KVM's master
 * clock, which makes kvmclock stable for the guest, wants them matched);
 * their saved TSCs differ only by when each was read. So once the last vCPU
 * is set (callers set them in order), the vCPUs whose saved TSCs lie within
 * a second of each other (KVM's own window) are given the largest of their
 * offsets: none reads below its saved value, and none is ahead by more than
 * the gaps between the reads. *done says whether the TSC was set so (a KVM
 * before Linux 5.16 has no such attribute: the MSR write sets it). */
static int set_tsc(struct kvm_vcpu *vcpu, const struct kvm_vcpu_state *st, bool *done)
{
	struct kvm_sys *sys = vcpu->vm->sys;
	struct kvm_vm *vm = vcpu->vm;
	struct kvm_device_attr has = { .group = KVM_VCPU_TSC_CTRL, .attr = KVM_VCPU_TSC_OFFSET };
	uint64_t second = (uint64_t)sys->tsc_khz * 1000, tsc = 0;
	int64_t shared;
	bool found = false;
	int i = vcpu->index, r;

	*done = false;
	if (sys->tsc_offset_attr == 0) {
		sys->tsc_offset_attr = kvm_ioctl(vcpu->fd, KVM_HAS_DEVICE_ATTR, &has) == 0 ? 1 : -1;
		if (sys->tsc_offset_attr < 0)
			log_debug(TAG, "no KVM_VCPU_TSC_OFFSET: the guest TSC is set by IA32_TSC alone");
	}
	for (uint32_t k = 0; k < st->nmsrs && !found; k++)
		if (st->msrs[k].index == MSR_IA32_TSC) {
			tsc = st->msrs[k].data;
			found = true;
		}
	if (sys->tsc_offset_attr < 0 || !found || i < 0 || i >= vm->nvcpus)
		return 0;
	vm->tsc_set[i] = tsc;
	vm->tsc_offset[i] = (int64_t)(tsc - __builtin_ia32_rdtsc());
	if ((r = set_tsc_offset(vcpu, vcpu->fd, vm->tsc_offset[i])) < 0)
		return r;
	*done = true;
	if (i != vm->nvcpus - 1 || !second)
		return 0;
	shared = vm->tsc_offset[i];
	for (int k = 0; k < vm->nvcpus; k++)
		if (vm->tsc_set[k] - tsc + second < 2 * second && vm->tsc_offset[k] > shared)
			shared = vm->tsc_offset[k];
	for (int k = 0; k < vm->nvcpus; k++)
		if (vm->tsc_set[k] - tsc + second < 2 * second && vm->tsc_offset[k] != shared) {
			if ((r = set_tsc_offset(vcpu, vm->vcpu_fd[k], shared)) < 0)
				return r;
			vm->tsc_offset[k] = shared;
		}
	return 0;
}

int kvm_vcpu_get_tsc_offset(struct kvm_vcpu *vcpu, int64_t *offset)
{
	struct kvm_device_attr attr = {
		.group = KVM_VCPU_TSC_CTRL,
		.attr = KVM_VCPU_TSC_OFFSET,
		.addr = (uint64_t)(uintptr_t)offset,
	};
	int r = KVM_VCPU_IOCTL(vcpu, KVM_GET_DEVICE_ATTR, &attr);

	return r == -EINVAL || r == -ENOTTY ? -ENXIO : r;
}

/* Restore order matters:
 *  1. sregs first: CR0/CR4/EFER decide how everything after is interpreted,
 *     and sregs.apic_base puts the LAPIC in xAPIC or x2APIC mode, which
 *     KVM_SET_LAPIC decodes the register page by;
 *  2. regs;
 *  3. XCRs before xsave: XCR0 says which xsave components are valid;
 *  4. LAPIC before the MSRs: KVM ignores a write to IA32_TSC_DEADLINE
 *     unless the LAPIC timer is already in TSC-deadline mode; the TSC
 *     (set_tsc) before them too: KVM arms a deadline timer by the guest
 *     TSC it sees when the deadline is written;
 *  5. MSRs, then vcpu_events (pending exceptions/interrupts/NMI refer to
 *     the LAPIC's view), then mp_state last (it may be RUNNABLE only once
 *     the rest is in place);
 *  6. debug registers. */
static int set_state(struct kvm_vcpu *vcpu, const struct kvm_vcpu_state *st)
{
	struct kvm_sys *sys = vcpu->vm->sys;
	struct msr_buf msrs;
	struct kvm_vcpu_events events = st->events;
	bool tsc_set;
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
	if ((r = set_tsc(vcpu, st, &tsc_set)) < 0)
		return r;
	msrs.hdr = (struct kvm_msrs){ .nmsrs = 0 };
	for (uint32_t i = 0; i < st->nmsrs; i++)
		if (!tsc_set || st->msrs[i].index != MSR_IA32_TSC)
			msrs.entries[msrs.hdr.nmsrs++] = st->msrs[i];
	r = KVM_VCPU_IOCTL(vcpu, KVM_SET_MSRS, &msrs);
	if (r != (int)msrs.hdr.nmsrs) {
		if (r >= 0)
			log_error(TAG, "KVM_SET_MSRS on vCPU %d: MSR 0x%x refused", vcpu->index,
				  msrs.entries[r].index);
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

int kvm_vcpu_set_state(struct kvm_vcpu *vcpu, const struct kvm_vcpu_state *st)
{
	/* counted even when it fails part-way: some parts may be set */
	return count_set(vcpu, set_state(vcpu, st));
}
