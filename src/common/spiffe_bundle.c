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
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

/* The largest base64url member of a JWK we decode (an RSA modulus of 8192 bits). */
#define JWK_MEMBER_MAX 1024
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

/* A base64url member of jwk decoded into a BIGNUM; NULL when missing or malformed. */
static BIGNUM *
jwk_bn(json_t *jwk, const char *name, size_t *len)
{
	json_t	   *m = json_object_get(jwk, name);
	unsigned char buf[JWK_MEMBER_MAX];

	*len = 0;
	if (!json_is_string(m) ||
		bc_b64url_decode(json_string_value(m), json_string_length(m), buf, sizeof(buf), len) != BC_OK ||
		*len == 0)
		return NULL;
	return BN_bin2bn(buf, (int) *len, NULL);
}

/* The OpenSSL group name and coordinate length of a JWK crv; NULL when unknown. */
static const char *
ec_group(const char *crv, size_t *coord)
{
	if (strcmp(crv, "P-256") == 0)
		return *coord = 32, "prime256v1";
	if (strcmp(crv, "P-384") == 0)
		return *coord = 48, "secp384r1";
	if (strcmp(crv, "P-521") == 0)
		return *coord = 66, "secp521r1";
	return NULL;
}

/* An EC public key from crv, x, y (OpenSSL refuses a point off the curve). */
static int
ec_from_jwk(json_t *jwk, EVP_PKEY **out)
{
	const char *crv = json_string_value(json_object_get(jwk, "crv"));
	const char *x = json_string_value(json_object_get(jwk, "x"));
	const char *y = json_string_value(json_object_get(jwk, "y"));
	const char *group;
	size_t		coord = 0;
	unsigned char point[1 + 2 * 66];
	size_t		xl = 0,
				yl = 0;
	OSSL_PARAM	params[3];
	EVP_PKEY_CTX *ctx;
	int			rc = BC_EINVAL;

	if (crv == NULL || x == NULL || y == NULL || (group = ec_group(crv, &coord)) == NULL)
		return BC_EINVAL;
	point[0] = 0x04;
	if (bc_b64url_decode(x, strlen(x), point + 1, coord, &xl) != BC_OK || xl != coord ||
		bc_b64url_decode(y, strlen(y), point + 1 + coord, coord, &yl) != BC_OK || yl != coord)
		return BC_EINVAL;
	params[0] = OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, (char *) group, 0);
	params[1] = OSSL_PARAM_construct_octet_string(OSSL_PKEY_PARAM_PUB_KEY, point, 1 + 2 * coord);
	params[2] = OSSL_PARAM_construct_end();
	ctx = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
	if (ctx != NULL && EVP_PKEY_fromdata_init(ctx) == 1 &&
		EVP_PKEY_fromdata(ctx, out, EVP_PKEY_PUBLIC_KEY, params) == 1)
		rc = BC_OK;
	EVP_PKEY_CTX_free(ctx);
	ERR_clear_error();
	return rc;
}

/* An RSA public key from n and e, 2048 to 8192 bits. */
static int
rsa_from_jwk(json_t *jwk, EVP_PKEY **out)
{
	size_t		nl,
				el;
	BIGNUM	   *n = jwk_bn(jwk, "n", &nl);
	BIGNUM	   *e = jwk_bn(jwk, "e", &el);
	OSSL_PARAM_BLD *bld = NULL;
	OSSL_PARAM *params = NULL;
	EVP_PKEY_CTX *ctx = NULL;
	int			rc = BC_EINVAL;

	if (n == NULL || e == NULL || BN_num_bits(n) < 2048 || BN_num_bits(n) > 8192 ||
		!BN_is_odd(e) || BN_is_one(e) || el > 8)
		goto out;
	bld = OSSL_PARAM_BLD_new();
	if (bld == NULL || !OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, n) ||
		!OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, e) ||
		(params = OSSL_PARAM_BLD_to_param(bld)) == NULL)
		goto out;
	ctx = EVP_PKEY_CTX_new_from_name(NULL, "RSA", NULL);
	if (ctx != NULL && EVP_PKEY_fromdata_init(ctx) == 1 &&
		EVP_PKEY_fromdata(ctx, out, EVP_PKEY_PUBLIC_KEY, params) == 1)
		rc = BC_OK;
out:
	ERR_clear_error();
	EVP_PKEY_CTX_free(ctx);
	OSSL_PARAM_free(params);
	OSSL_PARAM_BLD_free(bld);
	BN_free(n);
	BN_free(e);
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
	if (strcmp(kty, "EC") == 0)
		return ec_from_jwk(jwk, out);
	if (strcmp(kty, "RSA") == 0)
		return rsa_from_jwk(jwk, out);
	return BC_EUNSUPPORTED;
}

/* The one certificate of an x509-svid key's x5c, or NULL (why says what is wrong). */
static X509 *
x5c_cert(json_t *jwk, char *why, size_t whylen, long i)
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
		return NULL;
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
			X509	   *cert = x5c_cert(jwk, why, whylen, (long) i);

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
		cert = x5c_cert(jwk, NULL, 0, (long) i);
		if (cert != NULL && !sk_X509_push(roots, cert))
			X509_free(cert);
	}
	json_decref(doc);
	*out = roots;
	return BC_OK;
}
