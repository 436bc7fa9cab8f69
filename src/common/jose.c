/*
 * jose.c: JWS compact serialization with ES256 (RFC 7515, RFC 7518 3.4) and
 * JWE compact serialization with ECDH-ES + A256GCM (RFC 7516, RFC 7518 4.6).
 * Verification only, for the bundles of federated trust domains (whose
 * servers may sign with RSA): RS256..RS512, PS256..PS512, ES256..ES512,
 * each through OpenSSL's EVP with the digest, padding and curve RFC 7518
 * section 3 names (bc_jws_verify_any, bc_pkey_from_jwk_any).
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>

#include "bc_common.h"

/* Bound of a decoded protected header. */
#define JOSE_HEADER_MAX 4096
/* Bound of a decoded apu or apv. */
#define JOSE_PARTY_INFO_MAX 1024
/* Bytes of r and of s in an ES256 signature. */
#define ES256_HALF 32
#define ES256_SIG_LEN (2 * ES256_HALF)
/* A DER ECDSA-Sig-Value over P-256: SEQUENCE of two INTEGERs of up to 33 bytes. */
#define ES256_DER_MAX 72
/* AES-256-GCM parameters of A256GCM. */
#define GCM_KEY_LEN 32
#define GCM_IV_LEN 12
#define GCM_TAG_LEN 16
/* The five dot-separated parts of a JWE, the three of a JWS. */
#define JWE_PARTS 5
#define JWS_PARTS 3

/* One segment of a compact serialization. */
typedef struct jose_part
{
	const char *text;
	size_t		len;
} jose_part;

/*
 * Split a compact serialization into exactly nparts dot-separated parts.
 * BC_EINVAL for any other count.
 */
static int
split_compact(const char *s, size_t n, jose_part *parts, int nparts)
{
	int			count = 0;
	size_t		start = 0;
	size_t		i;

	for (i = 0; i <= n; i++)
	{
		if (i == n || s[i] == '.')
		{
			if (count == nparts)
				return BC_EINVAL;
			parts[count].text = s + start;
			parts[count].len = i - start;
			count++;
			start = i + 1;
		}
		else if (s[i] == '\0')
			return BC_EINVAL;
	}
	return count == nparts ? BC_OK : BC_EINVAL;
}

/* Decode a base64url part into a fresh buffer (NUL-terminated); over cap is BC_ETOOBIG. */
static int
decode_part(const jose_part *part, size_t cap, unsigned char **out, size_t *len)
{
	unsigned char *buf;
	size_t		max = bc_b64url_decoded_maxlen(part->len);
	int			rc;

	*out = NULL;
	*len = 0;
	if (max > cap)
		return part->len % 4 == 1 ? BC_EINVAL : BC_ETOOBIG;
	buf = malloc(max + 1);
	if (buf == NULL)
		return BC_ENOMEM;
	rc = bc_b64url_decode(part->text, part->len, buf, max, len);
	if (rc != BC_OK)
	{
		bc_free_secret(buf, max + 1);
		return rc;
	}
	buf[*len] = '\0';
	*out = buf;
	return BC_OK;
}

/* Decode and parse a protected header; it must be a JSON object without duplicates. */
static int
parse_header(const jose_part *part, json_t **out)
{
	unsigned char *raw = NULL;
	size_t		len = 0;
	json_error_t jerr;
	json_t	   *hdr;
	int			rc;

	*out = NULL;
	rc = decode_part(part, JOSE_HEADER_MAX, &raw, &len);
	if (rc != BC_OK)
		return rc;
	hdr = json_loadb((const char *) raw, len, JSON_REJECT_DUPLICATES, &jerr);
	free(raw);
	if (!json_is_object(hdr))
	{
		json_decref(hdr);
		return BC_EINVAL;
	}
	*out = hdr;
	return BC_OK;
}

/* 1 when member name of obj is a string equal to want. */
static int
member_is(json_t *obj, const char *name, const char *want)
{
	json_t	   *member = json_object_get(obj, name);

	return json_is_string(member) && strcmp(json_string_value(member), want) == 0;
}

/* base64url(json) of a header object, malloc()ed. */
static int
encode_header(json_t *hdr, char **out, size_t *out_len)
{
	char	   *text = json_dumps(hdr, JSON_COMPACT | JSON_PRESERVE_ORDER);
	size_t		len;

	*out = NULL;
	if (text == NULL)
		return BC_ENOMEM;
	len = strlen(text);
	*out = bc_b64url_encode_alloc((const unsigned char *) text, len);
	free(text);
	if (*out == NULL)
		return BC_ENOMEM;
	*out_len = bc_b64url_encoded_len(len);
	return BC_OK;
}

