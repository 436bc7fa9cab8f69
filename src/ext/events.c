/*
 * events.c: the event stream (bc_join.events) and the audit log.
 */
#include "bc_join.h"

#include "catalog/pg_type_d.h"
#include "common/int.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"

static BcPlan insert_event = {
	"INSERT INTO bc_join.events (tenant_id, type, payload) VALUES ($1, $2, $3)",
	3, {TEXTOID, TEXTOID, JSONBOID}
};

static BcPlan insert_audit = {
	"INSERT INTO bc_join.audit_log (action, tenant_id, node_id, detail) VALUES ($1, $2, $3, $4)",
	4, {TEXTOID, TEXTOID, TEXTOID, JSONBOID}
};

static BcPlan insert_event_id = {
	"INSERT INTO bc_join.events (tenant_id, type, payload) VALUES ($1, $2, $3) RETURNING id",
	3, {TEXTOID, TEXTOID, JSONBOID}
};

/* Insert into bc_join.events (SPI connected). */
void
bc_emit_event(const char *tenant_id, const char *type, Jsonb *payload)
{
	Datum		values[3];

	values[0] = CStringGetTextDatum(tenant_id);
	values[1] = CStringGetTextDatum(type);
	values[2] = JsonbPGetDatum(payload);
	bc_spi_exec(&insert_event, values, NULL, false, 0);
}

/*
 * The event and its audit row as one write: one statement (two rows, the
 * same payload) instead of two, for the requests that record both (a join,
 * a renewal).  The two tables have no trigger reading the other, so the
 * order of the two inserts inside the statement does not matter.
 */
static BcPlan insert_event_audit = {
	"WITH e AS (INSERT INTO bc_join.events (tenant_id, type, payload) VALUES ($1, $2, $5)) "
	"INSERT INTO bc_join.audit_log (action, tenant_id, node_id, detail) VALUES ($3, $1, $4, $5)",
	5, {TEXTOID, TEXTOID, TEXTOID, TEXTOID, JSONBOID}
};

/* Insert the event and the audit row with its payload as detail, in one statement (SPI connected). */
void
bc_emit_event_audit(const char *tenant_id, const char *type, const char *action,
					const char *node_id, Jsonb *payload)
{
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};

	values[0] = CStringGetTextDatum(tenant_id);
	values[1] = CStringGetTextDatum(type);
	values[2] = CStringGetTextDatum(action);
	if (node_id)
		values[3] = CStringGetTextDatum(node_id);
	else
		nulls[3] = 'n';
	values[4] = JsonbPGetDatum(payload);
	if (bc_spi_exec(&insert_event_audit, values, nulls, false, 0) != 1)
		elog(ERROR, "the audit row of event %s was not inserted", type);
}

/* Insert into bc_join.events and return the new row's id (SPI connected). */
int64
bc_emit_event_id(const char *tenant_id, const char *type, Jsonb *payload)
{
	Datum		values[3];

	values[0] = CStringGetTextDatum(tenant_id);
	values[1] = CStringGetTextDatum(type);
	values[2] = JsonbPGetDatum(payload);
	if (bc_spi_exec(&insert_event_id, values, NULL, false, 1) != 1)
		elog(ERROR, "the event was not inserted");
	return bc_spi_int8(1);
}

/* Insert into bc_join.audit_log (SPI connected). */
void
bc_audit(const char *action, const char *tenant_id, const char *node_id, Jsonb *detail)
{
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};

	values[0] = CStringGetTextDatum(action);
	if (tenant_id)
		values[1] = CStringGetTextDatum(tenant_id);
	else
		nulls[1] = 'n';
	if (node_id)
		values[2] = CStringGetTextDatum(node_id);
	else
		nulls[2] = 'n';
	values[3] = JsonbPGetDatum(detail);
	bc_spi_exec(&insert_audit, values, nulls, false, 0);
}

/* The last row of each chain (16 index probes), the newest of them, as one row. */
static BcPlan audit_heads = {
	"SELECT max(a.id), (array_agg(encode(a.hash, 'hex') ORDER BY a.id DESC))[1], "
	"       coalesce(jsonb_agg(jsonb_build_object('chain', c.c, 'id', a.id, "
	"                                             'hash', encode(a.hash, 'hex')) ORDER BY c.c), "
	"                '[]')::text "
	"FROM generate_series(0, 15) AS c(c), "
	"     LATERAL (SELECT l.id, l.hash FROM bc_join.audit_log l WHERE l.chain = c.c "
	"              ORDER BY l.id DESC LIMIT 1) AS a",
	0, {InvalidOid}
};
enum
{
	Anum_heads_head_id = 1, Anum_heads_head_hash, Anum_heads_heads
};

