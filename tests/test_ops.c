/* The operations pieces without an agent: JSON escaping of log lines, the
 * VM's name in text and JSON log lines, the latency histogram's buckets,
 * the metrics text of a host and the event counters (with the label
 * vm="NAME" on every sample), an engine's counts in the metrics text of a
 * primary and of a standby (each family declared, each sample numeric), and a hook run on a real libev loop
 * (spawned, its exit seen, its details in its environment). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "kmod/log.h"
#include "machine/machine.h"
#include "primary/primary_int.h"
#include "secondary/secondary_int.h"
#include "replication/hooks.h"
#include "replication/metrics.h"

static void escape_is(const char *in, const char *want)
{
	char out[256];

	log_json_escape(out, sizeof(out), in);
	assert_string_equal(out, want);
}

static void json_escaping(void **state)
{
	(void)state;
	escape_is("plain", "plain");
	escape_is("a \"q\" \\ b", "a \\\"q\\\" \\\\ b");
	escape_is("t\tn\nr\r", "t\\tn\\nr\\r");
	escape_is("\x01\x1f\x7f", "\\u0001\\u001f\\u007f");
	escape_is("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
	escape_is("bad\xff end", "bad\\ufffd end");
	escape_is("\xc0\xaf", "\\ufffd\\ufffd");             /* overlong '/' */
	escape_is("\xed\xa0\x80", "\\ufffd\\ufffd\\ufffd");  /* a surrogate */
	escape_is("cut\xe2\x82", "cut\\ufffd\\ufffd");        /* sequence cut short */
}

/* A full buffer ends before an escape, never inside one. */
static void json_escaping_truncates_whole(void **state)
{
	char out[6];
	size_t n;

	(void)state;
	n = log_json_escape(out, sizeof(out), "abcd\"e");
	assert_int_equal(n, 4);
	assert_string_equal(out, "abcd");
	n = log_json_escape(out, sizeof(out), "ab\"cd");
	assert_int_equal(n, 5);
	assert_string_equal(out, "ab\\\"c");
	n = log_json_escape(out, sizeof(out), "abcd\n");
	assert_string_equal(out, "abcd");
	assert_int_equal(n, 4);
}

static void histogram_buckets(void **state)
{
	struct repl_hist h = { 0 };

	(void)state;
	repl_hist_add(&h, 100000);          /* on the first bound: in it */
	repl_hist_add(&h, 100001);
	repl_hist_add(&h, 1000000000);      /* 1 s: the last bound */
	repl_hist_add(&h, 5000000000ull);   /* above: +Inf only */
	assert_int_equal(h.count[0], 1);
	assert_int_equal(h.count[1], 1);
	assert_int_equal(h.count[REPL_HIST_BUCKETS - 1], 1);
	assert_int_equal(h.count[REPL_HIST_BUCKETS], 1);
	assert_int_equal(h.n, 4);
	assert_int_equal(h.sum_ns, 100000 + 100001 + 1000000000ull + 5000000000ull);
	assert_int_equal(repl_hist_le_ns(0), 100000);
	assert_int_equal(repl_hist_le_ns(REPL_HIST_BUCKETS - 1), 1000000000);
}

static char *render(struct repl_metrics *m)
{
	size_t len = 0;
	char *text = repl_metrics_render(m, &len);

	assert_non_null(text);
	assert_int_equal(strlen(text), len);
	return text;
}

static void host_metrics_and_events(void **state)
{
	struct repl_metrics *m;
	struct repl_ops ops;
	char *text;

	(void)state;
	assert_int_equal(repl_metrics_new("primary", NULL, &m), 0);
	ops = (struct repl_ops){ .metrics = m };
	text = render(m);
	assert_non_null(strstr(text, "understudy_role{role=\"primary\"} 1\n"));
	assert_non_null(strstr(text, "understudy_state{state=\"unprotected\"} 1\n"));
	assert_non_null(strstr(text, "understudy_takeovers_total 0\n"));
	assert_non_null(strstr(text, "# TYPE understudy_drills_total counter\n"));
	free(text);
	repl_ops_event(&ops, REPL_EV_TAKEOVER, NULL);
	repl_ops_drill_result(&ops, true, NULL);
	repl_ops_drill_result(&ops, false, NULL);
	repl_ops_drill_result(&ops, false, NULL);
	repl_ops_event(NULL, REPL_EV_FENCED, NULL);          /* no ops: nothing, no crash */
	text = render(m);
	assert_non_null(strstr(text, "understudy_takeovers_total 1\n"));
	assert_non_null(strstr(text, "understudy_drills_total{result=\"pass\"} 1\n"));
	assert_non_null(strstr(text, "understudy_drills_total{result=\"fail\"} 2\n"));
	assert_non_null(strstr(text, "understudy_fences_total 0\n"));
	assert_non_null(strstr(text, "understudy_events_total{event=\"drill-fail\"} 2\n"));
	free(text);
	repl_metrics_free(m);
}

/* With a name, every sample carries vm="NAME", last among its labels; the
 * comments do not change. */
