/* Prometheus metrics of an agent (see metrics.h): the text exposition
 * format, read from the engines running now and from what outlives them.
 * Names follow the Prometheus conventions: understudy_ prefix, base units
 * (seconds, bytes), _total on counters. The counters of an engine start
 * again at 0 when a new one replaces it (protect after a takeover):
 * Prometheus' rate() treats that as a counter reset. */
#include "replication/replication_int.h"
#include "replication/hooks.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct repl_metrics {
	const char *host_role;
	char vm[64];                  /* "": no vm label */
	struct {
		void (*render)(FILE *f, void *agent);
		void *agent;
	} engine[REPL_METRICS_ENGINES];
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

void repl_metrics_watch(struct repl_metrics *m, enum repl_metrics_engine e,
			void (*render)(FILE *f, void *agent), void *agent)
{
	if (m) {
		m->engine[e].render = render;
		m->engine[e].agent = agent;
	}
}

void repl_metrics_set_hooks(struct repl_metrics *m, struct repl_hooks *h)
{
	if (m)
		m->hooks = h;
}

/* The label vm="NAME" from now on (repl_ops_peer_name); m may be NULL. */
static void metrics_set_name(struct repl_metrics *m, const char *name)
{
	if (m)
		snprintf(m->vm, sizeof(m->vm), "%s", name ? name : "");
}

bool repl_name_valid(const char *name)
{
	static const char chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-";
	size_t n = strlen(name);

	return n >= 1 && n < REPL_NAME_MAX && name[0] != '.' && strspn(name, chars) == n;
}

int repl_ops_peer_name(const struct repl_ops *ops, const char *peer, char *err, size_t errlen)
{
	struct repl_name *vm = ops ? ops->vm : NULL;
	char was[REPL_NAME_MAX];

	if (!peer || !peer[0] || !vm || !strcmp(peer, vm->name))
		return 0;
	if (!repl_name_valid(peer)) {
		snprintf(err, errlen, "the primary's VM name is not a name (%zu bytes)", strlen(peer));
		return -EPROTO;
	}
	if (vm->own) {
		snprintf(err, errlen, "the primary's VM is named '%s', this secondary's '%s' (its "
			 "--name, name =, or first primary's): give both sides one name",
			 peer, vm->name);
		return -EINVAL;
	}
	snprintf(was, sizeof(was), "%s", vm->name);
	snprintf(vm->name, sizeof(vm->name), "%s", peer);
	vm->own = true;
	log_set_vm(vm->name);
	metrics_set_name(ops->metrics, vm->name);
	log_info("ops", "the primary names the VM '%s': this secondary's name from now on%s%s%s",
		 peer, was[0] ? " (was '" : "", was, was[0] ? "', a default; the control socket "
		 "stays where it is)" : "");
	return 0;
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

/* ---- the exposition text ------------------------------------------------------ */

/* # HELP and # TYPE of a family. */
static void repl_metrics_family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void repl_metrics_one(FILE *f, const char *name, const char *type, const char *help, double v)
{
	repl_metrics_family(f, name, type, help);
	fprintf(f, "%s %.17g\n", name, v);
}

void repl_metrics_hist(FILE *f, const char *name, const char *help, const struct repl_hist *h)
{
	uint64_t cum = 0;

	repl_metrics_family(f, name, "histogram", help);
	for (int i = 0; i < REPL_HIST_BUCKETS; i++) {
		cum += h->count[i];
		fprintf(f, "%s_bucket{le=\"%g\"} %llu\n", name, repl_hist_le_ns(i) / 1e9,
			(unsigned long long)cum);
	}
	fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9f\n%s_count %llu\n", name,
		(unsigned long long)h->n, name, h->sum_ns / 1e9, name, (unsigned long long)h->n);
}

/* A state set: every value of names, 1 for the current one. */
void repl_metrics_stateset(FILE *f, const char *name, const char *label, const char *help,
		     const char *const *names, size_t n, const char *cur)
{
	repl_metrics_family(f, name, "gauge", help);
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%s{%s=\"%s\"} %d\n", name, label, names[i], !strcmp(names[i], cur));
}

