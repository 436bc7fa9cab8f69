/*
 * test_bcd_attest.c: cmocka tests of continuous attestation's pure
 * decisions (core/attest_rules.c): the interval the service sets (clamped,
 * a default when absent), the challenge's PCR selection (refused unless
 * distinct PCRs 0..23 of a known bank), whole entries of an IMA binary list
 * (a cut entry left for later, a malformed one refused, the byte bound),
 * and what an answer does to the node's state (only a signed "attested" or
 * "quarantined" changes it; a refusal or no answer never does).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <jansson.h>
#include <tss2/tss2_tpm2_types.h>

#include "bc_protocol.h"
#include "core/attest_rules.h"

/* intervalSeconds / nextSeconds: integers clamped to [5, 3600]; anything else the fallback. */
static void
test_interval(void **state)
{
	json_t	   *v;

	(void) state;
	assert_int_equal(bcd_attest_interval(NULL, 60), 60);
	v = json_integer(30);
	assert_int_equal(bcd_attest_interval(v, 60), 30);
	json_decref(v);
	v = json_integer(1);
	assert_int_equal(bcd_attest_interval(v, 60), BC_ATTEST_INTERVAL_MIN);
	json_decref(v);
	v = json_integer(-5);
	assert_int_equal(bcd_attest_interval(v, 60), BC_ATTEST_INTERVAL_MIN);
	json_decref(v);
	v = json_integer(86400 * 365);
	assert_int_equal(bcd_attest_interval(v, 60), BC_ATTEST_INTERVAL_MAX);
	json_decref(v);
	v = json_string("30");
	assert_int_equal(bcd_attest_interval(v, 45), 45);
	json_decref(v);
	v = json_real(30.0);
	assert_int_equal(bcd_attest_interval(v, 45), 45);
	json_decref(v);
}

/* The challenge's selection: a bank and distinct PCRs 0..23, as a mask. */
static void
test_selection(void **state)
{
	static const struct
	{
		const char *pcrs;
		const char *bank;
		int			ok;
		uint16_t	alg;
		uint32_t	mask;
	}			cases[] = {
		{"[0,1,2,3,4,5,6,7]", "sha256", 1, TPM2_ALG_SHA256, 0xff},
		{"[10]", "sha1", 1, TPM2_ALG_SHA1, 1u << 10},
		{"[23,0]", "sha384", 1, TPM2_ALG_SHA384, (1u << 23) | 1},
		{"[4]", "sha512", 1, TPM2_ALG_SHA512, 1u << 4},
		{"[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23]", "sha256", 1,
		TPM2_ALG_SHA256, 0xffffff},
		{"[]", "sha256", 0, 0, 0},
		{"[24]", "sha256", 0, 0, 0},
		{"[-1]", "sha256", 0, 0, 0},
		{"[1,1]", "sha256", 0, 0, 0},
		{"[1.5]", "sha256", 0, 0, 0},
		{"[\"1\"]", "sha256", 0, 0, 0},
		{"{\"0\":1}", "sha256", 0, 0, 0},
		{"[0]", "SHA256", 0, 0, 0},
		{"[0]", "sm3_256", 0, 0, 0},
		{"[0]", NULL, 0, 0, 0},
		{"[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,0]", "sha256", 0, 0, 0},
	};

	(void) state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
	{
		json_t	   *pcrs = json_loads(cases[i].pcrs, 0, NULL);
		const char *why = NULL;
		uint16_t	alg = 1;
		uint32_t	mask = 1;
		int			rc;

		assert_non_null(pcrs);
		rc = bcd_attest_selection(pcrs, cases[i].bank, &alg, &mask, &why);
		if (cases[i].ok)
		{
			if (rc != 0)
				fail_msg("case %zu refused: %s", i, why);
			assert_int_equal(alg, cases[i].alg);
			assert_int_equal(mask, cases[i].mask);
		}
		else
		{
			if (rc == 0)
				fail_msg("case %zu taken", i);
			assert_non_null(why);
			assert_int_equal(mask, 0);
		}
		json_decref(pcrs);
	}
	assert_string_equal(bcd_attest_bank_name(TPM2_ALG_SHA256), "sha256");
	assert_null(bcd_attest_bank_name(0x12));
}

/* Append one IMA entry (little-endian framing) to buf at *n; its size. */
static size_t
ima_entry(unsigned char *buf, size_t *n, const char *name, uint32_t name_len, uint32_t data_len)
{
	size_t		start = *n;
	unsigned char *p = buf + *n;

	memset(p, 0, 4 + 20);
	p[0] = 10;					/* PCR 10 */
	p += 24;
	p[0] = (unsigned char) name_len;
	p[1] = (unsigned char) (name_len >> 8);
	p[2] = (unsigned char) (name_len >> 16);
	p[3] = (unsigned char) (name_len >> 24);
	p += 4;
	memcpy(p, name, strlen(name) < name_len ? strlen(name) : name_len);
	p += name_len;
	p[0] = (unsigned char) data_len;
	p[1] = (unsigned char) (data_len >> 8);
	p[2] = (unsigned char) (data_len >> 16);
	p[3] = (unsigned char) (data_len >> 24);
	p += 4;
	memset(p, 'd', data_len);
	p += data_len;
	*n = (size_t) (p - buf);
	return *n - start;
}

