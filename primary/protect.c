/* The control requests "protect PEER [key=value ...]" that `understudy
 * protect` sends (and "migrate PEER [downtime-ms=N] [key=value ...]" that
 * `understudy migrate` sends) to an agent running a VM (run, restore, a secondary that
 * took over), parsed into the options of the protection engine
 * (repl_primary_attach). Values are checked as the command line checks them;
 * nothing is acted on unless the whole request is valid. */
#include "primary/primary.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_count(const char *key, const char *v, const char *unit, unsigned min,
		       unsigned max, unsigned *out, char *err, size_t errlen)
{
	char *end;
	unsigned long x;

	errno = 0;
	x = strtoul(v, &end, 10);
	if (*end || end == v || v[0] == '-' || errno || x < min || x > max) {
		snprintf(err, errlen, "%s '%s': need %s, %u..%u", key, v, unit, min, max);
		return -EINVAL;
	}
	*out = (unsigned)x;
	return 0;
}

static int parse_ms(const char *key, const char *v, unsigned min, unsigned *out, char *err,
		    size_t errlen)
{
	return parse_count(key, v, "milliseconds", min, 3600000, out, err, errlen);
}

static int set_option(struct repl_primary_opts *o, const char *key, char *v, char *err,
		      size_t errlen)
{
	if (!strcmp(key, "epoch-ms"))
		return parse_ms(key, v, 1, &o->epoch_ms, err, errlen);
	if (!strcmp(key, "timeout-ms"))
		return parse_ms(key, v, 10, &o->timeout_ms, err, errlen);
	if (!strcmp(key, "min-epoch-ms"))
		return parse_ms(key, v, 1, &o->min_epoch_ms, err, errlen);
	if (!strcmp(key, "handshake-timeout-ms"))
		return parse_ms(key, v, 10, &o->handshake_timeout_ms, err, errlen);
	if (!strcmp(key, "downtime-ms") && o->migrate_downtime_ms)
		return parse_ms(key, v, 1, &o->migrate_downtime_ms, err, errlen);
	if (!strcmp(key, "auto-converge") && o->migrate_downtime_ms &&
	    (!strcmp(v, "true") || !strcmp(v, "false"))) {
		o->no_auto_converge = !strcmp(v, "false");
		return 0;
	}
	if (!strcmp(key, "bandwidth") && o->migrate_downtime_ms)
		return parse_count(key, v, "MiB/s", 1, 1048576, &o->bandwidth_mib, err, errlen);
	if (!strcmp(key, "postcopy-after") && o->migrate_downtime_ms) {
		if (!strcmp(v, "never")) {
			o->postcopy_after = 0;
			return 0;
		}
		return parse_count(key, v, "rounds (or never)", 1, 1000000, &o->postcopy_after, err,
				   errlen);
	}
	if (!strcmp(key, "with-disk") && o->migrate_downtime_ms && !strcmp(v, "true")) {
		o->with_disk = true;
		return 0;
	}
	if (!strcmp(key, "insecure") && !strcmp(v, "true")) {
		o->net.insecure = true;
		return 0;
	}
	if (!strcmp(key, "transport")) {
		if (!strcmp(v, "tls"))
			o->net.transport = NET_TLS;
		else if (!strcmp(v, "tcp"))
			o->net.transport = NET_TCP;
		else if (!strcmp(v, "rdma"))
			o->net.transport = NET_RDMA;
		else
			goto bad;
		return 0;
	}
	if (v[0] != '/' && (!strcmp(key, "tls-cert") || !strcmp(key, "tls-key") ||
			    !strcmp(key, "tls-ca"))) {
		snprintf(err, errlen, "%s '%s': need an absolute path", key, v);
		return -EINVAL;
	}
	if (!strcmp(key, "tls-cert"))
		o->net.cert = v;
	else if (!strcmp(key, "tls-key"))
		o->net.key = v;
	else if (!strcmp(key, "tls-ca"))
		o->net.ca = v;
	else if (!strcmp(key, "tls-peer-name"))
		o->net.peer_name = v;
	else
		goto bad;
	return 0;
bad:
	snprintf(err, errlen, "unknown option or value '%s=%s'", key, v);
	return -EINVAL;
}

int repl_protect_parse(char *req, struct repl_primary_opts *o, char *err, size_t errlen)
{
	char host[256], *save = NULL, *tok;
	int port, r;

	memset(o, 0, sizeof(*o));
	o->epoch_ms = 25;
	o->timeout_ms = 500;
	o->handshake_timeout_ms = REPL_HANDSHAKE_TIMEOUT_MS;
	tok = strtok_r(req, " ", &save);
	if (!tok || (strcmp(tok, "protect") && strcmp(tok, "migrate"))) {
		snprintf(err, errlen, "not a protect or migrate request");
		return -EINVAL;
	}
	if (!strcmp(tok, "migrate"))
		o->migrate_downtime_ms = 30;
	o->peer = strtok_r(NULL, " ", &save);
	if (!o->peer || net_parse_host_port(o->peer, false, host, sizeof(host), &port) < 0) {
		snprintf(err, errlen, "protect needs the secondary as HOST:PORT (port 1..65535)");
		return -EINVAL;
	}
	while ((tok = strtok_r(NULL, " ", &save))) {
		char *eq = strchr(tok, '=');

		if (!eq || eq == tok) {
			snprintf(err, errlen, "'%s': need key=value", tok);
			return -EINVAL;
		}
		*eq = 0;
		if ((r = set_option(o, tok, eq + 1, err, errlen)) < 0)
			return r;
	}
	if (o->net.insecure && o->net.transport == NET_TLS && !o->net.cert)
		o->net.transport = NET_TCP;
	if (o->net.transport == NET_TLS && (!o->net.cert || !o->net.key || !o->net.ca)) {
		snprintf(err, errlen, "the link is TLS by default: give tls-cert, tls-key and tls-ca "
			 "(or insecure=true)");
		return -EINVAL;
	}
	if (o->net.transport != NET_TLS && !o->net.insecure) {
		snprintf(err, errlen, "transport tcp/rdma is not encrypted: add insecure=true");
		return -EINVAL;
	}
	return 0;
}

const char *repl_protect_refusal(const struct repl_primary_opts *o, const struct machine *m)
{
	if (!o->migrate_downtime_ms || !machine_disk_blocks(m))
		return NULL;
	if (!o->with_disk)
		return "usage: the VM has a disk and its image is not shared with the destination: "
		       "add --with-disk to copy it to the destination's image (its secondary "
		       "--disk FILE)";
	if (o->postcopy_after)
		return "usage: post-copy is not supported with a disk (every block must be at the "
		       "destination before the switch): drop --postcopy-after";
	return NULL;
}
