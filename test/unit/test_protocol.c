/*
 * test_protocol.c: cmocka tests of the grammars of src/common/bc_protocol.h
 * that both sides share: the session and context selector, the SPIFFE ID
 * formats.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "bc_protocol.h"

/* Every selector character is admitted; a session of one character is. */
static void
test_selector_admits(void **state)
{
	(void) state;
	assert_true(bc_selector_valid("a", 1));
	assert_true(bc_selector_valid(BC_SELECTOR_CHARS, 1));
	assert_true(bc_selector_valid("job-42.step:3_x", 1));
	assert_true(bc_selector_valid("", 0));	/* a context may be empty */
}

/* Empty sessions, NULL, foreign characters are refused. */
static void
test_selector_refuses(void **state)
{
	const char *bad[] = {"a b", "a/b", "a\nb", "é", "a;b", "a\"b", "%", "*", "a\\b", "+"};

	(void) state;
	assert_false(bc_selector_valid("", 1));
	assert_false(bc_selector_valid(NULL, 0));
	assert_false(bc_selector_valid(NULL, 1));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
	{
		assert_false(bc_selector_valid(bad[i], 1));
		assert_false(bc_selector_valid(bad[i], 0));
	}
}

/* BC_SELECTOR_MAX characters are admitted, one more is refused. */
static void
test_selector_length_boundary(void **state)
{
	char		s[BC_SELECTOR_MAX + 2];

	(void) state;
	memset(s, 'a', BC_SELECTOR_MAX);
	s[BC_SELECTOR_MAX] = '\0';
	assert_true(bc_selector_valid(s, 1));
	assert_true(bc_selector_valid(s, 0));
	s[BC_SELECTOR_MAX] = 'a';
	s[BC_SELECTOR_MAX + 1] = '\0';
	assert_false(bc_selector_valid(s, 1));
	assert_false(bc_selector_valid(s, 0));
}

/* The SPIFFE ID formats spell the contract's URIs. */
static void
test_spiffe_formats(void **state)
{
	char		buf[256];

	(void) state;
	snprintf(buf, sizeof(buf), BC_SPIFFE_NODE_FMT, "td.example", "acme", "n1");
	assert_string_equal(buf, "spiffe://td.example/tenant/acme/node/n1");
	snprintf(buf, sizeof(buf), BC_SPIFFE_SESSION_FMT, "td.example", "acme", "n1", "s1");
	assert_string_equal(buf, "spiffe://td.example/tenant/acme/node/n1/session/s1");
	assert_int_equal(strncmp(buf, BC_SPIFFE_SCHEME, strlen(BC_SPIFFE_SCHEME)), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_selector_admits),
		cmocka_unit_test(test_selector_refuses),
		cmocka_unit_test(test_selector_length_boundary),
		cmocka_unit_test(test_spiffe_formats),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
