/* Addresses and TCP sockets for net/. See net/socket.h. */
#include "net/socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define TAG "net"
#define SOCKBUF_DEFAULT (4 * 1024 * 1024)

int net_parse_host_port(const char *host_port, bool port0_ok, char *host, size_t host_len,
			int *port)
{
	const char *colon = strrchr(host_port, ':'), *h = host_port, *d;
	unsigned long v = 0;
	size_t hlen;

	if (!colon)
		return -EINVAL;
	hlen = (size_t)(colon - host_port);
	if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
		h++;
		hlen -= 2;
	}
	if (hlen >= host_len)
		return -EINVAL;
	/* Digits only: no sign, no space, no hex; at most 5 of them, so that
	 * a long string cannot wrap either. */
	for (d = colon + 1; *d; d++) {
		if (*d < '0' || *d > '9' || d - colon > 5)
			return -ERANGE;
		v = v * 10 + (unsigned long)(*d - '0');
	}
	if (d == colon + 1 || v > 65535 || (v == 0 && !port0_ok))
		return -ERANGE;
	memcpy(host, h, hlen);
	host[hlen] = 0;
	*port = (int)v;
	return 0;
}

int net_sock_resolve(const char *host_port, bool port0_ok, struct sockaddr_storage *ss,
		     socklen_t *sslen)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
	struct addrinfo *ai;
	char host[256], service[8];
	int port, r;

	r = net_parse_host_port(host_port, port0_ok, host, sizeof(host), &port);
	if (r == -ERANGE) {
		log_error(TAG, "%s: bad port, need 1..65535", host_port);
		return -EINVAL;
	}
	if (r) {
		log_error(TAG, "%s: need HOST:PORT", host_port);
		return -EINVAL;
	}
	snprintf(service, sizeof(service), "%d", port);
	r = getaddrinfo(host, service, &hints, &ai);
	if (r) {
		log_error(TAG, "cannot resolve %s: %s", host_port, gai_strerror(r));
		return -EHOSTUNREACH;
	}
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	*sslen = ai->ai_addrlen;
	freeaddrinfo(ai);
	return 0;
}

void net_sock_set_options(int fd, const struct net_config *cfg)
{
	int one = 1, buf = cfg->sockbuf_bytes ? cfg->sockbuf_bytes : SOCKBUF_DEFAULT;

	/* Best effort: the kernel caps buffers at net.core.[rw]mem_max. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
}

void net_sock_peer_name(const struct sockaddr_storage *ss, char *out, size_t len)
{
	char addr[INET6_ADDRSTRLEN] = "?";

	if (ss->ss_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)ss)->sin_addr, addr, sizeof(addr));
	else if (ss->ss_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)ss)->sin6_addr, addr,
			  sizeof(addr));
	snprintf(out, len, "%s:%u", addr, ntohs(((const struct sockaddr_in *)ss)->sin_port));
}

int net_sock_listen(const struct net_config *cfg, const char *host_port,
		    struct sockaddr_storage *ss, socklen_t sslen, int *port)
{
	int fd, one = 1, r;

	fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	net_sock_set_options(fd, cfg); /* inherited by accepted sockets, before the handshake */
	if (bind(fd, (struct sockaddr *)ss, sslen) < 0 || listen(fd, NET_LISTEN_BACKLOG) < 0) {
		r = -errno;
		log_error(TAG, "listen on %s: %s", host_port, strerror(-r));
		close(fd);
		return r;
	}
	sslen = sizeof(*ss);
	getsockname(fd, (struct sockaddr *)ss, &sslen);
	*port = ntohs(((struct sockaddr_in *)ss)->sin_port);
	return fd;
}

int net_sock_local_host(int fd, char *host, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sslen = sizeof(ss);
	const void *a;

	if (getsockname(fd, (struct sockaddr *)&ss, &sslen))
		return -errno;
	a = ss.ss_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr
				     : (const void *)&((struct sockaddr_in *)&ss)->sin_addr;
	return inet_ntop(ss.ss_family, a, host, (socklen_t)len) ? 0 : -errno;
}

/* ---- accepting under pressure ----------------------------------------------------- */

static void on_accept_pause_end(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct net_accept_guard *g = w->data;

	(void)revents;
	ev_io_start(loop, g->io);
}

void net_accept_guard_init(struct net_accept_guard *g, struct ev_loop *loop, ev_io *io,
			   const char *tag, const char *name)
{
	memset(g, 0, sizeof(*g));
	g->loop = loop;
	g->io = io;
	g->tag = tag;
	g->last_log = -NET_ACCEPT_LOG_S;
	snprintf(g->name, sizeof(g->name), "%s", name);
	ev_timer_init(&g->pause_w, on_accept_pause_end, NET_ACCEPT_PAUSE_MS / 1e3, 0);
	g->pause_w.data = g;
}

void net_accept_guard_fini(struct net_accept_guard *g)
{
	ev_timer_stop(g->loop, &g->pause_w);
}

void net_accept_log(struct net_accept_guard *g, const char *what)
{
	ev_tstamp now = ev_now(g->loop);

	if (now - g->last_log < NET_ACCEPT_LOG_S) {
		g->unlogged++;
		return;
	}
	if (g->unlogged)
		log_warn(g->tag, "%s: %s (and %u more since the last line)", g->name, what,
			 g->unlogged);
	else
		log_warn(g->tag, "%s: %s", g->name, what);
	g->last_log = now;
	g->unlogged = 0;
}

void net_accept_failed(struct net_accept_guard *g, int err)
{
	char what[128];
	bool pause = err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;

	if (err == EAGAIN || err == EINTR || err == ECONNABORTED)
		return;
	if (pause)
		snprintf(what, sizeof(what), "accept: %s: accepting again in %d ms", strerror(err),
			 NET_ACCEPT_PAUSE_MS);
	else
		snprintf(what, sizeof(what), "accept: %s", strerror(err));
	net_accept_log(g, what);
	if (pause && !ev_is_active(&g->pause_w)) {
		ev_io_stop(g->loop, g->io);
		ev_timer_set(&g->pause_w, NET_ACCEPT_PAUSE_MS / 1e3, 0);
		ev_timer_start(g->loop, &g->pause_w);
	}
}
