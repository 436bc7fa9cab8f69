/* tls.c: the server's TLS context. */
#include "tls.h"
#include "log.h"

#include <openssl/err.h>

/* Log OpenSSL's error queue under msg, then clear it. */
static void
log_ssl_errors(const char *msg)
{
	char		buf[256];
	unsigned long e = ERR_get_error();

	buf[0] = '\0';
	if (e != 0)
		ERR_error_string_n(e, buf, sizeof(buf));
	gw_log(GW_LOG_ERROR, msg, json_pack("{s:s}", "error", buf));
	ERR_clear_error();
}

/* A TLS 1.2+ server context with the certificate chain and key from PEM files; NULL on error. */
SSL_CTX *
gw_tls_ctx_new(const char *cert_file, const char *key_file)
{
	SSL_CTX    *ctx = SSL_CTX_new(TLS_server_method());

	if (ctx == NULL)
	{
		log_ssl_errors("cannot create the TLS context");
		goto fail;
	}
	if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1)
	{
		log_ssl_errors("cannot require TLS 1.2");
		goto fail;
	}
	SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION |
						SSL_OP_CIPHER_SERVER_PREFERENCE);
	if (SSL_CTX_use_certificate_chain_file(ctx, cert_file) != 1)
	{
		log_ssl_errors("cannot load --tls-cert");
		goto fail;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, key_file, SSL_FILETYPE_PEM) != 1)
	{
		log_ssl_errors("cannot load --tls-key");
		goto fail;
	}
	if (SSL_CTX_check_private_key(ctx) != 1)
	{
		log_ssl_errors("--tls-key does not match --tls-cert");
		goto fail;
	}
	return ctx;
fail:
	SSL_CTX_free(ctx);
	return NULL;
}
