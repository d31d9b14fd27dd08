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

/* The framing of one request, apart from the socket: the bytes a client
 * sends go through control_feed() as they arrive, on the socket and in the
 * fuzz target alike (tests/fuzz/fuzz_control.c). */
struct control_line {
	size_t len;                     /* bytes held in buf */
	char buf[CONTROL_MAX_REQUEST];  /* NUL-terminated */
};

/* Appends data to l, as much as fits in CONTROL_MAX_REQUEST - 1 bytes (the
 * rest is dropped: the line is too long by then anyway). Returns 1 when a
 * line is complete, with *request pointing into l at the text before the
 * first '\n' (a '\r' before it removed); 0 while more bytes are needed;
 * -EMSGSIZE when l is full with no '\n'; -EINVAL when the line holds a NUL
 * byte. Bytes after the '\n' are ignored: one request per connection. */
int control_feed(struct control_line *l, const void *data, size_t n, const char **request)
	__attribute__((warn_unused_result));

struct control;

/* Requests are quoted in a reply up to this many bytes. */
#define CONTROL_SHOWN_MAX 64

/* The reply to a request the handler does not know (malloc'd, or NULL):
 * "error unknown request 'REQ' (this agent knows: KNOWN)\n", REQ cut at
 * CONTROL_SHOWN_MAX bytes, bytes outside printable ASCII shown as '?'. An
 * unknown request never gets a status or any other success. */
char *control_reply_unknown(const char *request, const char *known);

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
