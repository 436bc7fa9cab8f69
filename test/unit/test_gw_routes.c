/*
 * test_gw_routes.c: cmocka tests of bc-gateway's route table (routes.c):
 * every method and path the gateway answers, with the endpoint, limits and
 * Cache-Control it has on the wire; 404 and 405 with Allow; and the
 * endpoints /metrics counts, in their order (metrics.c).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <event2/buffer.h>

#include "documents.h"
#include "metrics.h"
#include "routes.h"

/* One route as the wire has it. */
struct wire_route
{
	const char *method;
	const char *path;
	const char *endpoint;
	enum gw_route_kind kind;
	int			rate_limited;
	int			observed;
	const char *cache_control;
	const struct gw_doc_spec *doc;
	size_t		max_body;		/* 0: GW_MAX_BODY */
	int			tail;			/* GW_ROUTE_TAIL: requested as path + "/<tail>" */
};

static const struct wire_route wire[] = {
	{"GET", "/healthz", "healthz", GW_ROUTE_HEALTH, 0, 0, NULL, NULL, 0, 0},
	{"GET", "/metrics", "metrics", GW_ROUTE_METRICS, 0, 0, NULL, NULL, 0, 0},
	{"GET", "/v1/crl", "crl", GW_ROUTE_DOCUMENT, 0, 0, NULL, &gw_doc_crl, 0, 0},
	{"POST", "/v1/join", "join", GW_ROUTE_RELAY, 1, 1, NULL, NULL, 0, 0},
	{"POST", "/v1/renew", "renew", GW_ROUTE_RELAY, 1, 1, NULL, NULL, 0, 0},
	{"POST", "/v1/session", "session", GW_ROUTE_RELAY, 1, 1, NULL, NULL, 0, 0},
	{"POST", "/v1/jwt-svid", "jwt_svid", GW_ROUTE_RELAY, 1, 1, NULL, NULL, 0, 0},
	{"POST", "/v1/commands", "commands", GW_ROUTE_RELAY, 1, 1, NULL, NULL, 0, 0},
	{"POST", "/v1/commands/complete", "commands_complete", GW_ROUTE_RELAY, 1, 1, NULL, NULL, 0, 0},
	{"POST", "/v1/site-epoch", "site_epoch", GW_ROUTE_RELAY, 1, 1, NULL, NULL, 0, 0},
	{"GET", "/v1/audit-anchor", "audit_anchor", GW_ROUTE_QUERY, 1, 1, "max-age=60", NULL, 0, 0},
	{"GET", "/v1/service-keys", "service_keys", GW_ROUTE_DOCUMENT, 1, 1, NULL, &gw_doc_service_keys, 0, 0},
	{"GET", "/v1/spiffe-bundle", "spiffe_bundle", GW_ROUTE_DOCUMENT, 1, 1, NULL, &gw_doc_spiffe_bundle, 0, 0},
	{"POST", "/v1/attest", "attest", GW_ROUTE_RELAY, 1, 1, NULL, NULL, 8 * 1024 * 1024, 0},
	{"POST", "/v1/ocsp", "ocsp", GW_ROUTE_OCSP, 1, 1, NULL, NULL, 4096, 0},
	{"GET", "/v1/ocsp", "ocsp_get", GW_ROUTE_OCSP, 1, 1, NULL, NULL, 0, 1},
	{"GET", "/v1/trust-bundles", "trust_bundles", GW_ROUTE_DOCUMENT, 1, 1, NULL, &gw_doc_trust_bundles, 0, 0},
	/* #46 oidc: public documents, never limited, not counted (as /v1/crl) */
	{"GET", "/.well-known/openid-configuration", "oidc_discovery", GW_ROUTE_DOCUMENT, 0, 0, NULL,
	&gw_doc_oidc_discovery, 0, 0},
	{"GET", "/v1/jwks", "jwks", GW_ROUTE_DOCUMENT, 0, 0, NULL, &gw_doc_jwks, 0, 0},
	/* #47 ssh: the host certificate relayed and the signed document as the API; KRL and CA lines public */
	{"POST", "/v1/ssh/host", "ssh_host", GW_ROUTE_RELAY, 1, 1, NULL, NULL, 0, 0},
	{"GET", "/v1/ssh/krl", "ssh_krl", GW_ROUTE_DOCUMENT, 0, 0, NULL, &gw_doc_ssh_krl, 0, 0},
	{"GET", "/v1/ssh/signed", "ssh_signed", GW_ROUTE_DOCUMENT, 1, 1, NULL, &gw_doc_ssh_signed, 0, 0},
	{"GET", "/v1/ssh/host-ca", "ssh_host_ca", GW_ROUTE_DOCUMENT, 0, 0, NULL, &gw_doc_ssh_host_ca, 0, 0},
	{"GET", "/v1/ssh/user-ca", "ssh_user_ca", GW_ROUTE_DOCUMENT, 0, 0, NULL, &gw_doc_ssh_user_ca, 0, 0},
};

