/*
 * metrics.c: the numbers the socket server publishes, as the JSON of
 * {"op":"status"} (what `bcd status` prints) and as Prometheus text (the
 * answer to {"op":"metrics"}, `bcd status --prometheus`, and the file
 * --metrics-file, rewritten atomically when a number changes).  Both come
 * from one bcd_counters, so they never disagree.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bc_common.h"
#include "core/fileio.h"
#include "core/metrics.h"

/* Callers answered with an error other than busy. */
static unsigned long
refused_total(const bcd_counters *c)
{
	unsigned long n = 0;
	int			i;

	for (i = 0; i < BCD_CODE_COUNT; i++)
		if (i != BCD_CODE_OK && i != BCD_CODE_BUSY)
			n += c->answers[i];
	return n;
}

/* The status document: depth, in flight, answers, provisionings, the node credential. */
json_t *
bcd_status_json(const bcd_counters *c, const bcd_node_snapshot *node)
{
	json_t	   *doc = json_object();
	json_t	   *answers = json_object();
	json_t	   *prov = json_object();
	json_t	   *jwt = json_object();
	unsigned long total = 0;
	int			bad = doc == NULL || answers == NULL || prov == NULL || jwt == NULL;
	int			i;

	for (i = 0; !bad && i < BCD_CODE_COUNT; i++)
		bad |= json_object_set_new(answers, bcd_code_name((bcd_code) i),
								   json_integer((json_int_t) c->answers[i])) != 0;
	for (i = 0; !bad && i < BCD_RESULT_COUNT; i++)
	{
		total += c->provisionings[i];
		bad |= json_object_set_new(prov, bcd_job_result_name((bcd_job_result) i),
								   json_integer((json_int_t) c->provisionings[i])) != 0;
		bad |= json_object_set_new(jwt, bcd_job_result_name((bcd_job_result) i),
								   json_integer((json_int_t) c->jwt_fetches[i])) != 0;
	}
	bad |= json_object_set_new(doc, "ok", json_true()) != 0;
	bad |= json_object_set_new(doc, "waiting", json_integer(c->waiting)) != 0;
	bad |= json_object_set_new(doc, "queued", json_integer(c->queued)) != 0;
	bad |= json_object_set_new(doc, "inFlight", json_integer(c->in_flight)) != 0;
	bad |= json_object_set_new(doc, "maxProvisioning", json_integer(c->max_provisioning)) != 0;
	bad |= json_object_set_new(doc, "maxQueue", json_integer(c->max_queue)) != 0;
	bad |= json_object_set_new(doc, "served",
							   json_integer((json_int_t) c->answers[BCD_CODE_OK])) != 0;
	bad |= json_object_set_new(doc, "refused", json_integer((json_int_t) refused_total(c))) != 0;
	bad |= json_object_set_new(doc, "busy",
							   json_integer((json_int_t) c->answers[BCD_CODE_BUSY])) != 0;
	bad |= json_object_set_new(doc, "provisionings", json_integer((json_int_t) total)) != 0;
	/* json_object_set_new takes answers and prov even when it fails */
	bad |= json_object_set_new(doc, "answers", answers) != 0;
	bad |= json_object_set_new(doc, "provisioningOutcomes", prov) != 0;
	bad |= json_object_set_new(doc, "jwtSvidFetches", jwt) != 0;
	bad |= json_object_set_new(doc, "quarantined", json_boolean(c->quarantined)) != 0;
	if (c->revoked)
	{
		char		at[32] = "?";
		time_t		t = (time_t) c->revoked_at;
		struct tm	tm;

		if (gmtime_r(&t, &tm) != NULL)
			strftime(at, sizeof(at), "%Y-%m-%dT%H:%M:%SZ", &tm);
		bad |= json_object_set_new(doc, "revoked",
								   json_pack("{s:s, s:s, s:s, s:s}", "serial", c->revoked_serial,
											 "reason", c->revoked_reason, "at", at,
											 "source", c->revoked_source)) != 0;
	}
	else
		bad |= json_object_set_new(doc, "revoked", json_false()) != 0;
	bad |= json_object_set_new(doc, "crlHeld", json_boolean(c->crl_gen != 0)) != 0;
	bad |= json_object_set_new(doc, "nodeCredential", node->present ?
							   json_pack("{s:b, s:s, s:s, s:s}", "present", 1,
										 "spiffeId", node->spiffe_id, "serial", node->serial,
										 "notAfter", node->not_after_text) :
							   json_pack("{s:b}", "present", 0)) != 0;
	if (bad)
	{
		json_decref(doc);
		return NULL;
	}
	return doc;
}

/* Append printf output to the growing buffer *buf (length *len); 0 on success. */
static int
append(char **buf, size_t *len, size_t *cap, const char *fmt,...)
	__attribute__((format(printf, 4, 5)));

