/* understudy protect: attaches a secondary to a VM that already runs (under
 * `run`, `restore`, `primary` once its secondary is lost, or a secondary
 * that took over), through the VM's
 * control socket, and waits until the secondary holds its first checkpoint.
 * understudy migrate: the same, then the guest is handed over to it. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include "cli/cli.h"
#include "net/control.h"
#include "proto/proto.h"

static const char protect_help[] =
	"usage: understudy protect --control PATH|--name NAME --peer HOST[:PORT] [--index N] [--port-base BASE]\n"
	"                          [--epoch-ms N] [--timeout-ms N] [--handshake-timeout-ms N] [--no-wait]\n"
	"                          [link options]\n"
	"Attaches the secondary waiting at --peer (understudy secondary) to the running VM\n"
	"whose control socket is PATH: initial sync while the guest runs, then protected\n"
	"epochs as `understudy primary` does. Waits until the secondary holds the first\n"
	"checkpoint (exit 0), or says why not (exit 1). A VM that lost its secondary (a\n"
	"`primary` too) can be protected again the same way; a secondary that took over is\n"
	"protected by a new one.\n\n"
	CLI_PORTS_HELP NET_OPTIONS_HELP;

/* Appends " key=value" to req; a relative path is made absolute (the agent
 * resolves it in its own directory). */
static int add(char *req, size_t len, const char *key, const char *value, bool path)
{
	char abs[PATH_MAX], cwd[PATH_MAX];
	size_t n = strlen(req);

	if (!value)
		return 0;
	if (strchr(value, ' ')) {
		fprintf(stderr, "understudy protect: %s '%s': no spaces\n", key, value);
		return 2;
	}
	if (path && value[0] != '/') {
		if (!getcwd(cwd, sizeof(cwd)) ||
		    snprintf(abs, sizeof(abs), "%s/%s", cwd, value) >= (int)sizeof(abs))
			return 2;
		value = abs;
	}
	if (snprintf(req + n, len - n, " %s=%s", key, value) >= (int)(len - n)) {
		fprintf(stderr, "understudy protect: request too long\n");
		return 2;
	}
	return 0;
}

/* "VERB PEER key=value ...": the engine's settings and the link options. */
static int link_request(char *req, size_t len, const char *verb, const char *peer,
			unsigned epoch_ms, unsigned timeout_ms, unsigned hs_ms,
			const struct net_config *net)
{
	char num[32];
	int r;

	snprintf(req, len, "%s %s", verb, peer);
	snprintf(num, sizeof(num), "%u", epoch_ms);
	r = add(req, len, "epoch-ms", num, false);
	snprintf(num, sizeof(num), "%u", timeout_ms);
	r = r ? r : add(req, len, "timeout-ms", num, false);
	snprintf(num, sizeof(num), "%u", hs_ms);
	r = r ? r : add(req, len, "handshake-timeout-ms", num, false);
	r = r ? r : add(req, len, "transport", net->transport == NET_TLS ? "tls" :
			net->transport == NET_TCP ? "tcp" : "rdma", false);
	r = r ? r : add(req, len, "insecure", net->insecure ? "true" : NULL, false);
	r = r ? r : add(req, len, "tls-cert", net->cert, true);
	r = r ? r : add(req, len, "tls-key", net->key, true);
	r = r ? r : add(req, len, "tls-ca", net->ca, true);
	r = r ? r : add(req, len, "tls-peer-name", net->peer_name, false);
	return r;
}

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Polls status until protected (0) or given up (1), at most timeout_ms.
 * A status request that times out is asked again: the agent's loop can be
 * busy for seconds in the initial sync of a large guest on a slow host (8 s
 * for 256 MiB in the nested VM), and protection goes on meanwhile. */
