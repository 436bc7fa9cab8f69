/*
 * http.c: the routes, the relay to the database and the status mapping.
 *
 * A POST body goes to the database byte for byte as the one text parameter
 * of a fixed statement; the function's jsonb result comes back byte for byte
 * as the response body.  The gateway reads only the result's "status" (which
 * the statement extracts) to choose 200 or 403, and the SQLSTATE of an error
 * to choose 400, 404, 503 or 500.  It never forwards a server message except
 * the primary message of INVALID_INPUT, which names the offending field.
 */
#include "http.h"
#include "client_addr.h"
#include "conn.h"
#include "crl.h"
#include "keys_cache.h"
#include "db_pool.h"
#include "gateway.h"
#include "log.h"
#include "metrics.h"
#include "ratelimit.h"

#include "bc_protocol.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/http.h>

struct route
{
	const char *path;
	enum gw_endpoint ep;
	const char *sql;
};

/* Column 0: the function's result, relayed as is; column 1: its status, for the mapping. */
static const struct route routes[] = {
	{BC_PATH_JOIN, GW_EP_JOIN,
	"SELECT t.r, t.r->>'status' FROM public.bc_join($1::jsonb) AS t(r)"},
	{BC_PATH_RENEW, GW_EP_RENEW,
	"SELECT t.r, t.r->>'status' FROM bc_join.renew($1::jsonb) AS t(r)"},
	{BC_PATH_SESSION, GW_EP_SESSION,
	"SELECT t.r, t.r->>'status' FROM bc_join.issue_session($1::jsonb) AS t(r)"},
	{BC_PATH_JWT_SVID, GW_EP_JWT_SVID,
	"SELECT t.r, t.r->>'status' FROM bc_join.issue_jwt_svid($1::jsonb) AS t(r)"},
	{BC_PATH_COMMANDS, GW_EP_COMMANDS,
	"SELECT t.r, t.r->>'status' FROM bc_join.fetch_commands($1::jsonb) AS t(r)"},
	{BC_PATH_COMMANDS_COMPLETE, GW_EP_COMMANDS_COMPLETE,
	"SELECT t.r, t.r->>'status' FROM bc_join.complete_command($1::jsonb) AS t(r)"},
	{BC_PATH_SITE_EPOCH, GW_EP_SITE_EPOCH,
	"SELECT t.r, t.r->>'status' FROM bc_join.site_epoch($1::jsonb) AS t(r)"},
};

#define NROUTES (sizeof(routes) / sizeof(routes[0]))

/*
 * GET /v1/audit-anchor: {"anchor": <the JWS of bc_join.audit_anchor()>}, so an
 * outsider can keep anchors and later detect a rewritten issuance log
 * (tools/bc-audit-verify --anchor).  Rate limited like the relayed calls;
 * cacheable for a minute.  The parameter is unused ("").
 */
static const char anchor_sql[] =
	"SELECT jsonb_build_object('anchor', bc_join.audit_anchor())::text, 'issued' "
	"WHERE $1::text IS NOT NULL";

/* The GET endpoints relayed to SQL. */
static const struct
{
	const char *path;
	enum gw_endpoint ep;
	const char *sql;
}			get_routes[] =
{
	{BC_PATH_AUDIT_ANCHOR, GW_EP_AUDIT_ANCHOR, anchor_sql},
};

/* One request from dispatch to answer. */
struct req_ctx
{
	struct gateway *gw;
	struct evhttp_request *req;
	const char *label;			/* endpoint name in logs */
	enum gw_endpoint ep;
	int			observed;		/* counted in bc_gateway_requests_total */
	struct timespec start;
	char		client[64];
	char	   *body;
	size_t		body_len;
	char		sqlstate[6];
	const char *reason;
	char		cache_control[32];	/* empty: no-store */
};

/* Seconds elapsed since ts (monotonic). */
static double
elapsed_since(const struct timespec *ts)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double) (now.tv_sec - ts->tv_sec) + (double) (now.tv_nsec - ts->tv_nsec) / 1e9;
}

