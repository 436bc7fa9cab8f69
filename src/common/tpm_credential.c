/*
 * tpm_credential.c: TPM2_MakeCredential in software (TPM 2.0 Part 1, 24 and
 * Annex B.10/C.6; tpm2-tools tpm2_makecredential -T none), so the server
 * needs no TPM.  Every primitive is OpenSSL 3's: KDFa is OpenSSL's KBKDF in
 * counter mode with HMAC (SP 800-108: K(i) = HMAC(key, [i]32 || label || 0x00
 * || context || [L]32), exactly KDFa), KDFe is its SSKDF with a digest (SP
 * 800-56A Concat: H([i]32 || Z || otherInfo), exactly KDFe), AES-CFB128,
 * HMAC, RSA-OAEP and ECDH; the TPM structures are marshalled by libtss2-mu.
 */
#include <stdlib.h>
#include <string.h>

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/kdf.h>
#include <openssl/param_build.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>
#include <tss2/tss2_mu.h>

#include "bc_tpm.h"

/* The labels of the TPM's KDFs, their terminating NUL included for KDFe/OAEP. */
#define LABEL_IDENTITY "IDENTITY"	/* sizeof includes the NUL */
#define LABEL_STORAGE "STORAGE"
#define LABEL_INTEGRITY "INTEGRITY"

/* OpenSSL's name of a TPM nameAlg the EK may have. */
static const char *
md_name(uint16_t alg)
{
	switch (alg)
	{
		case TPM2_ALG_SHA256:
			return "SHA256";
		case TPM2_ALG_SHA384:
			return "SHA384";
		default:
			return NULL;
	}
}

/*
 * KDFa(hash, key, label, contextU || contextV, bits) into out[0..outlen):
 * OpenSSL's KBKDF, counter mode, HMAC; its "salt" is the label (KBKDF adds the
 * 0x00 separator and the 32-bit length L in bits, as KDFa does).
 */
static int
kdfa(const char *md, const unsigned char *key, size_t keylen, const char *label,
	 const unsigned char *ctx, size_t ctxlen, unsigned char *out, size_t outlen)
{
	EVP_KDF    *kdf = NULL;
	EVP_KDF_CTX *kctx = NULL;
	OSSL_PARAM	params[7];
	OSSL_PARAM *p = params;
	int			rc = BC_ECRYPTO;

	*p++ = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_MODE, "counter", 0);
	*p++ = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_MAC, "HMAC", 0);
	*p++ = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *) md, 0);
	*p++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *) key, keylen);
	*p++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, (void *) label,
											 strlen(label));
	if (ctxlen > 0)
		*p++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, (void *) ctx, ctxlen);
	*p = OSSL_PARAM_construct_end();
	kdf = EVP_KDF_fetch(NULL, "KBKDF", NULL);
	kctx = kdf != NULL ? EVP_KDF_CTX_new(kdf) : NULL;
	if (kctx != NULL && EVP_KDF_derive(kctx, out, outlen, params) == 1)
		rc = BC_OK;
	EVP_KDF_CTX_free(kctx);
	EVP_KDF_free(kdf);
	return rc;
}

/*
 * KDFe(hash, Z, "IDENTITY", partyU, partyV, bits) into out[0..outlen):
 * OpenSSL's SSKDF with a digest over [i]32 || Z || otherInfo, otherInfo =
 * "IDENTITY\0" || partyU || partyV.
 */
static int
kdfe(const char *md, const unsigned char *z, size_t zlen,
	 const unsigned char *u, size_t ulen, const unsigned char *v, size_t vlen,
	 unsigned char *out, size_t outlen)
{
	EVP_KDF    *kdf = NULL;
	EVP_KDF_CTX *kctx = NULL;
	OSSL_PARAM	params[4];
	unsigned char info[sizeof(LABEL_IDENTITY) + 2 * 66];
	size_t		infolen = sizeof(LABEL_IDENTITY) + ulen + vlen;
	int			rc = BC_ECRYPTO;

	if (infolen > sizeof(info))
		return BC_EINVAL;
	memcpy(info, LABEL_IDENTITY, sizeof(LABEL_IDENTITY));
	memcpy(info + sizeof(LABEL_IDENTITY), u, ulen);
	memcpy(info + sizeof(LABEL_IDENTITY) + ulen, v, vlen);
	params[0] = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *) md, 0);
	params[1] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *) z, zlen);
	params[2] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info, infolen);
	params[3] = OSSL_PARAM_construct_end();
	kdf = EVP_KDF_fetch(NULL, "SSKDF", NULL);
	kctx = kdf != NULL ? EVP_KDF_CTX_new(kdf) : NULL;
	if (kctx != NULL && EVP_KDF_derive(kctx, out, outlen, params) == 1)
		rc = BC_OK;
	EVP_KDF_CTX_free(kctx);
	EVP_KDF_free(kdf);
	return rc;
}

