/* Drills: what the probe answer means, the memory the clone used, and the
 * report (a JSON object the CLI prints, keeps and reads back). */
#include "secondary/drill_int.h"

#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG "drill"

void drill_fail(struct drill_run *r, const char *fmt, ...)
{
	va_list ap;

	if (r->failed)
		return;                    /* the first reason is the reason */
	r->failed = true;
	va_start(ap, fmt);
	vsnprintf(r->reason, sizeof(r->reason), fmt, ap);
	va_end(ap);
	log_warn(TAG, "drill %llu fails: %s", (unsigned long long)r->id, r->reason);
}

/* ---- the built-in probes --------------------------------------------------------- */

/* A counter reply "<n> <digest>": n, or -1. */
static int64_t counter_n(const char *line)
{
	char *end;
	unsigned long long n;

	if (!line || line[0] < '0' || line[0] > '9')
		return -1;
	n = strtoull(line, &end, 10);
	return *end == ' ' && end[1] ? (int64_t)n : -1;
}

/* The complete lines of the committed tail + the clone's output: the last
 * one finished before the probe was sent (pre) and the first after (post). */
static void split_lines(struct drill_run *r, const char *out, char *pre, char *post, size_t len)
{
	size_t tail = strlen(r->committed_tail), n = 0;
	char line[DRILL_LINE_MAX];

	pre[0] = post[0] = 0;
	memcpy(line, r->committed_tail, tail);
	n = tail;
	for (size_t i = 0; out[i]; i++) {
		if (out[i] == '\r')
			continue;
		if (out[i] != '\n') {
			if (n + 1 < sizeof(line))
				line[n++] = out[i];
			continue;
		}
		line[n] = 0;
		n = 0;
		if (i < r->probe_from) {
			snprintf(pre, len, "%s", line);
		} else {
			snprintf(post, len, "%s", line);
			return;
		}
	}
}

/* counter: "get" answers the last reply the committed output holds. If
 * the checkpoint caught an "incr" between its increment and its reply, the
 * clone finishes that reply first: it must be the committed one + 1, and
 * "get" must answer it. With no reply committed since this standby began
 * (protection of a VM whose replies came before), nothing is compared. */
static void judge_counter(struct drill_run *r, const char *pre, const char *post)
{
	const char *committed = r->have_committed_line && counter_n(r->committed_line) >= 0 ?
				r->committed_line : NULL;
	const char *want = committed;

	if (pre[0] && counter_n(pre) >= 0) {
		if (committed && counter_n(pre) != counter_n(committed) + 1) {
			drill_fail(r, "probe: the clone replied '%s' before the probe; the last "
				   "acknowledged reply was '%s'", pre, committed);
			snprintf(r->probe, sizeof(r->probe), "in-flight reply '%s' inconsistent", pre);
			return;
		}
		want = pre;
	}
	if (counter_n(post) < 0) {
		snprintf(r->probe, sizeof(r->probe), "get -> '%s': not a counter reply", post);
		drill_fail(r, "probe: get answered '%s', not a counter reply", post);
		return;
	}
	if (want) {
		r->counter_compared = true;
		r->counter_want = counter_n(want);
		r->counter_got = counter_n(post);
	}
	if (!want) {
		r->probe_ok = true;
		snprintf(r->probe, sizeof(r->probe), "get -> '%s' (no reply acknowledged since this "
			 "standby began: not compared)", post);
		return;
	}
	if (strcmp(post, want)) {
		snprintf(r->probe, sizeof(r->probe), "get -> '%s', expected '%s'", post, want);
		drill_fail(r, "probe: get answered '%s', the last acknowledged reply was '%s'", post,
			   want);
		return;
	}
	r->probe_ok = true;
	r->counter_checked = committed != NULL;
	snprintf(r->probe, sizeof(r->probe), "get -> '%s' = %s", post,
		 want == pre ? "the reply of an incr in flight at the checkpoint (committed + 1)"
			     : "the last acknowledged reply");
}

int drill_probe_judge(struct drill_run *r, const char *guest, const char *out)
{
	char pre[DRILL_LINE_MAX], post[DRILL_LINE_MAX];

	split_lines(r, out, pre, post, sizeof(pre));
	if (!post[0])
		return 0;
	if (!strcmp(guest, "counter")) {
		judge_counter(r, pre, post);
	} else if (!strncmp(post, "ok ", 3)) {
		r->probe_ok = true;
		snprintf(r->probe, sizeof(r->probe), "check -> '%s'", post);
	} else {
		snprintf(r->probe, sizeof(r->probe), "check -> '%s'", post);
		drill_fail(r, "probe: check answered '%s'", post);
	}
	return 1;
}