/* Log one answered request; never its body or the server's messages. */
static void
log_request(struct req_ctx *ctx, int code, enum gw_outcome out, size_t bytes, double secs)
{
	int			level = code >= 500 || strncmp(ctx->sqlstate, "54", 2) == 0 ? GW_LOG_WARN :
		ctx->observed ? GW_LOG_INFO : GW_LOG_DEBUG;
	json_t	   *f;

	if (!gw_log_enabled(level))
		return;
	f = json_pack("{s:s,s:i,s:s,s:s,s:f,s:I,s:I}",
				  "endpoint", ctx->label, "status", code,
				  "outcome", ctx->observed ? gw_outcome_name(out) : "",
				  "client", ctx->client, "duration_ms", floor(secs * 1e6) / 1e3,
				  "bytes", (json_int_t) bytes, "bytes_in", (json_int_t) ctx->body_len);
	if (f != NULL && ctx->sqlstate[0] != '\0')
		json_object_set_new(f, "sqlstate", json_string(ctx->sqlstate));
	if (f != NULL && ctx->reason != NULL)
		json_object_set_new(f, "reason", json_string(ctx->reason));
	gw_log(level, "request", f);
}

/* Send the answer, count it, log it and free ctx. */
static void
reply(struct req_ctx *ctx, int code, enum gw_outcome out, const char *ctype,
	  const char *body, size_t len, int retry_after)
{
	struct gateway *gw = ctx->gw;
	struct evkeyvalq *h = evhttp_request_get_output_headers(ctx->req);
	struct evbuffer *buf = evbuffer_new();
	double		secs = elapsed_since(&ctx->start);
	char		ra[16];

	evhttp_add_header(h, "Content-Type", ctype);
	evhttp_add_header(h, "Cache-Control", ctx->cache_control[0] ? ctx->cache_control : "no-store");
	if (retry_after > 0)
	{
		snprintf(ra, sizeof(ra), "%d", retry_after);
		evhttp_add_header(h, "Retry-After", ra);
	}
	if (gw->shutting_down)
		evhttp_add_header(h, "Connection", "close");
	if (buf != NULL && len > 0 && evbuffer_add(buf, body, len) != 0)
	{
		code = 500;
		out = GW_OUT_ERROR;
	}
	gw_conn_reply_begin(gw_conn_of(ctx->req), ctx->req);
	evhttp_send_reply(ctx->req, code, NULL, buf);
	evbuffer_free(buf);
	if (ctx->observed)
		gw_metrics_observe(&gw->metrics, ctx->ep, out, secs);
	log_request(ctx, code, out, len, secs);
	free(ctx->body);
	free(ctx);
	gw->in_flight--;
	gw_maybe_finish(gw);
}

/* Answer with {"status":"error","error":{"code":code,"message":msg}}. */
static void
reply_error(struct req_ctx *ctx, int http, enum gw_outcome out, const char *code,
			const char *msg, int retry_after)
{
	json_t	   *j = json_pack("{s:s,s:{s:s,s:s}}", "status", "error",
							  "error", "code", code, "message", msg ? msg : "");
	char	   *text = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;

	static const char fallback[] =
		"{\"status\":\"error\",\"error\":{\"code\":\"INTERNAL\",\"message\":\"internal error\"}}";

	if (text == NULL)
		reply(ctx, 500, GW_OUT_ERROR, "application/json", fallback, sizeof(fallback) - 1, 0);
	else
		reply(ctx, http, out, "application/json", text, strlen(text), retry_after);
	free(text);
	json_decref(j);
}

/* Answer 503 UNAVAILABLE with Retry-After. */
static void
reply_unavailable(struct req_ctx *ctx, enum gw_outcome out, const char *reason)
{
	ctx->reason = reason;
	reply_error(ctx, 503, out, BC_ERROR_UNAVAILABLE, "service temporarily unavailable",
				ctx->gw->cfg.retry_after_s);
}

