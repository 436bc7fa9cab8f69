/*
 * bc-join-federate: fetches the bundles of the trust domains this one
 * federates with (#46; docs/operator.md, "Federation") and hands each body
 * to the database, which judges it.
 *
 *   bc-join-federate --db CONNINFO [--once] [--ca-file PEM] [--min-interval S]
 *
 * It runs on a trusted host as a role that is a member of bc_join_federation
 * and nothing else: bc_join.federation_due() says what is due (endpoint URL,
 * profile, the endpoint's SPIFFE ID and the bundle that authenticates it),
 * bc_join.store_fetched_bundle() takes the body or why there is none.  It
 * never parses a bundle to decide anything but how to authenticate an
 * https_spiffe endpoint: the gateway never fetches, and what this program
 * fetched is judged where the keys are (docs/security.md, "Federation").
 *
 * The fetch (libcurl, OpenSSL): https only, redirects too (at most 3, the
 * configured URL fetched again each time), 10 s in all, a body of at most
 * BC_SPIFFE_BUNDLE_MAX bytes (one byte more is read and handed on, so that
 * the database refuses it as too large, recorded).
 *   https_web     the server's certificate verified against the system's
 *                 roots (or --ca-file) and its host name;
 *   https_spiffe  against the x509-svid roots of the endpoint ID's domain
 *                 only (SSL_CTX callback: a store of those), no host name,
 *                 and the leaf must be an SVID with exactly one URI SAN,
 *                 the configured SPIFFE ID.
 * One JSON line a domain on stdout: what the database answered.
 */
#include "bc_common.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#define FETCH_TIMEOUT_S 10
#define FETCH_CONNECT_TIMEOUT_S 5
#define FETCH_MAX_REDIRECTS 3

static volatile sig_atomic_t stopping = 0;

/* What one fetch collects. */
struct fetch
{
	char	   *body;
	size_t		len;
	bool		over;			/* more than BC_SPIFFE_BUNDLE_MAX bytes came */
	/* https_spiffe */
	const char *spiffe_id;		/* the endpoint's SPIFFE ID */
	STACK_OF(X509) *roots;		/* the x509-svid roots of its trust domain */
	char		why[256];		/* why the peer's certificate was refused */
};

/* The fetch whose handshake is running (one at a time: this program is single-threaded). */
static struct fetch *current;

/* SIGTERM, SIGINT: finish the domain in hand, then stop. */
static void
on_signal(int sig)
{
	(void) sig;
	stopping = 1;
}

/* libcurl's write callback: keep at most BC_SPIFFE_BUNDLE_MAX + 1 bytes, then stop the transfer. */
static size_t
on_body(char *data, size_t size, size_t n, void *arg)
{
	struct fetch *f = arg;
	size_t		got = size * n;
	size_t		room = BC_SPIFFE_BUNDLE_MAX + 1 - f->len;
	size_t		take = got < room ? got : room;

	if (take > 0)
	{
		memcpy(f->body + f->len, data, take);
		f->len += take;
	}
	if (f->len > BC_SPIFFE_BUNDLE_MAX)
	{
		f->over = true;
		return 0;				/* CURLE_WRITE_ERROR: nothing more is read */
	}
	return got;
}

/*
 * The leaf of an https_spiffe endpoint: an SVID (not a CA) with exactly one
 * URI SAN, the configured SPIFFE ID.  Verified after OpenSSL built the chain
 * to one of the bundle's roots.
 */
static bool
leaf_is_endpoint(X509 *leaf, const char *id, char *why, size_t whylen)
{
	GENERAL_NAMES *sans = X509_get_ext_d2i(leaf, NID_subject_alt_name, NULL, NULL);
	int			uris = 0;
	bool		match = false;

	if ((X509_get_extension_flags(leaf) & EXFLAG_CA) != 0)
	{
		snprintf(why, whylen, "the endpoint's certificate is a CA, not an X509-SVID");
		GENERAL_NAMES_free(sans);
		return false;
	}
	for (int i = 0; sans != NULL && i < sk_GENERAL_NAME_num(sans); i++)
	{
		GENERAL_NAME *g = sk_GENERAL_NAME_value(sans, i);

		if (g->type != GEN_URI)
			continue;
		uris++;
		if ((size_t) ASN1_STRING_length(g->d.uniformResourceIdentifier) == strlen(id) &&
			memcmp(ASN1_STRING_get0_data(g->d.uniformResourceIdentifier), id, strlen(id)) == 0)
			match = true;
	}
	GENERAL_NAMES_free(sans);
	if (uris != 1 || !match)
	{
		snprintf(why, whylen, "the endpoint's X509-SVID is not %s (%d URI SANs%s)", id, uris,
				 uris == 1 ? ", another ID" : "");
		return false;
	}
	return true;
}

