/* Idle connections cannot keep a real peer out (issue 25, items 7 and 8):
 * floods of plain connects that send nothing, from several addresses, at
 * the replication listener (TLS: setup slots in net/; plain TCP: the
 * secondary's candidates before their Hello), the console and /metrics,
 * each followed by a real client that must get in. The bounds asserted are
 * generous (other work runs on this machine); the times are printed. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
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
#include <sys/socket.h>
#include <cmocka.h>

#include "net/console.h"
#include "net/metrics.h"
#include "net/net.h"
#include "replication/replication.h"
#include "secondary/secondary_int.h"
#include "net_harness.h"

#define FLOOD 200
#define SOURCES 8          /* flooders come from 127.0.0.1 .. 127.0.0.8 */
#define GET_IN_MS 10000    /* generous: a SYN lost to a full backlog waits 1 s, then 2 */

struct flood {
	int fd[2 * FLOOD];
	int n;
};

/* One more idle connection to 127.0.0.1:port, non-blocking (a full backlog
 * must not stop the flood), from one of SOURCES addresses. */
static void flood_one(struct flood *f, int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	struct sockaddr_in src = { .sin_family = AF_INET };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0 && f->n < 2 * FLOOD);
	src.sin_addr.s_addr = htonl(INADDR_LOOPBACK + (uint32_t)(f->n % SOURCES));
	assert_int_equal(bind(fd, (struct sockaddr *)&src, sizeof(src)), 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_true(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 || errno == EINPROGRESS);
	f->fd[f->n++] = fd;
}

/* n more, the loop running between them as it would under a real flood. */
static void flood_more(struct flood *f, struct ev_loop *loop, int port, int n)
{
	for (int i = 0; i < n; i++) {
		flood_one(f, port);
		ev_run(loop, EVRUN_NOWAIT);
	}
}

/* A flood from a thread of its own, as fast as it goes, while the loop's
 * thread serves and times a real client. */
struct flooder {
	pthread_t thread;
	int port;
	struct flood f;
	atomic_int opened;
};

static void *flooder_run(void *arg)
{
	struct flooder *fl = arg;

	for (int i = 0; i < FLOOD; i++) {
		flood_one(&fl->f, fl->port);
		atomic_fetch_add(&fl->opened, 1);
	}
	return NULL;
}

static void flood_end(struct flood *f)
{
	for (int i = 0; i < f->n; i++)
		close(f->fd[i]);
	f->n = 0;
}

static double ms_since(uint64_t t0)
{
	return (double)(now_ns() - t0) / 1e6;
}

/* A service under a flood, and how a real client gets in: get_in() returns
 * the ms it took, or -1 if it never did. */
struct target {
	struct ev_loop *loop;
	int port;
	void *ctx;
	double (*get_in)(struct target *t);
};

/* The kernel's count of connections a full listen queue dropped
 * (TcpExt ListenOverflows in /proc/net/netstat), or -1. */
static long listen_overflows(void)
{
	char names[4096], values[4096], *n, *v, *sn, *sv;
	FILE *f = fopen("/proc/net/netstat", "r");
	long found = -1;

	if (!f)
		return -1;
	while (fgets(names, sizeof(names), f) && fgets(values, sizeof(values), f)) {
		if (strncmp(names, "TcpExt:", 7))
			continue;
		n = strtok_r(names, " \n", &sn);
		v = strtok_r(values, " \n", &sv);
		while (n && v) {
			if (!strcmp(n, "ListenOverflows"))
				found = atol(v);
			n = strtok_r(NULL, " \n", &sn);
			v = strtok_r(NULL, " \n", &sv);
		}
	}
	fclose(f);
	return found;
}

/* A real client: alone, after FLOOD idle connections that arrived at once
 * (before the loop could accept any: the listen queue must hold them all,
 * or the SYNs that follow, the real client's among them, are dropped and
 * wait out TCP's 1 s retransmission), after FLOOD the loop took as they
 * came, and while FLOOD more come from another thread; it must get in each
 * time. */
