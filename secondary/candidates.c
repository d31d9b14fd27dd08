/* Connections to the secondary before their Hello (see secondary.c, top).
 * A connection is only a candidate until it says a valid Hello: the agent
 * decides on it (ops->hello); the first accepted one is promoted to the
 * primary's link, any other is refused when it speaks, or closed, silent,
 * at handshake_timeout_ms after its connection, as a lost peer. */
#include "secondary/secondary_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define TAG "secondary"

struct repl_candidate {
	struct repl_candidates *cs;
	int slot;
	struct repl_link link;
	uint64_t since_ns;               /* accepted */
	bool heard;                      /* sent something */
	bool refusing;                   /* an Error is on its way, then we close */
	bool promoted;                   /* said Hello: it is the primary's link now */
};

void repl_candidates_init(struct repl_candidates *cs, const struct repl_candidates_ops *ops,
			  void *ctx, unsigned handshake_timeout_ms, struct repl_fault *fault)
{
	memset(cs, 0, sizeof(*cs));
	cs->ops = ops;
	cs->ctx = ctx;
	cs->handshake_timeout_ms = handshake_timeout_ms;
	cs->fault = fault;
}

static void candidate_free(struct repl_candidate *pd)
{
	pd->cs->slot[pd->slot] = NULL;
	repl_link_fini(&pd->link);       /* closes the connection if still open */
	free(pd);
}

void repl_candidates_close_all(struct repl_candidates *cs, const char *why)
{
	for (int i = 0; i < REPL_CANDIDATES_MAX; i++) {
		if (!cs->slot[i])
			continue;
		log_info(TAG, "closing %s: %s", net_peer_name(cs->slot[i]->link.conn), why);
		candidate_free(cs->slot[i]);
	}
}

/* A candidate that said a valid Hello becomes the primary's link (the
 * others stay candidates). Frames after its Hello go to ops->frame. */
static void promote(struct repl_candidate *pd)
{
	struct repl_candidates *cs = pd->cs;
	struct net_conn *c = pd->link.conn;

	cs->slot[pd->slot] = NULL;
	pd->link.conn = NULL;
	pd->promoted = true;
	cs->ops->promote(cs->ctx, c);
}

static int candidate_frame(void *ctx, const struct proto_frame *f)
{
	struct repl_candidate *pd = ctx;
	struct repl_candidates *cs = pd->cs;
	int r;

	if (pd->promoted)
		return cs->ops->frame(cs->ctx, f);
	if (f->type != PROTO_T_HELLO) {
		log_error(TAG, "%s sent %s before its Hello: closing", net_peer_name(pd->link.conn),
			  proto_type_name(f->type));
		repl_fault_set(cs->fault, REPL_FAULT_PEER_PROTOCOL, -EPROTO,
			       "a peer sent %s before its Hello", proto_type_name(f->type));
		return -ENOMSG;         /* logged: not bad bytes */
	}
	r = cs->ops->hello(cs->ctx, &pd->link, f);
	if (r == 0)
		promote(pd);
	return r;
}

/* The decoder that read the Hello goes on with the primary's stream. */
static void candidate_adopt(struct repl_candidate *pd, int r)
{
	struct repl_candidates *cs = pd->cs;

	cs->ops->adopt(cs->ctx, &pd->link);
	repl_link_fini(&pd->link);
	free(pd);
	cs->ops->fed(cs->ctx, r);
}

static void candidate_recv(struct net_conn *c, const void *data, size_t len, void *ctx)
{
	struct repl_candidate *pd = ctx;
	struct repl_candidates *cs = pd->cs;
	int r;

	pd->heard = true;
	if (pd->refusing)
		return;
	r = repl_link_feed(&pd->link, data, len, candidate_frame, pd);
	if (pd->promoted) {
		candidate_adopt(pd, r);
		return;
	}
	if (r >= 0)
		return;
	if (r == -ECONNREFUSED) {
		pd->refusing = true;     /* the Error leaves, then closed() follows */
		net_close_flush(c);
		return;
	}
	if (r != -ENOMSG) {
		log_error(TAG, "bad data from the primary %s before its Hello (%s): closing",
			  net_peer_name(c), proto_strerror(r));
		repl_fault_set(cs->fault, REPL_FAULT_PEER_PROTOCOL, r, "the primary sent bad data (%s)",
			       proto_strerror(r));
	}
	candidate_free(pd);
}

static void candidate_sent(struct net_conn *c, void *cookie, int status, void *ctx)
{
	(void)c;
	(void)status;
	(void)ctx;
	repl_link_sent_owned(cookie);
}

