/* secondary: the agent that keeps a hot standby of a primary's VM (its
 * epochs staged whole, then applied), and takes over when the primary dies:
 * fenced, the witness's key won, the held output replayed, a primary engine
 * attached to the survivor. Module-private parts: secondary_int.h. */
#ifndef US_SECONDARY_H
#define US_SECONDARY_H

#include <ev.h>

#include "replication/replication.h"

/* Listens at o->listen, keeps the standby, takes over on failure; returns
 * the exit status. */
int secondary_run(struct ev_loop *loop, const struct repl_secondary_opts *o);
/* A secondary agent whose standby is vm (paused at sw->epoch, its console
 * bound, not served): it listens at sw->listen for the new primary's
 * resuming Hello. Runs like secondary_run; takes vm over. */
int secondary_adopt(struct ev_loop *loop, const struct repl_secondary_opts *o,
		    struct repl_vm *vm, const struct repl_switch *sw);

#endif
