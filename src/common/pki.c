/*
 * pki.c: X.509 v3 node certificates on OpenSSL's X509 APIs (issue, parse,
 * verify, URI SANs) and making PKCS#10 CSRs (X509_REQ); reading CSRs is
 * csr.c's.  The JoinService issues from a CSR with bc_cert_issue_der:
 * the same certificate as bc_cert_issue, from ASN.1 templates of OpenSSL's
 * types, encoded once (see there).
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/asn1.h>
#include <openssl/asn1t.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include "bc_common.h"

/* Bytes of a certificate serial number. */
#define SERIAL_LEN 16
/* Bound of one URI SAN we put into or take out of a certificate. */
#define URI_SAN_MAX 2048

/* SHA-256 over the DER SubjectPublicKeyInfo of key. */
int
bc_pkey_spki_sha256(EVP_PKEY *key, unsigned char out[BC_SHA256_LEN])
{
	unsigned char *der = NULL;
	int			len;
	int			rc;

	if (key == NULL)
		return BC_EINVAL;
	len = i2d_PUBKEY(key, &der);
	if (len <= 0)
		return BC_ECRYPTO;
	rc = bc_sha256(der, (size_t) len, out);
	OPENSSL_free(der);
	return rc;
}

/*
 * SHA-256 over a certificate's DER SubjectPublicKeyInfo: its X509_PUBKEY
 * encoded by the ASN.1 template, the same bytes as bc_pkey_spki_sha256 of
 * its key without a round through the provider's encoder (i2d_PUBKEY builds
 * an OSSL_ENCODER context per call, ~0.7 M instructions; this is a few k).
 */
int
bc_cert_spki_sha256(X509 *cert, unsigned char out[BC_SHA256_LEN])
{
	unsigned char *der = NULL;
	int			len;
	int			rc;

	if (cert == NULL || X509_get_X509_PUBKEY(cert) == NULL)
		return BC_EINVAL;
	len = i2d_X509_PUBKEY(X509_get_X509_PUBKEY(cert), &der);
	if (len <= 0)
		return BC_ECRYPTO;
	rc = bc_sha256(der, (size_t) len, out);
	OPENSSL_free(der);
	return rc;
}

/* i2d of a CSR or certificate into a malloc()ed buffer. */
static int
der_copy(unsigned char *ossl_der, int len, unsigned char **der_out, size_t *der_len)
{
	if (len <= 0 || ossl_der == NULL)
		return BC_ECRYPTO;
	if ((size_t) len > BC_DER_MAX)
		return BC_ETOOBIG;
	*der_out = malloc((size_t) len);
	if (*der_out == NULL)
		return BC_ENOMEM;
	memcpy(*der_out, ossl_der, (size_t) len);
	*der_len = (size_t) len;
	return BC_OK;
}

/*
 * Sign req with a key of another provider (props "?provider=..."): the TBS
 * bytes signed in that provider, the AlgorithmIdentifier set here to
 * ecdsa-with-SHA256 without parameters (RFC 5758 3.2, what
 * bc_csr_verify_pop requires): tpm2-openssl 1.1 writes a NULL parameter.
 */
static int
sign_req_in_provider(X509_REQ *req, EVP_PKEY *key, const char *props)
{
	const ASN1_BIT_STRING *psig = NULL;
	const X509_ALGOR *palg = NULL;
	ASN1_BIT_STRING *sigbits;
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	unsigned char *tbs = NULL;
	unsigned char sig[160];
	size_t		sig_len = sizeof(sig);
	int			tbs_len;
	int			ok = 0;

	tbs_len = i2d_re_X509_REQ_tbs(req, &tbs);
	if (md == NULL || tbs_len <= 0 ||
		EVP_DigestSignInit_ex(md, NULL, "SHA256", bc_pkey_libctx(key), props, key, NULL) != 1 ||
		EVP_DigestSign(md, sig, &sig_len, tbs, (size_t) tbs_len) != 1)
		goto out;
	X509_REQ_get0_signature(req, &psig, &palg);
	sigbits = (ASN1_BIT_STRING *) psig;
	if (X509_ALGOR_set0((X509_ALGOR *) palg, OBJ_nid2obj(NID_ecdsa_with_SHA256),
						V_ASN1_UNDEF, NULL) != 1 ||
		ASN1_BIT_STRING_set(sigbits, sig, (int) sig_len) != 1)
		goto out;
	sigbits->flags &= ~(ASN1_STRING_FLAG_BITS_LEFT | 0x07);
	sigbits->flags |= ASN1_STRING_FLAG_BITS_LEFT;
	ok = 1;
out:
	OPENSSL_free(tbs);
	EVP_MD_CTX_free(md);
	return ok;
}

/* A CSR for key (subject CN=cn when not NULL), signed with SHA-256, as DER. */
int
bc_csr_create(EVP_PKEY *key, const char *cn,
			  unsigned char **der_out, size_t *der_len)
{
	X509_REQ   *req = NULL;
	X509_NAME  *name;
	char		props[64];
	unsigned char *der = NULL;
	int			len;
	int			rc = BC_EUNSUPPORTED;

	*der_out = NULL;
	*der_len = 0;
	if (!bc_pkey_is_p256(key))
		goto out;
	rc = BC_ECRYPTO;
	req = X509_REQ_new();
	if (req == NULL || X509_REQ_set_version(req, X509_REQ_VERSION_1) != 1)
		goto out;
	name = X509_REQ_get_subject_name(req);
	if (cn != NULL &&
		X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
								   (const unsigned char *) cn, -1, -1, 0) != 1)
	{
		rc = BC_EINVAL;
		goto out;
	}
	if (X509_REQ_set_pubkey(req, key) != 1)
		goto out;
	if (bc_pkey_sign_props(key, props, sizeof(props)) != NULL)
	{
		if (!sign_req_in_provider(req, key, props))
			goto out;
	}
	else if (X509_REQ_sign(req, key, EVP_sha256()) <= 0)
		goto out;
	len = i2d_X509_REQ(req, &der);
	rc = der_copy(der, len, der_out, der_len);
