/*
 * test_gw_body_budget.c: cmocka tests of bc-gateway's budget of large
 * request bodies (body_budget.c: bytes over GW_BODY_FREE per request are
 * reserved from --max-large-body-bytes, given back with the request).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "body_budget.h"

#define MiB (1024 * 1024)

/* Up to GW_BODY_FREE a request reserves nothing, even with the budget spent. */
static void
test_free_part(void **state)
{
	size_t		used = 8 * MiB,
				r = 0;

	(void) state;
	assert_int_equal(gw_body_budget_take(8 * MiB, &used, &r, 0), 0);
	assert_int_equal(gw_body_budget_take(8 * MiB, &used, &r, GW_BODY_FREE), 0);
	assert_int_equal(r, 0);
	assert_int_equal(used, 8 * MiB);
	assert_int_equal(gw_body_budget_take(8 * MiB, &used, &r, GW_BODY_FREE + 1), -1);
	assert_int_equal(r, 0);
	assert_int_equal(used, 8 * MiB);
}

/* A reservation grows with the bytes received; a second request gets what is left. */
static void
test_grow_and_share(void **state)
{
	size_t		used = 0,
				a = 0,
				b = 0;

	(void) state;
	assert_int_equal(gw_body_budget_take(8 * MiB, &used, &a, GW_BODY_FREE + MiB), 0);
	assert_int_equal(a, MiB);
	assert_int_equal(gw_body_budget_take(8 * MiB, &used, &a, GW_BODY_FREE + 4 * MiB), 0);
	assert_int_equal(a, 4 * MiB);
	assert_int_equal(used, 4 * MiB);
	/* exactly the rest fits; one byte more does not, and changes nothing */
	assert_int_equal(gw_body_budget_take(8 * MiB, &used, &b, GW_BODY_FREE + 4 * MiB), 0);
	assert_int_equal(used, 8 * MiB);
	assert_int_equal(gw_body_budget_take(8 * MiB, &used, &b, GW_BODY_FREE + 4 * MiB + 1), -1);
	assert_int_equal(b, 4 * MiB);
	assert_int_equal(used, 8 * MiB);
	/* a request that does not grow needs nothing more */
	assert_int_equal(gw_body_budget_take(8 * MiB, &used, &a, GW_BODY_FREE + 2 * MiB), 0);
	assert_int_equal(a, 4 * MiB);
}

/* Release gives a reservation back, once. */
static void
test_release(void **state)
{
	size_t		used = 0,
				a = 0,
				b = 0;

	(void) state;
	assert_int_equal(gw_body_budget_take(8 * MiB, &used, &a, GW_BODY_FREE + 6 * MiB), 0);
	assert_int_equal(gw_body_budget_take(8 * MiB, &used, &b, GW_BODY_FREE + 6 * MiB), -1);
	gw_body_budget_release(&used, &a);
	assert_int_equal(used, 0);
	assert_int_equal(a, 0);
	gw_body_budget_release(&used, &a);
	assert_int_equal(used, 0);
	assert_int_equal(gw_body_budget_take(8 * MiB, &used, &b, GW_BODY_FREE + 6 * MiB), 0);
	assert_int_equal(used, 6 * MiB);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_free_part),
		cmocka_unit_test(test_grow_and_share),
		cmocka_unit_test(test_release),
	};

	return cmocka_run_group_tests_name("gw_body_budget", tests, NULL, NULL);
}
