/* Prometheus metrics of an agent (see metrics.h): the text exposition
 * format, read from the engines running now and from what outlives them.
 * Names follow the Prometheus conventions: understudy_ prefix, base units
 * (seconds, bytes), _total on counters. The counters of an engine start
 * again at 0 when a new one replaces it (protect after a takeover):
 * Prometheus' rate() treats that as a counter reset. */
#include "replication/agent.h"
#include "replication/hooks.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct repl_metrics {
	const char *host_role;
	char vm[64];                  /* "": no vm label */
	struct repl_primary *pri;
	struct repl_secondary *sec;
	uint64_t events[REPL_EV_COUNT];
	struct repl_hooks *hooks;
};

int repl_metrics_new(const char *host_role, const char *name, struct repl_metrics **out)
{
	struct repl_metrics *m = calloc(1, sizeof(*m));

	if (!m)
		return -ENOMEM;
	m->host_role = host_role;
	snprintf(m->vm, sizeof(m->vm), "%s", name ? name : "");
	*out = m;
	return 0;
}

void repl_metrics_free(struct repl_metrics *m)
{
	free(m);
}

void repl_metrics_watch_primary(struct repl_metrics *m, struct repl_primary *p)
{
	if (m)
		m->pri = p;
}

void repl_metrics_watch_secondary(struct repl_metrics *m, struct repl_secondary *s)
{
	if (m)
		m->sec = s;
}

void repl_metrics_set_hooks(struct repl_metrics *m, struct repl_hooks *h)
{
	if (m)
		m->hooks = h;
}

void repl_ops_event(const struct repl_ops *ops, enum repl_event ev,
		    const struct repl_event_info *info)
{
	if (!ops || ev >= REPL_EV_COUNT)
		return;
	if (ops->metrics)
		ops->metrics->events[ev]++;
	repl_hooks_run(ops->hooks, ev, info);
}

void repl_ops_drill_result(const struct repl_ops *ops, bool pass,
			   const struct repl_event_info *info)
{
	repl_ops_event(ops, pass ? REPL_EV_DRILL_PASS : REPL_EV_DRILL_FAIL, info);
}

void repl_primary_event(struct repl_primary *p, enum repl_event ev, const char *reason)
{
	struct repl_event_info info = {
		.role = "primary", .epoch = p->ep.acked, .peer = p->o->peer,
		.vm = repl_ops_vm(&p->o->ops, p->o->cfg.guest), .guest = p->o->cfg.guest,
		.reason = reason,
	};

	repl_ops_event(&p->o->ops, ev, &info);
}

void repl_sec_event(struct repl_secondary *s, enum repl_event ev, const char *reason)
{
	struct repl_event_info info = {
		.role = s->state >= S_ACTIVE && s->state != S_FENCED ? "primary" : "secondary",
		.epoch = s->stage.applied, .peer = s->peer_addr,
		.vm = repl_ops_vm(&s->o->ops, s->cfg.guest), .guest = s->cfg.guest, .reason = reason,
	};

	repl_ops_event(&s->o->ops, ev, &info);
}

/* ---- the exposition text ------------------------------------------------------ */

static void family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void one(FILE *f, const char *name, const char *type, const char *help, double v)
{
	family(f, name, type, help);
	fprintf(f, "%s %.17g\n", name, v);
}

static void hist(FILE *f, const char *name, const char *help, const struct repl_hist *h)
{
	uint64_t cum = 0;

	family(f, name, "histogram", help);
	for (int i = 0; i < REPL_HIST_BUCKETS; i++) {
		cum += h->count[i];
		fprintf(f, "%s_bucket{le=\"%g\"} %llu\n", name, repl_hist_le_ns(i) / 1e9,
			(unsigned long long)cum);
	}
	fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9f\n%s_count %llu\n", name,
		(unsigned long long)h->n, name, h->sum_ns / 1e9, name, (unsigned long long)h->n);
}

/* A state set: every value of names, 1 for the current one. */
static void stateset(FILE *f, const char *name, const char *label, const char *help,
		     const char *const *names, size_t n, const char *cur)
{
	family(f, name, "gauge", help);
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%s{%s=\"%s\"} %d\n", name, label, names[i], !strcmp(names[i], cur));
}

