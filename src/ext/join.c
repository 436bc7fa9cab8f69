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

static BcPlan registered_attestor = {
	"SELECT version, roles, verify::oid FROM bc_join.attestors WHERE id = $1",
	1, {TEXTOID}
};

/*
 * The registry (bc_join.attestors) as this backend last read it: one entry
 * per id looked up, NULL verify_fn for "not registered".  A trigger on the
 * table invalidates its relcache entry on every change; the callback below
 * then empties this cache, in this backend at the next command and in the
 * others when the change commits.  A join does not query the registry
 * again for an id it knows.
 */
typedef struct CachedAttestor
{
	struct CachedAttestor *next;
	BcAttestor	att;			/* verify_fn InvalidOid: not registered */
} CachedAttestor;

static CachedAttestor *attestor_cache = NULL;
static MemoryContext attestor_cache_cxt = NULL;
static bool attestor_cache_hooked = false;

/* Relcache callback: any change to the registry empties the cache. */
static void
attestor_cache_inval(Datum arg, Oid relid)
{
	if (attestor_cache_cxt != NULL)
		MemoryContextReset(attestor_cache_cxt);
	attestor_cache = NULL;
}

/* The registry's answer for id, read through the cache. */
static const BcAttestor *
registered_lookup(const char *id)
{
	CachedAttestor *c;
	Datum		v;
	MemoryContext old;

	if (!attestor_cache_hooked)
	{
		attestor_cache_cxt = AllocSetContextCreate(TopMemoryContext, "bc_join attestors",
												   ALLOCSET_SMALL_SIZES);
		CacheRegisterRelcacheCallback(attestor_cache_inval, (Datum) 0);
		attestor_cache_hooked = true;
	}
	for (c = attestor_cache; c != NULL; c = c->next)
	{
		if (strcmp(c->att.id, id) == 0)
			return c->att.verify_fn != InvalidOid ? &c->att : NULL;
	}

	v = CStringGetTextDatum(id);
	old = MemoryContextSwitchTo(attestor_cache_cxt);
	c = palloc0(sizeof(CachedAttestor));
	c->att.id = pstrdup(id);
	MemoryContextSwitchTo(old);
	if (bc_spi_exec(&registered_attestor, &v, NULL, true, 1) == 1)
	{
		bool		isnull;
		Datum	   *elems;
		int			n;
		int			i;
		const char **roles;
		char	   *version = bc_spi_text(1);
		ArrayType  *arr = DatumGetArrayTypeP(bc_spi_datum(2, &isnull));
		Oid			fn = DatumGetObjectId(bc_spi_datum(3, &isnull));

		deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, NULL, &n);
		old = MemoryContextSwitchTo(attestor_cache_cxt);
		roles = palloc0(sizeof(char *) * (n + 1));
		for (i = 0; i < n; i++)
			roles[i] = TextDatumGetCString(elems[i]);
		c->att.roles = roles;
		c->att.version = pstrdup(version);
		c->att.verify_fn = fn;
		MemoryContextSwitchTo(old);
	}
	c->next = attestor_cache;
	attestor_cache = c;
	return c->att.verify_fn != InvalidOid ? &c->att : NULL;
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
