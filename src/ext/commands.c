/*
 * commands.c: bc_join.fetch_commands(request) and
 * bc_join.complete_command(request), a node taking the commands queued for
 * it (bc_join.enqueue_command) and reporting how each went.
 *
 * Both are proven by the node's current key (proof.c), with no CSR:
 *   fetch:    {"proof": JWS over {"purpose":"commands","serial","iat"}}
 *   complete: {"proof": JWS over {"purpose":"complete","serial","iat",
 *              "commandId","status":"done"|"failed","resultSha256"},
 *              "result": "<base64url of a JSON object, at most
 *              BC_COMMAND_RESULT_MAX bytes>"}
 * Each proof is fresh and used once.  At dispatch every command's kind is
 * checked again against the allowed_kinds of the certificate that proved the
 * fetch: a command queued before a renewal narrowed them is not handed out
 * but failed with result {"reason":"kind-not-allowed"}.  What is handed out
 * is signed with the service signing key: {"purpose":"commands","nodeId",
 * "serial","iat","commands":[{"id","kind","payload","expiresAt"}]}.
 * Refusals are the one refusal, recorded as commands:<reason> and
 * complete:<reason>.
 */
#include "bc_join.h"

#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"

/* A dispatched command not completed within this is handed out again. */
#define COMMAND_LEASE "interval '5 minutes'"
/* Handed out at most this often (the table's CHECK agrees). */
#define COMMAND_ATTEMPTS_MAX "5"

static BcPlan expire_commands = {
	"UPDATE bc_join.commands SET state = 'expired', completed_at = bc_join.compute_now() "
	"WHERE node_id = $1 AND state IN ('queued', 'dispatched') AND expires_at <= bc_join.compute_now()",
	1, {TEXTOID}
};

static BcPlan dispatch_commands = {
	"WITH picked AS ("
	"  SELECT id, bc_join.kind_allowed($2, kind) AS allowed, attempts < " COMMAND_ATTEMPTS_MAX " AS fresh "
	"  FROM bc_join.commands WHERE node_id = $1 AND expires_at > bc_join.compute_now() "
	"   AND (state = 'queued' OR (state = 'dispatched' AND "
	"        dispatched_at <= bc_join.compute_now() - " COMMAND_LEASE ")) "
	"  ORDER BY created_at, id LIMIT " CppAsString2(BC_COMMANDS_PER_FETCH) " FOR UPDATE SKIP LOCKED), "
	"upd AS ("
	"  UPDATE bc_join.commands c SET "
	"    state = CASE WHEN p.allowed AND p.fresh THEN 'dispatched' ELSE 'failed' END, "
	"    result = CASE WHEN NOT p.allowed THEN jsonb_build_object('reason', 'kind-not-allowed', 'serial', $3::text) "
	"                  WHEN NOT p.fresh THEN jsonb_build_object('reason', 'attempts') ELSE c.result END, "
	"    completed_at = CASE WHEN p.allowed AND p.fresh THEN NULL ELSE bc_join.compute_now() END, "
	"    dispatched_at = CASE WHEN p.allowed AND p.fresh THEN bc_join.compute_now() ELSE c.dispatched_at END, "
	"    dispatched_serial = CASE WHEN p.allowed AND p.fresh THEN $3::text ELSE c.dispatched_serial END, "
	"    attempts = c.attempts + CASE WHEN p.allowed AND p.fresh THEN 1 ELSE 0 END "
	"  FROM picked p WHERE c.id = p.id "
	"  RETURNING c.id, c.kind, c.payload, c.state, c.created_at, c.expires_at) "
	"SELECT coalesce(jsonb_agg(jsonb_build_object('id', id, 'kind', kind, 'payload', payload, "
	"         'expiresAt', to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')) "
	"         ORDER BY created_at, id) FILTER (WHERE state = 'dispatched'), '[]')::text, "
	"       coalesce(jsonb_agg(id ORDER BY created_at, id) FILTER (WHERE state = 'failed'), '[]')::text, "
	"       count(*) FILTER (WHERE state = 'failed') "
	"FROM upd",
	3, {TEXTOID, TEXTARRAYOID, TEXTOID}
};