static const char *const role_names[] = { "primary", "secondary" };
static const char *const pri_states[] = {
	"unprotected", "connecting", "hello", "syncing", "first-checkpoint", "protected",
	"switching", "fenced", "done", "migrated", "in-doubt", "contending",
};
static const char *const sec_states[] = {
	"waiting", "hello", "standby", "standby-unready", "contending", "fence-failed", "active",
	"fenced", "done",
};
static const char *const enc_names[4] = { "zero", "raw", "lz4", "xor" };

static void pages(FILE *f, const char *name, const char *help, const struct proto_page_stats *a,
		  const struct proto_page_stats *b)
{
	family(f, name, "counter", help);
	for (int i = 0; i < 4; i++)
		fprintf(f, "%s{encoding=\"%s\"} %llu\n", name, enc_names[i],
			(unsigned long long)(a->enc_bytes[i] + (b ? b->enc_bytes[i] : 0)));
}

static void ratio(FILE *f, const struct proto_page_stats *a, const struct proto_page_stats *b)
{
	uint64_t in = a->bytes_in + (b ? b->bytes_in : 0), out = a->bytes_out + (b ? b->bytes_out : 0);

	one(f, "understudy_compression_ratio", "gauge",
	    "Page bytes before encoding / after (zero, lz4 and xor pages shrink), since the engine "
	    "started; 0 before the first page", out ? (double)in / (double)out : 0.0);
}

/* The statistics both kinds of engine keep. */
static void stats(FILE *f, const struct repl_stats *st)
{
	one(f, "understudy_epochs_total", "counter", "Epochs captured (primary) or applied "
	    "(secondary)", (double)st->epochs);
	one(f, "understudy_stretched_epochs_total", "counter", "Epochs that waited for a free "
	    "slot or room on the link (the link is slower than the guest)", (double)st->stretched);
	one(f, "understudy_dirty_pages", "gauge", "Pages in the last epoch", (double)st->last_dirty_pages);
	one(f, "understudy_dirty_pages_total", "counter", "Pages in all epochs",
	    (double)st->dirty_pages_total);
	one(f, "understudy_precopy_pages_total", "counter", "Pages sent ahead of their epoch's "
	    "pause while the guest ran (primary)", (double)st->pre_pages);
	one(f, "understudy_precopy_resent_pages_total", "counter", "Pre-copied pages written again "
	    "and sent again at the pause (primary)", (double)st->pre_resent);
}

/* The NIC's frames (vm_net.c), for a VM with one. */
static void net(FILE *f, struct repl_vm *v)
{
	struct repl_net_held h;

	if (!v || !v->tap)
		return;
	pthread_mutex_lock(&v->out_lock);
	h = v->net;
	pthread_mutex_unlock(&v->out_lock);
	one(f, "understudy_net_held_frames", "gauge", "Frames the guest sent that wait for their "
	    "epoch's ACK (network output commit)", (double)h.frames);
	one(f, "understudy_net_tx_frames_total", "counter", "Frames the guest sent that left "
	    "through the tap", (double)h.released);
	one(f, "understudy_net_tx_dropped_total", "counter", "Frames the guest sent that were "
	    "dropped: held frames at their bound, or refused by the tap", (double)(h.dropped + h.tap_errors));
	one(f, "understudy_net_rx_frames_total", "counter", "Frames from the tap the guest took",
	    (double)h.rx_frames);
}

/* What started the epochs and the hot set's counts (primary/cycle.c,
 * machine_set_hot_budget); all 0 where no engine captures (secondary). */
static void epoch_counts(FILE *f, const struct repl_primary *p)
{
	const struct machine *m = p && p->vm ? p->vm->m : NULL;

	family(f, "understudy_epochs_started_total", "counter", "Epochs captured, by what "
	       "started them: timer (every --epoch-ms) or output (guest output waiting, at least "
	       "--min-epoch-ms after the last capture); the first epoch after the sync and a final "
	       "one are in neither (primary)");
	fprintf(f, "understudy_epochs_started_total{trigger=\"timer\"} %llu\n"
		"understudy_epochs_started_total{trigger=\"output\"} %llu\n",
		(unsigned long long)(p ? p->epochs_timer : 0),
		(unsigned long long)(p ? p->epochs_output : 0));
	one(f, "understudy_reprotected_pages_total", "counter", "Pages the dirty-log harvests "
	    "write-protected again in KVM (each costs a write fault when the guest rewrites it; "
	    "hot pages are not) (primary)", m ? (double)m->stats.reprotected : 0.0);
	one(f, "understudy_hot_pages", "gauge", "Pages in the hot set now: left writable and "
	    "copied at every pause (primary)", m ? (double)m->hot_pages : 0.0);
	one(f, "understudy_hot_budget_pages", "gauge", "The most pages the hot set may hold now "
	    "(primary)", m ? (double)m->hot_budget : 0.0);
}

