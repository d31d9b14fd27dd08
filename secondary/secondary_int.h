/* secondary/ private: what the agent's files call of each other, downward
 * only: standby.c (the agent's life, role changes, control) -> link.c (the
 * primary's connection, candidates, the silence watch) -> receive.c (what
 * the primary's frames say) -> takeover.c, postcopy_dst.c, staging.c. The
 * agent's state, struct repl_secondary, is in replication/agent.h, beside
 * the engine's. */
#ifndef US_SECONDARY_INT_H
#define US_SECONDARY_INT_H

#include "replication/agent.h"
#include "replication/postcopy.h"
#include "replication/replication.h"
#include "secondary/secondary.h"

/* ---- link.c: the primary's connection and the watch for its silence ----- */

/* Candidates (connections before their Hello), the watch and heartbeat
 * timers (not started). */
void repl_sec_link_init(struct repl_secondary *s);
/* The listener's callback (ctx: the agent): a connection is a candidate. */
void repl_sec_on_accept(struct net_listener *l, struct net_conn *c, void *ctx);

/* ---- receive.c: what the primary's frames say --------------------------- */

/* A frame of the primary's stream (ctx: the agent); <0 as proto_dec_feed's
 * callback, -ECONNREFUSED: refused, told why (the link is to be closed). */
int repl_sec_frame(void *ctx, const struct proto_frame *f) US_MUST_CHECK;
/* A primary's Hello, on l (a candidate's link or the agent's). */
int repl_sec_hello(struct repl_secondary *s, struct repl_link *l,
		   const Understudy__Hello *h) US_MUST_CHECK;
/* Our Hello, on the agent's link: the standby built, or a primary resumes. */
int repl_sec_send_hello(struct repl_secondary *s) US_MUST_CHECK;
/* The VM of --guest, --mem, ... built ahead while no primary is there. */
void repl_sec_build_spare(struct repl_secondary *s);
/* A fresh token for a fresh standby: a vouch for an earlier one never
 * lets this one in. */
void repl_sec_new_token(struct repl_secondary *s);

/* ---- staging.c: an epoch staged whole, then applied --------------------- */

void repl_staging_init(struct repl_staging *g);
void repl_staging_fini(struct repl_staging *g);
/* A new standby (or none): forget every epoch and held byte. */
void repl_staging_attach(struct repl_staging *g, struct repl_vm *vm, uint64_t config_digest);
/* The primary released its output up to mark: not to be replayed. */
void repl_staging_released(struct repl_staging *g, uint64_t mark);
/* A torn transfer: the epoch in flight is dropped, the standby stays. */
void repl_staging_abort(struct repl_staging *g);
int repl_staging_begin(struct repl_staging *g, uint64_t epoch) US_MUST_CHECK;
int repl_staging_section(struct repl_staging *g, const Understudy__Section *sec) US_MUST_CHECK;
int repl_staging_pages(struct repl_staging *g, const struct proto_frame *f) US_MUST_CHECK;
/* Verifies and applies the staged epoch. 0: applied (send ACK); <0: *f says
 * whose fault it is, nothing of the epoch applied unless f is LOCAL_FATAL. */
int repl_staging_end(struct repl_staging *g, const Understudy__EpochEnd *ee,
		     struct repl_fault *f) US_MUST_CHECK;

/* takeover.c */
/* The host's engine as it is now (st->state NULL: none attached). */
void repl_sec_engine_state(const struct repl_secondary *s, struct secondary_engine_state *st);
void repl_sec_drop_standby(struct repl_secondary *s);
/* The takeover decision (the primary is silent, or a takeover request). */
void repl_sec_begin_takeover(struct repl_secondary *s);
void repl_sec_fence(struct repl_secondary *s);
void repl_sec_lease_check(struct repl_secondary *s);
int repl_sec_acquire_resources(struct repl_secondary *s);
int repl_sec_witness_setup(struct repl_secondary *s);
/* A primary that switched over becomes this standby: its witness (resigned,
 * its thread running) is the standby's from now on. */
void repl_sec_witness_adopt(struct repl_secondary *s, struct repl_witness *w);
/* "takeover" or "takeover fenced-by-operator". */
char *repl_sec_takeover_request(struct repl_secondary *s, const char *req);
/* Stops the fence command's retry timer (at the end of the agent). */
void repl_sec_fence_retry_stop(struct repl_secondary *s);

/* ---- postcopy_dst.c: a post-copy migration's destination ---------------- */

/* A PostcopyBegin part: from the first on, no takeover without the source. */
int repl_pc_dst_begin(struct repl_secondary *s, const Understudy__PostcopyBegin *b) US_MUST_CHECK;
/* The hand-over (before the guest resumes here): the stale pages become
 * missing, faults are served from the source, the link is post-copy's.
 * <0: the VM is lost (reported, the loop ends). */
int repl_pc_dst_arm(struct repl_secondary *s) US_MUST_CHECK;
/* Announced but not armed, and the source is gone: the VM is lost. */
void repl_pc_dst_lost(struct repl_secondary *s, const char *why);
/* A post-copy hand-over is under way and not every page is in yet. */
bool repl_pc_dst_pending(const struct repl_secondary *s);
void repl_pc_dst_free(struct repl_secondary *s);

#endif
