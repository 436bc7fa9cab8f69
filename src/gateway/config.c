/* config.c: bc-gateway's command line: parsing, defaults and --help. */
#include "config.h"
#include "log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static const char usage_text[] =
"Usage: bc-gateway --tls-cert FILE --tls-key FILE [options]\n"
"\n"
"HTTPS relay in front of the bc_join database: POST /v1/join, /v1/renew,\n"
"/v1/session, /v1/commands, /v1/commands/complete and /v1/site-epoch become SELECT\n"
"<function>($1::jsonb) through libpq; the function's\n"
"jsonb result is the response body.  GET /v1/audit-anchor relays\n"
"bc_join.audit_anchor() and GET /v1/service-keys bc_join.signed_service_keys()\n"
"(cached); "
"GET /healthz and GET /metrics are served on the same listener; the\n"
"database's own numbers (bc_join.metrics()) only on --metrics-listen.\n"
"\n"
"Listener and TLS (TLS 1.2 or newer only):\n"
"  --listen HOST:PORT          address to listen on (default 127.0.0.1:8443;\n"
"                              IPv6 as [::1]:8443)\n"
"  --tls-cert FILE             PEM certificate chain, leaf first (required)\n"
"  --tls-key FILE              PEM private key of the certificate (required)\n"
"\n"
"Metrics listener (see docs/gateway.md, \"Metrics\"):\n"
"  --metrics-listen HOST:PORT  a second TLS listener (same certificate) serving\n"
"                              only GET /metrics and GET /healthz; its /metrics\n"
"                              is the gateway's followed by bc_join.metrics()\n"
"                              (tenants, refusal reasons: not for the public\n"
"                              listener).  Default: none\n"
"  --metrics-max-age DUR       bc_join.metrics() is answered from a copy at\n"
"                              most this old, one fetch at a time (default 15s,\n"
"                              [100ms, 1h]); while fetches fail the last good\n"
"                              copy is served up to 5 times as old, then none\n"
"\n"
"Database:\n"
"  --db CONNINFO               libpq connection string (default: empty, i.e. the\n"
"                              PG* environment variables)\n"
"  --db-pool N                 connections at most (default 4)\n"
"  --db-queue N                requests waiting for a connection at most\n"
"                              (default 256); beyond: 503\n"
"  --db-wait-timeout DUR       longest wait for a connection, and the connect\n"
"                              timeout (default 5s); beyond: 503\n"
"  --db-statement-timeout DUR  statement_timeout set on every connection\n"
"                              (default 10s); the gateway gives up 2 s later\n"
"  --db-no-prepare             send every statement unprepared (for a pooler\n"
"                              in transaction mode); default: each statement\n"
"                              is prepared once per connection\n"
"  --retry-after SECONDS       Retry-After sent with 503 (default 5)\n"
"\n"
"Client timeouts:\n"
"  --io-timeout DUR            inactivity allowed while reading a request or\n"
"                              writing a response, TLS handshake included\n"
"                              (default 10s)\n"
"  --request-timeout DUR       a whole request (headers and body) must arrive\n"
"                              within this, however slowly it trickles\n"
"                              (default 30s)\n"
"  --max-connections N         client connections open at once (default 4096,\n"
"                              never more than RLIMIT_NOFILE minus --db-pool\n"
"                              minus 32); at the limit new connections wait in\n"
"                              the listen backlog until one closes\n"
"\n"
"Rate limiting (per client address, token bucket, POST /v1/* only):\n"
"  --rate-limit N[/s]          requests per second per client (default 0: off)\n"
"  --rate-burst B              bucket size (default: max(1, N))\n"
"  --rate-table N              client addresses tracked, least recently seen\n"
"                              evicted first (default 65536)\n"
"  --trusted-proxy CIDR        repeatable; only when the TCP peer is inside one\n"
"                              of these is X-Forwarded-For read: walked right to\n"
"                              left, skipping trusted proxies, the first other\n"
"                              address is the client\n"
"\n"
"CRL (GET /v1/crl, cached; see docs/gateway.md):\n"
"  --crl-max-size BYTES        a CRL larger than this is refused (default\n"
"                              8388608, 8 MiB)\n"
"\n"
"OCSP (POST /v1/ocsp, GET /v1/ocsp/...; see docs/gateway.md, \"OCSP\"):\n"
"  --ocsp-cache-entries N      CertIDs whose answer is kept at most (default\n"
"                              10000; 0: no cache, every request calls the\n"
"                              database); least recently used evicted first\n"
"  --ocsp-cache-bytes BYTES    bytes of kept answers at most (default 16777216,\n"
"                              16 MiB)\n"
"\n"
"Request bodies (see docs/gateway.md, \"The large-body budget\"):\n"
"  --max-large-body-bytes BYTES  request bytes beyond 80 KiB per connection held\n"
"                              at once, all connections together (default\n"
"                              67108864, 64 MiB); a connection that would go\n"
"                              over is closed\n"
"\n"
"Service keys (GET /v1/service-keys, cached; see docs/gateway.md):\n"
"  --service-keys-max-age S    answer from a copy at most S seconds old, fetched\n"
"                              once for all requests (default 10, [1, 3600]): a\n"
"                              key rotation is served within S seconds\n"
"\n"
"Process:\n"
"  --shutdown-timeout DUR      on SIGTERM/SIGINT stop accepting and let\n"
"                              in-flight requests finish for at most this\n"
"                              long (default 10s), then exit 0\n"
"  --log-level LEVEL           debug, info, warn or error (default info);\n"
"                              logs are JSON lines on stderr\n"
"  -h, --help                  this text\n"
"\n"
"DUR is a number of seconds, or a number with the suffix ms or s (\"250ms\").\n";

