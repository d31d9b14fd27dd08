/* A service of net/ (see net/net.h), not a transport.
 * A blocking TCP client for a line console, for tools that talk to a guest
 * as a user would (understudy drill local): connect with a deadline, send
 * a whole buffer, receive what arrives within a timeout. No loop, no
 * framing: lines are the caller's business. */
#ifndef US_NET_LINECLIENT_H
#define US_NET_LINECLIENT_H

#include <stddef.h>
#include <sys/types.h>

/* Connects to "HOST:PORT", retrying a refused connection until timeout_ms
 * has passed: the fd (TCP_NODELAY, blocking) or -errno. */
int net_line_connect(const char *host_port, int timeout_ms) __attribute__((warn_unused_result));
/* All of buf, or -errno (a closed peer: -EPIPE, no SIGPIPE). */
int net_line_send(int fd, const void *buf, size_t len) __attribute__((warn_unused_result));
/* Bytes that arrive within timeout_ms (0: only those already there): the
 * count, 0 when the peer closed, -EAGAIN when nothing came, or -errno. */
ssize_t net_line_recv(int fd, void *buf, size_t len, int timeout_ms)
	__attribute__((warn_unused_result));

#endif
