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

#include <json-c/json.h>

#include "cli/cli.h"
#include "net/control.h"
#include "proto/proto.h"

static const char switchover_help[] =
	"usage: understudy switchover --control PATH|--name NAME --listen HOST[:PORT] [--index N]\n"
	"                             [--port-base BASE] [--timeout-ms N] [--no-wait] [--json]\n"
	"Swaps the roles of a protected pair with nothing lost: the primary at PATH stops at\n"
	"an epoch boundary, its secondary resumes the guest from that epoch and protects it\n"
	"onto HOST:PORT, where this host's VM waits as the new standby (the same control\n"
	"socket then answers as the secondary). Only pages written after the switch are\n"
	"sent. Run it again on the other side's control socket to swap back.\n"
	"  --listen HOST:PORT  where this host's standby listens for the new primary (port\n"
	"                      1..65535; with TLS, both certificates need serverAuth and\n"
	"                      clientAuth)\n"
	"  --index N, --port-base BASE  a --listen HOST without :PORT listens at port\n"
	"                      BASE (default 7800) + N, the VM's number on its hosts\n"
	"  --timeout-ms N      give up waiting for the outcome after N ms (default 30000)\n"
	"  --no-wait           return once the roles are swapped, before the new primary is\n"
	"                      protected (by default it waits until this host's standby\n"
	"                      holds an epoch of the new primary)\n"
	"  --json              print the new standby's status as JSON at the end\n"
	"Exit status: 0 switched over and the new primary is protected (with --no-wait: only\n"
	"switched over), 1 refused or failed (the primary runs on), 2 bad usage, 3 switched\n"
	"over but the new primary is not protected within --timeout-ms (it runs the guest\n"
	"unprotected; this host's standby waits for it at HOST:PORT).\n"
	"With a witness the key moves with the role (the new primary wins it before the\n"
	"guest resumes there).\n";

int cli_switchover_outcome(const char *control, unsigned timeout_ms, char **status)
{
	struct timespec t0, t;

	*status = NULL;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		char *st = NULL;
		struct proto_json_reader js = { 0 };
		const char *role = "", *state = "";
		/* not a status (e.g. the socket between two owners): asked again */
		bool parsed = control_request(control, "status json", 2000, &st) == 0 &&
			      proto_json_read(&js, st) == 0;

		if (parsed) {
			role = proto_json_need_str(&js, "role");
			state = proto_json_need_str(&js, "state");
		}
		if (parsed && js.why[0]) {
			free(st);
			if (asprintf(status, "a bad status: %s\n", js.why) < 0)
				*status = NULL;
			proto_json_reader_fini(&js);
			return -EPROTO;
		}
		if (parsed && !strcmp(role, "secondary") && !strcmp(state, "standby")) {
			proto_json_reader_fini(&js);
			*status = st;
			return 0;
		}
		/* "switching" and "migrated" are the hand-over in progress: the old
		 * primary says "migrated" between handing the guest over and
		 * waiting as the new primary's standby (seconds under a slow host). */
		if (parsed && !strcmp(role, "primary") && strcmp(state, "protected") &&
		    strcmp(state, "switching") && strcmp(state, "migrated")) {
			proto_json_reader_fini(&js);
			*status = st;
			return 1;
		}
		proto_json_reader_fini(&js);
		free(st);
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > timeout_ms)
			return -ETIMEDOUT;
		usleep(20000);
	}
}

/* Milliseconds since t0. */
static unsigned long ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (unsigned long)((t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000);
}

/* What the switch left in the new standby's status. */
struct switched {
	uint64_t epoch;          /* the switch epoch */
	double downtime_ms;
};

/* The switch's epoch and downtime from a standby's status text: 0, or
 * -EPROTO with what is wrong in why. */
static int read_switched(const char *status, struct switched *w, char *why, size_t len)
{
	struct proto_json_reader js;

	if (proto_json_read(&js, status) == 0) {
		w->epoch = proto_json_need_u64(&js, "switch_epoch");
		w->downtime_ms = proto_json_need_num(&js, "switch_downtime_ms");
	}
	snprintf(why, len, "%s", js.why);
	proto_json_reader_fini(&js);
	return why[0] ? -EPROTO : 0;
}

/* The new primary is protected once this host's standby holds an epoch of
 * it, one after the switch epoch (it was acknowledged as it was applied).
 * 0 with the standby's status in *status; -ETIMEDOUT (*status: the last
 * one seen, or NULL); -EPROTO when a standby's status lacks its epochs
 * (*status: it, and why says what is wrong). */
