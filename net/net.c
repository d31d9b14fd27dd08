/* Connections on a libev loop: TCP sockets, with the TLS layer (net/tls.c)
 * or the RDMA link (net/rdma.c) on top. See net/net.h. */
#include "net/net.h"
#include "net/conn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#define TAG "net"
#define RBUF_BYTES (256 * 1024)
#define SOCKBUF_DEFAULT (4 * 1024 * 1024)
#define WRITEV_MAX 1024 /* IOV_MAX */

struct net_listener {
	struct ev_loop *loop;
	ev_io io;
	int fd;
	int port;
	struct net_config cfg;
	SSL_CTX *ssl_ctx;
	char *rdma_provider;
	net_accept_fn fn;
	void *ctx;
	struct net_conn *hs_head;     /* connections in their handshake */
};

static void conn_fail(struct net_conn *c, int reason);
static void conn_flush(struct net_conn *c);

static int check_config(const struct net_config *cfg)
{
	switch (cfg->transport) {
	case NET_TLS:
		return 0;
	case NET_TCP:
		if (!cfg->insecure) {
			log_error(TAG, "plaintext TCP refused without --insecure");
			return -EPERM;
		}
		log_warn(TAG, "INSECURE: plaintext TCP, no authentication, no encryption");
		return 0;
	case NET_RDMA:
		if (!cfg->insecure) {
			log_error(TAG, "RDMA refused without --insecure (no encryption on the fabric)");
			return -EPERM;
		}
		log_warn(TAG, "INSECURE: RDMA link, no authentication, no encryption: trusted "
			 "fabric only");
		return 0;
	}
	return -EINVAL;
}

/* ---- addresses and sockets -------------------------------------------------- */

static int resolve(const char *host_port, struct sockaddr_storage *ss, socklen_t *sslen)
{
	char host[256];
	const char *colon = strrchr(host_port, ':');
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
	struct addrinfo *ai;
	size_t hlen;
	int r;

	if (!colon || colon == host_port)
		return -EINVAL;
	hlen = (size_t)(colon - host_port);
	if (hlen >= sizeof(host))
		return -EINVAL;
	memcpy(host, host_port, hlen);
	host[hlen] = 0;
	r = getaddrinfo(host, colon + 1, &hints, &ai);
	if (r) {
		log_error(TAG, "cannot resolve %s: %s", host_port, gai_strerror(r));
		return -EHOSTUNREACH;
	}
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	*sslen = ai->ai_addrlen;
	freeaddrinfo(ai);
	return 0;
}

