/*
 * tpm.c: TPM 2.0 structures for the tpm attestor (docs/protocol.md, "The tpm attestor, round by round"):
 * parsing with libtss2-mu (every byte consumed), Names, TPMT_PUBLIC to
 * EVP_PKEY, the AK/certify/node-key/quote checks, AK signatures and EK
 * certificates, on OpenSSL 3.  MakeCredential is tpm_credential.c's.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/param_build.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <tss2/tss2_mu.h>

#include "bc_tpm.h"

/* The attributes every AK and node key must carry. */
#define KEY_RESIDENT_ATTRS (TPMA_OBJECT_FIXEDTPM | TPMA_OBJECT_FIXEDPARENT | \
							TPMA_OBJECT_SENSITIVEDATAORIGIN | TPMA_OBJECT_SIGN_ENCRYPT)

/* Set *reason (when reason is not NULL) and return status. */
static int
refuse(const char **reason, const char *why, int status)
{
	if (reason != NULL)
		*reason = why;
	return status;
}

/* The bytes of a TPM hash algorithm's digest, or 0. */
size_t
bc_tpm_digest_size(uint16_t hash_alg)
{
	switch (hash_alg)
	{
		case TPM2_ALG_SHA1:
			return 20;
		case TPM2_ALG_SHA256:
			return 32;
		case TPM2_ALG_SHA384:
			return 48;
		case TPM2_ALG_SHA512:
			return 64;
		default:
			return 0;
	}
}

/* OpenSSL's digest for a TPM hash algorithm; SHA-1 only when allow_sha1. */
static const EVP_MD *
tpm_md(uint16_t hash_alg, int allow_sha1)
{
	switch (hash_alg)
	{
		case TPM2_ALG_SHA1:
			return allow_sha1 ? EVP_sha1() : NULL;
		case TPM2_ALG_SHA256:
			return EVP_sha256();
		case TPM2_ALG_SHA384:
			return EVP_sha384();
		case TPM2_ALG_SHA512:
			return EVP_sha512();
		default:
			return NULL;
	}
}

/* ------------------------------------------------------------- parsing */

/* Unmarshal a TPM2B_PUBLIC, every byte consumed, its size field what remains. */
int
bc_tpm_public_parse(const unsigned char *buf, size_t n, bc_tpm_public *out)
{
	size_t		off = 0;

	memset(out, 0, sizeof(*out));
	if (buf == NULL || n < 2)
		return BC_EINVAL;
	if (n > BC_TPM_STRUCT_MAX)
		return BC_ETOOBIG;
	if (Tss2_MU_TPM2B_PUBLIC_Unmarshal(buf, n, &off, &out->pub) != TSS2_RC_SUCCESS ||
		off != n || out->pub.size == 0 || (size_t) out->pub.size != n - 2)
	{
		memset(out, 0, sizeof(*out));
		return BC_EINVAL;
	}
	out->len = n - 2;
	memcpy(out->bytes, buf + 2, out->len);
	return BC_OK;
}

/* Unmarshal a TPMS_ATTEST, every byte consumed. */
int
bc_tpm_attest_parse(const unsigned char *buf, size_t n, bc_tpm_attest *out)
{
	size_t		off = 0;

	memset(out, 0, sizeof(*out));
	if (buf == NULL || n == 0)
		return BC_EINVAL;
	if (n > BC_TPM_STRUCT_MAX)
		return BC_ETOOBIG;
	if (Tss2_MU_TPMS_ATTEST_Unmarshal(buf, n, &off, &out->attest) != TSS2_RC_SUCCESS ||
		off != n)
	{
		memset(out, 0, sizeof(*out));
		return BC_EINVAL;
	}
	out->len = n;
	memcpy(out->bytes, buf, n);
	return BC_OK;
}

/* Unmarshal a TPMT_SIGNATURE, every byte consumed. */
int
bc_tpm_signature_parse(const unsigned char *buf, size_t n, TPMT_SIGNATURE *out)
{
	size_t		off = 0;

	memset(out, 0, sizeof(*out));
	if (buf == NULL || n == 0)
		return BC_EINVAL;
	if (n > BC_TPM_STRUCT_MAX)
		return BC_ETOOBIG;
	if (Tss2_MU_TPMT_SIGNATURE_Unmarshal(buf, n, &off, out) != TSS2_RC_SUCCESS ||
		off != n)
	{
		memset(out, 0, sizeof(*out));
		return BC_EINVAL;
	}
	return BC_OK;
}

/* ---------------------------------------------------------- names, keys */

