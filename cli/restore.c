/* understudy restore: rebuilds a machine from a full snapshot and its diffs
 * (the configuration comes from the file) and runs the guest on. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint.h"
#include "cli/cli.h"
#include "primary/primary.h"

static const char restore_help[] =
	"usage: understudy restore FILE [DIFF...] [--console stdio|tcp:HOST:PORT] [--control PATH]\n"
	"Rebuilds the VM saved in FILE (a full snapshot), applies the incremental\n"
	"snapshots DIFF... in the order they were taken, and resumes the guest.\n"
	"Nothing runs unless every file is intact and they form one chain.\n";

/* Applies the base already in c (id base_id), then reads and applies every
 * diff in files[1..n), each of which must name the one before as parent. */
static int apply_chain(struct repl_vm *vm, struct ckpt *c, uint64_t base_id, char **files, int n)
{
	struct machine_config cfg;
	struct ckpt_file_info info = { .id = base_id };
	uint64_t prev = 0;
	int r;

	for (int i = 0; i < n; i++) {
		if (i > 0) {
			if ((r = ckpt_file_read_ex(files[i], c, &cfg, &info)) < 0) {
				fprintf(stderr, "understudy restore: %s: %s\n", files[i],
					strerror(-r));
				return r;
			}
			if (c->full || info.parent_id != prev) {
				fprintf(stderr, "understudy restore: %s is not the diff that follows %s\n",
					files[i], files[i - 1]);
				return -EINVAL;
			}
		}
		r = ckpt_apply(vm->m, c);
		if (r < 0) {
			fprintf(stderr, "understudy restore: %s does not apply: %s\n", files[i],
				strerror(-r));
			return r;
		}
		prev = info.id;
	}
	return 0;
}

int cli_cmd_restore(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "console", required_argument, NULL, 'C' },
		{ "control", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *console = "stdio", *control = NULL;
	struct machine_config cfg;
	struct ckpt_file_info info;
	struct ev_loop *loop;
	struct repl_vm *vm;
	struct ckpt c;
	int opt, r;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'C': console = optarg; break;
		case 'c': control = optarg; break;
		case 'h': fputs(restore_help, stdout); return 0;
		default: fputs(restore_help, stderr); return 2;
		}
	}
	if (optind >= argc) {
		fputs(restore_help, stderr);
		return 2;
	}
	log_set_role("restore");
	ckpt_init(&c);
	/* The base first, for the configuration (and to fail before building). */
	if ((r = ckpt_file_read_ex(argv[optind], &c, &cfg, &info)) < 0) {
		fprintf(stderr, "understudy restore: %s: %s\n", argv[optind], strerror(-r));
		goto err;
	}
	if (!c.full) {
		fprintf(stderr, "understudy restore: %s is an incremental snapshot; give the full one first\n",
			argv[optind]);
		goto err;
	}
	loop = ev_default_loop(0);
	if (repl_vm_new(loop, &cfg, console, &vm) < 0)
		goto err;
	if (apply_chain(vm, &c, info.id, argv + optind, argc - optind) < 0) {
		repl_vm_free(vm);
		goto err;
	}
	ckpt_fini(&c);
	return primary_serve(loop, vm, control);
err:
	ckpt_fini(&c);
	return 1;
}