#define NWIRE (sizeof(wire) / sizeof(wire[0]))

/* Every route of the wire is found by its method and path, with its endpoint, limits and Cache-Control. */
static void
test_every_route_found(void **state)
{
	(void) state;
	assert_int_equal(gw_nroutes, NWIRE);
	for (size_t i = 0; i < NWIRE; i++)
	{
		const struct wire_route *w = &wire[i];
		const struct gw_route *r = NULL;
		char		allow[32] = "untouched";
		char		path[64];

		snprintf(path, sizeof(path), "%s%s", w->path, w->tail ? "/MEIwQDA-" : "");
		assert_int_equal(gw_route_match(w->method, path, &r, allow, sizeof(allow)), 200);
		assert_int_equal((r->limits & GW_ROUTE_TAIL) != 0, w->tail);
		if (w->tail)
			assert_string_equal(gw_route_tail(r, path), "MEIwQDA-");
		assert_non_null(r);
		assert_string_equal(r->path, w->path);
		assert_string_equal(r->method, w->method);
		assert_string_equal(r->endpoint, w->endpoint);
		assert_string_equal(gw_endpoint_name(gw_route_endpoint(r)), w->endpoint);
		assert_int_equal(r->kind, w->kind);
		assert_int_equal((r->limits & GW_ROUTE_RATE_LIMITED) != 0, w->rate_limited);
		assert_int_equal((r->limits & GW_ROUTE_OBSERVED) != 0, w->observed);
		if (w->cache_control == NULL)
			assert_null(r->cache_control);
		else
			assert_string_equal(r->cache_control, w->cache_control);
		assert_ptr_equal(r->doc, w->doc);
		assert_int_equal(r->max_body, w->max_body);
		if (r->kind == GW_ROUTE_RELAY || r->kind == GW_ROUTE_QUERY)
			assert_non_null(r->sql);
		else
			assert_null(r->sql);
	}
}

/* The relayed statements are the ones prepared on the wire, to the byte. */
static void
test_relay_statements(void **state)
{
	const struct gw_route *r;
	char		allow[32];

	(void) state;
	assert_int_equal(gw_route_match("POST", "/v1/join", &r, allow, sizeof(allow)), 200);
	assert_string_equal(r->sql, "SELECT t.r, t.r->>'status' FROM public.bc_join($1::jsonb) AS t(r)");
	assert_int_equal(gw_route_match("POST", "/v1/commands/complete", &r, allow, sizeof(allow)), 200);
	assert_string_equal(r->sql,
						"SELECT t.r, t.r->>'status' FROM bc_join.complete_command($1::jsonb) AS t(r)");
	assert_int_equal(gw_route_match("GET", "/v1/audit-anchor", &r, allow, sizeof(allow)), 200);
	assert_string_equal(r->sql,
						"SELECT jsonb_build_object('anchor', bc_join.audit_anchor())::text, 'issued' "
						"WHERE $1::text IS NOT NULL");
	assert_int_equal(gw_route_match("POST", "/v1/attest", &r, allow, sizeof(allow)), 200);
	assert_string_equal(r->sql, "SELECT t.r, t.r->>'status' FROM bc_join.attest($1::jsonb) AS t(r)");
	assert_int_equal(gw_route_match("POST", "/v1/ssh/host", &r, allow, sizeof(allow)), 200);
	assert_string_equal(r->sql,
						"SELECT t.r, t.r->>'status' FROM bc_join.issue_ssh_host_cert($1::jsonb) AS t(r)");
	/* the HTTP server reads at most the largest row's bound: attest's */
	assert_int_equal(gw_routes_max_body(), 8 * 1024 * 1024);
}

