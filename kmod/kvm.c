/* /dev/kvm, VMs, memory slots, dirty log and VM-wide device state. */
#include "kmod/kmod.h"
#include "kmod/ioctl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define TAG "kmod"

/* Identity map and TSS pages sit just below the 4 GiB boundary, in the
 * hole the machine leaves for the APICs; no RAM is placed there. */
#define KVM_IDENTITY_MAP_GPA 0xfeffc000ull
#define KVM_TSS_GPA          0xfeffd000ull

static const struct {
	long cap;
	const char *name;
} required_caps[] = {
	{ KVM_CAP_USER_MEMORY, "KVM_CAP_USER_MEMORY" },
	{ KVM_CAP_SET_TSS_ADDR, "KVM_CAP_SET_TSS_ADDR" },
	{ KVM_CAP_EXT_CPUID, "KVM_CAP_EXT_CPUID" },
	{ KVM_CAP_IRQCHIP, "KVM_CAP_IRQCHIP" },
	{ KVM_CAP_PIT2, "KVM_CAP_PIT2" },
	{ KVM_CAP_PIT_STATE2, "KVM_CAP_PIT_STATE2" },
	{ KVM_CAP_IMMEDIATE_EXIT, "KVM_CAP_IMMEDIATE_EXIT" },
	{ KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2, "KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2" },
	{ KVM_CAP_XSAVE, "KVM_CAP_XSAVE" },
	{ KVM_CAP_XCRS, "KVM_CAP_XCRS" },
	{ KVM_CAP_VCPU_EVENTS, "KVM_CAP_VCPU_EVENTS" },
	{ KVM_CAP_DEBUGREGS, "KVM_CAP_DEBUGREGS" },
	{ KVM_CAP_ADJUST_CLOCK, "KVM_CAP_ADJUST_CLOCK" },
	{ KVM_CAP_MP_STATE, "KVM_CAP_MP_STATE" },
};

int kvm_ioctl(int fd, unsigned long req, void *arg)
{
	int r;

	do
		r = ioctl(fd, req, arg);
	while (r < 0 && errno == EAGAIN);
	return r < 0 ? -errno : r;
}

int kvm_ioctl_logged(int fd, unsigned long req, void *arg, const char *name, int vcpu)
{
	int r = kvm_ioctl(fd, req, arg);

	if (r < 0 && vcpu >= 0)
		log_error(TAG, "%s on vCPU %d: %s", name, vcpu, strerror(-r));
	else if (r < 0)
		log_error(TAG, "%s: %s", name, strerror(-r));
	return r;
}

static int load_cpuid(struct kvm_sys *sys)
{
	for (uint32_t n = 128; n <= 4096; n *= 2) {
		struct kvm_cpuid2 *c = calloc(1, sizeof(*c) + n * sizeof(c->entries[0]));
		int r;

		if (!c)
			return -ENOMEM;
		c->nent = n;
		r = kvm_ioctl(sys->fd, KVM_GET_SUPPORTED_CPUID, c);
		if (r == 0) {
			sys->cpuid = c;
			return 0;
		}
		free(c);
		if (r != -E2BIG)
			return r;
	}
	return -E2BIG;
}

int kvm_sys_open(struct kvm_sys *sys, const char *path)
{
	const char *env = getenv("UNDERSTUDY_KVM");
	int r;

	memset(sys, 0, sizeof(*sys));
	if (!path)
		path = env && *env ? env : "/dev/kvm";
	sys->fd = open(path, O_RDWR | O_CLOEXEC);
	if (sys->fd < 0) {
		r = -errno;
		log_error(TAG, "cannot open %s: %s (KVM is needed: is the kvm module loaded and "
			  "do you have access to the device?)", path, strerror(errno));
		return r;
	}
	r = ioctl(sys->fd, KVM_GET_API_VERSION, 0);
	if (r != KVM_API_VERSION) {
		log_error(TAG, "%s: KVM API version %d, need %d", path, r, KVM_API_VERSION);
		r = -ENOTSUP;
		goto err_fd;
	}
	for (size_t i = 0; i < sizeof(required_caps) / sizeof(required_caps[0]); i++) {
		if (ioctl(sys->fd, KVM_CHECK_EXTENSION, required_caps[i].cap) <= 0) {
			log_error(TAG, "%s lacks capability %s", path, required_caps[i].name);
			r = -ENOTSUP;
			goto err_fd;
		}
	}
	if (!(ioctl(sys->fd, KVM_CHECK_EXTENSION, KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2) &
	      KVM_DIRTY_LOG_MANUAL_PROTECT_ENABLE)) {
		log_error(TAG, "%s: manual dirty-log protection cannot be enabled", path);
		r = -ENOTSUP;
		goto err_fd;
	}
	sys->vcpu_mmap_size = ioctl(sys->fd, KVM_GET_VCPU_MMAP_SIZE, 0);
	if (sys->vcpu_mmap_size <= 0) {
		r = -EINVAL;
		log_error(TAG, "KVM_GET_VCPU_MMAP_SIZE failed");
		goto err_fd;
	}
	sys->xsave_size = ioctl(sys->fd, KVM_CHECK_EXTENSION, KVM_CAP_XSAVE2);
	if (sys->xsave_size < 4096)
		sys->xsave_size = 4096;
	if (sys->xsave_size > KVM_XSAVE_MAX) {
		log_error(TAG, "xsave area of %d bytes is larger than %d", sys->xsave_size, KVM_XSAVE_MAX);
		r = -ENOTSUP;
		goto err_fd;
	}
	r = load_cpuid(sys);
	if (r < 0) {
		log_error(TAG, "KVM_GET_SUPPORTED_CPUID: %s", strerror(-r));
		goto err_fd;
	}
	return 0;

err_fd:
	close(sys->fd);
	sys->fd = -1;
	return r;
}

