/* proto/: crc32c, frames (cut anywhere), message round trips, decoder errors,
 * page batches, machine state sections. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kmod/kmod.h"
#include "machine/machine.h"
#include "proto/proto.h"

#define PG PROTO_PAGE_BYTES

static uint64_t rng_state;

static uint64_t rnd(void)
{
	uint64_t x = rng_state;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return rng_state = x;
}

static void fill_random(void *p, size_t len)
{
	uint8_t *b = p;

	for (size_t i = 0; i < len; i++)
		b[i] = (uint8_t)rnd();
}

static int setup_seed(void **state)
{
	const char *env = getenv("TEST_SEED");

	(void)state;
	rng_state = env ? strtoull(env, NULL, 0) : (now_ns() | 1);
	printf("test_proto seed: 0x%llx (TEST_SEED to replay)\n", (unsigned long long)rng_state);
	return 0;
}

/* ---- crc32c -------------------------------------------------------------- */

static void test_crc32c(void **state)
{
	uint8_t buf[1000];

	(void)state;
	/* RFC 3720 B.4 check value. */
	assert_int_equal(proto_crc32c(0, "123456789", 9), 0xe3069283);
	assert_int_equal(proto_crc32c_sw(0, "123456789", 9), 0xe3069283);
	memset(buf, 0, 32);
	assert_int_equal(proto_crc32c(0, buf, 32), 0x8a9136aa);
	fill_random(buf, sizeof(buf));
	for (size_t off = 0; off < 9; off++)
		for (size_t len = 0; len < 300; len += 7)
			assert_int_equal(proto_crc32c(0, buf + off, len),
					 proto_crc32c_sw(0, buf + off, len));
	/* The three-stream path (runs of 3 x 1360 bytes), page-sized and larger. */
	{
		static uint8_t big[20000];

		fill_random(big, sizeof(big));
		for (size_t len = 4000; len < sizeof(big); len += 997)
			assert_int_equal(proto_crc32c(0, big + (len & 7), len - 8),
					 proto_crc32c_sw(0, big + (len & 7), len - 8));
		assert_int_equal(proto_crc32c(0, big, 4096), proto_crc32c_sw(0, big, 4096));
	}
	/* Incremental == one shot. */
	assert_int_equal(proto_crc32c(proto_crc32c(0, buf, 333), buf + 333, 667),
			 proto_crc32c(0, buf, 1000));
}

/* ---- frames and messages ------------------------------------------------- */

struct collect {
	int n;
	uint16_t types[64];
	struct proto_buf payloads[64];
};

static int collect_frame(void *ctx, const struct proto_frame *f)
{
	struct collect *c = ctx;

	assert_true(c->n < 64);
	c->types[c->n] = f->type;
	proto_buf_init(&c->payloads[c->n]);
	assert_int_equal(proto_buf_append(&c->payloads[c->n], f->payload, f->len), 0);
	c->n++;
	return 0;
}

static void collect_free(struct collect *c)
{
	for (int i = 0; i < c->n; i++)
		proto_buf_fini(&c->payloads[i]);
	c->n = 0;
}

/* Feeds buf to a fresh decoder in random chunk sizes. */
static int feed_chunked(const uint8_t *buf, size_t len, struct collect *c, uint32_t max)
{
	struct proto_dec d;
	size_t off = 0, chunk;
	int r = 0;

	proto_dec_init(&d, max);
	while (off < len && !r) {
		chunk = 1 + rnd() % 97;
		if (rnd() % 4 == 0)
			chunk = len - off;
		if (chunk > len - off)
			chunk = len - off;
		r = proto_dec_feed(&d, buf + off, chunk, collect_frame, c);
		off += chunk;
	}
	if (!r && proto_dec_partial(&d))
		r = -EPIPE;
	proto_dec_fini(&d);
	return r;
}

