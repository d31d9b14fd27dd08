/* A migration's hand-over decision (converge.h). Before, the predicted
 * downtime was an epoch's pause plus its capture-to-ACK time, and
 * auto-converge throttled whenever that missed the target: over a link
 * whose round trip alone exceeds the target, an idle guest was throttled
 * to 99 % and never handed over. Here the round trip is a floor of its
 * own, and only the epoch's bytes are what a throttle is for. */
#include "primary/converge.h"

/* Predicted downtime: the pause, the final epoch at the link's bandwidth,
 * and one round trip to the destination's word. */
static double repl_converge_predict_ms(const struct repl_converge *c)
{
	double transfer = c->bytes_per_ms > 0 ? c->bytes / c->bytes_per_ms : 0;

	return c->pause_ms + c->rtt_ms + transfer;
}

double repl_converge_goal_ms(const struct repl_converge *c)
{
	double floor_goal = c->pause_ms + c->rtt_ms + c->target_ms / 2;

	return floor_goal > c->target_ms ? floor_goal : c->target_ms;
}

enum repl_converge_step repl_converge_decide(const struct repl_converge *c, double *predicted_ms,
					     double *goal_ms)
{
	double predicted = repl_converge_predict_ms(c), goal = repl_converge_goal_ms(c);

	if (predicted_ms)
		*predicted_ms = predicted;
	if (goal_ms)
		*goal_ms = goal;
	return predicted <= goal ? REPL_CONVERGE_SWITCH : REPL_CONVERGE_THROTTLE;
}
