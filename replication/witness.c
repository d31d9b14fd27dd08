/* The witness: an etcd key that says which copy of the guest may run and
 * release output (--witness). Two keys under the witness key K:
 *   K/owner    the owner's id, attached to the owner's lease: it vanishes
 *              when the owner stops renewing (dead, stopped, cut off);
 *   K/standby  the token of the standby the owner vouches for (it holds a
 *              complete checkpoint and all released output), or "none";
 *              no lease: it outlives a dead owner, which is its point.
 * A primary creates K/owner at start (refused if another owner holds it).
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
#include <time.h>

#include "net/etcd.h"

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
	unsigned ev_pending;                      /* EV_* for the loop */
	char holder[REPL_WITNESS_ID_MAX];         /* who held the key when contend lost */

	/* The worker's own. */
	int64_t lease;                      /* renewed while non-zero */
	int64_t ttl_s;
	uint64_t last_complaint_ns;
	bool told_held;

	atomic_bool owner;                  /* K/owner is ours (attached to lease) */
	atomic_uint_least64_t deadline_ns;  /* lease provably valid before this */

	ev_async done_w;
	struct repl_witness_cbs cbs;
};

const char *repl_witness_result_name(enum repl_witness_result r)
{
	static const char *const names[] = {
		[REPL_WITNESS_OK] = "ok", [REPL_WITNESS_HELD] = "held by another owner",
		[REPL_WITNESS_REVOKED] = "this standby is no longer vouched for",
		[REPL_WITNESS_NOT_OWNER] = "not the owner any more",
		[REPL_WITNESS_UNREACHABLE] = "etcd unreachable",
	};

	return r <= REPL_WITNESS_UNREACHABLE ? names[r] : "?";
}

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
	int r;

	r = etcd_lease_grant(w->etcd, (int64_t)(w->lease_ms + 999) / 1000, &id, &ttl);
	if (r < 0)
		return r;
	w->lease = id;
	w->ttl_s = ttl;
	set_deadline(w, t_send, ttl);
	return 0;
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
			  atomic_load(&w->owner) ? "this side is no longer the owner" : "granting anew");
		w->lease = 0;
		atomic_store(&w->owner, false);
		return;
	}
	set_deadline(w, t_send, ttl);
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
	return r ? REPL_WITNESS_OK : REPL_WITNESS_NOT_OWNER;
}

/* K/owner absent and K/standby == token: K/owner := self (our lease), K/standby := none. */
static enum repl_witness_result contend(struct repl_witness *w, const char *token)
{
	struct etcd_cmp cmp[2] = { { .key = w->owner_key, .value = NULL },
				   { .key = w->standby_key, .value = token } };
	struct etcd_put put[2] = { { .key = w->owner_key, .value = w->self },
				   { .key = w->standby_key, .value = "none" } };
	char standby[REPL_WITNESS_ID_MAX];
	int r;

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
	if (r == 1) {
		atomic_store(&w->owner, true);
		return REPL_WITNESS_OK;
	}
	r = etcd_get(w->etcd, w->standby_key, standby, sizeof(standby), NULL);
	if (r < 0)
		return REPL_WITNESS_UNREACHABLE;
	if (r == 0 || strcmp(standby, token))
		return REPL_WITNESS_REVOKED;
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
	char arg[REPL_WITNESS_ID_MAX];
	uint64_t gen;

	if (w->resign) {
		int64_t lease = w->lease;

		w->resign = false;
		atomic_store(&w->owner, false);
		w->lease = 0;
		pthread_mutex_unlock(&w->lock);
		if (lease && etcd_lease_revoke(w->etcd, lease) < 0)
			log_warn(TAG, "could not revoke the lease: it expires by itself");
		else if (lease)
			log_info(TAG, "%s given up (lease revoked)", w->owner_key);
		pthread_mutex_lock(&w->lock);
	}
	if (w->lease && now >= *next_renew) {
		pthread_mutex_unlock(&w->lock);
		renew(w);
		pthread_mutex_lock(&w->lock);
		*next_renew = now + (period ? period : 250000000ull);
	}
	if (w->lease && *next_renew < next)
		next = *next_renew;
	if (w->standby_gen != w->standby_done) {
		gen = w->standby_gen;
		memcpy(arg, w->standby_want, sizeof(arg));
		pthread_mutex_unlock(&w->lock);
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
		pthread_mutex_unlock(&w->lock);
		r = contend(w, arg);
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
	struct etcd_cmp cmp = { .key = w->owner_key, .value = NULL };
	struct etcd_put put[2] = { { .key = w->owner_key, .value = w->self },
				   { .key = w->standby_key, .value = "none" } };
	char holder[REPL_WITNESS_ID_MAX] = "";
	int r;

	if ((r = grant(w)) < 0) {
		snprintf(err, errlen, "cannot get a lease from etcd: %s", strerror(-r));
		return r;
	}
	put[0].lease = w->lease;
	r = etcd_txn(w->etcd, &cmp, 1, put, 2);
	if (r < 0) {
		snprintf(err, errlen, "cannot create %s at etcd: %s", w->owner_key, strerror(-r));
		return r;
	}
	if (r == 0) {
		if (etcd_get(w->etcd, w->owner_key, holder, sizeof(holder), NULL) < 0)
			snprintf(holder, sizeof(holder), "?");
		snprintf(err, errlen, "%s is held by %s: another copy of this VM owns it", w->owner_key,
			 holder);
		if (etcd_lease_revoke(w->etcd, w->lease) < 0)
			log_warn(TAG, "could not revoke the unused lease");
		w->lease = 0;
		return -EEXIST;
	}
	atomic_store(&w->owner, true);
	log_info(TAG, "this side owns %s (lease %" PRIx64 ", TTL %lld s)", w->owner_key,
		 (uint64_t)w->lease, (long long)w->ttl_s);
	return 0;
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

void repl_witness_contend(struct repl_witness *w, const char *token)
{
	pthread_mutex_lock(&w->lock);
	snprintf(w->token, sizeof(w->token), "%s", token);
	w->contending = true;
	w->told_held = false;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

bool repl_witness_valid(const struct repl_witness *w)
{
#ifdef UNDERSTUDY_MUTANT_ignore_lease   /* make check-mutants: the lease is never checked */
	return true;
#endif
	return atomic_load(&w->owner) && now_ns() < atomic_load(&w->deadline_ns);
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
	etcd_free(w->etcd);
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->lock);
	free(w);
}