static void render_primary(FILE *f, struct repl_primary *p)
{
	const struct repl_stats *st = &p->ep.st;

	stateset(f, "understudy_role", "role", "The role of this agent (1: current)", role_names, 2,
		 "primary");
	stateset(f, "understudy_state", "state", "The state of this agent (1: current)", pri_states,
		 sizeof(pri_states) / sizeof(pri_states[0]), repl_primary_state(p));
	one(f, "understudy_epoch", "gauge", "The last epoch captured", (double)p->ep.epoch);
	one(f, "understudy_acked_epoch", "gauge", "The last epoch the secondary acknowledged",
	    (double)p->ep.acked);
	stats(f, st);
	epoch_counts(f, p);
	hist(f, "understudy_pause_seconds", "How long the guest was paused for each capture",
	     &st->pause_h);
	hist(f, "understudy_output_commit_seconds", "Capture of an epoch to its ACK: how long "
	     "its output was held", &st->commit_h);
	hist(f, "understudy_apply_seconds", "Applying an epoch to the standby (secondary)",
	     &(struct repl_hist){ 0 });
	pages(f, "understudy_sent_page_bytes_total", "Page bytes sent (sync and epochs), by "
	      "encoding, entry headers included", &st->pages, &p->sync.pages);
	pages(f, "understudy_received_page_bytes_total", "Page bytes received, by encoding",
	      &(struct proto_page_stats){ 0 }, NULL);
	ratio(f, &st->pages, &p->sync.pages);
	one(f, "understudy_sent_bytes_total", "counter", "Bytes handed to the link",
	    (double)p->link.bytes_sent);
	one(f, "understudy_received_bytes_total", "counter", "Bytes read from the link",
	    (double)p->link.bytes_rcvd);
	one(f, "understudy_lag_seconds", "gauge", "Capture of the last acknowledged epoch to its ACK",
	    st->lag_ns / 1e9);
	if (p->link.conn)
		one(f, "understudy_heartbeat_age_seconds", "gauge", "Since the peer was last heard "
		    "(absent while there is no link)", (now_ns() - p->link.last_rx_ns) / 1e9);
	net(f, p->vm);
}

static void render_secondary(FILE *f, struct repl_secondary *s)
{
	const struct repl_stats *st = &s->stage.st;
	bool active = s->state == S_ACTIVE;

	stateset(f, "understudy_role", "role", "The role of this agent (1: current)", role_names, 2,
		 active ? "primary" : "secondary");
	stateset(f, "understudy_state", "state", "The state of this agent (1: current)", sec_states,
		 sizeof(sec_states) / sizeof(sec_states[0]), repl_sec_state_name(s));
	one(f, "understudy_epoch", "gauge", "The last epoch applied to the standby",
	    (double)s->stage.applied);
	one(f, "understudy_acked_epoch", "gauge", "The last epoch acknowledged to the primary",
	    (double)s->stage.applied);
	stats(f, st);
	epoch_counts(f, NULL);
	hist(f, "understudy_pause_seconds", "How long the guest was paused for each capture "
	     "(primary)", &(struct repl_hist){ 0 });
	hist(f, "understudy_output_commit_seconds", "Capture of an epoch to its ACK (primary)",
	     &(struct repl_hist){ 0 });
	hist(f, "understudy_apply_seconds", "Applying an epoch to the standby", &st->pause_h);
	pages(f, "understudy_sent_page_bytes_total", "Page bytes sent, by encoding (primary)",
	      &(struct proto_page_stats){ 0 }, NULL);
	pages(f, "understudy_received_page_bytes_total", "Page bytes received (sync and epochs), "
	      "by encoding, entry headers included", &st->pages, NULL);
	ratio(f, &st->pages, NULL);
	one(f, "understudy_sent_bytes_total", "counter", "Bytes handed to the link",
	    (double)s->link.bytes_sent);
	one(f, "understudy_received_bytes_total", "counter", "Bytes read from the link",
	    (double)s->link.bytes_rcvd);
	one(f, "understudy_lag_seconds", "gauge", "Capture of the last acknowledged epoch to its "
	    "ACK (primary)", 0.0);
	if (s->link.conn)
		one(f, "understudy_heartbeat_age_seconds", "gauge", "Since the peer was last heard "
		    "(absent while there is no link)", (now_ns() - s->link.last_rx_ns) / 1e9);
	net(f, s->vm);
}

