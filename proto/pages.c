/* Page batches: per-page encoding (zero, raw, lz4, xor-delta + lz4) and the
 * checked decoder. Layout in proto/proto.h. */
#include "proto/proto_int.h"

#include <errno.h>
#include <lz4.h>
#include <stdlib.h>
#include <string.h>

#define TAG "proto"
#define ENTRY_BYTES 13 /* u64 gfn, u8 encoding, u32 length */
#define BATCH_HDR_BYTES 8
/* Largest compressed entry accepted: the encoder only uses lz4 when it saves
 * at least a byte, so anything larger is malformed. */
#define LZ4_MAX_BYTES (PROTO_PAGE_BYTES - 1)
#define NO_TAG UINT64_MAX

struct proto_page_enc {
	unsigned flags;
	size_t nslots;        /* 0: no cache, no xor */
	uint64_t *tags;       /* gfn held by each slot, NO_TAG if empty */
	uint8_t *cache;       /* nslots pages */
	bool caching;         /* pages sent now are kept for XOR (proto_page_enc_cache) */
	void *lz4_state;
	uint8_t delta[PROTO_PAGE_BYTES];
};

static const uint8_t zero_page[PROTO_PAGE_BYTES];

static bool page_is_zero(const void *page)
{
	const uint64_t *w = page;
	uint64_t acc = 0;

	for (size_t i = 0; i < PROTO_PAGE_BYTES / 8; i += 8) {
		acc = w[i] | w[i + 1] | w[i + 2] | w[i + 3] | w[i + 4] | w[i + 5] | w[i + 6] | w[i + 7];
		if (acc)
			return false;
	}
	return true;
}

static void page_xor(uint8_t *dst, const uint8_t *a, const uint8_t *b)
{
	uint64_t x, y;

	for (size_t i = 0; i < PROTO_PAGE_BYTES; i += 8) {
		memcpy(&x, a + i, 8);
		memcpy(&y, b + i, 8);
		x ^= y;
		memcpy(dst + i, &x, 8);
	}
}

struct proto_page_enc *proto_page_enc_new(size_t cache_mb, unsigned flags)
{
	struct proto_page_enc *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	e->flags = flags;
	e->caching = true;
	if (flags & PROTO_PAGE_NO_COMPRESS)
		return e;
	e->lz4_state = malloc((size_t)LZ4_sizeofState());
	if (!e->lz4_state)
		goto err_enc;
	e->nslots = cache_mb * (1024 * 1024 / PROTO_PAGE_BYTES);
	if (e->nslots) {
		e->tags = malloc(e->nslots * sizeof(*e->tags));
		e->cache = malloc(e->nslots * PROTO_PAGE_BYTES);
		if (!e->tags || !e->cache)
			goto err_cache;
	}
	proto_page_enc_reset(e);
	return e;

err_cache:
	free(e->cache);
	free(e->tags);
	free(e->lz4_state);
err_enc:
	free(e);
	return NULL;
}

void proto_page_enc_free(struct proto_page_enc *e)
{
	if (!e)
		return;
	free(e->cache);
	free(e->tags);
	free(e->lz4_state);
	free(e);
}

void proto_page_enc_cache(struct proto_page_enc *e, bool on)
{
	e->caching = on;
}

void proto_page_enc_reset(struct proto_page_enc *e)
{
	for (size_t i = 0; i < e->nslots; i++)
		e->tags[i] = NO_TAG;
}

void proto_page_enc_forget(struct proto_page_enc *e, uint64_t gfn)
{
	if (e->nslots && e->tags[gfn % e->nslots] == gfn)
		e->tags[gfn % e->nslots] = NO_TAG;
}

