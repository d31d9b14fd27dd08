/* net/ private: addresses and sockets, no connection state. Used by
 * net/open.c (connect, listen, accept), net/rdma.c (its local address) and
 * the services (console.c, control.c: the accept guard). */
#ifndef US_NET_SOCKET_H
#define US_NET_SOCKET_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "net/net.h"

/* "HOST:PORT" (net_parse_host_port; port 0 only if port0_ok) -> an
 * address: 0, -EINVAL or -EHOSTUNREACH (logged). */
int net_sock_resolve(const char *host_port, bool port0_ok, struct sockaddr_storage *ss,
		     socklen_t *sslen) US_MUST_CHECK;
/* TCP_NODELAY and cfg's buffer sizes, best effort. */
void net_sock_set_options(int fd, const struct net_config *cfg);
/* A non-blocking listening socket bound to ss: the fd (*port its port), or
 * -errno (logged). */
int net_sock_listen(const struct net_config *cfg, const char *host_port,
		    struct sockaddr_storage *ss, socklen_t sslen, int *port) US_MUST_CHECK;
/* "ADDR:PORT" of ss, for log lines. */
void net_sock_peer_name(const struct sockaddr_storage *ss, char *out, size_t len);
/* The local address of a connected socket, as text. 0 or -errno. */
int net_sock_local_host(int fd, char *host, size_t len);

/* ---- accepting under pressure, for every listener of net/ ------------------------
 * When accept() fails for want of file descriptors or memory (EMFILE,
 * ENFILE, ENOBUFS, ENOMEM) the pending connection keeps the listener
 * readable: its watcher would wake again at once, a busy loop. The guard
 * stops the watcher for NET_ACCEPT_PAUSE_MS instead, and keeps log lines
 * about a listener (failures, connections refused for being too many) to
 * one every NET_ACCEPT_LOG_S seconds, saying how many went unsaid. */
#define NET_ACCEPT_PAUSE_MS 100
#define NET_ACCEPT_LOG_S 10

struct net_accept_guard {
	struct ev_loop *loop;
	ev_io *io;                    /* the listener's accept watcher */
	ev_timer pause_w;
	const char *tag;
	char name[64];                /* the listener, for log lines */
	ev_tstamp last_log;
	unsigned unlogged;
};

void net_accept_guard_init(struct net_accept_guard *g, struct ev_loop *loop, ev_io *io,
			   const char *tag, const char *name);
/* Stops the pause timer; the caller stops its watcher. */
void net_accept_guard_fini(struct net_accept_guard *g);
/* accept() failed with errno err: pauses the watcher if err is a lack of
 * resources, logs (limited) anything but EAGAIN, EINTR and ECONNABORTED. */
void net_accept_failed(struct net_accept_guard *g, int err);
/* A line about the listener, at most one per NET_ACCEPT_LOG_S. */
void net_accept_log(struct net_accept_guard *g, const char *what);

#endif
