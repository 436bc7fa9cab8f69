/* config.h: bc-gateway's command-line configuration. */
#ifndef BC_GATEWAY_CONFIG_H
#define BC_GATEWAY_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "bc_protocol.h"

/* A request body: the protocol's bound of a request (64 KiB). */
#define GW_MAX_BODY			BC_REQUEST_MAX
#define GW_MAX_HEADERS		16384
#define GW_MAX_PROXIES		64

/* An address range: family AF_INET or AF_INET6, address bytes, prefix length. */
struct gw_cidr
{
	int				family;
	unsigned char	addr[16];
	int				prefix;
};

struct gw_config
{
	char			listen_host[256];
	uint16_t		listen_port;
	const char	   *tls_cert;
	const char	   *tls_key;
	char			metrics_host[256];	/* --metrics-listen: the metrics listener (port 0: none) */
	uint16_t		metrics_port;
	long			metrics_max_age_ms;	/* bc_join.metrics() served from a copy this young */

	const char	   *db_conninfo;
	int				db_pool;
	int				db_queue;
	long			db_wait_ms;			/* queue wait bound; also the connect timeout */
	long			db_statement_ms;	/* statement_timeout on every connection */
	int				db_prepare;			/* prepare statements per connection */
	int				retry_after_s;		/* Retry-After on 503 */

	long			io_timeout_ms;		/* inactivity while reading or writing */
	long			request_timeout_ms; /* whole request (headers + body) must arrive within */

	double			rate;				/* tokens per second per client; 0 disables */
	double			burst;				/* bucket size */
	int				rate_table;			/* addresses tracked at most */
	struct gw_cidr	proxies[GW_MAX_PROXIES];
	int				nproxies;

	int				max_connections;	/* client connections at once */
	int				max_connections_set;	/* given on the command line */

	size_t			crl_max_size;		/* a larger CRL is refused */
	size_t			large_body_budget;	/* bodies over GW_MAX_BODY in flight at once, bytes */
	int				service_keys_max_age_s;	/* GET /v1/service-keys served from a copy this young */
	int				ocsp_cache_entries;	/* CertIDs kept at most; 0: no OCSP cache */
	size_t			ocsp_cache_bytes;	/* bytes of OCSP answers kept at most */

	long			shutdown_ms;
	int				log_level;
};

/* Parse argv into cfg; 0 to run, 1 when --help was printed, -1 on a usage error. */
int			gw_config_parse(struct gw_config *cfg, int argc, char **argv);

/* Print the usage text to stream f. */
void		gw_config_usage(void *f);

/* Parse "10.0.0.0/8", "::1" or "2001:db8::/32" into out; 0 on success. */
int			gw_cidr_parse(const char *s, struct gw_cidr *out);

#endif
