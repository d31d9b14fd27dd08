/* Console endpoints on libev: stdio or a one-client TCP listener.
 * A service of net/, not a transport: it owns its sockets and uses nothing
 * of the link core (net.c, open.c, net/conn.h). See net/net.h. */
#include "net/console.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kmod/log.h"
#include "net/net.h"
#include "net/socket.h"

#define TAG "console"

struct console {
	struct ev_loop *loop;
	struct console_ops ops;
	bool tcp;
	int in_fd, out_fd, listen_fd;
	int port;
	ev_io in_w, out_w, accept_w;
	ev_timer eof_w;             /* a half-closed client: when to close it */
	ev_timer idle_w;            /* a client that typed: when it gives way */
	bool yields;                /* the client gives way to a newcomer */
	bool in_eof;                /* the client sent its last byte */
	bool in_any;                /* it sent at least one */
	uint64_t eof_ns, moved_ns;  /* its EOF; the last byte in or out since */
	struct net_accept_guard guard; /* out of fds: pause, log little */
	bool input_paused;
	uint8_t pending_in[4096];   /* read but not yet taken by the guest */
	size_t pending_in_len, pending_in_off;
	uint8_t *out;               /* bytes waiting: [out_off, out_len) */
	size_t out_off, out_len, out_cap;
	bool out_dropping;          /* stdout too slow, oldest output dropped */
};

static size_t out_pending(const struct console *c)
{
	return c->out_len - c->out_off;
}

static void set_nonblock(int fd)
{
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* "stdio" or "tcp:HOST:PORT" through net's one HOST:PORT parser. */
static int check_spec(const char *spec, bool port0_ok, char *host, size_t host_len, int *port)
{
	if (!strcmp(spec, "stdio"))
		return 0;
	if (strncmp(spec, "tcp:", 4))
		return -EINVAL;
	return net_parse_host_port(spec + 4, port0_ok, host, host_len, port);
}

int console_check_spec(const char *spec)
{
	char host[256];
	int port;

	return check_spec(spec, false, host, sizeof(host), &port);
}

static int listen_tcp(const char *host, int port, int *port_out)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *ai;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char service[8];
	int fd, one = 1, r;

	snprintf(service, sizeof(service), "%d", port);
	r = getaddrinfo(host[0] ? host : NULL, service, &hints, &ai);
	if (r) {
		log_error(TAG, "%s:%d: %s", host, port, gai_strerror(r));
		return -EINVAL;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		r = -errno;
		goto out;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	/* Room for a burst: a SYN dropped on a full backlog waits a second. */
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, NET_LISTEN_BACKLOG) < 0) {
		r = -errno;
		log_error(TAG, "listening on %s:%d: %s", host, port, strerror(errno));
		close(fd);
		goto out;
	}
	getsockname(fd, (struct sockaddr *)&ss, &sl);
	*port_out = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
						   : ((struct sockaddr_in *)&ss)->sin_port);
	r = fd;
out:
	freeaddrinfo(ai);
	return r;
}

static void drop_client(struct console *c)
{
	if (!c->tcp || c->in_fd < 0)
		return;
	ev_io_stop(c->loop, &c->in_w);
	ev_io_stop(c->loop, &c->out_w);
	ev_timer_stop(c->loop, &c->eof_w);
	ev_timer_stop(c->loop, &c->idle_w);
	c->in_eof = c->in_any = c->yields = false;
	close(c->in_fd);
	c->in_fd = c->out_fd = -1;
	if (c->listen_fd >= 0)
		ev_io_start(c->loop, &c->accept_w);
}

/* Something moved for a half-closed client: its quiet period starts over. */
static void eof_touch(struct console *c)
{
	if (c->in_eof)
		c->moved_ns = now_ns();
}

static void try_write(struct console *c)
{
	while (out_pending(c) && c->out_fd >= 0) {
		ssize_t n = write(c->out_fd, c->out + c->out_off, out_pending(c));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		if (n <= 0) {
			log_info(TAG, "console output closed: %s", n < 0 ? strerror(errno) : "EOF");
			if (c->tcp) {
				drop_client(c);
			} else {
				c->out_fd = -1;   /* stdout gone: output is dropped from now on */
				c->out_off = c->out_len = 0;
			}
			if (c->ops.hangup)
				c->ops.hangup(c->ops.ctx);
			return;
		}
		c->out_off += (size_t)n;
		eof_touch(c);
	}
	if (!out_pending(c)) {
		c->out_off = c->out_len = 0;
		c->out_dropping = false;
	}
	if (c->out_fd < 0)
		return;
	if (out_pending(c))
		ev_io_start(c->loop, &c->out_w);
	else
		ev_io_stop(c->loop, &c->out_w);
}

