/* RDMA transport (NET_RDMA) over libfabric reliable-datagram endpoints
 * (FI_EP_RDM with FI_MSG | FI_RMA), e.g. "verbs;ofi_rxm" or "tcp;ofi_rxm".
 *
 * A plain TCP socket to host:port bootstraps the link and then stays open
 * as its liveness channel: connection refused, peer closed and peer reset
 * are seen there exactly as on NET_TCP. Over it each side sends one setup
 * message (its endpoint address from fi_getname and the address, key and
 * size of its receive ring) and inserts the peer's address into its AV. The
 * message is checked like any network input; a peer that sends none within
 * 10 s is dropped. Its layout is private to this transport (like TLS
 * handshake bytes): net/rdma.h, which has its parser.
 *
 * Data: each side registers an 8 MiB receive ring for remote writes. net_send
 * bytes go out as one-sided fi_write()s straight from the caller's buffers
 * into the peer's ring (the send queue of net/net.c, no copy), at most 1 MiB
 * each, never across the ring's end, in ring order. After a write a message
 * tells the peer the total bytes written (8 bytes, bit 63 set; one in flight,
 * the next when it has completed, for all written since: one per write cost
 * 40% of the throughput over tcp;ofi_rxm); sends do not pass the writes
 * before them (FI_ORDER_SAW is asked for), so the receiver copies the ring
 * up to that total out to ops->recv (never parsed in place: the peer can
 * still write there) and returns ring credit (total bytes
 * consumed, 8 bytes, bit 63 clear) with fi_inject(). The writes carry no
 * remote CQ data on purpose: libfabric 1.17's tcp provider reports a remote
 * write with CQ data that was cut short (the writer died or stalled in it) as
 * a cancelled completion with no context when the endpoint closes, and
 * ofi_rxm dereferences that context: SIGSEGV in fi_close(). A write without
 * CQ data is internal to the provider and is dropped silently. sent() fires
 * when a write has completed locally. A side that closes first sends, on the
 * socket, the count of bytes whose writes had completed (8 bytes,
 * little-endian), then closes it; at the end of the socket the receiver keeps
 * progressing its CQ until that many bytes have arrived (at most 2 s) before
 * reporting closed(0). Without that count (the peer died) it drains until the
 * CQ has been quiet for 5 ms (at most 200 ms). The drain runs on the loop
 * like the rest (an ev_idle per round, an ev_timer for the deadline), never
 * in a loop of its own: the agent's other timers keep firing meanwhile.
 *
 * Event loop: the providers here use manual progress, so the CQ must be
 * read for anything to move. The CQ is opened with FI_WAIT_FD and its fd
 * watched with an ev_io, after fi_trywait() says it is safe to sleep; while
 * writes are in flight (or trywait refuses) an ev_idle keeps progressing,
 * since a sender's progress does not always raise the fd. A 10 ms ev_timer
 * is a safety net. Without a wait fd the timer runs at 1 ms instead.
 * net/fabric.c loads libfabric and opens the endpoint; this file is the
 * transport (net/conn.h): setup, data path and the end of the link.
 *
 * No encryption and no authentication: RDMA links belong on a trusted
 * fabric; NET_RDMA needs insecure = true, like NET_TCP. */
#include "kmod/le.h"
#include "net/conn.h"
#include "net/fabric.h"
#include "net/rdma.h"
#include "net/socket.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TAG "net"

#define RING_BYTES (8u << 20)
#define WRITE_MAX (1u << 20)
#define MAX_WR 64            /* writes in flight */
#define NRECV 16             /* posted buffers: credit and bytes written */
#define WRITTEN_FLAG (1ull << 63) /* in a message: bytes written, not credit */
#define CQ_BATCH 32
#define SETUP_TIMEOUT_NS (10 * 1000000000ull) /* a peer silent this long is dropped */
#define DRAIN_COUNTED_NS 2000000000ull /* closing count sent: wait for it this long */
#define DRAIN_GUESS_NS 200000000ull    /* no count: at most this long, */
#define DRAIN_QUIET_NS 5000000ull      /* until the CQ is quiet this long */
#define CTL_READ_BYTES 512             /* setup message and closing count */

