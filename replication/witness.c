/* The witness: an etcd key that says which copy of the guest may run and
 * release output (--witness). Two keys under the witness key K:
 *   K/owner    the owner's id, attached to the owner's lease: it vanishes
 *              when the owner stops renewing (dead, stopped, cut off);
 *   K/standby  the token of the standby the owner vouches for (it holds a
 *              complete checkpoint and all released output), or "none";
 *              no lease: it outlives a dead owner, which is its point.
 * A primary creates K/owner at start, refused while another owner holds
 * it or while K/standby names a standby (it may hold the only up-to-date
 * copy: it must take over, or the operator discard it, first).
 * A secondary takes K/owner only in a transaction that finds it absent
 * AND finds K/standby equal to its own token: a standby the owner gave up
 * (it ran on unprotected and released output the standby never saw) can
 * never win, and while the owner renews nobody can.
 *
 * The lease is renewed by a thread of its own (the loop never waits for
 * etcd) every quarter of its TTL. The owner may release output only while
 * its lease is provably valid: the local deadline starts from the time the
 * last successful renewal was *sent* (etcd restarted the TTL later than
 * that) and is cut by REPL_WITNESS_DRIFT_PCT of the TTL for clock-rate
 * error between this host and etcd's leader, so it always ends before
 * etcd can expire the lease and let another side in.
 *
 * The thread renews only while the loop shows progress (a timer of the
 * loop stamps it, as the beats are gated, net/beat.h): an owner whose loop
 * hangs loses the key once its lease runs out, and is replaced.
 *
 * An owner that vouches for nobody (K/standby "none", as it last wrote it:
 * it runs unprotected) is the only copy: when its lease lapsed (an etcd
 * outage longer than the TTL), the thread re-takes K/owner once etcd
 * answers, in the same create-if-absent transaction as at start; refused
 * (another owner, or a vouched standby), it stays lost.
 *
 * What the loop asks for (vouch, withdraw, contend) the same thread keeps
 * trying until etcd answers; outcomes come back on the loop through an
 * ev_async (struct repl_witness_cbs). */
#include "replication/witness.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "kmod/mutant.h"
#include "net/etcd.h"
#include "replication/replication_int.h"

#define TAG "witness"

/* What the worker tells the loop (bits of ev_pending). */
enum { EV_VOUCHED = 1, EV_WITHDRAWN = 2, EV_LOST = 4, EV_WON = 8, EV_REVOKED = 16 };

struct repl_witness {
	struct ev_loop *loop;
	struct etcd *etcd;
	char key[REPL_WITNESS_KEY_MAX + 1];
	char owner_key[REPL_WITNESS_KEY_MAX + 8];
	char standby_key[REPL_WITNESS_KEY_MAX + 10];
	char self[REPL_WITNESS_ID_MAX];
	unsigned lease_ms;

	pthread_t thr;
	bool thr_started;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	/* Under lock: what the loop asked for, and what the worker has done. */
	bool stop;
	char standby_want[REPL_WITNESS_ID_MAX];   /* K/standby should say this... */
	uint64_t standby_gen, standby_done;       /* ...from request standby_gen on */
	bool contending;
	bool resign;                              /* give the key up (revoke), stop renewing */
	char token[REPL_WITNESS_ID_MAX];          /* ours, while contending */
	char next[REPL_WITNESS_ID_MAX];           /* K/standby once won ("none": nobody) */
	unsigned ev_pending;                      /* EV_* for the loop */
	char holder[REPL_WITNESS_ID_MAX];         /* who held the key when contend lost */

	/* The worker's own. */
	int64_t lease;                      /* renewed while non-zero */
	int64_t ttl_s;
	uint64_t last_complaint_ns;
	bool told_held;
	bool told_wedged;
	atomic_bool told_ttl;          /* the granted TTL was longer than asked: said */
	bool vouches_none;                  /* K/standby says "none", as we last wrote it */
	uint64_t progress_max_ns;

