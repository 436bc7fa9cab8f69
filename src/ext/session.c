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
 *
 * Bounds per node (issue 26.8): a new session identity is reserved only while
 * the node holds fewer than bc_join.sessions_per_node (session:too-many) and
 * reserved fewer than bc_join.new_sessions_per_minute in the last minute
 * (session:too-fast); the refusal event's detail names the node and the
 * setting.  An identity already reserved is never refused by them.
 *
 * SSH (issue 47, ssh.c): a proof with "sshUser": true also gets an OpenSSH
 * user certificate for the session key ("sshCertificate", "sshSerial")
 * when the pool's user rule gives it principals; else the session is issued
 * without one and event ssh.user.refused says why.
 *
 * The caller (issue 26.8): bcd adds to the proof what the kernel told it of
 * the process that asked on its socket ("caller": {"pid", "exe", "unit",
 * "cgroup"}, SO_PEERCRED and /proc); it is the host's claim, signed by the
 * node key so the gateway cannot change it, and recorded as such with the
 * certificate (session_certs.caller) and in session.provisioned.
 */
#include "bc_join.h"

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

/* Bounds of the caller claim's strings. */
#define CALLER_EXE_MAX 1024
#define CALLER_UNIT_MAX 256
#define CALLER_CGROUP_MAX 1024
/* Above Linux's largest pid_max (2^22). */
#define CALLER_PID_MAX 4194304

int			bc_sessions_per_node = 10000;
int			bc_new_sessions_per_minute = 600;


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

enum
{
	Anum_rs_id = 1,
	Anum_rs_created
};

static BcPlan find_session = {
	"SELECT id, false FROM bc_join.sessions "
	"WHERE node_id = $1 AND session_ref = $2 AND context_ref = $3",
	3, {TEXTOID, TEXTOID, TEXTOID}
};

static BcPlan insert_session_cert = {
	"INSERT INTO bc_join.session_certs (serial, session_id, not_before, not_after, spki_sha256, "
	"       certificate, node_serial, caller) "
	"VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
	8, {TEXTOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, BYTEAOID, BYTEAOID, TEXTOID, JSONBOID}
};

/*
 * The node's session identities, counted up to the cap ($3), and those
 * reserved since $2, up to the rate ($4): never more rows read than the cap.
 */
static BcPlan count_sessions = {
	"SELECT (SELECT count(*) FROM (SELECT 1 FROM bc_join.sessions WHERE node_id = $1 LIMIT $3) a), "
	"       (SELECT count(*) FROM (SELECT 1 FROM bc_join.sessions "
	"                              WHERE node_id = $1 AND provisioned_at > $2 LIMIT $4) b)",
	4, {TEXTOID, TIMESTAMPTZOID, INT8OID, INT8OID}
};

enum
{
	Anum_cs_held = 1,
	Anum_cs_recent
};

/*
 * The proof's "caller" as recorded: {"pid", "exe", "unit", "cgroup"} with
 * only those members (others are dropped), or NULL when the proof has none.
 * Anything but an object of a pid in [1, 2^22] and strings within their
 * bounds is <who>:malformed-proof.
 */
char *
bc_proof_caller(const char *who, Jsonb *pj, const char *tenant)
{
	char	   *malformed = psprintf("%s:malformed-proof", who);
	static const struct
	{
		const char *name;
		int			max;
	}			strings[] = {{"exe", CALLER_EXE_MAX}, {"unit", CALLER_UNIT_MAX},
	{"cgroup", CALLER_CGROUP_MAX}};
	JsonbValue *c = getKeyJsonValueFromContainer(&pj->root, "caller", 6, NULL);
	JsonbValue *pid;
	StringInfoData out;
	int64		pid_v;
	int			i;

	if (c == NULL || c->type == jbvNull)
		return NULL;
	if (c->type != jbvBinary || !JsonContainerIsObject(c->val.binary.data))
		bc_refuse_join(malformed, tenant);
	pid = getKeyJsonValueFromContainer(c->val.binary.data, "pid", 3, NULL);
	if (pid == NULL || pid->type != jbvNumeric)
		bc_refuse_join(malformed, tenant);
	/* the proof scan allowed only whole numbers of at most 15 digits */
	pid_v = DatumGetInt64(DirectFunctionCall1(numeric_int8, NumericGetDatum(pid->val.numeric)));
	if (pid_v < 1 || pid_v > CALLER_PID_MAX)
		bc_refuse_join(malformed, tenant);
	initStringInfo(&out);
	bc_json_begin(&out);
	bc_json_member_int(&out, "pid", pid_v);
	for (i = 0; i < lengthof(strings); i++)
	{
		JsonbValue *v = getKeyJsonValueFromContainer(c->val.binary.data, strings[i].name,
													 strlen(strings[i].name), NULL);

		if (v == NULL || v->type == jbvNull)
			continue;
		if (v->type != jbvString || v->val.string.len > strings[i].max ||
			memchr(v->val.string.val, '\0', v->val.string.len) != NULL)
			bc_refuse_join(malformed, tenant);
		bc_json_member(&out, strings[i].name, pnstrdup(v->val.string.val, v->val.string.len));
	}
	bc_json_end(&out);
	return out.data;
}