/*
 * The credential's two keys from the seed (both sides of MakeCredential):
 * symKey = KDFa(seed, "STORAGE", name, "", symbits), hmacKey = KDFa(seed,
 * "INTEGRITY", "", "", 8|H|).
 */
static int
credential_keys(const char *md, const unsigned char *seed, size_t hlen,
				const unsigned char *name, size_t name_len, size_t symbits,
				unsigned char *symkey, unsigned char *hmackey)
{
	int			rc = kdfa(md, seed, hlen, LABEL_STORAGE, name, name_len, symkey, symbits / 8);

	if (rc == BC_OK)
		rc = kdfa(md, seed, hlen, LABEL_INTEGRITY, NULL, 0, hmackey, hlen);
	return rc;
}

/*
 * The RSA EK's seed: random, encrypted by RSA-OAEP (the EK's nameAlg for the
 * hash and MGF1, label "IDENTITY\0") into enc->secret.
 */
static int
rsa_seed(EVP_PKEY *ekkey, const char *md, unsigned char *seed, size_t seedlen,
		 TPM2B_ENCRYPTED_SECRET *enc)
{
	EVP_PKEY_CTX *ctx = NULL;
	unsigned char *label = NULL;
	size_t		outlen = sizeof(enc->secret);
	int			rc = BC_ECRYPTO;

	if (RAND_bytes(seed, (int) seedlen) != 1)
		goto out;
	label = OPENSSL_malloc(sizeof(LABEL_IDENTITY));
	ctx = EVP_PKEY_CTX_new_from_pkey(NULL, ekkey, NULL);
	if (label == NULL || ctx == NULL || EVP_PKEY_encrypt_init(ctx) != 1 ||
		EVP_PKEY_CTX_set_rsa_padding(ctx, RSA_PKCS1_OAEP_PADDING) != 1 ||
		EVP_PKEY_CTX_set_rsa_oaep_md_name(ctx, md, NULL) != 1 ||
		EVP_PKEY_CTX_set_rsa_mgf1_md_name(ctx, md, NULL) != 1)
		goto out;
	memcpy(label, LABEL_IDENTITY, sizeof(LABEL_IDENTITY));
	if (EVP_PKEY_CTX_set0_rsa_oaep_label(ctx, label, (int) sizeof(LABEL_IDENTITY)) != 1)
		goto out;
	label = NULL;				/* owned by ctx */
	if (EVP_PKEY_encrypt(ctx, enc->secret, &outlen, seed, seedlen) != 1)
		goto out;
	enc->size = (UINT16) outlen;
	rc = BC_OK;
out:
	OPENSSL_free(label);
	EVP_PKEY_CTX_free(ctx);
	return rc;
}

/* The x and y of an EC public key, each padded to field bytes. */
static int
ec_point_xy(EVP_PKEY *key, size_t field, unsigned char *x, unsigned char *y)
{
	BIGNUM	   *bx = NULL;
	BIGNUM	   *by = NULL;
	int			rc = BC_ECRYPTO;

	if (EVP_PKEY_get_bn_param(key, OSSL_PKEY_PARAM_EC_PUB_X, &bx) == 1 &&
		EVP_PKEY_get_bn_param(key, OSSL_PKEY_PARAM_EC_PUB_Y, &by) == 1 &&
		BN_bn2binpad(bx, x, (int) field) == (int) field &&
		BN_bn2binpad(by, y, (int) field) == (int) field)
		rc = BC_OK;
	BN_free(bx);
	BN_free(by);
	return rc;
}

/*
 * The ECC EK's seed: an ephemeral key on the EK's curve, Z = x(de * Q_EK),
 * seed = KDFe(Z, "IDENTITY", x(Qe), x(Q_EK)); enc->secret is the marshalled
 * TPMS_ECC_POINT Qe.
 */