/* ES256 signature of data as raw r||s (RFC 7518 3.4). */
static int
es256_sign(EVP_PKEY *key, const char *data, size_t n,
		   unsigned char sig[ES256_SIG_LEN])
{
	EVP_MD_CTX *md = NULL;
	unsigned char der[ES256_DER_MAX];
	const unsigned char *p;
	size_t		der_len = sizeof(der);
	ECDSA_SIG  *esig = NULL;
	const BIGNUM *r;
	const BIGNUM *s;
	char		props[64];
	int			rc = BC_ECRYPTO;

	md = bc_ossl_cache_sign_ctx(key);
	if (md == NULL)
	{
		md = EVP_MD_CTX_new();
		if (md == NULL)
			goto out;
		rc = BC_EKEY;
		if (EVP_DigestSignInit_ex(md, NULL, "SHA256", bc_pkey_libctx(key),
								  bc_pkey_sign_props(key, props, sizeof(props)),
								  key, NULL) != 1)
			goto out;
	}
	/* One call: the buffer holds any P-256 ECDSA signature (no size query). */
	rc = BC_EKEY;
	if (EVP_DigestSign(md, der, &der_len, (const unsigned char *) data, n) != 1)
		goto out;
	rc = BC_ECRYPTO;
	p = der;
	esig = d2i_ECDSA_SIG(NULL, &p, (long) der_len);
	if (esig == NULL)
		goto out;
	ECDSA_SIG_get0(esig, &r, &s);
	if (BN_bn2binpad(r, sig, ES256_HALF) != ES256_HALF ||
		BN_bn2binpad(s, sig + ES256_HALF, ES256_HALF) != ES256_HALF)
		goto out;
	rc = BC_OK;
out:
	ECDSA_SIG_free(esig);
	EVP_MD_CTX_free(md);
	return rc;
}

/* Verify a raw r||s ES256 signature over data: BC_OK or BC_EVERIFY. */
static int
es256_verify(EVP_PKEY *pub, const char *data, size_t n,
			 const unsigned char sig[ES256_SIG_LEN])
{
	EVP_MD_CTX *md = NULL;
	unsigned char *der = NULL;
	size_t		der_len = 0;
	int			rc;

	rc = bc_ecdsa_sig_to_der(sig, ES256_HALF, sig + ES256_HALF, ES256_HALF, &der, &der_len);
	if (rc != BC_OK)
		return rc == BC_EVERIFY ? BC_EVERIFY : BC_ECRYPTO;
	rc = BC_ECRYPTO;
	md = EVP_MD_CTX_new();
	if (md == NULL || EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, pub) != 1)
		goto out;
	rc = EVP_DigestVerify(md, der, der_len, (const unsigned char *) data, n) == 1 ?
		BC_OK : BC_EVERIFY;
out:
	if (rc != BC_OK)
		ERR_clear_error();
	EVP_MD_CTX_free(md);
	free(der);
	return rc;
}

/* JWS compact serialization, ES256, header {"alg":"ES256","kid":kid}. */
int
bc_jws_sign_es256(EVP_PKEY *key, const char *kid,
				  const unsigned char *payload, size_t n, char **jws_out)
{
	return bc_jws_sign_es256_typ(key, kid, NULL, payload, n, jws_out);
}

/* The same, header {"alg":"ES256","kid":kid,"typ":typ} (typ omitted when NULL). */
int
bc_jws_sign_es256_typ(EVP_PKEY *key, const char *kid, const char *typ,
					  const unsigned char *payload, size_t n, char **jws_out)
{
	json_t	   *hdr = NULL;
	char	   *hdr64 = NULL;
	size_t		hdr64_len = 0;
	char	   *jws = NULL;
	size_t		total;
	size_t		used;
	unsigned char sig[ES256_SIG_LEN];
	int			rc = BC_EKEY;

	/* The signer's own key: a key in a TPM may not even say its curve while the TPM is away. */
	*jws_out = NULL;
	if (!bc_pkey_is_p256(key))
		goto out;
	rc = BC_ETOOBIG;
	if (n > BC_JOSE_MAX)
		goto out;
	rc = BC_ENOMEM;
	hdr = json_pack("{s:s}", "alg", "ES256");
	if (hdr == NULL)
		goto out;
	if (kid != NULL && json_object_set_new(hdr, "kid", json_string(kid)) != 0)
	{
		rc = BC_EINVAL;			/* not UTF-8 */
		goto out;
	}
	if (typ != NULL && json_object_set_new(hdr, "typ", json_string(typ)) != 0)
	{
		rc = BC_EINVAL;			/* not UTF-8 */
		goto out;
	}
	rc = encode_header(hdr, &hdr64, &hdr64_len);
	if (rc != BC_OK)
		goto out;
	total = hdr64_len + 1 + bc_b64url_encoded_len(n) + 1 +
		bc_b64url_encoded_len(ES256_SIG_LEN);
	rc = BC_ETOOBIG;
	if (total > BC_JOSE_MAX)
		goto out;
	rc = BC_ENOMEM;
	jws = malloc(total + 1);
	if (jws == NULL)
		goto out;
	memcpy(jws, hdr64, hdr64_len);
	used = hdr64_len;
	jws[used++] = '.';
	used += bc_b64url_encode(payload, n, jws + used);
	rc = es256_sign(key, jws, used, sig);
	if (rc != BC_OK)
		goto out;
	jws[used++] = '.';
	bc_b64url_encode(sig, sizeof(sig), jws + used);
	*jws_out = jws;
	jws = NULL;
	rc = BC_OK;
out:
	free(jws);
	free(hdr64);
	json_decref(hdr);
	return rc;
}

/* The kid of a JWS compact serialization's protected header, unverified. */
int
bc_jws_header_kid(const char *jws, size_t n, char *kid, size_t kidlen)
{
	jose_part	parts[JWS_PARTS];
	json_t	   *hdr = NULL;
	json_t	   *member;
	int			rc;

	if (kidlen == 0)
		return BC_EINVAL;
	kid[0] = '\0';
	if (n > BC_JOSE_MAX)
		return BC_ETOOBIG;
	rc = split_compact(jws, n, parts, JWS_PARTS);
	if (rc == BC_OK)
		rc = parse_header(&parts[0], &hdr);
	if (rc != BC_OK)
		return rc;
	member = json_object_get(hdr, "kid");
	if (member != NULL)
	{
		rc = BC_EINVAL;
		if (json_is_string(member) && json_string_length(member) < kidlen)
		{
			memcpy(kid, json_string_value(member), json_string_length(member) + 1);
			rc = BC_OK;
		}
	}
	json_decref(hdr);
	return rc;
}