/* Print the usage text to stream f. */
void
gw_config_usage(void *f)
{
	fputs(usage_text, (FILE *) f);
}

/* Parse a duration ("10", "10s", "250ms", "1.5s") into milliseconds; -1 on error. */
static long
parse_duration_ms(const char *s)
{
	char	   *end = NULL;
	double		v;

	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || end == s || !isfinite(v) || v < 0)
		return -1;
	if (strcmp(end, "ms") == 0)
		;
	else if (*end == '\0' || strcmp(end, "s") == 0)
		v *= 1000.0;
	else
		return -1;
	if (v > 86400000.0)
		return -1;
	return (long) v;
}

/* Parse a positive integer within [lo, hi]; -1 on error. */
static long
parse_int(const char *s, long lo, long hi)
{
	char	   *end = NULL;
	long		v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
		return -1;
	return v;
}

/* Parse "HOST:PORT" or "[V6]:PORT" into host (hsize bytes) and *portp; 0 on success. */
static int
parse_host_port(const char *s, char *hbuf, size_t hsize, uint16_t *portp)
{
	const char *colon;
	const char *host;
	size_t		hlen;
	long		port;

	if (s[0] == '[')
	{
		const char *close = strchr(s, ']');

		if (close == NULL || close[1] != ':')
			return -1;
		host = s + 1;
		hlen = (size_t) (close - host);
		colon = close + 1;
	}
	else
	{
		colon = strrchr(s, ':');
		if (colon == NULL)
			return -1;
		host = s;
		hlen = (size_t) (colon - s);
	}
	if (hlen == 0 || hlen >= hsize)
		return -1;
	port = parse_int(colon + 1, 1, 65535);
	if (port < 0)
		return -1;
	memcpy(hbuf, host, hlen);
	hbuf[hlen] = '\0';
	*portp = (uint16_t) port;
	return 0;
}

/* Parse "10.0.0.0/8", "::1" or "2001:db8::/32" into out; 0 on success. */
int
gw_cidr_parse(const char *s, struct gw_cidr *out)
{
	char		buf[64];
	char	   *slash;
	int			max;

	if (strlen(s) >= sizeof(buf))
		return -1;
	strcpy(buf, s);
	slash = strchr(buf, '/');
	if (slash != NULL)
		*slash = '\0';
	memset(out, 0, sizeof(*out));
	if (inet_pton(AF_INET, buf, out->addr) == 1)
	{
		out->family = AF_INET;
		max = 32;
	}
	else if (inet_pton(AF_INET6, buf, out->addr) == 1)
	{
		out->family = AF_INET6;
		max = 128;
	}
	else
		return -1;
	if (slash == NULL)
		out->prefix = max;
	else
	{
		long		p = parse_int(slash + 1, 0, max);

		if (p < 0)
			return -1;
		out->prefix = (int) p;
	}
	return 0;
}

/* Parse "N" or "N/s" as a rate per second; -1 on error. */
static double
parse_rate(const char *s)
{
	char	   *end = NULL;
	double		v;

	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || end == s || !isfinite(v) || v < 0 || v > 1e6)
		return -1;
	if (*end != '\0' && strcmp(end, "/s") != 0)
		return -1;
	return v;
}