/* u16be(nameAlg) || H_nameAlg(TPMT_PUBLIC bytes as received). */
int
bc_tpm_name(const bc_tpm_public *pub, unsigned char out[BC_TPM_NAME_MAX], size_t *out_len)
{
	uint16_t	alg = pub->pub.publicArea.nameAlg;
	const EVP_MD *md = tpm_md(alg, 0);
	unsigned int mdlen = 0;

	*out_len = 0;
	if (md == NULL)
		return BC_EUNSUPPORTED;
	out[0] = (unsigned char) (alg >> 8);
	out[1] = (unsigned char) alg;
	if (EVP_Digest(pub->bytes, pub->len, out + 2, &mdlen, md, NULL) != 1)
	{
		ERR_clear_error();
		return BC_ECRYPTO;
	}
	*out_len = 2 + (size_t) mdlen;
	return BC_OK;
}

/* An RSA public key from a TPMT_PUBLIC. */
static int
rsa_pkey(const TPMT_PUBLIC *p, EVP_PKEY **out)
{
	const TPMS_RSA_PARMS *rp = &p->parameters.rsaDetail;
	uint32_t	e = rp->exponent == 0 ? 65537 : rp->exponent;
	OSSL_PARAM_BLD *bld = NULL;
	OSSL_PARAM *params = NULL;
	EVP_PKEY_CTX *ctx = NULL;
	BIGNUM	   *bn_n = NULL;
	BIGNUM	   *bn_e = NULL;
	int			rc = BC_EUNSUPPORTED;

	if (rp->keyBits < 2048 || rp->keyBits > 4096 || rp->keyBits % 8 != 0 ||
		p->unique.rsa.size != rp->keyBits / 8 || (p->unique.rsa.buffer[0] & 0x80) == 0 ||
		e < 3 || e % 2 == 0)
		goto out;
	rc = BC_ECRYPTO;
	bn_n = BN_bin2bn(p->unique.rsa.buffer, p->unique.rsa.size, NULL);
	bn_e = BN_new();
	bld = OSSL_PARAM_BLD_new();
	if (bn_n == NULL || bn_e == NULL || bld == NULL || BN_set_word(bn_e, e) != 1 ||
		OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, bn_n) != 1 ||
		OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, bn_e) != 1 ||
		(params = OSSL_PARAM_BLD_to_param(bld)) == NULL)
		goto out;
	ctx = EVP_PKEY_CTX_new_from_name(NULL, "RSA", NULL);
	if (ctx == NULL || EVP_PKEY_fromdata_init(ctx) != 1 ||
		EVP_PKEY_fromdata(ctx, out, EVP_PKEY_PUBLIC_KEY, params) != 1)
		goto out;
	rc = BC_OK;
out:
	if (rc != BC_OK)
		ERR_clear_error();
	EVP_PKEY_CTX_free(ctx);
	OSSL_PARAM_free(params);
	OSSL_PARAM_BLD_free(bld);
	BN_free(bn_n);
	BN_free(bn_e);
	return rc;
}

/* An EC public key (P-256 or P-384) from a TPMT_PUBLIC; the point must be on the curve. */
static int
ecc_pkey(const TPMT_PUBLIC *p, EVP_PKEY **out)
{
	const TPMS_ECC_POINT *pt = &p->unique.ecc;
	const char *group;
	size_t		field;
	unsigned char point[1 + 2 * 48];
	OSSL_PARAM	params[3];
	EVP_PKEY_CTX *ctx = NULL;
	int			rc = BC_EUNSUPPORTED;

	switch (p->parameters.eccDetail.curveID)
	{
		case TPM2_ECC_NIST_P256:
			group = "P-256";
			field = 32;
			break;
		case TPM2_ECC_NIST_P384:
			group = "P-384";
			field = 48;
			break;
		default:
			return BC_EUNSUPPORTED;
	}
	if (pt->x.size == 0 || pt->x.size > field || pt->y.size == 0 || pt->y.size > field)
		return BC_EUNSUPPORTED;
	/* The uncompressed point, X and Y left-padded to the field size. */
	memset(point, 0, sizeof(point));
	point[0] = POINT_CONVERSION_UNCOMPRESSED;
	memcpy(point + 1 + field - pt->x.size, pt->x.buffer, pt->x.size);
	memcpy(point + 1 + 2 * field - pt->y.size, pt->y.buffer, pt->y.size);
	params[0] = OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME,
												 (char *) group, 0);
	params[1] = OSSL_PARAM_construct_octet_string(OSSL_PKEY_PARAM_PUB_KEY,
												  point, 1 + 2 * field);
	params[2] = OSSL_PARAM_construct_end();
	rc = BC_ECRYPTO;
	ctx = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
	if (ctx == NULL || EVP_PKEY_fromdata_init(ctx) != 1)
		goto out;
	/* EVP_PKEY_fromdata decodes the point with EC_POINT_oct2point: on the curve or refused. */
	rc = EVP_PKEY_fromdata(ctx, out, EVP_PKEY_PUBLIC_KEY, params) == 1 ? BC_OK : BC_EUNSUPPORTED;