/* The detail of a session bound refused: {"nodeId", "setting", "limit"}. */
static char *
limit_detail(const char *node_id, const char *setting, int limit)
{
	StringInfoData d;

	initStringInfo(&d);
	bc_json_begin(&d);
	bc_json_member(&d, "nodeId", node_id);
	bc_json_member(&d, "setting", setting);
	bc_json_member_int(&d, "limit", limit);
	bc_json_end(&d);
	return d.data;
}

/*
 * A new session identity for node_id may be reserved: fewer than
 * bc_join.sessions_per_node held, fewer than bc_join.new_sessions_per_minute
 * reserved in the last minute; else <who>:too-many / <who>:too-fast,
 * the event's detail naming the node and the setting.  Requests of one node
 * that run at once each see the others' uncommitted rows as absent, so the
 * cap can be passed by at most the node's requests in flight (bounded by
 * the gateway's pool).
 */
static void
check_session_bounds(const char *who, const char *node_id, const char *tenant)
{
	Datum		v[4];
	int64		held;
	int64		recent;

	v[0] = CStringGetTextDatum(node_id);
	v[1] = TimestampTzGetDatum(bc_now() - 60 * USECS_PER_SEC);
	v[2] = Int64GetDatum((int64) bc_sessions_per_node);
	v[3] = Int64GetDatum((int64) bc_new_sessions_per_minute);
	if (bc_spi_exec(&count_sessions, v, NULL, true, 1) != 1)
		elog(ERROR, "could not count the sessions of node %s", node_id);
	held = bc_spi_int8(Anum_cs_held);
	recent = bc_spi_int8(Anum_cs_recent);
	if (held >= bc_sessions_per_node)
		bc_refuse_join_detail(psprintf("%s:too-many", who), tenant,
							  limit_detail(node_id, "bc_join.sessions_per_node",
										   bc_sessions_per_node));
	if (recent >= bc_new_sessions_per_minute)
		bc_refuse_join_detail(psprintf("%s:too-fast", who), tenant,
							  limit_detail(node_id, "bc_join.new_sessions_per_minute",
										   bc_new_sessions_per_minute));
}

/*
 * The session and context selectors of a verified proof ("session", and
 * "context", optional: ""); <who>:malformed-proof or <who>:malformed-selector.
 */
void
bc_proof_selectors(const char *who, Jsonb *pj, const char *tenant, char **session_ref,
				   char **context_ref)
{
	JsonbValue *ctx;

	*session_ref = bc_proof_member(who, pj, "session", tenant);
	*context_ref = "";
	ctx = getKeyJsonValueFromContainer(&pj->root, "context", 7, NULL);
	if (ctx != NULL && ctx->type == jbvString)
		*context_ref = pnstrdup(ctx->val.string.val, ctx->val.string.len);
	else if (ctx != NULL && ctx->type != jbvNull)
		bc_refuse_join(psprintf("%s:malformed-proof", who), tenant);
	if (!bc_selector_valid(*session_ref, 1) || !bc_selector_valid(*context_ref, 0))
		bc_refuse_join(psprintf("%s:malformed-selector", who), tenant);
}

/*
 * The session identity (bc_join.sessions) of node_id for these selectors:
 * the one reserved before, or one reserved now within the node's bounds
 * (check_session_bounds, refusals <who>:too-many / <who>:too-fast);
 * *created tells which.  Session credentials and JWT-SVIDs share it.
 */
char *
bc_reserve_session(const char *who, const char *node_id, const char *tenant,
				   const char *session_ref, const char *context_ref, bool *created)
{
	Datum		v[5];
	Datum		f[3];

	v[0] = CStringGetTextDatum(bc_new_id("ses"));
	v[1] = CStringGetTextDatum(node_id);
	v[2] = CStringGetTextDatum(tenant);
	v[3] = CStringGetTextDatum(session_ref);
	v[4] = CStringGetTextDatum(context_ref);
	f[0] = v[1];
	f[1] = v[3];
	f[2] = v[4];
	if (bc_spi_exec(&find_session, f, NULL, true, 1) != 1)
	{
		check_session_bounds(who, node_id, tenant);

		/*
		 * No row back: a request for the same identity reserved it and
		 * committed while the insert waited for it, out of this statement's
		 * snapshot.  Read it again in a new one (read_only false): READ
		 * COMMITTED sees it; under REPEATABLE READ / SERIALIZABLE the insert
		 * itself already failed with a serialization failure (40001).
		 */
		if (bc_spi_exec(&reserve_session, v, NULL, false, 1) != 1 &&
			bc_spi_exec(&find_session, f, NULL, false, 1) != 1)
			elog(ERROR, "session of node %s vanished while reserving it", node_id);
	}
	*created = bc_spi_bool(Anum_rs_created);
	return bc_spi_text_req(Anum_rs_id);
}