PG_FUNCTION_INFO_V1(bc_audit_anchor);

/*
 * bc_join.audit_anchor(): {"purpose":"bc_join/audit-anchor","headId",
 * "headHash","heads","at"} signed ES256 by the service signing key, as a JWS
 * compact serialization; verify it with the signing JWK agents pin.  headId
 * and headHash are the newest row of the log (0 and null when it is empty),
 * heads every chain's last row ({"chain","id","hash"}, by chain).
 */
Datum
bc_audit_anchor(PG_FUNCTION_ARGS)
{
	const BcKeys *keys;
	StringInfoData payload;
	char	   *jws = NULL;
	int			st;
	bool		isnull;
	int64		head_id = 0;
	char	   *head_hash = NULL;
	char	   *heads = "[]";
	Datum		d;

	bc_require_config();
	keys = bc_keys();
	bc_require_signing_key_live(keys);
	bc_spi_connect();
	if (bc_spi_exec(&audit_heads, NULL, NULL, true, 1) == 1)
	{
		d = bc_spi_datum(Anum_heads_head_id, &isnull);
		if (!isnull)
		{
			head_id = DatumGetInt64(d);
			head_hash = bc_spi_text_req(Anum_heads_head_hash);
		}
		heads = bc_spi_text_req(Anum_heads_heads);
	}
	initStringInfo(&payload);
	bc_json_begin(&payload);
	bc_json_member(&payload, "purpose", "bc_join/audit-anchor");
	bc_json_member_int(&payload, "headId", head_id);
	bc_json_member(&payload, "headHash", head_hash);
	bc_json_member_raw(&payload, "heads", heads);
	bc_json_member(&payload, "at", bc_rfc3339(bc_now()));
	bc_json_end(&payload);
	st = bc_jws_sign_es256(keys->signing, keys->signing_kid, (unsigned char *) payload.data,
						   payload.len, &jws);
	SPI_finish();
	if (st != BC_OK)
		bc_key_failed("sign the audit anchor with signing.key", keys->signing, st);
	bc_stats_anchor_made();
	PG_RETURN_TEXT_P(cstring_to_text(bc_take_cstring(jws)));
}

PG_FUNCTION_INFO_V1(bc_audit_anchor_payload);

/*
 * bc_join.audit_anchor_payload(anchor): the payload of an anchor this
 * service signed (bc_join.audit_anchor()), verified with a signing key it
 * holds (current, next or previous; the header's kid picks it, or each is
 * tried; never one marked compromised, mark_key_compromised); INVALID_INPUT
 * when it is not one.  audit_anchor_problems() holds
 * the log against it.
 */
Datum
bc_audit_anchor_payload(PG_FUNCTION_ARGS)
{
	text	   *t = PG_GETARG_TEXT_PP(0);
	size_t		n = VARSIZE_ANY_EXHDR(t);
	char	   *jws = text_to_cstring(t);
	const BcKeys *keys;
	char		kid[64];
	unsigned char *payload = NULL;
	size_t		plen = 0;
	int			st = BC_EVERIFY;
	int			i;
	Jsonb	   *j;
	JsonbValue *purpose;
	List	   *marked;

	bc_require_config();
	keys = bc_keys();
	/* an anchor kept in a file usually ends with a newline */
	while (n > 0 && (jws[n - 1] == '\n' || jws[n - 1] == '\r' || jws[n - 1] == ' ' || jws[n - 1] == '\t'))
		jws[--n] = '\0';
	if (n > 64 * 1024 || bc_jws_header_kid(jws, n, kid, sizeof(kid)) != BC_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the anchor is not a JWS"),
				 errdetail("INVALID_INPUT: an anchor is what bc_join.audit_anchor() returned.")));
	marked = bc_compromised_kids();
	for (i = 0; i < keys->n_signing && st != BC_OK; i++)
	{
		if (kid[0] != '\0' && strcmp(kid, keys->signing_kids[i]) != 0)
			continue;
		/* A key marked compromised vouches for nothing (mark_key_compromised). */
		if (bc_kid_listed(marked, keys->signing_kids[i]))
			continue;
		st = bc_jws_verify_es256(keys->signing_set[i], jws, n, 16 * 1024, &payload, &plen);
	}
	if (st != BC_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the anchor is not signed by a signing key of this service"),
				 errdetail("INVALID_INPUT: it is signed by another service, or by a key retired since."),
				 errhint("Check an anchor older than the signing keys with tools/bc-audit-verify and the "
						 "service-keys file of its time.")));
	PG_TRY();
	{
		j = bc_jsonb((char *) payload);
	}
	PG_FINALLY();
	{
		free(payload);
	}
	PG_END_TRY();
	purpose = getKeyJsonValueFromContainer(&j->root, "purpose", 7, NULL);
	if (purpose == NULL || purpose->type != jbvString ||
		purpose->val.string.len != strlen("bc_join/audit-anchor") ||
		memcmp(purpose->val.string.val, "bc_join/audit-anchor", purpose->val.string.len) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the JWS is not an audit anchor"),
				 errdetail("INVALID_INPUT: its purpose is not bc_join/audit-anchor.")));
	PG_RETURN_JSONB_P(j);
}

