/* net: moves bytes between the two agents on a libev loop. It knows nothing
 * of frames or checkpoints; the layers above never see a socket.
 *
 * What is in net/. The link, public API in this header: net.c is the core
 * (connection lifecycle, send queue, receiving) and reaches the transports
 * tcp.c, tls.c and rdma.c (libfabric in fabric.c) only through their ops
 * table; open.c (net_connect, net_listen, the listener and its accept
 * path) sits above both, picks the transport for a config and is the only
 * file that names one; net/conn.h is the contract between them and the
 * narrow set of core helpers a transport may call back; socket.c holds
 * address and socket helpers (the one HOST:PORT parser, and the accept
 * guard every listener of net/ uses to back off when out of fds). Beside
 * it, two services: console.c (a VM's console endpoint) and control.c (an
 * agent's control socket) are agent services on the loop, not transports:
 * they own their sockets, never touch a net_conn and must not include
 * net/conn.h. They stay in net/
 * because only net/ touches sockets (STYLE.md) and the agents include
 * net/console.h and net/control.h. Should they grow (authentication, more
 * clients), the place for them is a services/ folder of their own, with
 * these headers kept as the way in.
 *
 * Transports: TLS 1.3 with mutual certificate authentication (the default),
 * plain TCP (only with insecure = true, logged as a warning), and RDMA over
 * libfabric (net/rdma.c; also only with insecure = true: RDMA links carry no
 * encryption and belong on a trusted fabric). RDMA uses a TCP connection to
 * the same host:port for setup and liveness, so refusals, clean closes and
 * resets are reported as for TCP; the bytes go by one-sided RDMA writes.
 *
 * Ownership of sent data: net_send() queues the caller's iovec *bases*
 * (the iovec array itself is copied). The bytes must stay valid and
 * unchanged until the sent() callback fires for that cookie:
 *  - TCP: no copy, the queue is written with writev() straight from the
 *    caller's buffers; sent() fires once the kernel has taken every byte.
 *  - RDMA: no copy either, written from the caller's buffers into the
 *    peer's registered ring; sent() fires once the write has completed.
 *    The receiver copies bytes out of its ring before recv() (into
 *    recv_buf's buffer when given): the peer can write the ring at any
 *    time, so nothing is ever parsed in place there.
 *  - TLS: records are sealed by net itself (net/tls_record.c) straight
 *    from the caller's buffers, a record spanning segments as needed;
 *    sent() fires once the last byte is sealed. With tls_openssl_records
 *    (or if net's record layer cannot take over after the handshake),
 *    OpenSSL's record layer: segments of 16 KiB or more are encrypted
 *    from the caller's buffer (sent() once OpenSSL has taken them),
 *    smaller ones gathered into a 64 KiB staging buffer first (sent()
 *    once copied). Cipher preference: AES-128-GCM (AES-NI), then the rest.
 * net_queued_bytes() counts bytes of net_send()s not yet released (TCP:
 * taken by the kernel; TLS: sealed, or taken by OpenSSL, after which up to
 * 256 KiB of records wait in net's own output buffer; RDMA: writes
 * completed): the layer above uses it for backpressure.
 *
 * Callbacks run on the loop's thread. From inside any callback the caller
 * may call net_send() and net_close() on the same connection.
 */
#ifndef US_NET_H
#define US_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/uio.h>

#include <ev.h>

#include "kmod/log.h"

/* Connections the kernel completes before a listener's loop accepts them
 * (the replication listener, the console, the control socket). A burst of
 * idle connects beyond it drops the SYNs that follow, and a real peer's
 * SYN among them waits out TCP's 1 s retransmission: room for a flood of a
 * few hundred, which the setup slots then evict (net/open.c). */
#define NET_LISTEN_BACKLOG 1024

enum net_transport {
	NET_TLS = 0, /* default */
	NET_TCP,     /* plaintext: requires insecure = true */
	NET_RDMA,    /* libfabric RDM endpoint: requires insecure = true */
};

struct net_config {
	enum net_transport transport;
	const char *cert, *key, *ca; /* PEM files, TLS only */
	/* TLS: the peer's certificate must carry extended key usage for its
	 * role (the server's serverAuth, the client's clientAuth). peer_name,
	 * when set, is a name it must also carry (DNS SAN, else CN); a client
	 * checks it instead of the address it connected to. */
	const char *peer_name;
	bool insecure;               /* allow plaintext (NET_TCP, NET_RDMA) */
	/* libfabric provider; NULL: "verbs;ofi_rxm", falling back to
	 * "tcp;ofi_rxm" (logged) when there is no verbs device. */
	const char *rdma_provider;
	int sockbuf_bytes;           /* SO_SNDBUF/SO_RCVBUF; 0: 4 MiB */
	/* TLS 1.3 suites in OpenSSL's syntax, the server's order deciding;
	 * NULL: AES-128-GCM, AES-256-GCM, ChaCha20-Poly1305. */
	const char *tls_suites;
	/* TLS: leave the records after the handshake to OpenSSL instead of
	 * net's own record layer (the bytes on the wire are the same; for
	 * tests and comparisons). */
	bool tls_openssl_records;
	/* TLS, net's record layer: records sealed with one key before a key
	 * update; 0: 2^24 (~256 GiB; AES-GCM's margin is 2^24.5). */
	size_t tls_update_records;
	/* Deadline of a connection's setup, from connect() or accept() until
	 * it is up (TCP connect, TLS handshake, RDMA setup); 0: 5000 ms. Past
	 * it the connection fails with -ETIMEDOUT (logged): closed() for
	 * net_connect(), dropped before the accept callback for a listener. */
	unsigned setup_timeout_ms;
};

struct net_conn;
struct net_listener;

