/*
 * jwt_svid.c: bc_join.issue_jwt_svid(request jsonb), a JWT-SVID issued to a
 * joined node for one session (and context) on it (issue #33,
 * docs/research/workload-api/INTERFACE.md).
 *
 * Request: {"proof": "<JWS>"}, the proof signed by the node's current key
 * over {"purpose":"jwt-svid", "serial", "iat", "audience": [...],
 * "session", "context" (optional), "caller" (optional, as for sessions)}.
 * There is no CSR: the proof is bound by its purpose and its members.  The
 * proof checks are those of issue_session (fresh, used once, the
 * certificate live and current); the session identity is the same one
 * (bc_reserve_session: bc_join.sessions, the same bounds).
 *
 * The JWT-SVID: JWS compact signed by jwt-svid.key, protected header
 * {"alg":"ES256","kid":<its RFC 7638 thumbprint>,"typ":"JWT"}, claims
 * {"iss" (bc_join.jwt_issuer, when set), "sub":
 * spiffe://<td>/tenant/<t>/node/<n>/session/<sessionId>, "aud": [...],
 * "exp", "iat"}; it lives bc_join.jwt_svid_ttl (300 s) at most and
 * never beyond the node certificate.  The answer is signed by the signing
 * key like every answer.  Refusals are the one refusal, recorded as
 * jwt-svid:<reason>; rounds are counted as attestor "jwt-svid".
 */
#include "bc_join.h"

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"

#define AUDIENCE_MAX 8
#define AUDIENCE_LEN_MAX 256

/*
 * The proof's "audience": 1 to AUDIENCE_MAX strings, each 1 to
 * AUDIENCE_LEN_MAX printable ASCII characters, no two alike; appended to
 * aud as a JSON array.  Anything else is jwt-svid:bad-audience.
 */
static void
proof_audience(Jsonb *pj, const char *tenant, StringInfo aud)
{
	JsonbValue *a = getKeyJsonValueFromContainer(&pj->root, "audience", 8, NULL);
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	char	   *seen[AUDIENCE_MAX];
	int			n = 0;

	if (a == NULL || a->type != jbvBinary || !JsonContainerIsArray(a->val.binary.data))
		bc_refuse_join("jwt-svid:bad-audience", tenant);
	appendStringInfoChar(aud, '[');
	it = JsonbIteratorInit(a->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		char	   *s;
		int			i;

		if (tok != WJB_ELEM)
			continue;
		if (v.type != jbvString || n >= AUDIENCE_MAX ||
			v.val.string.len < 1 || v.val.string.len > AUDIENCE_LEN_MAX)
			bc_refuse_join("jwt-svid:bad-audience", tenant);
		for (i = 0; i < v.val.string.len; i++)
			if (v.val.string.val[i] < 0x20 || v.val.string.val[i] > 0x7e)
				bc_refuse_join("jwt-svid:bad-audience", tenant);
		s = pnstrdup(v.val.string.val, v.val.string.len);
		for (i = 0; i < n; i++)
			if (strcmp(seen[i], s) == 0)
				bc_refuse_join("jwt-svid:bad-audience", tenant);
		seen[n] = s;
		if (n > 0)
			appendStringInfoChar(aud, ',');
		escape_json(aud, s);
		n++;
	}
	if (n == 0)
		bc_refuse_join("jwt-svid:bad-audience", tenant);
	appendStringInfoChar(aud, ']');
}

