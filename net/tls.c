/* TLS 1.3 (NET_TLS) over the connection's TCP socket: the handshake
 * (its contexts: net/tls_ctx.c), and reading and writing through OpenSSL with as few copies and
 * syscalls as it allows; once the handshake is done, the records are
 * net's own (net/tls_record.c, this file's helper). With it, the only code
 * in net/ that calls OpenSSL. See
 * net/net.h for the public contract and net/conn.h for the transport one. */
#include "net/conn.h"
#include "net/tls_ctx.h"
#include "net/tls_record.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#define TAG "net"
#define TBUF_BYTES (64 * 1024)       /* staging for small segments */
#define TLS_DIRECT_MIN (16 * 1024)   /* segments this large skip the staging copy */
#define TLS_WRITE_MAX (1024 * 1024)  /* most bytes per SSL_write */
#define WOUT_BYTES (256 * 1024)      /* TLS records gathered for one write() */
#define READS_PER_EVENT 64
#define IBUF_BYTES (512 * 1024)      /* records read ahead by net's own record layer */
#define REC_READS_PER_EVENT 16
#define SECRET_MAX 48
#define REC_ROOM (TLS_REC_SEALED_MAX + 64) /* a record, and a key update before it */

struct tls_conn {
	struct net_conn *c;
	int fd;
	bool server;
	SSL *ssl;
	BIO_METHOD *wmeth;
	uint8_t *tbuf;                /* staging: [toff, tlen) not yet taken */
	size_t toff, tlen;
	uint8_t *wout;                /* records: [woff, wlen) not yet written */
	size_t woff, wlen;
	/* net's own record layer (net/tls_record.c), once the handshake is
	 * done, unless cfg->tls_openssl_records: NULL while OpenSSL's runs. */
	bool own_records;             /* wanted: the handshake runs without read-ahead */
	struct tls_rec *rec;
	uint8_t *ibuf;                /* records read: [ioff, ilen) not yet opened */
	size_t ioff, ilen;
	uint8_t *scratch;             /* a record opened where the consumer has no room */
	uint8_t csec[SECRET_MAX], ssec[SECRET_MAX]; /* traffic secrets, until keys are made */
	size_t csec_len, ssec_len;
	bool ku_owed;                 /* the peer asked for a key update */
	char desc[96];                /* the suite and whose record layer */
};

/* ---- TLS contexts (net/tls_ctx.c) -------------------------------------------- */

/* The secret at the end of a key log line (" <hex>"): its length in out,
 * or 0 if it is not hex of at most max bytes. */
static size_t secret_from_hex(const char *hex, uint8_t *out, size_t max)
{
	size_t n;

	if (!hex || *hex++ != ' ')
		return 0;
	n = strlen(hex);
	if (!n || n % 2 || n / 2 > max)
		return 0;
	for (size_t i = 0; i < n / 2; i++) {
		unsigned v;

		if (sscanf(hex + 2 * i, "%2x", &v) != 1)
			return 0;
		out[i] = (uint8_t)v;
	}
	return n / 2;
}

/* The application traffic secrets, which OpenSSL hands out through its
 * key log callback only: they stay in this connection's memory until its
 * keys are derived, then are wiped. Nothing is written anywhere. */
static void keylog(const SSL *ssl, const char *line)
{
	struct tls_conn *t = SSL_get_app_data(ssl);

	if (t && !strncmp(line, "CLIENT_TRAFFIC_SECRET_0 ", 24))
		t->csec_len = secret_from_hex(strrchr(line, ' '), t->csec, SECRET_MAX);
	else if (t && !strncmp(line, "SERVER_TRAFFIC_SECRET_0 ", 24))
		t->ssec_len = secret_from_hex(strrchr(line, ' '), t->ssec, SECRET_MAX);
}

/* ---- TLS output: records gathered into large writes ----------------------------
 * Through a socket BIO OpenSSL write()s every 16 KiB record on its own. This
 * write BIO gathers records in wout and hands them to the kernel in writes
 * of up to 256 KiB: one memcpy of cache-warm ciphertext against 15 of 16
 * syscalls and TCP pushes saved. Reads still go through a socket BIO. */

