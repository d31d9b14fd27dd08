/* primary/ private: what the engine's files call of each other. The layers
 * inside, top down: run.c (the host's entry points) -> engine.c (the link's
 * callbacks, the handshake, the guest's stop) -> cycle.c (epochs, ACKs, the
 * hand-over) -> failure.c (faults, the goodbye, the end); epoch.c, sync.c,
 * postcopy_src.c and lease.c below them. */
#ifndef US_PRIMARY_INT_H
#define US_PRIMARY_INT_H

#include "primary/primary.h"
#include "replication/postcopy.h"

/* lease.c: the witness lease and the fence */
/* The epochs on the link are freed once nothing reads them any more. */
void repl_primary_link_gone(struct repl_primary *p);
void repl_primary_fence(struct repl_primary *p);
void repl_primary_lease_check(struct ev_loop *loop, ev_timer *w, int revents);
int repl_primary_witness_setup(struct repl_primary *p);
/* Attached to a host's witness: the engine's callbacks on it until detach. */
void repl_primary_witness_attach(struct repl_primary *p);
void repl_primary_witness_detach(struct repl_primary *p);
/* A migration in doubt: resume the guest here (the destination provably
 * does not run it), or, after the key was given up, contend for it back. */
void repl_primary_resume_in_doubt(struct repl_primary *p, const char *how);
void repl_primary_reclaim(struct repl_primary *p);
void repl_primary_reclaim_abandon(struct repl_primary *p);

/* failure.c */
void repl_primary_on_linger(struct ev_loop *loop, ev_timer *w, int revents);
void repl_primary_done(struct repl_primary *p);
void repl_primary_on_goodbye_timeout(struct ev_loop *loop, ev_timer *w, int revents);
void repl_primary_drop_protection(struct repl_primary *p, const struct repl_fault *f);
int repl_primary_on_fence(struct repl_primary *p, const Understudy__Fence *f);
unsigned repl_primary_stall_ms(const struct repl_primary *p);
void repl_primary_on_fault(struct repl_primary *p, const struct repl_fault *f);
void repl_primary_fault(struct repl_primary *p, enum repl_fault_kind kind, int err, const char *what);
void repl_primary_on_throttle_end(struct ev_loop *loop, ev_timer *w, int revents);
void repl_primary_throttle_off(struct repl_primary *p);
void repl_primary_finish(struct repl_primary *p, int status);

/* cycle.c */
void repl_primary_on_precopy(struct ev_loop *loop, ev_timer *w, int revents);
void repl_primary_on_early(struct ev_loop *loop, ev_timer *w, int revents);
void repl_primary_on_vm_output(void *ctx);
void repl_primary_on_epoch_timer(struct ev_loop *loop, ev_timer *w, int revents);
void repl_primary_try_final_epoch(struct repl_primary *p);
void repl_primary_on_ack(struct repl_primary *p, uint64_t epoch);
void repl_primary_on_sync_done(void *ctx);
void repl_primary_on_sync_failed(void *ctx, const struct repl_fault *f);
void repl_primary_start_sync(struct repl_primary *p);

/* engine.c */
int repl_primary_init(struct repl_primary *p);
void repl_primary_start(struct repl_primary *p);
void repl_primary_fini(struct repl_primary *p);
void repl_primary_watchers_init(struct repl_primary *p);

#endif
