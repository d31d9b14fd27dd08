/* understudy secondary: keep a hot standby, take over when the primary dies. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/ops.h"
#include "secondary/fence.h"
#include "host/host.h"

static const char secondary_help[] =
	"usage: understudy secondary --listen HOST:PORT --console tcp:HOST:PORT\n"
	"                            [--failover-timeout-ms N] [--handshake-timeout-ms N]\n"
	"                            [--control PATH] [--name NAME] [--takeover auto|manual]\n"
	"                            [link options]\n"
	"                            [--fence-cmd CMD [--fence-timeout-ms N] [--fence-retries N]]\n"
	"                            [witness options]\n"
	"                            [--guest NAME --mem SIZE --cpus N]\n"
	"                            [--disk FILE [--disk-sync commit|ack]]\n"
	"                            [--net tap:NAME[,mac=MAC]]\n"
	"Waits for a primary, keeps a standby VM at its last complete checkpoint, and when\n"
	"the primary is silent for --failover-timeout-ms (default 500) resumes the guest\n"
	"and serves its console. The console port is bound at start: a secondary that cannot\n"
	"bind it does not start. A connection that has not said Hello within\n"
	"--handshake-timeout-ms (default 5000) is closed; until then it does not keep a\n"
	"primary out. Given --guest/--mem/--cpus, a primary with another machine\n"
	"configuration is refused. With --takeover manual the standby never takes over by\n"
	"itself: only when told (understudy takeover --control PATH), e.g. by a cluster\n"
	"manager that fenced the primary (see ocf/understudy). With --witness a takeover\n"
	"happens only after winning the witness key. With --fence-cmd, CMD (run by /bin/sh,\n"
	"the primary's identity in UNDERSTUDY_PEER, UNDERSTUDY_PEER_HOST, UNDERSTUDY_PEER_PORT,\n"
	"UNDERSTUDY_VM, UNDERSTUDY_EPOCH, UNDERSTUDY_REASON, UNDERSTUDY_ACTION=off) must exit 0\n"
	"within --fence-timeout-ms (default 10000) before a takeover; otherwise there is no\n"
	"takeover (state fence-failed) and the standby stays: the command is run again up to\n"
	"--fence-retries times (default 4, 0: never), after 1 s, 2 s, 4 s... (at most 30 s),\n"
	"then it waits for a person (understudy takeover --fenced-by-operator). With --disk, FILE (an existing\n"
	"writable file, emptied and sized to the primary's image when a standby is built) is\n"
	"the standby's own copy of the VM's disk: the blocks of epoch N are written to it when\n"
	"N commits; with --disk-sync ack (default commit) ACK(N) waits until they are durable\n"
	"(fdatasync). A VM with a disk needs --disk here, and the sizes must match; one with a\n"
	"NIC needs --net: this host's tap, opened when the standby is built.\n"
	"Without --control, a secondary whose VM has a name (--name, its config file, --guest\n"
	"or --kernel) listens at $UNDERSTUDY_RUN_DIR/NAME.sock (default /run/understudy as\n"
	"root, else $XDG_RUNTIME_DIR/understudy). A secondary not given --name (or name =)\n"
	"takes its primary's name from the handshake for its logs, status, metrics, hooks\n"
	"and fence command (its socket stays where it is); one given a name refuses a\n"
	"primary of another name.\n\n"
	CLI_NAME_HELP CLI_PORTS_HELP NET_OPTIONS_HELP WITNESS_OPTIONS_HELP
	OPS_OPTIONS_HELP;

/* --fence-retries N: 0..REPL_FENCE_RETRIES_MAX. */
static int parse_fence_retries(const char *arg, unsigned *out)
{
	char *end;
	unsigned long v = strtoul(arg, &end, 10);

	if (end == arg || *end || arg[0] == '-' || v > REPL_FENCE_RETRIES_MAX) {
		fprintf(stderr, "understudy secondary: --fence-retries '%s': need 0..%d\n", arg,
			REPL_FENCE_RETRIES_MAX);
		return 2;
	}
	*out = (unsigned)v;
	return 0;
}

