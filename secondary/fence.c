/* The fence command (see fence.h): spawn, deadline, kill, reap.
 *
 * The deadline is on the exit of the shell, watched through a pidfd, never
 * on the end of its output: `agent & sleep 1; exit 0` or a grandchild that
 * keeps stdout open must not stretch it. The output pipe is read all along
 * (only its tail is kept) so that the command never blocks on a full pipe.
 *
 * The command is the leader of its own process group; signals go to the
 * whole group, and only while some member of it exists (the shell, not yet
 * reaped, or what it left behind): the group id is then still taken and
 * cannot belong to a recycled process.
 * This process is a child subreaper while the command runs: orphaned
 * grandchildren come back to us and are reaped here, which is how "nothing
 * of it left" can be checked (kill(-pgid, 0) fails with ESRCH) instead of
 * hoped for (PID 1 in a container does not always reap). */
#include "secondary/fence.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "net/net.h"
#include "net/proc.h"

#define TAG "fence"
/* Without a pidfd (kernel < 5.3) the exit is polled this often. */
#define EXIT_POLL_MS 10
/* How often a dying group is looked at. */
#define GROUP_POLL_MS 5

_Static_assert(NET_PROC_TAIL_MAX == REPL_FENCE_OUTPUT_MAX, "the kept output");

struct run {
	pid_t pid;               /* the shell, also the process group id */
	int pidfd;               /* -1: none, exit polled */
	int out;                 /* read end of stdout + stderr, -1 once at EOF */
	bool reaped;
	int status;              /* wait status of the shell, once reaped */
	struct net_proc_tail tail;
};

/* ---- output ------------------------------------------------------------------- */

/* Reads what the pipe holds now. At EOF or on an error the pipe is closed
 * (nobody holds its write end any more, or it cannot be read: either way
 * nothing blocks on it). */
static void drain(struct run *r)
{
	if (r->out >= 0 && net_proc_drain(r->out, &r->tail)) {
		close(r->out);
		r->out = -1;
	}
}

/* ---- environment ------------------------------------------------------------- */

/* This process's environment plus the primary's identity (net/proc.h). */
static int env_build(const struct repl_fence_peer *p, char ***out, size_t *first_ours)
{
	char host[256] = "", port[16] = "", epoch[24], guest[64];
	const char *addr = p->peer_addr ? p->peer_addr : "";
	int iport;

	if (addr[0] && net_parse_host_port(addr, false, host, sizeof(host), &iport) == 0)
		snprintf(port, sizeof(port), "%d", iport);
	else
		snprintf(host, sizeof(host), "%s", addr);   /* no port: the address is the host */
	snprintf(epoch, sizeof(epoch), "%" PRIu64, p->epoch);
	snprintf(guest, sizeof(guest), "%.*s", p->guest ? (int)strcspn(p->guest, ":") : 0,
		 p->guest ? p->guest : "");
	const struct net_proc_var vars[] = {
		{ "UNDERSTUDY_PEER", addr }, { "UNDERSTUDY_PEER_HOST", host },
		{ "UNDERSTUDY_PEER_PORT", port }, { "UNDERSTUDY_VM", p->vm_name },
		{ "UNDERSTUDY_GUEST", guest }, { "UNDERSTUDY_EPOCH", epoch }, { "UNDERSTUDY_REASON", p->reason },
		{ "UNDERSTUDY_ACTION", "off" },
	};
	return net_proc_env_build(vars, sizeof(vars) / sizeof(vars[0]), out, first_ours);
}

/* ---- exit and end of the group ---------------------------------------------- */

static int ms_until(uint64_t deadline_ns)
{
	uint64_t now = now_ns();

	if (now >= deadline_ns)
		return 0;
	return (int)((deadline_ns - now + 999999) / 1000000);
}

/* Waits, reading the output, until the shell has exited (left a zombie:
 * the group id stays taken) or the deadline passes. 0 when it exited,
 * -ETIMEDOUT, or -ECHILD when it can no longer be waited for. */
