/* understudy: one binary, subcommands. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
} commands[] = {
	{ "run", cli_cmd_run, "run a VM, unprotected" },
	{ "primary", cli_cmd_primary, "run a VM protected by a secondary" },
	{ "secondary", cli_cmd_secondary, "keep a hot standby; take over on failure" },
	{ "protect", cli_cmd_protect, "attach a secondary to a running VM (run, restore, taken over)" },
	{ "migrate", cli_cmd_migrate, "move a running VM to a waiting secondary" },
	{ "switchover", cli_cmd_switchover, "swap the roles of a protected pair (no resync)" },
	{ "takeover", cli_cmd_takeover, "tell a standby to resume the guest now (a fenced primary)" },
	{ "status", cli_cmd_status, "epochs, dirty rate, pause times, lag of a running agent" },
	{ "snapshot", cli_cmd_snapshot, "ask a running VM to write a snapshot file" },
	{ "restore", cli_cmd_restore, "rebuild a VM from snapshot files and run it" },
	{ "drill", cli_cmd_drill, "failover drill on a protected pair (test-failover), history of reports" },
	{ "list", cli_cmd_list, "the VMs of this host: name, role, state, epoch, lag, peer" },
};

static void usage(FILE *f)
{
	fprintf(f, "usage: understudy COMMAND [options] [--config FILE]   (understudy help COMMAND)\n"
		"       understudy --version\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\nbuilt-in guests:\n");
	cli_print_guests(f);
	fprintf(f, "\n--config FILE: options from FILE, one 'key = value' per line, the keys named like\n"
		"the long options (listen = 127.0.0.1:7000, insecure = true); the command line\n"
		"wins. By convention /etc/understudy/NAME.conf: NAME is then the VM's name (--name),\n"
		"its control socket /run/understudy/NAME.sock (root; else in $XDG_RUNTIME_DIR/understudy;\n"
		"$UNDERSTUDY_RUN_DIR). See understudy(8).\n");
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	/* --version anywhere before "--" answers at once, for every command. */
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
		if (!strcmp(argv[i], "--version")) {
			printf("understudy %s\n", UNDERSTUDY_VERSION);
			return 0;
		}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
	    (!strcmp(argv[1], "help") && argc == 2)) {
		usage(stdout);
		return 0;
	}
	/* "help COMMAND [KIND]" is "COMMAND [KIND] --help": one text per
	 * command (drill: per kind), kept in its file. */
	if (!strcmp(argv[1], "help")) {
		char *help_argv[] = { argv[2], argc > 3 ? argv[3] : "--help", "--help", NULL };

		if (argc > 4) {
			fprintf(stderr, "understudy help: one COMMAND (and its KIND) at a time\n");
			return 2;
		}
		for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
			if (!strcmp(argv[2], commands[i].name))
				return commands[i].fn(argc > 3 ? 3 : 2, help_argv);
		fprintf(stderr, "understudy: unknown command '%s'\n", argv[2]);
		usage(stderr);
		return 2;
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(argv[1], commands[i].name))
			return commands[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "understudy: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
