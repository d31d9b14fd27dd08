/* Pieces of the replication protocol both sides share: the link (a
 * connection with its frame decoder and liveness clock), small control
 * messages, the Hello exchange; the Sections' messages (MachineConfig, the
 * drill's) are packed in proto/messages.c. */
#include "replication/replication_int.h"

#include "net/beat.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG "repl"

/* Bytes the link owns until net says they were sent: control messages and
 * sync batches. They are kept on a list because net_close() drops queued
 * sends without a sent() callback: the link frees what is left then. */
struct owned_tx {
	int kind;
	struct owned_tx *next, *prev;
	struct repl_link *link;
	struct proto_buf buf;
};

static void tx_free(struct owned_tx *tx)
{
	if (tx->prev)
		tx->prev->next = tx->next;
	else
		tx->link->owned = tx->next;
	if (tx->next)
		tx->next->prev = tx->prev;
	proto_buf_fini(&tx->buf);
	free(tx);
}

static void free_owned(struct repl_link *l)
{
	while (l->owned)
		tx_free(l->owned);
}

void repl_link_init(struct repl_link *l, uint32_t max_payload)
{
	memset(l, 0, sizeof(*l));
	proto_dec_init(&l->dec, max_payload);
	l->last_rx_ns = l->last_tick_ns = now_ns();
}

void repl_link_fini(struct repl_link *l)
{
	repl_link_close(l);
	proto_dec_fini(&l->dec);
}

void repl_link_close(struct repl_link *l)
{
	if (l->conn)
		net_close(l->conn);
	l->conn = NULL;
	free_owned(l);
	repl_link_beat_stop(l);
}

void repl_link_closed(struct repl_link *l)
{
	l->conn = NULL;   /* net frees it; every send was completed before */
	free_owned(l);
	repl_link_beat_stop(l);
}

int repl_link_send_buf(struct repl_link *l, const void *data, size_t len, void *cookie)
{
	struct iovec iov = { .iov_base = (void *)data, .iov_len = len };

	if (!l->conn)
		return -ENOTCONN;
	l->bytes_sent += len;
	return net_send(l->conn, &iov, 1, cookie);
}

int repl_link_send_owned(struct repl_link *l, struct proto_buf *buf)
{
	struct owned_tx *tx = calloc(1, sizeof(*tx));
	int r;

	if (!tx) {
		proto_buf_fini(buf);
		return -ENOMEM;
	}
	tx->kind = REPL_TX_OWNED;
	tx->link = l;
	tx->buf = *buf;
	proto_buf_init(buf);
	tx->next = l->owned;
	if (l->owned)
		l->owned->prev = tx;
	l->owned = tx;
	r = repl_link_send_buf(l, tx->buf.data, tx->buf.len, tx);
	if (r < 0)
		tx_free(tx);
	return r;
}

int repl_link_send_msg(struct repl_link *l, uint16_t type, const ProtobufCMessage *msg)
{
	struct proto_buf buf;
	int r;

	proto_buf_init(&buf);
	r = proto_msg_pack(&buf, type, msg);
	if (r < 0) {
		proto_buf_fini(&buf);
		return r;
	}
	return repl_link_send_owned(l, &buf);
}

static void section_init(Understudy__Section *s, const char *name, const void *data, size_t len)
{
	understudy__section__init(s);
	s->name = (char *)name;
	s->version = 1;
	s->data.data = (uint8_t *)data;
	s->data.len = len;
}

int repl_section_pack(struct proto_buf *b, const char *name, const void *data, size_t len)
{
	Understudy__Section s;

	section_init(&s, name, data, len);
	return proto_msg_pack(b, PROTO_T_SECTION, &s.base);
}

int repl_link_send_section(struct repl_link *l, const char *name, const void *data, size_t len)
{
	Understudy__Section s;

	section_init(&s, name, data, len);
	return repl_link_send_msg(l, PROTO_T_SECTION, &s.base);
}

char *repl_status_reply(int (*format)(void *ctx, const char *req, char *out, size_t len),
			void *ctx, const char *req)
{
	char *out = malloc(8192);

	if (out && format(ctx, req, out, 8192) < 0) {
		free(out);
		return NULL;
	}
	return out;
}

/* Frees what the link owned for this send; true if the cookie was one. */
bool repl_link_sent_owned(void *cookie)
{
	struct owned_tx *tx = cookie;

	if (!tx || tx->kind != REPL_TX_OWNED)
		return false;
	tx_free(tx);
	return true;
}

/* The peer was heard when its bytes arrived; the time spent handling them
 * (a first checkpoint applied, a backlog after this process was stopped) is
 * ours, not the peer's silence: the clock restarts once they are handled. */
int repl_link_feed(struct repl_link *l, const void *data, size_t len, proto_frame_fn fn, void *ctx)
{
	int r;

	l->last_rx_ns = now_ns();
	l->bytes_rcvd += len;
	r = proto_dec_feed(&l->dec, data, len, fn, ctx);
	l->last_rx_ns = now_ns();
	return r;
}

