/* understudy primary: run a VM protected by a secondary. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/ops.h"
#include "host/host.h"

static const char primary_help[] =
	"usage: understudy primary [VM options] --peer HOST:PORT [--epoch-ms N]\n"
	"                          [--timeout-ms N] [--handshake-timeout-ms N] [--control PATH]\n"
	"                          [--name NAME] [link options] [witness options]\n"
	"Runs the VM and checkpoints it every --epoch-ms (default 25) to the secondary at\n"
	"--peer; guest output leaves only once the secondary holds the checkpoint that\n"
	"produced it. If the secondary is silent for --timeout-ms (default 500), the VM\n"
	"runs on UNPROTECTED and says so; `understudy protect` then attaches a new one.\n"
	"Until the first checkpoint is acknowledged, each phase (connect, TLS, Hello,\n"
	"initial sync) must progress within --handshake-timeout-ms (default 5000): else\n"
	"the VM was never protected and the primary exits 1, or, once syncing, runs on\n"
	"UNPROTECTED. With --witness the guest runs only while this side owns the witness\n"
	"key: past its lease it is paused for good (state fenced); it does not start\n"
	"while the witness vouches for a standby (exit 4: run understudy takeover on it).\n"
	"Output that commit holds ends the epoch early, at least --min-epoch-ms (default\n"
	"2) after the last one, so that a reply waits for one pause and one round trip\n"
	"rather than a whole epoch (--min-epoch-ms >= --epoch-ms: the timer only). A\n"
	"guest's reboot boots it again on the same machine, still protected: the next\n"
	"epoch carries it to the standby. Without --control the control socket is\n"
	"$UNDERSTUDY_RUN_DIR/NAME.sock (default /run/understudy/NAME.sock as root, else\n"
	"$XDG_RUNTIME_DIR/understudy/NAME.sock).\n\n"
	VM_OPTIONS_HELP CLI_NAME_HELP CLI_PORTS_HELP NET_OPTIONS_HELP WITNESS_OPTIONS_HELP OPS_OPTIONS_HELP;

int cli_cmd_primary(int argc, char **argv)
{
	static const struct option longopts[] = {
		VM_OPTIONS_LONG,
		NET_OPTIONS_LONG,
		WITNESS_OPTIONS_LONG,
		OPS_OPTIONS_LONG,
		{ "peer", required_argument, NULL, 'p' },
		{ "epoch-ms", required_argument, NULL, 'e' },
		{ "min-epoch-ms", required_argument, NULL, 'm' },
		{ "timeout-ms", required_argument, NULL, 't' },
		{ "handshake-timeout-ms", required_argument, NULL, 'H' },
		{ "control", required_argument, NULL, 'c' },
		CLI_NAME_LONG,
		CLI_PORTS_LONG,
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct cli_config cf CLI_CONFIG_AUTO = { 0 };
	struct cli_name nm = { 0 };
	struct vm_options vo;
	struct repl_primary_opts o = { .epoch_ms = 25, .timeout_ms = 500,
				       .handshake_timeout_ms = REPL_HANDSHAKE_TIMEOUT_MS };
	struct witness_options wo;
	struct cli_ports ports;
	struct ops_options ops;
	struct cli_ops co;
	int opt, status;

	cli_ops_options_init(&ops);
	cli_vm_options_init(&vo);
	cli_witness_options_init(&wo);
	cli_ports_init(&ports);
	if (cli_config_apply(&cf, &argc, &argv, "h", longopts))
		return 2;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		int r = 0;

		switch (opt) {
		case 'h': fputs(primary_help, stdout); return 0;
		case 'p': o.peer = optarg; r = cli_check_host_maybe_port("--peer", optarg); break;
		case 'e': r = cli_parse_ms("--epoch-ms", optarg, 1, &o.epoch_ms); break;
		case 'm': r = cli_parse_ms("--min-epoch-ms", optarg, 1, &o.min_epoch_ms); break;
		case 't': r = cli_parse_ms("--timeout-ms", optarg, 10, &o.timeout_ms); break;
		case 'H':
			r = cli_parse_ms("--handshake-timeout-ms", optarg, 10, &o.handshake_timeout_ms);
			break;
		case 'c': o.control = optarg; r = cli_check_control("--control", optarg); break;
		case CLI_NAME_OPTION: r = cli_name_set(&nm, optarg); break;
		case 1410: case 1411: r = cli_parse_ports_option(&ports, opt, optarg); break;
		default:
			r = cli_is_ops_option(opt) ? cli_parse_ops_option("primary", &ops, opt, optarg) :
			    opt >= 1200 ? cli_parse_witness_option(&wo, opt, optarg) :
			    cli_parse_option(opt, optarg, &vo, &o.net);
			break;
		}
		if (r)
			return cli_config_blame(&cf, argv, optind);
	}
	if (cli_check_no_more_args("primary", argc, argv))
		return 2;
	if (!o.peer) {
		fprintf(stderr, "understudy primary: --peer HOST:PORT is required\n");
		return 2;
	}
	if (cli_ports_resolve(&ports, "--peer", &o.peer))
		return 2;
	if (cli_vm_options_check(&vo) || cli_name_resolve(&nm, &cf, &vo.cfg) ||
	    cli_net_options_check(&o.net, false) ||
	    cli_witness_options_check(&wo, nm.name) || cli_ops_options_check("primary", &ops))
		return 2;
	log_set_vm(nm.name);
	if (cli_name_agent_control("primary", &nm, &o.control))
		return 2;
	o.witness = wo.o;
	o.cfg = vo.cfg;
	o.console = vo.console;
	if (cli_ops_start(&ops, ev_default_loop(0), "primary", nm.name, true, &co))
		return 1;
	o.ops = co.ops;
	status = host_primary_run(ev_default_loop(0), &o);
	cli_ops_stop(&co);
	if (status == MACHINE_STATUS_REBOOT) {
		/* A reboot not served in place (during a hand-over, or as the
		 * guest stopped) ends it cleanly: the standby was told not to
		 * take over. */
		log_info("primary", "the guest rebooted: the VM ends");
		return 0;
	}
	return status;
}
