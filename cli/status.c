/* understudy status: ask a running agent through its control socket. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "net/control.h"

int cli_cmd_status(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "control", required_argument, NULL, 'c' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct cli_config cf CLI_CONFIG_AUTO = { 0 };
	const char *path = NULL;
	char *reply = NULL;
	int opt, json = 0, n;

	if (cli_config_apply(&cf, &argc, &argv, "h", longopts))
		return 2;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'c': path = optarg; break;
		case 'j': json = 1; break;
		case 'h':
			puts("usage: understudy status --control PATH [--json]\n"
			     "Role, epoch, last acknowledged epoch, pause p50/p99, dirty pages per epoch,\n"
			     "bytes sent, replication lag, time since the last heartbeat.");
			return 0;
		default: return 2;
		}
	}
	if (!path || optind < argc) {
		fprintf(stderr, "understudy status: --control PATH is required\n");
		return 2;
	}
	n = control_request(path, json ? "status json" : "status", 5000, &reply);
	if (n < 0) {
		fprintf(stderr, "understudy status: %s: %s\n", path, strerror(-n));
		return 1;
	}
	fputs(reply, stdout);
	free(reply);
	return 0;
}
