/* secondary/ inside: the state of a drill, shared by drill.c (the run)
 * and drill_report.c (probe verdicts, memory, the report). */
#ifndef US_SECONDARY_DRILL_INT_H
#define US_SECONDARY_DRILL_INT_H

#include <stdatomic.h>
#include <time.h>

#include "secondary/drill.h"

#define DRILL_OUT_MAX (1u << 20)   /* clone console output kept */
#define DRILL_LINE_MAX 160
#define DRILL_RELAY_MAX 1024       /* console bytes per relay request (external probe) */

enum drill_state { DRILL_IDLE, DRILL_ASKED, DRILL_RUNNING, DRILL_PROBING, DRILL_ENDING, DRILL_DONE };

/* One drill, from the request to its report. */
struct drill_run {
	enum drill_state state;
	uint64_t id;
	unsigned seconds;
	bool external;                   /* the CLI probes (--probe CMD) */
	struct timespec wall_start, wall_end;
	uint64_t t_asked_ns, t_active_ns, t_probe_ns, t_end_asked_ns, t_stopped_ns;
	uint64_t rto_ns, digest_ns, build_ns;
	bool active;                     /* the clone's view is frozen (activation on) */
	uint64_t apply_npause0;          /* the standby's apply count at activation */
	uint64_t apply_before[3], apply_during[3];   /* p50, p99, max of apply times */
	bool apply_known;
	uint64_t epoch_start, epoch_end;
	size_t held_bytes;               /* output a takeover would have replayed */

	/* The clone and its console (written on its vCPU threads). */
	struct machine *clone;
	pthread_mutex_t out_lock;
	char *out;                       /* DRILL_OUT_MAX bytes */
	size_t out_len;
	uint64_t out_total;              /* written, kept or not */
	atomic_bool clone_stopped;
	int clone_status;
	uint64_t preserved;              /* pages copied for the clone before an apply */
	uint64_t preserve_ns, preserve_max_ns, preserve_epochs;   /* ...and the time it took */
	uint64_t private_bytes, rss_bytes;   /* the clone mapping, at its end */
	bool memory_known;

	/* The committed output when the clone started. */
	char committed_line[DRILL_LINE_MAX];
	char committed_tail[DRILL_LINE_MAX];
	bool have_committed_line;

	/* The primary's word. */
	Understudy__DrillReport primary, stats;
	bool have_digest, have_stats;
	uint32_t clone_crc;

	size_t probe_from;
	char probe_sent[32];
	char probe[256];                 /* what the probe found */
	bool probe_done, probe_ok;
	bool counter_checked;            /* the answer matched the acknowledged output */
	bool counter_compared;           /* the answer was compared with a reply: */
	int64_t counter_want, counter_got;   /* ...the one expected, the clone's */

	bool failed;
	char reason[256];
	char *report;                    /* JSON, once done */
};

struct repl_drill {
	/* Committed output of the standby, kept across drills. */
	char tail[DRILL_LINE_MAX];
	size_t tail_len;
	char last_line[DRILL_LINE_MAX];
	bool have_line;
	ev_timer tick_w;
	struct drill_run run;
};

/* drill.c */
void drill_stop_clone(struct drill_run *r);
void drill_finish(struct repl_secondary *s);

/* drill_report.c */
/* Marks the drill failed; the first reason stays the reason. */
void drill_fail(struct drill_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The built-in probe's answer in the clone output: 1 judged (r->probe,
 * r->probe_ok set; drill_fail if wrong), 0 still waiting. */
int drill_probe_judge(struct drill_run *r, const char *guest, const char *out);
/* The clone mapping's Private_Dirty and Rss from /proc/self/smaps. */
void drill_measure_memory(struct drill_run *r);
/* r->report: the summary object (JSON). */
void drill_report_build(struct repl_secondary *s);
char *drill_status_json(struct repl_secondary *s);
char *drill_console_in(struct drill_run *r, const char *hex);
char *drill_console_out(struct drill_run *r, const char *from);

#endif
