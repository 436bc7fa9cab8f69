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
