/* net/: TCP and TLS transports on 127.0.0.1, certificate rejection cases,
 * a large verified page transfer (proto/ frames over net/), and a flushed
 * close on every transport. The RDMA cases are in test_rdma.c; the shared
 * helpers in net_harness.c. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "net_harness.h"

/* net_close_flush() right after queuing: everything still arrives, every
 * send completes, both sides see a clean close. Once from the client before
 * the connection is up, once from the accepted side. */
static void close_flush(const struct net_config *scfg, const struct net_config *ccfg)
{
	static char big[5 << 20];
	struct nt_pair pr;
	struct iovec iov[2];

	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (char)nt_rnd();
	for (int server_side = 0; server_side < 2; server_side++) {
		struct nt_peer *from, *to;

		nt_pair_open(&pr, scfg, ccfg);
		from = server_side ? &pr.srv : &pr.cli;
		to = server_side ? &pr.cli : &pr.srv;
		if (server_side)
			nt_run_until(pr.loop, &pr.srv.accepted, 5000);
		assert_non_null(from->conn);
		iov[0] = (struct iovec){ big, sizeof(big) };
		iov[1] = (struct iovec){ "tail", 4 };
		assert_int_equal(net_send(from->conn, iov, 2, big), 0);
		assert_int_equal(net_send(from->conn, iov + 1, 1, NULL), 0);
		net_close_flush(from->conn);
		assert_int_equal(net_send(from->conn, iov, 1, NULL), -ESHUTDOWN);
		assert_int_equal(from->closed, 0);
		nt_run_until(pr.loop, &to->closed, 10000);
		nt_run_until(pr.loop, &from->closed, 5000);
		assert_int_equal(from->closed, 1);
		assert_int_equal(from->close_reason, 0);
		assert_int_equal(from->sent, 2);
		assert_int_equal(from->sent_err, 0);
		assert_int_equal(to->closed, 1);
		assert_int_equal(to->close_reason, 0);
		assert_int_equal(to->rx.len, sizeof(big) + 8);
		assert_memory_equal(to->rx.data, big, sizeof(big));
		assert_memory_equal(to->rx.data + sizeof(big), "tailtail", 8);
		nt_pair_close(&pr);
	}
}

static void test_close_flush(void **state)
{
	struct net_config s = nt_tls_cfg("server.pem", "server.key", "ca.pem");
	struct net_config c = nt_tls_cfg("client.pem", "client.key", "ca.pem");

	(void)state;
	close_flush(&nt_tcp_cfg, &nt_tcp_cfg);
	close_flush(&s, &c);
	close_flush(&nt_rdma_cfg, &nt_rdma_cfg);
}

static void test_tcp_exchange(void **state)
{
	(void)state;
	nt_exchange(&nt_tcp_cfg, &nt_tcp_cfg);
}

static void test_tls_exchange(void **state)
{
	struct net_config s = nt_tls_cfg("server.pem", "server.key", "ca.pem");
	struct net_config c = nt_tls_cfg("client.pem", "client.key", "ca.pem");

	(void)state;
	nt_exchange(&s, &c);
}

static void test_config_checks(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct net_config plain = { .transport = NET_TCP };
	struct net_config rdma = { .transport = NET_RDMA };
	struct net_config badprov = { .transport = NET_RDMA, .insecure = true,
				      .rdma_provider = "no-such-provider" };
	struct nt_pair pr;
	struct net_config nocert = { .transport = NET_TLS };
	struct net_listener *l;
	struct net_conn *c;

	(void)state;
	assert_int_equal(net_listen(loop, &plain, "127.0.0.1:0", nt_on_accept, NULL, &l), -EPERM);
	assert_int_equal(net_connect(loop, &plain, "127.0.0.1:1", &nt_peer_ops, NULL, &c), -EPERM);
	assert_int_equal(net_listen(loop, &rdma, "127.0.0.1:0", nt_on_accept, NULL, &l), -EPERM);
	assert_int_equal(net_connect(loop, &rdma, "127.0.0.1:1", &nt_peer_ops, NULL, &c), -EPERM);
	assert_int_equal(net_listen(loop, &nocert, "127.0.0.1:0", nt_on_accept, NULL, &l), -EINVAL);
	assert_int_equal(net_listen(loop, &nt_tcp_cfg, "nonsense", nt_on_accept, NULL, &l), -EINVAL);
	ev_loop_destroy(loop);
	/* An unknown libfabric provider: the client's link fails with an error. */
	nt_pair_open(&pr, &badprov, &badprov);
	nt_run_until(pr.loop, &pr.cli.closed, 5000);
	assert_int_equal(pr.cli.closed, 1);
	assert_true(pr.cli.close_reason < 0);
	assert_int_equal(pr.cli.connected, 0);
	assert_int_equal(pr.srv.accepted, 0);
	nt_pair_close(&pr);
}

static void test_connect_refused(void **state)
{
	(void)state;
	nt_connect_refused(&nt_tcp_cfg);
}

/* A connection that must be refused: the server never accepts, the client's
 * connection dies with an error, no application bytes get through. */
static void expect_rejected(const struct net_config *scfg, const struct net_config *ccfg)
{
	struct nt_pair pr;
	struct iovec iov = { "secret", 6 };

	nt_pair_open(&pr, scfg, ccfg);
	assert_int_equal(net_send(pr.cli.conn, &iov, 1, NULL), 0);
	nt_run_until(pr.loop, &pr.cli.closed, 5000);
	nt_run_for(pr.loop, 100);
	assert_int_equal(pr.cli.closed, 1);
	assert_true(pr.cli.close_reason < 0);
	assert_int_equal(pr.srv.accepted, 0);
	assert_int_equal(pr.srv.rx.len, 0);
	nt_pair_close(&pr);
}

