/* --metrics HOST:PORT (see metrics.h): libmicrohttpd in external polling
 * mode. MHD_USE_EPOLL gives one epoll fd that becomes readable whenever any
 * of MHD's sockets (the listener, the connections) has something to do;
 * an ev_io on it calls MHD_run(), and an ev_timer set from MHD_get_timeout()
 * lets MHD close idle connections. Nothing runs outside the loop thread.
 *
 * Idle connections cannot starve a scrape: MHD refuses a connection beyond
 * its limit, so 32 that sent nothing made every scrape fail until MHD's
 * timeout (issue 25). This file keeps its own count of the connections
 * (MHD's notifications) and, past CONN_LIMIT, shuts down the socket of the
 * one idle longest (no request under way, no bytes waiting); MHD then sees
 * it end and closes it. A per-address limit would not do: a scraper on the
 * same host shares 127.0.0.1 with local flooders. */
#include "net/metrics.h"

#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "net/net.h"

#define TAG "metrics"
#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define CONN_LIMIT 32            /* scrapers at once; a new one replaces an idle one */
#define CONN_SLACK 16            /* MHD's own limit is above: connections shut, not yet closed */
#define CONN_TIMEOUT_S 10        /* an idle connection is closed after this */

/* A connection MHD serves, as far as making room goes. */
struct mconn {
	struct MHD_Connection *c;
	int fd;
	uint64_t idle_ns;            /* since when it is idle, or busy */
	bool busy;                   /* a request under way */
	bool shut;                   /* shut down to make room: MHD closes it */
	struct mconn *next;
};

struct net_metrics {
	struct ev_loop *loop;
	struct MHD_Daemon *d;
	net_metrics_render_fn render;
	void *ctx;
	int port;
	ev_io io_w;
	ev_timer timeout_w;
	struct mconn *conns;
	unsigned live;               /* conns not shut */
	uint64_t log_ns;             /* one line per 10 s about room made */
	unsigned unlogged;
};

static struct mconn *mconn_find(struct net_metrics *m, struct MHD_Connection *c)
{
	struct mconn *k = m->conns;

	while (k && k->c != c)
		k = k->next;
	return k;
}

/* Idle: nothing under way and no bytes waiting to be read. */
static bool mconn_idle(const struct mconn *k)
{
	int inq = 0;

	return !k->busy && !(ioctl(k->fd, SIOCINQ, &inq) == 0 && inq > 0);
}

/* Past CONN_LIMIT: the connection idle longest (not the newcomer) is shut;
 * if none is idle, the one whose request has been under way longest, past
 * STALLED_MS (a scrape is answered at once: its headers are stalling). */
#define STALLED_MS 1000

static void make_room(struct net_metrics *m, const struct mconn *newcomer)
{
	struct mconn *v = NULL, *slow = NULL;

	for (struct mconn *k = m->conns; k; k = k->next) {
		if (k == newcomer || k->shut)
			continue;
		if (mconn_idle(k) && (!v || k->idle_ns < v->idle_ns))
			v = k;
		if (k->busy && (!slow || k->idle_ns < slow->idle_ns))
			slow = k;
	}
	if (!v && slow && now_ns() - slow->idle_ns > STALLED_MS * 1000000ull)
		v = slow;
	if (!v)
		return;          /* all young and busy: MHD's own limit is the bound */
	shutdown(v->fd, SHUT_RDWR);
	v->shut = true;
	m->live--;
	if (!m->log_ns || now_ns() - m->log_ns >= 10000000000ull) {
		log_warn(TAG, "%u connections: one %s for %llu ms closed to make room (%u more like "
			 "it unsaid)", CONN_LIMIT, v->busy ? "stalled" : "idle",
			 (unsigned long long)((now_ns() - v->idle_ns) / 1000000), m->unlogged);
		m->log_ns = now_ns();
		m->unlogged = 0;
	} else {
		m->unlogged++;
	}
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_ctx,
			  enum MHD_ConnectionNotificationCode code)
{
	struct net_metrics *m = cls;
	const union MHD_ConnectionInfo *info;
	struct mconn *k, **p;

	(void)socket_ctx;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
		if (!info || !(k = calloc(1, sizeof(*k))))
			return;
		k->c = c;
		k->fd = info->connect_fd;
		k->idle_ns = now_ns();
		k->next = m->conns;
		m->conns = k;
		if (++m->live > CONN_LIMIT)
			make_room(m, k);
		return;
	}
	for (p = &m->conns; *p && (*p)->c != c; p = &(*p)->next)
		;
	if (!(k = *p))
		return;
	*p = k->next;
	if (!k->shut)
		m->live--;
	free(k);
}

