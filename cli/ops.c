/* The operations options of the agents (see ops.h). */
#include "cli/ops.h"

#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

void cli_ops_options_init(struct ops_options *o)
{
	*o = (struct ops_options){ .on_event_timeout_ms = CLI_ON_EVENT_TIMEOUT_MS };
}

bool cli_is_ops_option(int opt)
{
	return opt >= CLI_OPS_FIRST && opt <= CLI_OPS_LAST;
}

int cli_parse_ops_option(const char *cmd, struct ops_options *o, int opt, const char *arg)
{
	switch (opt) {
	case 1300:
		o->metrics = arg;
		return cli_check_host_port("--metrics", arg);
	case 1301:
		if (!arg[0]) {
			fprintf(stderr, "understudy %s: --on-event: empty command\n", cmd);
			return 2;
		}
		o->on_event = arg;
		return 0;
	case 1302:
		o->timeout_given = true;
		return cli_parse_ms("--on-event-timeout-ms", arg, 10, &o->on_event_timeout_ms);
	case 1303:
		if (!strcmp(arg, "json")) {
			log_set_format(LOG_FORMAT_JSON);
		} else if (!strcmp(arg, "text")) {
			log_set_format(LOG_FORMAT_TEXT);
		} else {
			fprintf(stderr, "understudy %s: --log-format text|json, not '%s'\n", cmd, arg);
			return 2;
		}
		return 0;
	}
	fprintf(stderr, "understudy %s: unknown option id %d\n", cmd, opt);
	return 2;
}

int cli_ops_options_check(const char *cmd, const struct ops_options *o)
{
	if (o->timeout_given && !o->on_event) {
		fprintf(stderr, "understudy %s: --on-event-timeout-ms needs --on-event\n", cmd);
		return 2;
	}
	return 0;
}

int cli_ops_start(const struct ops_options *o, struct ev_loop *loop, const char *host_role,
		  const char *name, bool own, struct cli_ops *c)
{
	int r;

	*c = (struct cli_ops){ 0 };
	if (!log_has_role())
		log_set_role(host_role);   /* the agent sets the same later: lines before it have it too */
	if (o->metrics) {
		if (repl_metrics_new(host_role, name, &c->metrics) < 0)
			goto err;
		if (net_metrics_start(loop, o->metrics, repl_metrics_render, c->metrics, &c->http) < 0)
			goto err;
	}
	if (o->on_event) {
		r = repl_hooks_new(loop, o->on_event, o->on_event_timeout_ms, &c->hooks);
		if (r < 0) {
			log_error("ops", "--on-event: %s", strerror(-r));
			goto err;
		}
	}
	repl_metrics_set_hooks(c->metrics, c->hooks);
	snprintf(c->vm.name, sizeof(c->vm.name), "%s", name ? name : "");
	c->vm.own = own;
	c->ops = (struct repl_ops){ .metrics = c->metrics, .hooks = c->hooks, .vm = &c->vm };
	return 0;
err:
	cli_ops_stop(c);
	return 1;
}

void cli_ops_stop(struct cli_ops *c)
{
	repl_hooks_free(c->hooks);
	net_metrics_stop(c->http);
	repl_metrics_free(c->metrics);
	*c = (struct cli_ops){ 0 };
}
