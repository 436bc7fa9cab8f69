/*
 * test_cloud.c: cmocka tests of cloud-iid's provider-independent helpers
 * (src/common/cloud.c): the documents' time formats, UUIDs, JWKS RSA keys
 * and the PKCS#7 verifiers' refusal of what is not a SignedData.  The
 * PKCS#7 and RS256 paths with real signatures are exercised end to end by
 * test/tap/cloud_iid.t.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <openssl/evp.h>
#include <openssl/rsa.h>

#include "bc_common.h"

static void
test_times(void **state)
{
	int64_t		t;

	(void) state;
	assert_int_equal(bc_cloud_parse_rfc3339("1970-01-01T00:00:00Z", &t), BC_OK);
	assert_int_equal(t, 0);
	assert_int_equal(bc_cloud_parse_rfc3339("2024-02-29T12:34:56Z", &t), BC_OK);
	assert_int_equal(t, 1709210096);
	assert_int_not_equal(bc_cloud_parse_rfc3339("2023-02-29T12:34:56Z", &t), BC_OK);
	assert_int_not_equal(bc_cloud_parse_rfc3339("2024-02-29 12:34:56Z", &t), BC_OK);
	assert_int_not_equal(bc_cloud_parse_rfc3339("2024-02-29T12:34:56+00:00", &t), BC_OK);
	assert_int_not_equal(bc_cloud_parse_rfc3339("2024-13-01T00:00:00Z", &t), BC_OK);
	assert_int_equal(bc_cloud_parse_azure_time("11/28/18 00:16:17 -0000", &t), BC_OK);
	assert_int_equal(t, 1543364177);
	assert_int_not_equal(bc_cloud_parse_azure_time("11/28/18 00:16:17 +0100", &t), BC_OK);
	assert_int_not_equal(bc_cloud_parse_azure_time("11/28/2018 00:16:17 -0000", &t), BC_OK);
	assert_int_not_equal(bc_cloud_parse_azure_time("11/28/18 24:16:17 -0000", &t), BC_OK);
}

static void
test_uuid(void **state)
{
	(void) state;
	assert_true(bc_cloud_is_uuid("8d10da13-8125-4ba9-a717-bf7490507b3d"));
	assert_true(bc_cloud_is_uuid("8D10DA13-8125-4BA9-A717-BF7490507B3D"));
	assert_false(bc_cloud_is_uuid("8d10da13-8125-4ba9-a717-bf7490507b3"));
	assert_false(bc_cloud_is_uuid("8d10da13_8125-4ba9-a717-bf7490507b3d"));
	assert_false(bc_cloud_is_uuid("8d10da13-8125-4ba9-a717-bf7490507b3g"));
	assert_false(bc_cloud_is_uuid(NULL));
}

/* A JWKS of one RSA-2048 key with kid, as text (malloc()ed). */
static char *
jwks_of(EVP_PKEY *key, const char *kid, int twice)
{
	BIGNUM	   *n = NULL;
	BIGNUM	   *e = NULL;
	unsigned char nb[512];
	unsigned char eb[8];
	char		ns[700];
	char		es[16];
	char	   *out = malloc(4096);

	assert_int_equal(EVP_PKEY_get_bn_param(key, "n", &n), 1);
	assert_int_equal(EVP_PKEY_get_bn_param(key, "e", &e), 1);
	bc_b64url_encode(nb, BN_bn2bin(n, nb), ns);
	bc_b64url_encode(eb, BN_bn2bin(e, eb), es);
	snprintf(out, 4096, "{\"keys\":[{\"kty\":\"RSA\",\"kid\":\"%s\",\"n\":\"%s\",\"e\":\"%s\"}%s%s%s]}",
			 kid, ns, es, twice ? ",{\"kty\":\"EC\",\"kid\":\"" : "", twice ? kid : "",
			 twice ? "\"}" : "");
	BN_free(n);
	BN_free(e);
	return out;
}

static void
test_jwks(void **state)
{
	EVP_PKEY   *key = EVP_RSA_gen(2048);
	EVP_PKEY   *got = NULL;
	char	   *j = jwks_of(key, "k1", 0);
	char	   *j2 = jwks_of(key, "k1", 1);
	int			rsa = 0;
	int			matches = 0;
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	unsigned char sig[256];
	size_t		siglen = sizeof(sig);

	(void) state;
	assert_int_equal(bc_cloud_jwks_check(j, strlen(j), &rsa), BC_OK);
	assert_int_equal(rsa, 1);
	assert_int_equal(bc_cloud_jwks_rsa_key(j, strlen(j), "k1", &matches, &got), BC_OK);
	assert_int_equal(matches, 1);
	assert_non_null(got);
	assert_int_equal(EVP_PKEY_eq(got, key), 1);

	/* RS256 with the key built from n and e */
	assert_int_equal(EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, key), 1);
	assert_int_equal(EVP_DigestSign(md, sig, &siglen, (const unsigned char *) "a.b", 3), 1);
	assert_int_equal(bc_cloud_rs256_verify(got, "a.b", 3, sig, siglen), BC_OK);
	assert_int_equal(bc_cloud_rs256_verify(got, "a.c", 3, sig, siglen), BC_EVERIFY);
	EVP_PKEY_free(got);
	got = NULL;

	/* two keys under one kid: none is chosen */
	assert_int_equal(bc_cloud_jwks_rsa_key(j2, strlen(j2), "k1", &matches, &got), BC_OK);
	assert_int_equal(matches, 2);
	assert_null(got);
	assert_int_equal(bc_cloud_jwks_rsa_key(j, strlen(j), "k2", &matches, &got), BC_OK);
	assert_int_equal(matches, 0);
	assert_int_not_equal(bc_cloud_jwks_check("{\"keys\":{}}", 11, &rsa), BC_OK);
	assert_int_not_equal(bc_cloud_jwks_check("[]", 2, &rsa), BC_OK);
	EVP_MD_CTX_free(md);
	EVP_PKEY_free(key);
	free(j);
	free(j2);
}

static void
test_pkcs7_refusals(void **state)
{
	static const unsigned char junk[] = {0x30, 0x03, 0x02, 0x01, 0x01};
	unsigned char *content = NULL;
	size_t		len = 0;
	const char *reason = NULL;
	STACK_OF(X509) *sk = NULL;

	(void) state;
	assert_int_not_equal(bc_cloud_aws_verify(junk, sizeof(junk), NULL, &content, &len, &reason), BC_OK);
	assert_string_equal(reason, "malformed-pkcs7");
	assert_null(content);
	assert_int_not_equal(bc_cloud_azure_verify(junk, sizeof(junk), NULL, NULL, "x.example", 0,
											   &content, &len, &reason), BC_OK);
	assert_string_equal(reason, "malformed-pkcs7");
	assert_int_not_equal(bc_cloud_certs_from_pem("nope", 4, &sk), BC_OK);
	assert_null(sk);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_times),
		cmocka_unit_test(test_uuid),
		cmocka_unit_test(test_jwks),
		cmocka_unit_test(test_pkcs7_refusals),
	};

	return cmocka_run_group_tests_name("cloud", tests, NULL, NULL);
}
