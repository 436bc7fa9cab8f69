/*
 * admit.c: the writes of an admitted join and its signed answer.
 *
 * A new node is inserted in state adopting; a reclaim re-keys the node in
 * place (identity generation + 1, older certificates revoked, state kept).
 * Then the certificate is issued and recorded, the binding written, the
 * node.joined event and the audit row, and the token's use spent, all in
 * the join's subtransaction.
 */
#include "bc_join.h"


#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

static BcPlan insert_node = {
	"INSERT INTO bc_join.nodes (id, tenant_id, site_id, pool_id, role, trust, "
	"                           attestor, node_key, claims) "
	"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
	9, {TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, JSONBOID}
};

static BcPlan rekey_node = {
	"UPDATE bc_join.nodes SET identity_generation = identity_generation + 1, "
	"       attestor = $2, node_key = $3, claims = $4, updated_at = bc_join.compute_now(), "
	"       last_seen_at = bc_join.compute_now() "
	"WHERE id = $1 RETURNING identity_generation",
	4, {TEXTOID, TEXTOID, TEXTOID, JSONBOID}
};

enum
{
	Anum_rk_generation = 1
};

static BcPlan revoke_older = {
	"UPDATE bc_join.node_certs SET revoked_at = bc_join.compute_now(), "
	"       revocation_reason = 'reclaimed' "
	"WHERE node_id = $1 AND revoked_at IS NULL",
	1, {TEXTOID}
};

static BcPlan insert_cert = {
	"INSERT INTO bc_join.node_certs (serial, node_id, identity_generation, not_before, "
	"       not_after, spki_sha256, allowed_kinds, node_key_uri, certificate, join_csr_sha256, "
	"       join_subject) "
	"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
	11, {TEXTOID, TEXTOID, INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID, BYTEAOID,
	TEXTARRAYOID, TEXTOID, BYTEAOID, BYTEAOID, BYTEAOID}
};

static BcPlan insert_binding = {
	"INSERT INTO bc_join.node_bindings (subject, node_id, attestor) VALUES ($1, $2, $3) "
	"ON CONFLICT (attestor, subject) DO NOTHING",
	3, {BYTEAOID, TEXTOID, TEXTOID}
};

static BcPlan binding_owner = {
	"SELECT node_id FROM bc_join.node_bindings WHERE subject = $1 AND attestor = $3",
	3, {BYTEAOID, TEXTOID, TEXTOID}
};

enum
{
	Anum_bo_node = 1
};

/*
 * A site agent's new certificate (a join, a reclaim, a renewal) moves its
 * site's discovery epoch on.  Here rather than in a trigger on node_certs,
 * so that a restore, which inserts every certificate again, leaves the
 * epochs as they were.
 */
static BcPlan site_agent_rekeyed = {
	"UPDATE bc_join.discovery_sites d SET epoch = d.epoch + 1, updated_at = bc_join.compute_now() "
	"FROM bc_join.nodes n WHERE n.id = $1 AND n.role = 'site' AND d.site_id = n.site_id",
	1, {TEXTOID}
};

/*
 * Issue a certificate for the CSR's key and record it in node_certs; a join
 * (join_subject given) records its CSR and the subject it verified.
 */
void
bc_issue_and_record(const BcJoinRequest *req, const char *tenant_id, const char *node_id,
					int generation, Datum allowed_kinds, bool has_allowed_kinds,
					const char *node_key_uri, const unsigned char *join_subject, int ttl,
					BcIssued *issued)
{
	Datum		nv[11];
	char		nn[11] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};

	bc_issue_node_cert(req, tenant_id, node_id, node_key_uri, ttl, issued);

	nv[0] = CStringGetTextDatum(issued->serial_hex);
	nv[1] = CStringGetTextDatum(node_id);
	nv[2] = Int32GetDatum(generation);
	nv[3] = TimestampTzGetDatum(issued->not_before);
	nv[4] = TimestampTzGetDatum(issued->not_after);
	nv[5] = PointerGetDatum(bc_bytea(req->csr_spki_sha256, BC_SHA256_LEN));
	if (has_allowed_kinds)
		nv[6] = allowed_kinds;
	else
		nn[6] = 'n';
	if (node_key_uri)
		nv[7] = CStringGetTextDatum(node_key_uri);
	else
		nn[7] = 'n';
	nv[8] = PointerGetDatum(bc_bytea(issued->leaf_der, issued->leaf_der_len));
	if (join_subject != NULL)
	{
		nv[9] = PointerGetDatum(bc_bytea(req->csr_sha256, BC_SHA256_LEN));
		nv[10] = PointerGetDatum(bc_bytea(join_subject, BC_SHA256_LEN));
	}
	else
		nn[9] = nn[10] = 'n';
	bc_spi_exec(&insert_cert, nv, nn, false, 0);

	/*
	 * A site agent re-keyed: every discovery assertion it signed before is
	 * stale.  req->role is the node's own role here (a join's, which a
	 * reclaim keeps, result.c; a renewal's, read from the node), so any
	 * other role skips the statement, which would update nothing.
	 */
	if (strcmp(req->role, BC_ROLE_SITE) == 0)
		bc_spi_exec(&site_agent_rekeyed, nv + 1, NULL, false, 0);
}

