/* TLS contexts: the certificates, key and CA a side presents and trusts,
 * the role its peer's certificate must name, and the settings every
 * connection of the context shares (net/tls.c makes the connections);
 * and the same files checked when the options are read. */
#include "net/tls_ctx.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#define TAG "net"
#define TLS_READ_AHEAD_BYTES (256 * 1024)
#define TLS_SUITES "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"

void tls_log_errors(const char *what, const char *peer)
{
	unsigned long e;
	char buf[256];
	bool any = false;

	while ((e = ERR_get_error())) {
		ERR_error_string_n(e, buf, sizeof(buf));
		log_error(TAG, "%s %s: %s", what, peer, buf);
		any = true;
	}
	if (!any)
		log_error(TAG, "%s %s failed", what, peer);
}

/* The peer's certificate must name its role. OpenSSL's purpose check
 * (SSL_CTX_set_purpose) refuses a certificate whose extended key usage
 * lacks the role but lets one with no extended key usage act as anything;
 * this refuses that one too, so every certificate is bound to a role. */
static int verify_role(int ok, X509_STORE_CTX *sctx)
{
	X509 *cert = X509_STORE_CTX_get_current_cert(sctx);

	if (!ok || X509_STORE_CTX_get_error_depth(sctx) != 0 || !cert)
		return ok;
	if (!(X509_get_extension_flags(cert) & EXFLAG_XKUSAGE)) {
		X509_STORE_CTX_set_error(sctx, X509_V_ERR_INVALID_PURPOSE);
		return 0;
	}
	return ok;
}

/* TLS 1.3 only; both sides present a certificate and verify the peer's
 * against cfg->ca (the server requires one from the client), its role
 * (extended key usage: the server accepts only clientAuth certificates,
 * the client only serverAuth ones) and, when given, cfg->peer_name.
 * keylog receives the traffic secrets when net's own records will run. */
SSL_CTX *tls_ctx_new(const struct net_config *cfg, bool server, tls_keylog_fn keylog)
{
	SSL_CTX *ctx;

	/* A client without a certificate is allowed here so that the server's
	 * refusal can be tested; the server always requires one. */
	if (!cfg->ca || (server && (!cfg->cert || !cfg->key)) || (!cfg->cert != !cfg->key)) {
		log_error(TAG, "TLS needs --tls-cert, --tls-key and --tls-ca (or --insecure)");
		return NULL;
	}
	ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
	if (!ctx)
		goto err;
	if (!SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) ||
	    !SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION))
		goto err_ctx;
	if (cfg->cert && (SSL_CTX_use_certificate_chain_file(ctx, cfg->cert) != 1 ||
			  SSL_CTX_use_PrivateKey_file(ctx, cfg->key, SSL_FILETYPE_PEM) != 1 ||
			  SSL_CTX_check_private_key(ctx) != 1))
		goto err_ctx;
	if (SSL_CTX_load_verify_locations(ctx, cfg->ca, NULL) != 1)
		goto err_ctx;
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | (server ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0),
			   verify_role);
	if (SSL_CTX_set_purpose(ctx, server ? X509_PURPOSE_SSL_CLIENT : X509_PURPOSE_SSL_SERVER) != 1)
		goto err_ctx;
	if (cfg->peer_name &&
	    X509_VERIFY_PARAM_set1_host(SSL_CTX_get0_param(ctx), cfg->peer_name, 0) != 1)
		goto err_ctx;
	SSL_CTX_set_num_tickets(ctx, 0);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	/* AES-128-GCM is the fastest suite with AES-NI (here ~4.0 GB/s per
	 * core against AES-256-GCM's ~3.7); the server decides, and a peer
	 * offering only AES-256-GCM or ChaCha20 still gets it. */
	if (SSL_CTX_set_ciphersuites(ctx, cfg->tls_suites ? cfg->tls_suites : TLS_SUITES) != 1)
		goto err_ctx;
	if (server)
		SSL_CTX_set_options(ctx, SSL_OP_CIPHER_SERVER_PREFERENCE);
	if (!cfg->tls_openssl_records) {
		/* The records after the handshake are net's (net/tls_record.c):
		 * OpenSSL must not read past the handshake's last record, and
		 * hands over the traffic secrets. */
		SSL_CTX_set_read_ahead(ctx, 0);
		SSL_CTX_set_keylog_callback(ctx, keylog);
	} else {
		/* Read whole records and what follows in one read(). */
		SSL_CTX_set_read_ahead(ctx, 1);
	}
	SSL_CTX_set_default_read_buffer_len(ctx, TLS_READ_AHEAD_BYTES);
	/* The one number net's record layer takes from the config, kept as
	 * the context's app data (a value, not a pointer). */
	SSL_CTX_set_app_data(ctx, (void *)(uintptr_t)cfg->tls_update_records);
	return ctx;