/* Encodes one page at dst (room for ENTRY_BYTES + 4096); returns bytes used. */
static size_t encode_page(struct proto_page_enc *e, uint64_t gfn, const uint8_t *page,
			  uint8_t *dst, struct proto_page_stats *st)
{
	uint8_t *data = dst + ENTRY_BYTES;
	uint8_t *slot = NULL;
	uint8_t enc;
	int n = 0;

	if (e->nslots && !e->caching) {
		size_t i = gfn % e->nslots;

		if (e->tags[i] == gfn)   /* the receiver gets another copy now */
			e->tags[i] = NO_TAG;
	} else if (e->nslots) {
		size_t i = gfn % e->nslots;

		slot = e->cache + i * PROTO_PAGE_BYTES;
		if (e->tags[i] != gfn) {
			e->tags[i] = gfn;
		} else if (!page_is_zero(page)) {
			page_xor(e->delta, page, slot);
			n = LZ4_compress_fast_extState(e->lz4_state, (const char *)e->delta,
						       (char *)data, PROTO_PAGE_BYTES,
						       LZ4_MAX_BYTES, 1);
		}
	}
	if (n > 0) {
		enc = PROTO_PAGE_XOR;
		st->nxor++;
	} else if (page_is_zero(page)) {
		enc = PROTO_PAGE_ZERO;
		st->nzero++;
	} else {
		if (!(e->flags & PROTO_PAGE_NO_COMPRESS))
			n = LZ4_compress_fast_extState(e->lz4_state, (const char *)page,
						       (char *)data, PROTO_PAGE_BYTES,
						       LZ4_MAX_BYTES, 1);
		if (n > 0) {
			enc = PROTO_PAGE_LZ4;
			st->nlz4++;
		} else {
			enc = PROTO_PAGE_RAW;
			n = PROTO_PAGE_BYTES;
			memcpy(data, page, PROTO_PAGE_BYTES);
			st->nraw++;
		}
	}
	/* The cache must hold exactly what the receiver now has for gfn. */
	if (slot)
		memcpy(slot, page, PROTO_PAGE_BYTES);
	st->enc_bytes[enc] += ENTRY_BYTES + (size_t)n;
	le_put64(dst, gfn);
	dst[8] = enc;
	le_put32(dst + 9, (uint32_t)n);
	return ENTRY_BYTES + (size_t)n;
}

static void stats_add(struct proto_page_stats *st, const struct proto_page_stats *local, size_t n,
		      size_t bytes_out)
{
	if (!st)
		return;
	st->npages += n;
	st->nzero += local->nzero;
	st->nraw += local->nraw;
	st->nlz4 += local->nlz4;
	st->nxor += local->nxor;
	st->bytes_in += n * PROTO_PAGE_BYTES;
	st->bytes_out += bytes_out;
	for (int i = 0; i < 4; i++)
		st->enc_bytes[i] += local->enc_bytes[i];
}

/* A decoded entry of elen bytes, for the receiver's metrics. */
static void count_decoded(struct proto_page_stats *st, uint8_t enc, uint32_t elen)
{
	if (!st)
		return;
	st->npages++;
	st->nzero += enc == PROTO_PAGE_ZERO;
	st->nraw += enc == PROTO_PAGE_RAW;
	st->nlz4 += enc == PROTO_PAGE_LZ4;
	st->nxor += enc == PROTO_PAGE_XOR;
	st->enc_bytes[enc & 3] += ENTRY_BYTES + (uint64_t)elen;
	st->bytes_in += PROTO_PAGE_BYTES;
	st->bytes_out += ENTRY_BYTES + (uint64_t)elen;
}

/* Reserves the worst case (so out->data does not move while encoding),
 * begins the frame and writes the batch header. */
static int batch_begin(struct proto_buf *out, size_t n, size_t *hdr_off)
{
	uint8_t *p;
	int r;

	if (n > PROTO_PAGES_MAX_COUNT)
		return -E2BIG;
	r = proto_buf_reserve(out, PROTO_HDR_BYTES + BATCH_HDR_BYTES +
				   n * (ENTRY_BYTES + PROTO_PAGE_BYTES));
	if (r)
		return r;
	r = proto_frame_begin(out, PROTO_T_PAGES, hdr_off);
	if (r)
		return r;
	p = out->data + out->len;
	le_put32(p, (uint32_t)n);
	le_put32(p + 4, 0);
	out->len += BATCH_HDR_BYTES;
	return 0;
}