static int wait_exit(struct run *r, uint64_t deadline_ns)
{
	for (;;) {
		struct pollfd pfd[2];
		siginfo_t si = { 0 };
		int n = 0, ms;

		if (waitid(P_PID, (id_t)r->pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0) {
			if (errno == EINTR)
				continue;
			return -ECHILD;
		}
		if (si.si_pid == r->pid)
			return 0;
		ms = ms_until(deadline_ns);
		if (!ms)
			return -ETIMEDOUT;
		if (r->out >= 0)
			pfd[n++] = (struct pollfd){ .fd = r->out, .events = POLLIN };
		if (r->pidfd >= 0)
			pfd[n++] = (struct pollfd){ .fd = r->pidfd, .events = POLLIN };
		else if (ms > EXIT_POLL_MS)
			ms = EXIT_POLL_MS;
		if (poll(pfd, (nfds_t)n, ms) < 0 && errno != EINTR)
			return -errno;
		drain(r);
	}
}

/* Reaps whatever of the group has ended (the shell's status is kept). */
static void reap_group(struct run *r)
{
	int st;
	pid_t p;

	while ((p = waitpid(-r->pid, &st, WNOHANG)) > 0 || (p < 0 && errno == EINTR))
		if (p == r->pid) {
			r->reaped = true;
			r->status = st;
		}
}

/* True once no process of the group exists, reaping and reading as it goes;
 * false at the deadline. */
static bool group_gone(struct run *r, uint64_t deadline_ns)
{
	for (;;) {
		struct pollfd pfd = { .fd = r->out, .events = POLLIN };
		int ms;

		reap_group(r);
		if (kill(-r->pid, 0) < 0 && errno == ESRCH)
			return true;
		ms = ms_until(deadline_ns);
		if (!ms)
			return false;
		if (poll(&pfd, 1, ms < GROUP_POLL_MS ? ms : GROUP_POLL_MS) > 0)
			drain(r);
	}
}

static void kill_group(struct run *r, int sig)
{
	if (kill(-r->pid, sig) < 0 && errno != ESRCH)
		log_warn(TAG, "cannot signal the fence command's process group %d: %s", (int)r->pid,
			 strerror(errno));
}

/* The command overran: SIGTERM to all of it, SIGKILL after the grace to
 * whatever is left. The shell is reaped with the rest, never before the
 * group was signalled, so the group id cannot have been recycled. */
static void end_overrun(struct run *r)
{
	kill_group(r, SIGTERM);
	kill_group(r, SIGCONT);          /* a stopped process would not act on SIGTERM */
	if (group_gone(r, now_ns() + REPL_FENCE_KILL_GRACE_MS * 1000000ull))
		return;
	log_warn(TAG, "the fence command's process group %d is still there %u ms after SIGTERM: "
		 "SIGKILL", (int)r->pid, REPL_FENCE_KILL_GRACE_MS);
	kill_group(r, SIGKILL);
	if (!group_gone(r, now_ns() + REPL_FENCE_KILL_GRACE_MS * 1000000ull))
		log_error(TAG, "the fence command's process group %d survives SIGKILL "
			  "(uninterruptible sleep?)", (int)r->pid);
}

/* The shell exited: reap it; anything it left running in its group is
 * killed (a fence command is done when it exits). */
static void end_exited(struct run *r)
{
	while (!r->reaped) {
		if (waitpid(r->pid, &r->status, 0) == r->pid)
			r->reaped = true;
		else if (errno != EINTR)
			break;
	}
	drain(r);
	reap_group(r);                   /* orphans that ended already came back to us */
	if (kill(-r->pid, 0) < 0 && errno == ESRCH)
		return;
	log_warn(TAG, "the fence command exited but left processes in its group %d: SIGKILL",
		 (int)r->pid);
	kill_group(r, SIGKILL);
	if (!group_gone(r, now_ns() + REPL_FENCE_KILL_GRACE_MS * 1000000ull))
		log_error(TAG, "the fence command's process group %d survives SIGKILL "
			  "(uninterruptible sleep?)", (int)r->pid);
}

unsigned repl_fence_retry_ms(unsigned retry)
{
	unsigned ms = REPL_FENCE_RETRY_FIRST_MS;

	while (retry-- > 1 && ms < REPL_FENCE_RETRY_MAX_MS)
		ms *= 2;
	return ms < REPL_FENCE_RETRY_MAX_MS ? ms : REPL_FENCE_RETRY_MAX_MS;
}

/* ---- the run ------------------------------------------------------------------- */

#define WHY_MAX 400

/* The verdict: 0 or -errno, and `why` as fence.h says. */
static int verdict(struct run *r, int waited, unsigned timeout_ms, char why[WHY_MAX])
{
	char line[256], head[64];
	int rc;

	net_proc_tail_last_line(&r->tail, line, sizeof(line));
	if (waited == -ETIMEDOUT) {
		snprintf(head, sizeof(head), "no exit within %u ms", timeout_ms);
		rc = -ETIMEDOUT;
	} else if (waited < 0 && waited != -ECHILD) {
		snprintf(head, sizeof(head), "cannot wait for it (%s)", strerror(-waited));
		rc = waited;
	} else if (waited == -ECHILD || !r->reaped) {
		snprintf(head, sizeof(head), "exit status lost (SIGCHLD ignored or reaped elsewhere)");
		rc = -ECHILD;
	} else if (WIFEXITED(r->status)) {
		snprintf(head, sizeof(head), "exit %d", WEXITSTATUS(r->status));
		rc = WEXITSTATUS(r->status) == 0 ? 0 : -EIO;
	} else {
		snprintf(head, sizeof(head), "killed by signal %d",
			 WIFSIGNALED(r->status) ? WTERMSIG(r->status) : 0);
		rc = -EIO;
	}
	snprintf(why, WHY_MAX, "%s%s%s", head, line[0] ? ": " : "", line);
	return rc;
}

static void copy_field(char *dst, size_t len, const char *src)
{
	net_proc_printable(dst, len, src ? src : "", src ? strlen(src) : 0);
}

int repl_fence_run(const char *cmd, unsigned timeout_ms, const struct repl_fence_peer *peer,
		   char *why, size_t whylen)
{
	static const struct repl_fence_peer nobody = { 0 };
	char **env = NULL, addr[300], vm[128], reason[256], buf[WHY_MAX];
	int w = -1, rc, waited, old_subreaper = 0;
	uint64_t t0 = now_ns();
	size_t first_ours = 0;
	struct run *r;

	if (!peer)
		peer = &nobody;
	copy_field(addr, sizeof(addr),
		   peer->peer_addr && peer->peer_addr[0] ? peer->peer_addr : "(address unknown)");
	copy_field(vm, sizeof(vm), peer->vm_name);
	copy_field(reason, sizeof(reason), peer->reason);
	snprintf(buf, sizeof(buf), "no fence command or no deadline");
	rc = -EINVAL;
	if (!cmd || !cmd[0] || !timeout_ms)
		goto out;
	snprintf(buf, sizeof(buf), "out of memory");
	rc = -ENOMEM;
	r = calloc(1, sizeof(*r));
	if (!r)
		goto out;
	r->pidfd = r->out = -1;
	rc = env_build(peer, &env, &first_ours);
	if (rc < 0)
		goto err_run;
	rc = net_proc_pipe(&r->out, &w);
	if (rc < 0) {
		snprintf(buf, sizeof(buf), "cannot make a pipe: %s", strerror(-rc));
		goto err_env;
	}

	/* Orphans of the command come back to us while it runs (see the top). */
	if (prctl(PR_GET_CHILD_SUBREAPER, &old_subreaper) < 0 ||
	    prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
		log_warn(TAG, "cannot become a child subreaper (%s): what the fence command leaves "
			 "behind is reaped by PID 1", strerror(errno));
	log_info(TAG, "fencing the primary at %s (VM '%s', epoch %" PRIu64 ", %s): running '%s', "
		 "deadline %u ms", addr, vm, peer->epoch, reason[0] ? reason : "takeover", cmd,
		 timeout_ms);
	rc = net_proc_spawn(cmd, env, w, &r->pid);
	close(w);
	w = -1;
	if (rc < 0) {
		snprintf(buf, sizeof(buf), "cannot run /bin/sh: %s", strerror(-rc));
		goto err_subreaper;
	}
	r->pidfd = pidfd_open(r->pid, 0);   /* -1 on an old kernel: the exit is polled */

	waited = wait_exit(r, t0 + (uint64_t)timeout_ms * 1000000ull);
	if (waited == 0)
		end_exited(r);
	else if (waited == -ECHILD)      /* reaped by the kernel: only leftovers to see */
		(void)group_gone(r, now_ns() + REPL_FENCE_KILL_GRACE_MS * 1000000ull);
	else                             /* overrun, or we cannot wait: it must not run on */
		end_overrun(r);
	drain(r);
	rc = verdict(r, waited, timeout_ms, buf);
	if (r->tail.total > sizeof(r->tail.buf))
		log_info(TAG, "the fence command wrote %" PRIu64 " bytes; the last %zu were kept",
			 r->tail.total, sizeof(r->tail.buf));
	if (r->pidfd >= 0)
		close(r->pidfd);
err_subreaper:
	if (!old_subreaper)
		(void)prctl(PR_SET_CHILD_SUBREAPER, 0);
	if (w >= 0)
		close(w);
	if (r->out >= 0)
		close(r->out);
err_env:
	net_proc_env_free(env, first_ours);
err_run:
	free(r);
out:
	if (rc == 0)
		log_info(TAG, "the primary at %s is fenced: the command took %.0f ms (%s)", addr,
			 (now_ns() - t0) / 1e6, buf);
	else
		log_error(TAG, "fencing the primary at %s FAILED after %.0f ms: %s; it is not known "
			  "to be off", addr, (now_ns() - t0) / 1e6, buf);
	if (why && whylen)
		snprintf(why, whylen, "%s", buf);
	return rc;
}
