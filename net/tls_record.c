/* TLS 1.3 record protection with the keys of an established connection
 * (RFC 8446: 5.2 record payload protection, 5.3 per-record nonce, 7.1
 * HKDF-Expand-Label, 7.3 traffic keys). See net/tls_record.h. */
#include "net/tls_record.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>

#define IV_BYTES 12
#define SECRET_MAX 48
#define TLS_REC_UPDATE_AFTER (1ull << 24)

struct tls_dir {
	EVP_CIPHER_CTX *ctx;          /* key set once; the nonce per record */
	uint8_t iv[IV_BYTES];
	uint64_t seq;
	bool spent;                   /* seq wrapped: these keys are used up */
	bool enc;
	uint8_t secret[SECRET_MAX];   /* this direction's traffic secret, for updates */
};

struct tls_rec {
	struct tls_dir w, r;
	const EVP_CIPHER *cipher;
	const char *md;
	size_t secret_len;
	uint64_t update_after;        /* records sealed with one key before an update */
};

/* HKDF-Expand-Label(secret, label, "", len) (RFC 8446 7.1). */
static int expand_label(const char *md, const uint8_t *secret, size_t secret_len,
			const char *label, uint8_t *out, size_t len)
{
	uint8_t info[2 + 1 + 255 + 1];
	size_t llen = strlen(label), n = 0;
	EVP_KDF *kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
	EVP_KDF_CTX *kctx = kdf ? EVP_KDF_CTX_new(kdf) : NULL;
	int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY, r = -ENOMEM;
	OSSL_PARAM params[5];

	if (!kctx)
		goto out;
	info[n++] = (uint8_t)(len >> 8);
	info[n++] = (uint8_t)len;
	info[n++] = (uint8_t)(6 + llen);
	memcpy(info + n, "tls13 ", 6);
	memcpy(info + n + 6, label, llen);
	n += 6 + llen;
	info[n++] = 0; /* empty context */
	params[0] = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)md, 0);
	params[1] = OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode);
	params[2] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)secret,
						      secret_len);
	params[3] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info, n);
	params[4] = OSSL_PARAM_construct_end();
	r = EVP_KDF_derive(kctx, out, len, params) == 1 ? 0 : -EINVAL;
out:
	EVP_KDF_CTX_free(kctx);
	EVP_KDF_free(kdf);
	return r;
}

/* Keys and IV of direction d from its secret (RFC 8446 7.3); sequence 0. */
static int dir_keys(struct tls_rec *rec, struct tls_dir *d)
{
	uint8_t key[32];
	int klen = EVP_CIPHER_get_key_length(rec->cipher), r;

	if (klen <= 0 || (size_t)klen > sizeof(key))
		return -ENOTSUP;
	r = expand_label(rec->md, d->secret, rec->secret_len, "key", key, (size_t)klen);
	if (!r)
		r = expand_label(rec->md, d->secret, rec->secret_len, "iv", d->iv, IV_BYTES);
	if (r)
		goto out;
	if (!d->ctx && !(d->ctx = EVP_CIPHER_CTX_new())) {
		r = -ENOMEM;
		goto out;
	}
	if (EVP_CipherInit_ex(d->ctx, rec->cipher, NULL, NULL, NULL, d->enc) != 1 ||
	    EVP_CIPHER_CTX_ctrl(d->ctx, EVP_CTRL_AEAD_SET_IVLEN, IV_BYTES, NULL) != 1 ||
	    EVP_CipherInit_ex(d->ctx, NULL, NULL, key, NULL, d->enc) != 1)
		r = -EINVAL;
	d->seq = 0;
	d->spent = false;
out:
	OPENSSL_cleanse(key, sizeof(key));
	return r;
}

static int dir_init(struct tls_rec *rec, struct tls_dir *d, const uint8_t *secret, bool enc)
{
	memcpy(d->secret, secret, rec->secret_len);
	d->enc = enc;
	return dir_keys(rec, d);
}

/* RFC 8446 7.2: application_traffic_secret_N+1 = HKDF-Expand-Label(
 * application_traffic_secret_N, "traffic upd", "", Hash.length). */
int tls_rec_update(struct tls_rec *r, bool write)
{
	struct tls_dir *d = write ? &r->w : &r->r;
	uint8_t next[SECRET_MAX];
	int e = expand_label(r->md, d->secret, r->secret_len, "traffic upd", next, r->secret_len);

	if (!e) {
		memcpy(d->secret, next, r->secret_len);
		e = dir_keys(r, d);
	}
	OPENSSL_cleanse(next, sizeof(next));
	return e;
}

bool tls_rec_update_due(const struct tls_rec *r)
{
	return r->w.seq >= r->update_after;
}

void tls_rec_set_update_after(struct tls_rec *r, uint64_t records)
{
	r->update_after = records ? records : TLS_REC_UPDATE_AFTER;
}

int tls_rec_new(unsigned suite_id, const uint8_t *wsecret, const uint8_t *rsecret,
		size_t secret_len, struct tls_rec **out)
{
	const EVP_CIPHER *cipher;
	const char *md;
	size_t want;
	struct tls_rec *r;
	int e;

	switch (suite_id) {
	case 0x1301: cipher = EVP_aes_128_gcm(); md = "SHA256"; want = 32; break;
	case 0x1302: cipher = EVP_aes_256_gcm(); md = "SHA384"; want = 48; break;
	case 0x1303: cipher = EVP_chacha20_poly1305(); md = "SHA256"; want = 32; break;
	default: return -ENOTSUP;
	}
	if (!cipher)
		return -ENOTSUP;
	if (secret_len != want)
		return -EINVAL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->cipher = cipher;
	r->md = md;
	r->secret_len = secret_len;
	r->update_after = TLS_REC_UPDATE_AFTER;
	e = dir_init(r, &r->w, wsecret, true);
	if (!e)
		e = dir_init(r, &r->r, rsecret, false);
	if (e) {
		tls_rec_free(r);
		return e;
	}
	*out = r;
	return 0;
}

