/* net/ private, for net/tls.c only: the TLS 1.3 record protection
 * (RFC 8446 section 5) of an established connection, done by net/ itself
 * once OpenSSL has completed the handshake, as kernel TLS does in the
 * kernel. OpenSSL's own record layer copies every plaintext into its
 * buffer before encrypting it and every plaintext out of its buffer after
 * decrypting it; here records are sealed straight from the caller's
 * buffers into the output buffer and opened straight into the consumer's.
 * The bytes on the wire are the same standard records: either side may use
 * OpenSSL's layer instead (tests/test_net_tls.c checks both pairings). */
#ifndef US_NET_TLS_RECORD_H
#define US_NET_TLS_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "kmod/log.h"

#define TLS_REC_HDR 5
#define TLS_REC_TAG 16
#define TLS_REC_PLAIN_MAX 16384                 /* 2^14 bytes of content */
#define TLS_REC_CIPHER_MAX (TLS_REC_PLAIN_MAX + 256) /* record body, RFC 8446 5.2 */
/* Most bytes one sealed record of TLS_REC_PLAIN_MAX content takes. */
#define TLS_REC_SEALED_MAX (TLS_REC_HDR + TLS_REC_PLAIN_MAX + 1 + TLS_REC_TAG)

#define TLS_REC_ALERT 21
#define TLS_REC_KEY_UPDATE 24   /* handshake message type */
#define TLS_REC_HANDSHAKE 22
#define TLS_REC_DATA 23

struct tls_rec;

/* Keys for the suite with IANA id suite_id (0x1301 AES-128-GCM, 0x1302
 * AES-256-GCM, 0x1303 ChaCha20-Poly1305) from the two application traffic
 * secrets (TLS 1.3 key schedule: *_TRAFFIC_SECRET_0). Sequence numbers
 * start at 0. -ENOTSUP for another suite, -EINVAL for a secret of the wrong
 * length, -ENOMEM. */
int tls_rec_new(unsigned suite_id, const uint8_t *wsecret, const uint8_t *rsecret,
		size_t secret_len, struct tls_rec **out) US_MUST_CHECK;
void tls_rec_free(struct tls_rec *r);

/* Key updates (RFC 8446 4.6.3, 7.2): AES-GCM keys should protect at most
 * 2^24.5 records (5.5), ~380 GiB of full records, hours of a busy
 * checkpoint stream. tls_rec_update_due() says the write key has sealed
 * 2^24 records (or what tls_rec_set_update_after() said, 0: that default):
 * the caller seals a KeyUpdate with it, then tls_rec_update(r, true). On a
 * KeyUpdate from the peer, tls_rec_update(r, false). 0 or -errno. */
bool tls_rec_update_due(const struct tls_rec *r);
void tls_rec_set_update_after(struct tls_rec *r, uint64_t records);
int tls_rec_update(struct tls_rec *r, bool write) US_MUST_CHECK;

/* Seals type and the content iov[0..cnt) (at most TLS_REC_PLAIN_MAX bytes
 * in all) as one record at out, which has room for TLS_REC_SEALED_MAX
 * bytes; the record's length, or -errno (-EOVERFLOW: the 2^64 records of
 * these keys are used up; nothing more may be sent). */
long tls_rec_seal(struct tls_rec *r, uint8_t type, const struct iovec *iov, int cnt,
		  uint8_t *out) US_MUST_CHECK;

/* The length of the record starting at in (header included) once its
 * header is complete (avail >= TLS_REC_HDR), 0 if not yet, -EPROTO for a
 * header no TLS 1.3 peer sends. */
long tls_rec_length(const uint8_t *in, size_t avail) US_MUST_CHECK;

/* Opens the whole record at in (rlen bytes, from tls_rec_length()) into out,
 * which has room for rlen - TLS_REC_HDR - TLS_REC_TAG bytes (the content,
 * its type byte and any padding); *type and *len say what it held. Nothing
 * in out may be used on failure: -EBADMSG (authentication failed), -EPROTO
 * (no content type, content too long), -EOVERFLOW. */
int tls_rec_open(struct tls_rec *r, const uint8_t *in, size_t rlen, uint8_t *out,
		 uint8_t *type, size_t *len) US_MUST_CHECK;

#endif
