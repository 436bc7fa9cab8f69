/*
 * session.c: bc_join.issue_session(request jsonb), a short-lived session
 * credential issued to a joined node for one session (and context) on it.
 *
 * Request: {"csr": "<base64url DER CSR of the session key>", "proof": "<JWS>"}
 * with the proof signed by the node's current key over {"purpose":"session",
 * "serial", "csrSha256", "iat", "session": "<session id>", "context":
 * "<context id, optional>"} (see proof.c).  The node must be live, its
 * certificate unrevoked, of the current identity generation and unexpired.
 * The session identity (bc_join.sessions) is reserved when a session first
 * asks, never in advance; its certificate, SPIFFE ID
 * spiffe://<td>/tenant/<t>/node/<n>/session/<sessionId>, lives
 * bc_join.session_ttl (900 s) at most and never beyond the node's own.
 * A session marks the node seen (bc_node_seen: last_seen_at at most once a
 * minute, adopting -> active).  Refusals are the one refusal, recorded as
 * session:<reason>.
 */
#include "bc_join.h"

#include "fmgr.h"
#include "utils/builtins.h"


static BcPlan reserve_session = {
	"WITH new AS ("
	"  INSERT INTO bc_join.sessions (id, node_id, tenant_id, session_ref, context_ref) "
	"  VALUES ($1, $2, $3, $4, $5) ON CONFLICT (node_id, session_ref, context_ref) DO NOTHING "
	"  RETURNING id, true AS created) "
	"SELECT id, created FROM new "
	"UNION ALL SELECT id, false FROM bc_join.sessions "
	"WHERE node_id = $2 AND session_ref = $4 AND context_ref = $5 AND NOT EXISTS (SELECT 1 FROM new)",
	5, {TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID}
};

static BcPlan find_session = {
	"SELECT id, false FROM bc_join.sessions "
	"WHERE node_id = $1 AND session_ref = $2 AND context_ref = $3",
	3, {TEXTOID, TEXTOID, TEXTOID}
};

static BcPlan insert_session_cert = {
	"INSERT INTO bc_join.session_certs (serial, session_id, not_before, not_after, spki_sha256, "
	"       certificate, node_serial) "
	"VALUES ($1, $2, $3, $4, $5, $6, $7)",
	7, {TEXTOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, BYTEAOID, BYTEAOID, TEXTOID}
};

/* A session or context selector: BC_SESSION_MIN/BC_CONTEXT_MIN to BC_SELECTOR_MAX of BC_SELECTOR_CHARS. */
static bool
valid_selector(const char *s, bool required)
{
	size_t		n = strlen(s);

	if (n > BC_SELECTOR_MAX || n < (required ? BC_SESSION_MIN : BC_CONTEXT_MIN))
		return false;
	return strspn(s, BC_SELECTOR_CHARS) == n;
}