static int wait_protected(const char *control, unsigned timeout_ms)
{
	double t0 = mono_s();
	char last_bad[sizeof(((struct proto_json_reader *)0)->why)] = "";

	while ((mono_s() - t0) * 1000 <= timeout_ms) {
		struct proto_json_reader st;
		const char *state;
		int r;

		usleep(50000);
		r = cli_status_read(control, 5000, &st);
		if (r == -EPROTO || r == -ETIMEDOUT) {
			/* not a status yet, or the loop busy: asked again */
			if (r == -EPROTO)
				snprintf(last_bad, sizeof(last_bad), "%s", st.why);
			proto_json_reader_fini(&st);
			continue;
		}
		if (r < 0) {
			fprintf(stderr, "understudy protect: %s: %s\n", control, strerror(-r));
			return 1;
		}
		last_bad[0] = 0;
		state = proto_json_need_str(&st, "state");
		if (st.why[0]) {
			fprintf(stderr, "understudy protect: %s: a bad status: %s\n", control, st.why);
			proto_json_reader_fini(&st);
			return 1;
		}
		if (!strcmp(state, "protected")) {
			printf("ok protected\n");
			proto_json_reader_fini(&st);
			return 0;
		}
		if (!strcmp(state, "unprotected") || !strcmp(state, "done")) {
			/* a reason only when the engine's status answers */
			const char *reason = proto_json_str(st.o, "reason");

			fprintf(stderr, "understudy protect: not protected: the VM is %s (%s)\n", state,
				reason[0] ? reason : "no reason given");
			proto_json_reader_fini(&st);
			return 1;
		}
		proto_json_reader_fini(&st);
	}
	fprintf(stderr, "understudy protect: not protected within %u ms%s%s\n", timeout_ms,
		last_bad[0] ? "; the last status answer was " : "", last_bad);
	return 1;
}

int cli_cmd_protect(int argc, char **argv)
{
	static const struct option longopts[] = {
		NET_OPTIONS_LONG,
		{ "control", required_argument, NULL, 'c' },
		CLI_NAME_LONG,
		{ "peer", required_argument, NULL, 'p' },
		{ "epoch-ms", required_argument, NULL, 'e' },
		{ "timeout-ms", required_argument, NULL, 't' },
		{ "handshake-timeout-ms", required_argument, NULL, 'H' },
		{ "no-wait", no_argument, NULL, 'n' },
		CLI_PORTS_LONG,
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct cli_config cf CLI_CONFIG_AUTO = { 0 };
	struct cli_name nm = { 0 };
	struct net_config net = { 0 };
	const char *control = NULL, *peer = NULL;
	unsigned epoch_ms = 25, timeout_ms = 500, hs_ms = 5000;
	bool wait = true;
	struct cli_ports ports;
	char req[4 * PATH_MAX], *reply = NULL;
	int opt, r;

	cli_ports_init(&ports);
	if (cli_config_apply(&cf, &argc, &argv, "h", longopts))
		return 2;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		r = 0;
		switch (opt) {
		case 'h': fputs(protect_help, stdout); return 0;
		case 'c': control = optarg; r = cli_check_control("--control", optarg); break;
		case CLI_NAME_OPTION: r = cli_name_set(&nm, optarg); break;
		case 'p': peer = optarg; r = cli_check_host_maybe_port("--peer", optarg); break;
		case 'e': r = cli_parse_ms("--epoch-ms", optarg, 1, &epoch_ms); break;
		case 't': r = cli_parse_ms("--timeout-ms", optarg, 10, &timeout_ms); break;
		case 'H': r = cli_parse_ms("--handshake-timeout-ms", optarg, 10, &hs_ms); break;
		case 'n': wait = false; break;
		case 1410: case 1411: r = cli_parse_ports_option(&ports, opt, optarg); break;
		default: r = cli_parse_option(opt, optarg, NULL, &net); break;
		}
		if (r)
			return cli_config_blame(&cf, argv, optind);
	}
	if (cli_check_no_more_args("protect", argc, argv))
		return 2;
	control = cli_name_client_control(&nm, control);
	if (!control || !peer) {
		fprintf(stderr, "understudy protect: --control PATH (or --name NAME) and --peer HOST:PORT "
			"are required\n");
		return 2;
	}
	if (cli_ports_resolve(&ports, "--peer", &peer) || cli_net_options_check(&net, false))
		return 2;
	if (link_request(req, sizeof(req), "protect", peer, epoch_ms, timeout_ms, hs_ms, &net))
		return 2;
	r = control_request(control, req, 10000, &reply);
	if (r < 0) {
		fprintf(stderr, "understudy protect: %s: %s\n", control, strerror(-r));
		return 1;
	}
	if (strncmp(reply, "ok", 2)) {
		fprintf(stderr, "understudy protect: %s", reply);
		free(reply);
		return 1;
	}
	fputs(reply, stdout);
	free(reply);
	return wait ? wait_protected(control, hs_ms * 4 + 2000) : 0;
}