static BcPlan node_quarantined = {
	"SELECT 1 FROM bc_join.node_attestation WHERE node_id = $1 AND state = 'quarantined'",
	1, {TEXTOID}
};

/* Admit: node (new or reclaimed), certificate, binding, events, audit, spend; the signed response. */
Jsonb *
bc_admit(const BcJoinRequest *req, BcAttestResult *res, int ttl, MemoryContext outcxt)
{
	const char *node_key = res->node_key ? res->node_key : "unattested";
	bool		reclaim = res->node_id != NULL;
	char	   *node_id = reclaim ? res->node_id : bc_new_id("node");
	int			generation = 1;
	BcIssued	issued;
	Datum		nv[9];
	char		nn[9];
	StringInfoData ev;
	int			i;
	Jsonb	   *evj;
	unsigned char subject[BC_SHA256_LEN];

	for (i = 0; i < 9; i++)
		nn[i] = ' ';
	/* What this round verified, before anything is written: a repeat must verify it again. */
	bc_result_subject(req, res, subject);
	if (reclaim)
	{
		/* A quarantined node joins again only once readmitted (attest.c). */
		nv[0] = CStringGetTextDatum(node_id);
		if (bc_spi_exec(&node_quarantined, nv, NULL, true, 1) == 1)
			bc_refuse_join("join:quarantined", res->tenant_id);
		/* Re-key in place: generation + 1, every older certificate revoked. */
		nv[0] = CStringGetTextDatum(node_id);
		nv[1] = CStringGetTextDatum(req->attestor);
		nv[2] = CStringGetTextDatum(node_key);
		nv[3] = JsonbPGetDatum(req->claims);
		if (bc_spi_exec(&rekey_node, nv, NULL, false, 0) != 1)
			elog(ERROR, "node %s vanished during its reclaim", node_id);
		generation = bc_spi_int4(Anum_rk_generation);
		bc_spi_exec(&revoke_older, nv, NULL, false, 0);
	}
	else
	{
		nv[0] = CStringGetTextDatum(node_id);
		nv[1] = CStringGetTextDatum(res->tenant_id);
		nv[2] = CStringGetTextDatum(res->site_id);
		if (res->pool_id)
			nv[3] = CStringGetTextDatum(res->pool_id);
		else
			nn[3] = 'n';
		nv[4] = CStringGetTextDatum(req->role);
		nv[5] = CStringGetTextDatum(res->trust);
		nv[6] = CStringGetTextDatum(req->attestor);
		nv[7] = CStringGetTextDatum(node_key);
		nv[8] = JsonbPGetDatum(req->claims);
		bc_spi_exec(&insert_node, nv, nn, false, 0);
	}

	/* Proof of possession was checked by the caller; certify the CSR's key. */
	bc_issue_and_record(req, res->tenant_id, node_id, generation, res->allowed_kinds,
						res->has_allowed_kinds, res->node_key_uri, subject, ttl, &issued);

	/* The binding, after issuing; a concurrent join of the same subject loses. */
	if (res->has_bind)
	{
		nv[0] = PointerGetDatum(bc_bytea(res->bind, BC_SHA256_LEN));
		nv[1] = CStringGetTextDatum(node_id);
		nv[2] = CStringGetTextDatum(req->attestor);
		if (bc_spi_exec(&insert_binding, nv, NULL, false, 0) != 1)
		{
			/*
			 * A new snapshot (read_only false): the owner may have committed
			 * while the insert waited for it, after this statement began.
			 */
			if (bc_spi_exec(&binding_owner, nv, NULL, false, 1) != 1 ||
				strcmp(bc_spi_text(Anum_bo_node), node_id) != 0)
				bc_refuse_join("join:bound-elsewhere", res->tenant_id);
		}
	}

	/* What the attestor records of the node it admitted. */
	if (res->admitted != NULL)
		res->admitted(res, node_id);

	/* node.joined, then the audit row. */
	initStringInfo(&ev);
	bc_json_begin(&ev);
	bc_json_member(&ev, "nodeId", node_id);
	bc_json_member(&ev, "attestor", req->attestor);
	bc_json_member(&ev, "nodeKey", node_key);
	bc_json_member(&ev, "role", req->role);
	bc_json_member(&ev, "siteId", res->site_id);
	bc_json_member(&ev, "poolId", res->pool_id);
	bc_json_member(&ev, "tokenId", res->token_id);
	bc_json_member(&ev, "serial", issued.serial_hex);
	bc_json_member(&ev, "spiffeId", issued.spiffe_id);
	bc_json_member(&ev, "csrSha256", req->csr_sha256_b64);
	bc_json_member_bool(&ev, "reclaim", reclaim);
	bc_json_member_int(&ev, "identityGeneration", generation);
	if (res->joined_detail != NULL)
		bc_json_member_raw(&ev, "detail", res->joined_detail);
	bc_json_end(&ev);
	evj = bc_jsonb(ev.data);
	bc_emit_event_audit(res->tenant_id, "node.joined", reclaim ? "node.reclaim" : "node.join",
						node_id, evj);

	if (res->spend_token)
		bc_spend_join_token(res->token_id);

	return bc_issued_response(req, node_id, res->tenant_id, req->role, generation, &issued,
							  res->allowed_kinds, res->has_allowed_kinds, outcxt);
}

