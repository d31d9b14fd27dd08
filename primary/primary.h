/* primary: the agent that runs the VM. Protected, it checkpoints the VM to a
 * secondary (replication/ does the work); unprotected (run, restore), it
 * serves the VM's control socket and writes snapshot files on request. */
#ifndef US_PRIMARY_H
#define US_PRIMARY_H

#include <ev.h>

#include "replication/replication.h"

/* Runs the VM protected by the secondary at o->peer until the guest powers
 * off or a signal; returns the exit status. */
int primary_run(struct ev_loop *loop, const struct repl_primary_opts *o);

/* Runs vm (booted or restored) on loop until it stops or a signal, with the
 * control socket at control_path if set (answering "snapshot full|incremental
 * FILE"); takes vm over and frees it. ops (may be NULL) goes to the engines
 * "protect" attaches. Returns the exit status. */
int primary_serve(struct ev_loop *loop, struct repl_vm *vm, const char *control_path,
		  const struct repl_ops *ops);

#endif
