/* The device models behind the bus (machine/bus.h) as the tests see them;
 * what only machine/'s own files call of them is in machine_int.h. Called
 * with machine.lock held. */
#ifndef US_MACHINE_DEVICES_H
#define US_MACHINE_DEVICES_H

#include "machine/bus.h"

/* uart.c: the 16550 at 0x3f8. */
#define UART_PORT 0x3f8

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

/* pci.c: configuration mechanism #1 and BAR decoding. */
#define PCI_PORT_ADDR 0xcf8
#define PCI_PORT_DATA 0xcfc
/* A port access to 0xCF8..0xCFF of size bytes. */
void pci_io(struct machine *m, uint16_t port, int size, bool write, uint8_t *data);
/* An MMIO access; 0 when a BAR claimed it, -ENOENT when none did. */
int pci_mmio(struct machine *m, uint64_t gpa, uint8_t *data, uint32_t len, bool write);
/* A virtio device has its ISR set (an idle vCPU wakes for it). */
bool pci_isr_pending(const struct machine *m);


#endif
