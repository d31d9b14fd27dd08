/* --on-event commands (see hooks.h): spawned with net/proc.c like the fence
 * command, but never waited for. The exit comes through a libev child
 * watcher: on the default loop libev reaps every child in its SIGCHLD
 * handler (waitpid(-1)), so a waitpid of our own would find nothing. The
 * process group is signalled only before the child watcher has fired: until
 * then the shell is not reaped and its group id cannot be recycled. */
#include "replication/hooks.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "net/proc.h"
#include "replication/replication_int.h"

#define TAG "hooks"

struct hook_run {
	struct repl_hooks *h;
	int slot;
	enum repl_event ev;
	pid_t pid;                 /* the shell, also its process group id */
	int out;                   /* read end of its stdout + stderr, -1 at EOF */
	uint64_t t0_ns;
	bool timed_out;            /* SIGTERM sent at the deadline */
	bool killed;               /* ...and SIGKILL after the grace */
	ev_child child_w;
	ev_io out_w;
	ev_timer deadline_w;
	struct net_proc_tail tail;
};

struct repl_hooks {
	struct ev_loop *loop;
	char *cmd;
	unsigned timeout_ms;
	uint64_t ended[REPL_HOOK_RESULTS];
	struct hook_run *run[REPL_HOOKS_MAX];
};

static const char *const event_names[REPL_EV_COUNT] = {
	"protected", "unprotected", "takeover", "fenced", "switchover", "migrated",
	"drill-pass", "drill-fail",
};

const char *repl_event_name(enum repl_event ev)
{
	return ev < REPL_EV_COUNT ? event_names[ev] : "unknown";
}

int repl_hooks_new(struct ev_loop *loop, const char *cmd, unsigned timeout_ms,
		   struct repl_hooks **out)
{
	struct repl_hooks *h;

	if (!cmd || !cmd[0] || !timeout_ms)
		return -EINVAL;
	if (!ev_is_default_loop(loop))
		return -ENOTSUP;      /* libev has child watchers on its default loop only */
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->cmd = strdup(cmd);
	if (!h->cmd) {
		free(h);
		return -ENOMEM;
	}
	h->loop = loop;
	h->timeout_ms = timeout_ms;
	*out = h;
	return 0;
}

/* Stops watching r (the process itself, if any, is left alone). */
static void run_free(struct hook_run *r)
{
	struct repl_hooks *h = r->h;

	ev_child_stop(h->loop, &r->child_w);
	ev_io_stop(h->loop, &r->out_w);
	ev_timer_stop(h->loop, &r->deadline_w);
	if (r->out >= 0)
		close(r->out);
	h->run[r->slot] = NULL;
	free(r);
}

void repl_hooks_counts(const struct repl_hooks *h, uint64_t out[REPL_HOOK_RESULTS])
{
	for (int i = 0; i < REPL_HOOK_RESULTS; i++)
		out[i] = h ? h->ended[i] : 0;
}

/* True when nothing of r's process group is left. The shell is reaped
 * here (the loop, whose child watcher would, no longer runs); what it left
 * in its group keeps the group id taken, so signalling the group stays
 * safe until kill(-pgid, 0) says it is empty. */
static bool group_gone(struct hook_run *r)
{
	int st;

	while (waitpid(r->pid, &st, WNOHANG) < 0 && errno == EINTR)
		;
	return kill(-r->pid, 0) < 0 && errno == ESRCH;
}

/* Waits until every group still running is gone, or until deadline_ns.
 * True when all are gone. */
static bool wait_groups(struct repl_hooks *h, uint64_t deadline_ns)
{
	for (;;) {
		bool left = false;

		for (int i = 0; i < REPL_HOOKS_MAX; i++)
			if (h->run[i] && !group_gone(h->run[i]))
				left = true;
		if (!left)
			return true;
		if (now_ns() >= deadline_ns)
			return false;
		usleep(10000);
	}
}

static void signal_groups(struct repl_hooks *h, int sig)
{
	for (int i = 0; i < REPL_HOOKS_MAX; i++) {
		struct hook_run *r = h->run[i];

		if (!r || group_gone(r))
			continue;
		log_warn(TAG, "the '%s' hook (pid %d) still runs as the agent ends: %s to its "
			 "process group", repl_event_name(r->ev), (int)r->pid,
			 sig == SIGTERM ? "SIGTERM" : "SIGKILL");
		(void)kill(-r->pid, sig);
		if (sig == SIGTERM)
			(void)kill(-r->pid, SIGCONT);
	}
}

