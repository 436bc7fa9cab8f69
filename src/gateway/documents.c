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
 *
 * #47 ssh: the OpenSSH KRL (bc_join.ssh_krl(), bytea: kept when it starts
 * with the KRL magic and format version 1, at most --crl-max-size and
 * BC_SSH_KRL_MAX) and the signed SSH document (bc_join.signed_ssh(), JSON)
 * are MAX_AGE documents that a notification on bc_join_crl (a revocation,
 * and so a new KRL) also makes stale; the SSH CA lines (bc_join.ssh_host_ca(),
 * ssh_user_ca(): text, bounded printable lines) change only with the key
 * directory, MAX_AGE alone.  bcd takes the KRL only when its SHA-256 is the
 * signed document's krlSha256, and the CA lines only from that document.
 *
 * #48: bc_join.metrics() (text: the service's own numbers, Prometheus text
 * exposition 0.0.4), current while younger than --metrics-max-age, served
 * while fetches fail until 5 times that old, then not at all; kept when
 * gw_service_metrics_refusal finds nothing wrong (at most 1 MiB, lines a
 * Prometheus parser takes, no bc_gateway_ family).  Only the metrics
 * listener serves it (http.c).
 */
#include "documents.h"
#include "clock.h"
#include "config.h"

#include "bc_protocol.h"

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

/* The start of every OpenSSH KRL (PROTOCOL.krl): the magic, then the format version 1 (uint32, big-endian). */
static const unsigned char ssh_krl_head[] = {'S', 'S', 'H', 'K', 'R', 'L', '\n', '\0', 0, 0, 0, 1};

/* The KRL: bytea in hex form to bytes starting as a KRL, within its bound; see gw_doc_check. */
static const char *
check_ssh_krl(const char *text, size_t text_len, const struct gw_config *cfg, struct gw_doc_copy *copy)
{
	size_t		max = cfg->crl_max_size < BC_SSH_KRL_MAX ? cfg->crl_max_size : BC_SSH_KRL_MAX;
	unsigned char *krl;
	size_t		len = 0;
	const char *why = NULL;

	/* hex form: "\x" and two digits a byte; refuse before decoding anything big */
	if (text == NULL)
		return "bc_join.ssh_krl() returned NULL";
	if (text_len > 2 + 2 * max)
		return "the KRL is larger than --crl-max-size or BC_SSH_KRL_MAX";
	krl = PQunescapeBytea((const unsigned char *) text, &len);
	if (krl == NULL)
		return "out of memory";
	if (len > max)
		why = "the KRL is larger than --crl-max-size or BC_SSH_KRL_MAX";
	else if (len < sizeof(ssh_krl_head) || memcmp(krl, ssh_krl_head, sizeof(ssh_krl_head)) != 0)
		why = "bc_join.ssh_krl() is not an OpenSSH KRL of format 1";
	else if ((copy->body = malloc(len)) == NULL)
		why = "out of memory";
	else
	{
		memcpy(copy->body, krl, len);
		copy->len = len;
	}
	PQfreemem(krl);
	return why;
}

/* The largest text document (the SSH CA lines) accepted from the database. */
#define GW_DOC_TEXT_MAX (64 * 1024)

/*
 * A text document: lines of printable ASCII, none empty, each ending in a
 * newline, at most 64 KiB in all; kept as it is.  See gw_doc_check.
 */
