/* understudy restore: rebuilds a machine from a full snapshot and its diffs
 * (the configuration comes from the file) and runs the guest on. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint.h"
#include "cli/cli.h"
#include "cli/ops.h"
#include "host/host.h"

static const char restore_help[] =
	"usage: understudy restore FILE [DIFF...] [--console stdio|tcp:HOST:PORT] [--control PATH]\n"
	"                          [--name NAME] [--disk IMAGE] [--net tap:NAME[,mac=MAC]]\n"
	"                          [--kernel FILE [--initrd FILE] [--append CMDLINE]]\n"
	"Rebuilds the VM saved in FILE (a full snapshot), applies the incremental\n"
	"snapshots DIFF... in the order they were taken, and resumes the guest.\n"
	"Nothing runs unless every file is intact and they form one chain.\n"
	"A VM saved with a disk needs --disk: the image the restored guest goes on\n"
	"with (a snapshot holds the disk's device state, not its contents). A snapshot\n"
	"taken with --with-disk also carries the contents: IMAGE (created if missing) is\n"
	"replaced by the saved disk before the guest is built, after the whole file is\n"
	"checked; such a snapshot restores alone (diffs carry no disk).\n"
	"A VM saved with a NIC needs --net: the tap the restored guest is behind (it\n"
	"is asked to announce itself there). The NIC keeps the saved MAC (the one given\n"
	"with mac= when the VM was started, else the derived one); a mac= here must be\n"
	"that one (another is refused, exit 2).\n"
	"A restored Linux guest's reboot boots it again (a fresh machine of the same\n"
	"configuration, as under run; protected, on the same machine) from the kernel,\n"
	"initrd and command line the snapshot records (checked as run checks them\n"
	"before anything is built: a recorded file missing or no longer a kernel is\n"
	"refused, exit 2). --kernel replaces the recorded ones (with its own --initrd\n"
	"and --append, none if not given); --initrd or --append alone replaces that\n"
	"part of the recorded source. A snapshot written before the format recorded\n"
	"them (version 2) needs --kernel for that; without one the reboot ends the VM\n"
	"with status 0.\n"
	"Without --control the control socket is $UNDERSTUDY_RUN_DIR/NAME.sock (default\n"
	"/run/understudy/NAME.sock as root, else $XDG_RUNTIME_DIR/understudy/NAME.sock),\n"
	"NAME by default the saved guest's or kernel's.\n\n"
	CLI_NAME_HELP OPS_OPTIONS_HELP;

/* The tap of --net for the saved VM of cfg into cfg->net_tap. A mac= must
 * be the MAC the saved NIC has (the file's, else the derived one): the
 * guest's driver read it at boot. 0, or 2 after printing why. */
static int restore_net(struct machine_config *cfg, const char *net)
{
	struct machine_config given = { 0 };
	static const uint8_t zero[6];
	uint8_t mac[6];
	char want[18], got[18];

	if (cli_parse_net(&given, net))
		return 2;
	machine_net_mac(cfg, mac);
	if (memcmp(given.net_mac, zero, 6) && memcmp(given.net_mac, mac, 6)) {
		snprintf(got, sizeof(got), "%02x:%02x:%02x:%02x:%02x:%02x", given.net_mac[0],
			 given.net_mac[1], given.net_mac[2], given.net_mac[3], given.net_mac[4],
			 given.net_mac[5]);
		snprintf(want, sizeof(want), "%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2],
			 mac[3], mac[4], mac[5]);
		fprintf(stderr, "understudy restore: --net %s: the saved VM's NIC has MAC %s (%s), "
			"not %s: a restored guest keeps its MAC (give mac=%s or none)\n", net, want,
			memcmp(cfg->net_mac, zero, 6) ? "given with mac= when it was started" :
			"derived from its configuration", got, want);
		return 2;
	}
	memcpy(cfg->net_tap, given.net_tap, sizeof(cfg->net_tap));
	return 0;
}

/* Which of --kernel, --initrd, --append the command line gave (an --append
 * of "" replaces a recorded command line too). */
#define GIVEN_KERNEL 1u
#define GIVEN_INITRD 2u
#define GIVEN_APPEND 4u

/* The recorded boot source of cfg (read from the snapshot) where boot
 * (the command line's) does not replace it: with no --kernel, the recorded
 * kernel, and its initrd and command line unless given. true when any of it
 * came from the file. */