/* Whole entries: counted, bounded by entries and bytes; a cut one waits; a malformed one is -1. */
static void
test_ima_entries(void **state)
{
	unsigned char *buf = calloc(1, 1 << 20);
	size_t		n = 0;
	size_t		used = 99;
	size_t		e1,
				e2,
				e3;

	(void) state;
	assert_non_null(buf);
	assert_int_equal(bcd_ima_whole_entries(buf, 0, 10, 1 << 20, &used), 0);
	assert_int_equal(used, 0);
	e1 = ima_entry(buf, &n, "ima-ng", 6, 60);
	e2 = ima_entry(buf, &n, "ima-sig", 7, 100);
	e3 = ima_entry(buf, &n, "ima-ng", 6, 0);
	assert_int_equal(bcd_ima_whole_entries(buf, n, 10, 1 << 20, &used), 3);
	assert_int_equal(used, n);
	/* at most max_entries (what is skipped to the service's offset) */
	assert_int_equal(bcd_ima_whole_entries(buf, n, 2, 1 << 20, &used), 2);
	assert_int_equal(used, e1 + e2);
	assert_int_equal(bcd_ima_whole_entries(buf, n, 0, 1 << 20, &used), 0);
	assert_int_equal(used, 0);
	/* an entry cut anywhere is left for the next read */
	for (size_t cut = 1; cut < e2; cut++)
	{
		assert_int_equal(bcd_ima_whole_entries(buf, e1 + cut, 10, 1 << 20, &used), 1);
		assert_int_equal(used, e1);
	}
	/* at most max_bytes in all */
	assert_int_equal(bcd_ima_whole_entries(buf, n, 10, e1 + e2 - 1, &used), 1);
	assert_int_equal(used, e1);
	assert_int_equal(bcd_ima_whole_entries(buf, n, 10, e1 + e2 + e3, &used), 3);
	(void) e3;

	/* a name of 0 or over 255 bytes, data over the bound: malformed */
	n = 0;
	ima_entry(buf, &n, "", 0, 10);
	assert_int_equal(bcd_ima_whole_entries(buf, n, 10, 1 << 20, &used), -1);
	n = 0;
	ima_entry(buf, &n, "x", 256, 10);
	assert_int_equal(bcd_ima_whole_entries(buf, n, 10, 1 << 20, &used), -1);
	n = 0;
	ima_entry(buf, &n, "ima-ng", 6, 10);
	e1 = n;
	buf[n + 24] = 6;			/* a second entry declaring 4 GiB of data */
	memcpy(buf + n + 28, "ima-ng", 6);
	memset(buf + n + 34, 0xff, 4);
	assert_int_equal(bcd_ima_whole_entries(buf, n + 38, 10, 1 << 20, &used), -1);
	free(buf);
}

/* Only a signed attested or quarantined changes the node's state. */
static void
test_decide(void **state)
{
	(void) state;
	assert_int_equal(bcd_attest_decide(BCD_ATTEST_UNKNOWN, BCD_RC_OK, "attested"),
					 BCD_ATTEST_HEALTHY);
	assert_int_equal(bcd_attest_decide(BCD_ATTEST_HEALTHY, BCD_RC_OK, "quarantined"),
					 BCD_ATTEST_QUARANTINED);
	/* readmitted: attested again */
	assert_int_equal(bcd_attest_decide(BCD_ATTEST_QUARANTINED, BCD_RC_OK, "attested"),
					 BCD_ATTEST_HEALTHY);
	/* a refusal (bad proof, stale state) proves nothing about the machine */
	assert_int_equal(bcd_attest_decide(BCD_ATTEST_HEALTHY, BCD_RC_REFUSED, NULL),
					 BCD_ATTEST_HEALTHY);
	assert_int_equal(bcd_attest_decide(BCD_ATTEST_QUARANTINED, BCD_RC_REFUSED, NULL),
					 BCD_ATTEST_QUARANTINED);
	/* no answer, or one that does not verify */
	assert_int_equal(bcd_attest_decide(BCD_ATTEST_HEALTHY, BCD_RC_RETRY, "quarantined"),
					 BCD_ATTEST_HEALTHY);
	assert_int_equal(bcd_attest_decide(BCD_ATTEST_QUARANTINED, BCD_RC_FAILED, "attested"),
					 BCD_ATTEST_QUARANTINED);
	assert_int_equal(bcd_attest_decide(BCD_ATTEST_HEALTHY, BCD_RC_OK, "issued"),
					 BCD_ATTEST_HEALTHY);
	assert_int_equal(bcd_attest_decide(BCD_ATTEST_UNKNOWN, BCD_RC_OK, NULL), BCD_ATTEST_UNKNOWN);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_interval),
		cmocka_unit_test(test_selection),
		cmocka_unit_test(test_ima_entries),
		cmocka_unit_test(test_decide),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
