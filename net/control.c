/* Control socket: accept on the loop, read one line, reply, close.
 * Private to the agent's user: the socket file is 0600 from the moment it
 * exists (the socket's mode is set before bind, which creates the file with
 * it), and each client is checked with SO_PEERCRED: the agent's own uid or
 * root, anyone else gets one "error" line and the connection closes.
 * A service of net/, not a transport: it owns its sockets and uses nothing
 * of the link core (net.c, open.c, net/conn.h). See net/net.h. */
#include "net/control.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "kmod/log.h"
#include "net/socket.h"

#define TAG "control"
/* Clients that have not had their reply yet. A new one beyond takes the
 * place of the oldest (one still to send its request first): idle clients
 * cannot lock the next user out. */
#define CONTROL_MAX_CLIENTS 16
/* From its connection to its reply written, or the client is closed. */
#define CONTROL_DEADLINE_MS 2000

struct conn {
	struct control *ctl;
	struct conn *next;
	int fd;
	ev_io w;
	ev_timer deadline_w;
	uint64_t since_ns;              /* accepted */
	char *out;
	size_t out_len, out_off;
	struct control_line in;
};

struct control {
	struct ev_loop *loop;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int fd;
	ev_io accept_w;
	struct net_accept_guard guard; /* out of fds: pause, log little */
	control_handler handler;
	void *ctx;
	struct conn *conns;
	unsigned nconns;
};

static void conn_free(struct conn *k)
{
	struct conn **p = &k->ctl->conns;

	while (*p && *p != k)
		p = &(*p)->next;
	if (*p) {
		*p = k->next;
		k->ctl->nconns--;
	}
	ev_io_stop(k->ctl->loop, &k->w);
	ev_timer_stop(k->ctl->loop, &k->deadline_w);
	close(k->fd);
	free(k->out);
	free(k);
}

static void on_conn_read(struct ev_loop *loop, ev_io *w, int revents);

/* The whole request line waiting on k's socket, unread: a loop that stalled
 * (an epoch's work, an emulator's pause) sees the deadline and the request
 * in the same iteration, the deadline first. */
static bool request_waiting(const struct conn *k)
{
	char buf[CONTROL_MAX_REQUEST];
	ssize_t n = recv(k->fd, buf, sizeof(k->in.buf) - 1 - k->in.len, MSG_PEEK | MSG_DONTWAIT);

	return n > 0 && memchr(buf, '\n', (size_t)n);
}

static void on_deadline(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct conn *k = w->data;

	(void)revents;
	if (!k->out && request_waiting(k)) {
		on_conn_read(loop, &k->w, EV_READ);   /* served: its reply re-arms the deadline */
		return;
	}
	net_accept_log(&k->ctl->guard, k->out ? "client closed: reply not taken within 2 s"
					      : "client closed: no request within 2 s");
	conn_free(k);
}

/* Room for one more client: the oldest still to send its request (else the
 * oldest) is closed. */
static void make_room(struct control *c)
{
	struct conn *v = NULL;

	for (struct conn *k = c->conns; k; k = k->next)
		if (!v || (!k->out && v->out) || (!k->out == !v->out && k->since_ns < v->since_ns))
			v = k;
	net_accept_log(&c->guard, v->out ? "client closed to make room: reply not taken"
					 : "client closed to make room: no request yet");
	conn_free(v);
}

static void on_conn_write(struct ev_loop *loop, ev_io *w, int revents)
{
	struct conn *k = w->data;
	ssize_t n;

	(void)loop;
	(void)revents;
	while (k->out_off < k->out_len) {
		n = write(k->fd, k->out + k->out_off, k->out_len - k->out_off);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n <= 0)
			break;
		k->out_off += (size_t)n;
	}
	conn_free(k);
}

static void reply(struct conn *k, char *text)
{
	size_t len;

	if (!text)
		text = strdup("error\n");
	len = text ? strlen(text) : 0;
	/* Every reply ends with a newline, so line-reading clients know. */
	if (text && (len == 0 || text[len - 1] != '\n')) {
		char *t = realloc(text, len + 2);

		if (t) {
			text = t;
			text[len++] = '\n';
			text[len] = 0;
		}
	}
	k->out = text;
	k->out_len = text ? len : 0;
	/* The handler may have taken long (a takeover): 2 s from now. */
	ev_now_update(k->ctl->loop);
	ev_timer_stop(k->ctl->loop, &k->deadline_w);
	ev_timer_set(&k->deadline_w, CONTROL_DEADLINE_MS / 1e3, 0);
	ev_timer_start(k->ctl->loop, &k->deadline_w);
	ev_io_stop(k->ctl->loop, &k->w);
	ev_io_init(&k->w, on_conn_write, k->fd, EV_WRITE);
	k->w.data = k;
	ev_io_start(k->ctl->loop, &k->w);
}

