/*
 * http.c: every request through the route table (routes.c) to what answers
 * it: the health probe, the metrics, a relayed statement (relay.c) or a
 * cached document (doc_cache.c).
 *
 * A request on a path no row has is 404 (endpoint "other"); another method
 * than the path's is 405 with Allow; past the client's rate (rows marked
 * GW_ROUTE_RATE_LIMITED) 429 with Retry-After, before the database is asked.
 *
 * The metrics listener (--metrics-listen, #48) has its own table
 * (gw_metrics_routes): /healthz, and a /metrics that is the gateway's own
 * exposition followed by bc_join.metrics()'s text from its cache
 * (documents.c), which the public listener's /metrics never shows.
 */
#include "http.h"
#include "client_addr.h"
#include "clock.h"
#include "conn.h"
#include "db_pool.h"
#include "doc_cache.h"
#include "documents.h"
#include "gateway.h"
#include "http_cache.h"
#include "metrics.h"
#include "ocsp_cache.h"
#include "ocsp_route.h"
#include "ratelimit.h"
#include "relay.h"
#include "reply.h"
#include "routes.h"

#include "bc_protocol.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/http.h>

/* The health probe's statement finished. */
static void
health_done(const struct gw_db_result *r, void *arg)
{
	struct gw_request *rq = arg;

	if (r->status == GW_DB_OK)
		gw_reply(rq, 200, GW_OUT_ISSUED, "text/plain", "ok\n", 3, 0);
	else
	{
		rq->reason = r->reason;
		gw_reply(rq, 503, GW_OUT_UNAVAILABLE, "text/plain", "unavailable\n", 12,
				 rq->gw->cfg.retry_after_s);
	}
}

/* GET /healthz: 200 when a database connection works or can be made, else 503. */
static void
handle_health(struct gw_request *rq)
{
	const char *why = NULL;

	if (gw_db_pool_connected(rq->gw->pool) > 0)
	{
		gw_reply(rq, 200, GW_OUT_ISSUED, "text/plain", "ok\n", 3, 0);
		return;
	}
	if (gw_db_submit(rq->gw->pool, "SELECT 1", NULL, health_done, rq, &why) != 0)
	{
		rq->reason = why;
		gw_reply(rq, 503, GW_OUT_UNAVAILABLE, "text/plain", "unavailable\n", 12,
				 rq->gw->cfg.retry_after_s);
	}
}

/* Append the gateway's own exposition to buf (the documents' in the table's order); 0 on success. */
static int
render_gateway(struct gateway *gw, struct evbuffer *buf)
{
	struct gw_gauges g = {
		.pool_size = gw->cfg.db_pool,
		.connections = gw->connections,
		.max_connections = gw->max_connections,
		.large_body_bytes = gw->large_body_used,
		.large_body_budget = gw->cfg.large_body_budget,
	};

	if (gw->pool == NULL)		/* the teardown answering a waiter: a 500 */
		return -1;
	g.pool_in_use = gw_db_pool_in_use(gw->pool);
	if (gw_metrics_render(&gw->metrics, &g, buf) != 0)
		return -1;
	for (size_t i = 0; i < gw_nroutes; i++)
		if (gw->docs[i] != NULL && gw_doc_cache_render_metrics(gw->docs[i], buf) != 0)
			return -1;
	if (gw->ocsp != NULL && gw_ocsp_cache_render_metrics(gw->ocsp, buf) != 0)
		return -1;
	return gw_db_pool_render_primary(gw->pool, buf);
}

/* Answer 200 with buf's exposition (500 when it cannot be copied); buf is freed. */
static void
reply_exposition(struct gw_request *rq, struct evbuffer *buf)
{
	size_t		n;
	char	   *text = NULL;

	if (buf == NULL)
		goto fail;
	n = evbuffer_get_length(buf);
	text = malloc(n + 1);
	if (text == NULL || evbuffer_copyout(buf, text, n) != (ev_ssize_t) n)
		goto fail;
	gw_reply(rq, 200, GW_OUT_ISSUED, "text/plain; version=0.0.4", text, n, 0);
	goto out;
fail:
	gw_reply_internal(rq);
out:
	free(text);
	if (buf != NULL)
		evbuffer_free(buf);
}

/* GET /metrics: the Prometheus text exposition. */
static void
handle_metrics(struct gw_request *rq)
{
	struct evbuffer *buf = evbuffer_new();

	if (buf != NULL && render_gateway(rq->gw, buf) != 0)
	{
		evbuffer_free(buf);
		buf = NULL;
	}
	reply_exposition(rq, buf);
}

