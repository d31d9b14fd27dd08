/* net/ private: addresses and TCP sockets, no connection state. Used by
 * net/open.c (connect, listen, accept) and net/rdma.c (its local address). */
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

#endif
