/*
 * serve_discovery.c: `bcd serve-discovery`, the site agent's endpoint on the
 * provisioning network for PXE-booted ramdisks (bcd ramdisk): its command
 * line.  The server itself, its bounds and its deadlines are
 * core/site_server.c's; core/discovery_assertion.h has the protocol.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cmd.h"
#include "core/site_server.h"

/* bcd serve-discovery --help, on stream. */
static void
serve_usage(FILE *stream)
{
	fputs("usage: bcd serve-discovery --state-dir DIR --service-keys FILE --gateway URL\n"
		  "                           --gateway-ca FILE --listen HOST:PORT [--ttl SECONDS]\n"
		  "                           [--max-connections N] [--per-source N]\n"
		  "\n"
		  "The site agent's endpoint for PXE-booted ramdisks (docs/agent.md, \"bcd\n"
		  "serve-discovery\"): TLS with the node certificate in DIR; a ramdisk sends\n"
		  "one line {\"csr\":\"<base64url DER>\",\"mac\":\"aa:bb:cc:dd:ee:ff\"} and gets\n"
		  "{\"assertion\":\"<JWS>\"}, signed with the node key for the site's current\n"
		  "epoch (asked of the service through the gateway), or {\"error\":WORD}.\n"
		  "  --state-dir DIR   the site agent's bcd run state directory (read only)\n"
		  "  --listen H:P      the address to listen on ([v6]:port for IPv6)\n"
		  "  --ttl S           lifetime of each assertion (default 600, [1, 3600])\n"
		  "  --max-connections N  connections served at once (default 64, [1, 1024])\n"
		  "  --per-source N    of them from one source address (default 4, [1, 1024])\n"
		  "Each connection must finish its TLS handshake within 3 s, send its line\n"
		  "within 3 s more, and is done within 10 s; one over --per-source is closed.\n"
		  "At most three quarters of the connections may be without their whole\n"
		  "line: beyond that, or with every slot taken, the one waiting longest is\n"
		  "closed to make room.\n"
		  "Runs until SIGTERM or SIGINT (exit 0).\n", stream);
}
/* Parse a bound in [1, 1024]; -1 otherwise. */
static int
parse_bound(const char *arg)
{
	char	   *end;
	long		v = strtol(arg, &end, 10);

	return end != arg && *end == '\0' && v >= 1 && v <= 1024 ? (int) v : -1;
}
/* bcd serve-discovery: its command line, then the site server. */
bcd_rc
bcd_cmd_serve_discovery(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"state-dir", required_argument, NULL, 'd'},
		{"service-keys", required_argument, NULL, 's'},
		{"gateway", required_argument, NULL, 'g'},
		{"gateway-ca", required_argument, NULL, 'C'},
		{"listen", required_argument, NULL, 'l'},
		{"ttl", required_argument, NULL, 't'},
		{"max-connections", required_argument, NULL, 'm'},
		{"per-source", required_argument, NULL, 'p'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	bcd_site_server_opts o;
	char	   *end;
	int			c;

	memset(&o, 0, sizeof(o));
	o.ttl = 600;
	o.max_conns = BCD_SITE_MAX_CONNECTIONS;
	o.per_source = BCD_SITE_PER_SOURCE;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1)
	{
		switch (c)
		{
			case 'd': o.state_dir = optarg; break;
			case 's': o.service_keys = optarg; break;
			case 'g': o.gateway = optarg; break;
			case 'C': o.gateway_ca = optarg; break;
			case 'l': o.listen = optarg; break;
			case 't':
				o.ttl = strtol(optarg, &end, 10);
				if (end == optarg || *end != '\0' || o.ttl < 1 || o.ttl > 3600)
				{
					fputs("bcd serve-discovery: --ttl must be seconds in [1, 3600]\n", stderr);
					return BCD_RC_USAGE;
				}
				break;
			case 'm':
			case 'p':
				if (parse_bound(optarg) < 0)
				{
					fprintf(stderr, "bcd serve-discovery: --%s must be in [1, 1024]\n",
							c == 'm' ? "max-connections" : "per-source");
					return BCD_RC_USAGE;
				}
				*(c == 'm' ? &o.max_conns : &o.per_source) = parse_bound(optarg);
				break;
			case 'h':
				serve_usage(stdout);
				return BCD_RC_OK;
			default:
				serve_usage(stderr);
				return BCD_RC_USAGE;
		}
	}
	if (optind != argc || o.state_dir == NULL || o.service_keys == NULL || o.gateway == NULL ||
		o.gateway_ca == NULL || o.listen == NULL)
	{
		serve_usage(stderr);
		return BCD_RC_USAGE;
	}
	if (strncmp(o.gateway, "https://", 8) != 0)
	{
		fputs("bcd serve-discovery: --gateway must be an https:// URL\n", stderr);
		return BCD_RC_USAGE;
	}
	return bcd_site_server_run(&o);
}
