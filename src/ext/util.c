/*
 * util.c: the service clock (compute_now(), compute_clock()), random
 * secrets and ids, the primary check: the ground floor the other files call.
 */
#include "bc_join.h"

#include "access/xlog.h"
#include "fmgr.h"
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

/* compute_clock(): the service clock's current instant (not the transaction's start). */
Datum
bc_compute_clock(PG_FUNCTION_ARGS)
{
	PG_RETURN_TIMESTAMPTZ(GetCurrentTimestamp() + (TimestampTz) bc_clock_offset * USECS_PER_SEC);
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