/* Writes wout out: 0 when empty, -EAGAIN, or a fatal -errno. */
static int wout_flush(struct tls_conn *t)
{
	ssize_t n;

	while (t->woff < t->wlen) {
		n = write(t->fd, t->wout + t->woff, t->wlen - t->woff);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN ? -EAGAIN : -errno;
		}
		t->woff += (size_t)n;
	}
	t->woff = t->wlen = 0;
	return 0;
}

static bool tls_pending(const void *priv)
{
	const struct tls_conn *t = priv;

	return t->wlen > t->woff;
}

static int wbio_write(BIO *b, const char *data, int len)
{
	struct tls_conn *t = BIO_get_data(b);
	size_t take;
	int r;

	BIO_clear_retry_flags(b);
	if (len <= 0)
		return 0;
	if (WOUT_BYTES - t->wlen < (size_t)len) {
		r = wout_flush(t);
		if (r && r != -EAGAIN) {
			errno = -r;
			return -1;
		}
		if (t->woff) {
			memmove(t->wout, t->wout + t->woff, t->wlen - t->woff);
			t->wlen -= t->woff;
			t->woff = 0;
		}
	}
	take = WOUT_BYTES - t->wlen;
	if (!take) {
		BIO_set_retry_write(b); /* SSL_write gives WANT_WRITE */
		return -1;
	}
	if (take > (size_t)len)
		take = (size_t)len;
	memcpy(t->wout + t->wlen, data, take);
	t->wlen += take;
	return (int)take;
}

static long wbio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	struct tls_conn *t = BIO_get_data(b);

	(void)num;
	(void)ptr;
	switch (cmd) {
	case BIO_CTRL_FLUSH:
		return 1; /* written after every SSL call, by the caller */
	case BIO_CTRL_WPENDING:
		return (long)(t->wlen - t->woff);
	default:
		return 0;
	}
}

/* Reads through a socket BIO, writes through wout. */
static int set_bios(struct tls_conn *t)
{
	BIO *rb, *wb;

	t->wout = malloc(WOUT_BYTES);
	t->wmeth = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "understudy-wout");
	if (!t->wout || !t->wmeth || !BIO_meth_set_write(t->wmeth, wbio_write) ||
	    !BIO_meth_set_ctrl(t->wmeth, wbio_ctrl))
		return -ENOMEM;
	rb = BIO_new_socket(t->fd, BIO_NOCLOSE);
	wb = BIO_new(t->wmeth);
	if (!rb || !wb) {
		BIO_free(rb);
		BIO_free(wb);
		return -ENOMEM;
	}
	BIO_set_data(wb, t);
	BIO_set_init(wb, 1);
	SSL_set_bio(t->ssl, rb, wb); /* the SSL owns both */
	return 0;
}

/* ---- connections ---------------------------------------------------------------- */

static int tls_endpoint_new(const struct net_config *cfg, bool server, void **ep)
{
	*ep = tls_ctx_new(cfg, server, keylog);
	return *ep ? 0 : -EINVAL;
}

static void tls_endpoint_free(void *ep)
{
	SSL_CTX_free(ep); /* each SSL holds its own reference */
}

static void tls_detach(void *priv)
{
	struct tls_conn *t = priv;

	if (!t)
		return;
	SSL_free(t->ssl);
	BIO_meth_free(t->wmeth);
	tls_rec_free(t->rec);
	free(t->ibuf);
	free(t->scratch);
	free(t->wout);
	free(t->tbuf);
	OPENSSL_cleanse(t, sizeof(*t));
	free(t);
}

/* A client verifies the server's name or address against its certificate;
 * a peer name given in the config (already in the SSL's parameters) takes
 * the place of the address. */
static int set_server_name(SSL *ssl, const char *host)
{
	X509_VERIFY_PARAM *vp = SSL_get0_param(ssl);
	const char *peer_name = X509_VERIFY_PARAM_get0_host(vp, 0);

	if (peer_name) {
		if (SSL_set_tlsext_host_name(ssl, peer_name) != 1)
			return -EINVAL;
	} else if (X509_VERIFY_PARAM_set1_ip_asc(vp, host) != 1 &&
	    (X509_VERIFY_PARAM_set1_host(vp, host, 0) != 1 ||
	     SSL_set_tlsext_host_name(ssl, host) != 1))
		return -EINVAL;
	SSL_set_connect_state(ssl);
	return 0;
}

