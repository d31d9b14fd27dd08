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

#endif
