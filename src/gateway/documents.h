/*
 * documents.h: the documents the gateway serves from its caches
 * (doc_cache.c): their queries, freshness rules and checks.
 */
#ifndef BC_GATEWAY_DOCUMENTS_H
#define BC_GATEWAY_DOCUMENTS_H

#include "doc_cache.h"

/* GET /v1/crl: the node CA's CRL (DER), LISTEN bc_join_crl plus nextUpdate. */
extern const struct gw_doc_spec gw_doc_crl;

/* GET /v1/service-keys: bc_join.signed_service_keys(), at most --service-keys-max-age old. */
extern const struct gw_doc_spec gw_doc_service_keys;

/* GET /v1/spiffe-bundle: bc_join.spiffe_bundle(), at most --service-keys-max-age old. */
extern const struct gw_doc_spec gw_doc_spiffe_bundle;

/* GET /v1/trust-bundles: bc_join.signed_trust_bundles(), at most --service-keys-max-age old. */
extern const struct gw_doc_spec gw_doc_trust_bundles;

/* #46 oidc: GET /.well-known/openid-configuration and GET /v1/jwks (bc_join.oidc_discovery(), bc_join.jwks()). */
extern const struct gw_doc_spec gw_doc_oidc_discovery;
extern const struct gw_doc_spec gw_doc_jwks;

/*
 * #47 ssh: GET /v1/ssh/krl (bc_join.ssh_krl(), the OpenSSH KRL) and GET
 * /v1/ssh/signed (bc_join.signed_ssh()), at most --service-keys-max-age old
 * and stale on bc_join_crl; GET /v1/ssh/host-ca and /v1/ssh/user-ca
 * (bc_join.ssh_host_ca(), ssh_user_ca(): text/plain), at most
 * --service-keys-max-age old.
 */
extern const struct gw_doc_spec gw_doc_ssh_krl;
extern const struct gw_doc_spec gw_doc_ssh_signed;
extern const struct gw_doc_spec gw_doc_ssh_host_ca;
extern const struct gw_doc_spec gw_doc_ssh_user_ca;

/*
 * #48: bc_join.metrics(), the service's own numbers (Prometheus text), for
 * the metrics listener's GET /metrics only: at most --metrics-max-age old,
 * 1 MiB, checked line by line (gw_service_metrics_refusal).
 */
extern const struct gw_doc_spec gw_doc_service_metrics;

/* The largest text bc_join.metrics() may return. */
#define GW_SERVICE_METRICS_MAX (1024 * 1024)

/*
 * Why text (len bytes) is not taken as bc_join.metrics()'s exposition, or
 * NULL when it is: at most GW_SERVICE_METRICS_MAX, not empty, ending in a
 * newline, no control byte but newline and tab, every line empty, a comment
 * or a sample of a name starting [a-zA-Z_:], and none of the gateway's own
 * families (bc_gateway_*: a second copy of a family fails the whole scrape).
 */
const char *gw_service_metrics_refusal(const char *text, size_t len);

#endif
