/* replication/witness: the witness module against a real etcd (the Debian
 * etcd-server) on loopback, driven as the agents drive it, with real
 * faults: etcd stopped (SIGSTOP) past the lease, an owner that stops
 * renewing (its lease runs out, as after kill -9), a loop that hangs.
 *   - a fresh primary refuses to start while K/standby names a standby;
 *   - a switchover's winner vouches for the old primary in the same
 *     transaction, so that the old primary can win the key if it dies;
 *   - an owner that vouches for nobody re-takes the key after an etcd
 *     outage longer than its lease; one that vouches for a standby does not;
 *   - an owner whose loop hangs stops renewing and loses the key. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "kmod/log.h"
#include "net/etcd.h"
#include "replication/witness.h"
#include "tests/etcd_harness.h"

#define LEASE_MS 1000

struct env {
	struct etcd_server *srv;
	struct ev_loop *loop;
	struct etcd *e;              /* a client of our own, to look and to write */
};

/* What the callbacks saw. */
struct seen {
	int vouched, withdrawn, lost, won, revoked;
};

static void on_vouched(void *ctx) { ((struct seen *)ctx)->vouched++; }
static void on_withdrawn(void *ctx) { ((struct seen *)ctx)->withdrawn++; }
static void on_lost(void *ctx) { ((struct seen *)ctx)->lost++; }
static void on_won(void *ctx) { ((struct seen *)ctx)->won++; }
static void on_revoked(void *ctx) { ((struct seen *)ctx)->revoked++; }

static struct repl_witness *witness(struct env *v, const char *key, const char *self,
				    struct seen *seen)
{
	struct repl_witness_opts o = { .endpoints = v->srv->endpoint, .key = key,
				       .lease_ms = LEASE_MS };
	struct repl_witness *w = NULL;

	assert_int_equal(repl_witness_new(v->loop, &o, self, &w), 0);
	repl_witness_set_cbs(w, &(struct repl_witness_cbs){
		.vouched = on_vouched, .withdrawn = on_withdrawn, .lost = on_lost, .won = on_won,
		.revoked = on_revoked, .ctx = seen });
	return w;
}

static void on_break(struct ev_loop *loop, ev_timer *t, int revents)
{
	(void)t;
	(void)revents;
	ev_break(loop, EVBREAK_ONE);
}

/* Runs the loop for ms (the witness's timers and callbacks run). */
static void run_for(struct env *v, int ms)
{
	ev_timer t;

	ev_timer_init(&t, on_break, ms / 1e3, 0);
	ev_timer_start(v->loop, &t);
	ev_run(v->loop, 0);
	ev_timer_stop(v->loop, &t);
}

/* Runs the loop until *flag or timeout_ms; the ms it took (-1: timed out). */
static int run_until(struct env *v, const int *flag, int timeout_ms)
{
	uint64_t t0 = now_ns();

	while (!*flag && (now_ns() - t0) / 1000000 < (uint64_t)timeout_ms)
		run_for(v, 10);
	return *flag ? (int)((now_ns() - t0) / 1000000) : -1;
}

/* The value of key at etcd ("" when absent). */
static const char *get(struct env *v, const char *key, char *buf, size_t len)
{
	int r = etcd_get(v->e, key, buf, len, NULL);

	assert_true(r >= 0);
	if (r == 0)
		buf[0] = 0;
	return buf;
}

/* Waits (loop running) until key is absent at etcd: the ms it took, -1 if
 * it stayed for timeout_ms. */
static int until_absent(struct env *v, const char *key, int timeout_ms)
{
	uint64_t t0 = now_ns();
	char buf[REPL_WITNESS_ID_MAX];

	while ((now_ns() - t0) / 1000000 < (uint64_t)timeout_ms) {
		if (!get(v, key, buf, sizeof(buf))[0])
			return (int)((now_ns() - t0) / 1000000);
		run_for(v, 20);
	}
	return -1;
}

static int setup(void **state)
{
	struct env *v = calloc(1, sizeof(*v));
	struct etcd_config ec = { .timeout_ms = 1000 };

	if (!v || !(v->srv = th_etcd_start(NULL, NULL)))
		return -1;
	ec.endpoints = v->srv->endpoint;
	v->loop = ev_loop_new(EVFLAG_AUTO);
	if (!v->loop || etcd_new(&ec, &v->e) < 0)
		return -1;
	*state = v;
	return 0;
}