/* Verify an ES256 JWS compact serialization and hand back its payload. */
int
bc_jws_verify_es256(EVP_PKEY *pub, const char *jws, size_t n,
					size_t max_payload,
					unsigned char **payload_out, size_t *payload_len)
{
	jose_part	parts[JWS_PARTS];
	json_t	   *hdr = NULL;
	unsigned char sig[ES256_SIG_LEN + 3];
	size_t		sig_len = 0;
	unsigned char *payload = NULL;
	size_t		len = 0;
	int			rc;

	*payload_out = NULL;
	*payload_len = 0;
	if (!bc_pkey_is_p256(pub))
		return BC_EUNSUPPORTED;
	if (n > BC_JOSE_MAX)
		return BC_ETOOBIG;
	rc = split_compact(jws, n, parts, JWS_PARTS);
	if (rc != BC_OK)
		goto out;
	rc = parse_header(&parts[0], &hdr);
	if (rc != BC_OK)
		goto out;
	rc = BC_EUNSUPPORTED;
	if (!member_is(hdr, "alg", "ES256") || json_object_get(hdr, "crit") != NULL)
		goto out;
	rc = bc_b64url_decode(parts[2].text, parts[2].len, sig, sizeof(sig), &sig_len);
	if (rc == BC_ETOOBIG || (rc == BC_OK && sig_len != ES256_SIG_LEN))
		rc = BC_EINVAL;
	if (rc != BC_OK)
		goto out;
	/* Check the payload encoding before the (costlier) signature. */
	if (bc_b64url_decoded_maxlen(parts[1].len) > max_payload)
	{
		rc = parts[1].len % 4 == 1 ? BC_EINVAL : BC_ETOOBIG;
		goto out;
	}
	rc = decode_part(&parts[1], max_payload, &payload, &len);
	if (rc != BC_OK)
		goto out;
	rc = es256_verify(pub, jws, parts[0].len + 1 + parts[1].len, sig);
	if (rc != BC_OK)
		goto out;
	*payload_out = payload;
	*payload_len = len;
	payload = NULL;
out:
	free(payload);
	json_decref(hdr);
	return rc;
}

/*
 * Concat KDF (NIST SP 800-56A, RFC 7518 4.6.2) of the shared secret z for
 * enc A256GCM: 256 bits of key from SHA-256 rounds over
 * counter || Z || AlgorithmID || PartyUInfo || PartyVInfo || SuppPubInfo.
 */
static int
concat_kdf_a256gcm(const unsigned char *z, size_t z_len,
				   const unsigned char *apu, size_t apu_len,
				   const unsigned char *apv, size_t apv_len,
				   unsigned char key[GCM_KEY_LEN])
{
	static const char enc[] = "A256GCM";
	EVP_MD_CTX *md = NULL;
	unsigned char digest[BC_SHA256_LEN];
	unsigned char be32[4];
	uint32_t	counter;
	size_t		done = 0;
	int			rc = BC_ECRYPTO;

#define PUT_BE32(buf, v) \
	((buf)[0] = (unsigned char) ((v) >> 24), (buf)[1] = (unsigned char) ((v) >> 16), \
	 (buf)[2] = (unsigned char) ((v) >> 8), (buf)[3] = (unsigned char) (v))

	md = EVP_MD_CTX_new();
	if (md == NULL)
		goto out;
	for (counter = 1; done < GCM_KEY_LEN; counter++)
	{
		size_t		take;
		int			ok;

		PUT_BE32(be32, counter);
		ok = EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 &&
			EVP_DigestUpdate(md, be32, 4) == 1 &&
			EVP_DigestUpdate(md, z, z_len) == 1;
		PUT_BE32(be32, (uint32_t) (sizeof(enc) - 1));
		ok = ok && EVP_DigestUpdate(md, be32, 4) == 1 &&
			EVP_DigestUpdate(md, enc, sizeof(enc) - 1) == 1;
		PUT_BE32(be32, (uint32_t) apu_len);
		ok = ok && EVP_DigestUpdate(md, be32, 4) == 1 &&
			(apu_len == 0 || EVP_DigestUpdate(md, apu, apu_len) == 1);
		PUT_BE32(be32, (uint32_t) apv_len);
		ok = ok && EVP_DigestUpdate(md, be32, 4) == 1 &&
			(apv_len == 0 || EVP_DigestUpdate(md, apv, apv_len) == 1);
		PUT_BE32(be32, (uint32_t) (GCM_KEY_LEN * 8));
		ok = ok && EVP_DigestUpdate(md, be32, 4) == 1 &&
			EVP_DigestFinal_ex(md, digest, NULL) == 1;
		if (!ok)
			goto out;
		take = GCM_KEY_LEN - done;
		if (take > sizeof(digest))
			take = sizeof(digest);
		memcpy(key + done, digest, take);
		done += take;
	}
	rc = BC_OK;
#undef PUT_BE32
out:
	OPENSSL_cleanse(digest, sizeof(digest));
	EVP_MD_CTX_free(md);
	return rc;
}