static bool recorded_boot(const struct machine_config *cfg, struct vm_options *boot,
			  unsigned given)
{
	if ((given & GIVEN_KERNEL) || !cfg->kernel[0])
		return false;
	memcpy(boot->cfg.kernel, cfg->kernel, sizeof(cfg->kernel));
	if (!(given & GIVEN_INITRD))
		memcpy(boot->cfg.initrd, cfg->initrd, sizeof(cfg->initrd));
	if (!(given & GIVEN_APPEND))
		memcpy(boot->cfg.append, cfg->append, sizeof(cfg->append));
	return true;
}

/* The files a restored Linux guest boots from when it reboots into cfg: the
 * ones the snapshot file records, each replaced by --kernel, --initrd,
 * --append (boot) if given; checked as `run` checks them (a recorded file
 * gone or changed is refused here, before anything is built).
 * 0, or 2 after printing why. */
static int restore_kernel(struct machine_config *cfg, struct vm_options *boot, unsigned given,
			  const char *file)
{
	char err[512];

	if (!given && !cfg->kernel[0])
		return 0;
	if (strcmp(cfg->guest, MACHINE_LINUX_GUEST)) {
		fprintf(stderr, "understudy restore: --kernel, --initrd, --append: %s is of a VM "
			"running the built-in guest %s, not a Linux kernel\n", file, cfg->guest);
		return 2;
	}
	boot->cfg.mem_bytes = cfg->mem_bytes;
	boot->cfg.ncpus = cfg->ncpus;
	if (recorded_boot(cfg, boot, given)) {
		if (machine_linux_check(&boot->cfg, err, sizeof(err)) < 0) {
			fprintf(stderr, "understudy restore: %s records the boot source of its Linux "
				"guest (for a reboot)%s, not usable here: %s (give --kernel FILE to "
				"boot it from another)\n", file, given ? ", with --initrd or --append "
				"of the command line" : "", err);
			return 2;
		}
	} else if (cli_vm_options_check(boot)) {
		return 2;
	}
	memcpy(cfg->kernel, boot->cfg.kernel, sizeof(cfg->kernel));
	memcpy(cfg->initrd, boot->cfg.initrd, sizeof(cfg->initrd));
	memcpy(cfg->append, boot->cfg.append, sizeof(cfg->append));
	return 0;
}

/* Applies the chain (files[0], already read into c, and the diffs after it)
 * to vm, saying what is wrong with the first file that does not fit. */
static int apply_files(struct repl_vm *vm, struct ckpt *c, uint64_t base_id, char **files, int n)
{
	struct ckpt_chain_error e;
	int r = ckpt_file_apply_chain(vm->m, c, base_id, files, n, &e);

	if (r >= 0)
		return 0;
	if (e.fault == CKPT_CHAIN_READ)
		fprintf(stderr, "understudy restore: %s: %s\n", files[e.file], strerror(-r));
	else if (e.fault == CKPT_CHAIN_LINK)
		fprintf(stderr, "understudy restore: %s is not the diff that follows %s\n",
			files[e.file], files[e.file - 1]);
	else
		fprintf(stderr, "understudy restore: %s does not apply: %s\n", files[e.file],
			strerror(-r));
	return r;
}

