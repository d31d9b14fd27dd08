/* understudy drill local: one trial. The pair comes up with a client on the
 * primary's console; once the pair is protected, at a seeded moment, the
 * fault; then the takeover is followed (kill, stop) or the primary is
 * watched serving on (partition, loss, slowlink), the client goes on with
 * the survivor, and the trial is judged: the client's rules
 * (drill_local_client.c), the survivor's counter, one live copy. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/drill_local.h"
#include "net/lineclient.h"

#define PROTECT_WAIT_S 30
#define STEP_MS 5
/* A request every 10..20 ms, as a user typing fast would. */
#define GAP_MIN_S 0.010
#define GAP_MAX_S 0.020
/* How long the client goes on with the survivor, and the network faults
 * last (partition: then healed, and watched a while more). */
#define AFTER_S 0.5
#define NET_FAULT_S 3.0
#define HEALED_S 1.0
/* A stopped primary is continued this long after the takeover was seen,
 * the client going on with the new owner meanwhile. */
#define CONT_WATCH_S 1.5

double dl_rng_uniform(struct dl_rng *r, double lo, double hi)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return lo + (hi - lo) * (double)(z >> 11) / (double)(1ull << 53);
}

static void why(struct dl_trial *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void why(struct dl_trial *t, const char *fmt, ...)
{
	va_list ap;

	if (t->why[0])
		return;
	va_start(ap, fmt);
	vsnprintf(t->why, sizeof(t->why), fmt, ap);
	va_end(ap);
}

struct run {
	const struct dl_ctx *x;
	struct dl_rng *rng;
	struct dl_trial *t;
	struct dl_pair p;
	struct dl_client c;
	double t_fault;
};

/* The client talks for s seconds; false (reason set) if its console closed. */
static bool converse(struct run *r, double s)
{
	double end = dl_now_s() + s;

	while (dl_now_s() < end) {
		if (dl_client_step(&r->c, dl_rng_uniform(r->rng, GAP_MIN_S, GAP_MAX_S), STEP_MS) < 0) {
			why(r->t, "the console closed under the client");
			return false;
		}
	}
	return true;
}

static bool protected(const struct run *r)
{
	struct dl_status st;

	dl_pair_status(r->p.pctl, &st);
	return !strcmp(st.state, "protected") && st.acked > 0 && (!r->x->witness || st.vouched);
}

static bool took_over(const struct run *r)
{
	struct dl_status st;

	dl_pair_status(r->p.sctl, &st);
	return !strcmp(st.role, "primary");
}

/* Up and protected, the client talking to the primary's console. */
static bool bring_up(struct run *r)
{
	char ep[32];
	const char *reason = "";
	double end;
	int fd;

	if (dl_pair_start(&r->p, &reason) < 0) {
		why(r->t, "%s", reason);
		return false;
	}
	snprintf(ep, sizeof(ep), "127.0.0.1:%d", r->p.pcon);
	if ((fd = net_line_connect(ep, 10000)) < 0) {
		why(r->t, "the primary's console did not open: %s", strerror(-fd));
		return false;
	}
	dl_client_attach(&r->c, fd);
	for (end = dl_now_s() + PROTECT_WAIT_S; dl_now_s() < end;) {
		if (!converse(r, 0.1))
			return false;
		if (took_over(r)) {
			why(r->t, "the secondary took over before any fault (the primary ran)");
			return false;
		}
		if (protected(r))
			return true;
	}
	why(r->t, "the pair was not protected within %d s", PROTECT_WAIT_S);
	return false;
}

/* The client to the new owner: what the old connection still holds is
 * read first (bytes the old owner released before it died or stopped). */
static bool follow_takeover(struct run *r, double deadline)
{
	char ep[32];
	int fd;

	while (!took_over(r)) {
		if (dl_now_s() > deadline) {
			why(r->t, "no takeover within %.1f s of the fault", deadline - r->t_fault);
			return false;
		}
		if (dl_client_drain(&r->c, 5) < 0)
			usleep(5000);    /* the old console closed: poll, do not spin */
	}
	r->t->took_over = true;
	(void)dl_client_drain(&r->c, 20);
	snprintf(ep, sizeof(ep), "127.0.0.1:%d", r->p.scon);
	if ((fd = net_line_connect(ep, 5000)) < 0) {
		why(r->t, "the new owner's console did not open: %s", strerror(-fd));
		return false;
	}
	dl_client_attach(&r->c, fd);
	/* Whatever the new owner replays (acknowledged output) comes first. */
	if (dl_client_drain(&r->c, 300) < 0) {
		why(r->t, "the new owner's console closed");
		return false;
	}
	return true;
}

/* The guest's counter where the client is: >= every n seen. */
static bool check_count(struct run *r, const char *who)
{
	unsigned long long n = 0;
	int e = dl_client_get(&r->c, 5000, &n);

	if (e == -EPROTO)
		return false;    /* the client's error is the reason */
	if (e < 0) {
		why(r->t, "%s did not answer get: %s", who, strerror(-e));
		return false;
	}
	r->t->survivor = n;
	if (n < r->c.top)
		r->t->rpo = r->c.top - n;
	return true;
}

/* One live copy: a copy that lost ownership answers nobody. old: a
 * connection to it kept from before (no byte may come on it), or -1. */
static void check_old_silent(struct run *r, int old)
{
	char buf[256], ep[32];
	struct dl_status st;
	ssize_t n;
	int fd;

	if (old >= 0 && (n = net_line_recv(old, buf, sizeof(buf), 0)) > 0)
		why(r->t, "TWO LIVE COPIES: the old primary released %zd bytes after the takeover: "
		    "'%.40s'", n, buf);
	if (!dl_pair_alive(&r->p.pri)) {
		snprintf(r->t->note, sizeof(r->t->note), "old primary exited");
		return;
	}
	dl_pair_status(r->p.pctl, &st);
	if (r->x->witness && strcmp(st.state, "fenced"))
		why(r->t, "the old primary is '%s' after the takeover, want fenced", st.state);
	snprintf(ep, sizeof(ep), "127.0.0.1:%d", r->p.pcon);
	if ((fd = net_line_connect(ep, 200)) >= 0) {
		if (net_line_send(fd, "get\n", 4) == 0 &&
		    (n = net_line_recv(fd, buf, sizeof(buf) - 1, 1000)) > 0) {
			buf[n] = 0;
			why(r->t, "TWO LIVE COPIES: the old primary still answers: '%.40s'", buf);
		}
		close(fd);
	}
	snprintf(r->t->note, sizeof(r->t->note), "old primary %s, answers nobody",
		 st.state[0] ? st.state : "silent");
}

/* kill, stop: the secondary takes over; a stopped primary, continued,
 * releases nothing more. */
static void after_crash(struct run *r)
{
	int old = -1;

	if (r->x->kind == DL_STOP && r->c.fd >= 0)
		old = dup(r->c.fd);        /* watched for output after SIGCONT */
	if (!follow_takeover(r, r->t_fault + r->x->timeout_ms / 1e3 + 15))
		goto out;
	if (!check_count(r, "the new owner") || !converse(r, AFTER_S))
		goto out;
	if (r->x->kind == DL_STOP) {
		char before[4096];   /* released before the stop, read now: not after SIGCONT */
		ssize_t n = old >= 0 ? net_line_recv(old, before, sizeof(before), 0) : 0;

		(void)n;
		dl_pair_heal(&r->p);
		if (!converse(r, CONT_WATCH_S))
			goto out;
		check_old_silent(r, old);
	}
	(void)check_count(r, "the new owner");       /* at the end, after the client went on */
out:
	if (old >= 0)
		close(old);
}

/* partition, loss, slowlink: the primary serves on, epochs go on being
 * acknowledged (not under a cut link), and the secondary takes over only
 * consistently (loss, slowlink: the old primary then answers nobody). */
static void after_net_fault(struct run *r)
{
	struct dl_status st0, st1;
	double end = r->t_fault + NET_FAULT_S;
	int old = -1;

	dl_pair_status(r->p.pctl, &st0);
	while (dl_now_s() < end) {
		/* The old owner's console closing is a primary that learnt of a
		 * takeover; the new owner's closing is a failure. */
		if (!converse(r, 0.1) && (r->t->took_over || !took_over(r)))
			return;
		if (!r->t->took_over && took_over(r)) {
			r->t->why[0] = 0;
			if (r->x->kind == DL_PARTITION) {
				why(r->t, "the secondary took over while the primary held the witness key");
				return;
			}
			old = r->c.fd >= 0 ? dup(r->c.fd) : -1;
			if (!follow_takeover(r, dl_now_s() + 1))
				goto out;
		}
	}
	dl_pair_status(r->p.pctl, &st1);
	if (!r->t->took_over) {
		r->t->acked_during = st1.acked > st0.acked ? st1.acked - st0.acked : 0;
		snprintf(r->t->note, sizeof(r->t->note), "%llu epochs acknowledged during the %s",
			 r->t->acked_during, r->x->kind_name);
		if (r->x->kind != DL_PARTITION && !r->t->acked_during)
			why(r->t, "no epoch was acknowledged during the %s (the primary is '%s')",
			    r->x->kind_name, st1.state);
		if (r->c.first_after_s < 0)
			why(r->t, "the primary's client got no reply during the %s", r->x->kind_name);
	}
	dl_pair_heal(&r->p);
	if (!converse(r, HEALED_S))
		goto out;
	if (r->t->took_over) {
		check_old_silent(r, old);
	} else if (took_over(r)) {
		why(r->t, "the secondary took over after the %s was healed", r->x->kind_name);
	} else {
		dl_pair_status(r->p.pctl, &st1);
		if (strcmp(st1.state, "protected") && strcmp(st1.state, "unprotected"))
			why(r->t, "the primary is '%s' after the %s, want it serving", st1.state,
			    r->x->kind_name);
	}
	(void)check_count(r, r->t->took_over ? "the new owner" : "the primary");
out:
	if (old >= 0)
		close(old);
}

void dl_trial_run(const struct dl_ctx *x, unsigned idx, uint64_t seed, struct dl_trial *t)
{
	/* The moment of each trial's fault from the seed and the trial alone:
	 * the client's gaps draw from their own generator, as many times as
	 * the timing makes them, and must not shift the next trial's moment. */
	struct dl_rng aim = { seed ^ (idx + 1) * 0xd1b54a32d192ed03ull };
	struct dl_rng gaps = { ~seed ^ (idx + 1) * 0x8cb92ba72f3d8dd7ull };
	struct dl_rng *rng = &gaps;
	struct run r = { .x = x, .rng = rng, .t = t };
	bool crash = x->kind == DL_KILL || x->kind == DL_STOP;
	double t_prot, fire;
	int e;

	memset(t, 0, sizeof(*t));
	t->idx = idx;
	t->rto_ms = -1;
	r.p = (struct dl_pair){ .self = x->self, .guest = x->guest, .dir = x->dir, .trial = idx,
				.timeout_ms = x->timeout_ms, .pri_timeout_ms = x->pri_timeout_ms, .witness = x->witness };
	dl_client_init(&r.c, x->oracle);
	if (!bring_up(&r))
		goto out;
	t_prot = dl_now_s();
	fire = t_prot + dl_rng_uniform(&aim, 0.3, 1.2);
	if (!converse(&r, fire - dl_now_s()))
		goto out;
	/* A crash is aimed just after a reply: the output of an epoch that
	 * was acknowledged, if the pair keeps its rule, and the last moment
	 * when a pair that releases early loses it. */
	for (double end = dl_now_s() + 2; crash && dl_now_s() < end;) {
		if ((e = dl_client_step(&r.c, dl_rng_uniform(rng, GAP_MIN_S, GAP_MAX_S), 1)) < 0) {
			why(t, "the console closed under the client");
			goto out;
		}
		if (e > 0)
			break;
	}
	r.t_fault = dl_now_s();
	if ((e = dl_pair_fault(&r.p, x->kind)) < 0) {
		why(t, "the %s could not be injected: %s", x->kind_name, strerror(-e));
		goto out;
	}
	t->fault_after_ms = (r.t_fault - t_prot) * 1e3;
	dl_client_mark(&r.c);
	if (crash)
		after_crash(&r);
	else
		after_net_fault(&r);
out:
	if (r.c.first_after_s > 0)
		t->rto_ms = (r.c.first_after_s - r.t_fault) * 1e3;
	dl_pair_stop(&r.p);
	t->top = r.c.top;
	t->replayed = r.c.replayed;
	t->lines = r.c.lines;
	if (dl_client_failed(&r.c))
		snprintf(t->why, sizeof(t->why), "%s", r.c.error);   /* the client's rule first */
	if (!t->why[0] && t->rpo)
		why(t, "%llu acknowledged replies lost", t->rpo);
	dl_client_close(&r.c);
}
