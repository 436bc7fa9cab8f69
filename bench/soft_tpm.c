/*
 * soft_tpm.c: the simulated TPMs of the fleet generator (soft_tpm.h).
 * libtss2-mu marshals, OpenSSL signs; nothing here parses or computes a
 * format by hand.
 */
#include <string.h>

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <tss2/tss2_mu.h>

#include "soft_tpm.h"

#define RESIDENT (TPMA_OBJECT_FIXEDTPM | TPMA_OBJECT_FIXEDPARENT | \
				  TPMA_OBJECT_SENSITIVEDATAORIGIN | TPMA_OBJECT_USERWITHAUTH | TPMA_OBJECT_SIGN_ENCRYPT)

/* o made around key. */
int
st_make(st_obj *o, int kind, EVP_PKEY *key)
{
	TPM2B_PUBLIC tp;
	TPMT_PUBLIC *p = &tp.publicArea;
	BIGNUM	   *x = NULL,
			   *y = NULL;
	size_t		off = 0;
	int			rc = -1;

	memset(o, 0, sizeof(*o));
	memset(&tp, 0, sizeof(tp));
	o->key = key;
	if (kind == ST_EK)
	{
		if (bc_tpm_ek_template(BC_TPM_EK_L2_P256, &tp) != BC_OK)
			return -1;
	}
	else
	{
		p->type = TPM2_ALG_ECC;
		p->nameAlg = TPM2_ALG_SHA256;
		p->parameters.eccDetail.symmetric.algorithm = TPM2_ALG_NULL;
		p->parameters.eccDetail.curveID = TPM2_ECC_NIST_P256;
		p->parameters.eccDetail.kdf.scheme = TPM2_ALG_NULL;
		if (kind == ST_AK)
		{
			p->objectAttributes = RESIDENT | TPMA_OBJECT_RESTRICTED;
			p->parameters.eccDetail.scheme.scheme = TPM2_ALG_ECDSA;
			p->parameters.eccDetail.scheme.details.ecdsa.hashAlg = TPM2_ALG_SHA256;
		}
		else
		{
			p->objectAttributes = RESIDENT;
			p->parameters.eccDetail.scheme.scheme = TPM2_ALG_NULL;
		}
	}
	if (EVP_PKEY_get_bn_param(key, OSSL_PKEY_PARAM_EC_PUB_X, &x) != 1 ||
		EVP_PKEY_get_bn_param(key, OSSL_PKEY_PARAM_EC_PUB_Y, &y) != 1 ||
		BN_bn2binpad(x, p->unique.ecc.x.buffer, 32) != 32 ||
		BN_bn2binpad(y, p->unique.ecc.y.buffer, 32) != 32)
		goto out;
	p->unique.ecc.x.size = p->unique.ecc.y.size = 32;
	if (Tss2_MU_TPM2B_PUBLIC_Marshal(&tp, o->wire, sizeof(o->wire), &off) != TSS2_RC_SUCCESS)
		goto out;
	o->wire_len = off;
	if (bc_tpm_public_parse(o->wire, o->wire_len, &o->pub) != BC_OK ||
		bc_tpm_name(&o->pub, o->name, &o->name_len) != BC_OK)
		goto out;
	rc = 0;
out:
	BN_free(x);
	BN_free(y);
	return rc;
}

void
st_free(st_obj *o)
{
	EVP_PKEY_free(o->key);
	o->key = NULL;
}