static int teardown(void **state)
{
	struct env *v = *state;

	if (!v)
		return 0;
	etcd_free(v->e);
	ev_loop_destroy(v->loop);
	th_etcd_stop(v->srv);
	free(v);
	return 0;
}

/* A primary owns the key and vouches for its standby, then dies (its
 * thread stops renewing: the lease runs out as after kill -9). A restarted
 * primary must not take the key while the standby is vouched for: it would
 * tell the standby to stand down and throw the only copy away. The standby
 * then wins the key. With K/standby "none" (or absent) a primary starts. */
static void restart_refused_while_standby_vouched(void **state)
{
	struct env *v = *state;
	struct seen sa = { 0 }, sb = { 0 }, ss = { 0 };
	struct repl_witness *a = witness(v, "t1", "primary a", &sa), *b, *s;
	char err[400], buf[REPL_WITNESS_ID_MAX];
	int r;

	assert_int_equal(repl_witness_acquire(a, err, sizeof(err)), 0);
	assert_int_equal(repl_witness_start(a), 0);
	repl_witness_vouch(a, "standby-1");
	assert_true(run_until(v, &sa.vouched, 5000) >= 0);
	assert_string_equal(get(v, "t1/standby", buf, sizeof(buf)), "standby-1");
	repl_witness_stop(a);                     /* a dies */
	assert_true(until_absent(v, "t1/owner", 5000) >= 0);

	b = witness(v, "t1", "primary b", &sb);   /* the unit restarts it */
	r = repl_witness_acquire(b, err, sizeof(err));
	printf("restarted primary: %d (%s)\n", r, err);
	assert_int_equal(r, -EBUSY);
	assert_non_null(strstr(err, "standby-1"));
	assert_non_null(strstr(err, "understudy takeover"));
	assert_string_equal(get(v, "t1/owner", buf, sizeof(buf)), "");
	assert_string_equal(get(v, "t1/standby", buf, sizeof(buf)), "standby-1");

	s = witness(v, "t1", "secondary s", &ss);  /* the standby still can win */
	assert_int_equal(repl_witness_start(s), 0);
	repl_witness_contend(s, "standby-1", NULL);
	assert_true(run_until(v, &ss.won, 15000) >= 0);
	assert_int_equal(ss.revoked, 0);
	assert_true(repl_witness_valid(s));
	assert_string_equal(get(v, "t1/owner", buf, sizeof(buf)), "secondary s");
	repl_witness_release(s, false);

	/* Nobody vouched for ("none" as the winner wrote it, or never written):
	 * a fresh primary starts. */
	assert_int_equal(repl_witness_acquire(b, err, sizeof(err)), 0);
	repl_witness_release(b, true);
	assert_int_equal(etcd_delete(v->e, "t1/standby"), 0);
	assert_int_equal(repl_witness_acquire(b, err, sizeof(err)), 0);
	assert_string_equal(get(v, "t1/standby", buf, sizeof(buf)), "none");
	repl_witness_release(b, true);
	repl_witness_free(a);
	repl_witness_free(b);
	repl_witness_free(s);
}

/* A switchover: the old owner resigns, the new one wins the key with the
 * old one's new standby token vouched for in the same transaction. If the
 * new owner dies before it protects the guest, the old one (which holds
 * the switch epoch, and nothing after it was released) wins the key. */
static void switch_vouches_old_primary(void **state)
{
	struct env *v = *state;
	struct seen sa = { 0 }, sb = { 0 }, sa2 = { 0 };
	struct repl_witness *a = witness(v, "t2", "primary a", &sa);
	struct repl_witness *b = witness(v, "t2", "secondary b", &sb), *a2;
	char err[400], buf[REPL_WITNESS_ID_MAX];

	assert_int_equal(repl_witness_acquire(a, err, sizeof(err)), 0);
	assert_int_equal(repl_witness_start(a), 0);
	assert_int_equal(repl_witness_start(b), 0);
	repl_witness_vouch(a, "standby-b");
	assert_true(run_until(v, &sa.vouched, 5000) >= 0);
	repl_witness_resign(a);                   /* the final epoch was acknowledged */
	repl_witness_contend(b, "standby-b", "standby-a2");
	assert_true(run_until(v, &sb.won, 15000) >= 0);
	assert_string_equal(get(v, "t2/owner", buf, sizeof(buf)), "secondary b");
	assert_string_equal(get(v, "t2/standby", buf, sizeof(buf)), "standby-a2");
	assert_false(repl_witness_retakes(b));    /* it vouches for a standby */

	repl_witness_stop(b);                     /* b dies before it protected the guest */
	a2 = witness(v, "t2", "secondary a", &sa2);
	assert_int_equal(repl_witness_start(a2), 0);
	repl_witness_contend(a2, "standby-a2", NULL);
	assert_true(run_until(v, &sa2.won, 15000) >= 0);
	assert_int_equal(sa2.revoked, 0);
	assert_string_equal(get(v, "t2/owner", buf, sizeof(buf)), "secondary a");
	repl_witness_release(a2, true);
	repl_witness_free(a);
	repl_witness_free(b);
	repl_witness_free(a2);
}

