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
	"usage: understudy takeover --control PATH|--name NAME [--fenced-by-operator]\n"
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
	char last_bad[sizeof(((struct proto_json_reader *)0)->why)] = "";

	for (int i = 0; i < 600; i++) {
		struct proto_json_reader st;
		const char *state;
		int r;

		usleep(50000);
		r = cli_status_read(control, 5000, &st);
		if (r == -EPROTO) {
			/* not a status yet: asked again */
			snprintf(last_bad, sizeof(last_bad), "%s", st.why);
			proto_json_reader_fini(&st);
			continue;
		}
		if (r < 0) {
			fprintf(stderr, "understudy takeover: %s: %s\n", control, strerror(-r));
			proto_json_reader_fini(&st);
			return 1;
		}
		last_bad[0] = 0;
		state = proto_json_need_str(&st, "state");
		if (st.why[0]) {
			fprintf(stderr, "understudy takeover: %s: a bad status: %s\n", control, st.why);
			proto_json_reader_fini(&st);
			return 1;
		}
		if (!strcmp(state, "unprotected")) {
			printf("ok took over: won the witness key\n");
			proto_json_reader_fini(&st);
			return 0;
		}
		if (strcmp(state, "contending")) {
			/* a reason only when an agent's status answers */
			const char *reason = proto_json_str(st.o, "reason");

			fprintf(stderr, "no takeover: the VM is %s (%s)\n", state,
				reason[0] ? reason : "no reason given");
			proto_json_reader_fini(&st);
			return 1;
		}
		proto_json_reader_fini(&st);
	}
	fprintf(stderr, "understudy takeover: still contending for the witness key after 30 s%s%s\n",
		last_bad[0] ? "; the last status answer was " : "", last_bad);
	return 1;
}

int cli_cmd_takeover(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "control", required_argument, NULL, 'c' },
		CLI_NAME_LONG,
		{ "fenced-by-operator", no_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct cli_config cf CLI_CONFIG_AUTO = { 0 };
	struct cli_name nm = { 0 };
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
		case CLI_NAME_OPTION:
			if (cli_name_set(&nm, optarg))
				return cli_config_blame(&cf, argv, optind);
			break;
		case 'o': by_operator = true; break;
		case 'h': fputs(takeover_help, stdout); return 0;
		default: fputs(takeover_help, stderr); return 2;
		}
	}
	control = cli_name_client_control(&nm, control);
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
