/* The secondary agent: replication/ keeps the standby and takes over. */
#include "secondary/secondary.h"

int secondary_run(struct ev_loop *loop, const struct repl_secondary_opts *o)
{
	log_set_role("secondary");
	return repl_secondary_run(loop, o);
}
