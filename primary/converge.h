/* A migration's hand-over decision, as pure functions (converge.c): the
 * downtime a pause for the final epoch would cost now, and whether to hand
 * over, or to throttle the guest (auto-converge) because what it writes is
 * what misses the downtime asked for. */
#ifndef US_PRIMARY_CONVERGE_H
#define US_PRIMARY_CONVERGE_H

#include <stdbool.h>

/* What the decision is taken on (ms, bytes, bytes per ms). */
struct repl_converge {
	double pause_ms;       /* an epoch's pause (p50) */
	double rtt_ms;         /* one round trip on the link, the destination's apply of a
				* small epoch included (repl_converge_rtt_sample) */
	double bytes;          /* the last acknowledged epoch, as sent */
	double bytes_per_ms;   /* what the link carries (the --bandwidth cap if lower);
				* 0: not known, the bytes count nothing */
	double target_ms;      /* --downtime-ms */
};

enum repl_converge_step {
	REPL_CONVERGE_SWITCH,    /* pause for the final epoch now */
	REPL_CONVERGE_THROTTLE,  /* the guest's writes are what misses the goal */
};

/* The downtime the hand-over waits for: target_ms, unless the pause and the
 * round trip alone (the floor: no throttle shortens them) come within half
 * of it; then the floor plus half the target, so that over a long link an
 * idle guest hands over at once and a busy one is throttled only until
 * what it writes fits that half. */
double repl_converge_goal_ms(const struct repl_converge *c);

/* SWITCH when the prediction is within the goal, else THROTTLE (the miss is
 * then always the epoch's bytes, never the link's latency). *predicted_ms
 * and *goal_ms (either may be NULL) get what it was decided on. */
enum repl_converge_step repl_converge_decide(const struct repl_converge *c, double *predicted_ms,
					     double *goal_ms);

/* One epoch's estimate of the round trip: its capture-to-ACK time less
 * what its bytes took at bytes_per_ms (never below 0). The smallest over
 * the epochs is the link's round trip. Inline: every ACK takes a sample. */
static inline double repl_converge_rtt_sample(double lag_ms, double bytes, double bytes_per_ms)
{
	double rtt = lag_ms - (bytes_per_ms > 0 ? bytes / bytes_per_ms : 0);

	return rtt > 0 ? rtt : 0;
}

#endif