/* A path no row has is 404, endpoint "other"; so is no path at all. */
static void
test_unknown_path_404(void **state)
{
	static const char *const paths[] = {
		"/nowhere", "/", "", "/v1", "/v1/crl/", "/v1/join/", "/HEALTHZ", "/h", "/m", "/v1/c",
		"/healthz/", "/v1/joinx", "/v1/commands/", "/v1/commands/completed",
		"/v1/ssh", "/v1/ssh/", "/v1/ssh/krl/", "/v1/ssh/hostx", "/v1/ssh/host-ca/x",
	};

	(void) state;
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
	{
		const struct gw_route *r = (const struct gw_route *) 1;
		char		allow[32] = "untouched";

		assert_int_equal(gw_route_match("GET", paths[i], &r, allow, sizeof(allow)), 404);
		assert_null(r);
		assert_string_equal(allow, "");
		assert_int_equal(gw_route_endpoint(r), GW_ENDPOINT_OTHER);
		assert_string_equal(gw_endpoint_name(gw_route_endpoint(r)), "other");
		assert_int_equal(gw_route_match("POST", paths[i], &r, allow, sizeof(allow)), 404);
	}
	assert_int_equal(gw_route_match("GET", NULL, &(const struct gw_route *){NULL}, NULL, 0), 404);
}

/* Another method than the path's is 405, with the path's row (its endpoint) and Allow. */
static void
test_wrong_method_405(void **state)
{
	static const char *const methods[] = {"GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH"};

	(void) state;
	for (size_t i = 0; i < NWIRE; i++)
		for (size_t m = 0; m < sizeof(methods) / sizeof(methods[0]); m++)
		{
			const struct gw_route *r = NULL;
			char		allow[32];
			char		path[64];

			snprintf(path, sizeof(path), "%s%s", wire[i].path, wire[i].tail ? "/MEIw" : "");
			/* /v1/ocsp has both methods, on two paths (test_ocsp_tail) */
			if (strcmp(methods[m], wire[i].method) == 0 || strcmp(wire[i].path, "/v1/ocsp") == 0)
				continue;
			assert_int_equal(gw_route_match(methods[m], path, &r, allow, sizeof(allow)), 405);
			assert_non_null(r);
			assert_string_equal(r->endpoint, wire[i].endpoint);
			assert_string_equal(allow, wire[i].method);
		}
}

/* A short Allow buffer is cut, never overrun (ASan watches), and still NUL-terminated. */
static void
test_allow_bounded(void **state)
{
	const struct gw_route *r;
	char	   *allow = malloc(3);

	(void) state;
	assert_non_null(allow);
	assert_int_equal(gw_route_match("GET", "/v1/join", &r, allow, 3), 405);
	assert_string_equal(allow, "PO");
	assert_int_equal(gw_route_match("GET", "/v1/join", &r, allow, 1), 405);
	assert_string_equal(allow, "");
	assert_int_equal(gw_route_match("GET", "/v1/join", &r, NULL, 0), 405);
	free(allow);
}

/* No two rows answer the same method and path, nor share an endpoint. */
static void
test_rows_distinct(void **state)
{
	(void) state;
	for (size_t i = 0; i < gw_nroutes; i++)
		for (size_t j = i + 1; j < gw_nroutes; j++)
		{
			assert_false(strcmp(gw_routes[i].path, gw_routes[j].path) == 0 &&
						 strcmp(gw_routes[i].method, gw_routes[j].method) == 0);
			assert_string_not_equal(gw_routes[i].endpoint, gw_routes[j].endpoint);
		}
	assert_true(gw_nroutes <= GW_ROUTES_MAX);
	assert_string_equal(gw_endpoint_name(-1), "other");
	assert_string_equal(gw_endpoint_name((int) gw_nroutes), "other");
}

