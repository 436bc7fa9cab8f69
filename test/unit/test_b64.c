/*
 * test_b64.c: cmocka tests of base64url, base64, SHA-256, constant-time
 * comparison and the status/error helpers of src/common.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <openssl/err.h>
#include <openssl/rand.h>

#include "bc_common.h"

/* One RFC 4648 section 10 test vector. */
typedef struct b64_vector
{
	const char *plain;
	const char *url;			/* unpadded base64url */
	const char *std;			/* padded base64 */
} b64_vector;

static const b64_vector rfc4648[] = {
	{"", "", ""},
	{"f", "Zg", "Zg=="},
	{"fo", "Zm8", "Zm8="},
	{"foo", "Zm9v", "Zm9v"},
	{"foob", "Zm9vYg", "Zm9vYg=="},
	{"fooba", "Zm9vYmE", "Zm9vYmE="},
	{"foobar", "Zm9vYmFy", "Zm9vYmFy"},
};

/* Encode into a buffer of exactly the documented size (ASan catches overruns). */
static char *
url_encode_exact(const unsigned char *in, size_t n)
{
	char	   *out = malloc(bc_b64url_encoded_len(n) + 1);

	assert_non_null(out);
	assert_int_equal(bc_b64url_encode(in, n, out), bc_b64url_encoded_len(n));
	assert_int_equal(strlen(out), bc_b64url_encoded_len(n));
	return out;
}

/* RFC 4648 vectors encode and decode both ways, url and standard. */
static void
test_rfc4648_vectors(void **state)
{
	size_t		i;

	(void) state;
	for (i = 0; i < sizeof(rfc4648) / sizeof(rfc4648[0]); i++)
	{
		const b64_vector *v = &rfc4648[i];
		size_t		n = strlen(v->plain);
		unsigned char dec[16];
		size_t		len = 99;
		char	   *url = url_encode_exact((const unsigned char *) v->plain, n);
		char		std[16];

		assert_string_equal(url, v->url);
		free(url);
		assert_int_equal(bc_b64_encode((const unsigned char *) v->plain, n, std),
						 strlen(v->std));
		assert_string_equal(std, v->std);
		assert_int_equal(bc_b64url_decode(v->url, strlen(v->url), dec, sizeof(dec), &len),
						 BC_OK);
		assert_int_equal(len, n);
		assert_memory_equal(dec, v->plain, n);
		assert_int_equal(bc_b64url_decoded_maxlen(strlen(v->url)), n);
		len = 99;
		assert_int_equal(bc_b64_decode(v->std, strlen(v->std), dec, sizeof(dec), &len),
						 BC_OK);
		assert_int_equal(len, n);
		assert_memory_equal(dec, v->plain, n);
	}
}

/* The url alphabet uses - and _ where the standard one has + and /. */
static void
test_url_alphabet(void **state)
{
	const unsigned char raw[] = {0xfb, 0xff, 0xbf};
	unsigned char dec[8];
	size_t		len = 0;
	char	   *url;
	char		std[8];

	(void) state;
	url = url_encode_exact(raw, sizeof(raw));
	assert_string_equal(url, "-_-_");
	free(url);
	bc_b64_encode(raw, sizeof(raw), std);
	assert_string_equal(std, "+/+/");
	assert_int_equal(bc_b64url_decode("-_-_", 4, dec, sizeof(dec), &len), BC_OK);
	assert_int_equal(len, 3);
	assert_memory_equal(dec, raw, 3);
	/* the allocating form gives the same text, the empty input included */
	url = bc_b64url_encode_alloc(raw, sizeof(raw));
	assert_non_null(url);
	assert_string_equal(url, "-_-_");
	free(url);
	url = bc_b64url_encode_alloc(raw, 2);
	assert_non_null(url);
	assert_string_equal(url, "-_8");
	free(url);
	url = bc_b64url_encode_alloc(raw, 0);
	assert_non_null(url);
	assert_string_equal(url, "");
	free(url);
}