static void set_sockopts(int fd, const struct net_config *cfg)
{
	int one = 1, buf = cfg->sockbuf_bytes ? cfg->sockbuf_bytes : SOCKBUF_DEFAULT;

	/* Best effort: the kernel caps buffers at net.core.[rw]mem_max. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
}

/* ---- connection objects ----------------------------------------------------- */

static void on_io(struct ev_loop *loop, ev_io *w, int revents);

static struct net_conn *conn_new(struct ev_loop *loop, int fd, SSL_CTX *ssl_ctx)
{
	struct net_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->loop = loop;
	c->fd = fd;
	c->rbuf = malloc(RBUF_BYTES);
	if (!c->rbuf)
		goto err_conn;
	if (ssl_ctx) {
		c->tbuf = malloc(NET_TBUF_BYTES);
		c->ssl = SSL_new(ssl_ctx);
		if (!c->tbuf || !c->ssl || tls_attach(c))
			goto err_ssl;
		c->handshaking = true;
	}
	ev_io_init(&c->rio, on_io, fd, EV_READ);
	ev_io_init(&c->wio, on_io, fd, EV_WRITE);
	c->rio.data = c;
	c->wio.data = c;
	return c;

err_ssl:
	SSL_free(c->ssl);
	BIO_meth_free(c->wmeth);
	free(c->wout);
	free(c->tbuf);
	free(c->rbuf);
err_conn:
	free(c);
	return NULL;
}

static void hs_unlink(struct net_conn *c)
{
	struct net_listener *l = c->listener;

	if (!l)
		return;
	if (c->hs_prev)
		c->hs_prev->hs_next = c->hs_next;
	else
		l->hs_head = c->hs_next;
	if (c->hs_next)
		c->hs_next->hs_prev = c->hs_prev;
	c->listener = NULL;
	c->hs_next = c->hs_prev = NULL;
}

static void conn_free(struct net_conn *c)
{
	ev_io_stop(c->loop, &c->rio);
	ev_io_stop(c->loop, &c->wio);
	hs_unlink(c);
	SSL_free(c->ssl);
	BIO_meth_free(c->wmeth);
	free(c->wout);
	rdma_free(c->rdma);
	free(c->rdma_provider);
	if (c->fd >= 0)
		close(c->fd);
	free(c->q);
	free(c->tbuf);
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
	if (!c->busy)
		conn_free(c);
}

static void conn_fail(struct net_conn *c, int reason)
{
	if (c->dead)
		return;
	c->dead = true;
	c->busy++;
	ev_io_stop(c->loop, &c->rio);
	ev_io_stop(c->loop, &c->wio);
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

void net_close(struct net_conn *c)
{
	if (!c || c->freeing)
		return;
	/* Best effort close_notify, so the peer sees a clean close (reason 0). */
	if (c->ssl && !c->dead && !c->connecting && !c->handshaking) {
		SSL_shutdown(c->ssl);
		(void)tls_wout_flush(c);
	}
	if (c->rdma && !c->dead && !c->handshaking)
		rdma_fin(c);
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

const char *net_peer_name(const struct net_conn *c)
{
	return c->peer;
}

static bool conn_ready(const struct net_conn *c)
{
	return !c->connecting && !c->handshaking && !c->dead;
}

int net_send(struct net_conn *c, const struct iovec *iov, int iovcnt, void *cookie)
{
	size_t need, total = 0;
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
	need = c->qtail + (size_t)iovcnt;
	if (need > c->qcap) {
		size_t cap = c->qcap ? c->qcap : 64;
		struct seg *q;

		while (cap < need)
			cap *= 2;
		q = realloc(c->q, cap * sizeof(*q));
		if (!q)
			return -ENOMEM;
		c->q = q;
		c->qcap = cap;
	}
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
	if (conn_ready(c)) {
		if (c->rdma)
			rdma_kick(c);
		else
			ev_io_start(c->loop, &c->wio);
	}
	return 0;
}

/* Consumes n bytes from the head of the queue, completing finished sends. */
static void queue_consume(struct net_conn *c, size_t n, bool count)
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

static int flush_tcp(struct net_conn *c)
{
	struct iovec iov[WRITEV_MAX];
	ssize_t n;
	int cnt;

	while (c->qhead < c->qtail && !c->dead) {
		cnt = 0;
		for (size_t i = c->qhead; i < c->qtail && cnt < WRITEV_MAX; i++) {
			iov[cnt].iov_base = (void *)c->q[i].base;
			iov[cnt++].iov_len = c->q[i].len;
		}
		n = writev(c->fd, iov, cnt);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return errno == EAGAIN ? -EAGAIN : 0;
			return -errno;
		}
		queue_consume(c, (size_t)n, true);
	}
	return 0;
}

static void conn_flush(struct net_conn *c)
{
	int r;

	if (c->want_rdma) {
		ev_io_stop(c->loop, &c->wio); /* the socket only carries the setup */
		if (c->rdma && conn_ready(c))
			rdma_kick(c);
		return;
	}
	r = c->ssl ? tls_flush(c) : flush_tcp(c);

	if (c->dead)
		return;
	if (r == -EAGAIN) {
		ev_io_start(c->loop, &c->wio);
	} else if (r) {
		log_error(TAG, "send to %s: %s", c->peer, strerror(-r));
		conn_fail(c, r);
	} else if (!c->queued && !tls_wout_pending(c)) {
		ev_io_stop(c->loop, &c->wio);
		if (c->closing)
			net_conn_finish_close(c);
	}
}

void net_conn_finish_close(struct net_conn *c)
{
	if (c->ssl) {
		SSL_shutdown(c->ssl);
		(void)tls_wout_flush(c);
	}
	if (c->rdma)
		rdma_fin(c);
	shutdown(c->fd, SHUT_WR);
	conn_fail(c, 0);
}

void net_close_flush(struct net_conn *c)
{
	if (!c || c->freeing || c->dead || c->closing)
		return;
	c->closing = true;
	/* Completion runs from the loop, never inside this call. */
	if (!conn_ready(c))
		return;
	if (c->rdma)
		rdma_kick(c);
	else
		ev_io_start(c->loop, &c->wio);
}

/* Where to read next: the consumer's buffer if it offers one. */
static uint8_t *read_target(struct net_conn *c, size_t *cap)
{
	uint8_t *buf = NULL;
	size_t len = 0;

	if (c->ops && c->ops->recv_buf)
		buf = c->ops->recv_buf(c, &len, c->ctx);
	if (!buf || !len) {
		buf = c->rbuf;
		len = RBUF_BYTES;
	}
	*cap = len < INT_MAX ? len : INT_MAX;
	return buf;
}

static void conn_read(struct net_conn *c)
{
	uint8_t *buf;
	size_t cap;
	ssize_t n;
	int r;

	for (int i = 0; i < 64 && !c->dead; i++) {
		buf = read_target(c, &cap);
		if (c->ssl) {
			ERR_clear_error();
			n = SSL_read(c->ssl, buf, (int)cap);
			if (n <= 0) {
				r = tls_result(c, (int)n, "TLS read from");
				if (r == -EAGAIN)
					return;
				conn_fail(c, r == -EPIPE ? 0 : r);
				return;
			}
		} else {
			n = read(c->fd, buf, cap);
			if (n < 0) {
				if (errno == EAGAIN || errno == EINTR)
					return;
				conn_fail(c, -errno);
				return;
			}
			if (n == 0) {
				if (c->rdma && !c->handshaking)
					rdma_drain(c); /* what the peer wrote before closing */
				conn_fail(c, c->want_rdma && c->handshaking ? -ECONNRESET : 0);
				return;
			}
		}
		if (c->want_rdma)
			rdma_ctl_recv(c, buf, (size_t)n);
		else if (c->ops && c->ops->recv)
			c->ops->recv(c, buf, (size_t)n, c->ctx);
		/* TLS: records already decrypted inside OpenSSL raise no event. */
		if (!c->ssl && (size_t)n < cap)
			return;
	}
	if (c->ssl && !c->dead && SSL_has_pending(c->ssl))
		ev_feed_event(c->loop, &c->rio, EV_READ);
	/* Reading can produce records to send (alerts, key updates). */
	if (c->ssl && !c->dead && tls_wout_pending(c))
		ev_io_start(c->loop, &c->wio);
}

void net_conn_up(struct net_conn *c)
{
	struct net_listener *l = c->listener;

	c->handshaking = false;
	if (l) {
		hs_unlink(c);
		l->fn(l, c, l->ctx);
		if (c->freeing)
			return;
		if (!c->ops)
			log_warn(TAG, "accepted %s without callbacks", c->peer);
	} else if (c->ops && c->ops->connected) {
		c->ops->connected(c, c->ctx);
	}
	if (c->dead || c->freeing)
		return;
	if (c->rdma)
		rdma_kick(c);
	else if (c->qhead < c->qtail || tls_wout_pending(c) || c->closing)
		ev_io_start(c->loop, &c->wio);
}

/* The byte stream is up: RDMA still has its own setup over it. */
static void conn_established(struct net_conn *c)
{
	int r;

	if (!c->want_rdma) {
		net_conn_up(c);
		return;
	}
	c->handshaking = true;
	r = rdma_start(c);
	if (r) {
		log_error(TAG, "RDMA link with %s: %s", c->peer, strerror(-r));
		conn_fail(c, r);
	}
}

void net_conn_consume(struct net_conn *c, size_t n, bool count)
{
	queue_consume(c, n, count);
}

void net_conn_fail(struct net_conn *c, int reason)
{
	conn_fail(c, reason);
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

static void conn_connecting(struct net_conn *c)
{
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err) {
		log_error(TAG, "connect to %s: %s", c->peer, strerror(err));
		conn_fail(c, -err);
		return;
	}
	c->connecting = false;
	ev_io_start(c->loop, &c->rio);
	if (c->ssl) {
		tls_handshake(c);
		return;
	}
	ev_io_stop(c->loop, &c->wio);
	conn_established(c);
}

static void on_io(struct ev_loop *loop, ev_io *w, int revents)
{
	struct net_conn *c = w->data;

	(void)loop;
	c->busy++;
	if (c->connecting)
		conn_connecting(c);
	else if (c->handshaking && c->ssl)
		tls_handshake(c);
	else {
		if (revents & EV_READ)
			conn_read(c);
		if (!c->dead && (revents & EV_WRITE || c->qhead < c->qtail))
			conn_flush(c);
	}
	c->busy--;
	if (c->freeing && !c->busy)
		conn_free(c);
}

/* ---- connect ---------------------------------------------------------------- */

int net_connect(struct ev_loop *loop, const struct net_config *cfg, const char *host_port,
		const struct net_conn_ops *ops, void *ctx, struct net_conn **out)
{
	struct sockaddr_storage ss;
	SSL_CTX *ssl_ctx = NULL;
	struct net_conn *c;
	socklen_t sslen;
	char host[256];
	int fd, r;

	r = check_config(cfg);
	if (r)
		return r;
	r = resolve(host_port, &ss, &sslen);
	if (r)
		return r;
	if (cfg->transport == NET_TLS) {
		ssl_ctx = tls_ctx_new(cfg, false);
		if (!ssl_ctx)
			return -EINVAL;
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		r = -errno;
		goto err_ctx;
	}
	set_sockopts(fd, cfg);
	c = conn_new(loop, fd, ssl_ctx);
	if (!c) {
		r = -ENOMEM;
		goto err_fd;
	}
	snprintf(c->peer, sizeof(c->peer), "%s", host_port);
	if (c->ssl) {
		/* Verify the server's name or address against its certificate. */
		snprintf(host, sizeof(host), "%.*s", (int)(strrchr(host_port, ':') - host_port),
			 host_port);
		X509_VERIFY_PARAM *vp = SSL_get0_param(c->ssl);

		if (X509_VERIFY_PARAM_set1_ip_asc(vp, host) != 1 &&
		    (X509_VERIFY_PARAM_set1_host(vp, host, 0) != 1 ||
		     SSL_set_tlsext_host_name(c->ssl, host) != 1)) {
			r = -EINVAL;
			goto err_conn;
		}
		SSL_set_connect_state(c->ssl);
	}
	SSL_CTX_free(ssl_ctx); /* the SSL holds its own reference */
	ssl_ctx = NULL;
	if (cfg->transport == NET_RDMA) {
		c->want_rdma = true;
		if (cfg->rdma_provider && !(c->rdma_provider = strdup(cfg->rdma_provider))) {
			r = -ENOMEM;
			goto err_conn;
		}
	}
	c->ops = ops;
	c->ctx = ctx;
	c->connecting = true;
	if (connect(fd, (struct sockaddr *)&ss, sslen) < 0 && errno != EINPROGRESS) {
		r = -errno;
		log_error(TAG, "connect to %s: %s", host_port, strerror(-r));
		goto err_conn;
	}
	ev_io_start(loop, &c->wio); /* writable = connect finished */
	*out = c;
	return 0;

err_conn:
	conn_free(c);
	fd = -1;
err_fd:
	if (fd >= 0)
		close(fd);
err_ctx:
	SSL_CTX_free(ssl_ctx);
	return r;
}

/* ---- listen ----------------------------------------------------------------- */

static void on_accept(struct ev_loop *loop, ev_io *w, int revents)
{
	struct net_listener *l = w->data;
	struct sockaddr_storage ss;
	socklen_t sslen = sizeof(ss);
	char addr[INET6_ADDRSTRLEN] = "?";
	struct net_conn *c;
	int fd;

	(void)revents;
	fd = accept4(l->fd, (struct sockaddr *)&ss, &sslen, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0) {
		if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
			log_error(TAG, "accept: %s", strerror(errno));
		return;
	}
	set_sockopts(fd, &l->cfg);
	c = conn_new(loop, fd, l->ssl_ctx);
	if (!c) {
		log_error(TAG, "accept: out of memory");
		close(fd);
		return;
	}
	if (ss.ss_family == AF_INET)
		inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, addr, sizeof(addr));
	else if (ss.ss_family == AF_INET6)
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, addr, sizeof(addr));
	snprintf(c->peer, sizeof(c->peer), "%s:%u", addr,
		 ntohs(((struct sockaddr_in *)&ss)->sin_port));
	c->listener = l;
	ev_io_start(loop, &c->rio);
	if (l->cfg.transport == NET_RDMA) {
		c->want_rdma = true;
		if (l->rdma_provider && !(c->rdma_provider = strdup(l->rdma_provider))) {
			conn_free(c);
			return;
		}
	}
	if (!c->ssl && !c->want_rdma) {
		conn_established(c);
		return;
	}
	c->hs_next = l->hs_head;
	if (l->hs_head)
		l->hs_head->hs_prev = c;
	l->hs_head = c;
	if (c->ssl)
		SSL_set_accept_state(c->ssl);
	else
		conn_established(c); /* RDMA setup; the conn stays on the list until up */
}