int proto_pages_encode(struct proto_page_enc *e, const uint64_t *gfns, const void *const *pages,
		       size_t n, struct proto_buf *out, struct proto_page_stats *st)
{
	struct proto_page_stats local = { 0 };
	size_t off, start = out->len;
	int r;

	r = batch_begin(out, n, &off);
	if (r)
		return r;
	for (size_t i = 0; i < n; i++)
		out->len += encode_page(e, gfns[i], pages[i], out->data + out->len, &local);
	r = proto_frame_end(out, off);
	if (r)
		return r;
	stats_add(st, &local, n, out->len - start);
	return 0;
}

/* A disk batch: the payload of a page batch, without a frame around it. */
int proto_blocks_encode(struct proto_page_enc *e, const uint64_t *blocks, const void *const *data,
			size_t n, struct proto_buf *out, struct proto_page_stats *st)
{
	struct proto_page_stats local = { 0 };
	size_t start = out->len;
	int r;

	if (n > PROTO_PAGES_MAX_COUNT)
		return -E2BIG;
	r = proto_buf_reserve(out, BATCH_HDR_BYTES + n * (ENTRY_BYTES + PROTO_PAGE_BYTES));
	if (r)
		return r;
	le_put32(out->data + out->len, (uint32_t)n);
	le_put32(out->data + out->len + 4, 0);
	out->len += BATCH_HDR_BYTES;
	for (size_t i = 0; i < n; i++)
		out->len += encode_page(e, blocks[i], data[i], out->data + out->len, &local);
	stats_add(st, &local, n, out->len - start);
	return 0;
}

size_t proto_pages_iov_max(size_t n)
{
	return 2 * n + 1;
}

int proto_pages_encode_iov(struct proto_page_enc *e, const uint64_t *gfns,
			   const void *const *pages, size_t n, struct proto_buf *out,
			   struct iovec *iov, int *iovcnt, struct proto_page_stats *st)
{
	struct proto_page_stats local = { 0 };
	size_t off, piece, total;
	uint32_t crc = 0;
	int cnt = 0, r;

	r = batch_begin(out, n, &off);
	if (r)
		return r;
	piece = off; /* first piece: frame header + batch header + entries so far */
	for (size_t i = 0; i < n; i++) {
		uint8_t *dst = out->data + out->len;
		size_t used = encode_page(e, gfns[i], pages[i], dst, &local);

		if (dst[8] != PROTO_PAGE_RAW) {
			out->len += used;
			continue;
		}
		/* Keep the entry header, send the data from the caller's page. */
		out->len += ENTRY_BYTES;
		iov[cnt++] = (struct iovec){ out->data + piece, out->len - piece };
		iov[cnt++] = (struct iovec){ (void *)pages[i], PROTO_PAGE_BYTES };
		piece = out->len;
	}
	if (out->len > piece || !cnt)
		iov[cnt++] = (struct iovec){ out->data + piece, out->len - piece };
	/* The payload starts after the frame header in the first piece. */
	total = 0;
	for (int i = 0; i < cnt; i++) {
		const uint8_t *b = iov[i].iov_base;
		size_t skip = i ? 0 : PROTO_HDR_BYTES;

		crc = proto_crc32c(crc, b + skip, iov[i].iov_len - skip);
		total += iov[i].iov_len - skip;
	}
	if (total > UINT32_MAX)
		return -EMSGSIZE;
	proto_frame_header(out->data + off, PROTO_T_PAGES, NULL, 0);
	le_put32(out->data + off + 8, (uint32_t)total);
	le_put32(out->data + off + 12, crc);
	*iovcnt = cnt;
	stats_add(st, &local, n, PROTO_HDR_BYTES + total);
	return 0;
}