static void test_msg_roundtrip(void **state)
{
	uint8_t digest[32], blob[3000];
	Understudy__Hello hello = UNDERSTUDY__HELLO__INIT;
	Understudy__EpochBegin eb = UNDERSTUDY__EPOCH_BEGIN__INIT;
	Understudy__EpochEnd ee = UNDERSTUDY__EPOCH_END__INIT;
	Understudy__Ack ack = UNDERSTUDY__ACK__INIT;
	Understudy__Heartbeat hb = UNDERSTUDY__HEARTBEAT__INIT;
	Understudy__Fence fence = UNDERSTUDY__FENCE__INIT;
	Understudy__Error error = UNDERSTUDY__ERROR__INIT;
	Understudy__Section sec = UNDERSTUDY__SECTION__INIT;
	Understudy__PostcopyBegin pcb = UNDERSTUDY__POSTCOPY_BEGIN__INIT;
	Understudy__PageRequest prq = UNDERSTUDY__PAGE_REQUEST__INIT;
	Understudy__PostcopyDone pcd = UNDERSTUDY__POSTCOPY_DONE__INIT;
	/* indexed by frame type; the retired types have no message */
	const ProtobufCMessage *msgs[PROTO_T_MSG_LAST + 1] = {
		[PROTO_T_HELLO] = &hello.base, [PROTO_T_EPOCH_BEGIN] = &eb.base,
		[PROTO_T_EPOCH_END] = &ee.base, [PROTO_T_ACK] = &ack.base,
		[PROTO_T_HEARTBEAT] = &hb.base, [PROTO_T_FENCE] = &fence.base,
		[PROTO_T_ERROR] = &error.base, [PROTO_T_SECTION] = &sec.base,
		[PROTO_T_POSTCOPY_BEGIN] = &pcb.base, [PROTO_T_PAGE_REQUEST] = &prq.base,
		[PROTO_T_POSTCOPY_DONE] = &pcd.base,
	};
	int types[PROTO_T_MSG_LAST], ntypes = 0;
	struct proto_buf out;
	struct collect c = { 0 };

	(void)state;
	fill_random(digest, sizeof(digest));
	fill_random(blob, sizeof(blob));
	hello.protocol_version = PROTO_VERSION;
	hello.role = UNDERSTUDY__ROLE__ROLE_PRIMARY;
	hello.config_digest = (ProtobufCBinaryData){ sizeof(digest), digest };
	hello.config_digest64 = rnd();
	hello.capabilities = PROTO_CAP_LZ4 | PROTO_CAP_XOR;
	hello.vm_name = "web1";
	eb.epoch = rnd();
	ee.epoch = eb.epoch;
	ee.npages = 12345;
	ee.digest = (ProtobufCBinaryData){ sizeof(digest), digest };
	ack.epoch = eb.epoch;
	hb.seq = 42;
	hb.time_ns = now_ns();
	fence.epoch = 9;
	fence.reason = "peer silent";
	error.code = -EBADMSG;
	error.text = "bad frame";
	sec.name = "pit";
	sec.version = 2;
	sec.data = (ProtobufCBinaryData){ sizeof(blob), blob };

	/* Retired frame types are unknown: refused by pack, unpack and decoder. */
	proto_buf_init(&out);
	for (int t = 1; t <= PROTO_T_MSG_LAST; t++) {
		if (msgs[t]) {
			types[ntypes++] = t;
			assert_true(proto_type_known((uint16_t)t));
			continue;
		}
		assert_false(proto_type_known((uint16_t)t));
		assert_int_equal(proto_msg_pack(&out, (uint16_t)t, &hello.base), -EINVAL);
		assert_int_equal(proto_msg_unpack((uint16_t)t, blob, 4, &(ProtobufCMessage *){ 0 }),
				 -EPROTOTYPE);
	}
	for (int i = 0; i < ntypes; i++)
		assert_int_equal(proto_msg_pack(&out, (uint16_t)types[i], msgs[types[i]]), 0);
	/* Wrong type for a message is refused. */
	assert_int_equal(proto_msg_pack(&out, PROTO_T_ACK, &hello.base), -EINVAL);
	assert_int_equal(feed_chunked(out.data, out.len, &c, 0), 0);
	assert_int_equal(c.n, ntypes);
	for (int i = 0; i < ntypes; i++) {
		ProtobufCMessage *m;
		uint8_t a[4096], b[4096];
		int t = types[i];

		assert_int_equal(c.types[i], t);
		assert_int_equal(proto_msg_unpack((uint16_t)t, c.payloads[i].data,
						  c.payloads[i].len, &m), 0);
		assert_ptr_equal(m->descriptor, msgs[t]->descriptor);
		/* Re-packing gives the same bytes: every field survived. */
		assert_int_equal(protobuf_c_message_pack(m, a), protobuf_c_message_pack(msgs[t], b));
		assert_memory_equal(a, b, protobuf_c_message_get_packed_size(m));
		proto_msg_free(m);
	}
	{
		Understudy__Hello *h;
		ProtobufCMessage *m;

		assert_int_equal(proto_msg_unpack(PROTO_T_HELLO, c.payloads[0].data, c.payloads[0].len, &m), 0);
		h = (Understudy__Hello *)m;
		assert_int_equal(h->config_digest64, hello.config_digest64);
		assert_memory_equal(h->config_digest.data, digest, sizeof(digest));
		assert_string_equal(h->vm_name, "web1");
		proto_msg_free(m);
	}
	/* Garbage is -EBADMSG (0xff... is an invalid varint/tag stream). */
	{
		uint8_t junk[16];
		ProtobufCMessage *m;

		memset(junk, 0xff, sizeof(junk));
		assert_int_equal(proto_msg_unpack(PROTO_T_HELLO, junk, sizeof(junk), &m), -EBADMSG);
		assert_null(m);
		assert_int_equal(proto_msg_unpack(PROTO_T_PAGES, junk, 1, &m), -EPROTOTYPE);
	}
	collect_free(&c);
	proto_buf_fini(&out);
}

/* Hello.vm_name (field 14) is optional both ways: an older primary's Hello
 * (no field 14) reads as the name "", and an older reader skips the field
 * as unknown, as this one skips a field 15 it does not know. */
static void test_hello_name_compat(void **state)
{
	Understudy__Hello hello = UNDERSTUDY__HELLO__INIT, *h;
	uint8_t buf[256];
	ProtobufCMessage *m;
	size_t n, named;

	(void)state;
	hello.protocol_version = PROTO_VERSION;
	hello.role = UNDERSTUDY__ROLE__ROLE_PRIMARY;
	hello.heartbeat_ms = 100;
	n = protobuf_c_message_pack(&hello.base, buf);
	assert_int_equal(proto_msg_unpack(PROTO_T_HELLO, buf, n, &m), 0);
	h = (Understudy__Hello *)m;
	assert_string_equal(h->vm_name, "");
	assert_int_equal(h->heartbeat_ms, 100);
	proto_msg_free(m);

	/* named: the old bytes and field 14 (tag 0x72, length, the name) */
	hello.vm_name = "db-7";
	named = protobuf_c_message_pack(&hello.base, buf);
	assert_int_equal(named, n + 2 + 4);
	assert_memory_equal(buf + n, "\x72\x04" "db-7", 6);
	/* a field this reader does not know (15, a string) is skipped */
	memcpy(buf + named, "\x7a\x03" "new", 5);
	assert_int_equal(proto_msg_unpack(PROTO_T_HELLO, buf, named + 5, &m), 0);
	h = (Understudy__Hello *)m;
	assert_string_equal(h->vm_name, "db-7");
	assert_int_equal(h->heartbeat_ms, 100);
	assert_int_equal(h->role, UNDERSTUDY__ROLE__ROLE_PRIMARY);
	proto_msg_free(m);
}

static void build_two_frames(struct proto_buf *out)
{
	uint8_t payload[300];

	fill_random(payload, sizeof(payload));
	proto_buf_init(out);
	assert_int_equal(proto_frame_append(out, PROTO_T_SECTION, payload, sizeof(payload)), 0);
	assert_int_equal(proto_frame_append(out, PROTO_T_ACK, payload, 10), 0);
}

/* Corrupts the second frame and checks only the first is delivered. */
static void expect_error(void (*corrupt)(uint8_t *hdr, uint8_t *payload), int err, uint32_t max)
{
	struct proto_buf out;
	struct collect c = { 0 };
	size_t second = PROTO_HDR_BYTES + 300;

	build_two_frames(&out);
	corrupt(out.data + second, out.data + second + PROTO_HDR_BYTES);
	assert_int_equal(feed_chunked(out.data, out.len, &c, max), err);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.types[0], PROTO_T_SECTION);
	collect_free(&c);
	proto_buf_fini(&out);
}