/* Set every option to its default. */
static void
set_defaults(struct gw_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	strcpy(cfg->listen_host, "127.0.0.1");
	cfg->listen_port = 8443;
	cfg->db_conninfo = "";
	cfg->db_pool = 4;
	cfg->db_queue = 256;
	cfg->db_wait_ms = 5000;
	cfg->db_statement_ms = 10000;
	cfg->db_prepare = 1;
	cfg->retry_after_s = 5;
	cfg->io_timeout_ms = 10000;
	cfg->request_timeout_ms = 30000;
	cfg->max_connections = 4096;
	cfg->rate = 0;
	cfg->burst = -1;
	cfg->rate_table = 65536;
	cfg->shutdown_ms = 10000;
	cfg->crl_max_size = 8 * 1024 * 1024;
	cfg->large_body_budget = 64 * 1024 * 1024;
	cfg->service_keys_max_age_s = 10;
	cfg->metrics_max_age_ms = 15000;
	cfg->ocsp_cache_entries = 10000;
	cfg->ocsp_cache_bytes = 16 * 1024 * 1024;
	cfg->log_level = GW_LOG_INFO;
}

enum
{
	OPT_LISTEN = 256, OPT_CERT, OPT_KEY, OPT_DB, OPT_POOL, OPT_QUEUE, OPT_WAIT,
	OPT_STMT, OPT_RETRY, OPT_IO, OPT_REQ, OPT_RATE, OPT_BURST, OPT_TABLE,
	OPT_PROXY, OPT_SHUTDOWN, OPT_LOGLEVEL, OPT_MAXCONN, OPT_CRLMAX, OPT_NOPREP,
	OPT_KEYSAGE,
	OPT_LARGEBODY, OPT_OCSPENTRIES, OPT_OCSPBYTES, OPT_METRICSLISTEN, OPT_METRICSAGE
};

static const struct option options[] = {
	{"listen", required_argument, NULL, OPT_LISTEN},
	{"tls-cert", required_argument, NULL, OPT_CERT},
	{"tls-key", required_argument, NULL, OPT_KEY},
	{"metrics-listen", required_argument, NULL, OPT_METRICSLISTEN},
	{"metrics-max-age", required_argument, NULL, OPT_METRICSAGE},
	{"db", required_argument, NULL, OPT_DB},
	{"db-pool", required_argument, NULL, OPT_POOL},
	{"db-queue", required_argument, NULL, OPT_QUEUE},
	{"db-wait-timeout", required_argument, NULL, OPT_WAIT},
	{"db-statement-timeout", required_argument, NULL, OPT_STMT},
	{"db-no-prepare", no_argument, NULL, OPT_NOPREP},
	{"retry-after", required_argument, NULL, OPT_RETRY},
	{"io-timeout", required_argument, NULL, OPT_IO},
	{"request-timeout", required_argument, NULL, OPT_REQ},
	{"max-connections", required_argument, NULL, OPT_MAXCONN},
	{"rate-limit", required_argument, NULL, OPT_RATE},
	{"rate-burst", required_argument, NULL, OPT_BURST},
	{"rate-table", required_argument, NULL, OPT_TABLE},
	{"trusted-proxy", required_argument, NULL, OPT_PROXY},
	{"crl-max-size", required_argument, NULL, OPT_CRLMAX},
	{"service-keys-max-age", required_argument, NULL, OPT_KEYSAGE},
	{"max-large-body-bytes", required_argument, NULL, OPT_LARGEBODY},
	{"ocsp-cache-entries", required_argument, NULL, OPT_OCSPENTRIES},
	{"ocsp-cache-bytes", required_argument, NULL, OPT_OCSPBYTES},
	{"shutdown-timeout", required_argument, NULL, OPT_SHUTDOWN},
	{"log-level", required_argument, NULL, OPT_LOGLEVEL},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0}
};

