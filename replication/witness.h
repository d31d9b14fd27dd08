/* replication/ inside: the witness lease on etcd (witness.c explains the
 * keys and the deadline). Used by the agents' engines, primary/ and
 * secondary.c; not part of the module's public header. */
#ifndef US_REPL_WITNESS_H
#define US_REPL_WITNESS_H

#include <ev.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kmod/log.h"

#define REPL_WITNESS_KEY_MAX 200
#define REPL_WITNESS_ID_MAX 128
/* Share of the TTL given up for clock-rate error between this host and
 * etcd's leader (and the scheduling of the renewal thread). */
#define REPL_WITNESS_DRIFT_PCT 2
/* A standby contending for the key tries again this often. */
#define REPL_WITNESS_RETRY_MS 25
/* The lease is renewed only while the loop showed progress this recently
 * (as the beats, REPL_BEAT_PROGRESS_MS). */
#define REPL_WITNESS_PROGRESS_MS 3000

struct repl_witness_opts {
	const char *endpoints;     /* HOST:PORT[,...] (the "etcd:" of --witness removed) */
	const char *ca_file;       /* for https:// endpoints, or NULL */
	const char *key;           /* --witness-key */
	unsigned lease_ms;         /* --lease-ms: the TTL, rounded up to whole seconds */
	unsigned progress_ms;      /* 0: REPL_WITNESS_PROGRESS_MS */
};

enum repl_witness_result {
	REPL_WITNESS_OK,
	REPL_WITNESS_HELD,         /* contend: another owner still holds the key */
	REPL_WITNESS_REVOKED,      /* contend: the owner no longer vouches for this standby */
	REPL_WITNESS_NOT_OWNER,    /* set_standby: the key is not ours any more */
	REPL_WITNESS_UNREACHABLE,  /* no answer from etcd in time */
};

/* Outcomes of what the loop asked for, called on the loop's thread. */
struct repl_witness_cbs {
	void (*vouched)(void *ctx);    /* K/standby holds the token of the last vouch */
	void (*withdrawn)(void *ctx);  /* K/standby says "none", as asked */
	void (*lost)(void *ctx);       /* K/owner was found not ours (vouch or withdraw failed) */
	void (*won)(void *ctx);        /* contend: K/owner is ours now */
	void (*revoked)(void *ctx);    /* contend: the owner no longer vouches for this standby */
	void *ctx;
};

struct repl_witness;

const char *repl_witness_result_name(enum repl_witness_result r);
/* self: this side's id, the value of K/owner while it owns it. */
int repl_witness_new(struct ev_loop *loop, const struct repl_witness_opts *o, const char *self,
		     struct repl_witness **out) __attribute__((warn_unused_result));
void repl_witness_free(struct repl_witness *w);
void repl_witness_set_cbs(struct repl_witness *w, const struct repl_witness_cbs *cbs);
void repl_witness_get_cbs(const struct repl_witness *w, struct repl_witness_cbs *cbs);
/* The witness key (--witness-key). */
const char *repl_witness_key(const struct repl_witness *w);
/* Gives the key up without waiting: from now on this side is not the owner
 * (nothing leaves), and the thread revokes the lease (a migration's source
 * once the destination holds the final epoch). */
void repl_witness_resign(struct repl_witness *w);
/* The primary, at start, blocking: K/owner := self with a new lease, K/standby
 * := none, if K/owner is absent and K/standby names no standby. -EEXIST when
 * another owner holds K/owner, -EBUSY when K/standby names a standby (a
 * takeover may be due: it may hold the only up-to-date copy); err says so. */
int repl_witness_acquire(struct repl_witness *w, char *err, size_t errlen)
	__attribute__((warn_unused_result));
/* Starts the thread that renews the lease and carries out the requests below. */
int repl_witness_start(struct repl_witness *w) __attribute__((warn_unused_result));
/* The owner: K/standby := token (vouch) or "none" (withdraw), if K/owner is
 * still ours; the last request wins, retried until etcd answers. */
void repl_witness_vouch(struct repl_witness *w, const char *token);
void repl_witness_withdraw(struct repl_witness *w);
/* A standby: K/owner := self (a new lease) and K/standby := next (NULL or
 * "": "none"; a switchover's: the old primary's new token, vouched for in
 * the same transaction) once K/owner is absent and K/standby == token;
 * retried every REPL_WITNESS_RETRY_MS until won or revoked. */
void repl_witness_contend(struct repl_witness *w, const char *token, const char *next);
/* A fresh standby token: a vouch for an earlier one never lets it in. */
void repl_witness_new_token(char *out, size_t len);
/* True while this side owns the key and its lease is provably valid. */
bool repl_witness_valid(const struct repl_witness *w);
/* True while this owner vouches for no standby (K/standby "none", as it
 * last wrote it: it is the only copy): a lease that lapses is then re-taken
 * by the thread once etcd answers and K/owner is free, and valid() becomes
 * true again; false once that was refused (lost() is called) or stopped. */
bool repl_witness_retakes(const struct repl_witness *w);
/* Milliseconds of provable validity left (negative: past), -1 if not the owner. */
int64_t repl_witness_left_ms(const struct repl_witness *w);
/* Stops renewing (a fenced owner: its lease runs out at etcd). */
void repl_witness_stop(struct repl_witness *w);
/* Blocking, at the end: stops renewing, gives up the standby first if
 * withdraw_standby (the guest is gone: nobody may resume it), then revokes
 * the lease (K/owner goes with it). */
void repl_witness_release(struct repl_witness *w, bool withdraw_standby);
/* Before a release: stops the thread and, if the key is ours, vouches for
 * token again (a contest won for a guest that never resumed undone). */
void repl_witness_hand_back(struct repl_witness *w, const char *token);

#endif
