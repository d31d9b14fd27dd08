/* The control requests of a pair, apart from a VM: "switchover
 * listen=HOST:PORT" is checked as the command line's --listen is, on the
 * engine's own request handler (repl_switchover_request) and before any
 * switch is armed; the reply to an unknown request is an error; the fence
 * command's retries are bounded; the state a switchover leaves for the
 * standby this side becomes holds up as a copy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kmod/log.h"
#include "machine/machine.h"
#include "net/control.h"
#include "primary/primary.h"
#include "primary/primary_int.h"
#include "secondary/secondary_int.h"
#include "secondary/fence.h"

/* An engine in the state a switchover is asked in: protected, nothing
 * under way. The request handler reads nothing else before it arms one. */
static struct repl_primary *protected_engine(void)
{
	struct repl_primary *p = calloc(1, sizeof(*p));

	assert_non_null(p);
	p->state = P_PROTECTED;
	return p;
}

/* req is refused with a reply naming why; no switchover is armed. */
static void refused(const char *req, const char *why)
{
	struct repl_primary *p = protected_engine();
	char *reply = repl_switchover_request(p, req);

	assert_non_null(reply);
	if (strncmp(reply, "error ", 6) || !strstr(reply, why))
		fail_msg("'%s' answered '%s', want an error naming '%s'", req, reply, why);
	assert_false(p->switching_over);
	assert_false(p->ep.hot_off);
	free(reply);
	free(p);
}

static void switchover_listen_checked_like_the_cli(void **state)
{
	(void)state;
	refused("switchover listen=127.0.0.1:0", "bad port, need 1..65535");
	refused("switchover listen=127.0.0.1:65536", "bad port");
	refused("switchover listen=127.0.0.1:7x", "bad port");
	refused("switchover listen=127.0.0.1:", "bad port");
	refused("switchover listen=localhost", "need HOST:PORT");
	refused("switchover listen=", "usage: switchover listen=HOST:PORT");
	refused("switchover listen=127.0.0.1:7000 extra", "usage: switchover listen=HOST:PORT");
	refused("switchover", "usage: switchover listen=HOST:PORT");
}

/* The same handler arms a switchover for a good address (the refusals
 * above are about the address, not about the engine). */
static void switchover_good_listen_armed(void **state)
{
	struct repl_primary *p = protected_engine();
	char *reply = repl_switchover_request(p, "switchover listen=[::1]:7000");

	(void)state;
	assert_non_null(reply);
	assert_string_equal(reply, "ok switching over: standby at [::1]:7000\n");
	assert_true(p->switching_over);
	assert_string_equal(p->switch_listen, "[::1]:7000");
	free(reply);
	free(p);
}

static void unknown_request_is_an_error(void **state)
{
	char *r = control_reply_unknown("bogus", "status, cancel");
	char long_req[200];

	(void)state;
	assert_non_null(r);
	assert_string_equal(r, "error unknown request 'bogus' (this agent knows: status, cancel)\n");
	free(r);
	r = control_reply_unknown("a\tb\x7f", "status");
	assert_string_equal(r, "error unknown request 'a?b?' (this agent knows: status)\n");
	free(r);
	memset(long_req, 'x', sizeof(long_req) - 1);
	long_req[sizeof(long_req) - 1] = 0;
	r = control_reply_unknown(long_req, "status");
	assert_non_null(strstr(r, "xxx...' ("));
	assert_true(strlen(r) < CONTROL_SHOWN_MAX + 80);
	free(r);
}

/* 1 s, doubling, never more than 30 s: bounded whatever the count. */
static void fence_retry_backoff_bounded(void **state)
{
	(void)state;
	assert_int_equal(repl_fence_retry_ms(1), 1000);
	assert_int_equal(repl_fence_retry_ms(2), 2000);
	assert_int_equal(repl_fence_retry_ms(3), 4000);
	assert_int_equal(repl_fence_retry_ms(5), 16000);
	assert_int_equal(repl_fence_retry_ms(6), REPL_FENCE_RETRY_MAX_MS);
	assert_int_equal(repl_fence_retry_ms(REPL_FENCE_RETRIES_MAX), REPL_FENCE_RETRY_MAX_MS);
	assert_int_equal(repl_fence_retry_ms(~0u), REPL_FENCE_RETRY_MAX_MS);
}

/* host/serve.c copies the switch state out of the VM it frees before the
 * standby starts: the standby's options must point into the copy, never
 * into the original (with TLS they once did, read after the free). */
static void switch_state_holds_as_a_copy(void **state)
{
	struct repl_primary_opts po = { 0 };
	struct repl_secondary_opts so;
	struct machine m = { 0 };
	struct repl_vm vm = { .m = &m };
	struct repl_primary *p = protected_engine();
	struct repl_switch *orig = calloc(1, sizeof(*orig)), copy;
	const char *want[5] = { "/etc/u/node.pem", "/etc/u/node.key", "/etc/u/ca.pem", "node2", "tcp" };

	(void)state;
	assert_non_null(orig);
	po.net.transport = NET_TLS;
	po.net.cert = want[0], po.net.key = want[1], po.net.ca = want[2];
	po.net.peer_name = want[3], po.net.rdma_provider = want[4];
	p->o = &po;
	p->vm = &vm;
	p->switched = true;
	p->final_epoch = 42;
	assert_true(repl_primary_switched(p, orig));
	copy = *orig;
	memset(orig, 0x5a, sizeof(*orig));   /* as freed and reused */
	repl_switch_secondary_opts(&copy, "/run/u/vm.sock", &so);
	const char *got[5] = { so.net.cert, so.net.key, so.net.ca, so.net.peer_name,
			       so.net.rdma_provider };
	for (int i = 0; i < 5; i++) {
		assert_non_null(got[i]);
		assert_string_equal(got[i], want[i]);
		assert_true((const char *)got[i] >= (const char *)&copy &&
			    (const char *)got[i] < (const char *)(&copy + 1));
	}
	assert_int_equal(so.net.transport, NET_TLS);
	assert_int_equal(copy.epoch, 42);
	/* an option not given stays not given */
	po.net.peer_name = NULL;
	assert_true(repl_primary_switched(p, orig));
	repl_switch_secondary_opts(orig, NULL, &so);
	assert_null(so.net.peer_name);
	assert_string_equal(so.net.cert, want[0]);
	free(orig);
	free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(switchover_listen_checked_like_the_cli),
		cmocka_unit_test(switchover_good_listen_armed),
		cmocka_unit_test(unknown_request_is_an_error),
		cmocka_unit_test(fence_retry_backoff_bounded),
		cmocka_unit_test(switch_state_holds_as_a_copy),
	};

	log_set_level(LOG_ERROR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
