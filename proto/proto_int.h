/* proto/ private: what its files call of each other and no other module
 * does (frame.c's buffer and framing steps, used by pages.c). */
#ifndef US_PROTO_INT_H
#define US_PROTO_INT_H

#include "proto/proto.h"

/* Makes room for extra more bytes after len. */
int proto_buf_reserve(struct proto_buf *b, size_t extra) US_MUST_CHECK;
/* Two-step framing without a copy: begin reserves the header at *hdr_off,
 * the caller appends the payload to out, end fills in length and crc. */
int proto_frame_begin(struct proto_buf *out, uint16_t type, size_t *hdr_off) US_MUST_CHECK;
int proto_frame_end(struct proto_buf *out, size_t hdr_off) US_MUST_CHECK;

#endif