out:
	if (rc != BC_OK)
		ERR_clear_error();
	OPENSSL_free(der);
	X509_REQ_free(req);
	return rc;
}

/* What every node certificate carries alike, made once per process. */
static X509_ALGOR *const_sigalg;	/* ecdsa-with-SHA256, no parameters */
static X509_EXTENSION *const_exts[3];	/* basicConstraints, keyUsage, EKU */
static CRYPTO_ONCE const_once = CRYPTO_ONCE_STATIC_INIT;

static void
make_constants(void)
{
	BASIC_CONSTRAINTS *bcons = BASIC_CONSTRAINTS_new();
	ASN1_BIT_STRING *ku = ASN1_BIT_STRING_new();
	EXTENDED_KEY_USAGE *eku = sk_ASN1_OBJECT_new_null();
	X509_ALGOR *alg = X509_ALGOR_new();
	X509_EXTENSION *e[3] = {NULL, NULL, NULL};
	int			i;

	if (bcons == NULL || ku == NULL || eku == NULL || alg == NULL ||
		X509_ALGOR_set0(alg, OBJ_nid2obj(NID_ecdsa_with_SHA256), V_ASN1_UNDEF, NULL) != 1)
		goto out;
	bcons->ca = 0;
	if (ASN1_BIT_STRING_set_bit(ku, 0, 1) != 1 ||	/* digitalSignature */
		sk_ASN1_OBJECT_push(eku, OBJ_nid2obj(NID_client_auth)) <= 0 ||
		sk_ASN1_OBJECT_push(eku, OBJ_nid2obj(NID_server_auth)) <= 0)
		goto out;
	e[0] = X509V3_EXT_i2d(NID_basic_constraints, 1, bcons);
	e[1] = X509V3_EXT_i2d(NID_key_usage, 1, ku);
	e[2] = X509V3_EXT_i2d(NID_ext_key_usage, 0, eku);
	if (e[0] == NULL || e[1] == NULL || e[2] == NULL)
		goto out;
	for (i = 0; i < 3; i++)
	{
		const_exts[i] = e[i];
		e[i] = NULL;
	}
	const_sigalg = alg;
	alg = NULL;
out:
	for (i = 0; i < 3; i++)
		X509_EXTENSION_free(e[i]);
	X509_ALGOR_free(alg);
	BASIC_CONSTRAINTS_free(bcons);
	ASN1_BIT_STRING_free(ku);
	sk_ASN1_OBJECT_free(eku);	/* OBJ_nid2obj's objects are static */
	ERR_clear_error();
}

/* The subject and authority key identifiers: SHA-1 of the key bits, the CA's own. */
static int
key_id_exts(const unsigned char *bits, size_t n, X509 *ca_cert, X509_EXTENSION **skid_ext,
			X509_EXTENSION **akid_ext)
{
	const ASN1_OCTET_STRING *ca_skid = X509_get0_subject_key_id(ca_cert);
	ASN1_OCTET_STRING *skid = ASN1_OCTET_STRING_new();
	AUTHORITY_KEYID *akid = AUTHORITY_KEYID_new();
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int md_len = 0;
	int			ok = 0;

	if (bits == NULL || skid == NULL || akid == NULL || ca_skid == NULL ||
		EVP_Digest(bits, n, md, &md_len, EVP_sha1(), NULL) != 1 ||
		ASN1_OCTET_STRING_set(skid, md, (int) md_len) != 1 ||
		(akid->keyid = ASN1_OCTET_STRING_dup(ca_skid)) == NULL)
		goto out;
	*skid_ext = X509V3_EXT_i2d(NID_subject_key_identifier, 0, skid);
	*akid_ext = X509V3_EXT_i2d(NID_authority_key_identifier, 0, akid);
	ok = *skid_ext != NULL && *akid_ext != NULL;
out:
	ASN1_OCTET_STRING_free(skid);
	AUTHORITY_KEYID_free(akid);
	return ok;
}


/* The authorityInfoAccess extension with one OCSP responder URI (RFC 5280 4.2.2.1). */
static X509_EXTENSION *
aia_ocsp_ext(const char *url)
{
	AUTHORITY_INFO_ACCESS *aia = NULL;
	ACCESS_DESCRIPTION *ad = NULL;
	ASN1_IA5STRING *ia5 = NULL;
	X509_EXTENSION *ext = NULL;

	aia = sk_ACCESS_DESCRIPTION_new_null();
	ad = ACCESS_DESCRIPTION_new();
	ia5 = ASN1_IA5STRING_new();
	if (aia == NULL || ad == NULL || ia5 == NULL ||
		ASN1_STRING_set(ia5, url, (int) strlen(url)) != 1)
		goto out;
	ASN1_OBJECT_free(ad->method);
	ad->method = OBJ_nid2obj(NID_ad_OCSP);
	GENERAL_NAME_set0_value(ad->location, GEN_URI, ia5);
	ia5 = NULL;
	if (sk_ACCESS_DESCRIPTION_push(aia, ad) <= 0)
		goto out;
	ad = NULL;
	ext = X509V3_EXT_i2d(NID_info_access, 0, aia);
out:
	ASN1_IA5STRING_free(ia5);
	ACCESS_DESCRIPTION_free(ad);
	sk_ACCESS_DESCRIPTION_pop_free(aia, ACCESS_DESCRIPTION_free);
	return ext;
}