/* Waits until w is valid again (the loop running): the ms, -1 if not within timeout_ms. */
static int until_valid(struct env *v, struct repl_witness *w, int timeout_ms)
{
	uint64_t t0 = now_ns();

	while ((now_ns() - t0) / 1000000 < (uint64_t)timeout_ms) {
		if (repl_witness_valid(w))
			return (int)((now_ns() - t0) / 1000000);
		run_for(v, 10);
	}
	return -1;
}

/* etcd stopped (SIGSTOP) for 2.5 s, longer than the 1 s lease. The owner
 * that vouches for nobody (unprotected: the only copy) gets the key back
 * once etcd answers; the one that vouches for a standby does not (its
 * standby may win the key: a protected pair fences as before). */
static void outage_retakes_unprotected_owner(void **state)
{
	struct env *v = *state;
	struct seen su = { 0 }, sp = { 0 };
	struct repl_witness *u = witness(v, "t3u", "primary u", &su);
	struct repl_witness *p = witness(v, "t3p", "primary p", &sp);
	char err[400], buf[REPL_WITNESS_ID_MAX];
	uint64_t t0;
	int ms;

	assert_int_equal(repl_witness_acquire(u, err, sizeof(err)), 0);
	assert_int_equal(repl_witness_acquire(p, err, sizeof(err)), 0);
	assert_int_equal(repl_witness_start(u), 0);
	assert_int_equal(repl_witness_start(p), 0);
	repl_witness_vouch(p, "standby-p");
	assert_true(run_until(v, &sp.vouched, 5000) >= 0);
	/* u ran protected once and withdrew its standby: it vouches for nobody. */
	repl_witness_vouch(u, "standby-u");
	assert_true(run_until(v, &su.vouched, 5000) >= 0);
	repl_witness_withdraw(u);
	assert_true(run_until(v, &su.withdrawn, 5000) >= 0);
	assert_true(repl_witness_retakes(u));
	assert_false(repl_witness_retakes(p));

	assert_int_equal(kill(v->srv->pid, SIGSTOP), 0);
	t0 = now_ns();
	while (now_ns() - t0 < 2500000000ull)
		run_for(v, 50);
	assert_false(repl_witness_valid(u));
	assert_false(repl_witness_valid(p));
	assert_int_equal(kill(v->srv->pid, SIGCONT), 0);

	ms = until_valid(v, u, 10000);
	printf("unprotected owner: key re-taken %d ms after etcd came back\n", ms);
	assert_true(ms >= 0);
	assert_string_equal(get(v, "t3u/owner", buf, sizeof(buf)), "primary u");
	assert_string_equal(get(v, "t3u/standby", buf, sizeof(buf)), "none");
	assert_int_equal(su.lost, 0);
	/* ...and keeps it: renewed on the new lease. */
	run_for(v, 2 * LEASE_MS);
	assert_true(repl_witness_valid(u));

	assert_false(repl_witness_valid(p));      /* the protected owner stays out */
	assert_string_equal(get(v, "t3p/owner", buf, sizeof(buf)), "");
	assert_string_equal(get(v, "t3p/standby", buf, sizeof(buf)), "standby-p");
	repl_witness_release(u, true);
	repl_witness_release(p, false);
	repl_witness_free(u);
	repl_witness_free(p);
}

/* The owner's loop hangs while the lease thread runs on: renewal stops
 * REPL_WITNESS_PROGRESS_MS after the loop's last progress, the lease runs
 * out and the key is free for the standby; not before (a loop that is
 * merely busy for less keeps it). Its vouched standby then wins. */
