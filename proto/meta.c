/* Replication metadata on the wire: what replication sends outside protobuf
 * fields (a few integers, the "verify" digest), each with its own
 * little-endian encoder and a decoder that checks the length before reading. */
#include "proto/proto.h"

#include <errno.h>
#include <string.h>

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

/* ---- the "verify" section ---------------------------------------------------- */

static uint8_t *put32(uint8_t *p, uint32_t v)
{
	put_le(p, v, PROTO_META_U32_BYTES);
	return p + PROTO_META_U32_BYTES;
}

static uint8_t *put64(uint8_t *p, uint64_t v)
{
	put_le(p, v, PROTO_META_U64_BYTES);
	return p + PROTO_META_U64_BYTES;
}

/* Callers have checked that the bytes are there. */
static const uint8_t *get32(const uint8_t *p, uint32_t *v)
{
	*v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	return p + 4;
}

static const uint8_t *get64(const uint8_t *p, uint64_t *v)
{
	uint32_t lo, hi;

	p = get32(get32(p, &lo), &hi);
	*v = (uint64_t)hi << 32 | lo;
	return p;
}

/* version, ncpus, mem, vm parts, clock, then per vCPU: parts, tsc */
#define VERIFY_VCPU_BYTES (PROTO_VERIFY_VCPU_PARTS * 4 + 8)
#define VERIFY_HEAD_BYTES (12 + PROTO_VERIFY_VM_PARTS * 4 + 8)
_Static_assert(VERIFY_HEAD_BYTES + KVM_MAX_VCPUS * VERIFY_VCPU_BYTES == PROTO_VERIFY_MAX_BYTES,
	       "PROTO_VERIFY_MAX_BYTES in proto.h follows the layout here");

size_t proto_verify_encode(const struct proto_verify *d, uint8_t *out, size_t len)
{
	size_t need = VERIFY_HEAD_BYTES + d->ncpus * VERIFY_VCPU_BYTES;
	uint8_t *p = out;

	if (d->ncpus > KVM_MAX_VCPUS || len < need)
		return 0;
	p = put32(p, PROTO_VERIFY_VERSION);
	p = put32(p, d->ncpus);
	p = put32(p, d->mem);
	for (int k = 0; k < PROTO_VERIFY_VM_PARTS; k++)
		p = put32(p, d->vm[k]);
	p = put64(p, d->clock_ns);
	for (uint32_t i = 0; i < d->ncpus; i++) {
		for (int k = 0; k < PROTO_VERIFY_VCPU_PARTS; k++)
			p = put32(p, d->vcpu[i].part[k]);
		p = put64(p, d->vcpu[i].tsc);
	}
	return need;
}

int proto_verify_decode(const void *data, size_t len, struct proto_verify *d)
{
	const uint8_t *p = data;
	uint32_t version;

	memset(d, 0, sizeof(*d));
	if (len < VERIFY_HEAD_BYTES)
		return -EBADMSG;
	p = get32(p, &version);
	p = get32(p, &d->ncpus);
	if (version != PROTO_VERIFY_VERSION || d->ncpus < 1 || d->ncpus > KVM_MAX_VCPUS ||
	    len != VERIFY_HEAD_BYTES + d->ncpus * VERIFY_VCPU_BYTES)
		return -EBADMSG;
	p = get32(p, &d->mem);
	for (int k = 0; k < PROTO_VERIFY_VM_PARTS; k++)
		p = get32(p, &d->vm[k]);
	p = get64(p, &d->clock_ns);
	for (uint32_t i = 0; i < d->ncpus; i++) {
		for (int k = 0; k < PROTO_VERIFY_VCPU_PARTS; k++)
			p = get32(p, &d->vcpu[i].part[k]);
		p = get64(p, &d->vcpu[i].tsc);
	}
	return 0;
}

/* ---- page digest, configuration digest --------------------------------------- */

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