/* 1 when uri is a non-empty run of printable ASCII without spaces, bounded. */
static int	uri_is_acceptable(const char *uri);

/* The CRL distribution point extension: one fullName URI (RFC 5280 4.2.1.13). */
static X509_EXTENSION *
crl_dp_ext(const char *url)
{
	CRL_DIST_POINTS *dps = NULL;
	DIST_POINT *dp = NULL;
	GENERAL_NAME *gn = NULL;
	ASN1_IA5STRING *ia5 = NULL;
	X509_EXTENSION *ext = NULL;

	dps = sk_DIST_POINT_new_null();
	dp = DIST_POINT_new();
	gn = GENERAL_NAME_new();
	ia5 = ASN1_IA5STRING_new();
	if (dps == NULL || dp == NULL || gn == NULL || ia5 == NULL ||
		ASN1_STRING_set(ia5, url, (int) strlen(url)) != 1)
		goto out;
	GENERAL_NAME_set0_value(gn, GEN_URI, ia5);
	ia5 = NULL;
	if ((dp->distpoint = DIST_POINT_NAME_new()) == NULL)
		goto out;
	dp->distpoint->type = 0;	/* fullName */
	if ((dp->distpoint->name.fullname = GENERAL_NAMES_new()) == NULL ||
		sk_GENERAL_NAME_push(dp->distpoint->name.fullname, gn) <= 0)
		goto out;
	gn = NULL;
	if (sk_DIST_POINT_push(dps, dp) <= 0)
		goto out;
	dp = NULL;
	ext = X509V3_EXT_i2d(NID_crl_distribution_points, 0, dps);
out:
	ASN1_IA5STRING_free(ia5);
	GENERAL_NAME_free(gn);
	DIST_POINT_free(dp);
	sk_DIST_POINT_pop_free(dps, DIST_POINT_free);
	return ext;
}


/* 1 when uri is a non-empty run of printable ASCII without spaces, bounded. */
static int
uri_is_acceptable(const char *uri)
{
	size_t		i;

	if (uri == NULL || uri[0] == '\0')
		return 0;
	for (i = 0; uri[i] != '\0'; i++)
	{
		if (i >= URI_SAN_MAX || uri[i] <= 0x20 || uri[i] >= 0x7f)
			return 0;
	}
	return 1;
}

/*
 * The subjectAltName extension holding the URIs, in order; critical when
 * the subject is empty (RFC 5280 4.2.1.6, checked by X509_V_FLAG_X509_STRICT).
 */
static X509_EXTENSION *
uri_san_ext(const char *const *uris, size_t n_uris, int critical)
{
	GENERAL_NAMES *names = NULL;
	GENERAL_NAME *gen = NULL;
	ASN1_IA5STRING *ia5 = NULL;
	X509_EXTENSION *ext = NULL;
	size_t		i;

	names = GENERAL_NAMES_new();
	if (names == NULL)
		goto out;
	for (i = 0; i < n_uris; i++)
	{
		gen = GENERAL_NAME_new();
		ia5 = ASN1_IA5STRING_new();
		if (gen == NULL || ia5 == NULL ||
			ASN1_STRING_set(ia5, uris[i], (int) strlen(uris[i])) != 1)
			goto out;
		GENERAL_NAME_set0_value(gen, GEN_URI, ia5);
		ia5 = NULL;
		if (sk_GENERAL_NAME_push(names, gen) <= 0)
			goto out;
		gen = NULL;
	}
	ext = X509V3_EXT_i2d(NID_subject_alt_name, critical, names);
out:
	ASN1_IA5STRING_free(ia5);
	GENERAL_NAME_free(gen);
	GENERAL_NAMES_free(names);
	return ext;
}


/*
 * 16 random serial bytes, not all zero, as a positive INTEGER: all 128 bits
 * random (the contract's), so half the serials encode in 17 bytes, a zero
 * byte before a first byte whose top bit is set (RFC 5280 4.1.2.2 allows 20).
 */
static ASN1_INTEGER *
random_serial(unsigned char serial[SERIAL_LEN])
{
	BIGNUM	   *bn = NULL;
	ASN1_INTEGER *ai = NULL;

	do
	{
		if (RAND_bytes(serial, SERIAL_LEN) != 1)
			goto out;
		bn = BN_bin2bn(serial, SERIAL_LEN, bn);
		if (bn == NULL)
			goto out;
	} while (BN_is_zero(bn));
	ai = BN_to_ASN1_INTEGER(bn, NULL);
out:
	BN_free(bn);
	return ai;
}




