/*
 * ca_fixture.h: a test CA built with OpenSSL's own API: an extension added
 * in OpenSSL config syntax, a self-signed P-256 CA certificate.  Shared by
 * test/unit/test_pki.c and test_ocsp.c; include it after <cmocka.h> and
 * OpenSSL's x509v3.h.
 */
#ifndef CA_FIXTURE_H
#define CA_FIXTURE_H

/* Add an extension in OpenSSL config syntax to a certificate being built. */
static inline void
add_ext(X509 *cert, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX	ctx;
	X509_EXTENSION *ext;

	X509V3_set_ctx(&ctx, issuer, cert, NULL, NULL, 0);
	ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
	assert_non_null(ext);
	assert_int_equal(X509_add_ext(cert, ext, -1), 1);
	X509_EXTENSION_free(ext);
}

/* A self-signed P-256 CA certificate (serial 1) valid for a year around now. */
static inline X509 *
make_ca(EVP_PKEY *key, const char *cn)
{
	X509	   *ca = X509_new();
	X509_NAME  *name = X509_get_subject_name(ca);

	assert_non_null(ca);
	assert_int_equal(X509_set_version(ca, X509_VERSION_3), 1);
	assert_int_equal(ASN1_INTEGER_set(X509_get_serialNumber(ca), 1), 1);
	assert_int_equal(X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
												(const unsigned char *) cn, -1, -1, 0), 1);
	assert_int_equal(X509_set_issuer_name(ca, name), 1);
	assert_non_null(X509_gmtime_adj(X509_getm_notBefore(ca), -3600));
	assert_non_null(X509_gmtime_adj(X509_getm_notAfter(ca), 365 * 86400L));
	assert_int_equal(X509_set_pubkey(ca, key), 1);
	add_ext(ca, ca, NID_basic_constraints, "critical,CA:TRUE");
	add_ext(ca, ca, NID_key_usage, "critical,keyCertSign,cRLSign");
	add_ext(ca, ca, NID_subject_key_identifier, "hash");
	add_ext(ca, ca, NID_authority_key_identifier, "keyid:always");
	assert_true(X509_sign(ca, key, EVP_sha256()) > 0);
	return ca;
}

#endif							/* CA_FIXTURE_H */