/* Room for len more bytes at the end. The bytes waiting move to the front
 * only when they fill at most half of the buffer, else it doubles: each
 * byte is moved a bounded number of times, so writing is O(n) overall. */
static int out_reserve(struct console *c, size_t len)
{
	size_t need = out_pending(c) + len, cap = c->out_cap ? c->out_cap : 4096;
	uint8_t *p;

	if (c->out_len + len <= c->out_cap)
		return 0;
	if (c->out_off && need <= c->out_cap / 2) {
		memmove(c->out, c->out + c->out_off, out_pending(c));
		c->out_len -= c->out_off;
		c->out_off = 0;
		return 0;
	}
	while (cap < 2 * need)
		cap *= 2;
	p = malloc(cap);
	if (!p)
		return -ENOMEM;
	if (c->out)
		memcpy(p, c->out + c->out_off, out_pending(c));
	c->out_len -= c->out_off;
	c->out_off = 0;
	free(c->out);
	c->out = p;
	c->out_cap = cap;
	return 0;
}

/* Only the latest keep bytes stay waiting. */
static void out_trim(struct console *c, size_t keep)
{
	if (out_pending(c) > keep)
		c->out_off = c->out_len - keep;
}

/* A connected reader that lets more than CONSOLE_CLIENT_MAX bytes wait: a
 * TCP client is dropped (the next one gets the usual backlog), stdout loses
 * its oldest bytes. Memory stays bounded either way. */
static void out_limit(struct console *c)
{
	size_t pending = out_pending(c);

	if (c->out_fd < 0 || pending <= CONSOLE_CLIENT_MAX)
		return;
	if (c->tcp) {
		log_warn(TAG, "console client not reading: %zu bytes waiting, more than %u MiB: "
			 "dropped", pending, CONSOLE_CLIENT_MAX >> 20);
		drop_client(c);
		out_trim(c, CONSOLE_BACKLOG);
		if (c->ops.hangup)
			c->ops.hangup(c->ops.ctx);
		return;
	}
	if (!c->out_dropping)
		log_warn(TAG, "console output not read: more than %u MiB waiting, oldest bytes "
			 "dropped", CONSOLE_CLIENT_MAX >> 20);
	c->out_dropping = true;
	out_trim(c, CONSOLE_CLIENT_MAX);
}

static void deliver_input(struct console *c)
{
	while (c->pending_in_off < c->pending_in_len) {
		size_t n = c->ops.input(c->ops.ctx, c->pending_in + c->pending_in_off,
					c->pending_in_len - c->pending_in_off);

		if (!n) {
			c->input_paused = true;
			ev_io_stop(c->loop, &c->in_w);
			return;
		}
		c->pending_in_off += n;
		eof_touch(c);
	}
	c->pending_in_off = c->pending_in_len = 0;
}

/* Read EOF from a TCP client is "no more input", not "gone": replies to what
 * it sent are still to come (from a primary, only after the secondary's
 * ACK). Checked every CONSOLE_EOF_CHECK_MS: the client is closed once
 * nothing is waiting and nothing moved (eof_touch) for CONSOLE_EOF_QUIET_MS,
 * or at the cap whatever is waiting. A client that sent nothing (a port
 * probe, a reader of the backlog) asked for no reply: it goes as soon as
 * nothing is waiting, so that probing the port does not hold the console. */
#define CONSOLE_EOF_CHECK_MS 100

static void on_eof_check(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct console *c = w->data;
	uint64_t now = now_ns();
	uint64_t waited_ms = (now - c->eof_ns) / 1000000;
	uint64_t quiet_ms = (now - c->moved_ns) / 1000000;
	bool held = c->ops.output_held && c->ops.output_held(c->ops.ctx);
	bool waiting = held || out_pending(c) || c->pending_in_len;
	uint64_t quiet_min_ms = c->in_any ? CONSOLE_EOF_QUIET_MS : 0;

	(void)loop;
	(void)revents;
	if (waited_ms < CONSOLE_EOF_MAX_MS && (waiting || quiet_ms < quiet_min_ms))
		return;
	if (waiting || quiet_ms < quiet_min_ms)
		log_warn(TAG, "console client half-closed %llu ms ago; closing it with output still "
			 "coming (%zu bytes unwritten%s: kept for the next client)",
			 (unsigned long long)waited_ms, out_pending(c), held ? ", more held" : "");
	else
		log_info(TAG, "console client done: every reply written");
	drop_client(c);
	if (c->ops.hangup)
		c->ops.hangup(c->ops.ctx);
}

