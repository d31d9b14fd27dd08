/* secondary: the agent that keeps a hot standby of a primary's VM and takes
 * over when the primary dies (replication/ does the work). */
#ifndef US_SECONDARY_H
#define US_SECONDARY_H

#include "replication/replication.h"

/* Listens at o->listen, keeps the standby, takes over on failure; returns
 * the exit status. */
int secondary_run(struct ev_loop *loop, const struct repl_secondary_opts *o);

#endif