enum
{
	Anum_dc_commands = 1,
	Anum_dc_failed_ids,
	Anum_dc_failed
};

static BcPlan complete_cmd = {
	"UPDATE bc_join.commands SET state = $3, result = $4, completed_at = bc_join.compute_now() "
	"WHERE id = $1 AND node_id = $2 AND state = 'dispatched' AND expires_at > bc_join.compute_now() "
	"RETURNING kind",
	4, {TEXTOID, TEXTOID, TEXTOID, JSONBOID}
};

enum
{
	Anum_cc_kind = 1
};

static BcPlan find_cmd = {
	"SELECT state, result = $3, kind FROM bc_join.commands WHERE id = $1 AND node_id = $2",
	3, {TEXTOID, TEXTOID, JSONBOID}
};

enum
{
	Anum_fc_state = 1,
	Anum_fc_same_result,
	Anum_fc_kind
};

typedef BcNodeRequest CommandsArg;

/* Parse and bound {"proof"[, "result"]}; 22023 for anything else. */
static void
parse_commands_request(Jsonb *jb, const char *who, CommandsArg *a)
{
	JsonbIterator *it;
	JsonbValue	v;
	char	   *result_b64 = NULL;
	bool		complete = strcmp(who, BC_PURPOSE_COMPLETE) == 0;

	memset(a, 0, sizeof(*a));
	if (bc_jsonb_text_over(jb, BC_REQUEST_MAX))
		bc_invalid_input("the request is over %d bytes", BC_REQUEST_MAX);
	if (!JB_ROOT_IS_OBJECT(jb) || JB_ROOT_IS_SCALAR(jb))
		bc_invalid_input("the request must be a JSON object");
	it = JsonbIteratorInit(&jb->root);
	(void) JsonbIteratorNext(&it, &v, true);
	while (JsonbIteratorNext(&it, &v, true) == WJB_KEY)
	{
		char	   *key = pnstrdup(v.val.string.val, v.val.string.len);

		(void) JsonbIteratorNext(&it, &v, true);
		if (strcmp(key, "proof") == 0)
			a->proof = bc_json_string_value(&v, key, BC_PROOF_MAX);
		else if (complete && strcmp(key, "result") == 0)
			result_b64 = bc_json_string_value(&v, key, (BC_COMMAND_RESULT_MAX * 4 + 2) / 3);
		else
			bc_invalid_input("unknown field \"%.64s\"", key);
	}
	if (a->proof == NULL)
		bc_invalid_input("\"proof\" is required");
	if (complete)
	{
		size_t		n;

		if (result_b64 == NULL)
			bc_invalid_input("\"result\" is required");
		n = strlen(result_b64);
		a->result = palloc(bc_b64url_decoded_maxlen(n) + 1);
		if (bc_b64url_decode(result_b64, n, a->result, bc_b64url_decoded_maxlen(n),
							 &a->result_len) != BC_OK)
			bc_invalid_input("\"result\" must be canonical base64url");
		if (a->result_len > BC_COMMAND_RESULT_MAX)
			bc_invalid_input("\"result\" is over %d bytes", BC_COMMAND_RESULT_MAX);
		a->result[a->result_len] = '\0';
	}
}

/* The node's certificate named by the proof, locked, the proof checked; the payload. */
Jsonb *
bc_node_request_proven(const char *who, BcJoinRequest *req, const char *proof, BcProofCert *c)
{
	char	   *serial = bc_proof_serial(proof, who);
	Jsonb	   *pj;

	bc_lock_proof_cert(who, serial, false, c);
	pj = bc_check_node_proof(who, req, proof, serial, c->der, c->node_id, c->tenant);
	bc_require_live_cert(who, c);
	return pj;
}