/* ---- understudy migrate ------------------------------------------------------ */

static const char migrate_help[] =
	"usage: understudy migrate --control PATH|--name NAME --to HOST[:PORT] [--index N] [--port-base BASE]\n"
	"                          [--downtime-ms N] [--max-time S]\n"
	"                          [--epoch-ms N] [--timeout-ms N] [--no-auto-converge] [--json]\n"
	"                          [--bandwidth MiB/s] [--postcopy-after ROUNDS|never] [--with-disk]\n"
	"                          [--handshake-timeout-ms N] [link options]\n"
	"Moves the running VM whose control socket is PATH to the secondary waiting at --to\n"
	"(understudy secondary): initial sync while the guest runs, protected epochs, and at\n"
	"the first epoch whose predicted downtime (pause + one round trip + the epoch's bytes\n"
	"at the link's bandwidth) is at most --downtime-ms (default 30) the guest is paused\n"
	"for a final epoch and the destination takes over at once. The source then exits 0.\n"
	"When the pause and the round trip alone take more than half of --downtime-ms (a\n"
	"long link), the hand-over waits only for the epoch's bytes to fit in half of it.\n"
	"When the bytes do not fit for 8 epochs in a row the guest is throttled\n"
	"(auto-converge: kept paused after each capture for 20 % of the epoch, +10 % a\n"
	"step, at most 99 %; shown as throttle), unless --no-auto-converge. Progress once\n"
	"a second, with a bar (--json: one JSON object per line, then a summary object).\n"
	"Ctrl-C or --max-time (default 300 s) before the hand-over cancels: the VM runs on\n"
	"at the source and the destination drops what it got. Once the guest is paused for\n"
	"the hand-over the migration cannot be cancelled. If the link fails then (the\n"
	"destination died), the source process stays: the guest resumes there, unprotected,\n"
	"when the hand-over order provably never reached the destination (not sent: the\n"
	"destination had closed the connection; or lost with it before it left) or, with a\n"
	"witness, the key is still the source's or it wins the key back (proof that the\n"
	"destination never took it); else it stays paused there (state in-doubt) until\n"
	"`understudy takeover --control PATH` once the destination surely does not run\n"
	"it (with a witness: never, the destination won the key). Exit 1 either way.\n"
	"--bandwidth limits the migration stream before the switch (a token bucket; the\n"
	"predicted downtime counts the last epoch at that rate).\n"
	"--postcopy-after N (default never): after N epochs in a row whose predicted\n"
	"downtime does not fit, switch to post-copy: the source pauses the guest for good\n"
	"and sends its state and the list of pages the destination lacks; the destination\n"
	"runs the guest at once and fetches each missing page on its first access, while\n"
	"the source streams the rest. A post-copy migration CANNOT BE CANCELLED after the\n"
	"switch, and if either side dies before every page is in, the VM is lost (both\n"
	"sides report it and exit 1; the destination does not run on with pages missing).\n"
	"A protected VM hands over to its own secondary when that is the one named; to\n"
	"another host, its secondary is told to stand down first. A running\n"
	"`understudy primary` migrates only to its own secondary.\n"
	"--with-disk: the VM's disk is copied to the destination's image (its secondary's\n"
	"--disk FILE): every block that may hold data while the guest runs, then the blocks\n"
	"written meanwhile, then each epoch's; at the hand-over the destination's image\n"
	"equals the source's. Images are never shared between hosts here, so a VM with a disk\n"
	"migrates only with --with-disk (exit 2 without it), and not by post-copy.\n"
	"--handshake-timeout-ms (default 5000): each phase before the destination holds the\n"
	"first checkpoint must progress within it, as for protect.\n\n"
	CLI_PORTS_HELP NET_OPTIONS_HELP;

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
	(void)sig;
	interrupted = 1;
}

