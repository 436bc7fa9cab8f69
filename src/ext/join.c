/*
 * join.c: bc_join(request jsonb), one join round in the caller's transaction.
 *
 *   parse and bound the request (22023)  ->  pick the attestor (0A000)
 *   -> subtransaction { role admitted? -> open the sealed token against the
 *      CSR -> attestor verify -> deferral: signed, nothing issued or spent
 *      | result: validate -> proof of possession -> node, certificate,
 *      binding, events, audit, spend -> signed response }
 *   refusal (JR001): roll the subtransaction back, record
 *   security.join.refused, return the one refusal.
 *   any other error: roll back and raise it; nothing is recorded.
 */
#include "bc_join.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "miscadmin.h"
#include "utils/lsyscache.h"
#include "catalog/pg_type_d.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "portability/instr_time.h"
#include "utils/resowner.h"

/* The attestors built into JoinService; a registered one with the same id wins. */
static const BcAttestor *const builtin_attestors[] = {
	&bc_join_token_attestor,
	NULL
};

static BcPlan registered_attestors = {
	"SELECT id, version, roles, verify::oid FROM bc_join.attestors",
	0, {InvalidOid}
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

/* Relcache callback: a change to the registry marks the cache stale, nothing more. */
static void
attestor_cache_inval(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == attestor_registry_relid)
		attestor_cache_valid = false;
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

	/*
	 * Marked valid before the query: an invalidation that arrives while it
	 * runs marks it stale again, and the next lookup reads it once more.
	 */
	attestor_cache_valid = true;
	attestor_registry_relid = get_relname_relid("attestors", get_namespace_oid("bc_join", false));

	/* Under the caller's context until built, so an error frees it. */
	cxt = AllocSetContextCreate(CurrentMemoryContext, "bc_join attestors",
								ALLOCSET_SMALL_SIZES);
	rows = bc_spi_exec(&registered_attestors, NULL, NULL, true, 0);
	old = MemoryContextSwitchTo(cxt);
	att = palloc0(sizeof(BcAttestor) * (rows + 1));
	for (i = 0; i < rows; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		Datum	   *elems;
		int			n;
		int			j;
		const char **roles;
		ArrayType  *arr;

		CHECK_FOR_INTERRUPTS();
		att[i].id = TextDatumGetCString(SPI_getbinval(tup, desc, 1, &isnull));
		att[i].version = TextDatumGetCString(SPI_getbinval(tup, desc, 2, &isnull));
		arr = DatumGetArrayTypeP(SPI_getbinval(tup, desc, 3, &isnull));
		deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, NULL, &n);
		roles = palloc0(sizeof(char *) * (n + 1));
		for (j = 0; j < n; j++)
			roles[j] = TextDatumGetCString(elems[j]);
		att[i].roles = roles;
		att[i].verify_fn = DatumGetObjectId(SPI_getbinval(tup, desc, 4, &isnull));
	}
	MemoryContextSwitchTo(old);

	MemoryContextSetParent(cxt, TopMemoryContext);
	if (attestor_cache_cxt != NULL)
		MemoryContextDelete(attestor_cache_cxt);
	attestor_cache_cxt = cxt;
	attestor_cache.n = (int) rows;
	attestor_cache.att = att;
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
static const BcAttestor *
find_attestor(const char *id)
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

/* 1 when role is one the attestor may admit. */
static bool
role_admitted(const BcAttestor *att, const char *role)
{
	int			i;

	for (i = 0; att->roles[i] != NULL; i++)
	{
		if (strcmp(att->roles[i], role) == 0)
			return true;
	}
	return false;
}

/*
 * Open the sealed token with the encryption key; refuse it unless it was
 * sealed for this CSR.  The plaintext lands in req->token.
 */