static void bad_magic(uint8_t *h, uint8_t *p) { (void)p; h[0] ^= 1; }
static void bad_version(uint8_t *h, uint8_t *p) { (void)p; h[4] = 9; }
static void bad_type(uint8_t *h, uint8_t *p) { (void)p; h[6] = 200; }
static void bad_len(uint8_t *h, uint8_t *p) { (void)p; h[11] = 0x7f; }
static void bad_crc(uint8_t *h, uint8_t *p) { (void)h; p[3] ^= 0x10; }

static void test_frame_errors(void **state)
{
	struct proto_buf out;
	struct collect c = { 0 };
	struct proto_dec d;

	(void)state;
	expect_error(bad_magic, -EPROTO, 0);
	expect_error(bad_version, -EPROTONOSUPPORT, 0);
	expect_error(bad_type, -EPROTOTYPE, 0);
	expect_error(bad_len, -EMSGSIZE, 0);
	expect_error(bad_crc, -EBADMSG, 0);

	/* A limit below the first frame's size: nothing at all delivered. */
	build_two_frames(&out);
	assert_int_equal(feed_chunked(out.data, out.len, &c, 299), -EMSGSIZE);
	assert_int_equal(c.n, 0);

	/* Truncated stream: the partial frame is held, never delivered. */
	proto_dec_init(&d, 0);
	assert_int_equal(proto_dec_feed(&d, out.data, out.len - 1, collect_frame, &c), 0);
	assert_int_equal(c.n, 1);
	assert_true(proto_dec_partial(&d));
	/* Errors are sticky. */
	proto_dec_fini(&d);
	proto_dec_init(&d, 0);
	out.data[0] ^= 0xff;
	assert_int_equal(proto_dec_feed(&d, out.data, 4, collect_frame, &c), 0);
	assert_int_equal(proto_dec_feed(&d, out.data + 4, 12, collect_frame, &c), -EPROTO);
	out.data[0] ^= 0xff;
	assert_int_equal(proto_dec_feed(&d, out.data, out.len, collect_frame, &c), -EPROTO);
	assert_int_equal(c.n, 1);
	proto_dec_fini(&d);
	collect_free(&c);
	proto_buf_fini(&out);
}

/* ---- pages ---------------------------------------------------------------- */

#define NGFN 512

struct mem {
	uint8_t *pages; /* receiver's copy, NGFN pages */
	uint64_t max_gfn;
	int delivered;
};

static const void *mem_base(void *ctx, uint64_t gfn)
{
	struct mem *m = ctx;

	return m->pages + gfn * PG;
}

static int mem_page(void *ctx, uint64_t gfn, const void *data)
{
	struct mem *m = ctx;

	assert_true(gfn < m->max_gfn);
	memcpy(m->pages + gfn * PG, data, PG);
	m->delivered++;
	return 0;
}

static const struct proto_page_sink mem_sink = { mem_base, mem_page };

/* Decodes the single PAGES frame in out into m. */
static int decode_frame(const struct proto_buf *out, struct mem *m)
{
	struct collect c = { 0 };
	int r;

	assert_int_equal(feed_chunked(out->data, out->len, &c, 64u << 20), 0);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.types[0], PROTO_T_PAGES);
	r = proto_pages_decode(c.payloads[0].data, c.payloads[0].len, m->max_gfn, &mem_sink, m, NULL);
	collect_free(&c);
	return r;
}

static void text_page(uint8_t *p)
{
	static const char *const words[] = { "checkpoint ", "epoch ", "the ", "guest ", "page ", "\n" };
	size_t off = 0;

	while (off < PG) {
		const char *w = words[rnd() % 6];
		size_t n = strlen(w);

		if (n > PG - off)
			n = PG - off;
		memcpy(p + off, w, n);
		off += n;
	}
}

static void run_pages(unsigned flags, size_t cache_mb)
{
	uint8_t *src = calloc(NGFN, PG);
	struct mem m = { calloc(NGFN, PG), NGFN, 0 };
	struct proto_page_enc *e = proto_page_enc_new(cache_mb, flags);
	struct proto_page_stats st = { 0 };
	uint64_t gfns[64];
	const void *ptrs[64];
	struct proto_buf out;

	assert_non_null(e);
	proto_buf_init(&out);
	for (int round = 0; round < 6; round++) {
		for (int i = 0; i < 64; i++) {
			uint64_t gfn = rnd() % NGFN;
			uint8_t *p = src + gfn * PG;

			switch (rnd() % 5) {
			case 0: memset(p, 0, PG); break;                 /* zero */
			case 1: fill_random(p, PG); break;               /* incompressible */
			case 2: text_page(p); break;                      /* compressible */
			default:                                          /* small change */
				for (int k = 0; k < 3; k++)
					p[rnd() % PG] ^= (uint8_t)(1 + rnd() % 255);
			}
			gfns[i] = gfn;
			ptrs[i] = p; /* duplicates in one batch exercise in-batch bases */
		}
		proto_buf_reset(&out);
		assert_int_equal(proto_pages_encode(e, gfns, ptrs, 64, &out, &st), 0);
		m.delivered = 0;
		assert_int_equal(decode_frame(&out, &m), 0);
		assert_int_equal(m.delivered, 64);
		for (int i = 0; i < 64; i++)
			assert_memory_equal(m.pages + gfns[i] * PG, src + gfns[i] * PG, PG);
	}
	assert_int_equal(st.npages, 6 * 64);
	assert_true(st.nzero > 0);
	assert_true(st.nraw > 0);
	if (flags & PROTO_PAGE_NO_COMPRESS) {
		assert_int_equal(st.nlz4 + st.nxor, 0);
	} else {
		assert_true(st.nlz4 > 0);
		if (cache_mb)
			assert_true(st.nxor > 0);
	}
	printf("pages flags %u cache %zu MiB: zero %llu raw %llu lz4 %llu xor %llu, %llu -> %llu bytes\n",
	       flags, cache_mb, (unsigned long long)st.nzero, (unsigned long long)st.nraw,
	       (unsigned long long)st.nlz4, (unsigned long long)st.nxor,
	       (unsigned long long)st.bytes_in, (unsigned long long)st.bytes_out);
	proto_buf_fini(&out);
	proto_page_enc_free(e);
	free(m.pages);
	free(src);
}

