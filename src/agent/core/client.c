/*
 * client.c: the clients' half of bcd's local socket (`bcd credential`,
 * `bcd status`): connect only to a socket that may be our own bcd's
 * (local_socket.c, bcd_socket_connect), send one request line, read one
 * answer line within a timeout, and report a refusal as
 * "bcd CMD: <code>: <message>" on stderr.  Neither client ever falls back
 * to anything.  Each code has its outcome (outcome.c), and so its exit
 * status (docs/sessions.md):
 *
 *   0   delivered: the key and certificate paths and notAfter on stdout
 *   64  usage (EX_USAGE)
 *   65  bad-request, bad-dir: what the caller sent or named (EX_DATAERR)
 *   69  no-daemon, no-answer: nothing answers at the socket (EX_UNAVAILABLE)
 *   70  failed: the service's answer did not verify, ... (EX_SOFTWARE)
 *   75  busy, unavailable, timeout: try again later (EX_TEMPFAIL)
 *   77  no-node-credential, refused, forbidden, untrusted-socket (EX_NOPERM)
 *
 * The key itself never passes through here: bcd writes it into --dir and
 * answers with its path.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "core/client.h"
#include "core/clock.h"
#include "core/json.h"
#include "core/local_socket.h"

/* Report a refusal on stderr; its outcome. */
bcd_rc
bcd_client_refuse(const char *cmd, const char *code, const char *message, int retryable)
{
	fprintf(stderr, "bcd %s: %s: %s\n", cmd, code, message);
	return bcd_socket_word_rc(code, retryable);
}

/* Send all of line on fd. */
static int
send_all(int fd, const char *line, size_t len)
{
	while (len > 0)
	{
		ssize_t		n = send(fd, line, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		line += n;
		len -= (size_t) n;
	}
	return 0;
}

/*
 * Send req (one line) to the daemon at path and read its one answer line
 * within timeout seconds.  BCD_RC_OK with *answer (a JSON object);
 * otherwise the outcome, the refusal already reported.
 */
bcd_rc
bcd_client_exchange(const char *cmd, const char *path, json_t *req, double timeout, json_t **answer)
{
	char		err[512];
	char	   *line = json_dumps(req, JSON_COMPACT);
	char	   *buf = malloc(BCD_SOCK_ANSWER_MAX + 1);
	size_t		len = 0;
	double		deadline = bcd_now_ms() / 1000.0 + timeout;
	json_error_t jerr;
	int			fd = -1;
	bcd_rc		rc;

	*answer = NULL;
	if (line == NULL || buf == NULL)
	{
		rc = bcd_client_refuse(cmd, BC_SOCK_FAILED, "out of memory", 0);
		goto out;
	}
	switch (bcd_socket_connect(path, &fd, err, sizeof(err)))
	{
		case BCD_CONNECT_OK:
			break;
		case BCD_CONNECT_UNTRUSTED:
			rc = bcd_client_refuse(cmd, BC_SOCK_UNTRUSTED_SOCKET, err, 0);
			goto out;
		default:
			rc = bcd_client_refuse(cmd, BC_SOCK_NO_DAEMON, err, 0);
			goto out;
	}
	/*
	 * A send that fails is not the end: bcd answers some callers (another
	 * uid, too many connections) before it reads anything, then closes; the
	 * answer is still there to be read.
	 */
	if (send_all(fd, line, strlen(line)) == 0)
		(void) send_all(fd, "\n", 1);
	for (;;)
	{
		struct pollfd pfd = {fd, POLLIN, 0};
		double		left = deadline - bcd_now_ms() / 1000.0;
		ssize_t		n;

		if (memchr(buf, '\n', len) != NULL)
			break;
		if (left <= 0)
		{
			snprintf(err, sizeof(err), "no answer from bcd at %s within %.0f s", path, timeout);
			rc = bcd_client_refuse(cmd, BC_SOCK_TIMEOUT, err, 1);
			goto out;
		}
		if (poll(&pfd, 1, (int) ceil(left * 1000)) < 0 && errno != EINTR)
			break;
		if (pfd.revents == 0)
			continue;
		n = read(fd, buf + len, BCD_SOCK_ANSWER_MAX - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || (len += (size_t) n) >= BCD_SOCK_ANSWER_MAX)
			break;
	}
	*answer = json_loadb(buf, len, JSON_DISABLE_EOF_CHECK, &jerr);
	if (!json_is_object(*answer))
	{
		json_decref(*answer);
		*answer = NULL;
		rc = bcd_client_refuse(cmd, BC_SOCK_NO_ANSWER, "bcd closed the connection without a valid answer", 0);
		goto out;
	}
	rc = BCD_RC_OK;
out:
	if (fd >= 0)
		close(fd);
	free(line);
	free(buf);
	return rc;
}

/* An answer {"ok":false,...}: report it; its outcome. */
bcd_rc
bcd_client_report(const char *cmd, json_t *answer)
{
	return bcd_client_refuse(cmd, bcd_json_str(answer, "error", BC_SOCK_FAILED),
				  bcd_json_str(answer, "message", "(no message)"),
				  json_is_true(json_object_get(answer, "retryable")));
}

/* Parse --timeout; 0 on success. */
int
bcd_client_parse_timeout(const char *s, double *out)
{
	char	   *end;

	*out = strtod(s, &end);
	return end == s || *end != '\0' || !isfinite(*out) || *out <= 0 || *out > 86400;
}
