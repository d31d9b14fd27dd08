/* net/ against hostile or faulty input (issue 9): the one HOST:PORT parser,
 * a TLS handshake with a silent peer, listeners out of file descriptors or
 * flooded with handshakes, a console client that does not read, and an
 * accept callback that closes a plaintext connection. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <cmocka.h>

#include "net/console.h"
#include "net/net.h"
#include "net_harness.h"

static struct net_config tls_cfg(const char *crt, const char *key, unsigned setup_ms)
{
	struct net_config cfg = nt_tls_cfg(crt, key, "ca.pem");

	cfg.setup_timeout_ms = setup_ms;
	return cfg;
}

/* A blocking TCP client of 127.0.0.1:port: the fd. */
static int dial(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* A TCP listener on 127.0.0.1 that never accepts (the kernel completes the
 * TCP handshake anyway): the fd, its port in *port. */
static int mute_listener(int *port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(fd, 64), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	*port = ntohs(sa.sin_port);
	return fd;
}

/* ---- a peer that counts events ------------------------------------------------ */

struct peer {
	struct net_conn *conn;
	int accepted, connected, closed, close_reason;
	bool close_second;            /* the accept callback closes the 2nd */
};

static void p_connected(struct net_conn *c, void *ctx)
{
	(void)c;
	((struct peer *)ctx)->connected++;
}

static void p_recv(struct net_conn *c, const void *data, size_t len, void *ctx)
{
	(void)c;
	(void)data;
	(void)len;
	(void)ctx;
}

static void p_closed(struct net_conn *c, int reason, void *ctx)
{
	struct peer *p = ctx;

	(void)c;
	p->closed++;
	p->close_reason = reason;
	p->conn = NULL;
}

static const struct net_conn_ops peer_ops = { .connected = p_connected, .recv = p_recv,
					      .closed = p_closed };

static void on_accept(struct net_listener *l, struct net_conn *c, void *ctx)
{
	struct peer *p = ctx;

	(void)l;
	if (++p->accepted == 2 && p->close_second) {
		net_close(c);
		return;
	}
	if (p->conn)
		net_close(p->conn);
	p->conn = c;
	net_conn_set_ops(c, &peer_ops, p);
}

/* ---- 8: HOST:PORT, one parser, ports 1..65535 ----------------------------------- */

static void test_host_port(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct net_listener *l;
	struct net_conn *c;
	char host[64];
	int port;

	(void)state;
	assert_int_equal(net_parse_host_port("127.0.0.1:7000", false, host, sizeof(host), &port), 0);
	assert_string_equal(host, "127.0.0.1");
	assert_int_equal(port, 7000);
	assert_int_equal(net_parse_host_port("[::1]:65535", false, host, sizeof(host), &port), 0);
	assert_string_equal(host, "::1");
	assert_int_equal(port, 65535);
	assert_int_equal(net_parse_host_port("localhost:1", false, host, sizeof(host), &port), 0);
	assert_int_equal(port, 1);
	/* Port 0 only where asked for (an ephemeral port of a listener). */
	assert_int_equal(net_parse_host_port("h:0", true, host, sizeof(host), &port), 0);
	assert_int_equal(port, 0);
	assert_int_equal(net_parse_host_port("h:0", false, host, sizeof(host), &port), -ERANGE);
	/* Ports that used to wrap: 70000 listened on 4464, 65536 dialled 0. */
	assert_int_equal(net_parse_host_port("h:70000", true, host, sizeof(host), &port), -ERANGE);
	assert_int_equal(net_parse_host_port("h:65536", true, host, sizeof(host), &port), -ERANGE);
	assert_int_equal(net_parse_host_port("h:4294967297", true, host, sizeof(host), &port),
			 -ERANGE);
	assert_int_equal(net_parse_host_port("h:000000080", true, host, sizeof(host), &port),
			 -ERANGE);
	assert_int_equal(net_parse_host_port("h:-1", true, host, sizeof(host), &port), -ERANGE);
	assert_int_equal(net_parse_host_port("h:+80", true, host, sizeof(host), &port), -ERANGE);
	assert_int_equal(net_parse_host_port("h: 80", true, host, sizeof(host), &port), -ERANGE);
	assert_int_equal(net_parse_host_port("h:0x50", true, host, sizeof(host), &port), -ERANGE);
	assert_int_equal(net_parse_host_port("h:", true, host, sizeof(host), &port), -ERANGE);
	assert_int_equal(net_parse_host_port("h", true, host, sizeof(host), &port), -EINVAL);
	assert_int_equal(net_parse_host_port("averyveryverylonghostname:80", true, host, 8, &port),
			 -EINVAL);
	/* Everywhere: the link, the console, its command-line check. */
	assert_int_equal(net_listen(loop, &nt_tcp_cfg, "127.0.0.1:70000", NULL, NULL, &l), -EINVAL);
	assert_int_equal(net_connect(loop, &nt_tcp_cfg, "127.0.0.1:65536", NULL, NULL, &c), -EINVAL);
	assert_int_equal(net_connect(loop, &nt_tcp_cfg, "127.0.0.1:0", NULL, NULL, &c), -EINVAL);
	assert_int_equal(console_check_spec("tcp:127.0.0.1:70000"), -ERANGE);
	assert_int_equal(console_check_spec("tcp:127.0.0.1:0"), -ERANGE);
	assert_int_equal(console_check_spec("tcp:127.0.0.1:5000"), 0);
	assert_int_equal(console_check_spec("tcp:[::1]:5000"), 0);
	assert_int_equal(console_check_spec("stdio"), 0);
	assert_int_equal(console_check_spec("udp:1.2.3.4:5"), -EINVAL);
	ev_loop_destroy(loop);
}

/* ---- 4: a connection that is not up in time fails -------------------------------- */

/* A client whose server takes the TCP connection and never speaks TLS. */
static void test_tls_silent_server(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct net_config cfg = tls_cfg("client.pem", "client.key", 300);
	struct peer p = { 0 };
	char addr[64];
	uint64_t t0;
	int port, lfd = mute_listener(&port);

	(void)state;
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	t0 = now_ns();
	assert_int_equal(net_connect(loop, &cfg, addr, &peer_ops, &p, &p.conn), 0);
	nt_run_until(loop, &p.closed, 10000);
	assert_int_equal(p.closed, 1);
	assert_int_equal(p.close_reason, -ETIMEDOUT);
	assert_int_equal(p.connected, 0);
	assert_true(now_ns() - t0 >= 250 * 1000000ull); /* not before its deadline */
	close(lfd);
	ev_loop_destroy(loop);
}

/* A server whose client connects and never speaks TLS: dropped before the
 * accept callback, the client sees the connection end. */
static void test_tls_silent_client(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct net_config cfg = tls_cfg("server.pem", "server.key", 300);
	struct net_listener *l;
	struct peer p = { 0 };
	char buf[16];
	int fd, eof = 0;

	(void)state;
	assert_int_equal(net_listen(loop, &cfg, "127.0.0.1:0", on_accept, &p, &l), 0);
	fd = dial(net_listener_port(l));
	fcntl(fd, F_SETFL, O_NONBLOCK);
	for (int i = 0; i < 200 && !eof; i++) {
		ev_run(loop, EVRUN_NOWAIT);
		usleep(10000);
		eof = read(fd, buf, sizeof(buf)) >= 0 || errno != EAGAIN;
	}
	assert_true(eof);
	assert_int_equal(p.accepted, 0);
	close(fd);
	net_listener_close(l);
	ev_loop_destroy(loop);
}

/* ---- 6: a listener bounds the connections in their handshake --------------------- */

/* 24 silent clients of a TLS listener from 6 addresses: 16 wait in their
 * handshake, each one beyond closes the oldest silent one (issue 25: the
 * slots go to newcomers, not to whoever came first); those 16 are closed
 * once silent for 1 s, well before the 60 s deadline of a handshake, and a
 * real client still gets in. */
static void test_handshake_bound(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct net_config scfg = tls_cfg("server.pem", "server.key", 60000);
	struct net_config ccfg = tls_cfg("client.pem", "client.key", 5000);
	struct net_listener *l;
	struct peer p = { 0 }, cli = { 0 };
	int fds[24], ended = 0, first = -1;
	bool gone[24] = { false };
	char buf[16], addr[64];
	uint64_t t0 = now_ns();

	(void)state;
	assert_int_equal(net_listen(loop, &scfg, "127.0.0.1:0", on_accept, &p, &l), 0);
	for (int i = 0; i < 24; i++) { /* the loop accepts as they come */
		struct sockaddr_in sa = { .sin_family = AF_INET };

		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK + (uint32_t)(i % 6));
		fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		assert_int_equal(bind(fds[i], (struct sockaddr *)&sa, sizeof(sa)), 0);
		sa.sin_port = htons((uint16_t)net_listener_port(l));
		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		assert_int_equal(connect(fds[i], (struct sockaddr *)&sa, sizeof(sa)), 0);
		fcntl(fds[i], F_SETFL, O_NONBLOCK);
		for (int j = 0; j < 5; j++) {
			ev_run(loop, EVRUN_NOWAIT);
			usleep(200);
		}
	}
	/* Until every one has ended (or 5 s): the 8 oldest at once. */
	for (int j = 0; j < 5000 && ended < 24; j++) {
		ev_run(loop, EVRUN_NOWAIT);
		usleep(1000);
		for (int i = 0; i < 24; i++) {
			if (gone[i])
				continue;
			gone[i] = read(fds[i], buf, sizeof(buf)) >= 0 || errno != EAGAIN;
			ended += gone[i];
			if (gone[i] && i >= 8 && first < 0)
				first = i;
		}
		if (ended == 8 && first < 0) /* the oldest 8, not the newest */
			for (int i = 0; i < 8; i++)
				assert_true(gone[i]);
	}
	assert_int_equal(ended, 24);
	assert_true(now_ns() - t0 < 5000 * 1000000ull);
	assert_int_equal(p.accepted, 0);
	for (int i = 0; i < 24; i++)
		close(fds[i]);
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", net_listener_port(l));
	assert_int_equal(net_connect(loop, &ccfg, addr, &peer_ops, &cli, &cli.conn), 0);
	nt_run_until(loop, &p.accepted, 5000);
	assert_int_equal(p.accepted, 1);
	net_close(cli.conn);
	net_close(p.conn);
	net_listener_close(l);
	ev_loop_destroy(loop);
}

