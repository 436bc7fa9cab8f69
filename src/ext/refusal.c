/*
 * refusal.c: one refusal outside, a precise reason inside.
 *
 * A refusal is an ERROR with SQLSTATE JR001, raised by an attestor (built-in
 * through bc_refuse_join(), custom through bc_join.refuse()).  bc_join()
 * catches it in the subtransaction that ran the attestor, rolls the
 * attestor's writes back, records security.join.refused with the reason and
 * returns the one refusal every caller sees.  The reason and the tenant
 * travel beside the error, in this backend's memory, never in the message a
 * client could see.
 */
#include "bc_join.h"

#include "commands/async.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

/* The refusal being raised: set just before the ERROR, taken by the catcher. */
static char pending_refusal[160];
static char pending_tenant[80];
static bool pending = false;
/* A JSON object the refusal event carries as "detail" (never evidence): pending, then taken. */
static char pending_detail[512];
static char taken_detail[512];

/* Raise the uniform refusal, remembering its reason and tenant. */
void
bc_refuse_join(const char *refusal, const char *tenant_id)
{
	strlcpy(pending_refusal, refusal ? refusal : "join:refused", sizeof(pending_refusal));
	strlcpy(pending_tenant, tenant_id ? tenant_id : "", sizeof(pending_tenant));
	pending = true;
	pending_detail[0] = '\0';
	ereport(ERROR,
			(errcode(ERRCODE_BC_JOIN_REFUSED),
			 errmsg("join refused"),
			 errhidestmt(true)));
}

/*
 * The same, with a JSON object the security.join.refused event carries as
 * "detail" (what an operator needs to act: never the evidence itself).
 */
void
bc_refuse_join_detail(const char *refusal, const char *tenant_id, const char *detail_json)
{
	strlcpy(pending_refusal, refusal ? refusal : "join:refused", sizeof(pending_refusal));
	strlcpy(pending_tenant, tenant_id ? tenant_id : "", sizeof(pending_tenant));
	if (detail_json != NULL && strlen(detail_json) < sizeof(pending_detail))
		strlcpy(pending_detail, detail_json, sizeof(pending_detail));
	else
		pending_detail[0] = '\0';
	pending = true;
	ereport(ERROR,
			(errcode(ERRCODE_BC_JOIN_REFUSED),
			 errmsg("join refused"),
			 errhidestmt(true)));
}

/* The refusal pending after a JR001 error was caught (and clear it). */
bool
bc_take_refusal(char **refusal, char **tenant_id)
{
	bool		was = pending;

	*refusal = was ? pstrdup(pending_refusal) : NULL;
	*tenant_id = (was && pending_tenant[0]) ? pstrdup(pending_tenant) : NULL;
	strlcpy(taken_detail, was ? pending_detail : "", sizeof(taken_detail));
	pending = false;
	pending_refusal[0] = '\0';
	pending_tenant[0] = '\0';
	pending_detail[0] = '\0';
	return was;
}

int			bc_refusal_events_per_minute = 60;

/* Count this refusal in its minute; returns whether to record it. */
static BcPlan rate_refusal = {
	"INSERT INTO bc_join.refusal_rate AS r "
	"       (attestor, refusal, window_start, recorded, suppressed, carried, last_recorded) "
	"VALUES ($3, $1, bc_join.compute_now(), 1, 0, 0, true) "
	"ON CONFLICT (attestor, refusal) DO UPDATE SET "
	"  carried = CASE WHEN r.window_start <= bc_join.compute_now() - interval '1 minute' "
	"                 THEN r.suppressed ELSE r.carried END, "
	"  last_recorded = (r.window_start <= bc_join.compute_now() - interval '1 minute' "
	"                   OR r.recorded < $2), "
	"  recorded = CASE WHEN r.window_start <= bc_join.compute_now() - interval '1 minute' THEN 1 "
	"                  WHEN r.recorded < $2 THEN r.recorded + 1 ELSE r.recorded END, "
	"  suppressed = CASE WHEN r.window_start <= bc_join.compute_now() - interval '1 minute' THEN 0 "
	"                    WHEN r.recorded < $2 THEN r.suppressed ELSE r.suppressed + 1 END, "
	"  window_start = CASE WHEN r.window_start <= bc_join.compute_now() - interval '1 minute' "
	"                      THEN bc_join.compute_now() ELSE r.window_start END "
	"RETURNING last_recorded, CASE WHEN recorded = 1 THEN carried ELSE 0 END",
	3, {TEXTOID, INT4OID, TEXTOID}
};

enum
{
	Anum_rr_last_recorded = 1,
	Anum_rr_carried
};

/* The tenant whose evidence authenticated, else root: its id and refusal channel. */
static BcPlan refusal_tenant = {
	"SELECT t.id, t.refusal_channel FROM bc_join.tenants t "
	"WHERE t.id = $1 OR t.id = 'root' ORDER BY t.id = 'root' LIMIT 1",
	1, {TEXTOID}
};

/* The largest refusal NOTIFY payload (docs/operator.md). */
#define BC_REFUSAL_NOTIFY_MAX 512

/*
 * The refusal NOTIFY's payload: the event's id, type, attestor, refusal,
 * time and suppressedBefore, compact, never evidence nor hashes.  A refusal
 * (a custom attestor's, up to 159 bytes, escaped) that would make it longer
 * than BC_REFUSAL_NOTIFY_MAX is cut at a character boundary.
 */
