/*
 * crl.c: the node CA's certificate revocation list (RFC 5280 §5), built
 * with OpenSSL's X509_CRL API: version 2, the CA's subject as issuer,
 * thisUpdate and nextUpdate, one entry per revoked serial with its date and
 * reason code, the CRL number and the authority key identifier, signed
 * ECDSA with SHA-256 by the CA key.
 */
#include <stdlib.h>
#include <string.h>

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "bc_common.h"

/*
 * The RFC 5280 reason code of a revocation reason as bc_join writes it: an
 * operator's CRLReason name, or the service's own renewed and reclaimed
 * (superseded), retired (cessationOfOperation) and attestation-failed
 * (privilegeWithdrawn: a quarantine, docs/attestation.md).
 */
int
bc_crl_reason_code(const char *reason)
{
	static const struct
	{
		const char *name;
		int			code;
	}			codes[] = {
		{"unspecified", CRL_REASON_UNSPECIFIED},
		{"keyCompromise", CRL_REASON_KEY_COMPROMISE},
		{"cACompromise", CRL_REASON_CA_COMPROMISE},
		{"affiliationChanged", CRL_REASON_AFFILIATION_CHANGED},
		{"superseded", CRL_REASON_SUPERSEDED},
		{"cessationOfOperation", CRL_REASON_CESSATION_OF_OPERATION},
		{"privilegeWithdrawn", CRL_REASON_PRIVILEGE_WITHDRAWN},
		{"aACompromise", CRL_REASON_AA_COMPROMISE},
		{"renewed", CRL_REASON_SUPERSEDED},
		{"reclaimed", CRL_REASON_SUPERSEDED},
		{"retired", CRL_REASON_CESSATION_OF_OPERATION},
		{"attestation-failed", CRL_REASON_PRIVILEGE_WITHDRAWN},
	};
	size_t		i;

	for (i = 0; reason != NULL && i < sizeof(codes) / sizeof(codes[0]); i++)
	{
		if (strcmp(codes[i].name, reason) == 0)
			return codes[i].code;
	}
	return CRL_REASON_UNSPECIFIED;
}

/* One revoked entry: serial, date, reason code (none for unspecified). */
static int
add_entry(X509_CRL *crl, const bc_crl_entry *e)
{
	X509_REVOKED *r = X509_REVOKED_new();
	BIGNUM	   *bn = BN_bin2bn(e->serial, (int) sizeof(e->serial), NULL);
	ASN1_INTEGER *serial = bn != NULL ? BN_to_ASN1_INTEGER(bn, NULL) : NULL;
	ASN1_TIME  *when = ASN1_TIME_set(NULL, (time_t) e->revoked_at);
	ASN1_ENUMERATED *reason = NULL;
	int			ok = 0;

	if (r == NULL || serial == NULL || when == NULL ||
		X509_REVOKED_set_serialNumber(r, serial) != 1 ||
		X509_REVOKED_set_revocationDate(r, when) != 1)
		goto out;
	if (e->reason != CRL_REASON_UNSPECIFIED)
	{
		reason = ASN1_ENUMERATED_new();
		if (reason == NULL || ASN1_ENUMERATED_set(reason, e->reason) != 1 ||
			X509_REVOKED_add1_ext_i2d(r, NID_crl_reason, reason, 0, 0) != 1)
			goto out;
	}
	if (X509_CRL_add0_revoked(crl, r) != 1)
		goto out;
	r = NULL;					/* owned by the CRL */
	ok = 1;
out:
	X509_REVOKED_free(r);
	BN_free(bn);
	ASN1_INTEGER_free(serial);
	ASN1_TIME_free(when);
	ASN1_ENUMERATED_free(reason);
	return ok;
}

/* The CRL (DER, malloc()ed) of the n entries, signed by ca_key (see bc_common.h). */
int
bc_crl_build(X509 *ca, EVP_PKEY *ca_key, const bc_crl_entry *entries, size_t n,
			 int64_t this_update, int64_t next_update, uint64_t number,
			 unsigned char **der_out, size_t *der_len)
{
	X509_CRL   *crl = NULL;
	ASN1_TIME  *t1 = NULL;
	ASN1_TIME  *t2 = NULL;
	ASN1_INTEGER *num = NULL;
	AUTHORITY_KEYID *akid = NULL;
	const ASN1_OCTET_STRING *ca_skid;
	unsigned char *der = NULL;
	int			len;
	size_t		i;
	int			rc = BC_ECRYPTO;
	EVP_MD_CTX *md = NULL;
	char		props[64];

	*der_out = NULL;
	*der_len = 0;
	if (ca == NULL || ca_key == NULL || next_update <= this_update || (n > 0 && entries == NULL))
		return BC_EINVAL;
	ca_skid = X509_get0_subject_key_id(ca);
	crl = X509_CRL_new();
	t1 = ASN1_TIME_set(NULL, (time_t) this_update);
	t2 = ASN1_TIME_set(NULL, (time_t) next_update);
	num = ASN1_INTEGER_new();
	akid = AUTHORITY_KEYID_new();
	if (crl == NULL || t1 == NULL || t2 == NULL || num == NULL || akid == NULL || ca_skid == NULL ||
		X509_CRL_set_version(crl, X509_CRL_VERSION_2) != 1 ||
		X509_CRL_set_issuer_name(crl, X509_get_subject_name(ca)) != 1 ||
		X509_CRL_set1_lastUpdate(crl, t1) != 1 ||
		X509_CRL_set1_nextUpdate(crl, t2) != 1 ||
		ASN1_INTEGER_set_uint64(num, number) != 1 ||
		X509_CRL_add1_ext_i2d(crl, NID_crl_number, num, 0, 0) != 1 ||
		(akid->keyid = ASN1_OCTET_STRING_dup(ca_skid)) == NULL ||
		X509_CRL_add1_ext_i2d(crl, NID_authority_key_identifier, akid, 0, 0) != 1)
		goto out;
	for (i = 0; i < n; i++)
	{
		if (!add_entry(crl, &entries[i]))
			goto out;
	}
	if (X509_CRL_sort(crl) != 1 || (md = EVP_MD_CTX_new()) == NULL)
		goto out;
	/* In the key's own provider when it has one (a TPM's): bc_pkey_sign_props. */
	rc = BC_EKEY;
	if (EVP_DigestSignInit_ex(md, NULL, "SHA256", bc_pkey_libctx(ca_key),
							  bc_pkey_sign_props(ca_key, props, sizeof(props)), ca_key, NULL) != 1 ||
		X509_CRL_sign_ctx(crl, md) <= 0)
		goto out;
	rc = BC_ECRYPTO;
	len = i2d_X509_CRL(crl, &der);
	if (len <= 0)
		goto out;
	*der_out = malloc((size_t) len);
	if (*der_out == NULL)
	{
		rc = BC_ENOMEM;
		goto out;
	}
	memcpy(*der_out, der, (size_t) len);
	*der_len = (size_t) len;
	rc = BC_OK;
out:
	if (rc != BC_OK && rc != BC_EKEY)
		ERR_clear_error();
	OPENSSL_free(der);
	EVP_MD_CTX_free(md);
	X509_CRL_free(crl);
	ASN1_TIME_free(t1);
	ASN1_TIME_free(t2);
	ASN1_INTEGER_free(num);
	AUTHORITY_KEYID_free(akid);
	return rc;
}
