/*
 * status.c: `bcd status`: the local bcd's queue depth, in-flight count and
 * counters, as JSON or (--prometheus) Prometheus text.
 */
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

/* Print the usage of bcd status to stream. */
static void
status_usage(FILE *stream)
{
	fputs("usage: bcd status [--socket PATH] [--prometheus] [--timeout SECONDS]\n"
		  "\n"
		  "Prints the numbers of the local bcd as JSON: waiting (callers waiting for a\n"
		  "credential: the queue depth), queued and inFlight (provisionings), served,\n"
		  "refused, busy, provisionings, JWT-SVID fetches, answers by code, the node\n"
		  "credential, whether the node is quarantined or revoked (serial, reason, time)\n"
		  "and whether a verified CRL is held.\n"
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
				if (bcd_client_parse_timeout(optarg, &timeout))
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
	rc = req == NULL ? bcd_client_refuse("status", BC_SOCK_FAILED, "out of memory", 0) :
		bcd_client_exchange("status", path, req, timeout, &answer);
	if (rc != BCD_RC_OK)
		goto out;
	if (!json_is_true(json_object_get(answer, "ok")))
		rc = bcd_client_report("status", answer);
	else if (prometheus)
		rc = fputs(bcd_json_str(answer, "metrics", ""), stdout) >= 0 && fflush(stdout) == 0 ?
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
