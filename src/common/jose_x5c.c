/*
 * jose_x5c.c: JWS compact serializations that carry their signer's X.509
 * chain in the protected header (RFC 7515 4.1.6 "x5c"), signed with ES256,
 * ES384, RS256 or PS256 (RFC 7518 3.3-3.5): what x509pop evidence is
 * (docs/attestors.md).  The seam beside jose.c, which keeps the ES256-only
 * JWS and the JWE of the service's own messages.
 *
 * Parsing is bounded before anything is parsed: the number of certificates
 * and the decoded size of each are checked first, then each certificate is
 * parsed and its key held to the limits, then the header's members.  What
 * failed is reported as a bc_x5c_fault beside the status, so a caller can
 * name the refusal.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>

#include "bc_common.h"

/* The decoded protected header: five certificates of 16 KiB in base64, and a little more. */
#define X5C_HEADER_MAX (128 * 1024)

/* The algorithm names, indexed by bc_jws_alg. */
static const char *const alg_names[] = {"ES256", "ES384", "RS256", "PS256"};

/* The name of alg ("ES256", ...), or NULL. */
const char *
bc_jws_alg_name(int alg)
{
	if (alg < 0 || alg >= (int) (sizeof(alg_names) / sizeof(alg_names[0])))
		return NULL;
	return alg_names[alg];
}

/* 1 when key is an EC key on the curve named nid. */
static int
ec_curve_is(const EVP_PKEY *key, int nid)
{
	char		name[64];
	size_t		len = 0;

	if (EVP_PKEY_get_base_id(key) != EVP_PKEY_EC)
		return 0;
	if (EVP_PKEY_get_utf8_string_param(key, OSSL_PKEY_PARAM_GROUP_NAME, name, sizeof(name),
									   &len) != 1)
	{
		ERR_clear_error();
		return 0;
	}
	return OBJ_sn2nid(name) == nid || OBJ_ln2nid(name) == nid ||
		EC_curve_nist2nid(name) == nid;
}

/* Hold a certificate's key to the limits: P-256, P-384, or RSA of 2048 to 8192 bits. */
int
bc_x5c_key_fault(const EVP_PKEY *key)
{
	if (key == NULL)
		return BC_X5C_KEY_TYPE;
	if (EVP_PKEY_get_base_id(key) == EVP_PKEY_RSA)
	{
		int			bits = EVP_PKEY_get_bits(key);

		if (bits < BC_X5C_RSA_MIN_BITS)
			return BC_X5C_WEAK_KEY;
		if (bits > BC_X5C_RSA_MAX_BITS)
			return BC_X5C_HUGE_KEY;
		return BC_X5C_NONE;
	}
	if (ec_curve_is(key, NID_X9_62_prime256v1) || ec_curve_is(key, NID_secp384r1))
		return BC_X5C_NONE;
	return BC_X5C_KEY_TYPE;
}

/* 1 when alg is one the key may sign with. */
static int
alg_fits_key(int alg, const EVP_PKEY *key)
{
	switch (alg)
	{
		case BC_JWS_ES256:
			return ec_curve_is(key, NID_X9_62_prime256v1);
		case BC_JWS_ES384:
			return ec_curve_is(key, NID_secp384r1);
		case BC_JWS_RS256:
		case BC_JWS_PS256:
			return EVP_PKEY_get_base_id(key) == EVP_PKEY_RSA;
	}
	return 0;
}

/* Release what a parse handed back; safe on a zeroed or half-filled struct. */
void
bc_x5c_jws_free(bc_x5c_jws *j)
{
	size_t		i;

	if (j == NULL)
		return;
	for (i = 0; i < BC_X5C_CERTS_MAX; i++)
	{
		X509_free(j->certs[i]);
		j->certs[i] = NULL;
	}
	free(j->payload);
	free(j->sig);
	memset(j, 0, sizeof(*j));
}

/* Decode n base64url characters into a fresh NUL-terminated buffer of at most cap bytes. */
static int
b64url_alloc(const char *in, size_t n, size_t cap, unsigned char **out, size_t *len)
{
	size_t		max = bc_b64url_decoded_maxlen(n);
	unsigned char *buf;
	int			rc;

	*out = NULL;
	*len = 0;
	if (max > cap)
		return BC_ETOOBIG;
	buf = malloc(max + 1);
	if (buf == NULL)
		return BC_ENOMEM;
	rc = bc_b64url_decode(in, n, buf, max, len);
	if (rc != BC_OK)
	{
		free(buf);
		return rc;
	}
	buf[*len] = '\0';
	*out = buf;
	return BC_OK;
}