/* Check bc_cert_issue's parameters before anything is built. */
static int
check_issue_params(const bc_cert_params *p)
{
	size_t		i;

	if (p == NULL || p->ca_cert == NULL || p->ca_key == NULL ||
		(p->subject_key == NULL && p->subject_csr == NULL) ||
		(p->n_uris > 0 && p->uris == NULL))
		return BC_EINVAL;
	if (p->subject_key != NULL && !bc_pkey_is_p256(p->subject_key))
		return BC_EUNSUPPORTED;
	if (!bc_pkey_is_p256(p->ca_key))
		return BC_EKEY;			/* the CA key's provider does not answer (bc_common.h) */
	/* An empty subject needs a subjectAltName (RFC 5280 4.1.2.6). */
	if (p->subject_cn == NULL && p->n_uris == 0)
		return BC_EINVAL;
	if (p->not_after <= p->not_before || p->not_before < 0 ||
		(sizeof(time_t) < 8 && p->not_after > INT_MAX))
		return BC_EINVAL;
	for (i = 0; i < p->n_uris; i++)
	{
		if (!uri_is_acceptable(p->uris[i]))
			return BC_EINVAL;
	}
	if (!bc_ossl_cache_ca_checked(p->ca_cert, p->ca_key) &&
		X509_check_private_key(p->ca_cert, p->ca_key) != 1)
	{
		ERR_clear_error();
		return BC_EINVAL;
	}
	bc_ossl_cache_ca_check_passed(p->ca_cert, p->ca_key);
	return BC_OK;
}

#ifdef BC_TEST_BUILD

/*
 * The X509-API issuer the unit tests compare bc_cert_issue_der with (the
 * same certificate, built by OpenSSL's X509 setters); only in test builds.
 */

/*
 * Add the extensions every node certificate carries, from OpenSSL's own
 * typed structures (X509V3_EXT_i2d encodes them; the first three once per
 * process, make_constants):
 *   basicConstraints     critical, CA:FALSE
 *   keyUsage             critical, digitalSignature
 *   extendedKeyUsage     clientAuth, serverAuth
 *   subjectKeyIdentifier SHA-1 of the subject key's bits (RFC 5280 4.2.1.2
 *                        method 1, what OpenSSL's "hash" computes)
 *   authorityKeyIdentifier  keyid: the CA's own subjectKeyIdentifier, which
 *                        the CA must have ("keyid:always").
 * The same certificate as the configuration strings would give, without
 * parsing them for every certificate.
 */
static int
add_node_extensions(X509 *cert, X509 *ca_cert)
{
	const ASN1_BIT_STRING *bits = X509_get0_pubkey_bitstr(cert);
	X509_EXTENSION *skid = NULL;
	X509_EXTENSION *akid = NULL;
	int			ok = 0;

	if (!CRYPTO_THREAD_run_once(&const_once, make_constants) || const_sigalg == NULL ||
		bits == NULL ||
		!key_id_exts(ASN1_STRING_get0_data(bits), (size_t) ASN1_STRING_length(bits), ca_cert,
					 &skid, &akid))
		goto out;
	ok = X509_add_ext(cert, const_exts[0], -1) == 1 &&
		X509_add_ext(cert, const_exts[1], -1) == 1 &&
		X509_add_ext(cert, const_exts[2], -1) == 1 &&
		X509_add_ext(cert, skid, -1) == 1 &&
		X509_add_ext(cert, akid, -1) == 1;
out:
	X509_EXTENSION_free(skid);
	X509_EXTENSION_free(akid);
	return ok;
}

/* Add the CRL distribution point to cert. */
static int
add_crl_dp(X509 *cert, const char *url)
{
	X509_EXTENSION *ext;
	int			rc = BC_ECRYPTO;

	if (!uri_is_acceptable(url))
		return BC_EINVAL;
	ext = crl_dp_ext(url);
	if (ext != NULL && X509_add_ext(cert, ext, -1) == 1)
		rc = BC_OK;
	X509_EXTENSION_free(ext);
	return rc;
}

/* Add the authorityInfoAccess with the OCSP responder URI to cert. */
static int
add_aia_ocsp(X509 *cert, const char *url)
{
	X509_EXTENSION *ext;
	int			rc = BC_ECRYPTO;

	if (!uri_is_acceptable(url))
		return BC_EINVAL;
	ext = aia_ocsp_ext(url);
	if (ext != NULL && X509_add_ext(cert, ext, -1) == 1)
		rc = BC_OK;
	X509_EXTENSION_free(ext);
	return rc;
}

/* Add the subjectAltName of the URIs to cert. */
static int
add_uri_sans(X509 *cert, const char *const *uris, size_t n_uris, int critical)
{
	X509_EXTENSION *ext = uri_san_ext(uris, n_uris, critical);
	int			rc = BC_ECRYPTO;

	if (ext != NULL && X509_add_ext(cert, ext, -1) == 1)
		rc = BC_OK;
	X509_EXTENSION_free(ext);
	return rc;
}

/* 16 random serial bytes (128 random bits), not all zero, set on cert. */
static int
set_random_serial(X509 *cert, unsigned char serial[SERIAL_LEN])
{
	ASN1_INTEGER *ai = random_serial(serial);
	int			rc = BC_ECRYPTO;

	if (ai != NULL && X509_set_serialNumber(cert, ai) == 1)
		rc = BC_OK;
	ASN1_INTEGER_free(ai);
	return rc;
}

/* Set notBefore and notAfter from unix seconds. */
static int
set_validity(X509 *cert, int64_t not_before, int64_t not_after)
{
	ASN1_TIME  *t = NULL;
	int			ok;

	t = ASN1_TIME_set(NULL, (time_t) not_before);
	ok = t != NULL && X509_set1_notBefore(cert, t) == 1;
	if (ok && ASN1_TIME_set(t, (time_t) not_after) == NULL)
		ok = 0;
	ok = ok && X509_set1_notAfter(cert, t) == 1;
	ASN1_TIME_free(t);
	return ok ? BC_OK : BC_ECRYPTO;
}

