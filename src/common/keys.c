/*
 * keys.c: P-256 key generation, PEM files, public JWKs (RFC 7517/7518) and
 * RFC 7638 thumbprints.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <openssl/provider.h>
#include <openssl/x509.h>

#include "bc_common.h"

/* Bytes in one P-256 coordinate. */
#define P256_COORD_LEN 32

/* Bound of a JWK document we parse. */
#define JWK_JSON_MAX 4096

/* A freshly generated P-256 key pair, or NULL. */
EVP_PKEY *
bc_p256_generate(void)
{
	return EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
}

/* 1 when key is an EC key on P-256 (prime256v1), else 0. */
int
bc_pkey_is_p256(const EVP_PKEY *key)
{
	char		group[64];
	size_t		len = 0;

	if (key == NULL || !EVP_PKEY_is_a(key, "EC"))
		return 0;
	if (EVP_PKEY_get_utf8_string_param(key, OSSL_PKEY_PARAM_GROUP_NAME,
									   group, sizeof(group), &len) != 1)
	{
		ERR_clear_error();
		return 0;
	}
	return strcmp(group, "prime256v1") == 0;
}

/* Copy "what: OpenSSL errors" into err (when err is not NULL). */
static void
set_error(char *err, size_t errlen, const char *what)
{
	char		ossl[256];

	bc_ossl_errors(ossl, sizeof(ossl));
	if (err == NULL || errlen == 0)
		return;
	if (ossl[0] != '\0')
		snprintf(err, errlen, "%s: %s", what, ossl);
	else
		snprintf(err, errlen, "%s", what);
}

/* Read a P-256 PEM key (private or public) from path; NULL and err on failure. */
EVP_PKEY *
bc_pkey_read_pem_file(const char *path, int want_private, char *err, size_t errlen)
{
	BIO		   *bio = NULL;
	EVP_PKEY   *key = NULL;

	if (err != NULL && errlen > 0)
		err[0] = '\0';
	bio = BIO_new_file(path, "r");
	if (bio == NULL)
	{
		set_error(err, errlen, "cannot open key file");
		goto out;
	}
	if (want_private)
		key = PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL);
	else
		key = PEM_read_bio_PUBKEY(bio, NULL, NULL, NULL);
	if (key == NULL)
	{
		set_error(err, errlen, want_private ? "no PEM private key in file" :
				  "no PEM public key in file");
		goto out;
	}
	if (!bc_pkey_is_p256(key))
	{
		EVP_PKEY_free(key);
		key = NULL;
		set_error(err, errlen, "key is not an EC P-256 key");
	}
out:
	BIO_free(bio);
	return key;
}

/* Write a private key as PKCS#8 PEM to path, created with mode 0600. */
int
bc_pkey_write_pem_file(EVP_PKEY *key, const char *path)
{
	BIO		   *mem = NULL;
	char	   *pem = NULL;
	long		pem_len = 0;
	int			fd = -1;
	size_t		done = 0;
	int			rc = BC_ECRYPTO;

	mem = BIO_new(BIO_s_mem());
	if (mem == NULL)
		goto out;
	if (PEM_write_bio_PrivateKey(mem, key, NULL, NULL, 0, NULL, NULL) != 1)
		goto out;
	pem_len = BIO_get_mem_data(mem, &pem);
	if (pem_len <= 0)
		goto out;
	rc = BC_EINVAL;
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		goto out;
	if (fchmod(fd, 0600) != 0)
		goto out;
	while (done < (size_t) pem_len)
	{
		ssize_t		w = write(fd, pem + done, (size_t) pem_len - done);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			goto out;
		done += (size_t) w;
	}
	if (fsync(fd) != 0)
		goto out;
	rc = BC_OK;
out:
	if (fd >= 0 && close(fd) != 0 && rc == BC_OK)
		rc = BC_EINVAL;
	if (pem != NULL && pem_len > 0)
		OPENSSL_cleanse(pem, (size_t) pem_len);
	BIO_free(mem);
	return rc;
}

