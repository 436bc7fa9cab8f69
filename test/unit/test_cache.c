/*
 * test_cache.c: the OpenSSL context cache the extension turns on gives the
 * same results as the uncached calls, call after call, and frees all it
 * holds (this binary runs under LeakSanitizer).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "bc_common.h"

/* JWS, JWE and certificates, each three times with the cache on, all verify. */
static void
test_cached_operations(void **state)
{
	EVP_PKEY   *sig = bc_p256_generate();
	EVP_PKEY   *enc = bc_p256_generate();
	EVP_PKEY   *node = bc_p256_generate();
	EVP_PKEY   *ca_key = bc_p256_generate();
	X509	   *ca = X509_new();
	X509_NAME  *name = X509_NAME_new();
	const char *uris[] = {"spiffe://example.org/tenant/t/node/n"};
	int			round;

	(void) state;
	assert_non_null(sig);
	assert_non_null(enc);
	assert_non_null(node);
	assert_non_null(ca_key);
	/* a self-signed CA */
	assert_int_equal(X509_set_version(ca, X509_VERSION_3), 1);
	assert_int_equal(ASN1_INTEGER_set(X509_get_serialNumber(ca), 1), 1);
	assert_int_equal(X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
												(const unsigned char *) "cache CA", -1, -1, 0), 1);
	assert_int_equal(X509_set_subject_name(ca, name), 1);
	assert_int_equal(X509_set_issuer_name(ca, name), 1);
	assert_non_null(X509_gmtime_adj(X509_getm_notBefore(ca), -60));
	assert_non_null(X509_gmtime_adj(X509_getm_notAfter(ca), 3600));
	assert_int_equal(X509_set_pubkey(ca, ca_key), 1);
	{
		X509V3_CTX	v3;
		X509_EXTENSION *bc;
		X509_EXTENSION *ku;
		X509_EXTENSION *ski;

		X509V3_set_ctx(&v3, ca, ca, NULL, NULL, 0);
		bc = X509V3_EXT_conf_nid(NULL, &v3, NID_basic_constraints, "critical,CA:TRUE");
		ku = X509V3_EXT_conf_nid(NULL, &v3, NID_key_usage, "critical,keyCertSign");
		ski = X509V3_EXT_conf_nid(NULL, &v3, NID_subject_key_identifier, "hash");
		assert_int_equal(X509_add_ext(ca, bc, -1), 1);
		assert_int_equal(X509_add_ext(ca, ku, -1), 1);
		assert_int_equal(X509_add_ext(ca, ski, -1), 1);
		X509_EXTENSION_free(bc);
		X509_EXTENSION_free(ku);
		X509_EXTENSION_free(ski);
	}
	assert_true(X509_sign(ca, ca_key, EVP_sha256()) > 0);

	bc_ossl_cache_enable();
	for (round = 0; round < 3; round++)
	{
		char	   *jws = NULL;
		char	   *jwe = NULL;
		unsigned char *pt = NULL;
		size_t		pt_len = 0;
		char	   *hdr = NULL;
		unsigned char *der = NULL;
		size_t		der_len = 0;
		bc_csr	   *csr = NULL;
		unsigned char serial[16];
		X509	   *cert = NULL;
		unsigned char *cert_der = NULL;
		size_t		cert_len = 0;
		X509	   *parsed = NULL;
		bc_cert_params p = {
			.ca_cert = ca,.ca_key = ca_key,.subject_cn = "n",.uris = uris,.n_uris = 1,
			.not_before = (int64_t) time(NULL) - 60,.not_after = (int64_t) time(NULL) + 600
		};

		assert_int_equal(bc_jws_sign_es256(sig, "k", (const unsigned char *) "payload", 7, &jws), BC_OK);
		assert_int_equal(bc_jws_verify_es256(sig, jws, strlen(jws), 64, &pt, &pt_len), BC_OK);
		assert_memory_equal(pt, "payload", 7);
		free(pt);
		pt = NULL;

		assert_int_equal(bc_jwe_seal(enc, "csrSha256", "abc", (const unsigned char *) "secret", 6, &jwe), BC_OK);
		assert_int_equal(bc_jwe_open(enc, jwe, strlen(jwe), 64, "csrSha256", &hdr, &pt, &pt_len), BC_OK);
		assert_string_equal(hdr, "abc");
		assert_memory_equal(pt, "secret", 6);
		bc_free_secret(pt, pt_len + 1);
		free(hdr);

		assert_int_equal(bc_csr_create(node, NULL, &der, &der_len), BC_OK);
		assert_int_equal(bc_csr_parse(der, der_len, &csr), BC_OK);
		assert_int_equal(bc_csr_verify_pop(csr), BC_OK);
		p.subject_csr = csr;
		assert_int_equal(bc_cert_issue(&p, serial, &cert), BC_OK);
		assert_int_equal(bc_cert_der(cert, &cert_der, &cert_len), BC_OK);
		assert_int_equal(bc_cert_parse(cert_der, cert_len, &parsed), BC_OK);
		assert_int_equal(bc_cert_verify_chain(parsed, ca, 0), BC_OK);
		assert_int_equal(EVP_PKEY_eq(X509_get0_pubkey(parsed), node), 1);

		X509_free(parsed);
		free(cert_der);
		X509_free(cert);
		bc_csr_free(csr);
		free(der);
		free(jwe);
		free(jws);
	}
	bc_ossl_cache_release();

	X509_NAME_free(name);
	X509_free(ca);
	EVP_PKEY_free(sig);
	EVP_PKEY_free(enc);
	EVP_PKEY_free(node);
	EVP_PKEY_free(ca_key);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cached_operations),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
