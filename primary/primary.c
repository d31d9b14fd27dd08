/* The primary agent, protected: replication/ runs the epochs. */
#include "primary/primary.h"

int primary_run(struct ev_loop *loop, const struct repl_primary_opts *o)
{
	log_set_role("primary");
	return repl_primary_run(loop, o);
}