/* The request line is in: the connection is busy until its reply is done. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
	struct mconn *k = mconn_find(cls, c);

	(void)uri;
	if (k) {
		k->busy = true;
		k->idle_ns = now_ns();
	}
	return NULL;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **req_ctx,
			 enum MHD_RequestTerminationCode toe)
{
	struct mconn *k = mconn_find(cls, c);

	(void)req_ctx;
	(void)toe;
	if (k) {
		k->busy = false;
		k->idle_ns = now_ns();
	}
}

static enum MHD_Result reply_text(struct MHD_Connection *c, unsigned code, const char *text)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text,
								  MHD_RESPMEM_PERSISTENT);
	enum MHD_Result res;

	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
	res = MHD_queue_response(c, code, r);
	MHD_destroy_response(r);
	return res;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_len, void **req_ctx)
{
	struct net_metrics *m = cls;
	struct MHD_Response *r;
	enum MHD_Result res;
	size_t len = 0;
	char *text;

	(void)version;
	(void)upload;
	(void)upload_len;
	(void)req_ctx;
	if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
		return reply_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "GET /metrics only\n");
	if (strcmp(url, "/metrics"))
		return reply_text(c, MHD_HTTP_NOT_FOUND, "not found: the metrics are at /metrics\n");
	text = m->render(m->ctx, &len);
	if (!text)
		return reply_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
	r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, CONTENT_TYPE);
	res = MHD_queue_response(c, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	return res;
}

/* Runs MHD once and sets the timer for what it waits for next. */
static void run_mhd(struct net_metrics *m)
{
	MHD_UNSIGNED_LONG_LONG ms;

	if (MHD_run(m->d) != MHD_YES)
		log_warn(TAG, "the HTTP server could not run its sockets");
	ev_timer_stop(m->loop, &m->timeout_w);
	if (MHD_get_timeout(m->d, &ms) == MHD_YES) {
		ev_timer_set(&m->timeout_w, ms / 1e3, 0.);
		ev_timer_start(m->loop, &m->timeout_w);
	}
}

static void on_io(struct ev_loop *loop, ev_io *w, int revents)
{
	(void)loop;
	(void)revents;
	run_mhd(w->data);
}

static void on_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)revents;
	run_mhd(w->data);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char line[256];
	size_t n;

	(void)cls;
	vsnprintf(line, sizeof(line), fmt, ap);
	n = strlen(line);
	while (n && line[n - 1] == '\n')
		line[--n] = 0;
	log_warn(TAG, "libmicrohttpd: %s", line);
}

int net_metrics_start(struct ev_loop *loop, const char *host_port, net_metrics_render_fn render,
		      void *ctx, struct net_metrics **out)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICSERV | AI_PASSIVE };
	char host[256], port_s[16];
	struct addrinfo *ai = NULL;
	const union MHD_DaemonInfo *info;
	struct net_metrics *m;
	unsigned flags = MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
	int r, port;

	r = net_parse_host_port(host_port, true, host, sizeof(host), &port);
	if (r < 0) {
		log_error(TAG, "--metrics %s: not HOST:PORT", host_port);
		return r;
	}
	snprintf(port_s, sizeof(port_s), "%d", port);
	r = getaddrinfo(host[0] ? host : NULL, port_s, &hints, &ai);
	if (r) {
		log_error(TAG, "--metrics %s: %s", host_port, gai_strerror(r));
		return -EINVAL;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		freeaddrinfo(ai);
		return -ENOMEM;
	}
	m->loop = loop;
	m->render = render;
	m->ctx = ctx;
	if (ai->ai_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	errno = 0;
	m->d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, on_request, m,
				MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,   /* first: MHD says so */
				MHD_OPTION_SOCK_ADDR, ai->ai_addr,
				MHD_OPTION_CONNECTION_LIMIT, (unsigned)(CONN_LIMIT + CONN_SLACK),
				MHD_OPTION_NOTIFY_CONNECTION, on_connection, m,
				MHD_OPTION_URI_LOG_CALLBACK, on_uri, m,
				MHD_OPTION_NOTIFY_COMPLETED, on_completed, m,
				MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONN_TIMEOUT_S,
				MHD_OPTION_END);
	freeaddrinfo(ai);
	if (!m->d) {
		r = errno ? -errno : -EADDRNOTAVAIL;
		log_error(TAG, "cannot serve metrics at %s: %s", host_port, strerror(-r));
		free(m);
		return r;
	}
	info = MHD_get_daemon_info(m->d, MHD_DAEMON_INFO_BIND_PORT);
	m->port = info ? info->port : port;
	info = MHD_get_daemon_info(m->d, MHD_DAEMON_INFO_EPOLL_FD);
	if (!info || info->epoll_fd < 0) {
		log_error(TAG, "libmicrohttpd gave no epoll fd");
		MHD_stop_daemon(m->d);
		free(m);
		return -ENOTSUP;
	}
	ev_io_init(&m->io_w, on_io, info->epoll_fd, EV_READ);
	ev_init(&m->timeout_w, on_timeout);
	m->io_w.data = m->timeout_w.data = m;
	ev_io_start(loop, &m->io_w);
	log_info(TAG, "serving metrics at http://%s:%d/metrics", host[0] ? host : "*", m->port);
	*out = m;
	return 0;
}

int net_metrics_port(const struct net_metrics *m)
{
	return m->port;
}

void net_metrics_stop(struct net_metrics *m)
{
	if (!m)
		return;
	ev_io_stop(m->loop, &m->io_w);
	ev_timer_stop(m->loop, &m->timeout_w);
	MHD_stop_daemon(m->d);          /* notifies every connection closed */
	while (m->conns) {
		struct mconn *k = m->conns;

		m->conns = k->next;
		free(k);
	}
	free(m);
}
