/*
 * stats.c: attestor statistics in shared memory, the counterpart of the
 * custom attestor contract's meteredAttestor, kept the way pg_stat_statements keeps
 * its counters: space requested at server start (shared_preload_libraries),
 * a named LWLock guarding the slot table, a spinlock per slot for updates.
 *
 * Every join (and renewal) round counts once under its attestor id and
 * outcome: admitted, deferred-approval, deferred-challenge, refused, error.
 * The round's duration goes into the slot's total, minimum, maximum and a
 * latency histogram.  Counters are not transactional: a rolled-back join
 * still counts.  Input rejected before a round starts (22023, 0A000) is not
 * a verification and is not counted.
 *
 * Beside them (issue 48, bc_join.metrics()): every refused round by its
 * attestor and precise refusal (at most BC_REFUSAL_PAIRS pairs, the rest
 * counted as one "_other" pair; at most BC_REFUSAL_PAIRS_PER_ATTESTOR
 * reasons of one attestor, the rest as its "_other" reason), never rate
 * bounded as the events are;
 * continuous-attestation failures by a fixed set of reasons; and when
 * bc_join.audit_anchor() last made an anchor.  Reset with the rounds
 * (attestor_stats_reset), except the anchor's time, and with the server.
 */
#include "bc_join.h"

#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "portability/instr_time.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"

#include <math.h>

#define BC_STATS_SLOTS 128
#define BC_HIST_BUCKETS 16
/* (attestor, refusal) pairs counted apart; beyond them one "_other" count. */
#define BC_REFUSAL_PAIRS 256
/* Reasons of one attestor counted apart; beyond them its (attestor, "_other"). */
#define BC_REFUSAL_PAIRS_PER_ATTESTOR 64
#define BC_REFUSAL_OTHER "_other"
#define BC_REFUSAL_LEN 160

/* Upper bounds of the histogram buckets, milliseconds; the last is +inf. */
static const double hist_bounds_ms[BC_HIST_BUCKETS - 1] = {
	0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 25, 50, 100, 250, 1000, 5000
};

static const char *const outcome_names[BC_OUTCOMES] = {
	"admitted", "deferred-approval", "deferred-challenge", "refused", "error"
};

typedef struct BcOutcomeStats
{
	int64		calls;
	double		total_ms;
	double		min_ms;
	double		max_ms;
	int64		hist[BC_HIST_BUCKETS];
} BcOutcomeStats;

typedef struct BcStatsSlot
{
	char		attestor[BC_ATTESTOR_ID_MAX + 1];	/* "" when free */
	slock_t		mutex;
	BcOutcomeStats out[BC_OUTCOMES];
} BcStatsSlot;

typedef struct BcRefusalPair
{
	char		attestor[BC_ATTESTOR_ID_MAX + 1];
	char		refusal[BC_REFUSAL_LEN];
	pg_atomic_uint64 count;
} BcRefusalPair;

typedef struct BcStatsShared
{
	LWLock	   *lock;			/* guards slot and pair allocation */
	TimestampTz reset_at;
	int64		dropped;		/* rounds of attestors beyond the slots */
	int64		dropped_by[BC_OUTCOMES];	/* the same, by outcome */
	BcStatsSlot slots[BC_STATS_SLOTS];
	int			n_pairs;		/* pairs[0 .. n_pairs - 1] are in use */
	BcRefusalPair pairs[BC_REFUSAL_PAIRS];
	pg_atomic_uint64 refusals_other;	/* refusals beyond the pairs */
	pg_atomic_uint64 attest_failures[BC_ATTEST_FAILURES];
	pg_atomic_uint64 anchor_at; /* TimestampTz of the last audit anchor; 0: none */
} BcStatsShared;

static BcStatsShared *stats = NULL;
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* Ask for the shared memory and the lock (at postmaster start). */
static void
stats_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(BcStatsShared)));
	RequestNamedLWLockTranche("bc_join", 1);
}

