/* net/ private, for net/tls.c only: TLS contexts (net/tls_ctx.c). */
#ifndef US_NET_TLS_CTX_H
#define US_NET_TLS_CTX_H

#include <stdbool.h>

#include <openssl/ssl.h>

#include "net/net.h"

typedef void (*tls_keylog_fn)(const SSL *ssl, const char *line);

/* A TLS 1.3 context for one side of cfg's connections; NULL, logged, when
 * cfg's files are missing or refused. */
SSL_CTX *tls_ctx_new(const struct net_config *cfg, bool server, tls_keylog_fn keylog);
/* Logs OpenSSL's error queue (or that what failed, when it is empty). */
void tls_log_errors(const char *what, const char *peer);

#endif