static void test_pages_roundtrip(void **state)
{
	(void)state;
	run_pages(0, 4);                       /* cache covers all gfns */
	run_pages(0, 1);                       /* 256 slots for 512 gfns: collisions */
	run_pages(0, 0);                       /* no xor */
	run_pages(PROTO_PAGE_NO_COMPRESS, 4);
}

/* Caching off (a bulk copy): nothing sent then is an XOR base later, and a
 * copy kept from before is forgotten, since the receiver's page changed. */
static void test_pages_cache_off(void **state)
{
	static uint8_t page[PG];
	const void *ptrs[1] = { page };
	uint64_t gfn[1] = { 5 };
	struct proto_page_enc *e = proto_page_enc_new(1, 0);
	struct mem m = { calloc(NGFN, PG), NGFN, 0 };
	struct proto_buf out;
	size_t e0 = 8 + PROTO_HDR_BYTES;   /* the entry: gfn(8) enc(1) len(4) */

	(void)state;
	proto_buf_init(&out);
	text_page(page);
	assert_int_equal(proto_pages_encode(e, gfn, ptrs, 1, &out, NULL), 0);   /* kept */
	assert_int_equal(decode_frame(&out, &m), 0);
	proto_page_enc_cache(e, false);
	page[7] ^= 0x55;
	proto_buf_reset(&out);
	assert_int_equal(proto_pages_encode(e, gfn, ptrs, 1, &out, NULL), 0);
	assert_int_not_equal(out.data[e0 + 8], PROTO_PAGE_XOR);   /* not against the kept copy */
	assert_int_equal(decode_frame(&out, &m), 0);
	proto_page_enc_cache(e, true);
	page[9] ^= 0x33;
	proto_buf_reset(&out);
	assert_int_equal(proto_pages_encode(e, gfn, ptrs, 1, &out, NULL), 0);
	/* The copy kept before caching went off is stale: not a base. */
	assert_int_not_equal(out.data[e0 + 8], PROTO_PAGE_XOR);
	assert_int_equal(decode_frame(&out, &m), 0);
	assert_memory_equal(m.pages + 5 * PG, page, PG);
	page[11] ^= 0x11;                  /* kept again: XOR from here on */
	proto_buf_reset(&out);
	assert_int_equal(proto_pages_encode(e, gfn, ptrs, 1, &out, NULL), 0);
	assert_int_equal(out.data[e0 + 8], PROTO_PAGE_XOR);
	assert_int_equal(decode_frame(&out, &m), 0);
	assert_memory_equal(m.pages + 5 * PG, page, PG);
	proto_buf_fini(&out);
	proto_page_enc_free(e);
	free(m.pages);
}

/* A page sent twice in one epoch (pre-copied while the guest ran, written
 * again, sent again at the pause): the secondary stages both and decodes
 * each against its last complete checkpoint, which holds neither yet. The
 * second copy must not be a delta against the first (proto_page_enc_forget):
 * decoded against the checkpoint, that delta would give a wrong page. */
struct staged {
	uint8_t *committed;  /* the standby's RAM: the XOR base all epoch */
	uint8_t *last;       /* the last staged copy of each gfn */
};

static const void *staged_base(void *ctx, uint64_t gfn)
{
	return ((struct staged *)ctx)->committed + gfn * PG;
}

static int staged_page(void *ctx, uint64_t gfn, const void *data)
{
	memcpy(((struct staged *)ctx)->last + gfn * PG, data, PG);
	return 0;
}

static void send_page(struct proto_page_enc *e, uint64_t gfn, const uint8_t *page,
		      struct staged *sg, uint8_t *enc)
{
	static const struct proto_page_sink sink = { staged_base, staged_page };
	const void *ptrs[1] = { page };
	struct proto_buf out;
	struct collect c = { 0 };

	proto_buf_init(&out);
	assert_int_equal(proto_pages_encode(e, &gfn, ptrs, 1, &out, NULL), 0);
	*enc = out.data[8 + PROTO_HDR_BYTES + 8];
	assert_int_equal(feed_chunked(out.data, out.len, &c, 64u << 20), 0);
	assert_int_equal(proto_pages_decode(c.payloads[0].data, c.payloads[0].len, NGFN, &sink,
					    sg, NULL), 0);
	collect_free(&c);
	proto_buf_fini(&out);
}

static void test_pages_resent_in_epoch(void **state)
{
	static uint8_t page[PG];
	struct staged sg = { calloc(NGFN, PG), calloc(NGFN, PG) };
	struct proto_page_enc *e = proto_page_enc_new(1, 0);
	uint8_t enc;

	(void)state;
	/* Epoch 1 commits the page: the base and the encoder's copy agree. */
	text_page(page);
	send_page(e, 9, page, &sg, &enc);
	memcpy(sg.committed, sg.last, NGFN * PG);
	/* Epoch 2: pre-copied (a delta against epoch 1: right), then written
	 * again and sent again at the pause. */
	page[100] ^= 0x5a;
	send_page(e, 9, page, &sg, &enc);
	assert_int_equal(enc, PROTO_PAGE_XOR);
	assert_memory_equal(sg.last + 9 * PG, page, PG);
	page[200] ^= 0xa5;
	proto_page_enc_forget(e, 9);
	send_page(e, 9, page, &sg, &enc);
	assert_int_not_equal(enc, PROTO_PAGE_XOR);
	assert_memory_equal(sg.last + 9 * PG, page, PG);
	memcpy(sg.committed, sg.last, NGFN * PG);   /* epoch 2 commits the last copy */
	/* Epoch 3: deltas again, against what epoch 2 committed. */
	page[300] ^= 0x11;
	send_page(e, 9, page, &sg, &enc);
	assert_int_equal(enc, PROTO_PAGE_XOR);
	assert_memory_equal(sg.last + 9 * PG, page, PG);
	memcpy(sg.committed, sg.last, NGFN * PG);
	/* Without the forget, the second copy of an epoch is a delta against
	 * the first, which the receiver's base does not hold: a wrong page. */
	page[400] ^= 0x22;
	send_page(e, 9, page, &sg, &enc);
	page[500] ^= 0x44;
	send_page(e, 9, page, &sg, &enc);
	assert_int_equal(enc, PROTO_PAGE_XOR);
	assert_memory_not_equal(sg.last + 9 * PG, page, PG);
	proto_page_enc_free(e);
	free(sg.committed);
	free(sg.last);
}

