/* Private to machine/: the machine's I/O thread (ioevent.c), which serves
 * the virtio queues whose notify addresses are ioeventfds. machine.c
 * starts and stops it and tells it of a resume; pci.c tells it where the
 * BARs are and when device state was loaded. */
#ifndef US_MACHINE_IOEVENT_H
#define US_MACHINE_IOEVENT_H

#include "machine/machine.h"

/* Environment variable: "1" puts the notify addresses of any guest on
 * ioeventfds, "0" keeps every notification a KVM exit served on the vCPU
 * thread (the path without KVM_IOEVENTFD), for A/B counts; unset, a Linux
 * guest's are ioeventfds and a built-in (polling) guest's exit. */
#define IOEVENT_ENV "UNDERSTUDY_IOEVENTFD"

/* With the VM created and the devices attached: an eventfd a queue, a
 * wake eventfd and the thread (none without a virtio device), the notify
 * addresses assigned. 0 or -errno (the machine cannot be built); a
 * KVM_IOEVENTFD that fails is logged once and leaves that queue to the
 * exit path. */
int ioevent_start(struct machine *m) US_MUST_CHECK;
/* Ends the thread, deassigns and closes (machine_free); a no-op if never
 * started. Without machine.lock. */
void ioevent_stop(struct machine *m);
/* The rest with machine.lock held; no-ops before ioevent_start. */
/* The machine resumes: queues left pending are served now. */
void ioevent_resume(struct machine *m);
/* A BAR or the memory decoding of a virtio function may have changed:
 * the ioeventfds follow the notify addresses (none while decoding is off). */
void ioevent_sync(struct machine *m);
/* Device state was loaded (a standby's apply, a restore, a migration's
 * destination): every queue is served once at the next resume, as a kick
 * that reached an eventfd after the capture is in no checkpoint. */
void ioevent_serve_all(struct machine *m);
/* Kicks read from the eventfds and queue services the thread did, since
 * the machine was built (tests, benchmarks); either may be NULL. */
void ioevent_counts(struct machine *m, uint64_t *kicks, uint64_t *served);
/* True when at least one queue's notify is an assigned ioeventfd. */
bool ioevent_active(struct machine *m);

#endif
