/* Checkpoint stream throughput over loopback: page batches through proto/ +
 * net/ (TCP, TLS; compression off and on), beside a plain blocking socket
 * blast and memcpy of the same bytes, measured in the same run. Then the
 * page codec alone on synthetic pages (zero, text-like, random, small edits).
 * Sender: main thread and its loop; receiver: a second thread and loop that
 * decodes and stores every page (the real secondary's work). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "net/net.h"
#include "proto/proto.h"

#define PG PROTO_PAGE_BYTES
#define MEM_PAGES 16384 /* 64 MiB */
#define ROUNDS 4        /* 256 MiB per run */
#define BATCH 256
#define NBUF 16
#define TOTAL_BYTES ((size_t)MEM_PAGES * PG * ROUNDS)

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static double secs(uint64_t t0)
{
	return (double)(now_ns() - t0) / 1e9;
}

/* kind: 0 random, 1 mixture (1/4 zero, 1/4 text, 1/4 random, 1/4 small edits of text) */
static void fill_pages(uint8_t *mem, size_t npages, int kind)
{
	for (size_t g = 0; g < npages; g++) {
		uint8_t *p = mem + g * PG;
		int k = kind == 0 ? 2 : (int)(g % 4);

		if (k == 0) {
			memset(p, 0, PG);
		} else if (k == 1 || k == 3) {
			for (int i = 0; i < PG; i++)
				p[i] = (uint8_t)("checkpoint of epoch 42 dirty page\n"[(i + g * 7) % 34]);
			for (int i = 0; i < 32; i++)
				p[rnd() % PG] = (uint8_t)rnd();
		} else {
			for (int i = 0; i < PG; i += 8) {
				uint64_t v = rnd();
				memcpy(p + i, &v, 8);
			}
		}
	}
}

/* ---- receiver thread ---------------------------------------------------------- */

struct rx {
	struct net_config cfg;
	struct ev_loop *loop;
	struct net_listener *l;
	struct net_conn *conn;
	struct proto_dec dec;
	uint8_t *mem;
	uint64_t pages;
	atomic_int port;
	atomic_int done;
	uint64_t done_ns; /* when the last frame was decoded */
	uint64_t cpu_ns;  /* receiver thread CPU time until then */
	int err;
};

static const void *rx_base(void *ctx, uint64_t gfn)
{
	return ((struct rx *)ctx)->mem + gfn * PG;
}

static int rx_page(void *ctx, uint64_t gfn, const void *data)
{
	struct rx *r = ctx;

	if (data != r->mem + gfn * PG)
		memcpy(r->mem + gfn * PG, data, PG);
	r->pages++;
	return 0;
}

static int rx_frame(void *ctx, const struct proto_frame *f)
{
	static const struct proto_page_sink sink = { rx_base, rx_page };
	struct rx *r = ctx;

	if (f->type == PROTO_T_PAGES)
		return proto_pages_decode(f->payload, f->len, MEM_PAGES, &sink, r, NULL);
	r->done_ns = now_ns();
	r->cpu_ns = thread_cpu_ns();
	atomic_store(&r->done, 1);
	ev_break(r->loop, EVBREAK_ALL);
	return 0;
}

static void rx_recv(struct net_conn *c, const void *data, size_t len, void *ctx)
{
	struct rx *r = ctx;

	(void)c;
	if (proto_dec_feed(&r->dec, data, len, rx_frame, r)) {
		r->err = 1;
		ev_break(r->loop, EVBREAK_ALL);
	}
}

static void rx_closed(struct net_conn *c, int reason, void *ctx)
{
	struct rx *r = ctx;

	(void)c;
	(void)reason;
	r->conn = NULL;
	r->err = !atomic_load(&r->done);
	ev_break(r->loop, EVBREAK_ALL);
}

static void *rx_buf(struct net_conn *c, size_t *len, void *ctx)
{
	(void)c;
	return proto_dec_rbuf(&((struct rx *)ctx)->dec, 16384, len);
}

