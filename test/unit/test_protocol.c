/*
 * test_protocol.c: cmocka tests of the grammars of src/common/bc_protocol.h
 * that both sides share: the session and context selector, the role, the
 * attestor id, the serial and the MAC address, the SPIFFE ID builders and
 * parser.
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

/* The SPIFFE ID builders: what the formats spell, 0 when the buffer is short. */
static void
test_spiffe_builders(void **state)
{
	char		buf[256];
	char		small[20];
	volatile size_t small_size = sizeof(small); /* not a constant: no -Wformat-truncation */

	(void) state;
	assert_true(bc_spiffe_id(buf, sizeof(buf), "td", "t", "n", NULL));
	assert_string_equal(buf, "spiffe://td/tenant/t/node/n");
	assert_true(bc_spiffe_id(buf, sizeof(buf), "td", "t", "n", "s"));
	assert_string_equal(buf, "spiffe://td/tenant/t/node/n/session/s");
	assert_false(bc_spiffe_id(small, small_size, "td", "t", "n", NULL));
	assert_false(bc_spiffe_id(buf, sizeof(buf), NULL, "t", "n", NULL));
	assert_true(bc_spiffe_session_of(buf, sizeof(buf), "spiffe://td/tenant/t/node/n", "s"));
	assert_string_equal(buf, "spiffe://td/tenant/t/node/n/session/s");
	/* only of a node's ID, never of a session's or of something else */
	assert_false(bc_spiffe_session_of(buf, sizeof(buf), "spiffe://td/tenant/t/node/n/session/s", "x"));
	assert_false(bc_spiffe_session_of(buf, sizeof(buf), "spiffe://td/x", "s"));
	assert_false(bc_spiffe_session_of(small, small_size, "spiffe://td/tenant/t/node/n", "s"));
}

/* The parser takes what the builders make, parts pointing into the string. */
static void
test_spiffe_parse_admits(void **state)
{
	bc_spiffe_parts p;
	const char *node = "spiffe://td.example/tenant/acme/node/n1";
	const char *sess = "spiffe://td.example/tenant/acme/node/n1/session/job:7";

	(void) state;
	assert_true(bc_spiffe_parse(node, "td.example", &p));
	assert_int_equal(p.trust_domain_len, 10);
	assert_memory_equal(p.tenant, "acme", 4);
	assert_int_equal(p.tenant_len, 4);
	assert_memory_equal(p.node, "n1", 2);
	assert_int_equal(p.node_len, 2);
	assert_null(p.session);
	assert_true(bc_spiffe_parse(sess, NULL, &p));
	assert_non_null(p.session);
	assert_int_equal(p.session_len, 5);
	assert_memory_equal(p.session, "job:7", 5);
	assert_true(bc_spiffe_parse(node, NULL, NULL));
}

/* Any other shape, another trust domain, empty parts are refused. */
static void
test_spiffe_parse_refuses(void **state)
{
	const char *bad[] = {
		"", "spiffe://", "spiffe:///tenant/t/node/n", "spiffe://td", "spiffe://td/",
		"spiffe://td/tenant//node/n", "spiffe://td/tenant/t/node/", "spiffe://td/tenant/t/node/n/",
		"spiffe://td/tenant/t/node/n/session/", "spiffe://td/tenant/t/node/n/session/s/x",
		"spiffe://td/tenant/t/node/n/x/s", "spiffe://td/tenant/t/nodes/n", "spiffe://td/t/node/n",
		"SPIFFE://td/tenant/t/node/n", "https://td/tenant/t/node/n", "spiffe://td/tenant/t",
		"urn:bc:tpm-ak:sha256:00",
	};

	(void) state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_false(bc_spiffe_parse(bad[i], NULL, NULL));
	assert_false(bc_spiffe_parse(NULL, NULL, NULL));
	assert_false(bc_spiffe_parse("spiffe://td/tenant/t/node/n", "other", NULL));
	assert_false(bc_spiffe_parse("spiffe://td/tenant/t/node/n", "t", NULL));	/* a prefix of it */
	assert_false(bc_spiffe_parse("spiffe://tdx/tenant/t/node/n", "td", NULL));
}

/* Roles, attestor ids, serials and MAC addresses: the one check of each. */
static void
test_words(void **state)
{
	char		id[BC_ATTESTOR_ID_MAX + 2];

	(void) state;
	assert_true(bc_role_valid(BC_ROLE_NODE));
	assert_true(bc_role_valid(BC_ROLE_SITE));
	assert_true(bc_role_valid(BC_ROLE_RAMDISK));
	assert_false(bc_role_valid("Node"));
	assert_false(bc_role_valid("nodes"));
	assert_false(bc_role_valid(""));
	assert_false(bc_role_valid(NULL));

	assert_true(bc_attestor_id_valid(BC_ATTESTOR_JOIN_TOKEN));
	assert_true(bc_attestor_id_valid(BC_ATTESTOR_CLOUD_IID));
	assert_true(bc_attestor_id_valid("my.custom_attestor-2"));
	assert_false(bc_attestor_id_valid("Tpm"));
	assert_false(bc_attestor_id_valid("a b"));
	assert_false(bc_attestor_id_valid("a/b"));
	assert_false(bc_attestor_id_valid(""));
	assert_false(bc_attestor_id_valid(NULL));
	memset(id, 'a', BC_ATTESTOR_ID_MAX);
	id[BC_ATTESTOR_ID_MAX] = '\0';
	assert_true(bc_attestor_id_valid(id));
	id[BC_ATTESTOR_ID_MAX] = 'a';
	id[BC_ATTESTOR_ID_MAX + 1] = '\0';
	assert_false(bc_attestor_id_valid(id));

	assert_true(bc_serial_valid("0123456789abcdef0123456789abcdef"));
	assert_false(bc_serial_valid("0123456789ABCDEF0123456789abcdef"));
	assert_false(bc_serial_valid("0123456789abcdef0123456789abcde"));
	assert_false(bc_serial_valid("0123456789abcdef0123456789abcdef0"));
	assert_false(bc_serial_valid("0123456789abcdef0123456789abcdeg"));
	assert_false(bc_serial_valid(NULL));

	assert_true(bc_mac_valid("aa:bb:cc:dd:ee:ff"));
	assert_true(bc_mac_valid("00:11:22:33:44:55"));
	assert_false(bc_mac_valid("AA:BB:CC:DD:EE:FF"));
	assert_false(bc_mac_valid("aa-bb-cc-dd-ee-ff"));
	assert_false(bc_mac_valid("aa:bb:cc:dd:ee:f"));
	assert_false(bc_mac_valid("aa:bb:cc:dd:ee:ff:"));
	assert_false(bc_mac_valid("aabb:cc:dd:ee:ff:0"));
	assert_false(bc_mac_valid(NULL));

	assert_int_equal(strncmp(BC_TPM_AK_URN_PREFIX, "urn:bc:tpm-ak:", 15), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_selector_admits),
		cmocka_unit_test(test_spiffe_builders),
		cmocka_unit_test(test_spiffe_parse_admits),
		cmocka_unit_test(test_spiffe_parse_refuses),
		cmocka_unit_test(test_words),
		cmocka_unit_test(test_selector_refuses),
		cmocka_unit_test(test_selector_length_boundary),
		cmocka_unit_test(test_spiffe_formats),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
