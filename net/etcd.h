/* A service of net/ (see net/net.h), not a transport.
 * A small etcd v3 client over etcd's HTTP/JSON gateway (libcurl + json-c):
 * leases, a create-if-absent transaction and a compare-and-put, which is
 * all the witness of replication/witness.c needs. Blocking calls, each
 * bounded by the client's timeout; not thread-safe (one client per thread).
 *
 * Endpoints: "HOST:PORT[,HOST:PORT...]"; an endpoint may carry its scheme
 * ("https://HOST:PORT" uses TLS, with ca_file if given; "http://" or none
 * is plain HTTP). A call that cannot reach an endpoint (connect, timeout,
 * 5xx) tries the next one; the one that answered is tried first next time.
 * Each endpoint but the last gets its share of what is left of the timeout,
 * so one that swallows requests does not starve the others. A transaction
 * that timed out on one endpoint may still have been applied there before
 * the next one sees it: a create-if-absent then answers 0 although the key
 * is ours; read the key back to tell.
 *
 * Keys and values are text (NUL-free); the gateway's base64 is inside. */
#ifndef US_NET_ETCD_H
#define US_NET_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct etcd;

/* At most this many endpoints in one list. */
#define ETCD_MAX_ENDPOINTS 8

struct etcd_config {
	const char *endpoints;     /* "HOST:PORT[,...]" as above */
	const char *ca_file;       /* CA for https endpoints, or NULL (system CAs) */
	unsigned timeout_ms;       /* per request, all endpoints together; 0: 1000 */
};

/* Checks the endpoint list (-EINVAL, with a logged reason); connects lazily. */
int etcd_new(const struct etcd_config *cfg, struct etcd **out) __attribute__((warn_unused_result));
void etcd_free(struct etcd *e);
/* Checks an endpoint list as etcd_new() does, without a client: 0, or
 * -EINVAL with the reason logged (the command line checks --witness so). */
int etcd_check_endpoints(const char *list);

/* Every call returns 0 (or 1 where said) on an answer from etcd, and
 * -ETIMEDOUT / -ECONNREFUSED / -EHOSTUNREACH when no endpoint answered in
 * time, -EPROTO when the answer was not what the gateway sends (its error
 * text is logged), -ENOMEM. Every endpoint answering 5xx (etcd is there
 * but cannot serve, e.g. no leader) is -EHOSTUNREACH (-ETIMEDOUT for 504).
 * A NULL or empty key is -EINVAL. */

/* A lease of ttl_s seconds: *id, and the TTL etcd granted (it may raise it
 * to its minimum) in *granted_s. */
int etcd_lease_grant(struct etcd *e, int64_t ttl_s, int64_t *id, int64_t *granted_s)
	__attribute__((warn_unused_result));
/* Renews lease id. *ttl_s is the TTL from now on, 0 when the lease had
 * already expired (or never existed): then the lease is gone for good. */
int etcd_lease_keepalive(struct etcd *e, int64_t id, int64_t *ttl_s)
	__attribute__((warn_unused_result));
/* Revokes lease id (and deletes the keys attached to it); an unknown lease
 * is not an error. */
int etcd_lease_revoke(struct etcd *e, int64_t id) __attribute__((warn_unused_result));

/* Reads key: 1 and its value in value[len] (truncated, NUL-terminated) and
 * its lease in *lease (0: none; lease may be NULL); 0 when absent. */
int etcd_get(struct etcd *e, const char *key, char *value, size_t len, int64_t *lease)
	__attribute__((warn_unused_result));

/* One transaction: if every compare holds, every put is done; nothing
 * otherwise. Returns 1 when the puts were done, 0 when a compare failed. */
struct etcd_cmp {
	const char *key;
	const char *value;         /* the key's value must equal this; NULL: the key must be absent */
};
struct etcd_put {
	const char *key;
	const char *value;
	int64_t lease;             /* 0: no lease */
};
int etcd_txn(struct etcd *e, const struct etcd_cmp *cmp, size_t ncmp, const struct etcd_put *put,
	     size_t nput) __attribute__((warn_unused_result));

/* Unconditional delete of key (absent is not an error). */
int etcd_delete(struct etcd *e, const char *key) __attribute__((warn_unused_result));

#endif
