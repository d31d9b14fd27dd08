/* A real etcd (the Debian etcd-server) on loopback for the tests of
 * net/etcd.c and replication/witness.c (tests/etcd_harness.c). */
#ifndef US_TEST_ETCD_HARNESS_H
#define US_TEST_ETCD_HARNESS_H

#include <stdbool.h>
#include <sys/types.h>

struct etcd_server {
	pid_t pid;
	int port;
	char dir[64];
	char endpoint[64];         /* HOST:PORT, or https://localhost:PORT */
};

/* True when the etcd binary is on PATH (else the caller skips, 77). */
bool th_etcd_installed(void);
/* A listening socket on 127.0.0.1 at a free port (-1 on failure). */
int th_listen_any(int backlog, int *port);
/* A port nothing listens on (free a moment ago). */
int th_dead_port(void);
/* Starts a one-member etcd in a temporary data dir, plain HTTP, or TLS
 * with cert_dir/named.{pem,key} (ca_file: the CA its clients trust).
 * Returns once a lease can be granted; NULL (reason on stderr) if not. */
struct etcd_server *th_etcd_start(const char *cert_dir, const char *ca_file);
/* The same with etcd's --election-timeout election_ms (th_etcd_start: 250,
 * so that a 1 s lease is granted; etcd's own default is 1000) and a
 * heartbeat of a tenth of it. */
struct etcd_server *th_etcd_start_timed(const char *cert_dir, const char *ca_file, int election_ms);
/* Stops it (SIGTERM, SIGCONT first), removes its data. NULL: nothing. */
void th_etcd_stop(struct etcd_server *s);

#endif
