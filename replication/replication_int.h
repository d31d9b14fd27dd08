/* replication/ private: what its files call of each other and no other
 * module does. */
#ifndef US_REPLICATION_INT_H
#define US_REPLICATION_INT_H

#include "replication/replication.h"

/* vm.c */
int repl_vm_open_console(struct repl_vm *v, const char *console) US_MUST_CHECK;
/* Hands output up to the mark to the console. */
void repl_vm_release(struct repl_vm *v, uint64_t upto);

/* vm_net.c (see replication.h) */
int repl_vm_net_open(struct repl_vm *v) US_MUST_CHECK;
void repl_vm_net_close(struct repl_vm *v);
/* machine_ops.net_tx of the machine (vCPU thread). */
void repl_vm_net_tx(void *ctx, const uint8_t *frame, size_t len);
/* Held frames are dropped (a copy becoming a standby). */
void repl_vm_net_forget(struct repl_vm *v);

/* beat.c: stops the beats; the last one heard counts as the last bytes
 * received. */
void repl_link_beat_stop(struct repl_link *l);

/* fault.c: repl_fault_test_stop, but only the calling thread stops there,
 * for good (the test kills the agent): the others run on, e.g. a loop that
 * flushes an ACK. */
void repl_fault_test_hold(const char *where);

/* hooks.c: "protected", "drill-pass", ...: UNDERSTUDY_EVENT of the hook. */
const char *repl_event_name(enum repl_event ev);

#endif