out:
	if (rc != BC_OK)
		ERR_clear_error();
	EVP_PKEY_CTX_free(ctx);
	return rc;
}

/* The public key of a public area (RSA, ECC P-256/P-384). */
int
bc_tpm_public_pkey(const bc_tpm_public *pub, EVP_PKEY **out)
{
	const TPMT_PUBLIC *p = &pub->pub.publicArea;

	*out = NULL;
	switch (p->type)
	{
		case TPM2_ALG_RSA:
			return rsa_pkey(p, out);
		case TPM2_ALG_ECC:
			return ecc_pkey(p, out);
		default:
			return BC_EUNSUPPORTED;
	}
}

/* DER SubjectPublicKeyInfo of the EK's key, malloc()ed. */
int
bc_tpm_ek_spki(const bc_tpm_public *ek, unsigned char **der_out, size_t *der_len)
{
	EVP_PKEY   *key = NULL;
	unsigned char *der = NULL;
	int			len;
	int			rc;

	*der_out = NULL;
	*der_len = 0;
	rc = bc_tpm_public_pkey(ek, &key);
	if (rc != BC_OK)
		goto out;
	rc = BC_ECRYPTO;
	len = i2d_PUBKEY(key, &der);
	if (len <= 0)
		goto out;
	rc = BC_ENOMEM;
	*der_out = malloc((size_t) len);
	if (*der_out == NULL)
		goto out;
	memcpy(*der_out, der, (size_t) len);
	*der_len = (size_t) len;
	rc = BC_OK;
out:
	if (rc != BC_OK)
		ERR_clear_error();
	OPENSSL_free(der);
	EVP_PKEY_free(key);
	return rc;
}

/* SHA-256 of the EK SPKI. */
int
bc_tpm_ek_spki_sha256(const bc_tpm_public *ek, unsigned char out[BC_SHA256_LEN])
{
	unsigned char *der = NULL;
	size_t		len = 0;
	int			rc;

	rc = bc_tpm_ek_spki(ek, &der, &len);
	if (rc == BC_OK)
		rc = bc_sha256(der, len, out);
	free(der);
	return rc;
}

/* ---------------------------------------------------------------- checks */

/*
 * The TCG EK Credential Profile's templates the attestor takes (version 2.5,
 * annex B): L-1 RSA-2048 and L-2 ECC P-256 (low range: adminWithPolicy, no
 * userWithAuth, policy A), H-2 ECC P-256 and H-3 ECC P-384 (high range:
 * userWithAuth, policy B).  PolicyA SHA-256 is PolicySecret(TPM_RH_ENDORSEMENT);
 * PolicyB is PolicyOR of policies for the endorsement authorization and an
 * NV-written one, in the template's nameAlg.  The digests are the profile's
 * (as tpm2-tools' tpm2_createek, go-attestation and swtpm_setup carry them).
 */
static const unsigned char ek_policy_a_sha256[32] = {
	0x83, 0x71, 0x97, 0x67, 0x44, 0x84, 0xb3, 0xf8, 0x1a, 0x90, 0xcc, 0x8d,
	0x46, 0xa5, 0xd7, 0x24, 0xfd, 0x52, 0xd7, 0x6e, 0x06, 0x52, 0x0b, 0x64,
	0xf2, 0xa1, 0xda, 0x1b, 0x33, 0x14, 0x69, 0xaa
};
static const unsigned char ek_policy_b_sha256[32] = {
	0xca, 0x3d, 0x0a, 0x99, 0xa2, 0xb9, 0x39, 0x06, 0xf7, 0xa3, 0x34, 0x24,
	0x14, 0xef, 0xcf, 0xb3, 0xa3, 0x85, 0xd4, 0x4c, 0xd1, 0xfd, 0x45, 0x90,
	0x89, 0xd1, 0x9b, 0x50, 0x71, 0xc0, 0xb7, 0xa0
};
static const unsigned char ek_policy_b_sha384[48] = {
	0xb2, 0x6e, 0x7d, 0x28, 0xd1, 0x1a, 0x50, 0xbc, 0x53, 0xd8, 0x82, 0xbc,
	0xf5, 0xfd, 0x3a, 0x1a, 0x07, 0x41, 0x48, 0xbb, 0x35, 0xd3, 0xb4, 0xe4,
	0xcb, 0x1c, 0x0a, 0xd9, 0xbd, 0xe4, 0x19, 0xca, 0xcb, 0x47, 0xba, 0x09,
	0x69, 0x96, 0x46, 0x15, 0x0f, 0x9f, 0xc0, 0x00, 0xf3, 0xf8, 0x0e, 0x12
};

#define EK_ATTRS_LOW (TPMA_OBJECT_FIXEDTPM | TPMA_OBJECT_FIXEDPARENT | \
					  TPMA_OBJECT_SENSITIVEDATAORIGIN | TPMA_OBJECT_ADMINWITHPOLICY | \
					  TPMA_OBJECT_RESTRICTED | TPMA_OBJECT_DECRYPT)		/* 0x000300b2 */