/* Apply one option; 0 on success, -1 with a message on stderr otherwise. */
static int
apply_option(struct gw_config *cfg, int c, const char *arg)
{
	long		v;

	switch (c)
	{
		case OPT_LISTEN:
			if (parse_host_port(arg, cfg->listen_host, sizeof(cfg->listen_host),
								&cfg->listen_port) != 0)
				goto bad;
			return 0;
		case OPT_METRICSLISTEN:
			if (parse_host_port(arg, cfg->metrics_host, sizeof(cfg->metrics_host),
								&cfg->metrics_port) != 0)
				goto bad;
			return 0;
		case OPT_METRICSAGE:
			v = parse_duration_ms(arg);
			if (v < 100 || v > 3600 * 1000L)
				goto bad;
			cfg->metrics_max_age_ms = v;
			return 0;
		case OPT_CERT:
			cfg->tls_cert = arg;
			return 0;
		case OPT_KEY:
			cfg->tls_key = arg;
			return 0;
		case OPT_DB:
			cfg->db_conninfo = arg;
			return 0;
		case OPT_POOL:
			if ((v = parse_int(arg, 1, 1024)) < 0)
				goto bad;
			cfg->db_pool = (int) v;
			return 0;
		case OPT_QUEUE:
			if ((v = parse_int(arg, 0, 1000000)) < 0)
				goto bad;
			cfg->db_queue = (int) v;
			return 0;
		case OPT_WAIT:
			if ((cfg->db_wait_ms = parse_duration_ms(arg)) <= 0)
				goto bad;
			return 0;
		case OPT_STMT:
			if ((cfg->db_statement_ms = parse_duration_ms(arg)) <= 0)
				goto bad;
			return 0;
		case OPT_NOPREP:
			cfg->db_prepare = 0;
			return 0;
		case OPT_RETRY:
			if ((v = parse_int(arg, 1, 86400)) < 0)
				goto bad;
			cfg->retry_after_s = (int) v;
			return 0;
		case OPT_IO:
			if ((cfg->io_timeout_ms = parse_duration_ms(arg)) <= 0)
				goto bad;
			return 0;
		case OPT_REQ:
			if ((cfg->request_timeout_ms = parse_duration_ms(arg)) <= 0)
				goto bad;
			return 0;
		case OPT_MAXCONN:
			if ((v = parse_int(arg, 1, 1000000)) < 0)
				goto bad;
			cfg->max_connections = (int) v;
			cfg->max_connections_set = 1;
			return 0;
		case OPT_RATE:
			if ((cfg->rate = parse_rate(arg)) < 0)
				goto bad;
			return 0;
		case OPT_BURST:
			if ((v = parse_int(arg, 1, 1000000)) < 0)
				goto bad;
			cfg->burst = (double) v;
			return 0;
		case OPT_TABLE:
			if ((v = parse_int(arg, 16, 10000000)) < 0)
				goto bad;
			cfg->rate_table = (int) v;
			return 0;
		case OPT_CRLMAX:
			if ((v = parse_int(arg, 64, 1024L * 1024 * 1024)) < 0)
				goto bad;
			cfg->crl_max_size = (size_t) v;
			return 0;
		case OPT_LARGEBODY:
			if ((v = parse_int(arg, GW_MAX_BODY, 64L * 1024 * 1024 * 1024)) < 0)
				goto bad;
			cfg->large_body_budget = (size_t) v;
			return 0;
		case OPT_OCSPENTRIES:
			if ((v = parse_int(arg, 0, 10000000)) < 0)
				goto bad;
			cfg->ocsp_cache_entries = (int) v;
			return 0;
		case OPT_OCSPBYTES:
			if ((v = parse_int(arg, 4096, 64L * 1024 * 1024 * 1024)) < 0)
				goto bad;
			cfg->ocsp_cache_bytes = (size_t) v;
			return 0;
		case OPT_KEYSAGE:
			if ((v = parse_int(arg, 1, 3600)) < 0)
				goto bad;
			cfg->service_keys_max_age_s = (int) v;
			return 0;
		case OPT_PROXY:
			if (cfg->nproxies >= GW_MAX_PROXIES ||
				gw_cidr_parse(arg, &cfg->proxies[cfg->nproxies]) != 0)
				goto bad;
			cfg->nproxies++;
			return 0;
		case OPT_SHUTDOWN:
			if ((cfg->shutdown_ms = parse_duration_ms(arg)) < 0)
				goto bad;
			return 0;
		case OPT_LOGLEVEL:
			if ((cfg->log_level = gw_log_parse_level(arg)) < 0)
				goto bad;
			return 0;
		default:
			return -1;
	}
bad:
	for (const struct option *o = options; o->name != NULL; o++)
		if (o->val == c)
			fprintf(stderr, "bc-gateway: invalid value for --%s: %s\n", o->name, arg);
	return -1;
}

/* Parse argv into cfg; 0 to run, 1 when --help was printed, -1 on a usage error. */
int
gw_config_parse(struct gw_config *cfg, int argc, char **argv)
{
	int			c;

	set_defaults(cfg);
	opterr = 1;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1)
	{
		if (c == 'h')
		{
			gw_config_usage(stdout);
			return 1;
		}
		if (c == '?' || apply_option(cfg, c, optarg) != 0)
			goto usage;
	}
	if (optind != argc)
	{
		fprintf(stderr, "bc-gateway: unexpected argument %s\n", argv[optind]);
		goto usage;
	}
	if (cfg->tls_cert == NULL || cfg->tls_key == NULL)
	{
		fprintf(stderr, "bc-gateway: --tls-cert and --tls-key are required\n");
		goto usage;
	}
	if (cfg->burst < 0)
		cfg->burst = cfg->rate < 1 ? 1 : ceil(cfg->rate);
	return 0;
usage:
	fprintf(stderr, "Try 'bc-gateway --help'.\n");
	return -1;
}