static int tls_attach(struct net_conn *c, int fd, void *ep, const char *host, void **priv)
{
	struct tls_conn *t = calloc(1, sizeof(*t));
	int r = -ENOMEM;

	if (!t)
		return -ENOMEM;
	t->c = c;
	t->fd = fd;
	t->server = !host;
	t->tbuf = malloc(TBUF_BYTES);
	t->ssl = SSL_new(ep);
	if (!t->tbuf || !t->ssl || set_bios(t))
		goto err_t;
	SSL_set_app_data(t->ssl, t);
	t->own_records = SSL_CTX_get_keylog_callback(ep) != NULL;
	if (!host) {
		SSL_set_accept_state(t->ssl);
	} else {
		r = set_server_name(t->ssl, host);
		if (r)
			goto err_t;
	}
	*priv = t;
	return 0;

err_t:
	tls_detach(t);
	return r;
}

/* Returns 0, -EAGAIN when the socket is full, or a fatal -errno. */
static int result(struct tls_conn *t, int ret, const char *what)
{
	int e = SSL_get_error(t->ssl, ret);

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
				  net_peer_name(t->c));
			ERR_clear_error();
			return -ECONNRESET;
		}
		break;
	}
	tls_log_errors(what, net_peer_name(t->c));
	return -EPROTO;
}

/* ---- data ----------------------------------------------------------------------- */

static void rec_read(struct tls_conn *t);
static int rec_flush(struct tls_conn *t);

static void tls_read(void *priv)
{
	struct tls_conn *t = priv;
	struct net_conn *c = t->c;
	uint8_t *buf;
	size_t cap;
	int n, r;

	if (t->rec) {
		rec_read(t);
		return;
	}
	for (int i = 0; i < READS_PER_EVENT && !net_conn_dead(c); i++) {
		buf = net_conn_rbuf(c, &cap);
		ERR_clear_error();
		n = SSL_read(t->ssl, buf, (int)cap);
		if (n <= 0) {
			r = result(t, n, "TLS read from");
			if (r == -EAGAIN)
				return;
			net_conn_fail(c, r == -EPIPE ? 0 : r);
			return;
		}
		net_conn_deliver(c, buf, (size_t)n);
	}
	/* Records already decrypted inside OpenSSL raise no event. */
	if (!net_conn_dead(c) && SSL_has_pending(t->ssl))
		net_conn_feed_read(c);
	/* Reading can produce records to send (alerts, key updates). */
	if (!net_conn_dead(c) && tls_pending(t))
		net_conn_watch_write(c, true);
}

/* SSL_write straight from the head segment. A retry after WANT_WRITE
 * passes the same bytes again: the segment only changes when consumed. */
static int write_direct(struct tls_conn *t, const uint8_t *base, size_t len)
{
	int n;

	if (len > TLS_WRITE_MAX)
		len = TLS_WRITE_MAX;
	ERR_clear_error();
	n = SSL_write(t->ssl, base, (int)len);
	if (n <= 0)
		return result(t, n, "TLS write to");
	net_queue_consume(t->c, (size_t)n, true);
	return 0;
}

/* Gathers small segments into tbuf; their sends complete as they are copied. */
static void stage(struct tls_conn *t)
{
	const uint8_t *base;
	size_t len, take;

	while (t->tlen < TBUF_BYTES && !net_conn_dead(t->c) &&
	       net_queue_head(t->c, &base, &len) && len < TLS_DIRECT_MIN) {
		take = TBUF_BYTES - t->tlen;
		if (take > len)
			take = len;
		memcpy(t->tbuf + t->tlen, base, take);
		t->tlen += take;
		net_queue_consume(t->c, take, false);
	}
}

static int tls_flush(void *priv)
{
	struct tls_conn *t = priv;
	const uint8_t *base;
	size_t len;
	int n, r;

	if (t->rec)
		return rec_flush(t);
	r = wout_flush(t);
	if (r && r != -EAGAIN)
		return r;
	for (;;) {
		if (t->toff == t->tlen) {
			t->toff = t->tlen = 0;
			if (net_conn_dead(t->c))
				return 0;
			if (!net_queue_head(t->c, &base, &len))
				return wout_flush(t);
			if (len >= TLS_DIRECT_MIN) {
				r = write_direct(t, base, len);
				if (r)
					return r;
				continue;
			}
			stage(t);
			if (net_conn_dead(t->c))
				return 0;
			if (!t->tlen)
				return wout_flush(t);
		}
		ERR_clear_error();
		n = SSL_write(t->ssl, t->tbuf + t->toff, (int)(t->tlen - t->toff));
		if (n <= 0)
			return result(t, n, "TLS write to");
		t->toff += (size_t)n;
		net_queue_taken(t->c, (size_t)n);
	}
}

