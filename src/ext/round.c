/*
 * round.c: one round of any request in a subtransaction: the join's
 * (join.c), the requests proven by the node key (proof.c: renewals,
 * sessions; commands.c; the site epoch).  A refusal (JR001) rolls the
 * subtransaction back and becomes a security.join.refused event and the one
 * refusal; any other error rolls it back and is raised.  The one
 * subtransaction runner (bc_round_subxact) serves these rounds, a join's
 * repeat (join.c) and check_evidence's round (check.c), and wipes the
 * opened sealed token however the round ends.  Below the join and the
 * attestors: it calls the round it is given, nothing that picks one.
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
 * Run body in an internal subtransaction and end it: released when the
 * body answers (its writes stay), rolled back when it answers NULL (it only
 * verified: nothing it wrote stays) or raises.  A JR001 refusal becomes
 * end->refusal (who names the refuser when it carried no reason) and its
 * tenant; any other error is copied to end->error, which the caller raises
 * again.  However the subtransaction ends, the sealed token the body opened
 * (req->token) is wiped.  Memory and resource owner are the caller's after.
 */
void
bc_round_subxact(BcJoinRequest *req, BcRoundFn body, void *arg, const char *who,
				 MemoryContext outcxt, BcRoundEnd *end)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;

	memset(end, 0, sizeof(*end));
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);

	PG_TRY();
	{
		end->answer = body(req, arg, outcxt);
		if (end->answer != NULL)
			ReleaseCurrentSubTransaction();
		else
			RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;
		char	   *r;
		char	   *t;
		bool		had_refusal;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();

		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = oldowner;

		end->answer = NULL;
		had_refusal = bc_take_refusal(&r, &t);
		if (edata->sqlerrcode != ERRCODE_BC_JOIN_REFUSED)
			end->error = edata;
		else
		{
			end->refusal = had_refusal ? r : psprintf("%s:refused", who);
			end->tenant = had_refusal ? t : NULL;
		}
	}
	PG_END_TRY();

	if (req->token != NULL)
	{
		OPENSSL_cleanse(req->token, strlen(req->token));
		req->token = NULL;
	}
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
	BcRoundEnd	end;
	Jsonb	   *response;
	instr_time	start;
	instr_time	elapsed;

	INSTR_TIME_SET_CURRENT(start);
	bc_round_subxact(req, round, arg, who, outcxt, &end);
	if (end.error != NULL)
	{
		/* Only the refusal is answered; any other error fails the round. */
		INSTR_TIME_SET_CURRENT(elapsed);
		INSTR_TIME_SUBTRACT(elapsed, start);
		bc_stats_record(who, BC_OUTCOME_ERROR, INSTR_TIME_GET_MILLISEC(elapsed));
		ReThrowError(end.error);
	}
	if (end.refusal != NULL)
	{
		MemoryContext old;

		/* Counted before the event, which the rate bound may leave out. */
		bc_stats_refusal(who, end.refusal);
		if (strcmp(who, "attest") == 0)
			bc_stats_attest_failure(end.refusal);
		bc_record_refusal(end.refusal, end.tenant, req);
		old = MemoryContextSwitchTo(outcxt);
		response = bc_refusal_response();
		MemoryContextSwitchTo(old);
	}
	else
	{
		/* a round answers: NULL would have rolled back what it wrote */
		Assert(end.answer != NULL);
		response = end.answer;
	}
	INSTR_TIME_SET_CURRENT(elapsed);
	INSTR_TIME_SUBTRACT(elapsed, start);
	bc_stats_record(who, outcome_of(response, end.refusal != NULL), INSTR_TIME_GET_MILLISEC(elapsed));
	return response;
}
