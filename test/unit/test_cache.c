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

#include <openssl/core_names.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "bc_common.h"

/* A self-signed CA for key, with a subjectKeyIdentifier unless ski is 0. */
static X509 *
make_ca(EVP_PKEY *key, int ski)
{
	X509	   *ca = X509_new();
	X509_NAME  *name = X509_get_subject_name(ca);
	X509V3_CTX	v3;
	X509_EXTENSION *ext;

	assert_non_null(ca);
	assert_int_equal(X509_set_version(ca, X509_VERSION_3), 1);
	assert_int_equal(ASN1_INTEGER_set(X509_get_serialNumber(ca), 1), 1);
	assert_int_equal(X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
												(const unsigned char *) "cache CA", -1, -1, 0), 1);
	assert_int_equal(X509_set_issuer_name(ca, name), 1);
	assert_non_null(X509_gmtime_adj(X509_getm_notBefore(ca), -60));
	assert_non_null(X509_gmtime_adj(X509_getm_notAfter(ca), 3600));
	assert_int_equal(X509_set_pubkey(ca, key), 1);
	X509V3_set_ctx(&v3, ca, ca, NULL, NULL, 0);
	ext = X509V3_EXT_conf_nid(NULL, &v3, NID_basic_constraints, "critical,CA:TRUE");
	assert_int_equal(X509_add_ext(ca, ext, -1), 1);
	X509_EXTENSION_free(ext);
	ext = X509V3_EXT_conf_nid(NULL, &v3, NID_key_usage, "critical,keyCertSign");
	assert_int_equal(X509_add_ext(ca, ext, -1), 1);
	X509_EXTENSION_free(ext);
	if (ski)
	{
		ext = X509V3_EXT_conf_nid(NULL, &v3, NID_subject_key_identifier, "hash");
		assert_int_equal(X509_add_ext(ca, ext, -1), 1);
		X509_EXTENSION_free(ext);
	}
	assert_true(X509_sign(ca, key, EVP_sha256()) > 0);
	return ca;
}

/* JWS, JWE and certificates, each three times with the cache on, all verify. */
static void
test_cached_operations(void **state)
{
	EVP_PKEY   *sig = bc_p256_generate();
	EVP_PKEY   *enc = bc_p256_generate();
	EVP_PKEY   *node = bc_p256_generate();
	EVP_PKEY   *ca_key = bc_p256_generate();
	X509	   *ca;
	const char *uris[] = {"spiffe://example.org/tenant/t/node/n"};
	int			round;

	(void) state;
	assert_non_null(sig);
	assert_non_null(enc);
	assert_non_null(node);
	assert_non_null(ca_key);
	ca = make_ca(ca_key, 1);

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

	X509_free(ca);
	EVP_PKEY_free(sig);
	EVP_PKEY_free(enc);
	EVP_PKEY_free(node);
	EVP_PKEY_free(ca_key);
}

/* The encoded point of key: uncompressed (65 bytes) or compressed (33). */
static size_t
point_of(EVP_PKEY *key, int compressed, unsigned char *out)
{
	unsigned char full[65];
	size_t		len = 0;

	assert_int_equal(EVP_PKEY_get_octet_string_param(key, OSSL_PKEY_PARAM_ENCODED_PUBLIC_KEY,
													 full, sizeof(full), &len), 1);
	assert_int_equal(len, 65);
	assert_int_equal(full[0], 0x04);
	if (!compressed)
	{
		memcpy(out, full, 65);
		return 65;
	}
	out[0] = 0x02 | (full[64] & 1);		/* SEC 1 2.3.3: the parity of y */
	memcpy(out + 1, full + 1, 32);
	return 33;
}

/*
 * Public keys made from points with the cache on (a copy of the kept
 * parameter key) equal those made without it, compressed or not, and a
 * point off the curve is refused either way.
 */