static void
open_sealed_token(BcJoinRequest *req, const char *attestor)
{
	char	   *bound = NULL;
	unsigned char *pt = NULL;
	size_t		ptlen = 0;
	int			st;
	bool		same;

	st = bc_jwe_open(bc_keys()->encryption, req->sealed_token, strlen(req->sealed_token),
					 BC_TOKEN_MAX, "csrSha256", &bound, &pt, &ptlen);
	if (st != BC_OK)
		bc_refuse_join(psprintf("%s:%s", attestor,
								st == BC_EVERIFY ? "unsealable" : "malformed-seal"), NULL);
	same = strcmp(bound, req->csr_sha256_b64) == 0;
	bc_free(bound);
	if (!same)
	{
		bc_free_secret(pt, ptlen + 1);
		bc_refuse_join(psprintf("%s:csr-binding", attestor), NULL);
	}
	/* The plaintext is compared whole: a NUL inside would cut it short. */
	if (ptlen == 0 || memchr(pt, '\0', ptlen) != NULL)
	{
		bc_free_secret(pt, ptlen + 1);
		bc_refuse_join(psprintf("%s:malformed-seal", attestor), NULL);
	}
	req->token = palloc(ptlen + 1);
	memcpy(req->token, pt, ptlen + 1);
	bc_free_secret(pt, ptlen + 1);
}

/* The signed deferral: pending (approval) or challenge, bound to the CSR. */
static Jsonb *
deferral_response(const BcJoinRequest *req, const BcOutcome *out, MemoryContext outcxt)
{
	StringInfoData payload;
	bool		approval = strcmp(out->kind, "approval") == 0;

	initStringInfo(&payload);
	appendStringInfo(&payload, "{\"status\":\"%s\"", approval ? "pending" : "challenge");
	bc_json_member(&payload, "csrSha256", req->csr_sha256_b64);
	bc_json_member(&payload, "issuedAt", bc_rfc3339(bc_now()));
	bc_json_member(&payload, "attestor", req->attestor);
	if (approval)
	{
		bc_json_member(&payload, "requestId", out->request_id);
		appendStringInfo(&payload, ",\"retryAfterSeconds\":%d", out->retry_after_seconds);
	}
	else
	{
		bc_json_member(&payload, "challenge", out->challenge_b64);
		bc_json_member(&payload, "notAfter", bc_rfc3339(out->not_after));
	}
	appendStringInfoChar(&payload, '}');
	return bc_signed_response(approval ? "pending" : "challenge", &payload, outcxt);
}

/* One join round: verify, then defer or admit.  Raises JR001 to refuse. */
static Jsonb *
join_round(BcJoinRequest *req, void *arg, MemoryContext outcxt)
{
	const BcAttestor *att = (const BcAttestor *) arg;
	BcOutcome	out;
	int			ttl;

	memset(&out, 0, sizeof(out));
	bc_single_use_reset();

	if (!role_admitted(att, req->role))
		bc_refuse_join(psprintf("%s:role-not-admitted", att->id), NULL);

	/* One key, one join: a replay gets its certificate again, anything else is refused. */
	{
		Jsonb	   *again = bc_key_reuse_check(req, "join", true, outcxt);

		if (again != NULL)
			return again;
	}
	if (req->sealed_token != NULL)
		open_sealed_token(req, att->id);

	if (att->verify != NULL)
		att->verify(req, &out);
	else
		bc_sql_attestor_verify(att, req, &out);

	/* Proof of possession: the CSR is signed by the key it asks for. */
	if (out.deferred)
	{
		bc_validate_deferral(att->id, &out);
		if (bc_csr_verify_pop(req->csr) != BC_OK)
			bc_refuse_join("join:csr-signature", NULL);
		return deferral_response(req, &out, outcxt);
	}
	bc_validate_result(req, &out.result, &ttl);
	if (bc_csr_verify_pop(req->csr) != BC_OK)
		bc_refuse_join("join:csr-signature", out.result.tenant_id);
	return bc_admit(req, &out.result, ttl, outcxt);
}

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
		if (status->val.string.len == 7 && strncmp(status->val.string.val, "pending", 7) == 0)
			return BC_OUTCOME_DEFERRED_APPROVAL;
		if (status->val.string.len == 9 && strncmp(status->val.string.val, "challenge", 9) == 0)
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

PG_FUNCTION_INFO_V1(bc_join_request);

/* bc_join(request jsonb): one join round. */
Datum
bc_join_request(PG_FUNCTION_ARGS)
{
	Jsonb	   *jb = PG_GETARG_JSONB_P(0);
	MemoryContext callcxt = CurrentMemoryContext;
	BcJoinRequest req;
	const BcAttestor *att;
	Jsonb	   *out;

	bc_parse_join_request(jb, &req, callcxt);

	bc_require_config();

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	att = find_attestor(req.attestor);
	out = bc_run_round(&req, join_round, (void *) att, att->id, callcxt);
	SPI_finish();

	PG_RETURN_JSONB_P(out);
}
