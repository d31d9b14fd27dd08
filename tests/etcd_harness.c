/* A real etcd on loopback for the tests (see etcd_harness.h). */
#include "tests/etcd_harness.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "kmod/log.h"
#include "net/etcd.h"

#define ETCD_BIN "etcd"

bool th_etcd_installed(void)
{
	return system("command -v " ETCD_BIN " >/dev/null 2>&1") == 0;
}

int th_listen_any(int backlog, int *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, backlog) < 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
		close(fd);
		return -1;
	}
	*port = ntohs(a.sin_port);
	return fd;
}

int th_dead_port(void)
{
	int port = 1, fd = th_listen_any(1, &port);

	if (fd >= 0)
		close(fd);
	return port;
}

/* Ready when a lease can be granted (a leader is elected). */
static int wait_ready(struct etcd_server *s, const char *ca_file)
{
	uint64_t t0 = now_ns();
	int r = -1;

	while (now_ns() - t0 < 20000000000ull) {
		struct etcd_config cfg = { .endpoints = s->endpoint, .ca_file = ca_file,
					   .timeout_ms = 500 };
		struct etcd *e = NULL;
		int64_t id, ttl;

		if (etcd_new(&cfg, &e) < 0)
			return -1;
		r = etcd_lease_grant(e, 5, &id, &ttl);
		if (!r)
			r = etcd_lease_revoke(e, id);
		etcd_free(e);
		if (!r || waitpid(s->pid, NULL, WNOHANG) == s->pid)
			break;
		usleep(50000);
	}
	if (r == 0)
		printf("etcd up on %s after %.0f ms\n", s->endpoint, (now_ns() - t0) / 1e6);
	return r;
}

struct etcd_server *th_etcd_start(const char *cert_dir, const char *ca_file)
{
	return th_etcd_start_timed(cert_dir, ca_file, 250);
}

struct etcd_server *th_etcd_start_timed(const char *cert_dir, const char *ca_file, int election_ms)
{
	struct etcd_server *s = calloc(1, sizeof(*s));
	char client_url[64], peer_url[64], cluster[80], log[96], crt[300], key[300];
	char election[16], heartbeat[16];
	int peer = th_dead_port();

	if (!s)
		return NULL;
	s->port = th_dead_port();
	snprintf(s->dir, sizeof(s->dir), "/tmp/test_etcd.XXXXXX");
	if (!mkdtemp(s->dir)) {
		free(s);
		return NULL;
	}
	snprintf(client_url, sizeof(client_url), "%s://127.0.0.1:%d", cert_dir ? "https" : "http",
		 s->port);
	snprintf(peer_url, sizeof(peer_url), "http://127.0.0.1:%d", peer);
	snprintf(cluster, sizeof(cluster), "default=%s", peer_url);
	snprintf(log, sizeof(log), "%s/etcd.log", s->dir);
	snprintf(crt, sizeof(crt), "%s/named.pem", cert_dir ? cert_dir : "");
	snprintf(key, sizeof(key), "%s/named.key", cert_dir ? cert_dir : "");
	if (cert_dir)
		snprintf(s->endpoint, sizeof(s->endpoint), "https://localhost:%d", s->port);
	else
		snprintf(s->endpoint, sizeof(s->endpoint), "127.0.0.1:%d", s->port);
	snprintf(election, sizeof(election), "%d", election_ms);
	snprintf(heartbeat, sizeof(heartbeat), "%d", election_ms / 10);
	fflush(stdout);
	s->pid = fork();
	if (s->pid < 0) {
		free(s);
		return NULL;
	}
	if (!s->pid) {
		char data[80];

		snprintf(data, sizeof(data), "%s/data", s->dir);
		if (!freopen(log, "w", stdout) || dup2(1, 2) < 0)
			_exit(126);
		execlp(ETCD_BIN, ETCD_BIN, "--data-dir", data, "--listen-client-urls", client_url,
		       "--advertise-client-urls", client_url, "--listen-peer-urls", peer_url,
		       "--initial-advertise-peer-urls", peer_url, "--initial-cluster", cluster,
		       "--heartbeat-interval", heartbeat, "--election-timeout", election,
		       cert_dir ? "--cert-file" : NULL, crt, "--key-file", key, (char *)NULL);
		_exit(127);
	}
	if (wait_ready(s, ca_file) < 0) {
		fprintf(stderr, "etcd did not come up (see %s)\n", log);
		th_etcd_stop(s);
		return NULL;
	}
	return s;
}

void th_etcd_stop(struct etcd_server *s)
{
	char cmd[96];

	if (!s)
		return;
	kill(s->pid, SIGCONT);
	kill(s->pid, SIGTERM);
	waitpid(s->pid, NULL, 0);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", s->dir);
	if (system(cmd))
		fprintf(stderr, "could not remove %s\n", s->dir);
	free(s);
}