/*
 * ECDH shared secret of priv and peer (both P-256, peer checked on the curve
 * when built) into z.  A valid peer cannot make it fail: a failure is the
 * private key's provider or engine (BC_EKEY).
 */
static int
ecdh_p256(EVP_PKEY *priv, EVP_PKEY *peer, unsigned char z[32])
{
	EVP_PKEY_CTX *ctx = NULL;
	size_t		z_len = 32;
	int			rc = BC_EKEY;

	EVP_PKEY_CTX *cached = bc_ossl_cache_derive_ctx(priv);
	char		props[64];

	ctx = cached;
	if (ctx == NULL)
	{
		/* A key in a provider of its own (a TPM's) derives there. */
		ctx = EVP_PKEY_CTX_new_from_pkey(bc_pkey_libctx(priv), priv,
										 bc_pkey_sign_props(priv, props, sizeof(props)));
		if (ctx == NULL || EVP_PKEY_derive_init(ctx) != 1)
			goto out;
	}
	if (EVP_PKEY_derive_set_peer_ex(ctx, peer, 0) != 1 ||	/* validated when built */
		EVP_PKEY_derive(ctx, z, &z_len) != 1 || z_len != 32)
		goto out;
	rc = BC_OK;
out:
	if (ctx != cached)
		EVP_PKEY_CTX_free(ctx);
	return rc;
}

/* AES-256-GCM with a 12-byte IV and a 16-byte tag; decrypt=1 checks the tag. */
static int
aes256gcm(int decrypt, const unsigned char key[GCM_KEY_LEN],
		  const unsigned char iv[GCM_IV_LEN], const char *aad, size_t aad_len,
		  const unsigned char *in, size_t n, unsigned char *out,
		  unsigned char tag[GCM_TAG_LEN])
{
	EVP_CIPHER_CTX *ctx = NULL;
	int			len = 0;
	int			rc = BC_ECRYPTO;

	if (n > BC_JOSE_MAX || aad_len > BC_JOSE_MAX)
		return BC_ETOOBIG;
	ctx = EVP_CIPHER_CTX_new();
	if (ctx == NULL ||
		EVP_CipherInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL, !decrypt) != 1 ||
		EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, GCM_IV_LEN, NULL) != 1 ||
		EVP_CipherInit_ex(ctx, NULL, NULL, key, iv, !decrypt) != 1 ||
		EVP_CipherUpdate(ctx, NULL, &len, (const unsigned char *) aad,
						 (int) aad_len) != 1)
		goto out;
	if (n > 0 && EVP_CipherUpdate(ctx, out, &len, in, (int) n) != 1)
		goto out;
	if (decrypt)
	{
		if (EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, GCM_TAG_LEN, tag) != 1)
			goto out;
		rc = BC_EVERIFY;
		if (EVP_CipherFinal_ex(ctx, out + (n > 0 ? len : 0), &len) != 1)
			goto out;
	}
	else if (EVP_CipherFinal_ex(ctx, out + (n > 0 ? len : 0), &len) != 1 ||
			 EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, GCM_TAG_LEN, tag) != 1)
		goto out;
	rc = BC_OK;
out:
	if (rc != BC_OK)
		ERR_clear_error();
	EVP_CIPHER_CTX_free(ctx);
	return rc;
}

/* Names a caller may not use for its extra JWE header member. */
static int
is_reserved_jwe_member(const char *name)
{
	static const char *const reserved[] = {
		"alg", "enc", "epk", "zip", "crit", "apu", "apv", "kid", "jku", "jwk",
		"x5u", "x5c", "x5t", "x5t#S256", "typ", "cty", NULL
	};
	int			i;

	for (i = 0; reserved[i] != NULL; i++)
	{
		if (strcmp(name, reserved[i]) == 0)
			return 1;
	}
	return 0;
}

/* Append a '.' and the base64url of data[0..n) at buf + *used. */
static void
append_part(char *buf, size_t *used, const unsigned char *data, size_t n)
{
	buf[(*used)++] = '.';
	*used += bc_b64url_encode(data, n, buf + *used);
}

