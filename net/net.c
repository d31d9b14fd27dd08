/* Connections on a libev loop: the socket, the lifecycle, the send queue
 * and the bytes received. What goes over the socket is the transport's
 * business (net/tcp.c, net/tls.c, net/rdma.c), reached only through the
 * ops table of the connection; which transport that is, is chosen above
 * this file (net/open.c: connect, listen, accept). See net/conn.h for that
 * contract and net/net.h for the public one. */
#include "net/net.h"
#include "net/conn.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define TAG "net"
#define RBUF_BYTES (256 * 1024)
/* Read into net's buffer while a consumer that reads in place has no
 * buffer to offer (between its frames): little, so that the next frame's
 * body lands in the consumer's buffer rather than being copied there. */
#define RBUF_BETWEEN_BYTES (16 * 1024)

struct seg {
	const uint8_t *base;
	size_t len;
	void *cookie;
	bool last; /* last segment of a net_send(): completes the cookie */
};

struct net_conn {
	struct ev_loop *loop;
	ev_io rio, wio;
	ev_timer setup_w;             /* deadline of connect + setup */
	unsigned setup_ms;
	uint64_t accept_ns;           /* accepted: when */
	bool heard;                   /* accepted: bytes came before it was up */
	int fd;                       /* TCP; for RDMA the bootstrap and liveness socket */
	const struct net_transport_ops *t;
	void *tp;                     /* the transport's state (t->attach) */
	bool connecting, handshaking, dead, freeing;
	bool closing;                 /* net_close_flush(): close once flushed */
	int busy;                     /* callbacks on the stack */
	struct net_conn_acceptor *acceptor; /* set while a server handshake runs */
	struct net_conn *hs_next, *hs_prev;
	const struct net_conn_ops *ops;
	void *ctx;
	struct seg *q;                /* send queue [qhead, qtail) */
	size_t qhead, qtail, qcap;
	size_t queued;
	size_t issue_idx;             /* issue cursor: next bytes at q[issue_idx] */
	const uint8_t *issue_ptr;     /* at this address (NULL: its start) */
	uint8_t *rbuf;
	char peer[64];
};

/* ---- connection objects ----------------------------------------------------- */

static void on_io(struct ev_loop *loop, ev_io *w, int revents);
static void on_setup_timeout(struct ev_loop *loop, ev_timer *w, int revents);

int net_conn_new(struct ev_loop *loop, int fd, const struct net_transport_ops *t, void *ep,
		 const char *host, const char *peer, struct net_conn **out)
{
	struct net_conn *c = calloc(1, sizeof(*c));
	int r = -ENOMEM;

	if (!c)
		goto err_fd;
	c->loop = loop;
	c->fd = fd;
	c->t = t;
	snprintf(c->peer, sizeof(c->peer), "%s", peer);
	c->rbuf = malloc(RBUF_BYTES);
	if (!c->rbuf)
		goto err_conn;
	r = t->attach(c, fd, ep, host, &c->tp);
	if (r)
		goto err_rbuf;
	ev_io_init(&c->rio, on_io, fd, EV_READ);
	ev_io_init(&c->wio, on_io, fd, EV_WRITE);
	ev_timer_init(&c->setup_w, on_setup_timeout, 0, 0);
	c->rio.data = c;
	c->wio.data = c;
	c->setup_w.data = c;
	*out = c;
	return 0;

err_rbuf:
	free(c->rbuf);
err_conn:
	free(c);
err_fd:
	close(fd);
	return r;
}

static void hs_unlink(struct net_conn *c)
{
	struct net_conn_acceptor *a = c->acceptor;

	if (!a)
		return;
	if (c->hs_prev)
		c->hs_prev->hs_next = c->hs_next;
	else
		a->hs_head = c->hs_next;
	if (c->hs_next)
		c->hs_next->hs_prev = c->hs_prev;
	a->hs_count--;
	c->acceptor = NULL;
	c->hs_next = c->hs_prev = NULL;
}

static void conn_free(struct net_conn *c)
{
	ev_io_stop(c->loop, &c->rio);
	ev_io_stop(c->loop, &c->wio);
	ev_timer_stop(c->loop, &c->setup_w);
	hs_unlink(c);
	c->t->detach(c->tp);
	if (c->fd >= 0)
		close(c->fd);
	free(c->q);
	free(c->rbuf);
	free(c);
}

