/* secondary: the agent that keeps a hot standby of a primary's VM (its
 * epochs staged whole, then applied), and takes over when the primary dies:
 * fenced, the witness's key won, the held output replayed, a primary engine
 * attached to the survivor. Module-private parts: secondary_int.h. */
#ifndef US_SECONDARY_H
#define US_SECONDARY_H

#include <ev.h>

#include "replication/replication.h"

/* The primary engine that protects the guest once this side runs it (after
 * a takeover, "protect", "migrate"): the host's (host/roles.c), since
 * secondary/ and primary/ do not know each other. The host attaches and
 * detaches it, and answers what the standby asks of it; ctx is the host's. */
struct secondary_engine_state {
	const char *state;     /* "protected", "switching", ...; NULL: no engine */
	bool protecting;       /* it has (or is getting) a secondary */
	bool replaceable;      /* a new "protect" may replace it */
	bool keeps_standby;    /* at the end: its standby is not withdrawn */
};
struct secondary_engine {
	void *ctx;
	/* Protects vm under a new engine (o, its options; cb, told when the
	 * engine ends); 0 or -errno. */
	int (*attach)(void *ctx, struct ev_loop *loop, struct repl_vm *vm, struct repl_witness *wit,
		      const struct repl_primary_opts *o, const struct repl_primary_host *cb);
	/* "protect PEER ..." on the guest this side runs: refused with not_now
	 * (if set) once the request parses; else in place of the engine
	 * attached before, if it may be replaced. Returns the reply. */
	char *(*protect)(void *ctx, struct ev_loop *loop, const char *req, const char *not_now,
			 struct repl_vm *vm, struct repl_witness *wit, const struct repl_ops *ops,
			 const struct repl_primary_host *cb);
	/* Frees the engine (none: nothing). */
	void (*detach)(void *ctx);
	void (*query)(void *ctx, struct secondary_engine_state *st);
	/* The engine handed the guest over: true, and *sw says where to wait. */
	bool (*switched)(void *ctx, struct repl_switch *sw);
	/* A control request the engine answers (migrate, cancel, switchover,
	 * status, takeover of a migration in doubt): its reply, or NULL. */
	char *(*request)(void *ctx, const char *req);
};

/* Listens at o->listen, keeps the standby, takes over on failure; returns
 * the exit status. */
int secondary_run(struct ev_loop *loop, const struct repl_secondary_opts *o,
		  const struct secondary_engine *eng);
/* A secondary agent whose standby is vm (paused at sw->epoch, its console
 * bound, not served): it listens at sw->listen for the new primary's
 * resuming Hello. Runs like secondary_run; takes vm over. */
int secondary_adopt(struct ev_loop *loop, const struct repl_secondary_opts *o,
		    const struct secondary_engine *eng, struct repl_vm *vm,
		    const struct repl_switch *sw);

#endif
