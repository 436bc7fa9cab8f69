/*
 * spiffe_bundle.c: a SPIFFE trust bundle (a JWK Set, SPIFFE Trust Domain and
 * Bundle §4) as another trust domain publishes it, judged before anything
 * trusts it: the database judges what bc-join-federate fetched
 * (bc_join.store_fetched_bundle), the fetcher takes the x509-svid roots of a
 * stored bundle to authenticate an https_spiffe endpoint.
 *
 * jansson parses the JSON, OpenSSL the certificates and the keys: a JWK
 * becomes an EVP_PKEY through EVP_PKEY_fromdata, and an x509-svid key's one
 * certificate must hold that same key (EVP_PKEY_eq).
 */
#include "bc_common.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

/* The largest certificate of an x509-svid key (DER). */
#define X5C_DER_MAX (16 * 1024)

/* printf into why, when there is one. */
static int
refuse(char *why, size_t whylen, int rc, const char *fmt, const char *a, long b)
{
	if (why != NULL && whylen > 0)
		snprintf(why, whylen, fmt, a, b);
	return rc;
}

/* A JWK's public key; BC_EUNSUPPORTED for a kty we do not know (the JWK is then ignored). */
static int
jwk_pkey(json_t *jwk, EVP_PKEY **out)
{
	const char *kty = json_string_value(json_object_get(jwk, "kty"));

	*out = NULL;
	if (kty == NULL)
		return BC_EINVAL;
	if (json_object_get(jwk, "d") != NULL || json_object_get(jwk, "p") != NULL)
		return BC_EINVAL;		/* a private key has no place in a bundle */
	if (strcmp(kty, "EC") != 0 && strcmp(kty, "RSA") != 0)
		return BC_EUNSUPPORTED;
	/* EC P-256/384/521 or RSA 2048-8192, the one JWK reader of src/common (jose.c):
	 * a curve or size it does not take refuses the bundle, as a malformed key does */
	return bc_pkey_from_jwk_any(jwk, out) == BC_OK ? BC_OK : BC_EINVAL;
}

/* The one certificate of an x509-svid key's x5c, or NULL (why says what is wrong). */
X509 *
bc_spiffe_x5c_cert(struct json_t *jwk, char *why, size_t whylen, long i)
{
	json_t	   *x5c = json_object_get(jwk, "x5c");
	json_t	   *b64;
	unsigned char *der;
	const unsigned char *p;
	size_t		len = 0;
	X509	   *cert;

	if (!json_is_array(x5c) || json_array_size(x5c) != 1)
	{
		refuse(why, whylen, 0, "%skey %ld: x5c must hold exactly one certificate", "", i);
		return NULL;
	}
	b64 = json_array_get(x5c, 0);
	if (!json_is_string(b64) || json_string_length(b64) > X5C_DER_MAX * 4 / 3 + 4)
	{
		refuse(why, whylen, 0, "%skey %ld: x5c[0] is not a base64 certificate", "", i);
		return NULL;
	}
	der = malloc(X5C_DER_MAX);
	if (der == NULL)
	{
		refuse(why, whylen, 0, "%skey %ld: out of memory", "", i);
		return NULL;
	}
	if (bc_b64_decode(json_string_value(b64), json_string_length(b64), der, X5C_DER_MAX, &len) != BC_OK ||
		len == 0)
	{
		free(der);
		refuse(why, whylen, 0, "%skey %ld: x5c[0] is not base64", "", i);
		return NULL;
	}
	p = der;
	cert = d2i_X509(NULL, &p, (long) len);
	if (cert == NULL || p != der + len)
	{
		X509_free(cert);
		cert = NULL;
		refuse(why, whylen, 0, "%skey %ld: x5c[0] is not one DER certificate", "", i);
	}
	free(der);
	ERR_clear_error();
	return cert;
}

/* A JSON integer member in 0..2^53 (absent is fine); false when present otherwise. */
static bool
small_integer(json_t *doc, const char *name, bool allow_negative)
{
	json_t	   *m = json_object_get(doc, name);

	if (m == NULL)
		return true;
	if (!json_is_integer(m))
		return false;
	if (json_integer_value(m) > BC_SPIFFE_SEQUENCE_MAX)
		return false;
	return allow_negative || json_integer_value(m) >= 0;
}

