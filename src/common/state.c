/*
 * state.c: challenge state sealed between two rounds of an attestor
 * (docs/attestors.md, "Challenge state": encrypted and authenticated under challenge.key, at
 * most 1,024 characters).
 *
 * challenge.key is either 32 raw bytes, sealed with AES-256-GCM under
 * HKDF-SHA256(key, info "bc_join/state/v1:" || context), a random 96-bit IV
 * and the AAD version || context:
 *     state = base64url(0x01 || iv(12) || ciphertext || tag(16))
 * or, as tools/bc-join-keygen writes it, a P-256 private key (PEM), sealed
 * as a JWE (ECDH-ES, A256GCM, bc_jwe_seal) to its public key, the context in
 * the protected header member "bcs" (covered by the tag).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/kdf.h>
#include <openssl/pem.h>
#include <openssl/rand.h>

#include "bc_common.h"

#define STATE_VERSION 0x01
#define STATE_IV_LEN 12
#define STATE_TAG_LEN 16
#define STATE_INFO_PREFIX "bc_join/state/v1:"
#define STATE_CONTEXT_MAX 64
/* The JWE protected header member naming the context. */
#define STATE_JWE_MEMBER "bcs"
/* Largest key file read: a PEM P-256 key is far smaller. */
#define STATE_KEY_FILE_MAX 8192

/* A context is 1..64 printable ASCII characters. */
static int
context_ok(const char *context)
{
	size_t		i;

	if (context == NULL || context[0] == '\0')
		return 0;
	for (i = 0; context[i] != '\0'; i++)
		if (i >= STATE_CONTEXT_MAX || context[i] < 0x21 || context[i] > 0x7e)
			return 0;
	return 1;
}

/* The AES-256-GCM key for context: HKDF-SHA256 of the 32-byte key. */
static int
state_key(const unsigned char key32[BC_STATE_KEY_LEN], const char *context,
		  unsigned char out[32])
{
	EVP_KDF    *kdf = NULL;
	EVP_KDF_CTX *kctx = NULL;
	OSSL_PARAM	params[4];
	char		info[sizeof(STATE_INFO_PREFIX) + STATE_CONTEXT_MAX];
	int			n;
	int			rc = BC_ECRYPTO;

	n = snprintf(info, sizeof(info), "%s%s", STATE_INFO_PREFIX, context);
	if (n <= 0 || (size_t) n >= sizeof(info))
		return BC_EINVAL;
	params[0] = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, "SHA256", 0);
	params[1] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *) key32,
												  BC_STATE_KEY_LEN);
	params[2] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info, (size_t) n);
	params[3] = OSSL_PARAM_construct_end();
	kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
	kctx = kdf != NULL ? EVP_KDF_CTX_new(kdf) : NULL;
	if (kctx != NULL && EVP_KDF_derive(kctx, out, 32, params) == 1)
		rc = BC_OK;
	EVP_KDF_CTX_free(kctx);
	EVP_KDF_free(kdf);
	return rc;
}

/* AAD: the version byte and the context. */
static size_t
state_aad(const char *context, unsigned char *aad)
{
	size_t		n = strlen(context);

	aad[0] = STATE_VERSION;
	memcpy(aad + 1, context, n);
	return 1 + n;
}

