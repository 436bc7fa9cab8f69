/*
 * test_state.c: cmocka tests of sealed challenge state (state.c): the
 * 32-byte key form (AES-256-GCM) and the P-256 form (JWE), the key file.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <openssl/evp.h>
#include <openssl/rand.h>

#include "bc_common.h"

/* A scratch directory for key files. */
static int
setup_dir(void **state)
{
	static char dir[64];

	snprintf(dir, sizeof(dir), "/tmp/bc-state-XXXXXX");
	if (mkdtemp(dir) == NULL)
		return -1;
	*state = dir;
	return 0;
}

/* Remove the scratch directory (its files are removed by the tests). */
static int
teardown_dir(void **state)
{
	return rmdir((const char *) *state) == 0 ? 0 : -1;
}

/* Seal and open under a 32-byte key: round trip, tamper, wrong key, wrong context, bounds. */
static void
test_state_symmetric(void **state)
{
	unsigned char key[32], key2[32];
	unsigned char pt[800];
	unsigned char *out = NULL;
	size_t		out_len = 0;
	char	   *s = NULL, *s2 = NULL;
	size_t		n, i;

	(void) state;
	assert_int_equal(RAND_bytes(key, 32), 1);
	assert_int_equal(RAND_bytes(key2, 32), 1);
	assert_int_equal(RAND_bytes(pt, sizeof(pt)), 1);
	assert_int_equal(bc_seal_state(key, "tpm", pt, 200, &s), BC_OK);
	n = strlen(s);
	assert_int_equal(n, bc_b64url_encoded_len(1 + 12 + 200 + 16));
	assert_int_equal(bc_open_state(key, "tpm", s, n, &out, &out_len), BC_OK);
	assert_int_equal(out_len, 200);
	assert_memory_equal(out, pt, 200);
	bc_free_secret(out, out_len + 1);
	/* a fresh IV every time */
	assert_int_equal(bc_seal_state(key, "tpm", pt, 200, &s2), BC_OK);
	assert_string_not_equal(s, s2);
	free(s2);
	/* wrong key, wrong context */
	assert_int_equal(bc_open_state(key2, "tpm", s, n, &out, &out_len), BC_EVERIFY);
	assert_null(out);
	assert_int_equal(bc_open_state(key, "tpm2", s, n, &out, &out_len), BC_EVERIFY);
	/* every character changed (to another valid one) is refused */
	for (i = 0; i < n; i++)
	{
		char		save = s[i];
		int			rc;

		s[i] = save == 'A' ? 'B' : 'A';
		rc = bc_open_state(key, "tpm", s, n, &out, &out_len);
		assert_true(rc == BC_EVERIFY || rc == BC_EINVAL);
		assert_null(out);
		s[i] = save;
	}
	/* truncated, not base64url */
	assert_true(bc_open_state(key, "tpm", s, n - 4, &out, &out_len) != BC_OK);
	assert_null(out);
	assert_int_equal(bc_open_state(key, "tpm", s, 10, &out, &out_len), BC_EINVAL);
	assert_int_equal(bc_open_state(key, "tpm", "a=b", 3, &out, &out_len), BC_EINVAL);
	free(s);
	/* the 1,024-character bound: 739 bytes fit, 740 do not */
	assert_int_equal(bc_seal_state(key, "tpm", pt, 739, &s), BC_OK);
	assert_true(strlen(s) <= BC_STATE_MAX);
	assert_int_equal(bc_open_state(key, "tpm", s, strlen(s), &out, &out_len), BC_OK);
	bc_free_secret(out, out_len + 1);
	free(s);
	assert_int_equal(bc_seal_state(key, "tpm", pt, 740, &s), BC_ETOOBIG);
	assert_null(s);
	{
		char	   *longer = malloc(BC_STATE_MAX + 2);

		assert_non_null(longer);
		memset(longer, 'A', BC_STATE_MAX + 1);
		longer[BC_STATE_MAX + 1] = '\0';
		assert_int_equal(bc_open_state(key, "tpm", longer, BC_STATE_MAX + 1, &out, &out_len),
						 BC_ETOOBIG);
		free(longer);
	}
	/* contexts: empty or with spaces refused */
	assert_int_equal(bc_seal_state(key, "", pt, 10, &s), BC_EINVAL);
	assert_int_equal(bc_seal_state(key, "a b", pt, 10, &s), BC_EINVAL);
	/* an empty plaintext */
	assert_int_equal(bc_seal_state(key, "tpm", NULL, 0, &s), BC_OK);
	assert_int_equal(bc_open_state(key, "tpm", s, strlen(s), &out, &out_len), BC_OK);
	assert_int_equal(out_len, 0);
	bc_free_secret(out, 1);
	free(s);
}