struct net_conn_ops {
	/* net_connect() only: the connection is up (TLS: handshake done and the
	 * server certificate verified). Sends queued before run now. With TLS
	 * 1.3 the server checks the client certificate after the client's
	 * handshake ends, so a refused client sees connected() then closed(). */
	void (*connected)(struct net_conn *c, void *ctx);
	/* A chunk of the byte stream; data is valid only during the call. */
	void (*recv)(struct net_conn *c, const void *data, size_t len, void *ctx);
	/* The buffers of the net_send() with this cookie are released.
	 * status 0, or -errno when the connection died first. */
	void (*sent)(struct net_conn *c, void *cookie, int status, void *ctx);
	/* The connection is gone: reason 0 if the peer closed cleanly, else
	 * -errno (-ECONNREFUSED, -ECONNRESET, -EPROTO for a TLS failure...).
	 * Every pending send has been completed first; the conn is freed when
	 * this returns. Not called after net_close(). */
	void (*closed)(struct net_conn *c, int reason, void *ctx);
	/* Optional: where the next received bytes should go, to read them in
	 * place (e.g. proto_dec_rbuf()). Return a buffer of *len bytes, or NULL
	 * for net's own buffer; recv() then gets data pointing into it. */
	void *(*recv_buf)(struct net_conn *c, size_t *len, void *ctx);
};

/* Checks cfg's TLS files before anything is built, as a side of the given
 * role will use them (server: the secondary, which listens; else a primary
 * or an engine, which connects): each readable; the certificate (the first
 * of its file) parses, is valid now and has the extended key usage of its
 * role; the key parses and matches it; the CA file holds a certificate
 * valid now. 0, or -EINVAL with err saying which file and what is wrong,
 * in one line (the option's name first). */
int net_tls_check_files(const struct net_config *cfg, bool server, char *err,
			size_t errlen) US_MUST_CHECK;

/* An accepted connection (TLS: after the handshake and the client
 * certificate check). Call net_conn_set_ops() before returning, or
 * net_close(). */
typedef void (*net_accept_fn)(struct net_listener *l, struct net_conn *c, void *ctx);

/* The one parser of "HOST:PORT", for net/, the console and the command line.
 * HOST is a name or an address (IPv6 in brackets: "[::1]:7000"), copied to
 * host without brackets (may be empty). PORT is decimal, 1..65535, or 0 (a
 * free port) only when port0_ok. 0, -EINVAL (not HOST:PORT, or HOST longer
 * than host_len - 1) or -ERANGE (a bad port). Logs nothing. */
int net_parse_host_port(const char *host_port, bool port0_ok, char *host, size_t host_len,
			int *port) US_MUST_CHECK;

/* host_port: "HOST:PORT", port 0 picks a free port (see net_listener_port). */
int net_listen(struct ev_loop *loop, const struct net_config *cfg, const char *host_port,
	       net_accept_fn fn, void *ctx, struct net_listener **out) US_MUST_CHECK;
int net_listener_port(const struct net_listener *l);
/* Stops listening; connections still in their handshake are dropped,
 * accepted ones live on. */
void net_listener_close(struct net_listener *l);

/* Starts a non-blocking connect; ops->connected or ops->closed follows. */
int net_connect(struct ev_loop *loop, const struct net_config *cfg, const char *host_port,
		const struct net_conn_ops *ops, void *ctx, struct net_conn **out) US_MUST_CHECK;
void net_conn_set_ops(struct net_conn *c, const struct net_conn_ops *ops, void *ctx);

/* Queues iov[0..iovcnt) as one send; cookie comes back in ops->sent.
 * -ENOTCONN once the connection is dead. */
int net_send(struct net_conn *c, const struct iovec *iov, int iovcnt, void *cookie) US_MUST_CHECK;
size_t net_queued_bytes(const struct net_conn *c);
/* net_queued_bytes() plus what the kernel still holds to send on the socket
 * (SIOCOUTQ: not yet acknowledged by the peer; TCP and TLS). It changes while
 * the link moves anything, however slowly. */
size_t net_unsent_bytes(const struct net_conn *c);
/* Bytes that arrived on the socket and were not read yet (SIOCINQ; TLS:
 * records not yet decrypted; RDMA: only its setup socket's, so 0): the peer
 * sent them even if the loop has not got round to reading them. */
size_t net_rx_pending(const struct net_conn *c);
/* The peer closed its end: its FIN is here (what it sent before may still
 * wait to be read). TCP and TLS peers close, they never half-close, so
 * nothing sent from now on is read there. False for RDMA, or when unknown. */
bool net_peer_closed(const struct net_conn *c);
/* "HOST:PORT" of the peer, for log lines. */
const char *net_peer_name(const struct net_conn *c);
/* Two such names with the same HOST (the same source, whatever its port). */
bool net_same_host(const char *a, const char *b);
/* What protects the bytes, for log lines and tests: "tcp", "rdma", or for
 * TLS the suite and whose record layer runs ("TLS 1.3
 * TLS_AES_128_GCM_SHA256, records by net"; "... by OpenSSL"). */
const char *net_security(const struct net_conn *c);
/* Closes at once: unsent data is dropped without sent() callbacks (the
 * caller owns its buffers again on return), closed() is not called. */
void net_close(struct net_conn *c);
/* Drain, then close: every send already queued still goes out and completes
 * through sent(); then the connection closes cleanly (the peer sees reason 0)
 * and closed(c, 0) is called, or closed(c, -errno) if it died first.
 * net_send() returns -ESHUTDOWN from now on. Works before the connection is
 * up (it is flushed once up). net_close() may still be called meanwhile. */
void net_close_flush(struct net_conn *c);

#endif