struct wr {
	size_t len;
	bool done;
};

/* After the peer closed the socket: what its writes put in the ring is
 * still delivered, on the loop, until this ends. */
struct drain {
	bool on;
	bool counted;             /* the peer sent its closing count */
	uint64_t expect;          /* that count */
	uint64_t start_ns, quiet_ns;
	uint64_t seen;            /* nevents at quiet_ns */
	ev_timer deadline;
};

struct rdma_link {
	struct net_conn *c;
	struct ev_loop *loop;
	int fd;                   /* the bootstrap and liveness socket (net.c's) */
	char *provider;           /* asked for, or NULL: the default */
	bool up;                  /* setup exchanged */
	struct net_fab fab;       /* endpoint, CQ and our ring */
	fi_addr_t peer;
	uint64_t peer_base, peer_key, peer_ring;
	uint64_t tx_written;      /* bytes written into the peer's ring */
	uint64_t tx_acked;        /* of which the peer has consumed */
	uint64_t tx_done;         /* of which the writes have completed */
	uint64_t tx_told;         /* tx_written as last sent to the peer */
	uint64_t told_msg;        /* that message, until its send completes */
	bool told_busy;           /* that send is in flight */
	struct fi_context told_ctx;
	struct wr wr[MAX_WR];     /* in flight, in issue order from wr_head */
	struct fi_context wctx[MAX_WR];
	unsigned wr_head, wr_count;
	uint64_t rx_done;         /* bytes delivered from our ring */
	uint64_t rx_credited;     /* rx_done as last told to the peer */
	uint64_t rbuf[NRECV];
	struct fi_context rctx[NRECV];
	uint64_t nevents;
	uint64_t start_ns;
	ev_io cq_io;
	ev_idle idle;
	ev_timer tick;
	struct rdma_setup_rx setup;  /* the peer's, until up */
	uint8_t fin[8];           /* the peer's closing count, once 8 bytes are in */
	size_t fin_have;
	struct drain drain;
};
/* ---- endpoint setup ----------------------------------------------------------- */

static int post_recv(struct rdma_link *r, int i)
{
	ssize_t n;

	do
		n = fi_recv(r->fab.ep, &r->rbuf[i], sizeof(r->rbuf[i]), NULL, FI_ADDR_UNSPEC, &r->rctx[i]);
	while (n == -FI_EAGAIN && fi_cq_read(r->fab.cq, NULL, 0) != -FI_EAVAIL);
	return (int)n;
}

static void rdma_detach(void *priv)
{
	struct rdma_link *r = priv;

	if (!r)
		return;
	ev_io_stop(r->loop, &r->cq_io);
	ev_idle_stop(r->loop, &r->idle);
	ev_timer_stop(r->loop, &r->tick);
	ev_timer_stop(r->loop, &r->drain.deadline);
	net_fab_close(&r->fab);
	free(r->provider);
	free(r);
}

/* ---- data path ------------------------------------------------------------------ */

static bool busy(const struct rdma_link *r)
{
	return r->wr_count || r->told_busy || r->tx_told != r->tx_written ||
	       r->rx_done != r->rx_credited ||
	       (net_queue_unissued(r->c) && r->tx_written - r->tx_acked < r->peer_ring);
}

static int fail_proto(struct rdma_link *r, const char *what)
{
	log_error(TAG, "RDMA link with %s: %s", net_peer_name(r->c), what);
	return -EPROTO;
}

/* Tells the peer how much of its data we consumed; retried while the
 * provider is short of resources. */
static void send_credit(struct rdma_link *r)
{
	uint64_t v;

	if (r->rx_done == r->rx_credited)
		return;
	v = r->rx_done;
	if (fi_inject(r->fab.ep, &v, sizeof(v), r->peer) == 0)
		r->rx_credited = v;
}