/* ---- 9: the console's output to a client that does not read is bounded ------------ */

static size_t c_input(void *ctx, const uint8_t *buf, size_t len)
{
	(void)ctx;
	(void)buf;
	return len;
}

static void c_hangup(void *ctx)
{
	(*(int *)ctx)++;
}

/* Reads what is there until EOF or ms pass: bytes read, the last 8 in tail. */
static size_t drain(struct ev_loop *loop, int fd, int ms, uint8_t tail[8], bool *eof)
{
	static uint8_t buf[1 << 16];
	size_t total = 0;
	ssize_t n;

	*eof = false;
	for (int i = 0; i < ms && !*eof; i++) {
		ev_run(loop, EVRUN_NOWAIT);
		while ((n = read(fd, buf, sizeof(buf))) > 0) {
			total += (size_t)n;
			if (n >= 8)
				memcpy(tail, buf + n - 8, 8);
		}
		*eof = n == 0 || (n < 0 && errno != EAGAIN);
		if (!*eof)
			usleep(1000);
	}
	return total;
}

/* 32 MiB written to a client that reads nothing: it is dropped once 4 MiB
 * wait, the next client gets the latest output (at most the backlog). */
static void test_console_slow_client(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	int hangups = 0, fd, fd2;
	struct console_ops ops = { .input = c_input, .hangup = c_hangup, .ctx = &hangups };
	static uint8_t chunk[1 << 16];
	struct console *con;
	uint8_t tail[8] = { 0 };
	uint64_t seq = 0;
	size_t got;
	bool eof;

	(void)state;
	assert_int_equal(console_open(loop, "tcp:127.0.0.1:0", &ops, &con), 0);
	fd = dial(console_port(con));
	for (int i = 0; i < 20; i++) { /* accepted */
		ev_run(loop, EVRUN_NOWAIT);
		usleep(1000);
	}
	for (int i = 0; i < 512; i++) {
		for (size_t j = 0; j < sizeof(chunk); j += 8, seq++)
			memcpy(chunk + j, &seq, 8);
		console_write(con, chunk, sizeof(chunk));
		ev_run(loop, EVRUN_NOWAIT);
	}
	assert_int_equal(hangups, 1);
	/* The slow client sees its connection end after what the kernel held. */
	fcntl(fd, F_SETFL, O_NONBLOCK);
	got = drain(loop, fd, 5000, tail, &eof);
	assert_true(eof);
	assert_true(got < 32u << 20);
	close(fd);
	/* The next client gets the latest output, no more than the backlog. */
	fd2 = dial(console_port(con));
	fcntl(fd2, F_SETFL, O_NONBLOCK);
	got = drain(loop, fd2, 300, tail, &eof);
	assert_false(eof);
	assert_true(got > 0 && got <= CONSOLE_BACKLOG);
	seq--;
	assert_memory_equal(tail, &seq, 8);
	close(fd2);
	console_free(con);
	ev_loop_destroy(loop);
}

