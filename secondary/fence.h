/* The fence command (STONITH hook) of the secondary: an operator's command
 * that powers the old primary off before this side takes over, the way
 * DRBD's fence-peer handler or a Pacemaker fence agent is used. Takeover
 * only when it exits 0 within its deadline; anything else means the
 * primary may still run, so no takeover (the caller stays a standby).
 *
 * Kept apart from secondary_int.h: the secondary includes it (and the command
 * line, for the bounds of --fence-retries), nothing else. */
#ifndef US_SECONDARY_FENCE_H
#define US_SECONDARY_FENCE_H

#include <stddef.h>
#include <stdint.h>

#include "kmod/log.h"

/* Bytes of the command's output kept (the last ones: the verdict of a fence
 * agent is its last line). The rest is read and dropped, never left in the
 * pipe, so a chatty command cannot block on a full pipe. */
#define REPL_FENCE_OUTPUT_MAX 4096

/* After the deadline the command's process group gets SIGTERM, then SIGKILL
 * this much later if anything of it is still there. */
#define REPL_FENCE_KILL_GRACE_MS 1000

/* A fence command that failed is run again after a pause that doubles
 * from REPL_FENCE_RETRY_FIRST_MS up to REPL_FENCE_RETRY_MAX_MS, at most
 * --fence-retries times (default REPL_FENCE_RETRIES_DEFAULT): a BMC that
 * did not answer once does not strand the standby, and a dead one does not
 * keep it busy for ever (then a person decides: takeover
 * --fenced-by-operator). */
#define REPL_FENCE_RETRIES_DEFAULT 4
#define REPL_FENCE_RETRIES_MAX 20
#define REPL_FENCE_RETRY_FIRST_MS 1000
#define REPL_FENCE_RETRY_MAX_MS 30000

/* The pause before retry number `retry` (1 for the first retry). */
unsigned repl_fence_retry_ms(unsigned retry);

/* Who is to be fenced. NULL strings count as "". The strings reach the
 * command's environment as they are, except that bytes outside printable
 * ASCII become '?' (the VM name comes from the primary's Hello). */
struct repl_fence_peer {
	const char *peer_addr;   /* HOST:PORT of the primary as last connected, or "" */
	const char *vm_name;     /* the VM's name (--name), else its guest */
	const char *guest;       /* the guest: counter, linux, ... (arguments aside) */
	uint64_t epoch;          /* last applied */
	const char *reason;      /* why a takeover is wanted, for the command and the log */
};

/* Runs `/bin/sh -c cmd` in a process group of its own, stdin /dev/null,
 * stdout and stderr into one pipe, no fd beyond 0, 1, 2, the environment of
 * this process plus UNDERSTUDY_PEER, UNDERSTUDY_PEER_HOST,
 * UNDERSTUDY_PEER_PORT, UNDERSTUDY_VM, UNDERSTUDY_GUEST, UNDERSTUDY_EPOCH,
 * UNDERSTUDY_REASON and UNDERSTUDY_ACTION=off. Blocks until the command exits or timeout_ms
 * passes; the deadline is on the exit of the shell, not on the end of its
 * output (a background child holding the pipe does not extend it).
 *
 * When it returns, nothing of the command's process group is left: on
 * overrun the group gets SIGTERM then SIGKILL; after an exit, what the
 * command left behind in its group is killed. Everything is reaped (this
 * process is a child subreaper while the command runs, then as before).
 * A command that moves itself to another process group (setsid) escapes.
 *
 * Returns 0 only for exit status 0 within timeout_ms; -ETIMEDOUT when it
 * overran; -EIO for a non-zero exit or death by a signal; -ECHILD when its
 * status was lost (SIGCHLD ignored, or reaped by someone else); -EINVAL for
 * an empty command or a zero deadline; another -errno when it could not be
 * started or waited for (then it is killed as on an overrun). The command
 * line is logged as it is: secrets belong in files it reads.
 *
 * `why` (may be NULL) gets one printable line for the log and the status:
 * "exit 0: <last line>", "exit 3: <last line>", "killed by signal 9",
 * "no exit within 10000 ms: <last line>", "exit status lost (...)".
 *
 * Must not run while another thread of this process reaps children with
 * waitpid(-1) (libev reaps from its loop, which is blocked in here). */
int repl_fence_run(const char *cmd, unsigned timeout_ms, const struct repl_fence_peer *peer,
		   char *why, size_t whylen) US_MUST_CHECK;

#endif
