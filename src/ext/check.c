/*
 * check.c: bc_join.check_evidence(attestor, evidence, at, csr, role), the
 * operator's diagnostic (docs/operator.md, "Checking evidence from the
 * field"): evidence captured from a machine (a cloud's signed document, TPM
 * evidence) is verified by the very code a join runs, at a time the
 * operator names, and nothing is admitted.
 *
 * The round is a join round's first half as join.c runs it: the role, the
 * attestor's verify (bc_join_verify), then the result's validation
 * (bc_validate_result) or the deferral's, and the CSR's proof of
 * possession when a CSR is given.  Only three things differ:
 *   - the service clock (bc_now(), compute_now()) reads `at` (util.c);
 *   - it runs in a subtransaction that is always rolled back, so nothing
 *     it wrote stays (no node, certificate, use of evidence, spent token,
 *     event or audit row), and no refusal is recorded;
 *   - what the request would bring beside the evidence and the operator
 *     did not give (the CSR the evidence is bound to; a sealed join token)
 *     is named in the answer's "unchecked" instead of refusing: the
 *     verifiers ask bc_check_no_csr / bc_check_no_token at exactly those
 *     checks.  Everything else is checked, and a refusal is the attestor's
 *     own reason.
 * What the verifiers read (account, instance, EK, AK, ...) they note with
 * bc_check_note; outside a check these calls do nothing.  Those calls and
 * the running check's state are check_state.c's, below the attestors (which
 * call them) and below this file (which calls the attestors through
 * registry.c and join.c), so that no circle runs through the two.
 */
#include "bc_join.h"

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"

/* The answer's "result": what the join would admit. */
static void
result_json(StringInfo b, const BcAttestResult *r)
{
	char		hex[2 * BC_SHA256_LEN + 1];
	int			i;

	bc_json_key(b, "result");
	bc_json_begin(b);
	bc_json_member(b, "tenantId", r->tenant_id);
	bc_json_member(b, "role", r->role);
	if (r->pool_id)
		bc_json_member(b, "poolId", r->pool_id);
	if (r->site_id)
		bc_json_member(b, "siteId", r->site_id);
	if (r->node_id)
		bc_json_member(b, "nodeId", r->node_id);
	if (r->token_id)
		bc_json_member(b, "tokenId", r->token_id);
	if (r->node_key_uri)
		bc_json_member(b, "nodeKeyUri", r->node_key_uri);
	if (r->has_bind)
	{
		for (i = 0; i < BC_SHA256_LEN; i++)
			snprintf(hex + 2 * i, 3, "%02x", r->bind[i]);
		bc_json_member(b, "bind", hex);
	}
	if (r->joined_detail)
		bc_json_member_raw(b, "detail", r->joined_detail);
	bc_json_end(b);
}

/* The verification half of a join round, in the running subtransaction. */
static void
verify_round(const BcAttestor *att, BcJoinRequest *req, BcOutcome *out)
{
	int			ttl;

	bc_single_use_reset();
	bc_challenge_round_begin(req);
	bc_join_round_begin(req);
	bc_join_verify(att, req, out);
	if (out->deferred)
		bc_validate_deferral(att->id, out);
	else
	{
		if (att->verify == NULL)
			bc_challenge_deadline_check(att->id, out->result.tenant_id);
		bc_validate_result(req, &out->result, &ttl);
	}
	if (req->csr != NULL && bc_csr_verify_pop(req->csr) != BC_OK)
		bc_refuse_join("join:csr-signature", out->deferred ? NULL : out->result.tenant_id);
}

/* What check_round verifies with: the attestor, and where its outcome goes. */
typedef struct CheckCall
{
	const BcAttestor *att;
	BcOutcome  *out;
} CheckCall;

/* The check's round for bc_round_subxact: verified, it answers NULL (rolled back all the same). */
static Jsonb *
check_round(BcJoinRequest *req, void *arg, MemoryContext outcxt)
{
	CheckCall  *c = (CheckCall *) arg;

	verify_round(c->att, req, c->out);
	return NULL;
}

PG_FUNCTION_INFO_V1(bc_check_evidence_sql);

/*
 * bc_join.check_evidence(attestor, evidence, at, csr, role): the answer
 * {"ok", "attestor", "at", "outcome" (result, challenge, approval,
 * refused), "refusal"?, "result"?, "read", "unchecked"}.
 */
