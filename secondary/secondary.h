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

/* The standby agent, run by the host: its loop, its control socket and
 * its SIGINT/SIGTERM handlers are the host's, for the whole life of the
 * process (the standby may have been its primary before a switchover). */
struct repl_secondary;

/* The requests secondary_request answers, for the host's reply to others. */
#define SECONDARY_REQUESTS \
	"status, takeover, switchback, drill, protect, migrate, cancel, switchover"

/* Sets up an agent that listens at o->listen, keeps the standby and takes
 * over on failure. With vm (a primary that switched over: paused at
 * sw->epoch, its console bound, not served; taken over, freed on failure
 * too) it is the standby already and waits at sw->listen for the new
 * primary's resuming Hello. o, eng and sw stay the caller's and must
 * outlive the agent. 0 or -errno (logged). Then the host opens its control
 * socket if not yet open, calls secondary_start, runs the loop until the
 * agent breaks it (EVBREAK_ALL), and frees it. */
int secondary_new(struct ev_loop *loop, const struct repl_secondary_opts *o,
		  const struct secondary_engine *eng, struct repl_vm *vm,
		  const struct repl_switch *sw, struct repl_secondary **out)
	__attribute__((warn_unused_result));
/* Says what it waits for and starts its watch of the primary. */
void secondary_start(struct repl_secondary *s);
/* A control request: its reply (malloc'd). *known is false for one the
 * agent does not know (the host answers SECONDARY_REQUESTS); a NULL reply
 * to one it knows ran out of memory (the control socket's plain error). */
char *secondary_request(struct repl_secondary *s, const char *req, bool *known);
/* SIGINT or SIGTERM: true when the agent is done and the loop may end now;
 * false when the guest stops through its engine first (which ends the
 * loop) or a hand-over's outcome is awaited. */
bool secondary_signal(struct repl_secondary *s, int signum);
/* Once the loop ended: the process's exit status. */
int secondary_exit_status(const struct repl_secondary *s);
/* Stops the guest (if any), releases the witness, frees s (NULL: nothing). */
void secondary_free(struct repl_secondary *s);

#endif
