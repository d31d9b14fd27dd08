/* Shared by the net/ tests (test_net, test_rdma, test_net_hardening): a
 * seeded RNG, certificates made by tests/mkcerts.sh, transport configs, a
 * small peer that counts events, loop runners, connected pairs, and the
 * exchange, refused-connection and large page-transfer scenarios. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/uio.h>
#include <cmocka.h>

#include "net_harness.h"

#define PG PROTO_PAGE_BYTES


char nt_cert_dir[256];
uint64_t nt_rng_state;

uint64_t nt_rnd(void)
{
	uint64_t x = nt_rng_state;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return nt_rng_state = x;
}

char *nt_cert(const char *name)
{
	static char paths[16][PATH_MAX];
	static int next;
	char *p = paths[next++ % 16];

	snprintf(p, PATH_MAX, "%s/%s", nt_cert_dir, name);
	return p;
}

int nt_setup(void **state)
{
	const char *env = getenv("TEST_SEED");
	char cmd[PATH_MAX * 2];

	(void)state;
	nt_rng_state = env ? strtoull(env, NULL, 0) : (now_ns() | 1);
	printf("net test seed: 0x%llx (TEST_SEED to replay)\n", (unsigned long long)nt_rng_state);
	snprintf(nt_cert_dir, sizeof(nt_cert_dir), "/tmp/understudy-certs-XXXXXX");
	if (!mkdtemp(nt_cert_dir))
		return -1;
	snprintf(cmd, sizeof(cmd), "tests/mkcerts.sh %s >/dev/null", nt_cert_dir);
	if (system(cmd) != 0) {
		fprintf(stderr, "tests/mkcerts.sh failed (run from the repository root)\n");
		return -1;
	}
	return 0;
}

int nt_teardown(void **state)
{
	char cmd[PATH_MAX + 16];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", nt_cert_dir);
	return system(cmd) == 0 ? 0 : -1;
}

struct net_config nt_tls_cfg(const char *crt, const char *key, const char *ca)
{
	return (struct net_config){ .transport = NET_TLS, .cert = crt ? nt_cert(crt) : NULL,
				    .key = key ? nt_cert(key) : NULL, .ca = nt_cert(ca) };
}

const struct net_config nt_tcp_cfg = { .transport = NET_TCP, .insecure = true };
/* libfabric's tcp;ofi_rxm: the RDMA code path without an RDMA device. */
const struct net_config nt_rdma_cfg = { .transport = NET_RDMA, .insecure = true,
					    .rdma_provider = "tcp;ofi_rxm" };

/* ---- a small peer: counts events, collects bytes ----------------------------- */

static void p_connected(struct net_conn *c, void *ctx)
{
	(void)c;
	((struct nt_peer *)ctx)->connected++;
}

static void p_recv(struct net_conn *c, const void *data, size_t len, void *ctx)
{
	struct nt_peer *p = ctx;

	(void)c;
	assert_int_equal(proto_buf_append(&p->rx, data, len), 0);
}

static void p_sent(struct net_conn *c, void *cookie, int status, void *ctx)
{
	struct nt_peer *p = ctx;

	(void)c;
	(void)cookie;
	if (status)
		p->sent_err++;
	else
		p->sent++;
}

void nt_p_closed(struct net_conn *c, int reason, void *ctx)
{
	struct nt_peer *p = ctx;

	(void)c;
	p->closed++;
	p->close_reason = reason;
	p->conn = NULL;
}

const struct net_conn_ops nt_peer_ops = { p_connected, p_recv, p_sent, nt_p_closed };

void nt_on_accept(struct net_listener *l, struct net_conn *c, void *ctx)
{
	struct nt_peer *p = ctx;

	(void)l;
	p->accepted++;
	p->conn = c;
	net_conn_set_ops(c, p->ops ? p->ops : &nt_peer_ops, p);
}

/* Runs the loop until *flag becomes non-zero or timeout_ms passes. */
void nt_run_until(struct ev_loop *loop, const int *flag, int timeout_ms)
{
	uint64_t end = now_ns() + (uint64_t)timeout_ms * 1000000;

	while (!*flag && now_ns() < end) {
		ev_run(loop, EVRUN_NOWAIT);
		if (!*flag)
			usleep(100);
	}
}

void nt_run_for(struct ev_loop *loop, int ms)
{
	int never = 0;

	nt_run_until(loop, &never, ms);
}

