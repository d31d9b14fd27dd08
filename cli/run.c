/* understudy run: a VM without protection. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/ops.h"
#include "host/host.h"

static const char run_help[] =
	"usage: understudy run [VM options] [--name NAME] [--control PATH]\n"
	"Runs a VM unprotected until the guest powers off, or SIGINT/SIGTERM.\n\n"
	VM_OPTIONS_HELP
	CLI_NAME_HELP
	"  --control PATH        control socket (understudy snapshot --control PATH ...); default\n"
	"                        $UNDERSTUDY_RUN_DIR/NAME.sock (/run/understudy/NAME.sock as\n"
	"                        root, else $XDG_RUNTIME_DIR/understudy/NAME.sock)\n"
	OPS_OPTIONS_HELP
	"\nexit status: the guest's power-off status; 1 on errors; 2 on bad options\n"
	"(a guest's reboot boots the VM again)\n";

int cli_cmd_run(int argc, char **argv)
{
	static const struct option longopts[] = {
		VM_OPTIONS_LONG,
		OPS_OPTIONS_LONG,
		{ "control", required_argument, NULL, 'c' },
		CLI_NAME_LONG,
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct cli_config cf CLI_CONFIG_AUTO = { 0 };
	struct cli_name nm = { 0 };
	struct vm_options vo;
	const char *control = NULL;
	struct ev_loop *loop;
	struct ops_options ops;
	int opt, r;

	cli_ops_options_init(&ops);
	cli_vm_options_init(&vo);
	if (cli_config_apply(&cf, &argc, &argv, "h", longopts))
		return 2;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		r = 0;
		switch (opt) {
		case 'h': fputs(run_help, stdout); return 0;
		case 'c': control = optarg; r = cli_check_control("--control", optarg); break;
		case CLI_NAME_OPTION: r = cli_name_set(&nm, optarg); break;
		default:
			r = cli_is_ops_option(opt) ? cli_parse_ops_option("run", &ops, opt, optarg) :
			    cli_parse_option(opt, optarg, &vo, NULL);
			break;
		}
		if (r)
			return cli_config_blame(&cf, argv, optind);
	}
	if (cli_check_no_more_args("run", argc, argv) || cli_vm_options_check(&vo) ||
	    cli_ops_options_check("run", &ops) || cli_name_resolve(&nm, &cf, &vo.cfg))
		return 2;
	log_set_role("run");
	log_set_vm(nm.name);
	if (cli_name_agent_control("run", &nm, &control))
		return 2;

	loop = ev_default_loop(0);
	return cli_boot_serve(loop, &vo.cfg, vo.console, control, &ops, nm.name, "run");
}

/* A guest's reboot (a Linux guest's reset) boots a fresh machine of the
 * same configuration: RAM, vCPUs and devices as at power-on. */
int cli_boot_serve(struct ev_loop *loop, const struct machine_config *cfg, const char *console,
		   const char *control, const struct ops_options *ops, const char *name,
		   const char *cmd)
{
	struct repl_vm *vm;
	struct cli_ops co;
	int r;

	for (;;) {
		if (repl_vm_new(loop, cfg, console, &vm) < 0)
			return 1;
		if (repl_vm_boot(vm) < 0) {   /* its power-on state: `protect` reboots in place */
			repl_vm_free(vm);
			return 1;
		}
		if (cli_ops_start(ops, loop, "primary", name, true, &co)) {
			repl_vm_free(vm);
			return 1;
		}
		r = host_serve(loop, vm, control, &co.ops);
		cli_ops_stop(&co);
		if (r != MACHINE_STATUS_REBOOT)
			return r;
		log_info(cmd, "the guest rebooted: booting it again%s%s", cfg->kernel[0] ? " from " : "",
			 cfg->kernel);
	}
}
