/* tls.h: the server's TLS context. */
#ifndef BC_GATEWAY_TLS_H
#define BC_GATEWAY_TLS_H

#include <openssl/ssl.h>

/* A TLS 1.2+ server context with the certificate chain and key from PEM files; NULL on error. */
SSL_CTX    *gw_tls_ctx_new(const char *cert_file, const char *key_file);

#endif