/* The affine coordinates of a P-256 public key, 32 bytes each, big-endian. */
static int
p256_coordinates(const EVP_PKEY *key, unsigned char x[P256_COORD_LEN],
				 unsigned char y[P256_COORD_LEN])
{
	BIGNUM	   *bx = NULL;
	BIGNUM	   *by = NULL;
	int			rc = BC_EUNSUPPORTED;

	if (!bc_pkey_is_p256(key))
		goto out;
	rc = BC_ECRYPTO;
	if (EVP_PKEY_get_bn_param(key, OSSL_PKEY_PARAM_EC_PUB_X, &bx) != 1 ||
		EVP_PKEY_get_bn_param(key, OSSL_PKEY_PARAM_EC_PUB_Y, &by) != 1)
	{
		/*
		 * An engine's key (a PKCS#11 token's, through libp11) answers no
		 * parameters: its public half, encoded and decoded, does.
		 */
		unsigned char *der = NULL;
		const unsigned char *p;
		int			len;
		EVP_PKEY   *pub = NULL;

		BN_free(bx);
		bx = NULL;
		ERR_clear_error();
		len = i2d_PUBKEY(key, &der);
		p = der;
		if (len > 0)
			pub = d2i_PUBKEY(NULL, &p, len);
		OPENSSL_free(der);
		if (pub == NULL ||
			EVP_PKEY_get_bn_param(pub, OSSL_PKEY_PARAM_EC_PUB_X, &bx) != 1 ||
			EVP_PKEY_get_bn_param(pub, OSSL_PKEY_PARAM_EC_PUB_Y, &by) != 1)
		{
			EVP_PKEY_free(pub);
			goto out;
		}
		EVP_PKEY_free(pub);
	}
	if (BN_bn2binpad(bx, x, P256_COORD_LEN) != P256_COORD_LEN ||
		BN_bn2binpad(by, y, P256_COORD_LEN) != P256_COORD_LEN)
		goto out;
	rc = BC_OK;
out:
	BN_free(bx);
	BN_free(by);
	return rc;
}

/* The canonical public JWK of a P-256 key (RFC 7638 member order, compact). */
int
bc_jwk_from_pkey(const EVP_PKEY *key, char **json_out)
{
	unsigned char x[P256_COORD_LEN];
	unsigned char y[P256_COORD_LEN];
	char		x64[64];
	char		y64[64];
	json_t	   *jwk = NULL;
	char	   *text = NULL;
	int			rc;

	*json_out = NULL;
	rc = p256_coordinates(key, x, y);
	if (rc != BC_OK)
		goto out;
	bc_b64url_encode(x, sizeof(x), x64);
	bc_b64url_encode(y, sizeof(y), y64);
	rc = BC_ENOMEM;
	jwk = json_pack("{s:s, s:s, s:s, s:s}", "crv", "P-256", "kty", "EC",
					"x", x64, "y", y64);
	if (jwk == NULL)
		goto out;
	text = json_dumps(jwk, JSON_COMPACT | JSON_PRESERVE_ORDER);
	if (text == NULL)
		goto out;
	*json_out = text;
	rc = BC_OK;
out:
	json_decref(jwk);
	return rc;
}

/* RFC 7638 thumbprint: base64url(SHA-256(canonical JWK)), 43 chars + NUL. */
int
bc_jwk_thumbprint(const EVP_PKEY *key, char out[44])
{
	unsigned char digest[BC_SHA256_LEN];
	char	   *jwk = NULL;
	int			rc;

	out[0] = '\0';
	rc = bc_jwk_from_pkey(key, &jwk);
	if (rc != BC_OK)
		goto out;
	rc = bc_sha256(jwk, strlen(jwk), digest);
	if (rc != BC_OK)
		goto out;
	bc_b64url_encode(digest, sizeof(digest), out);
out:
	free(jwk);
	return rc;
}

/* Decode one base64url JWK coordinate member, which must be exactly 32 bytes. */
static int
jwk_coordinate(json_t *jwk, const char *name, unsigned char out[P256_COORD_LEN])
{
	json_t	   *member = json_object_get(jwk, name);
	size_t		len = 0;
	int			rc;

	if (!json_is_string(member))
		return BC_EINVAL;
	rc = bc_b64url_decode(json_string_value(member), json_string_length(member),
						  out, P256_COORD_LEN, &len);
	if (rc == BC_ETOOBIG || (rc == BC_OK && len != P256_COORD_LEN))
		return BC_EINVAL;
	return rc;
}

