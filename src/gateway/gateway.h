/* gateway.h: the state shared by the gateway's parts. */
#ifndef BC_GATEWAY_GATEWAY_H
#define BC_GATEWAY_GATEWAY_H

#include <openssl/ssl.h>

#include "config.h"
#include "metrics.h"
#include "routes.h"

struct event;
struct evconnlistener;
struct event_base;
struct evhttp;
struct evhttp_bound_socket;
struct gw_db_pool;
struct gw_doc_cache;
struct gw_ocsp_cache;
struct gw_ratelimit;

struct gateway
{
	struct gw_config cfg;
	struct event_base *base;
	struct evhttp *http;
	struct evhttp_bound_socket *bound;
	SSL_CTX    *ssl_ctx;
	struct gw_db_pool *pool;
	struct gw_doc_cache *docs[GW_ROUTES_MAX];	/* a document route's cache, by row (routes.c) */
	struct gw_ocsp_cache *ocsp;	/* POST /v1/ocsp, GET /v1/ocsp/...: the per-CertID cache (ocsp_cache.c) */
	struct gw_ratelimit *rl;
	struct gw_metrics metrics;

	int			shutting_down;
	unsigned	in_flight;		/* requests handed to us and not yet answered */
	unsigned	writing;		/* answers not yet fully written */
	unsigned	connections;	/* TLS connections open */
	size_t		large_body_used;	/* of --max-large-body-bytes, reserved (body_budget.h) */

	/* accepting (listener.c) */
	struct evconnlistener *listener;	/* the bound socket's; NULL once closed */
	struct event *accept_timer;			/* resumes after an accept() error */
	int			accept_paused;			/* 0, or 1 + the enum gw_pause */
	long		accept_backoff_ms;
	unsigned	max_connections;		/* --max-connections within RLIMIT_NOFILE */
	long long	nofile;					/* RLIMIT_NOFILE's soft limit at start */

	/* the metrics listener (--metrics-listen; #48): its own evhttp, table and cap */
	struct evhttp *mhttp;
	struct evhttp_bound_socket *mbound;
	struct evconnlistener *mlistener;	/* NULL once closed */
	struct event *maccept_timer;		/* resumes after an accept() error */
	int			maccept_paused;
	unsigned	mconnections;			/* its connections open (not in connections) */
	struct gw_doc_cache *service_metrics;	/* bc_join.metrics() (documents.c) */
};

/* Called when in_flight or writing drops: lets a shutdown finish (conn.c). */
void		gw_maybe_finish(struct gateway *gw);

#endif