Datum
bc_check_evidence_sql(PG_FUNCTION_ARGS)
{
	MemoryContext callcxt = CurrentMemoryContext;
	BcJoinRequest req;
	const BcAttestor *att;
	BcOutcome	out;
	CheckCall	c = {NULL, &out};
	BcRoundEnd	end;
	TimestampTz at;
	bytea	   *evidence;
	char	   *volatile refusal = NULL;
	StringInfoData ans;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		bc_invalid_input("check_evidence needs an attestor and the evidence");
	bc_require_sql_version();

	/* The request a join would have: this evidence, this CSR (or none), no token. */
	memset(&req, 0, sizeof(req));
	req.attestor = text_to_cstring(PG_GETARG_TEXT_PP(0));
	if (!bc_attestor_id_valid(req.attestor))
		bc_invalid_input("\"attestor\" may hold only a-z, 0-9, '.', '_' and '-'");
	req.role = PG_ARGISNULL(4) ? BC_ROLE_NODE : text_to_cstring(PG_GETARG_TEXT_PP(4));
	if (!bc_role_valid(req.role))
		bc_invalid_input("\"role\" must be node, site or ramdisk");
	evidence = PG_GETARG_BYTEA_PP(1);
	if (VARSIZE_ANY_EXHDR(evidence) > BC_REQUEST_MAX)
		bc_invalid_input("the evidence is over %d bytes", BC_REQUEST_MAX);
	if (VARSIZE_ANY_EXHDR(evidence) > 0)
	{
		req.attestation = bc_bytea(VARDATA_ANY(evidence), VARSIZE_ANY_EXHDR(evidence));
		req.attestation_b64 = palloc(bc_b64url_encoded_len(VARSIZE_ANY_EXHDR(evidence)) + 1);
		bc_b64url_encode((const unsigned char *) VARDATA_ANY(evidence), VARSIZE_ANY_EXHDR(evidence),
						 (char *) req.attestation_b64);
	}
	req.claims = bc_jsonb("{}");
	if (!PG_ARGISNULL(3))
	{
		bytea	   *csr = PG_GETARG_BYTEA_PP(3);
		char	   *b64 = palloc(bc_b64url_encoded_len(VARSIZE_ANY_EXHDR(csr)) + 1);

		bc_b64url_encode((const unsigned char *) VARDATA_ANY(csr), VARSIZE_ANY_EXHDR(csr), b64);
		bc_parse_csr(b64, &req, callcxt);
	}
	at = PG_ARGISNULL(2) ? bc_now() : PG_GETARG_TIMESTAMPTZ(2);

	bc_require_config();
	bc_require_primary();
	bc_spi_connect();
	att = bc_find_attestor(req.attestor);
	c.att = att;

	memset(&out, 0, sizeof(out));
	PG_TRY();
	{
		bc_check_begin(callcxt, req.csr == NULL);
		bc_clock_fix(at);
		MemoryContextSwitchTo(callcxt);
		bc_round_subxact(&req, check_round, &c, att->id, callcxt, &end);
		if (end.error != NULL)
			ReThrowError(end.error);
		refusal = end.refusal;
	}
	PG_FINALLY();
	{
		bc_clock_unfix();
		bc_check_end();
		bc_challenge_round_end();
		bc_join_round_end();
	}
	PG_END_TRY();
	SPI_finish();

	initStringInfo(&ans);
	bc_json_begin(&ans);
	bc_json_member_bool(&ans, "ok", refusal == NULL);
	bc_json_member(&ans, "attestor", att->id);
	bc_json_member(&ans, "at", bc_rfc3339(at));
	if (refusal != NULL)
	{
		bc_json_member(&ans, "outcome", "refused");
		bc_json_member(&ans, "refusal", refusal);
	}
	else if (out.deferred)
		bc_json_member(&ans, "outcome", out.kind);
	else
	{
		bc_json_member(&ans, "outcome", "result");
		result_json(&ans, &out.result);
	}
	bc_json_member_raw(&ans, "read", psprintf("{%s}", bc_check_read()));
	bc_json_member_raw(&ans, "unchecked", psprintf("[%s]", bc_check_unchecked()));
	bc_json_end(&ans);
	PG_RETURN_JSONB_P(bc_jsonb(ans.data));
}