/* ---- memory ---------------------------------------------------------------------- */

void drill_measure_memory(struct drill_run *r)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	uintptr_t want = (uintptr_t)r->clone->ram, lo, hi;
	char line[256];
	bool in = false;
	unsigned long long kb;

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &lo, &hi) == 2 && strchr(line, '-') <
		    strchr(line, ' ')) {
			if (in)
				break;
			in = lo == want;
			continue;
		}
		if (!in)
			continue;
		if (sscanf(line, "Private_Dirty: %llu kB", &kb) == 1) {
			r->private_bytes = kb * 1024;
			r->memory_known = true;
		} else if (sscanf(line, "Rss: %llu kB", &kb) == 1) {
			r->rss_bytes = kb * 1024;
		}
	}
	fclose(f);
}

/* ---- the report ------------------------------------------------------------------- */

static void iso8601(const struct timespec *t, char *out, size_t len)
{
	struct tm tm;
	size_t n;

	gmtime_r(&t->tv_sec, &tm);
	n = strftime(out, len, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out + n, len - n, ".%03dZ", (int)(t->tv_nsec / 1000000) % 1000);
}

static void add_u64(json_object *o, const char *k, uint64_t v)
{
	json_object_object_add(o, k, json_object_new_int64((int64_t)v));
}

/* Milliseconds to the microsecond, printed as such (not 3.1259999...). */
static void add_ms(json_object *o, const char *k, uint64_t ns)
{
	char s[32];

	snprintf(s, sizeof(s), "%.3f", (double)(ns / 1000) / 1e3);
	json_object_object_add(o, k, json_object_new_double_s((double)(ns / 1000) / 1e3, s));
}

static void add_str(json_object *o, const char *k, const char *v)
{
	json_object_object_add(o, k, json_object_new_string(v));
}

static json_object *production(const struct drill_run *r)
{
	json_object *p = json_object_new_object();
	const Understudy__DrillReport *b = r->have_stats ? &r->stats : &r->primary;

	if (!r->have_digest && !r->have_stats) {
		json_object_object_add(p, "known", json_object_new_boolean(false));
		return p;
	}
	add_ms(p, "pause_p50_before_ms", b->pause_p50_before_ns);
	add_ms(p, "pause_p99_before_ms", b->pause_p99_before_ns);
	add_ms(p, "lag_before_ms", b->lag_before_ns);
	if (r->have_stats) {
		add_ms(p, "pause_max_before_ms", r->stats.pause_max_before_ns);
		add_ms(p, "pause_p50_during_ms", r->stats.pause_p50_during_ns);
		add_ms(p, "pause_p99_during_ms", r->stats.pause_p99_during_ns);
		add_ms(p, "pause_max_during_ms", r->stats.pause_max_during_ns);
		add_ms(p, "lag_max_during_ms", r->stats.lag_max_during_ns);
		add_u64(p, "pauses_during", r->stats.pauses_during);
	}
	if (r->have_digest)
		add_ms(p, "digest_in_pause_ms", r->primary.digest_ns);
	if (r->apply_known) {   /* the standby's applies: what each ACK waits for */
		add_ms(p, "apply_p50_before_ms", r->apply_before[0]);
		add_ms(p, "apply_p99_before_ms", r->apply_before[1]);
		add_ms(p, "apply_p50_during_ms", r->apply_during[0]);
		add_ms(p, "apply_p99_during_ms", r->apply_during[1]);
	}
	if (r->preserve_epochs) {   /* the clone's copies, before each apply */
		add_ms(p, "clone_copy_avg_ms", r->preserve_ns / r->preserve_epochs);
		add_ms(p, "clone_copy_max_ms", r->preserve_max_ns);
	}
	return p;
}

static void verdict(struct repl_secondary *s, struct drill_run *r)
{
	(void)s;
	if (r->have_digest && r->clone_crc != r->primary.mem_crc32c)
		drill_fail(r, "digest mismatch: the clone's RAM %08x, the primary's %08x at epoch %llu",
			   r->clone_crc, r->primary.mem_crc32c, (unsigned long long)r->epoch_start);
	if (r->have_digest && r->epoch_end <= r->epoch_start)
		drill_fail(r, "no epoch was applied to the standby during the drill (standby at %llu)",
			   (unsigned long long)r->epoch_end);
	if (r->have_digest && !r->probe_done)
		drill_fail(r, "the probe did not run");
}