/* The fetch round: expire, dispatch what the certificate allows, sign. */
static Jsonb *
fetch_round(BcJoinRequest *req, void *arg, MemoryContext outcxt)
{
	CommandsArg *a = (CommandsArg *) arg;
	BcProofCert c;
	Datum		v[3];
	char		nulls[3] = {' ', ' ', ' '};
	char	   *cmds;
	char	   *failed_ids;
	int64		failed;
	StringInfoData payload;

	(void) bc_node_request_proven(BC_PURPOSE_COMMANDS, req, a->proof, &c);

	v[0] = CStringGetTextDatum(c.node_id);
	bc_spi_exec(&expire_commands, v, NULL, false, 0);
	v[1] = c.has_allowed_kinds ? c.allowed_kinds : (Datum) 0;
	nulls[1] = c.has_allowed_kinds ? ' ' : 'n';
	v[2] = CStringGetTextDatum(c.serial);
	if (bc_spi_exec(&dispatch_commands, v, nulls, false, 0) != 1)
		elog(ERROR, "dispatching the commands of node %s returned no row", c.node_id);
	cmds = bc_spi_text_req(Anum_dc_commands);
	failed_ids = bc_spi_text_req(Anum_dc_failed_ids);
	failed = bc_spi_int8(Anum_dc_failed);
	if (failed > 0)
	{
		StringInfoData ev;

		initStringInfo(&ev);
		bc_json_begin(&ev);
		bc_json_member(&ev, "nodeId", c.node_id);
		bc_json_member(&ev, "serial", c.serial);
		bc_json_member_raw(&ev, "commandIds", failed_ids);
		bc_json_end(&ev);
		bc_emit_event(c.tenant, "command.refused", bc_jsonb(ev.data));
	}

	initStringInfo(&payload);
	bc_json_begin(&payload);
	bc_json_member(&payload, "purpose", BC_PURPOSE_COMMANDS);
	bc_json_member(&payload, "nodeId", c.node_id);
	bc_json_member(&payload, "serial", c.serial);
	bc_json_member_int(&payload, "iat", bc_timestamp_to_unix(bc_now()));
	bc_json_member_raw(&payload, "commands", cmds);
	bc_json_end(&payload);
	return bc_signed_response(BC_STATUS_ISSUED, &payload, outcxt);
}