	atomic_bool retakes;                /* a lapsed lease is re-taken (vouches_none) */
	atomic_bool retaking;               /* ...and it lapsed: re-taking it now */
	atomic_uint_least64_t progress_ns;  /* the loop's last stamp (0: not yet running) */
	atomic_bool owner;                  /* K/owner is ours (attached to lease) */
	atomic_uint_least64_t deadline_ns;  /* lease provably valid before this */

	ev_async done_w;
	ev_timer progress_w;
	struct repl_witness_cbs cbs;
};

/* The lease, renewed at send time t_send, is valid for ttl_s from then,
 * less the drift allowance. */
static void set_deadline(struct repl_witness *w, uint64_t t_send, int64_t ttl_s)
{
	uint64_t ttl_ns;

	if (ttl_s > 3600)            /* never trust a TTL we did not ask for */
		ttl_s = 3600;
	ttl_ns = (uint64_t)ttl_s * 1000000000ull;

	atomic_store(&w->deadline_ns, t_send + ttl_ns - ttl_ns / 100 * REPL_WITNESS_DRIFT_PCT);
}

static void complain(struct repl_witness *w, const char *what, int err)
{
	uint64_t now = now_ns();

	if (now - w->last_complaint_ns < 1000000000ull)
		return;
	w->last_complaint_ns = now;
	log_warn(TAG, "%s: %s", what, strerror(-err));
}

/* A lease of our own (grant), kept renewed by the thread from now on. */
static int grant(struct repl_witness *w)
{
	uint64_t t_send = now_ns();
	int64_t id, ttl;
	int64_t asked = (int64_t)(w->lease_ms + 999) / 1000;
	int r;

	r = etcd_lease_grant(w->etcd, asked, &id, &ttl);
	if (r < 0)
		return r;
	/* etcd grants no TTL below 1.5x its election timeout (2 s with its
	 * defaults): the lease, and so a takeover through the witness, is
	 * then longer than --lease-ms says. Said once. */
	if (ttl > asked && !atomic_exchange(&w->told_ttl, true)) {
		log_warn(TAG, "etcd granted a %lld s lease for --lease-ms %u (%lld s asked): a "
			 "takeover through the witness waits up to %lld s for the owner's lease, "
			 "not %lld; etcd grants at least 1.5x its --election-timeout: lower it "
			 "(and --heartbeat-interval) for shorter leases (docs/fencing.md)",
			 (long long)ttl, w->lease_ms, (long long)asked, (long long)ttl,
			 (long long)asked);
	}
	w->lease = id;
	w->ttl_s = ttl;
	set_deadline(w, t_send, ttl);
	return 0;
}

/* The loop has not stamped its progress for longer than allowed: it hangs
 * (or is deadlocked) while this thread runs on. */
static bool wedged(struct repl_witness *w, uint64_t now)
{
	uint64_t stamp = atomic_load(&w->progress_ns);
	bool hung = stamp && now > stamp && now - stamp > w->progress_max_ns;

	if (hung && !w->told_wedged)
		log_error(TAG, "the loop made no progress for %llu ms: the lease is not renewed "
			  "(a hung owner loses the key)", (unsigned long long)((now - stamp) / 1000000));
	else if (!hung && w->told_wedged)
		log_warn(TAG, "the loop makes progress again");
	w->told_wedged = hung;
	return hung;
}

/* What K/standby says now is ours: a lapsed lease may be re-taken while it
 * vouches for nobody. */
static void set_vouches_none(struct repl_witness *w, bool none)
{
	w->vouches_none = none;
	atomic_store(&w->retakes, none);
}