/*
 * /metrics counts the rows marked observed, in the order it always had, then
 * "other", every outcome of each; healthz, metrics and crl are not counted.
 */
static void
test_metrics_endpoints(void **state)
{
	static const char *const counted[] = {
		"join", "renew", "session", "commands", "commands_complete", "site_epoch",
		"audit_anchor", "service_keys", "jwt_svid", "spiffe_bundle", "attest", "ocsp", "ocsp_get",
		"trust_bundles", "ssh_host", "ssh_signed", "other",
	};
	struct gw_metrics *m = calloc(1, sizeof(*m));
	struct gw_gauges g = {0};
	struct evbuffer *buf = evbuffer_new();
	char	   *text;
	const char *p;
	size_t		n;
	const struct gw_route *r;
	char		allow[8];

	(void) state;
	assert_non_null(m);
	assert_non_null(buf);
	assert_int_equal(gw_route_match("POST", "/v1/join", &r, allow, sizeof(allow)), 200);
	gw_metrics_observe(m, gw_route_endpoint(r), GW_OUT_REFUSED, 0.003);
	gw_metrics_observe(m, GW_ENDPOINT_OTHER, GW_OUT_UNSUPPORTED, 0.001);
	assert_int_equal(gw_route_match("GET", "/healthz", &r, allow, sizeof(allow)), 200);
	gw_metrics_observe(m, gw_route_endpoint(r), GW_OUT_ISSUED, 0.001);	/* not counted */
	assert_int_equal(gw_metrics_render(m, &g, buf), 0);
	n = evbuffer_get_length(buf);
	text = malloc(n + 1);
	assert_non_null(text);
	assert_int_equal(evbuffer_copyout(buf, text, n), (ev_ssize_t) n);
	text[n] = '\0';

	p = text;
	for (size_t i = 0; i < sizeof(counted) / sizeof(counted[0]); i++)
	{
		char		want[128];

		snprintf(want, sizeof(want), "bc_gateway_requests_total{endpoint=\"%s\",outcome=\"issued\"} ",
				 counted[i]);
		p = strstr(p, want);
		assert_non_null(p);
	}
	assert_null(strstr(text, "endpoint=\"healthz\""));
	assert_null(strstr(text, "endpoint=\"metrics\""));
	assert_null(strstr(text, "endpoint=\"crl\""));
	assert_non_null(strstr(text, "bc_gateway_requests_total{endpoint=\"join\",outcome=\"refused\"} 1\n"));
	assert_non_null(strstr(text, "bc_gateway_requests_total{endpoint=\"other\",outcome=\"unsupported\"} 1\n"));
	assert_non_null(strstr(text, "bc_gateway_request_duration_seconds_bucket{endpoint=\"join\",le=\"0.005\"} 1\n"));
	assert_non_null(strstr(text, "bc_gateway_request_duration_seconds_count{endpoint=\"spiffe_bundle\"} 0\n"));
	assert_null(strstr(text, "endpoint=\"ssh_krl\""));
	assert_null(strstr(text, "endpoint=\"ssh_host_ca\""));
	/* 17 endpoints x 13 outcomes */
	n = 0;
	for (p = text; (p = strstr(p, "bc_gateway_requests_total{")) != NULL; p++)
		n++;
	assert_int_equal(n, 17 * GW_OUT_COUNT);
	free(text);
	evbuffer_free(buf);
	free(m);
}

/*
 * GET /v1/ocsp/<request>: the row matches its path, '/' and a non-empty tail
 * (slashes and '+' included, as base64 has them), never the bare path;
 * POST /v1/ocsp only the bare path.  The other method is 405 with its Allow.
 */
