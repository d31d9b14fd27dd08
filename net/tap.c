/* The tap device behind a VM's virtio-net: /dev/net/tun with TUNSETIFF.
 * Opening a tap that exists attaches to it (it must not be attached
 * elsewhere: no IFF_MULTI_QUEUE); opening one that does not exist creates
 * it, not persistent, so it goes with the process. Either way the link is
 * set up (IFF_UP), as a NIC whose cable is plugged in. */
#include "net/tap.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define TAG "tap"

struct net_tap {
	int fd;
	bool created;
	char name[IFNAMSIZ];
};

int net_tap_check_name(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > NET_TAP_NAME_MAX || strspn(name, "abcdefghijklmnopqrstuvwxyz"
						   "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != n)
		return -EINVAL;
	return 0;
}

static bool link_exists(const char *name)
{
	char path[64];

	snprintf(path, sizeof(path), "/sys/class/net/%s", name);
	return access(path, F_OK) == 0;
}

static int link_up(const char *name)
{
	struct ifreq ifr;
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), r = 0;

	if (s < 0)
		return -errno;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
	if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0) {
		r = -errno;
	} else if (!(ifr.ifr_flags & IFF_UP)) {
		ifr.ifr_flags |= IFF_UP;
		if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
			r = -errno;
	}
	close(s);
	return r;
}

int net_tap_open(const char *name, struct net_tap **out)
{
	struct net_tap *t;
	struct ifreq ifr;
	int r;

	if (net_tap_check_name(name) < 0) {
		log_error(TAG, "'%s' cannot name a tap device", name);
		return -EINVAL;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->created = !link_exists(name);
	t->fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
	if (t->fd < 0) {
		r = -errno;
		log_error(TAG, "/dev/net/tun: %s", strerror(-r));
		goto err;
	}
	memset(&ifr, 0, sizeof(ifr));
	ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
	if (ioctl(t->fd, TUNSETIFF, &ifr) < 0) {
		r = -errno;
		log_error(TAG, "tap %s: %s%s", name, strerror(-r),
			  r == -EBUSY ? " (attached to another process)" :
			  r == -EINVAL ? " (a device of that name that is not a tap)" : "");
		goto err_fd;
	}
	if ((r = link_up(name)) < 0) {
		log_error(TAG, "tap %s: cannot set it up: %s", name, strerror(-r));
		goto err_fd;
	}
	log_info(TAG, "tap %s %s", name, t->created ? "created" : "attached");
	*out = t;
	return 0;

err_fd:
	close(t->fd);
err:
	free(t);
	return r;
}

void net_tap_close(struct net_tap *t)
{
	if (!t)
		return;
	close(t->fd);
	free(t);
}

int net_tap_fd(const struct net_tap *t)
{
	return t->fd;
}

ssize_t net_tap_read(struct net_tap *t, void *buf, size_t len)
{
	ssize_t n;

	do
		n = read(t->fd, buf, len);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	return n;
}

int net_tap_write(struct net_tap *t, const void *frame, size_t len)
{
	ssize_t n;

	do
		n = write(t->fd, frame, len);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	return (size_t)n == len ? 0 : -EIO;
}
