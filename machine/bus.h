/* Private to machine/: the device bus. machine.c builds, frees, saves and
 * restores the devices and dispatches the guest's port and MMIO accesses
 * through it, naming none of them; each device (uart.c, platform.c, pci.c
 * with the virtio functions behind it) describes itself with a struct
 * machine_device, and devices.c lists them. Adding a device is a file of its
 * own and a line in that list. */
#ifndef US_MACHINE_BUS_H
#define US_MACHINE_BUS_H

#include "machine/machine.h"

struct machine_device {
	const char *name;
	/* Power-on state, files the device needs opened, its ranges claimed
	 * (machine_bus_add). On failure it releases what it took. */
	int (*attach)(struct machine *m);
	/* Releases what attach took (NULL: nothing); also on a machine whose
	 * attach failed or never ran. */
	void (*detach)(struct machine *m);
	/* Its part of the machine's state, read and set with machine.lock held
	 * (plain data: struct machine_state). */
	void (*save)(struct machine *m, struct machine_state *st);
	void (*load)(struct machine *m, const struct machine_state *st);
	/* An interrupt is pending that an idle vCPU must wake for (NULL: never). */
	bool (*wake)(const struct machine *m);
};

extern const struct machine_device uart_device;
extern const struct machine_device platform_device;
extern const struct machine_device pci_device;

/* Claims [base, base + len) of space for io; ranges are tried in the order
 * they were added. -ENOSPC beyond MACHINE_MAX_RANGES. */
int machine_bus_add(struct machine *m, enum machine_space space, uint64_t base, uint64_t len,
		    int (*io)(struct machine *m, uint64_t addr, int size, bool write,
			      uint8_t *data)) US_MUST_CHECK;
/* One access, machine.lock taken around its handler: 0 served,
 * MACHINE_IO_POWEROFF / MACHINE_IO_RESET served with a stop asked for,
 * -ENOENT when no range claims it. */
int machine_bus_io(struct machine *m, enum machine_space space, uint64_t addr, int size,
		   bool write, uint8_t *data);

/* Every device in turn (bus.c's list). attach: on failure the devices
 * attached so far are detached again. */
int machine_devices_attach(struct machine *m) US_MUST_CHECK;
void machine_devices_detach(struct machine *m);
/* With machine.lock held. */
void machine_devices_save(struct machine *m, struct machine_state *st);
void machine_devices_load(struct machine *m, const struct machine_state *st);
bool machine_devices_wake(const struct machine *m);

#endif
