/* Plain TCP (NET_TCP): no setup of its own; the send queue goes out with
 * writev() straight from the callers' buffers, reads land where the
 * consumer asks. See net/conn.h for the transport contract. */
#include "net/conn.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <unistd.h>

#define WRITEV_MAX 1024 /* IOV_MAX */
#define READS_PER_EVENT 64

struct tcp_conn {
	struct net_conn *c;
	int fd;
};

static int tcp_attach(struct net_conn *c, int fd, void *ep, const char *host, void **priv)
{
	struct tcp_conn *t = calloc(1, sizeof(*t));

	(void)ep;
	(void)host;
	if (!t)
		return -ENOMEM;
	t->c = c;
	t->fd = fd;
	*priv = t;
	return 0;
}

static void tcp_detach(void *priv)
{
	free(priv);
}

static int tcp_start(void *priv)
{
	struct tcp_conn *t = priv;

	net_conn_up(t->c);
	return 0;
}

static void tcp_read(void *priv)
{
	struct tcp_conn *t = priv;
	struct net_conn *c = t->c;
	uint8_t *buf;
	size_t cap;
	ssize_t n;

	for (int i = 0; i < READS_PER_EVENT && !net_conn_dead(c); i++) {
		buf = net_conn_rbuf(c, &cap);
		n = read(t->fd, buf, cap);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return;
			net_conn_fail(c, -errno);
			return;
		}
		if (n == 0) {
			net_conn_fail(c, 0);
			return;
		}
		net_conn_deliver(c, buf, (size_t)n);
		if ((size_t)n < cap)
			return;
	}
}

static int tcp_flush(void *priv)
{
	struct tcp_conn *t = priv;
	struct net_conn *c = t->c;
	struct iovec iov[WRITEV_MAX];
	ssize_t n;
	int cnt;

	while (!net_conn_dead(c) && (cnt = net_queue_iov(c, iov, WRITEV_MAX)) > 0) {
		n = writev(t->fd, iov, cnt);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return errno == EAGAIN ? -EAGAIN : 0;
			return -errno;
		}
		net_queue_consume(c, (size_t)n, true);
	}
	return 0;
}

const struct net_transport_ops net_tcp_ops = {
	.name = "tcp",
	.attach = tcp_attach,
	.detach = tcp_detach,
	.start = tcp_start,
	.read = tcp_read,
	.flush = tcp_flush,
};
