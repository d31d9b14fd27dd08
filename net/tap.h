/* A service of net/ (see net/net.h): a Linux tap device as a frame pipe
 * (IFF_TAP | IFF_NO_PI, no IFF_VNET_HDR: frames are whole Ethernet frames
 * without checksum offload, one read or write a frame). The fd is
 * non-blocking, for the owner's event loop. */
#ifndef US_NET_TAP_H
#define US_NET_TAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kmod/log.h"   /* US_MUST_CHECK */

#define NET_TAP_NAME_MAX 15

struct net_tap;

/* Attaches to tap name, creating it when there is none (a created one is
 * brought up and vanishes when closed); -errno with a logged reason. */
int net_tap_open(const char *name, struct net_tap **out) US_MUST_CHECK;
void net_tap_close(struct net_tap *t);
int net_tap_fd(const struct net_tap *t);
/* One frame into buf: its length, -EAGAIN when none is waiting, -errno. */
ssize_t net_tap_read(struct net_tap *t, void *buf, size_t len);
/* One frame out: 0 or -errno (-EAGAIN: the device's queue is full). */
int net_tap_write(struct net_tap *t, const void *frame, size_t len) US_MUST_CHECK;
/* 0 if name can name a tap device, -EINVAL if not. */
int net_tap_check_name(const char *name);

#endif