void nt_pair_open(struct nt_pair *pr, const struct net_config *scfg, const struct net_config *ccfg)
{
	memset(pr, 0, sizeof(*pr));
	pr->loop = ev_loop_new(EVFLAG_AUTO);
	assert_non_null(pr->loop);
	proto_buf_init(&pr->srv.rx);
	proto_buf_init(&pr->cli.rx);
	assert_int_equal(net_listen(pr->loop, scfg, "127.0.0.1:0", nt_on_accept, &pr->srv, &pr->l), 0);
	snprintf(pr->addr, sizeof(pr->addr), "127.0.0.1:%d", net_listener_port(pr->l));
	assert_int_equal(net_connect(pr->loop, ccfg, pr->addr, &nt_peer_ops, &pr->cli, &pr->cli.conn), 0);
}

void nt_pair_close(struct nt_pair *pr)
{
	if (pr->cli.conn)
		net_close(pr->cli.conn);
	if (pr->srv.conn)
		net_close(pr->srv.conn);
	net_listener_close(pr->l);
	ev_loop_destroy(pr->loop);
	proto_buf_fini(&pr->srv.rx);
	proto_buf_fini(&pr->cli.rx);
}

/* A working connection: bytes both ways, completions, clean close. */
void nt_exchange(const struct net_config *scfg, const struct net_config *ccfg)
{
	static char big[3 << 20];
	struct nt_pair pr;
	struct iovec iov[3];

	nt_pair_open(&pr, scfg, ccfg);
	/* Queued before the connection is up: sent once it is. */
	iov[0] = (struct iovec){ "hello ", 6 };
	iov[1] = (struct iovec){ "", 0 };
	iov[2] = (struct iovec){ "world", 5 };
	assert_int_equal(net_send(pr.cli.conn, iov, 3, NULL), 0);
	assert_int_equal(net_queued_bytes(pr.cli.conn), 11);
	nt_run_until(pr.loop, &pr.cli.connected, 5000);
	assert_int_equal(pr.cli.connected, 1);
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (char)nt_rnd();
	iov[0] = (struct iovec){ big, sizeof(big) };
	assert_int_equal(net_send(pr.cli.conn, iov, 1, big), 0);
	for (int i = 0; i < 200 && pr.srv.rx.len < 11 + sizeof(big); i++)
		nt_run_for(pr.loop, 25);
	assert_int_equal(pr.srv.accepted, 1);
	assert_int_equal(pr.srv.rx.len, 11 + sizeof(big));
	assert_memory_equal(pr.srv.rx.data, "hello world", 11);
	assert_memory_equal(pr.srv.rx.data + 11, big, sizeof(big));
	assert_int_equal(pr.cli.sent, 2);
	assert_int_equal(net_queued_bytes(pr.cli.conn), 0);
	/* Reply, then the server closes: the client sees reason 0. */
	iov[0] = (struct iovec){ "bye", 3 };
	assert_int_equal(net_send(pr.srv.conn, iov, 1, NULL), 0);
	nt_run_until(pr.loop, &pr.srv.sent, 2000);
	net_close(pr.srv.conn);
	pr.srv.conn = NULL;
	nt_run_until(pr.loop, &pr.cli.closed, 5000);
	assert_int_equal(pr.cli.closed, 1);
	assert_int_equal(pr.cli.close_reason, 0);
	assert_int_equal(pr.cli.rx.len, 3);
	nt_pair_close(&pr);
}

void nt_connect_refused(const struct net_config *cfg)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct net_listener *l;
	struct nt_peer p = { 0 };
	char addr[64];

	/* Find a free port, then close it. */
	assert_int_equal(net_listen(loop, cfg, "127.0.0.1:0", nt_on_accept, NULL, &l), 0);
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", net_listener_port(l));
	net_listener_close(l);
	assert_int_equal(net_connect(loop, cfg, addr, &nt_peer_ops, &p, &p.conn), 0);
	nt_run_until(loop, &p.closed, 5000);
	assert_int_equal(p.closed, 1);
	assert_int_equal(p.close_reason, -ECONNREFUSED);
	assert_int_equal(p.connected, 0);
	ev_loop_destroy(loop);
}


/* ---- large verified page transfer ----------------------------------------- */

#define MEM_PAGES 16384          /* 64 MiB guest */
#define ROUNDS 4                 /* 4 x 64 MiB = 256 MiB of pages */
#define BATCH 256
#define NBUF 16

struct xfer {
	struct nt_pair pr;
	uint8_t *src, *dst;
	struct proto_page_enc *enc;
	struct proto_page_stats st;
	struct proto_buf bufs[NBUF];
	bool busy[NBUF];
	int round;
	uint64_t next_gfn, pages_rx;
	bool end_sent, scatter;
	int done, failed;
	struct proto_dec dec;
	uint64_t max_queued;
};