/* Seal and open to a P-256 challenge.key (JWE); the key file in either form. */
static void
test_state_p256(void **state)
{
	EVP_PKEY   *key = bc_p256_generate();
	EVP_PKEY   *key2 = bc_p256_generate();
	EVP_PKEY   *read = NULL;
	unsigned char pt[300];
	unsigned char raw[32];
	unsigned char k32[32];
	unsigned char *out = NULL;
	size_t		out_len = 0;
	char	   *s = NULL;
	char		path[512];
	char		err[128];
	FILE	   *f;

	assert_non_null(key);
	assert_non_null(key2);
	assert_int_equal(RAND_bytes(pt, sizeof(pt)), 1);
	assert_int_equal(bc_seal_state_p256(key, "tpm", pt, 200, &s), BC_OK);
	assert_true(strlen(s) <= BC_STATE_MAX);
	assert_int_equal(bc_open_state_p256(key, "tpm", s, strlen(s), &out, &out_len), BC_OK);
	assert_int_equal(out_len, 200);
	assert_memory_equal(out, pt, 200);
	bc_free_secret(out, out_len + 1);
	assert_int_equal(bc_open_state_p256(key2, "tpm", s, strlen(s), &out, &out_len), BC_EVERIFY);
	assert_int_equal(bc_open_state_p256(key, "other", s, strlen(s), &out, &out_len), BC_EVERIFY);
	s[strlen(s) - 30] = s[strlen(s) - 30] == 'A' ? 'B' : 'A';
	assert_true(bc_open_state_p256(key, "tpm", s, strlen(s), &out, &out_len) != BC_OK);
	free(s);
	assert_int_equal(bc_seal_state_p256(key, "tpm", pt, 300, &s), BC_OK);
	free(s);

	/* challenge.key as bc-join-keygen writes it: a PEM P-256 key */
	snprintf(path, sizeof(path), "%s/challenge.key", (const char *) *state);
	assert_int_equal(bc_pkey_write_pem_file(key, path), BC_OK);
	assert_int_equal(bc_state_key_read_file(path, k32, &read, err, sizeof(err)), BC_OK);
	assert_non_null(read);
	assert_int_equal(EVP_PKEY_eq(read, key), 1);
	EVP_PKEY_free(read);
	unlink(path);
	/* or 32 raw bytes */
	assert_int_equal(RAND_bytes(raw, 32), 1);
	f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(raw, 1, 32, f), 32);
	fclose(f);
	assert_int_equal(bc_state_key_read_file(path, k32, &read, err, sizeof(err)), BC_OK);
	assert_null(read);
	assert_memory_equal(k32, raw, 32);
	/* 31 bytes is neither */
	f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(raw, 1, 31, f), 31);
	fclose(f);
	assert_int_equal(bc_state_key_read_file(path, k32, &read, err, sizeof(err)), BC_EINVAL);
	assert_true(strlen(err) > 0);
	unlink(path);
	assert_int_equal(bc_state_key_read_file(path, k32, &read, err, sizeof(err)), BC_EINVAL);
	EVP_PKEY_free(key);
	EVP_PKEY_free(key2);
}

/* Run the tests. */
int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_state_symmetric),
		cmocka_unit_test_setup_teardown(test_state_p256, setup_dir, teardown_dir),
	};

	return cmocka_run_group_tests_name("state", tests, NULL, NULL);
}