/*
 * bc_join.metrics()'s cache answered (body NULL: no text may be served):
 * the gateway's exposition, the cache's own families
 * (bc_gateway_service_metrics_*), then the service's text.  Always 200: a
 * database without its numbers is bc_gateway_service_metrics_up 0, not a
 * failed scrape of the gateway.
 */
static void
service_metrics_ready(const char *body, size_t len, long max_age, const char *etag, void *arg)
{
	struct gw_request *rq = arg;
	struct evbuffer *buf = evbuffer_new();

	(void) max_age;
	(void) etag;
	if (buf != NULL &&
		(render_gateway(rq->gw, buf) != 0 ||
		 gw_doc_cache_render_metrics(rq->gw->service_metrics, buf) != 0 ||
		 (body != NULL && evbuffer_add(buf, body, len) != 0)))
	{
		evbuffer_free(buf);
		buf = NULL;
	}
	if (body == NULL)
		rq->reason = gw_doc_service_metrics.unavailable;
	reply_exposition(rq, buf);
}

/* The metrics listener's GET /metrics: after bc_join.metrics()'s cache answers. */
static void
handle_service_metrics(struct gw_request *rq)
{
	if (rq->gw->service_metrics == NULL ||
		gw_doc_cache_get(rq->gw->service_metrics, service_metrics_ready, rq) != 0)
		gw_reply_internal(rq);
}

/* A document's cache answered: 200 with it (304 when If-None-Match has its ETag), or 503. */
static void
document_ready(const char *body, size_t len, long max_age, const char *etag, void *arg)
{
	struct gw_request *rq = arg;
	const struct gw_doc_spec *doc = rq->route->doc;

	/* a public document a browser's script may read (the OIDC ones) */
	if (doc->cors != NULL)
		evhttp_add_header(evhttp_request_get_output_headers(rq->req),
						  "Access-Control-Allow-Origin", doc->cors);
	if (body == NULL)
	{
		gw_reply_unavailable(rq, GW_OUT_UNAVAILABLE, doc->unavailable);
		return;
	}
	snprintf(rq->cache_control, sizeof(rq->cache_control), "max-age=%ld", max_age);
	if (etag != NULL && etag[0] != '\0')
	{
		evhttp_add_header(evhttp_request_get_output_headers(rq->req), "ETag", etag);
		if (gw_etag_matches(evhttp_find_header(evhttp_request_get_input_headers(rq->req),
											   "If-None-Match"), etag))
		{
			gw_reply(rq, 304, GW_OUT_ISSUED, doc->content_type, NULL, 0, 0);
			return;
		}
	}
	gw_reply(rq, 200, GW_OUT_ISSUED, doc->content_type, body, len, 0);
}

/* A GW_ROUTE_DOCUMENT request: the document from its cache. */
static void
handle_document(struct gw_request *rq)
{
	struct gw_doc_cache *cache = rq->gw->docs[gw_route_endpoint(rq->route)];

	if (cache == NULL || gw_doc_cache_get(cache, document_ready, rq) != 0)
		gw_reply_internal(rq);
}

/* Whether the client may make one more call now; answers 429 when not. */
static int
rate_allowed(struct gw_request *rq, const struct gw_addr *addr)
{
	double		retry = 0;
	struct gateway *gw = rq->gw;

	if (gw->rl == NULL)
		return 1;
	if (gw_ratelimit_take(gw->rl, addr, gw_mono_now(), &retry))
		return 1;
	gw_reply_error(rq, 429, GW_OUT_RATE_LIMITED, BC_ERROR_RATE_LIMITED, "too many requests",
				   retry < 1 ? 1 : (int) ceil(retry));
	return 0;
}

/* The name of an HTTP method, as the route table spells it. */
static const char *
method_name(enum evhttp_cmd_type method)
{
	switch (method)
	{
		case EVHTTP_REQ_GET:
			return "GET";
		case EVHTTP_REQ_POST:
			return "POST";
		case EVHTTP_REQ_HEAD:
			return "HEAD";
		case EVHTTP_REQ_PUT:
			return "PUT";
		case EVHTTP_REQ_DELETE:
			return "DELETE";
		case EVHTTP_REQ_OPTIONS:
			return "OPTIONS";
		case EVHTTP_REQ_PATCH:
			return "PATCH";
		default:
			return "?";
	}
}

