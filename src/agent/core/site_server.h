/*
 * site_server.h: the site agent's TLS server for PXE-booted ramdisks, what
 * `bcd serve-discovery` runs (site_server.c has its bounds and deadlines;
 * core/discovery_assertion.h the protocol).
 */
#ifndef BCD_SITE_SERVER_H
#define BCD_SITE_SERVER_H

#include "core/outcome.h"

/* Default bounds of the connections served at once. */
#define BCD_SITE_MAX_CONNECTIONS 64
#define BCD_SITE_PER_SOURCE 4

/* What the server is given (bcd serve-discovery's options). */
typedef struct bcd_site_server_opts
{
	const char *state_dir;		/* the site agent's bcd run state directory (read only) */
	const char *service_keys;	/* the pinned keys of the JoinService */
	const char *gateway;		/* https:// URL */
	const char *gateway_ca;
	const char *listen;			/* HOST:PORT, [v6]:PORT */
	long		ttl;			/* seconds of each assertion */
	int			max_conns;		/* connections served at once (three quarters of them,
								 * at most, without their request line yet) */
	int			per_source;		/* of them from one source address */
} bcd_site_server_opts;

/* Serve until SIGTERM or SIGINT (BCD_RC_OK); BCD_RC_FAILED when it cannot start. */
bcd_rc		bcd_site_server_run(const bcd_site_server_opts *o);

#endif							/* BCD_SITE_SERVER_H */