/* ---- net's own record layer ------------------------------------------------------
 * Once the handshake is done the records are sealed and opened here
 * (net/tls_record.c), not by OpenSSL: sealed straight from the send queue's
 * buffers into wout (no staging copy, one pass over the bytes), wout written
 * in writes of up to 256 KiB; read in chunks of up to 512 KiB into ibuf and
 * opened straight into the consumer's buffer when it has room for the
 * record (else into scratch, and handed up from there). */

/* A KeyUpdate (update_not_requested) sealed with the old key, then the
 * write key moves on (RFC 8446 4.6.3). wout has room. 0 or -errno. */
static int send_key_update(struct tls_conn *t)
{
	uint8_t msg[5] = { TLS_REC_KEY_UPDATE, 0, 0, 1, 0 };
	long n = tls_rec_seal(t->rec, TLS_REC_HANDSHAKE, &(struct iovec){ msg, sizeof(msg) }, 1,
			      t->wout + t->wlen);
	int r;

	if (n < 0 || (r = tls_rec_update(t->rec, true))) {
		r = n < 0 ? (int)n : r;
		log_error(TAG, "TLS key update to %s: %s", net_peer_name(t->c), strerror(-r));
		return r;
	}
	t->wlen += (size_t)n;
	t->ku_owed = false;
	return 0;
}

/* Seals the queue into records in wout and writes wout out: 0 when all is
 * written, -EAGAIN, or a fatal -errno. A send completes once its last byte
 * is sealed. */
static int rec_flush(struct tls_conn *t)
{
	struct iovec iov[64], rio[64];
	size_t total;
	long n;
	int cnt, k, r;

	for (;;) {
		if (WOUT_BYTES - t->wlen < REC_ROOM && (r = wout_flush(t)))
			return r;
		if (net_conn_dead(t->c))
			return 0;
		if (t->ku_owed && (r = send_key_update(t)))
			return r;
		cnt = net_queue_iov(t->c, iov, 64);
		if (!cnt)
			return wout_flush(t);
		for (total = 0, k = 0; k < cnt && total < TLS_REC_PLAIN_MAX; k++) {
			size_t take = iov[k].iov_len;

			if (take > TLS_REC_PLAIN_MAX - total)
				take = TLS_REC_PLAIN_MAX - total;
			rio[k] = (struct iovec){ iov[k].iov_base, take };
			total += take;
		}
		if (total && tls_rec_update_due(t->rec) && (r = send_key_update(t)))
			return r;
		if (total) {
			n = tls_rec_seal(t->rec, TLS_REC_DATA, rio, k, t->wout + t->wlen);
			if (n < 0) {
				log_error(TAG, "TLS record to %s: %s", net_peer_name(t->c),
					  strerror((int)-n));
				return (int)n;
			}
			t->wlen += (size_t)n;
		}
		net_queue_consume(t->c, total, true); /* total 0: empty segments */
	}
}

/* What the peer's record says beyond data: 0 for a key update (the read
 * key moves on; one is owed back if asked for), 1 for close_notify (a clean
 * end), else -EPROTO, logged. */
static int rec_control(struct tls_conn *t, uint8_t type, const uint8_t *p, size_t len)
{
	if (type == TLS_REC_HANDSHAKE && len == 5 && p[0] == TLS_REC_KEY_UPDATE && !p[1] &&
	    !p[2] && p[3] == 1 && p[4] <= 1) {
		if (tls_rec_update(t->rec, false)) {
			log_error(TAG, "TLS key update from %s failed", net_peer_name(t->c));
			return -EPROTO;
		}
		t->ku_owed |= p[4] == 1;
		return 0;
	}
	if (type == TLS_REC_ALERT && len == 2 && p[1] == 0)
		return 1;
	if (type == TLS_REC_ALERT && len == 2)
		log_error(TAG, "TLS alert from %s: %s", net_peer_name(t->c),
			  SSL_alert_desc_string_long(p[1]));
	else if (type == TLS_REC_HANDSHAKE)
		log_error(TAG, "TLS from %s: post-handshake message %u not supported",
			  net_peer_name(t->c), len ? p[0] : 0);
	else
		log_error(TAG, "TLS from %s: unexpected record (type %u, %zu bytes)",
			  net_peer_name(t->c), type, len);
	return -EPROTO;
}

