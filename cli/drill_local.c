/* understudy drill local: what a new host is accepted with. A protected
 * pair of this binary on this host, in a network namespace the drill
 * makes, a client on the guest's console checking every reply against an
 * uninterrupted run, and a fault at a seeded moment of each trial; one
 * report line a trial and a summary (kept with --report-dir, listed by
 * drill history). The drill runs in a child: the namespace, its nftables
 * rules and its tc qdiscs go away with it. */
#include <errno.h>
#include <getopt.h>
#include <json-c/json.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/drill_local.h"

static const char help[] =
	"usage: understudy drill local --kind kill|stop|partition|loss|slowlink [--trials N]\n"
	"                              [--guest counter[:ARGS]] [--seed S] [--witness] [--json]\n"
	"                              [--report-dir DIR]\n"
	"A self-contained pair on this host (root: a network namespace of its own): per trial a\n"
	"real secondary and primary of this binary on loopback, the counter guest, a client on\n"
	"its console checking every reply against an uninterrupted run; once protected, at a\n"
	"seeded moment, the fault:\n"
	"  kill       SIGKILL the primary: the secondary takes over\n"
	"  stop       SIGSTOP the primary until the secondary took over, then SIGCONT: the old\n"
	"             primary must answer nobody (with --witness: fenced)\n"
	"  partition  cut the link (nftables) for 3 s: the primary keeps the witness key and\n"
	"             serves on, no takeover (needs --witness: without one a cut link is the\n"
	"             documented split-brain hole)\n"
	"  loss       drop 5% of the link's packets for 3 s: no takeover or a consistent one\n"
	"  slowlink   loopback at 20 mbit (tc tbf) for 3 s: epochs go on, stretched (the\n"
	"             agents' timeouts at 3 s and 5 s, as an operator sets them for a slow link)\n"
	"  --trials N      trials (default 5)\n"
	"  --seed S        the moments of the faults (printed; give it again to replay)\n"
	"  --witness       an etcd witness (Debian etcd-server) on loopback for both agents\n"
	"  --json          one JSON object a trial, then the summary object\n"
	"  --report-dir DIR  keep the summary as DIR/drill-<UTC time>-local-<kind>.json\n"
	"PASS when in every trial each reply is the uninterrupted run's, nothing acknowledged\n"
	"is lost (RPO 0) and at most one copy answers. Exit status: 0 PASS, 1 FAIL, 2 bad usage.\n";

static const char *const kinds[] = { "kill", "stop", "partition", "loss", "slowlink" };

#define MAX_TRIALS 1000
/* Both agents' failover timeout (a loaded 2-core host gives spurious
 * takeovers much below this, see tests/failover.py). */
#define TIMEOUT_MS 800
/* A slow link is run with the timeouts an operator gives one (those of
 * tests/sys_slowlink.sh): a heartbeat waits behind epochs in the queue. */
#define SLOW_TIMEOUT_MS 3000
#define SLOW_PRI_TIMEOUT_MS 5000
/* Replies the oracle holds: more than any trial asks for. */
#define ORACLE_COUNT 1500

struct dl_opts {
	int kind;
	unsigned trials;
	const char *guest;
	unsigned long long seed;
	bool witness, json;
	const char *report_dir;
};

static void stamp(char *out, size_t len)
{
	time_t t = time(NULL);
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static json_object *trial_json(const struct dl_ctx *x, const struct dl_trial *t)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "kind", json_object_new_string("local"));
	json_object_object_add(o, "fault", json_object_new_string(x->kind_name));
	json_object_object_add(o, "event", json_object_new_string("trial"));
	json_object_object_add(o, "trial", json_object_new_int((int)t->idx + 1));
	json_object_object_add(o, "verdict", json_object_new_string(t->why[0] ? "FAIL" : "PASS"));
	json_object_object_add(o, "reason", json_object_new_string(t->why[0] ? t->why : "consistent"));
	json_object_object_add(o, "fault_after_protected_ms", json_object_new_double(t->fault_after_ms));
	json_object_object_add(o, "rto_ms", t->rto_ms >= 0 ? json_object_new_double(t->rto_ms) : NULL);
	json_object_object_add(o, "rpo", json_object_new_int64((int64_t)t->rpo));
	json_object_object_add(o, "took_over", json_object_new_boolean(t->took_over));
	json_object_object_add(o, "replies", json_object_new_int((int)t->lines));
	json_object_object_add(o, "replays", json_object_new_int((int)t->replayed));
	json_object_object_add(o, "highest_seen", json_object_new_int64((int64_t)t->top));
	json_object_object_add(o, "survivor_count", json_object_new_int64((int64_t)t->survivor));
	if (!t->took_over && x->kind != DL_KILL && x->kind != DL_STOP)
		json_object_object_add(o, "epochs_acked_during",
				       json_object_new_int64((int64_t)t->acked_during));
	if (t->note[0])
		json_object_object_add(o, "note", json_object_new_string(t->note));
	return o;
}