static void renew(struct repl_witness *w)
{
	uint64_t t_send = now_ns();
	int64_t ttl;
	int r = etcd_lease_keepalive(w->etcd, w->lease, &ttl);

	if (r < 0) {
		complain(w, "cannot renew the lease", r);
		return;
	}
	if (ttl <= 0) {
		log_error(TAG, "the lease %" PRIx64 " expired at etcd: %s", (uint64_t)w->lease,
			  !atomic_load(&w->owner) ? "granting anew" : w->vouches_none ?
			  "re-taking the key (this owner vouches for no standby)" :
			  "this side is no longer the owner");
		w->lease = 0;
		if (atomic_load(&w->owner) && w->vouches_none)
			atomic_store(&w->retaking, true);
		atomic_store(&w->owner, false);
		return;
	}
	set_deadline(w, t_send, ttl);
}

/* K/owner := self on our lease if K/owner is absent and K/standby vouches
 * for nobody ("none", or absent). 1: taken; 0: another owner holds it (who
 * names it); -EBUSY: K/standby names a standby (who: its token); -EAGAIN:
 * both changed while we looked; or an etcd error. */
static int take_free(struct repl_witness *w, char *who, size_t len)
{
	struct etcd_cmp cmp[2] = { { .key = w->owner_key, .value = NULL },
				   { .key = w->standby_key, .value = "none" } };
	struct etcd_put put[2] = { { .key = w->owner_key, .value = w->self, .lease = w->lease },
				   { .key = w->standby_key, .value = "none" } };
	int64_t lease = 0;
	int r = etcd_txn(w->etcd, cmp, 2, put, 2);

	if (r == 0) {
		cmp[1].value = NULL;       /* a K/standby never written */
		r = etcd_txn(w->etcd, cmp, 2, put, 2);
	}
	if (r != 0)
		return r < 0 ? r : 1;
	r = etcd_get(w->etcd, w->owner_key, who, len, &lease);
	if (r < 0)
		return r;
	if (r == 1)                        /* ours: a try that timed out was applied */
		return lease == w->lease ? 1 : 0;
	r = etcd_get(w->etcd, w->standby_key, who, len, NULL);
	if (r < 0)
		return r;
	return r == 0 || !strcmp(who, "none") ? -EAGAIN : -EBUSY;
}

/* The lease lapsed while this owner vouched for nobody: the key is taken
 * again as at start, with a new lease, or given up for good. */
static void retake(struct repl_witness *w, uint64_t *next_renew)
{
	char who[REPL_WITNESS_ID_MAX] = "";
	int r;

	if (!w->lease && (r = grant(w)) < 0) {
		complain(w, "cannot get a lease to re-take the key with", r);
		return;
	}
	r = take_free(w, who, sizeof(who));
	if (r == 1) {
		atomic_store(&w->owner, true);
		atomic_store(&w->retaking, false);
		*next_renew = now_ns() + (uint64_t)w->ttl_s * 1000000000ull / 4;
		log_warn(TAG, "re-took %s (lease %" PRIx64 "): it was free and no standby was vouched "
			 "for, so no other copy can have run", w->owner_key, (uint64_t)w->lease);
		return;
	}
	if (r != 0 && r != -EBUSY) {       /* etcd did not answer: the next round */
		complain(w, "cannot re-take the key", r);
		w->lease = 0;                  /* it may run out meanwhile: a fresh one then */
		return;
	}
	log_error(TAG, "cannot re-take %s: %s %s; this side stays without the key", w->owner_key,
		  r == 0 ? "it is held by" : "the witness vouches for the standby", who);
	if (etcd_lease_revoke(w->etcd, w->lease) < 0)
		log_warn(TAG, "could not revoke the unused lease");
	w->lease = 0;
	atomic_store(&w->retaking, false);
	set_vouches_none(w, false);
	pthread_mutex_lock(&w->lock);
	w->ev_pending |= EV_LOST;
	ev_async_send(w->loop, &w->done_w);
	pthread_mutex_unlock(&w->lock);
}

static enum repl_witness_result set_standby(struct repl_witness *w, const char *token)
{
	struct etcd_cmp cmp = { .key = w->owner_key, .value = w->self };
	struct etcd_put put = { .key = w->standby_key, .value = token };
	int r = etcd_txn(w->etcd, &cmp, 1, &put, 1);

