/* net/etcd: the client against a real etcd (the Debian etcd-server) on
 * loopback, a dead or silent endpoint, and a fake server that answers what
 * the gateway never would. Prints the lease expiry lag and the keepalive
 * round trip (figures, not assertions). */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <cmocka.h>

#include "kmod/log.h"
#include "net/etcd.h"
#include "tests/etcd_harness.h"
#include "tests/harness.h"
#include "tests/net_harness.h"

static double ms_since(uint64_t t0)
{
	return (double)(now_ns() - t0) / 1e6;
}

static int listen_any(int backlog, int *port)
{
	int fd = th_listen_any(backlog, port);

	assert_true(fd >= 0);
	return fd;
}

static int dead_port(void)
{
	return th_dead_port();
}

static struct etcd *client_ca(const char *endpoints, const char *ca_file, unsigned timeout_ms)
{
	struct etcd_config cfg = { .endpoints = endpoints, .ca_file = ca_file,
				   .timeout_ms = timeout_ms };
	struct etcd *e = NULL;

	assert_int_equal(etcd_new(&cfg, &e), 0);
	return e;
}

static struct etcd *client(const char *endpoints, unsigned timeout_ms)
{
	return client_ca(endpoints, NULL, timeout_ms);
}

static int server_start(void **state)
{
	*state = th_etcd_start(NULL, NULL);
	return *state ? 0 : -1;
}

static int server_stop(void **state)
{
	th_etcd_stop(*state);
	return 0;
}

/* ---- against etcd ---------------------------------------------------------- */

static void lease_grant_keepalive(void **state)
{
	struct etcd_server *s = *state;
	struct etcd *e = client(s->endpoint, 1000);
	int64_t id = 0, ttl = 0, left = 0;
	double rtt[50], tmp;
	int i, j;

	assert_int_equal(etcd_lease_grant(e, 3, &id, &ttl), 0);
	assert_true(id != 0);
	assert_true(ttl >= 3);
	assert_int_equal(etcd_lease_keepalive(e, id, &left), 0);
	assert_true(left >= 3 && left <= ttl);

	for (i = 0; i < 50; i++) {
		uint64_t t0 = now_ns();

		assert_int_equal(etcd_lease_keepalive(e, id, &left), 0);
		rtt[i] = ms_since(t0);
		assert_true(left > 0);
	}
	for (i = 1; i < 50; i++)
		for (j = i; j > 0 && rtt[j - 1] > rtt[j]; j--) {
			tmp = rtt[j];
			rtt[j] = rtt[j - 1];
			rtt[j - 1] = tmp;
		}
	printf("FIGURE keepalive round trip on loopback: median %.3f ms, min %.3f, max %.3f (50 calls, "
	       "one kept-alive connection)\n",
	       (rtt[24] + rtt[25]) / 2, rtt[0], rtt[49]);
	assert_int_equal(etcd_lease_revoke(e, id), 0);
	etcd_free(e);
}