static void trial_human(const struct dl_ctx *x, const struct dl_trial *t, unsigned n)
{
	char rto[32] = "-";

	if (t->rto_ms >= 0)
		snprintf(rto, sizeof(rto), "%.1f ms", t->rto_ms);
	printf("trial %u/%u %s: %s %.0f ms after protected; %s; RTO %s, RPO %llu, %u replies, "
	       "%u replayed, highest %llu, survivor %llu%s%s%s%s\n", t->idx + 1, n,
	       t->why[0] ? "FAIL" : "PASS", x->kind_name, t->fault_after_ms,
	       t->took_over ? "took over" : "no takeover", rto, t->rpo, t->lines, t->replayed,
	       t->top, t->survivor, t->note[0] ? "; " : "", t->note, t->why[0] ? " | " : "", t->why);
	fflush(stdout);
}

/* The summary: the figures over the trials and the verdict. */
static json_object *summary(const struct dl_ctx *x, const struct dl_opts *o, const char *start,
			    json_object *trials, unsigned failed, const char *first_why,
			    const char *dir_kept)
{
	json_object *rep = json_object_new_object(), *rtos = json_object_new_array();
	double sum = 0, max = -1;
	unsigned n_rto = 0;
	long long rpo = 0, replays = 0;
	char end[32], kind[32], reason[512];

	for (size_t i = 0; i < json_object_array_length(trials); i++) {
		json_object *t = json_object_array_get_idx(trials, i), *v;

		if (json_object_object_get_ex(t, "rto_ms", &v) && v) {
			double ms = json_object_get_double(v);

			sum += ms;
			max = ms > max ? ms : max;
			n_rto++;
			json_object_array_add(rtos, json_object_new_double(ms));
		}
		json_object_object_get_ex(t, "rpo", &v);
		rpo += json_object_get_int64(v);
		json_object_object_get_ex(t, "replays", &v);
		replays += json_object_get_int64(v);
	}
	stamp(end, sizeof(end));
	snprintf(kind, sizeof(kind), "local-%s", x->kind_name);
	if (failed)
		snprintf(reason, sizeof(reason), "%u of %u trials failed, %lld acknowledged "
			 "replies lost; first: %s", failed, o->trials, rpo, first_why);
	else
		snprintf(reason, sizeof(reason), "%u trials: every reply consistent with an "
			 "uninterrupted run, nothing acknowledged lost, one live copy", o->trials);
	json_object_object_add(rep, "kind", json_object_new_string(kind));
	json_object_object_add(rep, "fault", json_object_new_string(x->kind_name));
	json_object_object_add(rep, "start", json_object_new_string(start));
	json_object_object_add(rep, "end", json_object_new_string(end));
	json_object_object_add(rep, "seed", json_object_new_uint64(o->seed));
	json_object_object_add(rep, "vm", json_object_new_string(x->guest));
	json_object_object_add(rep, "witness", json_object_new_boolean(o->witness));
	json_object_object_add(rep, "trials", json_object_new_int((int)o->trials));
	json_object_object_add(rep, "passed", json_object_new_int((int)(o->trials - failed)));
	json_object_object_add(rep, "rto_ms", n_rto ? json_object_new_double(sum / n_rto) : NULL);
	json_object_object_add(rep, "rto_ms_max", n_rto ? json_object_new_double(max) : NULL);
	json_object_object_add(rep, "rto_ms_per_trial", rtos);
	json_object_object_add(rep, "rpo", json_object_new_int64(rpo));
	json_object_object_add(rep, "replays", json_object_new_int64(replays));
	json_object_object_add(rep, "per_trial", json_object_get(trials));
	if (dir_kept)
		json_object_object_add(rep, "logs", json_object_new_string(dir_kept));
	json_object_object_add(rep, "verdict", json_object_new_string(failed ? "FAIL" : "PASS"));
	json_object_object_add(rep, "reason", json_object_new_string(reason));
	return rep;
}