/* A VM protected by a secondary other than the destination: that one is
 * told to stand down first ("cancel": a goodbye, it takes nothing over),
 * then the migration request is sent once the agent takes a new engine.
 * 0 when the request was accepted (*reply is its answer), 2 when the agent
 * says the request is wrong ("error usage: ..."), 1 otherwise. */
static int send_migrate(const char *control, const char *req, const char *to, bool with_disk,
			char **reply)
{
	char *st = NULL, state[32] = "", peer[160] = "";
	bool disk = false;
	struct proto_json_reader js;
	int r;

	*reply = NULL;
	r = cli_status_read(control, 5000, &js);
	if (r == 0) {
		snprintf(state, sizeof(state), "%s", proto_json_need_str(&js, "state"));
		/* no peer: unprotected, or a standby */
		snprintf(peer, sizeof(peer), "%s", proto_json_str(js.o, "peer"));
		/* a protected VM with a disk */
		disk = json_object_object_get_ex(js.o, "disk_blocks", NULL);
	}
	if (r == -EPROTO || (r == 0 && js.why[0])) {
		fprintf(stderr, "understudy migrate: %s: a bad status: %s\n", control, js.why);
		proto_json_reader_fini(&js);
		return 1;
	}
	proto_json_reader_fini(&js);
	/* Refused before its secondary is told to stand down: nothing changes. */
	if (disk && !with_disk) {
		fprintf(stderr, "understudy migrate: the VM has a disk and its image is not shared "
			"with the destination: add --with-disk to copy it to the destination's image\n");
		return 2;
	}
	if (peer[0] && strcmp(peer, to) && strcmp(state, "unprotected") && strcmp(state, "fenced") &&
	    strcmp(state, "done")) {
		fprintf(stderr, "understudy migrate: the VM is %s by %s: it is told to stand down first\n",
			state, peer);
		if (control_request(control, "cancel", 5000, &st) < 0 || strncmp(st, "ok", 2)) {
			fprintf(stderr, "understudy migrate: cannot drop the secondary: %s",
				st ? st : "no answer\n");
			free(st);
			return 1;
		}
		free(st);
	}
	/* The goodbye is delivered (and, with a witness, the vouch withdrawn)
	 * before a new engine is taken: "not now" until then. */
	for (int i = 0; i < 500; i++) {
		r = control_request(control, req, 10000, reply);
		if (r < 0) {
			fprintf(stderr, "understudy migrate: %s: %s\n", control, strerror(-r));
			return 1;
		}
		if (!strncmp(*reply, "ok", 2))
			return 0;
		if (!strncmp(*reply, "error usage: ", 13)) {
			fprintf(stderr, "understudy migrate: %s", *reply + 6);
			free(*reply);
			*reply = NULL;
			return 2;        /* the request is what is wrong */
		}
		if (!strstr(*reply, "not now"))
			break;
		free(*reply);
		*reply = NULL;
		usleep(20000);
	}
	fprintf(stderr, "understudy migrate: %s", *reply ? *reply : "the secondary did not go\n");
	free(*reply);
	*reply = NULL;
	return 1;
}

/* What follow shows of the source's status. */
struct progress {
	double bytes, epoch, downtime, total_ms, throttle, predicted_ms, pause_p50_us, lag_ms;
	double dirty_pages, left_bytes;
};

/* The states in which the source no longer migrates; a VM no engine runs
 * (primary/serve.c) says only its role and state. */
static bool migration_over(const char *state)
{
	return !strcmp(state, "unprotected") || !strcmp(state, "done") || !strcmp(state, "fenced");
}