static void test_tls_rejections(void **state)
{
	struct net_config srv = nt_tls_cfg("server.pem", "server.key", "ca.pem");
	struct net_config cli = nt_tls_cfg("client.pem", "client.key", "ca.pem");
	struct net_config c, s;

	(void)state;
	/* Client trusts another CA: server certificate rejected. */
	c = nt_tls_cfg("client.pem", "client.key", "other-ca.pem");
	expect_rejected(&srv, &c);
	/* Client cert from an unrelated CA: rejected by the server. */
	c = nt_tls_cfg("other.pem", "other.key", "ca.pem");
	expect_rejected(&srv, &c);
	/* No client certificate. */
	c = nt_tls_cfg(NULL, NULL, "ca.pem");
	expect_rejected(&srv, &c);
	/* Expired server certificate; expired client certificate. */
	s = nt_tls_cfg("expired.pem", "expired.key", "ca.pem");
	expect_rejected(&s, &cli);
	c = nt_tls_cfg("expired.pem", "expired.key", "ca.pem");
	expect_rejected(&srv, &c);
	/* Plaintext client against a TLS listener. */
	expect_rejected(&srv, &nt_tcp_cfg);
}

/* Certificates are bound to a role by their extended key usage, and a
 * peer name, when given, must match. */
static void test_tls_roles(void **state)
{
	struct net_config srv = nt_tls_cfg("server.pem", "server.key", "ca.pem");
	struct net_config cli = nt_tls_cfg("client.pem", "client.key", "ca.pem");
	struct net_config c, s;

	(void)state;
	/* A client (clientAuth) certificate as the server: the client refuses it. */
	s = nt_tls_cfg("client.pem", "client.key", "ca.pem");
	expect_rejected(&s, &cli);
	/* A server (serverAuth) certificate as the client: the server refuses it. */
	c = nt_tls_cfg("server.pem", "server.key", "ca.pem");
	expect_rejected(&srv, &c);
	/* No extended key usage at all: refused in either role. (nt_cert()
	 * reuses its 16 paths: fresh configs for each part.) */
	srv = nt_tls_cfg("server.pem", "server.key", "ca.pem");
	cli = nt_tls_cfg("client.pem", "client.key", "ca.pem");
	s = nt_tls_cfg("noeku.pem", "noeku.key", "ca.pem");
	expect_rejected(&s, &cli);
	c = nt_tls_cfg("noeku.pem", "noeku.key", "ca.pem");
	expect_rejected(&srv, &c);
	/* A peer name the certificate does not carry: refused by either side. */
	srv = nt_tls_cfg("server.pem", "server.key", "ca.pem");
	cli = nt_tls_cfg("client.pem", "client.key", "ca.pem");
	c = cli;
	c.peer_name = "someone-else";
	expect_rejected(&srv, &c);
	s = srv;
	s.peer_name = "someone-else";
	expect_rejected(&s, &cli);
	/* The right names on both sides (the client checks its name instead of
	 * the address it dialled): the normal pairing works. */
	s.peer_name = "understudy-primary";
	c.peer_name = "understudy-secondary";
	nt_exchange(&s, &c);
}

/* TLS client against a plaintext server that talks first: handshake fails. */
static void test_tls_against_plaintext(void **state)
{
	struct net_config cli = nt_tls_cfg("client.pem", "client.key", "ca.pem");
	struct nt_pair pr;
	struct iovec iov = { "not a tls server hello, just bytes\n", 35 };

	(void)state;
	nt_pair_open(&pr, &nt_tcp_cfg, &cli);
	nt_run_until(pr.loop, &pr.srv.accepted, 5000);
	assert_int_equal(net_send(pr.srv.conn, &iov, 1, NULL), 0);
	nt_run_until(pr.loop, &pr.cli.closed, 5000);
	assert_int_equal(pr.cli.closed, 1);
	assert_int_equal(pr.cli.connected, 0);
	assert_true(pr.cli.close_reason < 0);
	nt_pair_close(&pr);
}

static void test_transfer_tcp(void **state)
{
	(void)state;
	nt_transfer(&nt_tcp_cfg, &nt_tcp_cfg, PROTO_PAGE_NO_COMPRESS, 0, true, "tcp raw, scatter");
}

static void test_transfer_tls(void **state)
{
	struct net_config s = nt_tls_cfg("server.pem", "server.key", "ca.pem");
	struct net_config c = nt_tls_cfg("client.pem", "client.key", "ca.pem");

	(void)state;
	nt_transfer(&s, &c, 0, 64, false, "tls lz4+xor");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_config_checks),
		cmocka_unit_test(test_connect_refused),
		cmocka_unit_test(test_tcp_exchange),
		cmocka_unit_test(test_tls_exchange),
		cmocka_unit_test(test_tls_rejections),
		cmocka_unit_test(test_tls_roles),
		cmocka_unit_test(test_tls_against_plaintext),
		cmocka_unit_test(test_transfer_tcp),
		cmocka_unit_test(test_transfer_tls),
		cmocka_unit_test(test_close_flush),
	};

	return cmocka_run_group_tests(tests, nt_setup, nt_teardown);
}