int cli_cmd_restore(int argc, char **argv)
{
	static const struct option longopts[] = {
		OPS_OPTIONS_LONG,
		{ "console", required_argument, NULL, 'C' },
		{ "control", required_argument, NULL, 'c' },
		{ "disk", required_argument, NULL, 'D' },
		{ "net", required_argument, NULL, 'N' },
		{ "kernel", required_argument, NULL, 1004 },
		{ "initrd", required_argument, NULL, 1005 },
		{ "append", required_argument, NULL, 1006 },
		CLI_NAME_LONG,
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct cli_config cf CLI_CONFIG_AUTO = { 0 };
	struct cli_name nm = { 0 };
	const char *console = "stdio", *control = NULL, *disk = NULL, *net = NULL;
	struct machine_config cfg;
	struct ckpt_file_info info;
	char err[512];
	struct ev_loop *loop;
	struct repl_vm *vm;
	struct ckpt c;
	struct ops_options ops;
	struct vm_options boot;      /* --kernel, --initrd, --append */
	struct cli_ops co;
	unsigned given = 0;          /* GIVEN_* */
	int opt, r;

	cli_ops_options_init(&ops);
	cli_vm_options_init(&boot);
	if (cli_config_apply(&cf, &argc, &argv, "h", longopts))
		return 2;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		int bad = 0;

		switch (opt) {
		case 'C': console = optarg; bad = cli_check_console(optarg); break;
		case 'c': control = optarg; bad = cli_check_control("--control", optarg); break;
		case 'D': disk = optarg; break;
		case 'N': net = optarg; break;
		case CLI_NAME_OPTION: bad = cli_name_set(&nm, optarg); break;
		case 'h': fputs(restore_help, stdout); return 0;
		case 1004:
		case 1005:
		case 1006:
			given |= 1u << (opt - 1004);
			bad = cli_parse_option(opt, optarg, &boot, NULL);
			break;
		default:
			if (!cli_is_ops_option(opt)) {
				fputs(restore_help, stderr);
				return 2;
			}
			bad = cli_parse_ops_option("restore", &ops, opt, optarg);
			break;
		}
		if (bad)
			return cli_config_blame(&cf, argv, optind);
	}
	if (optind >= argc) {
		fputs(restore_help, stderr);
		return 2;
	}
	if (cli_ops_options_check("restore", &ops) || cli_name_resolve(&nm, &cf, NULL))
		return 2;
	log_set_role("restore");
	log_set_vm(nm.name);
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
	if (cfg.ndisks && !disk) {
		fprintf(stderr, "understudy restore: %s is of a VM with a disk: give its image with --disk\n",
			argv[optind]);
		goto err;
	}
	if (disk && (!cfg.ndisks || !*disk || strlen(disk) >= sizeof(cfg.disk))) {
		fprintf(stderr, "understudy restore: --disk '%s': %s\n", disk,
			cfg.ndisks ? "bad file name" : "the saved VM has no disk");
		goto err;
	}
	if (info.disk && argc - optind > 1) {
		fprintf(stderr, "understudy restore: %s carries its disk: it restores alone (the diffs "
			"after it carry no disk)\n", argv[optind]);
		goto err;
	}
	snprintf(cfg.disk, sizeof(cfg.disk), "%s", disk ? disk : "");
	if (cfg.nnets != (net != NULL)) {
		fprintf(stderr, "understudy restore: %s\n", cfg.nnets ?
			"the saved VM has a NIC: give its tap with --net tap:NAME" :
			"--net: the saved VM has no NIC");
		goto err;
	}
	if (net && restore_net(&cfg, net)) {
		ckpt_fini(&c);
		return 2;
	}
	if (restore_kernel(&cfg, &boot, given, argv[optind])) {
		ckpt_fini(&c);
		return 2;
	}
	if (!nm.name[0]) {   /* the saved VM's guest or kernel (never 2 from it) */
		(void)cli_name_resolve(&nm, NULL, &cfg);
		log_set_vm(nm.name);
	}
	if (cli_name_agent_control("restore", &nm, &control)) {
		ckpt_fini(&c);
		return 2;
	}
	/* The saved disk first: the guest is built on it. */
	if (info.disk) {
		if (ckpt_file_restore_disk(argv[optind], disk, err, sizeof(err)) < 0) {
			fprintf(stderr, "understudy restore: %s\n", err);
			goto err;
		}
		fprintf(stderr, "understudy restore: %s: %llu non-zero blocks of the saved disk written\n",
			disk, (unsigned long long)info.disk_blocks);
	}
	loop = ev_default_loop(0);
	if (repl_vm_new(loop, &cfg, console, &vm) < 0)
		goto err;
	/* Before the snapshot applies: protected later, a reboot in place
	 * starts from it (never a reason not to restore). */
	if (repl_vm_keep_poweron(vm) < 0)
		log_warn("restore", "a reboot of this guest will end it here: its power-on state "
			 "could not be read");
	if (apply_files(vm, &c, info.id, argv + optind, argc - optind) < 0) {
		repl_vm_free(vm);
		goto err;
	}
	ckpt_fini(&c);
	/* The guest's NIC is behind this host's tap now: this host announces
	 * its MAC there, and the guest is asked to announce itself. */
	repl_vm_net_announce(vm);
	if (machine_net_announce(vm->m))
		fprintf(stderr, "understudy restore: the guest is asked to announce its MAC\n");
	if (cli_ops_start(&ops, loop, "primary", nm.name, true, &co)) {
		repl_vm_free(vm);
		return 1;
	}
	r = host_serve(loop, vm, control, &co.ops);
	cli_ops_stop(&co);
	/* A reboot boots a fresh machine of the same configuration from the
	 * recorded kernel or --kernel, as `run` does; without one the VM ends. */
	if (r == MACHINE_STATUS_REBOOT && cfg.kernel[0]) {
		log_info("restore", "the guest rebooted: booting it again from %s", cfg.kernel);
		return cli_boot_serve(loop, &cfg, console, control, &ops, nm.name, "restore");
	}
	if (r == MACHINE_STATUS_REBOOT) {
		log_info("restore", "the guest rebooted: the VM ends (no kernel to boot it from: the "
			 "snapshot records none, no --kernel given)");
		return 0;
	}
	return r;
err:
	ckpt_fini(&c);
	return 1;
}