/* Answer 500 INTERNAL, saying nothing else. */
static void
reply_internal(struct req_ctx *ctx)
{
	reply_error(ctx, 500, GW_OUT_ERROR, BC_ERROR_INTERNAL, "internal error", 0);
}

/*
 * The SQLSTATEs answered 400 whose primary message is relayed: 22023 is the
 * extension's INVALID_INPUT (its message names the offending field), the
 * others are the jsonb input cast's own fixed messages.
 */
static const char *const invalid_relayed[] = {"22023", "22P02", "22021", "22P05", NULL};

/*
 * The HTTP status and outcome for a database error with this SQLSTATE.
 *
 * 400 for every data exception (class 22) and for 54000/54001 (program limit
 * exceeded, stack depth / statement too complex): the statement's one
 * variable is the request body, and its jsonb input cast alone can raise
 * 22003 (a number out of range), 22P02, 22021, 22P05 and 54001 (nesting
 * deeper than max_stack_depth).  Unauthenticated input must never be a 500.
 */
int
gw_http_status_for_sqlstate(const char *ss, int *outcome)
{
	static const char *const unsupported[] = {"0A000", "42883", NULL};
	static const char *const unavailable[] = {"57P01", "57P02", "57P03", "53300",
	"40001", "40P01", "25006", NULL};

	if (ss == NULL || strlen(ss) != 5)
		goto internal;
	if (strncmp(ss, "22", 2) == 0 || strcmp(ss, "54000") == 0 || strcmp(ss, "54001") == 0)
	{
		*outcome = GW_OUT_INVALID;
		return 400;
	}
	for (int i = 0; unsupported[i]; i++)
		if (strcmp(ss, unsupported[i]) == 0)
		{
			*outcome = GW_OUT_UNSUPPORTED;
			return 404;
		}
	if (strcmp(ss, "57014") == 0)
	{
		*outcome = GW_OUT_TIMEOUT;
		return 503;
	}
	if (strncmp(ss, "08", 2) == 0)
		goto unavail;
	for (int i = 0; unavailable[i]; i++)
		if (strcmp(ss, unavailable[i]) == 0)
			goto unavail;
internal:
	*outcome = GW_OUT_ERROR;
	return 500;
unavail:
	*outcome = GW_OUT_UNAVAILABLE;
	return 503;
}

/*
 * The message of a 400 INVALID_INPUT for SQLSTATE ss: the server's primary
 * message for the codes whose messages are written for the client; for the
 * rest of class 22 and for 54xxx a fixed message of the gateway's, since a
 * data exception raised deeper in the server may quote stored values.
 */
static const char *
invalid_input_message(const char *ss, const char *server_msg)
{
	for (int i = 0; invalid_relayed[i]; i++)
		if (strcmp(ss, invalid_relayed[i]) == 0)
			return server_msg ? server_msg : "invalid input";
	if (strncmp(ss, "54", 2) == 0)
		return "request nested too deeply or too complex";
	if (strcmp(ss, "22003") == 0)
		return "a value in the request is out of range";
	return "invalid input";
}

#ifdef BC_TEST_BUILD			/* the fuzz build only (mk/fuzz.mk) */
/*
 * Fuzz entry point (test/fuzz/fuzz_gw_http.c): the HTTP status, outcome and
 * client message reply_db_error() chooses for SQLSTATE ss and the server's
 * primary message server_msg.  Not used by the gateway itself.
 */
int
gw_http_fuzz_db_error(const char *ss, const char *server_msg, int *outcome,
					  const char **message)
{
	int			code = gw_http_status_for_sqlstate(ss, outcome);

	*message = code == 400 ? invalid_input_message(ss, server_msg) : NULL;
	return code;
}
#endif

/*
 * Why a request body of n bytes is not relayed, its HTTP status in *http, or
 * NULL when it is relayed.  body NULL checks only the length (before the
 * body is copied out of libevent's buffer).
 */