#define EK_ATTRS_HIGH (EK_ATTRS_LOW | TPMA_OBJECT_USERWITHAUTH)		/* 0x000300f2 */

typedef struct ek_template
{
	int			id;				/* enum bc_tpm_ek_template */
	TPMI_ALG_PUBLIC type;
	TPMI_ECC_CURVE curve;		/* ECC */
	TPMI_ALG_HASH name_alg;
	TPMA_OBJECT attrs;
	const unsigned char *policy;
	size_t		policy_len;
	uint16_t	aes_bits;
} ek_template;

static const ek_template ek_templates[] = {
	{BC_TPM_EK_L1_RSA2048, TPM2_ALG_RSA, 0, TPM2_ALG_SHA256, EK_ATTRS_LOW,
	ek_policy_a_sha256, sizeof(ek_policy_a_sha256), 128},
	{BC_TPM_EK_L2_P256, TPM2_ALG_ECC, TPM2_ECC_NIST_P256, TPM2_ALG_SHA256, EK_ATTRS_LOW,
	ek_policy_a_sha256, sizeof(ek_policy_a_sha256), 128},
	{BC_TPM_EK_H2_P256, TPM2_ALG_ECC, TPM2_ECC_NIST_P256, TPM2_ALG_SHA256, EK_ATTRS_HIGH,
	ek_policy_b_sha256, sizeof(ek_policy_b_sha256), 128},
	{BC_TPM_EK_H3_P384, TPM2_ALG_ECC, TPM2_ECC_NIST_P384, TPM2_ALG_SHA384, EK_ATTRS_HIGH,
	ek_policy_b_sha384, sizeof(ek_policy_b_sha384), 256},
};

/* The template of id, or NULL. */
static const ek_template *
ek_template_of(int id)
{
	size_t		i;

	for (i = 0; i < sizeof(ek_templates) / sizeof(ek_templates[0]); i++)
		if (ek_templates[i].id == id)
			return &ek_templates[i];
	return NULL;
}

/* An EK template as TPM2_CreatePrimary takes it (bc_tpm.h). */
int
bc_tpm_ek_template(int id, TPM2B_PUBLIC *out)
{
	const ek_template *t = ek_template_of(id);
	TPMT_PUBLIC *p = &out->publicArea;

	memset(out, 0, sizeof(*out));
	if (t == NULL)
		return BC_EINVAL;
	p->type = t->type;
	p->nameAlg = t->name_alg;
	p->objectAttributes = t->attrs;
	p->authPolicy.size = (UINT16) t->policy_len;
	memcpy(p->authPolicy.buffer, t->policy, t->policy_len);
	if (t->type == TPM2_ALG_RSA)
	{
		p->parameters.rsaDetail.symmetric.algorithm = TPM2_ALG_AES;
		p->parameters.rsaDetail.symmetric.keyBits.aes = t->aes_bits;
		p->parameters.rsaDetail.symmetric.mode.aes = TPM2_ALG_CFB;
		p->parameters.rsaDetail.scheme.scheme = TPM2_ALG_NULL;
		p->parameters.rsaDetail.keyBits = 2048;
		p->parameters.rsaDetail.exponent = 0;
		p->unique.rsa.size = 256;	/* low range: 256 zero bytes */
	}
	else
	{
		size_t		bytes = t->curve == TPM2_ECC_NIST_P384 ? 48 : 32;

		p->parameters.eccDetail.symmetric.algorithm = TPM2_ALG_AES;
		p->parameters.eccDetail.symmetric.keyBits.aes = t->aes_bits;
		p->parameters.eccDetail.symmetric.mode.aes = TPM2_ALG_CFB;
		p->parameters.eccDetail.scheme.scheme = TPM2_ALG_NULL;
		p->parameters.eccDetail.curveID = t->curve;
		p->parameters.eccDetail.kdf.scheme = TPM2_ALG_NULL;
		/* low range: zero x and y of the field's size; high range: empty */
		if (t->attrs == EK_ATTRS_LOW)
		{
			p->unique.ecc.x.size = (UINT16) bytes;
			p->unique.ecc.y.size = (UINT16) bytes;
		}
	}
	return BC_OK;
}

/*
 * An EK the attestor accepts (and MakeCredential can encrypt to): made from
 * one of the TCG EK Credential Profile templates above, its public area
 * equal to the template but for the key itself.  The template is chosen by
 * key type and curve (and, for P-256, userWithAuth: high range or low);
 * then each field is held to it exactly.
 */
