/*
 * hook.c: the clients of bcd's socket: `bcd credential` (what a hook runs
 * to get a session credential) and `bcd status`.
 *
 * Neither ever falls back to anything: a daemon that cannot be reached, that
 * does not answer, or that refuses is reported on stderr as
 * "bcd credential: <code>: <message>" with a distinct outcome, and so a
 * distinct exit status (outcome.c maps both; sysexits):
 *
 *   0   delivered: the key and certificate paths and notAfter on stdout
 *   64  usage (EX_USAGE)
 *   65  bad-request, bad-dir: what the caller sent or named (EX_DATAERR)
 *   69  no-daemon, no-answer: nothing answers at the socket (EX_UNAVAILABLE)
 *   70  failed: the service's answer did not verify, ... (EX_SOFTWARE)
 *   75  busy, unavailable, timeout: try again later (EX_TEMPFAIL)
 *   77  no-node-credential, refused, forbidden, untrusted-socket (EX_NOPERM)
 *
 * Nothing is sent to, or believed from, a socket that may not be bcd's: its
 * directory must be ours and writable by nobody else, and the process
 * listening on it must be of our own uid (SO_PEERCRED), or the client
 * refuses with untrusted-socket (local_socket.c, bcd_socket_connect).
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
#include <time.h>
#include <unistd.h>

#include "sessions.h"

/* Default --timeout of the clients, in seconds. */
#define DEFAULT_TIMEOUT 120.0

/* Report a refusal on stderr; its outcome. */
static bcd_rc
refuse(const char *cmd, const char *code, const char *message, int retryable)
{
	fprintf(stderr, "bcd %s: %s: %s\n", cmd, code, message);
	return bcd_socket_word_rc(code, retryable);
}

