/*
 * locks.c: the locks a join takes that no other role of the cluster may
 * take.  The issuance log's chains and the per-key join lock were SQL
 * advisory locks (pg_advisory_xact_lock), whose keyspace every role shares:
 * any role that could log in could hold the 16 chain keys and stop every
 * join (issue 26).  These are heavyweight locks of the same lock method
 * (pg_locks shows them as locktype advisory, classid the kind, objid the
 * key) with field4 = 3: pg_advisory_lock and its siblings make only 1
 * (a bigint key) and 2 (two integer keys), so no SQL function can name,
 * take or wait for them.  They cost what an advisory lock costs (shared
 * memory, no WAL) and are released at the end of the transaction, or of
 * the subtransaction that took them when it rolls back.
 */
#include "bc_join.h"

#include "miscadmin.h"
#include "storage/lock.h"

/* field4 of bc_join's lock tags; pg_advisory_* use 1 and 2 */
#define BC_LOCK_FIELD4 3

/* Take lock (kind, key) in this database for the transaction; false if wait is false and it is held. */
bool
bc_xact_lock(uint32 kind, uint32 key, bool wait)
{
	LOCKTAG		tag;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, kind, key, BC_LOCK_FIELD4);
	return LockAcquire(&tag, ExclusiveLock, false, !wait) != LOCKACQUIRE_NOT_AVAIL;
}

PG_FUNCTION_INFO_V1(bc_audit_chain_take);

/*
 * bc_join.audit_chain_take(): the chain of the issuance log this
 * transaction appends to, locked to its end.  The first of the 16 no other
 * transaction holds, from its backend's own (pid % 16) on; its own when all
 * are held, waiting for it.  A chain this transaction holds already is
 * taken again at once, so a transaction that waits holds none, and no two
 * wait on each other in a cycle.
 */
Datum
bc_audit_chain_take(PG_FUNCTION_ARGS)
{
	int			own = MyProcPid % BC_AUDIT_CHAINS;
	int			i;

	for (i = 0; i < BC_AUDIT_CHAINS; i++)
	{
		int			c = (own + i) % BC_AUDIT_CHAINS;

		if (bc_xact_lock(BC_LOCK_AUDIT_CHAIN, (uint32) c, false))
			PG_RETURN_INT16((int16) c);
	}
	(void) bc_xact_lock(BC_LOCK_AUDIT_CHAIN, (uint32) own, true);
	PG_RETURN_INT16((int16) own);
}
