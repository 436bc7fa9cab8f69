/*
 * round.c: one round of any request in a subtransaction: the join's
 * (join.c), the requests proven by the node key (proof.c: renewals,
 * sessions; commands.c; the site epoch).  A refusal (JR001) rolls the
 * subtransaction back and becomes a security.join.refused event and the one
 * refusal; any other error rolls it back and is raised.  Below the join and
 * the attestors: it calls the round it is given, nothing that picks one.
 */
#include "bc_join.h"

#include "access/xact.h"
#include "portability/instr_time.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

/* The statistics outcome of a round's answer. */
static BcOutcomeKind
outcome_of(Jsonb *response, bool refused)
{
	JsonbValue *status;

	if (refused)
		return BC_OUTCOME_REFUSED;
	status = getKeyJsonValueFromContainer(&response->root, "status", 6, NULL);
	if (status != NULL && status->type == jbvString)
	{
		if (status->val.string.len == strlen(BC_STATUS_PENDING) &&
			strncmp(status->val.string.val, BC_STATUS_PENDING, status->val.string.len) == 0)
			return BC_OUTCOME_DEFERRED_APPROVAL;
		if (status->val.string.len == strlen(BC_STATUS_CHALLENGE) &&
			strncmp(status->val.string.val, BC_STATUS_CHALLENGE, status->val.string.len) == 0)
			return BC_OUTCOME_DEFERRED_CHALLENGE;
	}
	return BC_OUTCOME_ADMITTED;
}

/*
 * A round inside a subtransaction; a refusal (JR001) rolls it back, becomes
 * a security.join.refused event and the one answer.  who names the refuser
 * when the refusal carried no reason.
 */
Jsonb *
bc_run_round(BcJoinRequest *req, BcRoundFn round, void *arg, const char *who,
			 MemoryContext outcxt)
{
	MemoryContext spicxt = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	Jsonb	   *volatile response = NULL;
	char	   *volatile refusal = NULL;
	char	   *volatile refused_tenant = NULL;
	instr_time	start;
	instr_time	elapsed;

	INSTR_TIME_SET_CURRENT(start);
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(spicxt);

	PG_TRY();
	{
		response = round(req, arg, outcxt);

		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(spicxt);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;
		char	   *r;
		char	   *t;
		bool		had_refusal;

		MemoryContextSwitchTo(spicxt);
		edata = CopyErrorData();
		FlushErrorState();

		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(spicxt);
		CurrentResourceOwner = oldowner;

		/* Only the refusal is answered; any other error fails the join. */
		had_refusal = bc_take_refusal(&r, &t);
		if (edata->sqlerrcode != ERRCODE_BC_JOIN_REFUSED)
		{
			INSTR_TIME_SET_CURRENT(elapsed);
			INSTR_TIME_SUBTRACT(elapsed, start);
			bc_stats_record(who, BC_OUTCOME_ERROR, INSTR_TIME_GET_MILLISEC(elapsed));
			ReThrowError(edata);
		}
		if (!had_refusal)
			r = psprintf("%s:refused", who);
		refusal = r;
		refused_tenant = t;
	}
	PG_END_TRY();

	if (refusal != NULL)
	{
		MemoryContext old;

		bc_record_refusal(refusal, refused_tenant, req);
		old = MemoryContextSwitchTo(outcxt);
		response = bc_refusal_response();
		MemoryContextSwitchTo(old);
	}
	INSTR_TIME_SET_CURRENT(elapsed);
	INSTR_TIME_SUBTRACT(elapsed, start);
	bc_stats_record(who, outcome_of(response, refusal != NULL), INSTR_TIME_GET_MILLISEC(elapsed));
	if (req->token != NULL)
		OPENSSL_cleanse(req->token, strlen(req->token));
	return response;
}
