/* The devices of a machine, and what is done to all of them (see
 * machine/bus.h). Adding a device adds a line here. */
#include "machine/bus.h"

/* In the order their ranges are tried: the platform devices' 0xCF9 (a
 * byte) before PCI's 0xCF8..0xCFF (32-bit at 0xCF8). */
static const struct machine_device *const devices[] = {
	&uart_device,
	&platform_device,
	&pci_device,
};
#define NDEVICES (sizeof(devices) / sizeof(devices[0]))

int machine_devices_attach(struct machine *m)
{
	int r;

	m->nranges = 0;
	for (size_t i = 0; i < NDEVICES; i++)
		if ((r = devices[i]->attach(m)) < 0) {
			machine_devices_detach(m);   /* each device logged its own failure */
			return r;
		}
	return 0;
}

void machine_devices_detach(struct machine *m)
{
	for (size_t i = NDEVICES; i-- > 0;)
		if (devices[i]->detach)
			devices[i]->detach(m);
	m->nranges = 0;
}

void machine_devices_save(struct machine *m, struct machine_state *st)
{
	for (size_t i = 0; i < NDEVICES; i++)
		devices[i]->save(m, st);
}

void machine_devices_load(struct machine *m, const struct machine_state *st)
{
	for (size_t i = 0; i < NDEVICES; i++)
		devices[i]->load(m, st);
}

bool machine_devices_wake(const struct machine *m)
{
	for (size_t i = 0; i < NDEVICES; i++)
		if (devices[i]->wake && devices[i]->wake(m))
			return true;
	return false;
}