/* Frees now, or when the outermost callback on the stack returns. */
static void conn_release(struct net_conn *c)
{
	c->freeing = true;
	hs_unlink(c);
	ev_io_stop(c->loop, &c->rio);
	ev_io_stop(c->loop, &c->wio);
	ev_timer_stop(c->loop, &c->setup_w);
	if (!c->busy)
		conn_free(c);
}

void net_conn_fail(struct net_conn *c, int reason)
{
	if (c->dead)
		return;
	c->dead = true;
	c->busy++;
	ev_io_stop(c->loop, &c->rio);
	ev_io_stop(c->loop, &c->wio);
	ev_timer_stop(c->loop, &c->setup_w);
	while (c->qhead < c->qtail) {
		struct seg s = c->q[c->qhead++];

		if (s.last && c->ops && c->ops->sent)
			c->ops->sent(c, s.cookie, reason ? reason : -ECONNRESET, c->ctx);
	}
	c->queued = 0;
	if (c->ops && c->ops->closed && !c->freeing)
		c->ops->closed(c, reason, c->ctx);
	c->busy--;
	conn_release(c);
}

static bool conn_ready(const struct net_conn *c)
{
	return !c->connecting && !c->handshaking && !c->dead;
}

void net_close(struct net_conn *c)
{
	if (!c || c->freeing)
		return;
	/* Best effort goodbye, so the peer sees a clean close (reason 0). */
	if (conn_ready(c) && c->t->shutdown)
		c->t->shutdown(c->tp);
	c->dead = true;
	c->ops = NULL;
	conn_release(c);
}

void net_conn_set_ops(struct net_conn *c, const struct net_conn_ops *ops, void *ctx)
{
	c->ops = ops;
	c->ctx = ctx;
}

size_t net_queued_bytes(const struct net_conn *c)
{
	return c->queued;
}

size_t net_unsent_bytes(const struct net_conn *c)
{
	int outq = 0;

	if (c->fd >= 0 && ioctl(c->fd, SIOCOUTQ, &outq) == 0 && outq > 0)
		return c->queued + (size_t)outq;
	return c->queued;
}

size_t net_rx_pending(const struct net_conn *c)
{
	int inq = 0;

	if (c->fd >= 0 && ioctl(c->fd, SIOCINQ, &inq) == 0 && inq > 0)
		return (size_t)inq;
	return 0;
}

bool net_peer_closed(const struct net_conn *c)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	/* No flush (RDMA): the socket only carries the setup, not the stream. */
	if (c->dead || c->fd < 0 || !c->t->flush)
		return false;
	if (getsockopt(c->fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0 || len < sizeof(ti.tcpi_state))
		return false;
	return ti.tcpi_state == TCP_CLOSE_WAIT;
}

const char *net_peer_name(const struct net_conn *c)
{
	return c->peer;
}

const char *net_security(const struct net_conn *c)
{
	return c->t->describe ? c->t->describe(c->tp) : c->t->name;
}

/* Sends are queued, a close is asked for, or the connection came up. */
static void conn_kick(struct net_conn *c)
{
	if (c->t->kick)
		c->t->kick(c->tp);
	else if (c->qhead < c->qtail || c->closing || (c->t->pending && c->t->pending(c->tp)))
		ev_io_start(c->loop, &c->wio);
}

static int queue_reserve(struct net_conn *c, size_t need)
{
	size_t cap = c->qcap ? c->qcap : 64;
	struct seg *q;

	if (need <= c->qcap)
		return 0;
	while (cap < need)
		cap *= 2;
	q = realloc(c->q, cap * sizeof(*q));
	if (!q)
		return -ENOMEM;
	c->q = q;
	c->qcap = cap;
	return 0;
}

int net_send(struct net_conn *c, const struct iovec *iov, int iovcnt, void *cookie)
{
	size_t total = 0;
	int n = 0;

	if (c->dead)
		return -ENOTCONN;
	if (c->closing)
		return -ESHUTDOWN;
	if (iovcnt <= 0)
		return -EINVAL;
	if (c->qhead == c->qtail) {
		c->qhead = c->qtail = 0;
		c->issue_idx = 0;
		c->issue_ptr = NULL;
	}
	if (queue_reserve(c, c->qtail + (size_t)iovcnt))
		return -ENOMEM;
	for (int i = 0; i < iovcnt; i++) {
		if (!iov[i].iov_len && i != iovcnt - 1)
			continue;
		c->q[c->qtail + n] = (struct seg){ iov[i].iov_base, iov[i].iov_len, cookie, false };
		total += iov[i].iov_len;
		n++;
	}
	c->q[c->qtail + n - 1].last = true;
	c->qtail += (size_t)n;
	c->queued += total;
	/* Written from the loop, so sent() never runs inside net_send(). */
	if (conn_ready(c))
		conn_kick(c);
	return 0;
}

