/* The options every agent subcommand shares: the VM and the link. */
#include "cli/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include "guest/guest.h"
#include "net/console.h"
#include "net/etcd.h"
#include "net/tap.h"

void cli_vm_options_init(struct vm_options *o)
{
	memset(o, 0, sizeof(*o));
	o->cfg.mem_bytes = 64ull << 20;
	o->cfg.ncpus = 1;
	o->console = "stdio";
}

void cli_print_guests(FILE *f)
{
	for (const struct guest_image *g = guest_list(); g->name; g++)
		fprintf(f, "  %-10s %s\n", g->name, g->summary);
}

/* "tap:NAME[,mac=XX:XX:XX:XX:XX:XX]" */
int cli_parse_net(struct machine_config *cfg, const char *arg)
{
	const char *name = arg + 4, *comma;
	size_t n;
	unsigned b[6];
	char tail;

	if (strncmp(arg, "tap:", 4)) {
		fprintf(stderr, "understudy: --net '%s': use tap:NAME[,mac=MAC]\n", arg);
		return 2;
	}
	comma = strchr(name, ',');
	n = comma ? (size_t)(comma - name) : strlen(name);
	if (n == 0 || n >= sizeof(cfg->net_tap)) {
		fprintf(stderr, "understudy: --net '%s': need a tap name of 1..%zu characters\n", arg,
			sizeof(cfg->net_tap) - 1);
		return 2;
	}
	memcpy(cfg->net_tap, name, n);
	cfg->net_tap[n] = 0;
	if (net_tap_check_name(cfg->net_tap) < 0) {
		fprintf(stderr, "understudy: --net '%s': '%s' cannot name a network device\n", arg,
			cfg->net_tap);
		return 2;
	}
	memset(cfg->net_mac, 0, sizeof(cfg->net_mac));
	if (comma) {
		if (sscanf(comma, ",mac=%2x:%2x:%2x:%2x:%2x:%2x%c", &b[0], &b[1], &b[2], &b[3], &b[4],
			   &b[5], &tail) != 6 || strlen(comma) != 22 || (b[0] & 1) ||
		    !(b[0] | b[1] | b[2] | b[3] | b[4] | b[5])) {
			fprintf(stderr, "understudy: --net '%s': want mac=XX:XX:XX:XX:XX:XX, a unicast "
				"address\n", arg);
			return 2;
		}
		for (int i = 0; i < 6; i++)
			cfg->net_mac[i] = (uint8_t)b[i];
	}
	cfg->nnets = 1;
	return 0;
}

int cli_check_console(const char *arg)
{
	switch (console_check_spec(arg)) {
	case 0:
		return 0;
	case -ERANGE:
		fprintf(stderr, "understudy: --console '%s': bad port, need 1..65535\n", arg);
		return 2;
	default:
		fprintf(stderr, "understudy: --console '%s': use stdio or tcp:HOST:PORT\n", arg);
		return 2;
	}
}