int
bc_tpm_check_ek(const bc_tpm_public *ek, const char **reason)
{
	const TPMT_PUBLIC *p = &ek->pub.publicArea;
	const TPMT_SYM_DEF_OBJECT *sym;
	const ek_template *t;

	if (p->type == TPM2_ALG_RSA)
	{
		if (p->parameters.rsaDetail.keyBits != 2048 ||
			p->parameters.rsaDetail.scheme.scheme != TPM2_ALG_NULL ||
			p->parameters.rsaDetail.exponent != 0)
			return refuse(reason, "ek-type", BC_EVERIFY);
		t = ek_template_of(BC_TPM_EK_L1_RSA2048);
		sym = &p->parameters.rsaDetail.symmetric;
	}
	else if (p->type == TPM2_ALG_ECC)
	{
		if (p->parameters.eccDetail.scheme.scheme != TPM2_ALG_NULL ||
			p->parameters.eccDetail.kdf.scheme != TPM2_ALG_NULL)
			return refuse(reason, "ek-type", BC_EVERIFY);
		if (p->parameters.eccDetail.curveID == TPM2_ECC_NIST_P384)
			t = ek_template_of(BC_TPM_EK_H3_P384);
		else if (p->parameters.eccDetail.curveID == TPM2_ECC_NIST_P256)
			t = ek_template_of((p->objectAttributes & TPMA_OBJECT_USERWITHAUTH) ?
							   BC_TPM_EK_H2_P256 : BC_TPM_EK_L2_P256);
		else
			return refuse(reason, "ek-type", BC_EVERIFY);
		sym = &p->parameters.eccDetail.symmetric;
	}
	else
		return refuse(reason, "ek-type", BC_EVERIFY);
	if (p->nameAlg != t->name_alg)
		return refuse(reason, "ek-name-alg", BC_EVERIFY);
	if (p->objectAttributes != t->attrs)
		return refuse(reason, "ek-attributes", BC_EVERIFY);
	if (p->authPolicy.size != t->policy_len ||
		memcmp(p->authPolicy.buffer, t->policy, t->policy_len) != 0)
		return refuse(reason, "ek-policy", BC_EVERIFY);
	if (sym->algorithm != TPM2_ALG_AES || sym->mode.aes != TPM2_ALG_CFB ||
		sym->keyBits.aes != t->aes_bits)
		return refuse(reason, "ek-symmetric", BC_EVERIFY);
	return refuse(reason, NULL, BC_OK);
}

/* The AK: nameAlg, attributes, scheme. */
int
bc_tpm_check_ak(const bc_tpm_public *ak, const char **reason)
{
	const TPMT_PUBLIC *p = &ak->pub.publicArea;
	TPMA_OBJECT need = KEY_RESIDENT_ATTRS | TPMA_OBJECT_RESTRICTED;

	if (p->nameAlg != TPM2_ALG_SHA256)
		return refuse(reason, "ak-name-alg", BC_EVERIFY);
	if ((p->objectAttributes & need) != need ||
		(p->objectAttributes & TPMA_OBJECT_DECRYPT) != 0)
		return refuse(reason, "ak-attributes", BC_EVERIFY);
	if (p->type == TPM2_ALG_ECC)
	{
		const TPMS_ECC_PARMS *e = &p->parameters.eccDetail;

		if (e->curveID != TPM2_ECC_NIST_P256 || e->scheme.scheme != TPM2_ALG_ECDSA ||
			e->scheme.details.ecdsa.hashAlg != TPM2_ALG_SHA256)
			return refuse(reason, "ak-scheme", BC_EVERIFY);
	}
	else if (p->type == TPM2_ALG_RSA)
	{
		const TPMS_RSA_PARMS *r = &p->parameters.rsaDetail;

		if (r->keyBits != 2048 || (r->exponent != 0 && r->exponent != 65537) ||
			r->scheme.scheme != TPM2_ALG_RSASSA ||
			r->scheme.details.rsassa.hashAlg != TPM2_ALG_SHA256)
			return refuse(reason, "ak-scheme", BC_EVERIFY);
	}
	else
		return refuse(reason, "ak-scheme", BC_EVERIFY);
	return refuse(reason, NULL, BC_OK);
}

/* The hash of a TPMT_SIGNATURE of the two accepted kinds, else TPM2_ALG_NULL. */
static uint16_t
signature_hash(const TPMT_SIGNATURE *sig)
{
	switch (sig->sigAlg)
	{
		case TPM2_ALG_ECDSA:
			return sig->signature.ecdsa.hash;
		case TPM2_ALG_RSASSA:
			return sig->signature.rsassa.hash;
		default:
			return TPM2_ALG_NULL;
	}
}

