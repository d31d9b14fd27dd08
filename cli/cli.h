/* cli: the command line of the one binary. main() picks the subcommand; each
 * subcommand parses its options (the VM and link options are shared, here)
 * and hands the result to an agent (primary/, secondary/) or asks a running
 * one through its control socket. Exit status 2 means bad options. */
#ifndef US_CLI_H
#define US_CLI_H

#include <getopt.h>
#include <stdio.h>

#include "machine/machine.h"
#include "net/net.h"
#include "proto/proto.h"
#include "replication/witness.h"

struct vm_options {
	struct machine_config cfg;
	const char *console;
};

/* getopt_long entries of the VM options, ids from 1000 up. */
#define VM_OPTIONS_LONG \
	{ "guest", required_argument, NULL, 1000 }, \
	{ "mem", required_argument, NULL, 1001 }, \
	{ "cpus", required_argument, NULL, 1002 }, \
	{ "console", required_argument, NULL, 1003 }, \
	{ "kernel", required_argument, NULL, 1004 }, \
	{ "initrd", required_argument, NULL, 1005 }, \
	{ "append", required_argument, NULL, 1006 }, \
	{ "disk", required_argument, NULL, 1007 }, \
	{ "net", required_argument, NULL, 1008 }

#define VM_OPTIONS_HELP \
	"VM options:\n" \
	"  --guest NAME[:ARGS]   built-in guest (counter, dirty:mb=N,rate_mb=N,report_ms=N,hot_mb=N,\n" \
	"                        stress, blk, udpecho:ip=A.B.C.D/N,port=P, kv:ip=A.B.C.D/N,port=P;\n" \
	"                        an unknown argument is an error)\n" \
	"  --mem SIZE            guest RAM, e.g. 64M, 1G (default 64M)\n" \
	"  --kernel FILE         a Linux bzImage (boot protocol 2.10+, 64-bit) instead of --guest\n" \
	"  --initrd FILE         its initial RAM disk\n" \
	"  --append CMDLINE      its command line (console=ttyS0 for the serial console)\n" \
	"  --cpus N              vCPUs (default 1)\n" \
	"  --console stdio|tcp:HOST:PORT   guest serial console (default stdio)\n" \
	"  --disk FILE           raw image as a virtio-blk disk (PCI 00:01.0)\n" \
	"  --net tap:NAME[,mac=MAC]   virtio-net NIC (PCI 00:02.0) on tap NAME (attached, or\n" \
	"                        created); MAC derived from the VM's configuration unless given\n"

/* Link options of the agents, ids from 1100 up. */
#define NET_OPTIONS_LONG \
	{ "tls-cert", required_argument, NULL, 1100 }, \
	{ "tls-key", required_argument, NULL, 1101 }, \
	{ "tls-ca", required_argument, NULL, 1102 }, \
	{ "insecure", no_argument, NULL, 1103 }, \
	{ "transport", required_argument, NULL, 1104 }, \
	{ "rdma-provider", required_argument, NULL, 1105 }, \
	{ "tls-peer-name", required_argument, NULL, 1106 }

#define NET_OPTIONS_HELP \
	"link options (TLS 1.3 with mutual certificates is the default):\n" \
	"  --tls-cert F --tls-key F --tls-ca F   this host's certificate, key, and the CA of the peer\n" \
	"                        (the secondary's certificate needs extended key usage serverAuth,\n" \
	"                        the primary's clientAuth; tests/mkcerts.sh makes both)\n" \
	"  --tls-peer-name NAME  the peer's certificate must also name NAME (DNS name or CN)\n" \
	"  --insecure            plaintext TCP (logged as a warning)\n" \
	"  --transport tls|tcp|rdma   (tcp and rdma need --insecure)\n" \
	"  --rdma-provider NAME  libfabric provider (default: verbs, else tcp;ofi_rxm)\n"

/* Witness options of both agents, ids from 1200 up (see replication/witness.c). */
#define WITNESS_OPTIONS_LONG \
	{ "witness", required_argument, NULL, 1200 }, \
	{ "witness-key", required_argument, NULL, 1201 }, \
	{ "lease-ms", required_argument, NULL, 1202 }, \
	{ "witness-ca", required_argument, NULL, 1203 }

