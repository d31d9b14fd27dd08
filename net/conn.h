/* net/ private: the contract between the connection core (net/net.c) and the
 * transports (net/tcp.c, net/tls.c, net/rdma.c), and the constructors
 * net/open.c uses. Not for other modules.
 *
 * net.c owns struct net_conn and keeps it opaque: the socket and its two
 * watchers, the lifecycle (connecting -> handshaking -> up -> closing ->
 * dead) and the send queue. A transport is a table of ops plus a private
 * state per connection, created by attach() and freed by detach(). net.c
 * calls a transport only through the table of the connection; a transport
 * sees the connection only through the helpers declared below, and never
 * includes another transport. open.c (net_connect, net_listen, accept) is
 * the only file that names a table: it picks one for the config and makes
 * the connection with it. Dependencies point one way:
 * open.c -> {tcp.c, tls.c, rdma.c} -> net.c, and open.c -> net.c; net.c
 * reaches the ops through pointers only. */
#ifndef US_NET_CONN_H
#define US_NET_CONN_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "net/net.h"

/* One transport. Every op runs on the loop's thread. start, handshake,
 * read and flush run with the connection held (net_conn_enter), so it stays
 * valid until they return even if a callback of the layer above (run by
 * deliver, consume, up or fail) closed it: check net_conn_dead() after
 * those. The transport's own watchers hold it the same way. */
struct net_transport_ops {
	const char *name;
	/* Optional: state shared by the connections of one listener or of one
	 * net_connect() (TLS: the SSL_CTX). 0 or -errno, logged. */
	int (*endpoint_new)(const struct net_config *cfg, bool server, void **ep);
	void (*endpoint_free)(void *ep);
	/* The private state of connection c on socket fd (net.c closes fd).
	 * host: the server's name or address to verify (client), or NULL
	 * (accepted connection). 0 or -errno. */
	int (*attach)(struct net_conn *c, int fd, void *ep, const char *host, void **priv);
	void (*detach)(void *priv);
	/* The socket is connected or accepted: run the transport's own setup,
	 * then net_conn_up(), possibly inside this call. -errno (logged) makes
	 * net.c fail the connection. */
	int (*start)(void *priv);
	/* Optional: the socket is ready while the setup runs (the TLS
	 * handshake). Without it, read() gets the socket's events then. */
	void (*handshake)(void *priv);
	/* The socket is readable: read until it would block, pass the bytes
	 * to net_conn_deliver(); net_conn_fail() at its end or on an error. */
	void (*read)(void *priv);
	/* The socket is writable: write from the send queue. 0 when the queue
	 * is written out, -EAGAIN, or a fatal -errno. NULL for a transport that
	 * writes on its own (kick()); the socket then carries only its setup. */
	int (*flush)(void *priv);
	/* Optional, with flush(): bytes held beyond the queue (TLS records). */
	bool (*pending)(const void *priv);
	/* Without flush(): sends are queued, the connection came up or is
	 * closing. May be called from net_send(), so it only schedules the
	 * work on the loop (no callbacks inside); that work calls
	 * net_conn_finish_close() once a closing connection is drained. */
	void (*kick)(void *priv);
	/* Optional: a best-effort goodbye before a clean close (TLS
	 * close_notify, RDMA's completed byte count). */
	void (*shutdown)(void *priv);
	/* Optional: what protects the bytes, for net_security(). */
	const char *(*describe)(const void *priv);
};

/* Named only by net/open.c, which picks one for a config. */
extern const struct net_transport_ops net_tcp_ops;  /* net/tcp.c */
extern const struct net_transport_ops net_tls_ops;  /* net/tls.c */
extern const struct net_transport_ops net_rdma_ops; /* net/rdma.c */

/* ---- net.c helpers for transports: the whole way back ---------------------- */

/* Lifecycle. */
void net_conn_up(struct net_conn *c);            /* setup done: accept() or connected() */
void net_conn_fail(struct net_conn *c, int reason); /* closed(reason), pending sends fail */
void net_conn_finish_close(struct net_conn *c);  /* net_close_flush() drained: goodbye, closed(0) */
bool net_conn_dead(const struct net_conn *c);
bool net_conn_closing(const struct net_conn *c); /* net_close_flush() was called */
void net_conn_enter(struct net_conn *c);         /* hold c around callbacks from the */
void net_conn_leave(struct net_conn *c);         /* transport's own watchers */

