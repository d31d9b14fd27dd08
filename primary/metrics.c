/* The primary engine's Prometheus metrics (replication/metrics.c writes
 * the exposition text and the process's own counts) and its events. */
#include "primary/primary_int.h"

#include <stdio.h>

void repl_primary_event(struct repl_primary *p, enum repl_event ev, const char *reason)
{
	struct repl_event_info info = {
		.role = "primary", .epoch = p->ep.acked, .peer = p->o->peer,
		.vm = repl_ops_vm(&p->o->ops, p->o->cfg.guest), .guest = p->o->cfg.guest,
		.reason = reason,
	};

	repl_ops_event(&p->o->ops, ev, &info);
}

static void render_primary(FILE *f, void *agent)
{
	struct repl_primary *p = agent;
	const struct repl_stats *st = &p->ep.st;

	repl_metrics_role(f, "primary");
	repl_metrics_pri_state(f, repl_primary_state(p));
	repl_metrics_one(f, "understudy_epoch", "gauge", "The last epoch captured", (double)p->ep.epoch);
	repl_metrics_one(f, "understudy_acked_epoch", "gauge", "The last epoch the secondary acknowledged",
			 (double)p->ep.acked);
	repl_metrics_stats(f, st);
	repl_metrics_epoch_counts(f, p->epochs_timer, p->epochs_output, p->vm ? p->vm->m : NULL);
	repl_metrics_hist(f, "understudy_pause_seconds", "How long the guest was paused for each capture",
			  &st->pause_h);
	repl_metrics_hist(f, "understudy_output_commit_seconds", "Capture of an epoch to its ACK: how long "
			  "its output was held", &st->commit_h);
	repl_metrics_hist(f, "understudy_apply_seconds", "Applying an epoch to the standby (secondary)",
			  &(struct repl_hist){ 0 });
	repl_metrics_pages(f, "understudy_sent_page_bytes_total", "Page bytes sent (sync and epochs), by "
			   "encoding, entry headers included", &st->pages, &p->sync.pages);
	repl_metrics_pages(f, "understudy_received_page_bytes_total", "Page bytes received, by encoding",
			   &(struct proto_page_stats){ 0 }, NULL);
	repl_metrics_ratio(f, &st->pages, &p->sync.pages);
	repl_metrics_one(f, "understudy_sent_bytes_total", "counter", "Bytes handed to the link",
			 (double)p->link.bytes_sent);
	repl_metrics_one(f, "understudy_received_bytes_total", "counter", "Bytes read from the link",
			 (double)p->link.bytes_rcvd);
	repl_metrics_one(f, "understudy_lag_seconds", "gauge", "Capture of the last acknowledged epoch to its ACK",
			 st->lag_ns / 1e9);
	if (p->link.conn)
		repl_metrics_one(f, "understudy_heartbeat_age_seconds", "gauge", "Since the peer was last heard "
				 "(absent while there is no link)", (now_ns() - p->link.last_rx_ns) / 1e9);
	repl_metrics_net(f, p->vm);
}

void repl_metrics_watch_primary(struct repl_metrics *m, struct repl_primary *p)
{
	repl_metrics_watch(m, REPL_METRICS_PRIMARY, render_primary, p);
}