/* Seal pt under a 32-byte key: base64url(version || iv || ct || tag). */
int
bc_seal_state(const unsigned char key32[BC_STATE_KEY_LEN], const char *context,
			  const unsigned char *pt, size_t n, char **state_out)
{
	unsigned char k[32];
	unsigned char aad[1 + STATE_CONTEXT_MAX];
	size_t		aadlen;
	size_t		rawlen = 1 + STATE_IV_LEN + n + STATE_TAG_LEN;
	unsigned char *raw = NULL;
	EVP_CIPHER_CTX *ctx = NULL;
	int			outl = 0;
	int			rc;

	*state_out = NULL;
	if (key32 == NULL || !context_ok(context) || (pt == NULL && n > 0))
		return BC_EINVAL;
	if (bc_b64url_encoded_len(rawlen) > BC_STATE_MAX)
		return BC_ETOOBIG;
	rc = state_key(key32, context, k);
	if (rc != BC_OK)
		goto out;
	rc = BC_ENOMEM;
	raw = malloc(rawlen);
	if (raw == NULL)
		goto out;
	raw[0] = STATE_VERSION;
	aadlen = state_aad(context, aad);
	rc = BC_ECRYPTO;
	ctx = EVP_CIPHER_CTX_new();
	if (RAND_bytes(raw + 1, STATE_IV_LEN) != 1 || ctx == NULL ||
		EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) != 1 ||
		EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, STATE_IV_LEN, NULL) != 1 ||
		EVP_EncryptInit_ex(ctx, NULL, NULL, k, raw + 1) != 1 ||
		EVP_EncryptUpdate(ctx, NULL, &outl, aad, (int) aadlen) != 1 ||
		(n > 0 && EVP_EncryptUpdate(ctx, raw + 1 + STATE_IV_LEN, &outl, pt, (int) n) != 1) ||
		EVP_EncryptFinal_ex(ctx, raw + 1 + STATE_IV_LEN + n, &outl) != 1 ||
		EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, STATE_TAG_LEN,
							raw + 1 + STATE_IV_LEN + n) != 1)
		goto out;
	rc = BC_ENOMEM;
	*state_out = bc_b64url_encode_alloc(raw, rawlen);
	if (*state_out != NULL)
		rc = BC_OK;
out:
	if (rc != BC_OK)
		ERR_clear_error();
	OPENSSL_cleanse(k, sizeof(k));
	if (raw != NULL)
		bc_free_secret(raw, rawlen);
	EVP_CIPHER_CTX_free(ctx);
	return rc;
}

/* Open what bc_seal_state sealed. */
int
bc_open_state(const unsigned char key32[BC_STATE_KEY_LEN], const char *context,
			  const char *state, size_t n, unsigned char **pt_out, size_t *pt_len)
{
	unsigned char raw[BC_STATE_MAX];	/* decoded is shorter than encoded */
	unsigned char k[32];
	unsigned char aad[1 + STATE_CONTEXT_MAX];
	unsigned char tag[STATE_TAG_LEN];
	size_t		aadlen;
	size_t		rawlen = 0;
	size_t		ctlen;
	unsigned char *pt = NULL;
	EVP_CIPHER_CTX *ctx = NULL;
	int			outl = 0;
	int			rc;

	*pt_out = NULL;
	*pt_len = 0;
	if (key32 == NULL || !context_ok(context) || state == NULL)
		return BC_EINVAL;
	if (n > BC_STATE_MAX)
		return BC_ETOOBIG;
	rc = bc_b64url_decode(state, n, raw, sizeof(raw), &rawlen);
	if (rc != BC_OK)
		return BC_EINVAL;
	if (rawlen < 1 + STATE_IV_LEN + STATE_TAG_LEN || raw[0] != STATE_VERSION)
		return BC_EINVAL;
	ctlen = rawlen - 1 - STATE_IV_LEN - STATE_TAG_LEN;
	memcpy(tag, raw + rawlen - STATE_TAG_LEN, STATE_TAG_LEN);
	rc = state_key(key32, context, k);
	if (rc != BC_OK)
		goto out;
	rc = BC_ENOMEM;
	pt = malloc(ctlen + 1);
	if (pt == NULL)
		goto out;
	aadlen = state_aad(context, aad);
	rc = BC_ECRYPTO;
	ctx = EVP_CIPHER_CTX_new();
	if (ctx == NULL ||
		EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) != 1 ||
		EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, STATE_IV_LEN, NULL) != 1 ||
		EVP_DecryptInit_ex(ctx, NULL, NULL, k, raw + 1) != 1 ||
		EVP_DecryptUpdate(ctx, NULL, &outl, aad, (int) aadlen) != 1 ||
		(ctlen > 0 && EVP_DecryptUpdate(ctx, pt, &outl, raw + 1 + STATE_IV_LEN,
										(int) ctlen) != 1) ||
		EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, STATE_TAG_LEN, tag) != 1)
		goto out;
	if (EVP_DecryptFinal_ex(ctx, pt + ctlen, &outl) != 1)
	{
		rc = BC_EVERIFY;
		goto out;
	}
	pt[ctlen] = '\0';
	*pt_out = pt;
	*pt_len = ctlen;
	pt = NULL;
	rc = BC_OK;
