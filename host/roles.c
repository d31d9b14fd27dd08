/* The roles a host plays. Protected, the primary engine (replication/)
 * runs the epochs; after a planned switchover the same process goes on as
 * the new primary's standby (the VM it ran holds the switch epoch: no
 * resync). A secondary that takes over attaches an engine itself. */
#include "host/host.h"
#include "secondary/secondary.h"

int host_primary_run(struct ev_loop *loop, const struct repl_primary_opts *o)
{
	struct repl_secondary_opts so;
	struct repl_switch sw;
	struct repl_vm *vm = NULL;
	int status;

	log_set_role("primary");
	status = repl_primary_run_switch(loop, o, &vm, &sw);
	if (!vm)
		return status;
	log_set_role("secondary");
	repl_switch_secondary_opts(&sw, o->control, &so);
	so.ops = o->ops;
	return secondary_adopt(loop, &so, vm, &sw);
}

int host_secondary_run(struct ev_loop *loop, const struct repl_secondary_opts *o)
{
	return secondary_run(loop, o);
}