static void metrics_label_vm(void **state)
{
	struct repl_metrics *m;
	char *text, *line, *save = NULL;
	unsigned samples = 0;

	(void)state;
	assert_int_equal(repl_metrics_new("secondary", "web-1.a", &m), 0);
	text = render(m);
	assert_non_null(strstr(text, "understudy_role{role=\"secondary\",vm=\"web-1.a\"} 1\n"));
	assert_non_null(strstr(text, "understudy_takeovers_total{vm=\"web-1.a\"} 0\n"));
	assert_non_null(strstr(text, "understudy_drills_total{result=\"pass\",vm=\"web-1.a\"} 0\n"));
	assert_non_null(strstr(text, "# TYPE understudy_takeovers_total counter\n"));
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (line[0] == '#')
			continue;
		samples++;
		assert_non_null(strstr(line, "vm=\"web-1.a\"} "));
	}
	assert_true(samples > 10);
	free(text);
	repl_metrics_free(m);
}

/* Every sample of text belongs to a family a "# TYPE" line declared before
 * it (a histogram's _bucket, _sum and _count too), has one space and a
 * number after its name and labels, and no family is declared twice. */
static void well_formed(char *text)
{
	char *line, *save = NULL, *end, types[64][96];
	unsigned ntypes = 0;

	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		size_t n = strcspn(line, "{ "), i;
		const char *sp;

		if (!strncmp(line, "# TYPE ", 7)) {
			assert_true(ntypes < 64);
			snprintf(types[ntypes], sizeof(types[0]), "%.*s", (int)strcspn(line + 7, " "),
				 line + 7);
			for (i = 0; i < ntypes; i++)
				if (!strcmp(types[i], types[ntypes]))
					fail_msg("family %s declared twice", types[i]);
			ntypes++;
			continue;
		}
		if (line[0] == '#')
			continue;
		for (i = 0; i < ntypes; i++) {
			size_t t = strlen(types[i]);

			if (!strncmp(line, types[i], t) && (t == n || !strncmp(line + t, "_bucket", 7) ||
			    !strncmp(line + t, "_sum", 4) || !strncmp(line + t, "_count", 6)))
				break;
		}
		if (i == ntypes)
			fail_msg("sample of no declared family: %s", line);
		sp = strrchr(line, ' ');
		assert_non_null(sp);
		(void)strtod(sp + 1, &end);
		if (end == sp + 1 || *end)
			fail_msg("not a number: %s", line);
	}
}

/* The engine's counts in the metrics, a sample a row: its family and type,
 * its label besides vm, and the primary's value (distinct values, so a
 * swapped or unwired one shows); a standby has the same samples at 0. */
static const struct {
	const char *family, *type, *label;
	unsigned long long value;
} engine_counts[] = {
	{ "understudy_epochs_started_total", "counter", "trigger=\"timer\"", 37 },
	{ "understudy_epochs_started_total", "counter", "trigger=\"output\"", 13 },
	{ "understudy_reprotected_pages_total", "counter", "", 4242 },
	{ "understudy_hot_pages", "gauge", "", 17 },
	{ "understudy_hot_budget_pages", "gauge", "", 64 },
};

/* Each row of engine_counts is declared in text and has its sample: with
 * vm="NAME" and the row's value, or without a name at 0. */
static void engine_counts_are(const char *text, const char *vm)
{
	char want[256];

	for (size_t i = 0; i < sizeof(engine_counts) / sizeof(engine_counts[0]); i++) {
		const char *label = engine_counts[i].label;

		snprintf(want, sizeof(want), "# TYPE %s %s\n", engine_counts[i].family,
			 engine_counts[i].type);
		if (!strstr(text, want))
			fail_msg("no \"%s\" in:\n%s", want, text);
		if (vm)
			snprintf(want, sizeof(want), "\n%s{%s%svm=\"%s\"} %llu\n", engine_counts[i].family,
				 label, label[0] ? "," : "", vm, engine_counts[i].value);
		else
			snprintf(want, sizeof(want), label[0] ? "\n%s{%s} 0\n" : "\n%s%s 0\n",
				 engine_counts[i].family, label);
		if (!strstr(text, want))
			fail_msg("no sample \"%s\" in:\n%s", want + 1, text);
	}
}

static void engine_counts_in_metrics(void **state)
{
	struct repl_primary_opts o = { .peer = "127.0.0.1:7000" };
	struct repl_primary *p = calloc(1, sizeof(*p));
	struct repl_secondary *s = calloc(1, sizeof(*s));
	struct repl_vm *vm = calloc(1, sizeof(*vm));
	struct machine *mach = calloc(1, sizeof(*mach));
	struct repl_metrics *m;
	char *text;

	(void)state;
	assert_true(p && s && vm && mach);
	mach->stats.reprotected = 4242;
	mach->hot_pages = 17;
	mach->hot_budget = 64;
	vm->m = mach;
	p->o = &o;
	p->vm = vm;
	p->state = P_PROTECTED;
	p->ep.epoch = 51;
	p->epochs_timer = 37;
	p->epochs_output = 13;
	assert_int_equal(repl_metrics_new("primary", "web1", &m), 0);
	repl_metrics_watch_primary(m, p);
	text = render(m);
	engine_counts_are(text, "web1");
	assert_non_null(strstr(text, "# HELP understudy_epochs_started_total Epochs captured, "));
	well_formed(text);
	free(text);
	repl_metrics_free(m);

	s->state = S_STANDBY;
	assert_int_equal(repl_metrics_new("secondary", NULL, &m), 0);
	repl_metrics_watch_secondary(m, s);
	text = render(m);
	engine_counts_are(text, NULL);
	well_formed(text);
	free(text);
	repl_metrics_free(m);
	free(mach);
	free(vm);
	free(s);
	free(p);
}