char *control_reply_unknown(const char *request, const char *known)
{
	char shown[CONTROL_SHOWN_MAX + 4];
	size_t i;
	char *reply = NULL;

	for (i = 0; request[i] && i < CONTROL_SHOWN_MAX; i++)
		shown[i] = request[i] >= 0x20 && request[i] < 0x7f ? request[i] : '?';
	snprintf(shown + i, sizeof(shown) - i, "%s", request[i] ? "..." : "");
	if (asprintf(&reply, "error unknown request '%s' (this agent knows: %s)\n", shown,
		     known) < 0)
		return NULL;
	return reply;
}

int control_feed(struct control_line *l, const void *data, size_t n, const char **request)
{
	size_t room = sizeof(l->buf) - 1 - l->len;
	char *start = l->buf + l->len, *nl, *end;

	if (n > room)
		n = room;
	memcpy(start, data, n);
	l->len += n;
	l->buf[l->len] = 0;
	nl = memchr(start, '\n', n);
	end = nl ? nl : l->buf + l->len;
	/* Earlier bytes were checked by earlier calls: only the new ones. */
	if (memchr(start, 0, (size_t)(end - start)))
		return -EINVAL;
	if (!nl)
		return l->len == sizeof(l->buf) - 1 ? -EMSGSIZE : 0;
	*nl = 0;
	if (nl > l->buf && nl[-1] == '\r')
		nl[-1] = 0;
	*request = l->buf;
	return 1;
}

static void on_conn_read(struct ev_loop *loop, ev_io *w, int revents)
{
	struct conn *k = w->data;
	char buf[CONTROL_MAX_REQUEST];
	const char *request;
	ssize_t n;
	int r;

	(void)loop;
	(void)revents;
	n = read(k->fd, buf, sizeof(k->in.buf) - 1 - k->in.len);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		conn_free(k);
		return;
	}
	r = control_feed(&k->in, buf, (size_t)n, &request);
	if (r == -EMSGSIZE) {
		log_warn(TAG, "request longer than %d bytes dropped", CONTROL_MAX_REQUEST);
		reply(k, strdup("error request too long"));
	} else if (r == -EINVAL) {
		log_warn(TAG, "request with a NUL byte dropped");
		reply(k, strdup("error request holds a NUL byte"));
	} else if (r == 1) {
		reply(k, k->ctl->handler(k->ctl->ctx, request));
	}
}

/* Same user as the agent, or root: 0, else -EACCES (logged, told, closed). */
static int check_peer(int fd)
{
	static const char refused[] = "error permission denied: not the agent's user\n";
	struct ucred cr;
	socklen_t len = sizeof(cr);
	ssize_t n;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0) {
		log_warn(TAG, "client refused: no peer credentials: %s", strerror(errno));
	} else if (cr.uid == 0 || cr.uid == geteuid()) {
		return 0;
	} else {
		log_warn(TAG, "client refused: pid %d uid %u is not uid %u or root", (int)cr.pid,
			 (unsigned)cr.uid, (unsigned)geteuid());
	}
	n = write(fd, refused, sizeof(refused) - 1); /* a fresh socket takes one line */
	(void)n;
	close(fd);
	return -EACCES;
}

static void on_accept(struct ev_loop *loop, ev_io *w, int revents)
{
	struct control *c = w->data;
	struct conn *k;
	int fd;

	(void)revents;
	fd = accept4(c->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0) {
		net_accept_failed(&c->guard, errno);
		return;
	}
	if (check_peer(fd))
		return;
	if (c->nconns >= CONTROL_MAX_CLIENTS)
		make_room(c);
	k = calloc(1, sizeof(*k));
	if (!k) {
		close(fd);
		return;
	}
	k->ctl = c;
	k->fd = fd;
	k->since_ns = now_ns();
	k->next = c->conns;
	c->conns = k;
	c->nconns++;
	ev_io_init(&k->w, on_conn_read, fd, EV_READ);
	k->w.data = k;
	ev_timer_init(&k->deadline_w, on_deadline, CONTROL_DEADLINE_MS / 1e3, 0);
	k->deadline_w.data = k;
	ev_now_update(loop);   /* 2 s from now, not from before this iteration's work */
	ev_timer_start(loop, &k->deadline_w);
	ev_io_start(loop, &k->w);
	/* The request may be there already: served now, in accept order. */
	on_conn_read(loop, &k->w, EV_READ);
}

/* A socket file left by an agent that died is replaced; anything else at
 * path is not ours to remove. */
static int remove_stale(const char *path)
{
	struct stat st;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISSOCK(st.st_mode)) {
		log_error(TAG, "%s exists and is not a socket: not replaced", path);
		return -EEXIST;
	}
	return unlink(path) < 0 ? -errno : 0;
}

