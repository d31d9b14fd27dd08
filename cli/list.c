/* understudy list: the VMs of this host, one per control socket in the run
 * directory (cli/name.c), each asked for its `status json`. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "cli/cli.h"

#define LIST_TIMEOUT_MS 2000

static const char list_help[] =
	"usage: understudy list [--dir DIR] [--json]\n"
	"Every VM of this host: the control sockets NAME.sock in DIR (default\n"
	"$UNDERSTUDY_RUN_DIR, else /run/understudy as root, else $XDG_RUNTIME_DIR/understudy\n"
	"or /tmp/understudy-UID), each asked for its status: name,\n"
	"role, state, epoch, lag (ms, a protected primary's), peer; one line each after a\n"
	"header, or with --json one JSON array of objects (name, socket, answering, role,\n"
	"state, epoch, lag_ms, peer, why). A socket nobody answers on (an agent that\n"
	"died) is listed as \"not answering\", not an error.\n"
	"exit status: 0; 1 when DIR cannot be read; 2 on bad options\n";

struct vm_row {
	char name[CLI_NAME_MAX + 8];
	char socket[256];
	bool answering;
	char role[16], state[32], peer[128], why[160];
	uint64_t epoch;
	double lag_ms;                /* < 0: none */
};

static int is_socket_name(const struct dirent *e)
{
	size_t n = strlen(e->d_name);

	return n > 5 && e->d_name[0] != '.' && !strcmp(e->d_name + n - 5, ".sock");
}

static void ask(const char *dir, const char *file, struct vm_row *row)
{
	struct proto_json_reader st;
	int r;

	memset(row, 0, sizeof(*row));
	row->lag_ms = -1;
	snprintf(row->name, sizeof(row->name), "%.*s", (int)(strlen(file) - 5), file);
	snprintf(row->socket, sizeof(row->socket), "%s/%s", dir, file);
	r = cli_status_read(row->socket, LIST_TIMEOUT_MS, &st);
	if (r == -EPROTO) {   /* answered, but no status: named as it is */
		row->answering = true;
		snprintf(row->state, sizeof(row->state), "bad status");
		snprintf(row->why, sizeof(row->why), "%s", st.why);
	} else if (r < 0) {
		snprintf(row->state, sizeof(row->state), "not answering");
		snprintf(row->why, sizeof(row->why), "%s", strerror(-r));
	} else {
		const char *name = proto_json_str(st.o, "name");

		row->answering = true;
		snprintf(row->role, sizeof(row->role), "%s", proto_json_need_str(&st, "role"));
		snprintf(row->state, sizeof(row->state), "%s", proto_json_need_str(&st, "state"));
		row->epoch = (uint64_t)proto_json_num(st.o, "epoch", 0);
		row->lag_ms = proto_json_num(st.o, "lag_ms", -1);
		snprintf(row->peer, sizeof(row->peer), "%s", proto_json_str(st.o, "peer"));
		if (name[0])
			snprintf(row->name, sizeof(row->name), "%s", name);
		if (st.why[0]) {
			snprintf(row->state, sizeof(row->state), "bad status");
			snprintf(row->why, sizeof(row->why), "%s", st.why);
		}
	}
	proto_json_reader_fini(&st);
}

static json_object *row_json(const struct vm_row *row)
{
	json_object *o = json_object_new_object();

	proto_json_add_str(o, "name", row->name);
	proto_json_add_str(o, "socket", row->socket);
	proto_json_add_bool(o, "answering", row->answering);
	proto_json_add_str(o, "role", row->role);
	proto_json_add_str(o, "state", row->state);
	proto_json_add_u64(o, "epoch", row->epoch);
	if (row->lag_ms >= 0)
		proto_json_add_fixed(o, "lag_ms", row->lag_ms, 3);
	proto_json_add_str(o, "peer", row->peer);
	proto_json_add_str(o, "why", row->why);
	return o;
}

static void row_text(const struct vm_row *row)
{
	char epoch[24] = "-", lag[32] = "-";

	if (row->role[0])
		snprintf(epoch, sizeof(epoch), "%llu", (unsigned long long)row->epoch);
	if (row->lag_ms >= 0)
		snprintf(lag, sizeof(lag), "%.3f", row->lag_ms);
	printf("%-20s %-10s %-16s %10s %10s  %s\n", row->name, row->role[0] ? row->role : "-",
	       row->state, epoch, lag, row->peer[0] ? row->peer : "-");
}

int cli_cmd_list(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "dir", required_argument, NULL, 'd' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char run_dir[PATH_MAX];
	bool is_default;
	const char *dir = cli_run_dir(run_dir, sizeof(run_dir), &is_default);
	struct dirent **ents = NULL;
	json_object *arr = NULL;
	bool json = false;
	int opt, n;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'd': dir = optarg; break;
		case 'j': json = true; break;
		case 'h': fputs(list_help, stdout); return 0;
		default: fputs(list_help, stderr); return 2;
		}
	}
	if (cli_check_no_more_args("list", argc, argv))
		return 2;
	n = scandir(dir, &ents, is_socket_name, alphasort);
	if (n < 0 && errno != ENOENT) {
		fprintf(stderr, "understudy list: %s: %s\n", dir, strerror(errno));
		return 1;
	}
	if (json)
		arr = json_object_new_array();
	else
		printf("%-20s %-10s %-16s %10s %10s  %s\n", "NAME", "ROLE", "STATE", "EPOCH",
		       "LAG_MS", "PEER");
	for (int i = 0; i < n; i++) {
		struct vm_row row;

		ask(dir, ents[i]->d_name, &row);
		if (json)
			json_object_array_add(arr, row_json(&row));
		else
			row_text(&row);
		free(ents[i]);
	}
	free(ents);
	if (json) {
		const char *s = json_object_to_json_string_ext(arr, JSON_C_TO_STRING_PLAIN);

		printf("%s\n", s ? s : "[]");
		json_object_put(arr);
	}
	fflush(stdout);
	return 0;
}
