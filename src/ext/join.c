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

#include "fmgr.h"
#include "utils/builtins.h"

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
 * Open the sealed token with an encryption key; refuse it unless it was
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
	const BcKeys *keys = bc_keys();
	EVP_PKEY   *key = NULL;
	int			i;

	/*
	 * The current encryption key first, then the next and the previous one:
	 * an agent seals to the key it pins, which during a rotation may be
	 * either (a wrong key fails the AEAD tag, BC_EVERIFY).
	 */
	st = BC_EVERIFY;
	for (i = 0; i < keys->n_encryption && st == BC_EVERIFY; i++)
	{
		key = keys->encryption_set[i];
		st = bc_jwe_open(key, req->sealed_token, strlen(req->sealed_token),
						 BC_TOKEN_MAX, "csrSha256", &bound, &pt, &ptlen);
	}

	/*
	 * A seal that does not authenticate (the tag, BC_EVERIFY) or does not
	 * parse is the requester's: refused.  The encryption key failing in
	 * its own ECDH (a TPM or token away) is not: never a refusal.
	 */
	if (st != BC_OK && !bc_status_is_input(st))
		bc_key_failed("open a sealed token with encryption.key", key, st);
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
	/* A provisioning token is for the provisioned attestor alone. */
	if (strcmp(attestor, BC_ATTESTOR_PROVISIONED) != 0 && ptlen > 3 && memcmp(pt, "pt_", 3) == 0)
	{
		bc_free_secret(pt, ptlen + 1);
		bc_refuse_join(psprintf("%s:provisioning-token", attestor), NULL);
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

/* The attestor's verify: a built-in's C function or a registered SQL one. */
static void
run_verify(const BcAttestor *att, BcJoinRequest *req, BcOutcome *out)
{
	if (req->sealed_token != NULL)
		open_sealed_token(req, att->id);
	if (att->verify != NULL)
		att->verify(req, out);
	else
		bc_custom_attestor_verify(att, req, out);
}

/* A join round's verification alone (check.c): the role, the sealed token, the attestor's verify. */
void
bc_join_verify(const BcAttestor *att, BcJoinRequest *req, BcOutcome *out)
{
	if (!role_admitted(att, req->role))
		bc_refuse_join(psprintf("%s:role-not-admitted", att->id), NULL);
	run_verify(att, req, out);
}

/*
 * A deferral of the running round: validated, the CSR's signature, and for
 * a registered attestor's challenge its notAfter recorded (a later final
 * round is refused once it passed: the attestor's own state may not say).
 */
static Jsonb *
defer(const BcAttestor *att, BcJoinRequest *req, BcOutcome *out, MemoryContext outcxt)
{
	bc_validate_deferral(att->id, out);
	if (bc_csr_verify_pop(req->csr) != BC_OK)
		bc_refuse_join("join:csr-signature", NULL);
	if (att->verify == NULL && strcmp(out->kind, "challenge") == 0)
		bc_challenge_deadline_record(att->id, out->not_after);
	return bc_deferral_response(req, out, outcxt);
}

/*
 * The uses the certificate's own round spent: the rows of attestation_uses
 * recorded with this CSR (the column's default in a join round).  A repeat
 * deletes them in its subtransaction before the attestor runs, so that
 * they are out of its sight (a plain INSERT ... ON CONFLICT DO NOTHING
 * goes in, a SELECT finds nothing), and hands them back as JSON.
 */
static BcPlan hide_round_uses = {
	"WITH gone AS (DELETE FROM bc_join.attestation_uses WHERE csr_sha256 = $1 RETURNING *) "
	"SELECT pg_catalog.jsonb_agg(pg_catalog.to_jsonb(gone)) FROM gone",
	1, {BYTEAOID}
};

/* The hidden uses back as they were (a repeat that keeps its writes: a challenge). */
static BcPlan restore_round_uses = {
	"INSERT INTO bc_join.attestation_uses "
	"SELECT * FROM pg_catalog.jsonb_populate_recordset(NULL::bc_join.attestation_uses, $1)",
	1, {JSONBOID}
};

/* Hide the uses of the certificate's round; NULL when it spent none. */
static Jsonb *
hide_certificate_uses(const BcJoinRequest *req, MemoryContext cxt)
{
	Datum		v = PointerGetDatum(bc_bytea(req->csr_sha256, BC_SHA256_LEN));
	Datum		d;
	bool		isnull;
	Jsonb	   *rows;
	Jsonb	   *copy;

	if (bc_spi_exec(&hide_round_uses, &v, NULL, false, 1) != 1)
		return NULL;
	d = bc_spi_datum(1, &isnull);
	if (isnull)
		return NULL;
	rows = DatumGetJsonbP(d);
	copy = MemoryContextAlloc(cxt, VARSIZE(rows));
	memcpy(copy, rows, VARSIZE(rows));
	return copy;
}

/*
 * The repeat's verification, in its own subtransaction (repeat_round): the
 * certificate's uses hidden, the attestor run again; a challenge is
 * answered (kept: the attestor's challenge rows and the hidden uses back),
 * a verification answers NULL (rolled back: nothing it wrote stays).
 */
static Jsonb *
repeat_verify(BcJoinRequest *req, void *arg, MemoryContext outcxt)
{
	const BcAttestor *att = (const BcAttestor *) arg;
	Jsonb	   *hidden = hide_certificate_uses(req, CurrentMemoryContext);
	BcOutcome	out;
	Jsonb	   *deferral;

	memset(&out, 0, sizeof(out));
	run_verify(att, req, &out);
	if (out.deferred)
	{
		if (strcmp(out.kind, "challenge") != 0)
			bc_refuse_join("join:repeat-approval", NULL);
		deferral = defer(att, req, &out, outcxt);
		/* the attestor's challenge rows stay, and so do the certificate's uses */
		if (hidden != NULL)
		{
			Datum		v = JsonbPGetDatum(hidden);

			bc_spi_exec(&restore_round_uses, &v, NULL, false, 0);
		}
		return deferral;
	}
	if (att->verify == NULL)
		bc_challenge_deadline_check(att->id, out.result.tenant_id);
	bc_validate_repeat(req, &out.result);
	if (bc_csr_verify_pop(req->csr) != BC_OK)
		bc_refuse_join("join:csr-signature", NULL);
	return NULL;				/* verified: nothing it wrote stays */
}

/*
 * A final round repeated with the CSR of a current certificate: it must
 * present evidence that verifies again, for the same subject as the round
 * that issued, every check as then except that what that round spent is
 * out of the attestor's sight: the uses recorded with this CSR are
 * deleted in the repeat's subtransaction before the attestor runs (an
 * attestor written as the seed's, whose single-use step is a plain INSERT
 * into attestation_uses, verifies again as in the first round), and the
 * built-ins are told by bc_round_repeat (a token found spent by the
 * certificate).  The subtransaction is rolled back once the repeat
 * verified: a repeat writes nothing of the attestor's and spends nothing,
 * the hidden uses are back; the answer is the certificate again.  Any
 * refusal on the way is join:key-reused, the attestor's reason in the
 * event's detail.  A repeat may be challenged again (the challenge is
 * answered by a repeat; its rows are kept and the hidden uses restored);
 * it is never deferred for approval.
 */
static Jsonb *
repeat_round(const BcAttestor *att, BcJoinRequest *req, MemoryContext outcxt)
{
	BcRoundEnd	end;
	StringInfoData detail;

	bc_join_round_repeat(req);
	bc_round_subxact(req, repeat_verify, (void *) att, att->id, outcxt, &end);
	if (end.error != NULL)
		ReThrowError(end.error);
	if (end.refusal != NULL)
	{
		initStringInfo(&detail);
		bc_json_begin(&detail);
		bc_json_member(&detail, "repeatOf", req->repeat->serial_hex);
		bc_json_member(&detail, "refusal", end.refusal);
		bc_json_end(&detail);
		bc_refuse_join_detail("join:key-reused", end.tenant, detail.data);
	}
	if (end.answer != NULL)
		return end.answer;
	return bc_repeat_response(req, outcxt);
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
	bc_challenge_round_begin(req);
	bc_join_round_begin(req);

	if (!role_admitted(att, req->role))
		bc_refuse_join(psprintf("%s:role-not-admitted", att->id), NULL);

	/* One key, one join: a repeat must prove the same again, anything else is refused. */
	bc_key_reuse_check(req, "join", true);
	if (req->repeat != NULL)
		return repeat_round(att, req, outcxt);

	run_verify(att, req, &out);

	/* Proof of possession: the CSR is signed by the key it asks for. */
	if (out.deferred)
		return defer(att, req, &out, outcxt);
	if (att->verify == NULL)
		bc_challenge_deadline_check(att->id, out.result.tenant_id);
	bc_validate_result(req, &out.result, &ttl);
	if (bc_csr_verify_pop(req->csr) != BC_OK)
		bc_refuse_join("join:csr-signature", out.result.tenant_id);
	return bc_admit(req, &out.result, ttl, outcxt);
}

PG_FUNCTION_INFO_V1(bc_join_request);

/* bc_join(request jsonb): one join round.  Not STRICT: a NULL request is malformed input. */
Datum
bc_join_request(PG_FUNCTION_ARGS)
{
	Jsonb	   *jb;
	MemoryContext callcxt = CurrentMemoryContext;
	BcJoinRequest req;
	const BcAttestor *att;
	Jsonb	   *volatile out = NULL;

	bc_require_sql_version();
	if (PG_ARGISNULL(0))
		bc_invalid_input("the request is NULL");
	jb = PG_GETARG_JSONB_P(0);
	bc_parse_join_request(jb, &req, callcxt);

	bc_require_config();
	bc_require_primary();

	bc_spi_connect();
	att = bc_find_attestor(req.attestor);
	PG_TRY();
	{
		out = bc_run_round(&req, join_round, (void *) att, att->id, callcxt);
	}
	PG_FINALLY();
	{
		bc_challenge_round_end();
		bc_join_round_end();
	}
	PG_END_TRY();
	SPI_finish();

	PG_RETURN_JSONB_P(out);
}