/* JWE compact serialization, ECDH-ES + A256GCM, to a P-256 public key. */
int
bc_jwe_seal(EVP_PKEY *recipient, const char *hdr_name, const char *hdr_value,
			const unsigned char *pt, size_t n, char **jwe_out)
{
	EVP_PKEY   *eph = NULL;
	char	   *epk_text = NULL;
	json_t	   *epk = NULL;
	json_t	   *hdr = NULL;
	json_error_t jerr;
	char	   *hdr64 = NULL;
	size_t		hdr64_len = 0;
	unsigned char z[32];
	unsigned char cek[GCM_KEY_LEN];
	unsigned char iv[GCM_IV_LEN];
	unsigned char tag[GCM_TAG_LEN];
	unsigned char *ct = NULL;
	char	   *jwe = NULL;
	unsigned char *point = NULL;
	size_t		point_len;
	EVP_PKEY   *peer = NULL;
	size_t		total;
	size_t		used;
	int			rc = BC_EUNSUPPORTED;

	*jwe_out = NULL;
	if (!bc_pkey_is_p256(recipient))
		goto out;
	/*
	 * Only the recipient's public point takes part: derive against a copy
	 * of it in the default provider, so that a recipient held by another
	 * provider (a TPM's key: Debian 13's OpenSSL 3.5 and tpm2-openssl 1.3
	 * do not derive with it as the peer) seals as a file's key does.  A
	 * provider that does not give the encoded point (Debian 12's
	 * tpm2-openssl 1.1) is its own peer, as before.
	 */
	rc = BC_ECRYPTO;
	point_len = EVP_PKEY_get1_encoded_public_key(recipient, &point);
	if (point_len == 0 || bc_p256_from_point(point, point_len, &peer) != BC_OK)
	{
		ERR_clear_error();
		if (EVP_PKEY_up_ref(recipient) != 1)
			goto out;
		peer = recipient;
	}
	rc = BC_EINVAL;
	if (hdr_name != NULL && (hdr_value == NULL || is_reserved_jwe_member(hdr_name)))
		goto out;
	rc = BC_ETOOBIG;
	if (n > BC_JOSE_MAX)
		goto out;
	rc = BC_ECRYPTO;
	eph = bc_p256_generate();
	if (eph == NULL)
		goto out;
	rc = bc_jwk_from_pkey(eph, &epk_text);
	if (rc != BC_OK)
		goto out;
	rc = BC_ENOMEM;
	epk = json_loads(epk_text, 0, &jerr);
	hdr = json_pack("{s:s, s:s, s:O}", "alg", "ECDH-ES", "enc", "A256GCM",
					"epk", epk);
	if (epk == NULL || hdr == NULL)
		goto out;
	if (hdr_name != NULL &&
		json_object_set_new(hdr, hdr_name, json_string(hdr_value)) != 0)
	{
		rc = BC_EINVAL;			/* not UTF-8 */
		goto out;
	}
	rc = encode_header(hdr, &hdr64, &hdr64_len);
	if (rc != BC_OK)
		goto out;
	total = hdr64_len + 2 + bc_b64url_encoded_len(GCM_IV_LEN) + 1 +
		bc_b64url_encoded_len(n) + 1 + bc_b64url_encoded_len(GCM_TAG_LEN);
	rc = BC_ETOOBIG;
	if (hdr64_len > JOSE_HEADER_MAX || total > BC_JOSE_MAX)
		goto out;
	rc = ecdh_p256(eph, peer, z);
	if (rc == BC_OK)
		rc = concat_kdf_a256gcm(z, sizeof(z), NULL, 0, NULL, 0, cek);
	if (rc != BC_OK)
		goto out;
	rc = BC_ECRYPTO;
	if (RAND_bytes(iv, sizeof(iv)) != 1)
		goto out;
	rc = BC_ENOMEM;
	ct = malloc(n + 1);
	jwe = malloc(total + 1);
	if (ct == NULL || jwe == NULL)
		goto out;
	rc = aes256gcm(0, cek, iv, hdr64, hdr64_len, pt, n, ct, tag);
	if (rc != BC_OK)
		goto out;
	memcpy(jwe, hdr64, hdr64_len);
	used = hdr64_len;
	jwe[used++] = '.';			/* empty encrypted key */
	append_part(jwe, &used, iv, sizeof(iv));
	append_part(jwe, &used, ct, n);
	append_part(jwe, &used, tag, sizeof(tag));
	*jwe_out = jwe;
	jwe = NULL;
	rc = BC_OK;
out:
	OPENSSL_cleanse(z, sizeof(z));
	OPENSSL_cleanse(cek, sizeof(cek));
	OPENSSL_free(point);
	EVP_PKEY_free(peer);
	free(jwe);
	free(ct);
	free(hdr64);
	json_decref(hdr);
	json_decref(epk);
	free(epk_text);
	EVP_PKEY_free(eph);
	return rc;
}

/* The ephemeral public key of a JWE header's "epk" member. */
static int
header_epk(json_t *hdr, EVP_PKEY **out)
{
	json_t	   *epk = json_object_get(hdr, "epk");

	*out = NULL;
	if (!json_is_object(epk))
		return BC_EINVAL;
	return bc_pkey_from_jwk_object(epk, out);
}

/* Decode the optional base64url party info member name ("apu"/"apv") of hdr. */
static int
header_party_info(json_t *hdr, const char *name, unsigned char *out, size_t *len)
{
	json_t	   *member = json_object_get(hdr, name);
	int			rc;

	*len = 0;
	if (member == NULL)
		return BC_OK;
	if (!json_is_string(member))
		return BC_EINVAL;
	rc = bc_b64url_decode(json_string_value(member), json_string_length(member),
						  out, JOSE_PARTY_INFO_MAX, len);
	return rc == BC_ETOOBIG ? BC_EINVAL : rc;
}

/* Check the header of a JWE to open: algorithms, no zip/crit; hand back epk. */
static int
check_jwe_header(json_t *hdr, EVP_PKEY **epk)
{
	if (!json_is_string(json_object_get(hdr, "alg")) ||
		!json_is_string(json_object_get(hdr, "enc")))
		return BC_EINVAL;
	if (!member_is(hdr, "alg", "ECDH-ES") || !member_is(hdr, "enc", "A256GCM") ||
		json_object_get(hdr, "zip") != NULL || json_object_get(hdr, "crit") != NULL)
		return BC_EUNSUPPORTED;
	return header_epk(hdr, epk);
}

