/*
 * csr.c: PKCS#10 certification requests (RFC 2986) as the JoinService reads
 * them: parsed by OpenSSL's ASN.1 engine with templates of our own.
 *
 * Why not d2i_X509_REQ: OpenSSL 3.0 decodes the public key of an X509_REQ
 * through its provider decoders as it parses, building a decoder context
 * per key, which cost a fifth of a whole join in the profile
 * (docs/performance.md).  The templates below are those of X509_REQ with the
 * SubjectPublicKeyInfo kept as its two fields; the key is then built once
 * from the point (EVP_PKEY_fromdata, checked on the curve), and the
 * signature over the request info is checked with ASN1_item_verify over the
 * bytes as they were received.  Nothing here is a hand-written parser.
 */
#include <stdlib.h>
#include <string.h>

#include <openssl/asn1t.h>
#include <openssl/err.h>
#include <openssl/objects.h>
#include <openssl/x509.h>

#include "bc_common.h"

/* SubjectPublicKeyInfo, as its algorithm and its bits. */
typedef struct BC_SPKI
{
	X509_ALGOR *algor;
	ASN1_BIT_STRING *public_key;
} BC_SPKI;

/* CertificationRequestInfo, keeping the encoding it arrived in. */
typedef struct BC_REQ_INFO
{
	ASN1_ENCODING enc;
	ASN1_INTEGER *version;
	X509_NAME  *subject;
	BC_SPKI    *pubkey;
	STACK_OF(X509_ATTRIBUTE) *attributes;
} BC_REQ_INFO;

/* CertificationRequest. */
typedef struct BC_REQ
{
	BC_REQ_INFO *info;
	X509_ALGOR *sig_alg;
	ASN1_BIT_STRING *signature;
} BC_REQ;

ASN1_SEQUENCE(BC_SPKI) = {
	ASN1_SIMPLE(BC_SPKI, algor, X509_ALGOR),
	ASN1_SIMPLE(BC_SPKI, public_key, ASN1_BIT_STRING)
} static_ASN1_SEQUENCE_END(BC_SPKI)

ASN1_SEQUENCE_enc(BC_REQ_INFO, enc, NULL) = {
	ASN1_SIMPLE(BC_REQ_INFO, version, ASN1_INTEGER),
	ASN1_SIMPLE(BC_REQ_INFO, subject, X509_NAME),
	ASN1_SIMPLE(BC_REQ_INFO, pubkey, BC_SPKI),
	/* not OPTIONAL in RFC 2986; X509_REQ tolerates its absence too */
	ASN1_IMP_SET_OF_OPT(BC_REQ_INFO, attributes, X509_ATTRIBUTE, 0)
} static_ASN1_SEQUENCE_END_ref(BC_REQ_INFO, BC_REQ_INFO)

ASN1_SEQUENCE(BC_REQ) = {
	ASN1_SIMPLE(BC_REQ, info, BC_REQ_INFO),
	ASN1_SIMPLE(BC_REQ, sig_alg, X509_ALGOR),
	ASN1_SIMPLE(BC_REQ, signature, ASN1_BIT_STRING)
} static_ASN1_SEQUENCE_END(BC_REQ)

/* A parsed CSR: the structure and the P-256 key built from it. */
struct bc_csr
{
	BC_REQ	   *req;
	EVP_PKEY   *key;
	unsigned char *spki_der;	/* the SubjectPublicKeyInfo, DER (OPENSSL_malloc) */
	int			spki_len;
};

/* Parse a DER PKCS#10 CSR (no trailing bytes) whose key is P-256. */
int
bc_csr_parse(const unsigned char *der, size_t n, bc_csr **out)
{
	const unsigned char *p = der;
	bc_csr	   *csr = NULL;
	const ASN1_OBJECT *alg = NULL;
	int			ptype = 0;
	const void *pval = NULL;
	int			rc = BC_ETOOBIG;

	*out = NULL;
	if (n > BC_DER_MAX)
		goto out;
	rc = BC_ENOMEM;
	csr = calloc(1, sizeof(*csr));
	if (csr == NULL)
		goto out;
	rc = BC_EINVAL;
	if (n == 0)
		goto out;
	csr->req = (BC_REQ *) ASN1_item_d2i(NULL, &p, (long) n, ASN1_ITEM_rptr(BC_REQ));
	if (csr->req == NULL || p != der + n)
		goto out;

	/* id-ecPublicKey on the named curve prime256v1, nothing else */
	rc = BC_EUNSUPPORTED;
	X509_ALGOR_get0(&alg, &ptype, &pval, csr->req->info->pubkey->algor);
	if (OBJ_obj2nid(alg) != NID_X9_62_id_ecPublicKey || ptype != V_ASN1_OBJECT ||
		OBJ_obj2nid((const ASN1_OBJECT *) pval) != NID_X9_62_prime256v1)
		goto out;
	/*
	 * A point is whole octets: a key BIT STRING with unused bits is refused
	 * (the decoder would mask them off the last octet, and the certificate
	 * would carry the SubjectPublicKeyInfo as it came).
	 */
	rc = BC_EINVAL;
	if ((csr->req->info->pubkey->public_key->flags & ASN1_STRING_FLAG_BITS_LEFT) != 0 &&
		(csr->req->info->pubkey->public_key->flags & 0x07) != 0)
		goto out;
	rc = bc_p256_from_point(ASN1_STRING_get0_data(csr->req->info->pubkey->public_key),
							(size_t) ASN1_STRING_length(csr->req->info->pubkey->public_key),
							&csr->key);
	if (rc != BC_OK)
		goto out;
	/* Its DER, encoded by OpenSSL once: hashed (key reuse) and certified as it is. */
	rc = BC_ECRYPTO;
	csr->spki_len = ASN1_item_i2d((const ASN1_VALUE *) csr->req->info->pubkey, &csr->spki_der,
								  ASN1_ITEM_rptr(BC_SPKI));
	if (csr->spki_len <= 0)
		goto out;
	rc = BC_OK;
	*out = csr;
	csr = NULL;
out:
	if (rc != BC_OK)
		ERR_clear_error();
	bc_csr_free(csr);
	return rc;
}

