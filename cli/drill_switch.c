/* understudy drill switchover: a planned switchover (and back) as a drill,
 * with a report: the downtime of each leg, the bytes the new primary sent
 * until the standby held its first epoch (a resync would be the guest's
 * RAM), and that the standby keeps taking epochs afterwards. The back leg
 * is asked of the new standby ("switchback"), which asks its primary over
 * the link, so the whole drill runs from the first primary's host. */
#include <errno.h>
#include <getopt.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "net/control.h"
#include "proto/proto.h"

static const char help[] =
	"usage: understudy drill switchover --control PRIMARY_CONTROL|--name NAME --listen HOST:PORT [--back]\n"
	"                                   [--timeout-ms N] [--json] [--report-dir DIR]\n"
	"A planned switchover of the protected primary at PRIMARY_CONTROL (its VM becomes the\n"
	"standby at HOST:PORT), then, with --back, the switch back. PASS when each leg\n"
	"completes within --timeout-ms (default 30000) and the standby takes the new\n"
	"primary's epochs. Exit status: 0 PASS, 1 FAIL, 2 bad usage.\n";

struct leg {
	double downtime_ms;
	double bytes;
	unsigned long long epoch;
	char why[200];           /* what failed, when it is more than a fixed text */
};

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* The agent's status parsed into js: false (js->why saying why) when there
 * is no answer or it is not one JSON object. js is to be finished either way. */
static bool status(const char *control, struct proto_json_reader *js)
{
	char *reply = NULL;
	int r = control_request(control, "status json", 2000, &reply);

	if (r == 0) {
		r = proto_json_read(js, reply);
	} else {
		js->o = NULL;
		snprintf(js->why, sizeof(js->why), "%s", strerror(-r));
	}
	free(reply);
	return r == 0;
}

/* Polls until want(status) or the deadline: 1 with the status in *out, 0
 * at the deadline, -EPROTO when a status lacks a field want reads (out->why
 * says which; out is to be finished). An answer that is no status is asked
 * again. */
static int wait_for(const char *control, double deadline,
		    bool (*want)(struct proto_json_reader *, void *), void *arg,
		    struct proto_json_reader *out)
{
	for (;;) {
		if (status(control, out)) {
			bool yes = want(out, arg);

			if (out->why[0])
				return -EPROTO;
			if (yes)
				return 1;
		}
		proto_json_reader_fini(out);
		if (now_s() > deadline)
			return 0;
		usleep(10000);
	}
}

static bool is_standby(struct proto_json_reader *js, void *arg)
{
	(void)arg;
	return !strcmp(proto_json_need_str(js, "role"), "secondary") &&
	       !strcmp(proto_json_need_str(js, "state"), "standby");
}

static bool applied_past(struct proto_json_reader *js, void *arg)
{
	return is_standby(js, NULL) && proto_json_need_num(js, "epoch") > *(double *)arg;
}

static bool resumed_protected(struct proto_json_reader *js, void *arg)
{
	double resumed;

	(void)arg;
	if (strcmp(proto_json_need_str(js, "role"), "primary") ||
	    strcmp(proto_json_need_str(js, "state"), "protected"))
		return false;
	resumed = proto_json_need_num(js, "resumed_epoch");
	return resumed > 0 && proto_json_need_num(js, "acked") > resumed;
}

/* A leg's failure with what was wrong in a status (kept in l). */
static const char *bad_status(struct leg *l, const char *what, struct proto_json_reader *js)
{
	snprintf(l->why, sizeof(l->why), "%s: a bad status: %s", what, js->why);
	proto_json_reader_fini(js);
	return l->why;
}

static void say(bool json, const char *event, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void say(bool json, const char *event, const char *fmt, ...)
{
	char text[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	if (json) {
		json_object *o = json_object_new_object();

		json_object_object_add(o, "kind", json_object_new_string("switchover"));
		json_object_object_add(o, "event", json_object_new_string(event));
		json_object_object_add(o, "text", json_object_new_string(text));
		printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
		json_object_put(o);
	} else {
		printf("%s\n", text);
	}
	fflush(stdout);
}

/* The first leg: this primary hands over and becomes the standby. */
static const char *leg_away(const char *control, const char *listen, double deadline,
			    struct leg *l, bool json)
{
	char req[256], *reply = NULL;
	struct proto_json_reader js;
	double epoch, left_s;

	snprintf(req, sizeof(req), "switchover listen=%s", listen);
	if (control_request(control, req, 10000, &reply) < 0 || strncmp(reply, "ok", 2)) {
		free(reply);
		return "the primary refused the switchover";
	}
	free(reply);
	left_s = deadline - now_s();
	switch (cli_switchover_outcome(control, left_s > 0.001 ? (unsigned)(left_s * 1000) : 1, &reply)) {
	case 0:
		if (proto_json_read(&js, reply) == 0) {
			l->downtime_ms = proto_json_need_num(&js, "switch_downtime_ms");
			l->epoch = proto_json_need_u64(&js, "switch_epoch");
		}
		free(reply);
		if (js.why[0])
			return bad_status(l, "the new standby", &js);
		proto_json_reader_fini(&js);
		break;
	case 1:
		free(reply);
		return "no switch: the primary went on as a primary";
	case -EPROTO:
		snprintf(l->why, sizeof(l->why), "no outcome known: %.*s", reply ?
			 (int)strcspn(reply, "\n") : 12, reply ? reply : "a bad status");
		free(reply);
		return l->why;
	default:
		return "the old primary did not become the standby in time";
	}
	epoch = l->epoch;
	say(json, "switched", "switched over at epoch %llu: downtime %.3f ms; this VM is the "
	    "standby", l->epoch, l->downtime_ms);
	switch (wait_for(control, deadline, applied_past, &epoch, &js)) {
	case 1:
		break;
	case 0:
		return "the standby took no epoch of the new primary in time";
	default:
		return bad_status(l, "the standby", &js);
	}
	l->bytes = proto_json_need_num(&js, "bytes_received");
	if (js.why[0])
		return bad_status(l, "the standby", &js);
	proto_json_reader_fini(&js);
	say(json, "protected", "the new primary protected the guest again after %.0f KiB",
	    l->bytes / 1024);
	return NULL;
}

/* The way back: the standby asks its primary for the guest. */
static const char *leg_back(const char *control, double deadline, struct leg *l, bool json)
{
	char *reply = NULL;
	struct proto_json_reader js;

	if (control_request(control, "switchback", 5000, &reply) < 0 || strncmp(reply, "ok", 2)) {
		free(reply);
		return "the standby could not ask for the guest back";
	}
	free(reply);
	switch (wait_for(control, deadline, resumed_protected, NULL, &js)) {
	case 1:
		break;
	case 0:
		return "the guest did not come back protected in time";
	default:
		return bad_status(l, "this host's VM", &js);
	}
	l->downtime_ms = proto_json_need_num(&js, "switch_in_ms");
	l->epoch = proto_json_need_u64(&js, "resumed_epoch");
	l->bytes = proto_json_need_num(&js, "bytes_sent");
	if (js.why[0])
		return bad_status(l, "this host's VM", &js);
	proto_json_reader_fini(&js);
	say(json, "back", "switched back at epoch %llu: downtime about %.3f ms; protected again "
	    "after %.0f KiB", l->epoch, l->downtime_ms, l->bytes / 1024);
	return NULL;
}

static json_object *leg_json(const struct leg *l)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "epoch", json_object_new_int64((int64_t)l->epoch));
	json_object_object_add(o, "downtime_ms", json_object_new_double(l->downtime_ms));
	json_object_object_add(o, "bytes_to_protect_again", json_object_new_double(l->bytes));
	return o;
}