/* Open a JWE (ECDH-ES + A256GCM) with the recipient's P-256 private key. */
int
bc_jwe_open(EVP_PKEY *recipient_priv, const char *jwe, size_t n,
			size_t max_pt, const char *hdr_name, char **hdr_value_out,
			unsigned char **pt_out, size_t *pt_len)
{
	jose_part	parts[JWE_PARTS];
	json_t	   *hdr = NULL;
	json_t	   *member;
	EVP_PKEY   *epk = NULL;
	unsigned char apu[JOSE_PARTY_INFO_MAX];
	unsigned char apv[JOSE_PARTY_INFO_MAX];
	size_t		apu_len = 0;
	size_t		apv_len = 0;
	unsigned char iv[GCM_IV_LEN + 3];
	unsigned char tag[GCM_TAG_LEN + 3];
	size_t		iv_len = 0;
	size_t		tag_len = 0;
	unsigned char *ct = NULL;
	size_t		ct_len = 0;
	unsigned char *pt = NULL;
	char	   *value = NULL;
	unsigned char z[32];
	unsigned char cek[GCM_KEY_LEN];
	int			rc;

	if (hdr_value_out != NULL)
		*hdr_value_out = NULL;
	*pt_out = NULL;
	*pt_len = 0;
	OPENSSL_cleanse(z, sizeof(z));
	OPENSSL_cleanse(cek, sizeof(cek));
	/* Our own key (not the input): a TPM's may not say its curve while the TPM is away. */
	rc = BC_EKEY;
	if (!bc_pkey_is_p256(recipient_priv))
		goto out;
	rc = BC_ETOOBIG;
	if (n > BC_JOSE_MAX)
		goto out;
	rc = split_compact(jwe, n, parts, JWE_PARTS);
	if (rc != BC_OK)
		goto out;
	rc = BC_EINVAL;
	if (parts[1].len != 0)
		goto out;
	rc = parse_header(&parts[0], &hdr);
	if (rc == BC_OK)
		rc = check_jwe_header(hdr, &epk);
	if (rc == BC_OK)
		rc = header_party_info(hdr, "apu", apu, &apu_len);
	if (rc == BC_OK)
		rc = header_party_info(hdr, "apv", apv, &apv_len);
	if (rc != BC_OK)
		goto out;
	if (hdr_name != NULL)
	{
		member = json_object_get(hdr, hdr_name);
		rc = BC_EINVAL;
		if (!json_is_string(member))
			goto out;
		rc = BC_ENOMEM;
		value = strdup(json_string_value(member));
		if (value == NULL)
			goto out;
	}
	rc = bc_b64url_decode(parts[2].text, parts[2].len, iv, sizeof(iv), &iv_len);
	if (rc == BC_OK)
		rc = bc_b64url_decode(parts[4].text, parts[4].len, tag, sizeof(tag), &tag_len);
	if (rc == BC_ETOOBIG || (rc == BC_OK && (iv_len != GCM_IV_LEN ||
											 tag_len != GCM_TAG_LEN)))
		rc = BC_EINVAL;
	if (rc != BC_OK)
		goto out;
	rc = decode_part(&parts[3], max_pt, &ct, &ct_len);
	if (rc != BC_OK)
		goto out;
	rc = BC_ENOMEM;
	pt = malloc(ct_len + 1);
	if (pt == NULL)
		goto out;
	rc = ecdh_p256(recipient_priv, epk, z);
	if (rc == BC_OK)
		rc = concat_kdf_a256gcm(z, sizeof(z), apu, apu_len, apv, apv_len, cek);
	if (rc == BC_OK)
		rc = aes256gcm(1, cek, iv, parts[0].text, parts[0].len, ct, ct_len,
					   pt, tag);
	if (rc != BC_OK)
		goto out;
	pt[ct_len] = '\0';
	*pt_out = pt;
	*pt_len = ct_len;
	pt = NULL;
	if (hdr_value_out != NULL)
	{
		*hdr_value_out = value;
		value = NULL;
	}
out:
	OPENSSL_cleanse(z, sizeof(z));
	OPENSSL_cleanse(cek, sizeof(cek));
	if (pt != NULL)
		bc_free_secret(pt, ct_len + 1);
	if (ct != NULL)
		bc_free_secret(ct, ct_len + 1);
	free(value);
	EVP_PKEY_free(epk);
	json_decref(hdr);
	return rc;
}

/* ------------------------------------------------- other algorithms (federation) */

/* Longest RSA modulus accepted (bits), and shortest. */
#define JWK_RSA_BITS_MAX 8192
#define JWK_RSA_BITS_MIN 2048
/* Longest JWS signature: an RSA one of JWK_RSA_BITS_MAX bits. */
#define JWS_SIG_MAX (JWK_RSA_BITS_MAX / 8)

/* One JWS algorithm of RFC 7518 section 3 that is verified here. */
typedef struct jws_alg
{
	const char *name;
	const char *kty;			/* "EC" or "RSA" */
	const char *group;			/* EC: the curve's OpenSSL group name */
	int			half;			/* EC: bytes of r and of s */
	int			pss;			/* RSA: RSASSA-PSS, salt the digest's length */
	const char *md;
} jws_alg;

static const jws_alg jws_algs[] = {
	{"ES256", "EC", "prime256v1", 32, 0, "SHA256"},
	{"ES384", "EC", "secp384r1", 48, 0, "SHA384"},
	{"ES512", "EC", "secp521r1", 66, 0, "SHA512"},
	{"RS256", "RSA", NULL, 0, 0, "SHA256"},
	{"RS384", "RSA", NULL, 0, 0, "SHA384"},
	{"RS512", "RSA", NULL, 0, 0, "SHA512"},
	{"PS256", "RSA", NULL, 0, 1, "SHA256"},
	{"PS384", "RSA", NULL, 0, 1, "SHA384"},
	{"PS512", "RSA", NULL, 0, 1, "SHA512"},
};