static void lease_expiry(void **state)
{
	struct etcd_server *s = *state;
	struct etcd *e = client(s->endpoint, 1000);
	char key[64], v[16];
	double lag[6], tmp;
	int run, j;

	/* etcd revokes expired leases on a timer (500 ms in 3.4): the lag
	 * depends on where the expiry falls in its period, so the grants start
	 * at spread-out phases. */
	for (run = 0; run < 6; run++) {
		int64_t id, ttl, left = -1, lease = 0;
		struct etcd_put put;
		uint64_t t_granted;
		int r;

		snprintf(key, sizeof(key), "/t/expiry/%d", run);
		usleep((useconds_t)run * 83000);
		assert_int_equal(etcd_lease_grant(e, 1, &id, &ttl), 0);
		t_granted = now_ns();
		put = (struct etcd_put){ key, "owner", id };
		assert_int_equal(etcd_txn(e, NULL, 0, &put, 1), 1);
		assert_int_equal(etcd_get(e, key, v, sizeof(v), &lease), 1);
		assert_string_equal(v, "owner");
		assert_int_equal(lease, id);
		/* Poll until etcd deleted the key; the lease ran out at ttl. */
		while ((r = etcd_get(e, key, v, sizeof(v), NULL)) == 1) {
			assert_true(ms_since(t_granted) < (double)ttl * 1000 + 5000);
			usleep(5000);
		}
		assert_int_equal(r, 0);
		lag[run] = ms_since(t_granted) - (double)ttl * 1000;
		/* Not deleted early (a little slack for our clock being late). */
		assert_true(lag[run] > -50);
		assert_int_equal(etcd_lease_keepalive(e, id, &left), 0);
		assert_int_equal(left, 0);
	}
	for (run = 1; run < 6; run++)
		for (j = run; j > 0 && lag[j - 1] > lag[j]; j--) {
			tmp = lag[j];
			lag[j] = lag[j - 1];
			lag[j - 1] = tmp;
		}
	printf("FIGURE key deleted after its lease's TTL (1 s) plus %.0f, %.0f, %.0f, %.0f, %.0f, "
	       "%.0f ms (6 runs, sorted; measured from the grant's answer, polled every 5 ms)\n",
	       lag[0], lag[1], lag[2], lag[3], lag[4], lag[5]);
	etcd_free(e);
}

static void txn_create_if_absent(void **state)
{
	struct etcd_server *s = *state;
	struct etcd *a = client(s->endpoint, 1000), *b = client(s->endpoint, 1000);
	const char *k = "/t/owner";
	struct etcd_cmp absent = { k, NULL };
	struct etcd_put pa = { k, "A:1", 0 }, pb = { k, "B", 0 };
	char v[16];

	assert_int_equal(etcd_txn(a, &absent, 1, &pa, 1), 1);
	assert_int_equal(etcd_txn(b, &absent, 1, &pb, 1), 0);
	assert_int_equal(etcd_txn(a, &absent, 1, &pa, 1), 0);
	assert_int_equal(etcd_get(b, k, v, sizeof(v), NULL), 1);
	assert_string_equal(v, "A:1");
	/* Deleted, it is absent again. */
	assert_int_equal(etcd_delete(a, k), 0);
	assert_int_equal(etcd_delete(a, k), 0);
	assert_int_equal(etcd_get(a, k, v, sizeof(v), NULL), 0);
	assert_int_equal(etcd_txn(b, &absent, 1, &pb, 1), 1);
	assert_int_equal(etcd_get(a, k, v, sizeof(v), NULL), 1);
	assert_string_equal(v, "B");
	assert_int_equal(etcd_delete(a, k), 0);
	etcd_free(a);
	etcd_free(b);
}

