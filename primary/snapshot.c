/* understudy snapshot: a running VM writes snapshot files on request, a full
 * one and then diffs against the previous one. The client side asks through
 * the VM's control socket. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "net/control.h"
#include "primary/agent.h"

#define TAG "snapshot"

void agent_snapshots_init(struct agent_snapshots *s, struct machine *m)
{
	memset(s, 0, sizeof(*s));
	s->m = m;
}

void agent_snapshots_fini(struct agent_snapshots *s)
{
	if (s->ckpt) {
		ckpt_fini(s->ckpt);
		free(s->ckpt);
	}
	s->ckpt = NULL;
}

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...)
{
	va_list ap;
	char *s = NULL;

	va_start(ap, f);
	if (vasprintf(&s, f, ap) < 0)
		s = NULL;
	va_end(ap);
	return s;
}

static uint64_t new_id(void)
{
	uint64_t id = 0;

	while (!id)
		if (getrandom(&id, sizeof(id), 0) != sizeof(id))
			id = now_ns() ^ ((uint64_t)getpid() << 40);
	return id;
}

/* The pause covers the capture only; the file is written after resume (on
 * the loop thread, which is idle otherwise in `run`). */
char *agent_snapshot_request(struct agent_snapshots *s, const char *request)
{
	struct ckpt_file_info info;
	char kind[16], path[PATH_MAX];
	bool full;
	int r;

	if (sscanf(request, "snapshot %15s %4095[^\n]", kind, path) != 2 ||
	    (strcmp(kind, "full") && strcmp(kind, "incremental")))
		return fmt("error unknown request (want: snapshot full|incremental FILE)");
	full = !strcmp(kind, "full");
	if (!full && !s->last_id)
		return fmt("error no previous snapshot to diff against: take a full one first");
	if (!s->ckpt) {
		s->ckpt = malloc(sizeof(*s->ckpt));
		if (!s->ckpt)
			return fmt("error out of memory");
		ckpt_init(s->ckpt);
	}
	if ((r = ckpt_take(s->m, s->ckpt, full)) < 0)
		return fmt("error capturing the machine: %s", strerror(-r));
	info.id = new_id();
	info.parent_id = full ? 0 : s->last_id;
	r = ckpt_file_write_ex(path, s->ckpt, &s->m->cfg, &info);
	if (r < 0) {
		/* The next diff is against the last good file: keep its pages. */
		ckpt_requeue(s->m, s->ckpt);
		return fmt("error writing %s: %s (the previous snapshot is unchanged)", path,
			   strerror(-r));
	}
	s->last_id = info.id;
	s->count++;
	log_info(TAG, "%s snapshot %s: %zu pages, pause %.0f us (copy %.0f us)", kind, path,
		 s->ckpt->npages, s->ckpt->stats.pause_ns / 1e3, s->ckpt->stats.copy_ns / 1e3);
	return fmt("ok %s %s pages=%zu pause_us=%.0f", kind, path, s->ckpt->npages,
		   s->ckpt->stats.pause_ns / 1e3);
}

static const char snapshot_help[] =
	"usage: understudy snapshot --control PATH --out FILE [--incremental]\n"
	"Asks the VM running with --control PATH to write a snapshot to FILE: a full\n"
	"one, or with --incremental the pages changed since its previous snapshot.\n"
	"Restore with: understudy restore FULL [DIFF...]\n";

int agent_cmd_snapshot(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "control", required_argument, NULL, 'c' },
		{ "out", required_argument, NULL, 'o' },
		{ "incremental", no_argument, NULL, 'i' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *control = NULL, *out = NULL;
	char abs[PATH_MAX], req[PATH_MAX + 64], *reply = NULL;
	bool incremental = false;
	int opt, r;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'c': control = optarg; break;
		case 'o': out = optarg; break;
		case 'i': incremental = true; break;
		case 'h': fputs(snapshot_help, stdout); return 0;
		default: fputs(snapshot_help, stderr); return 2;
		}
	}
	if (!control || !out || optind < argc) {
		fputs(snapshot_help, stderr);
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
	snprintf(req, sizeof(req), "snapshot %s %s", incremental ? "incremental" : "full", out);
	r = control_request(control, req, 600000, &reply);
	if (r < 0) {
		fprintf(stderr, "understudy snapshot: %s: %s\n", control, strerror(-r));
		return 1;
	}
	fputs(reply, strncmp(reply, "ok", 2) ? stderr : stdout);
	r = strncmp(reply, "ok", 2) ? 1 : 0;
	free(reply);
	return r;
}