static void flood_and_time(struct target *t, const char *what)
{
	struct flooder fl = { .port = t->port };
	struct flood f = { .n = 0 };
	double quiet, burst, held, during;
	long over0, over;

	quiet = t->get_in(t);
	over0 = listen_overflows();
	for (int i = 0; i < FLOOD; i++)
		flood_one(&f, t->port);
	over = listen_overflows();
	burst = t->get_in(t);
	printf("%s: %.1f ms after a burst of %d connects (listen queue overflows: %ld)\n", what,
	       burst, FLOOD, over - over0);
	if (over0 >= 0 && over >= 0)
		assert_int_equal(over - over0, 0);
	assert_true(burst >= 0);
	flood_end(&f);
	nt_run_for(t->loop, 50);
	flood_more(&f, t->loop, t->port, FLOOD);
	nt_run_for(t->loop, 50);
	held = t->get_in(t);
	assert_int_equal(pthread_create(&fl.thread, NULL, flooder_run, &fl), 0);
	while (atomic_load(&fl.opened) < FLOOD / 4)
		ev_run(t->loop, EVRUN_NOWAIT);
	during = t->get_in(t);
	printf("%s: %.1f ms quiet, %.1f ms after %d idle connections, %.1f ms while %d more "
	       "came (%d of them by then)\n", what, quiet, held, FLOOD, during, FLOOD,
	       atomic_load(&fl.opened));
	pthread_join(fl.thread, NULL);
	assert_true(quiet >= 0);
	assert_true(held >= 0);
	assert_true(during >= 0);
	flood_end(&fl.f);
	flood_end(&f);
}

/* ---- 7: the replication listener, TLS: setup slots ------------------------------ */

/* How long a real TLS client takes to be accepted: ms, or -1 if never. */
static double tls_get_in(struct target *t)
{
	struct ev_loop *loop = t->loop;
	struct nt_peer *srv = t->ctx;
	struct net_config ccfg = nt_tls_cfg("client.pem", "client.key", "ca.pem");
	struct nt_peer cli = { 0 };
	char addr[64];
	uint64_t t0;
	double ms;

	srv->accepted = 0;
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", t->port);
	t0 = now_ns();
	assert_int_equal(net_connect(loop, &ccfg, addr, &nt_peer_ops, &cli, &cli.conn), 0);
	nt_run_until(loop, &srv->accepted, GET_IN_MS);
	ms = srv->accepted ? ms_since(t0) : -1;
	nt_run_until(loop, &cli.connected, 1000);
	if (cli.conn)
		net_close(cli.conn);
	if (srv->conn)
		net_close(srv->conn);
	srv->conn = NULL;
	return ms;
}

static void test_flood_tls_listener(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct net_config scfg = nt_tls_cfg("server.pem", "server.key", "ca.pem");
	struct net_listener *l;
	struct nt_peer srv = { 0 };
	struct target t = { .loop = loop, .ctx = &srv, .get_in = tls_get_in };

	(void)state;
	proto_buf_init(&srv.rx);
	assert_int_equal(net_listen(loop, &scfg, "127.0.0.1:0", nt_on_accept, &srv, &l), 0);
	t.port = net_listener_port(l);
	flood_and_time(&t, "TLS handshake");
	net_listener_close(l);
	proto_buf_fini(&srv.rx);
	ev_loop_destroy(loop);
}

/* ---- 7: plain TCP: the secondary's candidates before their Hello ----------------- */

struct cands {
	struct repl_candidates cs;
	struct repl_fault fault;
	int hellos;
	struct net_conn *primary;
};

static int k_hello(void *ctx, struct repl_link *l, const struct proto_frame *f)
{
	(void)l;
	(void)f;
	((struct cands *)ctx)->hellos++;
	return 0;
}

static void k_promote(void *ctx, struct net_conn *c)
{
	((struct cands *)ctx)->primary = c;
}

