/*
 * provider.c: which OpenSSL provider a key's operations run in.  Below
 * keys.c and ossl_cache.c, which both make contexts for keys that may live
 * in another provider (a TPM's, tpm2-openssl).
 */
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/provider.h>

#include "bc_common.h"

/* Where keys of a provider of their own live: NULL (the default library context) unless set. */
static OSSL_LIB_CTX *key_libctx = NULL;

/* The library context of keys held by another provider (bc_common.h). */
void
bc_set_key_libctx(OSSL_LIB_CTX *libctx)
{
	key_libctx = libctx;
}

/* The library context key's operations run in (bc_common.h). */
OSSL_LIB_CTX *
bc_pkey_libctx(const EVP_PKEY *key)
{
	char		props[64];

	return bc_pkey_sign_props(key, props, sizeof(props)) != NULL ? key_libctx : NULL;
}

/* The property query that signs with key (bc_common.h). */
const char *
bc_pkey_sign_props(const EVP_PKEY *key, char *buf, size_t buflen)
{
	const OSSL_PROVIDER *prov = key != NULL ? EVP_PKEY_get0_provider(key) : NULL;
	const char *name = prov != NULL ? OSSL_PROVIDER_get0_name(prov) : NULL;
	int			n;

	if (name == NULL || strcmp(name, "default") == 0 || strcmp(name, "fips") == 0 ||
		strcmp(name, "base") == 0)
		return NULL;
	n = snprintf(buf, buflen, "?provider=%s", name);
	return n > 0 && (size_t) n < buflen ? buf : NULL;
}
