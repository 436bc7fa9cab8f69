/*
 * test_bcd_backoff.c: cmocka tests of bcd's waits (core/backoff.c): the
 * exponential backoff after a failure without an answer (1 s doubling to
 * 60 s, each step moved by up to 10% at random), a Retry-After honoured
 * within [1, --max-retry-after], and the jitter's bounds.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/backoff.h"

/* 1 when x is within fraction of want. */
static int
near(double x, double want, double fraction)
{
	return x >= want * (1 - fraction) - 1e-9 && x <= want * (1 + fraction) + 1e-9;
}

/* 1, 2, 4, ... 32, then 60 for good, each within 10%; a reset starts over. */
static void
test_steps(void **state)
{
	static const double steps[] = {1, 2, 4, 8, 16, 32, 60, 60, 60};
	bcd_backoff b;

	(void) state;
	for (int round = 0; round < 50; round++)
	{
		bcd_backoff_reset(&b);
		for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
		{
			double		wait = bcd_backoff_next(&b, 0, 300);

			if (!near(wait, steps[i], 0.1))
				fail_msg("step %zu: %.3f s, want %.0f s +-10%%", i, wait, steps[i]);
		}
	}
	bcd_backoff_reset(&b);
	assert_true(near(bcd_backoff_next(&b, 0, 300), 1, 0.1));
}

/* A Retry-After is a floor, clamped to [1, max_retry_after]; the steps go on doubling beneath it. */
static void
test_retry_after(void **state)
{
	bcd_backoff b;

	(void) state;
	bcd_backoff_reset(&b);
	assert_true(bcd_backoff_next(&b, 30, 300) == 30);	/* over the 1 s step */
	assert_true(near(bcd_backoff_next(&b, 1, 300), 2, 0.1));	/* under the 2 s step: the step */
	assert_true(bcd_backoff_next(&b, 1000, 300) == 300);	/* clamped to --max-retry-after */
	bcd_backoff_reset(&b);
	assert_true(near(bcd_backoff_next(&b, 0, 300), 1, 0.1));	/* none sent */
	assert_true(bcd_backoff_next(&b, 100, 0) >= 1);	/* a max below 1 s: 1 s at least */
	bcd_backoff_reset(&b);
	assert_true(bcd_backoff_next(&b, 2, 1) >= 1 - 1e-9);
}

/* The jitter moves a time by at most the fraction given, both ways over many draws. */
static void
test_jitter(void **state)
{
	double		lo = 1e9;
	double		hi = 0;

	(void) state;
	for (int i = 0; i < 2000; i++)
	{
		double		j = bcd_jitter(100, 0.25);

		assert_true(j >= 75 - 1e-9 && j <= 125 + 1e-9);
		lo = j < lo ? j : lo;
		hi = j > hi ? j : hi;
	}
	assert_true(lo < 90 && hi > 110);	/* spread, not a constant */
	assert_true(bcd_jitter(100, 0) == 100);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_steps),
		cmocka_unit_test(test_retry_after),
		cmocka_unit_test(test_jitter),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