#define WITNESS_OPTIONS_HELP \
	"witness options (without them: heartbeat only, safe against crashes, not partitions):\n" \
	"  --witness etcd:HOST:PORT[,HOST:PORT...]   etcd v3 (HTTP gateway; https://HOST:PORT\n" \
	"                        for TLS): only the side owning the key runs the guest and\n" \
	"                        releases output; a takeover must win the key first\n" \
	"  --witness-key NAME    the key, the same on both sides (default understudy/GUEST)\n" \
	"  --lease-ms N          lease TTL, whole seconds (default 1000)\n" \
	"  --witness-ca FILE     CA of an https:// etcd\n"

struct witness_options {
	struct repl_witness_opts o;   /* o.endpoints NULL: no witness */
	char key[REPL_WITNESS_KEY_MAX];
};

/* ---- shared option parsing (options.c) ----------------------------------- */

void cli_witness_options_init(struct witness_options *w);
/* One witness option (ids 1200..); 0 or 2 after printing why. */
int cli_parse_witness_option(struct witness_options *w, int opt, const char *arg);
/* Completes the witness options (default key from guest, may be ""); 0 or 2. */
int cli_witness_options_check(struct witness_options *w, const char *guest);

/* Replication ports not assigned by hand: a --listen or --peer that gives
 * a HOST without a port takes port --port-base + --index (config keys
 * port-base, index): the VMs of a host numbered 0, 1, 2... as DRBD
 * resources are given 7788, 7789, ... An explicit HOST:PORT wins. */
#define CLI_PORT_BASE 7800
#define CLI_PORTS_LONG \
	{ "port-base", required_argument, NULL, 1410 }, \
	{ "index", required_argument, NULL, 1411 }
#define CLI_PORTS_HELP \
	"  --index N             the VM's number on its hosts (0..65535): a --listen or --peer\n" \
	"                        of a HOST without :PORT means port --port-base + N\n" \
	"  --port-base BASE      the first such port (default 7800)\n"
struct cli_ports {
	unsigned base;
	unsigned index;
	bool index_given;
	char addr[300];               /* HOST:PORT once derived */
};
void cli_ports_init(struct cli_ports *p);
/* --port-base or --index (ids 1410, 1411): 0, or 2 after printing why. */
int cli_parse_ports_option(struct cli_ports *p, int opt, const char *arg);
/* --listen/--peer's value: HOST:PORT as cli_check_host_port, or a HOST
 * alone ("name", "10.0.0.2", "[fe80::1]"), completed by cli_ports_resolve. */
int cli_check_host_maybe_port(const char *flag, const char *arg);
/* *addr given as a HOST alone becomes HOST:BASE+INDEX (in p->addr); 2
 * after printing why when there is no --index or the sum is over 65535. */
int cli_ports_resolve(struct cli_ports *p, const char *flag, const char **addr);

/* A HOST:PORT value of flag (--peer, --listen), checked with net's one
 * parser (net_parse_host_port: port 1..65535, never 0 from the command
 * line): 0, or 2 after printing why. --console is checked by
 * cli_parse_option(). */
int cli_check_host_port(const char *flag, const char *arg);

void cli_vm_options_init(struct vm_options *o);
/* Checks the VM options are complete (a --kernel's files too: the machine's
 * guest becomes MACHINE_LINUX_GUEST); 0 or 2 after printing why. */
int cli_vm_options_check(struct vm_options *o);
/* 2, with a message, when path cannot be opened for reading and writing. */
int cli_disk_check(const char *cmd, const char *path);
/* Checks the link options fit together, and the TLS files as the side of
 * that role (server: the secondary) will use them; 0 or 2 after printing
 * why. */
int cli_net_options_check(struct net_config *n, bool server);
/* One VM option, link option (net may be NULL when the subcommand has none)
 * or getopt's '?'; 0, or 2 after printing why. */
int cli_parse_option(int opt, const char *arg, struct vm_options *vo, struct net_config *net);
/* 0 when getopt consumed every argument, else 2 after saying which is extra. */
int cli_check_no_more_args(const char *cmd, int argc, char **argv);
/* Parses "--net tap:NAME[,mac=MAC]" into cfg (nnets, net_tap, net_mac: zero
 * when no mac= is given); 0 or 2 after printing why. */