/*
 * Who holds a certificate for this key; repeat: this very join (its CSR,
 * attestor and role), still current, and recorded with the subject it
 * verified (a certificate from before 0.2.0 has none: never a repeat).
 */
static BcPlan key_holder = {
	"SELECT c.serial, c.node_id, n.tenant_id, n.role, c.identity_generation, c.certificate, "
	"       c.allowed_kinds, c.not_before, c.not_after, "
	"       coalesce(c.join_csr_sha256 = $2 AND n.attestor = $3 AND n.role = $4 "
	"                AND c.join_subject IS NOT NULL "
	"                AND c.revoked_at IS NULL AND c.not_after > bc_join.compute_now() "
	"                AND c.identity_generation = n.identity_generation "
	"                AND n.state <> 'retired', false) AS repeat, c.join_subject "
	"FROM bc_join.node_certs c JOIN bc_join.nodes n ON n.id = c.node_id "
	"WHERE c.spki_sha256 = $1 "
	"UNION ALL "
	"SELECT s.serial, NULL::text, NULL::text, NULL::text, NULL::integer, NULL::bytea, "
	"       NULL::text[], NULL::timestamptz, NULL::timestamptz, false, NULL::bytea "
	"FROM bc_join.session_certs s WHERE s.spki_sha256 = $1 "
	"ORDER BY 10 DESC LIMIT 1",
	4, {BYTEAOID, BYTEAOID, TEXTOID, TEXTOID}
};

enum
{
	Anum_kh_serial = 1,
	Anum_kh_node_id,
	Anum_kh_tenant,
	Anum_kh_role,
	Anum_kh_generation,
	Anum_kh_certificate,
	Anum_kh_allowed_kinds,
	Anum_kh_not_before,
	Anum_kh_not_after,
	Anum_kh_repeat,
	Anum_kh_join_subject
};

/*
 * Whether any certificate holds this key: two index probes, the common
 * answer (a new key) without key_holder's join, sort and projection (about
 * half its executor work).  Under the same lock as key_holder.
 */
static BcPlan key_held = {
	"SELECT EXISTS (SELECT 1 FROM bc_join.node_certs WHERE spki_sha256 = $1) "
	"    OR EXISTS (SELECT 1 FROM bc_join.session_certs WHERE spki_sha256 = $1)",
	1, {BYTEAOID}
};

/* The note of a certificate's first repeat: once per certificate (attestation_uses). */
static BcPlan repeat_note_once = {
	"INSERT INTO bc_join.attestation_uses (attestor, subject, node_id, expires_at) "
	"VALUES ('join', $1, $2, $3) ON CONFLICT DO NOTHING",
	3, {BYTEAOID, TEXTOID, TIMESTAMPTZOID}
};

/*
 * One key, one certificate (see bc_join.h).  The lock makes the check
 * race-free: a concurrent replay waits for the first join to commit, then
 * sees its certificate (each statement takes a new snapshot).
 */
