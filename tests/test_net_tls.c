/* net/'s own TLS 1.3 record layer (net/tls_record.c): the suite negotiated
 * with peers that offer only one, records that interoperate with OpenSSL's
 * record layer in both directions, partial writes through small socket
 * buffers with records spanning many segments, and records that are
 * tampered with, replayed or malformed. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ev.h>
#include <openssl/ssl.h>

#include "net_harness.h"
#include "net/tls_record.h"

/* Connects, checks what each side says protects the link, then a working
 * exchange (bytes both ways, clean close) on a fresh pair. */
static void check_link(const struct net_config *s, const struct net_config *c,
		       const char *srv_says, const char *cli_says)
{
	struct nt_pair pr;

	nt_pair_open(&pr, s, c);
	nt_run_until(pr.loop, &pr.cli.connected, 5000);
	nt_run_until(pr.loop, &pr.srv.accepted, 5000);
	assert_non_null(pr.srv.conn);
	assert_non_null(pr.cli.conn);
	printf("server: %s; client: %s\n", net_security(pr.srv.conn), net_security(pr.cli.conn));
	assert_non_null(strstr(net_security(pr.srv.conn), srv_says));
	assert_non_null(strstr(net_security(pr.cli.conn), cli_says));
	nt_pair_close(&pr);
	nt_exchange(s, c);
}

static void test_suites(void **state)
{
	struct net_config s = nt_tls_cfg("server.pem", "server.key", "ca.pem");
	struct net_config c = nt_tls_cfg("client.pem", "client.key", "ca.pem");

	(void)state;
	/* The default: AES-128-GCM first, records by net on both sides. */
	check_link(&s, &c, "TLS_AES_128_GCM_SHA256, records by net",
		   "TLS_AES_128_GCM_SHA256, records by net");
	/* A peer offering only AES-256-GCM (SHA-384 key schedule) gets it. */
	c.tls_suites = "TLS_AES_256_GCM_SHA384";
	check_link(&s, &c, "TLS_AES_256_GCM_SHA384, records by net",
		   "TLS_AES_256_GCM_SHA384, records by net");
	c.tls_suites = "TLS_CHACHA20_POLY1305_SHA256";
	check_link(&s, &c, "TLS_CHACHA20_POLY1305_SHA256, records by net",
		   "TLS_CHACHA20_POLY1305_SHA256, records by net");
	/* No suite in common: no link. */
	s.tls_suites = "TLS_AES_128_GCM_SHA256";
	{
		struct nt_pair pr;

		nt_pair_open(&pr, &s, &c);
		nt_run_until(pr.loop, &pr.cli.closed, 5000);
		assert_int_equal(pr.cli.closed, 1);
		assert_int_not_equal(pr.cli.close_reason, 0);
		assert_int_equal(pr.srv.accepted, 0);
		nt_pair_close(&pr);
	}
}

/* Net's records against OpenSSL's, each way round, 256 MiB of pages in
 * scattered iovecs (a record spans many segments) through 64 KiB socket
 * buffers (writes taken in part). */
static void test_interop(void **state)
{
	struct net_config s = nt_tls_cfg("server.pem", "server.key", "ca.pem");
	struct net_config c = nt_tls_cfg("client.pem", "client.key", "ca.pem");

	(void)state;
	s.sockbuf_bytes = c.sockbuf_bytes = 64 * 1024;
	/* A key update every 100 records (~1.6 MiB): OpenSSL's layer reads
	 * net's updates, net's reads its own. */
	s.tls_update_records = c.tls_update_records = 100;
	c.tls_openssl_records = true;
	check_link(&s, &c, "records by net", "records by OpenSSL");
	nt_transfer(&s, &c, PROTO_PAGE_NO_COMPRESS, 0, true, "tls OpenSSL -> net records");
	c.tls_openssl_records = false;
	s.tls_openssl_records = true;
	check_link(&s, &c, "records by OpenSSL", "records by net");
	nt_transfer(&s, &c, 0, 64, true, "tls net -> OpenSSL records, lz4+xor");
	s.tls_openssl_records = false;
	nt_transfer(&s, &c, PROTO_PAGE_NO_COMPRESS, 0, true, "tls net records, 64 KiB buffers");
}