/* Create or attach the shared state. */
static void
stats_shmem_startup(void)
{
	bool		found;
	int			i;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	stats = ShmemInitStruct("bc_join attestor stats", sizeof(BcStatsShared), &found);
	if (!found)
	{
		memset(stats, 0, sizeof(BcStatsShared));
		stats->lock = &(GetNamedLWLockTranche("bc_join"))->lock;
		stats->reset_at = GetCurrentTimestamp();
		for (i = 0; i < BC_STATS_SLOTS; i++)
			SpinLockInit(&stats->slots[i].mutex);
		for (i = 0; i < BC_REFUSAL_PAIRS; i++)
			pg_atomic_init_u64(&stats->pairs[i].count, 0);
		pg_atomic_init_u64(&stats->refusals_other, 0);
		for (i = 0; i < BC_ATTEST_FAILURES; i++)
			pg_atomic_init_u64(&stats->attest_failures[i], 0);
		pg_atomic_init_u64(&stats->anchor_at, 0);
	}
	LWLockRelease(AddinShmemInitLock);
}

/* Install the hooks; only when loaded by shared_preload_libraries. */
void
bc_stats_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = stats_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = stats_shmem_startup;
}

/* The slot of an attestor, allocated on first use; NULL when all are taken. */
static BcStatsSlot *
find_slot(const char *attestor)
{
	int			i;
	BcStatsSlot *slot = NULL;

	LWLockAcquire(stats->lock, LW_SHARED);
	for (i = 0; i < BC_STATS_SLOTS && stats->slots[i].attestor[0] != '\0'; i++)
	{
		if (strcmp(stats->slots[i].attestor, attestor) == 0)
		{
			slot = &stats->slots[i];
			break;
		}
	}
	LWLockRelease(stats->lock);
	if (slot != NULL)
		return slot;

	LWLockAcquire(stats->lock, LW_EXCLUSIVE);
	for (i = 0; i < BC_STATS_SLOTS; i++)
	{
		if (stats->slots[i].attestor[0] == '\0')
		{
			strlcpy(stats->slots[i].attestor, attestor, sizeof(stats->slots[i].attestor));
			slot = &stats->slots[i];
			break;
		}
		if (strcmp(stats->slots[i].attestor, attestor) == 0)
		{
			slot = &stats->slots[i];
			break;
		}
	}
	LWLockRelease(stats->lock);
	return slot;
}

/* Count one round of attestor with outcome, lasting ms milliseconds. */
void
bc_stats_record(const char *attestor, BcOutcomeKind outcome, double ms)
{
	BcStatsSlot *slot;
	BcOutcomeStats *o;
	int			b;

	if (stats == NULL)
		return;
	slot = find_slot(attestor);
	if (slot == NULL)
	{
		LWLockAcquire(stats->lock, LW_EXCLUSIVE);
		stats->dropped++;
		stats->dropped_by[outcome]++;
		LWLockRelease(stats->lock);
		return;
	}
	for (b = 0; b < BC_HIST_BUCKETS - 1 && ms > hist_bounds_ms[b]; b++)
		;
	SpinLockAcquire(&slot->mutex);
	o = &slot->out[outcome];
	if (o->calls == 0 || ms < o->min_ms)
		o->min_ms = ms;
	if (ms > o->max_ms)
		o->max_ms = ms;
	o->calls++;
	o->total_ms += ms;
	o->hist[b]++;
	SpinLockRelease(&slot->mutex);
}

/* The upper bound of the bucket holding the q-quantile of a histogram. */
static double
quantile_ms(const BcOutcomeStats *o, double q)
{
	int64		want = (int64) ceil(q * o->calls);
	int64		seen = 0;
	int			b;

	if (want < 1)
		want = 1;
	for (b = 0; b < BC_HIST_BUCKETS; b++)
	{
		seen += o->hist[b];
		if (seen >= want)
			return b < BC_HIST_BUCKETS - 1 ? Min(hist_bounds_ms[b], o->max_ms) : o->max_ms;
	}
	return o->max_ms;
}