static void print_summary_human(json_object *rep)
{
	json_object *v;
	const char *k[] = { "fault", "start", "end", "verdict", "reason" };
	const char *s[5];

	for (int i = 0; i < 5; i++)
		s[i] = json_object_object_get_ex(rep, k[i], &v) ? json_object_get_string(v) : "-";
	printf("drill local %s: %s\n", s[0], s[3]);
	printf("  time     %s .. %s\n", s[1], s[2]);
	json_object_object_get_ex(rep, "passed", &v);
	printf("  trials   %d passed of ", json_object_get_int(v));
	json_object_object_get_ex(rep, "trials", &v);
	printf("%d\n", json_object_get_int(v));
	if (json_object_object_get_ex(rep, "rto_ms", &v) && v) {
		printf("  RTO      mean %.1f ms", json_object_get_double(v));
		json_object_object_get_ex(rep, "rto_ms_max", &v);
		printf(", max %.1f ms (the fault -> the first reply after it)\n",
		       json_object_get_double(v));
	}
	json_object_object_get_ex(rep, "rpo", &v);
	printf("  RPO      %lld acknowledged replies lost", (long long)json_object_get_int64(v));
	json_object_object_get_ex(rep, "replays", &v);
	printf(", %lld replayed after a takeover\n", (long long)json_object_get_int64(v));
	if (json_object_object_get_ex(rep, "logs", &v))
		printf("  logs     %s\n", json_object_get_string(v));
	printf("  verdict  %s: %s\n", s[3], s[4]);
}

static void rm_tree(const char *dir)
{
	(void)dl_run((char *[]){ "rm", "-rf", (char *)dir, NULL }, NULL, NULL);
}

/* In the drill's own network namespace: every trial, then the report. */
static int drill_run(const struct dl_opts *o, const char *self)
{
	char dir[] = "/tmp/understudy-drill-local-XXXXXX", ep[64], start[32];
	struct dl_oracle oracle = { 0 };
	struct dl_ctx x = { .kind = (enum dl_kind)o->kind, .kind_name = kinds[o->kind], .self = self,
			    .guest = o->guest, .timeout_ms = TIMEOUT_MS, .pri_timeout_ms = TIMEOUT_MS,
			    .oracle = &oracle };
	json_object *trials, *rep;
	unsigned failed = 0;
	char first_why[300] = "";
	pid_t etcd = 0;
	int r;

	if (unshare(CLONE_NEWNET) < 0) {
		fprintf(stderr, "understudy drill local: cannot make a network namespace: %s\n",
			strerror(errno));
		return 2;
	}
	if (dl_run((char *[]){ "ip", "link", "set", "lo", "up", NULL }, NULL, NULL) != 0) {
		fprintf(stderr, "understudy drill local: ip link set lo up failed (iproute2?)\n");
		return 2;
	}
	if (!mkdtemp(dir)) {
		fprintf(stderr, "understudy drill local: mkdtemp: %s\n", strerror(errno));
		return 1;
	}
	x.dir = dir;
	if (x.kind == DL_SLOWLINK) {
		x.timeout_ms = SLOW_TIMEOUT_MS;
		x.pri_timeout_ms = SLOW_PRI_TIMEOUT_MS;
	}
	stamp(start, sizeof(start));
	if ((r = dl_oracle_run(self, o->guest, dir, ORACLE_COUNT, &oracle)) < 0) {
		fprintf(stderr, "understudy drill local: the uninterrupted run of %s failed: %s\n",
			o->guest, strerror(-r));
		rm_tree(dir);
		return 1;
	}
	if (o->witness) {
		if ((r = dl_etcd_start(dir, &etcd, ep, sizeof(ep))) < 0) {
			fprintf(stderr, "understudy drill local: etcd did not start (see %s/etcd.log): "
				"%s\n", dir, strerror(-r));
			dl_oracle_fini(&oracle);
			return 1;
		}
		x.witness = ep;
	}
	trials = json_object_new_array();
	for (unsigned i = 0; i < o->trials; i++) {
		struct dl_trial t;
		json_object *tj;

		dl_trial_run(&x, i, o->seed, &t);
		tj = trial_json(&x, &t);
		if (o->json) {
			printf("%s\n", json_object_to_json_string_ext(tj, JSON_C_TO_STRING_PLAIN));
			fflush(stdout);
		} else {
			trial_human(&x, &t, o->trials);
		}
		json_object_array_add(trials, tj);
		if (t.why[0] && !failed++)
			snprintf(first_why, sizeof(first_why), "trial %u: %.250s", i + 1, t.why);
	}
	if (etcd > 0) {
		kill(etcd, SIGKILL);
		waitpid(etcd, NULL, 0);
	}
	rep = summary(&x, o, start, trials, failed, first_why, failed ? dir : NULL);
	if (o->json)
		printf("%s\n", json_object_to_json_string_ext(rep, JSON_C_TO_STRING_PLAIN));
	else
		print_summary_human(rep);
	fflush(stdout);
	if (o->report_dir)
		(void)cli_drill_keep_report(o->report_dir, rep);
	json_object_put(rep);
	json_object_put(trials);
	dl_oracle_fini(&oracle);
	if (!failed)
		rm_tree(dir);          /* kept for the logs when a trial failed */
	return failed ? 1 : 0;
}