static void txn_value_compare(void **state)
{
	struct etcd_server *s = *state;
	struct etcd *e = client(s->endpoint, 1000);
	const char *k = "/t/epoch", *k2 = "/t/epoch-owner";
	struct etcd_put init = { k, "7", 0 };
	struct etcd_cmp is7 = { k, "7" }, is8 = { k, "8" }, is70 = { k, "70" };
	struct etcd_put to8[2] = { { k, "8", 0 }, { k2, "B", 0 } }, to9 = { k, "9", 0 };
	char v[4];

	assert_int_equal(etcd_txn(e, NULL, 0, &init, 1), 1);
	assert_int_equal(etcd_txn(e, &is70, 1, &to9, 1), 0);
	assert_int_equal(etcd_txn(e, &is8, 1, &to9, 1), 0);
	assert_int_equal(etcd_get(e, k, v, sizeof(v), NULL), 1);
	assert_string_equal(v, "7");
	/* Two puts in one transaction, both done. */
	assert_int_equal(etcd_txn(e, &is7, 1, to8, 2), 1);
	assert_int_equal(etcd_get(e, k, v, sizeof(v), NULL), 1);
	assert_string_equal(v, "8");
	assert_int_equal(etcd_get(e, k2, v, sizeof(v), NULL), 1);
	assert_string_equal(v, "B");
	/* The old value no longer matches. */
	assert_int_equal(etcd_txn(e, &is7, 1, &to9, 1), 0);
	/* Two compares: both must hold. */
	{
		struct etcd_cmp both[2] = { { k, "8" }, { k2, "A" } }, both_ok[2] = { { k, "8" }, { k2, "B" } };

		assert_int_equal(etcd_txn(e, both, 2, &to9, 1), 0);
		assert_int_equal(etcd_txn(e, both_ok, 2, &to9, 1), 1);
	}
	/* A value compare on an absent key fails. */
	{
		struct etcd_cmp ghost = { "/t/ghost", "x" };

		assert_int_equal(etcd_txn(e, &ghost, 1, &to9, 1), 0);
	}
	/* Bytes JSON would need to escape, and UTF-8, pass as they are. */
	{
		const char *odd = "q\"\\/\t\u00e9}", *ko = "/t/\"odd\"\\key";
		struct etcd_put p = { ko, odd, 0 };
		struct etcd_cmp c = { ko, odd };
		char got[32];

		assert_int_equal(etcd_txn(e, NULL, 0, &p, 1), 1);
		assert_int_equal(etcd_get(e, ko, got, sizeof(got), NULL), 1);
		assert_string_equal(got, odd);
		assert_int_equal(etcd_txn(e, &c, 1, &p, 1), 1);
		assert_int_equal(etcd_delete(e, ko), 0);
	}
	/* The value is truncated to the buffer, still NUL-terminated. */
	assert_int_equal(etcd_get(e, k, v, 1, NULL), 1);
	assert_string_equal(v, "");
	assert_int_equal(etcd_delete(e, k), 0);
	assert_int_equal(etcd_delete(e, k2), 0);
	etcd_free(e);
}

static void revoke_deletes_keys(void **state)
{
	struct etcd_server *s = *state;
	struct etcd *e = client(s->endpoint, 1000);
	int64_t id, ttl, lease = 0, left = -1;
	struct etcd_put put[2] = { { "/t/r1", "x", 0 }, { "/t/r2", "y", 0 } };
	char v[8];

	assert_int_equal(etcd_lease_grant(e, 60, &id, &ttl), 0);
	put[0].lease = put[1].lease = id;
	assert_int_equal(etcd_txn(e, NULL, 0, put, 2), 1);
	assert_int_equal(etcd_get(e, "/t/r2", v, sizeof(v), &lease), 1);
	assert_int_equal(lease, id);
	assert_int_equal(etcd_lease_revoke(e, id), 0);
	assert_int_equal(etcd_get(e, "/t/r1", v, sizeof(v), NULL), 0);
	assert_int_equal(etcd_get(e, "/t/r2", v, sizeof(v), NULL), 0);
	assert_int_equal(etcd_lease_keepalive(e, id, &left), 0);
	assert_int_equal(left, 0);
	/* Revoked twice, or never granted: not an error. */
	assert_int_equal(etcd_lease_revoke(e, id), 0);
	assert_int_equal(etcd_lease_revoke(e, 0x1234567), 0);
	/* A put on a lease that is gone is etcd's error. */
	assert_int_equal(etcd_txn(e, NULL, 0, put, 1), -EPROTO);
	assert_int_equal(etcd_get(e, "/t/absent", v, sizeof(v), NULL), 0);
	etcd_free(e);
}