/* The session round: check the node and its proof, reserve the session, issue. */
static Jsonb *
session_round(BcJoinRequest *req, void *arg, MemoryContext outcxt)
{
	const char *proof = (const char *) arg;
	char	   *serial = bc_proof_serial(proof, BC_PURPOSE_SESSION);
	Datum		v[7];
	BcProofCert c;
	char	   *node_id;
	char	   *tenant;
	int64		remaining;
	Jsonb	   *pj;
	char	   *session_ref;
	char	   *context_ref = "";
	JsonbValue *ctx;
	char	   *session_id;
	bool		created;
	int			ttl;
	BcIssued	issued;
	StringInfoData payload;

	bc_lock_proof_cert(BC_PURPOSE_SESSION, serial, false, &c);
	node_id = c.node_id;
	tenant = c.tenant;
	remaining = c.remaining;

	pj = bc_check_node_proof(BC_PURPOSE_SESSION, req, proof, serial, c.der, node_id, tenant);
	bc_require_live_cert(BC_PURPOSE_SESSION, &c);

	session_ref = bc_proof_member("session", pj, "session", tenant);
	ctx = getKeyJsonValueFromContainer(&pj->root, "context", 7, NULL);
	if (ctx != NULL && ctx->type == jbvString)
		context_ref = pnstrdup(ctx->val.string.val, ctx->val.string.len);
	else if (ctx != NULL && ctx->type != jbvNull)
		bc_refuse_join("session:malformed-proof", tenant);
	if (!valid_selector(session_ref, true) || !valid_selector(context_ref, false))
		bc_refuse_join("session:malformed-selector", tenant);
	if (bc_csr_verify_pop(req->csr) != BC_OK)
		bc_refuse_join("session:csr-signature", tenant);

	/* Reserved when the session first asks; the same identity after that. */
	v[0] = CStringGetTextDatum(bc_new_id("ses"));
	v[1] = CStringGetTextDatum(node_id);
	v[2] = CStringGetTextDatum(tenant);
	v[3] = CStringGetTextDatum(session_ref);
	v[4] = CStringGetTextDatum(context_ref);
	if (bc_spi_exec(&reserve_session, v, NULL, false, 1) != 1)
	{
		/* Reserved by a request that committed after this statement began: look again. */
		Datum		f[3] = {v[1], v[3], v[4]};

		if (bc_spi_exec(&find_session, f, NULL, true, 1) != 1)
			elog(ERROR, "session of node %s vanished while reserving it", node_id);
	}
	session_id = bc_spi_text_req(1);
	created = bc_spi_bool(2);

	ttl = bc_session_ttl;
	if (remaining < ttl)
		ttl = (int) remaining;
	if (ttl < 1)
		bc_refuse_join("session:expired", tenant);
	bc_issue_leaf(req, psprintf("spiffe://%s/tenant/%s/node/%s/session/%s", bc_trust_domain,
								tenant, node_id, session_id),
				  session_id, NULL, ttl, &issued);
	v[0] = CStringGetTextDatum(issued.serial_hex);
	v[1] = CStringGetTextDatum(session_id);
	v[2] = TimestampTzGetDatum(issued.not_before);
	v[3] = TimestampTzGetDatum(issued.not_after);
	v[4] = PointerGetDatum(bc_bytea(req->csr_spki_sha256, BC_SHA256_LEN));
	v[5] = PointerGetDatum(bc_bytea(issued.leaf_der, issued.leaf_der_len));
	v[6] = CStringGetTextDatum(serial);
	bc_spi_exec(&insert_session_cert, v, NULL, false, 0);
	bc_node_seen(node_id, false);

	if (created)
	{
		StringInfoData ev;

		initStringInfo(&ev);
		appendStringInfoString(&ev, "{\"sessionId\":");
		escape_json(&ev, session_id);
		bc_json_member(&ev, "nodeId", node_id);
		bc_json_member(&ev, "session", session_ref);
		bc_json_member(&ev, "context", context_ref);
		appendStringInfoChar(&ev, '}');
		bc_emit_event(tenant, "session.provisioned", bc_jsonb(ev.data));
	}

	bc_issued_payload_start(&payload, req, node_id, tenant);
	bc_json_member(&payload, "sessionId", session_id);
	bc_json_member(&payload, "session", session_ref);
	bc_json_member(&payload, "context", context_ref);
	bc_json_member(&payload, "spiffeId", issued.spiffe_id);
	bc_json_member(&payload, "serial", issued.serial_hex);
	bc_append_chain(&payload, &issued);
	bc_json_member(&payload, "notAfter", bc_rfc3339(issued.not_after));
	appendStringInfoChar(&payload, '}');
	return bc_signed_response(BC_STATUS_ISSUED, &payload, outcxt);
}

PG_FUNCTION_INFO_V1(bc_issue_session_request);

/* bc_join.issue_session(request jsonb): a session credential for a joined node. */
Datum
bc_issue_session_request(PG_FUNCTION_ARGS)
{
	PG_RETURN_JSONB_P(bc_proof_request_round(PG_GETARG_JSONB_P(0), BC_PURPOSE_SESSION, session_round));
}