static void hung_loop_loses_key(void **state)
{
	struct env *v = *state;
	struct seen so = { 0 }, ss = { 0 };
	struct repl_witness *o = witness(v, "t4", "primary o", &so), *s;
	char err[400], buf[REPL_WITNESS_ID_MAX];
	uint64_t t0;
	int gone_ms = -1;

	assert_int_equal(repl_witness_acquire(o, err, sizeof(err)), 0);
	assert_int_equal(repl_witness_start(o), 0);
	repl_witness_vouch(o, "standby-s");
	assert_true(run_until(v, &so.vouched, 5000) >= 0);
	run_for(v, 300);

	/* The loop hangs: nothing runs it (the test's thread sleeps). */
	t0 = now_ns();
	usleep((REPL_WITNESS_PROGRESS_MS - 1000) * 1000);
	assert_string_equal(get(v, "t4/owner", buf, sizeof(buf)), "primary o");
	while ((now_ns() - t0) / 1000000 < REPL_WITNESS_PROGRESS_MS + 2 * LEASE_MS + 3000) {
		if (!get(v, "t4/owner", buf, sizeof(buf))[0]) {
			gone_ms = (int)((now_ns() - t0) / 1000000);
			break;
		}
		usleep(20000);
	}
	printf("hung loop: the key was free %d ms after the loop's last progress\n", gone_ms);
	assert_true(gone_ms >= REPL_WITNESS_PROGRESS_MS);
	assert_false(repl_witness_valid(o));

	s = witness(v, "t4", "secondary s", &ss);
	assert_int_equal(repl_witness_start(s), 0);
	repl_witness_contend(s, "standby-s", NULL);
	assert_true(run_until(v, &ss.won, 15000) >= 0);
	run_for(v, 500);                          /* the old owner's loop is back: no key */
	assert_false(repl_witness_valid(o));
	assert_string_equal(get(v, "t4/owner", buf, sizeof(buf)), "secondary s");
	repl_witness_release(s, true);
	repl_witness_free(o);
	repl_witness_free(s);
}

/* etcd with its default timings (election timeout 1000 ms) grants no TTL
 * below 2 s: a --lease-ms 1000 witness says so, once, with the TTL it got
 * and what to change. */
static void granted_ttl_named(void **state)
{
	struct env v = { 0 };
	struct etcd_config ec = { .timeout_ms = 1000 };
	struct seen seen = { 0 };
	struct repl_witness *w;
	char err[400], out[4096] = "";
	const char *want = "etcd granted a 2 s lease for --lease-ms 1000 (1 s asked)";
	FILE *f = tmpfile();
	int saved, n = 0;
	size_t len;

	(void)state;
	assert_non_null(f);
	assert_non_null(v.srv = th_etcd_start_timed(NULL, NULL, 1000));
	ec.endpoints = v.srv->endpoint;
	assert_non_null(v.loop = ev_loop_new(EVFLAG_AUTO));
	assert_int_equal(etcd_new(&ec, &v.e), 0);
	w = witness(&v, "t5", "primary a", &seen);
	log_set_level(LOG_WARN);
	fflush(stderr);
	saved = dup(2);
	assert_true(saved >= 0 && dup2(fileno(f), 2) == 2);
	assert_int_equal(repl_witness_acquire(w, err, sizeof(err)), 0);
	repl_witness_release(w, true);
	assert_int_equal(repl_witness_acquire(w, err, sizeof(err)), 0);   /* a second grant */
	repl_witness_release(w, true);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	log_set_level(getenv("WITNESS_TEST_LOG") ? LOG_DEBUG : LOG_ERROR);
	rewind(f);
	len = fread(out, 1, sizeof(out) - 1, f);
	out[len] = 0;
	fclose(f);
	for (const char *p = out; (p = strstr(p, "etcd granted")); p++)
		n++;
	printf("granted_ttl_named: %s", out);
	if (!strstr(out, want) || !strstr(out, "--election-timeout"))
		fail_msg("no warning naming the granted TTL; the log said: %s", out);
	assert_int_equal(n, 1);
	repl_witness_free(w);
	etcd_free(v.e);
	ev_loop_destroy(v.loop);
	th_etcd_stop(v.srv);
}

int main(void)
{
	const struct CMUnitTest live[] = {
		cmocka_unit_test(restart_refused_while_standby_vouched),
		cmocka_unit_test(switch_vouches_old_primary),
		cmocka_unit_test(outage_retakes_unprotected_owner),
		cmocka_unit_test(hung_loop_loses_key),
		cmocka_unit_test(granted_ttl_named),
	};

	log_set_level(getenv("WITNESS_TEST_LOG") ? LOG_DEBUG : LOG_ERROR);
	signal(SIGPIPE, SIG_IGN);
	if (!th_etcd_installed()) {
		printf("SKIP: etcd-server not installed\n");
		return 77;
	}
	return cmocka_run_group_tests_name("witness", live, setup, teardown);
}
