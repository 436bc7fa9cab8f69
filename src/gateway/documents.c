/*
 * documents.c: the documents the gateway serves from its caches.
 *
 * The CRL: `SELECT bc_join.crl()` (bytea, text result in hex form), decoded
 * with PQunescapeBytea and kept when it is one DER CRL with a thisUpdate and
 * a nextUpdate still ahead, at most --crl-max-size; stale when a revocation
 * is notified on bc_join_crl (doc_cache.c, the NEXT_UPDATE rule).
 *
 * The signed service keys (bc_join.signed_service_keys(), which signs the
 * document once per signing key: run for every request, a flood of GETs cost
 * the database those signatures and a pool connection each and cut
 * legitimate joins by 30%) and the SPIFFE bundle (bc_join.spiffe_bundle()):
 * JSON text, kept as it is when at most 256 KiB, current while younger than
 * --service-keys-max-age (the MAX_AGE rule: a key or CA rotation is served
 * within that).  The copy is never believed by anyone but bcd or a federating
 * peer, which check it; a stale one does no harm beyond its age.
 */
#include "documents.h"
#include "clock.h"
#include "config.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>
#include <openssl/asn1.h>
#include <openssl/x509.h>

/* The largest JSON document accepted from the database. */
#define GW_DOC_JSON_MAX (256 * 1024)

/* The CRL: bytea in hex form to one DER CRL before its nextUpdate; see gw_doc_check. */
static const char *
check_crl(const char *text, size_t text_len, const struct gw_config *cfg, struct gw_doc_copy *copy)
{
	unsigned char *der;
	size_t		len = 0;
	const unsigned char *p;
	X509_CRL   *crl = NULL;
	time_t		tu,
				nu;
	const char *why = NULL;

	/* hex form: "\x" and two digits a byte; refuse before decoding anything big */
	if (text == NULL)
		return "bc_join.crl() returned NULL";
	if (text_len > 2 + 2 * cfg->crl_max_size)
		return "the CRL is larger than --crl-max-size";
	der = PQunescapeBytea((const unsigned char *) text, &len);
	if (der == NULL)
		return "out of memory";
	if (len > cfg->crl_max_size)
	{
		why = "the CRL is larger than --crl-max-size";
		goto out;
	}
	p = der;
	crl = len > 0 && len <= LONG_MAX ? d2i_X509_CRL(NULL, &p, (long) len) : NULL;
	if (crl == NULL || p != der + len)
	{
		why = "bc_join.crl() is not one DER CRL";
		goto out;
	}
	tu = gw_asn1_epoch(X509_CRL_get0_lastUpdate(crl));
	nu = gw_asn1_epoch(X509_CRL_get0_nextUpdate(crl));
	if (tu == (time_t) -1 || nu == (time_t) -1 || nu <= tu)
	{
		why = "the CRL has no usable thisUpdate/nextUpdate";
		goto out;
	}
	if (difftime(nu, time(NULL)) <= 0)
	{
		why = "the CRL is already past its nextUpdate";
		goto out;
	}
	copy->body = malloc(len);
	if (copy->body == NULL)
	{
		why = "out of memory";
		goto out;
	}
	memcpy(copy->body, der, len);
	copy->len = len;
	copy->this_update = tu;
	copy->next_update = nu;
out:
	X509_CRL_free(crl);
	PQfreemem(der);
	return why;
}

/* A JSON document: kept as it is, when there is one and it is at most 256 KiB; see gw_doc_check. */
static const char *
check_json(const char *value, size_t len, const struct gw_config *cfg, struct gw_doc_copy *copy)
{
	(void) cfg;
	if (value == NULL || len == 0)
		return "the query returned NULL";
	if (len > GW_DOC_JSON_MAX)
		return "the document is larger than 256 KiB";
	copy->body = malloc(len);
	if (copy->body == NULL)
		return "out of memory";
	memcpy(copy->body, value, len);
	copy->len = len;
	return NULL;
}

/* The CRL's metrics, named as they were before the caches were one. */
static const struct gw_doc_metric_text crl_metric_text = {
	.fetches = "CRL fetches from the database, by result.",
	.answers_name = "requests",
	.answers = "GET /v1/crl answered, by result.",
	.age = "Seconds since the cached CRL was fetched.",
	.next_update = "Seconds until the cached CRL's nextUpdate.",
	.bytes = "Size of the cached CRL (DER).",
};

const struct gw_doc_spec gw_doc_crl = {
	.name = "crl",
	.sql = "SELECT bc_join.crl()",
	.rule = GW_DOC_NEXT_UPDATE,
	.channel = "bc_join_crl",
	.check = check_crl,
	.content_type = "application/pkix-crl",
	.unavailable = "no CRL within its nextUpdate",
	.log_as = "crl",
	.metric_text = &crl_metric_text,
};

const struct gw_doc_spec gw_doc_service_keys = {
	.name = "service_keys",
	.sql = "SELECT bc_join.signed_service_keys()::text",
	.rule = GW_DOC_MAX_AGE,
	.check = check_json,
	.content_type = "application/json",
	.unavailable = "no signed service keys",
};

const struct gw_doc_spec gw_doc_spiffe_bundle = {
	.name = "spiffe_bundle",
	.sql = "SELECT bc_join.spiffe_bundle()::text",
	.rule = GW_DOC_MAX_AGE,
	.check = check_json,
	.content_type = "application/json",
	.unavailable = "no SPIFFE bundle",
};

/* The federated domains' bundles (#46): signed, checked by bcd as the service keys are. */
const struct gw_doc_spec gw_doc_trust_bundles = {
	.name = "trust_bundles",
	.sql = "SELECT bc_join.signed_trust_bundles()::text",
	.rule = GW_DOC_MAX_AGE,
	.check = check_json,
	.content_type = "application/json",
	.unavailable = "no signed trust bundles",
};

/*
 * The OIDC documents (issue 46): public, read by relying parties (AWS IAM,
 * Vault, go-oidc) and by a browser's script (hence CORS, as SPIRE's
 * oidc-discovery-provider); 503 while bc_join.jwt_issuer is not set (the
 * fetch's SQLSTATE and message in the log).  Like the bundle, a copy is
 * checked by whoever uses it (the JWT's signature against these keys, its
 * iss against the issuer over the issuer's HTTPS).
 */
const struct gw_doc_spec gw_doc_oidc_discovery = {
	.name = "oidc_discovery",
	.sql = "SELECT bc_join.oidc_discovery()::text",
	.rule = GW_DOC_MAX_AGE,
	.check = check_json,
	.content_type = "application/json",
	.unavailable = "no OIDC discovery document (bc_join.jwt_issuer not set?)",
	.cors = "*",
};

const struct gw_doc_spec gw_doc_jwks = {
	.name = "jwks",
	.sql = "SELECT bc_join.jwks()::text",
	.rule = GW_DOC_MAX_AGE,
	.check = check_json,
	.content_type = "application/json",
	.unavailable = "no JWKS (bc_join.jwt_issuer or jwt-svid.key missing?)",
	.cors = "*",
};