/* The record layer alone: keys from one secret on both ends. */
static void test_records(void **state)
{
	static const unsigned suites[] = { 0x1301, 0x1302, 0x1303 };
	uint8_t secret[48], rec[TLS_REC_SEALED_MAX], out[TLS_REC_CIPHER_MAX], msg[TLS_REC_PLAIN_MAX];
	struct tls_rec *a, *b;
	uint8_t type;
	size_t len;
	long n;

	(void)state;
	for (size_t i = 0; i < sizeof(secret); i++)
		secret[i] = (uint8_t)nt_rnd();
	for (size_t i = 0; i < sizeof(msg); i++)
		msg[i] = (uint8_t)nt_rnd();
	assert_int_equal(tls_rec_new(0x1304, secret, secret, 32, &a), -ENOTSUP);
	assert_int_equal(tls_rec_new(0x1301, secret, secret, 48, &a), -EINVAL);
	for (int k = 0; k < 3; k++) {
		size_t slen = suites[k] == 0x1302 ? 48 : 32;
		struct iovec iov[3] = { { msg, 100 }, { msg + 100, 0 }, { msg + 100, sizeof(msg) - 100 } };

		uint8_t rec2[TLS_REC_SEALED_MAX];
		long n2;

		assert_int_equal(tls_rec_new(suites[k], secret, secret, slen, &a), 0);
		assert_int_equal(tls_rec_new(suites[k], secret, secret, slen, &b), 0);
		/* Too much content for one record. */
		iov[1].iov_len = 1;
		assert_int_equal(tls_rec_seal(a, TLS_REC_DATA, iov, 3, rec), -EMSGSIZE);
		iov[1].iov_len = 0;
		/* A full record from three segments (one empty) opens. */
		n = tls_rec_seal(a, TLS_REC_DATA, iov, 3, rec);
		assert_int_equal(n, TLS_REC_SEALED_MAX);
		assert_int_equal(tls_rec_length(rec, (size_t)n), n);
		assert_int_equal(tls_rec_length(rec, 4), 0);
		assert_int_equal(tls_rec_open(b, rec, (size_t)n, out, &type, &len), 0);
		assert_int_equal(type, TLS_REC_DATA);
		assert_int_equal(len, sizeof(msg));
		assert_memory_equal(out, msg, sizeof(msg));
		/* The alert record of a close_notify. */
		n = tls_rec_seal(a, TLS_REC_ALERT, &(struct iovec){ (uint8_t[]){ 1, 0 }, 2 }, 1, rec);
		assert_int_equal(n, TLS_REC_HDR + 2 + 1 + TLS_REC_TAG);
		assert_int_equal(tls_rec_open(b, rec, (size_t)n, out, &type, &len), 0);
		assert_int_equal(type, TLS_REC_ALERT);
		assert_int_equal(len, 2);
		/* Replayed: the same record again does not open. */
		assert_int_equal(tls_rec_open(b, rec, (size_t)n, out, &type, &len), -EBADMSG);
		tls_rec_free(a);
		tls_rec_free(b);
		/* Out of order: the second record first does not open. */
		assert_int_equal(tls_rec_new(suites[k], secret, secret, slen, &a), 0);
		assert_int_equal(tls_rec_new(suites[k], secret, secret, slen, &b), 0);
		n = tls_rec_seal(a, TLS_REC_DATA, &(struct iovec){ msg, 10 }, 1, rec);
		n2 = tls_rec_seal(a, TLS_REC_DATA, &(struct iovec){ msg, 10 }, 1, rec2);
		assert_int_equal(tls_rec_open(b, rec2, (size_t)n2, out, &type, &len), -EBADMSG);
		tls_rec_free(a);
		tls_rec_free(b);
		/* A flipped bit in the body, or in the header (authenticated too). */
		for (int where = 0; where < 2; where++) {
			assert_int_equal(tls_rec_new(suites[k], secret, secret, slen, &a), 0);
			assert_int_equal(tls_rec_new(suites[k], secret, secret, slen, &b), 0);
			n = tls_rec_seal(a, TLS_REC_DATA, &(struct iovec){ msg, 100 }, 1, rec);
			rec[where ? 4 : TLS_REC_HDR + 50] ^= 1;
			assert_int_equal(tls_rec_open(b, rec, (size_t)n, out, &type, &len), -EBADMSG);
			tls_rec_free(a);
			tls_rec_free(b);
		}
	}
	/* Key updates: due after the set number of records; the record after
	 * an update opens only once the reader has updated too. */
	for (int k = 0; k < 3; k++) {
		size_t slen = suites[k] == 0x1302 ? 48 : 32;
		struct tls_rec *c;

		assert_int_equal(tls_rec_new(suites[k], secret, secret, slen, &a), 0);
		assert_int_equal(tls_rec_new(suites[k], secret, secret, slen, &b), 0);
		assert_int_equal(tls_rec_new(suites[k], secret, secret, slen, &c), 0);
		tls_rec_set_update_after(a, 2);
		for (int i = 0; i < 2; i++) {
			assert_false(tls_rec_update_due(a));
			n = tls_rec_seal(a, TLS_REC_DATA, &(struct iovec){ msg, 10 }, 1, rec);
			assert_int_equal(tls_rec_open(b, rec, (size_t)n, out, &type, &len), 0);
			assert_int_equal(tls_rec_open(c, rec, (size_t)n, out, &type, &len), 0);
		}
		assert_true(tls_rec_update_due(a));
		assert_int_equal(tls_rec_update(a, true), 0);
		assert_false(tls_rec_update_due(a));
		assert_int_equal(tls_rec_update(b, false), 0);
		n = tls_rec_seal(a, TLS_REC_DATA, &(struct iovec){ msg, 10 }, 1, rec);
		assert_int_equal(tls_rec_open(b, rec, (size_t)n, out, &type, &len), 0);
		assert_memory_equal(out, msg, 10);
		assert_int_equal(tls_rec_open(c, rec, (size_t)n, out, &type, &len), -EBADMSG);
		tls_rec_free(a);
		tls_rec_free(b);
		tls_rec_free(c);
	}
	/* Headers no TLS 1.3 peer sends after its handshake. */
	memcpy(rec, (uint8_t[]){ 22, 3, 3, 0, 40 }, 5);     /* plaintext handshake */
	assert_int_equal(tls_rec_length(rec, 5), -EPROTO);
	memcpy(rec, (uint8_t[]){ 23, 3, 1, 0, 40 }, 5);     /* version */
	assert_int_equal(tls_rec_length(rec, 5), -EPROTO);
	memcpy(rec, (uint8_t[]){ 23, 3, 3, 0x41, 1 }, 5);   /* longer than 2^14 + 256 */
	assert_int_equal(tls_rec_length(rec, 5), -EPROTO);
	memcpy(rec, (uint8_t[]){ 23, 3, 3, 0, 16 }, 5);     /* shorter than a tag + type */
	assert_int_equal(tls_rec_length(rec, 5), -EPROTO);
}

