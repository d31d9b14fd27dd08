/* understudy drill local: the pair (a real secondary and primary started
 * from this binary on loopback, in the drill's network namespace), the
 * witness (a one-member etcd) and the faults: SIGKILL, SIGSTOP, a cut link
 * and random loss with nftables, a slow link with tc tbf. */
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/drill_local.h"
#include "net/control.h"
#include "proto/proto.h"

#define START_WAIT_S 15
#define NFT_TABLE "usdrill"
/* Random loss on the pair's link, percent of packets. */
#define LOSS_PCT 5
/* The slow link: loopback shaped to this (tc tbf), with this much queue. */
#define SLOW_RATE "20mbit"
#define SLOW_LATENCY "300ms"
/* At least the loopback MTU (64 KiB): tbf drops a packet larger than its burst. */
#define SLOW_BURST "256kb"
#define ETCD_CLIENT_PORT 2379
#define ETCD_PEER_PORT 2380

int dl_run(char *const argv[], const char *in, const char *out)
{
	int p[2] = { -1, -1 }, status;
	pid_t pid;

	if (in && pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	if ((pid = fork()) < 0)
		return -errno;
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR), o = out ? open(out, O_WRONLY | O_CREAT | O_TRUNC,
								       0644) : null;

		dup2(in ? p[0] : null, 0);
		dup2(o, 1);
		dup2(null, 2);
		execvp(argv[0], argv);
		_exit(127);
	}
	if (in) {
		close(p[0]);
		if (write(p[1], in, strlen(in)) < 0)
			(void)0;         /* the helper's exit status tells */
		close(p[1]);
	}
	if (waitpid(pid, &status, 0) < 0)
		return -errno;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* An agent from this binary, its stderr to log; it dies with the drill. */
static int spawn(const char *log, char *const argv[], pid_t *out)
{
	pid_t pid = fork();

	if (pid < 0)
		return -errno;
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR), fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(null, 0);
		dup2(null, 1);
		dup2(fd, 2);
		execv(argv[0], argv);
		_exit(127);
	}
	*out = pid;
	return 0;
}

bool dl_pair_alive(pid_t *pid)
{
	if (*pid > 0 && waitpid(*pid, NULL, WNOHANG) != 0)
		*pid = 0;        /* reaped: never signalled again (its pid may be reused) */
	return *pid > 0;
}

void dl_pair_status(const char *ctl, struct dl_status *st)
{
	char *reply = NULL;
	struct proto_json_reader js;

	memset(st, 0, sizeof(*st));
	if (control_request(ctl, "status json", 1000, &reply) < 0) {
		free(reply);
		return;
	}
	if (proto_json_read(&js, reply) == 0) {
		snprintf(st->role, sizeof(st->role), "%s", proto_json_need_str(&js, "role"));
		snprintf(st->state, sizeof(st->state), "%s", proto_json_need_str(&js, "state"));
	}
	free(reply);
	/* a VM no engine runs has no epochs and no fencing yet */
	if (json_object_object_get_ex(js.o, "epoch", NULL)) {
		st->epoch = proto_json_need_u64(&js, "epoch");
		st->acked = proto_json_need_u64(&js, "acked");
		/* "... standby vouched for)" once the witness holds the standby's vouch. */
		st->vouched = strstr(proto_json_need_str(&js, "fencing"), "standby vouched for");
	}
	if (js.why[0]) {
		/* told, and taken as no answer */
		fprintf(stderr, "understudy drill local: %s: a bad status: %s\n", ctl, js.why);
		memset(st, 0, sizeof(*st));
	}
	proto_json_reader_fini(&js);
}

static bool wait_answer(const char *ctl, pid_t *pid)
{
	struct dl_status st;

	for (int i = 0; i < START_WAIT_S * 20; i++) {
		dl_pair_status(ctl, &st);
		if (st.role[0])
			return true;
		if (!dl_pair_alive(pid))
			return false;
		usleep(50000);
	}
	return false;
}