/* The engine's figures of a migrating source: every one must be there. */
static void read_progress(struct proto_json_reader *js, struct progress *g)
{
	g->bytes = proto_json_need_num(js, "bytes_sent");
	g->epoch = proto_json_need_num(js, "epoch");
	g->downtime = proto_json_need_num(js, "migration_downtime_ms");
	g->total_ms = proto_json_need_num(js, "migration_total_ms");
	g->throttle = proto_json_need_num(js, "throttle_pct");
	g->predicted_ms = proto_json_need_num(js, "predicted_downtime_ms");
	g->pause_p50_us = proto_json_need_num(js, "pause_p50_us");
	g->lag_ms = proto_json_need_num(js, "lag_ms");
	g->dirty_pages = proto_json_need_num(js, "dirty_pages_last");
	g->left_bytes = proto_json_need_num(js, "left_bytes");
}

/* The progress line: state, bar, round, MiB sent of the total and its
 * share, rate, dirty rate, predicted downtime, throttle, time so far; a
 * narrow terminal drops them from the right. */
static void draw_progress(struct cli_meter *m, const char *state, const struct progress *g,
			  unsigned epoch_ms, double elapsed_s)
{
	/* The prediction the source switches on (pause + round trip + the last
	 * epoch at the link's bandwidth); before its first, pause + lag. */
	double predicted = g->predicted_ms > 0 ? g->predicted_ms : g->pause_p50_us / 1e3 + g->lag_ms;
	double dirty = g->dirty_pages * 4096.0 / 1048576.0 / (epoch_ms / 1e3);
	/* total: what left so far plus what is still to go (before encoding:
	 * zero pages and deltas send less) */
	double total = g->bytes + g->left_bytes;
	/* Before the sync what left is the handshake and nothing is known to
	 * be left to send: the share is 0, not the whole. */
	bool syncing = strcmp(state, "connecting") && strcmp(state, "hello");
	double frac = syncing && total > 0 ? g->bytes / total : 0.0;
	int filled = (int)(frac * 20 + 0.5);
	char f[10][48];
	const char *fields[10];

	snprintf(f[0], sizeof(f[0]), "%-10s", state);
	/* [#####...............]: what has left of what there is to send */
	f[1][0] = '[';
	for (int i = 0; i < 20; i++)
		f[1][1 + i] = i < filled ? '#' : '.';
	snprintf(f[1] + 21, sizeof(f[1]) - 21, "]");
	snprintf(f[2], sizeof(f[2]), "round %-5.0f", g->epoch);
	snprintf(f[3], sizeof(f[3]), "%7.1f / %.1f MiB", g->bytes / 1048576.0, total / 1048576.0);
	snprintf(f[4], sizeof(f[4]), "%3.0f %%", 100.0 * frac);
	snprintf(f[5], sizeof(f[5]), "%6.1f MiB/s", g->bytes / 1048576.0 / (elapsed_s + 1e-9));
	snprintf(f[6], sizeof(f[6]), "dirty %6.1f MiB/s", dirty);
	snprintf(f[7], sizeof(f[7]), "predicted %6.2f ms", predicted);
	snprintf(f[8], sizeof(f[8]), "throttle %2.0f %%", g->throttle);
	snprintf(f[9], sizeof(f[9]), "%.0f s", elapsed_s);
	for (int i = 0; i < 10; i++)
		fields[i] = f[i];
	cli_meter_draw(m, fields, 10);
}

/* The last line of a migration that did not end migrated: what became of
 * it, in which state, after how long, with how much sent. */
static void say_unfinished(struct cli_meter *m, const char *what, const char *state,
			   const struct progress *g, double elapsed_s)
{
	cli_meter_say(m, "not migrated: %s after %.1f s (state %s), %.1f MiB sent, %.0f epochs", what,
		      elapsed_s, state[0] ? state : "unknown", g->bytes / 1048576.0, g->epoch);
}