/* Acknowledged outputs the clone lost (-1: not known) and how that is
 * known, or why it is not. The clone is the standby at epoch E, which had
 * acknowledged exactly up to E (E+1 had not begun), and the primary
 * releases output only once acknowledged: nothing released can come from
 * past E. The counter's probe proves it on the guest's own replies (or
 * counts the replies missing); otherwise the RAM digest proves that the
 * clone holds the primary's state at E. */
static int64_t acked_lost(const struct drill_run *r, char *why, size_t len)
{
	uint64_t e = r->epoch_start, acked;

	if (r->counter_compared && r->counter_got >= r->counter_want) {
		snprintf(why, len, "the probe: get answered %lld, the last acknowledged reply %lld%s",
			 (long long)r->counter_got, (long long)r->counter_want,
			 r->counter_got > r->counter_want ? " (beyond it: nothing acknowledged lost, but "
			 "the state is not the acknowledged one)" : "");
		return 0;
	}
	if (r->counter_compared) {
		snprintf(why, len, "the probe: get answered %lld, the last acknowledged reply was %lld",
			 (long long)r->counter_got, (long long)r->counter_want);
		return r->counter_want - r->counter_got;
	}
	if (!r->have_digest) {
		snprintf(why, len, "not known: the primary's RAM digest did not arrive, so the clone's "
			 "state was never compared with the primary's");
		return -1;
	}
	if (r->clone_crc != r->primary.mem_crc32c) {
		snprintf(why, len, "not known: the clone's RAM differs from the primary's at epoch %llu",
			 (unsigned long long)r->primary.epoch);
		return -1;
	}
	acked = r->primary.epoch > r->primary.unacked_at_digest ?
		r->primary.epoch - 1 - r->primary.unacked_at_digest : 0;
	if (r->primary.epoch != e || acked > e) {
		snprintf(why, len, "not known: the clone started from epoch %llu, the primary digested "
			 "epoch %llu with %llu acknowledged", (unsigned long long)e,
			 (unsigned long long)r->primary.epoch, (unsigned long long)acked);
		return -1;
	}
	snprintf(why, len, "the RAM digest: the clone holds epoch %llu as the primary had it, and "
		 "nothing past it was acknowledged: the primary had acknowledged up to epoch %llu",
		 (unsigned long long)e, (unsigned long long)acked);
	return 0;
}

void drill_report_build(struct repl_secondary *s)
{
	struct drill_run *r = &s->drill->run;
	json_object *o = json_object_new_object(), *x;
	char t[40], why[300];
	int64_t lost;

	verdict(s, r);
	add_str(o, "kind", "test-failover");
	snprintf(t, sizeof(t), "%016" PRIx64, r->id);
	add_str(o, "id", t);
	iso8601(&r->wall_start, t, sizeof(t));
	add_str(o, "start", t);
	iso8601(&r->wall_end, t, sizeof(t));
	add_str(o, "end", t);
	x = json_object_new_object();
	add_str(x, "guest", s->cfg.guest);
	add_u64(x, "mem_bytes", s->cfg.mem_bytes);
	add_u64(x, "vcpus", (uint64_t)s->cfg.ncpus);
	json_object_object_add(o, "vm", x);
	add_u64(o, "seconds", r->seconds);
	x = json_object_new_object();
	add_u64(x, "start", r->epoch_start);
	add_u64(x, "end", r->epoch_end);
	add_u64(x, "applied_during", r->epoch_end > r->epoch_start ? r->epoch_end - r->epoch_start : 0);
	json_object_object_add(o, "epochs", x);
	if (r->have_digest && r->t_active_ns)
		add_ms(o, "rto_ms", r->rto_ns);
	else
		json_object_object_add(o, "rto_ms", NULL);
	add_ms(o, "clone_build_ms", r->build_ns);
	x = json_object_new_object();
	lost = acked_lost(r, why, sizeof(why));
	json_object_object_add(x, "acked_outputs_lost", lost >= 0 ? json_object_new_int64(lost) : NULL);
	add_str(x, "acked_outputs_lost_why", why);
	add_u64(x, "clone_epoch", r->epoch_start);
	add_u64(x, "unacked_epochs_discarded", r->primary.unacked_at_digest);
	json_object_object_add(o, "rpo", x);
	x = json_object_new_object();
	add_u64(x, "held_bytes", r->held_bytes);
	add_u64(x, "clone_output_bytes", r->out_total);
	add_u64(x, "released_bytes", 0);
	json_object_object_add(o, "output", x);
	x = json_object_new_object();
	add_str(x, "kind", r->external ? "external" : "builtin");
	add_str(x, "result", r->probe[0] ? r->probe : "not run");
	json_object_object_add(x, "ok", json_object_new_boolean(r->probe_ok));
	json_object_object_add(o, "probe", x);
	x = json_object_new_object();
	if (r->have_digest) {
		snprintf(t, sizeof(t), "%08x", r->primary.mem_crc32c);
		add_str(x, "primary", t);
		snprintf(t, sizeof(t), "%08x", r->clone_crc);
		add_str(x, "clone", t);
		add_u64(x, "epoch", r->primary.epoch);
		add_ms(x, "clone_digest_ms", r->digest_ns);
	}
	json_object_object_add(x, "match", json_object_new_boolean(r->have_digest &&
								   r->clone_crc == r->primary.mem_crc32c));
	json_object_object_add(o, "digest", x);
	json_object_object_add(o, "production", production(r));
	x = json_object_new_object();
	if (r->memory_known)
		add_u64(x, "used_bytes", r->private_bytes);
	else
		json_object_object_add(x, "used_bytes", NULL);
	add_u64(x, "shared_rss_bytes", r->rss_bytes > r->private_bytes ? r->rss_bytes - r->private_bytes : 0);
	add_u64(x, "pages_copied_before_applies", r->preserved);
	add_u64(x, "console_buffer_bytes", DRILL_OUT_MAX);
	json_object_object_add(o, "memory", x);
	add_str(o, "verdict", r->failed ? "FAIL" : "PASS");
	add_str(o, "reason", r->failed ? r->reason : "clone ran, probe answered, digest matched");
	free(r->report);
	r->report = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	json_object_put(o);
}