/* A request, its route found (or not): 404, 405, 429 or what answers it. */
static void
dispatch(struct gw_request *rq, const struct gw_addr *addr, const char *method, const char *path)
{
	const struct gw_route *route;
	char		allow[64];
	int			status = gw_route_match(method, path, &route, allow, sizeof(allow));

	rq->route = route;
	rq->endpoint = gw_route_endpoint(route);
	rq->label = gw_endpoint_name(rq->endpoint);
	rq->observed = route == NULL || (route->limits & GW_ROUTE_OBSERVED) != 0;
	if (status == 404)
	{
		gw_reply_error(rq, 404, GW_OUT_UNSUPPORTED, BC_ERROR_UNSUPPORTED, "no such endpoint", 0);
		return;
	}
	if (status == 405)
	{
		evhttp_add_header(evhttp_request_get_output_headers(rq->req), "Allow", allow);
		gw_reply_error(rq, 405, GW_OUT_INVALID, BC_ERROR_INVALID_INPUT, "method not allowed", 0);
		return;
	}
	if ((route->limits & GW_ROUTE_RATE_LIMITED) != 0 && !rate_allowed(rq, addr))
		return;
	if (route->cache_control != NULL)
		snprintf(rq->cache_control, sizeof(rq->cache_control), "%s", route->cache_control);
	switch (route->kind)
	{
		case GW_ROUTE_HEALTH:
			handle_health(rq);
			return;
		case GW_ROUTE_METRICS:
			handle_metrics(rq);
			return;
		case GW_ROUTE_RELAY:
			gw_relay_body(rq);
			return;
		case GW_ROUTE_QUERY:
			gw_relay_query(rq);
			return;
		case GW_ROUTE_DOCUMENT:
			handle_document(rq);
			return;
		case GW_ROUTE_OCSP:
			gw_ocsp_handle(rq, gw_route_tail(route, path));
			return;
		case GW_ROUTE_SERVICE_METRICS:
			break;				/* not in this table */
	}
	gw_reply_internal(rq);
}

/* A request on the metrics listener: its own table (routes.c), not counted, never rate limited. */
static void
dispatch_metrics(struct gw_request *rq, const char *method, const char *path)
{
	const struct gw_route *route;
	char		allow[64];
	int			status = gw_route_match_in(gw_metrics_routes, gw_metrics_nroutes, method, path,
										   &route, allow, sizeof(allow));

	rq->route = route;
	rq->endpoint = GW_ENDPOINT_OTHER;
	rq->label = route != NULL ? route->endpoint : "other";
	rq->observed = 0;
	if (status == 404)
	{
		gw_reply_error(rq, 404, GW_OUT_UNSUPPORTED, BC_ERROR_UNSUPPORTED, "no such endpoint", 0);
		return;
	}
	if (status == 405)
	{
		evhttp_add_header(evhttp_request_get_output_headers(rq->req), "Allow", allow);
		gw_reply_error(rq, 405, GW_OUT_INVALID, BC_ERROR_INVALID_INPUT, "method not allowed", 0);
		return;
	}
	if (route->kind == GW_ROUTE_HEALTH)
		handle_health(rq);
	else if (route->kind == GW_ROUTE_SERVICE_METRICS)
		handle_service_metrics(rq);
	else
		gw_reply_internal(rq);
}

/* A request handed to us: its gw_request (counted in flight), or NULL when answered 500 already. */
static struct gw_request *
request_begin(struct gateway *gw, struct evhttp_request *req, struct gw_addr *addr)
{
	struct gw_request *rq = calloc(1, sizeof(*rq));
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	char	   *peer = NULL;
	ev_uint16_t port = 0;

	gw_conn_request_begin(gw_conn_of(req));
	if (rq == NULL)
	{
		evhttp_send_error(req, 500, NULL);
		return NULL;
	}
	gw->in_flight++;
	clock_gettime(CLOCK_MONOTONIC, &rq->start);
	rq->gw = gw;
	rq->req = req;
	if (evcon != NULL)
		evhttp_connection_get_peer(evcon, &peer, &port);
	if (gw_client_address(&gw->cfg, peer, evhttp_request_get_input_headers(req), addr) == 0)
		gw_addr_format(addr, rq->client, sizeof(rq->client));
	else
		memset(addr, 0, sizeof(*addr));
	return rq;
}

/* The path of req, or NULL. */
static const char *
request_path(struct evhttp_request *req)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);

	return uri ? evhttp_uri_get_path(uri) : NULL;
}

/* evhttp's generic callback: route one complete request. */
void
gw_http_handle(struct evhttp_request *req, void *arg)
{
	struct gw_addr addr;
	struct gw_request *rq = request_begin(arg, req, &addr);

	if (rq != NULL)
		dispatch(rq, &addr, method_name(evhttp_request_get_command(req)), request_path(req));
}

/* The metrics listener's generic callback; see http.h. */
void
gw_http_handle_metrics(struct evhttp_request *req, void *arg)
{
	struct gw_addr addr;
	struct gw_request *rq = request_begin(arg, req, &addr);

	if (rq != NULL)
		dispatch_metrics(rq, method_name(evhttp_request_get_command(req)), request_path(req));
}