void kvm_sys_close(struct kvm_sys *sys)
{
	free(sys->cpuid);
	sys->cpuid = NULL;
	if (sys->fd >= 0)
		close(sys->fd);
	sys->fd = -1;
}

int kvm_vm_create(struct kvm_vm *vm, struct kvm_sys *sys)
{
	struct kvm_enable_cap manual = {
		.cap = KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2,
		.args = { KVM_DIRTY_LOG_MANUAL_PROTECT_ENABLE },
	};
	struct kvm_pit_config pit = { .flags = 0 };
	uint64_t idmap = KVM_IDENTITY_MAP_GPA;
	int r;

	memset(vm, 0, sizeof(*vm));
	vm->sys = sys;
	vm->fd = kvm_ioctl(sys->fd, KVM_CREATE_VM, 0);
	if (vm->fd < 0) {
		r = vm->fd;
		log_error(TAG, "KVM_CREATE_VM: %s", strerror(-r));
		return r;
	}
	if ((r = KVM_VM_IOCTL(vm, KVM_SET_IDENTITY_MAP_ADDR, &idmap)) < 0 ||
	    (r = KVM_VM_IOCTL(vm, KVM_SET_TSS_ADDR, (uintptr_t)KVM_TSS_GPA)) < 0 ||
	    (r = KVM_VM_IOCTL(vm, KVM_CREATE_IRQCHIP, NULL)) < 0 ||
	    (r = KVM_VM_IOCTL(vm, KVM_CREATE_PIT2, &pit)) < 0 ||
	    (r = KVM_VM_IOCTL(vm, KVM_ENABLE_CAP, &manual)) < 0) {
		close(vm->fd);
		vm->fd = -1;
		return r;
	}
	return 0;
}

void kvm_vm_destroy(struct kvm_vm *vm)
{
	if (vm->fd >= 0)
		close(vm->fd);
	vm->fd = -1;
}

int kvm_vm_add_slot(struct kvm_vm *vm, uint64_t gpa, uint64_t size, void *hva)
{
	struct kvm_userspace_memory_region region;
	struct kvm_slot *s;
	int r;

	if (vm->nslots == KVM_MAX_SLOTS)
		return -ENOSPC;
	s = &vm->slots[vm->nslots];
	region = (struct kvm_userspace_memory_region){
		.slot = (uint32_t)vm->nslots,
		.flags = KVM_MEM_LOG_DIRTY_PAGES,
		.guest_phys_addr = gpa,
		.memory_size = size,
		.userspace_addr = (uintptr_t)hva,
	};
	r = kvm_ioctl(vm->fd, KVM_SET_USER_MEMORY_REGION, &region);
	if (r < 0) {
		log_error(TAG, "KVM_SET_USER_MEMORY_REGION gpa 0x%llx size 0x%llx: %s",
			  (unsigned long long)gpa, (unsigned long long)size, strerror(-r));
		return r;
	}
	*s = (struct kvm_slot){ .id = region.slot, .gpa = gpa, .size = size, .hva = hva };
	vm->nslots++;
	return 0;
}

int kvm_vm_get_dirty_log(struct kvm_vm *vm, int slot, uint64_t *bitmap)
{
	struct kvm_dirty_log log = { .slot = (uint32_t)slot, .dirty_bitmap = bitmap };

	return KVM_VM_IOCTL(vm, KVM_GET_DIRTY_LOG, &log);
}

int kvm_vm_clear_dirty_log(struct kvm_vm *vm, int slot, const uint64_t *bitmap)
{
	struct kvm_clear_dirty_log clear = {
		.slot = (uint32_t)slot,
		.first_page = 0,
		.num_pages = (uint32_t)(vm->slots[slot].size / KVM_PAGE_SIZE),
		.dirty_bitmap = (void *)bitmap,
	};

	return KVM_VM_IOCTL(vm, KVM_CLEAR_DIRTY_LOG, &clear);
}