static int
ecc_seed(const bc_tpm_public *ek, EVP_PKEY *ekkey, const char *md,
		 unsigned char *seed, size_t seedlen, TPM2B_ENCRYPTED_SECRET *enc)
{
	const TPMS_ECC_POINT *q = &ek->pub.publicArea.unique.ecc;
	int			p384 = ek->pub.publicArea.parameters.eccDetail.curveID == TPM2_ECC_NIST_P384;
	size_t		field = p384 ? 48 : 32;
	EVP_PKEY   *eph = NULL;
	EVP_PKEY_CTX *ctx = NULL;
	TPMS_ECC_POINT qe;
	unsigned char z[48];
	size_t		zlen = sizeof(z);
	size_t		off = 0;
	int			rc = BC_ECRYPTO;

	memset(&qe, 0, sizeof(qe));
	eph = EVP_PKEY_Q_keygen(NULL, NULL, "EC", p384 ? "P-384" : "P-256");
	if (eph == NULL || ec_point_xy(eph, field, qe.x.buffer, qe.y.buffer) != BC_OK)
		goto out;
	qe.x.size = qe.y.size = (UINT16) field;
	ctx = EVP_PKEY_CTX_new_from_pkey(NULL, eph, NULL);
	if (ctx == NULL || EVP_PKEY_derive_init(ctx) != 1 ||
		EVP_PKEY_derive_set_peer(ctx, ekkey) != 1 ||
		EVP_PKEY_derive(ctx, z, &zlen) != 1 || zlen != field)
		goto out;
	rc = kdfe(md, z, zlen, qe.x.buffer, qe.x.size, q->x.buffer, q->x.size, seed, seedlen);
	if (rc != BC_OK)
		goto out;
	rc = BC_ECRYPTO;
	if (Tss2_MU_TPMS_ECC_POINT_Marshal(&qe, enc->secret, sizeof(enc->secret), &off) !=
		TSS2_RC_SUCCESS)
		goto out;
	enc->size = (UINT16) off;
	rc = BC_OK;
out:
	OPENSSL_cleanse(z, sizeof(z));
	EVP_PKEY_CTX_free(ctx);
	EVP_PKEY_free(eph);
	return rc;
}

/* A malloc()ed copy of n bytes. */
static int
dup_out(const unsigned char *buf, size_t n, unsigned char **out, size_t *out_len)
{
	*out = malloc(n);
	if (*out == NULL)
		return BC_ENOMEM;
	memcpy(*out, buf, n);
	*out_len = n;
	return BC_OK;
}