static const char *
check_text(const char *value, size_t len, const struct gw_config *cfg, struct gw_doc_copy *copy)
{
	(void) cfg;
	if (value == NULL || len == 0)
		return "the query returned no lines";
	if (len > GW_DOC_TEXT_MAX)
		return "the document is larger than 64 KiB";
	for (size_t i = 0; i < len; i++)
	{
		unsigned char ch = (unsigned char) value[i];

		if (ch == '\n' ? i == 0 || value[i - 1] == '\n' : ch < 0x20 || ch > 0x7e)
			return "the document is not lines of printable ASCII";
	}
	if (value[len - 1] != '\n')
		return "the document's last line has no newline";
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

/*
 * #47 ssh: the OpenSSH KRL, public as the CRL is (sshd's RevokedKeys, a
 * client's RevokedHostKeys), with an ETag; stale on bc_join_crl.
 */
const struct gw_doc_spec gw_doc_ssh_krl = {
	.name = "ssh_krl",
	.sql = "SELECT bc_join.ssh_krl()",
	.rule = GW_DOC_MAX_AGE,
	.channel = "bc_join_crl",
	.check = check_ssh_krl,
	.content_type = "application/octet-stream",
	.unavailable = "no SSH KRL",
};

/* The CA lines and the KRL's SHA-256, signed by each signing key: what bcd takes up; stale on bc_join_crl. */
const struct gw_doc_spec gw_doc_ssh_signed = {
	.name = "ssh_signed",
	.sql = "SELECT bc_join.signed_ssh()::text",
	.rule = GW_DOC_MAX_AGE,
	.channel = "bc_join_crl",
	.check = check_json,
	.content_type = "application/json",
	.unavailable = "no signed SSH document",
};

/* The SSH CAs' public key lines (@cert-authority, TrustedUserCAKeys), current key first. */
const struct gw_doc_spec gw_doc_ssh_host_ca = {
	.name = "ssh_host_ca",
	.sql = "SELECT bc_join.ssh_host_ca()",
	.rule = GW_DOC_MAX_AGE,
	.check = check_text,
	.content_type = "text/plain",
	.unavailable = "no SSH host CA (ssh-host-ca.key missing?)",
};

const struct gw_doc_spec gw_doc_ssh_user_ca = {
	.name = "ssh_user_ca",
	.sql = "SELECT bc_join.ssh_user_ca()",
	.rule = GW_DOC_MAX_AGE,
	.check = check_text,
	.content_type = "text/plain",
	.unavailable = "no SSH user CA (ssh-user-ca.key missing?)",
};

/* Whether line (n bytes, no newline) names one of the gateway's own families, as a sample or in a comment. */
static int
gateway_family(const char *line, size_t n)
{
	static const char prefix[] = "bc_gateway_";
	static const char *const comments[] = {"# HELP ", "# TYPE "};

	for (size_t k = 0; k < sizeof(comments) / sizeof(comments[0]); k++)
	{
		size_t		c = strlen(comments[k]);

		if (n >= c && memcmp(line, comments[k], c) == 0)
		{
			line += c;
			n -= c;
			break;
		}
	}
	return n >= sizeof(prefix) - 1 && memcmp(line, prefix, sizeof(prefix) - 1) == 0;
}

/* Why text is not bc_join.metrics()'s exposition, or NULL; see documents.h. */
const char *
gw_service_metrics_refusal(const char *text, size_t len)
{
	size_t		start = 0;

	if (text == NULL || len == 0)
		return "bc_join.metrics() returned nothing";
	if (len > GW_SERVICE_METRICS_MAX)
		return "bc_join.metrics() is larger than 1 MiB";
	if (text[len - 1] != '\n')
		return "bc_join.metrics() does not end in a newline";
	for (size_t i = 0; i < len; i++)
	{
		unsigned char ch = (unsigned char) text[i];

		if ((ch < 0x20 && ch != '\n' && ch != '\t') || ch == 0x7f)
			return "bc_join.metrics() holds a control character";
		if (ch != '\n')
			continue;
		/* a line: empty, a comment, or a sample whose name starts as Prometheus' names do */
		if (i > start)
		{
			unsigned char first = (unsigned char) text[start];

			if (first != '#' && first != '_' && first != ':' &&
				!(first >= 'a' && first <= 'z') && !(first >= 'A' && first <= 'Z'))
				return "bc_join.metrics() has a line that is neither a sample nor a comment";
			if (gateway_family(text + start, i - start))
				return "bc_join.metrics() names a bc_gateway_ family";
		}
		start = i + 1;
	}
	return NULL;
}

/* bc_join.metrics(): kept as it is when gw_service_metrics_refusal finds nothing; see gw_doc_check. */
static const char *
check_service_metrics(const char *value, size_t len, const struct gw_config *cfg, struct gw_doc_copy *copy)
{
	const char *why = gw_service_metrics_refusal(value, len);

	(void) cfg;
	if (why != NULL)
		return why;
	copy->body = malloc(len);
	if (copy->body == NULL)
		return "out of memory";
	memcpy(copy->body, value, len);
	copy->len = len;
	return NULL;
}

/* --metrics-max-age in seconds. */
static double
service_metrics_max_age(const struct gw_config *cfg)
{
	return (double) cfg->metrics_max_age_ms / 1000.0;
}

static const struct gw_doc_metric_text service_metrics_text = {
	.fetches = "Calls of bc_join.metrics() by the metrics listener, by result.",
	.answers = "GET /metrics on the metrics listener answered with bc_join.metrics()'s text (served) or without it (unavailable).",
	.age = "Seconds since the fetch of the bc_join.metrics() text kept started.",
	.bytes = "Size of the kept bc_join.metrics() text.",
	.up = "1 when the last call of bc_join.metrics() succeeded (its text is served), else 0.",
};

const struct gw_doc_spec gw_doc_service_metrics = {
	.name = "service_metrics",
	.sql = "SELECT bc_join.metrics()",
	.rule = GW_DOC_MAX_AGE,
	.check = check_service_metrics,
	.content_type = "text/plain; version=0.0.4",
	.unavailable = "no bc_join.metrics() text",
	.log_as = "service metrics",
	.metric_text = &service_metrics_text,
	.max_age = service_metrics_max_age,
	.stale_factor = 5,
};
