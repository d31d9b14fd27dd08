/* Socket transports (TCP, TLS 1.3) on a libev loop. See net/net.h. */
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
#define TBUF_BYTES (64 * 1024)
#define SOCKBUF_DEFAULT (4 * 1024 * 1024)
#define WRITEV_MAX 1024 /* IOV_MAX */
#define TLS_DIRECT_MIN (16 * 1024)   /* segments this large skip the staging copy */
#define TLS_WRITE_MAX (1024 * 1024)  /* most bytes per SSL_write */
#define TLS_READ_AHEAD_BYTES (256 * 1024)
#define WOUT_BYTES (256 * 1024)      /* TLS records gathered for one write() */
#define TLS_SUITES "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"

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

/* ---- TLS contexts ----------------------------------------------------------- */

static void log_ssl_errors(const char *what, const char *peer)
{
	unsigned long e;
	char buf[256];
	bool any = false;

	while ((e = ERR_get_error())) {
		ERR_error_string_n(e, buf, sizeof(buf));
		log_error(TAG, "%s %s: %s", what, peer, buf);
		any = true;
	}
	if (!any)
		log_error(TAG, "%s %s failed", what, peer);
}

/* TLS 1.3 only; both sides present a certificate and verify the peer's
 * against cfg->ca (the server requires one from the client). */
static SSL_CTX *tls_ctx_new(const struct net_config *cfg, bool server)
{
	SSL_CTX *ctx;

	/* A client without a certificate is allowed here so that the server's
	 * refusal can be tested; the server always requires one. */
	if (!cfg->ca || (server && (!cfg->cert || !cfg->key)) || (!cfg->cert != !cfg->key)) {
		log_error(TAG, "TLS needs --tls-cert, --tls-key and --tls-ca (or --insecure)");
		return NULL;
	}
	ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
	if (!ctx)
		goto err;
	if (!SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) ||
	    !SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION))
		goto err_ctx;
	if (cfg->cert && (SSL_CTX_use_certificate_chain_file(ctx, cfg->cert) != 1 ||
			  SSL_CTX_use_PrivateKey_file(ctx, cfg->key, SSL_FILETYPE_PEM) != 1 ||
			  SSL_CTX_check_private_key(ctx) != 1))
		goto err_ctx;
	if (SSL_CTX_load_verify_locations(ctx, cfg->ca, NULL) != 1)
		goto err_ctx;
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | (server ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0),
			   NULL);
	SSL_CTX_set_num_tickets(ctx, 0);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	/* AES-128-GCM is the fastest suite with AES-NI; the server decides. */
	if (SSL_CTX_set_ciphersuites(ctx, TLS_SUITES) != 1)
		goto err_ctx;
	if (server)
		SSL_CTX_set_options(ctx, SSL_OP_CIPHER_SERVER_PREFERENCE);
	/* Read whole records and what follows in one read() where possible. */
	SSL_CTX_set_read_ahead(ctx, 1);
	SSL_CTX_set_default_read_buffer_len(ctx, TLS_READ_AHEAD_BYTES);
	return ctx;

err_ctx:
	SSL_CTX_free(ctx);
err:
	log_ssl_errors("TLS setup with", cfg->cert ? cfg->cert : cfg->ca);
	return NULL;
}

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

/* ---- TLS output: records gathered into large writes ----------------------------
 * Through a socket BIO OpenSSL write()s every 16 KiB record on its own. This
 * write BIO gathers records in wout and hands them to the kernel in writes
 * of up to 256 KiB: one memcpy of cache-warm ciphertext against 15 of 16
 * syscalls and TCP pushes saved. Reads still go through a socket BIO. */

/* Writes wout out: 0 when empty, -EAGAIN, or a fatal -errno. */
static int wout_flush(struct net_conn *c)
{
	ssize_t n;

	while (c->woff < c->wlen) {
		n = write(c->fd, c->wout + c->woff, c->wlen - c->woff);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN ? -EAGAIN : -errno;
		}
		c->woff += (size_t)n;
	}
	c->woff = c->wlen = 0;
	return 0;
}