/* Append printf output to the growing buffer *buf (length *len); 0 on success. */
static int
append(char **buf, size_t *len, size_t *cap, const char *fmt,...)
{
	va_list		ap;
	int			n;
	char	   *grown;

	for (;;)
	{
		va_start(ap, fmt);
		n = vsnprintf(*buf + *len, *cap - *len, fmt, ap);
		va_end(ap);
		if (n < 0)
			return -1;
		if ((size_t) n < *cap - *len)
		{
			*len += (size_t) n;
			return 0;
		}
		grown = realloc(*buf, *cap * 2);
		if (grown == NULL)
			return -1;
		*buf = grown;
		*cap *= 2;
	}
}

/* The numbers in Prometheus text format (malloc()ed), or NULL. */
char *
bcd_metrics_text(const bcd_counters *c, const bcd_node_snapshot *node)
{
	size_t		cap = 4096;
	size_t		len = 0;
	char	   *buf = malloc(cap);
	int			bad = buf == NULL;
	int			i;

	if (bad)
		return NULL;
	buf[0] = '\0';
	bad |= append(&buf, &len, &cap,
				  "# HELP bcd_session_waiting Callers waiting for a session credential (the queue depth).\n"
				  "# TYPE bcd_session_waiting gauge\nbcd_session_waiting %ld\n"
				  "# HELP bcd_session_queued Provisionings waiting for a free worker.\n"
				  "# TYPE bcd_session_queued gauge\nbcd_session_queued %ld\n"
				  "# HELP bcd_session_in_flight Provisionings running.\n"
				  "# TYPE bcd_session_in_flight gauge\nbcd_session_in_flight %ld\n"
				  "# HELP bcd_session_max_in_flight --max-provisioning.\n"
				  "# TYPE bcd_session_max_in_flight gauge\nbcd_session_max_in_flight %ld\n"
				  "# HELP bcd_session_max_waiting --max-queue.\n"
				  "# TYPE bcd_session_max_waiting gauge\nbcd_session_max_waiting %ld\n"
				  "# HELP bcd_session_answers_total Callers answered, by code.\n"
				  "# TYPE bcd_session_answers_total counter\n",
				  c->waiting, c->queued, c->in_flight, c->max_provisioning, c->max_queue);
	for (i = 0; i < BCD_CODE_COUNT; i++)
		bad |= append(&buf, &len, &cap, "bcd_session_answers_total{code=\"%s\"} %lu\n",
					  bcd_code_name((bcd_code) i), c->answers[i]);
	bad |= append(&buf, &len, &cap,
				  "# HELP bcd_session_provisionings_total Requests to POST /v1/session, by outcome.\n"
				  "# TYPE bcd_session_provisionings_total counter\n");
	for (i = 0; i < BCD_RESULT_COUNT; i++)
		bad |= append(&buf, &len, &cap, "bcd_session_provisionings_total{outcome=\"%s\"} %lu\n",
					  bcd_job_result_name((bcd_job_result) i), c->provisionings[i]);
	bad |= append(&buf, &len, &cap,
				  "# HELP bcd_jwt_svid_fetches_total Requests to POST /v1/jwt-svid, by outcome.\n"
				  "# TYPE bcd_jwt_svid_fetches_total counter\n");
	for (i = 0; i < BCD_RESULT_COUNT; i++)
		bad |= append(&buf, &len, &cap, "bcd_jwt_svid_fetches_total{outcome=\"%s\"} %lu\n",
					  bcd_job_result_name((bcd_job_result) i), c->jwt_fetches[i]);
	bad |= append(&buf, &len, &cap,
				  "# HELP bcd_node_credential_present 1 when bcd holds a node credential.\n"
				  "# TYPE bcd_node_credential_present gauge\nbcd_node_credential_present %d\n"
				  "# HELP bcd_node_credential_not_after_seconds notAfter of the node certificate.\n"
				  "# TYPE bcd_node_credential_not_after_seconds gauge\n"
				  "bcd_node_credential_not_after_seconds %lld\n"
				  "# HELP bcd_node_quarantined 1 while the service holds the node quarantined "
				  "(continuous attestation).\n"
				  "# TYPE bcd_node_quarantined gauge\nbcd_node_quarantined %d\n"
				  "# HELP bcd_node_revoked 1 while the node certificate is known revoked "
				  "(OCSP or the CRL).\n"
				  "# TYPE bcd_node_revoked gauge\nbcd_node_revoked %d\n",
				  node->present ? 1 : 0, node->present ? (long long) node->not_after : 0LL,
				  c->quarantined ? 1 : 0, c->revoked ? 1 : 0);
	if (bad)
	{
		free(buf);
		return NULL;
	}
	return buf;
}

/* Write the metrics text to path atomically (a temporary file renamed over it), 0644. */
int
bcd_metrics_write(const char *path, const bcd_counters *c, const bcd_node_snapshot *node)
{
	char	   *text = bcd_metrics_text(c, node);
	char	   *dir = strdup(path);
	char	   *slash = dir != NULL ? strrchr(dir, '/') : NULL;
	int			rc = BC_ENOMEM;

	if (text != NULL && slash != NULL)
	{
		*slash = '\0';
		rc = bcd_write_file_atomic(slash == dir ? "/" : dir, slash + 1, text, strlen(text), 0644);
	}
	free(text);
	free(dir);
	return rc;
}