int kvm_vm_irq_line(struct kvm_vm *vm, uint32_t irq, int level)
{
	struct kvm_irq_level l = { .irq = irq, .level = (uint32_t)level };

	return kvm_ioctl(vm->fd, KVM_IRQ_LINE, &l);
}

int kvm_vm_signal_msi(struct kvm_vm *vm, uint64_t addr, uint32_t data)
{
	struct kvm_msi msi = { .address_lo = (uint32_t)addr, .address_hi = (uint32_t)(addr >> 32),
			       .data = data };
	int r = kvm_ioctl(vm->fd, KVM_SIGNAL_MSI, &msi);

	return r < 0 ? r : 0;
}

int kvm_vm_ioeventfd(struct kvm_vm *vm, uint64_t gpa, uint32_t len, int fd, bool assign)
{
	struct kvm_ioeventfd io = {
		.addr = gpa,
		.len = len,
		.fd = fd,
		.flags = assign ? 0 : KVM_IOEVENTFD_FLAG_DEASSIGN,
	};
	int r = kvm_ioctl(vm->fd, KVM_IOEVENTFD, &io);

	return r < 0 ? r : 0;
}

int kvm_vm_get_state(struct kvm_vm *vm, struct kvm_vm_state *st)
{
	int r;

	memset(st, 0, sizeof(*st));
	st->pic_master.chip_id = KVM_IRQCHIP_PIC_MASTER;
	st->pic_slave.chip_id = KVM_IRQCHIP_PIC_SLAVE;
	st->ioapic.chip_id = KVM_IRQCHIP_IOAPIC;
	if ((r = KVM_VM_IOCTL(vm, KVM_GET_IRQCHIP, &st->pic_master)) < 0 ||
	    (r = KVM_VM_IOCTL(vm, KVM_GET_IRQCHIP, &st->pic_slave)) < 0 ||
	    (r = KVM_VM_IOCTL(vm, KVM_GET_IRQCHIP, &st->ioapic)) < 0 ||
	    (r = KVM_VM_IOCTL(vm, KVM_GET_PIT2, &st->pit)) < 0 ||
	    (r = KVM_VM_IOCTL(vm, KVM_GET_CLOCK, &st->clock)) < 0)
		return r;
	return 0;
}

/* The PIT's state, its channel 0 timer armed (as KVM_SET_PIT2 always does
 * for modes 0-4), or stopped: a machine whose vCPUs are parked, a standby
 * above all, would otherwise take the PIT's ticks as IRQ 0 into its IOAPIC
 * and LAPIC IRR, state its primary never had. KVM loads the count without
 * a timer for a mode it does not know (the first set, which destroys the
 * timer), and arms none while HPET legacy mode is on (the second, which
 * leaves the channels as given); KVM_GET_PIT2 then shows that flag, which
 * the caller takes out. The timer is armed again by a set with stopped
 * false, counting from then. */
int kvm_vm_set_pit(struct kvm_vm *vm, const struct kvm_pit_state2 *pit, bool stopped)
{
	struct kvm_pit_state2 p = *pit;
	int r;

	if (stopped) {
		p.flags = 0;
		p.channels[0].mode = 0xff;
		if ((r = KVM_VM_IOCTL(vm, KVM_SET_PIT2, &p)) < 0)
			return r;
		p = *pit;
		p.flags |= KVM_PIT_FLAGS_HPET_LEGACY;
	}
	r = KVM_VM_IOCTL(vm, KVM_SET_PIT2, &p);
	return r < 0 ? r : 0;
}

int kvm_vm_set_state(struct kvm_vm *vm, const struct kvm_vm_state *st, bool pit_stopped)
{
	struct kvm_irqchip chip;
	/* Only the clock value is restored; the flags of the source host's
	 * reading (TSC-stable, realtime) mean nothing here. */
	struct kvm_clock_data clock = { .clock = st->clock.clock };
	int r;

	chip = st->pic_master;
	if ((r = KVM_VM_IOCTL(vm, KVM_SET_IRQCHIP, &chip)) < 0)
		return r;
	chip = st->pic_slave;
	if ((r = KVM_VM_IOCTL(vm, KVM_SET_IRQCHIP, &chip)) < 0)
		return r;
	chip = st->ioapic;
	if ((r = KVM_VM_IOCTL(vm, KVM_SET_IRQCHIP, &chip)) < 0)
		return r;
	if ((r = kvm_vm_set_pit(vm, &st->pit, pit_stopped)) < 0 ||
	    (r = KVM_VM_IOCTL(vm, KVM_SET_CLOCK, &clock)) < 0)
		return r;
	return 0;
}
