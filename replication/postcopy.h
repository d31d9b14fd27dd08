/* Migration extras: the bandwidth limit of the migration stream and
 * post-copy (primary/postcopy_src.c: the rate, the source; postcopy_dst.c: the
 * destination). Both sides of post-copy live here; primary/ and
 * secondary/ call in at a few points and never the reverse, except that
 * the destination's outcome ends the secondary's loop (repl_pc_dst_*,
 * secondary/postcopy_dst.c). */
#ifndef US_REPL_POSTCOPY_H
#define US_REPL_POSTCOPY_H

#include "replication/agent.h"

/* One page's share of a RAM digest (test mode): a sum, so that the order in
 * which pages are counted does not matter. */
static inline uint64_t repl_pc_page_sum(uint64_t gfn, const void *data)
{
	uint64_t crc = proto_digest_page(0, gfn, data);

	return ((crc << 32) | (gfn & 0xffffffffu)) * 0x9e3779b97f4a7c15ull;
}

static inline bool repl_bm_test(const uint64_t *bm, uint64_t i)
{
	return bm[i / 64] >> (i % 64) & 1;
}

static inline void repl_bm_set(uint64_t *bm, uint64_t i)
{
	bm[i / 64] |= 1ull << (i % 64);
}

/* ---- bandwidth: a token bucket on the sender ------------------------------------ */

/* Sends may go while the bucket is not in debt; each send is charged whole
 * (a batch or an epoch may take the bucket below zero: the next waits). */
struct repl_rate {
	double bytes_per_s;        /* 0: unlimited */
	double tokens;
	uint64_t last_ns;
};

void repl_rate_init(struct repl_rate *r, unsigned mib_per_s);
/* 0 when a send may go now, else the nanoseconds until it may. */
uint64_t repl_rate_wait_ns(struct repl_rate *r);
void repl_rate_charge(struct repl_rate *r, size_t bytes);

/* ---- the source --------------------------------------------------------------------- */

/* A migration's extras on p (bandwidth limit, post-copy after that many
 * rounds without convergence; 0 never). p->pc is set; the rate is hooked
 * into the sync and the epochs. */
int repl_pc_src_new(struct repl_primary *p, unsigned bandwidth_mib, unsigned postcopy_after) US_MUST_CHECK;
void repl_pc_src_free(struct repl_primary *p);
/* The bandwidth limit in bytes per ms (0: none), for the predicted downtime. */
double repl_pc_src_cap_bytes_per_ms(const struct repl_primary *p);
/* A round (an ACK) whose predicted downtime did not fit: true when post-copy
 * is due (once). It starts in place of the next epoch the bandwidth limit
 * lets go (repl_pc_src_ready): what that epoch would carry is what the
 * destination fetches. */
bool repl_pc_src_due(struct repl_primary *p);
bool repl_pc_src_ready(struct repl_primary *p);
/* The guest is paused for good (p->finishing): names the stale pages to
 * the destination. From here on the VM lives only if both sides do. */
int repl_pc_src_announce(struct repl_primary *p) US_MUST_CHECK;
/* True once announced: a failure now loses the VM (see repl_pc_src_lost). */
bool repl_pc_src_switched(const struct repl_primary *p);
/* The destination runs the guest: the background stream starts. */
void repl_pc_src_running(struct repl_primary *p);
/* PAGE_REQUEST or POSTCOPY_DONE: <0 error, 1 post-copy is complete. */
int repl_pc_src_frame(struct repl_primary *p, uint16_t type, const ProtobufCMessage *msg) US_MUST_CHECK;
/* A send completed: room for the background stream. */
void repl_pc_src_room(struct repl_primary *p);
/* A failure after the announce: says loudly that the VM is lost. */
void repl_pc_src_lost(struct repl_primary *p, const struct repl_fault *f);
/* "postcopy" while the pages stream, else NULL. */
const char *repl_pc_src_state(const struct repl_primary *p);
/* Status fields: text lines, or members of the status JSON object. */
void repl_pc_src_status(const struct repl_primary *p, char *out, size_t len);
struct json_object;
void repl_pc_src_status_json(const struct repl_primary *p, struct json_object *o);

/* ---- the destination: secondary/postcopy_dst.c ----------------------------------- */

#endif