/* ---- 7: an accept callback that closes a plaintext connection --------------------- */

/* On a plaintext link the connection comes up inside its start, and the
 * accept callback ran there; closing the connection in it freed it while
 * net_conn_up still used it (found by ASan with a second primary refused
 * by a secondary). The second of two clients is closed in the callback;
 * run it under make SAN=1. */
static void test_accept_closes_plaintext(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct peer srv = { .close_second = true }, c1 = { 0 }, c2 = { 0 };
	struct net_listener *l;
	char addr[64];

	(void)state;
	assert_int_equal(net_listen(loop, &nt_tcp_cfg, "127.0.0.1:0", on_accept, &srv, &l), 0);
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", net_listener_port(l));
	assert_int_equal(net_connect(loop, &nt_tcp_cfg, addr, &peer_ops, &c1, &c1.conn), 0);
	nt_run_until(loop, &srv.accepted, 5000);
	assert_int_equal(net_connect(loop, &nt_tcp_cfg, addr, &peer_ops, &c2, &c2.conn), 0);
	nt_run_until(loop, &c2.closed, 5000);
	assert_int_equal(srv.accepted, 2);
	assert_int_equal(c2.closed, 1);     /* refused: the peer closed */
	assert_int_equal(c2.close_reason, 0);
	assert_int_equal(c1.connected, 1);  /* the first one lives on */
	assert_int_equal(c1.closed, 0);
	assert_non_null(srv.conn);
	net_close(c1.conn);
	net_close(srv.conn);
	net_listener_close(l);
	ev_loop_destroy(loop);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_host_port),
		cmocka_unit_test(test_tls_silent_server),
		cmocka_unit_test(test_tls_silent_client),
		cmocka_unit_test(test_handshake_bound),
		cmocka_unit_test(test_console_slow_client),
		cmocka_unit_test(test_accept_closes_plaintext),
	};

	return cmocka_run_group_tests(tests, nt_setup, nt_teardown);
}
