/* understudy run: a VM without protection. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "net/control.h"
#include "primary/agent.h"
#include "replication/replication.h"

struct run_ctx {
	struct ev_loop *loop;
	struct repl_vm *vm;
	int status;
	bool stopped;
};

static void on_stopped(void *ctx, int status)
{
	struct run_ctx *r = ctx;

	r->stopped = true;
	r->status = status;
	ev_break(r->loop, EVBREAK_ALL);
}

static void on_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
	(void)revents;
	log_info("run", "signal %d: stopping the VM", w->signum);
	ev_break(loop, EVBREAK_ALL);
}

static char *on_control(void *ctx, const char *request)
{
	return agent_snapshot_request(ctx, request);
}

int agent_serve(struct ev_loop *loop, struct repl_vm *vm, const char *control_path)
{
	struct run_ctx ctx = { .loop = loop, .vm = vm };
	struct agent_snapshots snaps;
	struct control *control = NULL;
	ev_signal sigint_w, sigterm_w;

	agent_snapshots_init(&snaps, vm->m);
	vm->on_stopped = on_stopped;
	vm->cb_ctx = &ctx;
	if (control_path && control_open(loop, control_path, on_control, &snaps, &control) < 0) {
		agent_snapshots_fini(&snaps);
		repl_vm_free(vm);
		return 1;
	}
	ev_signal_init(&sigint_w, on_signal, SIGINT);
	ev_signal_init(&sigterm_w, on_signal, SIGTERM);
	ev_signal_start(loop, &sigint_w);
	ev_signal_start(loop, &sigterm_w);
	machine_resume(vm->m);
	ev_run(loop, 0);

	if (!ctx.stopped)
		machine_stop(vm->m, 0);
	machine_pause(vm->m);
	control_free(control);
	ev_signal_stop(loop, &sigint_w);
	ev_signal_stop(loop, &sigterm_w);
	agent_snapshots_fini(&snaps);
	repl_vm_free(vm);
	if (!ctx.stopped)
		return 0;
	return ctx.status < 0 ? 1 : ctx.status;
}

static const char run_help[] =
	"usage: understudy run [VM options] [--control PATH]\n"
	"Runs a VM unprotected until the guest powers off, or SIGINT/SIGTERM.\n\n"
	VM_OPTIONS_HELP
	"  --control PATH        control socket (understudy snapshot --control PATH ...)\n"
	"\nexit status: the guest's power-off status; 1 on errors; 2 on bad options\n";

int agent_cmd_run(int argc, char **argv)
{
	static const struct option longopts[] = {
		VM_OPTIONS_LONG,
		{ "control", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct vm_options vo;
	const char *control = NULL;
	struct ev_loop *loop;
	struct repl_vm *vm;
	int opt, r;

	vm_options_init(&vo);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (opt == 'h') {
			fputs(run_help, stdout);
			return 0;
		}
		if (opt == 'c') {
			control = optarg;
			continue;
		}
		if (opt == '?' || vm_options_parse(&vo, opt, optarg))
			return 2;
	}
	if (optind < argc) {
		fprintf(stderr, "understudy run: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (vm_options_check(&vo))
		return 2;
	log_set_role("run");

	loop = ev_default_loop(0);
	r = repl_vm_new(loop, &vo.cfg, vo.console, &vm);
	if (r < 0)
		return 1;
	r = machine_boot(vm->m);
	if (r < 0) {
		repl_vm_free(vm);
		return 1;
	}
	return agent_serve(loop, vm, control);
}
