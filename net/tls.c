/* TLS 1.3 for the socket transport: contexts, the handshake, and writing
 * through OpenSSL with as few copies and syscalls as it allows. See net/net.h
 * for the contract; net/net.c drives these from its event loop. */
#include "net/conn.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#define TAG "net"
#define TLS_DIRECT_MIN (16 * 1024)   /* segments this large skip the staging copy */
#define TLS_WRITE_MAX (1024 * 1024)  /* most bytes per SSL_write */
#define TLS_READ_AHEAD_BYTES (256 * 1024)
#define WOUT_BYTES (256 * 1024)      /* TLS records gathered for one write() */
#define TLS_SUITES "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"

/* ---- TLS contexts ----------------------------------------------------------- */

void tls_log_errors(const char *what, const char *peer)
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
SSL_CTX *tls_ctx_new(const struct net_config *cfg, bool server)
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
	tls_log_errors("TLS setup with", cfg->cert ? cfg->cert : cfg->ca);
	return NULL;
}


/* ---- TLS output: records gathered into large writes ----------------------------
 * Through a socket BIO OpenSSL write()s every 16 KiB record on its own. This
 * write BIO gathers records in wout and hands them to the kernel in writes
 * of up to 256 KiB: one memcpy of cache-warm ciphertext against 15 of 16
 * syscalls and TCP pushes saved. Reads still go through a socket BIO. */

/* Writes wout out: 0 when empty, -EAGAIN, or a fatal -errno. */
int tls_wout_flush(struct net_conn *c)
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

bool tls_wout_pending(const struct net_conn *c)
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
		r = tls_wout_flush(c);
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

int tls_attach(struct net_conn *c)
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


/* Returns 0, -EAGAIN when the socket is full, or a fatal -errno. */
int tls_result(struct net_conn *c, int ret, const char *what)
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
	tls_log_errors(what, c->peer);
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
		return tls_result(c, n, "TLS write to");
	net_conn_consume(c, (size_t)n, true);
	return 0;
}

int tls_flush(struct net_conn *c)
{
	int n, r;

	r = tls_wout_flush(c);
	if (r && r != -EAGAIN)
		return r;
	for (;;) {
		if (c->toff == c->tlen) {
			c->toff = c->tlen = 0;
			if (c->dead)
				return 0;
			if (c->qhead == c->qtail)
				return tls_wout_flush(c);
			if (c->q[c->qhead].len >= TLS_DIRECT_MIN) {
				r = write_direct(c);
				if (r)
					return r;
				continue;
			}
			/* Gather small segments; sends complete as they are copied. */
			while (c->qhead < c->qtail && c->tlen < NET_TBUF_BYTES && !c->dead &&
			       c->q[c->qhead].len < TLS_DIRECT_MIN) {
				struct seg *s = &c->q[c->qhead];
				size_t take = NET_TBUF_BYTES - c->tlen;

				if (take > s->len)
					take = s->len;
				memcpy(c->tbuf + c->tlen, s->base, take);
				c->tlen += take;
				net_conn_consume(c, take, false);
			}
			if (c->dead)
				return 0;
			if (!c->tlen)
				return tls_wout_flush(c);
		}
		ERR_clear_error();
		n = SSL_write(c->ssl, c->tbuf + c->toff, (int)(c->tlen - c->toff));
		if (n <= 0)
			return tls_result(c, n, "TLS write to");
		c->toff += (size_t)n;
		c->queued -= (size_t)n;
	}
}

/* ---- handshake ------------------------------------------------------------------ */

void tls_handshake(struct net_conn *c)
{
	int r, w;

	ERR_clear_error();
	r = SSL_do_handshake(c->ssl);
	w = tls_wout_flush(c);
	if (w && w != -EAGAIN) {
		log_error(TAG, "TLS handshake with %s: %s", c->peer, strerror(-w));
		net_conn_fail(c, w);
		return;
	}
	if (r == 1) {
		c->handshaking = false;
		ev_io_stop(c->loop, &c->wio);
		log_debug(TAG, "TLS 1.3 with %s: %s", c->peer, SSL_get_cipher(c->ssl));
		net_conn_up(c);
		return;
	}
	r = tls_result(c, r, "TLS handshake with");
	if (r == -EAGAIN) {
		if (SSL_want_write(c->ssl) || tls_wout_pending(c))
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
	net_conn_fail(c, r == -EPIPE ? -ECONNRESET : -EPROTO);
}
