/* A blocking TCP client for line consoles; see net/lineclient.h. */
#include "net/lineclient.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "net/socket.h"

static long long mono_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000LL + t.tv_nsec / 1000000;
}

int net_line_connect(const char *host_port, int timeout_ms)
{
	struct sockaddr_storage ss;
	socklen_t sslen;
	long long end = mono_ms() + timeout_ms;
	int r, fd, one = 1;

	if ((r = net_sock_resolve(host_port, false, &ss, &sslen)) < 0)
		return r;
	for (;;) {
		fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		if (connect(fd, (struct sockaddr *)&ss, sslen) == 0) {
			(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			return fd;
		}
		r = -errno;
		close(fd);
		/* A console not listening yet (an agent starting) is retried. */
		if ((r != -ECONNREFUSED && r != -EINTR) || mono_ms() >= end)
			return r;
		usleep(10000);
	}
}

int net_line_send(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

ssize_t net_line_recv(int fd, void *buf, size_t len, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	ssize_t n;
	int r;

	do
		r = poll(&p, 1, timeout_ms);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	if (r == 0)
		return -EAGAIN;
	n = recv(fd, buf, len, MSG_DONTWAIT);
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	return n;
}