static void
test_ocsp_tail(void **state)
{
	const struct gw_route *r;
	char		allow[32];

	(void) state;
	assert_int_equal(gw_route_match("GET", "/v1/ocsp/MEIw/a+b==", &r, allow, sizeof(allow)), 200);
	assert_string_equal(r->endpoint, "ocsp_get");
	assert_string_equal(gw_route_tail(r, "/v1/ocsp/MEIw/a+b=="), "MEIw/a+b==");
	assert_int_equal(gw_route_match("POST", "/v1/ocsp", &r, allow, sizeof(allow)), 200);
	assert_string_equal(r->endpoint, "ocsp");
	assert_null(gw_route_tail(r, "/v1/ocsp"));
	assert_int_equal(gw_route_match("GET", "/v1/ocsp", &r, allow, sizeof(allow)), 405);
	assert_string_equal(allow, "POST");
	assert_int_equal(gw_route_match("POST", "/v1/ocsp/MEIw", &r, allow, sizeof(allow)), 405);
	assert_string_equal(allow, "GET");
	assert_int_equal(gw_route_match("GET", "/v1/ocsp/", &r, allow, sizeof(allow)), 404);
	assert_int_equal(gw_route_match("GET", "/v1/ocspx/MEIw", &r, allow, sizeof(allow)), 404);
	assert_int_equal(gw_route_match("GET", "/v1/ocs", &r, allow, sizeof(allow)), 404);
}

/*
 * #48: the metrics listener's table: GET /healthz and GET /metrics (the
 * service's numbers) only, neither rate limited nor counted; any API path
 * is 404 there, another method 405 with Allow: GET.  The API's /metrics
 * stays the gateway's own.
 */
static void
test_metrics_listener_table(void **state)
{
	const struct gw_route *r;
	char		allow[32];

	(void) state;
	assert_int_equal(gw_metrics_nroutes, 2);
	assert_int_equal(gw_route_match_in(gw_metrics_routes, gw_metrics_nroutes, "GET", "/metrics",
									   &r, allow, sizeof(allow)), 200);
	assert_int_equal(r->kind, GW_ROUTE_SERVICE_METRICS);
	assert_int_equal(r->limits, 0);
	assert_int_equal(gw_route_match_in(gw_metrics_routes, gw_metrics_nroutes, "GET", "/healthz",
									   &r, allow, sizeof(allow)), 200);
	assert_int_equal(r->kind, GW_ROUTE_HEALTH);
	assert_int_equal(r->limits, 0);
	assert_int_equal(gw_route_match_in(gw_metrics_routes, gw_metrics_nroutes, "POST", "/metrics",
									   &r, allow, sizeof(allow)), 405);
	assert_string_equal(allow, "GET");
	for (size_t i = 0; i < gw_nroutes; i++)
		if (strcmp(gw_routes[i].path, "/metrics") != 0 && strcmp(gw_routes[i].path, "/healthz") != 0)
			assert_int_equal(gw_route_match_in(gw_metrics_routes, gw_metrics_nroutes,
											   gw_routes[i].method, gw_routes[i].path,
											   &r, allow, sizeof(allow)), 404);
	/* the public listener's /metrics is not the service's */
	assert_int_equal(gw_route_match("GET", "/metrics", &r, allow, sizeof(allow)), 200);
	assert_int_equal(r->kind, GW_ROUTE_METRICS);
	for (size_t i = 0; i < gw_nroutes; i++)
		assert_int_not_equal(gw_routes[i].kind, GW_ROUTE_SERVICE_METRICS);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_route_found),
		cmocka_unit_test(test_relay_statements),
		cmocka_unit_test(test_ocsp_tail),
		cmocka_unit_test(test_unknown_path_404),
		cmocka_unit_test(test_wrong_method_405),
		cmocka_unit_test(test_allow_bounded),
		cmocka_unit_test(test_rows_distinct),
		cmocka_unit_test(test_metrics_endpoints),
		cmocka_unit_test(test_metrics_listener_table),
	};

	return cmocka_run_group_tests_name("gw_routes", tests, NULL, NULL);
}
