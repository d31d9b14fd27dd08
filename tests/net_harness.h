/* Shared helpers of the net/ tests (tests/net_harness.c). */
#ifndef US_TEST_NET_HARNESS_H
#define US_TEST_NET_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net/net.h"
#include "proto/proto.h"

/* The certificates' directory (nt_setup makes it with tests/mkcerts.sh). */
extern char nt_cert_dir[256];
extern uint64_t nt_rng_state;

/* xorshift64 over nt_rng_state (seeded by nt_setup; TEST_SEED replays). */
uint64_t nt_rnd(void);
/* nt_cert_dir/name, in one of 16 rotating buffers. */
char *nt_cert(const char *name);
/* cmocka group setup/teardown: seed, certificates; removes them. */
int nt_setup(void **state);
int nt_teardown(void **state);

/* TLS with certificate crt/key (either may be NULL) trusting ca. */
struct net_config nt_tls_cfg(const char *crt, const char *key, const char *ca);
extern const struct net_config nt_tcp_cfg;
/* libfabric's tcp;ofi_rxm: the RDMA code path without an RDMA device. */
extern const struct net_config nt_rdma_cfg;

/* ---- a small peer: counts events, collects bytes ----------------------------- */

struct nt_peer {
	struct net_conn *conn;
	int accepted, connected, closed, sent, sent_err;
	int close_reason;
	struct proto_buf rx;
	const struct net_conn_ops *ops;
};

extern const struct net_conn_ops nt_peer_ops;
void nt_p_closed(struct net_conn *c, int reason, void *ctx);
/* Listener callback: ctx is a struct nt_peer, given its ops (or nt_peer_ops). */
void nt_on_accept(struct net_listener *l, struct net_conn *c, void *ctx);

/* Runs the loop until *flag becomes non-zero or timeout_ms passes. */
void nt_run_until(struct ev_loop *loop, const int *flag, int timeout_ms);
void nt_run_for(struct ev_loop *loop, int ms);

/* A loop, a listener on 127.0.0.1 and a client connecting to it. */
struct nt_pair {
	struct ev_loop *loop;
	struct net_listener *l;
	struct nt_peer srv, cli;
	char addr[64];
};

void nt_pair_open(struct nt_pair *pr, const struct net_config *scfg, const struct net_config *ccfg);
void nt_pair_close(struct nt_pair *pr);

/* A working connection: bytes both ways, completions, clean close. */
void nt_exchange(const struct net_config *scfg, const struct net_config *ccfg);
/* A connection to a closed port fails with -ECONNREFUSED. */
void nt_connect_refused(const struct net_config *cfg);
/* 256 MiB of pages (proto/ frames over net/), verified on arrival. */
void nt_transfer(const struct net_config *scfg, const struct net_config *ccfg, unsigned flags,
		 size_t cache_mb, bool scatter, const char *what);

#endif
