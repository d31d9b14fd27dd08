/* Control socket: one request line in, one reply out, per connection.
 * Requests are small and answered at once, so a connection is served
 * synchronously on accept with a short receive timeout. */
#include "net/control.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "kmod/log.h"

#define TAG "control"
#define REQ_MAX 256
#define REPLY_MAX 8192

struct control {
	struct ev_loop *loop;
	ev_io io;
	int fd;
	char path[108];
	control_fn fn;
	void *ctx;
};

static int make_addr(const char *path, struct sockaddr_un *a)
{
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(a->sun_path))
		return -ENAMETOOLONG;
	strcpy(a->sun_path, path);
	return 0;
}

static void serve(struct control *c, int fd)
{
	struct timeval tv = { 1, 0 };
	char req[REQ_MAX], *reply;
	size_t have = 0;
	int n;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	while (have < sizeof(req) - 1) {
		ssize_t r = read(fd, req + have, sizeof(req) - 1 - have);

		if (r <= 0)
			break;
		have += (size_t)r;
		if (memchr(req, '\n', have))
			break;
	}
	req[have] = 0;
	req[strcspn(req, "\r\n")] = 0;
	reply = malloc(REPLY_MAX);
	if (!reply)
		return;
	n = c->fn(c->ctx, req, reply, REPLY_MAX);
	if (n < 0)
		n = snprintf(reply, REPLY_MAX, "error %s\n", strerror(-n));
	if (n > REPLY_MAX - 1)
		n = REPLY_MAX - 1;
	if (write(fd, reply, (size_t)n) < 0)
		log_debug(TAG, "reply not delivered: %s", strerror(errno));
	free(reply);
}

static void on_accept(struct ev_loop *loop, ev_io *w, int revents)
{
	struct control *c = w->data;
	int fd = accept4(c->fd, NULL, NULL, SOCK_CLOEXEC);

	(void)loop;
	(void)revents;
	if (fd < 0)
		return;
	serve(c, fd);
	close(fd);
}

int control_open(struct ev_loop *loop, const char *path, control_fn fn, void *ctx,
		 struct control **out)
{
	struct sockaddr_un a;
	struct control *c;
	int r;

	if ((r = make_addr(path, &a)) < 0) {
		log_error(TAG, "control socket path too long: %s", path);
		return r;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (c->fd < 0) {
		r = -errno;
		goto err;
	}
	unlink(path);
	if (bind(c->fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(c->fd, 8) < 0) {
		r = -errno;
		log_error(TAG, "control socket %s: %s", path, strerror(errno));
		close(c->fd);
		goto err;
	}
	c->loop = loop;
	c->fn = fn;
	c->ctx = ctx;
	snprintf(c->path, sizeof(c->path), "%s", path);
	ev_io_init(&c->io, on_accept, c->fd, EV_READ);
	c->io.data = c;
	ev_io_start(loop, &c->io);
	*out = c;
	return 0;
err:
	free(c);
	return r;
}

void control_free(struct control *c)
{
	if (!c)
		return;
	ev_io_stop(c->loop, &c->io);
	close(c->fd);
	unlink(c->path);
	free(c);
}

int control_request(const char *path, const char *req, char *out, size_t len)
{
	struct sockaddr_un a;
	struct timeval tv = { 5, 0 };
	size_t have = 0;
	int fd, r;

	if ((r = make_addr(path, &a)) < 0)
		return r;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    write(fd, req, strlen(req)) < 0 || write(fd, "\n", 1) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	while (have < len - 1) {
		ssize_t n = read(fd, out + have, len - 1 - have);

		if (n <= 0)
			break;
		have += (size_t)n;
	}
	out[have] = 0;
	close(fd);
	return (int)have;
}
