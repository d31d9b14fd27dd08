/* Fuzz target: the incremental frame decoder, fed the input in chunks whose
 * sizes come from the input's first byte, then every delivered message
 * frame through protobuf unpack and every PAGES frame through the page decoder. */
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
	size_t chunk, off = 1;

	if (size < 1)
		return 0;
	(void)0;
	chunk = 1 + data[0];
	proto_dec_init(&d, 1u << 20);
	while (off < size) {
		size_t n = size - off < chunk ? size - off : chunk;

		if (proto_dec_feed(&d, data + off, n, on_frame, NULL))
			break;
		off += n;
	}
	proto_dec_fini(&d);
	return 0;
}