/* Hooks end with their agent, as they would under systemd: a short grace
 * to finish (a hook for the agent's last event), then SIGTERM to each
 * group still there, then SIGKILL. */
void repl_hooks_free(struct repl_hooks *h)
{
	if (!h)
		return;
	if (!wait_groups(h, now_ns() + REPL_HOOKS_EXIT_GRACE_MS * 1000000ull)) {
		signal_groups(h, SIGTERM);
		if (!wait_groups(h, now_ns() + REPL_HOOKS_KILL_GRACE_MS * 1000000ull)) {
			signal_groups(h, SIGKILL);
			(void)wait_groups(h, now_ns() + REPL_HOOKS_KILL_GRACE_MS * 1000000ull);
		}
	}
	for (int i = 0; i < REPL_HOOKS_MAX; i++)
		if (h->run[i])
			run_free(h->run[i]);
	free(h->cmd);
	free(h);
}

static void drain(struct hook_run *r)
{
	if (r->out >= 0 && net_proc_drain(r->out, &r->tail)) {
		ev_io_stop(r->h->loop, &r->out_w);   /* EOF (or unreadable): done with it */
		close(r->out);
		r->out = -1;
	}
}

static void on_output(struct ev_loop *loop, ev_io *w, int revents)
{
	(void)loop;
	(void)revents;
	drain(w->data);
}

static void on_exit_status(struct ev_loop *loop, ev_child *w, int revents)
{
	struct hook_run *r = w->data;
	int st = w->rstatus;
	double ms = (now_ns() - r->t0_ns) / 1e6;
	char line[256];

	(void)loop;
	(void)revents;
	drain(r);
	net_proc_tail_last_line(&r->tail, line, sizeof(line));
	if (r->timed_out) {
		log_warn(TAG, "the '%s' hook was KILLED after %.0f ms: no exit within %u ms (%s)%s%s",
			 repl_event_name(r->ev), ms, r->h->timeout_ms,
			 r->killed ? "SIGTERM, then SIGKILL" : "SIGTERM", line[0] ? ": " : "", line);
		r->h->ended[REPL_HOOK_TIMEOUT]++;
	} else if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
		log_info(TAG, "the '%s' hook exited 0 after %.0f ms", repl_event_name(r->ev), ms);
		r->h->ended[REPL_HOOK_OK]++;
	} else {
		char head[48];

		if (WIFEXITED(st))
			snprintf(head, sizeof(head), "exit %d", WEXITSTATUS(st));
		else
			snprintf(head, sizeof(head), "killed by signal %d",
				 WIFSIGNALED(st) ? WTERMSIG(st) : 0);
		log_warn(TAG, "the '%s' hook FAILED after %.0f ms: %s%s%s", repl_event_name(r->ev), ms,
			 head, line[0] ? ": " : "", line);
		r->h->ended[REPL_HOOK_FAILED]++;
	}
	run_free(r);
}

/* Still running at its deadline: SIGTERM to the group, then SIGKILL after
 * the grace. The shell is not reaped yet (the child watcher has not fired),
 * so the group id is still its own. */
static void on_deadline(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct hook_run *r = w->data;
	int sig = r->timed_out ? SIGKILL : SIGTERM;

	(void)revents;
	if (!r->timed_out)
		log_warn(TAG, "the '%s' hook (pid %d) still runs after %u ms: SIGTERM to its process "
			 "group", repl_event_name(r->ev), (int)r->pid, r->h->timeout_ms);
	else
		log_warn(TAG, "the '%s' hook (pid %d) still runs %u ms after SIGTERM: SIGKILL",
			 repl_event_name(r->ev), (int)r->pid, REPL_HOOKS_KILL_GRACE_MS);
	if (kill(-r->pid, sig) < 0 && errno != ESRCH)
		log_warn(TAG, "cannot signal the hook's process group %d: %s", (int)r->pid,
			 strerror(errno));
	if (sig == SIGTERM)
		(void)kill(-r->pid, SIGCONT);   /* a stopped process would not act on SIGTERM */
	r->killed = r->timed_out;
	r->timed_out = true;
	if (!r->killed) {
		ev_timer_set(w, REPL_HOOKS_KILL_GRACE_MS / 1e3, 0.);
		ev_timer_start(loop, w);
	}
}

