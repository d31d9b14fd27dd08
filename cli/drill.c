/* understudy drill: prove on demand that a protected VM would survive, and
 * keep the report. The secondary runs the drill (replication/drill.c); this
 * command starts it through the control socket, follows it, runs a --probe
 * command against the clone's console if asked, prints the report, keeps
 * it (--report-dir) and lists kept ones (drill history). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <json-c/json.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "net/control.h"
#include "proto/proto.h"

static const char history_help[] =
	"usage: understudy drill history DIR\n"
	"  The drill reports kept in DIR (--report-dir DIR of a drill: files\n"
	"  drill-<UTC time>-<kind>.json), oldest first, one line each: TIME, KIND,\n"
	"  VERDICT, RTO_MS, REASON; then their count. A file there that is not a\n"
	"  report is named on stderr and skipped. Exit 1 when DIR cannot be read.\n";

static const char drill_help[] =
	"usage: understudy drill KIND [options]\n"
	"       understudy drill history DIR\n"
	"kinds:\n"
	"  test-failover --control SECONDARY_CONTROL|--name NAME [--seconds N] [--probe CMD] [--json]\n"
	"                [--report-dir DIR]\n"
	"      On the secondary: an isolated clone of the standby starts at its last complete\n"
	"      checkpoint (own VM, console captured, no network; pages shared copy-on-write),\n"
	"      runs N seconds (default 5) while production runs on protected, is probed\n"
	"      (counter: get; stress: check; or --probe CMD) and its RAM digest compared with\n"
	"      the primary's for that epoch. Reports RTO (activation), RPO, probe, digest,\n"
	"      the effect on the primary's pauses and lag, and the memory used.\n"
	"      --probe CMD: CMD runs under /bin/sh with the clone's console on its stdin\n"
	"      (everything the clone wrote since it started) and stdout (bytes to the\n"
	"      clone); exit status 0 means the clone passed. Given up after 100 s.\n"
	"  switchover --control PRIMARY_CONTROL|--name NAME --listen HOST:PORT [--back] [--timeout-ms N]\n"
	"             [--json] [--report-dir DIR]\n"
	"      A planned switchover (understudy switchover), and with --back the switch back\n"
	"      (the new standby asks its primary for the guest back). Reports the downtime\n"
	"      of each leg, the bytes the new primary sent to be protected again (no\n"
	"      resync), and that the standby keeps taking epochs.\n"
	"  local --kind kill|stop|partition|loss|slowlink [--trials N] [--guest counter[:ARGS]]\n"
	"        [--seed S] [--witness] [--json] [--report-dir DIR]\n"
	"      As root: a self-contained pair on this host, in a network namespace of its own;\n"
	"      per trial the fault at a seeded moment, every console reply checked against an\n"
	"      uninterrupted run (understudy drill local --help for the kinds). Reports per\n"
	"      trial the RTO, RPO (acknowledged replies lost: must be 0) and replays.\n"
	"  --json             JSON lines (events, then the summary object last)\n"
	"  --report-dir DIR   keep the report as DIR/drill-<UTC time>-<kind>.json\n"
	"exit status: 0 PASS, 1 FAIL, 2 bad usage\n";

#define POLL_US 50000
#define PROBE_CMD_MAX_S 100

struct drill_cli {
	const char *control;
	unsigned seconds;
	const char *probe;
	bool json;
	const char *report_dir;
};

static int ask(const struct drill_cli *c, const char *req, char **reply)
{
	int r = control_request(c->control, req, 10000, reply);

	if (r < 0)
		fprintf(stderr, "understudy drill: %s: %s\n", c->control, strerror(-r));
	return r;
}

/* ---- --probe CMD: the clone's console on its stdin and stdout ----------------- */

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The clone's output from *off on, written to fd (the command's stdin). */
static int relay_out(const struct drill_cli *c, size_t *off, int fd)
{
	char req[64], *reply = NULL, *hex;
	int r;

	snprintf(req, sizeof(req), "drill console-out %zu", *off);
	if ((r = ask(c, req, &reply)) < 0)
		return r;
	if (strncmp(reply, "ok ", 3)) {
		free(reply);
		return -EPROTO;
	}
	*off = strtoull(reply + 3, &hex, 10);
	for (hex++; fd >= 0 && hexval(hex[0]) >= 0 && hexval(hex[1]) >= 0; hex += 2) {
		unsigned char b = (unsigned char)(hexval(hex[0]) * 16 + hexval(hex[1]));

		if (write(fd, &b, 1) != 1)
			break;           /* the command closed its stdin: fine */
	}
	free(reply);
	return 0;
}

