/*
 * metrics.c: bc_join.metrics(), what the service knows as Prometheus text
 * exposition 0.0.4 (issue 48; docs/operator.md "Watching it"), for the
 * gateway's metrics listener to serve beside its own families.
 *
 * Cheap by construction, whatever the size of the service: the counters are
 * in shared memory (stats.c); every query below is answered from an index
 * (partial ones: pending requests, live certificates, quarantined and missed
 * nodes, each row of these probing nodes by its key; the audit log's 16
 * chain heads), never by scanning a table, the events or the audit log; the key times are a stat() of each
 * current key file.  Labels are bounded: no node id or serial; at most
 * BC_METRICS_TENANTS tenants (the most waiting, the rest as "_other"); the
 * (attestor, reason) pairs stats.c bounds.
 */
#include "bc_join.h"

#include <sys/stat.h>

#include "fmgr.h"
#include "utils/builtins.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

/* Tenants with a line of their own in the pending-request gauges. */
#define BC_METRICS_TENANTS 50

/* Waiting join requests per tenant, the most first. */
static BcPlan pending_by_tenant = {
	"SELECT r.tenant_id, count(*), "
	"       extract(epoch FROM bc_join.compute_now() - min(r.created_at))::float8 "
	"FROM bc_join.join_requests r "
	"WHERE r.state = 'pending' AND r.expires_at > bc_join.compute_now() "
	"GROUP BY r.tenant_id ORDER BY count(*) DESC, r.tenant_id",
	0, {InvalidOid}
};

/* Live node certificates, and those of them expiring within 1 h and 24 h. */
static BcPlan node_certs_live = {
	"SELECT count(*), "
	"       count(*) FILTER (WHERE c.not_after <= bc_join.compute_now() + interval '1 hour'), "
	"       count(*) FILTER (WHERE c.not_after <= bc_join.compute_now() + interval '24 hours') "
	"FROM bc_join.node_certs c "
	"WHERE c.not_after > bc_join.compute_now() AND c.revoked_at IS NULL",
	0, {InvalidOid}
};

static BcPlan session_certs_live = {
	"SELECT count(*) FROM bc_join.session_certs c "
	"WHERE c.not_after > bc_join.compute_now() AND c.revoked_at IS NULL",
	0, {InvalidOid}
};

/* The newest audit row's time: the head of each of the 16 chains. */
static BcPlan audit_head = {
	"SELECT extract(epoch FROM max(a.at))::float8 "
	"FROM generate_series(0, 15) AS c(c), "
	"     LATERAL (SELECT l.at FROM bc_join.audit_log l WHERE l.chain = c.c "
	"              ORDER BY l.id DESC LIMIT 1) AS a",
	0, {InvalidOid}
};

/* Live nodes attestation_sweep() found overdue and that have not passed since. */
static BcPlan attestation_overdue = {
	"SELECT count(*) FROM bc_join.node_attestation a "
	"WHERE a.missed_reported_at IS NOT NULL AND a.state = 'healthy' "
	"  AND (SELECT n.state FROM bc_join.nodes n WHERE n.id = a.node_id) <> 'retired'",
	0, {InvalidOid}
};

static BcPlan quarantined = {
	"SELECT count(*) FROM bc_join.node_attestation a "
	"WHERE a.state = 'quarantined' "
	"  AND (SELECT n.state FROM bc_join.nodes n WHERE n.id = a.node_id) <> 'retired'",
	0, {InvalidOid}
};

/* A count of row 0 (SPI connected). */
static int64
row_count(int col)
{
	bool		isnull;
	Datum		d = bc_spi_datum(col, &isnull);

	return isnull ? 0 : DatumGetInt64(d);
}