static void failover(void **state)
{
	struct etcd_server *s = *state;
	char list[160];
	struct etcd *e;
	int64_t id, ttl, left;
	uint64_t t0;
	char v[8];

	snprintf(list, sizeof(list), "127.0.0.1:%d,http://%s", dead_port(), s->endpoint);
	e = client(list, 1000);
	t0 = now_ns();
	assert_int_equal(etcd_lease_grant(e, 5, &id, &ttl), 0);
	assert_int_equal(etcd_lease_keepalive(e, id, &left), 0);
	assert_true(left > 0);
	assert_int_equal(etcd_get(e, "/t/none", v, sizeof(v), NULL), 0);
	assert_int_equal(etcd_lease_revoke(e, id), 0);
	printf("failover past a refusing endpoint: 4 calls in %.1f ms\n", ms_since(t0));
	assert_true(ms_since(t0) < 1000);
	etcd_free(e);

	/* A silent endpoint first (accepts, never answers): the live one is
	 * still reached within the timeout, and remembered. */
	{
		int port, fd = listen_any(64, &port);
		double first;

		snprintf(list, sizeof(list), "127.0.0.1:%d,%s", port, s->endpoint);
		e = client(list, 1000);
		t0 = now_ns();
		assert_int_equal(etcd_get(e, "/t/none", v, sizeof(v), NULL), 0);
		first = ms_since(t0);
		assert_true(first < 1100);
		t0 = now_ns();
		assert_int_equal(etcd_get(e, "/t/none", v, sizeof(v), NULL), 0);
		printf("past a silent endpoint: first call %.0f ms, next %.2f ms\n", first,
		       ms_since(t0));
		assert_true(ms_since(t0) < 200);
		etcd_free(e);
		close(fd);
	}
}

/* ---- no etcd at all ---------------------------------------------------------- */

static void all_dead(void **state)
{
	char list[80];
	struct etcd *e;
	int64_t id, ttl;
	uint64_t t0;
	double ms;
	int port, fd;

	(void)state;
	snprintf(list, sizeof(list), "127.0.0.1:%d,127.0.0.1:%d", dead_port(), dead_port());
	e = client(list, 300);
	t0 = now_ns();
	assert_int_equal(etcd_lease_grant(e, 5, &id, &ttl), -ECONNREFUSED);
	assert_true(ms_since(t0) < 350);
	etcd_free(e);

	/* Accepted but never answered: the timeout bounds the call. */
	fd = listen_any(64, &port);
	snprintf(list, sizeof(list), "127.0.0.1:%d,127.0.0.1:%d", port, port);
	e = client(list, 300);
	t0 = now_ns();
	assert_int_equal(etcd_lease_keepalive(e, 42, &ttl), -ETIMEDOUT);
	ms = ms_since(t0);
	printf("silent endpoints, timeout 300 ms: call failed after %.0f ms\n", ms);
	assert_true(ms >= 250 && ms < 450);
	etcd_free(e);
	close(fd);
}

static void bad_endpoints(void **state)
{
	static const char *bad[] = {
		"", ",", "127.0.0.1:2379,", ",127.0.0.1:2379", "127.0.0.1", "127.0.0.1:",
		"127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:99999999", "127.0.0.1:-1",
		"127.0.0.1:23x", ":2379", "a%b:1", "a/b:1", "a b:1", "a?b:1", "ftp://127.0.0.1:2379", "http://", "https://:1",
		"http://127.0.0.1:2379/v3", "127.0.0.1: 2379", "user@host:1",
		"a:1,b:2,c:3,d:4,e:5,f:6,g:7,h:8,i:9",
	};
	struct etcd_config cfg = { .timeout_ms = 100 };
	struct etcd *e = NULL;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cfg.endpoints = bad[i];
		if (etcd_new(&cfg, &e) != -EINVAL)
			fail_msg("endpoints '%s' accepted", bad[i]);
	}
	cfg.endpoints = NULL;
	assert_int_equal(etcd_new(&cfg, &e), -EINVAL);
	/* The good ones. */
	cfg.endpoints = "a:1,b:2,c:3,d:4,e:5,f:6,g:7,h:8";
	assert_int_equal(etcd_new(&cfg, &e), 0);
	etcd_free(e);
	cfg.endpoints = "https://etcd.example:2379,http://[::1]:2379,10.0.0.1:65535";
	cfg.ca_file = "/nonexistent/ca.pem";
	assert_int_equal(etcd_new(&cfg, &e), 0);
	etcd_free(e);
}

/* ---- a fake server: whatever bytes it is told ---------------------------- */

