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

#endif
