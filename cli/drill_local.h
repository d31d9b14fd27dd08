/* cli private: understudy drill local, a self-contained protected pair on
 * this host, in a network namespace of its own, with faults injected at
 * seeded moments and every reply checked against an uninterrupted run.
 *   cli/drill_local.c         options, the trials, the report
 *   cli/drill_local_trial.c   one trial: the pair up, the fault, the checks
 *   cli/drill_local_pair.c    the agents, etcd, the faults (kill, nft, tc)
 *   cli/drill_local_client.c  the oracle and the console client */
#ifndef US_CLI_DRILL_LOCAL_H
#define US_CLI_DRILL_LOCAL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

enum dl_kind { DL_KILL, DL_STOP, DL_PARTITION, DL_LOSS, DL_SLOWLINK };

/* ---- the oracle and the client (cli/drill_local_client.c) ------------------ */

/* n -> digest of one uninterrupted run: digest[n] for 1 <= n <= count. */
struct dl_oracle {
	unsigned count;
	char (*digest)[24];
};

/* self, guest: the binary and its --guest spec; dir: the drill's directory,
 * where the run's control socket goes. 0 or -errno. */
int dl_oracle_run(const char *self, const char *guest, const char *dir, unsigned count,
		  struct dl_oracle *o) __attribute__((warn_unused_result));
void dl_oracle_fini(struct dl_oracle *o);

/* One user of the guest's console: one incr at a time, every reply checked
 * (the rules of tests/failover.py's Client). */
struct dl_client {
	const struct dl_oracle *o;
	int fd;                  /* the console connection, -1 none */
	char buf[512];           /* bytes of a line not complete yet */
	size_t len;
	char head[512];          /* a line the last connection ended inside */
	size_t head_len;
	long long conn_prev;     /* n of the last line on this connection, -1 none */
	unsigned long long top;  /* the highest n seen */
	unsigned lines, replayed, conns;
	bool pending;            /* an incr sent and not answered */
	double last_line_s;      /* when the last line came (monotonic s) */
	double first_after_s;    /* first line after dl_client_mark(), 0 none yet */
	char error[256];         /* the first broken rule, "" while none */
};

void dl_client_init(struct dl_client *c, const struct dl_oracle *o);
/* Takes fd as the new connection (the old one, if any, is closed; a line
 * it ended inside may go on here). */
void dl_client_attach(struct dl_client *c, int fd);
void dl_client_close(struct dl_client *c);
/* Sends an incr if none is pending and at least gap_s passed since the
 * last line, then reads what comes within wait_ms and checks it. Returns
 * lines read, 0 none, -EPIPE when the console closed. */
int dl_client_step(struct dl_client *c, double gap_s, int wait_ms);
/* Reads (and checks) lines until none came for quiet_ms; -EPIPE on close. */
int dl_client_drain(struct dl_client *c, int quiet_ms);
/* Asks "get" (after draining what was pending): *n the guest's counter,
 * checked against the oracle and >= the highest n seen. 0, -EPIPE,
 * -ETIMEDOUT (no answer within timeout_ms), -EPROTO (an answer that is no
 * line of the run: the client's error says so). */
int dl_client_get(struct dl_client *c, int timeout_ms, unsigned long long *n)
	__attribute__((warn_unused_result));
/* Records when the next line arrives (the RTO after a fault). */
void dl_client_mark(struct dl_client *c);
bool dl_client_failed(const struct dl_client *c);

/* ---- the pair and the faults (cli/drill_local_pair.c) ------------------- */

struct dl_pair {
	const char *self, *guest, *dir;  /* binary, guest spec, temp dir */
	unsigned trial;
	int timeout_ms;                 /* the secondary's failover timeout */
	int pri_timeout_ms;             /* the primary's (--timeout-ms) */
	const char *witness;            /* etcd:HOST:PORT or NULL */
	int sport, scon, pcon;          /* secondary link, consoles */
	char sctl[512], pctl[512], slog[512], plog[512];
	pid_t pri, sec;
	bool stopped;                   /* the primary is SIGSTOPped */
	bool cut, lossy, slow;          /* nft table / tc qdisc in place */
};

/* Starts the secondary, then the primary; 0 once both answer on their
 * control sockets, else -errno with *why set. */
int dl_pair_start(struct dl_pair *p, const char **why) __attribute__((warn_unused_result));
/* "status json" of one agent, parsed into role/state/acked (role "" when
 * it does not answer). vouched: with a witness, the standby is vouched for. */
struct dl_status {
	char role[16], state[24];
	unsigned long long epoch, acked;
	bool vouched;
};
void dl_pair_status(const char *ctl, struct dl_status *st);
/* The fault of kind, now. 0 or -errno. */
int dl_pair_fault(struct dl_pair *p, enum dl_kind kind) __attribute__((warn_unused_result));
/* Undoes a network fault (nft table, tc qdisc); SIGCONT of a stopped primary. */
void dl_pair_heal(struct dl_pair *p);
/* Everything down: the agents killed and reaped, faults removed. */
void dl_pair_stop(struct dl_pair *p);
/* Whether the child *pid runs; once it is reaped here, *pid = 0. */
bool dl_pair_alive(pid_t *pid);

/* A one-member etcd on 127.0.0.1 with its data under dir: *pid, and the
 * witness option value in ep ("etcd:127.0.0.1:PORT"). */
int dl_etcd_start(const char *dir, pid_t *pid, char *ep, size_t len)
	__attribute__((warn_unused_result));
/* Runs argv (a helper: ip, nft, tc, curl) with stdin from in (or none),
 * stdout to the file out (or none); its exit
 * status, or -errno. */
int dl_run(char *const argv[], const char *in, const char *out);

double dl_now_s(void);

/* ---- one trial (cli/drill_local_trial.c) -------------------------------- */

/* A seeded generator (splitmix64): --seed replays the same moments. */
struct dl_rng {
	uint64_t s;
};
double dl_rng_uniform(struct dl_rng *r, double lo, double hi);

struct dl_ctx {
	enum dl_kind kind;
	const char *kind_name;
	const char *self, *guest, *dir;
	const char *witness;             /* etcd:HOST:PORT with --witness, else NULL */
	int timeout_ms, pri_timeout_ms;  /* the secondary's and the primary's */
	const struct dl_oracle *oracle;
};

struct dl_trial {
	unsigned idx;
	double fault_after_ms;           /* the fault, after the pair was protected */
	double rto_ms;                   /* the fault -> the first reply after it, -1 none */
	bool took_over;
	unsigned long long top;          /* the highest n the client saw */
	unsigned long long survivor;     /* the survivor's counter at the end */
	unsigned long long rpo;          /* acknowledged replies lost */
	unsigned replayed, lines;
	unsigned long long acked_during; /* epochs acknowledged while the fault lasted */
	char why[300];                   /* "" on PASS */
	char note[200];
};

/* Runs trial idx of x's kind, its fault at a moment drawn from seed and
 * idx; the outcome in *t (t->why empty: PASS). */
void dl_trial_run(const struct dl_ctx *x, unsigned idx, uint64_t seed, struct dl_trial *t);

#endif