/* Fail with status rc and fault f. */
#define FAIL(rc_, f_) do { rc = (rc_); *fault = (f_); goto out; } while (0)

/*
 * Parse an x5c JWS compact serialization of n bytes: split, decode the
 * header (a JSON object without duplicate members), bound x5c (at most
 * BC_X5C_CERTS_MAX entries of at most BC_X5C_CERT_MAX decoded bytes each,
 * counted before any is parsed), parse every certificate and hold its key to
 * the limits, then the header's members (exactly alg and x5c, optionally a
 * string typ; alg one of the four and fitting the leaf key), then decode the
 * payload (at most max_payload) and the signature (ECDSA: exactly the
 * fixed width of R||S).
 */
int
bc_jws_x5c_parse(const char *jws, size_t n, size_t max_payload, bc_x5c_jws *j, int *fault)
{
	const char *dot1;
	const char *dot2;
	unsigned char *hraw = NULL;
	size_t		hlen = 0;
	json_t	   *hdr = NULL;
	json_t	   *x5c;
	json_t	   *alg;
	json_t	   *typ;
	size_t		nx5c;
	size_t		i;
	unsigned char *der = NULL;
	size_t		der_len = 0;
	const char *key;
	json_t	   *val;
	json_error_t jerr;
	int			rc = BC_OK;

	memset(j, 0, sizeof(*j));
	*fault = BC_X5C_NONE;
	if (n > BC_JOSE_MAX)
		FAIL(BC_ETOOBIG, BC_X5C_MALFORMED);
	if (memchr(jws, '\0', n) != NULL)
		FAIL(BC_EINVAL, BC_X5C_MALFORMED);
	dot1 = memchr(jws, '.', n);
	dot2 = dot1 ? memchr(dot1 + 1, '.', n - (size_t) (dot1 + 1 - jws)) : NULL;
	if (dot2 == NULL || memchr(dot2 + 1, '.', n - (size_t) (dot2 + 1 - jws)) != NULL)
		FAIL(BC_EINVAL, BC_X5C_MALFORMED);

	/* The header as JSON, nothing of it interpreted yet. */
	rc = b64url_alloc(jws, (size_t) (dot1 - jws), X5C_HEADER_MAX, &hraw, &hlen);
	if (rc != BC_OK)
		FAIL(rc, BC_X5C_MALFORMED);
	hdr = json_loadb((const char *) hraw, hlen, JSON_REJECT_DUPLICATES, &jerr);
	if (!json_is_object(hdr))
		FAIL(BC_EINVAL, BC_X5C_MALFORMED);

	/* Bounds first: how many certificates, how big each is once decoded. */
	x5c = json_object_get(hdr, "x5c");
	if (!json_is_array(x5c) || json_array_size(x5c) == 0)
		FAIL(BC_EINVAL, BC_X5C_MALFORMED);
	nx5c = json_array_size(x5c);
	if (nx5c > BC_X5C_CERTS_MAX)
		FAIL(BC_ETOOBIG, BC_X5C_TOO_MANY_INTERMEDIATES);
	for (i = 0; i < nx5c; i++)
	{
		json_t	   *e = json_array_get(x5c, i);
		size_t		len;

		if (!json_is_string(e))
			FAIL(BC_EINVAL, BC_X5C_MALFORMED);
		len = json_string_length(e);
		if (len % 4 != 0)
			FAIL(BC_EINVAL, BC_X5C_MALFORMED);
		/* The decoded size, from the length and the padding alone. */
		if (len / 4 * 3 - (len >= 1 && json_string_value(e)[len - 1] == '=') -
			(len >= 2 && json_string_value(e)[len - 2] == '=') > BC_X5C_CERT_MAX)
			FAIL(BC_ETOOBIG, BC_X5C_OVERSIZED_CERT);
	}

	/* Then each certificate, and its key held to the limits. */
	der = malloc(BC_X5C_CERT_MAX + 3);
	if (der == NULL)
		FAIL(BC_ENOMEM, BC_X5C_MALFORMED);
	for (i = 0; i < nx5c; i++)
	{
		json_t	   *e = json_array_get(x5c, i);
		int			kf;

		rc = bc_b64_decode(json_string_value(e), json_string_length(e), der,
						   BC_X5C_CERT_MAX + 3, &der_len);
		if (rc != BC_OK)
			FAIL(BC_EINVAL, BC_X5C_MALFORMED);
		rc = bc_cert_parse(der, der_len, &j->certs[i]);
		if (rc != BC_OK)
			FAIL(rc, rc == BC_ETOOBIG ? BC_X5C_OVERSIZED_CERT : BC_X5C_MALFORMED);
		j->ncerts = i + 1;
		kf = bc_x5c_key_fault(X509_get0_pubkey(j->certs[i]));
		if (kf != BC_X5C_NONE)
			FAIL(BC_EUNSUPPORTED, kf);
	}

	/* The header: exactly alg and x5c, optionally typ. */
	json_object_foreach(hdr, key, val)
	{
		if (strcmp(key, "alg") != 0 && strcmp(key, "x5c") != 0 && strcmp(key, "typ") != 0)
			FAIL(BC_EINVAL, BC_X5C_MALFORMED);
	}
	typ = json_object_get(hdr, "typ");
	if (typ != NULL && !json_is_string(typ))
		FAIL(BC_EINVAL, BC_X5C_MALFORMED);
	alg = json_object_get(hdr, "alg");
	if (!json_is_string(alg))
		FAIL(BC_EINVAL, BC_X5C_MALFORMED);
	j->alg = -1;
	for (i = 0; i < sizeof(alg_names) / sizeof(alg_names[0]); i++)
	{
		if (strcmp(json_string_value(alg), alg_names[i]) == 0)
			j->alg = (int) i;
	}
	if (j->alg < 0)
		FAIL(BC_EUNSUPPORTED, BC_X5C_MALFORMED);
	if (!alg_fits_key(j->alg, X509_get0_pubkey(j->certs[0])))
		FAIL(BC_EUNSUPPORTED, BC_X5C_ALG_MISMATCH);

	/* The payload and the signature, decoded. */
	rc = b64url_alloc(dot1 + 1, (size_t) (dot2 - dot1 - 1), max_payload, &j->payload,
					  &j->payload_len);
	if (rc != BC_OK)
		FAIL(rc, BC_X5C_MALFORMED);
	rc = b64url_alloc(dot2 + 1, n - (size_t) (dot2 + 1 - jws), BC_X5C_SIG_MAX, &j->sig,
					  &j->sig_len);
	if (rc != BC_OK)
		FAIL(rc == BC_ETOOBIG ? BC_EINVAL : rc, BC_X5C_MALFORMED);
	if ((j->alg == BC_JWS_ES256 && j->sig_len != 64) ||
		(j->alg == BC_JWS_ES384 && j->sig_len != 96))
		FAIL(BC_EINVAL, BC_X5C_MALFORMED);
	j->signing_input_len = (size_t) (dot2 - jws);
	rc = BC_OK;
out:
	free(der);
	free(hraw);
	json_decref(hdr);
	if (rc != BC_OK)
	{
		ERR_clear_error();
		bc_x5c_jws_free(j);
	}
	return rc;
}