/* DER ECDSA-Sig-Value of a TPM ECDSA signature (r, s at most 32 bytes). */
static int
ecdsa_der(const TPMS_SIGNATURE_ECC *e, unsigned char **der_out, int *der_len)
{
	size_t		n = 0;
	int			rc;

	*der_out = NULL;
	if (e->signatureR.size == 0 || e->signatureR.size > 32 ||
		e->signatureS.size == 0 || e->signatureS.size > 32)
		return BC_EVERIFY;
	rc = bc_ecdsa_sig_to_der(e->signatureR.buffer, e->signatureR.size,
							 e->signatureS.buffer, e->signatureS.size, der_out, &n);
	if (rc == BC_EINVAL)
		rc = BC_EVERIFY;
	*der_len = (int) n;
	return rc;
}

/* The AK's signature over a TPMS_ATTEST. */
int
bc_tpm_verify_attest(const bc_tpm_public *ak, const bc_tpm_attest *att,
					 const TPMT_SIGNATURE *sig, const char **reason)
{
	const TPMT_PUBLIC *p = &ak->pub.publicArea;
	EVP_PKEY   *key = NULL;
	EVP_MD_CTX *mctx = NULL;
	unsigned char *ecder = NULL;
	const unsigned char *sigbytes;
	int			siglen = 0;
	int			rc;

	rc = bc_tpm_check_ak(ak, reason);
	if (rc != BC_OK)
		return rc;
	/* The signature's algorithm and hash are the AK's scheme (SHA-256 only). */
	if ((p->type == TPM2_ALG_ECC && sig->sigAlg != TPM2_ALG_ECDSA) ||
		(p->type == TPM2_ALG_RSA && sig->sigAlg != TPM2_ALG_RSASSA) ||
		signature_hash(sig) != TPM2_ALG_SHA256)
		return refuse(reason, "signature-scheme", BC_EVERIFY);
	if (p->type == TPM2_ALG_ECC)
	{
		rc = ecdsa_der(&sig->signature.ecdsa, &ecder, &siglen);
		if (rc != BC_OK)
		{
			refuse(reason, rc == BC_EVERIFY ? "bad-signature" : "internal", rc);
			goto out;
		}
		sigbytes = ecder;
	}
	else
	{
		if (sig->signature.rsassa.sig.size != p->parameters.rsaDetail.keyBits / 8)
		{
			rc = refuse(reason, "bad-signature", BC_EVERIFY);
			goto out;
		}
		sigbytes = sig->signature.rsassa.sig.buffer;
		siglen = sig->signature.rsassa.sig.size;
	}
	rc = bc_tpm_public_pkey(ak, &key);
	if (rc != BC_OK)
	{
		/* The AK's unique field is no key of its scheme. */
		rc = refuse(reason, "ak-scheme", BC_EVERIFY);
		goto out;
	}
	rc = refuse(reason, "internal", BC_ECRYPTO);
	mctx = EVP_MD_CTX_new();
	/* RSA keys verify with PKCS#1 v1.5 padding unless told otherwise. */
	if (mctx == NULL || EVP_DigestVerifyInit(mctx, NULL, EVP_sha256(), NULL, key) != 1)
		goto out;
	if (EVP_DigestVerify(mctx, sigbytes, (size_t) siglen, att->bytes, att->len) == 1)
		rc = refuse(reason, NULL, BC_OK);
	else
		rc = refuse(reason, "bad-signature", BC_EVERIFY);
out:
	if (rc != BC_OK)
		ERR_clear_error();
	free(ecder);
	EVP_MD_CTX_free(mctx);
	EVP_PKEY_free(key);
	return rc;
}

/* certifyInfo: magic, type, certified Name == Name(node). */
int
bc_tpm_check_certify(const bc_tpm_attest *att, const bc_tpm_public *node, const char **reason)
{
	const TPMS_ATTEST *a = &att->attest;
	unsigned char name[BC_TPM_NAME_MAX];
	size_t		name_len = 0;

	if (a->magic != TPM2_GENERATED_VALUE)
		return refuse(reason, "certify-magic", BC_EVERIFY);
	if (a->type != TPM2_ST_ATTEST_CERTIFY)
		return refuse(reason, "certify-type", BC_EVERIFY);
	if (bc_tpm_name(node, name, &name_len) != BC_OK ||
		a->attested.certify.name.size != name_len ||
		memcmp(a->attested.certify.name.name, name, name_len) != 0)
		return refuse(reason, "certify-name", BC_EVERIFY);
	return refuse(reason, NULL, BC_OK);
}

/* The node key's public area. */
int
bc_tpm_check_node_key(const bc_tpm_public *node, const char **reason)
{
	const TPMT_PUBLIC *p = &node->pub.publicArea;
	const TPMT_ECC_SCHEME *s = &p->parameters.eccDetail.scheme;

	if (p->type != TPM2_ALG_ECC || p->parameters.eccDetail.curveID != TPM2_ECC_NIST_P256)
		return refuse(reason, "node-key-type", BC_EVERIFY);
	if (p->nameAlg != TPM2_ALG_SHA256 && p->nameAlg != TPM2_ALG_SHA384)
		return refuse(reason, "node-key-name-alg", BC_EVERIFY);
	if (s->scheme != TPM2_ALG_NULL &&
		(s->scheme != TPM2_ALG_ECDSA || s->details.ecdsa.hashAlg != TPM2_ALG_SHA256))
		return refuse(reason, "node-key-scheme", BC_EVERIFY);
	if ((p->objectAttributes & KEY_RESIDENT_ATTRS) != KEY_RESIDENT_ATTRS ||
		(p->objectAttributes & TPMA_OBJECT_RESTRICTED) != 0)
		return refuse(reason, "node-key-attributes", BC_EVERIFY);
	return refuse(reason, NULL, BC_OK);
}