static bool wout_pending(const struct net_conn *c)
{
	return c->wlen > c->woff;
}

static int wbio_write(BIO *b, const char *data, int len)
{
	struct net_conn *c = BIO_get_data(b);
	size_t take;
	int r;

	BIO_clear_retry_flags(b);
	if (len <= 0)
		return 0;
	if (WOUT_BYTES - c->wlen < (size_t)len) {
		r = wout_flush(c);
		if (r && r != -EAGAIN) {
			errno = -r;
			return -1;
		}
		if (c->woff) {
			memmove(c->wout, c->wout + c->woff, c->wlen - c->woff);
			c->wlen -= c->woff;
			c->woff = 0;
		}
	}
	take = WOUT_BYTES - c->wlen;
	if (!take) {
		BIO_set_retry_write(b); /* SSL_write gives WANT_WRITE */
		return -1;
	}
	if (take > (size_t)len)
		take = (size_t)len;
	memcpy(c->wout + c->wlen, data, take);
	c->wlen += take;
	return (int)take;
}

static long wbio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	struct net_conn *c = BIO_get_data(b);

	(void)num;
	(void)ptr;
	switch (cmd) {
	case BIO_CTRL_FLUSH:
		return 1; /* written after every SSL call, by the caller */
	case BIO_CTRL_WPENDING:
		return (long)(c->wlen - c->woff);
	default:
		return 0;
	}
}

static int tls_attach(struct net_conn *c)
{
	BIO *rb, *wb;

	c->wout = malloc(WOUT_BYTES);
	c->wmeth = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "understudy-wout");
	if (!c->wout || !c->wmeth || !BIO_meth_set_write(c->wmeth, wbio_write) ||
	    !BIO_meth_set_ctrl(c->wmeth, wbio_ctrl))
		return -ENOMEM;
	rb = BIO_new_socket(c->fd, BIO_NOCLOSE);
	wb = BIO_new(c->wmeth);
	if (!rb || !wb) {
		BIO_free(rb);
		BIO_free(wb);
		return -ENOMEM;
	}
	BIO_set_data(wb, c);
	BIO_set_init(wb, 1);
	SSL_set_bio(c->ssl, rb, wb); /* the SSL owns both */
	return 0;
}

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
		c->tbuf = malloc(TBUF_BYTES);
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
		(void)wout_flush(c);
	}
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

/* Returns 0, -EAGAIN when the socket is full, or a fatal -errno. */
static int ssl_result(struct net_conn *c, int ret, const char *what)
{
	int e = SSL_get_error(c->ssl, ret);

	switch (e) {
	case SSL_ERROR_WANT_READ:
	case SSL_ERROR_WANT_WRITE:
		return -EAGAIN;
	case SSL_ERROR_ZERO_RETURN:
		return -EPIPE;
	case SSL_ERROR_SYSCALL:
		if (ERR_peek_error())
			break;
		return errno ? -errno : -ECONNRESET;
	default:
		if (ERR_GET_REASON(ERR_peek_error()) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
			log_error(TAG, "%s %s: connection closed without TLS close_notify", what,
				  c->peer);
			ERR_clear_error();
			return -ECONNRESET;
		}
		break;
	}
	log_ssl_errors(what, c->peer);
	return -EPROTO;
}

/* SSL_write straight from the head segment. A retry after WANT_WRITE
 * passes the same bytes again: the segment only changes when consumed. */
static int write_direct(struct net_conn *c)
{
	struct seg *s = &c->q[c->qhead];
	size_t len = s->len < TLS_WRITE_MAX ? s->len : TLS_WRITE_MAX;
	int n;

	ERR_clear_error();
	n = SSL_write(c->ssl, s->base, (int)len);
	if (n <= 0)
		return ssl_result(c, n, "TLS write to");
	queue_consume(c, (size_t)n, true);
	return 0;
}