static void
test_cached_points(void **state)
{
	EVP_PKEY   *key = bc_p256_generate();
	unsigned char pt[65];
	unsigned char cpt[65];
	size_t		len;
	size_t		clen;
	EVP_PKEY   *plain = NULL;
	EVP_PKEY   *cached = NULL;
	EVP_PKEY   *cached_c = NULL;
	EVP_PKEY   *bad = NULL;
	int			on;

	(void) state;
	assert_non_null(key);
	len = point_of(key, 0, pt);
	clen = point_of(key, 1, cpt);
	assert_int_equal(bc_p256_from_point(pt, len, &plain), BC_OK);
	bc_ossl_cache_enable();
	assert_int_equal(bc_p256_from_point(pt, len, &cached), BC_OK);
	assert_int_equal(bc_p256_from_point(cpt, clen, &cached_c), BC_OK);
	assert_int_equal(EVP_PKEY_eq(plain, key), 1);
	assert_int_equal(EVP_PKEY_eq(cached, key), 1);
	assert_int_equal(EVP_PKEY_eq(cached_c, key), 1);
	assert_int_equal(EVP_PKEY_get_bits(cached), 256);
	/* a public key only: no private part came with the copy */
	{
		BIGNUM	   *d = NULL;

		assert_int_equal(EVP_PKEY_get_bn_param(cached, OSSL_PKEY_PARAM_PRIV_KEY, &d), 0);
		assert_null(d);
	}
	/* off the curve (the last byte of y changed), with the cache on and off */
	pt[64] ^= 0x01;
	for (on = 1; on >= 0; on--)
	{
		assert_int_equal(bc_p256_from_point(pt, len, &bad), BC_EINVAL);
		assert_null(bad);
		bc_ossl_cache_release();
	}
	EVP_PKEY_free(plain);
	EVP_PKEY_free(cached);
	EVP_PKEY_free(cached_c);
	EVP_PKEY_free(key);
}

/*
 * The cache remembers a CA certificate and key found to match, for that
 * pair only: a key that is not the certificate's is refused call after
 * call, before and after the right pair issued.  A CA without a
 * subjectKeyIdentifier is refused (the authorityKeyIdentifier needs it).
 */
static void
test_cached_ca_pair(void **state)
{
	EVP_PKEY   *ca_key = bc_p256_generate();
	EVP_PKEY   *other_key = bc_p256_generate();
	EVP_PKEY   *node = bc_p256_generate();
	X509	   *ca = make_ca(ca_key, 1);
	X509	   *ca_other = make_ca(other_key, 1);
	X509	   *no_ski = make_ca(ca_key, 0);
	const char *uris[] = {"spiffe://example.org/tenant/t/node/n"};
	bc_cert_params p = {
		.subject_key = node,.subject_cn = "n",.uris = uris,.n_uris = 1,
		.not_before = (int64_t) time(NULL) - 60,.not_after = (int64_t) time(NULL) + 600
	};
	unsigned char serial[16];
	X509	   *cert = NULL;
	int			round;

	(void) state;
	bc_ossl_cache_enable();
	for (round = 0; round < 2; round++)
	{
		p.ca_cert = ca;
		p.ca_key = other_key;
		assert_int_equal(bc_cert_issue(&p, serial, &cert), BC_EINVAL);
		assert_null(cert);
		p.ca_key = ca_key;
		assert_int_equal(bc_cert_issue(&p, serial, &cert), BC_OK);
		assert_int_equal(bc_cert_verify_chain(cert, ca, 0), BC_OK);
		X509_free(cert);
		cert = NULL;
		/* the right key with another CA's certificate */
		p.ca_cert = ca_other;
		assert_int_equal(bc_cert_issue(&p, serial, &cert), BC_EINVAL);
		assert_null(cert);
		p.ca_cert = no_ski;
		assert_int_equal(bc_cert_issue(&p, serial, &cert), BC_ECRYPTO);
		assert_null(cert);
	}
	bc_ossl_cache_release();
	X509_free(ca);
	X509_free(ca_other);
	X509_free(no_ski);
	EVP_PKEY_free(ca_key);
	EVP_PKEY_free(other_key);
	EVP_PKEY_free(node);
}

/*
 * Keys that come and go (bc_join.key_dir changed): a key forgotten by the
 * cache is freed by its owner and its slot serves the next key, round after
 * round; without the forget, every slot would hold an old key (and its
 * private scalar) and the fifth key would go uncached.
 */
static void
test_cache_forget(void **state)
{
	int			round;

	(void) state;
	bc_ossl_cache_enable();
	for (round = 0; round < 12; round++)
	{
		EVP_PKEY   *key = bc_p256_generate();
		EVP_MD_CTX *md;

		assert_non_null(key);
		md = bc_ossl_cache_sign_ctx(key);
		assert_non_null(md);		/* a slot was free */
		EVP_MD_CTX_free(md);
		assert_non_null(bc_ossl_cache_derive_ctx(key));
		bc_ossl_cache_forget(key);
		/* the cache's reference is gone: ours is the last */
		EVP_PKEY_free(key);
	}
	bc_ossl_cache_forget(NULL);
	bc_ossl_cache_release();
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cached_operations),
		cmocka_unit_test(test_cached_points),
		cmocka_unit_test(test_cached_ca_pair),
		cmocka_unit_test(test_cache_forget),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
