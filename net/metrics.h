/* The HTTP endpoint of --metrics HOST:PORT: GET /metrics answers with the
 * text a render callback makes (Prometheus text exposition format), served
 * by libmicrohttpd on the agent's own libev loop. MHD runs without a thread
 * of its own (external polling with its epoll fd watched by an ev_io), so
 * the render callback runs on the loop thread, between the engines'
 * callbacks, and may read their state without locks. */
#ifndef US_NET_METRICS_H
#define US_NET_METRICS_H

#include <ev.h>
#include <stddef.h>

#include "kmod/log.h"

struct net_metrics;

/* The page (malloc'd, *len bytes; taken over), or NULL for a 500. */
typedef char *(*net_metrics_render_fn)(void *ctx, size_t *len);

/* Listens at host_port (port 0: a free one, see net_metrics_port). */
int net_metrics_start(struct ev_loop *loop, const char *host_port, net_metrics_render_fn render,
		      void *ctx, struct net_metrics **out) US_MUST_CHECK;
int net_metrics_port(const struct net_metrics *m);
void net_metrics_stop(struct net_metrics *m);

#endif