/* run or restore without protection: the VM runs, nothing is replicated. */
static void render_host(FILE *f, const char *role)
{
	stateset(f, "understudy_role", "role", "The role of this agent (1: current)", role_names, 2,
		 role);
	stateset(f, "understudy_state", "state", "The state of this agent (1: current)", pri_states,
		 sizeof(pri_states) / sizeof(pri_states[0]), "unprotected");
}

static void render_process(FILE *f, const struct repl_metrics *m)
{
	static const char *const hook_results[REPL_HOOK_RESULTS] = { "ok", "failed", "timeout" };
	uint64_t hooks[REPL_HOOK_RESULTS] = { 0 };

	one(f, "understudy_takeovers_total", "counter", "Takeovers by this agent (it resumed "
	    "the guest of a failed primary)", (double)m->events[REPL_EV_TAKEOVER]);
	one(f, "understudy_fences_total", "counter", "Times this agent was fenced (stopped for "
	    "good: lease lost, or the other side took over)", (double)m->events[REPL_EV_FENCED]);
	one(f, "understudy_migrations_total", "counter", "Guests this agent handed over",
	    (double)m->events[REPL_EV_MIGRATED]);
	one(f, "understudy_switchovers_total", "counter", "Planned role swaps",
	    (double)m->events[REPL_EV_SWITCHOVER]);
	family(f, "understudy_drills_total", "counter", "Failover drills, by result");
	fprintf(f, "understudy_drills_total{result=\"pass\"} %llu\n"
		"understudy_drills_total{result=\"fail\"} %llu\n",
		(unsigned long long)m->events[REPL_EV_DRILL_PASS],
		(unsigned long long)m->events[REPL_EV_DRILL_FAIL]);
	family(f, "understudy_events_total", "counter", "Events of this agent (what --on-event "
	       "is run for), by event");
	for (int i = 0; i < REPL_EV_COUNT; i++)
		fprintf(f, "understudy_events_total{event=\"%s\"} %llu\n", repl_event_name(i),
			(unsigned long long)m->events[i]);
	family(f, "understudy_hook_runs_total", "counter", "Runs of the --on-event command, by "
	       "result (timeout: killed at --on-event-timeout-ms)");
	repl_hooks_counts(m->hooks, hooks);
	for (int i = 0; i < REPL_HOOK_RESULTS; i++)
		fprintf(f, "understudy_hook_runs_total{result=\"%s\"} %llu\n", hook_results[i],
			(unsigned long long)hooks[i]);
}

/* text with the label vm="NAME" added to every sample (a line that is not
 * a comment): name{a="b"} v -> name{a="b",vm="NAME"} v, name v ->
 * name{vm="NAME"} v. The name needs no escaping (cli/name.c's charset). */
static char *label_vm(const char *vm, char *text, size_t *len)
{
	char *out = NULL, *line, *save = NULL;
	size_t n = 0;
	FILE *f;

	if (!vm[0])
		return text;
	f = open_memstream(&out, &n);
	if (!f) {
		free(text);
		return NULL;
	}
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		size_t name_len = strcspn(line, "{ ");

		if (line[0] == '#')
			fprintf(f, "%s\n", line);
		else if (line[name_len] == '{')
			fprintf(f, "%.*s,vm=\"%s\"%s\n", (int)strcspn(line, "}"), line, vm,
				line + strcspn(line, "}"));
		else
			fprintf(f, "%.*s{vm=\"%s\"}%s\n", (int)name_len, line, vm, line + name_len);
	}
	free(text);
	if (fclose(f)) {
		free(out);
		return NULL;
	}
	*len = n;
	return out;
}

char *repl_metrics_render(void *ctx, size_t *len)
{
	struct repl_metrics *m = ctx;
	char *text = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&text, &n);

	if (!f)
		return NULL;
	if (m->pri)
		render_primary(f, m->pri);
	else if (m->sec)
		render_secondary(f, m->sec);
	else
		render_host(f, m->host_role);
	render_process(f, m);
	if (fclose(f)) {
		free(text);
		return NULL;
	}
	*len = n;
	return label_vm(m->vm, text, len);
}
