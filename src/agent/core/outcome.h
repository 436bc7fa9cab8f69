/*
 * outcome.h: how a step of bcd, or a whole subcommand, ended: one enum for
 * the whole agent (tpm2-tools' tool_rc is the model).  Every function that
 * reports an outcome returns a bcd_rc; the helpers of src/common and the
 * agent's own file and key helpers keep returning src/common's status
 * (BC_OK, BC_EINVAL, ...), which says what went wrong, not what to do next.
 *
 * A subcommand's bcd_rc becomes the process's exit status in one place,
 * bcd_exit_status (cmd/main.c calls it); docs/agent.md and docs/sessions.md
 * list the statuses.
 */
#ifndef BCD_OUTCOME_H
#define BCD_OUTCOME_H

typedef enum bcd_rc
{
	BCD_RC_OK = 0,				/* done (exit 0) */
	BCD_RC_FAILED,				/* a failure: a bad answer, a bad configuration, ... (exit 1) */
	BCD_RC_REFUSED,				/* the service refused the join or the renewal (exit 2) */
	BCD_RC_DEFERRED,			/* a verified pending or challenge: not (yet) a join (exit 3) */
	BCD_RC_USAGE,				/* a bad command line (exit 64, EX_USAGE) */
	/* inside the daemon; never the end of a subcommand but for the exit they map to */
	BCD_RC_RETRY,				/* transient (no answer, 429, 5xx): try again later (exit 1) */
	BCD_RC_STOPPED,				/* SIGTERM or SIGINT: stop now (exit 0) */
	/* the clients of the local socket (bcd credential, bcd status; sysexits) */
	BCD_RC_BAD_INPUT,			/* bad-request, bad-dir (exit 65, EX_DATAERR) */
	BCD_RC_NO_DAEMON,			/* no-daemon, no-answer (exit 69, EX_UNAVAILABLE) */
	BCD_RC_SOFTWARE,			/* failed: bcd or the service's answer failed (exit 70, EX_SOFTWARE) */
	BCD_RC_TRY_LATER,			/* busy, unavailable, timeout (exit 75, EX_TEMPFAIL) */
	BCD_RC_DENIED				/* no-node-credential, refused, forbidden, untrusted-socket
								 * (exit 77, EX_NOPERM) */
} bcd_rc;

/* The process exit status of a subcommand that ended with rc. */
int			bcd_exit_status(bcd_rc rc);

/*
 * The outcome a client of the local socket ends with for an answer word
 * (bc_protocol.h, BC_SOCK_*), bcd's or its own; an unknown word is
 * BCD_RC_TRY_LATER when the answer said retryable, else BCD_RC_SOFTWARE.
 */
bcd_rc		bcd_socket_word_rc(const char *word, int retryable);

#endif							/* BCD_OUTCOME_H */