/* Builds a batch of 3 pages (text, xor against zero base, raw). */
static void bad_batch(struct proto_buf *payload)
{
	static uint8_t pages[3][PG];
	const void *ptrs[3] = { pages[0], pages[1], pages[2] };
	uint64_t gfns[3] = { 1, 2, 3 };
	struct proto_page_enc *e = proto_page_enc_new(1, 0);
	struct proto_buf out;

	text_page(pages[0]);
	fill_random(pages[2], PG);
	proto_buf_init(&out);
	assert_int_equal(proto_pages_encode(e, gfns, ptrs, 3, &out, NULL), 0);
	pages[1][100] = 1; /* gfn 2 cached as zero: now sent as xor */
	proto_buf_reset(&out);
	assert_int_equal(proto_pages_encode(e, gfns, ptrs, 3, &out, NULL), 0);
	proto_buf_init(payload);
	assert_int_equal(proto_buf_append(payload, out.data + PROTO_HDR_BYTES,
					  out.len - PROTO_HDR_BYTES), 0);
	proto_buf_fini(&out);
	proto_page_enc_free(e);
}

static void test_pages_malformed(void **state)
{
	struct mem m = { calloc(NGFN, PG), NGFN, 0 };
	struct proto_buf p;
	/* entry offsets: 8 | gfn(8) enc(1) len(4) */
	size_t e0 = 8;

	(void)state;
	bad_batch(&p);
	assert_int_equal(p.data[e0 + 8], PROTO_PAGE_XOR); /* gfn 1 was sent before: xor */
	assert_int_equal(proto_pages_decode(p.data, p.len, NGFN, &mem_sink, &m, NULL), 0);
	assert_int_equal(m.delivered, 3);

	/* gfn beyond memory: nothing delivered (structure checked first). */
	m.delivered = 0;
	assert_int_equal(proto_pages_decode(p.data, p.len, 3, &mem_sink, &m, NULL), -EBADMSG);
	assert_int_equal(m.delivered, 0);
	/* Truncated, extra trailing byte, count too large, count too small. */
	assert_int_equal(proto_pages_decode(p.data, p.len - 1, NGFN, &mem_sink, &m, NULL), -EBADMSG);
	assert_int_equal(proto_pages_decode(p.data, 5, NGFN, &mem_sink, &m, NULL), -EBADMSG);
	assert_int_equal(proto_buf_append(&p, "x", 1), 0);
	assert_int_equal(proto_pages_decode(p.data, p.len, NGFN, &mem_sink, &m, NULL), -EBADMSG);
	p.len--;
	p.data[0] = 4;
	assert_int_equal(proto_pages_decode(p.data, p.len, NGFN, &mem_sink, &m, NULL), -EBADMSG);
	p.data[0] = 2;
	assert_int_equal(proto_pages_decode(p.data, p.len, NGFN, &mem_sink, &m, NULL), -EBADMSG);
	p.data[0] = 3;
	/* Unknown encoding; raw with a wrong length. */
	p.data[e0 + 8] = 9;
	assert_int_equal(proto_pages_decode(p.data, p.len, NGFN, &mem_sink, &m, NULL), -EBADMSG);
	p.data[e0 + 8] = PROTO_PAGE_RAW;
	assert_int_equal(proto_pages_decode(p.data, p.len, NGFN, &mem_sink, &m, NULL), -EBADMSG);
	p.data[e0 + 8] = PROTO_PAGE_XOR;
	assert_int_equal(m.delivered, 0);
	/* Corrupt lz4 data of the first entry: stops before any page. */
	p.data[e0 + 13] ^= 0xff;
	p.data[e0 + 14] ^= 0xff;
	assert_int_equal(proto_pages_decode(p.data, p.len, NGFN, &mem_sink, &m, NULL), -EBADMSG);
	assert_int_equal(m.delivered, 0);
	proto_buf_fini(&p);
	free(m.pages);
}

/* The scatter encoder puts the same bytes on the wire as the copying one,
 * and a decoder reading in place through proto_dec_rbuf() gets the frames. */
static void test_pages_scatter_and_read_in_place(void **state)
{
	enum { N = 40 };
	static uint8_t pages[N][PROTO_PAGE_BYTES];
	const void *ptrs[N];
	uint64_t gfns[N];
	struct iovec iov[2 * N + 1];
	struct proto_buf a, b, flat;
	struct collect c = { 0 };
	struct proto_dec d;
	int cnt;

	(void)state;
	assert_int_equal(proto_pages_iov_max(N), 2 * N + 1);
	for (int i = 0; i < N; i++) {
		gfns[i] = (uint64_t)i * 3;
		ptrs[i] = pages[i];
		if (i % 3 == 0)
			memset(pages[i], 0, PROTO_PAGE_BYTES);
		else if (i % 3 == 1)
			fill_random(pages[i], PROTO_PAGE_BYTES);
		else
			memset(pages[i], 'a' + i, PROTO_PAGE_BYTES);
	}
	for (unsigned flags = 0; flags <= PROTO_PAGE_NO_COMPRESS; flags++) {
		struct proto_page_enc *e1 = proto_page_enc_new(1, flags);
		struct proto_page_enc *e2 = proto_page_enc_new(1, flags);
		struct proto_page_stats s1 = { 0 }, s2 = { 0 };

		proto_buf_init(&a);
		proto_buf_init(&b);
		proto_buf_init(&flat);
		assert_int_equal(proto_pages_encode(e1, gfns, ptrs, N, &a, &s1), 0);
		assert_int_equal(proto_pages_encode_iov(e2, gfns, ptrs, N, &b, iov, &cnt, &s2), 0);
		assert_true(cnt >= 1 && cnt <= 2 * N + 1);
		for (int i = 0; i < cnt; i++)
			assert_int_equal(proto_buf_append(&flat, iov[i].iov_base, iov[i].iov_len), 0);
		assert_int_equal(flat.len, a.len);
		assert_memory_equal(flat.data, a.data, a.len);
		assert_int_equal(s1.bytes_out, s2.bytes_out);
		assert_int_equal(s1.nraw, s2.nraw);
		/* Read in place: header and a few bytes fed, the rest lands in rbuf. */
		proto_dec_init(&d, 0);
		assert_null(proto_dec_rbuf(&d, 1, &(size_t){ 0 }));
		assert_int_equal(proto_dec_feed(&d, flat.data, 100, collect_frame, &c), 0);
		{
			size_t len = 0;
			uint8_t *dst = proto_dec_rbuf(&d, 1, &len);

			assert_non_null(dst);
			assert_int_equal(len, flat.len - 100);
			assert_null(proto_dec_rbuf(&d, len + 1, &(size_t){ 0 }));
			memcpy(dst, flat.data + 100, len);
			assert_int_equal(proto_dec_feed(&d, dst, len, collect_frame, &c), 0);
		}
		assert_int_equal(c.n, 1);
		assert_int_equal(c.payloads[0].len, a.len - PROTO_HDR_BYTES);
		assert_memory_equal(c.payloads[0].data, a.data + PROTO_HDR_BYTES, c.payloads[0].len);
		assert_false(proto_dec_partial(&d));
		proto_dec_fini(&d);
		collect_free(&c);
		proto_buf_fini(&a);
		proto_buf_fini(&b);
		proto_buf_fini(&flat);
		proto_page_enc_free(e1);
		proto_page_enc_free(e2);
	}
}