static void stamp(char *out, size_t len)
{
	time_t t = time(NULL);
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int cli_drill_switchover(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "control", required_argument, NULL, 'c' },
		CLI_NAME_LONG,
		{ "listen", required_argument, NULL, 'l' },
		{ "back", no_argument, NULL, 'b' },
		{ "timeout-ms", required_argument, NULL, 't' },
		{ "json", no_argument, NULL, 'j' },
		{ "report-dir", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *control = NULL, *listen = NULL, *dir = NULL, *why;
	unsigned timeout_ms = 30000;
	bool back = false, json = false;
	struct leg away = { 0 }, home = { 0 };
	char start[32], end[32], *e;
	struct proto_json_reader st;
	struct cli_name nm = { 0 };
	json_object *rep;
	int opt;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'c': control = optarg; break;
		case CLI_NAME_OPTION:
			if (cli_name_set(&nm, optarg))
				return 2;
			break;
		case 'l':
			listen = optarg;
			if (cli_check_host_port("--listen", optarg))
				return 2;
			break;
		case 'b': back = true; break;
		case 't':
			timeout_ms = (unsigned)strtoul(optarg, &e, 10);
			if (*e || !timeout_ms) {
				fprintf(stderr, "understudy drill switchover: bad --timeout-ms '%s'\n", optarg);
				return 2;
			}
			break;
		case 'j': json = true; break;
		case 'r': dir = optarg; break;
		case 'h': fputs(help, stdout); return 0;
		default: fputs(help, stderr); return 2;
		}
	}
	control = cli_name_client_control(&nm, control);
	if (!control || !listen || optind < argc || strchr(listen, ' ') || strlen(listen) > 127) {
		fputs(help, stderr);
		return 2;
	}
	stamp(start, sizeof(start));
	if (!status(control, &st)) {
		snprintf(away.why, sizeof(away.why), "no status at --control: %s", st.why);
		why = away.why;
	} else if (strcmp(proto_json_need_str(&st, "role"), "primary") ||
		   strcmp(proto_json_need_str(&st, "state"), "protected")) {
		why = st.why[0] ? bad_status(&away, "--control", &st) :
		      "not a protected primary at --control";
	} else {
		why = leg_away(control, listen, now_s() + timeout_ms / 1e3, &away, json);
	}
	proto_json_reader_fini(&st);
	if (!why && back)
		why = leg_back(control, now_s() + timeout_ms / 1e3, &home, json);
	stamp(end, sizeof(end));
	rep = json_object_new_object();
	json_object_object_add(rep, "kind", json_object_new_string("switchover"));
	json_object_object_add(rep, "start", json_object_new_string(start));
	json_object_object_add(rep, "end", json_object_new_string(end));
	json_object_object_add(rep, "control", json_object_new_string(control));
	json_object_object_add(rep, "rto_ms", json_object_new_double(away.downtime_ms));
	json_object_object_add(rep, "away", leg_json(&away));
	if (back)
		json_object_object_add(rep, "back", leg_json(&home));
	json_object_object_add(rep, "verdict", json_object_new_string(why ? "FAIL" : "PASS"));
	json_object_object_add(rep, "reason", json_object_new_string(why ? why :
				       back ? "switched over and back, protected after each" :
				       "switched over, protected again"));
	if (json)
		printf("%s\n", json_object_to_json_string_ext(rep, JSON_C_TO_STRING_PLAIN));
	else
		printf("drill switchover: %s: %s\n", why ? "FAIL" : "PASS", proto_json_str(rep, "reason"));
	if (dir)
		(void)cli_drill_keep_report(dir, rep);
	json_object_put(rep);
	return why ? 1 : 0;
}
