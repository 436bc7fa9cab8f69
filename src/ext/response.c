/*
 * response.c: the signed answers of JoinService, each bound to the CSR it
 * answers: the "issued" payload (joins, renewals, sessions build on it), its
 * certificate chain, and the JWS wrapped as {"status", "response"}.
 */
#include "bc_join.h"

#include "utils/builtins.h"

/* Sign a response payload and wrap it as {"status", "response"} in outcxt. */
Jsonb *
bc_signed_response(const char *status, StringInfo payload, MemoryContext outcxt)
{
	const BcKeys *keys = bc_keys();
	char	   *jws = NULL;
	int			st;
	MemoryContext old;
	Jsonb	   *out;

	bc_require_signing_key_live(keys);
	st = bc_jws_sign_es256(keys->signing, keys->signing_kid,
						   (unsigned char *) payload->data, payload->len, &jws);
	if (st != BC_OK)
		bc_key_failed("sign the join response with signing.key", keys->signing, st);
	old = MemoryContextSwitchTo(outcxt);
	jws = bc_take_cstring(jws);
	/* {"status", "response"} built as jsonb directly: no JSON text to parse back */
	{
		JsonbParseState *ps = NULL;
		JsonbValue	k;
		JsonbValue	v;

		(void) pushJsonbValue(&ps, WJB_BEGIN_OBJECT, NULL);
		k.type = jbvString;
		k.val.string.val = "status";
		k.val.string.len = 6;
		v.type = jbvString;
		v.val.string.val = (char *) status;
		v.val.string.len = strlen(status);
		(void) pushJsonbValue(&ps, WJB_KEY, &k);
		(void) pushJsonbValue(&ps, WJB_VALUE, &v);
		k.val.string.val = "response";
		k.val.string.len = 8;
		v.val.string.val = jws;
		v.val.string.len = strlen(jws);
		(void) pushJsonbValue(&ps, WJB_KEY, &k);
		(void) pushJsonbValue(&ps, WJB_VALUE, &v);
		out = JsonbValueToJsonb(pushJsonbValue(&ps, WJB_END_OBJECT, NULL));
	}
	MemoryContextSwitchTo(old);
	return out;
}

/*
 * Open an "issued" payload: {"status":"issued","csrSha256","issuedAt",
 * "nodeId","tenantId" ... (the caller appends the rest and the brace).
 */
void
bc_issued_payload_start(StringInfo payload, const BcJoinRequest *req, const char *node_id,
						const char *tenant_id)
{
	initStringInfo(payload);
	bc_json_begin(payload);
	bc_json_member(payload, "status", BC_STATUS_ISSUED);
	bc_json_member(payload, "csrSha256", req->csr_sha256_b64);
	bc_json_member(payload, "issuedAt", bc_rfc3339(bc_now()));
	bc_json_member(payload, "nodeId", node_id);
	bc_json_member(payload, "tenantId", tenant_id);
}

/* Append ,"certificateChain":[<leaf>,<node-ca.crt: the issuing CA .. root>] (base64 DER). */
void
bc_append_chain(StringInfo payload, const BcIssued *issued)
{
	const BcKeys *keys = bc_keys();
	char	   *leaf_b64 = palloc(bc_b64_encoded_len(issued->leaf_der_len) + 1);

	bc_b64_encode(issued->leaf_der, issued->leaf_der_len, leaf_b64);
	bc_json_member_raw(payload, "certificateChain",
					   psprintf("[\"%s\",%s]", leaf_b64, keys->node_ca_chain_b64));
}

/* The signed "issued" response for a certificate just recorded, bound to the CSR. */
Jsonb *
bc_issued_response(const BcJoinRequest *req, const char *node_id, const char *tenant_id,
				   const char *role, int generation, const BcIssued *issued,
				   Datum allowed_kinds, bool has_allowed_kinds, MemoryContext outcxt)
{
	StringInfoData payload;

	bc_issued_payload_start(&payload, req, node_id, tenant_id);
	bc_json_member(&payload, "role", role);
	bc_json_member(&payload, "spiffeId", issued->spiffe_id);
	bc_json_member(&payload, "serial", issued->serial_hex);
	bc_json_member_int(&payload, "identityGeneration", generation);
	bc_append_chain(&payload, issued);
	bc_json_member_raw(&payload, "allowedKinds",
					   has_allowed_kinds ?
					   TextDatumGetCString(DirectFunctionCall1(array_to_json, allowed_kinds)) :
					   "null");
	bc_json_member(&payload, "notAfter", bc_rfc3339(issued->not_after));
	bc_json_end(&payload);
	return bc_signed_response(BC_STATUS_ISSUED, &payload, outcxt);
}

/* The signed deferral: pending (approval) or challenge, bound to the CSR. */
Jsonb *
bc_deferral_response(const BcJoinRequest *req, const BcOutcome *out, MemoryContext outcxt)
{
	StringInfoData payload;
	bool		approval = strcmp(out->kind, "approval") == 0;

	initStringInfo(&payload);
	bc_json_begin(&payload);
	bc_json_member(&payload, "status", approval ? BC_STATUS_PENDING : BC_STATUS_CHALLENGE);
	bc_json_member(&payload, "csrSha256", req->csr_sha256_b64);
	bc_json_member(&payload, "issuedAt", bc_rfc3339(bc_now()));
	bc_json_member(&payload, "attestor", req->attestor);
	if (approval)
	{
		bc_json_member(&payload, "requestId", out->request_id);
		bc_json_member_int(&payload, "retryAfterSeconds", out->retry_after_seconds);
	}
	else
	{
		bc_json_member(&payload, "challenge", out->challenge_b64);
		bc_json_member(&payload, "notAfter", bc_rfc3339(out->not_after));
	}
	bc_json_end(&payload);
	return bc_signed_response(approval ? BC_STATUS_PENDING : BC_STATUS_CHALLENGE, &payload, outcxt);
}
