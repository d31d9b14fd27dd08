/* A service of net/ (see net/net.h), not a transport.
 * The console endpoint of a VM: stdio, or a TCP listener that one client at a
 * time connects to ("tcp:HOST:PORT"). Runs on a libev loop; only that loop's
 * thread may call these functions. Output written while no client is
 * connected is kept (the latest CONSOLE_BACKLOG bytes) for the next client.
 * A connected client that lets more than CONSOLE_CLIENT_MAX bytes wait is
 * dropped (logged), and the next one gets the backlog; on stdio the oldest
 * waiting bytes are dropped instead.
 *
 * A TCP client that half-closes (read EOF: `nc -N`, a script done sending)
 * has sent its last request, not given up on the replies: input stops, the
 * connection stays and output keeps flowing to it. The console closes it
 * once nothing is waiting (no input the guest has not taken, no output
 * unwritten here or held by the owner, e.g. for output commit) and nothing
 * has moved for CONSOLE_EOF_QUIET_MS (a client that sent nothing, such as
 * a port probe, as soon as nothing is waiting), and at the latest
 * CONSOLE_EOF_MAX_MS after the EOF. Output not yet written when a client
 * goes (or is closed) stays in the backlog for the next client; bytes the
 * kernel took for a peer that had already closed its socket go with it.
 *
 * One client at a time, but nobody idle keeps the console from the next
 * user: a TCP client that has sent nothing yet, or nothing for
 * CONSOLE_IDLE_MS, gives way to the next one that connects (it is closed,
 * logged, and the newcomer gets the console). A client typing, or one that
 * half-closed and waits for its replies, keeps it; a newcomer waits in the
 * backlog meanwhile. */
#ifndef US_NET_CONSOLE_H
#define US_NET_CONSOLE_H

#include <ev.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CONSOLE_BACKLOG (1u << 20)
#define CONSOLE_CLIENT_MAX (4u << 20)
#define CONSOLE_EOF_QUIET_MS 1000
#define CONSOLE_EOF_MAX_MS 10000
#define CONSOLE_IDLE_MS 60000

struct console;

struct console_ops {
	/* Bytes typed by the client; returns how many were taken. When fewer,
	 * input stops until console_input_resume(). */
	size_t (*input)(void *ctx, const uint8_t *buf, size_t len);
	/* stdin reached end of file, or a TCP client went away (for a client
	 * that half-closed: when the console closes it, see above). */
	void (*hangup)(void *ctx);
	/* Optional: true while the owner holds output it will write later (the
	 * guest's replies waiting for an ACK); a half-closed client waits. */
	bool (*output_held)(void *ctx);
	void *ctx;
};

/* spec: "stdio" or "tcp:HOST:PORT" (HOST:PORT as net_parse_host_port; PORT 0
 * picks a free port here, but is refused by console_check_spec). */
int console_open(struct ev_loop *loop, const char *spec, const struct console_ops *ops,
		 struct console **out) __attribute__((warn_unused_result));
/* Acquires the endpoint of spec (binds and listens on a TCP port) without
 * serving it: nobody is accepted and nothing is read until console_serve().
 * A standby holds its console this way so that a takeover cannot fail on
 * the port. */
int console_bind(struct ev_loop *loop, const char *spec, struct console **out)
	__attribute__((warn_unused_result));
/* Starts serving a console from console_bind() with ops. */
void console_serve(struct console *c, const struct console_ops *ops);
void console_free(struct console *c);
/* Checks a spec from the command line without opening anything: 0, -EINVAL
 * or -ERANGE (a port outside 1..65535). */
int console_check_spec(const char *spec);
void console_write(struct console *c, const void *buf, size_t len);
void console_input_resume(struct console *c);
/* Blocks until everything written has left (used before exit). */
void console_flush(struct console *c);
/* The bound TCP port, or 0 for stdio. */
int console_port(const struct console *c);
/* Back to bound and not served (a primary that became a standby after a
 * switchover): the client is dropped, nothing is accepted or read, and the
 * output kept for the next client is forgotten. */
void console_unserve(struct console *c);

#endif
