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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_records),
		cmocka_unit_test(test_suites),
		cmocka_unit_test(test_interop),
	};

	return cmocka_run_group_tests(tests, nt_setup, nt_teardown);
}