/* Bytes the command wrote go to the clone's console. */
static int relay_in(const struct drill_cli *c, const unsigned char *buf, size_t n)
{
	char req[CONTROL_MAX_REQUEST], *reply = NULL;

	while (n) {
		size_t k = n > 1000 ? 1000 : n, len = (size_t)sprintf(req, "drill console-in ");
		int r;

		for (size_t i = 0; i < k; i++)
			len += (size_t)sprintf(req + len, "%02x", buf[i]);
		if ((r = ask(c, req, &reply)) < 0)
			return r;
		free(reply);
		buf += k;
		n -= k;
	}
	return 0;
}

static int run_probe(const struct drill_cli *c, int *status)
{
	int in[2], out[2], r = 0;
	size_t off = 0;
	time_t t0 = time(NULL);
	pid_t pid;

	if (pipe(in) < 0 || pipe(out) < 0)
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		close(in[0]); close(in[1]); close(out[0]); close(out[1]);
		execl("/bin/sh", "sh", "-c", c->probe, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	fcntl(out[0], F_SETFL, O_NONBLOCK);
	for (;;) {
		struct pollfd p = { .fd = out[0], .events = POLLIN };
		unsigned char buf[4096];
		ssize_t n;

		if ((r = relay_out(c, &off, in[1])) < 0)
			break;
		if (poll(&p, 1, POLL_US / 1000) > 0) {
			n = read(out[0], buf, sizeof(buf));
			if (n > 0 && (r = relay_in(c, buf, (size_t)n)) < 0)
				break;
			if (n == 0 && waitpid(pid, status, 0) == pid)
				break;   /* stdout closed: its outcome */
		}
		if (waitpid(pid, status, WNOHANG) == pid)
			break;
		if (time(NULL) - t0 > PROBE_CMD_MAX_S) {
			kill(pid, SIGKILL);
			waitpid(pid, status, 0);
			fprintf(stderr, "understudy drill: the probe command ran past %d s: killed\n",
				PROBE_CMD_MAX_S);
			break;
		}
	}
	close(in[1]);
	close(out[0]);
	if (r < 0) {
		kill(pid, SIGKILL);
		waitpid(pid, status, 0);
	}
	return r;
}

static int probe_done(const struct drill_cli *c)
{
	int status = 0, rc;
	char req[128], *reply = NULL;

	if (run_probe(c, &status) < 0)
		status = 1 << 8;
	rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	snprintf(req, sizeof(req), "drill probe-done %d %s", rc, rc ? "the probe command failed" :
		 "the probe command passed");
	if (ask(c, req, &reply) < 0)
		return -EIO;
	free(reply);
	return 0;
}

/* ---- the report --------------------------------------------------------------- */

static json_object *get(json_object *o, const char *path)
{
	char key[64];
	const char *dot;

	while (o && (dot = strchr(path, '.'))) {
		snprintf(key, sizeof(key), "%.*s", (int)(dot - path), path);
		if (!json_object_object_get_ex(o, key, &o))
			return NULL;
		path = dot + 1;
	}
	return o && json_object_object_get_ex(o, path, &o) ? o : NULL;
}

static double num(json_object *o, const char *path)
{
	json_object *v = get(o, path);

	return v ? json_object_get_double(v) : -1;
}

static const char *str(json_object *o, const char *path)
{
	json_object *v = get(o, path);

	return v ? json_object_get_string(v) : "-";
}

static void print_human(json_object *rep)
{
	printf("drill %s on %s (%.0f MiB, %.0f vCPU): %s\n", str(rep, "kind"), str(rep, "vm.guest"),
	       num(rep, "vm.mem_bytes") / 1048576, num(rep, "vm.vcpus"), str(rep, "verdict"));
	printf("  time        %s .. %s (%.0f s of clone run)\n", str(rep, "start"), str(rep, "end"),
	       num(rep, "seconds"));
	printf("  epochs      %.0f .. %.0f: %.0f applied to the standby during the drill\n",
	       num(rep, "epochs.start"), num(rep, "epochs.end"), num(rep, "epochs.applied_during"));
	printf("  RTO         %.3f ms (activation: state copied from the standby, vCPUs running; "
	       "the VM was built ahead in %.3f ms, as a standby is)\n", num(rep, "rto_ms"),
	       num(rep, "clone_build_ms"));
	/* A report kept by an older version has no reason: say so. */
	if (get(rep, "rpo.acked_outputs_lost"))
		printf("  RPO         acknowledged outputs lost: %s (%s)", str(rep, "rpo.acked_outputs_lost"),
		       get(rep, "rpo.acked_outputs_lost_why") ? str(rep, "rpo.acked_outputs_lost_why") :
		       "no reason in this report");
	else
		printf("  RPO         acknowledged outputs lost: %s", get(rep, "rpo.acked_outputs_lost_why") ?
		       str(rep, "rpo.acked_outputs_lost_why") : "not known (the report says not why)");
	printf("; unacknowledged epochs discarded: %.0f\n", num(rep, "rpo.unacked_epochs_discarded"));
	printf("  output      %.0f bytes held for replay; the clone wrote %.0f, released 0\n",
	       num(rep, "output.held_bytes"), num(rep, "output.clone_output_bytes"));
	printf("  probe       %s (%s)\n", str(rep, "probe.result"), str(rep, "probe.kind"));
	printf("  digest      clone %s, primary %s at epoch %.0f: %s\n", str(rep, "digest.clone"),
	       str(rep, "digest.primary"), num(rep, "digest.epoch"),
	       json_object_get_boolean(get(rep, "digest.match")) ? "match" : "MISMATCH");
	if (get(rep, "production.pause_p99_during_ms"))
		printf("  production  pause p50 %.3f -> %.3f ms, p99 %.3f -> %.3f ms (max %.3f, "
		       "digest %.3f ms in one pause); lag %.3f -> max %.3f ms\n",
		       num(rep, "production.pause_p50_before_ms"),
		       num(rep, "production.pause_p50_during_ms"),
		       num(rep, "production.pause_p99_before_ms"),
		       num(rep, "production.pause_p99_during_ms"),
		       num(rep, "production.pause_max_during_ms"),
		       num(rep, "production.digest_in_pause_ms"), num(rep, "production.lag_before_ms"),
		       num(rep, "production.lag_max_during_ms"));
	else
		printf("  production  the primary's figures did not arrive\n");
	if (get(rep, "production.apply_p99_during_ms"))
		printf("  standby     apply p50 %.3f -> %.3f ms, p99 %.3f -> %.3f ms, plus the "
		       "clone's page copies %.3f ms an epoch (max %.3f): each ACK waits for both\n",
		       num(rep, "production.apply_p50_before_ms"),
		       num(rep, "production.apply_p50_during_ms"),
		       num(rep, "production.apply_p99_before_ms"),
		       num(rep, "production.apply_p99_during_ms"),
		       num(rep, "production.clone_copy_avg_ms"),
		       num(rep, "production.clone_copy_max_ms"));
	printf("  memory      %.2f MiB private to the clone (copy-on-write; %.0f pages copied "
	       "before the standby's applies)\n", num(rep, "memory.used_bytes") / 1048576,
	       num(rep, "memory.pages_copied_before_applies"));
	printf("  verdict     %s: %s\n", str(rep, "verdict"), str(rep, "reason"));
}

/* ---- test-failover ------------------------------------------------------------ */

static void event(const struct drill_cli *c, json_object *st)
{
	const char *state = str(st, "state");

	if (c->json) {
		json_object *ev = json_object_new_object();

		proto_json_add_str(ev, "kind", "test-failover");
		proto_json_add_str(ev, "event", state);
		proto_json_add_fixed(ev, "rto_ms", num(st, "rto_ms"), 3);
		proto_json_add_fixed(ev, "standby_epoch", num(st, "standby_epoch"), 0);
		cli_print_json(ev);
	} else if (!strcmp(state, "running")) {
		fprintf(stderr, "clone running at epoch %.0f (activation %.3f ms)\n",
			num(st, "epoch_start"), num(st, "rto_ms"));
	}
}

static int test_failover(const struct drill_cli *c)
{
	char req[128], *reply = NULL, last[32] = "";
	struct proto_json_reader rd;
	json_object *st = NULL, *rep = NULL;
	const char *state = "";
	int verdict = 1;
	bool probed = false;

	snprintf(req, sizeof(req), "drill test-failover seconds=%u probe=%s", c->seconds,
		 c->probe ? "external" : "builtin");
	if (ask(c, req, &reply) < 0)
		return 1;
	if (strncmp(reply, "ok", 2)) {
		fprintf(stderr, "understudy drill: the secondary refused: %s", reply);
		free(reply);
		return 1;
	}
	free(reply);
	for (unsigned i = 0; i < (c->seconds + 200) * (1000000 / POLL_US); i++) {
		usleep(POLL_US);
		json_object_put(st);
		st = NULL;
		if (ask(c, "drill status", &reply) < 0)
			return 1;
		/* the state always; the report once done, with its verdict */
		if (proto_json_read(&rd, reply) == 0) {
			state = proto_json_need_str(&rd, "state");
			rep = strcmp(state, "done") ? NULL : proto_json_need_obj(&rd, "report");
			if (rep && !json_object_is_type(get(rep, "verdict"), json_type_string))
				snprintf(rd.why, sizeof(rd.why), "the report has no verdict");
		}
		free(reply);
		if (rd.why[0]) {
			fprintf(stderr, "understudy drill: %s: a bad drill status: %s\n", c->control,
				rd.why);
			proto_json_reader_fini(&rd);
			return 1;
		}
		/* st keeps the status (and state, rep inside it) after the reader */
		st = json_object_get(rd.o);
		proto_json_reader_fini(&rd);
		if (strcmp(last, state)) {
			snprintf(last, sizeof(last), "%s", state);
			if (strcmp(last, "done"))
				event(c, st);
		}
		if (!strcmp(last, "probing") && c->probe && !probed) {
			probed = true;
			if (probe_done(c) < 0)
				break;
		}
		if (!strcmp(last, "done")) {
			if (c->json)
				printf("%s\n", json_object_to_json_string_ext(rep, JSON_C_TO_STRING_PLAIN));
			else
				print_human(rep);
			if (c->report_dir)
				(void)cli_drill_keep_report(c->report_dir, rep);
			verdict = strcmp(str(rep, "verdict"), "PASS") ? 1 : 0;
			json_object_put(st);
			return verdict;
		}
	}
	json_object_put(st);
	fprintf(stderr, "understudy drill: the drill did not end in time\n");
	return 1;
}

/* ---- history ------------------------------------------------------------------ */

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static int history(const char *dir)
{
	struct dirent **ents;
	int n = scandir(dir, &ents, NULL, by_name), shown = 0;

	if (n < 0) {
		fprintf(stderr, "understudy drill history: %s: %s\n", dir, strerror(errno));
		return 1;
	}
	printf("%-24s  %-13s  %-7s  %10s  %s\n", "TIME", "KIND", "VERDICT", "RTO_MS", "REASON");
	for (int i = 0; i < n; i++) {
		char path[4096];
		json_object *rep;
		size_t len = strlen(ents[i]->d_name);

		if (!strncmp(ents[i]->d_name, "drill-", 6) && len > 5 &&
		    !strcmp(ents[i]->d_name + len - 5, ".json")) {
			snprintf(path, sizeof(path), "%s/%s", dir, ents[i]->d_name);
			if ((rep = json_object_from_file(path))) {
				printf("%-24s  %-13s  %-7s  %10.3f  %s\n", str(rep, "start"),
				       str(rep, "kind"), str(rep, "verdict"), num(rep, "rto_ms"),
				       str(rep, "reason"));
				shown++;
				json_object_put(rep);
			} else {
				fprintf(stderr, "%s: not a drill report\n", path);
			}
		}
		free(ents[i]);
	}
	free(ents);
	printf("(%d drill%s)\n", shown, shown == 1 ? "" : "s");
	return 0;
}

int cli_cmd_drill(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "control", required_argument, NULL, 'c' },
		CLI_NAME_LONG,
		{ "seconds", required_argument, NULL, 's' },
		{ "probe", required_argument, NULL, 'p' },
		{ "json", no_argument, NULL, 'j' },
		{ "report-dir", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct drill_cli c = { .seconds = 5 };
	struct cli_name nm = { 0 };
	const char *kind;
	char *end;
	int opt;

	if (argc < 2) {
		fputs(drill_help, stderr);
		return 2;
	}
	kind = argv[1];
	if (!strcmp(kind, "--help") || !strcmp(kind, "-h")) {
		fputs(drill_help, stdout);
		return 0;
	}
	if (!strcmp(kind, "history")) {
		if (argc == 3 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) {
			fputs(history_help, stdout);
			return 0;
		}
		if (argc != 3) {
			fputs(drill_help, stderr);
			return 2;
		}
		return history(argv[2]);
	}
	if (!strcmp(kind, "switchover"))
		return cli_drill_switchover(argc - 1, argv + 1);
	if (!strcmp(kind, "local"))
		return cli_drill_local(argc - 1, argv + 1);
	if (strcmp(kind, "test-failover")) {
		fprintf(stderr, "understudy drill: unknown kind '%s'\n", kind);
		fputs(drill_help, stderr);
		return 2;
	}
	optind = 2;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'c': c.control = optarg; break;
		case CLI_NAME_OPTION:
			if (cli_name_set(&nm, optarg))
				return 2;
			break;
		case 's':
			c.seconds = (unsigned)strtoul(optarg, &end, 10);
			if (*end || !optarg[0] || c.seconds < 1 || c.seconds > 3600) {
				fprintf(stderr, "understudy drill: --seconds must be 1..3600\n");
				return 2;
			}
			break;
		case 'p': c.probe = optarg; break;
		case 'j': c.json = true; break;
		case 'r': c.report_dir = optarg; break;
		case 'h': fputs(drill_help, stdout); return 0;
		default: fputs(drill_help, stderr); return 2;
		}
	}
	c.control = cli_name_client_control(&nm, c.control);
	if (!c.control || optind < argc) {
		fprintf(stderr, "understudy drill test-failover: --control SECONDARY_CONTROL is "
			"required%s\n", optind < argc ? " (and takes no other arguments)" : "");
		return 2;
	}
	return test_failover(&c);
}