/* The unsigned big-endian bytes of base64url member name of jwk (at most cap): BC_OK or BC_EINVAL. */
static int
jwk_bytes(json_t *jwk, const char *name, unsigned char *out, size_t cap, size_t *len)
{
	json_t	   *member = json_object_get(jwk, name);
	int			rc;

	if (!json_is_string(member))
		return BC_EINVAL;
	rc = bc_b64url_decode(json_string_value(member), json_string_length(member), out, cap, len);
	return rc == BC_OK && *len > 0 ? BC_OK : BC_EINVAL;
}

/* An EVP_PKEY of type name from params; BC_OK or BC_EINVAL (OpenSSL refused them). */
static int
pkey_fromdata(const char *type, OSSL_PARAM *params, EVP_PKEY **out)
{
	EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(NULL, type, NULL);
	EVP_PKEY_CTX *check = NULL;
	int			rc = BC_EINVAL;

	if (ctx != NULL && EVP_PKEY_fromdata_init(ctx) == 1 &&
		EVP_PKEY_fromdata(ctx, out, EVP_PKEY_PUBLIC_KEY, params) == 1)
	{
		/* the point on its curve; the modulus and exponent sane */
		check = EVP_PKEY_CTX_new_from_pkey(NULL, *out, NULL);
		if (check != NULL && EVP_PKEY_public_check(check) == 1)
			rc = BC_OK;
	}
	if (rc != BC_OK)
	{
		EVP_PKEY_free(*out);
		*out = NULL;
		ERR_clear_error();
	}
	EVP_PKEY_CTX_free(check);
	EVP_PKEY_CTX_free(ctx);
	return rc;
}

/* A public JWK of kty EC (P-256, P-384, P-521) or RSA (2048 to 8192 bits) as a key (bc_common.h). */
int
bc_pkey_from_jwk_any(struct json_t *jwk, EVP_PKEY **out)
{
	static const struct
	{
		const char *crv;
		const char *group;
		size_t		len;
	}			curves[] = {{"P-256", "prime256v1", 32}, {"P-384", "secp384r1", 48},
	{"P-521", "secp521r1", 66}};
	const char *kty;
	unsigned char a[JWS_SIG_MAX];
	unsigned char b[JWS_SIG_MAX];
	unsigned char point[1 + 2 * 66];
	size_t		alen = 0;
	size_t		blen = 0;
	OSSL_PARAM_BLD *bld = NULL;
	OSSL_PARAM *params = NULL;
	BIGNUM	   *n = NULL;
	BIGNUM	   *e = NULL;
	int			rc = BC_EINVAL;
	size_t		i;

	*out = NULL;
	if (!json_is_object(jwk) || !json_is_string(json_object_get(jwk, "kty")))
		return BC_EINVAL;
	if (json_object_get(jwk, "d") != NULL || json_object_get(jwk, "p") != NULL)
		return BC_EUNSUPPORTED;	/* a private key: never */
	kty = json_string_value(json_object_get(jwk, "kty"));
	if (strcmp(kty, "EC") == 0)
	{
		const char *crv = json_string_value(json_object_get(jwk, "crv"));

		for (i = 0; crv != NULL && i < sizeof(curves) / sizeof(curves[0]); i++)
			if (strcmp(crv, curves[i].crv) == 0)
				break;
		if (crv == NULL || i == sizeof(curves) / sizeof(curves[0]))
			return BC_EUNSUPPORTED;
		if (jwk_bytes(jwk, "x", a, curves[i].len, &alen) != BC_OK || alen != curves[i].len ||
			jwk_bytes(jwk, "y", b, curves[i].len, &blen) != BC_OK || blen != curves[i].len)
			return BC_EINVAL;
		point[0] = 0x04;
		memcpy(point + 1, a, alen);
		memcpy(point + 1 + alen, b, blen);
		rc = BC_ENOMEM;
		bld = OSSL_PARAM_BLD_new();
		if (bld == NULL ||
			OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, curves[i].group, 0) != 1 ||
			OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, point, 1 + alen + blen) != 1 ||
			(params = OSSL_PARAM_BLD_to_param(bld)) == NULL)
			goto out;
		rc = pkey_fromdata("EC", params, out);
	}
	else if (strcmp(kty, "RSA") == 0)
	{
		if (jwk_bytes(jwk, "n", a, sizeof(a), &alen) != BC_OK ||
			jwk_bytes(jwk, "e", b, 8, &blen) != BC_OK)
			return BC_EINVAL;
		rc = BC_ENOMEM;
		n = BN_bin2bn(a, (int) alen, NULL);
		e = BN_bin2bn(b, (int) blen, NULL);
		if (n == NULL || e == NULL)
			goto out;
		rc = BC_EUNSUPPORTED;
		if (BN_num_bits(n) < JWK_RSA_BITS_MIN || BN_num_bits(n) > JWK_RSA_BITS_MAX)
			goto out;
		rc = BC_ENOMEM;
		bld = OSSL_PARAM_BLD_new();
		if (bld == NULL || OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, n) != 1 ||
			OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, e) != 1 ||
			(params = OSSL_PARAM_BLD_to_param(bld)) == NULL)
			goto out;
		rc = pkey_fromdata("RSA", params, out);
	}
	else
		rc = BC_EUNSUPPORTED;
out:
	OSSL_PARAM_free(params);
	OSSL_PARAM_BLD_free(bld);
	BN_free(n);
	BN_free(e);
	ERR_clear_error();
	return rc;
}