/* ---- the send queue, for transports ------------------------------------------ */

void net_queue_consume(struct net_conn *c, size_t n, bool count)
{
	while (c->qhead < c->qtail && !c->dead) {
		struct seg *s = &c->q[c->qhead];
		size_t take = n < s->len ? n : s->len;

		s->base += take;
		s->len -= take;
		n -= take;
		if (count)
			c->queued -= take;
		if (s->len)
			break;
		c->qhead++;
		if (s->last && c->ops && c->ops->sent)
			c->ops->sent(c, s->cookie, 0, c->ctx); /* may queue more or close */
		if (!n && (c->qhead == c->qtail || c->q[c->qhead].len))
			break;
	}
}

void net_queue_taken(struct net_conn *c, size_t n)
{
	c->queued -= n;
}

bool net_queue_head(const struct net_conn *c, const uint8_t **base, size_t *len)
{
	if (c->qhead == c->qtail)
		return false;
	*base = c->q[c->qhead].base;
	*len = c->q[c->qhead].len;
	return true;
}

int net_queue_iov(const struct net_conn *c, struct iovec *iov, int max)
{
	int cnt = 0;

	for (size_t i = c->qhead; i < c->qtail && cnt < max; i++) {
		iov[cnt].iov_base = (void *)c->q[i].base;
		iov[cnt++].iov_len = c->q[i].len;
	}
	return cnt;
}

bool net_queue_next(struct net_conn *c, const uint8_t **p, size_t *len)
{
	if (c->issue_idx < c->qhead) {
		c->issue_idx = c->qhead;
		c->issue_ptr = NULL;
	}
	while (c->issue_idx < c->qtail) {
		const struct seg *s = &c->q[c->issue_idx];
		const uint8_t *at = c->issue_ptr ? c->issue_ptr : s->base;
		size_t rem = (size_t)(s->base + s->len - at);

		if (rem) {
			*p = at;
			*len = rem;
			return true;
		}
		c->issue_idx++;
		c->issue_ptr = NULL;
	}
	return false;
}

void net_queue_issued(struct net_conn *c, size_t n)
{
	c->issue_ptr = (c->issue_ptr ? c->issue_ptr : c->q[c->issue_idx].base) + n;
}

bool net_queue_unissued(const struct net_conn *c)
{
	return c->issue_idx < c->qtail;
}

/* ---- the rest of the helpers for transports ---------------------------------- */

bool net_conn_dead(const struct net_conn *c)
{
	return c->dead;
}

bool net_conn_closing(const struct net_conn *c)
{
	return c->closing;
}

struct ev_loop *net_conn_loop(const struct net_conn *c)
{
	return c->loop;
}

void net_conn_watch_read(struct net_conn *c, bool on)
{
	if (on)
		ev_io_start(c->loop, &c->rio);
	else
		ev_io_stop(c->loop, &c->rio);
}

void net_conn_watch_write(struct net_conn *c, bool on)
{
	if (on)
		ev_io_start(c->loop, &c->wio);
	else
		ev_io_stop(c->loop, &c->wio);
}

void net_conn_feed_read(struct net_conn *c)
{
	ev_feed_event(c->loop, &c->rio, EV_READ);
}

/* Where to read next: the consumer's buffer if it offers one. */
uint8_t *net_conn_rbuf(struct net_conn *c, size_t *cap)
{
	uint8_t *buf = NULL;
	size_t len = 0;

	if (c->ops && c->ops->recv_buf)
		buf = c->ops->recv_buf(c, &len, c->ctx);
	if (!buf || !len) {
		buf = c->rbuf;
		len = c->ops && c->ops->recv_buf ? RBUF_BETWEEN_BYTES : RBUF_BYTES;
	}
	*cap = len < INT_MAX ? len : INT_MAX;
	return buf;
}

void net_conn_deliver(struct net_conn *c, const void *data, size_t len)
{
	if (c->ops && c->ops->recv)
		c->ops->recv(c, data, len, c->ctx);
}

