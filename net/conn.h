/* net/ private: the connection object shared by the socket transports
 * (net/net.c) and the RDMA transport (net/rdma.c). Not for other modules. */
#ifndef US_NET_CONN_H
#define US_NET_CONN_H

#include <stdint.h>

#include <openssl/ssl.h>

#include "net/net.h"

struct seg {
	const uint8_t *base;
	size_t len;
	void *cookie;
	bool last; /* last segment of a net_send(): completes the cookie */
};

#define NET_TBUF_BYTES (64 * 1024) /* TLS staging for small segments */

struct rdma_link;

struct net_conn {
	struct ev_loop *loop;
	ev_io rio, wio;
	int fd;                       /* TCP; for RDMA the bootstrap and liveness socket */
	SSL *ssl;
	bool connecting, handshaking, dead, freeing;
	bool closing;                 /* net_close_flush(): close once flushed */
	int busy;                     /* callbacks on the stack */
	struct net_listener *listener; /* set while a server handshake runs */
	struct net_conn *hs_next, *hs_prev;
	const struct net_conn_ops *ops;
	void *ctx;
	struct seg *q;                /* send queue [qhead, qtail) */
	size_t qhead, qtail, qcap;
	size_t queued;
	uint8_t *rbuf;
	uint8_t *tbuf;                /* TLS staging: [toff, tlen) not yet taken */
	size_t toff, tlen;
	uint8_t *wout;                /* TLS records: [woff, wlen) not yet written */
	size_t woff, wlen;
	BIO_METHOD *wmeth;
	bool want_rdma;               /* NET_RDMA: the socket bootstraps an RDMA link */
	char *rdma_provider;          /* NET_RDMA: libfabric provider asked for, or NULL */
	struct rdma_link *rdma;       /* NET_RDMA */
	size_t issue_idx;             /* RDMA: next bytes to write: q[issue_idx] */
	const uint8_t *issue_ptr;     /* at this address (NULL: its start) */
	char peer[64];
};

/* net/net.c */
/* n bytes taken from the queue head, sent() as due; count: and from queued. */
void net_conn_consume(struct net_conn *c, size_t n, bool count);
void net_conn_fail(struct net_conn *c, int reason);    /* closed(reason), then freed */
void net_conn_up(struct net_conn *c);                  /* handshake done: accept/connected */
void net_conn_enter(struct net_conn *c);               /* around callbacks from a watcher */
void net_conn_leave(struct net_conn *c);
void net_conn_finish_close(struct net_conn *c);        /* closing and flushed */

/* net/tls.c */
SSL_CTX *tls_ctx_new(const struct net_config *cfg, bool server);
int tls_attach(struct net_conn *c);            /* SSL_new'ed c->ssl onto c->fd */
void tls_handshake(struct net_conn *c);        /* a step; net_conn_up() when done */
int tls_flush(struct net_conn *c);             /* 0, -EAGAIN or fatal -errno */
int tls_result(struct net_conn *c, int ret, const char *what);
int tls_wout_flush(struct net_conn *c);
bool tls_wout_pending(const struct net_conn *c);
void tls_log_errors(const char *what, const char *peer);

/* net/rdma.c. rdma_start() runs on the established bootstrap socket: opens
 * the endpoint and sends the setup message; rdma_ctl_recv() takes the bytes
 * read from that socket afterwards. */
int rdma_start(struct net_conn *c);
void rdma_ctl_recv(struct net_conn *c, const uint8_t *data, size_t len);
void rdma_kick(struct net_conn *c);    /* sends queued: write them */
void rdma_drain(struct net_conn *c);   /* bootstrap closed: deliver what arrived */
void rdma_fin(struct net_conn *c);     /* closing: tell the peer how much to expect */
void rdma_free(struct rdma_link *r);

#endif