/* The node key equals key (EVP_PKEY_eq). */
int
bc_tpm_node_key_matches(const bc_tpm_public *node, EVP_PKEY *key, const char **reason)
{
	EVP_PKEY   *mine = NULL;
	int			rc;

	if (key == NULL)
		return refuse(reason, "node-key-mismatch", BC_EINVAL);
	if (bc_tpm_public_pkey(node, &mine) != BC_OK)
		return refuse(reason, "node-key-type", BC_EVERIFY);
	rc = EVP_PKEY_eq(mine, key) == 1 ? refuse(reason, NULL, BC_OK) :
		refuse(reason, "node-key-mismatch", BC_EVERIFY);
	ERR_clear_error();
	EVP_PKEY_free(mine);
	return rc;
}

_Static_assert(TPM2_PCR_SELECT_MAX <= sizeof(uint32_t), "a PCR selection fits a uint32_t");

/* The set of PCRs of one TPMS_PCR_SELECTION as a bit mask (bit i = PCR i). */
static uint32_t
selection_mask(const TPMS_PCR_SELECTION *s)
{
	uint32_t	mask = 0;
	size_t		i;

	for (i = 0; i < s->sizeofSelect && i < sizeof(s->pcrSelect); i++)
		mask |= (uint32_t) s->pcrSelect[i] << (8 * i);
	return mask;
}

/* Number of bits set. */
static size_t
popcount32(uint32_t v)
{
	size_t		n = 0;

	for (; v != 0; v &= v - 1)
		n++;
	return n;
}

/* A quote: magic, type, extraData, and the PCR policy's selection and digest. */
int
bc_tpm_check_quote(const bc_tpm_attest *att, const TPMT_SIGNATURE *sig,
				   const unsigned char *extra, size_t extra_len,
				   const bc_tpm_pcr_bank *banks, size_t n_banks,
				   const char **reason)
{
	const TPMS_ATTEST *a = &att->attest;
	const TPML_PCR_SELECTION *sel = &a->attested.quote.pcrSelect;
	const EVP_MD *md;
	EVP_MD_CTX *mctx = NULL;
	unsigned char digest[EVP_MAX_MD_SIZE];
	unsigned int dlen = 0;
	size_t		i;
	int			rc;

	if (a->magic != TPM2_GENERATED_VALUE)
		return refuse(reason, "quote-magic", BC_EVERIFY);
	if (a->type != TPM2_ST_ATTEST_QUOTE)
		return refuse(reason, "quote-type", BC_EVERIFY);
	if (extra == NULL || a->extraData.size != extra_len ||
		memcmp(a->extraData.buffer, extra, extra_len) != 0)
		return refuse(reason, "quote-nonce", BC_EVERIFY);
	if (n_banks == 0)
		return refuse(reason, NULL, BC_OK);
	/* The policy itself must be coherent: a caller error otherwise. */
	if (banks == NULL || n_banks > TPM2_NUM_PCR_BANKS)
		return refuse(reason, "pcr-policy", BC_EINVAL);
	for (i = 0; i < n_banks; i++)
	{
		size_t		dsz = bc_tpm_digest_size(banks[i].hash_alg);

		if (dsz == 0 || banks[i].pcrs == 0 ||
			banks[i].values_len != popcount32(banks[i].pcrs) * dsz ||
			(banks[i].values == NULL && banks[i].values_len != 0))
			return refuse(reason, "pcr-policy", BC_EINVAL);
	}
	/* The returned selection, bank by bank in the policy's order. */
	if (sel->count != n_banks)
		return refuse(reason, "pcr-selection", BC_EVERIFY);
	for (i = 0; i < n_banks; i++)
	{
		const TPMS_PCR_SELECTION *s = &sel->pcrSelections[i];

		/* TPM2_PCR_SELECT_MAX is 4: the mask holds every selectable PCR. */
		if (s->hash != banks[i].hash_alg || selection_mask(s) != banks[i].pcrs)
			return refuse(reason, "pcr-selection", BC_EVERIFY);
	}
	/* pcrDigest = H_sig(values in order), H_sig the signature's hash. */
	md = tpm_md(signature_hash(sig), 0);
	if (md == NULL)
		return refuse(reason, "signature-scheme", BC_EVERIFY);
	rc = refuse(reason, "internal", BC_ECRYPTO);
	mctx = EVP_MD_CTX_new();
	if (mctx == NULL || EVP_DigestInit_ex(mctx, md, NULL) != 1)
		goto out;
	for (i = 0; i < n_banks; i++)
		if (banks[i].values_len > 0 &&
			EVP_DigestUpdate(mctx, banks[i].values, banks[i].values_len) != 1)
			goto out;
	if (EVP_DigestFinal_ex(mctx, digest, &dlen) != 1)
		goto out;
	if (a->attested.quote.pcrDigest.size == dlen &&
		bc_ct_equal(a->attested.quote.pcrDigest.buffer, digest, dlen))
		rc = refuse(reason, NULL, BC_OK);
	else
		rc = refuse(reason, "pcr-digest", BC_EVERIFY);
out:
	if (rc != BC_OK)
		ERR_clear_error();
	EVP_MD_CTX_free(mctx);
	return rc;
}