/* Tells the peer how far our writes into its ring go, once the last such
 * message has gone out; retried while the provider is short of resources.
 * A send, not an inject: closing waits for its completion. */
static int send_written(struct rdma_link *r)
{
	ssize_t n;

	if (r->told_busy || r->tx_told == r->tx_written)
		return 0;
	r->told_msg = r->tx_written | WRITTEN_FLAG;
	n = fi_send(r->fab.ep, &r->told_msg, sizeof(r->told_msg), NULL, r->peer, &r->told_ctx);
	if (n == -FI_EAGAIN)
		return 0;
	if (n)
		return (int)n;
	r->told_busy = true;
	r->tx_told = r->tx_written;
	return 0;
}

/* The peer wrote our ring up to total: deliver from rx_done on. The ring
 * stays writable by the peer (one-sided writes need no action of ours), so
 * a parser must never read it in place: a length checked there could change
 * before it is used. Each piece is copied out first, into the consumer's
 * receive buffer when it offers one (as TCP's read() would), else net's:
 * one copy, like every other transport, and the ring is only read here. */
static int deliver(struct rdma_link *r, uint64_t total)
{
	size_t off, len, cap;
	uint8_t *buf;

	if (total < r->rx_done || total - r->rx_done > RING_BYTES)
		return fail_proto(r, "bytes written beyond the ring");
	while (r->rx_done < total && !net_conn_dead(r->c)) {
		off = (size_t)(r->rx_done % RING_BYTES);
		len = (size_t)(total - r->rx_done);
		if (len > RING_BYTES - off)
			len = RING_BYTES - off;
		buf = net_conn_rbuf(r->c, &cap);
		if (len > cap)
			len = cap;
		memcpy(buf, r->fab.ring + off, len);
		r->rx_done += len;
		net_conn_deliver(r->c, buf, len);
	}
	if (r->rx_done - r->rx_credited >= RING_BYTES / 4)
		send_credit(r);
	return 0;
}

/* Completed writes release their bytes in issue order. */
static void complete_writes(struct rdma_link *r)
{
	size_t len;

	while (r->wr_count && r->wr[r->wr_head].done && !net_conn_dead(r->c)) {
		len = r->wr[r->wr_head].len;
		r->wr_head = (r->wr_head + 1) % MAX_WR;
		r->wr_count--;
		r->tx_done += len;
		net_queue_consume(r->c, len, true);
	}
}

static int handle(struct rdma_link *r, const struct fi_cq_data_entry *e)
{
	struct fi_context *ctx = e->op_context;
	int rc = 0;

	r->nevents++;
	if (ctx >= r->rctx && ctx < r->rctx + NRECV) {
		int i = (int)(ctx - r->rctx);
		uint64_t v = r->rbuf[i];

		if (e->len != sizeof(uint64_t))
			return fail_proto(r, "bad message");
		if (v & WRITTEN_FLAG) {
			rc = deliver(r, v & ~WRITTEN_FLAG);
		} else {
			if (v > r->tx_written || v < r->tx_acked)
				return fail_proto(r, "credit beyond what was written");
			r->tx_acked = v;
		}
		if (!rc && !net_conn_dead(r->c))
			rc = post_recv(r, i);
	} else if (ctx >= r->wctx && ctx < r->wctx + MAX_WR) {
		r->wr[ctx - r->wctx].done = true;
		complete_writes(r);
	} else if (ctx == &r->told_ctx) {
		r->told_busy = false;
		rc = send_written(r);
	}
	return rc;
}

