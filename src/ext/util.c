/*
 * util.c: the service clock (compute_now(), compute_clock()), random
 * secrets and ids, the primary check: the ground floor the other files call.
 */
#include "bc_join.h"

#include "access/xlog.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"

/* A fixed service clock (check_evidence()'s "at"), when set. */
static bool clock_fixed = false;
static TimestampTz clock_at = 0;

/* The service clock: transaction start plus bc_join.clock_offset (or a check's fixed time). */
TimestampTz
bc_now(void)
{
	if (clock_fixed)
		return clock_at;
	return GetCurrentTransactionStartTimestamp() +
		(TimestampTz) bc_clock_offset * USECS_PER_SEC;
}

/* Fix the service clock at at (check_evidence()), until bc_clock_unfix(). */
void
bc_clock_fix(TimestampTz at)
{
	clock_at = at;
	clock_fixed = true;
}

/* The service clock runs again. */
void
bc_clock_unfix(void)
{
	clock_fixed = false;
}

/* Seconds since the Unix epoch. */
int64
bc_timestamp_to_unix(TimestampTz t)
{
	return (int64) (t / USECS_PER_SEC) +
		(int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY;
}

PG_FUNCTION_INFO_V1(bc_compute_now);

/* compute_now(): the service clock. */
Datum
bc_compute_now(PG_FUNCTION_ARGS)
{
	PG_RETURN_TIMESTAMPTZ(bc_now());
}

PG_FUNCTION_INFO_V1(bc_compute_clock);

/* The service clock's current instant: now (not the transaction's start) plus bc_join.clock_offset. */
TimestampTz
bc_clock_instant(void)
{
	return GetCurrentTimestamp() + (TimestampTz) bc_clock_offset * USECS_PER_SEC;
}

/* compute_clock(): the service clock's current instant (not the transaction's start). */
Datum
bc_compute_clock(PG_FUNCTION_ARGS)
{
	PG_RETURN_TIMESTAMPTZ(bc_clock_instant());
}

PG_FUNCTION_INFO_V1(bc_random_secret);

/* random_secret(): 32 bytes from the strong source, base64url. */
Datum
bc_random_secret(PG_FUNCTION_ARGS)
{
	unsigned char raw[32];
	char		out[64];

	if (!pg_strong_random(raw, sizeof(raw)))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate random bytes")));
	bc_b64url_encode(raw, sizeof(raw), out);
	OPENSSL_cleanse(raw, sizeof(raw));
	PG_RETURN_TEXT_P(cstring_to_text(out));
}

/* Random identifier: prefix '_' 32 hex digits. */
char *
bc_new_id(const char *prefix)
{
	unsigned char raw[16];
	char		hex[33];
	TimestampTz now;
	uint64		ms;
	int			i;

	/*
	 * Time-ordered, as UUIDv7 is: 48 bits of milliseconds since the Unix
	 * epoch, then 80 random bits.  Ids made one after the other land next to
	 * each other in the primary key's index, so a growing table appends to
	 * its right edge instead of splitting pages all over it (the growth
	 * benchmark's WAL per join).
	 */
	if (!pg_strong_random(raw, sizeof(raw)))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate random bytes")));
	now = GetCurrentTimestamp();
	ms = (uint64) (bc_timestamp_to_unix(now) * 1000 + (now % USECS_PER_SEC) / 1000);
	for (i = 0; i < 6; i++)
		raw[i] = (unsigned char) (ms >> (8 * (5 - i)));
	for (i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", raw[i]);
	return psprintf("%s_%s", prefix, hex);
}

/*
 * A join, renewal or session writes: on a hot standby (pg_auto_failover's
 * secondary) refuse before any work with 25006, the SQLSTATE PostgreSQL
 * itself raises for a write in recovery, which the gateway answers 503 and
 * retries on another host (docs/ha.md).
 */
void
bc_require_primary(void)
{
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("bc_join: this server is a standby and cannot answer requests"),
				 errhint("Connect with target_session_attrs=read-write.")));
}

PG_FUNCTION_INFO_V1(bc_are_agent_roles);

/*
 * bc_join.are_agent_roles(roles text[]): whether roles is a non-empty list
 * of agent roles (bc_role_valid: node, site, ramdisk), every element one of
 * them; NULL, an empty array or a NULL element is false.  The same answers
 * as the SQL body it replaces (roles IS NOT NULL AND cardinality(roles) >= 1
 * AND roles <@ ARRAY['node', 'site', 'ramdisk']), which test/pgtap/audit.sql
 * keeps as the reference.  In C because CHECK constraints call it (the
 * role of nodes, join_tokens, join_requests and pools) and PostgreSQL
 * prepares a table's CHECK expressions again for every statement that writes
 * it: inlining the SQL body read, analysed and planned it each time, 0.12 M
 * instructions per constraint and statement, two of them in every join
 * (docs/performance.md, "The join's own work, step by step").
 */
Datum
bc_are_agent_roles(PG_FUNCTION_ARGS)
{
	ArrayType  *a;
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	if (PG_ARGISNULL(0))
		PG_RETURN_BOOL(false);
	a = PG_GETARG_ARRAYTYPE_P(0);
	if (ARR_ELEMTYPE(a) != TEXTOID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("are_agent_roles expects text[]")));
	deconstruct_array(a, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	if (n < 1)
		PG_RETURN_BOOL(false);
	for (int i = 0; i < n; i++)
	{
		text	   *t;
		int			len;

		CHECK_FOR_INTERRUPTS();
		if (nulls[i])
			PG_RETURN_BOOL(false);
		t = DatumGetTextPP(elems[i]);
		len = VARSIZE_ANY_EXHDR(t);
#define BC_ROLE_IS(s) (len == (int) strlen(s) && memcmp(VARDATA_ANY(t), (s), len) == 0)
		if (!(BC_ROLE_IS(BC_ROLE_NODE) || BC_ROLE_IS(BC_ROLE_SITE) || BC_ROLE_IS(BC_ROLE_RAMDISK)))
			PG_RETURN_BOOL(false);
#undef BC_ROLE_IS
	}
	PG_RETURN_BOOL(true);
}