/* ------------------------------------------------------ EK certificates */

/* One DER certificate; only 0xff padding may follow it. */
int
bc_tpm_ek_cert_parse(const unsigned char *der, size_t n, X509 **out, const char **reason)
{
	const unsigned char *p = der;
	X509	   *cert;
	size_t		used;
	size_t		i;

	*out = NULL;
	if (der == NULL || n == 0)
		return refuse(reason, "ek-cert-malformed", BC_EINVAL);
	if (n > BC_TPM_EKCERT_MAX)
		return refuse(reason, "ek-cert-malformed", BC_ETOOBIG);
	cert = d2i_X509(NULL, &p, (long) n);
	if (cert == NULL)
	{
		ERR_clear_error();
		return refuse(reason, "ek-cert-malformed", BC_EINVAL);
	}
	used = (size_t) (p - der);
	for (i = used; i < n; i++)
	{
		if (der[i] != 0xff)
		{
			X509_free(cert);
			return refuse(reason, "ek-cert-malformed", BC_EINVAL);
		}
	}
	*out = cert;
	return refuse(reason, NULL, BC_OK);
}

/* The EK certificate chains to a root and certifies this EK. */
int
bc_tpm_check_ek_cert(X509 *cert, const bc_tpm_public *ek,
					 X509 *const *roots, size_t n_roots,
					 X509 *const *intermediates, size_t n_intermediates,
					 int64_t at_unix, const char **reason)
{
	X509_STORE *store = NULL;
	X509_STORE_CTX *ctx = NULL;
	STACK_OF(X509) *untrusted = NULL;
	X509_VERIFY_PARAM *param;
	EVP_PKEY   *ekkey = NULL;
	size_t		i;
	int			rc;

	if (cert == NULL || ek == NULL || (roots == NULL && n_roots > 0) ||
		(intermediates == NULL && n_intermediates > 0))
		return refuse(reason, "internal", BC_EINVAL);
	rc = refuse(reason, "internal", BC_ECRYPTO);
	store = X509_STORE_new();
	ctx = X509_STORE_CTX_new();
	untrusted = sk_X509_new_null();
	if (store == NULL || ctx == NULL || untrusted == NULL)
		goto out;
	for (i = 0; i < n_roots; i++)
		if (X509_self_signed(roots[i], 0) == 1 && X509_STORE_add_cert(store, roots[i]) != 1)
			goto out;
	for (i = 0; i < n_intermediates; i++)
		if (sk_X509_push(untrusted, intermediates[i]) <= 0)
			goto out;
	if (X509_STORE_CTX_init(ctx, store, cert, untrusted) != 1)
		goto out;
	param = X509_STORE_CTX_get0_param(ctx);
	/* No X509_V_FLAG_PARTIAL_CHAIN: the chain must end at a self-signed root. */
	if (X509_STORE_CTX_set_purpose(ctx, X509_PURPOSE_ANY) != 1)
		goto out;
	X509_VERIFY_PARAM_set_time(param, at_unix != 0 ? (time_t) at_unix : time(NULL));
	if (X509_verify_cert(ctx) != 1)
	{
		rc = refuse(reason, "ek-chain", BC_EVERIFY);
		goto out;
	}
	if (bc_tpm_public_pkey(ek, &ekkey) != BC_OK ||
		EVP_PKEY_eq(X509_get0_pubkey(cert), ekkey) != 1)
	{
		rc = refuse(reason, "ek-cert-mismatch", BC_EVERIFY);
		goto out;
	}
	rc = refuse(reason, NULL, BC_OK);
out:
	if (rc != BC_OK)
		ERR_clear_error();
	EVP_PKEY_free(ekkey);
	sk_X509_free(untrusted);	/* the certificates stay the caller's */
	X509_STORE_CTX_free(ctx);
	X509_STORE_free(store);
	return rc;
}
