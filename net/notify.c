/* sd_notify for the agents (notify.h). libsystemd does the socket work:
 * abstract and path sockets, credentials, the environment check. */
#include "net/notify.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <systemd/sd-daemon.h>

#include "kmod/log.h"

#define TAG "notify"

void net_notify(enum net_notify_kind kind, const char *fmt, ...)
{
	static const char *const head[] = {
		[NET_NOTIFY_STATUS] = "", [NET_NOTIFY_READY] = "READY=1\n",
		[NET_NOTIFY_STOPPING] = "STOPPING=1\n",
	};
	char status[256], msg[320];
	va_list ap;
	int r;

	/* One getenv() when nobody listens: the callers are on state changes,
	 * never on the epoch path, but there is no reason to format for no one. */
	if (!getenv("NOTIFY_SOCKET"))
		return;
	va_start(ap, fmt);
	vsnprintf(status, sizeof(status), fmt, ap);
	va_end(ap);
	/* STATUS= is one line: a newline would start a new (unknown) field. */
	status[strcspn(status, "\n")] = '\0';
	snprintf(msg, sizeof(msg), "%sSTATUS=%s", head[kind], status);
	r = sd_notify(0, msg);
	if (r < 0)
		log_debug(TAG, "sd_notify: %s", strerror(-r));
}