out:
	if (rc != BC_OK)
		ERR_clear_error();
	OPENSSL_cleanse(k, sizeof(k));
	OPENSSL_cleanse(raw, sizeof(raw));
	if (pt != NULL)
		bc_free_secret(pt, ctlen + 1);
	EVP_CIPHER_CTX_free(ctx);
	return rc;
}

/* Seal pt to a P-256 key as a JWE (ECDH-ES, A256GCM). */
int
bc_seal_state_p256(EVP_PKEY *key, const char *context,
				   const unsigned char *pt, size_t n, char **state_out)
{
	char	   *jwe = NULL;
	int			rc;

	*state_out = NULL;
	if (!context_ok(context) || (pt == NULL && n > 0))
		return BC_EINVAL;
	if (!bc_pkey_is_p256(key))
		return BC_EKEY;			/* the key's provider does not answer (bc_common.h) */
	if (n > BC_STATE_MAX)
		return BC_ETOOBIG;
	rc = bc_jwe_seal(key, STATE_JWE_MEMBER, context, pt, n, &jwe);
	if (rc != BC_OK)
		return rc;
	if (strlen(jwe) > BC_STATE_MAX)
	{
		free(jwe);
		return BC_ETOOBIG;
	}
	*state_out = jwe;
	return BC_OK;
}

/* Open what bc_seal_state_p256 sealed, with the private key. */
int
bc_open_state_p256(EVP_PKEY *priv, const char *context,
				   const char *state, size_t n, unsigned char **pt_out, size_t *pt_len)
{
	char	   *hdr_value = NULL;
	unsigned char *pt = NULL;
	size_t		ptlen = 0;
	int			rc;

	*pt_out = NULL;
	*pt_len = 0;
	if (!context_ok(context) || state == NULL)
		return BC_EINVAL;
	if (!bc_pkey_is_p256(priv))
		return BC_EKEY;			/* the key's provider does not answer (bc_common.h) */
	if (n > BC_STATE_MAX)
		return BC_ETOOBIG;
	rc = bc_jwe_open(priv, state, n, BC_STATE_MAX, STATE_JWE_MEMBER, &hdr_value,
					 &pt, &ptlen);
	if (rc != BC_OK)
		return rc;
	if (strcmp(hdr_value, context) != 0)
	{
		rc = BC_EVERIFY;
		bc_free_secret(pt, ptlen + 1);
	}
	else
	{
		*pt_out = pt;
		*pt_len = ptlen;
	}
	free(hdr_value);
	return rc;
}

/* challenge.key: 32 raw bytes, or a PEM P-256 private key. */
int
bc_state_key_read_file(const char *path, unsigned char key32[BC_STATE_KEY_LEN],
					   EVP_PKEY **pkey_out, char *err, size_t errlen)
{
	unsigned char buf[STATE_KEY_FILE_MAX];
	size_t		n;
	FILE	   *f;
	BIO		   *bio = NULL;
	EVP_PKEY   *key = NULL;
	int			rc = BC_EINVAL;

	*pkey_out = NULL;
	if (err != NULL && errlen > 0)
		err[0] = '\0';
	f = fopen(path, "rb");
	if (f == NULL)
	{
		if (err != NULL)
			snprintf(err, errlen, "cannot open key file");
		return BC_EINVAL;
	}
	n = fread(buf, 1, sizeof(buf), f);
	if (ferror(f) || !feof(f))
	{
		if (err != NULL)
			snprintf(err, errlen, "cannot read key file, or it is over %d bytes",
					 STATE_KEY_FILE_MAX);
		goto out;
	}
	if (n == BC_STATE_KEY_LEN)
	{
		memcpy(key32, buf, BC_STATE_KEY_LEN);
		rc = BC_OK;
		goto out;
	}
	bio = BIO_new_mem_buf(buf, (int) n);
	if (bio != NULL)
		key = PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL);
	if (key == NULL || !bc_pkey_is_p256(key))
	{
		if (err != NULL)
			snprintf(err, errlen, "neither 32 bytes nor a PEM P-256 private key");
		EVP_PKEY_free(key);
		ERR_clear_error();
		goto out;
	}
	*pkey_out = key;
	rc = BC_OK;
out:
	fclose(f);
	BIO_free(bio);
	OPENSSL_cleanse(buf, sizeof(buf));
	return rc;
}
