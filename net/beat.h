/* net beat: a liveness side channel between the two agents that their own
 * work cannot delay. The data stream is written and read by each agent's
 * loop, and that loop is busy for long stretches (a pause under CPU
 * pressure, encoding, applying a large epoch): a heartbeat queued on the
 * stream leaves, and one that arrived is noticed, only when the loop gets
 * round to it. A beat is a small UDP datagram sent by a thread of its own
 * to the peer's stream port (same HOST:PORT, UDP), and a beat that arrives
 * is stamped (CLOCK_MONOTONIC) by that thread the moment it is read: the
 * peer's silence is judged by what arrived, not by when the loop looked.
 *
 * Masking: a thread that beats on its own would hide a wedged agent. Beats
 * go out only while the owner's loop showed progress (net_beat_progress)
 * within progress_ms; past that they stop and the peer's timeout runs. A
 * stopped or killed process stops its beats with it.
 *
 * Authenticity: each datagram carries the sender's role and a sequence
 * number under an HMAC-SHA256 (truncated to 16 bytes) keyed by a per-link
 * secret that travels on the authenticated stream (TLS), never in a beat.
 * A beat with a bad MAC, the wrong role or a sequence number not above the
 * last one accepted is dropped (forged, reflected or replayed). Layout
 * (32 bytes, little endian): u32 magic "USBT", u8 version, u8 role,
 * u16 zero, u64 seq, 16 bytes MAC over the first 16.
 *
 * Scheduling: the thread asks for SCHED_FIFO priority 1 (it sleeps but
 * for microseconds per beat; a busy machine must not hold a beat back for
 * tens of ms), else nice -10, else runs as it is (logged once).
 *
 * One beat per link; it lives on a thread of its own, so only the calls
 * below touch it from the owner's thread. */
#ifndef US_NET_BEAT_H
#define US_NET_BEAT_H

#include <stdint.h>

#include "net/net.h"

#define NET_BEAT_KEY_BYTES 32
enum { NET_BEAT_PRIMARY = 1, NET_BEAT_SECONDARY = 2 };

struct net_beat_opts {
	const char *bind;        /* "HOST:PORT" to bind (UDP), or NULL: any */
	const char *peer;        /* "HOST:PORT" to beat to, or NULL: the source of the
				  * first valid beat heard (answered from then on) */
	uint8_t key[NET_BEAT_KEY_BYTES];
	int role;                /* this side's NET_BEAT_*; the peer has the other */
	unsigned interval_ms;    /* one beat this often (at least 1) */
	unsigned progress_ms;    /* no beat unless the loop progressed this recently */
};

struct net_beat;

/* Opens the socket and starts the thread; the caller's loop counts as
 * progressing now. 0 or -errno (logged). */
int net_beat_open(const struct net_beat_opts *o, struct net_beat **out) US_MUST_CHECK;
/* Stops the thread and closes the socket. NULL is fine. */
void net_beat_close(struct net_beat *b);
/* The owner's loop made progress (call from a watcher that runs only when
 * the loop gets round to its lowest priority). */
void net_beat_progress(struct net_beat *b);
/* CLOCK_MONOTONIC ns at which the last valid beat from the peer was read,
 * 0 if none yet. */
uint64_t net_beat_heard_ns(const struct net_beat *b);
/* As net_beat_heard_ns, after reading what waits on the socket now (from
 * the owner's thread, before it declares the peer silent: a beat that
 * arrived while the beat thread waited for a CPU still counts). */
uint64_t net_beat_heard_now(struct net_beat *b);
/* Counters for log lines: beats sent, heard (valid), dropped (invalid),
 * and held back (the loop showed no progress). */
void net_beat_counts(const struct net_beat *b, uint64_t *sent, uint64_t *heard,
		     uint64_t *dropped, uint64_t *held);

#endif
