/* Fuzz target: the incremental frame decoder, fed the input in chunks whose
 * sizes come from the input's first byte (in place or copied), then every delivered message
 * frame through protobuf unpack and every PAGES frame through the page decoder. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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

static int on_frame(void *ctx, const struct proto_frame *f)
{
	static const struct proto_page_sink sink = { zero_base, check_page };
	ProtobufCMessage *m;
	int r;

	(void)ctx;
	if (f->type == PROTO_T_PAGES) {
		r = proto_pages_decode(f->payload, f->len, 1024, &sink, NULL, NULL);
		(void)r;
	} else if (proto_msg_unpack(f->type, f->payload, f->len, &m) == 0) {
		proto_msg_free(m);
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct proto_dec d;
	size_t chunk, off = 1, want;
	bool in_place;
	uint8_t *dst;

	if (size < 1)
		return 0;
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
		if (proto_dec_feed(&d, src, n, on_frame, NULL))
			break;
		off += n;
	}
	proto_dec_fini(&d);
	return 0;
}