/* The client keeps the console: newcomers wait in the backlog. */
static void hold(struct console *c)
{
	c->yields = false;
	ev_io_stop(c->loop, &c->accept_w);
}

/* The client gives way to the next one that connects. */
static void yield(struct console *c)
{
	c->yields = true;
	if (c->listen_fd >= 0)
		ev_io_start(c->loop, &c->accept_w);
}

static void on_idle(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct console *c = w->data;

	(void)loop;
	(void)revents;
	ev_timer_stop(c->loop, &c->idle_w);
	if (c->in_fd >= 0 && !c->in_eof)
		yield(c);
}

static void on_in(struct ev_loop *loop, ev_io *w, int revents)
{
	struct console *c = w->data;
	ssize_t n;

	(void)loop;
	(void)revents;
	n = read(c->in_fd, c->pending_in, sizeof(c->pending_in));
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n < 0 && c->tcp) {
		log_info(TAG, "console client gone: %s", strerror(errno));
		drop_client(c);
	}
	if (n == 0 && c->tcp) {
		ev_io_stop(c->loop, &c->in_w);
		hold(c);                 /* until its replies are out */
		c->in_eof = true;
		c->eof_ns = c->moved_ns = now_ns();
		ev_timer_again(c->loop, &c->eof_w);
		log_info(TAG, "console client finished sending; its replies still go out");
		if (!c->in_any)
			on_eof_check(c->loop, &c->eof_w, 0);
		return;
	}
	if (n <= 0) {
		ev_io_stop(c->loop, &c->in_w);
		if (c->ops.hangup)
			c->ops.hangup(c->ops.ctx);
		return;
	}
	c->in_any = true;
	if (c->tcp) {
		hold(c);
		ev_timer_again(c->loop, &c->idle_w);
	}
	c->pending_in_len = (size_t)n;
	c->pending_in_off = 0;
	deliver_input(c);
}

static void on_out(struct ev_loop *loop, ev_io *w, int revents)
{
	(void)loop;
	(void)revents;
	try_write(w->data);
}