/* Opens the complete records in ibuf and hands their content up: 0, 1 at
 * close_notify, or -EPROTO (logged). */
static int rec_open_all(struct tls_conn *t)
{
	struct net_conn *c = t->c;
	uint8_t *dst, type;
	size_t cap, len;
	long rlen;
	int r;

	while (!net_conn_dead(c)) {
		rlen = tls_rec_length(t->ibuf + t->ioff, t->ilen - t->ioff);
		if (rlen < 0) {
			log_error(TAG, "TLS from %s: malformed record header", net_peer_name(c));
			return -EPROTO;
		}
		if (!rlen || (size_t)rlen > t->ilen - t->ioff)
			break;
		dst = net_conn_rbuf(c, &cap);
		if (cap < (size_t)rlen - TLS_REC_HDR - TLS_REC_TAG)
			dst = t->scratch;
		r = tls_rec_open(t->rec, t->ibuf + t->ioff, (size_t)rlen, dst, &type, &len);
		if (r) {
			log_error(TAG, "TLS from %s: %s", net_peer_name(c), r == -EBADMSG ?
				  "record failed authentication (bad record MAC)" : strerror(-r));
			return -EPROTO;
		}
		t->ioff += (size_t)rlen;
		if (type != TLS_REC_DATA) {
			if ((r = rec_control(t, type, dst, len)))
				return r;
			continue;
		}
		if (len)
			net_conn_deliver(c, dst, len);
	}
	if (t->ioff == t->ilen)
		t->ioff = t->ilen = 0;
	return 0;
}

static void rec_read(struct tls_conn *t)
{
	struct net_conn *c = t->c;
	size_t space;
	ssize_t n;
	int r;

	for (int i = 0; i < REC_READS_PER_EVENT && !net_conn_dead(c); i++) {
		if (IBUF_BYTES - t->ilen < TLS_REC_HDR + TLS_REC_CIPHER_MAX) {
			memmove(t->ibuf, t->ibuf + t->ioff, t->ilen - t->ioff);
			t->ilen -= t->ioff;
			t->ioff = 0;
		}
		space = IBUF_BYTES - t->ilen;
		n = read(t->fd, t->ibuf + t->ilen, space);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				net_conn_fail(c, -errno);
			return;
		}
		if (n == 0) {
			log_error(TAG, "TLS read from %s: connection closed without TLS "
				  "close_notify", net_peer_name(c));
			net_conn_fail(c, -ECONNRESET);
			return;
		}
		t->ilen += (size_t)n;
		r = rec_open_all(t);
		if (r) {
			net_conn_fail(c, r > 0 ? 0 : r);
			return;
		}
		if (t->ku_owed)
			net_conn_watch_write(c, true);
		if ((size_t)n < space)
			return;
	}
}

/* After the handshake: net's record layer takes over when it can, else
 * OpenSSL's goes on (read-ahead back on). Either way the secrets go. */
static void records_start(struct tls_conn *t)
{
	const SSL_CIPHER *ciph = SSL_get_current_cipher(t->ssl);
	unsigned id = ciph ? SSL_CIPHER_get_protocol_id(ciph) : 0;
	int r = -ENOTSUP;

	if (t->own_records && t->csec_len && t->csec_len == t->ssec_len &&
	    !SSL_has_pending(t->ssl)) {
		t->ibuf = malloc(IBUF_BYTES);
		t->scratch = malloc(TLS_REC_CIPHER_MAX);
		r = t->ibuf && t->scratch ? 0 : -ENOMEM;
		if (!r)
			r = tls_rec_new(id, t->server ? t->ssec : t->csec,
					t->server ? t->csec : t->ssec, t->csec_len, &t->rec);
		if (!r)
			tls_rec_set_update_after(t->rec, (uintptr_t)SSL_CTX_get_app_data(
							 SSL_get_SSL_CTX(t->ssl)));
	}
	if (t->own_records && r)
		log_warn(TAG, "TLS with %s: records left to OpenSSL: %s", net_peer_name(t->c),
			 strerror(-r));
	OPENSSL_cleanse(t->csec, sizeof(t->csec));
	OPENSSL_cleanse(t->ssec, sizeof(t->ssec));
	t->csec_len = t->ssec_len = 0;
	if (!t->rec)
		SSL_set_read_ahead(t->ssl, 1);
	snprintf(t->desc, sizeof(t->desc), "TLS 1.3 %s, records by %s",
		 ciph ? SSL_CIPHER_standard_name(ciph) : "?", t->rec ? "net" : "OpenSSL");
}