static int wait_protected(const char *control, unsigned long left_ms, char **status, char *why,
			  size_t len)
{
	struct timespec t0;

	*status = NULL;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		char *st = NULL;
		struct proto_json_reader js = { 0 };
		bool parsed = control_request(control, "status json", 2000, &st) == 0 &&
			      proto_json_read(&js, st) == 0;
		bool standby = false;
		uint64_t epoch = 0, switch_epoch = 0;

		if (parsed) {
			standby = !strcmp(proto_json_need_str(&js, "role"), "secondary") &&
				  !strcmp(proto_json_need_str(&js, "state"), "standby");
			if (standby) {
				epoch = proto_json_need_u64(&js, "epoch");
				switch_epoch = proto_json_need_u64(&js, "switch_epoch");
			}
		}
		snprintf(why, len, "%s", parsed ? js.why : "");
		proto_json_reader_fini(&js);
		if (parsed) {    /* a status: kept as the last one seen */
			free(*status);
			*status = st;
		} else {
			free(st);
		}
		if (why[0])
			return -EPROTO;
		if (standby && epoch > switch_epoch)
			return 0;
		if (ms_since(&t0) > left_ms)
			return -ETIMEDOUT;
		usleep(20000);
	}
}

static int wait_outcome(const char *control, unsigned timeout_ms, bool wait, bool json)
{
	struct timespec t0;
	unsigned long spent;
	struct switched w = { 0 };
	char *st, *last, why[sizeof(((struct proto_json_reader *)0)->why)];
	int r;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	r = cli_switchover_outcome(control, timeout_ms, &st);
	if (r == -ETIMEDOUT) {
		fprintf(stderr, "understudy switchover: no outcome within %u ms\n", timeout_ms);
		return 1;
	}
	if (r == -EPROTO) {
		fprintf(stderr, "understudy switchover: %s: no outcome known: %s", control,
			st ? st : "a bad status\n");
		free(st);
		return 1;
	}
	if (r == 1) {
		fprintf(stderr, "understudy switchover: no switch: the VM is now %s", st);
		free(st);
		return 1;
	}
	/* the standby's status names the switch: a status without it is no outcome */
	if (read_switched(st, &w, why, sizeof(why)) < 0) {
		fprintf(stderr, "understudy switchover: %s: this host's VM is a standby, but its "
			"status says nothing of the switch: %s\n", control, why);
		free(st);
		return 1;
	}
	spent = ms_since(&t0);
	r = wait ? wait_protected(control, spent < timeout_ms ? timeout_ms - spent : 0, &last, why,
				  sizeof(why)) : 0;
	if (r == -EPROTO) {
		fprintf(stderr, "understudy switchover: switched over at epoch %llu, but whether the "
			"new primary is protected is not known: this host's standby answers a bad "
			"status: %s\n", (unsigned long long)w.epoch, why);
		free(last);
		free(st);
		return 1;
	}
	if (r < 0) {
		fprintf(stderr, "understudy switchover: switched over at epoch %llu, but the new "
			"primary is not protected within %u ms: it runs the guest UNPROTECTED; this "
			"host's standby still waits for it (status --control %s)\n",
			(unsigned long long)w.epoch, timeout_ms, control);
		if (json)
			fputs(last ? last : st, stdout);
		free(last);
		free(st);
		return 3;
	}
	if (wait) {
		free(st);
		st = last;
	}
	if (json) {
		fputs(st, stdout);
	} else {
		printf("ok switched over at epoch %llu: downtime %.3f ms; this host now keeps the "
		       "standby%s\n", (unsigned long long)w.epoch, w.downtime_ms,
		       wait ? " and the new primary is protected" :
		       " (--no-wait: the new primary may not be protected yet)");
	}
	free(st);
	return 0;
}

int cli_cmd_switchover(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "control", required_argument, NULL, 'c' },
		CLI_NAME_LONG,
		{ "listen", required_argument, NULL, 'l' },
		{ "timeout-ms", required_argument, NULL, 't' },
		{ "json", no_argument, NULL, 'j' },
		{ "no-wait", no_argument, NULL, 'n' },
		CLI_PORTS_LONG,
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *control = NULL, *listen = NULL;
	unsigned timeout_ms = 30000;
	bool json = false, wait = true;
	struct cli_config cf CLI_CONFIG_AUTO = { 0 };
	struct cli_name nm = { 0 };
	struct cli_ports ports;
	char req[256], *reply = NULL, *end;
	int opt, r;

	cli_ports_init(&ports);
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
		case 'l': listen = optarg; break;
		case 't':
			timeout_ms = (unsigned)strtoul(optarg, &end, 10);
			if (*end || !timeout_ms) {
				fprintf(stderr, "understudy switchover: bad --timeout-ms '%s'\n", optarg);
				return 2;
			}
			break;
		case 'j': json = true; break;
		case 'n': wait = false; break;
		case 1410: case 1411:
			if (cli_parse_ports_option(&ports, opt, optarg))
				return cli_config_blame(&cf, argv, optind);
			break;
		case 'h': fputs(switchover_help, stdout); return 0;
		default: fputs(switchover_help, stderr); return 2;
		}
	}
	control = cli_name_client_control(&nm, control);
	if (!control || !listen || optind < argc) {
		fputs(switchover_help, stderr);
		return 2;
	}
	if (cli_check_host_maybe_port("--listen", listen) || cli_ports_resolve(&ports, "--listen", &listen))
		return 2;
	if (strlen(listen) > 127 || strchr(listen, ' ')) {
		fprintf(stderr, "understudy switchover: --listen '%.40s': %s\n", listen,
			strchr(listen, ' ') ? "no spaces" : "longer than 127 bytes");
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
	return wait_outcome(control, timeout_ms, wait, json);
}