#undef FAIL

/* The digest context of alg for key, to sign (verifying is jose.c's bc_jws_alg_verify). */
static EVP_MD_CTX *
alg_md_ctx(int alg, EVP_PKEY *key)
{
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	EVP_PKEY_CTX *pctx = NULL;
	const EVP_MD *h = alg == BC_JWS_ES384 ? EVP_sha384() : EVP_sha256();
	int			ok;

	if (md == NULL)
		return NULL;
	ok = EVP_DigestSignInit(md, &pctx, h, NULL, key) == 1;
	if (ok && alg == BC_JWS_PS256)
		ok = EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) == 1 &&
			EVP_PKEY_CTX_set_rsa_mgf1_md(pctx, EVP_sha256()) == 1 &&
			EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, 32) == 1;
	else if (ok && (alg == BC_JWS_RS256))
		ok = EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PADDING) == 1;
	if (!ok)
	{
		EVP_MD_CTX_free(md);
		return NULL;
	}
	return md;
}

/*
 * Verify the signature of a parsed x5c JWS (jws as parsed) with its leaf's
 * key: BC_OK or BC_EVERIFY (BC_ECRYPTO when OpenSSL fails).  jose.c's
 * bc_jws_alg_verify checks it: ECDSA's R||S turned into DER; PS256 with
 * MGF1-SHA-256 and a salt of the digest's length, 32 bytes.
 */
int
bc_jws_x5c_verify(const bc_x5c_jws *j, const char *jws)
{
	EVP_PKEY   *pub;
	int			rc;

	if (j->ncerts == 0 || j->sig == NULL)
		return BC_EINVAL;
	pub = X509_get0_pubkey(j->certs[0]);
	if (pub == NULL)
		return BC_EINVAL;
	rc = bc_jws_alg_verify(bc_jws_alg_name(j->alg), pub, jws, j->signing_input_len, j->sig,
						   j->sig_len);
	ERR_clear_error();
	return rc == BC_OK || rc == BC_ECRYPTO ? rc : BC_EVERIFY;
}