struct fake {
	int fd, port, stop[2];
	pthread_t thread;
	pthread_mutex_t lock;
	char *answer;        /* sent whole to each connection, which then closes */
	size_t len;
	int conns;
};

static void *fake_run(void *arg)
{
	struct fake *f = arg;
	char buf[4096];

	for (;;) {
		struct pollfd p[2] = { { f->fd, POLLIN, 0 }, { f->stop[0], POLLIN, 0 } };
		int c;

		if (poll(p, 2, -1) < 0 || p[1].revents)
			return NULL;
		c = accept(f->fd, NULL, NULL);
		if (c < 0)
			continue;
		/* Reads the request (headers, then Content-Length bytes), answers. */
		{
			struct pollfd q = { c, POLLIN, 0 };
			size_t got = 0, want = sizeof(buf) - 1;
			ssize_t n;
			char *h, *cl;

			while (got < want && poll(&q, 1, 1000) > 0 &&
			       (n = read(c, buf + got, sizeof(buf) - 1 - got)) > 0) {
				got += (size_t)n;
				buf[got] = 0;
				h = strstr(buf, "\r\n\r\n");
				cl = strcasestr(buf, "Content-Length:");
				if (h && cl)
					want = (size_t)(h + 4 - buf) + strtoul(cl + 15, NULL, 10);
			}
		}
		pthread_mutex_lock(&f->lock);
		f->conns++;
		if (f->len && send(c, f->answer, f->len, MSG_NOSIGNAL) < 0)
			perror("fake send");
		pthread_mutex_unlock(&f->lock);
		shutdown(c, SHUT_WR);
		close(c);
	}
}

static void fake_answer(struct fake *f, const char *bytes, size_t len)
{
	pthread_mutex_lock(&f->lock);
	free(f->answer);
	f->answer = malloc(len + 1);
	assert_non_null(f->answer);
	memcpy(f->answer, bytes, len);
	f->len = len;
	pthread_mutex_unlock(&f->lock);
}

/* An HTTP answer with status and body. */
static void fake_http(struct fake *f, int status, const char *body, size_t len)
{
	char *s = NULL;
	int n = asprintf(&s, "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
			     "Connection: close\r\n\r\n", status, len);

	assert_true(n > 0);
	s = realloc(s, (size_t)n + len);
	assert_non_null(s);
	memcpy(s + n, body, len);
	fake_answer(f, s, (size_t)n + len);
	free(s);
}

static void fake_start(struct fake *f)
{
	memset(f, 0, sizeof(*f));
	pthread_mutex_init(&f->lock, NULL);
	f->fd = listen_any(64, &f->port);
	assert_int_equal(pipe(f->stop), 0);
	assert_int_equal(pthread_create(&f->thread, NULL, fake_run, f), 0);
}

static void fake_stop(struct fake *f)
{
	assert_int_equal(write(f->stop[1], "x", 1), 1);
	pthread_join(f->thread, NULL);
	close(f->fd);
	close(f->stop[0]);
	close(f->stop[1]);
	free(f->answer);
	pthread_mutex_destroy(&f->lock);
}

/* Every call against the fake's current answer; each must fail with
 * -EPROTO (or, for answers a call may legitimately accept, succeed). */
static void calls_fail(struct etcd *e, const char *what, int err)
{
	int64_t id, ttl;
	struct etcd_cmp c = { "/k", NULL };
	struct etcd_put p = { "/k", "v", 0 };
	char v[8];

	int r;

	if ((r = etcd_lease_grant(e, 5, &id, &ttl)) != err)
		fail_msg("grant: %d on %s", r, what);
	if ((r = etcd_lease_keepalive(e, 5, &ttl)) != err)
		fail_msg("keepalive: %d on %s", r, what);
	if ((r = etcd_get(e, "/k", v, sizeof(v), NULL)) != err)
		fail_msg("get: %d on %s", r, what);
	if ((r = etcd_txn(e, &c, 1, &p, 1)) != err)
		fail_msg("txn: %d on %s", r, what);
	if ((r = etcd_lease_revoke(e, 5)) != err)
		fail_msg("revoke: %d on %s", r, what);
	if ((r = etcd_delete(e, "/k")) != err)
		fail_msg("delete: %d on %s", r, what);
}

