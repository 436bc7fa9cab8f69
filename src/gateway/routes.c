/*
 * routes.c: the gateway's one route table.
 *
 * Every path the gateway answers is a row here; dispatch (http.c), the 405's
 * Allow header, the endpoint of the metrics and logs, the rate limit and the
 * Cache-Control all come from it.  A relayed POST is one row with its
 * statement; a cached document is one row naming its document (documents.c).
 * The order of the rows is the order of the endpoints and of the documents'
 * metrics in /metrics.
 */
#include "routes.h"
#include "config.h"
#include "documents.h"

#include "bc_protocol.h"
#include "ocsp.h"

#include <stdio.h>
#include <string.h>

/* Relayed statements: column 0 the function's result, relayed as is; column 1 its status, for the mapping. */
#define RELAY(fn) "SELECT t.r, t.r->>'status' FROM " fn "($1::jsonb) AS t(r)"

/* Rate limited and counted: what a client on the Internet calls. */
#define API (GW_ROUTE_RATE_LIMITED | GW_ROUTE_OBSERVED)

const struct gw_route gw_routes[] = {
	/* probes and public data: never rate limited, not counted, logged at debug */
	{"GET", "/healthz", "healthz", GW_ROUTE_HEALTH, NULL, NULL, 0, NULL, 0},
	{"GET", "/metrics", "metrics", GW_ROUTE_METRICS, NULL, NULL, 0, NULL, 0},
	{"GET", "/v1/crl", "crl", GW_ROUTE_DOCUMENT, NULL, &gw_doc_crl, 0, NULL, 0},

	{"POST", BC_PATH_JOIN, "join", GW_ROUTE_RELAY, RELAY("public.bc_join"), NULL, API, NULL, 0},
	{"POST", BC_PATH_RENEW, "renew", GW_ROUTE_RELAY, RELAY("bc_join.renew"), NULL, API, NULL, 0},
	{"POST", BC_PATH_SESSION, "session", GW_ROUTE_RELAY, RELAY("bc_join.issue_session"), NULL, API, NULL, 0},
	{"POST", BC_PATH_COMMANDS, "commands", GW_ROUTE_RELAY, RELAY("bc_join.fetch_commands"), NULL, API, NULL, 0},
	{"POST", BC_PATH_COMMANDS_COMPLETE, "commands_complete", GW_ROUTE_RELAY,
	RELAY("bc_join.complete_command"), NULL, API, NULL, 0},
	{"POST", BC_PATH_SITE_EPOCH, "site_epoch", GW_ROUTE_RELAY, RELAY("bc_join.site_epoch"), NULL, API, NULL, 0},

	/*
	 * {"anchor": <the JWS of bc_join.audit_anchor()>}, so an outsider can keep
	 * anchors and later detect a rewritten issuance log (tools/bc-audit-verify
	 * --anchor); cacheable for a minute.  The parameter is unused ("").
	 */
	{"GET", BC_PATH_AUDIT_ANCHOR, "audit_anchor", GW_ROUTE_QUERY,
		"SELECT jsonb_build_object('anchor', bc_join.audit_anchor())::text, 'issued' "
		"WHERE $1::text IS NOT NULL", NULL, API, "max-age=60", 0},

	{"GET", BC_PATH_SERVICE_KEYS, "service_keys", GW_ROUTE_DOCUMENT, NULL, &gw_doc_service_keys, API, NULL, 0},
	{"POST", BC_PATH_JWT_SVID, "jwt_svid", GW_ROUTE_RELAY, RELAY("bc_join.issue_jwt_svid"), NULL, API, NULL, 0},
	{"GET", BC_PATH_SPIFFE_BUNDLE, "spiffe_bundle", GW_ROUTE_DOCUMENT, NULL, &gw_doc_spiffe_bundle, API, NULL, 0},

	/*
	 * Continuous attestation (issue 44): a quote, the UEFI event log and an
	 * increment of the IMA list, so a body up to BC_ATTEST_REQUEST_MAX.
	 */
	{"POST", BC_PATH_ATTEST, "attest", GW_ROUTE_RELAY, RELAY("bc_join.attest"), NULL, API, NULL,
	BC_ATTEST_REQUEST_MAX},

	/*
	 * The OCSP responder (issue 45; RFC 6960 A.1, RFC 5019): the DER request
	 * as the body, or url-encoded base64 in the path; answered by
	 * bc_join.ocsp_response() through the per-CertID cache (ocsp_cache.c),
	 * which sets each answer's own Cache-Control.
	 */
	{"POST", "/v1/ocsp", "ocsp", GW_ROUTE_OCSP, NULL, NULL, API, NULL, BC_OCSP_REQUEST_MAX},
	{"GET", "/v1/ocsp", "ocsp_get", GW_ROUTE_OCSP, NULL, NULL, API | GW_ROUTE_TAIL, NULL, 0},

	/*
	 * Federation (#46): the federated trust domains' bundles, as the database
	 * accepted them (bc-join-federate fetches, never the gateway), signed by
	 * the signing keys, from the document cache.
	 */
	{"GET", BC_PATH_TRUST_BUNDLES, "trust_bundles", GW_ROUTE_DOCUMENT, NULL, &gw_doc_trust_bundles, API, NULL, 0},

	/*
	 * #46 oidc: OIDC discovery of the JWT-SVID issuer (bc_join.jwt_issuer,
	 * an origin, so these paths are fixed): public documents, never rate
	 * limited (as /v1/crl), with Access-Control-Allow-Origin: *.
	 */
	{"GET", BC_PATH_OIDC_DISCOVERY, "oidc_discovery", GW_ROUTE_DOCUMENT, NULL,
	&gw_doc_oidc_discovery, 0, NULL, 0},
	{"GET", BC_PATH_JWKS, "jwks", GW_ROUTE_DOCUMENT, NULL, &gw_doc_jwks, 0, NULL, 0},

	/*
	 * #47 ssh: a node's host certificate (a proof by its node key), relayed;
	 * the KRL and the CA lines, public as /v1/crl (sshd's RevokedKeys, a
	 * client's @cert-authority); the signed document bcd takes them from.
	 */
	{"POST", BC_PATH_SSH_HOST, "ssh_host", GW_ROUTE_RELAY, RELAY("bc_join.issue_ssh_host_cert"), NULL, API,
	NULL, 0},
	{"GET", BC_PATH_SSH_KRL, "ssh_krl", GW_ROUTE_DOCUMENT, NULL, &gw_doc_ssh_krl, 0, NULL, 0},
	{"GET", BC_PATH_SSH_SIGNED, "ssh_signed", GW_ROUTE_DOCUMENT, NULL, &gw_doc_ssh_signed, API, NULL, 0},
	{"GET", BC_PATH_SSH_HOST_CA, "ssh_host_ca", GW_ROUTE_DOCUMENT, NULL, &gw_doc_ssh_host_ca, 0, NULL, 0},
	{"GET", BC_PATH_SSH_USER_CA, "ssh_user_ca", GW_ROUTE_DOCUMENT, NULL, &gw_doc_ssh_user_ca, 0, NULL, 0},
};