/* See bc_common.h. */
int
bc_spiffe_bundle_check(const char *json, size_t n, char *why, size_t whylen)
{
	json_t	   *doc;
	json_t	   *keys;
	json_error_t jerr;
	size_t		i;
	int			rc = BC_OK;

	if (why != NULL && whylen > 0)
		why[0] = '\0';
	if (json == NULL || n == 0)
		return refuse(why, whylen, BC_EINVAL, "%sthe bundle is empty", "", 0);
	if (n > BC_SPIFFE_BUNDLE_MAX)
		return refuse(why, whylen, BC_ETOOBIG, "%sthe bundle is larger than %ld bytes", "",
					  (long) BC_SPIFFE_BUNDLE_MAX);
	doc = json_loadb(json, n, JSON_REJECT_DUPLICATES, &jerr);
	if (doc == NULL)
		return refuse(why, whylen, BC_EINVAL, "the bundle is not JSON: %s (line %ld)", jerr.text,
					  (long) jerr.line);
	keys = json_object_get(doc, "keys");
	if (!json_is_object(doc) || !json_is_array(keys))
	{
		rc = refuse(why, whylen, BC_EINVAL, "%sthe bundle is not a JWK Set (an object with a keys array)", "", 0);
		goto out;
	}
	if (json_array_size(keys) > BC_SPIFFE_BUNDLE_KEYS_MAX)
	{
		rc = refuse(why, whylen, BC_ETOOBIG, "%sthe bundle has more than %ld keys", "",
					(long) BC_SPIFFE_BUNDLE_KEYS_MAX);
		goto out;
	}
	if (!small_integer(doc, "spiffe_sequence", false))
	{
		rc = refuse(why, whylen, BC_EINVAL, "%sspiffe_sequence is not an integer from 0 to 2^53", "", 0);
		goto out;
	}
	if (!small_integer(doc, "spiffe_refresh_hint", true))
	{
		rc = refuse(why, whylen, BC_EINVAL, "%sspiffe_refresh_hint is not an integer of at most 2^53", "", 0);
		goto out;
	}
	for (i = 0; i < json_array_size(keys) && rc == BC_OK; i++)
	{
		json_t	   *jwk = json_array_get(keys, i);
		const char *use;
		EVP_PKEY   *pkey = NULL;
		int			k;

		if (!json_is_object(jwk))
		{
			rc = refuse(why, whylen, BC_EINVAL, "%skey %ld is not an object", "", (long) i);
			break;
		}
		use = json_string_value(json_object_get(jwk, "use"));
		/* A JWK of no use we know, or of a kty we do not know, is ignored (§4.2.2). */
		if (use == NULL || (strcmp(use, "x509-svid") != 0 && strcmp(use, "jwt-svid") != 0))
			continue;
		k = jwk_pkey(jwk, &pkey);
		if (k == BC_EUNSUPPORTED)
			continue;
		if (k != BC_OK)
		{
			rc = refuse(why, whylen, BC_EINVAL, "%skey %ld is not a public key this bundle could hold", "",
						(long) i);
			break;
		}
		if (strcmp(use, "jwt-svid") == 0)
		{
			json_t	   *kid = json_object_get(jwk, "kid");

			if (!json_is_string(kid) || json_string_length(kid) == 0 || json_string_length(kid) > 256)
				rc = refuse(why, whylen, BC_EINVAL, "%skey %ld (jwt-svid) has no kid", "", (long) i);
		}
		else
		{
			X509	   *cert = bc_spiffe_x5c_cert(jwk, why, whylen, (long) i);

			if (cert == NULL)
				rc = BC_EINVAL;
			else if ((X509_get_extension_flags(cert) & EXFLAG_CA) == 0)
				rc = refuse(why, whylen, BC_EINVAL, "%skey %ld: x5c[0] is not a CA certificate", "", (long) i);
			else if (EVP_PKEY_eq(X509_get0_pubkey(cert), pkey) != 1)
				rc = refuse(why, whylen, BC_EINVAL, "%skey %ld: x5c[0] does not hold the JWK's key", "",
							(long) i);
			X509_free(cert);
			ERR_clear_error();
		}
		EVP_PKEY_free(pkey);
	}
out:
	json_decref(doc);
	return rc;
}

/* See bc_common.h. */
int
bc_spiffe_bundle_x509_roots(const char *json, size_t n, STACK_OF(X509) **out)
{
	json_t	   *doc;
	json_t	   *keys;
	size_t		i;
	STACK_OF(X509) *roots;

	*out = NULL;
	if (bc_spiffe_bundle_check(json, n, NULL, 0) != BC_OK)
		return BC_EINVAL;
	doc = json_loadb(json, n, JSON_REJECT_DUPLICATES, NULL);
	if (doc == NULL)
		return BC_EINVAL;
	roots = sk_X509_new_null();
	if (roots == NULL)
	{
		json_decref(doc);
		return BC_ENOMEM;
	}
	keys = json_object_get(doc, "keys");
	for (i = 0; i < json_array_size(keys); i++)
	{
		json_t	   *jwk = json_array_get(keys, i);
		const char *use = json_string_value(json_object_get(jwk, "use"));
		EVP_PKEY   *pkey = NULL;
		X509	   *cert;

		if (use == NULL || strcmp(use, "x509-svid") != 0 || jwk_pkey(jwk, &pkey) != BC_OK)
			continue;			/* ignored, as the check above ignored it */
		EVP_PKEY_free(pkey);
		cert = bc_spiffe_x5c_cert(jwk, NULL, 0, (long) i);
		if (cert != NULL && !sk_X509_push(roots, cert))
			X509_free(cert);
	}
	json_decref(doc);
	*out = roots;
	return BC_OK;
}
