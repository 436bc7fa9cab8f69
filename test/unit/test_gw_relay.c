/*
 * test_gw_relay.c: cmocka tests of bc-gateway's status mapping (relay.c):
 * a database error's SQLSTATE to the HTTP status, outcome and message the
 * client gets (docs/gateway.md, "Status mapping"), and the bounds of a
 * relayed request body.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "config.h"
#include "metrics.h"
#include "relay.h"

/* One row of the mapping. */
struct mapping
{
	const char *sqlstate;
	int			http;
	int			outcome;
	const char *message;		/* of a 400; "=" the server's own */
};

static const struct mapping mappings[] = {
	/* the codes whose messages are written for the client: relayed */
	{"22023", 400, GW_OUT_INVALID, "="},
	{"22P02", 400, GW_OUT_INVALID, "="},
	{"22021", 400, GW_OUT_INVALID, "="},
	{"22P05", 400, GW_OUT_INVALID, "="},
	/* the rest of class 22 and 54000/54001: the gateway's own words */
	{"22003", 400, GW_OUT_INVALID, "a value in the request is out of range"},
	{"22012", 400, GW_OUT_INVALID, "invalid input"},
	{"22000", 400, GW_OUT_INVALID, "invalid input"},
	{"54001", 400, GW_OUT_INVALID, "request nested too deeply or too complex"},
	{"54000", 400, GW_OUT_INVALID, "request nested too deeply or too complex"},
	{"0A000", 404, GW_OUT_UNSUPPORTED, NULL},
	{"42883", 404, GW_OUT_UNSUPPORTED, NULL},
	{"57014", 503, GW_OUT_TIMEOUT, NULL},
	{"08006", 503, GW_OUT_UNAVAILABLE, NULL},
	{"08000", 503, GW_OUT_UNAVAILABLE, NULL},
	{"57P01", 503, GW_OUT_UNAVAILABLE, NULL},
	{"57P02", 503, GW_OUT_UNAVAILABLE, NULL},
	{"57P03", 503, GW_OUT_UNAVAILABLE, NULL},
	{"53300", 503, GW_OUT_UNAVAILABLE, NULL},
	{"40001", 503, GW_OUT_UNAVAILABLE, NULL},
	{"40P01", 503, GW_OUT_UNAVAILABLE, NULL},
	{"25006", 503, GW_OUT_UNAVAILABLE, NULL},
	/* everything else is the server's fault: 500 */
	{"54023", 500, GW_OUT_ERROR, NULL},
	{"53100", 500, GW_OUT_ERROR, NULL},
	{"F0000", 500, GW_OUT_ERROR, NULL},
	{"XX000", 500, GW_OUT_ERROR, NULL},
	{"42501", 500, GW_OUT_ERROR, NULL},
	{"JR001", 500, GW_OUT_ERROR, NULL},
	{"2202", 500, GW_OUT_ERROR, NULL},
	{"220230", 500, GW_OUT_ERROR, NULL},
	{"", 500, GW_OUT_ERROR, NULL},
};

/* Every SQLSTATE of the table maps to its status and outcome; a 400 to its message. */
static void
test_sqlstate_mapping(void **state)
{
	static const char server[] = "invalid join request: \"csr\" is required";

	(void) state;
	for (size_t i = 0; i < sizeof(mappings) / sizeof(mappings[0]); i++)
	{
		const struct mapping *m = &mappings[i];
		int			outcome = -1;

		assert_int_equal(gw_http_status_for_sqlstate(m->sqlstate, &outcome), m->http);
		assert_int_equal(outcome, m->outcome);
		if (m->http != 400)
			continue;
		if (strcmp(m->message, "=") == 0)
			assert_ptr_equal(gw_http_invalid_input_message(m->sqlstate, server), server);
		else
			assert_string_equal(gw_http_invalid_input_message(m->sqlstate, server), m->message);
	}
}

/* No SQLSTATE (a result without one) is a 500; a relayed code without a message says "invalid input". */
static void
test_sqlstate_missing(void **state)
{
	int			outcome = -1;

	(void) state;
	assert_int_equal(gw_http_status_for_sqlstate(NULL, &outcome), 500);
	assert_int_equal(outcome, GW_OUT_ERROR);
	assert_string_equal(gw_http_invalid_input_message("22023", NULL), "invalid input");
}

/* A body is relayed when it has 1 to 65,536 bytes and no NUL; else 400, or 413 over the bound. */
static void
test_body_bounds(void **state)
{
	char	   *big = malloc(GW_MAX_BODY + 1);
	int			http = 0;

	(void) state;
	assert_non_null(big);
	memset(big, 'a', GW_MAX_BODY + 1);
	assert_string_equal(gw_http_body_refusal("", 0, 0, &http), "request body is empty");
	assert_int_equal(http, 400);
	assert_string_equal(gw_http_body_refusal(NULL, GW_MAX_BODY + 1, 0, &http), "request body over 65536 bytes");
	assert_int_equal(http, 413);
	assert_null(gw_http_body_refusal(big, GW_MAX_BODY, 0, &http));
	assert_null(gw_http_body_refusal(NULL, GW_MAX_BODY, 0, &http));
	assert_string_equal(gw_http_body_refusal("{\0}", 3, 0, &http), "request body contains a NUL byte");
	assert_int_equal(http, 400);
	assert_null(gw_http_body_refusal("{}", 2, 0, &http));
	/* a route with a larger bound (attest) takes more, and only up to its bound */
	assert_null(gw_http_body_refusal(NULL, GW_MAX_BODY + 1, 8 * 1024 * 1024, &http));
	assert_null(gw_http_body_refusal(NULL, 8 * 1024 * 1024, 8 * 1024 * 1024, &http));
	assert_string_equal(gw_http_body_refusal(NULL, 8 * 1024 * 1024 + 1, 8 * 1024 * 1024, &http),
						"request body over the route's bound");
	assert_int_equal(http, 413);
	free(big);
}

/* A result's status: 200 with its outcome, 403 refused, anything else unexpected (a 500). */
static void
test_result_status(void **state)
{
	static const struct
	{
		const char *status;
		int			http;
		enum gw_outcome out;
	}			cases[] = {
		{"issued", 200, GW_OUT_ISSUED}, {"pending", 200, GW_OUT_PENDING},
		{"challenge", 200, GW_OUT_CHALLENGE}, {"attested", 200, GW_OUT_ATTESTED},
		{"quarantined", 200, GW_OUT_QUARANTINED}, {"refused", 403, GW_OUT_REFUSED},
	};
	enum gw_outcome out;
	int			http;

	(void) state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
	{
		assert_int_equal(gw_relay_status(cases[i].status, &out, &http), 0);
		assert_int_equal(http, cases[i].http);
		assert_int_equal(out, cases[i].out);
		assert_string_equal(gw_outcome_name(out), cases[i].status);
	}
	assert_int_equal(gw_relay_status("Issued", &out, &http), -1);
	assert_int_equal(gw_relay_status("", &out, &http), -1);
	assert_int_equal(gw_relay_status(NULL, &out, &http), -1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sqlstate_mapping),
		cmocka_unit_test(test_sqlstate_missing),
		cmocka_unit_test(test_body_bounds),
		cmocka_unit_test(test_result_status),
	};

	return cmocka_run_group_tests_name("gw_relay", tests, NULL, NULL);
}
