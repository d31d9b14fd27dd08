/* --on-event: an operator's command run on each event of an agent
 * (protected, takeover, fenced, ...), the way keepalived runs its notify
 * scripts and DRBD its handlers. The command runs through /bin/sh -c in a
 * process group of its own, with
 *   UNDERSTUDY_EVENT   protected|unprotected|takeover|fenced|switchover|
 *                      migrated|drill-pass|drill-fail
 *   UNDERSTUDY_ROLE    primary|secondary (a standby that took over: primary)
 *   UNDERSTUDY_EPOCH   the last epoch acknowledged (primary) or applied
 *   UNDERSTUDY_PEER    the other side: a primary's --peer HOST:PORT; on a
 *                      secondary (and the takeover) the primary's HOST only,
 *                      the port it connected from being an ephemeral one
 *                      ("" if not known)
 *   UNDERSTUDY_VM      the VM's name (--name), else its guest
 *   UNDERSTUDY_GUEST   the guest: counter, linux, ...
 *   UNDERSTUDY_REASON  one line for people ("" if none)
 *   UNDERSTUDY_TIME    when, ISO 8601 UTC with milliseconds
 * in its environment; its stdout and stderr are read by the agent (the last
 * line is logged when it fails).
 *
 * The agent never waits for it: the command is spawned, its exit is seen by
 * a libev child watcher, and one still running after the timeout gets
 * SIGTERM (then SIGKILL a second later) with its whole process group, as
 * does one still running when the agent ends (repl_hooks_free). Each
 * end is logged and counted (understudy_hook_runs_total). At most
 * REPL_HOOKS_MAX run at once; an event beyond that is logged and dropped. */
#ifndef US_REPL_HOOKS_H
#define US_REPL_HOOKS_H

#include <ev.h>

#include "replication/metrics.h"

#define REPL_HOOKS_MAX 16
#define REPL_HOOKS_KILL_GRACE_MS 1000
#define REPL_HOOKS_EXIT_GRACE_MS 1000

struct repl_hooks;

/* loop must be libev's default loop (the only one with child watchers).
 * cmd is copied. */
int repl_hooks_new(struct ev_loop *loop, const char *cmd, unsigned timeout_ms,
		   struct repl_hooks **out) __attribute__((warn_unused_result));
/* Runs that ended so far, by result (all 0 for h NULL). */
void repl_hooks_counts(const struct repl_hooks *h, uint64_t out[REPL_HOOK_RESULTS]);
/* Commands still running end with the agent: REPL_HOOKS_EXIT_GRACE_MS to
 * finish on their own (a hook for the agent's last event), then SIGTERM to
 * their process groups, SIGKILL REPL_HOOKS_KILL_GRACE_MS later. An agent
 * killed -9 cannot do this: its hooks run on (systemd's control group ends
 * them; see docs/design.md). */
void repl_hooks_free(struct repl_hooks *h);
/* Starts the command for ev; h may be NULL (no --on-event). */
void repl_hooks_run(struct repl_hooks *h, enum repl_event ev, const struct repl_event_info *info);

#endif
