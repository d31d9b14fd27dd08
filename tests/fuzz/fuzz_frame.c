/* Fuzz target: the incremental frame decoder, fed the input in chunks whose
 * sizes come from the input's first byte (in place or copied), then every delivered message
 * frame through protobuf unpack and every PAGES frame through the page decoder.
 * Accepted: the stream is whole frames only, every message unpacks and every
 * page batch decodes (and the sink took every page). */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "tests/fuzz/fuzz.h"

static const void *zero_base(void *ctx, uint64_t gfn)
{
	static const uint8_t zero[PROTO_PAGE_BYTES];

	(void)ctx;
	(void)gfn;
	return zero;
}

static int check_page(void *ctx, uint64_t gfn, const void *page)
{
	(void)ctx;
	if (gfn >= 1024)
		abort(); /* the decoder let a gfn beyond max_gfn through */
	return ((const uint8_t *)page)[0] == 0xAB && ((const uint8_t *)page)[4095] == 0xCD;
}

/* Keeps decoding after a bad frame (more for the fuzzer to reach); the
 * first error is the verdict. */
static int on_frame(void *ctx, const struct proto_frame *f)
{
	static const struct proto_page_sink sink = { zero_base, check_page };
	int *err = ctx;
	ProtobufCMessage *m;
	int r;

	if (f->type == PROTO_T_PAGES) {
		r = proto_pages_decode(f->payload, f->len, 1024, &sink, NULL, NULL);
	} else if ((r = proto_msg_unpack(f->type, f->payload, f->len, &m)) == 0) {
		proto_msg_free(m);
	}
	if (r && !*err)
		*err = r < 0 ? r : -ECANCELED;
	return 0;
}

int fuzz_verdict(const uint8_t *data, size_t size)
{
	struct proto_dec d;
	size_t chunk, off = 1, want;
	bool in_place;
	uint8_t *dst;
	int err = 0, r = 0;

	if (size < 1)
		return -ENODATA;
	/* Low 7 bits: chunk size; top bit: read payloads in place, as net/
	 * does through proto_dec_rbuf() (what a receiver reads goes straight
	 * into the decoder's buffer, then is fed from there). */
	chunk = 1 + (data[0] & 0x7f);
	in_place = data[0] & 0x80;
	proto_dec_init(&d, 1u << 20);
	while (off < size) {
		size_t n = size - off < chunk ? size - off : chunk;
		const uint8_t *src = data + off;

		dst = in_place ? proto_dec_rbuf(&d, 1, &want) : NULL;
		if (dst) {
			if (n > want)
				n = want;
			memcpy(dst, src, n);
			src = dst;
		}
		if ((r = proto_dec_feed(&d, src, n, on_frame, &err)))
			break;
		off += n;
	}
	if (!r && proto_dec_partial(&d))
		r = -EPIPE;
	proto_dec_fini(&d);
	return r ? r : err;
}

FUZZ_LIBFUZZER_ENTRY
