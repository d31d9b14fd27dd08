/* Opening links: net_connect(), net_listen() and the accept path. This is
 * where a config picks its transport: the one file that names the
 * transports' ops tables (net/tcp.c, net/tls.c, net/rdma.c). It sits above
 * them and above the connection core (net/net.c), which it reaches through
 * net/conn.h; nothing in net/ calls back into it. See net/net.h. */
#include "net/net.h"
#include "net/conn.h"
#include "net/socket.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TAG "net"
#define SETUP_MS_DEFAULT 5000
/* Connections of a listener still in their setup (TLS handshake, RDMA
 * setup): at most this many, so a flood of silent clients cannot take every
 * file descriptor, and at most LISTEN_PER_SOURCE from one address. A TLS
 * connection must send its first bytes within LISTEN_SILENT_MS (a real
 * client's ClientHello leaves at once), and one that has not is the first to
 * make room for a newcomer while it has not: anyone who can reach the port
 * could otherwise hold every slot with plain connects and keep the real
 * peer out (see net_acceptor_admit). */
#define LISTEN_MAX_SETUPS 16
#define LISTEN_PER_SOURCE 4
#define LISTEN_SILENT_MS 1000

struct net_listener {
	struct ev_loop *loop;
	ev_io io;
	int fd;
	int port;
	struct net_config cfg;
	const struct net_transport_ops *t;
	void *ep;                     /* the transport's endpoint state */
	struct net_conn_acceptor acc; /* fn, ctx, connections in their handshake */
	struct net_accept_guard guard;
};

static int check_config(const struct net_config *cfg)
{
	switch (cfg->transport) {
	case NET_TLS:
		return 0;
	case NET_TCP:
		if (!cfg->insecure) {
			log_error(TAG, "plaintext TCP refused without --insecure");
			return -EPERM;
		}
		log_warn(TAG, "INSECURE: plaintext TCP, no authentication, no encryption");
		return 0;
	case NET_RDMA:
		if (!cfg->insecure) {
			log_error(TAG, "RDMA refused without --insecure (no encryption on the fabric)");
			return -EPERM;
		}
		log_warn(TAG, "INSECURE: RDMA link, no authentication, no encryption: trusted "
			 "fabric only");
		return 0;
	}
	return -EINVAL;
}

/* After check_config(). */
static const struct net_transport_ops *transport_of(const struct net_config *cfg)
{
	switch (cfg->transport) {
	case NET_TCP:
		return &net_tcp_ops;
	case NET_RDMA:
		return &net_rdma_ops;
	case NET_TLS:
	default:
		return &net_tls_ops;
	}
}

static unsigned setup_ms(const struct net_config *cfg)
{
	return cfg->setup_timeout_ms ? cfg->setup_timeout_ms : SETUP_MS_DEFAULT;
}

/* A TLS client's hello leaves as soon as it is connected; an RDMA peer
 * opens its fabric endpoint first (seconds under load): it gets the whole
 * setup deadline to speak, and only loses its place to newcomers sooner. */
static unsigned silent_ms(const struct net_config *cfg)
{
	return cfg->transport == NET_TLS ? LISTEN_SILENT_MS : setup_ms(cfg);
}

static int endpoint_new(const struct net_transport_ops *t, const struct net_config *cfg,
			bool server, void **ep)
{
	*ep = NULL;
	return t->endpoint_new ? t->endpoint_new(cfg, server, ep) : 0;
}

static void endpoint_free(const struct net_transport_ops *t, void *ep)
{
	if (t->endpoint_free)
		t->endpoint_free(ep);
}

/* ---- connect ---------------------------------------------------------------- */

