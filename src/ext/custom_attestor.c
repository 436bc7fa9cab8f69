/*
 * custom_attestor.c: running a custom attestor, a registered SQL function
 * (evidence jsonb, context jsonb) RETURNS jsonb, inside the join's
 * subtransaction like a built-in: its reads and writes are the join's, its
 * refusal (bc_join.refuse) is the join's refusal, any other error fails the
 * join, and its answer is parsed by the same code as every result.
 */
#include "bc_join.h"

#include "fmgr.h"
#include "utils/builtins.h"

/* The evidence: {"attestor", "payload", "token"}. */
static Jsonb *
build_evidence(const BcJoinRequest *req)
{
	StringInfoData buf;

	initStringInfo(&buf);
	bc_json_begin(&buf);
	bc_json_member(&buf, "attestor", req->attestor);
	bc_json_member(&buf, "payload",
				   req->attestation_b64 && req->attestation_b64[0] ? req->attestation_b64 : NULL);
	bc_json_member(&buf, "token", req->token);
	bc_json_end(&buf);
	return bc_jsonb(buf.data);
}

/*
 * The context every SQL function of an attestor gets: {"claims",
 * "csrSha256", "csrSpkiSha256", "role"}, and in a repeat "repeatOf":
 * {"serial", "nodeId", "tenantId"}, the certificate this CSR holds, which
 * the round asks for again: what the round that issued it spent is this
 * round's own (docs/attestors.md, "Repeats").
 */
Jsonb *
bc_attestor_context(const BcJoinRequest *req)
{
	StringInfoData buf;

	initStringInfo(&buf);
	bc_json_begin(&buf);
	bc_json_member_raw(&buf, "claims",
					   JsonbToCString(NULL, &req->claims->root, VARSIZE(req->claims)));
	bc_json_member(&buf, "csrSha256", req->csr_sha256_b64);
	bc_json_member(&buf, "csrSpkiSha256", req->csr_spki_sha256_b64);
	bc_json_member(&buf, "role", req->role);
	if (req->repeat != NULL)
	{
		bc_json_key(&buf, "repeatOf");
		bc_json_begin(&buf);
		bc_json_member(&buf, "serial", req->repeat->serial_hex);
		bc_json_member(&buf, "nodeId", req->repeat->node_id);
		bc_json_member(&buf, "tenantId", req->repeat->tenant_id);
		bc_json_end(&buf);
	}
	bc_json_end(&buf);
	return bc_jsonb(buf.data);
}

/* Run the attestor's SQL function and parse what it answers. */
void
bc_custom_attestor_verify(const BcAttestor *att, const BcJoinRequest *req, BcOutcome *out)
{
	FmgrInfo	flinfo;
	LOCAL_FCINFO(fcinfo, 2);
	Datum		answer;

	if (!OidIsValid(att->verify_fn))
		ereport(ERROR,
				(errcode(ERRCODE_BC_INVALID_CONFIG),
				 errmsg("the verify function of attestor %s does not exist", att->id),
				 errdetail("INVALID_CONFIG: the function was dropped or renamed after it was registered."),
				 errhint("Register the attestor again with bc_join.register_attestor(), or unregister it.")));
	/* A join token limited to other attestors is refused before verify sees it. */
	bc_refuse_token_limited_to_others(att->id, req->token);
	fmgr_info(att->verify_fn, &flinfo);
	InitFunctionCallInfoData(*fcinfo, &flinfo, 2, InvalidOid, NULL, NULL);
	fcinfo->args[0].value = JsonbPGetDatum(build_evidence(req));
	fcinfo->args[0].isnull = false;
	fcinfo->args[1].value = JsonbPGetDatum(bc_attestor_context(req));
	fcinfo->args[1].isnull = false;

	answer = FunctionCallInvoke(fcinfo);
	if (fcinfo->isnull)
		bc_invalid_config("attestor \"%s\" returned NULL", att->id);
	bc_parse_outcome(att->id, DatumGetJsonbP(answer), out);
}
