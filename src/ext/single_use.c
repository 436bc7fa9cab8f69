/*
 * single_use.c: the bookkeeping that lets JoinService refuse to commit a
 * deferring round that consumed single-use evidence (a row in
 * attestation_uses, a token use, a join request): triggers and helpers
 * count what the running round consumed.
 */
#include "bc_join.h"

#include "commands/trigger.h"
#include "fmgr.h"

/* Single-use evidence consumed since the running round began. */
static int	single_use_count = 0;

/* A join round begins: nothing consumed yet. */
void
bc_single_use_reset(void)
{
	single_use_count = 0;
}

/* Whether the running round consumed single-use evidence. */
bool
bc_single_use_consumed(void)
{
	return single_use_count > 0;
}

PG_FUNCTION_INFO_V1(bc_note_single_use);

/* Trigger on attestation_uses and join_tokens.uses_left: evidence consumed. */
Datum
bc_note_single_use(PG_FUNCTION_ARGS)
{
	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "bc_join.note_single_use() is a trigger");
	single_use_count++;
	return PointerGetDatum(NULL);
}

PG_FUNCTION_INFO_V1(bc_note_single_use_round);

/* note_single_use_round(): the same, for a consumption no trigger sees. */
Datum
bc_note_single_use_round(PG_FUNCTION_ARGS)
{
	single_use_count++;
	PG_RETURN_VOID();
}