void tls_rec_free(struct tls_rec *r)
{
	if (!r)
		return;
	EVP_CIPHER_CTX_free(r->w.ctx);
	EVP_CIPHER_CTX_free(r->r.ctx);
	OPENSSL_cleanse(r, sizeof(*r));
	free(r);
}

/* The nonce of the next record (RFC 8446 5.3): the IV xor the 64-bit
 * sequence number, big-endian, in its last 8 bytes. A sequence number is
 * used once: the counter moves on here, whatever becomes of the record. */
static int next_nonce(struct tls_dir *d, uint8_t *nonce)
{
	if (d->spent)
		return -EOVERFLOW;
	memcpy(nonce, d->iv, IV_BYTES);
	for (int i = 0; i < 8; i++)
		nonce[IV_BYTES - 1 - i] ^= (uint8_t)(d->seq >> (8 * i));
	if (++d->seq == 0)
		d->spent = true;
	return 0;
}

static void put_header(uint8_t *h, size_t body)
{
	h[0] = TLS_REC_DATA; /* opaque_type: every protected record says data */
	h[1] = 0x03;
	h[2] = 0x03;
	h[3] = (uint8_t)(body >> 8);
	h[4] = (uint8_t)body;
}

long tls_rec_seal(struct tls_rec *r, uint8_t type, const struct iovec *iov, int cnt,
		  uint8_t *out)
{
	EVP_CIPHER_CTX *ctx = r->w.ctx;
	uint8_t nonce[IV_BYTES], *p = out + TLS_REC_HDR;
	size_t plain = 0;
	int n, e;

	for (int i = 0; i < cnt; i++)
		plain += iov[i].iov_len;
	if (plain > TLS_REC_PLAIN_MAX)
		return -EMSGSIZE;
	if ((e = next_nonce(&r->w, nonce)))
		return e;
	put_header(out, plain + 1 + TLS_REC_TAG);
	if (EVP_EncryptInit_ex(ctx, NULL, NULL, NULL, nonce) != 1 ||
	    EVP_EncryptUpdate(ctx, NULL, &n, out, TLS_REC_HDR) != 1)
		return -EIO;
	for (int i = 0; i < cnt; i++) {
		if (!iov[i].iov_len)
			continue;
		if (EVP_EncryptUpdate(ctx, p, &n, iov[i].iov_base, (int)iov[i].iov_len) != 1)
			return -EIO;
		p += n;
	}
	if (EVP_EncryptUpdate(ctx, p, &n, &type, 1) != 1)
		return -EIO;
	p += n;
	if (EVP_EncryptFinal_ex(ctx, p, &n) != 1)
		return -EIO;
	p += n;
	if (p != out + TLS_REC_HDR + plain + 1 ||
	    EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, TLS_REC_TAG, p) != 1)
		return -EIO;
	return (long)(TLS_REC_HDR + plain + 1 + TLS_REC_TAG);
}

long tls_rec_length(const uint8_t *in, size_t avail)
{
	size_t body;

	if (avail < TLS_REC_HDR)
		return 0;
	body = (size_t)in[3] << 8 | in[4];
	/* Protected records all say application data and TLS 1.2; a TLS 1.3
	 * peer never sends a plaintext record after the handshake. */
	if (in[0] != TLS_REC_DATA || in[1] != 0x03 || in[2] != 0x03 ||
	    body < 1 + TLS_REC_TAG || body > TLS_REC_CIPHER_MAX)
		return -EPROTO;
	return (long)(TLS_REC_HDR + body);
}

int tls_rec_open(struct tls_rec *r, const uint8_t *in, size_t rlen, uint8_t *out,
		 uint8_t *type, size_t *len)
{
	EVP_CIPHER_CTX *ctx = r->r.ctx;
	size_t clen = rlen - TLS_REC_HDR - TLS_REC_TAG;
	uint8_t nonce[IV_BYTES];
	int n, m, e;

	if (rlen < TLS_REC_HDR + 1 + TLS_REC_TAG)
		return -EPROTO;
	if ((e = next_nonce(&r->r, nonce)))
		return e;
	if (EVP_DecryptInit_ex(ctx, NULL, NULL, NULL, nonce) != 1 ||
	    EVP_DecryptUpdate(ctx, NULL, &n, in, TLS_REC_HDR) != 1 ||
	    EVP_DecryptUpdate(ctx, out, &n, in + TLS_REC_HDR, (int)clen) != 1 ||
	    EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, TLS_REC_TAG,
				(void *)(in + TLS_REC_HDR + clen)) != 1)
		return -EIO;
	if (EVP_DecryptFinal_ex(ctx, out + n, &m) != 1 || (size_t)(n + m) != clen)
		return -EBADMSG;
	/* Content, then its type (never 0), then zero padding. */
	while (clen && !out[clen - 1])
		clen--;
	if (!clen)
		return -EPROTO;
	*type = out[clen - 1];
	*len = clen - 1;
	return *len > TLS_REC_PLAIN_MAX ? -EPROTO : 0;
}