static const char *state_name(enum drill_state st)
{
	static const char *const names[] = { "idle", "asked", "running", "probing", "ending", "done" };

	return names[st];
}

char *drill_status_json(struct repl_secondary *s)
{
	struct drill_run *r = s->drill ? &s->drill->run : NULL;
	json_object *o = json_object_new_object();
	char id[20];

	if (!r || r->state == DRILL_IDLE) {
		proto_json_add_str(o, "state", "idle");
		return proto_json_line(o);
	}
	snprintf(id, sizeof(id), "%016" PRIx64, r->id);
	if (r->state == DRILL_DONE && r->report) {
		proto_json_add_str(o, "state", "done");
		proto_json_add_str(o, "id", id);
		if (o)
			json_object_object_add(o, "report", proto_json_parse(r->report, NULL));
		return proto_json_line(o);
	}
	proto_json_add_str(o, "state", state_name(r->state));
	proto_json_add_str(o, "id", id);
	proto_json_add_bool(o, "external", r->external);
	proto_json_add_fixed(o, "rto_ms", r->rto_ns / 1e6, 3);
	proto_json_add_u64(o, "epoch_start", r->epoch_start);
	proto_json_add_u64(o, "standby_epoch", s->stage.applied);
	return proto_json_line(o);
}

/* ---- the external probe's console relay ---------------------------------------- */

char *drill_console_in(struct drill_run *r, const char *hex)
{
	uint8_t buf[DRILL_RELAY_MAX];
	size_t n = 0, took;
	char *out = NULL;

	if (!r || r->state != DRILL_PROBING || !r->clone || !r->external)
		return strdup("error no drill waits for a probe\n");
	while (hex[0] && hex[1] && n < sizeof(buf)) {
		unsigned v;

		if (sscanf(hex, "%2x", &v) != 1)
			return strdup("error bad hex\n");
		buf[n++] = (uint8_t)v;
		hex += 2;
	}
	took = machine_console_input(r->clone, buf, n);
	if (asprintf(&out, "ok %zu\n", took) < 0)
		return NULL;
	return out;
}

char *drill_console_out(struct drill_run *r, const char *from)
{
	size_t off = (size_t)strtoull(from, NULL, 10), n;
	char *out;

	if (!r || !r->out)
		return strdup("error no drill\n");
	pthread_mutex_lock(&r->out_lock);
	n = r->out_len > off ? r->out_len - off : 0;
	if (n > DRILL_RELAY_MAX)
		n = DRILL_RELAY_MAX;
	out = malloc(n * 2 + 48);
	if (out) {
		int k = sprintf(out, "ok %zu ", off + n);

		for (size_t i = 0; i < n; i++)
			k += sprintf(out + k, "%02x", (uint8_t)r->out[off + i]);
		sprintf(out + k, "\n");
	}
	pthread_mutex_unlock(&r->out_lock);
	return out;
}