int cli_parse_net(struct machine_config *cfg, const char *arg);
/* Parses "--flag N" milliseconds; 0 or 2 after printing why. */
int cli_parse_ms(const char *flag, const char *arg, unsigned min, unsigned *out);
/* Parses "--flag N", N in min..max of unit (named in the complaint: "MiB/s",
 * "seconds"); 0 or 2 after printing why. */
int cli_parse_count(const char *flag, const char *arg, const char *unit, unsigned min,
		    unsigned max, unsigned *out);
/* 2, with a message naming flag, when path cannot be opened for reading
 * (--tls-cert, --witness-ca...): found at parsing, not once a VM runs. */
int cli_check_readable(const char *flag, const char *path);
/* 2, with a message, when arg is not a --console spec (stdio, tcp:HOST:PORT). */
int cli_check_console(const char *arg);
/* 2, with a message naming flag, when path cannot name a unix socket. */
int cli_check_control(const char *flag, const char *path);
void cli_print_guests(FILE *f);

/* ---- --config FILE (config.c) ------------------------------------------- */

/* One command-line word made from a line of a config file. */
struct cli_config_word {
	char *text;                   /* "--key=value" or "--flag", owned */
	const char *file;
	unsigned line;
	const struct option *opt;     /* its entry in the command's longopts */
};

struct cli_config {
	const char *file;             /* the first --config FILE, or NULL */
	int argc;                     /* the argv the command parses instead */
	char **argv;
	struct cli_config_word *words;
	size_t nwords, cap;
};

void cli_config_fini(struct cli_config *cf);
/* Frees the words when the command returns, whichever way it does: optarg
 * values point into them until then. */
#define CLI_CONFIG_AUTO __attribute__((cleanup(cli_config_fini)))

/* Expands every --config FILE of *argv (before "--") into the options of
 * longopts, before the command line's own so that these win; a key the
 * command line also gives is left out. *argc and *argv then describe the
 * words to parse (untouched without --config). 0, or 2 after printing why,
 * naming FILE:LINE for an unknown key or a value that is not a line. */
int cli_config_apply(struct cli_config *cf, int *argc, char ***argv, const char *shortopts,
		     const struct option *longopts) __attribute__((warn_unused_result));
/* For the getopt loop's error path, once the option's own parser said
 * what is wrong: when the word getopt_long just consumed (argv[next - 1],
 * next being optind) came from a file, names its file and line. Returns 2. */
int cli_config_blame(const struct cli_config *cf, char **argv, int next);

/* ---- the VM's name and the control sockets of this host (name.c) ---------- */

#define CLI_NAME_MAX 64
#define CLI_RUN_DIR "/run/understudy"
/* getopt_long entry of --name, the same id in every command. */
#define CLI_NAME_OPTION 1400
#define CLI_NAME_LONG { "name", required_argument, NULL, CLI_NAME_OPTION }
#define CLI_NAME_HELP \
	"  --name NAME           the VM's name (A-Z a-z 0-9 . _ -, 1..63, not starting with '.'):\n" \
	"                        in log lines, status, metrics (vm=\"NAME\"), hooks (UNDERSTUDY_VM),\n" \
	"                        the default witness key and control socket; default: the config\n" \
	"                        file's name without its extension, else the guest or kernel\n"

struct cli_name {
	char name[CLI_NAME_MAX];      /* "": not known (a secondary told nothing) */
	bool given;                   /* by --name or the config key */
	char control[108];            /* the default control socket, once made */
};

bool cli_name_valid(const char *name);
/* --name NAME; 0 or 2 after printing why. */
int cli_name_set(struct cli_name *nm, const char *arg);
/* Without --name: the first config file's name less its extension (2 when
 * that is no name), else the kernel's file name, else the guest's kind
 * (cfg may be NULL); else the name stays "". 0 or 2 after printing why. */
int cli_name_resolve(struct cli_name *nm, const struct cli_config *cf,
		     const struct machine_config *cfg);
/* The directory of this host's control sockets, written into buf (returned):
 * $UNDERSTUDY_RUN_DIR, else (the default, *is_default) CLI_RUN_DIR for root,
 * else $XDG_RUNTIME_DIR/understudy, else /tmp/understudy-UID. */