/* OpenSSL's verify callback of an https_spiffe handshake: the chain, then the leaf's ID. */
static int
spiffe_verify(int ok, X509_STORE_CTX *ctx)
{
	if (current == NULL)
		return 0;
	if (!ok)
	{
		if (current->why[0] == '\0')
			snprintf(current->why, sizeof(current->why),
					 "the endpoint's certificate does not chain to the bundle of its trust domain: %s",
					 X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx)));
		return 0;
	}
	if (X509_STORE_CTX_get_error_depth(ctx) != 0)
		return 1;
	return leaf_is_endpoint(X509_STORE_CTX_get_current_cert(ctx), current->spiffe_id, current->why,
							sizeof(current->why)) ? 1 : 0;
}

/*
 * libcurl's SSL_CTX callback for https_spiffe: replace the store (the
 * system's roots) by one holding only the bundle's x509-svid roots, each a
 * trust anchor (SPIFFE bundles hold anchors, not necessarily self-signed),
 * and check the leaf in spiffe_verify.
 */
static CURLcode
spiffe_ctx(CURL *curl, void *sslctx, void *arg)
{
	struct fetch *f = arg;
	SSL_CTX    *ctx = sslctx;
	X509_STORE *store = X509_STORE_new();

	(void) curl;
	if (store == NULL)
		return CURLE_OUT_OF_MEMORY;
	for (int i = 0; i < sk_X509_num(f->roots); i++)
		if (!X509_STORE_add_cert(store, sk_X509_value(f->roots, i)))
		{
			X509_STORE_free(store);
			return CURLE_SSL_CERTPROBLEM;
		}
	X509_STORE_set_flags(store, X509_V_FLAG_PARTIAL_CHAIN);
	SSL_CTX_set_cert_store(ctx, store);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, spiffe_verify);
	return CURLE_OK;
}

/*
 * Fetch url by profile; the body in f, or NULL and why (error, for the
 * database).  NULL error and a body: hand the body on.
 */
static void
fetch(const char *url, const char *profile, const char *spiffe_id, const char *endpoint_bundle,
	  const char *ca_file, struct fetch *f, char *error, size_t errlen)
{
	CURL	   *c = curl_easy_init();
	char		curl_err[CURL_ERROR_SIZE] = "";
	CURLcode	rc;
	long		status = 0;
	bool		spiffe = strcmp(profile, "https_spiffe") == 0;

	memset(f, 0, sizeof(*f));
	error[0] = '\0';
	f->body = malloc(BC_SPIFFE_BUNDLE_MAX + 1);
	if (c == NULL || f->body == NULL)
	{
		snprintf(error, errlen, "out of memory");
		goto out;
	}
	if (spiffe)
	{
		if (spiffe_id == NULL || endpoint_bundle == NULL ||
			bc_spiffe_bundle_x509_roots(endpoint_bundle, strlen(endpoint_bundle), &f->roots) != BC_OK ||
			sk_X509_num(f->roots) == 0)
		{
			snprintf(error, errlen, "no x509-svid root of the endpoint's trust domain to authenticate %s",
					 spiffe_id != NULL ? spiffe_id : "it");
			goto out;
		}
		f->spiffe_id = spiffe_id;
	}
	else if (strcmp(profile, "https_web") != 0)
	{
		snprintf(error, errlen, "profile %s is not fetched", profile);
		goto out;
	}
	if (curl_easy_setopt(c, CURLOPT_URL, url) != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "https") != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "https") != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L) != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_MAXREDIRS, (long) FETCH_MAX_REDIRECTS) != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_TIMEOUT, (long) FETCH_TIMEOUT_S) != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, (long) FETCH_CONNECT_TIMEOUT_S) != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L) != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_SSL_SESSIONID_CACHE, 0L) != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L) != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, spiffe ? 0L : 2L) != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_ERRORBUFFER, curl_err) != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body) != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_WRITEDATA, f) != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_USERAGENT, "bc-join-federate") != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL) != CURLE_OK ||
		(ca_file != NULL && !spiffe && curl_easy_setopt(c, CURLOPT_CAINFO, ca_file) != CURLE_OK) ||
		(spiffe && (curl_easy_setopt(c, CURLOPT_SSL_CTX_FUNCTION, spiffe_ctx) != CURLE_OK ||
					curl_easy_setopt(c, CURLOPT_SSL_CTX_DATA, f) != CURLE_OK)))
	{
		snprintf(error, errlen, "libcurl refused an option (built without OpenSSL or https?)");
		goto out;
	}
	current = f;
	rc = curl_easy_perform(c);
	current = NULL;
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	if (rc != CURLE_OK && !f->over)
		snprintf(error, errlen, "%s%s%s", f->why[0] ? f->why : curl_easy_strerror(rc),
				 f->why[0] == '\0' && curl_err[0] ? ": " : "", f->why[0] == '\0' ? curl_err : "");
	else if (status != 200)
		snprintf(error, errlen, "HTTP status %ld", status);
	else if (memchr(f->body, '\0', f->len) != NULL)
		snprintf(error, errlen, "the body holds a NUL byte: not a JSON text");
	/* else the body, over BC_SPIFFE_BUNDLE_MAX too: the database refuses that as too large */
