/* understudy drill local: the oracle (one uninterrupted run of the guest)
 * and the console client that checks every reply against it, with the
 * rules of tests/failover.py: every line is the uninterrupted run's line
 * for its n; on one connection n moves by +1; the first line after a
 * reconnect may go back (acknowledged output replayed by the new owner)
 * but never past the highest n seen plus one; and the survivor's counter
 * ("get") is at least the highest n seen: nothing acknowledged is lost. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/drill_local.h"
#include "net/lineclient.h"

#define ORACLE_WAIT_S 120

double dl_now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* ---- the oracle ------------------------------------------------------------ */

static int parse_line(const char *line, unsigned long long *n, char *digest, size_t len)
{
	char d[64];

	if (sscanf(line, "%llu %63s", n, d) != 2 || strlen(d) >= len)
		return -EINVAL;
	snprintf(digest, len, "%s", d);
	return 0;
}

/* Feeds the requests, reads the replies: both fit the pipes' buffers only
 * for small counts, so the reader is the parent and the writer a child. */
static int oracle_read(FILE *f, struct dl_oracle *o)
{
	char line[256], d[24];
	unsigned long long n;
	unsigned got = 0;

	while (fgets(line, sizeof(line), f)) {
		if (parse_line(line, &n, d, sizeof(d)) < 0 || n != got + 1 || n > o->count)
			return -EPROTO;
		memcpy(o->digest[n], d, sizeof(d));
		got++;
	}
	return got == o->count ? 0 : -EPROTO;
}

int dl_oracle_run(const char *self, const char *guest, const char *dir, unsigned count,
		  struct dl_oracle *o)
{
	char ctl[256];
	int in[2], out[2], status, r;
	pid_t pid, feeder;
	FILE *f;