void net_conn_enter(struct net_conn *c)
{
	c->busy++;
}

void net_conn_leave(struct net_conn *c)
{
	c->busy--;
	if (c->freeing && !c->busy)
		conn_free(c);
}

/* ---- lifecycle ---------------------------------------------------------------- */

void net_conn_up(struct net_conn *c)
{
	struct net_conn_acceptor *a = c->acceptor;

	c->handshaking = false;
	ev_timer_stop(c->loop, &c->setup_w);
	if (a) {
		hs_unlink(c);
		a->fn(a->l, c, a->ctx);
		if (c->freeing)
			return;
		if (!c->ops)
			log_warn(TAG, "accepted %s without callbacks", c->peer);
	} else if (c->ops && c->ops->connected) {
		c->ops->connected(c, c->ctx);
	}
	if (c->dead || c->freeing)
		return;
	conn_kick(c);
}

void net_conn_finish_close(struct net_conn *c)
{
	if (c->t->shutdown)
		c->t->shutdown(c->tp);
	shutdown(c->fd, SHUT_WR);
	net_conn_fail(c, 0);
}

void net_close_flush(struct net_conn *c)
{
	if (!c || c->freeing || c->dead || c->closing)
		return;
	c->closing = true;
	/* Completion runs from the loop, never inside this call. */
	if (conn_ready(c))
		conn_kick(c);
}

static void conn_flush(struct net_conn *c)
{
	int r;

	if (!c->t->flush) {
		ev_io_stop(c->loop, &c->wio); /* the socket only carries the setup */
		if (conn_ready(c))
			c->t->kick(c->tp);
		return;
	}
	r = c->t->flush(c->tp);
	if (c->dead)
		return;
	if (r == -EAGAIN) {
		ev_io_start(c->loop, &c->wio);
	} else if (r) {
		log_error(TAG, "send to %s: %s", c->peer, strerror(-r));
		net_conn_fail(c, r);
	} else if (!c->queued && !(c->t->pending && c->t->pending(c->tp))) {
		ev_io_stop(c->loop, &c->wio);
		if (c->closing)
			net_conn_finish_close(c);
	}
}

/* The socket is connected or accepted: the transport's setup begins. */
static void conn_start(struct net_conn *c)
{
	int r;

	c->handshaking = true;
	r = c->t->start(c->tp);
	if (r)
		net_conn_fail(c, r);
}

static void conn_connecting(struct net_conn *c)
{
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err) {
		log_error(TAG, "connect to %s: %s", c->peer, strerror(err));
		net_conn_fail(c, -err);
		return;
	}
	c->connecting = false;
	ev_io_start(c->loop, &c->rio);
	ev_io_stop(c->loop, &c->wio);
	conn_start(c);
}

static void setup_heard(struct net_conn *c);

static void on_io(struct ev_loop *loop, ev_io *w, int revents)
{
	struct net_conn *c = w->data;

	(void)loop;
	c->busy++;
	if (c->acceptor && !c->heard && (revents & EV_READ))
		setup_heard(c);
	if (c->connecting) {
		conn_connecting(c);
	} else if (c->handshaking && c->t->handshake) {
		c->t->handshake(c->tp);
	} else {
		if (revents & EV_READ)
			c->t->read(c->tp);
		if (!c->dead && (revents & EV_WRITE || c->qhead < c->qtail))
			conn_flush(c);
	}
	net_conn_leave(c);
}

/* ---- starting a connection, for net/open.c ------------------------------------ */

static uint64_t ms_since(uint64_t ns)
{
	return (now_ns() - ns) / 1000000;
}

/* Connections that never said anything are what a flood is made of: one
 * line per 10 s about them, saying how many went unsaid. */
static void setup_log_silent(struct net_conn *c)
{
	struct net_conn_acceptor *a = c->acceptor;

	if (a->silent_log_ns && ms_since(a->silent_log_ns) < 10000) {
		a->silent_unlogged++;
		return;
	}
	log_warn(TAG, "accepted %s: sent nothing within %u ms: closed (%u more like it unsaid)",
		 c->peer, c->setup_ms, a->silent_unlogged);
	a->silent_log_ns = now_ns();
	a->silent_unlogged = 0;
}

/* Not up in time: a peer that takes the TCP connection but never completes
 * the setup (a silent TLS peer) is handled as a lost one. */