out:
	ERR_clear_error();
	if (c != NULL)
		curl_easy_cleanup(c);
	sk_X509_pop_free(f->roots, X509_free);
	f->roots = NULL;
}

/* Print one JSON line: {"trustDomain": td, key: value (JSON text or a string)}. */
static void
report(const char *td, const char *key, const char *json_value, const char *string_value)
{
	json_t	   *o = json_object();
	json_t	   *v = json_value != NULL ? json_loads(json_value, 0, NULL) : json_string(string_value);
	char	   *s;

	json_object_set_new(o, "trustDomain", json_string(td));
	json_object_set_new(o, key, v != NULL ? v : json_null());
	s = json_dumps(o, JSON_COMPACT);
	if (s != NULL)
		printf("%s\n", s);
	fflush(stdout);
	free(s);
	json_decref(o);
}

/* Hand one domain's body or error to the database; false when the database failed. */
static bool
store(PGconn *db, const char *td, const char *body, size_t len, const char *error)
{
	const char *sql = "SELECT bc_join.store_fetched_bundle($1, $2, $3)::text";
	char	   *text = NULL;
	const char *params[3];
	PGresult   *r;
	bool		ok;

	if (body != NULL)
	{
		text = malloc(len + 1);
		if (text == NULL)
			return false;
		memcpy(text, body, len);
		text[len] = '\0';
	}
	params[0] = td;
	params[1] = text;
	params[2] = error;
	r = PQexecParams(db, sql, 3, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(r) != PGRES_TUPLES_OK && text != NULL &&
		strcmp(PQresultErrorField(r, PG_DIAG_SQLSTATE) ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : "",
			   "22021") == 0)
	{
		/* Not text in the database's encoding: said so, as the fetch's error. */
		PQclear(r);
		params[1] = NULL;
		params[2] = "the body is not UTF-8 text";
		r = PQexecParams(db, sql, 3, NULL, params, NULL, NULL, 0);
	}
	ok = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
	if (ok)
		report(td, "result", PQgetvalue(r, 0, 0), NULL);
	else
		report(td, "dbError", NULL, PQerrorMessage(db));
	PQclear(r);
	free(text);
	return ok;
}