int dl_pair_start(struct dl_pair *p, const char **why)
{
	char listen[32], scon[40], pcon[40], peer[32], tmo[16], ptmo[16], key[32];
	char *sec[24] = { (char *)p->self, "secondary", "--listen", listen, "--console", scon,
			  "--insecure", "--control", p->sctl, "--failover-timeout-ms", tmo };
	char *pri[24] = { (char *)p->self, "primary", "--guest", (char *)p->guest, "--console", pcon,
			  "--peer", peer, "--insecure", "--control", p->pctl, "--timeout-ms", ptmo };
	int ns = 11, np = 13, r;

	p->sport = 21000 + (int)p->trial * 4;
	p->scon = p->sport + 1;
	p->pcon = p->sport + 2;
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", p->sport);
	snprintf(peer, sizeof(peer), "127.0.0.1:%d", p->sport);
	snprintf(scon, sizeof(scon), "tcp:127.0.0.1:%d", p->scon);
	snprintf(pcon, sizeof(pcon), "tcp:127.0.0.1:%d", p->pcon);
	snprintf(tmo, sizeof(tmo), "%d", p->timeout_ms);
	snprintf(ptmo, sizeof(ptmo), "%d", p->pri_timeout_ms);
	snprintf(key, sizeof(key), "drill/t%u", p->trial);
	snprintf(p->sctl, sizeof(p->sctl), "%s/sec%u.ctl", p->dir, p->trial);
	snprintf(p->pctl, sizeof(p->pctl), "%s/pri%u.ctl", p->dir, p->trial);
	snprintf(p->slog, sizeof(p->slog), "%s/sec%u.log", p->dir, p->trial);
	snprintf(p->plog, sizeof(p->plog), "%s/pri%u.log", p->dir, p->trial);
	if (p->witness) {
		/* As tests/sys_witness.sh and tests/partition.py give them. */
		char *w[] = { "--witness", (char *)p->witness, "--witness-key", key, "--lease-ms",
			      "1000" };

		for (unsigned i = 0; i < 6; i++)
			sec[ns++] = pri[np++] = w[i];
	}
	sec[ns] = pri[np] = NULL;
	if ((r = spawn(p->slog, sec, &p->sec)) < 0 || !wait_answer(p->sctl, &p->sec)) {
		*why = "the secondary did not start (see its log)";
		return r < 0 ? r : -EIO;
	}
	if ((r = spawn(p->plog, pri, &p->pri)) < 0 || !wait_answer(p->pctl, &p->pri)) {
		*why = "the primary did not start (see its log)";
		return r < 0 ? r : -EIO;
	}
	return 0;
}

/* Drops the pair's link traffic (the stream over tcp and the beats over
 * udp, to or from the secondary's port), every packet or a random share. */
static int nft_link(const struct dl_pair *p, unsigned pct)
{
	char rules[1024], match[64];

	if (pct < 100)
		snprintf(match, sizeof(match), "numgen random mod 100 < %u ", pct);
	else
		match[0] = 0;
	snprintf(rules, sizeof(rules),
		 "table inet " NFT_TABLE " {\n"
		 " chain i { type filter hook input priority -10; "
		 "meta l4proto { tcp, udp } th dport %d %sdrop; "
		 "meta l4proto { tcp, udp } th sport %d %sdrop; }\n"
		 " chain o { type filter hook output priority -10; "
		 "meta l4proto { tcp, udp } th dport %d %sdrop; "
		 "meta l4proto { tcp, udp } th sport %d %sdrop; }\n}\n",
		 p->sport, match, p->sport, match, p->sport, match, p->sport, match);
	return dl_run((char *[]){ "nft", "-f", "-", NULL }, rules, NULL) == 0 ? 0 : -EIO;
}