static int k_frame(void *ctx, const struct proto_frame *f)
{
	(void)ctx;
	(void)f;
	return 0;
}

static void k_adopt(void *ctx, struct repl_link *l)
{
	(void)ctx;
	(void)l;
}

static void k_fed(void *ctx, int r)
{
	(void)ctx;
	(void)r;
}

static const struct repl_candidates_ops k_ops = {
	.hello = k_hello, .promote = k_promote, .frame = k_frame, .adopt = k_adopt, .fed = k_fed,
};

static void k_accept(struct net_listener *l, struct net_conn *c, void *ctx)
{
	(void)l;
	repl_candidates_add(&((struct cands *)ctx)->cs, c);
}

/* A primary that says Hello as soon as it is connected. */
struct hello_client {
	struct nt_peer p;
	struct proto_buf out;
};

static void h_connected(struct net_conn *c, void *ctx)
{
	struct hello_client *h = ctx;
	struct iovec iov;

	h->p.connected++;
	assert_int_equal(proto_frame_append(&h->out, PROTO_T_HELLO, "", 0), 0);
	iov = (struct iovec){ h->out.data, h->out.len };
	assert_int_equal(net_send(c, &iov, 1, NULL), 0);
}

static void h_closed(struct net_conn *c, int reason, void *ctx)
{
	struct hello_client *h = ctx;

	(void)c;
	h->p.closed++;
	h->p.close_reason = reason;
	h->p.conn = NULL;
}

static const struct net_conn_ops hello_ops = { .connected = h_connected, .closed = h_closed };

static double tcp_get_in(struct target *t)
{
	struct ev_loop *loop = t->loop;
	struct cands *k = t->ctx;
	struct hello_client h = { .p = { 0 } };
	char addr[64];
	uint64_t t0;
	double ms;

	proto_buf_init(&h.out);
	k->hellos = 0;
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", t->port);
	t0 = now_ns();
	assert_int_equal(net_connect(loop, &nt_tcp_cfg, addr, &hello_ops, &h, &h.p.conn), 0);
	nt_run_until(loop, &k->hellos, GET_IN_MS);
	ms = k->hellos ? ms_since(t0) : -1;
	if (h.p.conn)
		net_close(h.p.conn);
	if (k->primary)
		net_close(k->primary);
	k->primary = NULL;
	proto_buf_fini(&h.out);
	return ms;
}

static void test_flood_tcp_candidates(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct net_listener *l;
	struct cands k = { .hellos = 0 };
	struct target t = { .loop = loop, .ctx = &k, .get_in = tcp_get_in };

	(void)state;
	repl_candidates_init(&k.cs, &k_ops, &k, REPL_HANDSHAKE_TIMEOUT_MS, &k.fault);
	assert_int_equal(net_listen(loop, &nt_tcp_cfg, "127.0.0.1:0", k_accept, &k, &l), 0);
	t.port = net_listener_port(l);
	flood_and_time(&t, "TCP Hello");
	repl_candidates_close_all(&k.cs, "test over");
	net_listener_close(l);
	ev_loop_destroy(loop);
}

/* ---- 8: /metrics ------------------------------------------------------------------ */

static char *render(void *ctx, size_t *len)
{
	(void)ctx;
	*len = strlen("understudy_up 1\n");
	return strdup("understudy_up 1\n");
}

/* A scrape of 127.0.0.1:port while the loop runs: ms until the whole
 * answer, or -1 if it was not a 200 with the page within GET_IN_MS. */