static const char *const role_names[] = { "primary", "secondary" };
static const char *const pri_states[] = {
	"unprotected", "connecting", "hello", "syncing", "first-checkpoint", "protected",
	"switching", "fenced", "done", "migrated", "in-doubt", "contending",
};
static const char *const enc_names[4] = { "zero", "raw", "lz4", "xor" };

void repl_metrics_pages(FILE *f, const char *name, const char *help, const struct proto_page_stats *a,
		  const struct proto_page_stats *b)
{
	repl_metrics_family(f, name, "counter", help);
	for (int i = 0; i < 4; i++)
		fprintf(f, "%s{encoding=\"%s\"} %llu\n", name, enc_names[i],
			(unsigned long long)(a->enc_bytes[i] + (b ? b->enc_bytes[i] : 0)));
}

void repl_metrics_ratio(FILE *f, const struct proto_page_stats *a, const struct proto_page_stats *b)
{
	uint64_t in = a->bytes_in + (b ? b->bytes_in : 0), out = a->bytes_out + (b ? b->bytes_out : 0);

	repl_metrics_one(f, "understudy_compression_ratio", "gauge",
			 "Page bytes before encoding / after (zero, lz4 and xor pages shrink), since the engine "
			 "started; 0 before the first page", out ? (double)in / (double)out : 0.0);
}

/* The statistics both kinds of engine keep. */
void repl_metrics_stats(FILE *f, const struct repl_stats *st)
{
	repl_metrics_one(f, "understudy_epochs_total", "counter", "Epochs captured (primary) or applied "
			 "(secondary)", (double)st->epochs);
	repl_metrics_one(f, "understudy_stretched_epochs_total", "counter", "Epochs that waited for a free "
			 "slot or room on the link (the link is slower than the guest)", (double)st->stretched);
	repl_metrics_one(f, "understudy_dirty_pages", "gauge", "Pages in the last epoch", (double)st->last_dirty_pages);
	repl_metrics_one(f, "understudy_dirty_pages_total", "counter", "Pages in all epochs",
			 (double)st->dirty_pages_total);
	repl_metrics_one(f, "understudy_precopy_pages_total", "counter", "Pages sent ahead of their epoch's "
			 "pause while the guest ran (primary)", (double)st->pre_pages);
	repl_metrics_one(f, "understudy_precopy_resent_pages_total", "counter", "Pre-copied pages written again "
			 "and sent again at the pause (primary)", (double)st->pre_resent);
}

/* The NIC's frames (vm_net.c), for a VM with one. */
void repl_metrics_net(FILE *f, struct repl_vm *v)
{
	struct repl_net_held h;

	if (!v || !v->tap)
		return;
	pthread_mutex_lock(&v->out_lock);
	h = v->net;
	pthread_mutex_unlock(&v->out_lock);
	repl_metrics_one(f, "understudy_net_held_frames", "gauge", "Frames the guest sent that wait for their "
			 "epoch's ACK (network output commit)", (double)h.frames);
	repl_metrics_one(f, "understudy_net_tx_frames_total", "counter", "Frames the guest sent that left "
			 "through the tap", (double)h.released);
	repl_metrics_one(f, "understudy_net_tx_dropped_total", "counter", "Frames the guest sent that were "
			 "dropped: held frames at their bound, or refused by the tap", (double)(h.dropped + h.tap_errors));
	repl_metrics_one(f, "understudy_net_rx_frames_total", "counter", "Frames from the tap the guest took",
			 (double)h.rx_frames);
}

/* What started the epochs and the hot set's counts (primary/cycle.c,
 * machine_set_hot_budget; m NULL: none); all 0 where no engine captures
 * (secondary). */
