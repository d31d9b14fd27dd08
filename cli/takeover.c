/* understudy takeover: tells a standby (a secondary started with --takeover
 * manual, or any secondary) through its control socket to resume the guest
 * now. Whoever asks has made sure the primary is gone (fenced). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "net/control.h"

static const char takeover_help[] =
	"usage: understudy takeover --control PATH\n"
	"Makes the secondary at PATH resume the guest from its last complete checkpoint.\n"
	"Refused (exit 1) when it holds no complete checkpoint or is not a standby.\n"
	"The primary must be fenced first: a live primary is told to stop, but one that\n"
	"cannot be reached (partition) would run on beside the new copy.\n";

int cli_cmd_takeover(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "control", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *control = NULL;
	char *reply = NULL;
	int opt, r;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'c': control = optarg; break;
		case 'h': fputs(takeover_help, stdout); return 0;
		default: fputs(takeover_help, stderr); return 2;
		}
	}
	if (!control || optind < argc) {
		fputs(takeover_help, stderr);
		return 2;
	}
	r = control_request(control, "takeover", 10000, &reply);
	if (r < 0) {
		fprintf(stderr, "understudy takeover: %s: %s\n", control, strerror(-r));
		return 1;
	}
	r = strncmp(reply, "ok", 2) ? 1 : 0;
	fputs(reply, r ? stderr : stdout);
	free(reply);
	return r;
}