/* Issue an X.509 v3 end-entity certificate (see bc_common.h). */
int
bc_cert_issue(const bc_cert_params *p, unsigned char serial_out[16], X509 **out)
{
	X509	   *cert = NULL;
	EVP_MD_CTX *sign_ctx = NULL;
	int			rc;

	*out = NULL;
	rc = check_issue_params(p);
	if (rc != BC_OK)
		goto out;
	rc = BC_ECRYPTO;
	cert = X509_new();
	if (cert == NULL || X509_set_version(cert, X509_VERSION_3) != 1)
		goto out;
	rc = set_random_serial(cert, serial_out);
	if (rc != BC_OK)
		goto out;
	rc = BC_EINVAL;
	if (p->subject_cn != NULL &&
		X509_NAME_add_entry_by_NID(X509_get_subject_name(cert), NID_commonName, MBSTRING_UTF8,
								   (const unsigned char *) p->subject_cn,
								   -1, -1, 0) != 1)
		goto out;
	rc = BC_ECRYPTO;
	if (X509_set_issuer_name(cert, X509_get_subject_name(p->ca_cert)) != 1 ||
		(p->subject_csr != NULL ? bc_csr_set_cert_pubkey(p->subject_csr, cert) != BC_OK
		 : X509_set_pubkey(cert, p->subject_key) != 1))
		goto out;
	rc = set_validity(cert, p->not_before, p->not_after);
	if (rc != BC_OK)
		goto out;
	rc = BC_ECRYPTO;
	if (!add_node_extensions(cert, p->ca_cert))
		goto out;
	if (p->n_uris > 0)
	{
		rc = add_uri_sans(cert, p->uris, p->n_uris, p->subject_cn == NULL);
		if (rc != BC_OK)
			goto out;
	}
	if (p->crl_url != NULL)
	{
		rc = add_crl_dp(cert, p->crl_url);
		if (rc != BC_OK)
			goto out;
	}
	if (p->ocsp_url != NULL)
	{
		rc = add_aia_ocsp(cert, p->ocsp_url);
		if (rc != BC_OK)
			goto out;
	}
	rc = BC_ECRYPTO;
	sign_ctx = bc_ossl_cache_sign_ctx(p->ca_key);
	if (sign_ctx != NULL ? X509_sign_ctx(cert, sign_ctx) <= 0
		: X509_sign(cert, p->ca_key, EVP_sha256()) <= 0)
		goto out;
	*out = cert;
	cert = NULL;
	rc = BC_OK;
out:
	EVP_MD_CTX_free(sign_ctx);
	if (rc != BC_OK)
		ERR_clear_error();
	X509_free(cert);
	return rc;
}

#endif							/* BC_TEST_BUILD */


/*
 * bc_cert_issue_der's templates: a TBSCertificate and a Certificate (RFC
 * 5280 4.1) whose fields are OpenSSL's own types (the same X509_CINF
 * encodes), except two that arrive already encoded, by OpenSSL, and are
 * written as they are (ASN1_ANY holding a SEQUENCE is its whole encoding):
 * the CSR's SubjectPublicKeyInfo and, in the Certificate, the
 * TBSCertificate that was signed.  So the certificate is encoded once, where
 * X509_sign and i2d_X509 encode it twice, and no X509 object is built.
 */
typedef struct BC_TBS
{
	ASN1_INTEGER *version;
	ASN1_INTEGER *serial;
	X509_ALGOR *signature;
	X509_NAME  *issuer;
	X509_VAL   *validity;
	X509_NAME  *subject;
	ASN1_TYPE  *spki;
	STACK_OF(X509_EXTENSION) *extensions;
} BC_TBS;

ASN1_SEQUENCE(BC_TBS) = {
	ASN1_EXP_OPT(BC_TBS, version, ASN1_INTEGER, 0),
	ASN1_SIMPLE(BC_TBS, serial, ASN1_INTEGER),
	ASN1_SIMPLE(BC_TBS, signature, X509_ALGOR),
	ASN1_SIMPLE(BC_TBS, issuer, X509_NAME),
	ASN1_SIMPLE(BC_TBS, validity, X509_VAL),
	ASN1_SIMPLE(BC_TBS, subject, X509_NAME),
	ASN1_SIMPLE(BC_TBS, spki, ASN1_ANY),
	ASN1_EXP_SEQUENCE_OF_OPT(BC_TBS, extensions, X509_EXTENSION, 3)
} static_ASN1_SEQUENCE_END(BC_TBS)

typedef struct BC_CERT
{
	ASN1_TYPE  *tbs;
	X509_ALGOR *sig_alg;
	ASN1_BIT_STRING *signature;
} BC_CERT;

ASN1_SEQUENCE(BC_CERT) = {
	ASN1_SIMPLE(BC_CERT, tbs, ASN1_ANY),
	ASN1_SIMPLE(BC_CERT, sig_alg, X509_ALGOR),
	ASN1_SIMPLE(BC_CERT, signature, ASN1_BIT_STRING)
} static_ASN1_SEQUENCE_END(BC_CERT)

