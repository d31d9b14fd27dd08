/* Child processes of the agents: the fence command (secondary/fence.c,
 * which waits for it) and the event hooks (replication/hooks.c, which never
 * wait); here, below both, beside the other ways an agent talks to the
 * world outside the process (sockets, the tap, sd_notify). One way to
 * start a shell command: its own process group, stdin /dev/null, stdout
 * and stderr into one pipe, no other fd, default signals, and an
 * environment of this process's plus the caller's variables. */
#ifndef US_NET_PROC_H
#define US_NET_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kmod/log.h"

/* The last bytes of a command's output (the verdict of a script is its
 * last line); the rest is counted and dropped. */
#define NET_PROC_TAIL_MAX 4096
struct net_proc_tail {
	char buf[NET_PROC_TAIL_MAX];
	size_t len;
	uint64_t total;          /* bytes read, kept or not */
};

/* Reads what the non-blocking fd holds now into t: 0 when it would block,
 * 1 at EOF or on an error (the caller stops watching it and closes it). */
int net_proc_drain(int fd, struct net_proc_tail *t);
/* The last non-empty line of what was kept, printable. */
void net_proc_tail_last_line(const struct net_proc_tail *t, char *out, size_t outlen);
/* src as one printable line: bytes outside printable ASCII become '?'. */
void net_proc_printable(char *dst, size_t dstlen, const char *src, size_t srclen);

struct net_proc_var {
	const char *name;
	const char *value;       /* NULL counts as ""; made printable */
};

/* This process's environment without any of the names in vars (ours must
 * win, and a duplicate name is read differently by different programs),
 * then vars. The inherited strings are borrowed: net_proc_env_free frees
 * from *first_ours on. */
int net_proc_env_build(const struct net_proc_var *vars, size_t nvars, char ***out,
			size_t *first_ours) US_MUST_CHECK;
void net_proc_env_free(char **env, size_t first_ours);

/* A close-on-exec pipe whose ends are both fd 3 or above (with 0, 1 or 2
 * closed a new pipe could land there and be overwritten by the spawn);
 * the read end is non-blocking. */
int net_proc_pipe(int *rd, int *wr) US_MUST_CHECK;

/* Starts `/bin/sh -c cmd` as said at the top, out_w as its stdout and
 * stderr; *pid is also its process group id. */
int net_proc_spawn(const char *cmd, char **env, int out_w, pid_t *pid) US_MUST_CHECK;

#endif