/* TPM2_MakeCredential in software. */
int
bc_tpm_make_credential(const bc_tpm_public *ek,
					   const unsigned char *name, size_t name_len,
					   const unsigned char *secret, size_t secret_len,
					   unsigned char **blob_out, size_t *blob_len,
					   unsigned char **enc_out, size_t *enc_len)
{
	const TPMT_PUBLIC *p = &ek->pub.publicArea;
	const char *md = md_name(p->nameAlg);
	size_t		hlen = bc_tpm_digest_size(p->nameAlg);
	size_t		symbits;
	EVP_PKEY   *ekkey = NULL;
	EVP_CIPHER_CTX *cctx = NULL;
	TPM2B_ENCRYPTED_SECRET enc;
	TPM2B_DIGEST cred;
	TPM2B_DIGEST hmac;
	TPM2B_ID_OBJECT idobj;
	unsigned char seed[64];
	unsigned char symkey[32];
	unsigned char hmackey[64];
	unsigned char plain[sizeof(TPM2B_DIGEST)];
	unsigned char encident[sizeof(TPM2B_DIGEST)];
	unsigned char zero_iv[16] = {0};
	unsigned char wire[sizeof(TPM2B_ENCRYPTED_SECRET)];
	unsigned char *mac = NULL;
	unsigned char *hmac_in = NULL;
	size_t		plainlen = 0;
	size_t		maclen = 0;
	size_t		off;
	int			outl = 0;
	int			rc;

	*blob_out = *enc_out = NULL;
	*blob_len = *enc_len = 0;
	memset(&enc, 0, sizeof(enc));
	memset(&cred, 0, sizeof(cred));
	memset(&hmac, 0, sizeof(hmac));
	memset(&idobj, 0, sizeof(idobj));
	if (bc_tpm_check_ek(ek, NULL) != BC_OK || md == NULL)
		return BC_EUNSUPPORTED;
	if (name == NULL || name_len < 2 || name_len > BC_TPM_NAME_MAX ||
		secret == NULL || secret_len == 0 || secret_len > hlen)
		return BC_EINVAL;
	symbits = p->type == TPM2_ALG_RSA ? p->parameters.rsaDetail.symmetric.keyBits.aes :
		p->parameters.eccDetail.symmetric.keyBits.aes;
	rc = bc_tpm_public_pkey(ek, &ekkey);
	if (rc != BC_OK)
		goto out;

	/* The seed, and how the EK gets it. */
	rc = p->type == TPM2_ALG_RSA ? rsa_seed(ekkey, md, seed, hlen, &enc) :
		ecc_seed(ek, ekkey, md, seed, hlen, &enc);
	if (rc != BC_OK)
		goto out;

	rc = credential_keys(md, seed, hlen, name, name_len, symbits, symkey, hmackey);
	if (rc != BC_OK)
		goto out;

	/* encIdentity = AES-CFB(symKey, IV 0)(TPM2B_DIGEST(secret)). */
	rc = BC_ECRYPTO;
	cred.size = (UINT16) secret_len;
	memcpy(cred.buffer, secret, secret_len);
	if (Tss2_MU_TPM2B_DIGEST_Marshal(&cred, plain, sizeof(plain), &plainlen) != TSS2_RC_SUCCESS)
		goto out;
	cctx = EVP_CIPHER_CTX_new();
	if (cctx == NULL ||
		EVP_EncryptInit_ex(cctx, symbits == 256 ? EVP_aes_256_cfb128() : EVP_aes_128_cfb128(),
						   NULL, symkey, zero_iv) != 1 ||
		EVP_EncryptUpdate(cctx, encident, &outl, plain, (int) plainlen) != 1 ||
		(size_t) outl != plainlen)
		goto out;

	/* outerHMAC = HMAC(hmacKey, encIdentity || name). */
	rc = BC_ENOMEM;
	hmac_in = malloc(plainlen + name_len);
	if (hmac_in == NULL)
		goto out;
	memcpy(hmac_in, encident, plainlen);
	memcpy(hmac_in + plainlen, name, name_len);
	rc = BC_ECRYPTO;
	mac = EVP_Q_mac(NULL, "HMAC", NULL, md, NULL, hmackey, hlen, hmac_in,
					plainlen + name_len, hmac.buffer, sizeof(hmac.buffer), &maclen);
	if (mac == NULL || maclen != hlen)
		goto out;
	hmac.size = (UINT16) maclen;

	/* TPM2B_ID_OBJECT: TPM2B_DIGEST(outerHMAC) || encIdentity. */
	off = 0;
	if (Tss2_MU_TPM2B_DIGEST_Marshal(&hmac, idobj.credential, sizeof(idobj.credential),
									 &off) != TSS2_RC_SUCCESS ||
		off + plainlen > sizeof(idobj.credential))
		goto out;
	memcpy(idobj.credential + off, encident, plainlen);
	idobj.size = (UINT16) (off + plainlen);

	off = 0;
	if (Tss2_MU_TPM2B_ID_OBJECT_Marshal(&idobj, wire, sizeof(wire), &off) != TSS2_RC_SUCCESS)
		goto out;
	rc = dup_out(wire, off, blob_out, blob_len);
	if (rc != BC_OK)
		goto out;
	rc = BC_ECRYPTO;
	off = 0;
	if (Tss2_MU_TPM2B_ENCRYPTED_SECRET_Marshal(&enc, wire, sizeof(wire), &off) != TSS2_RC_SUCCESS)
		goto out;
	rc = dup_out(wire, off, enc_out, enc_len);
out:
	if (rc != BC_OK)
	{
		ERR_clear_error();
		free(*blob_out);
		*blob_out = NULL;
		*blob_len = 0;
		*enc_out = NULL;
		*enc_len = 0;
	}
	OPENSSL_cleanse(seed, sizeof(seed));
	OPENSSL_cleanse(symkey, sizeof(symkey));
	OPENSSL_cleanse(hmackey, sizeof(hmackey));
	OPENSSL_cleanse(plain, sizeof(plain));
	OPENSSL_cleanse(&cred, sizeof(cred));
	if (hmac_in != NULL)
		bc_free_secret(hmac_in, plainlen + name_len);
	EVP_CIPHER_CTX_free(cctx);
	EVP_PKEY_free(ekkey);
	return rc;
}

