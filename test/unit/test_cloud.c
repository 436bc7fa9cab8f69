/*
 * test_cloud.c: cmocka tests of cloud-iid's provider-independent helpers
 * (src/common/cloud.c): the documents' time formats, UUIDs, JWKS RSA keys
 * and the PKCS#7 verifiers' refusal of what is not a SignedData; the
 * envelope allow-list with PKCS#7 made by OpenSSL (PKCS7_sign) under every
 * digest it refuses, Azure's documented sample, and every bit flip of a
 * good envelope (none that verifies changes the SignedData).  The PKCS#7
 * and RS256 paths are exercised end to end by test/tap/cloud_iid.t.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <openssl/evp.h>
#include <openssl/pkcs7.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>

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

/* A self-signed RSA-2048 certificate for key, like AWS's regional one. */
static X509 *
self_signed(EVP_PKEY *key)
{
	X509	   *x = X509_new();
	X509_NAME  *n = X509_NAME_new();

	assert_non_null(x);
	assert_int_equal(X509_set_version(x, 2), 1);
	assert_int_equal(ASN1_INTEGER_set(X509_get_serialNumber(x), 7), 1);
	assert_int_equal(X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC,
												(const unsigned char *) "aws stand-in", -1, -1, 0), 1);
	assert_int_equal(X509_set_subject_name(x, n), 1);
	assert_int_equal(X509_set_issuer_name(x, n), 1);
	assert_non_null(X509_gmtime_adj(X509_getm_notBefore(x), -60));
	assert_non_null(X509_gmtime_adj(X509_getm_notAfter(x), 86400));
	assert_int_equal(X509_set_pubkey(x, key), 1);
	assert_true(X509_sign(x, key, EVP_sha256()) > 0);
	X509_NAME_free(n);
	return x;
}

static const char doc[] = "{\n  \"accountId\" : \"123456789012\",\n  \"instanceId\" : \"i-1\"\n}";

/* DER of a SignedData over doc, attached, no certificates, by cert/key with md. */
static unsigned char *
sign_doc(X509 *cert, EVP_PKEY *key, const EVP_MD *md, size_t *n)
{
	BIO		   *in = BIO_new_mem_buf(doc, (int) strlen(doc));
	PKCS7	   *p7 = PKCS7_sign(NULL, NULL, NULL, NULL,
								PKCS7_BINARY | PKCS7_NOCERTS | PKCS7_PARTIAL);
	unsigned char *der = NULL;
	int			len;

	assert_non_null(p7);
	assert_non_null(PKCS7_sign_add_signer(p7, cert, key, md, PKCS7_BINARY | PKCS7_NOCERTS));
	assert_int_equal(PKCS7_final(p7, in, PKCS7_BINARY), 1);
	len = i2d_PKCS7(p7, &der);
	assert_true(len > 0);
	*n = (size_t) len;
	PKCS7_free(p7);
	BIO_free(in);
	return der;
}

/* i2d(d2i(der)): the SignedData as decoded, re-encoded (malloc()ed by OpenSSL). */
static unsigned char *
decoded(const unsigned char *der, size_t n, int *len)
{
	const unsigned char *p = der;
	PKCS7	   *p7 = d2i_PKCS7(NULL, &p, (long) n);
	unsigned char *out = NULL;

	*len = p7 ? i2d_PKCS7(p7, &out) : -1;
	PKCS7_free(p7);
	return out;
}