/* Random lengths round-trip through both encodings. */
static void
test_round_trip_random(void **state)
{
	unsigned char raw[300];
	unsigned char dec[300];
	char		std[420];
	size_t		n;
	size_t		len;

	(void) state;
	assert_int_equal(RAND_bytes(raw, sizeof(raw)), 1);
	for (n = 0; n <= sizeof(raw); n++)
	{
		char	   *url = url_encode_exact(raw, n);

		assert_int_equal(bc_b64url_decode(url, strlen(url), dec, n, &len), BC_OK);
		assert_int_equal(len, n);
		assert_memory_equal(dec, raw, n);
		free(url);
		assert_int_equal(bc_b64_encode(raw, n, std), bc_b64_encoded_len(n));
		assert_int_equal(bc_b64_decode(std, strlen(std), dec, n, &len), BC_OK);
		assert_int_equal(len, n);
		assert_memory_equal(dec, raw, n);
	}
}

/* Decode of s as base64url; returns the status. */
static int
url_decode_status(const char *s, size_t n, size_t cap)
{
	unsigned char dec[64];
	size_t		len = 0;

	return bc_b64url_decode(s, n, dec, cap, &len);
}

/* Every malformed base64url input is refused. */
static void
test_url_decode_refusals(void **state)
{
	(void) state;
	assert_int_equal(url_decode_status("Zg==", 4, 64), BC_EINVAL);	/* padding */
	assert_int_equal(url_decode_status("Zm8=", 4, 64), BC_EINVAL);
	assert_int_equal(url_decode_status("Z", 1, 64), BC_EINVAL);	/* 1 mod 4 */
	assert_int_equal(url_decode_status("Zm9vY", 5, 64), BC_EINVAL);
	assert_int_equal(url_decode_status("Zh", 2, 64), BC_EINVAL);	/* trailing bits */
	assert_int_equal(url_decode_status("Zm9", 3, 64), BC_EINVAL);
	assert_int_equal(url_decode_status("Zm9v+g", 6, 64), BC_EINVAL);	/* std alphabet */
	assert_int_equal(url_decode_status("Zm9v/g", 6, 64), BC_EINVAL);
	assert_int_equal(url_decode_status("Zm 9v", 5, 64), BC_EINVAL);	/* space */
	assert_int_equal(url_decode_status("Zm9v\n", 5, 64), BC_EINVAL);
	assert_int_equal(url_decode_status("Zm\0v", 4, 64), BC_EINVAL);	/* NUL */
	assert_int_equal(url_decode_status("Zm9v.g", 6, 64), BC_EINVAL);
	assert_int_equal(url_decode_status("Zm9v\xc3\xa9", 6, 64), BC_EINVAL);
	assert_int_equal(url_decode_status("Zm9vYmFy", 8, 5), BC_ETOOBIG);	/* cap */
	assert_int_equal(url_decode_status("Zm9vYmFy", 8, 6), BC_OK);
}

/* Decode of s as standard base64; returns the status. */
static int
std_decode_status(const char *s, size_t cap)
{
	unsigned char dec[64];
	size_t		len = 0;

	return bc_b64_decode(s, strlen(s), dec, cap, &len);
}

/* Every malformed standard base64 input is refused. */
static void
test_std_decode_refusals(void **state)
{
	(void) state;
	assert_int_equal(std_decode_status("Zg", 64), BC_EINVAL);	/* no padding */
	assert_int_equal(std_decode_status("Zg=", 64), BC_EINVAL);
	assert_int_equal(std_decode_status("Z===", 64), BC_EINVAL);
	assert_int_equal(std_decode_status("=Zg=", 64), BC_EINVAL);
	assert_int_equal(std_decode_status("Z=g=", 64), BC_EINVAL);
	assert_int_equal(std_decode_status("Zh==", 64), BC_EINVAL);	/* trailing bits */
	assert_int_equal(std_decode_status("Zm9=", 64), BC_EINVAL);
	assert_int_equal(std_decode_status("-_-_", 64), BC_EINVAL);	/* url alphabet */
	assert_int_equal(std_decode_status("Zm9v\nYmFy", 64), BC_EINVAL);
	assert_int_equal(std_decode_status(" Zm9vYmFy   ", 64), BC_EINVAL);
	assert_int_equal(std_decode_status("Zm9vYmFy", 5), BC_ETOOBIG);
	assert_int_equal(std_decode_status("Zm9vYg==", 4), BC_OK);
}

