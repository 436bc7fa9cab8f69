/*
 * ramdisk.c: `bcd ramdisk`, the agent of a PXE-booted ramdisk: no state
 * directory (a ramdisk has no disk to keep a key on), its node key in memory
 * only; it joins by the discovery attestor (its join token and the site
 * agent's assertion, asked of --site-agent), waits through an approval,
 * then serves its commands and renews in memory until it reboots or is
 * stopped.  The daemon is core/daemon.c with bcd_run_opts.memory_only.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bc_protocol.h"
#include "cmd/cmd.h"
#include "core/commands.h"
#include "core/daemon.h"
#include "core/join_request.h"

static void
ramdisk_usage(FILE *stream)
{
	fputs("usage: bcd ramdisk --gateway URL --gateway-ca FILE --service-keys FILE\n"
		  "                   --token-file FILE --site-agent HOST:PORT --mac MAC\n"
		  "                   [--command-handler PREFIX=EXECUTABLE]... [--command-interval S]\n"
		  "                   [--command-timeout S] [--claims JSON] [--hostname H]\n"
		  "                   [--max-retry-after S] [--renew-at F] [--once]\n"
		  "       bcd ramdisk ... --token-file FILE --attestor ID --producer PATH\n"
		  "                   [--producer-timeout S]\n"
		  "\n"
		  "The agent of a PXE-booted ramdisk (docs/agent.md, \"bcd ramdisk\"): makes\n"
		  "its node key in memory only (nothing is written to any disk), asks the\n"
		  "site agent for a discovery assertion of this MAC bound to its CSR, joins\n"
		  "by the discovery attestor (role ramdisk), waits while an operator\n"
		  "approves, then runs its commands and renews in memory until SIGTERM or\n"
		  "SIGINT (exit 0).  There is no local socket.\n"
		  "\n"
		  "  --gateway URL        the bc-gateway, https://HOST:PORT\n"
		  "  --gateway-ca FILE    PEM CA certificate(s) of the gateway's TLS\n"
		  "  --service-keys FILE  the JSON of bc_join.service_keys()\n"
		  "  --token-file FILE    the ramdisk's join token (role ramdisk)\n"
		  "  --token T            the token itself (visible in ps)\n"
		  "  --attestor ID        default discovery; a custom attestor admitting role\n"
		  "                       ramdisk with --producer PATH (its evidence from that\n"
		  "                       executable, as for bcd run --producer)\n"
		  "  --once               join (waiting through an approval), print the SPIFFE\n"
		  "                       ID and notAfter, one per line, and exit\n"
		  "Commands, claims, --max-retry-after and --renew-at as for bcd run.\n"
		  "\n", stream);
	bcd_producers_usage(stream, BCD_CMD_RAMDISK);
	fputs("\nExit status: 0 done (or stopped), 1 failure, 2 the service refused, 64 usage.\n",
		  stream);
}

static int
parse_number(const char *s, double lo, double hi, double *out)
{
	char	   *end;

	*out = strtod(s, &end);
	return end == s || *end != '\0' || !isfinite(*out) || *out < lo || *out > hi;
}

bcd_rc
bcd_cmd_ramdisk(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"gateway", required_argument, NULL, 'g'},
		{"gateway-ca", required_argument, NULL, 'C'},
		{"service-keys", required_argument, NULL, 's'},
		{"token", required_argument, NULL, 't'},
		{"token-file", required_argument, NULL, 'T'},
		{"claims", required_argument, NULL, 'c'},
		{"hostname", required_argument, NULL, 'H'},
		{"max-retry-after", required_argument, NULL, 'm'},
		{"renew-at", required_argument, NULL, 'R'},
		{"once", no_argument, NULL, 'o'},
		{"command-handler", required_argument, NULL, 'K'},
		{"command-interval", required_argument, NULL, 'I'},
		{"command-timeout", required_argument, NULL, 'W'},
		{"attestor", required_argument, NULL, 'a'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	bcd_run_opts o;
	const char *bad = NULL;
	json_t	   *claims;
	double		v;
	int			commands_opt = 0;
	int			attestor_set = 0;
	bcd_optparser parser;
	bcd_producer_setup setup;
	int			c;

	memset(&o, 0, sizeof(o));
	o.memory_only = 1;
	o.role = BC_ROLE_RAMDISK;
	o.attestor = bcd_producer_default_attestor(BCD_CMD_RAMDISK);	/* discovery */
	o.max_retry_after = 300;
	o.renew_at = 0.5;
	o.command_interval = 30;
	o.command_timeout = 300;
	if (bcd_optparser_init(&parser, longopts, BCD_CMD_RAMDISK) != 0)
	{
		fprintf(stderr, "bcd ramdisk: out of memory\n");
		return BCD_RC_FAILED;
	}
	while ((c = bcd_optparser_next(&parser, argc, argv, &bad)) != -1)
	{
		switch (c)
		{
			case 0: break;		/* a producer's option, in its own state */
			case 'g': o.gateway = optarg; break;
			case 'C': o.gateway_ca = optarg; break;
			case 's': o.service_keys = optarg; break;
			case 't': o.token = optarg; break;
			case 'T': o.token_file = optarg; break;
			case 'a': o.attestor = optarg; attestor_set = 1; break;
			case 'c': o.claims = optarg; break;
			case 'H': o.hostname = optarg; break;
			case 'o': o.once = 1; break;
			case 'm':
				if (parse_number(optarg, 1, 86400, &v))
					bad = "--max-retry-after must be a number of seconds in [1, 86400]";
				o.max_retry_after = (long) v;
				break;
			case 'R':
				if (parse_number(optarg, 0.01, 0.99, &v))
					bad = "--renew-at must be a fraction in [0.01, 0.99]";
				o.renew_at = v;
				break;
			case 'K':
				{
					const char *why = bcd_commands_add_handler(&o, optarg);

					if (why != NULL && bad == NULL)
						bad = why;
					commands_opt = 1;
				}
				break;
			case 'I':
				if (parse_number(optarg, 1, 3600, &v))
					bad = "--command-interval must be a number of seconds in [1, 3600]";
				o.command_interval = v;
				commands_opt = 1;
				break;
			case 'W':
				if (parse_number(optarg, 1, 3600, &v))
					bad = "--command-timeout must be a number of seconds in [1, 3600]";
				o.command_timeout = v;
				commands_opt = 1;
				break;
			case 'h':
				bcd_optparser_free(&parser);
				ramdisk_usage(stdout);
				return BCD_RC_OK;
			default:
				bcd_optparser_free(&parser);
				ramdisk_usage(stderr);
				return BCD_RC_USAGE;
		}
	}
	setup = (bcd_producer_setup) {
		.command = "ramdisk",.attestor = o.attestor,.attestor_set = attestor_set,
		.role = o.role,.state_dir = NULL,.has_token = o.token != NULL || o.token_file != NULL
	};
	if (bad != NULL)
		;
	else if (optind != argc || o.gateway == NULL || o.gateway_ca == NULL || o.service_keys == NULL)
		bad = "--gateway, --gateway-ca and --service-keys are required";
	else if (o.token != NULL && o.token_file != NULL)
		bad = "--token and --token-file exclude each other";
	else if (strncmp(o.gateway, "https://", 8) != 0)
		bad = "--gateway must be an https:// URL";
	else
		o.producer = bcd_optparser_finish(&parser, &setup, &bad);
	if (bad != NULL)
		;
	else if (commands_opt && o.once)
		bad = "--command-* serve the daemon, not --once";
	else if (o.claims != NULL)
	{
		claims = bcd_build_claims(o.claims, NULL);
		if (claims == NULL)
			bad = "--claims must be a JSON object";
		json_decref(claims);
	}
	bcd_optparser_free(&parser);
	if (bad != NULL)
	{
		fprintf(stderr, "bcd ramdisk: %s\n", bad);
		return BCD_RC_USAGE;
	}
	return bcd_daemon_run(&o);
}