static const char *
body_refusal(const char *body, size_t n, int *http)
{
	*http = 400;
	if (n == 0)
		return "request body is empty";
	if (n > GW_MAX_BODY)
	{
		*http = 413;
		return "request body over 65536 bytes";
	}
	/* a text parameter ends at the first NUL: refuse rather than truncate */
	if (body != NULL && memchr(body, '\0', n) != NULL)
		return "request body contains a NUL byte";
	return NULL;
}

#ifdef BC_TEST_BUILD			/* the fuzz build only (mk/fuzz.mk) */
/* Fuzz entry point (test/fuzz/fuzz_gw_http.c): 0 when a body is relayed, else its HTTP status. */
int
gw_http_fuzz_body(const char *body, size_t n)
{
	int			http;

	return body_refusal(NULL, n, &http) != NULL || body_refusal(body, n, &http) != NULL ?
		http : 0;
}
#endif

/* A server error: map its SQLSTATE to an answer. */
static void
reply_db_error(struct req_ctx *ctx, const struct gw_db_result *r)
{
	int			out = GW_OUT_ERROR;
	int			code = gw_http_status_for_sqlstate(r->sqlstate, &out);

	if (r->sqlstate != NULL)
		snprintf(ctx->sqlstate, sizeof(ctx->sqlstate), "%s", r->sqlstate);
	switch (code)
	{
		case 400:
			/* seen by the operator: a server-side fault could raise these too */
			if (strncmp(r->sqlstate, "54", 2) == 0)
				ctx->reason = "program limit exceeded (request too complex, or a server fault)";
			reply_error(ctx, 400, GW_OUT_INVALID, BC_ERROR_INVALID_INPUT,
						invalid_input_message(r->sqlstate, r->message), 0);
			return;
		case 404:
			reply_error(ctx, 404, GW_OUT_UNSUPPORTED, BC_ERROR_UNSUPPORTED,
						"not supported by this service", 0);
			return;
		case 503:
			reply_unavailable(ctx, (enum gw_outcome) out, r->reason);
			return;
		default:
			reply_internal(ctx);
			return;
	}
}

/* The database answered a relayed call. */
static void
relay_done(const struct gw_db_result *r, void *arg)
{
	struct req_ctx *ctx = arg;

	switch (r->status)
	{
		case GW_DB_OK:
			if (r->value == NULL || r->tag == NULL)
				break;
			if (strcmp(r->tag, BC_STATUS_ISSUED) == 0 || strcmp(r->tag, BC_STATUS_PENDING) == 0 ||
				strcmp(r->tag, BC_STATUS_CHALLENGE) == 0)
			{
				enum gw_outcome out = strcmp(r->tag, BC_STATUS_ISSUED) == 0 ? GW_OUT_ISSUED :
				strcmp(r->tag, BC_STATUS_PENDING) == 0 ? GW_OUT_PENDING : GW_OUT_CHALLENGE;

				reply(ctx, 200, out, "application/json", r->value, r->value_len, 0);
				return;
			}
			if (strcmp(r->tag, BC_STATUS_REFUSED) == 0)
			{
				reply(ctx, 403, GW_OUT_REFUSED, "application/json", r->value, r->value_len, 0);
				return;
			}
			break;
		case GW_DB_ERROR:
			reply_db_error(ctx, r);
			return;
		case GW_DB_UNAVAILABLE:
			reply_unavailable(ctx, GW_OUT_UNAVAILABLE, r->reason);
			return;
		case GW_DB_TIMEOUT:
			reply_unavailable(ctx, GW_OUT_TIMEOUT, r->reason);
			return;
	}
	ctx->reason = "unexpected result";
	reply_internal(ctx);
}