void repl_timing_init(struct repl_timing *t, unsigned timeout_ms, unsigned epoch_ms)
{
	t->heartbeat_ms = (unsigned)(repl_heartbeat_interval(timeout_ms) * 1e3 + 0.5);
	t->timeout_ms = timeout_ms;
	t->epoch_ms = epoch_ms;
}

uint64_t repl_link_tick(struct repl_link *l, unsigned stall_ms)
{
	uint64_t now = now_ns(), gap = now - l->last_tick_ns;

	l->last_tick_ns = now;
	net_beat_progress(l->beat);   /* the loop gets round: beats may go on */
	if (gap <= (uint64_t)stall_ms * 1000000ull)
		return 0;
	l->resumed_ns = now;
	l->stall_ns = gap;
	l->last_rx_ns = now;
	return gap;
}

uint64_t repl_link_stalled_ns(const struct repl_link *l, unsigned stall_ms)
{
	uint64_t now = now_ns(), ns = (uint64_t)stall_ms * 1000000ull, from, to;

	if (now - l->last_tick_ns > ns) {
		from = l->last_tick_ns;
		to = now;
	} else if (l->resumed_ns && now - l->resumed_ns <= ns) {
		from = l->resumed_ns - l->stall_ns;
		to = l->resumed_ns;
	} else {
		return 0;
	}
	if (from < l->up_ns)
		from = l->up_ns;     /* the peer saw only the part while connected */
	return to > from ? to - from : 0;
}

int repl_send_hello(struct repl_link *l, Understudy__Role role, const struct machine_config *cfg,
		    const struct repl_timing *t, const char *witness_key, const char *token,
		    const char *vm_name)
{
	return repl_send_hello_resume(l, role, cfg, t, witness_key, token, 0, vm_name);
}

int repl_send_hello_resume(struct repl_link *l, Understudy__Role role,
			   const struct machine_config *cfg, const struct repl_timing *t,
			   const char *witness_key, const char *token, uint64_t resume_epoch,
			   const char *vm_name)
{
	Understudy__Hello h = UNDERSTUDY__HELLO__INIT;
	uint64_t digest = machine_config_digest(cfg);
	uint8_t digest_le[PROTO_META_U64_BYTES];

	proto_config_digest_encode(digest, digest_le);
	h.protocol_version = PROTO_VERSION;
	h.role = role;
	h.config_digest64 = digest;
	h.config_digest.data = digest_le;
	h.config_digest.len = sizeof(digest_le);
	h.capabilities = PROTO_CAPS_KNOWN;
	h.heartbeat_ms = t->heartbeat_ms;
	h.timeout_ms = t->timeout_ms;
	h.epoch_ms = t->epoch_ms;
	h.witness_key = (char *)(witness_key ? witness_key : "");
	h.standby_token = (char *)(token ? token : "");
	h.resume_epoch = resume_epoch;
	h.vm_name = (char *)(vm_name ? vm_name : "");
	return repl_link_send_msg(l, PROTO_T_HELLO, &h.base);
}

int repl_check_witness(const Understudy__Hello *h, const char *mine, char *err, size_t errlen)
{
	const char *theirs = h->witness_key ? h->witness_key : "";

	if (!mine)
		mine = "";
	if (!strcmp(theirs, mine))
		return 0;
	snprintf(err, errlen, "witness differs: the peer answers to %s%s%s, this side to %s%s%s",
		 theirs[0] ? "witness key '" : "no witness (heartbeat only)", theirs,
		 theirs[0] ? "'" : "", mine[0] ? "witness key '" : "no witness (heartbeat only)", mine,
		 mine[0] ? "'" : "");
	return -EINVAL;
}

int repl_hello_timing(const Understudy__Hello *h, struct repl_timing *t, char *err, size_t errlen)
{
	if (!h->heartbeat_ms || !h->timeout_ms) {
		snprintf(err, errlen, "peer does not say its heartbeat interval and timeout");
		return -EPROTO;
	}
	t->heartbeat_ms = h->heartbeat_ms;
	t->timeout_ms = h->timeout_ms;
	t->epoch_ms = h->epoch_ms;
	return 0;
}

int repl_check_timing(const struct repl_timing *pri, const struct repl_timing *sec, char *err,
		      size_t errlen)
{
	bool by_epoch = pri->epoch_ms > pri->heartbeat_ms;
	unsigned every_ms = by_epoch ? pri->epoch_ms : pri->heartbeat_ms;

	if ((uint64_t)sec->timeout_ms < (uint64_t)every_ms * REPL_TIMING_MARGIN) {
		snprintf(err, errlen, "the primary's %s is %u ms, the secondary's "
			 "--failover-timeout-ms is %u ms: it must be at least %u x %u ms, or the "
			 "secondary takes over from a healthy primary", by_epoch ? "--epoch-ms" :
			 "heartbeat interval", every_ms, sec->timeout_ms, REPL_TIMING_MARGIN, every_ms);
		return -EINVAL;
	}
	if ((uint64_t)pri->timeout_ms < (uint64_t)sec->heartbeat_ms * REPL_TIMING_MARGIN) {
		snprintf(err, errlen, "the primary's --timeout-ms is %u ms, the secondary's "
			 "heartbeat interval is %u ms: it must be at least %u x %u ms, or the primary "
			 "gives up a healthy secondary", pri->timeout_ms, sec->heartbeat_ms,
			 REPL_TIMING_MARGIN, sec->heartbeat_ms);
		return -EINVAL;
	}
	return 0;
}