static void candidate_closed(struct net_conn *c, int reason, void *ctx)
{
	struct repl_candidate *pd = ctx;

	log_info(TAG, "%s closed before its Hello (%s)", net_peer_name(c),
		 reason ? strerror(-reason) : "EOF");
	repl_link_closed(&pd->link);
	candidate_free(pd);
}

static const struct net_conn_ops candidate_ops = {
	.recv = candidate_recv, .sent = candidate_sent, .closed = candidate_closed,
};

static uint64_t ms_since(uint64_t ns)
{
	return (now_ns() - ns) / 1000000;
}

/* Has it sent anything, read or not yet read? */
static bool silent(struct repl_candidate *pd)
{
	if (!pd->heard && net_rx_pending(pd->link.conn))
		pd->heard = true;
	return !pd->heard;
}

/* The oldest candidate from host (NULL: any), a silent one if want_silent;
 * NULL if none. */
static struct repl_candidate *oldest(struct repl_candidates *cs, const char *host,
				     bool want_silent)
{
	struct repl_candidate *best = NULL;

	for (int i = 0; i < REPL_CANDIDATES_MAX; i++) {
		struct repl_candidate *pd = cs->slot[i];

		if (!pd || (host && !net_same_host(net_peer_name(pd->link.conn), host)) ||
		    (want_silent && !silent(pd)))
			continue;
		if (!best || pd->since_ns < best->since_ns)
			best = pd;
	}
	return best;
}

/* A free slot for a newcomer from peer, made by closing the candidate it
 * replaces if need be (see replication.h); -1 when none may go. */
static int free_slot(struct repl_candidates *cs, const char *peer)
{
	struct repl_candidate *v = NULL;
	int mine = 0, free_i = -1;

	for (int i = REPL_CANDIDATES_MAX - 1; i >= 0; i--) {
		if (!cs->slot[i])
			free_i = i;
		else
			mine += net_same_host(net_peer_name(cs->slot[i]->link.conn), peer);
	}
	if (mine >= REPL_CANDIDATES_PER_SOURCE) {
		if (!(v = oldest(cs, peer, true)))
			v = oldest(cs, peer, false);
	} else if (free_i < 0) {
		v = oldest(cs, NULL, true);
		if (!v && (v = oldest(cs, NULL, false)) &&
		    ms_since(v->since_ns) <= REPL_CANDIDATES_SILENT_MS)
			return -1;
	}
	if (!v)
		return free_i;
	if (!cs->log_ns || ms_since(cs->log_ns) >= 10000) {
		log_warn(TAG, "closing %s (%s for %llu ms) to make room for %s (%u more like it "
			 "unsaid)", net_peer_name(v->link.conn), v->heard ? "no Hello" : "silent",
			 (unsigned long long)ms_since(v->since_ns), peer, cs->unlogged);
		cs->log_ns = now_ns();
		cs->unlogged = 0;
	} else {
		cs->unlogged++;
	}
	free_i = v->slot;
	candidate_free(v);
	return free_i;
}

void repl_candidates_add(struct repl_candidates *cs, struct net_conn *c)
{
	struct repl_candidate *pd;
	int i = free_slot(cs, net_peer_name(c));

	if (i < 0 || !(pd = calloc(1, sizeof(*pd)))) {
		log_warn(TAG, "refusing %s: %d connections are still to say Hello", net_peer_name(c),
			 REPL_CANDIDATES_MAX);
		net_close(c);
		return;
	}
	pd->cs = cs;
	pd->slot = i;
	repl_link_init(&pd->link, PROTO_MAX_PAYLOAD_DEFAULT);
	pd->link.conn = c;
	pd->since_ns = now_ns();
	cs->slot[i] = pd;
	log_info(TAG, "%s connected: waiting for its Hello (%u ms)", net_peer_name(c),
		 cs->handshake_timeout_ms);
	net_conn_set_ops(c, &candidate_ops, pd);
}

void repl_candidates_expire(struct repl_candidates *cs)
{
	uint64_t limit = cs->handshake_timeout_ms;

	for (int i = 0; i < REPL_CANDIDATES_MAX; i++) {
		struct repl_candidate *pd = cs->slot[i];
		uint64_t age;

		if (!pd)
			continue;
		age = ms_since(pd->since_ns);
		if (age > limit) {
			log_warn(TAG, "no Hello from %s within %u ms: closing it (a lost peer)",
				 net_peer_name(pd->link.conn), cs->handshake_timeout_ms);
		} else if (age > REPL_CANDIDATES_SILENT_MS && silent(pd)) {
			log_warn(TAG, "%s sent nothing within %u ms: closing it",
				 net_peer_name(pd->link.conn), REPL_CANDIDATES_SILENT_MS);
		} else {
			continue;
		}
		candidate_free(pd);
	}
}