	if (r < 0) {
		complain(w, "cannot record the standby", r);
		return REPL_WITNESS_UNREACHABLE;
	}
	if (r)
		set_vouches_none(w, !strcmp(token, "none"));
	return r ? REPL_WITNESS_OK : REPL_WITNESS_NOT_OWNER;
}

/* K/owner absent and K/standby == token: K/owner := self (our lease),
 * K/standby := next ("none", or the standby of a switchover). */
static enum repl_witness_result contend(struct repl_witness *w, const char *token,
					const char *next)
{
	struct etcd_cmp cmp[2] = { { .key = w->owner_key, .value = NULL },
				   { .key = w->standby_key, .value = token } };
	struct etcd_put put[2] = { { .key = w->owner_key, .value = w->self },
				   { .key = w->standby_key, .value = next } };
	char standby[REPL_WITNESS_ID_MAX];
	int64_t lease = 0;
	int r;

	repl_fault_test_hold("contend");   /* sys_migrate_handover: the key never taken */
	if (!w->lease && (r = grant(w)) < 0) {
		complain(w, "cannot get a lease to contend with", r);
		return REPL_WITNESS_UNREACHABLE;
	}
	put[0].lease = w->lease;
	r = etcd_txn(w->etcd, cmp, 2, put, 2);
	if (r < 0) {
		complain(w, "cannot contend for the key", r);
		return REPL_WITNESS_UNREACHABLE;
	}
	/* A try that timed out may have been applied (etcd.h): the key on our
	 * lease is ours, whatever K/standby says now. */
	if (r == 0) {
		int g = etcd_get(w->etcd, w->owner_key, w->holder, sizeof(w->holder), &lease);

		if (g < 0)                 /* unknown whether ours: try again, never guess */
			return REPL_WITNESS_UNREACHABLE;
		if (g == 1 && lease == w->lease)
			r = 1;
	}
	if (r == 1) {
		set_vouches_none(w, !strcmp(next, "none"));
		atomic_store(&w->owner, true);
		return REPL_WITNESS_OK;
	}
	r = etcd_get(w->etcd, w->standby_key, standby, sizeof(standby), NULL);
	if (r < 0)
		return REPL_WITNESS_UNREACHABLE;
	if (r == 0 || strcmp(standby, token)) {
		/* Lost for good: the lease granted to contend with holds nothing. */
		if (etcd_lease_revoke(w->etcd, w->lease) < 0)
			log_warn(TAG, "could not revoke the unused lease");
		w->lease = 0;
		return REPL_WITNESS_REVOKED;
	}
	r = etcd_get(w->etcd, w->owner_key, w->holder, sizeof(w->holder), NULL);
	return r < 0 ? REPL_WITNESS_UNREACHABLE : REPL_WITNESS_HELD;
}

/* One round of the worker, lock held on entry and exit: renew when due,
 * then bring K/standby to what the loop wants, then contend. Returns when
 * the next round is due (CLOCK_MONOTONIC ns). */