/* The jwt-svid round: check the node and its proof, reserve the session, sign the JWT-SVID. */
static Jsonb *
jwt_svid_round(BcJoinRequest *req, void *arg, MemoryContext outcxt)
{
	BcNodeRequest *a = (BcNodeRequest *) arg;
	const BcKeys *keys = bc_keys();
	BcProofCert c;
	Jsonb	   *pj;
	char	   *session_ref;
	char	   *context_ref;
	char	   *session_id;
	bool		created;
	StringInfoData aud;
	StringInfoData claims;
	StringInfoData payload;
	char	   *spiffe_id;
	char	   *token = NULL;
	char		proof_sha[44];
	int64		ttl;
	TimestampTz now = bc_now();
	int64		iat = bc_timestamp_to_unix(now);
	int			st;

	pj = bc_node_request_proven(BC_PURPOSE_JWT_SVID, req, a->proof, &c);
	initStringInfo(&aud);
	proof_audience(pj, c.tenant, &aud);
	bc_proof_selectors(BC_PURPOSE_JWT_SVID, pj, c.tenant, &session_ref, &context_ref);
	(void) bc_proof_caller(BC_PURPOSE_JWT_SVID, pj, c.tenant);

	session_id = bc_reserve_session(BC_PURPOSE_JWT_SVID, c.node_id, c.tenant, session_ref,
									context_ref, &created);
	ttl = bc_jwt_svid_ttl;
	if (c.remaining < ttl)
		ttl = c.remaining;
	if (ttl < 1)
		bc_refuse_join("jwt-svid:expired", c.tenant);
	spiffe_id = psprintf(BC_SPIFFE_SESSION_FMT, bc_trust_domain, c.tenant, c.node_id, session_id);

	initStringInfo(&claims);
	bc_json_begin(&claims);
	/* iss only when configured (the spec defines none; OIDC relying parties need it) */
	if (bc_jwt_issuer != NULL && bc_jwt_issuer[0] != '\0')
		bc_json_member(&claims, "iss", bc_jwt_issuer);
	bc_json_member(&claims, "sub", spiffe_id);
	bc_json_member_raw(&claims, "aud", aud.data);
	bc_json_member_int(&claims, "exp", iat + ttl);
	bc_json_member_int(&claims, "iat", iat);
	bc_json_end(&claims);
	st = bc_jws_sign_es256_typ(keys->jwt_svid, keys->jwt_svid_kid, "JWT",
							   (unsigned char *) claims.data, claims.len, &token);
	if (st != BC_OK)
		bc_key_failed("sign the JWT-SVID with jwt-svid.key", keys->jwt_svid, st);
	token = bc_take_cstring(token);
	bc_node_seen(c.node_id, false);

	if (created)
	{
		StringInfoData ev;

		initStringInfo(&ev);
		bc_json_begin(&ev);
		bc_json_member(&ev, "sessionId", session_id);
		bc_json_member(&ev, "nodeId", c.node_id);
		bc_json_member(&ev, "session", session_ref);
		bc_json_member(&ev, "context", context_ref);
		bc_json_end(&ev);
		bc_emit_event(c.tenant, "session.provisioned", bc_jsonb(ev.data));
	}

	if (bc_sha256_b64url(a->proof, strlen(a->proof), proof_sha) != BC_OK)
		elog(ERROR, "could not hash a proof");
	initStringInfo(&payload);
	bc_json_begin(&payload);
	bc_json_member(&payload, "status", BC_STATUS_ISSUED);
	bc_json_member(&payload, "purpose", BC_PURPOSE_JWT_SVID);
	bc_json_member(&payload, "proofSha256", proof_sha);
	bc_json_member(&payload, "nodeId", c.node_id);
	bc_json_member(&payload, "tenantId", c.tenant);
	bc_json_member(&payload, "sessionId", session_id);
	bc_json_member(&payload, "session", session_ref);
	bc_json_member(&payload, "context", context_ref);
	bc_json_member(&payload, "spiffeId", spiffe_id);
	bc_json_member(&payload, "token", token);
	bc_json_member(&payload, "expiresAt", bc_rfc3339(now + ttl * USECS_PER_SEC));
	bc_json_member(&payload, "issuedAt", bc_rfc3339(now));
	bc_json_end(&payload);
	return bc_signed_response(BC_STATUS_ISSUED, &payload, outcxt);
}

PG_FUNCTION_INFO_V1(bc_issue_jwt_svid_request);

/*
 * bc_join.issue_jwt_svid(request jsonb): a JWT-SVID for a joined node's
 * session; INVALID_CONFIG before anything is read when key_dir has no
 * jwt-svid.key.
 */
Datum
bc_issue_jwt_svid_request(PG_FUNCTION_ARGS)
{
	if (bc_keys()->jwt_svid == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_BC_INVALID_CONFIG),
				 errmsg("the key directory has no jwt-svid.key"),
				 errdetail("INVALID_CONFIG: JWT-SVIDs are signed by jwt-svid.key."),
				 errhint("Add one with tools/bc-join-keygen --add-jwt-key DIR.")));
	/* issued on the primary only, as sessions are */
	bc_require_primary();
	PG_RETURN_JSONB_P(bc_node_request_round(PG_GETARG_JSONB_P(0), BC_PURPOSE_JWT_SVID,
											jwt_svid_round));
}