/* The health probe's statement finished. */
static void
health_done(const struct gw_db_result *r, void *arg)
{
	struct req_ctx *ctx = arg;

	if (r->status == GW_DB_OK)
		reply(ctx, 200, GW_OUT_ISSUED, "text/plain", "ok\n", 3, 0);
	else
	{
		ctx->reason = r->reason;
		reply(ctx, 503, GW_OUT_UNAVAILABLE, "text/plain", "unavailable\n", 12,
			  ctx->gw->cfg.retry_after_s);
	}
}

/* GET /healthz: 200 when a database connection works or can be made, else 503. */
static void
handle_health(struct req_ctx *ctx)
{
	const char *why = NULL;

	if (gw_db_pool_connected(ctx->gw->pool) > 0)
	{
		reply(ctx, 200, GW_OUT_ISSUED, "text/plain", "ok\n", 3, 0);
		return;
	}
	if (gw_db_submit(ctx->gw->pool, "SELECT 1", NULL, health_done, ctx, &why) != 0)
	{
		ctx->reason = why;
		reply(ctx, 503, GW_OUT_UNAVAILABLE, "text/plain", "unavailable\n", 12,
			  ctx->gw->cfg.retry_after_s);
	}
}

/* GET /metrics: the Prometheus text exposition. */
static void
handle_metrics(struct req_ctx *ctx)
{
	struct evbuffer *buf = evbuffer_new();
	size_t		n;
	char	   *text = NULL;

	struct gw_gauges g = {
		.pool_in_use = gw_db_pool_in_use(ctx->gw->pool),
		.pool_size = ctx->gw->cfg.db_pool,
		.connections = ctx->gw->connections,
		.max_connections = ctx->gw->max_connections,
	};

	if (buf == NULL || gw_metrics_render(&ctx->gw->metrics, &g, buf) != 0 ||
		gw_crl_render_metrics(ctx->gw->crl, buf) != 0 ||
		gw_keys_render_metrics(ctx->gw->keys, buf) != 0 ||
		gw_keys_render_metrics(ctx->gw->bundle, buf) != 0 ||
		gw_db_pool_render_primary(ctx->gw->pool, buf) != 0)
		goto fail;
	n = evbuffer_get_length(buf);
	text = malloc(n + 1);
	if (text == NULL || evbuffer_copyout(buf, text, n) != (ev_ssize_t) n)
		goto fail;
	reply(ctx, 200, GW_OUT_ISSUED, "text/plain; version=0.0.4", text, n, 0);
	goto out;
fail:
	reply_internal(ctx);
out:
	free(text);
	evbuffer_free(buf);
}

/* The CRL cache answered a GET /v1/crl. */
static void
crl_ready(const unsigned char *der, size_t len, long max_age, void *arg)
{
	struct req_ctx *ctx = arg;

	if (der == NULL)
	{
		reply_unavailable(ctx, GW_OUT_UNAVAILABLE, "no CRL within its nextUpdate");
		return;
	}
	snprintf(ctx->cache_control, sizeof(ctx->cache_control), "max-age=%ld", max_age);
	reply(ctx, 200, GW_OUT_ISSUED, "application/pkix-crl", (const char *) der, len, 0);
}

/* GET /v1/crl: the node CA's CRL (DER) from the cache; never rate limited. */
static void
handle_crl(struct req_ctx *ctx)
{
	if (gw_crl_get(ctx->gw->crl, crl_ready, ctx) != 0)
		reply_internal(ctx);
}

/* The service keys' cache answered a GET /v1/service-keys. */
static void
keys_ready(const char *doc, size_t len, long max_age, void *arg)
{
	struct req_ctx *ctx = arg;

	if (doc == NULL)
	{
		reply_unavailable(ctx, GW_OUT_UNAVAILABLE, "no signed service keys");
		return;
	}
	snprintf(ctx->cache_control, sizeof(ctx->cache_control), "max-age=%ld", max_age);
	reply(ctx, 200, GW_OUT_ISSUED, "application/json", doc, len, 0);
}

/*
 * GET /v1/service-keys: bc_join.signed_service_keys(), {"keys": [JWS...]},
 * the pinned-key rollover bcd fetches (docs/operator.md, key rotation), from
 * the cache (keys_cache.c); rate limited like the relayed calls.
 */
