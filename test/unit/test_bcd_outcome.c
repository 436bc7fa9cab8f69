/*
 * test_bcd_outcome.c: cmocka tests of bcd's exit statuses: every outcome
 * of a subcommand mapped to its exit status in one place
 * (core/outcome.c, bcd_exit_status: docs/agent.md's table), and every
 * answer word of the hooks' socket mapped to the outcome, and so the exit
 * status, a client ends with (bcd_socket_word_rc; the words and their
 * retryability: core/job.c; docs/sessions.md's table).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <string.h>
#include <cmocka.h>

#include "bc_protocol.h"
#include "core/job.h"
#include "core/outcome.h"

/* Every outcome's exit status: 0, 1, 2, 3, 64, and the sysexits of the socket's clients. */
static void
test_exit_statuses(void **state)
{
	static const struct
	{
		bcd_rc		rc;
		int			status;
	}			table[] = {
		{BCD_RC_OK, 0}, {BCD_RC_STOPPED, 0},
		{BCD_RC_FAILED, 1}, {BCD_RC_RETRY, 1},
		{BCD_RC_REFUSED, 2},
		{BCD_RC_DEFERRED, 3},
		{BCD_RC_USAGE, 64},		/* EX_USAGE */
		{BCD_RC_BAD_INPUT, 65},	/* EX_DATAERR */
		{BCD_RC_NO_DAEMON, 69},	/* EX_UNAVAILABLE */
		{BCD_RC_SOFTWARE, 70},	/* EX_SOFTWARE */
		{BCD_RC_TRY_LATER, 75},	/* EX_TEMPFAIL */
		{BCD_RC_DENIED, 77},	/* EX_NOPERM */
	};

	(void) state;
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
		if (bcd_exit_status(table[i].rc) != table[i].status)
			fail_msg("outcome %d: exit %d, want %d", (int) table[i].rc,
					 bcd_exit_status(table[i].rc), table[i].status);
	/* not an outcome at all: a failure, never success */
	assert_int_equal(bcd_exit_status((bcd_rc) 999), 1);
}

/* The exit status a client of the hooks' socket ends with for each answer word (docs/sessions.md). */
static void
test_socket_words(void **state)
{
	static const struct
	{
		const char *word;
		int			status;
	}			table[] = {
		{BC_SOCK_BAD_REQUEST, 65}, {BC_SOCK_BAD_DIR, 65},
		{BC_SOCK_NO_DAEMON, 69}, {BC_SOCK_NO_ANSWER, 69},
		{BC_SOCK_FAILED, 70},
		{BC_SOCK_BUSY, 75}, {BC_SOCK_UNAVAILABLE, 75}, {BC_SOCK_TIMEOUT, 75},
		{BC_SOCK_NO_NODE_CREDENTIAL, 77}, {BC_SOCK_REFUSED, 77}, {BC_SOCK_FORBIDDEN, 77},
		{BC_SOCK_UNTRUSTED_SOCKET, 77},
	};

	(void) state;
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
		for (int retryable = 0; retryable < 2; retryable++)
			if (bcd_exit_status(bcd_socket_word_rc(table[i].word, retryable)) != table[i].status)
				fail_msg("%s (retryable %d): exit %d, want %d", table[i].word, retryable,
						 bcd_exit_status(bcd_socket_word_rc(table[i].word, retryable)),
						 table[i].status);
	/* a word this client does not know: what the answer says of trying again */
	assert_int_equal(bcd_exit_status(bcd_socket_word_rc("from-a-newer-bcd", 1)), 75);
	assert_int_equal(bcd_exit_status(bcd_socket_word_rc("from-a-newer-bcd", 0)), 70);
}

/*
 * Every answer code bcd sends (bcd_code) is a word of the protocol, with
 * the retryability the client's exit status agrees with: busy and
 * unavailable try again (75); none of the others.
 */
static void
test_codes_on_the_wire(void **state)
{
	(void) state;
	for (int code = 0; code < BCD_CODE_COUNT; code++)
	{
		const char *word = bcd_code_name((bcd_code) code);
		int			status = bcd_exit_status(bcd_socket_word_rc(word, bcd_code_retryable((bcd_code) code)));

		if (code == BCD_CODE_OK)
		{
			assert_string_equal(word, BC_SOCK_OK);
			continue;
		}
		assert_int_equal(bcd_code_retryable((bcd_code) code), status == 75);
		assert_true(status == 65 || status == 70 || status == 75 || status == 77);
	}
	assert_string_equal(bcd_code_name(BCD_CODE_NO_NODE_CREDENTIAL), "no-node-credential");
	assert_string_equal(bcd_code_name(BCD_CODE_BAD_DIR), "bad-dir");
	assert_string_equal(bcd_code_name((bcd_code) 99), BC_SOCK_FAILED);
	assert_int_equal(bcd_code_retryable((bcd_code) 99), 0);
	/* the results' labels in the metrics (outcome="...") */
	assert_string_equal(bcd_job_result_name(BCD_RESULT_ISSUED), "issued");
	assert_string_equal(bcd_job_result_name(BCD_RESULT_UNAVAILABLE), "unavailable");
	assert_string_equal(bcd_job_result_name((bcd_job_result) 99), "failed");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exit_statuses),
		cmocka_unit_test(test_socket_words),
		cmocka_unit_test(test_codes_on_the_wire),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
