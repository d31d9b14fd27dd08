/* Replication metadata on the wire: what replication sends outside protobuf
 * fields (a few integers, the "verify" digest), each with its own
 * little-endian encoder and a decoder that checks the length before reading. */
#include "proto/proto.h"

#include <errno.h>
#include <string.h>

/* A field of exactly its size: -EBADMSG for any other length. */
static int get_exact64(const void *data, size_t len, uint64_t *v)
{
	if (len != PROTO_META_U64_BYTES)
		return -EBADMSG;
	*v = le_get64(data);
	return 0;
}

static int get_exact32(const void *data, size_t len, uint32_t *v)
{
	if (len != PROTO_META_U32_BYTES)
		return -EBADMSG;
	*v = le_get32(data);
	return 0;
}

void proto_released_encode(uint64_t released, uint8_t out[PROTO_META_U64_BYTES])
{
	le_put64(out, released);
}

int proto_released_decode(const void *data, size_t len, uint64_t *released)
{
	return get_exact64(data, len, released);
}

/* ---- the "verify" section ---------------------------------------------------- */

/* Cursors over the section; callers have checked that the bytes are there. */
static uint8_t *put32(uint8_t *p, uint32_t v)
{
	le_put32(p, v);
	return p + 4;
}

static uint8_t *put64(uint8_t *p, uint64_t v)
{
	le_put64(p, v);
	return p + 8;
}

static const uint8_t *get32(const uint8_t *p, uint32_t *v)
{
	*v = le_get32(p);
	return p + 4;
}

static const uint8_t *get64(const uint8_t *p, uint64_t *v)
{
	*v = le_get64(p);
	return p + 8;
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

	le_put64(le, gfn);
	crc = proto_crc32c(crc, le, sizeof(le));
	return proto_crc32c(crc, page, PROTO_PAGE_BYTES);
}

void proto_digest_encode(uint32_t crc, uint8_t out[PROTO_META_U32_BYTES])
{
	le_put32(out, crc);
}

int proto_digest_decode(const void *data, size_t len, uint32_t *crc)
{
	return get_exact32(data, len, crc);
}

void proto_config_digest_encode(uint64_t digest, uint8_t out[PROTO_META_U64_BYTES])
{
	le_put64(out, digest);
}