/*
 * Sign payload as an x5c JWS with key (whose certificate is chain[0]) and
 * alg; header {"alg":..,"x5c":[chain as standard base64 DER]}.  ECDSA
 * signatures are written as fixed-width R||S.
 */
int
bc_jws_sign_x5c(EVP_PKEY *key, int alg, X509 *const *chain, size_t nchain,
				const unsigned char *payload, size_t n, char **jws_out)
{
	json_t	   *hdr = NULL;
	json_t	   *arr = NULL;
	char	   *htext = NULL;
	char	   *jws = NULL;
	unsigned char *sig = NULL;
	size_t		sig_len = 0;
	unsigned char *raw = NULL;
	EVP_MD_CTX *md = NULL;
	ECDSA_SIG  *esig = NULL;
	size_t		used;
	size_t		total;
	size_t		i;
	int			rc = BC_EUNSUPPORTED;

	*jws_out = NULL;
	if (bc_jws_alg_name(alg) == NULL || nchain == 0 || nchain > BC_X5C_CERTS_MAX ||
		!alg_fits_key(alg, key))
		goto out;
	rc = BC_ETOOBIG;
	if (n > BC_JOSE_MAX)
		goto out;
	rc = BC_ENOMEM;
	arr = json_array();
	hdr = json_object();
	if (arr == NULL || hdr == NULL ||
		json_object_set_new(hdr, "alg", json_string(bc_jws_alg_name(alg))) != 0)
		goto out;
	for (i = 0; i < nchain; i++)
	{
		unsigned char *der = NULL;
		size_t		der_len = 0;
		char	   *b64;

		rc = bc_cert_der(chain[i], &der, &der_len);
		if (rc != BC_OK)
			goto out;
		rc = BC_ENOMEM;
		b64 = malloc(bc_b64_encoded_len(der_len) + 1);
		if (b64 == NULL)
		{
			free(der);
			goto out;
		}
		bc_b64_encode(der, der_len, b64);
		free(der);
		if (json_array_append_new(arr, json_string(b64)) != 0)
		{
			free(b64);
			goto out;
		}
		free(b64);
	}
	if (json_object_set(hdr, "x5c", arr) != 0)
		goto out;
	htext = json_dumps(hdr, JSON_COMPACT | JSON_PRESERVE_ORDER);
	if (htext == NULL)
		goto out;
	total = bc_b64url_encoded_len(strlen(htext)) + 1 + bc_b64url_encoded_len(n) + 1 +
		bc_b64url_encoded_len(BC_X5C_SIG_MAX);
	rc = BC_ETOOBIG;
	if (total > BC_JOSE_MAX)
		goto out;
	rc = BC_ENOMEM;
	jws = malloc(total + 1);
	if (jws == NULL)
		goto out;
	used = bc_b64url_encode((const unsigned char *) htext, strlen(htext), jws);
	jws[used++] = '.';
	used += bc_b64url_encode(payload, n, jws + used);

	rc = BC_ECRYPTO;
	md = alg_md_ctx(alg, key);
	if (md == NULL || EVP_DigestSign(md, NULL, &sig_len, (const unsigned char *) jws, used) != 1)
		goto out;
	sig = malloc(sig_len);
	if (sig == NULL || EVP_DigestSign(md, sig, &sig_len, (const unsigned char *) jws, used) != 1)
		goto out;
	if (alg == BC_JWS_ES256 || alg == BC_JWS_ES384)
	{
		const unsigned char *p = sig;
		size_t		half = alg == BC_JWS_ES256 ? 32 : 48;
		const BIGNUM *r;
		const BIGNUM *s;

		esig = d2i_ECDSA_SIG(NULL, &p, (long) sig_len);
		raw = malloc(2 * half);
		if (esig == NULL || raw == NULL)
			goto out;
		ECDSA_SIG_get0(esig, &r, &s);
		if (BN_bn2binpad(r, raw, (int) half) != (int) half ||
			BN_bn2binpad(s, raw + half, (int) half) != (int) half)
			goto out;
		free(sig);
		sig = raw;
		raw = NULL;
		sig_len = 2 * half;
	}
	jws[used++] = '.';
	bc_b64url_encode(sig, sig_len, jws + used);
	*jws_out = jws;
	jws = NULL;
	rc = BC_OK;
out:
	ERR_clear_error();
	ECDSA_SIG_free(esig);
	EVP_MD_CTX_free(md);
	free(raw);
	free(sig);
	free(jws);
	free(htext);
	json_decref(arr);
	json_decref(hdr);
	return rc;
}