int net_connect(struct ev_loop *loop, const struct net_config *cfg, const char *host_port,
		const struct net_conn_ops *ops, void *ctx, struct net_conn **out)
{
	const struct net_transport_ops *t = transport_of(cfg);
	struct sockaddr_storage ss;
	struct net_conn *c;
	socklen_t sslen;
	char host[256];
	void *ep;
	int fd, port, r;

	r = check_config(cfg);
	if (!r)
		r = net_sock_resolve(host_port, false, &ss, &sslen);
	if (!r)
		r = net_parse_host_port(host_port, false, host, sizeof(host), &port);
	if (!r)
		r = endpoint_new(t, cfg, false, &ep);
	if (r)
		return r;
	/* host: the server's name or address, verified against its certificate. */
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		r = -errno;
	} else {
		net_sock_set_options(fd, cfg);
		r = net_conn_new(loop, fd, t, ep, host, host_port, &c);
	}
	endpoint_free(t, ep); /* each connection holds what it needs of it */
	if (r)
		return r;
	net_conn_set_ops(c, ops, ctx);
	r = net_conn_dial(c, &ss, sslen, setup_ms(cfg));
	if (r) {
		net_close(c); /* not up: frees it, no callbacks */
		return r;
	}
	*out = c;
	return 0;
}

/* ---- listen ----------------------------------------------------------------- */

static void on_accept(struct ev_loop *loop, ev_io *w, int revents)
{
	struct net_listener *l = w->data;
	struct sockaddr_storage ss;
	socklen_t sslen = sizeof(ss);
	struct net_conn *c;
	char peer[64], evicted[96], what[192];
	int fd, r;

	(void)revents;
	fd = accept4(l->fd, (struct sockaddr *)&ss, &sslen, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0) {
		net_accept_failed(&l->guard, errno);
		return;
	}
	net_sock_peer_name(&ss, peer, sizeof(peer));
	if (net_acceptor_admit(&l->acc, peer, evicted, sizeof(evicted))) {
		snprintf(what, sizeof(what), "%s closed: %d connections already in their setup, "
			 "none silent or stalled", peer, LISTEN_MAX_SETUPS);
		net_accept_log(&l->guard, what);
		close(fd);
		return;
	}
	if (evicted[0]) {
		snprintf(what, sizeof(what), "%s closed to make room for %s", evicted, peer);
		net_accept_log(&l->guard, what);
	}
	net_sock_set_options(fd, &l->cfg);
	r = net_conn_new(loop, fd, l->t, l->ep, NULL, peer, &c);
	if (r) {
		log_error(TAG, "accept: %s", strerror(-r));
		return;
	}
	net_conn_accept(c, &l->acc);
}

int net_listen(struct ev_loop *loop, const struct net_config *cfg, const char *host_port,
	       net_accept_fn fn, void *ctx, struct net_listener **out)
{
	struct sockaddr_storage ss;
	struct net_listener *l;
	socklen_t sslen;
	char name[64];
	int r;

	r = check_config(cfg);
	if (!r)
		r = net_sock_resolve(host_port, true, &ss, &sslen);
	if (r)
		return r;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->loop = loop;
	l->cfg = *cfg;
	l->acc = (struct net_conn_acceptor){ .l = l, .fn = fn, .ctx = ctx,
					     .setup_ms = setup_ms(cfg), .silent_ms = silent_ms(cfg),
					     .max_setups = LISTEN_MAX_SETUPS,
					     .per_source = LISTEN_PER_SOURCE };
	l->t = transport_of(cfg);
	r = endpoint_new(l->t, cfg, true, &l->ep);
	if (r)
		goto err_l;
	l->fd = net_sock_listen(cfg, host_port, &ss, sslen, &l->port);
	if (l->fd < 0) {
		r = l->fd;
		goto err_ep;
	}
	ev_io_init(&l->io, on_accept, l->fd, EV_READ);
	l->io.data = l;
	snprintf(name, sizeof(name), "listener on port %d", l->port);
	net_accept_guard_init(&l->guard, loop, &l->io, TAG, name);
	ev_io_start(loop, &l->io);
	*out = l;
	return 0;

err_ep:
	endpoint_free(l->t, l->ep);
err_l:
	free(l);
	return r;
}

int net_listener_port(const struct net_listener *l)
{
	return l->port;
}

void net_listener_close(struct net_listener *l)
{
	if (!l)
		return;
	ev_io_stop(l->loop, &l->io);
	net_accept_guard_fini(&l->guard);
	while (l->acc.hs_head)
		net_close(l->acc.hs_head); /* unlinks itself */
	close(l->fd);
	endpoint_free(l->t, l->ep);
	free(l);
}