/* A client of OpenSSL's own on a plain socket, after its handshake with a
 * net/ server; the caller then misbehaves on ssl or on fd. */
static SSL *raw_client(struct ev_loop *loop, int port, SSL_CTX *ctx, int *fd)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	SSL *ssl;
	int r = 0;

	*fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(*fd >= 0);
	assert_int_equal(connect(*fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(fcntl(*fd, F_SETFL, O_NONBLOCK), 0);
	ssl = SSL_new(ctx);
	assert_non_null(ssl);
	SSL_set_fd(ssl, *fd);
	for (int i = 0; i < 1000 && (r = SSL_connect(ssl)) != 1; i++)
		nt_run_for(loop, 5);
	assert_int_equal(r, 1);
	return ssl;
}

/* After the handshake, records that net's record layer must refuse: bytes
 * that are no record, a record that fails authentication, a handshake
 * message other than a key update: the link fails with -EPROTO, what came
 * before them delivered. Key updates from OpenSSL (one asking for ours
 * back) keep the link; close_notify closes it cleanly. */
static void test_bad_records(void **state)
{
	struct net_config s = nt_tls_cfg("server.pem", "server.key", "ca.pem");
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct net_listener *l;

	(void)state;
	assert_non_null(ctx);
	assert_int_equal(SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION), 1);
	assert_int_equal(SSL_CTX_use_certificate_chain_file(ctx, nt_cert("client.pem")), 1);
	assert_int_equal(SSL_CTX_use_PrivateKey_file(ctx, nt_cert("client.key"), SSL_FILETYPE_PEM), 1);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
	for (int kind = 0; kind < 5; kind++) {
		struct nt_peer srv = { 0 };
		uint8_t junk[37] = { 23, 3, 3, 0, 32 };
		SSL *ssl;
		int fd;

		proto_buf_init(&srv.rx);
		assert_int_equal(net_listen(loop, &s, "127.0.0.1:0", nt_on_accept, &srv, &l), 0);
		ssl = raw_client(loop, net_listener_port(l), ctx, &fd);
		nt_run_until(loop, &srv.accepted, 5000);
		assert_int_equal(srv.accepted, 1);
		assert_non_null(strstr(net_security(srv.conn), "records by net"));
		assert_int_equal(SSL_write(ssl, "ok", 2), 2);
		if (kind == 0) {            /* a record whose tag does not match */
			for (int i = 5; i < 37; i++)
				junk[i] = (uint8_t)nt_rnd();
			assert_int_equal(write(fd, junk, sizeof(junk)), sizeof(junk));
		} else if (kind == 1) {     /* a plaintext handshake record */
			assert_int_equal(write(fd, "\x16\x03\x03\x00\x05hello", 10), 10);
		} else if (kind == 2) {     /* a key update, then data under the new key */
			assert_int_equal(SSL_key_update(ssl, SSL_KEY_UPDATE_NOT_REQUESTED), 1);
			assert_int_equal(SSL_write(ssl, "no", 2), 2);
			nt_run_for(loop, 50);
			assert_int_equal(srv.closed, 0);
			(void)SSL_shutdown(ssl);
		} else if (kind == 3) {     /* key updates both ways, then data both ways */
			char buf[8];
			int n = -1;

			assert_int_equal(SSL_key_update(ssl, SSL_KEY_UPDATE_REQUESTED), 1);
			assert_int_equal(SSL_write(ssl, "no", 2), 2);
			for (int i = 0; i < 100 && srv.rx.len < 4; i++)
				nt_run_for(loop, 10);
			assert_int_equal(srv.rx.len, 4);
			assert_int_equal(net_send(srv.conn, &(struct iovec){ "hi", 2 }, 1, NULL), 0);
			for (int i = 0; i < 200 && n <= 0; i++) {
				nt_run_for(loop, 5);
				n = SSL_read(ssl, buf, sizeof(buf));
			}
			assert_int_equal(n, 2);
			assert_memory_equal(buf, "hi", 2);
			assert_int_equal(srv.closed, 0);
			(void)SSL_shutdown(ssl);
		} else {
			(void)SSL_shutdown(ssl);
		}
		nt_run_until(loop, &srv.closed, 5000);
		assert_int_equal(srv.closed, 1);
		assert_int_equal(srv.close_reason, kind < 2 ? -EPROTO : 0);
		assert_int_equal(srv.rx.len, kind >= 2 && kind <= 3 ? 4 : 2);
		assert_memory_equal(srv.rx.data, kind >= 2 && kind <= 3 ? "okno" : "ok", srv.rx.len);
		SSL_free(ssl);
		close(fd);
		net_listener_close(l);
		proto_buf_fini(&srv.rx);
	}
	SSL_CTX_free(ctx);
	ev_loop_destroy(loop);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_records),
		cmocka_unit_test(test_suites),
		cmocka_unit_test(test_interop),
		cmocka_unit_test(test_bad_records),
	};

	return cmocka_run_group_tests(tests, nt_setup, nt_teardown);
}