PG_FUNCTION_INFO_V1(bc_audit_content);

/*
 * bc_join.audit_content(id, at, actor, action, tenant_id, node_id, detail):
 * the bytes an audit row's hash covers (the trigger audit_chain,
 * verify_audit_log(), tools/bc-audit-verify).  Each field as octets:value,
 * octets counted in the database encoding, joined by '|', the whole
 * converted to UTF-8: the id in decimal, the time as microseconds since the
 * Unix epoch, tenant and node NULL as '-', detail as jsonb's text.  Another
 * NULL field is left out, and all of them NULL give NULL: exactly what the
 * SQL definition this replaces computed (string_agg over the fields), which
 * test/pgtap/audit.sql keeps as the reference.  In C because a SQL function
 * with its own search_path is parsed and planned again at each call, in the
 * trigger of every audit row: 12% of a join's instructions
 * (docs/performance.md).
 */
Datum
bc_audit_content(PG_FUNCTION_ARGS)
{
	StringInfoData buf;
	bool		any = false;
	char	   *utf8;
	bytea	   *out;

	initStringInfo(&buf);
	for (int i = 0; i < 7; i++)
	{
		const char *f;
		int			len;

		if (PG_ARGISNULL(i))
		{
			if (i != 4 && i != 5)
				continue;
			f = "-";
			len = 1;
		}
		else if (i == 0)
		{
			f = psprintf(INT64_FORMAT, PG_GETARG_INT64(0));
			len = strlen(f);
		}
		else if (i == 1)
		{
			TimestampTz at = PG_GETARG_TIMESTAMPTZ(1);
			int64		us;

			if (TIMESTAMP_NOT_FINITE(at))
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot convert infinity to bigint")));
			if (pg_add_s64_overflow(at, (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) *
									SECS_PER_DAY * USECS_PER_SEC, &us))
				ereport(ERROR,
						(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
						 errmsg("bigint out of range")));
			f = psprintf(INT64_FORMAT, us);
			len = strlen(f);
		}
		else if (i == 6)
		{
			Jsonb	   *detail = PG_GETARG_JSONB_P(6);

			f = JsonbToCString(NULL, &detail->root, VARSIZE(detail));
			len = strlen(f);
		}
		else
		{
			text	   *t = PG_GETARG_TEXT_PP(i);

			f = VARDATA_ANY(t);
			len = VARSIZE_ANY_EXHDR(t);
		}
		if (any)
			appendStringInfoChar(&buf, '|');
		appendStringInfo(&buf, "%d:", len);
		appendBinaryStringInfo(&buf, f, len);
		any = true;
	}
	if (!any)
		PG_RETURN_NULL();
	utf8 = pg_server_to_any(buf.data, buf.len, PG_UTF8);
	if (utf8 != buf.data)
	{
		/* The converted text is NUL-terminated; text holds no NUL. */
		int			n = strlen(utf8);

		out = (bytea *) palloc(VARHDRSZ + n);
		SET_VARSIZE(out, VARHDRSZ + n);
		memcpy(VARDATA(out), utf8, n);
	}
	else
	{
		out = (bytea *) palloc(VARHDRSZ + buf.len);
		SET_VARSIZE(out, VARHDRSZ + buf.len);
		memcpy(VARDATA(out), buf.data, buf.len);
	}
	PG_RETURN_BYTEA_P(out);
}