/* Raise unless the shared state exists. */
static void
require_stats(void)
{
	if (stats == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("bc_join attestor statistics need bc_join in shared_preload_libraries")));
}

PG_FUNCTION_INFO_V1(bc_attestor_stats);

/* attestor_stats(): one row per attestor and outcome seen since the last reset. */
Datum
bc_attestor_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			i;
	int			k;

	require_stats();
	InitMaterializedSRF(fcinfo, 0);
	for (i = 0; i < BC_STATS_SLOTS; i++)
	{
		BcStatsSlot *slot = &stats->slots[i];
		char		attestor[BC_ATTESTOR_ID_MAX + 1];
		BcOutcomeStats copy[BC_OUTCOMES];

		LWLockAcquire(stats->lock, LW_SHARED);
		strlcpy(attestor, slot->attestor, sizeof(attestor));
		LWLockRelease(stats->lock);
		if (attestor[0] == '\0')
			break;
		SpinLockAcquire(&slot->mutex);
		memcpy(copy, slot->out, sizeof(copy));
		SpinLockRelease(&slot->mutex);

		for (k = 0; k < BC_OUTCOMES; k++)
		{
			Datum		values[10];
			bool		nulls[10] = {0};
			StringInfoData hist;
			int			b;

			if (copy[k].calls == 0)
				continue;
			values[0] = CStringGetTextDatum(attestor);
			values[1] = CStringGetTextDatum(outcome_names[k]);
			values[2] = Int64GetDatum(copy[k].calls);
			values[3] = Float8GetDatum(copy[k].total_ms);
			values[4] = Float8GetDatum(copy[k].total_ms / copy[k].calls);
			values[5] = Float8GetDatum(copy[k].min_ms);
			values[6] = Float8GetDatum(copy[k].max_ms);
			values[7] = Float8GetDatum(quantile_ms(&copy[k], 0.5));
			values[8] = Float8GetDatum(quantile_ms(&copy[k], 0.99));
			initStringInfo(&hist);
			bc_json_begin(&hist);
			for (b = 0; b < BC_HIST_BUCKETS; b++)
				bc_json_member_int(&hist, b < BC_HIST_BUCKETS - 1 ?
								   psprintf("%g", hist_bounds_ms[b]) : "+Inf", copy[k].hist[b]);
			bc_json_end(&hist);
			values[9] = PointerGetDatum(bc_jsonb(hist.data));
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(bc_attestor_stats_reset);

/* attestor_stats_reset(): forget every counter; returns when it was done. */
Datum
bc_attestor_stats_reset(PG_FUNCTION_ARGS)
{
	int			i;

	require_stats();
	LWLockAcquire(stats->lock, LW_EXCLUSIVE);
	for (i = 0; i < BC_STATS_SLOTS; i++)
	{
		/* Slots keep their attestor: a round counting right now stays where it belongs. */
		SpinLockAcquire(&stats->slots[i].mutex);
		memset(stats->slots[i].out, 0, sizeof(stats->slots[i].out));
		SpinLockRelease(&stats->slots[i].mutex);
	}
	stats->dropped = 0;
	memset(stats->dropped_by, 0, sizeof(stats->dropped_by));
	/* Pairs keep their names, as slots do. */
	for (i = 0; i < stats->n_pairs; i++)
		pg_atomic_write_u64(&stats->pairs[i].count, 0);
	pg_atomic_write_u64(&stats->refusals_other, 0);
	for (i = 0; i < BC_ATTEST_FAILURES; i++)
		pg_atomic_write_u64(&stats->attest_failures[i], 0);
	stats->reset_at = GetCurrentTimestamp();
	LWLockRelease(stats->lock);
	PG_RETURN_TIMESTAMPTZ(stats->reset_at);
}

/* The fixed reasons of bc_join_attestation_failures_total, by BcAttestFailure. */
static const char *const attest_failure_names[BC_ATTEST_FAILURES] = {
	"quote", "eventlog", "eventlog-replay", "boot-policy", "ima", "ima-replay", "ima-policy",
	"clock-rollback"
};

/* Whether s begins with prefix. */
static bool
starts_with(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

/*
 * The attestation failure a continuous-attestation refusal or verdict
 * ("attest:<reason>" or "<reason>") is, or -1 when it says nothing about the
 * machine (a bad proof, state or nonce, a revoked certificate).
 */
int
bc_attest_failure_kind(const char *reason)
{
	int			k;

	if (starts_with(reason, "attest:"))
		reason += strlen("attest:");
	for (k = 0; k < BC_ATTEST_FAILURES; k++)
		if (strcmp(reason, attest_failure_names[k]) == 0)
			return k;
	if (starts_with(reason, "eventlog"))
		return BC_ATTEST_FAILURE_EVENTLOG;
	if (starts_with(reason, "ima"))
		return BC_ATTEST_FAILURE_IMA;
	if (starts_with(reason, "quote") || starts_with(reason, "pcr-") || starts_with(reason, "ak-") ||
		strcmp(reason, "bad-signature") == 0 || strcmp(reason, "signature-scheme") == 0)
		return BC_ATTEST_FAILURE_QUOTE;
	return -1;
}

/*
 * Copy s into out (outsize bytes) as a Prometheus label value may hold it
 * and as bc-gateway takes it (documents.c: no control byte but newline,
 * valid UTF-8): a control character but newline (which bc_prom_label
 * escapes) and a byte that is not part of valid UTF-8 in a UTF-8 database
 * (any byte above 0x7f in another encoding) become '?'.  A custom
 * attestor's refusal is free text, possibly echoing a stranger's evidence.
 */
static void
prom_safe_copy(const char *s, char *out, size_t outsize)
{
	size_t		o = 0;
	bool		utf8 = GetDatabaseEncoding() == PG_UTF8;

	while (*s && o + 1 < outsize)
	{
		unsigned char c = (unsigned char) *s;

		if (c < 0x80)
		{
			out[o++] = ((c < 0x20 && c != '\n') || c == 0x7f) ? '?' : (char) c;
			s++;
			continue;
		}
		if (utf8)
		{
			int			len = pg_utf_mblen((const unsigned char *) s);

			if (strnlen(s, len) == (size_t) len && pg_utf8_islegal((const unsigned char *) s, len))
			{
				if (o + len >= outsize)
					break;
				memcpy(out + o, s, len);
				o += len;
				s += len;
				continue;
			}
		}
		out[o++] = '?';
		s++;
	}
	out[o] = '\0';
}

/* Count one refused round of attestor by its precise refusal (never rate bounded). */
void
bc_stats_refusal(const char *attestor, const char *raw_refusal)
{
	int			i;
	int			n;
	BcRefusalPair *pair = NULL;
	char		refusal[BC_REFUSAL_LEN];

	if (stats == NULL)
		return;
	/* counted under the name the metrics show: two refusals alike there are one pair */
	prom_safe_copy(raw_refusal, refusal, sizeof(refusal));
	LWLockAcquire(stats->lock, LW_SHARED);
	n = stats->n_pairs;
	for (i = 0; i < n; i++)
	{
		if (strncmp(stats->pairs[i].refusal, refusal, BC_REFUSAL_LEN - 1) == 0 &&
			strcmp(stats->pairs[i].attestor, attestor) == 0)
		{
			pair = &stats->pairs[i];
			break;
		}
	}
	LWLockRelease(stats->lock);
	if (pair == NULL)
	{
		LWLockAcquire(stats->lock, LW_EXCLUSIVE);
		for (i = 0; i < stats->n_pairs; i++)
		{
			if (strncmp(stats->pairs[i].refusal, refusal, BC_REFUSAL_LEN - 1) == 0 &&
				strcmp(stats->pairs[i].attestor, attestor) == 0)
			{
				pair = &stats->pairs[i];
				break;
			}
		}
		if (pair == NULL)
		{
			int			mine = 0;

			/*
			 * An attestor whose refusals echo what a stranger sent could
			 * otherwise take every pair, and every other attestor's new
			 * reason would be "_other" until the server restarts: beyond
			 * BC_REFUSAL_PAIRS_PER_ATTESTOR reasons, its (attestor, "_other").
			 */
			for (i = 0; i < stats->n_pairs; i++)
				if (strcmp(stats->pairs[i].attestor, attestor) == 0)
				{
					if (strcmp(stats->pairs[i].refusal, BC_REFUSAL_OTHER) == 0)
						pair = &stats->pairs[i];
					else
						mine++;
				}
			if (mine < BC_REFUSAL_PAIRS_PER_ATTESTOR)
				pair = NULL;
			if (pair == NULL && stats->n_pairs < BC_REFUSAL_PAIRS)
			{
				pair = &stats->pairs[stats->n_pairs];
				strlcpy(pair->attestor, attestor, sizeof(pair->attestor));
				strlcpy(pair->refusal, mine < BC_REFUSAL_PAIRS_PER_ATTESTOR ? refusal : BC_REFUSAL_OTHER,
						sizeof(pair->refusal));
				stats->n_pairs++;
			}
		}
		LWLockRelease(stats->lock);
	}
	pg_atomic_fetch_add_u64(pair != NULL ? &pair->count : &stats->refusals_other, 1);
}

/* Count one continuous-attestation failure (refusal or verdict); others are not. */
void
bc_stats_attest_failure(const char *reason)
{
	int			k;

	if (stats == NULL || reason == NULL)
		return;
	k = bc_attest_failure_kind(reason);
	if (k >= 0)
		pg_atomic_fetch_add_u64(&stats->attest_failures[k], 1);
}

/* Note that bc_join.audit_anchor() made an anchor now. */
void
bc_stats_anchor_made(void)
{
	if (stats != NULL)
		pg_atomic_write_u64(&stats->anchor_at, (uint64) GetCurrentTimestamp());
}

/*
 * Append a Prometheus label value, made safe (prom_safe_copy) and escaped
 * (backslash, double quote, newline).
 */
void
bc_prom_label(StringInfo buf, const char *name, const char *value)
{
	const char *p;
	char	   *safe = palloc(strlen(value) + 1);

	prom_safe_copy(value, safe, strlen(value) + 1);
	appendStringInfo(buf, "%s=\"", name);
	for (p = safe; *p; p++)
	{
		if (*p == '\\')
			appendStringInfoString(buf, "\\\\");
		else if (*p == '"')
			appendStringInfoString(buf, "\\\"");
		else if (*p == '\n')
			appendStringInfoString(buf, "\\n");
		else
			appendStringInfoChar(buf, *p);
	}
	appendStringInfoChar(buf, '"');
	pfree(safe);
}

/* Append # HELP and # TYPE of a family. */
void
bc_prom_family(StringInfo buf, const char *name, const char *type, const char *help)
{
	appendStringInfo(buf, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Seconds since the Unix epoch of a timestamp, with milliseconds. */
double
bc_prom_seconds(TimestampTz t)
{
	return (double) (t - SetEpochTimestamp()) / USECS_PER_SEC;
}

/*
 * The families kept in shared memory, as Prometheus text (metrics.c):
 * rounds, refusals and the counters' start; the audit anchor's time and
 * the attestation failures by append_stats_late.
 */
void
bc_stats_append_metrics(StringInfo buf)
{
	int			i;
	int			k;
	int			n;
	int64		dropped_by[BC_OUTCOMES];
	TimestampTz reset_at;

	require_stats();
	bc_prom_family(buf, "bc_join_rounds_total", "counter",
				   "Rounds (joins, renewals, sessions, attestations, commands, SSH) by attestor and outcome since the counters started.");
	for (i = 0; i < BC_STATS_SLOTS; i++)
	{
		BcStatsSlot *slot = &stats->slots[i];
		char		attestor[BC_ATTESTOR_ID_MAX + 1];
		int64		calls[BC_OUTCOMES];

		LWLockAcquire(stats->lock, LW_SHARED);
		strlcpy(attestor, slot->attestor, sizeof(attestor));
		LWLockRelease(stats->lock);
		if (attestor[0] == '\0')
			break;
		SpinLockAcquire(&slot->mutex);
		for (k = 0; k < BC_OUTCOMES; k++)
			calls[k] = slot->out[k].calls;
		SpinLockRelease(&slot->mutex);
		for (k = 0; k < BC_OUTCOMES; k++)
		{
			appendStringInfoString(buf, "bc_join_rounds_total{");
			bc_prom_label(buf, "attestor", attestor);
			appendStringInfoChar(buf, ',');
			bc_prom_label(buf, "outcome", outcome_names[k]);
			appendStringInfo(buf, "} " INT64_FORMAT "\n", calls[k]);
		}
	}
	LWLockAcquire(stats->lock, LW_SHARED);
	memcpy(dropped_by, stats->dropped_by, sizeof(dropped_by));
	reset_at = stats->reset_at;
	n = stats->n_pairs;
	LWLockRelease(stats->lock);
	for (k = 0; k < BC_OUTCOMES; k++)
		if (dropped_by[k] > 0)
			appendStringInfo(buf, "bc_join_rounds_total{attestor=\"_other\",outcome=\"%s\"} " INT64_FORMAT "\n",
							 outcome_names[k], dropped_by[k]);

	bc_prom_family(buf, "bc_join_refusals_total", "counter",
				   "Refused rounds by attestor and precise refusal (not rate bounded) since the counters started.");
	for (i = 0; i < n; i++)
	{
		BcRefusalPair *pair = &stats->pairs[i];

		/* A pair's names are written once, before n_pairs counted it. */
		appendStringInfoString(buf, "bc_join_refusals_total{");
		bc_prom_label(buf, "attestor", pair->attestor);
		appendStringInfoChar(buf, ',');
		bc_prom_label(buf, "reason", pair->refusal);
		appendStringInfo(buf, "} " UINT64_FORMAT "\n", pg_atomic_read_u64(&pair->count));
	}
	if (pg_atomic_read_u64(&stats->refusals_other) > 0)
		appendStringInfo(buf, "bc_join_refusals_total{attestor=\"_other\",reason=\"_other\"} " UINT64_FORMAT "\n",
						 pg_atomic_read_u64(&stats->refusals_other));

	bc_prom_family(buf, "bc_join_counters_reset_timestamp_seconds", "gauge",
				   "When the shared-memory counters started: server start or bc_join.attestor_stats_reset().");
	appendStringInfo(buf, "bc_join_counters_reset_timestamp_seconds %.3f\n", bc_prom_seconds(reset_at));
}

/* The audit anchor's time (0: none since the server started), from shared memory. */
void
bc_stats_append_anchor(StringInfo buf)
{
	uint64		at;

	require_stats();
	at = pg_atomic_read_u64(&stats->anchor_at);
	bc_prom_family(buf, "bc_join_audit_anchor_timestamp_seconds", "gauge",
				   "When bc_join.audit_anchor() last made an anchor on this server; 0 when none since it started.");
	appendStringInfo(buf, "bc_join_audit_anchor_timestamp_seconds %.3f\n",
					 at == 0 ? 0.0 : bc_prom_seconds((TimestampTz) at));
}

/* Continuous-attestation failures by reason, every reason of the fixed set. */
void
bc_stats_append_attest_failures(StringInfo buf)
{
	int			k;

	require_stats();
	bc_prom_family(buf, "bc_join_attestation_failures_total", "counter",
				   "Continuous-attestation rounds refused or quarantining, by what failed, since the counters started.");
	for (k = 0; k < BC_ATTEST_FAILURES; k++)
		appendStringInfo(buf, "bc_join_attestation_failures_total{reason=\"%s\"} " UINT64_FORMAT "\n",
						 attest_failure_names[k], pg_atomic_read_u64(&stats->attest_failures[k]));
}
