/* The secondary's Prometheus metrics (replication/metrics.c writes the
 * exposition text and the process's own counts) and its events. */
#include "secondary/secondary_int.h"

#include <stdio.h>

static const char *const sec_states[] = {
	"waiting", "hello", "standby", "standby-unready", "contending", "fence-failed", "active",
	"fenced", "done",
};
void repl_sec_event(struct repl_secondary *s, enum repl_event ev, const char *reason)
{
	struct repl_event_info info = {
		.role = s->state >= S_ACTIVE && s->state != S_FENCED ? "primary" : "secondary",
		.epoch = s->stage.applied, .peer = s->peer_addr,
		.vm = repl_ops_vm(&s->o->ops, s->cfg.guest), .guest = s->cfg.guest, .reason = reason,
	};

	repl_ops_event(&s->o->ops, ev, &info);
}

static void render_secondary(FILE *f, void *agent)
{
	struct repl_secondary *s = agent;
	const struct repl_stats *st = &s->stage.st;
	bool active = s->state == S_ACTIVE;

	repl_metrics_role(f, active ? "primary" : "secondary");
	repl_metrics_stateset(f, "understudy_state", "state", "The state of this agent (1: current)", sec_states,
			      sizeof(sec_states) / sizeof(sec_states[0]), repl_sec_state_name(s));
	repl_metrics_one(f, "understudy_epoch", "gauge", "The last epoch applied to the standby",
			 (double)s->stage.applied);
	repl_metrics_one(f, "understudy_acked_epoch", "gauge", "The last epoch acknowledged to the primary",
			 (double)s->stage.applied);
	repl_metrics_stats(f, st);
	repl_metrics_epoch_counts(f, 0, 0, NULL);
	repl_metrics_hist(f, "understudy_pause_seconds", "How long the guest was paused for each capture "
			  "(primary)", &(struct repl_hist){ 0 });
	repl_metrics_hist(f, "understudy_output_commit_seconds", "Capture of an epoch to its ACK (primary)",
			  &(struct repl_hist){ 0 });
	repl_metrics_hist(f, "understudy_apply_seconds", "Applying an epoch to the standby", &st->pause_h);
	repl_metrics_pages(f, "understudy_sent_page_bytes_total", "Page bytes sent, by encoding (primary)",
			   &(struct proto_page_stats){ 0 }, NULL);
	repl_metrics_pages(f, "understudy_received_page_bytes_total", "Page bytes received (sync and epochs), "
			   "by encoding, entry headers included", &st->pages, NULL);
	repl_metrics_ratio(f, &st->pages, NULL);
	repl_metrics_one(f, "understudy_sent_bytes_total", "counter", "Bytes handed to the link",
			 (double)s->link.bytes_sent);
	repl_metrics_one(f, "understudy_received_bytes_total", "counter", "Bytes read from the link",
			 (double)s->link.bytes_rcvd);
	repl_metrics_one(f, "understudy_lag_seconds", "gauge", "Capture of the last acknowledged epoch to its "
			 "ACK (primary)", 0.0);
	if (s->link.conn)
		repl_metrics_one(f, "understudy_heartbeat_age_seconds", "gauge", "Since the peer was last heard "
				 "(absent while there is no link)", (now_ns() - s->link.last_rx_ns) / 1e9);
	repl_metrics_net(f, s->vm);
}

void repl_metrics_watch_secondary(struct repl_metrics *m, struct repl_secondary *s)
{
	repl_metrics_watch(m, REPL_METRICS_SECONDARY, render_secondary, s);
}