static void mutate(uint8_t *src, int round)
{
	for (uint64_t g = 0; g < MEM_PAGES; g++) {
		uint8_t *p = src + g * PG;
		uint64_t k = (g * 0x9E3779B97F4A7C15ull + (uint64_t)round) >> 60;

		if (k < 3) {
			memset(p, 0, PG);
		} else if (k < 7) {
			for (int i = 0; i < PG; i += 8) {
				uint64_t v = nt_rnd();
				memcpy(p + i, &v, 8);
			}
		} else if (k < 11) {
			for (int i = 0; i < PG; i++)
				p[i] = (uint8_t)("epoch page text "[(i + g) % 16]);
			p[nt_rnd() % PG] = (uint8_t)round;
		} else {
			for (int i = 0; i < 4; i++)
				p[nt_rnd() % PG] ^= (uint8_t)(1 + nt_rnd() % 255);
		}
	}
}

static void pump(struct xfer *x)
{
	uint64_t gfns[BATCH];
	const void *ptrs[BATCH];
	struct iovec iov[2 * BATCH + 1];
	int cnt;

	while (!x->end_sent && x->pr.cli.conn && net_queued_bytes(x->pr.cli.conn) < (16u << 20)) {
		int b = -1;

		for (int i = 0; i < NBUF; i++)
			if (!x->busy[i]) {
				b = i;
				break;
			}
		if (b < 0)
			return;
		proto_buf_reset(&x->bufs[b]);
		if (x->round == ROUNDS) {
			Understudy__EpochEnd ee = UNDERSTUDY__EPOCH_END__INIT;
			uint32_t crc = proto_crc32c(0, x->src, (size_t)MEM_PAGES * PG);

			ee.epoch = ROUNDS;
			ee.npages = (uint64_t)ROUNDS * MEM_PAGES;
			ee.digest = (ProtobufCBinaryData){ 4, (uint8_t *)&crc };
			assert_int_equal(proto_msg_pack(&x->bufs[b], PROTO_T_EPOCH_END, &ee.base), 0);
			x->end_sent = true;
			iov[0] = (struct iovec){ x->bufs[b].data, x->bufs[b].len };
			cnt = 1;
		} else {
			if (x->next_gfn == 0) {
				for (int i = 0; i < NBUF; i++)
					if (x->busy[i])
						return; /* x_sent() pumps again */
				mutate(x->src, x->round);
			}
			for (int i = 0; i < BATCH; i++) {
				gfns[i] = x->next_gfn + (uint64_t)i;
				ptrs[i] = x->src + gfns[i] * PG;
			}
			if (x->scatter) {
				/* Raw pages straight from src: src must not change until
				 * sent, so mutate() waits for every buffer to come back. */
				assert_int_equal(proto_pages_encode_iov(x->enc, gfns, ptrs, BATCH,
									&x->bufs[b], iov, &cnt,
									&x->st), 0);
			} else {
				assert_int_equal(proto_pages_encode(x->enc, gfns, ptrs, BATCH,
								    &x->bufs[b], &x->st), 0);
				iov[0] = (struct iovec){ x->bufs[b].data, x->bufs[b].len };
				cnt = 1;
			}
			x->next_gfn += BATCH;
			if (x->next_gfn == MEM_PAGES) {
				x->next_gfn = 0;
				x->round++;
			}
		}
		x->busy[b] = true;
		assert_int_equal(net_send(x->pr.cli.conn, iov, cnt, &x->busy[b]), 0);
		if (net_queued_bytes(x->pr.cli.conn) > x->max_queued)
			x->max_queued = net_queued_bytes(x->pr.cli.conn);
	}
}

static void x_connected(struct net_conn *c, void *ctx)
{
	struct xfer *x = (struct xfer *)((char *)ctx - offsetof(struct xfer, pr.cli));

	(void)c;
	x->pr.cli.connected++;
	pump(x);
}

static void x_sent(struct net_conn *c, void *cookie, int status, void *ctx)
{
	struct xfer *x = (struct xfer *)((char *)ctx - offsetof(struct xfer, pr.cli));

	(void)c;
	assert_int_equal(status, 0);
	*(bool *)cookie = false;
	pump(x);
}

static const void *x_base(void *ctx, uint64_t gfn)
{
	return ((struct xfer *)ctx)->dst + gfn * PG;
}

static int x_page(void *ctx, uint64_t gfn, const void *data)
{
	struct xfer *x = ctx;

	memcpy(x->dst + gfn * PG, data, PG);
	x->pages_rx++;
	return 0;
}