/* One pass over what is due; -1 when the database failed, else how many domains were fetched. */
static int
pass(PGconn *db, const char *ca_file)
{
	PGresult   *due = PQexec(db, "SELECT trust_domain, endpoint_url, profile, endpoint_spiffe_id, "
							 "endpoint_bundle::text FROM bc_join.federation_due()");
	int			n;

	if (PQresultStatus(due) != PGRES_TUPLES_OK)
	{
		fprintf(stderr, "bc-join-federate: bc_join.federation_due(): %s", PQerrorMessage(db));
		PQclear(due);
		return -1;
	}
	n = PQntuples(due);
	for (int i = 0; i < n && !stopping; i++)
	{
		struct fetch f;
		char		error[512];
		const char *td = PQgetvalue(due, i, 0);

		fetch(PQgetvalue(due, i, 1), PQgetvalue(due, i, 2),
			  PQgetisnull(due, i, 3) ? NULL : PQgetvalue(due, i, 3),
			  PQgetisnull(due, i, 4) ? NULL : PQgetvalue(due, i, 4), ca_file, &f, error, sizeof(error));
		if (!store(db, td, error[0] ? NULL : f.body, f.len, error[0] ? error : NULL))
			n = -1;
		free(f.body);
		if (n < 0)
			break;
	}
	PQclear(due);
	return n;
}

/* The usage, to stream. */
static void
usage(FILE *stream)
{
	fprintf(stream,
			"usage: bc-join-federate --db CONNINFO [--once] [--ca-file PEM] [--min-interval S]\n"
			"Fetches the bundles of the federated trust domains that are due\n"
			"(bc_join.federation_due()) and hands each to bc_join.store_fetched_bundle(),\n"
			"as a role that is a member of bc_join_federation.\n"
			"  --db CONNINFO      the bc_join database (a libpq connection string)\n"
			"  --once             one pass over what is due, then exit (a systemd timer's)\n"
			"  --ca-file PEM      the roots of https_web endpoints (default: the system's)\n"
			"  --min-interval S   seconds between passes when looping (default 30, 1..3600)\n"
			"One JSON line per domain on stdout: what the database answered.\n"
			"Exit: 0 done (or stopped by SIGTERM), 1 the database failed, 2 usage.\n");
}

/* Parse the options, then pass over what is due: once, or every --min-interval seconds until SIGTERM. */
int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"db", required_argument, NULL, 'd'},
		{"once", no_argument, NULL, 'o'},
		{"ca-file", required_argument, NULL, 'c'},
		{"min-interval", required_argument, NULL, 'i'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	const char *conninfo = NULL;
	const char *ca_file = NULL;
	bool		once = false;
	long		interval = 30;
	int			opt;
	int			rc = 0;
	PGconn	   *db = NULL;
	struct sigaction sa;

	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1)
	{
		char	   *end;

		switch (opt)
		{
			case 'd':
				conninfo = optarg;
				break;
			case 'o':
				once = true;
				break;
			case 'c':
				ca_file = optarg;
				break;
			case 'i':
				errno = 0;
				interval = strtol(optarg, &end, 10);
				if (errno != 0 || *end != '\0' || interval < 1 || interval > 3600)
				{
					fprintf(stderr, "bc-join-federate: --min-interval takes 1 to 3600 seconds\n");
					return 2;
				}
				break;
			case 'h':
				usage(stdout);
				return 0;
			default:
				usage(stderr);
				return 2;
		}
	}
	if (conninfo == NULL || optind != argc)
	{
		usage(stderr);
		return 2;
	}
	if (ca_file != NULL && access(ca_file, R_OK) != 0)
	{
		fprintf(stderr, "bc-join-federate: --ca-file %s: %s\n", ca_file, strerror(errno));
		return 2;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
	{
		fprintf(stderr, "bc-join-federate: libcurl did not start\n");
		return 1;
	}
	while (!stopping)
	{
		if (db == NULL || PQstatus(db) != CONNECTION_OK)
		{
			PQfinish(db);
			db = PQconnectdb(conninfo);
			if (PQstatus(db) != CONNECTION_OK)
				fprintf(stderr, "bc-join-federate: cannot connect to the database: %s", PQerrorMessage(db));
		}
		if (PQstatus(db) == CONNECTION_OK && pass(db, ca_file) < 0)
			rc = 1;
		else if (PQstatus(db) != CONNECTION_OK)
			rc = 1;
		else
			rc = 0;
		if (once)
			break;
		for (long s = 0; s < interval && !stopping; s++)
			sleep(1);
	}
	PQfinish(db);
	curl_global_cleanup();
	return rc;
}