/* Issue a node certificate for a CSR's key, as DER (see bc_common.h). */
int
bc_cert_issue_der(const bc_cert_params *p, unsigned char serial_out[16],
				  unsigned char **der_out, size_t *der_len)
{
	BC_TBS		tbs;
	BC_CERT		cert;
	ASN1_STRING spki_str;
	ASN1_TYPE	spki_any;
	ASN1_STRING tbs_str;
	ASN1_TYPE	tbs_any;
	const unsigned char *spki;
	size_t		spki_len;
	const unsigned char *key_bits;
	size_t		key_bits_len;
	X509_EXTENSION *own[5] = {NULL, NULL, NULL, NULL, NULL};	/* SKID, AKID, SAN, CRL DP, AIA */
	unsigned char *tbs_der = NULL;
	int			tbs_len;
	unsigned char sig[128];		/* a DER ECDSA P-256 signature is at most 72 */
	size_t		sig_len = sizeof(sig);
	EVP_MD_CTX *sign_ctx = NULL;
	unsigned char *der = NULL;
	char		props[64];
	int			len;
	int			i;
	int			rc;

	*der_out = NULL;
	*der_len = 0;
	memset(&tbs, 0, sizeof(tbs));
	memset(&cert, 0, sizeof(cert));
	if (p == NULL || p->subject_csr == NULL || p->subject_key != NULL)
		return BC_EINVAL;
	rc = check_issue_params(p);
	if (rc != BC_OK)
		goto out;
	rc = BC_ECRYPTO;
	if (!CRYPTO_THREAD_run_once(&const_once, make_constants) || const_sigalg == NULL)
		goto out;
	tbs.version = ASN1_INTEGER_new();
	tbs.serial = random_serial(serial_out);
	tbs.validity = X509_VAL_new();
	tbs.subject = X509_NAME_new();
	tbs.extensions = sk_X509_EXTENSION_new_null();
	cert.signature = ASN1_BIT_STRING_new();
	if (tbs.version == NULL || ASN1_INTEGER_set(tbs.version, X509_VERSION_3) != 1 ||
		tbs.serial == NULL || tbs.validity == NULL || tbs.subject == NULL ||
		tbs.extensions == NULL || cert.signature == NULL)
		goto out;
	tbs.signature = const_sigalg;
	/* The issuer's name as its certificate holds it (encoded from its cache). */
	tbs.issuer = X509_get_subject_name(p->ca_cert);
	if (ASN1_TIME_set(tbs.validity->notBefore, (time_t) p->not_before) == NULL ||
		ASN1_TIME_set(tbs.validity->notAfter, (time_t) p->not_after) == NULL)
		goto out;
	rc = BC_EINVAL;
	if (p->subject_cn != NULL &&
		X509_NAME_add_entry_by_NID(tbs.subject, NID_commonName, MBSTRING_UTF8,
								   (const unsigned char *) p->subject_cn, -1, -1, 0) != 1)
		goto out;
	rc = BC_ECRYPTO;
	bc_csr_spki_der(p->subject_csr, &spki, &spki_len);
	spki_str.length = (int) spki_len;
	spki_str.type = V_ASN1_SEQUENCE;
	spki_str.data = (unsigned char *) spki;
	spki_str.flags = 0;
	spki_any.type = V_ASN1_SEQUENCE;
	spki_any.value.sequence = &spki_str;
	tbs.spki = &spki_any;

	/* The extensions in bc_cert_issue's order. */
	bc_csr_key_bits(p->subject_csr, &key_bits, &key_bits_len);
	if (!key_id_exts(key_bits, key_bits_len, p->ca_cert, &own[0], &own[1]))
		goto out;
	if (p->n_uris > 0 &&
		(own[2] = uri_san_ext(p->uris, p->n_uris, p->subject_cn == NULL)) == NULL)
		goto out;
	if (p->crl_url != NULL)
	{
		rc = BC_EINVAL;
		if (!uri_is_acceptable(p->crl_url))
			goto out;
		rc = BC_ECRYPTO;
		if ((own[3] = crl_dp_ext(p->crl_url)) == NULL)
			goto out;
	}
	if (p->ocsp_url != NULL)
	{
		rc = BC_EINVAL;
		if (!uri_is_acceptable(p->ocsp_url))
			goto out;
		rc = BC_ECRYPTO;
		if ((own[4] = aia_ocsp_ext(p->ocsp_url)) == NULL)
			goto out;
	}
	for (i = 0; i < 3; i++)
		if (sk_X509_EXTENSION_push(tbs.extensions, const_exts[i]) <= 0)
			goto out;
	for (i = 0; i < 5; i++)
		if (own[i] != NULL && sk_X509_EXTENSION_push(tbs.extensions, own[i]) <= 0)
			goto out;

	tbs_len = ASN1_item_i2d((const ASN1_VALUE *) &tbs, &tbs_der, ASN1_ITEM_rptr(BC_TBS));
	if (tbs_len <= 0)
		goto out;
	/* From here the CA key's own operation: its provider or engine (a TPM's, a token's). */
	rc = BC_EKEY;
	sign_ctx = bc_ossl_cache_sign_ctx(p->ca_key);
	if (sign_ctx == NULL &&
		((sign_ctx = EVP_MD_CTX_new()) == NULL ||
		 EVP_DigestSignInit_ex(sign_ctx, NULL, "SHA256", bc_pkey_libctx(p->ca_key),
							   bc_pkey_sign_props(p->ca_key, props, sizeof(props)),
							   p->ca_key, NULL) != 1))
		goto out;
	if (EVP_DigestSign(sign_ctx, sig, &sig_len, tbs_der, (size_t) tbs_len) != 1)
		goto out;
	rc = BC_ECRYPTO;
	if (ASN1_BIT_STRING_set(cert.signature, sig, (int) sig_len) != 1)
		goto out;
	/* No unused bits, as ASN1_item_sign sets them. */
	cert.signature->flags &= ~(ASN1_STRING_FLAG_BITS_LEFT | 0x07);
	cert.signature->flags |= ASN1_STRING_FLAG_BITS_LEFT;

	tbs_str.length = tbs_len;
	tbs_str.type = V_ASN1_SEQUENCE;
	tbs_str.data = tbs_der;
	tbs_str.flags = 0;
	tbs_any.type = V_ASN1_SEQUENCE;
	tbs_any.value.sequence = &tbs_str;
	cert.tbs = &tbs_any;
	cert.sig_alg = const_sigalg;
	len = ASN1_item_i2d((const ASN1_VALUE *) &cert, &der, ASN1_ITEM_rptr(BC_CERT));
	rc = der_copy(der, len, der_out, der_len);
out:
	if (rc != BC_OK && rc != BC_EKEY)
		ERR_clear_error();
	OPENSSL_cleanse(sig, sizeof(sig));
	OPENSSL_free(der);
	OPENSSL_free(tbs_der);
	EVP_MD_CTX_free(sign_ctx);
	ASN1_BIT_STRING_free(cert.signature);
	sk_X509_EXTENSION_free(tbs.extensions);	/* the constant ones stay */
	for (i = 0; i < 5; i++)
		X509_EXTENSION_free(own[i]);
	X509_NAME_free(tbs.subject);
	X509_VAL_free(tbs.validity);
	ASN1_INTEGER_free(tbs.serial);
	ASN1_INTEGER_free(tbs.version);
	return rc;
}