const size_t gw_nroutes = sizeof(gw_routes) / sizeof(gw_routes[0]);

_Static_assert(sizeof(gw_routes) / sizeof(gw_routes[0]) <= GW_ROUTES_MAX,
			   "more routes than GW_ROUTES_MAX");

/*
 * #48: the metrics listener (--metrics-listen): the probes only, its
 * /metrics with the service's own numbers (tenants, refusal reasons), which
 * the public listener's /metrics never shows.
 */
const struct gw_route gw_metrics_routes[] = {
	{"GET", "/healthz", "healthz", GW_ROUTE_HEALTH, NULL, NULL, 0, NULL, 0},
	{"GET", "/metrics", "metrics", GW_ROUTE_SERVICE_METRICS, NULL, NULL, 0, NULL, 0},
};

const size_t gw_metrics_nroutes = sizeof(gw_metrics_routes) / sizeof(gw_metrics_routes[0]);

/* The route of a request; see routes.h. */
int
gw_route_match(const char *method, const char *path, const struct gw_route **route,
			   char *allow, size_t allow_len)
{
	return gw_route_match_in(gw_routes, gw_nroutes, method, path, route, allow, allow_len);
}

/* The route of a request in table; see routes.h. */
int
gw_route_match_in(const struct gw_route *table, size_t n, const char *method, const char *path,
				  const struct gw_route **route, char *allow, size_t allow_len)
{
	size_t		used = 0;

	*route = NULL;
	if (allow_len > 0)
		allow[0] = '\0';
	if (path == NULL)
		return 404;
	for (size_t i = 0; i < n; i++)
	{
		const struct gw_route *r = &table[i];

		if ((r->limits & GW_ROUTE_TAIL) != 0 ? gw_route_tail(r, path) == NULL :
			strcmp(r->path, path) != 0)
			continue;
		if (method != NULL && strcmp(r->method, method) == 0)
		{
			*route = r;
			return 200;
		}
		if (*route == NULL)
			*route = r;
		if (used < allow_len)
		{
			int			n = snprintf(allow + used, allow_len - used, "%s%s",
									 used > 0 ? ", " : "", r->method);

			used = n < 0 ? allow_len : used + (size_t) n;
		}
	}
	return *route != NULL ? 405 : 404;
}

/* A GW_ROUTE_TAIL row's tail in path; see routes.h. */
const char *
gw_route_tail(const struct gw_route *route, const char *path)
{
	size_t		n;

	if (route == NULL || path == NULL || (route->limits & GW_ROUTE_TAIL) == 0)
		return NULL;
	n = strlen(route->path);
	if (strncmp(path, route->path, n) != 0 || path[n] != '/' || path[n + 1] == '\0')
		return NULL;
	return path + n + 1;
}

/* The largest body of any row; see routes.h. */
size_t
gw_routes_max_body(void)
{
	size_t		max = GW_MAX_BODY;

	for (size_t i = 0; i < gw_nroutes; i++)
		if (gw_routes[i].max_body > max)
			max = gw_routes[i].max_body;
	return max;
}

/* The endpoint of a row; see routes.h. */
int
gw_route_endpoint(const struct gw_route *route)
{
	return route != NULL ? (int) (route - gw_routes) : GW_ENDPOINT_OTHER;
}

/* The label of an endpoint; see routes.h. */
const char *
gw_endpoint_name(int endpoint)
{
	return endpoint >= 0 && (size_t) endpoint < gw_nroutes ? gw_routes[endpoint].endpoint : "other";
}