/* The log line of each format for a process with a role and a VM name. */
static void log_line_names_vm(void **state)
{
	char path[] = "/tmp/test_ops_log.XXXXXX", buf[2048] = "";
	int fd = mkstemp(path), saved = dup(2);
	FILE *f;

	(void)state;
	assert_true(fd >= 0 && saved >= 0);
	fflush(stderr);
	assert_int_equal(dup2(fd, 2), 2);
	log_set_role("run");
	log_set_vm("web1");
	log_info("cli", "text line");
	log_set_format(LOG_FORMAT_JSON);
	log_info("cli", "json line");
	log_set_format(LOG_FORMAT_TEXT);
	log_set_vm("");
	log_info("cli", "no name");
	log_set_role("");
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	close(fd);
	f = fopen(path, "r");
	assert_non_null(f);
	assert_true(fread(buf, 1, sizeof(buf) - 1, f) > 0);
	fclose(f);
	unlink(path);
	assert_non_null(strstr(buf, "understudy[run] vm=web1 +"));
	assert_non_null(strstr(buf, " INFO  cli: text line\n"));
	assert_non_null(strstr(buf, "\"module\":\"cli\",\"role\":\"run\",\"vm\":\"web1\","));
	assert_non_null(strstr(buf, "\"message\":\"json line\"}\n"));
	assert_null(strstr(strstr(buf, "no name") - 60, "vm="));   /* no name: no vm= */
}

static void on_give_up(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)w;
	(void)revents;
	ev_break(loop, EVBREAK_ALL);
}

static void hook_runs_with_details(void **state)
{
	struct ev_loop *loop = ev_default_loop(0);
	char dir[] = "/tmp/test_ops.XXXXXX", cmd[512], path[64], buf[1024] = "";
	struct repl_event_info info = { .role = "secondary", .epoch = 42, .peer = "10.0.0.1:7000",
					.vm = "web1", .guest = "dirty:mb=8",
					.reason = "a \"quoted\" reason" };
	uint64_t counts[REPL_HOOK_RESULTS];
	struct repl_hooks *h;
	ev_timer give_up;
	FILE *f;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/env", dir);
	snprintf(cmd, sizeof(cmd), "env | grep ^UNDERSTUDY_ | sort >%s; exit 3", path);
	assert_int_equal(repl_hooks_new(loop, cmd, 5000, &h), 0);
	repl_hooks_run(h, REPL_EV_DRILL_PASS, &info);
	ev_timer_init(&give_up, on_give_up, 0.05, 0.05);
	ev_timer_start(loop, &give_up);
	for (int i = 0; i < 200; i++) {        /* the loop sees the exit: up to 10 s */
		repl_hooks_counts(h, counts);
		if (counts[REPL_HOOK_FAILED])
			break;
		ev_run(loop, EVRUN_ONCE);
	}
	ev_timer_stop(loop, &give_up);
	repl_hooks_counts(h, counts);
	assert_int_equal(counts[REPL_HOOK_FAILED], 1);   /* exit 3 */
	assert_int_equal(counts[REPL_HOOK_OK], 0);
	f = fopen(path, "r");
	assert_non_null(f);
	assert_true(fread(buf, 1, sizeof(buf) - 1, f) > 0);
	fclose(f);
	assert_non_null(strstr(buf, "UNDERSTUDY_EVENT=drill-pass\n"));
	assert_non_null(strstr(buf, "UNDERSTUDY_ROLE=secondary\n"));
	assert_non_null(strstr(buf, "UNDERSTUDY_EPOCH=42\n"));
	assert_non_null(strstr(buf, "UNDERSTUDY_PEER=10.0.0.1:7000\n"));
	assert_non_null(strstr(buf, "UNDERSTUDY_VM=web1\n"));
	assert_non_null(strstr(buf, "UNDERSTUDY_GUEST=dirty\n"));
	assert_non_null(strstr(buf, "UNDERSTUDY_REASON=a \"quoted\" reason\n"));
	assert_non_null(strstr(buf, "UNDERSTUDY_TIME=20"));
	repl_hooks_free(h);
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(json_escaping),
		cmocka_unit_test(json_escaping_truncates_whole),
		cmocka_unit_test(histogram_buckets),
		cmocka_unit_test(host_metrics_and_events),
		cmocka_unit_test(metrics_label_vm),
		cmocka_unit_test(engine_counts_in_metrics),
		cmocka_unit_test(log_line_names_vm),
		cmocka_unit_test(hook_runs_with_details),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