/* Free a parsed CSR (NULL is fine). */
void
bc_csr_free(bc_csr *csr)
{
	if (csr == NULL)
		return;
	ASN1_item_free((ASN1_VALUE *) csr->req, ASN1_ITEM_rptr(BC_REQ));
	EVP_PKEY_free(csr->key);
	OPENSSL_free(csr->spki_der);
	free(csr);
}

/* The CSR's public key (borrowed: valid while csr lives). */
EVP_PKEY *
bc_csr_pubkey(const bc_csr *csr)
{
	return csr->key;
}

/* BC_OK when the CSR's own signature verifies with its key (proof of possession). */
int
bc_csr_verify_pop(const bc_csr *csr)
{
	const ASN1_OBJECT *alg = NULL;
	int			ptype = V_ASN1_UNDEF;

	/*
	 * Exactly ecdsa-with-SHA256.  RFC 5758 §3.2 says its parameters are
	 * absent; the tpm2-openssl provider (Debian's 1.1.1) writes NULL, which
	 * is taken too: any other parameter is refused.
	 */
	X509_ALGOR_get0(&alg, &ptype, NULL, csr->req->sig_alg);
	if (OBJ_obj2nid(alg) != NID_ecdsa_with_SHA256 ||
		(ptype != V_ASN1_UNDEF && ptype != V_ASN1_NULL))
		return BC_EVERIFY;
	if (ASN1_item_verify(ASN1_ITEM_rptr(BC_REQ_INFO), csr->req->sig_alg,
						 csr->req->signature, csr->req->info, csr->key) != 1)
	{
		ERR_clear_error();
		return BC_EVERIFY;
	}
	return BC_OK;
}

/* SHA-256 over the DER SubjectPublicKeyInfo of the CSR's key. */
int
bc_csr_spki_sha256(const bc_csr *csr, unsigned char out[BC_SHA256_LEN])
{
	return bc_sha256(csr->spki_der, (size_t) csr->spki_len, out);
}

/* The DER SubjectPublicKeyInfo of the CSR's key (borrowed: valid while csr lives). */
void
bc_csr_spki_der(const bc_csr *csr, const unsigned char **der, size_t *len)
{
	*der = csr->spki_der;
	*len = (size_t) csr->spki_len;
}

/* The CSR key's public key bits, the uncompressed point (borrowed). */
void
bc_csr_key_bits(const bc_csr *csr, const unsigned char **bits, size_t *len)
{
	const ASN1_BIT_STRING *b = csr->req->info->pubkey->public_key;

	*bits = ASN1_STRING_get0_data(b);
	*len = (size_t) ASN1_STRING_length(b);
}

#ifdef BC_TEST_BUILD			/* for bc_cert_issue, the tests' reference issuer */
/*
 * Give cert the CSR's SubjectPublicKeyInfo: algorithm, curve and key bits
 * copied as they are, so no key encoder runs.
 */
int
bc_csr_set_cert_pubkey(const bc_csr *csr, X509 *cert)
{
	const ASN1_BIT_STRING *bits = csr->req->info->pubkey->public_key;
	int			n = ASN1_STRING_length(bits);
	unsigned char *copy;

	if (n <= 0)
		return BC_EINVAL;
	copy = OPENSSL_memdup(ASN1_STRING_get0_data(bits), (size_t) n);
	if (copy == NULL)
		return BC_ENOMEM;
	/* OBJ_nid2obj gives static objects: nothing to free on failure */
	if (X509_PUBKEY_set0_param(X509_get_X509_PUBKEY(cert),
							   OBJ_nid2obj(NID_X9_62_id_ecPublicKey), V_ASN1_OBJECT,
							   OBJ_nid2obj(NID_X9_62_prime256v1), copy, n) != 1)
	{
		OPENSSL_free(copy);
		ERR_clear_error();
		return BC_ECRYPTO;
	}
	return BC_OK;
}
#endif
