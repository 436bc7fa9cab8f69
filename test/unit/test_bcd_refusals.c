/*
 * test_bcd_refusals.c: cmocka tests of the Workload API's refusals'
 * summary (src/agent/workload/refusals.c): per uid and interval of 10 s,
 * the first 5 refusals logged in full, the rest counted and told in one
 * line when the interval ends; 64 uids an interval, the rest together.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "bcd_capture.h"
#include "workload/refusals.h"

/* What bcd_wl_refusals_tick logs at now (malloc()ed). */
static char *
tick_log(bcd_wl_refusals *r, double now)
{
	bcd_capture cap;

	assert_int_equal(bcd_capture_start(&cap), 0);
	bcd_wl_refusals_tick(r, now);
	return bcd_capture_end(&cap);
}

/* The first 5 of a uid in full, the rest counted; told when the interval is over, then anew. */
static void
test_first_then_summary(void **state)
{
	bcd_wl_refusals *r = bcd_wl_refusals_new();
	char	   *out;

	(void) state;
	assert_non_null(r);
	for (int i = 0; i < BCD_WL_REFUSALS_FIRST; i++)
		assert_int_equal(bcd_wl_refusals_take(r, 1000, 100.0 + i), 1);
	for (int i = 0; i < 7; i++)
		assert_int_equal(bcd_wl_refusals_take(r, 1000, 105.0), 0);
	assert_int_equal(bcd_wl_refusals_take(r, 1001, 105.0), 1);	/* another uid: its own count */
	out = tick_log(r, 109.9);	/* the interval is not over */
	assert_string_equal(out, "");
	free(out);
	out = tick_log(r, 110.0);
	assert_string_equal(out, "bcd: workload api: 7 more refusals of uid 1000 in the last 10 s "
						"(the first 5 logged)\n");	/* uid 1001 had none beyond its first */
	free(out);
	out = tick_log(r, 130.0);	/* nothing since: nothing to tell */
	assert_string_equal(out, "");
	free(out);
	/* a new interval: in full again */
	assert_int_equal(bcd_wl_refusals_take(r, 1000, 131.0), 1);
	bcd_wl_refusals_free(r);
}

/* 64 uids an interval; refusals of any further uid are counted together, none logged in full. */
static void
test_other_uids(void **state)
{
	bcd_wl_refusals *r = bcd_wl_refusals_new();
	char	   *out;

	(void) state;
	for (uid_t u = 0; u < 64; u++)
		assert_int_equal(bcd_wl_refusals_take(r, 5000 + u, 1.0), 1);
	assert_int_equal(bcd_wl_refusals_take(r, 9999, 1.0), 0);
	assert_int_equal(bcd_wl_refusals_take(r, 9998, 1.0), 0);
	assert_int_equal(bcd_wl_refusals_take(r, 5000, 1.0), 1);	/* a uid in the table: its own count */
	out = tick_log(r, 11.0);
	assert_string_equal(out, "bcd: workload api: 2 more refusals of other uids in the last 10 s\n");
	free(out);
	assert_int_equal(bcd_wl_refusals_take(r, 9999, 12.0), 1);	/* room again */
	bcd_wl_refusals_free(r);
	/* no table (out of memory at start): every refusal logged */
	assert_int_equal(bcd_wl_refusals_take(NULL, 1, 1.0), 1);
	bcd_wl_refusals_tick(NULL, 100.0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_first_then_summary),
		cmocka_unit_test(test_other_uids),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
