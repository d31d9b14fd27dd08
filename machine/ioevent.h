/* The machine's I/O thread (ioevent.c), which serves the virtio queues
 * whose notify addresses are ioeventfds: what the tests read of it. machine.c
 * starts and stops it and tells it of a resume, pci.c tells it where the
 * BARs are and when device state was loaded, through machine_int.h. */
#ifndef US_MACHINE_IOEVENT_H
#define US_MACHINE_IOEVENT_H

#include "machine/machine.h"

/* Environment variable: "1" puts the notify addresses of any guest on
 * ioeventfds, "0" keeps every notification a KVM exit served on the vCPU
 * thread (the path without KVM_IOEVENTFD), for A/B counts; unset, a Linux
 * guest's are ioeventfds and a built-in (polling) guest's exit. */
#define IOEVENT_ENV "UNDERSTUDY_IOEVENTFD"

/* Kicks read from the eventfds and queue services the thread did, since
 * the machine was built (tests, benchmarks); either may be NULL. */
void ioevent_counts(struct machine *m, uint64_t *kicks, uint64_t *served);
/* True when at least one queue's notify is an assigned ioeventfd. */
bool ioevent_active(struct machine *m);

#endif