/* The session round: check the node and its proof, reserve the session, issue. */
static Jsonb *
session_round(BcJoinRequest *req, void *arg, MemoryContext outcxt)
{
	const char *proof = (const char *) arg;
	char	   *serial = bc_proof_serial(proof, BC_PURPOSE_SESSION);
	Datum		v[8];
	BcProofCert c;
	char	   *node_id;
	char	   *tenant;
	int64		remaining;
	Jsonb	   *pj;
	char	   *session_ref;
	char	   *context_ref;
	char	   *session_id;
	bool		created;
	int			ttl;
	BcIssued	issued;
	StringInfoData payload;
	char	   *caller;
	JsonbValue *ssh_user;
	char		nulls[9] = "        ";

	bc_lock_proof_cert(BC_PURPOSE_SESSION, serial, false, &c);
	node_id = c.node_id;
	tenant = c.tenant;
	remaining = c.remaining;

	pj = bc_check_node_proof(BC_PURPOSE_SESSION, req, proof, serial, c.der, node_id, tenant);
	bc_require_live_cert(BC_PURPOSE_SESSION, &c);

	bc_proof_selectors(BC_PURPOSE_SESSION, pj, tenant, &session_ref, &context_ref);
	if (bc_csr_verify_pop(req->csr) != BC_OK)
		bc_refuse_join("session:csr-signature", tenant);
	caller = bc_proof_caller(BC_PURPOSE_SESSION, pj, tenant);
	ssh_user = getKeyJsonValueFromContainer(&pj->root, "sshUser", 7, NULL);
	if (ssh_user != NULL && ssh_user->type != jbvBool && ssh_user->type != jbvNull)
		bc_refuse_join("session:malformed-proof", tenant);

	/* Reserved when the session first asks, within the node's bounds; the same identity after that. */
	session_id = bc_reserve_session(BC_PURPOSE_SESSION, node_id, tenant, session_ref, context_ref,
									&created);

	ttl = bc_session_ttl;
	if (remaining < ttl)
		ttl = (int) remaining;
	if (ttl < 1)
		bc_refuse_join("session:expired", tenant);
	bc_issue_leaf(req, psprintf(BC_SPIFFE_SESSION_FMT, bc_trust_domain,
								tenant, node_id, session_id),
				  session_id, NULL, ttl, &issued);
	v[0] = CStringGetTextDatum(issued.serial_hex);
	v[1] = CStringGetTextDatum(session_id);
	v[2] = TimestampTzGetDatum(issued.not_before);
	v[3] = TimestampTzGetDatum(issued.not_after);
	v[4] = PointerGetDatum(bc_bytea(req->csr_spki_sha256, BC_SHA256_LEN));
	v[5] = PointerGetDatum(bc_bytea(issued.leaf_der, issued.leaf_der_len));
	v[6] = CStringGetTextDatum(serial);
	if (caller != NULL)
		v[7] = JsonbPGetDatum(bc_jsonb(caller));
	else
		nulls[7] = 'n';
	bc_spi_exec(&insert_session_cert, v, nulls, false, 0);
	bc_node_seen(node_id, false);

	if (created)
	{
		StringInfoData ev;

		initStringInfo(&ev);
		bc_json_begin(&ev);
		bc_json_member(&ev, "sessionId", session_id);
		bc_json_member(&ev, "nodeId", node_id);
		bc_json_member(&ev, "session", session_ref);
		bc_json_member(&ev, "context", context_ref);
		if (caller != NULL)
			bc_json_member_raw(&ev, "caller", caller);
		bc_json_end(&ev);
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
	/* "sshUser": true, signed by the node key (the gateway can neither add nor drop it) */
	if (ssh_user != NULL && ssh_user->type == jbvBool && ssh_user->val.boolean)
	{
		BcSshSession u;

		u.tenant = tenant;
		u.node_id = node_id;
		u.node_serial = serial;
		u.session_id = session_id;
		u.session_ref = session_ref;
		u.context_ref = context_ref;
		u.session_cert_serial = issued.serial_hex;
		u.spiffe_id = issued.spiffe_id;
		u.not_before = issued.not_before;
		u.not_after = issued.not_after;
		bc_ssh_session_cert(req, &u, &payload);
	}
	bc_json_end(&payload);
	return bc_signed_response(BC_STATUS_ISSUED, &payload, outcxt);
}

PG_FUNCTION_INFO_V1(bc_issue_session_request);

/* bc_join.issue_session(request jsonb): a session credential for a joined node. */
Datum
bc_issue_session_request(PG_FUNCTION_ARGS)
{
	PG_RETURN_JSONB_P(bc_proof_request_round(PG_GETARG_JSONB_P(0), BC_PURPOSE_SESSION, session_round));
}