/*
 * Build a P-256 public key from an encoded point (uncompressed 04||x||y or
 * compressed 02/03||x, so never the point at infinity); OpenSSL refuses
 * points off the curve as it imports them (EC_POINT_oct2point).  P-256 has
 * cofactor 1: no small-subgroup check is needed beyond that.  With the
 * server's cache on, the key is a copy of a kept parameter key with the
 * point set; otherwise EVP_PKEY_fromdata builds it from the group's name.
 */
int
bc_p256_from_point(const unsigned char *point, size_t point_len, EVP_PKEY **out)
{
	EVP_PKEY   *params = bc_ossl_cache_p256_params();
	EVP_PKEY_CTX *ctx = NULL;
	EVP_PKEY   *key = NULL;
	int			rc = BC_EINVAL;

	*out = NULL;
	if (!((point_len == 65 && point[0] == 0x04) ||
		  (point_len == 33 && (point[0] == 0x02 || point[0] == 0x03))))
		return BC_EINVAL;
	if (params != NULL)
	{
		key = EVP_PKEY_dup(params);
		if (key == NULL)
		{
			rc = BC_ECRYPTO;
			goto out;
		}
		if (EVP_PKEY_set1_encoded_public_key(key, point, point_len) != 1)
			goto out;
	}
	else
	{
		OSSL_PARAM	p[3];
		char		group[] = "prime256v1";

		p[0] = OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, group, 0);
		p[1] = OSSL_PARAM_construct_octet_string(OSSL_PKEY_PARAM_PUB_KEY,
												 (void *) point, point_len);
		p[2] = OSSL_PARAM_construct_end();
		ctx = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
		if (ctx == NULL || EVP_PKEY_fromdata_init(ctx) != 1)
		{
			rc = BC_ECRYPTO;
			goto out;
		}
		if (EVP_PKEY_fromdata(ctx, &key, EVP_PKEY_PUBLIC_KEY, p) != 1)
			goto out;
	}
	*out = key;
	key = NULL;
	rc = BC_OK;
out:
	if (rc != BC_OK)
		ERR_clear_error();
	EVP_PKEY_free(key);
	EVP_PKEY_CTX_free(ctx);
	return rc;
}

/* Parse a public P-256 JWK (kty EC, crv P-256, x, y; d refused), bounded to 4 KiB. */
int
bc_pkey_from_jwk(const char *json, size_t n, EVP_PKEY **out)
{
	json_t	   *jwk = NULL;
	json_error_t jerr;
	int			rc;

	*out = NULL;
	if (n > JWK_JSON_MAX)
		return BC_ETOOBIG;
	jwk = json_loadb(json, n, JSON_REJECT_DUPLICATES, &jerr);
	rc = bc_pkey_from_jwk_object(jwk, out);
	json_decref(jwk);
	return rc;
}

/* The same, from a JWK already parsed (a member of a parsed JOSE header). */
int
bc_pkey_from_jwk_object(struct json_t *jwk, EVP_PKEY **out)
{
	unsigned char point[1 + 2 * P256_COORD_LEN];
	json_t	   *kty;
	json_t	   *crv;
	int			rc;

	*out = NULL;
	if (!json_is_object(jwk))
		return BC_EINVAL;
	kty = json_object_get(jwk, "kty");
	crv = json_object_get(jwk, "crv");
	if (!json_is_string(kty) || !json_is_string(crv))
		return BC_EINVAL;
	if (strcmp(json_string_value(kty), "EC") != 0 ||
		strcmp(json_string_value(crv), "P-256") != 0 ||
		json_object_get(jwk, "d") != NULL)
		return BC_EUNSUPPORTED;
	point[0] = 0x04;
	rc = jwk_coordinate(jwk, "x", point + 1);
	if (rc == BC_OK)
		rc = jwk_coordinate(jwk, "y", point + 1 + P256_COORD_LEN);
	if (rc == BC_OK)
		rc = bc_p256_from_point(point, sizeof(point), out);
	return rc;
}
