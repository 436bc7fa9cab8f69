/*
 * ossl_cache.c: OpenSSL 3.0 contexts kept for reuse, for the server only.
 *
 * OpenSSL 3.0 fetches algorithm implementations from its providers each
 * time a context is made (EVP_PKEY_CTX_new_from_name, EVP_DigestSignInit),
 * and in a join that setup cost more than the elliptic-curve arithmetic
 * around it (docs/performance.md).  A PostgreSQL backend is one thread, so
 * the extension turns this cache on (bc_ossl_cache_enable) and keeps, for
 * its lifetime, a P-256 parameter key that public keys are made from and, per long-lived key
 * (the signing key, the node CA key, the encryption key), an initialised
 * signing or derive context that each use copies or reuses.  Everywhere
 * else (bcd's threads, bc-gateway, the tests) it stays off and every call
 * makes its own contexts, as before.
 */
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/x509.h>

#include "bc_common.h"

#define CACHE_KEYS 8

typedef struct cached_key
{
	EVP_PKEY   *key;			/* a reference of our own */
	EVP_MD_CTX *sign;			/* DigestSignInit'ed with SHA-256 */
	EVP_PKEY_CTX *derive;		/* derive_init'ed */
	X509	   *ca_checked;		/* a CA certificate key was checked against */
} cached_key;

static int	enabled = 0;
static EVP_PKEY *p256_params = NULL;
static cached_key keys[CACHE_KEYS];

/* Turn the cache on (a single-threaded process only). */
void
bc_ossl_cache_enable(void)
{
	enabled = 1;
}


/*
 * Drop key's slot: its contexts and the cache's reference, so that the key's
 * owner frees (and OpenSSL wipes) it when it lets go, and the slot serves
 * the next key.  The owner calls this before freeing a key it had cached.
 */
void
bc_ossl_cache_forget(EVP_PKEY *key)
{
	int			i;

	if (key == NULL)
		return;
	for (i = 0; i < CACHE_KEYS; i++)
	{
		if (keys[i].key != key)
			continue;
		EVP_MD_CTX_free(keys[i].sign);
		EVP_PKEY_CTX_free(keys[i].derive);
		X509_free(keys[i].ca_checked);
		EVP_PKEY_free(keys[i].key);
		memset(&keys[i], 0, sizeof(keys[i]));
	}
}

/*
 * A P-256 key holding the group alone, made once (borrowed: do not free), or
 * NULL when the cache is off.  A public key is made by duplicating it and
 * setting the point (bc_p256_from_point): that copies the group where
 * EVP_PKEY_fromdata builds it again from its name and curve data, three
 * times the cost of the copy.
 */
EVP_PKEY *
bc_ossl_cache_p256_params(void)
{
	if (!enabled)
		return NULL;
	if (p256_params == NULL)
	{
		EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
		char		group[] = "prime256v1";
		OSSL_PARAM	params[2];

		params[0] = OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, group, 0);
		params[1] = OSSL_PARAM_construct_end();
		if (ctx == NULL || EVP_PKEY_fromdata_init(ctx) != 1 ||
			EVP_PKEY_fromdata(ctx, &p256_params, EVP_PKEY_KEY_PARAMETERS, params) != 1)
		{
			EVP_PKEY_free(p256_params);
			p256_params = NULL;
		}
		EVP_PKEY_CTX_free(ctx);
	}
	return p256_params;
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
	char		props[64];

	if (k == NULL)
		return NULL;
	if (k->sign == NULL)
	{
		k->sign = EVP_MD_CTX_new();
		if (k->sign == NULL ||
			EVP_DigestSignInit_ex(k->sign, NULL, "SHA256", bc_pkey_libctx(key),
								  bc_pkey_sign_props(key, props, sizeof(props)),
								  key, NULL) != 1)
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
	char		props[64];

	if (k == NULL)
		return NULL;
	if (k->derive == NULL)
	{
		/* A key in a provider of its own (a TPM's) derives there. */
		k->derive = EVP_PKEY_CTX_new_from_pkey(bc_pkey_libctx(priv), priv,
											   bc_pkey_sign_props(priv, props, sizeof(props)));
		if (k->derive == NULL || EVP_PKEY_derive_init(k->derive) != 1)
		{
			EVP_PKEY_CTX_free(k->derive);
			k->derive = NULL;
		}
	}
	return k->derive;
}

/*
 * 1 when ca_key was found to be the private key of ca_cert before (both
 * kept alive by the cache since, so neither can have changed); 0 otherwise
 * or with the cache off, and the caller checks.
 */
int
bc_ossl_cache_ca_checked(X509 *ca_cert, EVP_PKEY *ca_key)
{
	int			i;

	if (!enabled)
		return 0;
	for (i = 0; i < CACHE_KEYS; i++)
	{
		if (keys[i].key == ca_key && keys[i].key != NULL)
			return keys[i].ca_checked == ca_cert;
	}
	return 0;
}

/* Remember that ca_key is ca_cert's private key (after X509_check_private_key). */
void
bc_ossl_cache_ca_check_passed(X509 *ca_cert, EVP_PKEY *ca_key)
{
	cached_key *k = slot_of(ca_key);

	if (k == NULL || k->ca_checked == ca_cert || X509_up_ref(ca_cert) != 1)
		return;
	X509_free(k->ca_checked);
	k->ca_checked = ca_cert;
}

#ifdef BC_TEST_BUILD

/* Free everything the cache holds and turn it off. */
void
bc_ossl_cache_release(void)
{
	int			i;

	EVP_PKEY_free(p256_params);
	p256_params = NULL;
	for (i = 0; i < CACHE_KEYS; i++)
	{
		EVP_MD_CTX_free(keys[i].sign);
		EVP_PKEY_CTX_free(keys[i].derive);
		X509_free(keys[i].ca_checked);
		EVP_PKEY_free(keys[i].key);
	}
	memset(keys, 0, sizeof(keys));
	enabled = 0;
}

#endif							/* BC_TEST_BUILD */