/* DER of a certificate (malloc). */
int
bc_cert_der(X509 *cert, unsigned char **der_out, size_t *der_len)
{
	unsigned char *der = NULL;
	int			len;
	int			rc;

	*der_out = NULL;
	*der_len = 0;
	len = i2d_X509(cert, &der);
	rc = der_copy(der, len, der_out, der_len);
	OPENSSL_free(der);
	return rc;
}

/* Parse one DER certificate of n bytes (no trailing bytes). */
int
bc_cert_parse(const unsigned char *der, size_t n, X509 **out)
{
	const unsigned char *p = der;
	X509	   *cert;

	*out = NULL;
	if (n > BC_DER_MAX)
		return BC_ETOOBIG;
	if (n == 0)
		return BC_EINVAL;
	cert = d2i_X509(NULL, &p, (long) n);
	if (cert == NULL || p != der + n)
	{
		ERR_clear_error();
		X509_free(cert);
		return BC_EINVAL;
	}
	*out = cert;
	return BC_OK;
}

/* Read one PEM certificate from path; NULL and a reason in err on failure. */
X509 *
bc_cert_read_pem_file(const char *path, char *err, size_t errlen)
{
	BIO		   *bio;
	X509	   *cert = NULL;
	char		ossl[256];

	if (err != NULL && errlen > 0)
		err[0] = '\0';
	bio = BIO_new_file(path, "r");
	if (bio != NULL)
		cert = PEM_read_bio_X509(bio, NULL, NULL, NULL);
	if (cert == NULL)
	{
		bc_ossl_errors(ossl, sizeof(ossl));
		if (err != NULL && errlen > 0)
			BIO_snprintf(err, errlen, "%s: %s",
						 bio == NULL ? "cannot open certificate file" :
						 "no PEM certificate in file", ossl);
	}
	BIO_free(bio);
	return cert;
}

/* A bundle of PEM certificates (bc_common.h). */
int
bc_cert_read_pem_bundle(const char *path, const char *text, size_t len,
						X509 **out, size_t max, size_t *n, char *err, size_t errlen)
{
	BIO		   *bio;
	char		ossl[256];
	const char *what = NULL;
	int			rc = BC_EINVAL;

	*n = 0;
	if (err != NULL && errlen > 0)
		err[0] = '\0';
	bio = path != NULL ? BIO_new_file(path, "r") :
		(len <= INT_MAX ? BIO_new_mem_buf(text, (int) len) : NULL);
	if (bio == NULL)
	{
		what = "cannot open certificate file";
		goto out;
	}
	for (;;)
	{
		X509	   *cert = PEM_read_bio_X509(bio, NULL, NULL, NULL);

		if (cert == NULL)
		{
			unsigned long e = ERR_peek_last_error();

			/* The end of the input, after the last certificate. */
			if (*n > 0 && ERR_GET_REASON(e) == PEM_R_NO_START_LINE)
			{
				ERR_clear_error();
				rc = BC_OK;
				break;
			}
			what = *n == 0 ? "no PEM certificate" : "a malformed certificate in the bundle";
			break;
		}
		if (*n == max)
		{
			X509_free(cert);
			rc = BC_ETOOBIG;
			what = "too many certificates in the bundle";
			break;
		}
		out[(*n)++] = cert;
	}
out:
	if (rc != BC_OK)
	{
		bc_ossl_errors(ossl, sizeof(ossl));
		if (err != NULL && errlen > 0)
			BIO_snprintf(err, errlen, "%s%s%s", what, ossl[0] ? ": " : "", ossl);
		while (*n > 0)
			X509_free(out[--*n]);
	}
	BIO_free(bio);
	return rc;
}


/* The first URI SAN of cert starting with prefix, malloc()ed. */
int
bc_cert_uri_san(X509 *cert, const char *prefix, char **out)
{
	GENERAL_NAMES *names;
	size_t		prefix_len = prefix != NULL ? strlen(prefix) : 0;
	int			i;
	int			rc = BC_EINVAL;

	*out = NULL;
	names = X509_get_ext_d2i(cert, NID_subject_alt_name, NULL, NULL);
	if (names == NULL)
	{
		ERR_clear_error();
		return BC_EINVAL;
	}
	for (i = 0; i < sk_GENERAL_NAME_num(names); i++)
	{
		const GENERAL_NAME *gen = sk_GENERAL_NAME_value(names, i);
		const unsigned char *data;
		int			len;

		if (gen->type != GEN_URI)
			continue;
		data = ASN1_STRING_get0_data(gen->d.uniformResourceIdentifier);
		len = ASN1_STRING_length(gen->d.uniformResourceIdentifier);
		if (len <= 0 || len > URI_SAN_MAX || memchr(data, '\0', (size_t) len) != NULL)
			continue;
		if ((size_t) len < prefix_len || memcmp(data, prefix, prefix_len) != 0)
			continue;
		*out = malloc((size_t) len + 1);
		if (*out == NULL)
		{
			rc = BC_ENOMEM;
			break;
		}
		memcpy(*out, data, (size_t) len);
		(*out)[len] = '\0';
		rc = BC_OK;
		break;
	}
	GENERAL_NAMES_free(names);
	return rc;
}