/* The pending-request gauges: the tenants with most waiting, the rest as "_other". */
static void
append_pending(StringInfo buf)
{
	uint64		n = bc_spi_exec(&pending_by_tenant, NULL, NULL, true, 0);
	SPITupleTable *tt = SPI_tuptable;
	StringInfoData ages;
	int64		other = 0;
	double		other_age = -1;
	uint64		i;

	initStringInfo(&ages);
	bc_prom_family(buf, "bc_join_pending_join_requests", "gauge",
				   "Join requests waiting for an operator's approval, by tenant (the 50 with most, the rest as _other).");
	bc_prom_family(&ages, "bc_join_pending_join_request_oldest_age_seconds", "gauge",
				   "Age of the oldest join request waiting for an approval, by tenant (none waiting: no line).");
	for (i = 0; i < n; i++)
	{
		bool		isnull;
		char	   *tenant = SPI_getvalue(tt->vals[i], tt->tupdesc, 1);
		int64		count = DatumGetInt64(SPI_getbinval(tt->vals[i], tt->tupdesc, 2, &isnull));
		double		age = DatumGetFloat8(SPI_getbinval(tt->vals[i], tt->tupdesc, 3, &isnull));

		if (i >= BC_METRICS_TENANTS)
		{
			other += count;
			other_age = Max(other_age, age);
			continue;
		}
		appendStringInfoString(buf, "bc_join_pending_join_requests{");
		bc_prom_label(buf, "tenant", tenant);
		appendStringInfo(buf, "} " INT64_FORMAT "\n", count);
		appendStringInfoString(&ages, "bc_join_pending_join_request_oldest_age_seconds{");
		bc_prom_label(&ages, "tenant", tenant);
		appendStringInfo(&ages, "} %.3f\n", Max(age, 0));
	}
	appendStringInfo(buf, "bc_join_pending_join_requests{tenant=\"_other\"} " INT64_FORMAT "\n", other);
	if (other > 0)
		appendStringInfo(&ages, "bc_join_pending_join_request_oldest_age_seconds{tenant=\"_other\"} %.3f\n",
						 Max(other_age, 0));
	appendBinaryStringInfo(buf, ages.data, ages.len);
}

/* The certificate and session gauges. */
static void
append_certificates(StringInfo buf)
{
	int64		live;
	int64		in_1h;
	int64		in_24h;

	bc_spi_exec(&node_certs_live, NULL, NULL, true, 1);
	live = row_count(1);
	in_1h = row_count(2);
	in_24h = row_count(3);
	bc_prom_family(buf, "bc_join_node_certificates_live", "gauge",
				   "Node certificates neither revoked nor expired.");
	appendStringInfo(buf, "bc_join_node_certificates_live " INT64_FORMAT "\n", live);
	bc_prom_family(buf, "bc_join_node_certificates_expiring", "gauge",
				   "Live node certificates whose notAfter is within 1h or 24h (a renewal revokes the one it replaces: these were not renewed).");
	appendStringInfo(buf, "bc_join_node_certificates_expiring{within=\"1h\"} " INT64_FORMAT "\n", in_1h);
	appendStringInfo(buf, "bc_join_node_certificates_expiring{within=\"24h\"} " INT64_FORMAT "\n", in_24h);

	bc_spi_exec(&session_certs_live, NULL, NULL, true, 1);
	bc_prom_family(buf, "bc_join_sessions_live", "gauge",
				   "Session certificates neither revoked nor expired.");
	appendStringInfo(buf, "bc_join_sessions_live " INT64_FORMAT "\n", row_count(1));
}

/* The newest audit row's time (0: the log is empty). */
static void
append_audit_head(StringInfo buf)
{
	bool		isnull = true;
	Datum		d = 0;

	if (bc_spi_exec(&audit_head, NULL, NULL, true, 1) == 1)
		d = bc_spi_datum(1, &isnull);
	bc_prom_family(buf, "bc_join_audit_log_head_timestamp_seconds", "gauge",
				   "Time of the newest audit log row (0: the log is empty).");
	appendStringInfo(buf, "bc_join_audit_log_head_timestamp_seconds %.3f\n",
					 isnull ? 0.0 : DatumGetFloat8(d));
}

