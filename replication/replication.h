/* replication: running a protected machine — the epoch loop, output commit,
 * heartbeat, failure detection, failover, migration rounds — and the
 * runtime that hosts a machine on an agent's libev loop. */
#ifndef US_REPLICATION_H
#define US_REPLICATION_H

#include <ev.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "machine/machine.h"
#include "net/console.h"

/* A machine on the loop with its console. Guest output is collected from the
 * vCPU threads; while gated it leaves only through repl_vm_release(). */
struct repl_vm {
	struct ev_loop *loop;
	struct machine *m;
	struct console *con;
	ev_async wake;

	pthread_mutex_t out_lock;
	uint8_t *out;           /* produced, not yet released */
	size_t out_len, out_cap;
	uint64_t produced;      /* total bytes the guest wrote */
	uint64_t released;      /* total bytes handed to the console */
	bool gated;

	atomic_bool room;
	atomic_bool stopped;
	int status;

	/* Loop-thread callbacks of the owner. */
	void (*on_stopped)(void *ctx, int status);
	void (*on_hangup)(void *ctx);
	void *cb_ctx;
};

int repl_vm_new(struct ev_loop *loop, const struct machine_config *cfg, const char *console,
		struct repl_vm **out) US_MUST_CHECK;
void repl_vm_free(struct repl_vm *v);
/* Total output produced so far (call while paused to mark an epoch's end). */
uint64_t repl_vm_output_mark(struct repl_vm *v);
/* Hands output up to the mark to the console. */
void repl_vm_release(struct repl_vm *v, uint64_t upto);
void repl_vm_set_gated(struct repl_vm *v, bool gated);

#endif