static void calls_refuse(struct etcd *e, const char *what)
{
	calls_fail(e, what, -EPROTO);
}

static uint64_t rnd(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static void fake_server(void **state)
{
	/* What the gateway answers (seen from etcd 3.4), mutated below. */
	static const char *valid[] = {
		"{\"header\":{\"cluster_id\":\"14841639068965178418\",\"member_id\":\"10276657743932975437\","
		"\"revision\":\"12\",\"raft_term\":\"2\"},\"ID\":\"7587870539048414743\",\"TTL\":\"5\"}",
		"{\"result\":{\"header\":{\"cluster_id\":\"1\",\"revision\":\"12\"},\"ID\":\"5\","
		"\"TTL\":\"5\"}}\n",
		"{\"header\":{\"revision\":\"12\"},\"kvs\":[{\"key\":\"L2s=\",\"create_revision\":\"3\","
		"\"mod_revision\":\"3\",\"version\":\"1\",\"value\":\"dmFsdWU=\",\"lease\":\"5\"}],"
		"\"count\":\"1\"}",
		"{\"header\":{\"revision\":\"13\"},\"succeeded\":true,\"responses\":[{\"response_put\":"
		"{\"header\":{\"revision\":\"13\"}}}]}",
		"{\"header\":{\"revision\":\"14\"},\"deleted\":\"1\"}",
		"{\"error\":\"etcdserver: requested lease not found\",\"code\":5,"
		"\"message\":\"etcdserver: requested lease not found\"}",
	};
	static const char *bodies[] = {
		"",
		"{",
		"{\"header\":{},\"ID\":\"12",
		"[]",
		"\"result\"",
		"{\"header\":{}} trailing",
		"{\"header\":\"x\",\"kvs\":[],\"ID\":\"1\",\"TTL\":\"1\",\"succeeded\":true,\"deleted\":\"1\","
		"\"result\":{\"header\":\"x\",\"TTL\":\"1\"}}",
		"{\"ID\":\"abc\",\"TTL\":\"5x\",\"kvs\":[{\"key\":\"L2s=\"},{\"key\":\"L2s=\"}],"
		"\"succeeded\":\"yes\",\"deleted\":\"1e3\",\"result\":{\"TTL\":\"-1\"},\"header\":[]}",
		"{\"ID\":\"99999999999999999999\",\"TTL\":{},\"kvs\":[{\"key\":\"L2s\"}],"
		"\"succeeded\":1,\"deleted\":\"-5\",\"result\":{\"TTL\":true},\"header\":1}",
		"{\"ID\":\"1\",\"TTL\":\"0\",\"kvs\":{},\"result\":[],\"succeeded\":null,"
		"\"deleted\":\"2\",\"header\":null}",
		"{\"ID\":\"1\",\"TTL\":\"5\",\"error\":\"lease grant refused\",\"kvs\":[{\"key\":\"L2s=\","
		"\"value\":\"AA==\"}],\"result\":{\"ID\":\"6\",\"TTL\":\"5\"},\"header\":true,"
		"\"deleted\":\" 1\"}",
	};
	struct fake f;
	struct etcd *e;
	char list[64], what[64];
	uint64_t seed = th_seed(), x = seed | 1;
	size_t i;
	int round, taken = 0;

	(void)state;
	fake_start(&f);
	snprintf(list, sizeof(list), "127.0.0.1:%d", f.port);
	e = client(list, 500);

	/* Not HTTP at all. */
	fake_answer(&f, "garbage\r\n\r\n", 11);
	calls_refuse(e, "garbage");
	/* HTTP, but bodies the gateway never sends. */
	for (i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
		fake_http(&f, 200, bodies[i], strlen(bodies[i]));
		snprintf(what, sizeof(what), "body %zu", i);
		calls_refuse(e, what);
	}
	/* The gateway's error answer. */
	{
		const char *err = "{\"error\":\"etcdserver: boom\",\"code\":3,\"message\":\"etcdserver: boom\"}";

		fake_http(&f, 400, err, strlen(err));
		calls_refuse(e, "an error answer");
	}
	/* Cut short: Content-Length promises more than comes, the connection
	 * ends. That is the endpoint going away, not a bad answer. */
	fake_answer(&f, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"header\":{}", 52);
	calls_fail(e, "a cut answer", -EHOSTUNREACH);
	/* Too long an answer. */
	{
		size_t n = 2u << 20;
		char *big = malloc(n);

		assert_non_null(big);
		memset(big, ' ', n);
		big[0] = '{';
		big[n - 1] = '}';
		fake_http(&f, 200, big, n);
		free(big);
		calls_refuse(e, "2 MiB");
	}
	/* 5xx: the endpoint is there but cannot serve; tried, then given up. */
	{
		const char *err = "{\"error\":\"etcdserver: no leader\",\"code\":14}";
		int64_t ttl;

		fake_http(&f, 503, err, strlen(err));
		assert_int_equal(etcd_lease_keepalive(e, 1, &ttl), -EHOSTUNREACH);
	}
	/* Random bytes, raw; then real answers with a few bytes changed or cut
	 * short: any result but no crash (ASan: make SAN=1). */
	for (round = 0; round < 400; round++) {
		char buf[512];
		size_t n, k, m;
		int64_t id, ttl;
		struct etcd_cmp c = { "/k", "v" };
		struct etcd_put p = { "/k", "v", 0 };

		if (round < 100) {
			n = (size_t)(rnd(&x) % sizeof(buf));
			for (k = 0; k < n; k++)
				buf[k] = (char)rnd(&x);
			fake_answer(&f, buf, n);
		} else {
			const char *t = valid[rnd(&x) % (sizeof(valid) / sizeof(valid[0]))];

			n = strlen(t);
			memcpy(buf, t, n);
			for (m = 1 + rnd(&x) % 4; m; m--) {
				k = (size_t)(rnd(&x) % n);
				if (rnd(&x) % 8 == 0)
					n = k;
				else if (n)
					buf[k] = rnd(&x) % 2 ? (char)rnd(&x) :
					      "{}[]\":,0123456789ATL-=\\ \0"[rnd(&x) % 24];
				if (!n)
					break;
			}
			fake_http(&f, 200, buf, n);
		}
		taken += etcd_lease_grant(e, 5, &id, &ttl) >= 0;
		taken += etcd_lease_keepalive(e, 5, &ttl) >= 0;
		taken += etcd_get(e, "/k", buf, sizeof(buf), &id) >= 0;
		taken += etcd_txn(e, &c, 1, &p, 1) >= 0;
		taken += etcd_delete(e, "/k") >= 0;
		taken += etcd_lease_revoke(e, 5) >= 0;
	}
	printf("fake server: %d connections; of 2400 calls on random answers %d took theirs; "
	       "seed %llu\n", f.conns, taken, (unsigned long long)seed);
	etcd_free(e);
	fake_stop(&f);
}

/* ---- TLS ----------------------------------------------------------------- */

/* Certificates (tests/mkcerts.sh), one more whose only name is localhost,
 * and etcd serving it on https. */
static int tls_start(void **state)
{
	char cmd[1200];
	const char *d;

	if (nt_setup(state))
		return -1;
	d = nt_cert_dir;
	snprintf(cmd, sizeof(cmd),
		 "cd '%s' && printf 'extendedKeyUsage=serverAuth\\nsubjectAltName=DNS:localhost\\n"
		 "basicConstraints=CA:FALSE\\n' >named.ext && "
		 "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost "
		 "-keyout named.key -out named.csr 2>/dev/null && "
		 "openssl x509 -req -in named.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 "
		 "-extfile named.ext -out named.pem 2>/dev/null",
		 d);
	if (system(cmd)) {
		fprintf(stderr, "could not make the localhost certificate\n");
		return -1;
	}
	*state = th_etcd_start(d, nt_cert("ca.pem"));
	return *state ? 0 : -1;
}

static int tls_stop(void **state)
{
	server_stop(state);
	return nt_teardown(state);
}

static void tls(void **state)
{
	struct etcd_server *s = *state;
	char list[96];
	struct etcd *e;
	int64_t id, ttl, left;
	int r;

	/* Verified: the CA signed it and the name is the certificate's. */
	e = client_ca(s->endpoint, nt_cert("ca.pem"), 1000);
	assert_int_equal(etcd_lease_grant(e, 5, &id, &ttl), 0);
	assert_int_equal(etcd_lease_keepalive(e, id, &left), 0);
	assert_true(left > 0);
	assert_int_equal(etcd_lease_revoke(e, id), 0);
	etcd_free(e);

	/* Another CA: refused. */
	e = client_ca(s->endpoint, nt_cert("other-ca.pem"), 500);
	r = etcd_lease_grant(e, 5, &id, &ttl);
	assert_int_equal(r, -EHOSTUNREACH);
	etcd_free(e);
	/* No CA given: the system's do not know ours. */
	e = client_ca(s->endpoint, NULL, 500);
	assert_int_equal(etcd_lease_grant(e, 5, &id, &ttl), -EHOSTUNREACH);
	etcd_free(e);

	/* The right CA but a name the certificate does not carry. */
	snprintf(list, sizeof(list), "https://127.0.0.1:%d", s->port);
	e = client_ca(list, nt_cert("ca.pem"), 500);
	assert_int_equal(etcd_lease_grant(e, 5, &id, &ttl), -EHOSTUNREACH);
	etcd_free(e);

	/* Plain HTTP to the TLS port: not the gateway's answer. */
	snprintf(list, sizeof(list), "http://127.0.0.1:%d", s->port);
	e = client_ca(list, nt_cert("ca.pem"), 500);
	r = etcd_lease_grant(e, 5, &id, &ttl);
	printf("plain HTTP to etcd's TLS port: %s\n", strerror(-r));
	assert_true(r == -EPROTO || r == -EHOSTUNREACH);
	etcd_free(e);

	/* A refused TLS endpoint first, then the good one. */
	snprintf(list, sizeof(list), "https://127.0.0.1:%d,%s", s->port, s->endpoint);
	e = client_ca(list, nt_cert("ca.pem"), 1000);
	assert_int_equal(etcd_lease_grant(e, 5, &id, &ttl), 0);
	assert_int_equal(etcd_lease_revoke(e, id), 0);
	etcd_free(e);
}

int main(void)
{
	const struct CMUnitTest offline[] = {
		cmocka_unit_test(bad_endpoints),
		cmocka_unit_test(all_dead),
		cmocka_unit_test(fake_server),
	};
	const struct CMUnitTest live[] = {
		cmocka_unit_test(lease_grant_keepalive),
		cmocka_unit_test(txn_create_if_absent),
		cmocka_unit_test(txn_value_compare),
		cmocka_unit_test(revoke_deletes_keys),
		cmocka_unit_test(failover),
		cmocka_unit_test(lease_expiry),
	};
	const struct CMUnitTest secure[] = {
		cmocka_unit_test(tls),
	};
	int r;

	log_set_level(getenv("ETCD_TEST_LOG") ? LOG_DEBUG : LOG_ERROR);
	signal(SIGPIPE, SIG_IGN);
	if (!th_etcd_installed()) {
		printf("SKIP: etcd-server not installed\n");
		return 77;
	}
	r = cmocka_run_group_tests_name("etcd offline", offline, NULL, NULL);
	r |= cmocka_run_group_tests_name("etcd live", live, server_start, server_stop);
	r |= cmocka_run_group_tests_name("etcd tls", secure, tls_start, tls_stop);
	return r;
}