/* SHA-256 of "abc" (FIPS 180-2) and of the empty string. */
static void
test_sha256(void **state)
{
	static const unsigned char abc[BC_SHA256_LEN] = {
		0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea, 0x41, 0x41, 0x40, 0xde,
		0x5d, 0xae, 0x22, 0x23, 0xb0, 0x03, 0x61, 0xa3, 0x96, 0x17, 0x7a, 0x9c,
		0xb4, 0x10, 0xff, 0x61, 0xf2, 0x00, 0x15, 0xad
	};
	unsigned char out[BC_SHA256_LEN];
	char		url[44];

	(void) state;
	assert_int_equal(bc_sha256("abc", 3, out), BC_OK);
	assert_memory_equal(out, abc, sizeof(abc));
	assert_int_equal(bc_sha256("", 0, out), BC_OK);
	bc_b64url_encode(out, sizeof(out), url);
	assert_string_equal(url, "47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU");
}

/* bc_ct_equal compares contents. */
static void
test_ct_equal(void **state)
{
	(void) state;
	assert_int_equal(bc_ct_equal("abcd", "abcd", 4), 1);
	assert_int_equal(bc_ct_equal("abcd", "abce", 4), 0);
	assert_int_equal(bc_ct_equal("xbcd", "abcd", 4), 0);
	assert_int_equal(bc_ct_equal("a", "b", 0), 1);
}

/* Status strings are distinct; OpenSSL errors are drained into the buffer. */
static void
test_status_and_errors(void **state)
{
	char		buf[128];

	(void) state;
	assert_string_equal(bc_status_str(BC_OK), "ok");
	assert_string_not_equal(bc_status_str(BC_EINVAL), bc_status_str(BC_EVERIFY));
	assert_string_equal(bc_status_str(12345), "unknown error");
	ERR_clear_error();
	bc_ossl_errors(buf, sizeof(buf));
	assert_string_equal(buf, "");
	ERR_raise(ERR_LIB_EVP, ERR_R_MALLOC_FAILURE);
	ERR_raise(ERR_LIB_X509, ERR_R_PASSED_NULL_PARAMETER);
	bc_ossl_errors(buf, 20);
	assert_int_equal(strlen(buf), 19);	/* truncated, NUL-terminated */
	assert_int_equal(ERR_peek_error(), 0);	/* drained */
	bc_free(NULL);
	bc_free_secret(NULL, 10);
}

/* Run the tests. */
/* base64url of SHA-256: the FIPS 180-2 "abc" vector. */
static void
test_sha256_b64url(void **state)
{
	char		out[44];

	(void) state;
	assert_int_equal(bc_sha256_b64url("abc", 3, out), BC_OK);
	assert_string_equal(out, "ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIAFa0");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sha256_b64url),
		cmocka_unit_test(test_rfc4648_vectors),
		cmocka_unit_test(test_url_alphabet),
		cmocka_unit_test(test_round_trip_random),
		cmocka_unit_test(test_url_decode_refusals),
		cmocka_unit_test(test_std_decode_refusals),
		cmocka_unit_test(test_sha256),
		cmocka_unit_test(test_ct_equal),
		cmocka_unit_test(test_status_and_errors),
	};

	return cmocka_run_group_tests_name("b64", tests, NULL, NULL);
}
