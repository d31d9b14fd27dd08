/* A service of net/ (see net/net.h), not a transport.
 * Readiness and status for a service manager: systemd's sd_notify protocol
 * (a datagram on the unix socket named by $NOTIFY_SOCKET), through
 * libsystemd. The agents say
 *   READY=1     once the VM is protected (primary), the standby is complete
 *               (secondary), or the VM runs (run); see contrib/systemd/;
 *   STATUS=...  at every change of state, the one line `systemctl status`
 *               shows;
 *   STOPPING=1  when they begin to stop.
 * Without $NOTIFY_SOCKET (not under systemd, or Type= is not notify)
 * nothing is sent and nothing is opened. */
#ifndef US_NET_NOTIFY_H
#define US_NET_NOTIFY_H

enum net_notify_kind {
	NET_NOTIFY_STATUS,       /* STATUS= only */
	NET_NOTIFY_READY,        /* READY=1 and STATUS= (a repeated READY=1 is harmless) */
	NET_NOTIFY_STOPPING,     /* STOPPING=1 and STATUS= */
};

/* Sends kind with STATUS= set to the formatted text. Best effort on
 * purpose: the agent's behaviour never depends on the service manager
 * hearing it, so a notification that cannot be sent is logged (debug) and
 * dropped; nothing to check for the caller. */
void net_notify(enum net_notify_kind kind, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif
