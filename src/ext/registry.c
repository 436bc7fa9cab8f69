/*
 * registry.c: which attestor a request names.  The built-ins, and the
 * registry of custom attestors (bc_join.attestors) as this backend keeps it.
 */
#include "bc_join.h"

#include "catalog/namespace.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

/* The attestors built into JoinService; a registered one with the same id wins. */
static const BcAttestor *const builtin_attestors[] = {
	&bc_join_token_attestor,
	&bc_provisioned_attestor,
	&bc_tpm_attestor,
	&bc_x509pop_attestor,
	&bc_cloud_iid_attestor,
	&bc_discovery_attestor,
	NULL
};

static BcPlan registered_attestors = {
	"SELECT id, version, roles, pg_catalog.to_regprocedure(verify)::oid FROM bc_join.attestors",
	0, {InvalidOid}
};

enum
{
	Anum_ra_id = 1,
	Anum_ra_version,
	Anum_ra_roles,
	Anum_ra_verify_fn
};

/*
 * The registry (bc_join.attestors) as this backend last read it, whole: the
 * operator's list is short, so it is read in one query and kept, and an id
 * that is not in it is simply not found (no entry is made for it: a client
 * naming a million unknown ids grows nothing).
 *
 * As pg_cron's job cache does: the relcache callback reacts only to the
 * registry's own relation (or to a reset of every relation) and only marks
 * the cache stale; it never frees memory, because it can run in the middle
 * of anything, the rebuild's own query included.  A trigger on the table
 * invalidates its relcache entry on every change, so the callback runs in
 * this backend at its next command and in the others when the change
 * commits.  The next lookup rebuilds into a fresh context and only then
 * drops the old one.
 *
 * The cache is valid only after a rebuild that ran to its end with no
 * invalidation arriving meanwhile: a rebuild that errors or is cancelled
 * (a statement timeout while the registry is locked) leaves it stale, so
 * the next lookup reads the registry again; the old entries are never used
 * once an invalidation has marked them stale.
 */
typedef struct CachedAttestors
{
	int			n;
	BcAttestor *att;
} CachedAttestors;

static CachedAttestors attestor_cache;
static MemoryContext attestor_cache_cxt = NULL;
static Oid	attestor_registry_relid = InvalidOid;
static bool attestor_cache_valid = false;
static bool attestor_cache_hooked = false;
/* Invalidations seen: a rebuild is valid only if none arrived while it ran. */
static uint64 attestor_cache_invals = 0;

/* Relcache callback: a change to the registry marks the cache stale, nothing more. */
static void
attestor_cache_inval(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == attestor_registry_relid)
	{
		attestor_cache_valid = false;
		attestor_cache_invals++;
	}
}

/* Read the whole registry into a new cache context; then drop the old one. */
static void
attestor_cache_rebuild(void)
{
	MemoryContext cxt;
	MemoryContext old;
	BcAttestor *att;
	uint64		rows;
	uint64		i;
	uint64		invals_before = attestor_cache_invals;

	/*
	 * Still stale while the query runs: an error or a cancel leaves it so.
	 * Marked valid at the end only when no invalidation arrived meanwhile
	 * (one that did is read again at the next lookup).
	 */
	attestor_cache_valid = false;
	attestor_registry_relid = get_relname_relid("attestors", get_namespace_oid("bc_join", false));

	/* Under the caller's context until built, so an error frees it. */
	cxt = AllocSetContextCreate(CurrentMemoryContext, "bc_join attestors",
								ALLOCSET_SMALL_SIZES);
	rows = bc_spi_exec(&registered_attestors, NULL, NULL, true, 0);
	old = MemoryContextSwitchTo(cxt);
	att = palloc0(sizeof(BcAttestor) * (rows + 1));
	for (i = 0; i < rows; i++)
	{
		bool		isnull;
		Datum	   *elems;
		int			n;
		int			j;
		const char **roles;
		ArrayType  *arr;

		CHECK_FOR_INTERRUPTS();
		att[i].id = TextDatumGetCString(bc_spi_row_datum(i, Anum_ra_id, &isnull));
		att[i].version = TextDatumGetCString(bc_spi_row_datum(i, Anum_ra_version, &isnull));
		arr = DatumGetArrayTypeP(bc_spi_row_datum(i, Anum_ra_roles, &isnull));
		deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, NULL, &n);
		roles = palloc0(sizeof(char *) * (n + 1));
		for (j = 0; j < n; j++)
			roles[j] = TextDatumGetCString(elems[j]);
		att[i].roles = roles;
		att[i].verify_fn = DatumGetObjectId(bc_spi_row_datum(i, Anum_ra_verify_fn, &isnull));
	}
	MemoryContextSwitchTo(old);

	MemoryContextSetParent(cxt, TopMemoryContext);
	if (attestor_cache_cxt != NULL)
		MemoryContextDelete(attestor_cache_cxt);
	attestor_cache_cxt = cxt;
	attestor_cache.n = (int) rows;
	attestor_cache.att = att;
	attestor_cache_valid = attestor_cache_invals == invals_before;
}

/* The registered attestor with this id, or NULL. */
static const BcAttestor *
registered_lookup(const char *id)
{
	int			i;

	if (!attestor_cache_hooked)
	{
		CacheRegisterRelcacheCallback(attestor_cache_inval, (Datum) 0);
		attestor_cache_hooked = true;
	}
	if (!attestor_cache_valid)
		attestor_cache_rebuild();
	for (i = 0; i < attestor_cache.n; i++)
	{
		CHECK_FOR_INTERRUPTS();
		if (strcmp(attestor_cache.att[i].id, id) == 0)
		{
			/* A copy for the call: a later rebuild cannot pull it away. */
			const BcAttestor *c = &attestor_cache.att[i];
			BcAttestor *copy = palloc0(sizeof(BcAttestor));
			const char **roles;
			int			n = 0;
			int			j;

			while (c->roles[n] != NULL)
				n++;
			roles = palloc0(sizeof(char *) * (n + 1));
			for (j = 0; j < n; j++)
				roles[j] = pstrdup(c->roles[j]);
			copy->id = pstrdup(c->id);
			copy->version = pstrdup(c->version);
			copy->roles = roles;
			copy->verify_fn = c->verify_fn;
			return copy;
		}
	}
	return NULL;
}

/* The attestor registered under id, a built-in, or UNSUPPORTED (0A000). */
const BcAttestor *
bc_find_attestor(const char *id)
{
	const BcAttestor *att = registered_lookup(id);
	int			i;

	if (att != NULL)
		return att;
	for (i = 0; builtin_attestors[i] != NULL; i++)
	{
		if (strcmp(builtin_attestors[i]->id, id) == 0)
			return builtin_attestors[i];
	}
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("unknown attestor \"%s\"", id),
			 errdetail("UNSUPPORTED: no attestor with this id is registered.")));
	return NULL;				/* keep compiler quiet */
}

PG_FUNCTION_INFO_V1(bc_attestors_changed);

/* Trigger on bc_join.attestors: every backend reads the registry again. */
Datum
bc_attestors_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trig = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "bc_join.attestors_changed() is a trigger");
	CacheInvalidateRelcache(trig->tg_relation);
	return PointerGetDatum(NULL);
}
