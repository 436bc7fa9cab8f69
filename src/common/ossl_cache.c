/*
 * ossl_cache.c: OpenSSL 3.0 contexts kept for reuse, for the server only.
 *
 * OpenSSL 3.0 fetches algorithm implementations from its providers each
 * time a context is made (EVP_PKEY_CTX_new_from_name, EVP_DigestSignInit),
 * and in a join that setup cost more than the elliptic-curve arithmetic
 * around it (docs/performance.md).  A PostgreSQL backend is one thread, so
 * the extension turns this cache on (bc_ossl_cache_enable) and keeps, for
 * its lifetime, a fromdata context for P-256 keys and, per long-lived key
 * (the signing key, the node CA key, the encryption key), an initialised
 * signing or derive context that each use copies or reuses.  Everywhere
 * else (bcd's threads, bc-gateway, the tests) it stays off and every call
 * makes its own contexts, as before.
 */
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/evp.h>

#include "bc_common.h"

#define CACHE_KEYS 4

typedef struct cached_key
{
	EVP_PKEY   *key;			/* a reference of our own */
	EVP_MD_CTX *sign;			/* DigestSignInit'ed with SHA-256 */
	EVP_PKEY_CTX *derive;		/* derive_init'ed */
} cached_key;

static int	enabled = 0;
static EVP_PKEY_CTX *fromdata_ctx = NULL;
static cached_key keys[CACHE_KEYS];

/* Turn the cache on (a single-threaded process only). */
void
bc_ossl_cache_enable(void)
{
	enabled = 1;
}

/* Free everything the cache holds and turn it off. */
void
bc_ossl_cache_release(void)
{
	int			i;

	EVP_PKEY_CTX_free(fromdata_ctx);
	fromdata_ctx = NULL;
	for (i = 0; i < CACHE_KEYS; i++)
	{
		EVP_MD_CTX_free(keys[i].sign);
		EVP_PKEY_CTX_free(keys[i].derive);
		EVP_PKEY_free(keys[i].key);
	}
	memset(keys, 0, sizeof(keys));
	enabled = 0;
}

/* The fromdata context for EC keys, or NULL when the cache is off. */
EVP_PKEY_CTX *
bc_ossl_cache_fromdata(void)
{
	if (!enabled)
		return NULL;
	if (fromdata_ctx == NULL)
	{
		fromdata_ctx = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
		if (fromdata_ctx != NULL && EVP_PKEY_fromdata_init(fromdata_ctx) != 1)
		{
			EVP_PKEY_CTX_free(fromdata_ctx);
			fromdata_ctx = NULL;
		}
	}
	return fromdata_ctx;
}

/* The cache slot of key, made on first use; NULL when off or full. */
static cached_key *
slot_of(EVP_PKEY *key)
{
	int			i;

	if (!enabled || key == NULL)
		return NULL;
	for (i = 0; i < CACHE_KEYS; i++)
	{
		if (keys[i].key == key)
			return &keys[i];
	}
	for (i = 0; i < CACHE_KEYS; i++)
	{
		if (keys[i].key == NULL)
		{
			if (EVP_PKEY_up_ref(key) != 1)
				return NULL;
			keys[i].key = key;
			return &keys[i];
		}
	}
	return NULL;
}

/*
 * A new signing context for key (SHA-256), copied from one initialised
 * once; NULL when the cache is off (the caller initialises its own).  The
 * caller frees it.
 */
EVP_MD_CTX *
bc_ossl_cache_sign_ctx(EVP_PKEY *key)
{
	cached_key *k = slot_of(key);
	EVP_MD_CTX *copy;

	if (k == NULL)
		return NULL;
	if (k->sign == NULL)
	{
		k->sign = EVP_MD_CTX_new();
		if (k->sign == NULL ||
			EVP_DigestSignInit(k->sign, NULL, EVP_sha256(), NULL, key) != 1)
		{
			EVP_MD_CTX_free(k->sign);
			k->sign = NULL;
			return NULL;
		}
	}
	copy = EVP_MD_CTX_new();
	if (copy != NULL && EVP_MD_CTX_copy_ex(copy, k->sign) != 1)
	{
		EVP_MD_CTX_free(copy);
		copy = NULL;
	}
	return copy;
}

/*
 * The derive context of priv, initialised once and reused (borrowed: do not
 * free); NULL when the cache is off.
 */
EVP_PKEY_CTX *
bc_ossl_cache_derive_ctx(EVP_PKEY *priv)
{
	cached_key *k = slot_of(priv);

	if (k == NULL)
		return NULL;
	if (k->derive == NULL)
	{
		k->derive = EVP_PKEY_CTX_new_from_pkey(NULL, priv, NULL);
		if (k->derive == NULL || EVP_PKEY_derive_init(k->derive) != 1)
		{
			EVP_PKEY_CTX_free(k->derive);
			k->derive = NULL;
		}
	}
	return k->derive;
}
