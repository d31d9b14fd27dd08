/* host: the one owner of a running VM, above the roles it plays. A
 * protected primary that switches over becomes its new primary's standby
 * in the same process, with the same control socket (life.c); an
 * unprotected VM (run, restore) is served here, and "protect" attaches a primary engine to it, which a
 * switchover can again turn into a standby. */
#ifndef US_HOST_H
#define US_HOST_H

#include <ev.h>

#include "replication/replication.h"

/* Runs the VM protected by the secondary at o->peer until the guest powers
 * off or a signal; after a switchover, the standby of the new primary.
 * Returns the exit status. */
int host_primary_run(struct ev_loop *loop, const struct repl_primary_opts *o);

/* Keeps a hot standby for the primary that connects to o->listen, and
 * takes over when it dies; returns the exit status. */
int host_secondary_run(struct ev_loop *loop, const struct repl_secondary_opts *o);

/* Runs vm (booted or restored) on loop until it stops or a signal, with the
 * control socket at control_path if set (answering "snapshot full|incremental
 * FILE"); takes vm over and frees it. ops (may be NULL) goes to the engines
 * "protect" attaches. Returns the exit status. */
int host_serve(struct ev_loop *loop, struct repl_vm *vm, const char *control_path,
	       const struct repl_ops *ops);

#endif