static char *
refusal_notify_payload(int64 event_id, const char *attestor, const char *refusal,
					   int64 suppressed_before)
{
	StringInfoData buf;
	int			keep = strlen(refusal);

	for (;;)
	{
		initStringInfo(&buf);
		bc_json_begin(&buf);
		bc_json_member_int(&buf, "event", event_id);
		bc_json_member(&buf, "type", "security.join.refused");
		bc_json_member(&buf, "attestor", attestor);
		bc_json_member(&buf, "refusal", pnstrdup(refusal, keep));
		bc_json_member_int(&buf, "at", bc_timestamp_to_unix(bc_now()));
		if (suppressed_before > 0)
			bc_json_member_int(&buf, "suppressedBefore", suppressed_before);
		bc_json_end(&buf);
		if (buf.len <= BC_REFUSAL_NOTIFY_MAX || keep == 0)
			return buf.data;
		keep = pg_mbcliplen(refusal, keep, keep - 1);
	}
}

/*
 * Record security.join.refused: the reason, the attestor, and hashes of the
 * CSR and of the claimed hardware identity, never the evidence.  It lands in
 * the tenant's stream only when the evidence authenticated that tenant, and
 * is told on that stream's tenant's refusal_channel (issue 48).
 */
void
bc_record_refusal(const char *refusal, const char *tenant_id, const BcJoinRequest *req)
{
	StringInfoData buf;
	unsigned char claims_hash[BC_SHA256_LEN];
	char		claims_b64[44];
	char	   *claims_text;
	const char *stream;
	const char *channel;
	int64		suppressed_before = 0;
	int64		event_id;

	/* At most bc_join.refusal_events_per_minute a minute per attestor and reason. */
	if (bc_refusal_events_per_minute > 0)
	{
		Datum		v[3];
		bool		isnull;

		v[0] = CStringGetTextDatum(refusal);
		v[1] = Int32GetDatum(bc_refusal_events_per_minute);
		v[2] = CStringGetTextDatum(req->attestor);
		bc_spi_exec(&rate_refusal, v, NULL, false, 0);
		if (!DatumGetBool(bc_spi_datum(Anum_rr_last_recorded, &isnull)))
			return;
		suppressed_before = DatumGetInt64(bc_spi_datum(Anum_rr_carried, &isnull));
	}

	{
		Datum		v = CStringGetTextDatum(tenant_id != NULL ? tenant_id : "root");

		if (bc_spi_exec(&refusal_tenant, &v, NULL, true, 1) != 1)
			elog(ERROR, "the root tenant is missing");
		stream = bc_spi_text_req(1);
		channel = bc_spi_text_req(2);
	}

	claims_text = JsonbToCString(NULL, &req->claims->root, VARSIZE(req->claims));
	bc_sha256(claims_text, strlen(claims_text), claims_hash);
	bc_b64url_encode(claims_hash, BC_SHA256_LEN, claims_b64);

	initStringInfo(&buf);
	bc_json_begin(&buf);
	bc_json_member(&buf, "refusal", refusal);
	bc_json_member(&buf, "attestor", req->attestor);
	bc_json_member(&buf, "role", req->role);
	bc_json_member(&buf, "csrSha256", req->csr_sha256_b64);
	bc_json_member(&buf, "csrSpkiSha256", req->csr_spki_sha256_b64);
	bc_json_member(&buf, "claimsSha256", claims_b64);
	if (suppressed_before > 0)
		bc_json_member_int(&buf, "suppressedBefore", suppressed_before);
	if (taken_detail[0] != '\0')
		bc_json_member_raw(&buf, "detail", taken_detail);
	taken_detail[0] = '\0';
	bc_json_end(&buf);

	event_id = bc_emit_event_id(stream, "security.join.refused", bc_jsonb(buf.data));

	/*
	 * Told on the tenant's random refusal channel (LISTEN needs no grant: see
	 * request_channel), only when the event is recorded, so at the events'
	 * rate; sent at commit, as every NOTIFY.
	 */
	Async_Notify(channel, refusal_notify_payload(event_id, req->attestor, refusal, suppressed_before));
}

/* What bc_join() returns for every refusal, whatever the reason. */
Jsonb *
bc_refusal_response(void)
{
	StringInfoData buf;

	initStringInfo(&buf);
	bc_json_begin(&buf);
	bc_json_member(&buf, "status", BC_STATUS_REFUSED);
	bc_json_key(&buf, "error");
	bc_json_begin(&buf);
	bc_json_member(&buf, "code", BC_REFUSAL_CODE);
	bc_json_member(&buf, "message", "Join refused");
	bc_json_end(&buf);
	bc_json_end(&buf);
	return bc_jsonb(buf.data);
}

PG_FUNCTION_INFO_V1(bc_refuse);

/* bc_join.refuse(refusal, tenant_id): what a custom attestor calls to refuse. */
Datum
bc_refuse(PG_FUNCTION_ARGS)
{
	char	   *refusal;
	char	   *tenant = NULL;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("a refusal needs a reason"),
				 errhint("Call bc_join.refuse('<attestor>:<reason>').")));
	refusal = text_to_cstring(PG_GETARG_TEXT_PP(0));
	if (strchr(refusal, ':') == NULL || strlen(refusal) >= sizeof(pending_refusal))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a refusal is \"<attestor>:<reason>\" of at most %d bytes",
						(int) sizeof(pending_refusal) - 1)));
	if (!PG_ARGISNULL(1))
		tenant = text_to_cstring(PG_GETARG_TEXT_PP(1));
	bc_refuse_join(refusal, tenant);
	PG_RETURN_VOID();
}