static int parse(int argc, char **argv, struct dl_opts *o)
{
	static const struct option longopts[] = {
		{ "kind", required_argument, NULL, 'k' },
		{ "trials", required_argument, NULL, 't' },
		{ "guest", required_argument, NULL, 'g' },
		{ "seed", required_argument, NULL, 's' },
		{ "witness", no_argument, NULL, 'w' },
		{ "json", no_argument, NULL, 'j' },
		{ "report-dir", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char *end;
	int opt;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'k':
			o->kind = -1;
			for (int i = 0; i < (int)(sizeof(kinds) / sizeof(kinds[0])); i++)
				if (!strcmp(optarg, kinds[i]))
					o->kind = i;
			if (o->kind < 0) {
				fprintf(stderr, "understudy drill local: unknown --kind '%s'\n", optarg);
				return 2;
			}
			break;
		case 't':
			o->trials = (unsigned)strtoul(optarg, &end, 10);
			if (*end || !optarg[0] || o->trials < 1 || o->trials > MAX_TRIALS) {
				fprintf(stderr, "understudy drill local: --trials must be 1..%d\n",
					MAX_TRIALS);
				return 2;
			}
			break;
		case 'g': o->guest = optarg; break;
		case 's':
			errno = 0;
			o->seed = strtoull(optarg, &end, 10);
			if (*end || !optarg[0] || errno) {
				fprintf(stderr, "understudy drill local: bad --seed '%s'\n", optarg);
				return 2;
			}
			break;
		case 'w': o->witness = true; break;
		case 'j': o->json = true; break;
		case 'r': o->report_dir = optarg; break;
		case 'h': fputs(help, stdout); return 0;
		default: fputs(help, stderr); return 2;
		}
	}
	if (o->kind < 0 || optind < argc) {
		fprintf(stderr, "understudy drill local: --kind is required%s\n%s",
			optind < argc ? " (and takes no other arguments)" : "", help);
		return 2;
	}
	/* The oracle is the counter's: n and a digest of its area, a line a request. */
	if (strcmp(o->guest, "counter") && strncmp(o->guest, "counter:", 8)) {
		fprintf(stderr, "understudy drill local: --guest must be counter[:ARGS] (the guest "
			"whose replies an uninterrupted run predicts)\n");
		return 2;
	}
	if (o->kind == DL_PARTITION && !o->witness) {
		fprintf(stderr, "understudy drill local: --kind partition needs --witness: with "
			"heartbeats only, a cut link makes the secondary take over while the primary "
			"runs on (the documented split-brain hole, see docs/design.md); only a witness "
			"keeps one owner\n");
		return 2;
	}
	return -1;
}

int cli_drill_local(int argc, char **argv)
{
	struct dl_opts o = { .kind = -1, .trials = 5, .guest = "counter" };
	char self[PATH_MAX];
	ssize_t n;
	int r, status;
	pid_t pid;

	if ((r = parse(argc, argv, &o)) >= 0)
		return r;
	if (geteuid() != 0) {
		fprintf(stderr, "understudy drill local: must run as root (it makes a network "
			"namespace, nftables rules and tc qdiscs)\n");
		return 2;
	}
	if ((n = readlink("/proc/self/exe", self, sizeof(self) - 1)) < 0) {
		fprintf(stderr, "understudy drill local: /proc/self/exe: %s\n", strerror(errno));
		return 1;
	}
	self[n] = 0;
	if (!o.seed) {
		struct timespec t;

		clock_gettime(CLOCK_REALTIME, &t);
		o.seed = (unsigned long long)t.tv_sec * 1000003ull ^ (unsigned long long)t.tv_nsec ^
			 (unsigned long long)getpid();
	}
	fprintf(o.json ? stderr : stdout, "drill local %s: %u trial%s, guest %s%s, seed %llu "
		"(--seed %llu replays the moments)\n", kinds[o.kind], o.trials, o.trials == 1 ? "" : "s",
		o.guest, o.witness ? ", etcd witness" : "", o.seed, o.seed);
	fflush(stdout);
	if ((pid = fork()) < 0) {
		fprintf(stderr, "understudy drill local: fork: %s\n", strerror(errno));
		return 1;
	}
	if (pid == 0)
		_exit(drill_run(&o, self));
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