/*
 * TPM2_ActivateCredential in software, for an ECC EK whose private key is in
 * hand (bench/fleet.c's simulated TPMs; the service never holds one): the
 * inverse of the above with the same KDFs.  Z = x(d_EK * Qe), seed =
 * KDFe(Z, "IDENTITY", x(Qe), x(Q_EK)); the outer HMAC over encIdentity ||
 * name is checked (in constant time) before AES-CFB decrypts the credential.
 */
int
bc_tpm_activate_credential(const bc_tpm_public *ek, EVP_PKEY *ek_private,
						   const unsigned char *name, size_t name_len,
						   const unsigned char *blob, size_t blob_len,
						   const unsigned char *enc, size_t enc_len,
						   unsigned char *secret_out, size_t *secret_len)
{
	const TPMT_PUBLIC *p = &ek->pub.publicArea;
	const char *md = md_name(p->nameAlg);
	size_t		hlen = bc_tpm_digest_size(p->nameAlg);
	int			p384;
	size_t		field;
	size_t		symbits;
	TPM2B_ID_OBJECT idobj;
	TPM2B_ENCRYPTED_SECRET es;
	TPMS_ECC_POINT qe;
	TPM2B_DIGEST hmac;
	TPM2B_DIGEST cred;
	EVP_PKEY   *eph = NULL;
	EVP_PKEY_CTX *ctx = NULL;
	EVP_CIPHER_CTX *cctx = NULL;
	OSSL_PARAM_BLD *bld = NULL;
	OSSL_PARAM *params = NULL;
	unsigned char pt[1 + 2 * 48];
	unsigned char z[48];
	size_t		zlen = sizeof(z);
	unsigned char seed[64];
	unsigned char symkey[32];
	unsigned char hmackey[64];
	unsigned char mac[64];
	size_t		maclen = 0;
	unsigned char plain[sizeof(TPM2B_DIGEST)];
	unsigned char zero_iv[16] = {0};
	unsigned char *hmac_in = NULL;
	size_t		off = 0;
	size_t		enclen;
	int			outl = 0;
	int			rc = BC_EINVAL;

	*secret_len = 0;
	memset(&idobj, 0, sizeof(idobj));
	memset(&es, 0, sizeof(es));
	memset(&qe, 0, sizeof(qe));
	memset(&hmac, 0, sizeof(hmac));
	memset(&cred, 0, sizeof(cred));
	if (bc_tpm_check_ek(ek, NULL) != BC_OK || md == NULL || p->type != TPM2_ALG_ECC)
		return BC_EUNSUPPORTED;
	p384 = p->parameters.eccDetail.curveID == TPM2_ECC_NIST_P384;
	field = p384 ? 48 : 32;
	symbits = p->parameters.eccDetail.symmetric.keyBits.aes;
	if (name == NULL || name_len < 2 || name_len > BC_TPM_NAME_MAX)
		return BC_EINVAL;

	/* The structures: every byte consumed. */
	if (Tss2_MU_TPM2B_ID_OBJECT_Unmarshal(blob, blob_len, &off, &idobj) != TSS2_RC_SUCCESS ||
		off != blob_len)
		return BC_EINVAL;
	off = 0;
	if (Tss2_MU_TPM2B_ENCRYPTED_SECRET_Unmarshal(enc, enc_len, &off, &es) != TSS2_RC_SUCCESS ||
		off != enc_len)
		return BC_EINVAL;
	off = 0;
	if (Tss2_MU_TPMS_ECC_POINT_Unmarshal(es.secret, es.size, &off, &qe) != TSS2_RC_SUCCESS ||
		off != es.size || qe.x.size != field || qe.y.size != field)
		return BC_EINVAL;
	off = 0;
	if (Tss2_MU_TPM2B_DIGEST_Unmarshal(idobj.credential, idobj.size, &off, &hmac) !=
		TSS2_RC_SUCCESS || hmac.size != hlen)
		return BC_EINVAL;
	enclen = idobj.size - off;
	if (enclen < 2 || enclen > sizeof(plain))
		return BC_EINVAL;

	/* Z = x(d_EK * Qe): Qe imported (OpenSSL checks it is on the curve). */
	rc = BC_ECRYPTO;
	pt[0] = 0x04;
	memcpy(pt + 1, qe.x.buffer, field);
	memcpy(pt + 1 + field, qe.y.buffer, field);
	if ((bld = OSSL_PARAM_BLD_new()) == NULL ||
		OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, p384 ? "P-384" : "P-256", 0) != 1 ||
		OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, pt, 1 + 2 * field) != 1 ||
		(params = OSSL_PARAM_BLD_to_param(bld)) == NULL)
		goto out;
	ctx = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
	if (ctx == NULL || EVP_PKEY_fromdata_init(ctx) != 1 ||
		EVP_PKEY_fromdata(ctx, &eph, EVP_PKEY_PUBLIC_KEY, params) != 1)
		goto out;
	EVP_PKEY_CTX_free(ctx);
	ctx = EVP_PKEY_CTX_new_from_pkey(NULL, ek_private, NULL);
	if (ctx == NULL || EVP_PKEY_derive_init(ctx) != 1 ||
		EVP_PKEY_derive_set_peer(ctx, eph) != 1 ||
		EVP_PKEY_derive(ctx, z, &zlen) != 1 || zlen != field)
		goto out;
	rc = kdfe(md, z, zlen, qe.x.buffer, qe.x.size, p->unique.ecc.x.buffer, p->unique.ecc.x.size,
			  seed, hlen);
	if (rc == BC_OK)
		rc = credential_keys(md, seed, hlen, name, name_len, symbits, symkey, hmackey);
	if (rc != BC_OK)
		goto out;

	/* outerHMAC = HMAC(hmacKey, encIdentity || name): for this Name, unaltered. */
	rc = BC_ENOMEM;
	if ((hmac_in = malloc(enclen + name_len)) == NULL)
		goto out;
	memcpy(hmac_in, idobj.credential + off, enclen);
	memcpy(hmac_in + enclen, name, name_len);
	rc = BC_ECRYPTO;
	if (EVP_Q_mac(NULL, "HMAC", NULL, md, NULL, hmackey, hlen, hmac_in, enclen + name_len,
				  mac, sizeof(mac), &maclen) == NULL || maclen != hlen)
		goto out;
	rc = BC_EINVAL;
	if (CRYPTO_memcmp(mac, hmac.buffer, hlen) != 0)
		goto out;

	/* TPM2B_DIGEST(secret) = AES-CFB(symKey, IV 0)^-1(encIdentity). */
	rc = BC_ECRYPTO;
	cctx = EVP_CIPHER_CTX_new();
	if (cctx == NULL ||
		EVP_DecryptInit_ex(cctx, symbits == 256 ? EVP_aes_256_cfb128() : EVP_aes_128_cfb128(),
						   NULL, symkey, zero_iv) != 1 ||
		EVP_DecryptUpdate(cctx, plain, &outl, idobj.credential + off, (int) enclen) != 1 ||
		(size_t) outl != enclen)
		goto out;
	rc = BC_EINVAL;
	off = 0;
	if (Tss2_MU_TPM2B_DIGEST_Unmarshal(plain, enclen, &off, &cred) != TSS2_RC_SUCCESS ||
		off != enclen || cred.size == 0)
		goto out;
	memcpy(secret_out, cred.buffer, cred.size);
	*secret_len = cred.size;
	rc = BC_OK;
out:
	ERR_clear_error();
	OPENSSL_cleanse(z, sizeof(z));
	OPENSSL_cleanse(seed, sizeof(seed));
	OPENSSL_cleanse(symkey, sizeof(symkey));
	OPENSSL_cleanse(hmackey, sizeof(hmackey));
	OPENSSL_cleanse(plain, sizeof(plain));
	OPENSSL_cleanse(&cred, sizeof(cred));
	free(hmac_in);
	OSSL_PARAM_free(params);
	OSSL_PARAM_BLD_free(bld);
	EVP_CIPHER_CTX_free(cctx);
	EVP_PKEY_CTX_free(ctx);
	EVP_PKEY_free(eph);
	return rc;
}