static double scrape(struct target *t)
{
	struct ev_loop *loop = t->loop;
	int port = t->port;
	static const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	char buf[4096];
	size_t got = 0;
	uint64_t t0 = now_ns();
	bool eof = false, sent = false;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_true(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 || errno == EINPROGRESS);
	/* A scraper asks as soon as it is connected, then the flood goes on. */
	for (int i = 0; i < 1000 && !sent; i++) {
		sent = write(fd, req, sizeof(req) - 1) == (ssize_t)sizeof(req) - 1;
		if (!sent)
			usleep(100);
	}
	while (!eof && ms_since(t0) < GET_IN_MS) {
		ssize_t n;

		ev_run(loop, EVRUN_NOWAIT);
		n = read(fd, buf + got, sizeof(buf) - 1 - got);
		if (n > 0)
			got += (size_t)n;
		eof = n == 0 || (n < 0 && errno != EAGAIN && errno != ENOTCONN);
		if (!eof)
			usleep(100);
	}
	close(fd);
	buf[got] = 0;
	if (!eof || strncmp(buf, "HTTP/1.1 200", 12) || !strstr(buf, "understudy_up 1\n"))
		return -1;
	return ms_since(t0);
}

static void test_flood_metrics(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct net_metrics *m;
	struct target t = { .loop = loop, .get_in = scrape };

	(void)state;
	assert_int_equal(net_metrics_start(loop, "127.0.0.1:0", render, NULL, &m), 0);
	t.port = net_metrics_port(m);
	flood_and_time(&t, "scrape");
	net_metrics_stop(m);
	ev_loop_destroy(loop);
}

/* ---- 8: the console --------------------------------------------------------------- */

struct typed {
	char buf[64];
	size_t len;
	int lines;
};

static size_t con_input(void *ctx, const uint8_t *buf, size_t len)
{
	struct typed *t = ctx;

	for (size_t i = 0; i < len && t->len < sizeof(t->buf) - 1; i++) {
		t->buf[t->len++] = (char)buf[i];
		t->lines += buf[i] == '\n';
	}
	return len;
}

/* A user types line on fd (connected or still connecting): ms until the
 * guest's side has it, or -1. */
static double type_line(struct ev_loop *loop, int fd, struct typed *t, const char *line)
{
	uint64_t t0 = now_ns();
	int want = t->lines + 1;
	bool sent = false;

	while (t->lines < want && ms_since(t0) < GET_IN_MS) {
		if (!sent)
			sent = write(fd, line, strlen(line)) == (ssize_t)strlen(line);
		ev_run(loop, EVRUN_NOWAIT);
		usleep(100);
	}
	return t->lines == want ? ms_since(t0) : -1;
}

static void test_flood_console(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct typed t = { .len = 0 };
	struct console_ops ops = { .input = con_input, .ctx = &t };
	struct sockaddr_in sa = { .sin_family = AF_INET };
	struct console *con;
	struct flood f = { .n = 0 };
	double first, again;
	char buf[16];
	int fd, port;

	(void)state;
	assert_int_equal(console_open(loop, "tcp:127.0.0.1:0", &ops, &con), 0);
	port = console_port(con);
	flood_more(&f, loop, port, FLOOD);
	nt_run_for(loop, 50);
	/* A user after 200 idle clients: its line reaches the guest. */
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	assert_true(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 || errno == EINPROGRESS);
	first = type_line(loop, fd, &t, "hello\n");
	/* Typing, it keeps the console when more idle ones come. */
	flood_more(&f, loop, port, 20);
	nt_run_for(loop, 100);
	again = type_line(loop, fd, &t, "again\n");
	printf("console: a line typed after %d idle clients arrived in %.1f ms, the next one "
	       "after %d more in %.1f ms\n", FLOOD, first, 20, again);
	assert_true(first >= 0);
	assert_true(again >= 0);
	assert_string_equal(t.buf, "hello\nagain\n");
	assert_true(read(fd, buf, sizeof(buf)) < 0 && errno == EAGAIN); /* still connected */
	close(fd);
	flood_end(&f);
	console_free(con);
	ev_loop_destroy(loop);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_flood_tls_listener),
		cmocka_unit_test(test_flood_tcp_candidates),
		cmocka_unit_test(test_flood_metrics),
		cmocka_unit_test(test_flood_console),
	};

	return cmocka_run_group_tests(tests, nt_setup, nt_teardown);
}