static void on_accept(struct ev_loop *loop, ev_io *w, int revents)
{
	struct console *c = w->data;
	int fd, one = 1, inq = 0;
	bool replaced;

	(void)revents;
	/* Bytes it sent and the console has not read yet (input paused)
	 * count as typing. */
	if (c->in_fd >= 0 && c->yields && ioctl(c->in_fd, SIOCINQ, &inq) == 0 && inq > 0)
		hold(c);
	if (c->in_fd >= 0 && !c->yields) {
		ev_io_stop(loop, &c->accept_w); /* the client holds it: wait */
		return;
	}
	fd = accept4(c->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (fd < 0) {
		net_accept_failed(&c->guard, errno);
		return;
	}
	replaced = c->in_fd >= 0;
	if (replaced) {
		net_accept_log(&c->guard, c->in_any ? "an idle client gave way to a new one"
						    : "a client that sent nothing gave way to a new one");
		drop_client(c);
		if (c->ops.hangup)
			c->ops.hangup(c->ops.ctx);
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->in_fd = c->out_fd = fd;
	yield(c);                        /* until it sends something */
	ev_io_set(&c->in_w, fd, EV_READ);
	ev_io_set(&c->out_w, fd, EV_WRITE);
	if (!c->input_paused)
		ev_io_start(loop, &c->in_w);
	if (!replaced)                   /* else the line above (limited) */
		log_info(TAG, "console client connected");
	try_write(c);
}

int console_open(struct ev_loop *loop, const char *spec, const struct console_ops *ops,
		 struct console **out)
{
	struct console *c;
	char host[256];
	int port = 0, r;

	r = check_spec(spec, true, host, sizeof(host), &port);
	if (r) {
		log_error(TAG, "bad console '%s': %s", spec,
			  r == -ERANGE ? "port needs 1..65535" : "use stdio or tcp:HOST:PORT");
		return -EINVAL;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->loop = loop;
	c->ops = *ops;
	c->listen_fd = -1;
	ev_io_init(&c->in_w, on_in, 0, EV_READ);
	ev_io_init(&c->out_w, on_out, 1, EV_WRITE);
	ev_timer_init(&c->eof_w, on_eof_check, 0., CONSOLE_EOF_CHECK_MS / 1000.);
	ev_timer_init(&c->idle_w, on_idle, 0., CONSOLE_IDLE_MS / 1000.);
	c->in_w.data = c->out_w.data = c->accept_w.data = c->eof_w.data = c->idle_w.data = c;
	if (!strcmp(spec, "stdio")) {
		c->in_fd = 0;
		c->out_fd = 1;
		set_nonblock(0);
		ev_io_start(loop, &c->in_w);
	} else {
		c->tcp = true;
		c->in_fd = c->out_fd = -1;
		c->listen_fd = listen_tcp(host, port, &c->port);
		if (c->listen_fd < 0) {
			r = c->listen_fd;
			free(c);
			return r;
		}
		ev_io_init(&c->accept_w, on_accept, c->listen_fd, EV_READ);
		c->accept_w.data = c;
		net_accept_guard_init(&c->guard, loop, &c->accept_w, TAG, spec);
		ev_io_start(loop, &c->accept_w);
		log_info(TAG, "console on tcp port %d", c->port);
	}
	*out = c;
	return 0;
}

int console_bind(struct ev_loop *loop, const char *spec, struct console **out)
{
	static const struct console_ops none;
	int r = console_open(loop, spec, &none, out);

	if (r < 0)
		return r;
	ev_io_stop(loop, &(*out)->accept_w);
	ev_io_stop(loop, &(*out)->in_w);
	return 0;
}

void console_serve(struct console *c, const struct console_ops *ops)
{
	c->ops = *ops;
	if (c->tcp && c->listen_fd >= 0 && c->in_fd < 0)
		ev_io_start(c->loop, &c->accept_w);
	else if (c->in_fd >= 0 && !c->input_paused)
		ev_io_start(c->loop, &c->in_w);
}

void console_write(struct console *c, const void *buf, size_t len)
{
	if (!c->tcp && c->out_fd < 0)
		return;
	if (out_reserve(c, len)) {
		log_error(TAG, "out of memory: %zu console bytes dropped", len);
		return;
	}
	memcpy(c->out + c->out_len, buf, len);
	c->out_len += len;
	if (c->out_fd < 0)
		out_trim(c, CONSOLE_BACKLOG); /* kept for the next client */
	try_write(c);
	out_limit(c);
}

void console_input_resume(struct console *c)
{
	if (!c->input_paused)
		return;
	c->input_paused = false;
	deliver_input(c);
	if (!c->input_paused && c->in_fd >= 0)
		ev_io_start(c->loop, &c->in_w);
}

void console_flush(struct console *c)
{
	uint64_t deadline = now_ns() + 2000000000ull;

	while (out_pending(c) && c->out_fd >= 0 && now_ns() < deadline) {
		struct pollfd p = { .fd = c->out_fd, .events = POLLOUT };

		poll(&p, 1, 100);
		try_write(c);
	}
}

int console_port(const struct console *c)
{
	return c->port;
}

void console_unserve(struct console *c)
{
	drop_client(c);
	ev_io_stop(c->loop, &c->accept_w);
	ev_io_stop(c->loop, &c->in_w);
	memset(&c->ops, 0, sizeof(c->ops));
	c->out_off = c->out_len = 0;    /* no backlog of this copy for a later client */
	c->pending_in_len = c->pending_in_off = 0;
}

/* Stops listening and drops the client (a fenced primary keeps quiet). */
static void console_close_endpoint(struct console *c)
{
	drop_client(c);
	if (c->listen_fd >= 0) {
		ev_io_stop(c->loop, &c->accept_w);
		net_accept_guard_fini(&c->guard);
		close(c->listen_fd);
		c->listen_fd = -1;
	}
}

void console_free(struct console *c)
{
	if (!c)
		return;
	ev_io_stop(c->loop, &c->in_w);
	ev_io_stop(c->loop, &c->out_w);
	ev_timer_stop(c->loop, &c->eof_w);
	ev_timer_stop(c->loop, &c->idle_w);
	console_close_endpoint(c);
	if (!c->tcp && c->in_fd == 0) {
		int fl = fcntl(0, F_GETFL);

		if (fl >= 0)
			fcntl(0, F_SETFL, fl & ~O_NONBLOCK);
	}
	free(c->out);
	free(c);
}