static void
handle_service_keys(struct req_ctx *ctx)
{
	if (gw_keys_get(ctx->gw->keys, keys_ready, ctx) != 0)
		reply_internal(ctx);
}

/* The SPIFFE bundle from its cache: 200 with it, or 503. */
static void
bundle_ready(const char *doc, size_t len, long max_age, void *arg)
{
	struct req_ctx *ctx = arg;

	if (doc == NULL)
	{
		reply_unavailable(ctx, GW_OUT_UNAVAILABLE, "no SPIFFE bundle");
		return;
	}
	snprintf(ctx->cache_control, sizeof(ctx->cache_control), "max-age=%ld", max_age);
	reply(ctx, 200, GW_OUT_ISSUED, "application/json", doc, len, 0);
}

/*
 * GET /v1/spiffe-bundle: bc_join.spiffe_bundle(), the trust domain's SPIFFE
 * bundle (a JWKS with spiffe_sequence and spiffe_refresh_hint) served over
 * the gateway's TLS (the federation spec's https_web profile), from its
 * cache (keys_cache.c); rate limited like the relayed calls.
 */
static void
handle_spiffe_bundle(struct req_ctx *ctx)
{
	if (gw_keys_get(ctx->gw->bundle, bundle_ready, ctx) != 0)
		reply_internal(ctx);
}

/* Whether the client may make one more relayed call now; answers 429 when not. */
static int
rate_allowed(struct req_ctx *ctx, const struct gw_addr *addr)
{
	struct timespec now;
	double		retry = 0;
	struct gateway *gw = ctx->gw;

	if (gw->rl == NULL)
		return 1;
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (gw_ratelimit_take(gw->rl, addr, (double) now.tv_sec + (double) now.tv_nsec / 1e9, &retry))
		return 1;
	reply_error(ctx, 429, GW_OUT_RATE_LIMITED, BC_ERROR_RATE_LIMITED, "too many requests",
				retry < 1 ? 1 : (int) ceil(retry));
	return 0;
}

/* POST /v1/...: check the body and hand it to the database. */
static void
handle_relay(struct req_ctx *ctx, const struct route *rt)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(ctx->req);
	size_t		n = in ? evbuffer_get_length(in) : 0;
	const char *why = NULL;
	int			http;

	ctx->body_len = n;
	if ((why = body_refusal(NULL, n, &http)) != NULL)
	{
		reply_error(ctx, http, http == 413 ? GW_OUT_TOO_LARGE : GW_OUT_INVALID,
					BC_ERROR_INVALID_INPUT, why, 0);
		return;
	}
	ctx->body = malloc(n + 1);
	if (ctx->body == NULL || evbuffer_copyout(in, ctx->body, n) != (ev_ssize_t) n)
	{
		reply_internal(ctx);
		return;
	}
	ctx->body[n] = '\0';
	if ((why = body_refusal(ctx->body, n, &http)) != NULL)
	{
		reply_error(ctx, http, GW_OUT_INVALID, BC_ERROR_INVALID_INPUT, why, 0);
		return;
	}
	/* from here relay_done answers, possibly before gw_db_submit returns */
	if (gw_db_submit(ctx->gw->pool, rt->sql, ctx->body, relay_done, ctx, &why) != 0)
		reply_unavailable(ctx, GW_OUT_UNAVAILABLE, why);
}

/*
 * A request on endpoint ep: its label, 405 (with Allow) for another method
 * than want, 429 past the rate limit.  1 when it may go on.
 */
static int
route_admitted(struct req_ctx *ctx, const struct gw_addr *addr, enum gw_endpoint ep,
			   enum evhttp_cmd_type method, enum evhttp_cmd_type want, const char *allow)
{
	ctx->ep = ep;
	ctx->label = gw_endpoint_name(ep);
	if (method != want)
	{
		evhttp_add_header(evhttp_request_get_output_headers(ctx->req), "Allow", allow);
		reply_error(ctx, 405, GW_OUT_INVALID, BC_ERROR_INVALID_INPUT, "method not allowed", 0);
		return 0;
	}
	return rate_allowed(ctx, addr);
}