static const struct net_conn_ops rx_ops = { NULL, rx_recv, NULL, rx_closed, rx_buf };

static void rx_accept(struct net_listener *l, struct net_conn *c, void *ctx)
{
	struct rx *r = ctx;

	(void)l;
	r->conn = c;
	net_conn_set_ops(c, &rx_ops, r);
}

static void *rx_main(void *arg)
{
	struct rx *r = arg;

	pthread_setname_np(pthread_self(), "bench-rx");
	r->loop = ev_loop_new(EVFLAG_AUTO);
	proto_dec_init(&r->dec, 0);
	if (net_listen(r->loop, &r->cfg, "127.0.0.1:0", rx_accept, r, &r->l)) {
		atomic_store(&r->port, -1);
		return NULL;
	}
	atomic_store(&r->port, net_listener_port(r->l));
	ev_run(r->loop, 0);
	if (r->conn)
		net_close(r->conn);
	net_listener_close(r->l);
	proto_dec_fini(&r->dec);
	ev_loop_destroy(r->loop);
	return NULL;
}

/* ---- sender ------------------------------------------------------------------ */

struct tx {
	struct net_conn *conn;
	struct proto_page_enc *enc;
	struct proto_page_stats st;
	struct proto_buf bufs[NBUF];
	bool busy[NBUF];
	bool scatter; /* raw pages sent from mem through iovecs */
	const uint8_t *mem;
	uint64_t next;
	bool end_sent, dead;
	char security[96];
};

static void tx_pump(struct tx *t)
{
	uint64_t gfns[BATCH];
	const void *ptrs[BATCH];
	struct iovec iov[2 * BATCH + 1];
	int cnt;

	while (!t->end_sent && !t->dead && net_queued_bytes(t->conn) < (8u << 20)) {
		int b = 0;

		while (b < NBUF && t->busy[b])
			b++;
		if (b == NBUF)
			return;
		proto_buf_reset(&t->bufs[b]);
		if (t->next == (uint64_t)MEM_PAGES * ROUNDS) {
			Understudy__EpochEnd ee = UNDERSTUDY__EPOCH_END__INIT;

			ee.npages = t->next;
			if (proto_msg_pack(&t->bufs[b], PROTO_T_EPOCH_END, &ee.base))
				abort();
			t->end_sent = true;
		} else {
			for (int i = 0; i < BATCH; i++) {
				gfns[i] = (t->next + (uint64_t)i) % MEM_PAGES;
				ptrs[i] = t->mem + gfns[i] * PG;
			}
			if (t->scatter) {
				if (proto_pages_encode_iov(t->enc, gfns, ptrs, BATCH, &t->bufs[b], iov,
							   &cnt, &t->st))
					abort();
			} else if (proto_pages_encode(t->enc, gfns, ptrs, BATCH, &t->bufs[b], &t->st)) {
				abort();
			}
			t->next += BATCH;
		}
		t->busy[b] = true;
		if (!t->scatter || t->end_sent) {
			iov[0] = (struct iovec){ t->bufs[b].data, t->bufs[b].len };
			cnt = 1;
		}
		if (net_send(t->conn, iov, cnt, &t->busy[b]))
			abort();
	}
}

static void tx_connected(struct net_conn *c, void *ctx)
{
	struct tx *t = ctx;

	snprintf(t->security, sizeof(t->security), "%s", net_security(c));
	tx_pump(t);
}

static void tx_sent(struct net_conn *c, void *cookie, int status, void *ctx)
{
	(void)c;
	(void)status;
	*(bool *)cookie = false;
	tx_pump(ctx);
}

static void tx_closed(struct net_conn *c, int reason, void *ctx)
{
	struct tx *t = ctx;

	(void)c;
	if (reason)
		fprintf(stderr, "sender: connection closed (%d)\n", reason);
	t->dead = true;
}

static const struct net_conn_ops tx_ops = { tx_connected, NULL, tx_sent, tx_closed };

