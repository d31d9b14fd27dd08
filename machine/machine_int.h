/* machine/ private: what machine/'s files call of each other and no file
 * outside it does (the tests included). The device models' functions the
 * tests call stay in devices.h, virtio.h, linux.h and ioevent.h. */
#ifndef US_MACHINE_INT_H
#define US_MACHINE_INT_H

#include "machine/devices.h"
#include "machine/ioevent.h"
#include "machine/linux.h"
#include "machine/virtio.h"

/* uart.c */
int uart_io(struct machine *m, uint16_t port, bool write, uint8_t *data);
size_t uart_rx_push(struct machine *m, const uint8_t *buf, size_t len);
bool uart_rx_ready(const struct uart_state *u);
void uart_reset(struct uart_state *u);
/* Re-drives the IRQ line from restored state. */
void uart_post_load(struct machine *m);

/* platform.c */
/* kvm_vcpu_set_state, leaving the paravirtual wall clock's bytes in RAM as
 * they were (platform.c says why). On a paused machine. */
int platform_set_vcpu_state(struct machine *m, int cpu, const struct kvm_vcpu_state *st);

/* pci.c */
/* Power-on state of every function, BARs placed in the MMIO hole as
 * firmware would place them. */
void pci_reset(struct machine *m);

/* virtio_blk.c: opens cfg->disk (O_RDWR, locked) for m; 0 and m->blk NULL
 * when cfg->ndisks is 0. Errors are logged with the file's name. */
int virtio_blk_open(struct machine *m) US_MUST_CHECK;
void virtio_blk_close(struct machine *m);
/* virtio_net.c: the NIC's runtime part when cfg->nnets is 1 (the tap is the
 * owner's: frames leave through ops.net_tx and come in by machine_net_input). */
int virtio_net_open(struct machine *m) US_MUST_CHECK;
void virtio_net_close(struct machine *m);

/* pci.c: a virtio function's config space: IDs, BAR0 type, capabilities. */
void virtio_pci_cfg_init(uint8_t *cfg, uint16_t type);

/* virtio_pci.c */
/* Device reset (status 0): features, status, queues; not the MSI-X table,
 * which belongs to the PCI function. */
void virtio_reset(struct virtio_dev *d);
/* Delivers MSI-X messages left pending by a mask now lifted. */
void virtio_msix_update(struct virtio_dev *d);
void virtio_bar_access(struct virtio_dev *d, uint32_t off, uint8_t *data, uint32_t len,
		       bool write);
/* Config space accesses that reach the transport (the pci_cfg window's
 * data). Returns true when it handled them. */
bool virtio_cfg_access(struct virtio_dev *d, uint32_t off, uint8_t *data, uint32_t len,
		       bool write);
/* Copy out of / into a chain at off of its readable (writable) bytes;
 * returns bytes copied. Writes mark the pages dirty. */
uint64_t virtq_chain_read(struct machine *m, const struct virtq_chain *c, uint64_t off,
			  void *buf, uint64_t len);
uint64_t virtq_chain_write(struct machine *m, const struct virtq_chain *c, uint64_t off,
			   const void *buf, uint64_t len);

/* Places len bytes (after a header of hlen bytes) in the next available
 * buffer of passive queue qi and publishes it in the used ring, with a
 * notification. -ENODEV: the device or queue is not live; -ENOBUFS: no
 * buffer; -EMSGSIZE: the buffer is too small (left available); -EIO: the
 * ring is broken (the device now needs a reset). */
int virtio_queue_fill(struct virtio_dev *d, int qi, const void *hdr, uint32_t hlen,
		      const void *buf, uint32_t len);
/* Serves queue qi as a notification of it does (a passive or dead queue:
 * nothing); the I/O thread's way in (ioevent.c). */
void virtio_queue_notify(struct virtio_dev *d, int qi);
/* The device configuration changed: a new generation and a configuration
 * interrupt (ISR bit 1). */
void virtio_config_changed(struct virtio_dev *d);

/* The virtio function in a slot, NULL if none. */
static inline struct virtio_dev *pci_slot_virtio(struct machine *m, int slot)
{
	if (slot == PCI_SLOT_BLK && m->blk)
		return &m->blk->dev;
	if (slot == PCI_SLOT_NET && m->vnet)
		return &m->vnet->dev;
	return NULL;
}

/* The guest-physical base of a function's BAR0 (a 64-bit memory BAR), or 0
 * if memory decoding is off. Inline: pci.c decodes with it, the I/O
 * thread (ioevent.c) places the notify ioeventfds by it. */
static inline uint64_t pci_bar0_base(const struct machine *m, int slot)
{
	const uint8_t *cfg = m->pci.cfg[slot];

	if (!(cfg[0x04] & 0x02))   /* command register: memory decoding */
		return 0;
	return (le_get32(cfg + 0x10) & ~0xfull) | (uint64_t)le_get32(cfg + 0x14) << 32;
}

/* linux_acpi.c, linux_tables.c */
/* The ACPI tables (linux_acpi.c) at LINUX_BIOS_GPA; *rsdp their root. */
int linux_acpi_build(struct machine *m, uint64_t *rsdp) US_MUST_CHECK;
/* Gives vCPU cpu the CPUID KVM supports, with its APIC ID and the
 * topology of m's vCPUs filled in. Before the vCPU first runs. */
int linux_cpuid_set(struct machine *m, int cpu) US_MUST_CHECK;

/* linux.c */
/* The loader for cfg->kernel (called by machine_boot). */
int machine_boot_linux(struct machine *m) US_MUST_CHECK;

/* ioevent.c: the I/O thread */
/* With the VM created and the devices attached: an eventfd a queue, a
 * wake eventfd and the thread (none without a virtio device), the notify
 * addresses assigned. 0 or -errno (the machine cannot be built); a
 * KVM_IOEVENTFD that fails is logged once and leaves that queue to the
 * exit path. */
int ioevent_start(struct machine *m) US_MUST_CHECK;
/* Ends the thread, deassigns and closes (machine_free); a no-op if never
 * started. Without machine.lock. */
void ioevent_stop(struct machine *m);
/* These three with machine.lock held; no-ops before ioevent_start. */
/* The machine resumes: queues left pending are served now. */
void ioevent_resume(struct machine *m);
/* A BAR or the memory decoding of a virtio function may have changed:
 * the ioeventfds follow the notify addresses (none while decoding is off). */
void ioevent_sync(struct machine *m);
/* Device state was loaded (a standby's apply, a restore, a migration's
 * destination): every queue is served once at the next resume, as a kick
 * that reached an eventfd after the capture is in no checkpoint. */
void ioevent_serve_all(struct machine *m);

#endif