void
bc_key_reuse_check(BcJoinRequest *req, const char *who, bool join)
{
	Datum		v[4];
	bool		isnull;
	int32		k;
	BcRepeat   *r;
	bytea	   *subject;
	Datum		kinds;

	/*
	 * The CSR key's lock: every join or renewal for one key runs after the
	 * other (locks.c: a lock no other role can take or hold).
	 */
	memcpy(&k, req->csr_spki_sha256, sizeof(k));
	(void) bc_xact_lock(BC_LOCK_JOIN_KEY, (uint32) k, true);

	v[0] = PointerGetDatum(bc_bytea(req->csr_spki_sha256, BC_SHA256_LEN));
	if (bc_spi_exec(&key_held, v, NULL, false, 1) != 1)
		elog(ERROR, "the key-reuse probe returned no row");
	if (!bc_spi_bool(1))
		return;
	v[1] = PointerGetDatum(bc_bytea(req->csr_sha256, BC_SHA256_LEN));
	v[2] = CStringGetTextDatum(req->attestor);
	v[3] = CStringGetTextDatum(req->role);
	if (bc_spi_exec(&key_holder, v, NULL, false, 1) != 1)
		return;
	if (!join || !bc_spi_bool(Anum_kh_repeat))
		bc_refuse_join(psprintf("%s:key-reused", who), NULL);

	/* This very join again (its answer was lost?): it must prove the same again. */
	r = palloc0(sizeof(BcRepeat));
	strlcpy(r->serial_hex, bc_spi_text_req(Anum_kh_serial), sizeof(r->serial_hex));
	r->node_id = bc_spi_text_req(Anum_kh_node_id);
	r->tenant_id = bc_spi_text_req(Anum_kh_tenant);
	r->role = bc_spi_text_req(Anum_kh_role);
	r->generation = bc_spi_int4(Anum_kh_generation);
	r->der = bc_spi_bytea_copy(Anum_kh_certificate);
	kinds = bc_spi_datum(Anum_kh_allowed_kinds, &isnull);
	r->has_allowed_kinds = !isnull;
	if (r->has_allowed_kinds)
		r->allowed_kinds = PointerGetDatum(DatumGetArrayTypePCopy(kinds));
	r->not_before = DatumGetTimestampTz(bc_spi_datum(Anum_kh_not_before, &isnull));
	r->not_after = DatumGetTimestampTz(bc_spi_datum(Anum_kh_not_after, &isnull));
	subject = bc_spi_bytea_copy(Anum_kh_join_subject);
	if (VARSIZE_ANY_EXHDR(subject) != BC_SHA256_LEN)
		elog(ERROR, "certificate %s has a join subject of %zu bytes", r->serial_hex,
			 (size_t) VARSIZE_ANY_EXHDR(subject));
	memcpy(r->subject, VARDATA_ANY(subject), BC_SHA256_LEN);
	req->repeat = r;
}

/* The issued answer again with a node certificate issued before (see bc_join.h). */
Jsonb *
bc_issued_again(const BcJoinRequest *req, const BcRepeat *r, MemoryContext outcxt)
{
	BcIssued	issued;

	memset(&issued, 0, sizeof(issued));
	strlcpy(issued.serial_hex, r->serial_hex, sizeof(issued.serial_hex));
	issued.not_before = r->not_before;
	issued.not_after = r->not_after;
	issued.leaf_der = (unsigned char *) VARDATA_ANY(r->der);
	issued.leaf_der_len = VARSIZE_ANY_EXHDR(r->der);
	issued.spiffe_id = psprintf(BC_SPIFFE_NODE_FMT, bc_trust_domain,
								r->tenant_id, r->node_id);
	return bc_issued_response(req, r->node_id, r->tenant_id, r->role, r->generation, &issued,
							  r->allowed_kinds, r->has_allowed_kinds, outcxt);
}

/* The answer to a repeat that verified again (see bc_join.h). */
Jsonb *
bc_repeat_response(const BcJoinRequest *req, MemoryContext outcxt)
{
	const BcRepeat *r = req->repeat;
	Datum		v[3];
	unsigned char mark[BC_SHA256_LEN];
	char	   *m = psprintf("bc_join/repeat:%s", r->serial_hex);

	/* At most one note per certificate, however often it is repeated. */
	bc_sha256(m, strlen(m), mark);
	v[0] = PointerGetDatum(bc_bytea(mark, BC_SHA256_LEN));
	v[1] = CStringGetTextDatum(r->node_id);
	v[2] = TimestampTzGetDatum(r->not_after);
	if (bc_spi_exec(&repeat_note_once, v, NULL, false, 0) == 1)
	{
		StringInfoData note;

		initStringInfo(&note);
		bc_json_begin(&note);
		bc_json_member(&note, "nodeId", r->node_id);
		bc_json_member(&note, "serial", r->serial_hex);
		bc_json_member(&note, "attestor", req->attestor);
		bc_json_member(&note, "csrSha256", req->csr_sha256_b64);
		bc_json_end(&note);
		bc_audit("node.join.repeated", r->tenant_id, r->node_id, bc_jsonb(note.data));
	}

	return bc_issued_again(req, r, outcxt);
}
