/*
 * routes.h: the gateway's one route table: for each method and path, what
 * answers it, its endpoint name (the metric label and the log's endpoint),
 * whether it is rate limited and counted, and its Cache-Control.
 */
#ifndef BC_GATEWAY_ROUTES_H
#define BC_GATEWAY_ROUTES_H

#include <stddef.h>

struct gw_doc_spec;

/* What answers a route (http.c dispatches on it). */
enum gw_route_kind
{
	GW_ROUTE_HEALTH,			/* 200 when a database connection works or can be made */
	GW_ROUTE_METRICS,			/* the Prometheus text exposition */
	GW_ROUTE_RELAY,				/* the request body relayed to sql (relay.c) */
	GW_ROUTE_QUERY,				/* sql run with an empty parameter, its result relayed (relay.c) */
	GW_ROUTE_DOCUMENT,			/* doc, from its cache (doc_cache.c) */
	GW_ROUTE_OCSP,				/* an OCSP request: the body (POST) or the path's tail (GET; ocsp_route.c) */
	GW_ROUTE_SERVICE_METRICS	/* the metrics listener's: the gateway's exposition, then bc_join.metrics() */
};

/* limits */
#define GW_ROUTE_RATE_LIMITED	0x1 /* takes a token of the client's bucket (ratelimit.c) */
#define GW_ROUTE_OBSERVED		0x2 /* counted in bc_gateway_requests_total, logged at info */
#define GW_ROUTE_TAIL			0x4 /* the path is the row's, '/' and a non-empty tail (GET /v1/ocsp/<request>) */

struct gw_route
{
	const char *method;			/* "GET" or "POST" */
	const char *path;
	const char *endpoint;		/* the metric label and the log's endpoint */
	enum gw_route_kind kind;
	const char *sql;			/* RELAY, QUERY: the statement (column 0 relayed, 1 its status) */
	const struct gw_doc_spec *doc;	/* DOCUMENT: the cached document (documents.c) */
	unsigned	limits;			/* GW_ROUTE_RATE_LIMITED | GW_ROUTE_OBSERVED | GW_ROUTE_TAIL */
	const char *cache_control;	/* of every answer once admitted; NULL: no-store (a document sets its own) */
	size_t		max_body;		/* RELAY: the body's bound in bytes; 0: GW_MAX_BODY (64 KiB) */
};

/* Rows at most; the endpoints of the metrics are the rows, then "other". */
#define GW_ROUTES_MAX 32

/* The endpoint of a request no row answers (unknown path). */
#define GW_ENDPOINT_OTHER GW_ROUTES_MAX

/* The table (routes.c) and its number of rows. */
extern const struct gw_route gw_routes[];
extern const size_t gw_nroutes;

/*
 * The metrics listener's table (--metrics-listen): GET /healthz and GET
 * /metrics (GW_ROUTE_SERVICE_METRICS), nothing else; never rate limited,
 * never counted in bc_gateway_requests_total.
 */
extern const struct gw_route gw_metrics_routes[];
extern const size_t gw_metrics_nroutes;

/* gw_route_match in table (n rows) instead of gw_routes. */
int			gw_route_match_in(const struct gw_route *table, size_t n, const char *method,
							  const char *path, const struct gw_route **route,
							  char *allow, size_t allow_len);

/*
 * The route of a request for method (its name, "GET") and path: 200 with
 * *route its row; 405 with *route the path's first row (its endpoint) and
 * allow the path's methods ("GET", or "GET, POST"); 404 with *route NULL.
 * A GW_ROUTE_TAIL row matches its path followed by '/' and a non-empty tail
 * (gw_route_tail gives it), never its path alone.
 */
int			gw_route_match(const char *method, const char *path,
						   const struct gw_route **route, char *allow, size_t allow_len);

/* A GW_ROUTE_TAIL row's tail in path (after the row's path and '/'), else NULL. */
const char *gw_route_tail(const struct gw_route *route, const char *path);

/* The largest body any row takes: what the HTTP server reads at most (main.c). */
size_t		gw_routes_max_body(void);

/* The endpoint of a row (its index), or GW_ENDPOINT_OTHER for NULL. */
int			gw_route_endpoint(const struct gw_route *route);

/* The label of an endpoint: the row's endpoint, or "other". */
const char *gw_endpoint_name(int endpoint);

#endif