/* Follows the migration until it ends: 0 migrated, 1 failed or cancelled.
 * Without --json a progress line once a second on stderr and a summary at
 * the end; with it an object a line on stdout, then a summary object. */
static int follow(const char *control, unsigned max_s, unsigned epoch_ms, bool json)
{
	double t0 = mono_s(), last_print = 0;
	char state[32] = "", why[200] = "", *reply = NULL;
	char last_bad[sizeof(((struct proto_json_reader *)0)->why)] = "";
	struct proto_json_reader js;
	struct progress g = { .downtime = -1, .total_ms = -1 };
	struct cli_meter m;
	double throttle = 0;
	double pc_faults = -1, pc_p50 = -1, pc_p99 = -1, pc_ms = -1;
	bool postcopy = false;
	int r;

	cli_meter_init(&m, stderr);
	for (;;) {
		double now = mono_s();

		if ((interrupted || now - t0 > max_s) && strcmp(state, "switching") &&
		    strcmp(state, "postcopy") && strcmp(state, "contending")) {
			r = control_request(control, "cancel", 5000, &reply);
			cli_meter_end(&m);
			fprintf(stderr, "understudy migrate: %s%s%s%s: %s", interrupted ? "interrupted" :
				"--max-time reached", last_bad[0] ? " (the last status answer was " : "",
				last_bad, last_bad[0] ? ")" : "", r < 0 ? "cancel failed\n" : reply);
			free(reply);
			if (!json)
				say_unfinished(&m, r < 0 ? "cancel failed" : "cancelled", state, &g, now - t0);
			return 1;
		}
		r = cli_status_read(control, 5000, &js);
		if (r == -ETIMEDOUT) {
			proto_json_reader_fini(&js);
			continue;   /* busy for seconds (see wait_protected): ask again */
		}
		if (r == -EPROTO) {
			/* Not JSON: an answer that says nothing yet; asked again. */
			snprintf(last_bad, sizeof(last_bad), "%s", js.why);
			proto_json_reader_fini(&js);
			usleep(100000);
			continue;
		}
		if (r < 0) {
			proto_json_reader_fini(&js);
			/* The source exits after the hand-over; its last word was read. */
			if (!strcmp(state, "migrated"))
				break;
			cli_meter_end(&m);
			if (!strcmp(state, "switching"))
				/* A migrated source says so for a while before it exits. */
				fprintf(stderr, "understudy migrate: the source ended during the "
					"hand-over (see its log): the destination runs the guest only "
					"if it took it over (see its status)\n");
			else if (!strcmp(state, "postcopy"))
				fprintf(stderr, "understudy migrate: the source ended during post-copy: the "
					"VM is lost (see the logs)\n");
			else
				fprintf(stderr, "understudy migrate: %s: %s\n", control, strerror(-r));
			if (!json)
				say_unfinished(&m, "the source ended", state, &g, now - t0);
			return 1;
		}
		last_bad[0] = 0;
		snprintf(state, sizeof(state), "%.31s", proto_json_need_str(&js, "state"));
		/* why it failed, if it did (none from a VM no engine runs) */
		snprintf(why, sizeof(why), "%s", proto_json_str(js.o, "reason"));
		if (!js.why[0] && !migration_over(state))
			read_progress(&js, &g);
		if (g.throttle > throttle)
			throttle = g.throttle;
		/* post-copy's figures, once the source announced it */
		if (!js.why[0] && json_object_get_boolean(json_object_object_get(js.o, "postcopy"))) {
			postcopy = true;
			pc_faults = proto_json_need_num(&js, "postcopy_faults");
			pc_p50 = proto_json_need_num(&js, "fault_p50_us");
			pc_p99 = proto_json_need_num(&js, "fault_p99_us");
			pc_ms = proto_json_need_num(&js, "postcopy_ms");
		}
		if (js.why[0]) {
			cli_meter_end(&m);
			fprintf(stderr, "understudy migrate: %s: a bad status: %s\n", control, js.why);
			proto_json_reader_fini(&js);
			return 1;
		}
		if (now - last_print >= 1.0) {
			if (json) {
				json_object *line = json_object_new_object();

				/* one object a line (flushed): the source's status as it answered */
				proto_json_add_fixed(line, "elapsed_s", now - t0, 1);
				if (line)
					json_object_object_add(line, "status", json_object_get(js.o));
				cli_print_json(line);
			} else {
				draw_progress(&m, state, &g, epoch_ms, now - t0);
			}
			last_print = now;
		}
		proto_json_reader_fini(&js);
		if (!strcmp(state, "migrated"))
			break;
		if (migration_over(state)) {
			cli_meter_end(&m);
			fprintf(stderr, "understudy migrate: failed: the source is %s (%s)\n", state, why);
			if (!json)
				say_unfinished(&m, "failed", state, &g, now - t0);
			return 1;
		}
		if (!strcmp(state, "in-doubt")) {
			cli_meter_end(&m);
			if (strstr(why, "not won back"))   /* the witness says the destination took it */
				fprintf(stderr, "understudy migrate: in doubt (%s): the guest stays paused at "
					"the source for good; the destination holds the witness key\n", why);
			else
				fprintf(stderr, "understudy migrate: in doubt (%s): the guest stays paused at "
					"the source; if the destination does not run it, `understudy takeover "
					"--control %s` resumes it there\n", why, control);
			if (!json)
				say_unfinished(&m, "in doubt", state, &g, now - t0);
			return 1;
		}
		usleep(100000);
	}
	if (json) {
		json_object *sum = json_object_new_object();

		proto_json_add_bool(sum, "summary", true);
		proto_json_add_str(sum, "result", "migrated");
		proto_json_add_fixed(sum, "total_s", g.total_ms > 0 ? g.total_ms / 1e3 : mono_s() - t0, 3);
		proto_json_add_fixed(sum, "downtime_ms", g.downtime, 3);
		proto_json_add_fixed(sum, "bytes", g.bytes, 0);
		proto_json_add_fixed(sum, "epochs", g.epoch, 0);
		proto_json_add_fixed(sum, "throttle_pct_max", throttle, 0);
		proto_json_add_bool(sum, "postcopy", postcopy);
		proto_json_add_fixed(sum, "postcopy_faults", pc_faults, 0);
		proto_json_add_fixed(sum, "fault_p50_us", pc_p50, 0);
		proto_json_add_fixed(sum, "fault_p99_us", pc_p99, 0);
		proto_json_add_fixed(sum, "postcopy_ms", pc_ms, 3);
		cli_print_json(sum);
		return 0;
	}
	/* The downtime: from the pause to the destination's word that it runs. */
	cli_meter_say(&m, "migrated in %.3f s: downtime %.3f ms, %.1f MiB sent, %.0f epochs, "
		      "throttle reached %.0f %%", g.total_ms > 0 ? g.total_ms / 1e3 : mono_s() - t0,
		      g.downtime, g.bytes / 1048576.0, g.epoch, throttle);
	if (postcopy)
		cli_meter_say(&m, "post-copy: %.0f faults fetched on demand (wait p50 %.0f us, p99 %.0f "
			      "us), all pages in %.1f ms after the destination started", pc_faults,
			      pc_p50, pc_p99, pc_ms);
	return 0;
}