/* ---- partial frames: a stream cut anywhere -------------------------------- */

/* Three frames of different types and sizes, back to back. */
static void build_stream(struct proto_buf *out, size_t *ends)
{
	uint8_t payload[700];

	fill_random(payload, sizeof(payload));
	proto_buf_init(out);
	assert_int_equal(proto_frame_append(out, PROTO_T_SECTION, payload, sizeof(payload)), 0);
	ends[0] = out->len;
	assert_int_equal(proto_frame_append(out, PROTO_T_ACK, NULL, 0), 0);
	ends[1] = out->len;
	assert_int_equal(proto_frame_append(out, PROTO_T_PAGES, payload + 7, 93), 0);
	ends[2] = out->len;
}

/* The frames of c are exactly the first n frames of the stream. */
static void expect_frames(const struct collect *c, const struct proto_buf *s, const size_t *ends,
			  int n)
{
	size_t start = 0;

	assert_int_equal(c->n, n);
	for (int i = 0; i < n; i++) {
		assert_int_equal(c->payloads[i].len, ends[i] - start - PROTO_HDR_BYTES);
		assert_memory_equal(c->payloads[i].data, s->data + start + PROTO_HDR_BYTES,
				    c->payloads[i].len);
		start = ends[i];
	}
}

static void test_frame_split_everywhere(void **state)
{
	struct proto_buf s;
	size_t ends[3];

	(void)state;
	build_stream(&s, ends);
	/* Split in two at every offset (in place or copied): every frame, whole. */
	for (size_t cut = 0; cut <= s.len; cut++) {
		for (int in_place = 0; in_place < 2; in_place++) {
			struct collect c = { 0 };
			struct proto_dec d;
			size_t want = 0;
			uint8_t *dst;

			proto_dec_init(&d, 0);
			assert_int_equal(proto_dec_feed(&d, s.data, cut, collect_frame, &c), 0);
			dst = in_place ? proto_dec_rbuf(&d, 1, &want) : NULL;
			if (!dst || want > s.len - cut)
				want = 0;
			if (want) {
				memcpy(dst, s.data + cut, want);
				assert_int_equal(proto_dec_feed(&d, dst, want, collect_frame, &c), 0);
			}
			assert_int_equal(proto_dec_feed(&d, s.data + cut + want, s.len - cut - want,
							collect_frame, &c), 0);
			expect_frames(&c, &s, ends, 3);
			assert_false(proto_dec_partial(&d));
			proto_dec_fini(&d);
			collect_free(&c);
		}
	}
	/* Truncated at every offset, fed one byte at a time: the whole frames
	 * before the cut and nothing of the one it cuts. */
	for (size_t cut = 0; cut <= s.len; cut++) {
		struct collect c = { 0 };
		struct proto_dec d;
		int whole = 0;

		while (whole < 3 && ends[whole] <= cut)
			whole++;
		proto_dec_init(&d, 0);
		for (size_t i = 0; i < cut; i++)
			assert_int_equal(proto_dec_feed(&d, s.data + i, 1, collect_frame, &c), 0);
		expect_frames(&c, &s, ends, whole);
		assert_int_equal(proto_dec_partial(&d), cut != 0 && cut != ends[whole ? whole - 1 : 0]);
		proto_dec_fini(&d);
		collect_free(&c);
	}
	proto_buf_fini(&s);
}

/* ---- machine state sections ------------------------------------------------ */

static struct kvm_vcpu_state *random_vcpu(void)
{
	struct kvm_vcpu_state *v = calloc(1, sizeof(*v));

	assert_non_null(v);
	fill_random(v, sizeof(*v)); /* padding too: not on the wire, so no harm */
	v->xcrs.nr_xcrs = 1 + (uint32_t)(rnd() % KVM_MAX_XCRS);
	v->nmsrs = (uint32_t)(rnd() % (KVM_MAX_MSRS + 1));
	v->xsave_size = 512 + (uint32_t)(rnd() % (KVM_XSAVE_MAX - 511));
	return v;
}