/* First pass: the whole batch's structure, before any page is delivered. */
static int check_batch(const uint8_t *p, size_t len, uint64_t max_gfn, uint32_t *count)
{
	size_t off = BATCH_HDR_BYTES;
	uint32_t n, elen;
	uint64_t gfn;

	if (len < BATCH_HDR_BYTES) {
		log_error(TAG, "page batch of %zu bytes: truncated header", len);
		return -EBADMSG;
	}
	n = le_get32(p);
	if (n > PROTO_PAGES_MAX_COUNT || le_get32(p + 4) != 0) {
		log_error(TAG, "page batch: count %u or flags 0x%x invalid", n, le_get32(p + 4));
		return -EBADMSG;
	}
	for (uint32_t i = 0; i < n; i++) {
		if (len - off < ENTRY_BYTES)
			goto err_trunc;
		gfn = le_get64(p + off);
		elen = le_get32(p + off + 9);
		if (gfn >= max_gfn) {
			log_error(TAG, "page batch entry %u: gfn 0x%llx beyond 0x%llx", i,
				  (unsigned long long)gfn, (unsigned long long)max_gfn);
			return -EBADMSG;
		}
		switch (p[off + 8]) {
		case PROTO_PAGE_ZERO:
			if (elen != 0)
				goto err_len;
			break;
		case PROTO_PAGE_RAW:
			if (elen != PROTO_PAGE_BYTES)
				goto err_len;
			break;
		case PROTO_PAGE_LZ4:
		case PROTO_PAGE_XOR:
			if (elen == 0 || elen > LZ4_MAX_BYTES)
				goto err_len;
			break;
		default:
			log_error(TAG, "page batch entry %u: unknown encoding %u", i, p[off + 8]);
			return -EBADMSG;
		}
		off += ENTRY_BYTES;
		if (len - off < elen)
			goto err_trunc;
		off += elen;
		continue;
err_len:
		log_error(TAG, "page batch entry %u: length %u invalid for encoding %u", i, elen,
			  p[off + 8]);
		return -EBADMSG;
	}
	if (off != len) {
		log_error(TAG, "page batch: %zu trailing bytes after %u entries", len - off, n);
		return -EBADMSG;
	}
	*count = n;
	return 0;
err_trunc:
	log_error(TAG, "page batch truncated (%zu bytes, %u entries announced)", len, n);
	return -EBADMSG;
}

static int decompress(const uint8_t *src, uint32_t len, uint8_t *dst, uint64_t gfn)
{
	int n = LZ4_decompress_safe((const char *)src, (char *)dst, (int)len, PROTO_PAGE_BYTES);

	if (n != PROTO_PAGE_BYTES) {
		log_error(TAG, "page gfn 0x%llx: lz4 gave %d bytes, expected %d",
			  (unsigned long long)gfn, n, PROTO_PAGE_BYTES);
		return -EBADMSG;
	}
	return 0;
}

int proto_pages_decode(const void *payload, size_t len, uint64_t max_gfn,
		       const struct proto_page_sink *sink, void *ctx, size_t *npages)
{
	uint8_t tmp[PROTO_PAGE_BYTES], out[PROTO_PAGE_BYTES];
	const uint8_t *p = payload, *data, *base;
	size_t off = BATCH_HDR_BYTES;
	uint32_t n, elen;
	uint64_t gfn;
	int r;

	r = check_batch(p, len, max_gfn, &n);
	if (r)
		return r;
	if (npages)
		*npages = n;
	for (uint32_t i = 0; i < n; i++) {
		gfn = le_get64(p + off);
		elen = le_get32(p + off + 9);
		data = p + off + ENTRY_BYTES;
		switch (p[off + 8]) {
		case PROTO_PAGE_ZERO:
			data = zero_page;
			break;
		case PROTO_PAGE_RAW:
			break;
		case PROTO_PAGE_LZ4:
			r = decompress(data, elen, out, gfn);
			if (r)
				return r;
			data = out;
			break;
		case PROTO_PAGE_XOR:
			base = sink->base(ctx, gfn);
			if (!base) {
				log_error(TAG, "page gfn 0x%llx: xor delta but no base copy",
					  (unsigned long long)gfn);
				return -EBADMSG;
			}
			r = decompress(data, elen, tmp, gfn);
			if (r)
				return r;
			page_xor(out, tmp, base);
			data = out;
			break;
		}
		r = sink->page(ctx, gfn, data);
		if (r)
			return r;
		count_decoded(sink->st, p[off + 8], elen);
		off += ENTRY_BYTES + elen;
	}
	return 0;
}