int control_open(struct ev_loop *loop, const char *path, control_handler handler, void *ctx,
		 struct control **out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct control *c;
	struct stat st;
	int r;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		log_error(TAG, "socket path too long: %s", path);
		return -ENAMETOOLONG;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->loop = loop;
	c->handler = handler;
	c->ctx = ctx;
	snprintf(c->path, sizeof(c->path), "%s", path);
	memcpy(sa.sun_path, path, strlen(path));
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd < 0) {
		r = -errno;
		goto err;
	}
	r = remove_stale(path);
	if (r)
		goto err_fd;
	/* bind() creates the file with the socket's mode (less the umask):
	 * 0600 before it exists, no window where others may connect. */
	if (fchmod(c->fd, 0600) < 0 || bind(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		r = -errno;
		goto err_fd;
	}
	if (lstat(path, &st) < 0 || (st.st_mode & 077)) {
		r = -EPERM;
		log_error(TAG, "control socket %s is not private to its user", path);
		goto err_file;
	}
	if (listen(c->fd, NET_LISTEN_BACKLOG) < 0) {
		r = -errno;
		goto err_file;
	}
	ev_io_init(&c->accept_w, on_accept, c->fd, EV_READ);
	c->accept_w.data = c;
	net_accept_guard_init(&c->guard, loop, &c->accept_w, TAG, path);
	ev_io_start(loop, &c->accept_w);
	*out = c;
	return 0;

err_file:
	unlink(path);
err_fd:
	close(c->fd);
err:
	log_error(TAG, "control socket %s: %s", path, strerror(-r));
	free(c);
	return r;
}

void control_free(struct control *c)
{
	if (!c)
		return;
	while (c->conns)
		conn_free(c->conns);
	ev_io_stop(c->loop, &c->accept_w);
	net_accept_guard_fini(&c->guard);
	close(c->fd);
	unlink(c->path);
	free(c);
}

/* Waits for fd to become ready for events until deadline (ms since epoch of now_ns). */
static int wait_fd(int fd, short events, uint64_t deadline_ns)
{
	struct pollfd p = { .fd = fd, .events = events };
	uint64_t now = now_ns();
	int r;

	if (now >= deadline_ns)
		return -ETIMEDOUT;
	r = poll(&p, 1, (int)((deadline_ns - now) / 1000000) + 1);
	if (r < 0)
		return errno == EINTR ? 0 : -errno;
	return r == 0 ? -ETIMEDOUT : 0;
}

/* A blocking connection to the socket at path, then non-blocking for the
 * deadline's sake: the fd, or -errno. */
static int dial(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path));
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	fcntl(fd, F_SETFL, O_NONBLOCK);
	return fd;
}

static int write_all(int fd, const char *data, size_t len, uint64_t deadline)
{
	size_t off = 0;
	int r;

	while (off < len) {
		ssize_t n = write(fd, data + off, len - off);

		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		if (n > 0)
			off += (size_t)n;
		else if ((r = wait_fd(fd, POLLOUT, deadline)) < 0)
			return r;
	}
	return 0;
}

/* Reads until the peer closes: the bytes, NUL-terminated, in *out. */
static int read_all(int fd, uint64_t deadline, char **out)
{
	size_t len = 0, cap = 256;
	char *buf = malloc(cap), *b;
	ssize_t n;
	int r;

	if (!buf)
		return -ENOMEM;
	for (;;) {
		if (len + 1 >= cap) {
			b = realloc(buf, cap * 2);
			if (!b) {
				r = -ENOMEM;
				goto err_buf;
			}
			buf = b;
			cap *= 2;
		}
		n = read(fd, buf + len, cap - 1 - len);
		if (n == 0)
			break;
		if (n < 0 && errno != EAGAIN && errno != EINTR) {
			r = -errno;
			goto err_buf;
		}
		if (n > 0)
			len += (size_t)n;
		else if ((r = wait_fd(fd, POLLIN, deadline)) < 0)
			goto err_buf;
	}
	buf[len] = 0;
	*out = buf;
	return 0;

err_buf:
	free(buf);
	return r;
}

int control_request(const char *path, const char *request, int timeout_ms, char **reply_out)
{
	uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000;
	size_t reqlen = strlen(request);
	char *line;
	int fd, r;

	fd = dial(path);
	if (fd < 0)
		return fd;
	line = malloc(reqlen + 2);
	if (!line) {
		r = -ENOMEM;
		goto out;
	}
	memcpy(line, request, reqlen);
	line[reqlen] = '\n';
	r = write_all(fd, line, reqlen + 1, deadline);
	free(line);
	if (!r)
		r = read_all(fd, deadline, reply_out);
out:
	close(fd);
	return r;
}