/* Streams 256 MiB of pages; returns page MiB/s, or 0 on failure. */
static double run_stream(const struct net_config *scfg, const struct net_config *ccfg,
			 const uint8_t *mem, unsigned flags, double *wire_ratio)
{
	struct rx *r = calloc(1, sizeof(*r));
	/* TLS encrypts from one contiguous buffer; the others send raw pages in place. */
	struct tx t = { .mem = mem, .scatter = scfg->transport != NET_TLS };
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	char addr[64];
	pthread_t th;
	uint64_t t0, cpu0;
	double mibs = 0;

	r->cfg = *scfg;
	r->mem = malloc((size_t)MEM_PAGES * PG);
	/* A standby's memory is mapped already: fault it in (not 0, which the
	 * compiler would turn into calloc and leave unmapped). */
	memset(r->mem, 0xa5, (size_t)MEM_PAGES * PG);
	atomic_init(&r->port, 0);
	atomic_init(&r->done, 0);
	pthread_create(&th, NULL, rx_main, r);
	while (!atomic_load(&r->port))
		usleep(1000);
	if (atomic_load(&r->port) < 0)
		goto out;
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", atomic_load(&r->port));
	t.enc = proto_page_enc_new(0, flags);
	for (int i = 0; i < NBUF; i++)
		proto_buf_init(&t.bufs[i]);
	t0 = now_ns();
	cpu0 = thread_cpu_ns();
	if (net_connect(loop, ccfg, addr, &tx_ops, &t, &t.conn))
		goto out_enc;
	while (!atomic_load(&r->done) && !t.dead && secs(t0) < 20)
		ev_run(loop, EVRUN_ONCE);
	pthread_join(th, NULL);
	th = 0;
	if (!r->err && r->pages == (uint64_t)MEM_PAGES * ROUNDS &&
	    !memcmp(r->mem, mem, (size_t)MEM_PAGES * PG))
		mibs = TOTAL_BYTES / 1048576.0 / ((double)(r->done_ns - t0) / 1e9);
	else
		fprintf(stderr, "stream failed: %llu pages, err %d\n",
			(unsigned long long)r->pages, r->err);
	if (mibs > 0 && getenv("BENCH_VERBOSE"))
		printf("  run %.0f MiB/s (%s): cpu per GiB: sender %.0f ms, receiver %.0f ms\n",
		       mibs, t.security,
		       (double)(thread_cpu_ns() - cpu0) / 1e6 * 1024.0 / (TOTAL_BYTES >> 20),
		       (double)r->cpu_ns / 1e6 * 1024.0 / (TOTAL_BYTES >> 20));
	if (wire_ratio)
		*wire_ratio = (double)t.st.bytes_in / (double)t.st.bytes_out;
	if (!t.dead)
		net_close(t.conn);
out_enc:
	for (int i = 0; i < NBUF; i++)
		proto_buf_fini(&t.bufs[i]);
	proto_page_enc_free(t.enc);
out:
	if (th) {
		ev_break(r->loop, EVBREAK_ALL); /* not thread-safe in general; failure path only */
		pthread_join(th, NULL);
	}
	ev_loop_destroy(loop);
	free(r->mem);
	free(r);
	return mibs;
}

/* The machine is shared and noisy: every figure is the best of REPEAT runs,
 * and the runs of the reference and of each stream are interleaved so that a
 * busy period hits all of them alike. */
#define REPEAT 3

/* Keeps the best; a failed run (0) sticks as -1 so the figure reads as failed. */
static void keep_best(double *best, double v)
{
	if (v <= 0 || *best < 0)
		*best = -1;
	else if (v > *best)
		*best = v;
}

/* ---- references ------------------------------------------------------------- */

struct blast {
	int lfd;
	size_t total;
};

static void *blast_rx(void *arg)
{
	struct blast *b = arg;
	static uint8_t buf[1 << 20];
	size_t got = 0;
	ssize_t n;
	int fd = accept(b->lfd, NULL, NULL);

	while (got < b->total && (n = read(fd, buf, sizeof(buf))) > 0)
		got += (size_t)n;
	close(fd);
	return NULL;
}

