/* Private to machine/: the device models behind the bus (machine/bus.h),
 * as the devices themselves and the tests see them. Called with
 * machine.lock held. */
#ifndef US_MACHINE_DEVICES_H
#define US_MACHINE_DEVICES_H

#include "machine/bus.h"

/* uart.c: the 16550 at 0x3f8. */
#define UART_PORT 0x3f8
int uart_io(struct machine *m, uint16_t port, bool write, uint8_t *data);
size_t uart_rx_push(struct machine *m, const uint8_t *buf, size_t len);
bool uart_rx_ready(const struct uart_state *u);
void uart_reset(struct uart_state *u);
/* Re-drives the IRQ line from restored state. */
void uart_post_load(struct machine *m);

/* platform.c: true when port is one of the platform devices' (then done). */
bool platform_io(struct machine *m, uint16_t port, int size, bool write, uint8_t *data);
/* The same with the host's UTC clock reading now_ns (ns since 1970): the
 * RTC's time and interrupts go by it. */
bool platform_io_at(struct machine *m, uint16_t port, int size, bool write, uint8_t *data,
		    int64_t now_ns);
/* The RTC's update cycles, periodic ticks and alarm that fell due up to
 * now_ns, run into register C; true when IRQF went on (IRQ 8 is then the
 * caller's to raise). */
bool platform_rtc_advance(struct platform_state *p, int64_t now_ns);
/* When the next event that would turn IRQF on falls due (host UTC ns),
 * INT64_MAX if none can. */
int64_t platform_rtc_next(const struct platform_state *p, int64_t now_ns);
/* kvm_vcpu_set_state, leaving the paravirtual wall clock's bytes in RAM as
 * they were (platform.c says why). On a paused machine. */
int platform_set_vcpu_state(struct machine *m, int cpu, const struct kvm_vcpu_state *st);

/* pci.c: configuration mechanism #1 and BAR decoding. */
#define PCI_PORT_ADDR 0xcf8
#define PCI_PORT_DATA 0xcfc
/* A port access to 0xCF8..0xCFF of size bytes. */
void pci_io(struct machine *m, uint16_t port, int size, bool write, uint8_t *data);
/* An MMIO access; 0 when a BAR claimed it, -ENOENT when none did. */
int pci_mmio(struct machine *m, uint64_t gpa, uint8_t *data, uint32_t len, bool write);
/* Power-on state of every function, BARs placed in the MMIO hole as
 * firmware would place them. */
void pci_reset(struct machine *m);
/* A virtio device has its ISR set (an idle vCPU wakes for it). */
bool pci_isr_pending(const struct machine *m);

/* virtio_blk.c: opens cfg->disk (O_RDWR, locked) for m; 0 and m->blk NULL
 * when cfg->ndisks is 0. Errors are logged with the file's name. */
int virtio_blk_open(struct machine *m) US_MUST_CHECK;
void virtio_blk_close(struct machine *m);
/* virtio_net.c: the NIC's runtime part when cfg->nnets is 1 (the tap is the
 * owner's: frames leave through ops.net_tx and come in by machine_net_input). */
int virtio_net_open(struct machine *m) US_MUST_CHECK;
void virtio_net_close(struct machine *m);

#endif
