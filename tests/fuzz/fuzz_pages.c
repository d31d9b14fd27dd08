/* Fuzz target: the page batch decoder on a raw payload (no frame header),
 * with a receiver memory of 64 pages. Checks every delivered page is within
 * max_gfn. Accepted: proto_pages_decode() returned 0. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "tests/fuzz/fuzz.h"

#define NPAGES 64

struct mem {
	uint8_t pages[NPAGES][PROTO_PAGE_BYTES];
};

static const void *mem_base(void *ctx, uint64_t gfn)
{
	struct mem *m = ctx;

	return gfn % 2 ? m->pages[gfn] : NULL; /* even gfns: "no base copy" */
}

static int mem_page(void *ctx, uint64_t gfn, const void *page)
{
	struct mem *m = ctx;

	if (gfn >= NPAGES)
		abort();
	memcpy(m->pages[gfn], page, PROTO_PAGE_BYTES);
	return 0;
}

int fuzz_verdict(const uint8_t *data, size_t size)
{
	static const struct proto_page_sink sink = { mem_base, mem_page };
	struct mem *m = calloc(1, sizeof(*m));
	size_t n;
	int r;

	if (!m)
		return -ENOMEM;
	r = proto_pages_decode(data, size, NPAGES, &sink, m, &n);
	free(m);
	return r;
}

FUZZ_LIBFUZZER_ENTRY
