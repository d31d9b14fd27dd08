/* Replication metadata on the wire: the few integers replication sends
 * outside protobuf fields, each with its own little-endian encoder and a
 * decoder that checks the length before reading. */
#include "proto/proto.h"

#include <errno.h>

static void put_le(uint8_t *out, uint64_t v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out[i] = (uint8_t)(v >> (8 * i));
}

static int get_le(const void *data, size_t len, size_t n, uint64_t *v)
{
	const uint8_t *b = data;

	if (len != n)
		return -EBADMSG;
	*v = 0;
	for (size_t i = 0; i < n; i++)
		*v |= (uint64_t)b[i] << (8 * i);
	return 0;
}

static int get_le32(const void *data, size_t len, uint32_t *v)
{
	uint64_t x;
	int r = get_le(data, len, PROTO_META_U32_BYTES, &x);

	if (r == 0)
		*v = (uint32_t)x;
	return r;
}

void proto_released_encode(uint64_t released, uint8_t out[PROTO_META_U64_BYTES])
{
	put_le(out, released, PROTO_META_U64_BYTES);
}

int proto_released_decode(const void *data, size_t len, uint64_t *released)
{
	return get_le(data, len, PROTO_META_U64_BYTES, released);
}

void proto_verify_encode(uint32_t crc, uint8_t out[PROTO_META_U32_BYTES])
{
	put_le(out, crc, PROTO_META_U32_BYTES);
}

int proto_verify_decode(const void *data, size_t len, uint32_t *crc)
{
	return get_le32(data, len, crc);
}

uint32_t proto_digest_page(uint32_t crc, uint64_t gfn, const void *page)
{
	uint8_t le[PROTO_META_U64_BYTES];

	put_le(le, gfn, sizeof(le));
	crc = proto_crc32c(crc, le, sizeof(le));
	return proto_crc32c(crc, page, PROTO_PAGE_BYTES);
}

void proto_digest_encode(uint32_t crc, uint8_t out[PROTO_META_U32_BYTES])
{
	put_le(out, crc, PROTO_META_U32_BYTES);
}

int proto_digest_decode(const void *data, size_t len, uint32_t *crc)
{
	return get_le32(data, len, crc);
}

void proto_config_digest_encode(uint64_t digest, uint8_t out[PROTO_META_U64_BYTES])
{
	put_le(out, digest, PROTO_META_U64_BYTES);
}

int proto_config_digest_decode(const void *data, size_t len, uint64_t *digest)
{
	return get_le(data, len, PROTO_META_U64_BYTES, digest);
}