int dl_pair_fault(struct dl_pair *p, enum dl_kind kind)
{
	switch (kind) {
	case DL_KILL:
		return kill(p->pri, SIGKILL) < 0 ? -errno : 0;
	case DL_STOP:
		if (kill(p->pri, SIGSTOP) < 0)
			return -errno;
		p->stopped = true;
		return 0;
	case DL_PARTITION:
		p->cut = nft_link(p, 100) == 0;
		return p->cut ? 0 : -EIO;
	case DL_LOSS:
		p->lossy = nft_link(p, LOSS_PCT) == 0;
		return p->lossy ? 0 : -EIO;
	case DL_SLOWLINK:
		p->slow = dl_run((char *[]){ "tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate",
					     SLOW_RATE, "burst", SLOW_BURST, "latency", SLOW_LATENCY,
					     NULL }, NULL, NULL) == 0;
		return p->slow ? 0 : -EIO;
	}
	return -EINVAL;
}

void dl_pair_heal(struct dl_pair *p)
{
	if (p->cut || p->lossy)
		(void)dl_run((char *[]){ "nft", "delete", "table", "inet", NFT_TABLE, NULL }, NULL, NULL);
	if (p->slow)
		(void)dl_run((char *[]){ "tc", "qdisc", "del", "dev", "lo", "root", NULL }, NULL, NULL);
	if (p->stopped && p->pri > 0)
		kill(p->pri, SIGCONT);
	p->cut = p->lossy = p->slow = p->stopped = false;
}

void dl_pair_stop(struct dl_pair *p)
{
	dl_pair_heal(p);
	for (pid_t *pid = &p->pri; pid; pid = pid == &p->pri ? &p->sec : NULL) {
		if (*pid > 0) {
			kill(*pid, SIGKILL);
			waitpid(*pid, NULL, 0);
		}
		*pid = 0;
	}
}

int dl_etcd_start(const char *dir, pid_t *pid, char *ep, size_t len)
{
	char data[512], log[512], status[512], client[64], peer[64], cluster[80], url[96];
	char *argv[] = { "etcd", "--name", "w", "--data-dir", data, "--listen-client-urls", client,
			 "--advertise-client-urls", client, "--listen-peer-urls", peer,
			 "--initial-advertise-peer-urls", peer, "--initial-cluster", cluster,
			 "--heartbeat-interval", "25", "--election-timeout", "250", "--log-level",
			 "error", NULL };
	pid_t p;

	snprintf(data, sizeof(data), "%s/etcd", dir);
	snprintf(log, sizeof(log), "%s/etcd.log", dir);
	snprintf(status, sizeof(status), "%s/etcd.status", dir);
	snprintf(client, sizeof(client), "http://127.0.0.1:%d", ETCD_CLIENT_PORT);
	snprintf(peer, sizeof(peer), "http://127.0.0.1:%d", ETCD_PEER_PORT);
	snprintf(cluster, sizeof(cluster), "w=%s", peer);
	snprintf(url, sizeof(url), "%s/v3/maintenance/status", client);
	if ((p = fork()) < 0)
		return -errno;
	if (p == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(fd, 1);
		dup2(fd, 2);
		execvp("etcd", argv);
		_exit(127);
	}
	*pid = p;
	snprintf(ep, len, "etcd:127.0.0.1:%d", ETCD_CLIENT_PORT);
	/* Up once it has elected itself leader. */
	for (int i = 0; i < 200 && dl_pair_alive(&p); i++) {
		char buf[4096] = "";
		json_object *js;
		bool leader;
		FILE *f;

		if (dl_run((char *[]){ "curl", "-s", "-m", "1", "-X", "POST", "-d", "{}", url, NULL },
			   NULL, status) == 0 && (f = fopen(status, "r"))) {
			buf[fread(buf, 1, sizeof(buf) - 1, f)] = 0;
			fclose(f);
			js = proto_json_parse(buf, NULL);
			leader = json_object_object_get_ex(js, "leader", NULL);
			json_object_put(js);
			if (leader)
				return 0;
		}
		usleep(100000);
	}
	if (p > 0) {
		kill(p, SIGKILL);
		waitpid(p, NULL, 0);
	}
	*pid = 0;
	return -ETIMEDOUT;
}