/* evhttp's generic callback: route one complete request. */
void
gw_http_handle(struct evhttp_request *req, void *arg)
{
	struct gateway *gw = arg;
	struct req_ctx *ctx = calloc(1, sizeof(*ctx));
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
	enum evhttp_cmd_type method = evhttp_request_get_command(req);
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	char	   *peer = NULL;
	ev_uint16_t port = 0;
	struct gw_addr addr;

	gw_conn_request_begin(gw_conn_of(req));
	if (ctx == NULL)
	{
		evhttp_send_error(req, 500, NULL);
		return;
	}
	gw->in_flight++;
	clock_gettime(CLOCK_MONOTONIC, &ctx->start);
	ctx->gw = gw;
	ctx->req = req;
	ctx->label = "other";
	ctx->ep = GW_EP_OTHER;
	if (evcon != NULL)
		evhttp_connection_get_peer(evcon, &peer, &port);
	if (gw_client_address(&gw->cfg, peer, evhttp_request_get_input_headers(req), &addr) == 0)
		gw_addr_format(&addr, ctx->client, sizeof(ctx->client));
	else
		memset(&addr, 0, sizeof(addr));
	if (path != NULL && (strcmp(path, "/healthz") == 0 || strcmp(path, "/metrics") == 0 ||
						 strcmp(path, GW_PATH_CRL) == 0))
	{
		ctx->label = path[1] == 'v' ? "crl" : path + 1;
		if (method != EVHTTP_REQ_GET)
		{
			evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET");
			reply_error(ctx, 405, GW_OUT_INVALID, BC_ERROR_INVALID_INPUT, "method not allowed", 0);
		}
		else if (path[1] == 'h')
			handle_health(ctx);
		else if (path[1] == 'm')
			handle_metrics(ctx);
		else
			handle_crl(ctx);
		return;
	}
	ctx->observed = 1;
	if (path != NULL && strcmp(path, BC_PATH_SERVICE_KEYS) == 0)
	{
		if (route_admitted(ctx, &addr, GW_EP_SERVICE_KEYS, method, EVHTTP_REQ_GET, "GET"))
			handle_service_keys(ctx);
		return;
	}
	if (path != NULL && strcmp(path, BC_PATH_SPIFFE_BUNDLE) == 0)
	{
		if (route_admitted(ctx, &addr, GW_EP_SPIFFE_BUNDLE, method, EVHTTP_REQ_GET, "GET"))
			handle_spiffe_bundle(ctx);
		return;
	}
	for (size_t i = 0; path != NULL && i < sizeof(get_routes) / sizeof(get_routes[0]); i++)
	{
		const char *why = NULL;

		if (strcmp(path, get_routes[i].path) != 0)
			continue;
		if (!route_admitted(ctx, &addr, get_routes[i].ep, method, EVHTTP_REQ_GET, "GET"))
			return;
		snprintf(ctx->cache_control, sizeof(ctx->cache_control), "max-age=60");
		if (gw_db_submit(gw->pool, get_routes[i].sql, "", relay_done, ctx, &why) != 0)
			reply_unavailable(ctx, GW_OUT_UNAVAILABLE, why);
		return;
	}
	for (size_t i = 0; path != NULL && i < NROUTES; i++)
	{
		if (strcmp(path, routes[i].path) != 0)
			continue;
		if (route_admitted(ctx, &addr, routes[i].ep, method, EVHTTP_REQ_POST, "POST"))
			handle_relay(ctx, &routes[i]);
		return;
	}
	reply_error(ctx, 404, GW_OUT_UNSUPPORTED, BC_ERROR_UNSUPPORTED, "no such endpoint", 0);
}