static int flush_tls(struct net_conn *c)
{
	int n, r;

	r = wout_flush(c);
	if (r && r != -EAGAIN)
		return r;
	for (;;) {
		if (c->toff == c->tlen) {
			c->toff = c->tlen = 0;
			if (c->dead)
				return 0;
			if (c->qhead == c->qtail)
				return wout_flush(c);
			if (c->q[c->qhead].len >= TLS_DIRECT_MIN) {
				r = write_direct(c);
				if (r)
					return r;
				continue;
			}
			/* Gather small segments; sends complete as they are copied. */
			while (c->qhead < c->qtail && c->tlen < TBUF_BYTES && !c->dead &&
			       c->q[c->qhead].len < TLS_DIRECT_MIN) {
				struct seg *s = &c->q[c->qhead];
				size_t take = TBUF_BYTES - c->tlen;

				if (take > s->len)
					take = s->len;
				memcpy(c->tbuf + c->tlen, s->base, take);
				c->tlen += take;
				queue_consume(c, take, false);
			}
			if (c->dead)
				return 0;
			if (!c->tlen)
				return wout_flush(c);
		}
		ERR_clear_error();
		n = SSL_write(c->ssl, c->tbuf + c->toff, (int)(c->tlen - c->toff));
		if (n <= 0)
			return ssl_result(c, n, "TLS write to");
		c->toff += (size_t)n;
		c->queued -= (size_t)n;
	}
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
	r = c->ssl ? flush_tls(c) : flush_tcp(c);

	if (c->dead)
		return;
	if (r == -EAGAIN) {
		ev_io_start(c->loop, &c->wio);
	} else if (r) {
		log_error(TAG, "send to %s: %s", c->peer, strerror(-r));
		conn_fail(c, r);
	} else if (!c->queued && !wout_pending(c)) {
		ev_io_stop(c->loop, &c->wio);
		if (c->closing)
			net_conn_finish_close(c);
	}
}

void net_conn_finish_close(struct net_conn *c)
{
	if (c->ssl) {
		SSL_shutdown(c->ssl);
		(void)wout_flush(c);
	}
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
				r = ssl_result(c, (int)n, "TLS read from");
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
	if (c->ssl && !c->dead && wout_pending(c))
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
	else if (c->qhead < c->qtail || wout_pending(c) || c->closing)
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

void net_conn_consume(struct net_conn *c, size_t n)
{
	queue_consume(c, n, true);
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

static void conn_handshake(struct net_conn *c)
{
	int r, w;

	ERR_clear_error();
	r = SSL_do_handshake(c->ssl);
	w = wout_flush(c);
	if (w && w != -EAGAIN) {
		log_error(TAG, "TLS handshake with %s: %s", c->peer, strerror(-w));
		conn_fail(c, w);
		return;
	}
	if (r == 1) {
		c->handshaking = false;
		ev_io_stop(c->loop, &c->wio);
		log_debug(TAG, "TLS 1.3 with %s: %s", c->peer, SSL_get_cipher(c->ssl));
		net_conn_up(c);
		return;
	}
	r = ssl_result(c, r, "TLS handshake with");
	if (r == -EAGAIN) {
		if (SSL_want_write(c->ssl) || wout_pending(c))
			ev_io_start(c->loop, &c->wio);
		else
			ev_io_stop(c->loop, &c->wio);
		return;
	}
	if (SSL_get_verify_result(c->ssl) != X509_V_OK)
		log_error(TAG, "TLS peer %s: certificate rejected: %s", c->peer,
			  X509_verify_cert_error_string(SSL_get_verify_result(c->ssl)));
	/* Abortive close (RST): the peer must see a refusal, not a clean end,
	 * even when read-ahead has drained what it sent. */
	setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &(struct linger){ 1, 0 }, sizeof(struct linger));
	conn_fail(c, r == -EPIPE ? -ECONNRESET : -EPROTO);
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
		conn_handshake(c);
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
		conn_handshake(c);
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
