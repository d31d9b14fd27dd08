/* replication/fence.c: the fence command of the secondary, run for real
 * through /bin/sh.
 *  - exit 0 is the only success; exit 3, exit 127 (not found) and death by
 *    a signal are failures whose `why` carries the status and the last
 *    line of the output;
 *  - a command past its deadline returns -ETIMEDOUT within deadline +
 *    ~1.2 s, and nothing of its process group is left afterwards: not the
 *    shell, not a `sleep 30 &` grandchild, not a group that ignores
 *    SIGTERM (SIGKILL after the grace), not one that closed its stdout;
 *  - the deadline is on the exit, not on the pipe: a command that exits 0
 *    while a child keeps its stdout open returns at once (the child is
 *    killed);
 *  - the peer's identity is in the environment, overriding the agent's;
 *  - the child has only fds 0, 1, 2, stdin /dev/null, its own group;
 *  - output far larger than what is kept does not block the command. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cmocka.h>

#include "kmod/log.h"
#include "secondary/fence.h"

static char dir[64];

static const struct repl_fence_peer peer = {
	.peer_addr = "10.1.2.3:7000", .vm_name = "web-1", .epoch = 42,
	.reason = "primary silent for 600 ms",
};

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/test_fence.XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[128];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* printf into a command string, with every "@" replaced by the temp dir. */
static void mkcmd(char *out, size_t len, const char *fmt, ...)
{
	char tmp[1024];
	size_t o = 0;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	for (const char *p = tmp; *p && o + 1 < len; p++) {
		if (*p != '@') {
			out[o++] = *p;
			continue;
		}
		o += (size_t)snprintf(out + o, len - o, "%s", dir);
		if (o >= len)
			o = len - 1;
	}
	out[o] = 0;
}

static void read_text(const char *name, char *out, size_t len)
{
	char path[128];
	size_t n;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "r");
	if (!f)
		fail_msg("the command did not write %s", path);
	n = fread(out, 1, len - 1, f);
	out[n] = 0;
	fclose(f);
}

static pid_t read_pid(const char *name)
{
	char text[32];
	long v;

	read_text(name, text, sizeof(text));
	v = strtol(text, NULL, 10);
	assert_true(v > 1);
	return (pid_t)v;
}

/* Nothing of the group is left, not even a zombie: checked at once, since
 * repl_fence_run reaps all of it before returning. */
static void assert_group_gone(pid_t pgid)
{
	errno = 0;
	assert_int_equal(kill(-pgid, 0), -1);
	assert_int_equal(errno, ESRCH);
}

static void assert_pid_gone(pid_t pid)
{
	errno = 0;
	assert_int_equal(kill(pid, 0), -1);
	assert_int_equal(errno, ESRCH);
}

static double run_ms(const char *cmd, unsigned timeout_ms, const struct repl_fence_peer *p,
		     int *rc, char *why, size_t whylen)
{
	uint64_t t0 = now_ns();

	*rc = repl_fence_run(cmd, timeout_ms, p, why, whylen);
	return (now_ns() - t0) / 1e6;
}

/* ---- exit status ---------------------------------------------------------------- */

static void exit_zero_is_fenced(void **state)
{
	char why[256], cmd[512];
	int rc, subreaper = -1;
	double ms;

	(void)state;
	/* The shell leads its own group: field 5 of /proc/$$/stat is its pgrp. */
	mkcmd(cmd, sizeof(cmd), "read -r pid comm st ppid pgrp rest < /proc/$$/stat; "
	      "[ \"$pgrp\" = \"$$\" ] || { echo \"pgrp $pgrp, pid $$\"; exit 9; }; "
	      "echo 'Success: Powered OFF'");
	ms = run_ms(cmd, 5000, &peer, &rc, why, sizeof(why));
	assert_int_equal(rc, 0);
	assert_string_equal(why, "exit 0: Success: Powered OFF");
	/* This process is no child subreaper once it returns (it was none). */
	assert_int_equal(prctl(PR_GET_CHILD_SUBREAPER, &subreaper), 0);
	assert_int_equal(subreaper, 0);
	printf("fence: a command exiting 0 returned in %.1f ms\n", ms);
}

static void exit_three_fails_with_last_line(void **state)
{
	char why[256];
	int rc;

	(void)state;
	(void)run_ms("echo 'connecting to bmc-10.1.2.3'; "
		     "echo 'Failed: Unable to obtain correct plug status' >&2; exit 3",
		     5000, &peer, &rc, why, sizeof(why));
	assert_int_equal(rc, -EIO);
	assert_string_equal(why, "exit 3: Failed: Unable to obtain correct plug status");
}

static void not_found_fails(void **state)
{
	char why[256];
	int rc;

	(void)state;
	(void)run_ms("no-such-fence-agent-here --action=off", 5000, &peer, &rc, why, sizeof(why));
	assert_int_equal(rc, -EIO);
	assert_true(strncmp(why, "exit 127: ", 10) == 0);
	assert_non_null(strstr(why, "not found"));
}