static void on_setup_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct net_conn *c = w->data;

	(void)loop;
	(void)revents;
	if (c->acceptor && !c->heard)
		setup_log_silent(c);
	else
		log_error(TAG, "%s %s: no %s within %u ms", c->acceptor ? "accepted" : "connection to",
			  c->peer, c->connecting ? "connection" : "handshake", c->setup_ms);
	net_conn_enter(c);
	net_conn_fail(c, -ETIMEDOUT);
	net_conn_leave(c);
}

static void setup_deadline(struct net_conn *c, unsigned setup_ms)
{
	c->setup_ms = setup_ms;
	ev_timer_stop(c->loop, &c->setup_w);
	ev_timer_set(&c->setup_w, setup_ms / 1e3, 0);
	ev_timer_start(c->loop, &c->setup_w);
}

/* An accepted connection's first bytes: the rest of the full deadline. */
static void setup_heard(struct net_conn *c)
{
	uint64_t spent = ms_since(c->accept_ns);
	unsigned full = c->acceptor->setup_ms;

	c->heard = true;
	setup_deadline(c, spent < full ? full - (unsigned)spent : 1);
	c->setup_ms = full;
}

/* Has it sent anything, read or not yet read? */
static bool setup_silent(struct net_conn *c)
{
	if (!c->heard && net_rx_pending(c))
		setup_heard(c);
	return !c->heard;
}

/* The length of peer's address in "ADDR:PORT". */
static size_t source_len(const char *peer)
{
	const char *colon = strrchr(peer, ':');

	return colon ? (size_t)(colon - peer) : strlen(peer);
}

bool net_same_host(const char *a, const char *b)
{
	size_t n = source_len(a);

	return n == source_len(b) && !memcmp(a, b, n);
}

/* The oldest setup of a, from source src (NULL: any), silent ones only when
 * asked; NULL if none. */
static struct net_conn *oldest_setup(const struct net_conn_acceptor *a, const char *src,
				     bool silent)
{
	struct net_conn *best = NULL;

	for (struct net_conn *c = a->hs_head; c; c = c->hs_next) {
		if ((src && !net_same_host(c->peer, src)) || (silent && !setup_silent(c)))
			continue;
		if (!best || c->accept_ns < best->accept_ns)
			best = c;
	}
	return best;
}

int net_acceptor_admit(struct net_conn_acceptor *a, const char *peer, char *evicted, size_t len)
{
	struct net_conn *v = NULL;
	unsigned mine = 0;

	evicted[0] = 0;
	for (struct net_conn *c = a->hs_head; c; c = c->hs_next)
		mine += net_same_host(c->peer, peer);
	if (mine >= a->per_source) {
		v = oldest_setup(a, peer, true);
		if (!v)
			v = oldest_setup(a, peer, false);
	} else if (a->hs_count >= a->max_setups) {
		v = oldest_setup(a, NULL, true);
		if (!v && (v = oldest_setup(a, NULL, false)) && ms_since(v->accept_ns) <= a->silent_ms)
			return -EBUSY;
	}
	if (!v)
		return 0;
	snprintf(evicted, len, "%s (%s for %llu ms)", v->peer,
		 v->heard ? "in its setup" : "silent", (unsigned long long)ms_since(v->accept_ns));
	net_close(v);
	return 0;
}

/* Writable = connect finished. */
int net_conn_dial(struct net_conn *c, const struct sockaddr_storage *ss, socklen_t sslen,
		  unsigned setup_ms)
{
	int r;

	c->connecting = true;
	if (connect(c->fd, (const struct sockaddr *)ss, sslen) < 0 && errno != EINPROGRESS) {
		r = -errno;
		log_error(TAG, "connect to %s: %s", c->peer, strerror(-r));
		return r;
	}
	ev_io_start(c->loop, &c->wio);
	setup_deadline(c, setup_ms);
	return 0;
}

void net_conn_accept(struct net_conn *c, struct net_conn_acceptor *a)
{
	c->acceptor = a; /* on the list until up */
	c->hs_next = a->hs_head;
	if (a->hs_head)
		a->hs_head->hs_prev = c;
	a->hs_head = c;
	a->hs_count++;
	c->accept_ns = now_ns();
	ev_io_start(c->loop, &c->rio);
	setup_deadline(c, a->silent_ms < a->setup_ms ? a->silent_ms : a->setup_ms);
	net_conn_enter(c); /* the accept callback may close it */
	conn_start(c);
	net_conn_leave(c);
}