static uint64_t work(struct repl_witness *w, uint64_t *next_renew)
{
	uint64_t now = now_ns(), period = (uint64_t)w->ttl_s * 1000000000ull / 4;
	uint64_t retry = now + REPL_WITNESS_RETRY_MS * 1000000ull, next = now + 1000000000ull;
	enum repl_witness_result r;
	char arg[REPL_WITNESS_ID_MAX], next_standby[REPL_WITNESS_ID_MAX];
	uint64_t gen;

	if (w->resign) {
		int64_t lease = w->lease;

		w->resign = false;
		atomic_store(&w->owner, false);
		set_vouches_none(w, false);
		w->lease = 0;
		pthread_mutex_unlock(&w->lock);
		if (lease && etcd_lease_revoke(w->etcd, lease) < 0)
			log_warn(TAG, "could not revoke the lease: it expires by itself");
		else if (lease)
			log_info(TAG, "%s given up (lease revoked)", w->owner_key);
		pthread_mutex_lock(&w->lock);
	}
	if (w->lease && now >= *next_renew && wedged(w, now)) {
		*next_renew = now + 50000000ull;   /* renewed as soon as the loop is back */
	} else if (w->lease && now >= *next_renew) {
		pthread_mutex_unlock(&w->lock);
		renew(w);
		pthread_mutex_lock(&w->lock);
		*next_renew = now + (period ? period : 250000000ull);
	}
	if (atomic_load(&w->retaking) && !wedged(w, now)) {
		pthread_mutex_unlock(&w->lock);
		retake(w, next_renew);
		pthread_mutex_lock(&w->lock);
		if (atomic_load(&w->retaking) && now + 250000000ull < next)
			next = now + 250000000ull;
	}
	if (w->lease && *next_renew < next)
		next = *next_renew;
	if (w->standby_gen != w->standby_done) {
		gen = w->standby_gen;
		memcpy(arg, w->standby_want, sizeof(arg));
		pthread_mutex_unlock(&w->lock);
		if (!strcmp(arg, "none"))
			repl_fault_test_hold("withdraw");   /* sys_fence_cmd: resumed only after it */
		r = set_standby(w, arg);
		pthread_mutex_lock(&w->lock);
		if (r == REPL_WITNESS_UNREACHABLE)
			return retry;
		if (gen == w->standby_gen)
			w->standby_done = gen;
		w->ev_pending |= r == REPL_WITNESS_NOT_OWNER ? EV_LOST :
				 strcmp(arg, "none") ? EV_VOUCHED : EV_WITHDRAWN;
		ev_async_send(w->loop, &w->done_w);
	}
	if (w->contending) {
		memcpy(arg, w->token, sizeof(arg));
		memcpy(next_standby, w->next, sizeof(next_standby));
		pthread_mutex_unlock(&w->lock);
		r = contend(w, arg, next_standby);
		pthread_mutex_lock(&w->lock);
		if (r == REPL_WITNESS_OK || r == REPL_WITNESS_REVOKED) {
			w->contending = false;
			w->ev_pending |= r == REPL_WITNESS_OK ? EV_WON : EV_REVOKED;
			ev_async_send(w->loop, &w->done_w);
			if (r == REPL_WITNESS_OK)   /* granted just now: renew from now on */
				*next_renew = now_ns() + (uint64_t)w->ttl_s * 1000000000ull / 4;
		} else {
			if (r == REPL_WITNESS_HELD && !w->told_held)
				log_info(TAG, "%s is held by %s: waiting for its lease to run out",
					 w->owner_key, w->holder);
			w->told_held |= r == REPL_WITNESS_HELD;
			if (retry < next)
				next = retry;
		}
	}
	/* A lease granted during this round (contend) is renewed on time too. */
	if (w->lease && *next_renew < next)
		next = *next_renew;
	return next;
}