/* Seconds on the monotonic clock. */
static double
mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
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
static bcd_rc
exchange(const char *cmd, const char *path, json_t *req, double timeout, json_t **answer)
{
	char		err[512];
	char	   *line = json_dumps(req, JSON_COMPACT);
	char	   *buf = malloc(BCD_SOCK_ANSWER_MAX + 1);
	size_t		len = 0;
	double		deadline = mono() + timeout;
	json_error_t jerr;
	int			fd = -1;
	bcd_rc		rc;

	*answer = NULL;
	if (line == NULL || buf == NULL)
	{
		rc = refuse(cmd, BC_SOCK_FAILED, "out of memory", 0);
		goto out;
	}
	switch (bcd_socket_connect(path, &fd, err, sizeof(err)))
	{
		case BCD_CONNECT_OK:
			break;
		case BCD_CONNECT_UNTRUSTED:
			rc = refuse(cmd, BC_SOCK_UNTRUSTED_SOCKET, err, 0);
			goto out;
		default:
			rc = refuse(cmd, BC_SOCK_NO_DAEMON, err, 0);
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
		double		left = deadline - mono();
		ssize_t		n;

		if (memchr(buf, '\n', len) != NULL)
			break;
		if (left <= 0)
		{
			snprintf(err, sizeof(err), "no answer from bcd at %s within %.0f s", path, timeout);
			rc = refuse(cmd, BC_SOCK_TIMEOUT, err, 1);
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
		rc = refuse(cmd, BC_SOCK_NO_ANSWER, "bcd closed the connection without a valid answer", 0);
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

/* The string member name of obj, or def. */
static const char *
str_or(json_t *obj, const char *name, const char *def)
{
	json_t	   *m = json_object_get(obj, name);

	return json_is_string(m) ? json_string_value(m) : def;
}

/* An answer {"ok":false,...}: report it; its outcome. */
static bcd_rc
report_refusal(const char *cmd, json_t *answer)
{
	return refuse(cmd, str_or(answer, "error", BC_SOCK_FAILED),
				  str_or(answer, "message", "(no message)"),
				  json_is_true(json_object_get(answer, "retryable")));
}

/* Parse --timeout; 0 on success. */
static int
parse_timeout(const char *s, double *out)
{
	char	   *end;

	*out = strtod(s, &end);
	return end == s || *end != '\0' || !isfinite(*out) || *out <= 0 || *out > 86400;
}

/* Print the usage of bcd credential to stream. */
static void
credential_usage(FILE *stream)
{
	fputs("usage: bcd credential --session S [--context C] --dir DIR [--socket PATH]\n"
		  "                      [--timeout SECONDS] [--json]\n"
		  "\n"
		  "Asks the local bcd for a session credential.  bcd writes the key and its\n"
		  "certificate chain (0600) into DIR, which must be under the runtime directory\n"
		  "($XDG_RUNTIME_DIR or /run/user/UID), owned by you and writable by nobody\n"
		  "else; this prints their paths and the notAfter, one per line (--json: bcd's\n"
		  "answer).  The socket: --socket, $BCD_SOCKET, or $XDG_RUNTIME_DIR/bcd/bcd.sock.\n"
		  "On a refusal prints \"bcd credential: CODE: MESSAGE\" on stderr.\n"
		  "\n"
		  "Exit status: 0 delivered; 64 usage; 65 bad-request, bad-dir; 69 no-daemon,\n"
		  "no-answer; 70 failed; 75 busy, unavailable, timeout (try again later);\n"
		  "77 no-node-credential, refused, forbidden, untrusted-socket (the socket's\n"
		  "directory or the process listening on it is not yours).  Default --timeout 120.\n",
		  stream);
}

/* bcd credential ... */
bcd_rc
bcd_cmd_credential(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"session", required_argument, NULL, 's'},
		{"context", required_argument, NULL, 'c'},
		{"dir", required_argument, NULL, 'd'},
		{"socket", required_argument, NULL, 'S'},
		{BC_SOCK_TIMEOUT, required_argument, NULL, 't'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	const char *session = NULL;
	const char *context = NULL;
	const char *dir = NULL;
	const char *socket_opt = NULL;
	double		timeout = DEFAULT_TIMEOUT;
	int			as_json = 0;
	char		cwd[4096];
	char		abs_dir[BCD_DIR_MAX + 1];
	char		err[512];
	char	   *path = NULL;
	json_t	   *req = NULL;
	json_t	   *answer = NULL;
	char	   *text;
	int			c;
	bcd_rc		rc;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1)
	{
		switch (c)
		{
			case 's': session = optarg; break;
			case 'c': context = optarg; break;
			case 'd': dir = optarg; break;
			case 'S': socket_opt = optarg; break;
			case 'j': as_json = 1; break;
			case 't':
				if (parse_timeout(optarg, &timeout))
				{
					fputs("bcd credential: --timeout must be seconds in (0, 86400]\n", stderr);
					return BCD_RC_USAGE;
				}
				break;
			case 'h':
				credential_usage(stdout);
				return BCD_RC_OK;
			default:
				credential_usage(stderr);
				return BCD_RC_USAGE;
		}
	}
	if (optind != argc || session == NULL || dir == NULL)
	{
		credential_usage(stderr);
		return BCD_RC_USAGE;
	}
	if (dir[0] != '/')
	{
		/* made absolute without resolving anything: bcd checks every component */
		if (getcwd(cwd, sizeof(cwd)) == NULL ||
			snprintf(abs_dir, sizeof(abs_dir), "%s/%s", cwd, dir) >= (int) sizeof(abs_dir))
		{
			fputs("bcd credential: cannot make --dir absolute\n", stderr);
			return BCD_RC_USAGE;
		}
		dir = abs_dir;
	}
	if (bcd_socket_client_path(socket_opt, &path, err, sizeof(err)) != BC_OK)
	{
		fprintf(stderr, "bcd credential: %s\n", err);
		return BCD_RC_USAGE;
	}
	req = json_pack("{s:s, s:s, s:s, s:s}", "op", BC_SOCK_OP_CREDENTIAL, "session", session,
					"context", context != NULL ? context : "", "dir", dir);
	rc = req == NULL ? refuse("credential", BC_SOCK_FAILED, "out of memory", 0) :
		exchange("credential", path, req, timeout, &answer);
	if (rc != BCD_RC_OK)
		goto out;
	if (!json_is_true(json_object_get(answer, "ok")))
		rc = report_refusal("credential", answer);
	else if (as_json)
	{
		text = json_dumps(answer, JSON_COMPACT);
		rc = text != NULL && printf("%s\n", text) > 0 && fflush(stdout) == 0 ?
			BCD_RC_OK : BCD_RC_SOFTWARE;
		free(text);
	}
	else
		rc = printf("%s\n%s\n%s\n", str_or(answer, "keyPath", "?"),
					str_or(answer, "certPath", "?"), str_or(answer, "notAfter", "?")) > 0 &&
			fflush(stdout) == 0 ? BCD_RC_OK : BCD_RC_SOFTWARE;
out:
	json_decref(answer);
	json_decref(req);
	free(path);
	return rc;
}

/* Print the usage of bcd status to stream. */
static void
status_usage(FILE *stream)
{
	fputs("usage: bcd status [--socket PATH] [--prometheus] [--timeout SECONDS]\n"
		  "\n"
		  "Prints the numbers of the local bcd as JSON: waiting (callers waiting for a\n"
		  "credential: the queue depth), queued and inFlight (provisionings), served,\n"
		  "refused, busy, provisionings, answers by code, and the node credential.\n"
		  "--prometheus prints the same as Prometheus text.  Exit status as for\n"
		  "bcd credential (69: no daemon answers).\n", stream);
}

/* bcd status ... */
bcd_rc
bcd_cmd_status(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"socket", required_argument, NULL, 'S'},
		{"prometheus", no_argument, NULL, 'p'},
		{BC_SOCK_TIMEOUT, required_argument, NULL, 't'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	const char *socket_opt = NULL;
	double		timeout = 10;
	int			prometheus = 0;
	char		err[512];
	char	   *path = NULL;
	json_t	   *req = NULL;
	json_t	   *answer = NULL;
	char	   *text = NULL;
	int			c;
	bcd_rc		rc;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1)
	{
		switch (c)
		{
			case 'S': socket_opt = optarg; break;
			case 'p': prometheus = 1; break;
			case 't':
				if (parse_timeout(optarg, &timeout))
				{
					fputs("bcd status: --timeout must be seconds in (0, 86400]\n", stderr);
					return BCD_RC_USAGE;
				}
				break;
			case 'h':
				status_usage(stdout);
				return BCD_RC_OK;
			default:
				status_usage(stderr);
				return BCD_RC_USAGE;
		}
	}
	if (optind != argc)
	{
		status_usage(stderr);
		return BCD_RC_USAGE;
	}
	if (bcd_socket_client_path(socket_opt, &path, err, sizeof(err)) != BC_OK)
	{
		fprintf(stderr, "bcd status: %s\n", err);
		return BCD_RC_USAGE;
	}
	req = json_pack("{s:s}", "op", prometheus ? BC_SOCK_OP_METRICS : BC_SOCK_OP_STATUS);
	rc = req == NULL ? refuse("status", BC_SOCK_FAILED, "out of memory", 0) :
		exchange("status", path, req, timeout, &answer);
	if (rc != BCD_RC_OK)
		goto out;
	if (!json_is_true(json_object_get(answer, "ok")))
		rc = report_refusal("status", answer);
	else if (prometheus)
		rc = fputs(str_or(answer, "metrics", ""), stdout) >= 0 && fflush(stdout) == 0 ?
			BCD_RC_OK : BCD_RC_SOFTWARE;
	else
	{
		text = json_dumps(answer, JSON_COMPACT);
		rc = text != NULL && printf("%s\n", text) > 0 && fflush(stdout) == 0 ? BCD_RC_OK : BCD_RC_SOFTWARE;
	}
out:
	free(text);
	json_decref(answer);
	json_decref(req);
	free(path);
	return rc;
}