static void
test_pkcs7_algorithms(void **state)
{
	/* Azure IMDS documentation's sample attested document (pkcs7, as served). */
	static const char azure_sample[] =
		"MIIEEgYJKoZIhvcNAQcCoIIEAzCCA/8CAQExDzANBgkqhkiG9w0BAQsFADCBugYJKoZIhvcNAQcBoIGsBIGpeyJub25jZSI6"
		"IjEyMzQ1NjY3NjYiLCJwbGFuIjp7Im5hbWUiOiIiLCJwcm9kdWN0IjoiIiwicHVibGlzaGVyIjoiIn0sInRpbWVTdGFtcCI6"
		"eyJjcmVhdGVkT24iOiIxMS8yMC8xOCAyMjowNzozOSAtMDAwMCIsImV4cGlyZXNPbiI6IjExLzIwLzE4IDIyOjA4OjI0IC0w"
		"MDAwIn0sInZtSWQiOiIifaCCAj8wggI7MIIBpKADAgECAhBnxW5Kh8dslEBA0E2mIBJ0MA0GCSqGSIb3DQEBBAUAMCsxKTAn"
		"BgNVBAMTIHRlc3RzdWJkb21haW4ubWV0YWRhdGEuYXp1cmUuY29tMB4XDTE4MTEyMDIxNTc1N1oXDTE4MTIyMDIxNTc1Nlow"
		"KzEpMCcGA1UEAxMgdGVzdHN1YmRvbWFpbi5tZXRhZGF0YS5henVyZS5jb20wgZ8wDQYJKoZIhvcNAQEBBQADgY0AMIGJAoGB"
		"AML/tBo86ENWPzmXZ0kPkX5dY5QZ150mA8lommszE71x2sCLonzv4/UWk4H+jMMWRRwIea2CuQ5RhdWAHvKq6if4okKNt66f"
		"xm+YTVz9z0CTfCLmLT+nsdfOAsG1xZppEapC0Cd9vD6NCKyE8aYI1pliaeOnFjG0WvMY04uWz2MdAgMBAAGjYDBeMFwGA1Ud"
		"AQRVMFOAENnYkHLa04Ut4Mpt7TkJFfyhLTArMSkwJwYDVQQDEyB0ZXN0c3ViZG9tYWluLm1ldGFkYXRhLmF6dXJlLmNvbYIQ"
		"Z8VuSofHbJRAQNBNpiASdDANBgkqhkiG9w0BAQQFAAOBgQCLSM6aX5Bs1KHCJp4VQtxZPzXF71rVKCocHy3N9PTJQ9Fpnd+b"
		"Yw2vSpQHg/AiG82WuDFpPReJvr7Pa938mZqW9HUOGjQKK2FYDTg6fXD8pkPdyghlX5boGWAMMrf7bFkup+lsT+n2tRw2wbNk"
		"nO1tQ0wICtqy2VqzWwLi45RBwTGB6DCB5QIBATA/MCsxKTAnBgNVBAMTIHRlc3RzdWJkb21haW4ubWV0YWRhdGEuYXp1cmUu"
		"Y29tAhBnxW5Kh8dslEBA0E2mIBJ0MA0GCSqGSIb3DQEBCwUAMA0GCSqGSIb3DQEBAQUABIGAld1BM/yYIqqv8SDE4kjQo3Ul"
		"/IKAVR8ETKcve5BAdGSNkTUooUGVniTXeuvDj5NkmazOaKZp9fEtByqqPOyw/nlXaZgOO44HDGiPUJ90xVYmfeK6p9RpJBu6"
		"kiKhnnYTelUk5u75phe5ZbMZfBhuPhXmYAdjc7Nmw97nx8NnprQ=";
	EVP_PKEY   *key = EVP_RSA_gen(2048);
	X509	   *cert = self_signed(key);
	STACK_OF(X509) *certs = sk_X509_new_null();
	const EVP_MD *refused[] = {EVP_md5(), EVP_sha1(), EVP_sha224(), EVP_sha384(), EVP_sha512()};
	unsigned char *content = NULL;
	size_t		clen = 0;
	const char *reason = NULL;
	unsigned char az[2048];
	size_t		azn = 0;
	unsigned char *good;
	size_t		n;
	unsigned char *want;
	int			wantlen;
	size_t		i;
	int			b;
	int			accepted = 0;

	(void) state;
	assert_non_null(certs);
	assert_int_equal(sk_X509_push(certs, cert), 1);

	/* SHA-256 and rsaEncryption, as AWS signs: verified. */
	good = sign_doc(cert, key, EVP_sha256(), &n);
	assert_int_equal(bc_cloud_pkcs7_check(good, n, BC_CLOUD_AWS, &reason), BC_OK);
	assert_int_equal(bc_cloud_aws_verify(good, n, certs, &content, &clen, &reason), BC_OK);
	assert_int_equal(clen, strlen(doc));
	free(content);

	/* Every other digest OpenSSL signs with: refused before any signature check. */
	for (i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
	{
		unsigned char *weak = sign_doc(cert, key, refused[i], &n);

		reason = NULL;
		assert_int_not_equal(bc_cloud_aws_verify(weak, n, certs, &content, &clen, &reason), BC_OK);
		assert_null(content);
		assert_string_equal(reason, "digest-algorithm");
		assert_int_not_equal(bc_cloud_pkcs7_check(weak, n, BC_CLOUD_AZURE, &reason), BC_OK);
		assert_string_equal(reason, "digest-algorithm");
		OPENSSL_free(weak);
	}

	/* Azure's own sample: digestAlgorithm sha256WithRSAEncryption, rsaEncryption: Azure's, not AWS's. */
	assert_int_equal(bc_b64_decode(azure_sample, strlen(azure_sample), az, sizeof(az), &azn), BC_OK);
	assert_int_equal(bc_cloud_pkcs7_check(az, azn, BC_CLOUD_AZURE, &reason), BC_OK);
	assert_int_not_equal(bc_cloud_pkcs7_check(az, azn, BC_CLOUD_AWS, &reason), BC_OK);
	assert_string_equal(reason, "digest-algorithm");

	/*
	 * Every bit flip of the good envelope: one that still verifies decodes
	 * to the very SignedData (only the BER form of a tag changed), never a
	 * version, an algorithm, its parameters or the issuer.
	 */
	n = 0;
	OPENSSL_free(good);
	good = sign_doc(cert, key, EVP_sha256(), &n);
	want = decoded(good, n, &wantlen);
	assert_non_null(want);
	for (i = 0; i < n; i++)
	{
		for (b = 0; b < 8; b++)
		{
			good[i] ^= (unsigned char) (1 << b);
			content = NULL;
			if (bc_cloud_aws_verify(good, n, certs, &content, &clen, &reason) == BC_OK)
			{
				unsigned char *got;
				int			gotlen;

				free(content);
				got = decoded(good, n, &gotlen);
				assert_int_equal(gotlen, wantlen);
				assert_memory_equal(got, want, (size_t) wantlen);
				OPENSSL_free(got);
				accepted++;
			}
			good[i] ^= (unsigned char) (1 << b);
		}
	}
	print_message("%d of %zu flips verify, each the same SignedData\n", accepted, 8 * n);
	OPENSSL_free(want);
	OPENSSL_free(good);
	sk_X509_pop_free(certs, X509_free);
	EVP_PKEY_free(key);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_times),
		cmocka_unit_test(test_uuid),
		cmocka_unit_test(test_jwks),
		cmocka_unit_test(test_pkcs7_refusals),
		cmocka_unit_test(test_pkcs7_algorithms),
	};

	return cmocka_run_group_tests_name("cloud", tests, NULL, NULL);
}
