/* cli: the operations options of the agents (primary, secondary, run,
 * restore): Prometheus metrics, event hooks, the log format. Each agent
 * command puts OPS_OPTIONS_LONG in its option table, hands ids 1300..1399
 * to cli_parse_ops_option() and brackets its run with cli_ops_start() and
 * cli_ops_stop(). */
#ifndef US_CLI_OPS_H
#define US_CLI_OPS_H

#include <ev.h>
#include <stdbool.h>

#include "net/metrics.h"
#include "replication/hooks.h"
#include "replication/metrics.h"

#define CLI_OPS_FIRST 1300
#define CLI_OPS_LAST 1399
#define CLI_ON_EVENT_TIMEOUT_MS 30000

/* getopt_long entries of the operations options, ids from 1300 up. */
#define OPS_OPTIONS_LONG \
	{ "metrics", required_argument, NULL, 1300 }, \
	{ "on-event", required_argument, NULL, 1301 }, \
	{ "on-event-timeout-ms", required_argument, NULL, 1302 }, \
	{ "log-format", required_argument, NULL, 1303 }

#define OPS_OPTIONS_HELP \
	"operations options:\n" \
	"  --metrics HOST:PORT   serve Prometheus metrics at http://HOST:PORT/metrics\n" \
	"  --on-event CMD        run CMD (by /bin/sh) on each event: protected, unprotected,\n" \
	"                        takeover, fenced, switchover, migrated, drill-pass, drill-fail;\n" \
	"                        UNDERSTUDY_EVENT, _ROLE, _EPOCH, _PEER, _VM (the name), _GUEST,\n" \
	"                        _REASON, _TIME in its environment; never waited for, failures\n" \
	"                        are logged\n" \
	"  --on-event-timeout-ms N   kill a hook still running after N ms (default 30000)\n" \
	"  --log-format text|json    json: one object per line on stderr (default text)\n"

struct ops_options {
	const char *metrics;           /* HOST:PORT, or NULL */
	const char *on_event;          /* or NULL */
	unsigned on_event_timeout_ms;
	bool timeout_given;
};

/* What runs while the agent runs. */
struct cli_ops {
	struct repl_metrics *metrics;
	struct net_metrics *http;
	struct repl_hooks *hooks;
	struct repl_name vm;           /* the VM's name: ops.vm points here */
	struct repl_ops ops;           /* what the engines get (opts->ops) */
};

void cli_ops_options_init(struct ops_options *o);
/* True for the ids of OPS_OPTIONS_LONG. */
bool cli_is_ops_option(int opt);
/* One operations option (--log-format takes effect at once); 0 or 2 after
 * printing why. */
int cli_parse_ops_option(const char *cmd, struct ops_options *o, int opt, const char *arg);
/* Checks they fit together; 0 or 2 after printing why. */
int cli_ops_options_check(const char *cmd, const struct ops_options *o);
/* Starts the metrics server and the hooks on loop (host_role: "primary" or
 * "secondary"; name: the VM's, copied into c->vm, "" when not known; own:
 * the operator chose it, see struct repl_name); 0, or 1 (the exit status)
 * after logging why. c stays where it is while the agent runs. */
int cli_ops_start(const struct ops_options *o, struct ev_loop *loop, const char *host_role,
		  const char *name, bool own, struct cli_ops *c);
void cli_ops_stop(struct cli_ops *c);

struct machine_config;
/* Boots a fresh machine of cfg and serves it (host_serve, with the
 * operations options) until it ends, and again after each reboot of the
 * guest (run; restore's reboots). The exit status. */
int cli_boot_serve(struct ev_loop *loop, const struct machine_config *cfg, const char *console,
		   const char *control, const struct ops_options *ops, const char *name,
		   const char *cmd);

#endif