int cli_cmd_migrate(int argc, char **argv)
{
	static const struct option longopts[] = {
		NET_OPTIONS_LONG,
		{ "control", required_argument, NULL, 'c' },
		CLI_NAME_LONG,
		{ "to", required_argument, NULL, 'p' },
		{ "downtime-ms", required_argument, NULL, 'd' },
		{ "max-time", required_argument, NULL, 'm' },
		{ "epoch-ms", required_argument, NULL, 'e' },
		{ "json", no_argument, NULL, 'j' },
		{ "no-auto-converge", no_argument, NULL, 'A' },
		{ "timeout-ms", required_argument, NULL, 't' },
		{ "bandwidth", required_argument, NULL, 'b' },
		{ "postcopy-after", required_argument, NULL, 'P' },
		{ "with-disk", no_argument, NULL, 'D' },
		{ "handshake-timeout-ms", required_argument, NULL, 'H' },
		CLI_PORTS_LONG,
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct cli_config cf CLI_CONFIG_AUTO = { 0 };
	struct cli_name nm = { 0 };
	struct net_config net = { 0 };
	struct cli_ports ports;
	const char *control = NULL, *peer = NULL;
	unsigned epoch_ms = 25, downtime_ms = 30, max_ms = 300000, link_timeout_ms = 500;
	unsigned bandwidth = 0, pc_after = 0, hs_ms = 5000;
	bool json = false, converge = true, with_disk = false;
	char req[4 * PATH_MAX], num[32], *reply = NULL;
	int opt, r;

	cli_ports_init(&ports);
	if (cli_config_apply(&cf, &argc, &argv, "h", longopts))
		return 2;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		r = 0;
		switch (opt) {
		case 'h': fputs(migrate_help, stdout); return 0;
		case 'c': control = optarg; r = cli_check_control("--control", optarg); break;
		case CLI_NAME_OPTION: r = cli_name_set(&nm, optarg); break;
		case 'p': peer = optarg; r = cli_check_host_maybe_port("--to", optarg); break;
		case 1410: case 1411: r = cli_parse_ports_option(&ports, opt, optarg); break;
		case 'd': r = cli_parse_ms("--downtime-ms", optarg, 1, &downtime_ms); break;
		case 'm':
			r = cli_parse_count("--max-time", optarg, "seconds", 1, 86400, &max_ms);
			max_ms *= 1000;
			break;
		case 'e': r = cli_parse_ms("--epoch-ms", optarg, 1, &epoch_ms); break;
		case 'j': json = true; break;
		case 'A': converge = false; break;
		case 'D': with_disk = true; break;
		case 't': r = cli_parse_ms("--timeout-ms", optarg, 10, &link_timeout_ms); break;
		case 'H': r = cli_parse_ms("--handshake-timeout-ms", optarg, 10, &hs_ms); break;
		case 'b':
			r = cli_parse_count("--bandwidth", optarg, "MiB/s", 1, 1048576, &bandwidth);
			break;
		case 'P':
			pc_after = 0;
			r = strcmp(optarg, "never") ?
			    cli_parse_count("--postcopy-after", optarg, "rounds (or never)", 1, 1000000,
					    &pc_after) : 0;
			break;
		default: r = cli_parse_option(opt, optarg, NULL, &net); break;
		}
		if (r)
			return cli_config_blame(&cf, argv, optind);
	}
	if (cli_check_no_more_args("migrate", argc, argv))
		return 2;
	control = cli_name_client_control(&nm, control);
	if (!control || !peer) {
		fprintf(stderr, "understudy migrate: --control PATH (or --name NAME) and --to HOST:PORT "
			"are required\n");
		return 2;
	}
	if (cli_ports_resolve(&ports, "--to", &peer) || cli_net_options_check(&net, false) ||
	    link_request(req, sizeof(req), "migrate", peer, epoch_ms, link_timeout_ms, hs_ms, &net))
		return 2;
	snprintf(num, sizeof(num), "%u", downtime_ms);
	if (add(req, sizeof(req), "downtime-ms", num, false) ||
	    add(req, sizeof(req), "auto-converge", converge ? "true" : "false", false))
		return 2;
	snprintf(num, sizeof(num), "%u", bandwidth);
	if (bandwidth && add(req, sizeof(req), "bandwidth", num, false))
		return 2;
	snprintf(num, sizeof(num), "%u", pc_after);
	if (pc_after && add(req, sizeof(req), "postcopy-after", num, false))
		return 2;
	if (with_disk && add(req, sizeof(req), "with-disk", "true", false))
		return 2;
	signal(SIGINT, on_sigint);
	if ((r = send_migrate(control, req, peer, with_disk, &reply)))
		return r;
	free(reply);
	return follow(control, max_ms / 1000, epoch_ms, json);
}
