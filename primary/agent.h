/* The agents' shared pieces: VM options and the subcommands. */
#ifndef US_AGENT_H
#define US_AGENT_H

#include <getopt.h>
#include <stdio.h>

#include "machine/machine.h"
#include "net/net.h"

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
	{ "append", required_argument, NULL, 1006 }

#define VM_OPTIONS_HELP \
	"VM options:\n" \
	"  --guest NAME[:ARGS]   built-in guest (counter, dirty:mb=N,rate_mb=N,report_ms=N)\n" \
	"  --mem SIZE            guest RAM, e.g. 64M, 1G (default 64M)\n" \
	"  --cpus N              vCPUs (default 1)\n" \
	"  --console stdio|tcp:HOST:PORT   guest serial console (default stdio)\n"

/* Transport options of the agents, ids from 1100 up. */
#define NET_OPTIONS_LONG \
	{ "tls-cert", required_argument, NULL, 1100 }, \
	{ "tls-key", required_argument, NULL, 1101 }, \
	{ "tls-ca", required_argument, NULL, 1102 }, \
	{ "insecure", no_argument, NULL, 1103 }, \
	{ "transport", required_argument, NULL, 1104 }, \
	{ "rdma-provider", required_argument, NULL, 1105 }

#define NET_OPTIONS_HELP \
	"link options (TLS 1.3 with mutual certificates is the default):\n" \
	"  --tls-cert F --tls-key F --tls-ca F   this host's certificate, key, and the CA of the peer\n" \
	"  --insecure            plaintext TCP (logged as a warning)\n" \
	"  --transport tls|tcp|rdma   (tcp and rdma need --insecure)\n" \
	"  --rdma-provider NAME  libfabric provider (default: verbs, else tcp;ofi_rxm)\n"

void vm_options_init(struct vm_options *o);
/* Handles one VM option; 0, or 2 after printing why the value is bad. */
int vm_options_parse(struct vm_options *o, int opt, const char *arg);
/* Checks the options are complete; 0 or 2 after printing why. */
int vm_options_check(const struct vm_options *o);
void agent_print_guests(FILE *f);
/* Handles one link option; 0 or 2 after printing why. */
int net_options_parse(struct net_config *n, int opt, const char *arg);
/* Checks the options fit together; 0 or 2 after printing why. */
int net_options_check(struct net_config *n);
/* A VM or link option of the agents (or getopt's '?'); 0 or 2 after printing why. */
int agent_option(int opt, const char *arg, struct vm_options *vo, struct net_config *net);
/* 0 when getopt consumed every argument, else 2 after saying which is extra. */
int agent_no_more_args(const char *cmd, int argc, char **argv);
/* Parses "--flag N" milliseconds; 0 or 2 after printing why. */
int parse_ms(const char *flag, const char *arg, unsigned min, unsigned *out);

struct repl_vm;
struct ev_loop;

/* The snapshots a running VM writes on request (primary/snapshot.c). */
struct agent_snapshots {
	struct machine *m;
	struct ckpt *ckpt;        /* reused buffers */
	uint64_t last_id;         /* id of the last snapshot written, 0 if none */
	uint64_t count;
};
void agent_snapshots_init(struct agent_snapshots *s, struct machine *m);
void agent_snapshots_fini(struct agent_snapshots *s);
/* Control request "snapshot full|incremental FILE" -> reply text (malloc'd). */
char *agent_snapshot_request(struct agent_snapshots *s, const char *request);

/* Runs vm (booted or restored) on loop until it stops or a signal, with the
 * control socket at control_path if set; frees vm. Returns the exit status. */
int agent_serve(struct ev_loop *loop, struct repl_vm *vm, const char *control_path);

int agent_cmd_run(int argc, char **argv);
int agent_cmd_primary(int argc, char **argv);
int agent_cmd_secondary(int argc, char **argv);
int agent_cmd_status(int argc, char **argv);
int agent_cmd_snapshot(int argc, char **argv);
int agent_cmd_restore(int argc, char **argv);

#endif