/* Blocking TCP socket, 1 MiB writes of the same pages, reader discards. */
static double raw_blast(const uint8_t *mem)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	struct blast b = { .total = TOTAL_BYTES };
	int fd, buf = 4 << 20;
	pthread_t th;
	uint64_t t0;
	size_t sent = 0;

	b.lfd = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(b.lfd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
	if (bind(b.lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(b.lfd, 1) ||
	    getsockname(b.lfd, (struct sockaddr *)&sa, &len))
		return 0;
	pthread_create(&th, NULL, blast_rx, &b);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
	t0 = now_ns();
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
		return 0;
	while (sent < TOTAL_BYTES) {
		size_t off = sent % ((size_t)MEM_PAGES * PG);
		ssize_t n = write(fd, mem + off, 1 << 20);

		if (n <= 0)
			break;
		sent += (size_t)n;
	}
	close(fd);
	pthread_join(th, NULL);
	close(b.lfd);
	return TOTAL_BYTES / 1048576.0 / secs(t0);
}

static double memcpy_rate(const uint8_t *mem)
{
	uint8_t *dst = malloc((size_t)MEM_PAGES * PG);
	uint64_t t0;

	memset(dst, 0, (size_t)MEM_PAGES * PG); /* fault it in first */
	t0 = now_ns();

	for (int r = 0; r < ROUNDS; r++)
		memcpy(dst, mem, (size_t)MEM_PAGES * PG);
	__asm__ volatile("" : : "r"(dst) : "memory");
	free(dst);
	return TOTAL_BYTES / 1048576.0 / secs(t0);
}

static void codec_bench(uint8_t *mem)
{
	struct proto_page_enc *e = proto_page_enc_new(64, 0);
	struct proto_page_stats st = { 0 };
	struct proto_buf out;
	uint64_t gfns[BATCH];
	const void *ptrs[BATCH];
	uint64_t t0, enc_ns = 0, dec_ns = 0;
	uint8_t *dst = calloc(MEM_PAGES, PG);
	struct rx r = { .mem = dst };
	static const struct proto_page_sink sink = { rx_base, rx_page };

	proto_buf_init(&out);
	memset(dst, 1, (size_t)MEM_PAGES * PG); /* fault memory in before timing */
	for (uint64_t g = 0; g < MEM_PAGES; g += BATCH) { /* and the encoder's cache */
		for (int i = 0; i < BATCH; i++) {
			gfns[i] = g + (uint64_t)i;
			ptrs[i] = dst + gfns[i] * PG;
		}
		proto_buf_reset(&out);
		if (proto_pages_encode(e, gfns, ptrs, BATCH, &out, NULL))
			abort();
	}
	proto_page_enc_reset(e);
	for (int round = 0; round < 2; round++) {
		if (round)  /* second pass: small edits, xor against the cache */
			for (size_t g = 0; g < MEM_PAGES; g++)
				mem[g * PG + rnd() % PG] ^= 0x5a;
		for (uint64_t g = 0; g < MEM_PAGES; g += BATCH) {
			for (int i = 0; i < BATCH; i++) {
				gfns[i] = g + (uint64_t)i;
				ptrs[i] = mem + gfns[i] * PG;
			}
			proto_buf_reset(&out);
			t0 = now_ns();
			if (proto_pages_encode(e, gfns, ptrs, BATCH, &out, round ? &st : NULL))
				abort();
			enc_ns += now_ns() - t0;
			t0 = now_ns();
			if (proto_pages_decode(out.data + PROTO_HDR_BYTES, out.len - PROTO_HDR_BYTES,
					       MEM_PAGES, &sink, &r, NULL))
				abort();
			dec_ns += now_ns() - t0;
		}
		if (!round) {
			printf("codec, mixture first pass (zero/text/random/text, no cache hits): "
			       "encode %.0f MiB/s, decode %.0f MiB/s\n",
			       64 / (enc_ns / 1e9), 64 / (dec_ns / 1e9));
			enc_ns = dec_ns = 0;
		}
	}
	printf("codec, second pass (one byte changed per page, xor vs 64 MiB cache): "
	       "ratio %.1fx (%llu xor, %llu zero, %llu raw), encode %.0f MiB/s, decode %.0f MiB/s\n",
	       (double)st.bytes_in / (double)st.bytes_out, (unsigned long long)st.nxor,
	       (unsigned long long)st.nzero, (unsigned long long)st.nraw, 64 / (enc_ns / 1e9),
	       64 / (dec_ns / 1e9));
	printf("codec check: receiver copy %s\n",
	       memcmp(dst, mem, (size_t)MEM_PAGES * PG) ? "DIFFERS" : "identical");
	proto_buf_fini(&out);
	proto_page_enc_free(e);
	free(dst);
}

int main(int argc, char **argv)
{
	char dir[] = "/tmp/understudy-bench-XXXXXX", cmd[256], c[4][300];
	struct net_config tcp = { .transport = NET_TCP, .insecure = true };
	struct net_config stls = { .transport = NET_TLS }, ctls;
	struct net_config rdma = { .transport = NET_RDMA, .insecure = true,
				   .rdma_provider = "tcp;ofi_rxm" };
	uint8_t *mem = malloc((size_t)MEM_PAGES * PG);
	double raw, mcp, r_tcp, r_tls, r_tlso, r_rdma, r_tcpz, r_tlsz, wz = 0;
	struct net_config sossl, cossl;

	(void)argc;
	(void)argv;
	log_set_level(LOG_ERROR);
	if (!mem || !mkdtemp(dir))
		return 1;
	snprintf(cmd, sizeof(cmd), "tests/mkcerts.sh %s >/dev/null", dir);
	if (system(cmd)) {
		fprintf(stderr, "tests/mkcerts.sh failed: run from the repository root\n");
		return 1;
	}
	snprintf(c[0], 300, "%s/server.pem", dir);
	snprintf(c[1], 300, "%s/server.key", dir);
	snprintf(c[2], 300, "%s/ca.pem", dir);
	snprintf(c[3], 300, "%s/client.pem", dir);
	stls.cert = c[0];
	stls.key = c[1];
	stls.ca = c[2];
	ctls = stls;
	ctls.cert = c[3];
	snprintf(c[1], 300, "%s/server.key", dir);
	static char ckey[300];
	snprintf(ckey, sizeof(ckey), "%s/client.key", dir);
	ctls.key = ckey;

	/* Profiling aid: BENCH_ONLY=a,b,... (raw, tcp, tls, tls-openssl: TLS
	 * with OpenSSL's record layer) runs those alone, interleaved, 5 times. */
	if (getenv("BENCH_ONLY")) {
		char modes[128], *save = NULL;
		struct net_config sossl = stls, cossl = ctls;

		sossl.tls_openssl_records = cossl.tls_openssl_records = true;
		fill_pages(mem, MEM_PAGES, 0);
		for (int i = 0; i < 5; i++) {
			snprintf(modes, sizeof(modes), "%s", getenv("BENCH_ONLY"));
			for (char *m = strtok_r(modes, ",", &save); m; m = strtok_r(NULL, ",", &save)) {
				bool tls = !strcmp(m, "tls"), ossl = !strcmp(m, "tls-openssl");
				double v = !strcmp(m, "raw") ? raw_blast(mem) :
					   run_stream(tls ? &stls : ossl ? &sossl : &tcp,
						      tls ? &ctls : ossl ? &cossl : &tcp, mem,
						      PROTO_PAGE_NO_COMPRESS, NULL);

				printf("%-12s %6.0f MiB/s\n", m, v);
			}
		}
		return 0;
	}
	printf("loopback page stream, %zu MiB per run, batches of %d pages, 2 threads, "
	       "best of %d interleaved runs each\n", TOTAL_BYTES >> 20, BATCH, REPEAT);
	fill_pages(mem, MEM_PAGES, 0);
	mcp = memcpy_rate(mem);
	raw = r_tcp = r_tls = r_tlso = r_rdma = 0;
	sossl = stls;
	cossl = ctls;
	sossl.tls_openssl_records = cossl.tls_openssl_records = true;
	for (int i = 0; i < REPEAT; i++) {
		keep_best(&raw, raw_blast(mem));
		keep_best(&r_tcp, run_stream(&tcp, &tcp, mem, PROTO_PAGE_NO_COMPRESS, NULL));
		keep_best(&r_tls, run_stream(&stls, &ctls, mem, PROTO_PAGE_NO_COMPRESS, NULL));
		keep_best(&r_tlso, run_stream(&sossl, &cossl, mem, PROTO_PAGE_NO_COMPRESS, NULL));
		keep_best(&r_rdma, run_stream(&rdma, &rdma, mem, PROTO_PAGE_NO_COMPRESS, NULL));
	}
	printf("memcpy                     %8.0f MiB/s\n", mcp);
	printf("raw socket blast           %8.0f MiB/s   (reference)\n", raw);
	printf("net TCP, random pages raw  %8.0f MiB/s   ratio %.2f of raw socket (goal >= 0.85)\n",
	       r_tcp, r_tcp / raw);
	printf("net TLS, random pages raw  %8.0f MiB/s   ratio %.2f of raw socket (goal >= 0.6)\n",
	       r_tls, r_tls / raw);
	printf("net TLS, OpenSSL's records %8.0f MiB/s   ratio %.2f of raw socket (net's record "
	       "layer: %.2fx)\n", r_tlso, r_tlso / raw, r_tls / r_tlso);
	/* The same two as FIGURE lines (bench/figures.py), with issue 14's goals. */
	printf("FIGURE {\"name\": \"page stream over loopback, TCP, raw pages\", \"value\": %.1f, "
	       "\"unit\": \"MiB/s\", \"reference\": \"raw socket blast\", \"reference_value\": %.1f, "
	       "\"ratio\": %.4f, \"goal\": \">= 0.85 of a raw socket\", \"met\": %s}\n",
	       r_tcp, raw, r_tcp / raw, r_tcp / raw >= 0.85 ? "true" : "false");
	printf("FIGURE {\"name\": \"page stream over loopback, TLS, raw pages\", \"value\": %.1f, "
	       "\"unit\": \"MiB/s\", \"reference\": \"raw socket blast\", \"reference_value\": %.1f, "
	       "\"ratio\": %.4f, \"goal\": \">= 0.6 of a raw socket\", \"met\": %s}\n",
	       r_tls, raw, r_tls / raw, r_tls / raw >= 0.6 ? "true" : "false");
	printf("net RDMA (tcp;ofi_rxm), raw %8.0f MiB/s   ratio %.2f of raw socket "
	       "(libfabric's fi_pingpong: ~450 MiB/s, PLATFORM.md)\n", r_rdma, r_rdma / raw);
	if (getenv("BENCH_RAW_ONLY"))
		return 0;
	fill_pages(mem, MEM_PAGES, 1);
	r_tcpz = r_tlsz = 0;
	for (int i = 0; i < REPEAT; i++) {
		keep_best(&r_tcpz, run_stream(&tcp, &tcp, mem, 0, &wz));
		keep_best(&r_tlsz, run_stream(&stls, &ctls, mem, 0, NULL));
	}
	printf("net TCP, mixture, lz4      %8.0f MiB/s of pages, wire ratio %.1fx, %.2f of raw socket\n",
	       r_tcpz, wz, r_tcpz / raw);
	printf("net TLS, mixture, lz4      %8.0f MiB/s of pages, %.2f of raw socket\n", r_tlsz,
	       r_tlsz / raw);
	codec_bench(mem);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd))
		return 1;
	free(mem);
	return (r_tcp > 0 && r_tls > 0 && r_tlso > 0 && r_rdma > 0 && r_tcpz > 0 && r_tlsz > 0) ? 0 : 1;
}