/* Receiving: where to read the next bytes to (the consumer's buffer when it
 * offers one, else net's own), and handing them up through ops->recv. */
uint8_t *net_conn_rbuf(struct net_conn *c, size_t *cap);
void net_conn_deliver(struct net_conn *c, const void *data, size_t len);

/* The socket's watchers. */
struct ev_loop *net_conn_loop(const struct net_conn *c);
void net_conn_watch_read(struct net_conn *c, bool on);
void net_conn_watch_write(struct net_conn *c, bool on);
void net_conn_feed_read(struct net_conn *c);     /* readable again without an event */

/* The send queue: segments of net_send()s, released from the head. */
bool net_queue_head(const struct net_conn *c, const uint8_t **base, size_t *len);
int net_queue_iov(const struct net_conn *c, struct iovec *iov, int max);
/* n bytes taken from the head, sent() as due. count: also off
 * net_queued_bytes(); else net_queue_taken() does that later (staging). */
void net_queue_consume(struct net_conn *c, size_t n, bool count);
void net_queue_taken(struct net_conn *c, size_t n);
/* An issue cursor for transports whose writes complete later: the next
 * bytes not yet issued (false: all are), and moving past n of them. */
bool net_queue_next(struct net_conn *c, const uint8_t **p, size_t *len);
void net_queue_issued(struct net_conn *c, size_t n);
bool net_queue_unissued(const struct net_conn *c);

/* ---- making connections: net_connect() and a listener's accept ------------- */

/* What a listener hands the connections it accepts: fn(l, c, ctx) once one
 * is up (in place of connected()), and the list of those still in their
 * setup, which a connection leaves when it comes up or is freed. The setup
 * slots are shared fairly (net_acceptor_admit): at most max_setups at once,
 * per_source of them from one address; one that has sent nothing yet
 * (silent) must send within silent_ms, and is the first to go for a
 * newcomer when the slots are full. */
struct net_conn_acceptor {
	struct net_listener *l;
	net_accept_fn fn;
	void *ctx;
	struct net_conn *hs_head;
	unsigned hs_count;            /* on that list */
	unsigned setup_ms;            /* deadline of each one's setup */
	unsigned silent_ms;           /* ... until its first byte (<= setup_ms) */
	unsigned max_setups, per_source;
	uint64_t silent_log_ns;       /* silent ones dropped: one line per 10 s */
	unsigned silent_unlogged;
};

/* A connection on socket fd with transport t; ep and host as for
 * t->attach(), peer ("HOST:PORT") for log lines. Takes fd: closed on
 * failure too. 0 or -errno. Free it with net_close(). */
int net_conn_new(struct ev_loop *loop, int fd, const struct net_transport_ops *t, void *ep,
		 const char *host, const char *peer, struct net_conn **out) US_MUST_CHECK;
/* Client: a non-blocking connect of c's socket to ss; connected() or
 * closed() follows, closed(-ETIMEDOUT) if c is not up within setup_ms.
 * -errno (logged) leaves c to the caller. */
int net_conn_dial(struct net_conn *c, const struct sockaddr_storage *ss, socklen_t sslen,
		  unsigned setup_ms) US_MUST_CHECK;
/* Server: c was accepted for a: it joins a's list and its setup starts,
 * dropped if it sends nothing within a->silent_ms or is not up within
 * a->setup_ms. c may be gone on return. */
void net_conn_accept(struct net_conn *c, struct net_conn_acceptor *a);
/* Before accepting one more from peer ("ADDR:PORT"): room for it. When its
 * address already has per_source setups, the oldest of them that has sent
 * nothing (else the oldest) is closed; when all max_setups are taken, the
 * oldest silent one, else the oldest if it has been at it longer than
 * silent_ms. 0 when there is room now (*evicted: "" or whom it closed,
 * for a log line), -EBUSY when every setup is young and talking: the
 * newcomer must go. */
int net_acceptor_admit(struct net_conn_acceptor *a, const char *peer, char *evicted,
		       size_t len) US_MUST_CHECK;

#endif