static void iso_time(char *out, size_t len)
{
	struct timespec ts;
	struct tm tm;
	char s[32];

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(s, sizeof(s), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out, len, "%s.%03ldZ", s, ts.tv_nsec / 1000000);
}

static int start(struct repl_hooks *h, struct hook_run *r, const struct repl_event_info *info)
{
	char epoch[24], when[64], guest[64], **env = NULL;
	size_t first_ours = 0;
	int w = -1, rc;

	snprintf(epoch, sizeof(epoch), "%" PRIu64, info->epoch);
	snprintf(guest, sizeof(guest), "%.*s", info->guest ? (int)strcspn(info->guest, ":") : 0,
		 info->guest ? info->guest : "");
	iso_time(when, sizeof(when));
	const struct net_proc_var vars[] = {
		{ "UNDERSTUDY_EVENT", repl_event_name(r->ev) }, { "UNDERSTUDY_ROLE", info->role },
		{ "UNDERSTUDY_EPOCH", epoch }, { "UNDERSTUDY_PEER", info->peer },
		{ "UNDERSTUDY_VM", info->vm }, { "UNDERSTUDY_GUEST", guest },
		{ "UNDERSTUDY_REASON", info->reason }, { "UNDERSTUDY_TIME", when },
	};
	rc = net_proc_env_build(vars, sizeof(vars) / sizeof(vars[0]), &env, &first_ours);
	if (rc < 0)
		return rc;
	rc = net_proc_pipe(&r->out, &w);
	if (rc < 0)
		goto out;
	rc = net_proc_spawn(h->cmd, env, w, &r->pid);
	close(w);
	if (rc < 0)
		goto out;
	/* Started before the loop runs again: libev's SIGCHLD handler cannot
	 * have reaped it yet (it runs from the loop). */
	ev_child_init(&r->child_w, on_exit_status, r->pid, 0);
	ev_io_init(&r->out_w, on_output, r->out, EV_READ);
	ev_timer_init(&r->deadline_w, on_deadline, h->timeout_ms / 1e3, 0.);
	r->child_w.data = r->out_w.data = r->deadline_w.data = r;
	ev_child_start(h->loop, &r->child_w);
	ev_io_start(h->loop, &r->out_w);
	ev_timer_start(h->loop, &r->deadline_w);
out:
	net_proc_env_free(env, first_ours);
	return rc;
}

void repl_hooks_run(struct repl_hooks *h, enum repl_event ev, const struct repl_event_info *info)
{
	static const struct repl_event_info none = { 0 };
	struct hook_run *r;
	int slot = -1, rc;

	if (!h)
		return;
	if (!info)
		info = &none;
	for (int i = 0; i < REPL_HOOKS_MAX && slot < 0; i++)
		if (!h->run[i])
			slot = i;
	if (slot < 0) {
		log_warn(TAG, "the '%s' hook is NOT run: %d hooks still run", repl_event_name(ev),
			 REPL_HOOKS_MAX);
		h->ended[REPL_HOOK_FAILED]++;
		return;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		log_warn(TAG, "the '%s' hook is NOT run: out of memory", repl_event_name(ev));
		h->ended[REPL_HOOK_FAILED]++;
		return;
	}
	r->h = h;
	r->slot = slot;
	r->ev = ev;
	r->out = -1;
	r->t0_ns = now_ns();
	rc = start(h, r, info);
	if (rc < 0) {
		log_warn(TAG, "the '%s' hook could not be started: %s", repl_event_name(ev),
			 strerror(-rc));
		h->ended[REPL_HOOK_FAILED]++;
		if (r->out >= 0)
			close(r->out);
		free(r);
		return;
	}
	h->run[slot] = r;
	log_info(TAG, "event %s (epoch %" PRIu64 "): running the hook (pid %d)",
		 repl_event_name(ev), info->epoch, (int)r->pid);
}
