/* understudy protect: attaches a secondary to a VM that already runs (under
 * `run`, `restore`, or a secondary that took over), through the VM's
 * control socket, and waits until the secondary holds its first checkpoint. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "net/control.h"

static const char protect_help[] =
	"usage: understudy protect --control PATH --peer HOST:PORT [--epoch-ms N] [--timeout-ms N]\n"
	"                          [--handshake-timeout-ms N] [--no-wait] [link options]\n"
	"Attaches the secondary waiting at --peer (understudy secondary) to the running VM\n"
	"whose control socket is PATH: initial sync while the guest runs, then protected\n"
	"epochs as `understudy primary` does. Waits until the secondary holds the first\n"
	"checkpoint (exit 0), or says why not (exit 1). A VM that lost its secondary can be\n"
	"protected again the same way; a secondary that took over is protected by a new one.\n\n"
	NET_OPTIONS_HELP;

/* Appends " key=value" to req; a relative path is made absolute (the agent
 * resolves it in its own directory). */
static int add(char *req, size_t len, const char *key, const char *value, bool path)
{
	char abs[PATH_MAX], cwd[PATH_MAX];
	size_t n = strlen(req);

	if (!value)
		return 0;
	if (strchr(value, ' ')) {
		fprintf(stderr, "understudy protect: %s '%s': no spaces\n", key, value);
		return 2;
	}
	if (path && value[0] != '/') {
		if (!getcwd(cwd, sizeof(cwd)) ||
		    snprintf(abs, sizeof(abs), "%s/%s", cwd, value) >= (int)sizeof(abs))
			return 2;
		value = abs;
	}
	if (snprintf(req + n, len - n, " %s=%s", key, value) >= (int)(len - n)) {
		fprintf(stderr, "understudy protect: request too long\n");
		return 2;
	}
	return 0;
}

/* Polls status until protected (0) or given up (1), at most timeout_ms. */
static int wait_protected(const char *control, unsigned timeout_ms)
{
	for (unsigned waited = 0; waited <= timeout_ms; waited += 50) {
		char *st = NULL, *line;
		int r;

		usleep(50000);
		if ((r = control_request(control, "status", 5000, &st)) < 0) {
			fprintf(stderr, "understudy protect: %s: %s\n", control, strerror(-r));
			return 1;
		}
		line = strstr(st, "\nstate ");
		if (line && !strncmp(line, "\nstate protected\n", 17)) {
			printf("ok protected\n");
			free(st);
			return 0;
		}
		if (line && (!strncmp(line, "\nstate unprotected\n", 19) ||
			     !strncmp(line, "\nstate done\n", 12))) {
			fprintf(stderr, "understudy protect: not protected:\n%s", st);
			free(st);
			return 1;
		}
		free(st);
	}
	fprintf(stderr, "understudy protect: not protected within %u ms\n", timeout_ms);
	return 1;
}

int cli_cmd_protect(int argc, char **argv)
{
	static const struct option longopts[] = {
		NET_OPTIONS_LONG,
		{ "control", required_argument, NULL, 'c' },
		{ "peer", required_argument, NULL, 'p' },
		{ "epoch-ms", required_argument, NULL, 'e' },
		{ "timeout-ms", required_argument, NULL, 't' },
		{ "handshake-timeout-ms", required_argument, NULL, 'H' },
		{ "no-wait", no_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct net_config net = { 0 };
	const char *control = NULL, *peer = NULL;
	unsigned epoch_ms = 25, timeout_ms = 500, hs_ms = 5000;
	bool wait = true;
	char req[4 * PATH_MAX], num[32], *reply = NULL;
	int opt, r;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		r = 0;
		switch (opt) {
		case 'h': fputs(protect_help, stdout); return 0;
		case 'c': control = optarg; break;
		case 'p': peer = optarg; r = cli_check_host_port("--peer", optarg); break;
		case 'e': r = cli_parse_ms("--epoch-ms", optarg, 1, &epoch_ms); break;
		case 't': r = cli_parse_ms("--timeout-ms", optarg, 10, &timeout_ms); break;
		case 'H': r = cli_parse_ms("--handshake-timeout-ms", optarg, 10, &hs_ms); break;
		case 'n': wait = false; break;
		default: r = cli_parse_option(opt, optarg, NULL, &net); break;
		}
		if (r)
			return 2;
	}
	if (cli_check_no_more_args("protect", argc, argv))
		return 2;
	if (!control || !peer) {
		fprintf(stderr, "understudy protect: --control PATH and --peer HOST:PORT are required\n");
		return 2;
	}
	if (cli_net_options_check(&net))
		return 2;
	snprintf(req, sizeof(req), "protect %s", peer);
	snprintf(num, sizeof(num), "%u", epoch_ms);
	r = add(req, sizeof(req), "epoch-ms", num, false);
	snprintf(num, sizeof(num), "%u", timeout_ms);
	r = r ? r : add(req, sizeof(req), "timeout-ms", num, false);
	snprintf(num, sizeof(num), "%u", hs_ms);
	r = r ? r : add(req, sizeof(req), "handshake-timeout-ms", num, false);
	r = r ? r : add(req, sizeof(req), "transport", net.transport == NET_TLS ? "tls" :
			net.transport == NET_TCP ? "tcp" : "rdma", false);
	r = r ? r : add(req, sizeof(req), "insecure", net.insecure ? "true" : NULL, false);
	r = r ? r : add(req, sizeof(req), "tls-cert", net.cert, true);
	r = r ? r : add(req, sizeof(req), "tls-key", net.key, true);
	r = r ? r : add(req, sizeof(req), "tls-ca", net.ca, true);
	r = r ? r : add(req, sizeof(req), "tls-peer-name", net.peer_name, false);
	if (r)
		return 2;
	r = control_request(control, req, 10000, &reply);
	if (r < 0) {
		fprintf(stderr, "understudy protect: %s: %s\n", control, strerror(-r));
		return 1;
	}
	if (strncmp(reply, "ok", 2)) {
		fprintf(stderr, "understudy protect: %s", reply);
		free(reply);
		return 1;
	}
	fputs(reply, stdout);
	free(reply);
	return wait ? wait_protected(control, hs_ms * 4 + 2000) : 0;
}