static int progress(struct rdma_link *r)
{
	struct fi_cq_data_entry ev[CQ_BATCH];
	struct fi_cq_err_entry err;
	ssize_t n;
	int rc;

	while (!net_conn_dead(r->c)) {
		n = fi_cq_read(r->fab.cq, ev, CQ_BATCH);
		if (n == -FI_EAGAIN)
			break;
		if (n == -FI_EAVAIL) {
			memset(&err, 0, sizeof(err));
			fi_cq_readerr(r->fab.cq, &err, 0);
			log_error(TAG, "RDMA link with %s: %s", net_peer_name(r->c),
				  fi_cq_strerror(r->fab.cq, err.prov_errno, err.err_data, NULL, 0));
			return -(err.err ? err.err : EIO);
		}
		if (n < 0)
			return (int)n;
		for (ssize_t i = 0; i < n && !net_conn_dead(r->c); i++) {
			rc = handle(r, &ev[i]);
			if (rc)
				return rc;
		}
	}
	if (!net_conn_dead(r->c))
		send_credit(r);
	return 0;
}

/* Writes queued bytes into the peer's ring while there is room. */
static int issue(struct rdma_link *r)
{
	struct net_conn *c = r->c;
	const uint8_t *p;
	size_t rem, len, off;
	unsigned slot;
	ssize_t n;

	while (!net_conn_dead(c) && r->wr_count < MAX_WR && net_queue_next(c, &p, &rem)) {
		len = r->peer_ring - (r->tx_written - r->tx_acked);
		off = (size_t)(r->tx_written % r->peer_ring);
		if (len > r->peer_ring - off)
			len = r->peer_ring - off;
		if (len > rem)
			len = rem;
		if (len > WRITE_MAX)
			len = WRITE_MAX;
		if (!len)
			break; /* ring full: credit comes through the CQ */
		slot = (r->wr_head + r->wr_count) % MAX_WR;
		n = fi_write(r->fab.ep, p, len, NULL, r->peer, r->peer_base + off, r->peer_key,
			     &r->wctx[slot]);
		if (n == -FI_EAGAIN)
			break;
		if (n)
			return (int)n;
		r->wr[slot] = (struct wr){ len, false };
		r->wr_count++;
		r->tx_written += len;
		net_queue_issued(c, len);
		n = send_written(r);
		if (n)
			return (int)n;
	}
	/* A send of zero bytes with nothing before it in flight is done. */
	if (!net_conn_dead(c) && !r->wr_count && net_queue_head(c, &p, &rem) && !rem)
		net_queue_consume(c, 0, true);
	return net_conn_dead(c) ? 0 : send_written(r);
}

/* One round: progress, write more, then pick how to wait. */
static void pump(struct rdma_link *r)
{
	struct net_conn *c = r->c;
	const uint8_t *p;
	size_t len;
	int rc;

	if (net_conn_dead(c) || !r->up)
		return;
	rc = progress(r);
	if (!rc && !net_conn_dead(c))
		rc = issue(r);
	if (!rc && !net_conn_dead(c))
		rc = progress(r);
	if (net_conn_dead(c))
		return;
	if (rc) {
		if (rc != -EPROTO)
			log_error(TAG, "RDMA link with %s: %s", net_peer_name(c), net_fab_strerror(-rc));
		net_conn_fail(c, rc < 0 ? rc : -EIO);
		return;
	}
	if (net_conn_closing(c) && !r->wr_count && !r->told_busy && r->tx_told == r->tx_written &&
	    !net_queue_head(c, &p, &len)) {
		/* every write completed and was told: close the socket */
		net_conn_finish_close(c);
		return;
	}
	if (busy(r) || r->fab.wait_fd < 0 || fi_trywait(r->fab.fabric, (struct fid **)&r->fab.cq, 1))
		ev_idle_start(r->loop, &r->idle);
	else
		ev_idle_stop(r->loop, &r->idle);
}

/* ---- the end of the link: drained on the loop ----------------------------------- */

static void drain_end(struct rdma_link *r)
{
	struct drain *d = &r->drain;

	d->on = false;
	ev_timer_stop(r->loop, &d->deadline);
	if (d->counted && r->rx_done < d->expect)
		log_warn(TAG, "RDMA link with %s: closed with %llu bytes still missing",
			 net_peer_name(r->c), (unsigned long long)(d->expect - r->rx_done));
	net_conn_fail(r->c, 0);
}

