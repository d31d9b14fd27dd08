/* TLS contexts: the certificates, key and CA a side presents and trusts,
 * the role its peer's certificate must name, and the settings every
 * connection of the context shares (net/tls.c makes the connections). */
#include "net/tls_ctx.h"

#include <stdint.h>
#include <string.h>

#include <openssl/err.h>
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
