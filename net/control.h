/* The control socket of an agent: a unix socket on the agent's libev loop.
 * A client sends one request line, gets the handler's reply text, and the
 * connection closes. */
#ifndef US_NET_CONTROL_H
#define US_NET_CONTROL_H

#include <ev.h>
#include <stddef.h>

struct control;

/* Writes the reply to req into out (len bytes); returns its length or -errno. */
typedef int (*control_fn)(void *ctx, const char *req, char *out, size_t len);

int control_open(struct ev_loop *loop, const char *path, control_fn fn, void *ctx,
		 struct control **out) __attribute__((warn_unused_result));
void control_free(struct control *c);
/* Client side: sends req to the socket at path, reply into out. */
int control_request(const char *path, const char *req, char *out, size_t len)
	__attribute__((warn_unused_result));

#endif
