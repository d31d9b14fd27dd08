/* understudy takeover: tells a standby (a secondary started with --takeover
 * manual, or any secondary) through its control socket to resume the guest
 * now. Whoever asks has made sure the primary is gone (fenced). */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include "cli/cli.h"
#include "net/control.h"
#include "proto/proto.h"

/* A takeover request waits for the fence command (default deadline 10 s,
 * plus the grace of its kill). */
#define TAKEOVER_REPLY_MS 120000

static const char takeover_help[] =
	"usage: understudy takeover --control PATH [--fenced-by-operator]\n"
	"Makes the secondary at PATH resume the guest from its last complete checkpoint.\n"
	"Refused (exit 1) when it holds no complete checkpoint or is not a standby. With a\n"
	"witness it first wins the witness key (waits up to 30 s for the old lease to end).\n"
	"With --fence-cmd the secondary runs it first. The primary must be fenced first: a\n"
	"live primary is told to stop, but one that cannot be reached (partition) would run\n"
	"on beside the new copy.\n"
	"On the source of a migration in doubt (state in-doubt: the link failed after the\n"
	"hand-over order left) it resumes the paused guest there, unprotected: only once\n"
	"the destination surely does not run it.\n"
	"  --fenced-by-operator  you made sure the old primary is off (powered down, its\n"
	"                        process gone): the fence command is skipped, and a standby\n"
	"                        whose fence command failed (state fence-failed), or one that\n"
	"                        handed the guest over by a switchover to a successor that\n"
	"                        never connected back, resumes. With a witness the key is\n"
	"                        still won first.\n";

/* With a witness the standby first has to win the key (once the old
 * primary's lease ran out): wait for the outcome, at most 30 s. */
static int wait_for_key(const char *control)
{
	for (int i = 0; i < 600; i++) {
		json_object *st;
		const char *state;
		int r;

		usleep(50000);
		r = cli_status_json(control, 5000, &st);
		if (r == -EPROTO)
			continue;        /* not a status yet: asked again */
		if (r < 0) {
			fprintf(stderr, "understudy takeover: %s: %s\n", control, strerror(-r));
			return 1;
		}
		state = proto_json_str(st, "state");
		if (!strcmp(state, "unprotected")) {
			printf("ok took over: won the witness key\n");
			json_object_put(st);
			return 0;
		}
		if (state[0] && strcmp(state, "contending")) {
			fprintf(stderr, "no takeover: the VM is %s (%s)\n", state,
				proto_json_str(st, "reason")[0] ? proto_json_str(st, "reason") :
				"no reason given");
			json_object_put(st);
			return 1;
		}
		json_object_put(st);
	}
	fprintf(stderr, "understudy takeover: still contending for the witness key after 30 s\n");
	return 1;
}

int cli_cmd_takeover(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "control", required_argument, NULL, 'c' },
		{ "fenced-by-operator", no_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct cli_config cf CLI_CONFIG_AUTO = { 0 };
	const char *control = NULL;
	bool by_operator = false;
	char *reply = NULL;
	int opt, r;

	if (cli_config_apply(&cf, &argc, &argv, "h", longopts))
		return 2;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'c':
			control = optarg;
			if (cli_check_control("--control", optarg))
				return cli_config_blame(&cf, argv, optind);
			break;
		case 'o': by_operator = true; break;
		case 'h': fputs(takeover_help, stdout); return 0;
		default: fputs(takeover_help, stderr); return 2;
		}
	}
	if (!control || optind < argc) {
		fputs(takeover_help, stderr);
		return 2;
	}
	/* The agent answers once its fence command ran (--fence-timeout-ms). */
	r = control_request(control, by_operator ? "takeover fenced-by-operator" : "takeover",
			    TAKEOVER_REPLY_MS, &reply);
	if (r < 0) {
		fprintf(stderr, "understudy takeover: %s: %s\n", control, strerror(-r));
		return 1;
	}
	r = strncmp(reply, "ok", 2) ? 1 : 0;
	fputs(reply, r ? stderr : stdout);
	if (!r && strstr(reply, "contending"))
		r = wait_for_key(control);
	free(reply);
	return r;
}