err_ctx:
	SSL_CTX_free(ctx);
err:
	tls_log_errors("TLS setup with", cfg->cert ? cfg->cert : cfg->ca);
	return NULL;
}

/* ---- the files, checked before anything is built ------------------------------ */

static int refuse(char *err, size_t errlen, const char *opt, const char *path, const char *fmt,
		  ...) __attribute__((format(printf, 5, 6)));
static int refuse(char *err, size_t errlen, const char *opt, const char *path, const char *fmt,
		  ...)
{
	char why[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	snprintf(err, errlen, "%s %s: %s", opt, path, why);
	ERR_clear_error();
	return -EINVAL;
}

static const char *asn1_date(const ASN1_TIME *t, char *out, size_t len)
{
	struct tm tm;

	if (ASN1_TIME_to_tm(t, &tm) != 1 || !strftime(out, len, "%Y-%m-%d %H:%M:%S UTC", &tm))
		snprintf(out, len, "(an unreadable date)");
	return out;
}

/* The first certificate of path, valid now; NULL with err set. */
static X509 *read_cert(const char *opt, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	X509 *x;
	char date[64];

	if (!f) {
		refuse(err, errlen, opt, path, "%s", strerror(errno));
		return NULL;
	}
	x = PEM_read_X509(f, NULL, NULL, NULL);
	fclose(f);
	if (!x) {
		refuse(err, errlen, opt, path, "no PEM certificate in it");
		return NULL;
	}
	if (X509_cmp_current_time(X509_get0_notAfter(x)) < 0) {
		refuse(err, errlen, opt, path, "expired on %s",
		       asn1_date(X509_get0_notAfter(x), date, sizeof(date)));
		X509_free(x);
		return NULL;
	}
	if (X509_cmp_current_time(X509_get0_notBefore(x)) > 0) {
		refuse(err, errlen, opt, path, "not valid before %s",
		       asn1_date(X509_get0_notBefore(x), date, sizeof(date)));
		X509_free(x);
		return NULL;
	}
	return x;
}

int net_tls_check_files(const struct net_config *cfg, bool server, char *err, size_t errlen)
{
	const char *usage = server ? "serverAuth" : "clientAuth";
	const char *role = server ? "the secondary listens as the TLS server"
				  : "this side connects as the TLS client";
	X509 *cert = NULL, *ca;
	EVP_PKEY *key = NULL;
	FILE *f;
	int r = -EINVAL;

	if (cfg->transport != NET_TLS)
		return 0;
	if (cfg->ca) {
		if (!(ca = read_cert("--tls-ca", cfg->ca, err, errlen)))
			return -EINVAL;
		X509_free(ca);
	}
	if (!cfg->cert)
		return 0;
	if (!(cert = read_cert("--tls-cert", cfg->cert, err, errlen)))
		return -EINVAL;
	if (!(X509_get_extension_flags(cert) & EXFLAG_XKUSAGE)) {
		refuse(err, errlen, "--tls-cert", cfg->cert,
		       "no extended key usage: it needs %s (%s), and a peer refuses a "
		       "certificate without one", usage, role);
		goto out;
	}
	if (!(X509_get_extended_key_usage(cert) & (server ? XKU_SSL_SERVER : XKU_SSL_CLIENT))) {
		refuse(err, errlen, "--tls-cert", cfg->cert,
		       "its extended key usage lacks %s (%s)", usage, role);
		goto out;
	}
	if (!cfg->key) {
		snprintf(err, errlen, "--tls-cert %s: no --tls-key given with it", cfg->cert);
		goto out;
	}
	if (!(f = fopen(cfg->key, "r"))) {
		refuse(err, errlen, "--tls-key", cfg->key, "%s", strerror(errno));
		goto out;
	}
	key = PEM_read_PrivateKey(f, NULL, NULL, NULL);
	fclose(f);
	if (!key) {
		refuse(err, errlen, "--tls-key", cfg->key,
		       "no PEM private key in it (or one with a passphrase)");
		goto out;
	}
	if (X509_check_private_key(cert, key) != 1) {
		refuse(err, errlen, "--tls-key", cfg->key, "not the key of --tls-cert %s", cfg->cert);
		goto out;
	}
	r = 0;
out:
	EVP_PKEY_free(key);
	X509_free(cert);
	return r;
}
