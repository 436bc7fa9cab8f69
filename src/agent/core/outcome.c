/*
 * outcome.c: the one mapping of bcd's outcomes (outcome.h) to process exit
 * statuses, and of the local socket's answer words to outcomes.
 */
#include <string.h>

#include "bc_protocol.h"
#include "core/outcome.h"

/* The process exit status of a subcommand that ended with rc. */
int
bcd_exit_status(bcd_rc rc)
{
	switch (rc)
	{
		case BCD_RC_OK:
		case BCD_RC_STOPPED:
			return 0;
		case BCD_RC_FAILED:
		case BCD_RC_RETRY:
			return 1;
		case BCD_RC_REFUSED:
			return 2;
		case BCD_RC_DEFERRED:
			return 3;
		case BCD_RC_USAGE:
			return 64;
		case BCD_RC_BAD_INPUT:
			return 65;
		case BCD_RC_NO_DAEMON:
			return 69;
		case BCD_RC_SOFTWARE:
			return 70;
		case BCD_RC_TRY_LATER:
			return 75;
		case BCD_RC_DENIED:
			return 77;
	}
	return 1;
}

/* The outcome of a client of the local socket for an answer word (outcome.h). */
bcd_rc
bcd_socket_word_rc(const char *word, int retryable)
{
	static const struct
	{
		const char *word;
		bcd_rc		rc;
	}			map[] = {
		{BC_SOCK_BAD_REQUEST, BCD_RC_BAD_INPUT}, {BC_SOCK_BAD_DIR, BCD_RC_BAD_INPUT},
		{BC_SOCK_NO_DAEMON, BCD_RC_NO_DAEMON}, {BC_SOCK_NO_ANSWER, BCD_RC_NO_DAEMON},
		{BC_SOCK_FAILED, BCD_RC_SOFTWARE},
		{BC_SOCK_BUSY, BCD_RC_TRY_LATER}, {BC_SOCK_UNAVAILABLE, BCD_RC_TRY_LATER},
		{BC_SOCK_TIMEOUT, BCD_RC_TRY_LATER},
		{BC_SOCK_NO_NODE_CREDENTIAL, BCD_RC_DENIED}, {BC_SOCK_REFUSED, BCD_RC_DENIED},
		{BC_SOCK_FORBIDDEN, BCD_RC_DENIED}, {BC_SOCK_UNTRUSTED_SOCKET, BCD_RC_DENIED},
		{BC_SOCK_NO_SSH_CERTIFICATE, BCD_RC_DENIED},
	};
	size_t		i;

	for (i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (strcmp(word, map[i].word) == 0)
			return map[i].rc;
	return retryable ? BCD_RC_TRY_LATER : BCD_RC_SOFTWARE;
}