static int parse_vm_option(struct vm_options *o, int opt, const char *arg)
{
	char err[256];
	char *end;
	long n;

	switch (opt) {
	case 1000:
		if (machine_parse_guest(&o->cfg, arg, err, sizeof(err)) < 0) {
			fprintf(stderr, "understudy: --guest: %s\n", err);
			return 2;
		}
		return 0;
	case 1001:
		if (machine_parse_size(arg, &o->cfg.mem_bytes) < 0 ||
		    machine_check_mem(o->cfg.mem_bytes) < 0) {
			fprintf(stderr, "understudy: --mem '%s': need a multiple of 2M between 8M and 60G\n", arg);
			return 2;
		}
		return 0;
	case 1002:
		n = strtol(arg, &end, 10);
		if (*end || n < 1 || n > KVM_MAX_VCPUS) {
			fprintf(stderr, "understudy: --cpus '%s': need 1..%d\n", arg, KVM_MAX_VCPUS);
			return 2;
		}
		o->cfg.ncpus = (int)n;
		return 0;
	case 1003:
		if (cli_check_console(arg))
			return 2;
		o->console = arg;
		return 0;
	case 1007:
		if (!*arg || strlen(arg) >= sizeof(o->cfg.disk)) {
			fprintf(stderr, "understudy: --disk '%s': need a file name of 1..%zu bytes\n", arg,
				sizeof(o->cfg.disk) - 1);
			return 2;
		}
		snprintf(o->cfg.disk, sizeof(o->cfg.disk), "%s", arg);
		o->cfg.ndisks = 1;
		return cli_disk_check("--disk", arg);
	case 1008:
		return cli_parse_net(&o->cfg, arg);
	case 1004:
	case 1005:
	case 1006: {
		static const char *const flag[] = { "--kernel", "--initrd", "--append" };
		char *dst = opt == 1004 ? o->cfg.kernel : opt == 1005 ? o->cfg.initrd : o->cfg.append;
		size_t cap = opt == 1006 ? sizeof(o->cfg.append) : sizeof(o->cfg.kernel);

		if ((opt != 1006 && !*arg) || strlen(arg) >= cap) {
			fprintf(stderr, "understudy: %s: need 1..%zu bytes\n", flag[opt - 1004], cap - 1);
			return 2;
		}
		memcpy(dst, arg, strlen(arg) + 1);
		return 0;
	}
	default:
		return 2;
	}
}

int cli_disk_check(const char *cmd, const char *path)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);

	if (fd < 0) {
		fprintf(stderr, "understudy: %s %s: %s (an existing image, writable)\n", cmd, path,
			strerror(errno));
		return 2;
	}
	close(fd);
	return 0;
}

/* A guest larger than what the host has free runs until it touches it
 * (RAM is allocated as the guest writes), then meets the OOM killer: said
 * at once, not refused (memory may be freed by then, or overcommitted on
 * purpose). A secondary refuses such a primary at its Hello instead. */
static void warn_host_memory(uint64_t mem_bytes)
{
	uint64_t avail = machine_host_mem_available();

	if (avail && mem_bytes > avail)
		fprintf(stderr, "understudy: warning: --mem %llu MiB is more than this host's "
			"available memory (MemAvailable %llu MiB): the guest may be killed when it "
			"uses it\n", (unsigned long long)(mem_bytes >> 20),
			(unsigned long long)(avail >> 20));
}

int cli_vm_options_check(struct vm_options *o)
{
	char err[512];

	warn_host_memory(o->cfg.mem_bytes);
	if (o->cfg.kernel[0] && o->cfg.guest[0]) {
		fprintf(stderr, "understudy: --guest and --kernel exclude each other: a VM runs a "
				"built-in guest or a Linux kernel\n");
		return 2;
	}
	if (!o->cfg.kernel[0] && (o->cfg.initrd[0] || o->cfg.append[0])) {
		fprintf(stderr, "understudy: --initrd and --append need --kernel\n");
		return 2;
	}
	if (o->cfg.kernel[0]) {
		if (machine_linux_check(&o->cfg, err, sizeof(err)) < 0) {
			fprintf(stderr, "understudy: %s\n", err);
			return 2;
		}
		snprintf(o->cfg.guest, sizeof(o->cfg.guest), "%s", MACHINE_LINUX_GUEST);
		return 0;
	}
	if (!o->cfg.guest[0]) {
		fprintf(stderr, "understudy: --guest or --kernel is required (built-in guests:");
		for (const struct guest_image *g = guest_list(); g->name; g++)
			fprintf(stderr, " %s", g->name);
		fprintf(stderr, ")\n");
		return 2;
	}
	return 0;
}

int cli_check_readable(const char *flag, const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		fprintf(stderr, "understudy: %s '%s': %s\n", flag, path, strerror(errno));
		return 2;
	}
	close(fd);
	return 0;
}

