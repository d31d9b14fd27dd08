/* Private to kmod/ (kvm.c, vcpu.c): the one wrapper around ioctl(). */
#ifndef US_KMOD_IOCTL_H
#define US_KMOD_IOCTL_H

/* ioctl(fd, req, arg), retried on EAGAIN: its result, or -errno. */
int kvm_ioctl(int fd, unsigned long req, void *arg);
/* The same, and a failure is logged naming the ioctl (name) and, for
 * vcpu >= 0, the vCPU: "KVM_GET_XSAVE on vCPU 0: Invalid argument". */
int kvm_ioctl_logged(int fd, unsigned long req, void *arg, const char *name, int vcpu);

/* One ioctl on a VM or a vCPU, its failure logged by the ioctl's name. */
#define KVM_VM_IOCTL(vm, req, arg) kvm_ioctl_logged((vm)->fd, (req), (void *)(arg), #req, -1)
#define KVM_VCPU_IOCTL(vcpu, req, arg) \
	kvm_ioctl_logged((vcpu)->fd, (req), (void *)(arg), #req, (vcpu)->index)

#endif
