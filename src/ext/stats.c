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
 */
#include "bc_join.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"

#include <math.h>

#define BC_STATS_SLOTS 128
#define BC_HIST_BUCKETS 16

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

typedef struct BcStatsShared
{
	LWLock	   *lock;			/* guards slot allocation */
	TimestampTz reset_at;
	int64		dropped;		/* rounds of attestors beyond the slots */
	BcStatsSlot slots[BC_STATS_SLOTS];
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
	stats->reset_at = GetCurrentTimestamp();
	LWLockRelease(stats->lock);
	PG_RETURN_TIMESTAMPTZ(stats->reset_at);
}