static void *worker(void *arg)
{
	struct repl_witness *w = arg;
	uint64_t next_renew = 0;

	pthread_mutex_lock(&w->lock);
	while (!w->stop) {
		uint64_t gen = w->standby_gen, next = work(w, &next_renew), now = now_ns();
		struct timespec ts;

		/* Go round at once only for a new request or when due; a request
		 * that failed waits for its retry time (no spinning on etcd). */
		if (w->stop || next <= now || w->standby_gen != gen || w->resign)
			continue;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += (time_t)((next - now) / 1000000000ull);
		ts.tv_nsec += (long)((next - now) % 1000000000ull);
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&w->cond, &w->lock, &ts);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

static void on_done(struct ev_loop *loop, ev_async *a, int revents)
{
	struct repl_witness *w = a->data;
	const struct repl_witness_cbs *c = &w->cbs;
	unsigned ev;

	(void)loop;
	(void)revents;
	pthread_mutex_lock(&w->lock);
	ev = w->ev_pending;
	w->ev_pending = 0;
	pthread_mutex_unlock(&w->lock);
	if ((ev & EV_VOUCHED) && c->vouched)
		c->vouched(c->ctx);
	if ((ev & EV_WITHDRAWN) && c->withdrawn)
		c->withdrawn(c->ctx);
	if ((ev & EV_LOST) && c->lost)
		c->lost(c->ctx);
	if ((ev & EV_WON) && c->won)
		c->won(c->ctx);
	if ((ev & EV_REVOKED) && c->revoked)
		c->revoked(c->ctx);
}
/* The loop got round: renewals may go on (a timer of the lowest priority,
 * so pending work of the loop comes first). */
static void on_progress(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct repl_witness *w = t->data;

	(void)loop;
	(void)revents;
	atomic_store(&w->progress_ns, now_ns());
}

void repl_witness_new_token(char *out, size_t len)
{
	uint64_t rnd[2] = { now_ns(), (uint64_t)getpid() };

	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
		log_warn(TAG, "getrandom failed: standby token from the clock");
	snprintf(out, len, "standby-%016llx%016llx", (unsigned long long)rnd[0],
		 (unsigned long long)rnd[1]);
}

int repl_witness_new(struct ev_loop *loop, const struct repl_witness_opts *o, const char *self,
		     struct repl_witness **out)
{
	struct etcd_config ec = { .endpoints = o->endpoints, .ca_file = o->ca_file,
				  .timeout_ms = o->lease_ms / 4 < 100 ? 100 : o->lease_ms / 4 };
	struct repl_witness *w;
	int r;

	if (!o->key[0] || strlen(o->key) > REPL_WITNESS_KEY_MAX || strlen(self) >= REPL_WITNESS_ID_MAX)
		return -EINVAL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	if ((r = etcd_new(&ec, &w->etcd)) < 0) {
		free(w);
		return r;
	}
	w->loop = loop;
	w->lease_ms = o->lease_ms;
	w->progress_max_ns = (uint64_t)(o->progress_ms ? o->progress_ms : REPL_WITNESS_PROGRESS_MS) *
			     1000000ull;
	snprintf(w->key, sizeof(w->key), "%s", o->key);
	snprintf(w->owner_key, sizeof(w->owner_key), "%s/owner", o->key);
	snprintf(w->standby_key, sizeof(w->standby_key), "%s/standby", o->key);
	snprintf(w->self, sizeof(w->self), "%s", self);
	pthread_mutex_init(&w->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->cond, &ca);
	pthread_condattr_destroy(&ca);
	ev_async_init(&w->done_w, on_done);
	w->done_w.data = w;
	ev_async_start(loop, &w->done_w);
	ev_timer_init(&w->progress_w, on_progress, 0, 0.1);
	ev_set_priority(&w->progress_w, EV_MINPRI);
	w->progress_w.data = w;
	ev_timer_start(loop, &w->progress_w);
	*out = w;
	return 0;
}

void repl_witness_set_cbs(struct repl_witness *w, const struct repl_witness_cbs *cbs)
{
	w->cbs = *cbs;
}

void repl_witness_get_cbs(const struct repl_witness *w, struct repl_witness_cbs *cbs)
{
	*cbs = w->cbs;
}

const char *repl_witness_key(const struct repl_witness *w)
{
	return w->key;
}

void repl_witness_resign(struct repl_witness *w)
{
	pthread_mutex_lock(&w->lock);
	w->resign = true;
	atomic_store(&w->owner, false);
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

int repl_witness_start(struct repl_witness *w)
{
	int r = -pthread_create(&w->thr, NULL, worker, w);

	w->thr_started = r == 0;
	return r;
}

static void stop_thread(struct repl_witness *w)
{
	if (!w->thr_started)
		return;
	pthread_mutex_lock(&w->lock);
	w->stop = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
	pthread_join(w->thr, NULL);
	w->thr_started = false;
}

int repl_witness_acquire(struct repl_witness *w, char *err, size_t errlen)
{
	char who[REPL_WITNESS_ID_MAX] = "";
	int r, tries = 0;

	if ((r = grant(w)) < 0) {
		snprintf(err, errlen, "cannot get a lease from etcd: %s", strerror(-r));
		return r;
	}
	do
		r = take_free(w, who, sizeof(who));
	while (r == -EAGAIN && ++tries < 5);
	if (r == 1) {
		set_vouches_none(w, true);
		atomic_store(&w->owner, true);
		log_info(TAG, "this side owns %s (lease %" PRIx64 ", TTL %lld s)", w->owner_key,
			 (uint64_t)w->lease, (long long)w->ttl_s);
		return 0;
	}
	if (r == 0) {
		snprintf(err, errlen, "%s is held by %s: another copy of this VM owns it", w->owner_key,
			 who);
		r = -EEXIST;
	} else if (r == -EBUSY) {
		snprintf(err, errlen, "%s names the vouched standby %s: it may hold the only "
			 "up-to-date copy of this VM; run `understudy takeover` on it (or, if it is gone "
			 "for good, delete %s at etcd to start afresh)", w->standby_key, who,
			 w->standby_key);
	} else {
		snprintf(err, errlen, "cannot create %s at etcd: %s", w->owner_key, strerror(-r));
	}
	if (etcd_lease_revoke(w->etcd, w->lease) < 0)
		log_warn(TAG, "could not revoke the unused lease");
	w->lease = 0;
	return r;
}

void repl_witness_vouch(struct repl_witness *w, const char *token)
{
	pthread_mutex_lock(&w->lock);
	snprintf(w->standby_want, sizeof(w->standby_want), "%s", token);
	w->standby_gen++;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

void repl_witness_withdraw(struct repl_witness *w)
{
	repl_witness_vouch(w, "none");
}

void repl_witness_contend(struct repl_witness *w, const char *token, const char *next)
{
	pthread_mutex_lock(&w->lock);
	snprintf(w->token, sizeof(w->token), "%s", token);
	snprintf(w->next, sizeof(w->next), "%s", next && next[0] ? next : "none");
	w->contending = true;
	w->told_held = false;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

bool repl_witness_valid(const struct repl_witness *w)
{
	if (MUTANT(ignore_lease))   /* make check-mutants: the lease is never checked */
		return true;
	return atomic_load(&w->owner) && now_ns() < atomic_load(&w->deadline_ns);
}

bool repl_witness_retakes(const struct repl_witness *w)
{
	return atomic_load(&w->retakes);
}

int64_t repl_witness_left_ms(const struct repl_witness *w)
{
	if (!atomic_load(&w->owner))
		return -1;
	return ((int64_t)atomic_load(&w->deadline_ns) - (int64_t)now_ns()) / 1000000;
}

void repl_witness_stop(struct repl_witness *w)
{
	stop_thread(w);
	atomic_store(&w->retakes, false);
}

void repl_witness_hand_back(struct repl_witness *w, const char *token)
{
	stop_thread(w);
	if (atomic_load(&w->owner) && set_standby(w, token) != REPL_WITNESS_OK)
		log_warn(TAG, "could not vouch for %s again before letting the key go", token);
}

void repl_witness_release(struct repl_witness *w, bool withdraw_standby)
{
	stop_thread(w);
	if (withdraw_standby && atomic_load(&w->owner) && set_standby(w, "none") != REPL_WITNESS_OK)
		log_warn(TAG, "could not withdraw the standby before letting the key go");
	if (w->lease && etcd_lease_revoke(w->etcd, w->lease) < 0)
		log_warn(TAG, "could not revoke the lease: it expires by itself");
	else if (w->lease)
		log_info(TAG, "%s released", w->owner_key);
	w->lease = 0;
	atomic_store(&w->owner, false);
}

void repl_witness_free(struct repl_witness *w)
{
	if (!w)
		return;
	stop_thread(w);
	ev_async_stop(w->loop, &w->done_w);
	ev_timer_stop(w->loop, &w->progress_w);
	etcd_free(w->etcd);
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->lock);
	free(w);
}