static void test_state_vcpu(void **state)
{
	struct kvm_vcpu_state *v = random_vcpu(), *w = malloc(sizeof(*w));
	size_t n = proto_vcpu_state_size(v);
	uint8_t *a = malloc(n + 1), *b = malloc(n);

	(void)state;
	assert_non_null(w);
	assert_int_equal(proto_vcpu_state_encode(v, a), n);
	/* Fixed places, little-endian: rax first, rip at 128, cs.base at 144,
	 * mp_state at 473, the xsave size at 533, the LAPIC page at 537. */
	assert_int_equal(a[0], v->regs.rax & 0xff);
	assert_int_equal(a[7], v->regs.rax >> 56);
	assert_int_equal(a[128], v->regs.rip & 0xff);
	assert_int_equal(a[144], v->sregs.cs.base & 0xff);
	assert_int_equal(a[473], v->mp_state.mp_state & 0xff);
	assert_int_equal(a[533] | a[534] << 8, v->xsave_size);
	assert_memory_equal(a + 537, v->lapic.regs, KVM_APIC_REG_SIZE);
	/* Decoded and re-encoded: the same bytes, the same registers. */
	assert_int_equal(proto_vcpu_state_decode(a, n, w), 0);
	assert_int_equal(proto_vcpu_state_encode(w, b), n);
	assert_memory_equal(a, b, n);
	assert_memory_equal(&w->regs, &v->regs, sizeof(v->regs));
	assert_memory_equal(w->xsave, v->xsave, v->xsave_size);
	/* Every other length is refused, and so are impossible counts. */
	for (size_t len = 0; len <= n + 1; len += len < 600 ? 1 : 97)
		if (len != n)
			assert_int_equal(proto_vcpu_state_decode(a, len, w), -EBADMSG);
	/* nxcrs, nmsrs and the xsave size beyond their limits */
	for (size_t i = 0; i < 3; i++) {
		const size_t at[3] = { 525, 529, 533 };    /* u32 LE each */
		const uint32_t bad[3] = { KVM_MAX_XCRS + 1, KVM_MAX_MSRS + 1, 0x800000 };

		for (int k = 0; k < 4; k++)
			a[at[i] + k] = (uint8_t)(bad[i] >> (8 * k));
		assert_int_equal(proto_vcpu_state_decode(a, n, w), -EBADMSG);
		memcpy(a + at[i], b + at[i], 4);
	}
	free(a);
	free(b);
	free(v);
	free(w);
}

static void test_state_vm_uart(void **state)
{
	struct kvm_vm_state vm, vm2;
	struct uart_state u, u2;
	uint8_t a[PROTO_UART_STATE_BYTES], b[PROTO_UART_STATE_BYTES];

	(void)state;
	fill_random(&vm, sizeof(vm));
	assert_int_equal(proto_vm_state_encode(&vm, a), PROTO_VM_STATE_BYTES);
	assert_int_equal(proto_vm_state_decode(a, PROTO_VM_STATE_BYTES, &vm2), 0);
	assert_int_equal(vm2.ioapic.chip_id, KVM_IRQCHIP_IOAPIC);
	assert_memory_equal(&vm2.pit.channels, &vm.pit.channels, sizeof(vm.pit.channels));
	assert_int_equal(vm2.clock.clock, vm.clock.clock);
	assert_int_equal(proto_vm_state_encode(&vm2, b), PROTO_VM_STATE_BYTES);
	assert_memory_equal(a, b, PROTO_VM_STATE_BYTES);
	assert_int_equal(proto_vm_state_decode(a, PROTO_VM_STATE_BYTES - 1, &vm2), -EBADMSG);

	fill_random(&u, sizeof(u));
	u.rx_head = UART_RX_SIZE - 1;
	u.rx_count = UART_RX_SIZE;
	u.irq_level = 1;
	assert_int_equal(proto_uart_state_encode(&u, a), PROTO_UART_STATE_BYTES);
	assert_int_equal(proto_uart_state_decode(a, sizeof(a), &u2), 0);
	assert_int_equal(u2.rx_head, u.rx_head);
	assert_memory_equal(u2.rx, u.rx, UART_RX_SIZE);
	assert_int_equal(proto_uart_state_decode(a, sizeof(a) - 1, &u2), -EBADMSG);
	a[10] = 2;                   /* irq_level */
	assert_int_equal(proto_uart_state_decode(a, sizeof(a), &u2), -EBADMSG);
	a[10] = 1;
	a[13] = 0x10;                /* rx_head beyond the FIFO */
	assert_int_equal(proto_uart_state_decode(a, sizeof(a), &u2), -EBADMSG);
}

/* A blob of two sections: any flipped bit and any truncation is refused. */
static void test_state_blob(void **state)
{
	struct proto_state_hdr h = { .digest = rnd(), .nsections = 2, .ncpus = 1 };
	size_t len = PROTO_STATE_HDR_BYTES + proto_section_bytes(5) + proto_section_bytes(16);
	uint8_t *blob = calloc(1, len);
	struct proto_section s;
	size_t off;

	(void)state;
	memcpy(blob + PROTO_STATE_HDR_BYTES + PROTO_SECTION_HDR_BYTES, "hello", 5);
	proto_section_seal(blob + PROTO_STATE_HDR_BYTES, "a", 7, 0, 5);
	off = PROTO_STATE_HDR_BYTES + proto_section_bytes(5);
	fill_random(blob + off + PROTO_SECTION_HDR_BYTES, 16);
	proto_section_seal(blob + off, "bb", 1, 3, 16);
	h.total_len = len;
	proto_state_hdr_encode(blob, &h);

	memset(&h, 0, sizeof(h));
	assert_int_equal(proto_state_hdr_decode(blob, len, &h), 0);
	assert_int_equal(h.nsections, 2);
	off = PROTO_STATE_HDR_BYTES;
	assert_int_equal(proto_section_next(blob, len, &off, &s), 0);
	assert_string_equal(s.name, "a");
	assert_int_equal(s.version, 7);
	assert_int_equal(s.len, 5);
	assert_memory_equal(s.data, "hello", 5);
	assert_int_equal(proto_section_next(blob, len, &off, &s), 0);
	assert_int_equal(s.instance, 3);
	assert_int_equal(off, len);
	assert_int_equal(proto_section_next(blob, len, &off, &s), -EBADMSG);
	for (size_t i = 0; i < len * 8; i++) {
		int r;

		blob[i / 8] ^= (uint8_t)(1u << (i % 8));
		off = PROTO_STATE_HDR_BYTES;
		r = proto_state_hdr_decode(blob, len, &h);
		if (!r && !(r = proto_section_next(blob, len, &off, &s)))
			r = proto_section_next(blob, len, &off, &s);
		if (r >= 0)
			fail_msg("bit %zu of the blob flipped and accepted", i);
		blob[i / 8] ^= (uint8_t)(1u << (i % 8));
	}
	for (size_t cut = 0; cut < len; cut++) {
		assert_int_not_equal(proto_state_hdr_decode(blob, cut, &h), 0);
		if (cut < PROTO_STATE_HDR_BYTES + proto_section_bytes(5))
			assert_int_equal(proto_section_next(blob, cut, &(size_t){ PROTO_STATE_HDR_BYTES },
							    &s), -EBADMSG);
	}
	free(blob);
}

