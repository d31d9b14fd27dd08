/* Fuzz target: the parsers of command-line values: sizes (--mem),
 * HOST:PORT (net_parse_host_port, --peer/--listen), console specs
 * (--console), durations in milliseconds (cli_parse_ms) and the guest
 * spec (--guest), each through the function the command line calls.
 * The first input byte picks the parser (and its flags), the rest is the
 * argument, cut at the first NUL. Accepted: the parser returned 0; what it
 * accepted is then checked against the range it promises. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "machine/machine.h"
#include "net/console.h"
#include "net/net.h"
#include "tests/fuzz/fuzz.h"

static int host_port(const char *arg, bool port0_ok)
{
	char host[256];
	int port = -1, r = net_parse_host_port(arg, port0_ok, host, sizeof(host), &port);

	if (r == 0 && (port < (port0_ok ? 0 : 1) || port > 65535 ||
		       !memchr(host, 0, sizeof(host))))
		abort(); /* accepted a port or host out of range */
	return r;
}

static int size_arg(const char *arg)
{
	uint64_t bytes = 0;
	int r = machine_parse_size(arg, &bytes);

	if (r == 0)
		r = machine_check_mem(bytes);
	if (r == 0 && (bytes > MACHINE_MAX_MEM || bytes % (2u << 20)))
		abort(); /* --mem accepted an impossible size */
	return r;
}

static int ms_arg(const char *arg, unsigned min)
{
	unsigned ms = 0;
	int r = cli_parse_ms("--fuzz", arg, min, &ms);

	if (r == 0 && (ms < min || ms > 3600000))
		abort();
	return r ? -EINVAL : 0;
}

static int guest_arg(const char *arg)
{
	struct machine_config cfg;
	char err[256];

	memset(&cfg, 0, sizeof(cfg));
	if (machine_parse_guest(&cfg, arg, err, sizeof(err)) < 0)
		return -EINVAL;
	if (!memchr(cfg.guest, 0, sizeof(cfg.guest)) ||
	    !memchr(cfg.guest_args, 0, sizeof(cfg.guest_args)))
		abort();
	return 0;
}

int fuzz_verdict(const uint8_t *data, size_t size)
{
	char *arg;
	int r;

	if (size < 1)
		return -ENODATA;
	arg = malloc(size);
	if (!arg)
		return -ENOMEM;
	memcpy(arg, data + 1, size - 1);
	arg[size - 1] = 0;
	switch ((data[0] & 0x7f) % 6) {
	case 0: r = host_port(arg, false); break;
	case 1: r = host_port(arg, true); break;
	case 2: r = size_arg(arg); break;
	case 3: r = console_check_spec(arg); break;
	case 4: r = ms_arg(arg, data[0] & 0x80 ? 10 : 1); break;
	default: r = guest_arg(arg); break;
	}
	free(arg);
	return r < 0 ? r : r ? -EINVAL : 0;
}

FUZZ_LIBFUZZER_ENTRY