int repl_check_hello(const Understudy__Hello *h, Understudy__Role want, char *err, size_t errlen)
{
	if (h->protocol_version != PROTO_VERSION) {
		snprintf(err, errlen, "protocol version %u, this side speaks %u", h->protocol_version,
			 PROTO_VERSION);
		return -EPROTONOSUPPORT;
	}
	if (h->role != want) {
		snprintf(err, errlen, "peer has role %d, expected %d", h->role, want);
		return -EPROTO;
	}
	if ((h->capabilities & PROTO_CAPS_REQUIRED) != PROTO_CAPS_REQUIRED) {
		snprintf(err, errlen, "peer lacks page encodings (capabilities 0x%llx, need 0x%llx)",
			 (unsigned long long)h->capabilities, (unsigned long long)PROTO_CAPS_REQUIRED);
		return -EPROTONOSUPPORT;
	}
	if (h->capabilities & ~PROTO_CAPS_KNOWN)
		log_info(TAG, "peer offers capabilities 0x%llx this side does not know; ignored",
			 (unsigned long long)(h->capabilities & ~PROTO_CAPS_KNOWN));
	return 0;
}

int repl_send_error(struct repl_link *l, int code, const char *text)
{
	Understudy__Error e = UNDERSTUDY__ERROR__INIT;

	e.code = code;
	e.text = (char *)text;
	return repl_link_send_msg(l, PROTO_T_ERROR, &e.base);
}

int repl_send_fence(struct repl_link *l, Understudy__FenceAction action, uint64_t epoch,
		    const char *reason)
{
	Understudy__Fence f = UNDERSTUDY__FENCE__INIT;

	f.action = action;
	f.epoch = epoch;
	f.reason = (char *)reason;
	return repl_link_send_msg(l, PROTO_T_FENCE, &f.base);
}

int repl_send_epoch_msg(struct repl_link *l, uint16_t type, uint64_t epoch)
{
	Understudy__Ack a = UNDERSTUDY__ACK__INIT;
	Understudy__Heartbeat hb = UNDERSTUDY__HEARTBEAT__INIT;

	switch (type) {
	case PROTO_T_ACK:
		a.epoch = epoch;
		return repl_link_send_msg(l, type, &a.base);
	case PROTO_T_HEARTBEAT:
		hb.seq = epoch;
		hb.time_ns = now_ns();
		return repl_link_send_msg(l, type, &hb.base);
	default:
		return -EINVAL;
	}
}

/* ---- statistics ----------------------------------------------------------- */

/* Upper bounds of the histogram buckets, ns: 0.1 ms .. 1 s. */
static const uint64_t hist_le_ns[REPL_HIST_BUCKETS] = {
	100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000, 25000000,
	50000000, 100000000, 250000000, 500000000, 1000000000,
};

uint64_t repl_hist_le_ns(int i)
{
	return hist_le_ns[i];
}

void repl_hist_add(struct repl_hist *h, uint64_t ns)
{
	int i = 0;

	while (i < REPL_HIST_BUCKETS && ns > hist_le_ns[i])
		i++;
	h->count[i]++;
	h->n++;
	h->sum_ns += ns;
}

void repl_stats_add_pause(struct repl_stats *s, uint64_t ns)
{
	s->pause_ns[s->npause++ % REPL_STATS_WINDOW] = ns;
	repl_hist_add(&s->pause_h, ns);
}

void repl_stats_add_epoch(struct repl_stats *s, uint64_t npages)
{
	s->epochs++;
	s->last_dirty_pages = npages;
	s->dirty_pages_total += npages;
}

/* Four heartbeats per timeout, at most one every 5 ms, at least one every
 * 100 ms: a heartbeat also keeps the peer's timeout, which may be shorter. */
double repl_heartbeat_interval(unsigned timeout_ms)
{
	double s = timeout_ms / 4e3;

	return s < 0.005 ? 0.005 : s > 0.1 ? 0.1 : s;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

void repl_stats_pause_pct(const struct repl_stats *s, uint64_t *p50, uint64_t *p99)
{
	uint64_t tmp[REPL_STATS_WINDOW];
	size_t n = s->npause < REPL_STATS_WINDOW ? s->npause : REPL_STATS_WINDOW;

	*p50 = *p99 = 0;
	if (!n)
		return;
	memcpy(tmp, s->pause_ns, n * sizeof(uint64_t));
	qsort(tmp, n, sizeof(uint64_t), cmp_u64);
	*p50 = tmp[n / 2];
	*p99 = tmp[n * 99 / 100];
}