/* One round of the drain: done, or progress and look again next time. */
static void drain_step(struct rdma_link *r)
{
	struct drain *d = &r->drain;
	uint64_t now = now_ns();

	if (d->counted ? r->rx_done >= d->expect || now - d->start_ns > DRAIN_COUNTED_NS
		       : now - d->quiet_ns > DRAIN_QUIET_NS || now - d->start_ns > DRAIN_GUESS_NS) {
		drain_end(r);
		return;
	}
	if (progress(r)) {
		d->counted = false; /* logged; what did arrive was delivered */
		drain_end(r);
		return;
	}
	if (net_conn_dead(r->c))
		return;
	if (r->nevents != d->seen) {
		d->seen = r->nevents;
		d->quiet_ns = now_ns();
	}
	ev_idle_start(r->loop, &r->idle); /* poll the CQ every loop iteration */
}

static void on_drain_deadline(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct rdma_link *r = w->data;

	(void)loop;
	(void)revents;
	net_conn_enter(r->c);
	drain_end(r);
	net_conn_leave(r->c);
}

/* The peer closed the socket: deliver what its writes put in the ring (up
 * to its closing count if it sent one) on the loop, then closed(0). Other
 * watchers of the loop (timers above all) keep running meanwhile. */
static void drain_begin(struct rdma_link *r)
{
	struct drain *d = &r->drain;

	d->on = true;
	d->counted = r->fin_have == sizeof(r->fin);
	d->expect = le_get64(r->fin);
	/* The ring bounds what can still be on its way; more is nonsense. */
	if (d->counted && d->expect > r->rx_done + RING_BYTES)
		d->counted = false;
	d->start_ns = d->quiet_ns = now_ns();
	d->seen = r->nevents;
	net_conn_watch_read(r->c, false);
	ev_timer_init(&d->deadline, on_drain_deadline,
		      (double)(d->counted ? DRAIN_COUNTED_NS : DRAIN_GUESS_NS) / 1e9, 0);
	d->deadline.data = r;
	ev_timer_start(r->loop, &d->deadline);
	drain_step(r);
}

/* ---- loop watchers -------------------------------------------------------------- */

static void on_event(struct ev_loop *loop, struct rdma_link *r)
{
	struct net_conn *c = r->c;

	(void)loop;
	net_conn_enter(c);
	if (r->drain.on)
		drain_step(r);
	else
		pump(r);
	net_conn_leave(c);
}

static void on_cq(struct ev_loop *loop, ev_io *w, int revents)
{
	(void)revents;
	on_event(loop, w->data);
}

static void on_idle(struct ev_loop *loop, ev_idle *w, int revents)
{
	(void)revents;
	on_event(loop, w->data);
}

static void on_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct rdma_link *r = w->data;

	(void)revents;
	if (!r->up) {
		if (now_ns() - r->start_ns > SETUP_TIMEOUT_NS) {
			log_error(TAG, "RDMA link with %s: no setup message in time",
				  net_peer_name(r->c));
			net_conn_enter(r->c);
			net_conn_fail(r->c, -ETIMEDOUT);
			net_conn_leave(r->c);
		}
		return;
	}
	on_event(loop, r);
}

static void rdma_kick(void *priv)
{
	struct rdma_link *r = priv;

	if (!net_conn_dead(r->c))
		ev_idle_start(r->loop, &r->idle);
}