/* 1 when pub is a key alg signs with: its type, and for EC its curve. */
static int
alg_fits_key(const jws_alg *alg, EVP_PKEY *pub)
{
	char		group[64];

	if (!EVP_PKEY_is_a(pub, alg->kty))
		return 0;
	if (alg->group == NULL)
		return EVP_PKEY_get_bits(pub) >= JWK_RSA_BITS_MIN;
	return EVP_PKEY_get_utf8_string_param(pub, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof(group),
										  NULL) == 1 && strcmp(group, alg->group) == 0;
}

/* Verify sig (sig_len bytes, JWS form) over data with alg and pub: BC_OK or BC_EVERIFY. */
static int
alg_verify(const jws_alg *alg, EVP_PKEY *pub, const char *data, size_t n,
		   const unsigned char *sig, size_t sig_len)
{
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	EVP_PKEY_CTX *pctx = NULL;
	unsigned char *der = NULL;
	size_t		der_len = 0;
	int			rc = BC_ECRYPTO;

	if (alg->group != NULL)
	{
		/* JWS: r || s, each of the curve's length; OpenSSL: a DER ECDSA-Sig-Value */
		if (sig_len != 2 * (size_t) alg->half)
		{
			rc = BC_EVERIFY;
			goto out;
		}
		rc = bc_ecdsa_sig_to_der(sig, (size_t) alg->half, sig + alg->half, (size_t) alg->half,
								 &der, &der_len);
		if (rc != BC_OK)
		{
			rc = rc == BC_EVERIFY || rc == BC_EINVAL ? BC_EVERIFY : BC_ECRYPTO;
			goto out;
		}
		sig = der;
		sig_len = der_len;
		rc = BC_ECRYPTO;
	}
	if (md == NULL || EVP_DigestVerifyInit_ex(md, &pctx, alg->md, NULL, NULL, pub, NULL) != 1)
		goto out;
	if (alg->pss &&
		(EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) != 1 ||
		 EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, RSA_PSS_SALTLEN_DIGEST) != 1 ||
		 EVP_PKEY_CTX_set_rsa_mgf1_md_name(pctx, alg->md, NULL) != 1))
		goto out;
	rc = EVP_DigestVerify(md, sig, sig_len, (const unsigned char *) data, n) == 1 ?
		BC_OK : BC_EVERIFY;
out:
	ERR_clear_error();
	EVP_MD_CTX_free(md);
	free(der);
	return rc;
}

/* A JWS signature under alg by name (bc_common.h). */
int
bc_jws_alg_verify(const char *alg, EVP_PKEY *pub, const char *data, size_t n,
				  const unsigned char *sig, size_t sig_len)
{
	for (size_t i = 0; alg != NULL && i < sizeof(jws_algs) / sizeof(jws_algs[0]); i++)
		if (strcmp(alg, jws_algs[i].name) == 0)
			return alg_fits_key(&jws_algs[i], pub) ?
				alg_verify(&jws_algs[i], pub, data, n, sig, sig_len) : BC_EUNSUPPORTED;
	return BC_EUNSUPPORTED;
}

/* Verify a JWS of RS/PS/ES 256 to 512 with pub and hand back its payload (bc_common.h). */
int
bc_jws_verify_any(EVP_PKEY *pub, const char *jws, size_t n, size_t max_payload,
				  unsigned char **payload_out, size_t *payload_len)
{
	jose_part	parts[JWS_PARTS];
	json_t	   *hdr = NULL;
	unsigned char sig[JWS_SIG_MAX + 3];
	size_t		sig_len = 0;
	unsigned char *payload = NULL;
	size_t		len = 0;
	const jws_alg *alg = NULL;
	const char *name;
	size_t		i;
	int			rc;

	*payload_out = NULL;
	*payload_len = 0;
	if (n > BC_JOSE_MAX)
		return BC_ETOOBIG;
	rc = split_compact(jws, n, parts, JWS_PARTS);
	if (rc != BC_OK)
		goto out;
	rc = parse_header(&parts[0], &hdr);
	if (rc != BC_OK)
		goto out;
	rc = BC_EUNSUPPORTED;
	name = json_string_value(json_object_get(hdr, "alg"));
	for (i = 0; name != NULL && i < sizeof(jws_algs) / sizeof(jws_algs[0]); i++)
		if (strcmp(name, jws_algs[i].name) == 0)
			alg = &jws_algs[i];
	if (alg == NULL || json_object_get(hdr, "crit") != NULL || !alg_fits_key(alg, pub))
		goto out;
	rc = bc_b64url_decode(parts[2].text, parts[2].len, sig, sizeof(sig), &sig_len);
	if (rc == BC_ETOOBIG)
		rc = BC_EINVAL;
	if (rc != BC_OK)
		goto out;
	if (bc_b64url_decoded_maxlen(parts[1].len) > max_payload)
	{
		rc = parts[1].len % 4 == 1 ? BC_EINVAL : BC_ETOOBIG;
		goto out;
	}
	rc = decode_part(&parts[1], max_payload, &payload, &len);
	if (rc != BC_OK)
		goto out;
	rc = alg_verify(alg, pub, jws, parts[0].len + 1 + parts[1].len, sig, sig_len);
	if (rc != BC_OK)
		goto out;
	*payload_out = payload;
	*payload_len = len;
	payload = NULL;
out:
	free(payload);
	json_decref(hdr);
	return rc;
}