/* Verify leaf through untrusted[0..n) to the one anchor (strict, at at_unix or now). */
int
bc_cert_verify_path(X509 *leaf, X509 *const *untrusted, size_t n, X509 *anchor,
					int64_t at_unix)
{
	X509_STORE *store = NULL;
	X509_STORE_CTX *ctx = NULL;
	STACK_OF(X509) *chain = NULL;
	X509_VERIFY_PARAM *param;
	size_t		i;
	int			rc = BC_ECRYPTO;

	if (leaf == NULL || anchor == NULL)
		return BC_EINVAL;
	store = X509_STORE_new();
	ctx = X509_STORE_CTX_new();
	chain = sk_X509_new_null();
	if (store == NULL || ctx == NULL || chain == NULL || X509_STORE_add_cert(store, anchor) != 1)
		goto out;
	for (i = 0; i < n; i++)
	{
		if (sk_X509_push(chain, untrusted[i]) <= 0)
			goto out;
	}
	if (X509_STORE_CTX_init(ctx, store, leaf, chain) != 1)
		goto out;
	param = X509_STORE_CTX_get0_param(ctx);
	X509_VERIFY_PARAM_set_flags(param, X509_V_FLAG_X509_STRICT | X509_V_FLAG_PARTIAL_CHAIN);
	if (X509_STORE_CTX_set_purpose(ctx, X509_PURPOSE_ANY) != 1)
		goto out;
	if (at_unix != 0)
		X509_VERIFY_PARAM_set_time(param, (time_t) at_unix);
	rc = X509_verify_cert(ctx) == 1 ? BC_OK : BC_EVERIFY;
out:
	ERR_clear_error();
	X509_STORE_CTX_free(ctx);
	sk_X509_free(chain);		/* the certificates stay the caller's */
	X509_STORE_free(store);
	return rc;
}

/* notAfter of cert in unix seconds. */
int
bc_cert_not_after(X509 *cert, int64_t *out)
{
	struct tm	tm;

	*out = 0;
	memset(&tm, 0, sizeof(tm));
	if (ASN1_TIME_to_tm(X509_get0_notAfter(cert), &tm) != 1)
	{
		ERR_clear_error();
		return BC_EINVAL;
	}
	*out = (int64_t) timegm(&tm);
	return BC_OK;
}

/* How many URI SANs of cert start with prefix. */
int
bc_cert_uri_san_count(X509 *cert, const char *prefix)
{
	GENERAL_NAMES *names = X509_get_ext_d2i(cert, NID_subject_alt_name, NULL, NULL);
	size_t		prefix_len = strlen(prefix);
	int			count = 0;
	int			i;

	if (names == NULL)
	{
		ERR_clear_error();
		return 0;
	}
	for (i = 0; i < sk_GENERAL_NAME_num(names); i++)
	{
		const GENERAL_NAME *gen = sk_GENERAL_NAME_value(names, i);
		int			len;

		if (gen->type != GEN_URI)
			continue;
		len = ASN1_STRING_length(gen->d.uniformResourceIdentifier);
		if (len >= 0 && (size_t) len >= prefix_len &&
			memcmp(ASN1_STRING_get0_data(gen->d.uniformResourceIdentifier), prefix,
				   prefix_len) == 0)
			count++;
	}
	GENERAL_NAMES_free(names);
	return count;
}

#ifdef BC_TEST_BUILD

/* Verify leaf against the single trusted CA (strict, at at_unix or now). */
int
bc_cert_verify_chain(X509 *leaf, X509 *ca, int64_t at_unix)
{
	X509_STORE *store = NULL;
	X509_STORE_CTX *ctx = NULL;
	X509_VERIFY_PARAM *param;
	int			rc = BC_ECRYPTO;

	if (leaf == NULL || ca == NULL)
		return BC_EINVAL;
	store = X509_STORE_new();
	ctx = X509_STORE_CTX_new();
	if (store == NULL || ctx == NULL || X509_STORE_add_cert(store, ca) != 1 ||
		X509_STORE_CTX_init(ctx, store, leaf, NULL) != 1)
		goto out;
	param = X509_STORE_CTX_get0_param(ctx);
	/* The pinned CA is the trust anchor even when it is not self-signed. */
	X509_VERIFY_PARAM_set_flags(param, X509_V_FLAG_X509_STRICT |
								X509_V_FLAG_PARTIAL_CHAIN);
	if (X509_STORE_CTX_set_purpose(ctx, X509_PURPOSE_ANY) != 1)
		goto out;
	if (at_unix != 0)
		X509_VERIFY_PARAM_set_time(param, (time_t) at_unix);
	rc = X509_verify_cert(ctx) == 1 ? BC_OK : BC_EVERIFY;
out:
	if (rc != BC_OK)
		ERR_clear_error();
	X509_STORE_CTX_free(ctx);
	X509_STORE_free(store);
	return rc;
}

#endif							/* BC_TEST_BUILD */