static void killed_by_signal_fails(void **state)
{
	char why[256];
	int rc;

	(void)state;
	(void)run_ms("kill -9 $$", 5000, &peer, &rc, why, sizeof(why));
	assert_int_equal(rc, -EIO);
	assert_string_equal(why, "killed by signal 9");
}

/* With SIGCHLD ignored the kernel reaps the shell itself: its status is
 * unknown, which must not read as success. */
static void lost_status_is_no_success(void **state)
{
	char why[256];
	int rc;

	(void)state;
	assert_true(signal(SIGCHLD, SIG_IGN) != SIG_ERR);
	(void)run_ms("exit 0", 5000, &peer, &rc, why, sizeof(why));
	assert_true(signal(SIGCHLD, SIG_DFL) != SIG_ERR);
	assert_int_equal(rc, -ECHILD);
	assert_true(strncmp(why, "exit status lost", 16) == 0);
}

static void bad_arguments(void **state)
{
	char why[256] = "";

	(void)state;
	assert_int_equal(repl_fence_run(NULL, 1000, &peer, why, sizeof(why)), -EINVAL);
	assert_true(why[0]);
	assert_int_equal(repl_fence_run("", 1000, &peer, why, sizeof(why)), -EINVAL);
	assert_int_equal(repl_fence_run("exit 0", 0, &peer, why, sizeof(why)), -EINVAL);
	/* No peer and no why are allowed. */
	assert_int_equal(repl_fence_run("exit 0", 1000, NULL, NULL, 0), 0);
}

/* ---- deadline ------------------------------------------------------------------- */

#define DEADLINE_MS 300

static void overrun_kills_the_group(void **state)
{
	char why[256], cmd[512];
	int rc;
	double ms;

	(void)state;
	mkcmd(cmd, sizeof(cmd), "echo $$ > @/leader; sleep 30 & echo $! > @/grandchild; "
	      "echo 'waiting for the bmc'; sleep 30");
	ms = run_ms(cmd, DEADLINE_MS, &peer, &rc, why, sizeof(why));
	assert_int_equal(rc, -ETIMEDOUT);
	assert_string_equal(why, "no exit within 300 ms: waiting for the bmc");
	assert_true(ms >= DEADLINE_MS);
	assert_true(ms <= DEADLINE_MS + 1200);
	assert_group_gone(read_pid("leader"));
	assert_pid_gone(read_pid("grandchild"));
	printf("fence: a %u ms deadline overrun (SIGTERM obeyed) returned after %.1f ms\n",
	       DEADLINE_MS, ms);
}

/* The whole group ignores SIGTERM (ignored signals survive exec): only the
 * SIGKILL one grace later ends it. */
static void overrun_ignoring_sigterm_gets_sigkill(void **state)
{
	char why[256], cmd[512];
	int rc;
	double ms;

	(void)state;
	mkcmd(cmd, sizeof(cmd), "trap '' TERM; echo $$ > @/leader; "
	      "sleep 30 & echo $! > @/grandchild; while :; do sleep 1; done");
	ms = run_ms(cmd, DEADLINE_MS, &peer, &rc, why, sizeof(why));
	assert_int_equal(rc, -ETIMEDOUT);
	assert_true(ms >= DEADLINE_MS + REPL_FENCE_KILL_GRACE_MS);
	assert_true(ms <= DEADLINE_MS + REPL_FENCE_KILL_GRACE_MS + 500);
	assert_group_gone(read_pid("leader"));
	assert_pid_gone(read_pid("grandchild"));
	printf("fence: a %u ms deadline overrun ignoring SIGTERM returned after %.1f ms\n",
	       DEADLINE_MS, ms);
}

/* End of output is not the end of the command. */
static void closed_stdout_still_killed(void **state)
{
	char why[256], cmd[512];
	int rc;
	double ms;

	(void)state;
	mkcmd(cmd, sizeof(cmd), "echo $$ > @/leader; exec >&- 2>&-; sleep 30");
	ms = run_ms(cmd, DEADLINE_MS, &peer, &rc, why, sizeof(why));
	assert_int_equal(rc, -ETIMEDOUT);
	assert_true(ms >= DEADLINE_MS);
	assert_true(ms <= DEADLINE_MS + 1200);
	assert_group_gone(read_pid("leader"));
}

/* The exit is the end, not the pipe: a child holding stdout does not keep
 * the caller waiting, and is not left running. */
static void exit_with_child_holding_stdout(void **state)
{
	char why[256], cmd[512];
	int rc;
	double ms;

	(void)state;
	mkcmd(cmd, sizeof(cmd), "echo $$ > @/leader; sleep 30 & echo $! > @/grandchild; "
	      "echo 'Success: Powered OFF'; exit 0");
	ms = run_ms(cmd, 10000, &peer, &rc, why, sizeof(why));
	assert_int_equal(rc, 0);
	assert_string_equal(why, "exit 0: Success: Powered OFF");
	assert_true(ms < 2000);
	assert_group_gone(read_pid("leader"));
	assert_pid_gone(read_pid("grandchild"));
	printf("fence: exit 0 with a child holding stdout returned in %.1f ms\n", ms);
}

