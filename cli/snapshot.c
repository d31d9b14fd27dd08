/* understudy snapshot: asks a running VM, through its control socket, to
 * write a snapshot file (host/serve.c answers). */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "net/control.h"

static const char snapshot_help[] =
	"usage: understudy snapshot --control PATH|--name NAME --out FILE [--incremental | --with-disk]\n"
	"Asks the VM running with --control PATH to write a snapshot to FILE: a full\n"
	"one, or with --incremental the pages changed since its previous snapshot.\n"
	"A snapshot holds the disk's device state, not its contents; with --with-disk a\n"
	"full snapshot also carries the disk's non-zero blocks, read in the same pause\n"
	"(the pause grows with the data on the disk), and restore writes them to its --disk.\n"
	"FILE is a new name or a regular file (replaced); anything else is refused.\n"
	"Restore with: understudy restore FULL [DIFF...]\n";

int cli_cmd_snapshot(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "control", required_argument, NULL, 'c' },
		CLI_NAME_LONG,
		{ "out", required_argument, NULL, 'o' },
		{ "incremental", no_argument, NULL, 'i' },
		{ "with-disk", no_argument, NULL, 'D' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct cli_config cf CLI_CONFIG_AUTO = { 0 };
	struct cli_name nm = { 0 };
	const char *control = NULL, *out = NULL;
	char abs[PATH_MAX], req[PATH_MAX + 64], *reply = NULL;
	bool incremental = false, with_disk = false;
	struct stat st;
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
		case 'o': out = optarg; break;
		case 'i': incremental = true; break;
		case 'D': with_disk = true; break;
		case 'h': fputs(snapshot_help, stdout); return 0;
		default: fputs(snapshot_help, stderr); return 2;
		}
	}
	control = cli_name_client_control(&nm, control);
	if (!control || !out || optind < argc) {
		fputs(snapshot_help, stderr);
		return 2;
	}
	if (incremental && with_disk) {
		fprintf(stderr, "understudy snapshot: --with-disk takes a full snapshot: not with "
			"--incremental\n");
		return 2;
	}
	/* A new name or a regular file, which the snapshot replaces: never a
	 * device, a FIFO, a directory or a link (the VM checks again). */
	if (lstat(out, &st) == 0 && !S_ISREG(st.st_mode)) {
		fprintf(stderr, "understudy snapshot: --out %s: %s: give a new name or a regular file "
			"to replace\n", out, S_ISLNK(st.st_mode) ? "a symbolic link" : "not a regular file");
		return 2;
	}
	/* The VM resolves the name in its own working directory: send it absolute. */
	if (out[0] != '/') {
		char cwd[PATH_MAX];

		if (!getcwd(cwd, sizeof(cwd)) ||
		    snprintf(abs, sizeof(abs), "%s/%s", cwd, out) >= (int)sizeof(abs)) {
			fprintf(stderr, "understudy snapshot: path too long\n");
			return 2;
		}
		out = abs;
	}
	snprintf(req, sizeof(req), "snapshot %s %s", incremental ? "incremental" :
		 with_disk ? "full+disk" : "full", out);
	r = control_request(control, req, 600000, &reply);
	if (r < 0) {
		fprintf(stderr, "understudy snapshot: %s: %s\n", control, strerror(-r));
		return 1;
	}
	fputs(reply, strncmp(reply, "ok", 2) ? stderr : stdout);
	r = strncmp(reply, "ok", 2) ? strncmp(reply, "error usage: ", 13) ? 1 : 2 : 0;
	free(reply);
	return r;
}