	/* Its own control socket, in the drill's directory: without one it
	 * would take the default /run/understudy/NAME.sock of its guest's name. */
	snprintf(ctl, sizeof(ctl), "%s/oracle.ctl", dir);
	o->count = count;
	if (!(o->digest = calloc(count + 1, sizeof(*o->digest))))
		return -ENOMEM;
	if (pipe(in) < 0 || pipe(out) < 0)
		return -errno;
	if ((pid = fork()) < 0)
		return -errno;
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		dup2(in[0], 0);
		dup2(out[1], 1);
		dup2(null, 2);
		close(in[0]); close(in[1]); close(out[0]); close(out[1]);
		execl(self, "understudy", "run", "--guest", guest, "--console", "stdio", "--control", ctl,
		      (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	if ((feeder = fork()) == 0) {
		close(out[0]);
		for (unsigned i = 0; i < count; i++)
			if (write(in[1], "incr\n", 5) != 5)
				_exit(1);
		_exit(write(in[1], "halt\n", 5) == 5 ? 0 : 1);
	}
	close(in[1]);
	f = fdopen(out[0], "r");
	r = f ? oracle_read(f, o) : -errno;
	if (f)
		fclose(f);
	else
		close(out[0]);
	if (feeder > 0)
		waitpid(feeder, NULL, 0);
	for (int i = 0; i < ORACLE_WAIT_S * 10 && waitpid(pid, &status, WNOHANG) == 0; i++)
		usleep(100000);
	if (waitpid(pid, &status, WNOHANG) == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	if (r < 0)
		dl_oracle_fini(o);
	return r;
}

void dl_oracle_fini(struct dl_oracle *o)
{
	free(o->digest);
	o->digest = NULL;
}

/* ---- the client ------------------------------------------------------------- */

static void fail(struct dl_client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(struct dl_client *c, const char *fmt, ...)
{
	va_list ap;

	if (c->error[0])
		return;          /* the first broken rule is the one to report */
	va_start(ap, fmt);
	vsnprintf(c->error, sizeof(c->error), fmt, ap);
	va_end(ap);
}

void dl_client_init(struct dl_client *c, const struct dl_oracle *o)
{
	memset(c, 0, sizeof(*c));
	c->o = o;
	c->fd = -1;
	c->conn_prev = -1;
}

void dl_client_attach(struct dl_client *c, int fd)
{
	/* The console is a byte stream: a line the old owner released in part
	 * may go on where the new one replays from. */
	memcpy(c->head, c->buf, c->len);
	c->head_len = c->fd >= 0 ? c->len : 0;
	dl_client_close(c);
	c->fd = fd;
	c->len = 0;
	c->conn_prev = -1;
	c->pending = false;
	c->conns++;
	c->last_line_s = dl_now_s();
}

void dl_client_close(struct dl_client *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

void dl_client_mark(struct dl_client *c)
{
	c->first_after_s = -1;
}

bool dl_client_failed(const struct dl_client *c)
{
	return c->error[0] != 0;
}

static bool oracle_has(const struct dl_client *c, unsigned long long n, const char *d)
{
	return n >= 1 && n <= c->o->count && !strcmp(c->o->digest[n], d);
}

static void check_line(struct dl_client *c, const char *text)
{
	char line[1100], d[24];
	unsigned long long n;

	snprintf(line, sizeof(line), "%s", text);
	/* The first line on a connection: the tail of the partial line the old
	 * one ended inside, if joining them gives a line of the run. */
	if (c->conn_prev < 0 && c->head_len) {
		char joined[1100];

		snprintf(joined, sizeof(joined), "%.*s%s", (int)c->head_len, c->head, text);
		if (parse_line(joined, &n, d, sizeof(d)) == 0 && oracle_has(c, n, d))
			snprintf(line, sizeof(line), "%s", joined);
		c->head_len = 0;
	}
	c->lines++;
	if (parse_line(line, &n, d, sizeof(d)) < 0) {
		fail(c, "garbled line '%.60s'", line);
		return;
	}
	if (!oracle_has(c, n, d)) {
		/* No n to go by: a torn or foreign line must not move the highest
		 * n seen (the RPO would count from it). */
		fail(c, "reply '%.60s' differs from the uninterrupted run's line %llu", line, n);
		return;
	}
	if (c->conn_prev < 0) {
		if (n > c->top + 1)
			fail(c, "after %llu came %llu on the new connection: replies were lost", c->top, n);
	} else if (n != (unsigned long long)c->conn_prev + 1) {
		fail(c, "after %lld came %llu on one connection: a reply was lost, skipped or repeated",
		     c->conn_prev, n);
	}
	c->replayed += n <= c->top;
	c->conn_prev = (long long)n;
	if (n > c->top)
		c->top = n;
}

/* Reads once (up to wait_ms); lines go to check_line, or to *get_line (the
 * reply to a get) when given. Lines read, 0 none, -EPIPE on close. */
static int read_some(struct dl_client *c, int wait_ms, char *get_line, size_t get_len)
{
	char tmp[4096];
	ssize_t n;
	int lines = 0;

	if (c->fd < 0)
		return -EPIPE;
	n = net_line_recv(c->fd, tmp, sizeof(tmp), wait_ms);
	if (n == -EAGAIN)
		return 0;
	if (n <= 0)
		return -EPIPE;
	for (ssize_t i = 0; i < n; i++) {
		if (tmp[i] != '\n') {
			if (c->len < sizeof(c->buf) - 1)
				c->buf[c->len++] = tmp[i];
			continue;
		}
		c->buf[c->len] = 0;
		c->len = 0;
		c->pending = false;
		c->last_line_s = dl_now_s();
		if (c->first_after_s < 0)
			c->first_after_s = c->last_line_s;
		lines++;
		if (get_line && !get_line[0])
			snprintf(get_line, get_len, "%.200s", c->buf);
		else
			check_line(c, c->buf);
	}
	return lines;
}

int dl_client_step(struct dl_client *c, double gap_s, int wait_ms)
{
	double now = dl_now_s();

	if (c->fd < 0)
		return -EPIPE;
	/* Stop short of the oracle's end: a reply past it could not be checked. */
	if (!c->pending && now - c->last_line_s >= gap_s && c->top + 2 < c->o->count) {
		if (net_line_send(c->fd, "incr\n", 5) < 0)
			return -EPIPE;
		c->pending = true;
	}
	if (!c->pending) {
		double left_ms = (c->last_line_s + gap_s - now) * 1000;

		wait_ms = left_ms < wait_ms ? (left_ms > 0 ? (int)left_ms : 0) : wait_ms;
	}
	return read_some(c, wait_ms, NULL, 0);
}

int dl_client_drain(struct dl_client *c, int quiet_ms)
{
	int r;

	while ((r = read_some(c, quiet_ms, NULL, 0)) > 0)
		;
	return r;
}

int dl_client_get(struct dl_client *c, int timeout_ms, unsigned long long *n)
{
	double end = dl_now_s() + timeout_ms / 1e3;
	char line[256] = "", d[24];
	int r;

	while (c->pending) {             /* the incr in flight answers first */
		if ((r = read_some(c, 50, NULL, 0)) < 0)
			return r;
		if (dl_now_s() > end)
			return -ETIMEDOUT;
	}
	if (net_line_send(c->fd, "get\n", 4) < 0)
		return -EPIPE;
	while (!line[0]) {
		if ((r = read_some(c, 50, line, sizeof(line))) < 0)
			return r;
		if (dl_now_s() > end)
			return -ETIMEDOUT;
	}
	if (parse_line(line, n, d, sizeof(d)) < 0 || (*n && !oracle_has(c, *n, d))) {
		fail(c, "get answered '%.60s', not a line of the uninterrupted run", line);
		*n = 0;
		return -EPROTO;
	}
	if (*n < c->top)
		fail(c, "the guest counts %llu but %llu was seen: acknowledged output lost", *n, c->top);
	else if (c->conn_prev >= 0 && *n != (unsigned long long)c->conn_prev)
		fail(c, "get answered %llu after the line %lld on the same connection", *n, c->conn_prev);
	c->conn_prev = (long long)*n;
	return 0;
}
