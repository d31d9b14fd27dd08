/* understudy status: ask a running agent through its control socket. */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "cli/cli.h"
#include "net/control.h"
#include "proto/proto.h"

int cli_status_read(const char *control, int timeout_ms, struct proto_json_reader *st)
{
	char *reply = NULL;
	int r = control_request(control, "status json", timeout_ms, &reply);

	/* Let go unanswered (reset) by an agent that is there: its loop stalled
	 * past the request's deadline. Asked again; an agent that ended refuses
	 * the connection, so `migrate` does not take the one for the other. */
	for (int i = 0; (r == -ECONNRESET || r == -EPIPE) && i < CLI_STATUS_RESETS; i++) {
		usleep(100000);
		r = control_request(control, "status json", timeout_ms, &reply);
	}

	st->o = NULL;
	st->why[0] = 0;
	if (r >= 0)
		r = proto_json_read(st, reply);
	else
		snprintf(st->why, sizeof(st->why), "%s", strerror(-r));
	free(reply);
	return r;
}

void cli_print_json(json_object *o)
{
	char *line = proto_json_line(o);

	if (line)
		fputs(line, stdout);
	fflush(stdout);
	free(line);
}

/* --watch: a refresh every interval, like watch(1): the screen cleared on
 * a terminal, else blocks one after the other (with --json, one object a
 * line). SIGINT and SIGTERM are blocked and waited for in sigtimedwait(),
 * which is also the sleep: Ctrl-C ends it at once, with status 0, and no
 * handler or global flag is needed. An agent that stops answering ends it
 * with status 1. */
static int status_watch(const char *path, bool json, double interval_s)
{
	struct timespec ts = { .tv_sec = (time_t)interval_s,
			       .tv_nsec = (long)((interval_s - (time_t)interval_s) * 1e9) };
	bool tty = isatty(STDOUT_FILENO);
	unsigned long refreshes = 0;
	sigset_t stop, old;
	int r = 0;

	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	sigprocmask(SIG_BLOCK, &stop, &old);
	for (;;) {
		char *reply = NULL, stamp[32];
		time_t now = time(NULL);
		int n = control_request(path, json ? "status json" : "status", 5000, &reply);

		if (n < 0) {
			if (refreshes)
				fprintf(stderr, "understudy status: %s: the agent went away (%s) after %lu "
					"refreshes\n", path, strerror(-n), refreshes);
			else
				fprintf(stderr, "understudy status: %s: %s\n", path, strerror(-n));
			r = 1;
			break;
		}
		strftime(stamp, sizeof(stamp), "%F %T", localtime(&now));
		if (tty)
			printf("\033[H\033[2J");
		if (tty || !json)
			printf("every %gs: understudy status --control %s    %s\n\n", interval_s, path,
			       stamp);
		fputs(reply, stdout);
		if (!tty && !json)
			putchar('\n');
		fflush(stdout);
		free(reply);
		refreshes++;
		n = sigtimedwait(&stop, NULL, &ts);
		if (n == SIGINT || n == SIGTERM)
			break;
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	return r;
}

int cli_cmd_status(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "control", required_argument, NULL, 'c' },
		CLI_NAME_LONG,
		{ "json", no_argument, NULL, 'j' },
		{ "watch", no_argument, NULL, 'w' },
		{ "interval", required_argument, NULL, 'i' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct cli_config cf CLI_CONFIG_AUTO = { 0 };
	struct cli_name nm = { 0 };
	const char *path = NULL;
	char *reply = NULL;
	int opt, json = 0, watch = 0, n;
	double interval_s = 1;
	char *end;

	if (cli_config_apply(&cf, &argc, &argv, "h", longopts))
		return 2;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'c':
			path = optarg;
			if (cli_check_control("--control", optarg))
				return cli_config_blame(&cf, argv, optind);
			break;
		case CLI_NAME_OPTION:
			if (cli_name_set(&nm, optarg))
				return cli_config_blame(&cf, argv, optind);
			break;
		case 'j': json = 1; break;
		case 'w': watch = 1; break;
		case 'i':   /* implies --watch */
			watch = 1;
			errno = 0;
			interval_s = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(interval_s >= 0.1 && interval_s <= 3600)) {
				fprintf(stderr, "understudy status: --interval '%s': seconds, 0.1..3600\n",
					optarg);
				return 2;
			}
			break;
		case 'h':
			puts("usage: understudy status --control PATH|--name NAME [--json] [--watch [--interval S]]\n"
			     "Role, state, the guest, memory, vCPUs, uptime on this host and devices; then\n"
			     "what applies to the role: epoch, last acknowledged epoch, pause p50/p99,\n"
			     "dirty pages per epoch, bytes sent, lag, time since the last heartbeat; a\n"
			     "takeover, switchover or migration once one happened. --json: every field.\n"
			     "--watch refreshes every S seconds (default 1) like watch(1): the screen\n"
			     "is cleared on a terminal, else the blocks follow each other (--json: one\n"
			     "object a line). Ctrl-C ends it (status 0); an agent that goes away ends it\n"
			     "with a message and status 1.\n"
			     "--name NAME: the VM NAME of this host, at $UNDERSTUDY_RUN_DIR/NAME.sock\n"
			     "(default /run/understudy as root, else $XDG_RUNTIME_DIR/understudy), instead\n"
			     "of --control.");
			return 0;
		default: return 2;
		}
	}
	path = cli_name_client_control(&nm, path);
	if (!path || optind < argc) {
		fprintf(stderr, "understudy status: --control PATH or --name NAME is required\n");
		return 2;
	}
	if (watch)
		return status_watch(path, json, interval_s);
	n = control_request(path, json ? "status json" : "status", 5000, &reply);
	if (n < 0) {
		fprintf(stderr, "understudy status: %s: %s\n", path, strerror(-n));
		return 1;
	}
	fputs(reply, stdout);
	free(reply);
	return 0;
}