static const char *tls_describe(const void *priv)
{
	const struct tls_conn *t = priv;

	return t->desc[0] ? t->desc : "TLS 1.3 (handshake)";
}

/* close_notify, written at once if the socket takes it. */
static void tls_shutdown(void *priv)
{
	struct tls_conn *t = priv;
	long n;

	if (!t->rec) {
		SSL_shutdown(t->ssl);
	} else if (WOUT_BYTES - t->wlen >= TLS_REC_SEALED_MAX) {
		n = tls_rec_seal(t->rec, TLS_REC_ALERT,
				 &(struct iovec){ (uint8_t[]){ 1, 0 }, 2 }, 1, t->wout + t->wlen);
		if (n > 0)
			t->wlen += (size_t)n;
	}
	(void)wout_flush(t);
}

/* ---- handshake ------------------------------------------------------------------ */

/* Says why this side refused the peer's certificate, if it did. */
static void log_rejection(struct tls_conn *t)
{
	long v = SSL_get_verify_result(t->ssl);
	const char *name = X509_VERIFY_PARAM_get0_host(SSL_get0_param(t->ssl), 0);

	if (v == X509_V_OK)
		return;
	if (v == X509_V_ERR_INVALID_PURPOSE)
		log_error(TAG, "TLS peer %s: certificate rejected: not a %s certificate (its "
			  "extended key usage must include %s)", net_peer_name(t->c),
			  t->server ? "client" : "server", t->server ? "clientAuth" : "serverAuth");
	else if (v == X509_V_ERR_HOSTNAME_MISMATCH && name)
		log_error(TAG, "TLS peer %s: certificate rejected: it does not name %s",
			  net_peer_name(t->c), name);
	else
		log_error(TAG, "TLS peer %s: certificate rejected: %s", net_peer_name(t->c),
			  X509_verify_cert_error_string(v));
}

static void tls_handshake(void *priv)
{
	struct tls_conn *t = priv;
	struct net_conn *c = t->c;
	int r, w;

	ERR_clear_error();
	r = SSL_do_handshake(t->ssl);
	w = wout_flush(t);
	if (w && w != -EAGAIN) {
		log_error(TAG, "TLS handshake with %s: %s", net_peer_name(c), strerror(-w));
		net_conn_fail(c, w);
		return;
	}
	if (r == 1) {
		net_conn_watch_write(c, false);
		records_start(t);
		log_debug(TAG, "%s with %s", t->desc, net_peer_name(c));
		net_conn_up(c);
		return;
	}
	r = result(t, r, "TLS handshake with");
	if (r == -EAGAIN) {
		net_conn_watch_write(c, SSL_want_write(t->ssl) || tls_pending(t));
		return;
	}
	log_rejection(t);
	/* Abortive close (RST): the peer must see a refusal, not a clean end,
	 * even when read-ahead has drained what it sent. */
	setsockopt(t->fd, SOL_SOCKET, SO_LINGER, &(struct linger){ 1, 0 }, sizeof(struct linger));
	net_conn_fail(c, r == -EPIPE ? -ECONNRESET : -EPROTO);
}

/* The client speaks first; the server waits for its hello. */
static int tls_start(void *priv)
{
	struct tls_conn *t = priv;

	if (!t->server)
		tls_handshake(t);
	return 0;
}

const struct net_transport_ops net_tls_ops = {
	.name = "tls",
	.endpoint_new = tls_endpoint_new,
	.endpoint_free = tls_endpoint_free,
	.attach = tls_attach,
	.detach = tls_detach,
	.start = tls_start,
	.handshake = tls_handshake,
	.read = tls_read,
	.flush = tls_flush,
	.pending = tls_pending,
	.shutdown = tls_shutdown,
	.describe = tls_describe,
};