/* The completion round: the command dispatched to this node gets its outcome. */
static Jsonb *
complete_round(BcJoinRequest *req, void *arg, MemoryContext outcxt)
{
	CommandsArg *a = (CommandsArg *) arg;
	BcProofCert c;
	Jsonb	   *pj;
	char	   *id;
	char	   *status;
	char		sha_b64[44];
	Jsonb	   *result;
	Datum		v[4];
	char	   *kind;
	StringInfoData payload;
	StringInfoData ev;
	Jsonb	   *evj;

	pj = bc_node_request_proven(BC_PURPOSE_COMPLETE, req, a->proof, &c);
	id = bc_proof_member(BC_PURPOSE_COMPLETE, pj, "commandId", c.tenant);
	status = bc_proof_member(BC_PURPOSE_COMPLETE, pj, "status", c.tenant);
	if (strlen(id) != BC_COMMAND_ID_LEN || strncmp(id, "cmd_", 4) != 0 ||
		strspn(id + 4, "0123456789abcdef") != BC_COMMAND_ID_LEN - 4 ||
		(strcmp(status, "done") != 0 && strcmp(status, "failed") != 0))
		bc_refuse_join("complete:malformed-proof", c.tenant);
	if (bc_sha256_b64url(a->result, a->result_len, sha_b64) != BC_OK)
		elog(ERROR, "could not hash a command result");
	if (strcmp(bc_proof_member(BC_PURPOSE_COMPLETE, pj, "resultSha256", c.tenant), sha_b64) != 0)
		bc_refuse_join("complete:result-binding", c.tenant);
	/* Proven; still scanned before jsonb reads it, so it cannot raise. */
	if (strlen((char *) a->result) != a->result_len ||
		!bc_json_object_ok((char *) a->result, a->result_len))
		bc_refuse_join("complete:malformed-result", c.tenant);
	result = bc_jsonb((char *) a->result);
	if (!JB_ROOT_IS_OBJECT(result) || JB_ROOT_IS_SCALAR(result))
		bc_refuse_join("complete:malformed-result", c.tenant);

	v[0] = CStringGetTextDatum(id);
	v[1] = CStringGetTextDatum(c.node_id);
	v[2] = CStringGetTextDatum(status);
	v[3] = JsonbPGetDatum(result);
	if (bc_spi_exec(&complete_cmd, v, NULL, false, 1) == 1)
		kind = bc_spi_text_req(Anum_cc_kind);
	else
	{
		Datum		f[3] = {v[0], v[1], v[3]};
		bool		isnull;
		bool		same;

		/* A completion repeated because its answer was lost is answered again. */
		if (bc_spi_exec(&find_cmd, f, NULL, true, 1) != 1)
			bc_refuse_join("complete:unknown-command", c.tenant);
		same = DatumGetBool(bc_spi_datum(Anum_fc_same_result, &isnull)) && !isnull;
		if (strcmp(bc_spi_text_req(Anum_fc_state), status) != 0 || !same)
			bc_refuse_join("complete:not-dispatched", c.tenant);
		goto answer;
	}

	initStringInfo(&ev);
	bc_json_begin(&ev);
	bc_json_member(&ev, "commandId", id);
	bc_json_member(&ev, "nodeId", c.node_id);
	bc_json_member(&ev, "kind", kind);
	bc_json_member(&ev, "state", status);
	bc_json_member(&ev, "serial", c.serial);
	bc_json_end(&ev);
	evj = bc_jsonb(ev.data);
	bc_emit_event(c.tenant, "command.completed", evj);
	bc_audit("command.complete", c.tenant, c.node_id, evj);

answer:
	initStringInfo(&payload);
	bc_json_begin(&payload);
	bc_json_member(&payload, "purpose", BC_PURPOSE_COMPLETE);
	bc_json_member(&payload, "nodeId", c.node_id);
	bc_json_member(&payload, "commandId", id);
	bc_json_member(&payload, "state", status);
	bc_json_end(&payload);
	return bc_signed_response(BC_STATUS_ISSUED, &payload, outcxt);
}

/*
 * A request proven by a node key without a CSR ({"proof"}, and "result" for
 * complete): parse, check the configuration, run the round for who in its
 * subtransaction; round's arg is the BcNodeRequest.
 */
Jsonb *
bc_node_request_round(Jsonb *jb, const char *who, BcRoundFn round)
{
	MemoryContext callcxt = CurrentMemoryContext;
	BcJoinRequest req;
	CommandsArg a;
	Jsonb	   *out;

	bc_require_sql_version();
	parse_commands_request(jb, who, &a);
	memset(&req, 0, sizeof(req));
	req.attestor = who;
	req.role = BC_ROLE_NODE;
	req.claims = bc_jsonb("{}");
	bc_require_config();

	bc_spi_connect();
	out = bc_run_round(&req, round, &a, who, callcxt);
	SPI_finish();
	return out;
}

PG_FUNCTION_INFO_V1(bc_fetch_commands_request);

/* bc_join.fetch_commands(request jsonb): the commands for the proving node, signed. */
Datum
bc_fetch_commands_request(PG_FUNCTION_ARGS)
{
	PG_RETURN_JSONB_P(bc_node_request_round(PG_GETARG_JSONB_P(0), BC_PURPOSE_COMMANDS, fetch_round));
}

PG_FUNCTION_INFO_V1(bc_complete_command_request);

/* bc_join.complete_command(request jsonb): a dispatched command's outcome. */
Datum
bc_complete_command_request(PG_FUNCTION_ARGS)
{
	PG_RETURN_JSONB_P(bc_node_request_round(PG_GETARG_JSONB_P(0), BC_PURPOSE_COMPLETE, complete_round));
}