int net_listen(struct ev_loop *loop, const struct net_config *cfg, const char *host_port,
	       net_accept_fn fn, void *ctx, struct net_listener **out)
{
	struct sockaddr_storage ss;
	struct net_listener *l;
	socklen_t sslen;
	int one = 1, r;

	r = check_config(cfg);
	if (r)
		return r;
	r = resolve(host_port, &ss, &sslen);
	if (r)
		return r;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->loop = loop;
	l->cfg = *cfg;
	if (cfg->transport == NET_RDMA && cfg->rdma_provider &&
	    !(l->rdma_provider = strdup(cfg->rdma_provider))) {
		free(l);
		return -ENOMEM;
	}
	l->fn = fn;
	l->ctx = ctx;
	if (cfg->transport == NET_TLS) {
		l->ssl_ctx = tls_ctx_new(cfg, true);
		if (!l->ssl_ctx) {
			r = -EINVAL;
			goto err_l;
		}
	}
	l->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (l->fd < 0) {
		r = -errno;
		goto err_ctx;
	}
	setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	set_sockopts(l->fd, cfg); /* inherited by accepted sockets, before the handshake */
	if (bind(l->fd, (struct sockaddr *)&ss, sslen) < 0 || listen(l->fd, 16) < 0) {
		r = -errno;
		log_error(TAG, "listen on %s: %s", host_port, strerror(-r));
		goto err_fd;
	}
	sslen = sizeof(ss);
	getsockname(l->fd, (struct sockaddr *)&ss, &sslen);
	l->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	ev_io_init(&l->io, on_accept, l->fd, EV_READ);
	l->io.data = l;
	ev_io_start(loop, &l->io);
	*out = l;
	return 0;

err_fd:
	close(l->fd);
err_ctx:
	SSL_CTX_free(l->ssl_ctx);
err_l:
	free(l->rdma_provider);
	free(l);
	return r;
}

int net_listener_port(const struct net_listener *l)
{
	return l->port;
}

void net_listener_close(struct net_listener *l)
{
	if (!l)
		return;
	ev_io_stop(l->loop, &l->io);
	while (l->hs_head)
		net_close(l->hs_head); /* unlinks itself */
	close(l->fd);
	SSL_CTX_free(l->ssl_ctx);
	free(l->rdma_provider);
	free(l);
}
