/* host/ private: what its files share. */
#ifndef US_HOST_INT_H
#define US_HOST_INT_H

#include "host/host.h"
#include "secondary/secondary.h"

/* The engine a standby runs its guest under once it took over: p is
 * attached and detached through ops, which the standby is given. */
struct host_engine {
	struct repl_primary *p;
	struct secondary_engine ops;
};
void host_engine_init(struct host_engine *h);

/* "protect PEER ..." (or "migrate PEER ...": to a new secondary) on vm,
 * served unprotected or taken over: a new engine in *engine, in place of
 * the one there if it may be replaced; refused with not_now (if set) once
 * the request parses. *reply: the answer (malloc'd; NULL: no memory).
 * 0: protecting; <0: refused, *engine as it was (or detached and NULL
 * when the new one failed to attach). */
int host_protect(struct repl_primary **engine, struct ev_loop *loop, const char *req,
		 const char *not_now, struct repl_vm *vm, struct repl_witness *wit,
		 const struct repl_ops *ops, const struct repl_primary_host *cb, char **reply);

/* A VM a primary runs (serve.c: run, restore, primary), on the loop and
 * control socket of life.c. host_vm_new takes vm and wit over (on failure
 * too: stopped and freed); host_vm_start attaches the engine of primary
 * (`understudy primary`'s options, or NULL) and resumes the guest.
 * host_vm_request answers a control request, host_vm_signal says what
 * SIGINT/SIGTERM does (true: the loop ends now). Once the loop ended,
 * host_vm_end stops the guest and detaches its engine: the exit status,
 * and when the engine switched over, the VM paused at sw->epoch for the
 * standby this process becomes (*standby, sw filled in, witness with it);
 * host_vm_free frees the rest (the VM and witness if still held). */
struct host_vm;
int host_vm_new(struct ev_loop *loop, struct repl_vm *vm, const struct repl_ops *ops,
		const struct repl_primary_opts *primary, struct repl_witness *wit,
		struct host_vm **out) __attribute__((warn_unused_result));
int host_vm_start(struct host_vm *h) __attribute__((warn_unused_result));
char *host_vm_request(struct host_vm *h, const char *request);
bool host_vm_signal(struct host_vm *h, int signum);
int host_vm_end(struct host_vm *h, struct repl_switch *sw, struct repl_vm **standby);
void host_vm_free(struct host_vm *h);
/* `understudy primary`'s VM: the witness key taken, booted with its output
 * gated. 0, or the exit status (nothing held then). */
int host_vm_boot_primary(struct ev_loop *loop, const struct repl_primary_opts *o,
			 struct repl_vm **vm, struct repl_witness **wit);

#endif
