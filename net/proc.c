/* Child processes of the agents (see proc.h): spawn, environment, output. */
#include "net/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SHELL "/bin/sh"

extern char **environ;

static void net_proc_tail_add(struct net_proc_tail *t, const char *p, size_t n)
{
	t->total += n;
	if (n >= sizeof(t->buf)) {
		memcpy(t->buf, p + n - sizeof(t->buf), sizeof(t->buf));
		t->len = sizeof(t->buf);
		return;
	}
	if (t->len + n > sizeof(t->buf)) {
		size_t drop = t->len + n - sizeof(t->buf);

		memmove(t->buf, t->buf + drop, t->len - drop);
		t->len -= drop;
	}
	memcpy(t->buf + t->len, p, n);
	t->len += n;
}

/* The text goes into the environment, the log and `status`, none of which
 * should carry control bytes. */
void net_proc_printable(char *dst, size_t dstlen, const char *src, size_t srclen)
{
	size_t i;

	if (!dstlen)
		return;
	for (i = 0; i < srclen && i + 1 < dstlen; i++) {
		unsigned char c = (unsigned char)src[i];

		dst[i] = c < 0x20 || c > 0x7e ? '?' : (char)c;
	}
	dst[i] = 0;
}

void net_proc_tail_last_line(const struct net_proc_tail *t, char *out, size_t outlen)
{
	size_t end = t->len, start;

	while (end && (t->buf[end - 1] == '\n' || t->buf[end - 1] == '\r' ||
		       t->buf[end - 1] == ' ' || t->buf[end - 1] == '\t'))
		end--;
	start = end;
	while (start && t->buf[start - 1] != '\n')
		start--;
	while (start < end && (t->buf[start] == ' ' || t->buf[start] == '\t'))
		start++;
	net_proc_printable(out, outlen, t->buf + start, end - start);
}

/* ---- environment ------------------------------------------------------------- */

static bool is_var_of(const char *entry, const struct net_proc_var *vars, size_t nvars)
{
	for (size_t i = 0; i < nvars; i++) {
		size_t n = strlen(vars[i].name);

		if (strncmp(entry, vars[i].name, n) == 0 && entry[n] == '=')
			return true;
	}
	return false;
}

void net_proc_env_free(char **env, size_t first_ours)
{
	if (!env)
		return;
	for (size_t i = first_ours; env[i]; i++)
		free(env[i]);
	free(env);
}

int net_proc_env_build(const struct net_proc_var *vars, size_t nvars, char ***out,
			size_t *first_ours)
{
	size_t n = 0, cap = nvars + 1;
	char **env;

	for (char **e = environ; e && *e; e++)
		cap++;
	env = calloc(cap, sizeof(*env));
	if (!env)
		return -ENOMEM;
	for (char **e = environ; e && *e; e++)
		if (!is_var_of(*e, vars, nvars))
			env[n++] = *e;
	*first_ours = n;
	for (size_t i = 0; i < nvars; i++) {
		const char *value = vars[i].value ? vars[i].value : "";
		char v[512];

		net_proc_printable(v, sizeof(v), value, strlen(value));
		if (asprintf(&env[n], "%s=%s", vars[i].name, v) < 0) {
			env[n] = NULL;
			net_proc_env_free(env, *first_ours);
			return -ENOMEM;
		}
		env[++n] = NULL;
	}
	*out = env;
	return 0;
}

/* ---- start -------------------------------------------------------------------- */

static int fd_above_2(int fd)
{
	int nfd;

	if (fd > 2)
		return fd;
	nfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	close(fd);
	return nfd < 0 ? -errno : nfd;
}

int net_proc_pipe(int *rd, int *wr)
{
	int fds[2], r;

	if (pipe2(fds, O_CLOEXEC) < 0)
		return -errno;
	fds[0] = fd_above_2(fds[0]);
	fds[1] = fd_above_2(fds[1]);
	if (fds[0] < 0 || fds[1] < 0) {
		r = fds[0] < 0 ? fds[0] : fds[1];
		if (fds[0] >= 0)
			close(fds[0]);
		if (fds[1] >= 0)
			close(fds[1]);
		return r;
	}
	fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
	*rd = fds[0];
	*wr = fds[1];
	return 0;
}

/* Signal mask empty and every signal at its default: an ignored SIGPIPE or
 * SIGTERM of the agent would otherwise be inherited through exec. */
int net_proc_spawn(const char *cmd, char **env, int out_w, pid_t *pid)
{
	char *argv[] = { "sh", "-c", (char *)cmd, NULL };
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	sigset_t none, all;
	int r;

	sigemptyset(&none);
	sigfillset(&all);
	r = -posix_spawn_file_actions_init(&fa);
	if (r)
		return r;
	r = -posix_spawnattr_init(&at);
	if (r)
		goto err_fa;
	if ((r = -posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0)) ||
	    (r = -posix_spawn_file_actions_adddup2(&fa, out_w, 1)) ||
	    (r = -posix_spawn_file_actions_adddup2(&fa, out_w, 2)) ||
	    (r = -posix_spawn_file_actions_addclosefrom_np(&fa, 3)) ||
	    (r = -posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
						  POSIX_SPAWN_SETSIGDEF)) ||
	    (r = -posix_spawnattr_setpgroup(&at, 0)) ||
	    (r = -posix_spawnattr_setsigmask(&at, &none)) ||
	    (r = -posix_spawnattr_setsigdefault(&at, &all)))
		goto err_at;
	r = -posix_spawn(pid, SHELL, &fa, &at, argv, env);
err_at:
	posix_spawnattr_destroy(&at);
err_fa:
	posix_spawn_file_actions_destroy(&fa);
	return r;
}

int net_proc_drain(int fd, struct net_proc_tail *t)
{
	char chunk[16384];

	for (;;) {
		ssize_t n = read(fd, chunk, sizeof(chunk));

		if (n > 0) {
			net_proc_tail_add(t, chunk, (size_t)n);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		return n < 0 && errno == EAGAIN ? 0 : 1;
	}
}
