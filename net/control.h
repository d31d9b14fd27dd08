/* A service of net/ (see net/net.h), not a transport.
 * The control socket of an agent: a unix stream socket on the agent's libev
 * loop. A client connects, sends one request line, gets one reply text, and
 * the connection closes. What requests mean is the owner's business: the
 * handler maps a request string to a reply string. */
#ifndef US_NET_CONTROL_H
#define US_NET_CONTROL_H

#include <ev.h>
#include <stddef.h>

#define CONTROL_MAX_REQUEST 4096

struct control;

/* Called on the loop thread with the request line (no '\n'). Returns the
 * reply, malloc'd (the control socket frees it), or NULL for "error". */
typedef char *(*control_handler)(void *ctx, const char *request);

/* Listens at path (a stale socket file there is replaced; anything else
 * there is an error). The socket file is 0600 from its creation; a client
 * that is neither the agent's uid nor root gets "error permission denied..."
 * and is closed without reaching the handler. */
int control_open(struct ev_loop *loop, const char *path, control_handler handler, void *ctx,
		 struct control **out) __attribute__((warn_unused_result));
/* Stops listening, drops open connections, removes the socket file. */
void control_free(struct control *c);

/* Client side, blocking: sends request to the socket at path and returns the
 * whole reply (malloc'd) in *reply; gives up after timeout_ms. */
int control_request(const char *path, const char *request, int timeout_ms, char **reply)
	__attribute__((warn_unused_result));

#endif