/* ---- environment, fds, output ---------------------------------------------------- */

static const char env_cmd[] =
	"printf '%s|%s|%s|%s|%s|%s|%s|%s|%s\\n' \"$UNDERSTUDY_PEER\" \"$UNDERSTUDY_PEER_HOST\" "
	"\"$UNDERSTUDY_PEER_PORT\" \"$UNDERSTUDY_VM\" \"$UNDERSTUDY_GUEST\" \"$UNDERSTUDY_EPOCH\" "
	"\"$UNDERSTUDY_REASON\" \"$UNDERSTUDY_ACTION\" \"$FENCE_TEST_MARK\" > @/env; "
	"env | grep -c '^UNDERSTUDY_VM=' >> @/env";

static void check_env(const struct repl_fence_peer *p, const char *expect)
{
	char why[256], cmd[1024], got[1024];
	int rc;

	mkcmd(cmd, sizeof(cmd), "%s", env_cmd);
	(void)run_ms(cmd, 5000, p, &rc, why, sizeof(why));
	assert_int_equal(rc, 0);
	read_text("env", got, sizeof(got));
	assert_string_equal(got, expect);
}

static void environment_names_the_peer(void **state)
{
	static const struct repl_fence_peer v6 = {
		.peer_addr = "[fd00::1]:7001", .vm_name = "db", .guest = "kv:ip=10.0.0.2/24,port=7",
		.epoch = 18446744073709551615ull,
		.reason = "link lost",
	};
	static const struct repl_fence_peer odd = {
		.peer_addr = "", .vm_name = "a\nb;$(reboot)", .epoch = 0, .reason = NULL,
	};

	(void)state;
	/* The agent's own variables pass; a stale one of ours is replaced. */
	assert_int_equal(setenv("FENCE_TEST_MARK", "kept", 1), 0);
	assert_int_equal(setenv("UNDERSTUDY_VM", "stale", 1), 0);
	check_env(&peer, "10.1.2.3:7000|10.1.2.3|7000|web-1||42|primary silent for 600 ms|off|kept\n"
		  "1\n");
	check_env(&v6, "[fd00::1]:7001|fd00::1|7001|db|kv|18446744073709551615|link lost|off|kept\n1\n");
	/* Control bytes never reach the environment; nothing is interpreted. */
	check_env(&odd, "|||a?b;$(reboot)||0||off|kept\n1\n");
	unsetenv("UNDERSTUDY_VM");
	unsetenv("FENCE_TEST_MARK");
}

static void only_std_fds_and_devnull_stdin(void **state)
{
	char why[256], cmd[512];
	int rc, leak;

	(void)state;
	leak = open("/dev/null", O_RDONLY);   /* not close-on-exec on purpose */
	assert_true(leak > 2);
	/* ls lists the fds of the waiting shell; no redirection on it, since
	 * dash keeps a saved copy of a redirected fd while the command runs. */
	mkcmd(cmd, sizeof(cmd), "[ \"$(readlink /proc/$$/fd/0)\" = /dev/null ] || exit 7; "
	      "ls -m /proc/$$/fd");
	(void)run_ms(cmd, 5000, &peer, &rc, why, sizeof(why));
	close(leak);
	assert_int_equal(rc, 0);
	assert_string_equal(why, "exit 0: 0, 1, 2");
}

/* 4 MiB through a pipe that holds 64 KiB: only a reader that keeps reading
 * lets it finish before the deadline. */
static void large_output_does_not_block(void **state)
{
	char why[256];
	int rc;
	double ms;

	(void)state;
	ms = run_ms("head -c 4194304 /dev/zero | tr '\\0' x; echo; echo >&2 'last line here'",
		    10000, &peer, &rc, why, sizeof(why));
	assert_int_equal(rc, 0);
	assert_string_equal(why, "exit 0: last line here");
	assert_true(ms < 8000);
	printf("fence: 4 MiB of output drained in %.1f ms\n", ms);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(exit_zero_is_fenced),
		cmocka_unit_test(exit_three_fails_with_last_line),
		cmocka_unit_test(not_found_fails),
		cmocka_unit_test(killed_by_signal_fails),
		cmocka_unit_test(lost_status_is_no_success),
		cmocka_unit_test(bad_arguments),
		cmocka_unit_test(overrun_kills_the_group),
		cmocka_unit_test(overrun_ignoring_sigterm_gets_sigkill),
		cmocka_unit_test(closed_stdout_still_killed),
		cmocka_unit_test(exit_with_child_holding_stdout),
		cmocka_unit_test(environment_names_the_peer),
		cmocka_unit_test(only_std_fds_and_devnull_stdin),
		cmocka_unit_test(large_output_does_not_block),
	};

	log_set_role("test");
	return cmocka_run_group_tests(tests, setup, teardown);
}