int cli_cmd_secondary(int argc, char **argv)
{
	static const struct option longopts[] = {
		VM_OPTIONS_LONG,
		NET_OPTIONS_LONG,
		WITNESS_OPTIONS_LONG,
		OPS_OPTIONS_LONG,
		{ "listen", required_argument, NULL, 'l' },
		{ "failover-timeout-ms", required_argument, NULL, 't' },
		{ "handshake-timeout-ms", required_argument, NULL, 'H' },
		{ "control", required_argument, NULL, 'c' },
		CLI_NAME_LONG,
		CLI_PORTS_LONG,
		{ "takeover", required_argument, NULL, 'T' },
		{ "fence-cmd", required_argument, NULL, 'F' },
		{ "fence-timeout-ms", required_argument, NULL, 'f' },
		{ "fence-retries", required_argument, NULL, 'R' },
		{ "disk-sync", required_argument, NULL, 'D' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct cli_config cf CLI_CONFIG_AUTO = { 0 };
	struct cli_name nm = { 0 };
	struct vm_options vo;
	struct repl_secondary_opts o = { .timeout_ms = 500,
					 .handshake_timeout_ms = REPL_HANDSHAKE_TIMEOUT_MS,
					 .fence_timeout_ms = 10000,
					 .fence_retries = REPL_FENCE_RETRIES_DEFAULT };
	bool fence_timeout_given = false, fence_retries_given = false, disk_sync_given = false;
	struct witness_options wo;
	struct cli_ports ports;
	struct ops_options ops;
	struct cli_ops co;
	int opt, status;

	cli_ops_options_init(&ops);
	cli_vm_options_init(&vo);
	cli_witness_options_init(&wo);
	cli_ports_init(&ports);
	vo.console = NULL;
	if (cli_config_apply(&cf, &argc, &argv, "h", longopts))
		return 2;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		int r = 0;

		switch (opt) {
		case 'h': fputs(secondary_help, stdout); return 0;
		case 'l': o.listen = optarg; r = cli_check_host_maybe_port("--listen", optarg); break;
		case 't': r = cli_parse_ms("--failover-timeout-ms", optarg, 10, &o.timeout_ms); break;
		case 'H':
			r = cli_parse_ms("--handshake-timeout-ms", optarg, 10, &o.handshake_timeout_ms);
			break;
		case 'c': o.control = optarg; r = cli_check_control("--control", optarg); break;
		case CLI_NAME_OPTION: r = cli_name_set(&nm, optarg); break;
		case 1410: case 1411: r = cli_parse_ports_option(&ports, opt, optarg); break;
		case 'T':
			if (strcmp(optarg, "auto") && strcmp(optarg, "manual")) {
				fprintf(stderr, "understudy secondary: --takeover auto|manual, not '%s'\n",
					optarg);
				r = 2;
			}
			o.manual_takeover = !strcmp(optarg, "manual");
			break;
		case 'F':
			if (!optarg[0]) {
				fprintf(stderr, "understudy secondary: --fence-cmd: empty command\n");
				r = 2;
			}
			o.fence_cmd = optarg;
			break;
		case 'D':
			if (strcmp(optarg, "commit") && strcmp(optarg, "ack")) {
				fprintf(stderr, "understudy secondary: --disk-sync commit|ack, not '%s'\n",
					optarg);
				r = 2;
			}
			o.disk_sync_ack = !strcmp(optarg, "ack");
			disk_sync_given = true;
			break;
		case 'f':
			r = cli_parse_ms("--fence-timeout-ms", optarg, 100, &o.fence_timeout_ms);
			fence_timeout_given = true;
			break;
		case 'R':
			r = parse_fence_retries(optarg, &o.fence_retries);
			fence_retries_given = true;
			break;
		default:
			r = cli_is_ops_option(opt) ? cli_parse_ops_option("secondary", &ops, opt, optarg) :
			    opt >= 1200 ? cli_parse_witness_option(&wo, opt, optarg) :
			    cli_parse_option(opt, optarg, &vo, &o.net);
			break;
		}
		if (r)
			return cli_config_blame(&cf, argv, optind);
	}
	if (cli_check_no_more_args("secondary", argc, argv))
		return 2;
	if (!o.listen || !vo.console || strcmp(vo.console, "stdio") == 0) {
		fprintf(stderr, "understudy secondary: --listen HOST:PORT and --console tcp:HOST:PORT "
				"are required\n");
		return 2;
	}
	if (cli_ports_resolve(&ports, "--listen", &o.listen))
		return 2;
	/* --kernel pins a Linux guest (checked like the primary's: the
	 * standby takes over the same machine). */
	if (vo.cfg.kernel[0] && cli_vm_options_check(&vo))
		return 2;
	if (cli_name_resolve(&nm, &cf, &vo.cfg) || cli_net_options_check(&o.net, true) ||
	    cli_witness_options_check(&wo, nm.name) || cli_ops_options_check("secondary", &ops))
		return 2;
	if ((fence_timeout_given || fence_retries_given) && !o.fence_cmd) {
		fprintf(stderr, "understudy secondary: --fence-%s needs --fence-cmd\n",
			fence_timeout_given ? "timeout-ms" : "retries");
		return 2;
	}
	if (disk_sync_given && !vo.cfg.ndisks) {
		fprintf(stderr, "understudy secondary: --disk-sync needs --disk\n");
		return 2;
	}
	o.disk = vo.cfg.ndisks ? vo.cfg.disk : NULL;
	o.witness = wo.o;
	if (vo.cfg.guest[0]) {
		o.pin = vo.cfg;
	} else if (vo.cfg.nnets) {   /* the standby's NIC: this host's tap */
		o.pin.nnets = vo.cfg.nnets;
		memcpy(o.pin.net_mac, vo.cfg.net_mac, sizeof(o.pin.net_mac));
		memcpy(o.pin.net_tap, vo.cfg.net_tap, sizeof(o.pin.net_tap));
	}
	o.console = vo.console;
	log_set_vm(nm.name);
	if (cli_name_agent_control("secondary", &nm, &o.control))
		return 2;
	if (cli_ops_start(&ops, ev_default_loop(0), "secondary", nm.name, nm.given, &co))
		return 1;
	o.ops = co.ops;
	status = host_secondary_run(ev_default_loop(0), &o);
	cli_ops_stop(&co);
	return status;
}