int cli_check_control(const char *flag, const char *path)
{
	if (!path[0] || strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		fprintf(stderr, "understudy: %s '%s': need a socket path of 1..%zu bytes\n", flag,
			path, sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
		return 2;
	}
	return 0;
}

static int parse_net_option(struct net_config *n, int opt, const char *arg)
{
	switch (opt) {
	case 1100: n->cert = arg; return cli_check_readable("--tls-cert", arg);
	case 1101: n->key = arg; return cli_check_readable("--tls-key", arg);
	case 1102: n->ca = arg; return cli_check_readable("--tls-ca", arg);
	case 1103: n->insecure = true; return 0;
	case 1104:
		if (!strcmp(arg, "tls"))
			n->transport = NET_TLS;
		else if (!strcmp(arg, "tcp"))
			n->transport = NET_TCP;
		else if (!strcmp(arg, "rdma"))
			n->transport = NET_RDMA;
		else {
			fprintf(stderr, "understudy: --transport '%s': use tls, tcp or rdma\n", arg);
			return 2;
		}
		return 0;
	case 1105: n->rdma_provider = arg; return 0;
	case 1106:
		if (!*arg) {
			fprintf(stderr, "understudy: --tls-peer-name: need a name\n");
			return 2;
		}
		n->peer_name = arg;
		return 0;
	default: return 2;
	}
}

int cli_net_options_check(struct net_config *n, bool server)
{
	char err[512];

	/* --insecure is plaintext TCP whatever certificates a config file
	 * gives (the command line wins, for flags too); said once. */
	if (n->insecure && n->transport == NET_TLS) {
		if (n->cert || n->key || n->ca)
			fprintf(stderr, "understudy: --insecure: the link is plaintext TCP; the "
				"configured --tls-cert, --tls-key and --tls-ca are not used\n");
		n->transport = NET_TCP;
		n->cert = n->key = n->ca = NULL;
	}
	if (n->transport == NET_TLS && (!n->cert || !n->key || !n->ca)) {
		fprintf(stderr, "understudy: the link is TLS by default: give --tls-cert, --tls-key and "
				"--tls-ca (or --insecure for plaintext)\n");
		return 2;
	}
	if (n->transport != NET_TLS && n->peer_name) {
		fprintf(stderr, "understudy: --tls-peer-name needs the TLS transport\n");
		return 2;
	}
	if (n->transport != NET_TLS && !n->insecure) {
		fprintf(stderr, "understudy: --transport tcp/rdma is not encrypted: add --insecure\n");
		return 2;
	}
	if (net_tls_check_files(n, server, err, sizeof(err))) {
		fprintf(stderr, "understudy: %s\n", err);
		return 2;
	}
	return 0;
}

int cli_parse_count(const char *flag, const char *arg, const char *unit, unsigned min,
		    unsigned max, unsigned *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(arg, &end, 10);
	if (*end || end == arg || arg[0] == '-' || errno || v < min || v > max) {
		fprintf(stderr, "understudy: %s '%s': need %s, %u..%u\n", flag, arg, unit, min, max);
		return 2;
	}
	*out = (unsigned)v;
	return 0;
}

int cli_parse_ms(const char *flag, const char *arg, unsigned min, unsigned *out)
{
	return cli_parse_count(flag, arg, "milliseconds", min, 3600000, out);
}

int cli_parse_option(int opt, const char *arg, struct vm_options *vo, struct net_config *net)
{
	if (opt == '?')
		return 2;
	if (opt >= 1100)
		return net ? parse_net_option(net, opt, arg) : 2;
	return parse_vm_option(vo, opt, arg);
}

int cli_check_no_more_args(const char *cmd, int argc, char **argv)
{
	if (optind >= argc)
		return 0;
	fprintf(stderr, "understudy %s: unexpected argument '%s'\n", cmd, argv[optind]);
	return 2;
}

int cli_check_host_port(const char *flag, const char *arg)
{
	char host[256];
	int port;

	switch (net_parse_host_port(arg, false, host, sizeof(host), &port)) {
	case 0:
		return 0;
	case -ERANGE:
		fprintf(stderr, "understudy: %s '%s': bad port, need 1..65535\n", flag, arg);
		return 2;
	default:
		fprintf(stderr, "understudy: %s '%s': need HOST:PORT\n", flag, arg);
		return 2;
	}
}

void cli_ports_init(struct cli_ports *p)
{
	*p = (struct cli_ports){ .base = CLI_PORT_BASE };
}

int cli_parse_ports_option(struct cli_ports *p, int opt, const char *arg)
{
	if (opt == 1410)
		return cli_parse_count("--port-base", arg, "a port", 1, 65535, &p->base);
	p->index_given = true;
	return cli_parse_count("--index", arg, "a number", 0, 65535, &p->index);
}

/* A HOST without a port: no ':' at all, or an IPv6 address in brackets. */
static bool host_alone(const char *arg)
{
	size_t n = strlen(arg);

	if (arg[0] == '[')
		return n > 2 && arg[n - 1] == ']' && !strchr(arg + 1, '[') && strchr(arg, ']') == arg + n - 1;
	return n && !strchr(arg, ':');
}

int cli_check_host_maybe_port(const char *flag, const char *arg)
{
	if (!host_alone(arg))
		return cli_check_host_port(flag, arg);
	if (strlen(arg) >= 256 || strspn(arg, " \t") == strlen(arg)) {
		fprintf(stderr, "understudy: %s '%s': need HOST:PORT, or HOST with --index\n", flag,
			arg);
		return 2;
	}
	return 0;
}

int cli_ports_resolve(struct cli_ports *p, const char *flag, const char **addr)
{
	unsigned long port = (unsigned long)p->base + p->index;

	if (!*addr || !host_alone(*addr))
		return 0;
	if (!p->index_given) {
		fprintf(stderr, "understudy: %s '%s': no port: give HOST:PORT, or --index N for port "
			"--port-base + N (%u + N)\n", flag, *addr, p->base);
		return 2;
	}
	if (port > 65535) {
		fprintf(stderr, "understudy: --port-base %u + --index %u = %lu: over 65535 (%s '%s')\n",
			p->base, p->index, port, flag, *addr);
		return 2;
	}
	snprintf(p->addr, sizeof(p->addr), "%s:%lu", *addr, port);
	log_info("cli", "%s %s: port %lu (--port-base %u + --index %u)", flag, p->addr, port,
		 p->base, p->index);
	*addr = p->addr;
	return 0;
}

void cli_witness_options_init(struct witness_options *w)
{
	memset(w, 0, sizeof(*w));
	w->o.lease_ms = 1000;
}

int cli_parse_witness_option(struct witness_options *w, int opt, const char *arg)
{
	switch (opt) {
	case 1200:
		if (strncmp(arg, "etcd:", 5) || !arg[5] || etcd_check_endpoints(arg + 5) < 0) {
			fprintf(stderr, "understudy: --witness '%s': use etcd:HOST:PORT[,HOST:PORT...]\n",
				arg);
			return 2;
		}
		w->o.endpoints = arg + 5;
		return 0;
	case 1201:
		if (!*arg || strlen(arg) >= sizeof(w->key) ||
		    strspn(arg, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/_.-") !=
		    strlen(arg)) {
			fprintf(stderr, "understudy: --witness-key '%s': need 1..%zu of A-Z a-z 0-9 / _ . -\n",
				arg, sizeof(w->key) - 1);
			return 2;
		}
		snprintf(w->key, sizeof(w->key), "%s", arg);
		return 0;
	case 1202:
		return cli_parse_ms("--lease-ms", arg, 1000, &w->o.lease_ms);
	case 1203:
		w->o.ca_file = arg;
		return cli_check_readable("--witness-ca", arg);
	default:
		return 2;
	}
}

int cli_witness_options_check(struct witness_options *w, const char *guest)
{
	if (!w->o.endpoints) {
		if (w->key[0] || w->o.ca_file) {
			fprintf(stderr, "understudy: --witness-key/--witness-ca need --witness\n");
			return 2;
		}
		return 0;
	}
	if (!w->key[0]) {
		if (!guest || !guest[0]) {
			fprintf(stderr, "understudy: --witness needs --witness-key NAME here (the same on "
					"both sides)\n");
			return 2;
		}
		snprintf(w->key, sizeof(w->key), "understudy/%.*s", (int)strcspn(guest, ":"), guest);
	}
	w->o.key = w->key;
	return 0;
}