static int x_frame(void *ctx, const struct proto_frame *f)
{
	static const struct proto_page_sink sink = { x_base, x_page };
	struct xfer *x = ctx;
	ProtobufCMessage *m;
	Understudy__EpochEnd *ee;
	uint32_t crc;

	if (f->type == PROTO_T_PAGES)
		return proto_pages_decode(f->payload, f->len, MEM_PAGES, &sink, x, NULL);
	assert_int_equal(f->type, PROTO_T_EPOCH_END);
	assert_int_equal(proto_msg_unpack(f->type, f->payload, f->len, &m), 0);
	ee = (Understudy__EpochEnd *)m;
	crc = proto_crc32c(0, x->dst, (size_t)MEM_PAGES * PG);
	assert_int_equal(ee->npages, x->pages_rx);
	assert_int_equal(ee->digest.len, 4);
	assert_memory_equal(ee->digest.data, &crc, 4);
	proto_msg_free(m);
	x->done = 1;
	return 0;
}

static void x_recv(struct net_conn *c, const void *data, size_t len, void *ctx)
{
	struct xfer *x = (struct xfer *)((char *)ctx - offsetof(struct xfer, pr.srv));

	(void)c;
	if (proto_dec_feed(&x->dec, data, len, x_frame, x))
		x->failed = x->done = 1;
}

/* Reads payloads in place (proto_dec_rbuf), as a secondary would. */
static void *x_recv_buf(struct net_conn *c, size_t *len, void *ctx)
{
	struct xfer *x = (struct xfer *)((char *)ctx - offsetof(struct xfer, pr.srv));

	(void)c;
	return proto_dec_rbuf(&x->dec, 16384, len);
}

static const struct net_conn_ops x_cli_ops = { x_connected, NULL, x_sent, nt_p_closed };
static const struct net_conn_ops x_srv_ops = { NULL, x_recv, NULL, nt_p_closed, x_recv_buf };

void nt_transfer(const struct net_config *scfg, const struct net_config *ccfg, unsigned flags,
		     size_t cache_mb, bool scatter, const char *what)
{
	struct xfer *x = calloc(1, sizeof(*x));
	uint64_t t0 = now_ns();
	double s;

	assert_non_null(x);
	x->scatter = scatter;
	x->src = calloc(MEM_PAGES, PG);
	x->dst = calloc(MEM_PAGES, PG);
	x->enc = proto_page_enc_new(cache_mb, flags);
	assert_true(x->src && x->dst && x->enc);
	proto_dec_init(&x->dec, 0);
	for (int i = 0; i < NBUF; i++)
		proto_buf_init(&x->bufs[i]);
	memset(&x->pr, 0, sizeof(x->pr));
	x->pr.loop = ev_loop_new(EVFLAG_AUTO);
	x->pr.srv.ops = &x_srv_ops;
	assert_int_equal(net_listen(x->pr.loop, scfg, "127.0.0.1:0", nt_on_accept, &x->pr.srv, &x->pr.l), 0);
	snprintf(x->pr.addr, sizeof(x->pr.addr), "127.0.0.1:%d", net_listener_port(x->pr.l));
	assert_int_equal(net_connect(x->pr.loop, ccfg, x->pr.addr, &x_cli_ops, &x->pr.cli,
				     &x->pr.cli.conn), 0);
	while (!x->done && !x->pr.srv.closed && !x->pr.cli.closed && now_ns() - t0 < 40000000000ull)
		ev_run(x->pr.loop, EVRUN_ONCE);
	s = (double)(now_ns() - t0) / 1e9;
	printf("%s: %llu pages (%.0f MiB) in %.2f s, %.0f MiB/s of pages, wire %.0f MiB, "
	       "zero %llu raw %llu lz4 %llu xor %llu, max queued %.1f MiB\n", what,
	       (unsigned long long)x->pages_rx, x->pages_rx * 4096.0 / 1048576, s,
	       x->pages_rx * 4096.0 / 1048576 / s, x->st.bytes_out / 1048576.0,
	       (unsigned long long)x->st.nzero, (unsigned long long)x->st.nraw,
	       (unsigned long long)x->st.nlz4, (unsigned long long)x->st.nxor,
	       x->max_queued / 1048576.0);
	assert_int_equal(x->failed, 0);
	assert_int_equal(x->done, 1);
	assert_int_equal(x->pages_rx, (uint64_t)ROUNDS * MEM_PAGES);
	assert_memory_equal(x->src, x->dst, (size_t)MEM_PAGES * PG);
	nt_pair_close(&x->pr);
	for (int i = 0; i < NBUF; i++)
		proto_buf_fini(&x->bufs[i]);
	proto_dec_fini(&x->dec);
	proto_page_enc_free(x->enc);
	free(x->src);
	free(x->dst);
	free(x);
}

