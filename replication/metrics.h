/* The operations side of the agents: Prometheus metrics and event hooks.
 *
 * Counters of the running engines stay where they are (struct repl_stats,
 * the links); an agent process has one struct repl_metrics that knows which
 * engines run now and holds what outlives them (takeovers, fences, drills,
 * hook runs). repl_metrics_render() turns all of it into the Prometheus
 * text exposition format; it reads the engines, so it runs on their loop
 * (net/metrics.c serves it from that loop, see there).
 *
 * Events (protected, takeover, ...) go through repl_ops_event(): counted
 * here, and handed to the --on-event command (replication/hooks.h). */
#ifndef US_REPL_METRICS_H
#define US_REPL_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* A latency histogram: fixed upper bounds from 0.1 ms to 1 s (plus +Inf),
 * counts per bucket (not cumulative), in nanoseconds. */
#define REPL_HIST_BUCKETS 13
struct repl_hist {
	uint64_t count[REPL_HIST_BUCKETS + 1];   /* the last one: above 1 s */
	uint64_t n;
	uint64_t sum_ns;
};

/* (wire.c, with the other statistics) */
void repl_hist_add(struct repl_hist *h, uint64_t ns);
/* The upper bound of bucket i < REPL_HIST_BUCKETS, ns. */
uint64_t repl_hist_le_ns(int i);

enum repl_event {
	REPL_EV_PROTECTED,     /* the first epoch acknowledged after the initial sync */
	REPL_EV_UNPROTECTED,   /* the secondary is lost, or a standby took over: no copy */
	REPL_EV_TAKEOVER,      /* this standby resumed the guest */
	REPL_EV_FENCED,        /* this side stopped for good: lease lost, or the other took over */
	REPL_EV_SWITCHOVER,    /* a planned role swap (repl_ops_event by its code) */
	REPL_EV_MIGRATED,      /* this source handed the guest over */
	REPL_EV_DRILL_PASS,    /* a failover drill passed (repl_ops_drill_result) */
	REPL_EV_DRILL_FAIL,
	REPL_EV_COUNT,
};

/* Details of an event; NULL strings count as "". */
struct repl_event_info {
	const char *role;      /* primary, secondary */
	uint64_t epoch;        /* the last one acknowledged or applied */
	const char *peer;      /* HOST:PORT of the other side, as known */
	const char *vm;        /* the VM's name (--name), else its guest */
	const char *guest;     /* the guest: counter, linux, ... (arguments aside) */
	const char *reason;    /* one line, for people */
};

struct repl_metrics;
struct repl_hooks;
enum repl_hook_result { REPL_HOOK_OK, REPL_HOOK_FAILED, REPL_HOOK_TIMEOUT, REPL_HOOK_RESULTS };

/* The VM's name, one per agent process, shared by every copy of its
 * struct repl_ops (the engines that follow one another keep it). own: the
 * operator gave it (--name, name =); otherwise (the config file's, the
 * guest's, none) it is a default that the primary's Hello replaces. */
#define REPL_NAME_MAX 64
struct repl_name {
	char name[REPL_NAME_MAX];   /* "": none */
	bool own;
};

/* What an agent hands its engines (opts->ops); any pointer may be NULL. */
struct repl_ops {
	struct repl_metrics *metrics;
	struct repl_hooks *hooks;
	struct repl_name *vm;  /* the VM's name, NULL when not known */
};

/* The VM's name of ops when known, else guest (hooks, the fence, status). */
static inline const char *repl_ops_vm(const struct repl_ops *ops, const char *guest)
{
	return ops && ops->vm && ops->vm->name[0] ? ops->vm->name : guest;
}
/* The name for a Hello: ops' name, "" when none (not the guest). */
static inline const char *repl_ops_hello_name(const struct repl_ops *ops)
{
	return repl_ops_vm(ops, "");
}
/* A name a peer sent: 1..REPL_NAME_MAX-1 of A-Z a-z 0-9 . _ -, no leading '.'. */
bool repl_name_valid(const char *name);
/* The primary's Hello named the VM peer (NULL or "": an older primary, or
 * none: nothing changes). A secondary with a name of its own refuses
 * another (-EINVAL, err names both); one without takes it for its logs,
 * status, metrics, hooks and fence, and keeps it as its own from then on.
 * -EPROTO for a name that is not one. Loop thread. */
int repl_ops_peer_name(const struct repl_ops *ops, const char *peer, char *err, size_t errlen);

/* Counts ev and runs the hook (never waits for it). ops may be NULL. */
void repl_ops_event(const struct repl_ops *ops, enum repl_event ev,
		    const struct repl_event_info *info);
/* For the drills: counts understudy_drills_total{result=pass|fail} and runs
 * the hook with drill-pass or drill-fail. */
void repl_ops_drill_result(const struct repl_ops *ops, bool pass,
			   const struct repl_event_info *info);
/* host_role: what this process is before any engine runs ("primary" for
 * run and restore, "secondary"). name: the VM's (copied; NULL or "": none),
 * the label vm="NAME" of every sample. */
int repl_metrics_new(const char *host_role, const char *name, struct repl_metrics **out)
	__attribute__((warn_unused_result));
void repl_metrics_free(struct repl_metrics *m);
/* The engine running now, which renders itself (primary/metrics.c,
 * secondary/metrics.c) with the helpers below; agent NULL: none any more.
 * A primary engine is rendered over a secondary's (a standby that took
 * over and protects its guest). m may be NULL. */
enum repl_metrics_engine { REPL_METRICS_PRIMARY, REPL_METRICS_SECONDARY, REPL_METRICS_ENGINES };
void repl_metrics_watch(struct repl_metrics *m, enum repl_metrics_engine e,
			void (*render)(FILE *f, void *agent), void *agent);
/* The hooks whose runs are counted (understudy_hook_runs_total), or NULL. */
void repl_metrics_set_hooks(struct repl_metrics *m, struct repl_hooks *h);
/* The exposition text (malloc'd, *len bytes), or NULL when out of memory.
 * Loop thread only. ctx: the struct repl_metrics. */
char *repl_metrics_render(void *ctx, size_t *len);

/* ---- the exposition text, for the engines' render ------------------------------- */

struct machine;
struct proto_page_stats;
struct repl_stats;
struct repl_vm;

/* A family of one sample. */
void repl_metrics_one(FILE *f, const char *name, const char *type, const char *help, double v);
void repl_metrics_hist(FILE *f, const char *name, const char *help, const struct repl_hist *h);
/* A state set: every value of names, 1 for the current one. */
void repl_metrics_stateset(FILE *f, const char *name, const char *label, const char *help,
			   const char *const *names, size_t n, const char *cur);
/* understudy_role, and understudy_state over the primary's states. */
void repl_metrics_role(FILE *f, const char *role);
void repl_metrics_pri_state(FILE *f, const char *state);
/* Page bytes by encoding, a's plus b's (b may be NULL), and their ratio. */
void repl_metrics_pages(FILE *f, const char *name, const char *help, const struct proto_page_stats *a,
			const struct proto_page_stats *b);
void repl_metrics_ratio(FILE *f, const struct proto_page_stats *a, const struct proto_page_stats *b);
/* The statistics both kinds of engine keep. */
void repl_metrics_stats(FILE *f, const struct repl_stats *st);
/* The NIC's frames, for a VM with one (v may be NULL). */
void repl_metrics_net(FILE *f, struct repl_vm *v);
/* What started the epochs, and the hot set's counts of m (NULL: none). */
void repl_metrics_epoch_counts(FILE *f, uint64_t timer, uint64_t output, const struct machine *m);

#endif