/*
 * When a key file took its place: its inode's change time, which the
 * rename of a promotion (tools/bc-join-keygen --promote, --promote-jwt-key,
 * --promote-ssh-ca) or of the first install sets.  false: no such file.
 */
static bool
key_file_time(const char *name, double *at)
{
	struct stat st;

	if (stat(psprintf("%s/%s", bc_key_dir, name), &st) != 0)
		return false;
	*at = (double) st.st_ctim.tv_sec + (double) st.st_ctim.tv_nsec / 1e9;
	return true;
}

/* The node CA's notBefore (the issuing CA, node-ca.crt's first certificate); false: none. */
static bool
node_ca_time(double *at)
{
	BIO		   *bio = BIO_new_file(psprintf("%s/node-ca.crt", bc_key_dir), "r");
	X509	   *x = NULL;
	struct tm	tm;
	bool		ok = false;

	if (bio == NULL)
		return false;
	x = PEM_read_bio_X509(bio, NULL, NULL, NULL);
	if (x != NULL && ASN1_TIME_to_tm(X509_get0_notBefore(x), &tm) == 1)
	{
		*at = (double) timegm(&tm);
		ok = true;
	}
	X509_free(x);
	BIO_free(bio);
	return ok;
}

/* When the current key of each kind became current (a kind not configured: no line). */
static void
append_keys(StringInfo buf)
{
	static const char *const kinds[] = {
		"signing", "encryption", "jwt-svid", "ocsp", "ssh-host-ca", "ssh-user-ca"
	};
	double		at;
	int			i;

	bc_prom_family(buf, "bc_join_key_rotation_timestamp_seconds", "gauge",
				   "When the current key of each kind became current: node-ca its certificate's notBefore, the others their key file's change time (a promotion renames it into place).");
	if (bc_key_dir == NULL || bc_key_dir[0] == '\0')
		return;
	for (i = 0; i < lengthof(kinds); i++)
	{
		if (!key_file_time(psprintf("%s.key", kinds[i]), &at))
			continue;
		appendStringInfo(buf, "bc_join_key_rotation_timestamp_seconds{key=\"%s\"} %.3f\n", kinds[i], at);
	}
	if (node_ca_time(&at))
		appendStringInfo(buf, "bc_join_key_rotation_timestamp_seconds{key=\"node-ca\"} %.3f\n", at);
	ERR_clear_error();
}

/* The continuous-attestation gauges. */
static void
append_attestation(StringInfo buf)
{
	bc_spi_exec(&attestation_overdue, NULL, NULL, true, 1);
	bc_prom_family(buf, "bc_join_attestation_stale_nodes", "gauge",
				   "Live nodes whose continuous attestation is overdue (attestation_sweep() found them missed and they have not passed since).");
	appendStringInfo(buf, "bc_join_attestation_stale_nodes " INT64_FORMAT "\n", row_count(1));
	bc_spi_exec(&quarantined, NULL, NULL, true, 1);
	bc_prom_family(buf, "bc_join_quarantined_nodes", "gauge",
				   "Live nodes quarantined now (continuous attestation failed).");
	appendStringInfo(buf, "bc_join_quarantined_nodes " INT64_FORMAT "\n", row_count(1));
}

PG_FUNCTION_INFO_V1(bc_metrics);

/* bc_join.metrics(): the service's numbers as Prometheus text exposition 0.0.4. */
Datum
bc_metrics(PG_FUNCTION_ARGS)
{
	StringInfoData buf;

	initStringInfo(&buf);
	bc_spi_connect();
	bc_stats_append_metrics(&buf);
	append_pending(&buf);
	append_certificates(&buf);
	append_audit_head(&buf);
	bc_stats_append_anchor(&buf);
	append_keys(&buf);
	bc_stats_append_attest_failures(&buf);
	append_attestation(&buf);
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text_with_len(buf.data, buf.len));
}