const char *cli_run_dir(char *buf, size_t len, bool *is_default);
/* DIR/NAME.sock into out; 0 or 2 after printing why (too long). */
int cli_name_socket(const char *dir, const char *name, char *out, size_t len);
/* A client command's socket: control if given, else the one of --name in
 * the run directory, else NULL. */
const char *cli_name_client_control(struct cli_name *nm, const char *control);
/* An agent's socket: *control if given (its directory made 0700 when
 * missing; 2 after printing why when it cannot be), else, for a known name,
 * RUN_DIR/NAME.sock (the directory made 0700 if missing; a default one that
 * cannot be made leaves *control NULL after a warning: no control socket);
 * 2 after printing why when an agent already answers there (another VM of
 * the name) or a given UNDERSTUDY_RUN_DIR cannot be made. */
int cli_name_agent_control(const char *cmd, struct cli_name *nm, const char **control);

/* ---- the subcommands: argv[0] is the subcommand; returns the exit status -- */

int cli_cmd_run(int argc, char **argv);
int cli_cmd_takeover(int argc, char **argv);
int cli_cmd_switchover(int argc, char **argv);
/* After "switchover listen=...": polls the control socket (closed and opened
 * again by the standby the old primary becomes) until it answers as a
 * standby (0) or as a primary that did not switch (1), *status then its
 * status JSON (malloc'd); -ETIMEDOUT after timeout_ms; -EPROTO when a
 * status lacks its role or state, *status then saying so (malloc'd). */
int cli_switchover_outcome(const char *control, unsigned timeout_ms, char **status);
/* understudy drill switchover (cli/drill_switch.c) and the report keeper it
 * shares with the other kinds (cli/drill.c). */
struct json_object;
int cli_drill_switchover(int argc, char **argv);
/* understudy drill local (cli/drill_local.c). */
int cli_drill_local(int argc, char **argv);
int cli_drill_keep_report(const char *dir, struct json_object *rep);
int cli_cmd_protect(int argc, char **argv);
int cli_cmd_migrate(int argc, char **argv);
int cli_cmd_primary(int argc, char **argv);
int cli_cmd_secondary(int argc, char **argv);
int cli_cmd_status(int argc, char **argv);
/* The agent's `status json` at control, parsed into st (cli/status.c): 0,
 * or -errno (the socket's; -EPROTO: the answer is not one JSON object, e.g.
 * "error ..." from an agent that is not up yet, st->why says what it was).
 * st is to be finished (proto_json_reader_fini) whatever the result. A
 * request the agent let go unanswered (a reset) is asked again, up to
 * CLI_STATUS_RESETS times. */
#define CLI_STATUS_RESETS 5
int cli_status_read(const char *control, int timeout_ms, struct proto_json_reader *st)
	__attribute__((warn_unused_result));
/* Prints the document o as one line on stdout, flushed; drops o. */
void cli_print_json(struct json_object *o);
/* A progress line on a stream (cli/meter.c): on a terminal one line redrawn
 * in place, cut to the terminal's width (fields dropped from the right);
 * elsewhere one whole line per update. */
struct cli_meter {
	FILE *f;
	bool tty;       /* f is a terminal */
	int drawn;      /* columns of the line drawn in place now, 0 when none */
};
void cli_meter_init(struct cli_meter *m, FILE *f);
/* The columns of the terminal at fd: its size, else $COLUMNS, else 80. */
int cli_meter_width(int fd);
/* Draws the fields, separated by a space: on a terminal those from the
 * left that fit in width - 1 columns, over the line drawn before. */
void cli_meter_draw(struct cli_meter *m, const char *const *fields, int nfields);
/* Ends a line drawn in place, so that what follows starts a line. */
void cli_meter_end(struct cli_meter *m);
/* A line of text after the progress (a summary): on a terminal wrapped at
 * spaces to width - 1 columns. */
void cli_meter_say(struct cli_meter *m, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
int cli_cmd_snapshot(int argc, char **argv);
int cli_cmd_restore(int argc, char **argv);
int cli_cmd_drill(int argc, char **argv);
int cli_cmd_list(int argc, char **argv);

#endif