/* Marshal a, sign it with the AK (ECDSA over SHA-256), marshal the signature. */
static int
sign_attest(const st_obj *ak, const TPMS_ATTEST *a, unsigned char *att, size_t *att_len,
			unsigned char *sig, size_t *sig_len)
{
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	unsigned char der[80];
	size_t		dlen = sizeof(der);
	const unsigned char *dp = der;
	ECDSA_SIG  *es = NULL;
	const BIGNUM *r,
			   *s;
	TPMT_SIGNATURE ts;
	size_t		off = 0;
	int			rc = -1;

	if (Tss2_MU_TPMS_ATTEST_Marshal(a, att, BC_TPM_STRUCT_MAX, &off) != TSS2_RC_SUCCESS)
		goto out;
	*att_len = off;
	if (md == NULL || EVP_DigestSignInit_ex(md, NULL, "SHA256", NULL, NULL, ak->key, NULL) != 1 ||
		EVP_DigestSign(md, der, &dlen, att, *att_len) != 1 ||
		(es = d2i_ECDSA_SIG(NULL, &dp, (long) dlen)) == NULL)
		goto out;
	ECDSA_SIG_get0(es, &r, &s);
	memset(&ts, 0, sizeof(ts));
	ts.sigAlg = TPM2_ALG_ECDSA;
	ts.signature.ecdsa.hash = TPM2_ALG_SHA256;
	ts.signature.ecdsa.signatureR.size = (UINT16) BN_num_bytes(r);
	ts.signature.ecdsa.signatureS.size = (UINT16) BN_num_bytes(s);
	BN_bn2bin(r, ts.signature.ecdsa.signatureR.buffer);
	BN_bn2bin(s, ts.signature.ecdsa.signatureS.buffer);
	off = 0;
	if (Tss2_MU_TPMT_SIGNATURE_Marshal(&ts, sig, BC_TPM_STRUCT_MAX, &off) != TSS2_RC_SUCCESS)
		goto out;
	*sig_len = off;
	rc = 0;
out:
	ECDSA_SIG_free(es);
	EVP_MD_CTX_free(md);
	return rc;
}

/* The TPMS_ATTEST fields every kind shares. */
static void
attest_head(TPMS_ATTEST *a, const st_obj *ak, TPMI_ST_ATTEST type, uint64_t clock, uint32_t reset)
{
	memset(a, 0, sizeof(*a));
	a->magic = TPM2_GENERATED_VALUE;
	a->type = type;
	a->qualifiedSigner.size = (UINT16) ak->name_len;
	memcpy(a->qualifiedSigner.name, ak->name, ak->name_len);
	a->clockInfo.clock = clock;
	a->clockInfo.resetCount = reset;
	a->clockInfo.restartCount = 0;
	a->clockInfo.safe = 1;
	a->firmwareVersion = 0x2019102300000000ULL;	/* any: the service does not read it */
}

int
st_certify(const st_obj *ak, const st_obj *obj, uint64_t clock, uint32_t reset,
		   unsigned char *att, size_t *att_len, unsigned char *sig, size_t *sig_len)
{
	TPMS_ATTEST a;
	static const unsigned char extra[4] = {0x00, 0xff, 0x55, 0xaa};

	attest_head(&a, ak, TPM2_ST_ATTEST_CERTIFY, clock, reset);
	a.extraData.size = sizeof(extra);
	memcpy(a.extraData.buffer, extra, sizeof(extra));
	a.attested.certify.name.size = (UINT16) obj->name_len;
	memcpy(a.attested.certify.name.name, obj->name, obj->name_len);
	a.attested.certify.qualifiedName.size = (UINT16) obj->name_len;
	memcpy(a.attested.certify.qualifiedName.name, obj->name, obj->name_len);
	return sign_attest(ak, &a, att, att_len, sig, sig_len);
}

int
st_quote(const st_obj *ak, const unsigned char extra[32], const int *pcrs, int n,
		 const unsigned char (*vals)[32], uint64_t clock, uint32_t reset,
		 unsigned char *att, size_t *att_len, unsigned char *sig, size_t *sig_len)
{
	TPMS_ATTEST a;
	TPMS_PCR_SELECTION *s;
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	unsigned int dl = 0;
	int			i,
				rc = -1;

	attest_head(&a, ak, TPM2_ST_ATTEST_QUOTE, clock, reset);
	a.extraData.size = 32;
	memcpy(a.extraData.buffer, extra, 32);
	a.attested.quote.pcrSelect.count = 1;
	s = &a.attested.quote.pcrSelect.pcrSelections[0];
	s->hash = TPM2_ALG_SHA256;
	s->sizeofSelect = 3;
	for (i = 0; i < n; i++)
	{
		if (pcrs[i] < 0 || pcrs[i] >= 24)
			goto out;
		s->pcrSelect[pcrs[i] / 8] |= (BYTE) (1 << (pcrs[i] % 8));
	}
	/* pcrDigest: SHA-256 over the values in selection order */
	if (md == NULL || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1)
		goto out;
	for (i = 0; i < n; i++)
		if (EVP_DigestUpdate(md, vals[i], 32) != 1)
			goto out;
	if (EVP_DigestFinal_ex(md, a.attested.quote.pcrDigest.buffer, &dl) != 1)
		goto out;
	a.attested.quote.pcrDigest.size = (UINT16) dl;
	rc = sign_attest(ak, &a, att, att_len, sig, sig_len);
out:
	EVP_MD_CTX_free(md);
	return rc;
}
