/* The link's beat side channel (see replication.h, net/beat.h): the key
 * exchange on the stream and the silence clock that counts beats. */
#include "replication/replication_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kmod/mutant.h"
#include "net/beat.h"

#define TAG "beat"

_Static_assert(REPL_BEAT_KEY_BYTES == NET_BEAT_KEY_BYTES, "one key size");

unsigned repl_beat_interval_ms(unsigned heartbeat_ms, unsigned peer_timeout_ms)
{
	unsigned ms = heartbeat_ms;

	if (peer_timeout_ms && peer_timeout_ms / 5 < ms)
		ms = peer_timeout_ms / 5;
	return ms ? ms : 1;
}

static void beat_open(struct repl_link *l, const uint8_t *key, int role, const char *bind_at,
		     const char *peer, unsigned interval_ms)
{
	struct net_beat_opts o = {
		.bind = bind_at, .peer = peer, .role = role, .interval_ms = interval_ms,
		.progress_ms = REPL_BEAT_PROGRESS_MS,
	};
	int r;

	repl_link_beat_stop(l);
	memcpy(o.key, key, sizeof(o.key));
	r = net_beat_open(&o, &l->beat);
	explicit_bzero(o.key, sizeof(o.key));
	if (r < 0) {
		l->beat = NULL;
		log_warn(TAG, "no beat side channel (%s): silence is judged on the stream alone",
			 strerror(-r));
		return;
	}
	log_info(TAG, "beat side channel: UDP %s, one beat every %u ms while this loop progresses "
		 "(within %u ms)", peer ? peer : bind_at, interval_ms, REPL_BEAT_PROGRESS_MS);
}

void repl_link_beat_start(struct repl_link *l, bool primary, const void *key, size_t key_len,
			  const char *bind_at, unsigned interval_ms)
{
	if (key_len != NET_BEAT_KEY_BYTES) {
		log_warn(TAG, "a beat key of %zu bytes, not %d: no beats", key_len, NET_BEAT_KEY_BYTES);
		return;
	}
	if (primary && !l->conn)
		return;
	beat_open(l, key, primary ? NET_BEAT_PRIMARY : NET_BEAT_SECONDARY, bind_at,
		  primary ? net_peer_name(l->conn) : NULL, interval_ms);
}

void repl_link_beat_stop(struct repl_link *l)
{
	uint64_t heard, sent, got, dropped, held;

	if (!l->beat)
		return;
	heard = net_beat_heard_ns(l->beat);
	if (heard > l->last_rx_ns)
		l->last_rx_ns = heard;
	net_beat_counts(l->beat, &sent, &got, &dropped, &held);
	log_info(TAG, "beats stopped: %llu sent, %llu heard, %llu dropped (invalid), %llu held back "
		 "(loop without progress)", (unsigned long long)sent, (unsigned long long)got,
		 (unsigned long long)dropped, (unsigned long long)held);
	net_beat_close(l->beat);
	l->beat = NULL;
}

/* now - then, 0 when then is later (stamped by another thread after now was read). */
static inline uint64_t ns_since(uint64_t then, uint64_t now)
{
	return now > then ? now - then : 0;
}

/* Beats stand in for the stream only while the stream itself showed life
 * within REPL_BEAT_STREAM_MS: a peer that beats over a stream that carries
 * nothing (blackholed, wedged) is lost all the same, only later. */
static bool stream_alive(const struct repl_link *l, uint64_t now)
{
	return ns_since(l->last_rx_ns, now) <= REPL_BEAT_STREAM_MS * 1000000ull;
}

/* When the peer was last heard: its stream bytes or its beat. */
static uint64_t link_heard_ns(const struct repl_link *l)
{
	uint64_t beat = net_beat_heard_ns(l->beat);

	if (beat <= l->last_rx_ns || !stream_alive(l, now_ns()))
		return l->last_rx_ns;
	return beat;
}

/* Both below read when the peer was heard before the clock. */
uint64_t repl_link_silent_ns(const struct repl_link *l)
{
	uint64_t heard, now;

	if (MUTANT(silence_wraps)) {   /* make check-mutants: the clock first, a later beat wraps */
		now = now_ns();
		return now - link_heard_ns(l);
	}
	heard = link_heard_ns(l);
	return ns_since(heard, now_ns());
}

/* Stream bytes wait to be read: the peer is heard (they are read next, at
 * a higher priority). */
static bool rx_pending(struct repl_link *l, uint64_t now)
{
	if (l->conn && net_rx_pending(l->conn)) {
		l->last_rx_ns = now;
		return true;
	}
	return false;
}

bool repl_link_heard_late(struct repl_link *l, uint64_t timeout_ns)
{
	uint64_t beat, now;

	if (MUTANT(silence_wraps)) {   /* make check-mutants: the clock first, a later beat wraps */
		now = now_ns();
		beat = l->beat ? net_beat_heard_now(l->beat) : 0;
		return (l->beat && stream_alive(l, now) && now - beat <= timeout_ns) ||
		       rx_pending(l, now);
	}
	beat = l->beat ? net_beat_heard_now(l->beat) : 0;
	now = now_ns();
	if (l->beat && stream_alive(l, now) && ns_since(beat, now) <= timeout_ns)
		return true;
	return rx_pending(l, now);
}