void repl_metrics_epoch_counts(FILE *f, uint64_t timer, uint64_t output, const struct machine *m)
{
	repl_metrics_family(f, "understudy_epochs_started_total", "counter", "Epochs captured, by what "
			    "started them: timer (every --epoch-ms) or output (guest output waiting, at least "
			    "--min-epoch-ms after the last capture); the first epoch after the sync and a final "
			    "one are in neither (primary)");
	fprintf(f, "understudy_epochs_started_total{trigger=\"timer\"} %llu\n"
		"understudy_epochs_started_total{trigger=\"output\"} %llu\n",
		(unsigned long long)timer, (unsigned long long)output);
	repl_metrics_one(f, "understudy_reprotected_pages_total", "counter", "Pages the dirty-log harvests "
			 "write-protected again in KVM (each costs a write fault when the guest rewrites it; "
			 "hot pages are not) (primary)", m ? (double)m->stats.reprotected : 0.0);
	repl_metrics_one(f, "understudy_hot_pages", "gauge", "Pages in the hot set now: left writable and "
			 "copied at every pause (primary)", m ? (double)m->hot_pages : 0.0);
	repl_metrics_one(f, "understudy_hot_budget_pages", "gauge", "The most pages the hot set may hold now "
			 "(primary)", m ? (double)m->hot_budget : 0.0);
}

/* The role and the primary's state as state sets. */
void repl_metrics_role(FILE *f, const char *role)
{
	repl_metrics_stateset(f, "understudy_role", "role", "The role of this agent (1: current)",
			      role_names, 2, role);
}

void repl_metrics_pri_state(FILE *f, const char *state)
{
	repl_metrics_stateset(f, "understudy_state", "state", "The state of this agent (1: current)",
			      pri_states, sizeof(pri_states) / sizeof(pri_states[0]), state);
}

/* run or restore without protection: the VM runs, nothing is replicated. */
static void render_host(FILE *f, const char *role)
{
	repl_metrics_stateset(f, "understudy_role", "role", "The role of this agent (1: current)", role_names, 2,
			      role);
	repl_metrics_stateset(f, "understudy_state", "state", "The state of this agent (1: current)", pri_states,
			      sizeof(pri_states) / sizeof(pri_states[0]), "unprotected");
}

static void render_process(FILE *f, const struct repl_metrics *m)
{
	static const char *const hook_results[REPL_HOOK_RESULTS] = { "ok", "failed", "timeout" };
	uint64_t hooks[REPL_HOOK_RESULTS] = { 0 };

	repl_metrics_one(f, "understudy_takeovers_total", "counter", "Takeovers by this agent (it resumed "
			 "the guest of a failed primary)", (double)m->events[REPL_EV_TAKEOVER]);
	repl_metrics_one(f, "understudy_fences_total", "counter", "Times this agent was fenced (stopped for "
			 "good: lease lost, or the other side took over)", (double)m->events[REPL_EV_FENCED]);
	repl_metrics_one(f, "understudy_migrations_total", "counter", "Guests this agent handed over",
			 (double)m->events[REPL_EV_MIGRATED]);
	repl_metrics_one(f, "understudy_switchovers_total", "counter", "Planned role swaps",
			 (double)m->events[REPL_EV_SWITCHOVER]);
	repl_metrics_family(f, "understudy_drills_total", "counter", "Failover drills, by result");
	fprintf(f, "understudy_drills_total{result=\"pass\"} %llu\n"
		"understudy_drills_total{result=\"fail\"} %llu\n",
		(unsigned long long)m->events[REPL_EV_DRILL_PASS],
		(unsigned long long)m->events[REPL_EV_DRILL_FAIL]);
	repl_metrics_family(f, "understudy_events_total", "counter", "Events of this agent (what --on-event "
			    "is run for), by event");
	for (int i = 0; i < REPL_EV_COUNT; i++)
		fprintf(f, "understudy_events_total{event=\"%s\"} %llu\n", repl_event_name(i),
			(unsigned long long)m->events[i]);
	repl_metrics_family(f, "understudy_hook_runs_total", "counter", "Runs of the --on-event command, by "
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
	if (m->engine[REPL_METRICS_PRIMARY].agent)
		m->engine[REPL_METRICS_PRIMARY].render(f, m->engine[REPL_METRICS_PRIMARY].agent);
	else if (m->engine[REPL_METRICS_SECONDARY].agent)
		m->engine[REPL_METRICS_SECONDARY].render(f, m->engine[REPL_METRICS_SECONDARY].agent);
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
