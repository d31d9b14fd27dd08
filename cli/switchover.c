/* understudy switchover: a planned role swap of a protected pair. The
 * primary at --control pauses the guest for a final epoch, its secondary
 * takes the guest over at once and protects it back onto this host, where
 * the VM that ran waits at --listen as the new standby. Both copies hold
 * the switch epoch, so only what changes after it is sent (no resync). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "net/control.h"

static const char switchover_help[] =
	"usage: understudy switchover --control PATH --listen HOST:PORT [--timeout-ms N] [--json]\n"
	"Swaps the roles of a protected pair with nothing lost: the primary at PATH stops at\n"
	"an epoch boundary, its secondary resumes the guest from that epoch and protects it\n"
	"onto HOST:PORT, where this host's VM waits as the new standby (the same control\n"
	"socket then answers as the secondary). Only pages written after the switch are\n"
	"sent. Run it again on the other side's control socket to swap back.\n"
	"  --listen HOST:PORT  where this host's standby listens for the new primary\n"
	"                      (with TLS, both certificates need serverAuth and clientAuth)\n"
	"  --timeout-ms N      give up waiting for the outcome after N ms (default 30000)\n"
	"  --json              print the new standby's status as JSON at the end\n"
	"Exit status: 0 switched over, 1 refused or failed (the primary runs on), 2 bad usage.\n"
	"With a witness the key moves with the role (the new primary wins it before the\n"
	"guest resumes there).\n";

static bool field_is(const char *json, const char *key, const char *want)
{
	char pat[64];

	snprintf(pat, sizeof(pat), "\"%s\":\"%s\"", key, want);
	return strstr(json, pat) != NULL;
}

int cli_switchover_outcome(const char *control, unsigned timeout_ms, char **status)
{
	struct timespec t0, t;

	*status = NULL;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		char *st = NULL;
		int r = control_request(control, "status json", 2000, &st);

		if (r == 0 && field_is(st, "role", "secondary") && field_is(st, "state", "standby")) {
			*status = st;
			return 0;
		}
		if (r == 0 && field_is(st, "role", "primary") && !field_is(st, "state", "protected") &&
		    !field_is(st, "state", "switching")) {
			*status = st;
			return 1;
		}
		free(st);
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > timeout_ms)
			return -ETIMEDOUT;
		usleep(20000);
	}
}

static int wait_outcome(const char *control, unsigned timeout_ms, bool json)
{
	char *st;
	int r = cli_switchover_outcome(control, timeout_ms, &st);

	if (r == -ETIMEDOUT) {
		fprintf(stderr, "understudy switchover: no outcome within %u ms\n", timeout_ms);
		return 1;
	}
	if (r == 1) {
		fprintf(stderr, "understudy switchover: no switch: the VM is now %s", st);
		free(st);
		return 1;
	}
	if (json) {
		fputs(st, stdout);
	} else {
		const char *d = strstr(st, "\"switch_downtime_ms\":");
		const char *e = strstr(st, "\"switch_epoch\":");

		printf("ok switched over at epoch %llu: downtime %.3f ms; this host now keeps the "
		       "standby\n", e ? strtoull(e + 15, NULL, 10) : 0ull, d ? strtod(d + 21, NULL) : 0.0);
	}
	free(st);
	return 0;
}

int cli_cmd_switchover(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "control", required_argument, NULL, 'c' },
		{ "listen", required_argument, NULL, 'l' },
		{ "timeout-ms", required_argument, NULL, 't' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *control = NULL, *listen = NULL;
	unsigned timeout_ms = 30000;
	bool json = false;
	struct cli_config cf CLI_CONFIG_AUTO = { 0 };
	char req[256], *reply = NULL, *end;
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
		case 'l': listen = optarg; break;
		case 't':
			timeout_ms = (unsigned)strtoul(optarg, &end, 10);
			if (*end || !timeout_ms) {
				fprintf(stderr, "understudy switchover: bad --timeout-ms '%s'\n", optarg);
				return 2;
			}
			break;
		case 'j': json = true; break;
		case 'h': fputs(switchover_help, stdout); return 0;
		default: fputs(switchover_help, stderr); return 2;
		}
	}
	if (!control || !listen || optind < argc || strchr(listen, ' ') ||
	    strlen(listen) > 127) {
		fputs(switchover_help, stderr);
		return 2;
	}
	snprintf(req, sizeof(req), "switchover listen=%s", listen);
	r = control_request(control, req, 10000, &reply);
	if (r < 0) {
		fprintf(stderr, "understudy switchover: %s: %s\n", control, strerror(-r));
		return 1;
	}
	if (strncmp(reply, "ok", 2)) {
		fprintf(stderr, "understudy switchover: %s", reply);
		free(reply);
		return 1;
	}
	free(reply);
	return wait_outcome(control, timeout_ms, json);
}