/* kmod/le.h: the byte order of each width, at an odd address, and back. */
static void test_le_helpers(void **state)
{
	uint8_t b[1 + 8];
	static const uint8_t want64[8] = { 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11 };

	(void)state;
	le_put16(b + 1, 0x1122);
	assert_int_equal(b[1], 0x22);
	assert_int_equal(b[2], 0x11);
	assert_int_equal(le_get16(b + 1), 0x1122);
	le_put32(b + 1, 0x11223344u);
	assert_memory_equal(b + 1, want64 + 4, 4);
	assert_int_equal(le_get32(b + 1), 0x11223344u);
	le_put64(b + 1, 0x1122334455667788ull);
	assert_memory_equal(b + 1, want64, 8);
	assert_true(le_get64(b + 1) == 0x1122334455667788ull);
	le_put64(b + 1, ~0ull);
	assert_true(le_get64(b + 1) == ~0ull);
	assert_int_equal(le_get32(b + 1), 0xffffffffu);
}

/* proto/messages.c: a configuration and the drill's messages survive the
 * trip; out-of-range ones and short buffers are refused. */
static void test_section_messages(void **state)
{
	struct machine_config cfg = { .mem_bytes = 64ull << 20, .ncpus = 2, .guest = "counter",
				      .guest_args = "n=3", .ndisks = 1, .disk_bytes = 1 << 20 }, back;
	Understudy__DrillReport rep = UNDERSTUDY__DRILL_REPORT__INIT, rep_back;
	uint8_t buf[512];
	uint64_t id;
	int n;

	(void)state;
	n = proto_config_encode(&cfg, buf, sizeof(buf));
	assert_true(n > 0);
	assert_int_equal(proto_config_decode(buf, (size_t)n, &back), 0);
	assert_true(back.mem_bytes == cfg.mem_bytes);
	assert_int_equal(back.ncpus, 2);
	assert_string_equal(back.guest, "counter");
	assert_string_equal(back.guest_args, "n=3");
	assert_true(back.disk_bytes == 1 << 20 && back.ndisks == 1);
	assert_int_equal(proto_config_encode(&cfg, buf, 4), -ENOSPC);
	assert_string_equal(back.kernel, "");
	cfg.ncpus = KVM_MAX_VCPUS + 1;
	n = proto_config_encode(&cfg, buf, sizeof(buf));
	assert_int_equal(proto_config_decode(buf, (size_t)n, &back), -EBADMSG);

	/* A Linux guest's files travel (a standby boots its reboot from them);
	 * a kernel for a built-in guest, or an initrd without kernel, does not. */
	{
		struct machine_config lc = { .mem_bytes = 256ull << 20, .ncpus = 1,
					     .guest = MACHINE_LINUX_GUEST, .kernel = "/boot/vmlinuz",
					     .initrd = "/tmp/i.cpio", .append = "console=ttyS0" }, lb;
		uint8_t big[PROTO_CONFIG_MAX_BYTES];

		memset(lc.append, 'a', sizeof(lc.append) - 1);
		memset(lc.kernel, 'k', sizeof(lc.kernel) - 1);
		memset(lc.initrd, 'i', sizeof(lc.initrd) - 1);
		n = proto_config_encode(&lc, big, sizeof(big));
		assert_true(n > 0);
		assert_int_equal(proto_config_decode(big, (size_t)n, &lb), 0);
		assert_memory_equal(lb.kernel, lc.kernel, sizeof(lc.kernel));
		assert_memory_equal(lb.initrd, lc.initrd, sizeof(lc.initrd));
		assert_memory_equal(lb.append, lc.append, sizeof(lc.append));
		snprintf(lc.guest, sizeof(lc.guest), "counter");
		n = proto_config_encode(&lc, big, sizeof(big));
		assert_int_equal(proto_config_decode(big, (size_t)n, &lb), -EBADMSG);
		snprintf(lc.guest, sizeof(lc.guest), MACHINE_LINUX_GUEST);
		lc.kernel[0] = 0;
		n = proto_config_encode(&lc, big, sizeof(big));
		assert_int_equal(proto_config_decode(big, (size_t)n, &lb), -EBADMSG);
	}

	n = proto_drill_request_encode(0x1234567890ull, buf, sizeof(buf));
	assert_true(n > 0);
	assert_int_equal(proto_drill_request_decode(buf, (size_t)n, &id), 0);
	assert_true(id == 0x1234567890ull);
	n = proto_drill_request_encode(0, buf, sizeof(buf));
	assert_int_equal(proto_drill_request_decode(buf, (size_t)n, &id), -EBADMSG);

	rep.id = 7;
	rep.mem_crc32c = 0xdeadbeef;
	n = proto_drill_report_encode(&rep, buf, sizeof(buf));
	assert_true(n > 0);
	assert_int_equal(proto_drill_report_decode(buf, (size_t)n, &rep_back), 0);
	assert_true(rep_back.mem_crc32c == 0xdeadbeef);
	assert_int_equal(proto_drill_report_encode(&rep, buf, 1), -ENOSPC);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crc32c),
		cmocka_unit_test(test_le_helpers),
		cmocka_unit_test(test_section_messages),
		cmocka_unit_test(test_msg_roundtrip),
		cmocka_unit_test(test_hello_name_compat),
		cmocka_unit_test(test_frame_errors),
		cmocka_unit_test(test_pages_roundtrip),
		cmocka_unit_test(test_pages_malformed),
		cmocka_unit_test(test_pages_scatter_and_read_in_place),
		cmocka_unit_test(test_pages_cache_off),
		cmocka_unit_test(test_pages_resent_in_epoch),
		cmocka_unit_test(test_frame_split_everywhere),
		cmocka_unit_test(test_state_vcpu),
		cmocka_unit_test(test_state_vm_uart),
		cmocka_unit_test(test_state_blob),
	};

	return cmocka_run_group_tests(tests, setup_seed, NULL);
}