/* Closing: tell the peer how much to expect. */
static void rdma_shutdown(void *priv)
{
	struct rdma_link *r = priv;
	uint8_t msg[8];

	le_put64(msg, r->tx_done);
	/* Best effort, like TLS close_notify; MSG_NOSIGNAL: the peer may be gone. */
	(void)send(r->fd, msg, sizeof(msg), MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* ---- setup over the bootstrap socket ------------------------------------------- */

size_t rdma_setup_encode(const struct rdma_setup *s, uint8_t *msg)
{
	le_put64(msg, RDMA_SETUP_MAGIC | (uint64_t)s->addr_len << 32);
	le_put64(msg + 8, s->ring_base);
	le_put64(msg + 16, s->ring_key);
	le_put64(msg + 24, s->ring_bytes);
	memcpy(msg + RDMA_SETUP_HDR, s->addr, s->addr_len);
	return RDMA_SETUP_HDR + s->addr_len;
}

static int send_setup(struct rdma_link *r)
{
	uint8_t msg[RDMA_SETUP_HDR + RDMA_ADDR_MAX];
	struct rdma_setup s = { .addr_len = sizeof(s.addr) };
	bool virt = r->fab.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR;
	int rc = fi_getname(&r->fab.ep->fid, s.addr, &s.addr_len);
	size_t len;

	if (rc)
		return rc;
	s.ring_base = virt ? (uint64_t)(uintptr_t)r->fab.ring : 0;
	s.ring_key = fi_mr_key(r->fab.mr);
	s.ring_bytes = RING_BYTES;
	len = rdma_setup_encode(&s, msg);
	/* The socket has just connected: its buffer takes these bytes at once. */
	if (write(r->fd, msg, len) != (ssize_t)len)
		return -EIO;
	return 0;
}

static int rdma_endpoint_new(const struct net_config *cfg, bool server, void **ep)
{
	(void)server;
	if (cfg->rdma_provider && !(*ep = strdup(cfg->rdma_provider)))
		return -ENOMEM;
	return 0;
}

static void rdma_endpoint_free(void *ep)
{
	free(ep);
}

static int rdma_attach(struct net_conn *c, int fd, void *ep, const char *host, void **priv)
{
	struct rdma_link *r = calloc(1, sizeof(*r));

	(void)host;
	if (!r)
		return -ENOMEM;
	r->c = c;
	r->loop = net_conn_loop(c);
	r->fd = fd;
	r->fab.wait_fd = -1;
	if (ep && !(r->provider = strdup(ep))) {
		free(r);
		return -ENOMEM;
	}
	*priv = r;
	return 0;
}

/* The bootstrap socket is up: open the endpoint and send the setup. */
static int rdma_start(void *priv)
{
	struct rdma_link *r = priv;
	char host[64];
	int rc;

	if (net_sock_local_host(r->fd, host, sizeof(host)))
		snprintf(host, sizeof(host), "127.0.0.1");
	rc = net_fab_open(&r->fab, r->provider, host, RING_BYTES, 4 * MAX_WR + NRECV);
	for (int i = 0; i < NRECV && !rc; i++)
		rc = post_recv(r, i);
	if (!rc)
		rc = send_setup(r);
	if (rc) {
		rc = rc < 0 ? rc : -EIO;
		log_error(TAG, "RDMA link with %s: %s", net_peer_name(r->c), strerror(-rc));
		return rc;
	}
	ev_io_init(&r->cq_io, on_cq, r->fab.wait_fd, EV_READ);
	r->cq_io.data = r;
	ev_idle_init(&r->idle, on_idle);
	r->idle.data = r;
	ev_timer_init(&r->tick, on_tick, 0.01, r->fab.wait_fd >= 0 ? 0.01 : 0.001);
	r->tick.data = r;
	r->start_ns = now_ns();
	ev_timer_start(r->loop, &r->tick); /* also bounds the wait for the setup */
	log_info(TAG, "RDMA link with %s via %s, %s", net_peer_name(r->c),
		 r->fab.info->fabric_attr->prov_name,
		 r->fab.wait_fd >= 0 ? "CQ wait fd" : "polled every 1 ms");
	return 0;
}

int rdma_setup_feed(struct rdma_setup_rx *rx, const uint8_t *data, size_t len,
		    struct rdma_setup *out, const char **why)
{
	size_t need, take;
	uint64_t w;

	while (len) {
		need = RDMA_SETUP_HDR;
		if (rx->have >= RDMA_SETUP_HDR)
			need += le_get64(rx->buf) >> 32; /* checked when the header came */
		take = need - rx->have;
		if (take > len)
			take = len;
		memcpy(rx->buf + rx->have, data, take);
		rx->have += take;
		data += take;
		len -= take;
		if (rx->have == RDMA_SETUP_HDR) {
			w = le_get64(rx->buf);
			if ((uint32_t)w != RDMA_SETUP_MAGIC || w >> 32 == 0 || w >> 32 > RDMA_ADDR_MAX) {
				*why = "bad setup message";
				return -EPROTO;
			}
			continue;
		}
		if (rx->have == need)
			break;
	}
	if (rx->have < RDMA_SETUP_HDR || rx->have < RDMA_SETUP_HDR + (le_get64(rx->buf) >> 32))
		return -EAGAIN;
	if (len) {
		*why = "bytes after setup";
		return -EPROTO;
	}
	out->ring_base = le_get64(rx->buf + 8);
	out->ring_key = le_get64(rx->buf + 16);
	out->ring_bytes = le_get64(rx->buf + 24);
	out->addr_len = rx->have - RDMA_SETUP_HDR;
	memcpy(out->addr, rx->buf + RDMA_SETUP_HDR, out->addr_len);
	if (out->ring_bytes < RDMA_RING_MIN || out->ring_bytes > RDMA_RING_MAX) {
		*why = "bad ring size";
		return -EPROTO;
	}
	return 0;
}

/* The peer's setup message: 0 once whole and checked (then up), -EAGAIN
 * while incomplete, or -EPROTO (logged). */
static int setup_recv(struct rdma_link *r, const uint8_t *data, size_t len)
{
	struct rdma_setup s;
	const char *why;
	int rc = rdma_setup_feed(&r->setup, data, len, &s, &why);

	if (rc == -EPROTO)
		return fail_proto(r, why);
	if (rc)
		return rc;
	r->peer_base = s.ring_base;
	r->peer_key = s.ring_key;
	r->peer_ring = s.ring_bytes;
	if (fi_av_insert(r->fab.av, s.addr, 1, &r->peer, 0, NULL) != 1)
		return fail_proto(r, "peer address rejected");
	return 0;
}

/* Bytes from the socket: the setup, then only the closing count. */
static void ctl_recv(struct rdma_link *r, const uint8_t *data, size_t len)
{
	struct net_conn *c = r->c;
	int rc;

	if (r->up) {
		if (len > sizeof(r->fin) - r->fin_have) {
			net_conn_fail(c, fail_proto(r, "bytes after setup"));
			return;
		}
		memcpy(r->fin + r->fin_have, data, len);
		r->fin_have += len;
		return;
	}
	rc = setup_recv(r, data, len);
	if (rc == -EAGAIN)
		return;
	if (rc) {
		net_conn_fail(c, rc);
		return;
	}
	if (r->fab.wait_fd >= 0)
		ev_io_start(r->loop, &r->cq_io);
	r->up = true;
	net_conn_up(c);
	if (!net_conn_dead(c))
		rdma_kick(r);
}

/* The socket is readable. Its end before the setup is a refusal; after
 * it, the peer closed: drain the ring, then closed(0). */
static void rdma_read(void *priv)
{
	struct rdma_link *r = priv;
	uint8_t buf[CTL_READ_BYTES];
	ssize_t n;

	for (int i = 0; i < 64 && !net_conn_dead(r->c); i++) {
		n = read(r->fd, buf, sizeof(buf));
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return;
			net_conn_fail(r->c, -errno);
			return;
		}
		if (n == 0) {
			if (r->up)
				drain_begin(r);
			else
				net_conn_fail(r->c, -ECONNRESET);
			return;
		}
		ctl_recv(r, buf, (size_t)n);
		if ((size_t)n < sizeof(buf))
			return;
	}
}

const struct net_transport_ops net_rdma_ops = {
	.name = "rdma",
	.endpoint_new = rdma_endpoint_new,
	.endpoint_free = rdma_endpoint_free,
	.attach = rdma_attach,
	.detach = rdma_detach,
	.start = rdma_start,
	.read = rdma_read,
	.kick = rdma_kick,
	.shutdown = rdma_shutdown,
};
