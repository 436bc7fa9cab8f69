/* gateway.h: the state shared by the gateway's parts. */
#ifndef BC_GATEWAY_GATEWAY_H
#define BC_GATEWAY_GATEWAY_H

#include <openssl/ssl.h>

#include "config.h"
#include "metrics.h"

struct event;
struct event_base;
struct evhttp;
struct evhttp_bound_socket;
struct gw_db_pool;
struct gw_ratelimit;

struct gateway
{
	struct gw_config cfg;
	struct event_base *base;
	struct evhttp *http;
	struct evhttp_bound_socket *bound;
	SSL_CTX    *ssl_ctx;
	struct gw_db_pool *pool;
	struct gw_ratelimit *rl;
	struct gw_metrics metrics;

	int			shutting_down;
	unsigned	in_flight;		/* requests handed to us and not yet answered */
	unsigned	writing;		/* answers not yet fully written */
	unsigned	connections;	/* TLS connections open */
};

/* Called when in_flight or writing drops: lets a shutdown finish. */
void		gw_maybe_finish(struct gateway *gw);

#endif
