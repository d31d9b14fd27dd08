/* Frames: header layout, protobuf-c message helpers, incremental decoder. */
#include "proto/proto_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define TAG "proto"

/* ---- buffer ---------------------------------------------------------------- */

void proto_buf_init(struct proto_buf *b)
{
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
}

void proto_buf_fini(struct proto_buf *b)
{
	free(b->data);
	proto_buf_init(b);
}

int proto_buf_reserve(struct proto_buf *b, size_t extra)
{
	size_t need = b->len + extra, cap;
	uint8_t *p;

	if (need < b->len)
		return -EOVERFLOW;
	if (need <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 4096;
	while (cap < need)
		cap *= 2;
	p = realloc(b->data, cap);
	if (!p)
		return -ENOMEM;
	b->data = p;
	b->cap = cap;
	return 0;
}

int proto_buf_append(struct proto_buf *b, const void *data, size_t len)
{
	int r = proto_buf_reserve(b, len);

	if (r)
		return r;
	if (len)
		memcpy(b->data + b->len, data, len);
	b->len += len;
	return 0;
}

/* ---- types ----------------------------------------------------------------- */

static const ProtobufCMessageDescriptor *const msg_desc[PROTO_T_MSG_LAST + 1] = {
	[PROTO_T_HELLO] = &understudy__hello__descriptor,
	[PROTO_T_EPOCH_BEGIN] = &understudy__epoch_begin__descriptor,
	[PROTO_T_EPOCH_END] = &understudy__epoch_end__descriptor,
	[PROTO_T_ACK] = &understudy__ack__descriptor,
	[PROTO_T_HEARTBEAT] = &understudy__heartbeat__descriptor,
	[PROTO_T_FENCE] = &understudy__fence__descriptor,
	[PROTO_T_ERROR] = &understudy__error__descriptor,
	[PROTO_T_SECTION] = &understudy__section__descriptor,
	[PROTO_T_POSTCOPY_BEGIN] = &understudy__postcopy_begin__descriptor,
	[PROTO_T_PAGE_REQUEST] = &understudy__page_request__descriptor,
	[PROTO_T_POSTCOPY_DONE] = &understudy__postcopy_done__descriptor,
};

static const char *const type_names[PROTO_T_MSG_LAST + 1] = {
	[PROTO_T_HELLO] = "HELLO",
	[PROTO_T_EPOCH_BEGIN] = "EPOCH_BEGIN",
	[PROTO_T_EPOCH_END] = "EPOCH_END",
	[PROTO_T_ACK] = "ACK",
	[PROTO_T_HEARTBEAT] = "HEARTBEAT",
	[PROTO_T_FENCE] = "FENCE",
	[PROTO_T_ERROR] = "ERROR",
	[PROTO_T_SECTION] = "SECTION",
	[PROTO_T_POSTCOPY_BEGIN] = "POSTCOPY_BEGIN",
	[PROTO_T_PAGE_REQUEST] = "PAGE_REQUEST",
	[PROTO_T_POSTCOPY_DONE] = "POSTCOPY_DONE",
};

bool proto_type_known(uint16_t type)
{
	return type == PROTO_T_PAGES || (type >= 1 && type <= PROTO_T_MSG_LAST && msg_desc[type]);
}

const char *proto_type_name(uint16_t type)
{
	if (type == PROTO_T_PAGES)
		return "PAGES";
	if (proto_type_known(type))
		return type_names[type];
	return "UNKNOWN";
}

const char *proto_strerror(int err)
{
	switch (err) {
	case 0: return "ok";
	case -EPROTO: return "bad magic";
	case -EPROTONOSUPPORT: return "wrong protocol version";
	case -EPROTOTYPE: return "unknown frame type";
	case -EMSGSIZE: return "frame length over limit";
	case -EBADMSG: return "crc mismatch or malformed payload";
	default: return "error";
	}
}

/* ---- header ---------------------------------------------------------------- */

void proto_frame_header(uint8_t hdr[PROTO_HDR_BYTES], uint16_t type, const void *payload,
			uint32_t len)
{
	le_put32(hdr, PROTO_MAGIC);
	le_put16(hdr + 4, PROTO_VERSION);
	le_put16(hdr + 6, type);
	le_put32(hdr + 8, len);
	le_put32(hdr + 12, proto_crc32c(0, payload, len));
}

int proto_frame_begin(struct proto_buf *out, uint16_t type, size_t *hdr_off)
{
	int r = proto_buf_reserve(out, PROTO_HDR_BYTES);

	if (r)
		return r;
	*hdr_off = out->len;
	memset(out->data + out->len, 0, PROTO_HDR_BYTES);
	le_put16(out->data + out->len + 6, type);
	out->len += PROTO_HDR_BYTES;
	return 0;
}

int proto_frame_end(struct proto_buf *out, size_t hdr_off)
{
	uint8_t *hdr = out->data + hdr_off;
	size_t len = out->len - hdr_off - PROTO_HDR_BYTES;

	if (len > UINT32_MAX)
		return -EMSGSIZE;
	proto_frame_header(hdr, le_get16(hdr + 6), hdr + PROTO_HDR_BYTES, (uint32_t)len);
	return 0;
}

int proto_frame_append(struct proto_buf *out, uint16_t type, const void *payload, size_t len)
{
	size_t off;
	int r;

	if (len > UINT32_MAX)
		return -EMSGSIZE;
	r = proto_buf_reserve(out, PROTO_HDR_BYTES + len);
	if (r)
		return r;
	r = proto_frame_begin(out, type, &off);
	if (r)
		return r;
	r = proto_buf_append(out, payload, len);
	if (r)
		return r;
	return proto_frame_end(out, off);
}

/* ---- protobuf messages ---------------------------------------------------- */

int proto_msg_pack(struct proto_buf *out, uint16_t type, const ProtobufCMessage *msg)
{
	size_t off, len;
	int r;

	if (type < 1 || type > PROTO_T_MSG_LAST || !msg_desc[type] || msg->descriptor != msg_desc[type])
		return -EINVAL;
	len = protobuf_c_message_get_packed_size(msg);
	r = proto_buf_reserve(out, PROTO_HDR_BYTES + len);
	if (r)
		return r;
	r = proto_frame_begin(out, type, &off);
	if (r)
		return r;
	out->len += protobuf_c_message_pack(msg, out->data + out->len);
	return proto_frame_end(out, off);
}

int proto_msg_unpack(uint16_t type, const void *payload, size_t len, ProtobufCMessage **msg)
{
	ProtobufCMessage *m;

	*msg = NULL;
	if (type < 1 || type > PROTO_T_MSG_LAST || !msg_desc[type])
		return -EPROTOTYPE;
	m = protobuf_c_message_unpack(msg_desc[type], NULL, len, payload);
	if (!m) {
		log_error(TAG, "malformed %s message (%zu bytes)", type_names[type], len);
		return -EBADMSG;
	}
	*msg = m;
	return 0;
}

void proto_msg_free(ProtobufCMessage *msg)
{
	if (msg)
		protobuf_c_message_free_unpacked(msg, NULL);
}

/* ---- decoder --------------------------------------------------------------- */

void proto_dec_init(struct proto_dec *d, uint32_t max_payload)
{
	memset(d, 0, sizeof(*d));
	d->max_payload = max_payload ? max_payload : PROTO_MAX_PAYLOAD_DEFAULT;
}

void proto_dec_fini(struct proto_dec *d)
{
	free(d->payload);
	d->payload = NULL;
	d->payload_cap = 0;
}

bool proto_dec_partial(const struct proto_dec *d)
{
	return d->hdr_have > 0;
}

static int check_header(struct proto_dec *d, const uint8_t *h)
{
	uint32_t magic = le_get32(h), len = le_get32(h + 8);
	uint16_t version = le_get16(h + 4), type = le_get16(h + 6);

	if (magic != PROTO_MAGIC) {
		log_error(TAG, "bad magic 0x%08x", magic);
		return -EPROTO;
	}
	if (version != PROTO_VERSION) {
		log_error(TAG, "protocol version %u, expected %u", version, PROTO_VERSION);
		return -EPROTONOSUPPORT;
	}
	if (!proto_type_known(type)) {
		log_error(TAG, "unknown frame type %u", type);
		return -EPROTOTYPE;
	}
	if (len > d->max_payload) {
		log_error(TAG, "%s frame of %u bytes over the limit of %u", proto_type_name(type),
			  len, d->max_payload);
		return -EMSGSIZE;
	}
	return 0;
}

static int deliver(struct proto_dec *d, const uint8_t *payload, proto_frame_fn fn, void *ctx)
{
	struct proto_frame f = {
		.type = le_get16(d->hdr + 6),
		.len = le_get32(d->hdr + 8),
		.payload = payload,
	};
	uint32_t crc = proto_crc32c(0, payload, f.len);

	d->hdr_have = 0;
	d->payload_have = 0;
	if (crc != le_get32(d->hdr + 12)) {
		log_error(TAG, "%s frame: crc32c 0x%08x, header says 0x%08x", proto_type_name(f.type),
			  crc, le_get32(d->hdr + 12));
		return -EBADMSG;
	}
	d->nframes++;
	return fn(ctx, &f);
}

void *proto_dec_rbuf(struct proto_dec *d, size_t min_bytes, size_t *len)
{
	uint32_t plen;

	if (d->err || d->hdr_have < PROTO_HDR_BYTES)
		return NULL;
	plen = le_get32(d->hdr + 8);
	if (plen - d->payload_have < min_bytes || plen - d->payload_have == 0)
		return NULL;
	if (d->payload_cap < plen) {
		uint8_t *np = realloc(d->payload, plen);

		if (!np)
			return NULL;
		d->payload = np;
		d->payload_cap = plen;
	}
	*len = plen - d->payload_have;
	return d->payload + d->payload_have;
}

int proto_dec_feed(struct proto_dec *d, const void *data, size_t len, proto_frame_fn fn, void *ctx)
{
	const uint8_t *p = data;
	size_t take;
	uint32_t plen;
	int r;

	if (d->err)
		return d->err;
	while (len) {
		if (d->hdr_have < PROTO_HDR_BYTES) {
			take = PROTO_HDR_BYTES - d->hdr_have;
			if (take > len)
				take = len;
			memcpy(d->hdr + d->hdr_have, p, take);
			d->hdr_have += take;
			p += take;
			len -= take;
			if (d->hdr_have < PROTO_HDR_BYTES)
				break;
			r = check_header(d, d->hdr);
			if (r)
				goto err;
		}
		plen = le_get32(d->hdr + 8);
		/* Whole payload in this chunk and nothing buffered: no copy. */
		if (d->payload_have == 0 && len >= plen) {
			r = deliver(d, p, fn, ctx);
			p += plen;
			len -= plen;
			if (r)
				goto err;
			continue;
		}
		if (d->payload_cap < plen) {
			uint8_t *np = realloc(d->payload, plen);

			if (!np) {
				r = -ENOMEM;
				goto err;
			}
			d->payload = np;
			d->payload_cap = plen;
		}
		take = plen - d->payload_have;
		if (take > len)
			take = len;
		/* Bytes read in place through proto_dec_rbuf() need no copy. */
		if (p != d->payload + d->payload_have)
			memcpy(d->payload + d->payload_have, p, take);
		d->payload_have += take;
		p += take;
		len -= take;
		if (d->payload_have == plen) {
			r = deliver(d, d->payload, fn, ctx);
			if (r)
				goto err;
		}
	}
	return 0;
err:
	d->err = r;
	return r;
}
