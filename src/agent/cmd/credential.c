/*
 * credential.c: `bcd credential`, what a hook runs to get a session
 * credential: bcd writes the key and chain (with --ssh, the SSH user
 * certificate too) into --dir and this prints their paths (core/client.c
 * talks to the socket and reports refusals).
 */
/* Default --timeout, in seconds. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "cmd/cmd.h"
#include "core/client.h"
#include "core/delivery.h"
#include "core/json.h"
#include "core/local_socket.h"

/* Default --timeout, in seconds. */
#define DEFAULT_TIMEOUT 120.0

/* Print the usage of bcd credential to stream. */
static void
credential_usage(FILE *stream)
{
	fputs("usage: bcd credential --session S [--context C] --dir DIR [--socket PATH]\n"
		  "                      [--timeout SECONDS] [--json] [--crl] [--ssh]\n"
		  "\n"
		  "Asks the local bcd for a session credential.  bcd writes the key and its\n"
		  "certificate chain (0600) into DIR, which must be under the runtime directory\n"
		  "($XDG_RUNTIME_DIR or /run/user/UID), owned by you and writable by nobody\n"
		  "else; this prints their paths and the notAfter, one per line (--json: bcd's\n"
		  "answer).  --crl: bcd also writes DIR/crl.pem, the node CA's CRL as it last\n"
		  "verified it, and its path is printed after the notAfter (bcd run needs\n"
		  "--hook-crl or the Workload API; unavailable until it holds one).\n"
		  "--ssh: the credential also carries an OpenSSH user certificate of the\n"
		  "session key, which bcd writes as DIR/S[@C].key-cert.pub (0644; ssh -i\n"
		  "DIR/S.key finds it), and its path is printed last; refused\n"
		  "no-ssh-certificate when the service issued none (the pool has no SSH user\n"
		  "rule, or allows none of its names), or when this hook joined a provisioning\n"
		  "of the session already running without it (ask again once it ended).\n"
		  "The socket: --socket, $BCD_SOCKET, or $XDG_RUNTIME_DIR/bcd/bcd.sock.\n"
		  "On a refusal prints \"bcd credential: CODE: MESSAGE\" on stderr.\n"
		  "\n"
		  "Exit status: 0 delivered; 64 usage; 65 bad-request, bad-dir; 69 no-daemon,\n"
		  "no-answer; 70 failed; 75 busy, unavailable, timeout (try again later);\n"
		  "77 no-node-credential, refused, forbidden, untrusted-socket (the socket's\n"
		  "directory or the process listening on it is not yours), no-ssh-certificate.\n"
		  "Default --timeout 120.\n",
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
		{"crl", no_argument, NULL, 'r'},
		{"ssh", no_argument, NULL, 'x'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	const char *session = NULL;
	const char *context = NULL;
	const char *dir = NULL;
	const char *socket_opt = NULL;
	double		timeout = DEFAULT_TIMEOUT;
	int			as_json = 0;
	int			want_crl = 0;
	int			want_ssh = 0;
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
			case 'r': want_crl = 1; break;
			case 'x': want_ssh = 1; break;
			case 't':
				if (bcd_client_parse_timeout(optarg, &timeout))
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
	if (req != NULL && ((want_crl && json_object_set_new(req, "crl", json_true()) != 0) ||
						(want_ssh && json_object_set_new(req, "ssh", json_true()) != 0)))
	{
		json_decref(req);
		req = NULL;
	}
	rc = req == NULL ? bcd_client_refuse("credential", BC_SOCK_FAILED, "out of memory", 0) :
		bcd_client_exchange("credential", path, req, timeout, &answer);
	if (rc != BCD_RC_OK)
		goto out;
	if (!json_is_true(json_object_get(answer, "ok")))
		rc = bcd_client_report("credential", answer);
	else if (as_json)
	{
		text = json_dumps(answer, JSON_COMPACT);
		rc = text != NULL && printf("%s\n", text) > 0 && fflush(stdout) == 0 ?
			BCD_RC_OK : BCD_RC_SOFTWARE;
		free(text);
	}
	else
		rc = printf("%s\n%s\n%s\n%s%s%s%s", bcd_json_str(answer, "keyPath", "?"),
					bcd_json_str(answer, "certPath", "?"), bcd_json_str(answer, "notAfter", "?"),
					want_crl ? bcd_json_str(answer, "crlPath", "?") : "",
					want_crl ? "\n" : "",
					want_ssh ? bcd_json_str(answer, "sshCertPath", "?") : "",
					want_ssh ? "\n" : "") > 0 &&
			fflush(stdout) == 0 ? BCD_RC_OK : BCD_RC_SOFTWARE;
out:
	json_decref(answer);
	json_decref(req);
	free(path);
	return rc;
}

