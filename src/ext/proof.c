/*
 * proof.c: a node proving possession of its current node key, for renewal
 * and for session credentials.
 *
 * Request: {"csr": "<base64url DER CSR of a new key>", "proof": "<JWS>"}.  The
 * proof is an ES256 JWS signed with the key of the node's current
 * certificate over {"purpose": <"renew"|"session">, "serial": <that
 * certificate's serial>, "csrSha256": <the new CSR's>, "iat": <unix seconds>,
 * ...}: bound to the new key's CSR, fresh (iat within BC_PROOF_WINDOW of the
 * service clock) and used once (its hash kept in attestation_uses until it
 * could no longer be fresh).  Refusals are "<purpose>:<reason>".
 */
#include "bc_join.h"

#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/numeric.h"

static BcPlan use_proof = {
	"INSERT INTO bc_join.attestation_uses (attestor, subject, node_id, expires_at) "
	"VALUES ($1, $2, $3, to_timestamp($4)) ON CONFLICT DO NOTHING",
	4, {TEXTOID, BYTEAOID, TEXTOID, FLOAT8OID}
};

/*
 * Parse and bound {"csr", "proof"} into req (the CSR) and *proof; a renewal
 * may also carry "tpm", an object (req->renew_tpm), which the round checks.
 */
void
bc_parse_proof_request(Jsonb *jb, BcJoinRequest *req, char **proof, const char *who,
					   MemoryContext owner)
{
	JsonbIterator *it;
	JsonbValue	v;
	char	   *csr_b64 = NULL;
	Jsonb	   *tpm = NULL;

	memset(req, 0, sizeof(*req));
	*proof = NULL;
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
		if (strcmp(key, "csr") == 0)
			csr_b64 = bc_json_string_value(&v, key, BC_CSR_B64_MAX);
		else if (strcmp(key, "proof") == 0)
			*proof = bc_json_string_value(&v, key, BC_PROOF_MAX);
		else if (strcmp(key, "tpm") == 0 && strcmp(who, "renew") == 0)
		{
			if (v.type != jbvBinary || !JsonContainerIsObject(v.val.binary.data))
				bc_invalid_input("\"tpm\" must be a JSON object");
			tpm = JsonbValueToJsonb(&v);
		}
		else
			bc_invalid_input("unknown field \"%.64s\"", key);
	}
	if (csr_b64 == NULL)
		bc_invalid_input("\"csr\" is required");
	if (*proof == NULL)
		bc_invalid_input("\"proof\" is required");
	bc_parse_csr(csr_b64, req, owner);
	req->renew_tpm = tpm;
	req->role = BC_ROLE_NODE;
	req->claims = bc_jsonb("{}");
}

/*
 * Non-raising: text is one JSON object, unique top-level members, small whole
 * numbers (bc_json_members with other members allowed, so nothing in it can
 * raise: an unsigned payload holding 1e1000000 or a duplicate member is a
 * refusal, not an error).
 */
bool
bc_json_object_ok(const char *text, size_t len)
{
	return bc_json_members(text, (int) len, NULL, 0, true);
}

/*
 * The serial a proof names: the one member read before its signature is
 * checked, because it names the certificate whose key must have signed it.
 * Read by the non-raising reader (as bc_json_object_ok reads, "serial" a
 * string); nothing else of the payload is interpreted.
 */
char *
bc_proof_serial(const char *proof, const char *who)
{
	const char *p1 = strchr(proof, '.');
	const char *p2 = p1 ? strchr(p1 + 1, '.') : NULL;
	size_t		n;
	unsigned char *raw;
	size_t		len;
	BcEvidenceMember m[] = {{.name = "serial", .required = true, .max = 32}};

	if (p2 == NULL)
		bc_refuse_join(psprintf("%s:malformed-proof", who), NULL);
	n = p2 - (p1 + 1);
	raw = palloc(bc_b64url_decoded_maxlen(n) + 1);
	if (bc_b64url_decode(p1 + 1, n, raw, bc_b64url_decoded_maxlen(n), &len) != BC_OK)
		bc_refuse_join(psprintf("%s:malformed-proof", who), NULL);
	raw[len] = '\0';
	if (!bc_json_members((char *) raw, (int) len, m, lengthof(m), true) ||
		!bc_serial_valid(m[0].value))
		bc_refuse_join(psprintf("%s:malformed-proof", who), NULL);
	return m[0].value;
}

/* The certificate a proof names, with its node (bc_lock_proof_cert). */
#define CURRENT_CERT_SQL \
	"SELECT c.node_id, c.identity_generation, c.not_after <= bc_join.compute_now(), " \
	"       c.revoked_at IS NOT NULL, c.revocation_reason IS NOT DISTINCT FROM 'renewed', " \
	"       c.certificate, c.allowed_kinds, c.node_key_uri, " \
	"       extract(epoch FROM c.not_after - bc_join.compute_now())::bigint, " \
	"       n.identity_generation, n.state, n.tenant_id, n.role, " \
	"       EXISTS (SELECT 1 FROM bc_join.node_attestation a " \
	"               WHERE a.node_id = n.id AND a.state = 'quarantined'), c.revocation_reason " \
	"FROM bc_join.node_certs c JOIN bc_join.nodes n ON n.id = c.node_id WHERE c.serial = $1 "

enum
{
	Anum_cc_node_id = 1,
	Anum_cc_generation,
	Anum_cc_expired,
	Anum_cc_revoked,
	Anum_cc_renewed,
	Anum_cc_certificate,
	Anum_cc_allowed_kinds,
	Anum_cc_node_key_uri,
	Anum_cc_remaining,
	Anum_cc_node_generation,
	Anum_cc_state,
	Anum_cc_tenant,
	Anum_cc_role,
	Anum_cc_quarantined,
	Anum_cc_revocation_reason
};

static BcPlan lock_cert_update = {CURRENT_CERT_SQL "FOR UPDATE OF c, n", 1, {TEXTOID}};
static BcPlan lock_cert_share = {CURRENT_CERT_SQL "FOR SHARE OF c, n", 1, {TEXTOID}};

/*
 * Lock the certificate serial names and its node (for update: a renewal
 * changes both; for share: a session only reads them) into *c; refuses
 * "<who>:unknown-certificate".
 */
void
bc_lock_proof_cert(const char *who, const char *serial, bool for_update, BcProofCert *c)
{
	Datum		v = CStringGetTextDatum(serial);
	bool		isnull;

	memset(c, 0, sizeof(*c));
	if (bc_spi_exec(for_update ? &lock_cert_update : &lock_cert_share, &v, NULL, false, 1) != 1)
		bc_refuse_join(psprintf("%s:unknown-certificate", who), NULL);
	c->serial = pstrdup(serial);
	c->node_id = bc_spi_text_req(Anum_cc_node_id);
	c->generation = bc_spi_int4(Anum_cc_generation);
	c->expired = bc_spi_bool(Anum_cc_expired);
	c->revoked = bc_spi_bool(Anum_cc_revoked);
	c->renewed = bc_spi_bool(Anum_cc_renewed);
	c->der = bc_spi_bytea_copy(Anum_cc_certificate);
	c->allowed_kinds = bc_spi_datum(Anum_cc_allowed_kinds, &isnull);
	c->has_allowed_kinds = !isnull;
	if (c->has_allowed_kinds)
		c->allowed_kinds = PointerGetDatum(DatumGetArrayTypePCopy(c->allowed_kinds));
	c->node_key_uri = bc_spi_text(Anum_cc_node_key_uri);
	c->remaining = bc_spi_int8(Anum_cc_remaining);
	c->node_generation = bc_spi_int4(Anum_cc_node_generation);
	c->state = bc_spi_text_req(Anum_cc_state);
	c->tenant = bc_spi_text_req(Anum_cc_tenant);
	c->role = bc_spi_text_req(Anum_cc_role);
	c->quarantined = bc_spi_bool(Anum_cc_quarantined);
	c->revocation_reason = bc_spi_text(Anum_cc_revocation_reason);
}

/*
 * Refuse "<who>:quarantined|revoked|superseded|expired|retired" unless the
 * certificate is live and its node not quarantined (continuous attestation,
 * attest.c: a quarantined node renews, asks sessions, JWT-SVIDs and commands
 * no more).
 */
void
bc_require_live_cert(const char *who, const BcProofCert *c)
{
	if (c->quarantined)
		bc_refuse_join(psprintf("%s:quarantined", who), c->tenant);
	if (c->revoked)
		bc_refuse_join(psprintf("%s:revoked", who), c->tenant);
	if (c->generation != c->node_generation)
		bc_refuse_join(psprintf("%s:superseded", who), c->tenant);
	if (c->expired)
		bc_refuse_join(psprintf("%s:expired", who), c->tenant);
	if (strcmp(c->state, "retired") == 0)
		bc_refuse_join(psprintf("%s:retired", who), c->tenant);
}

/*
 * The node was seen: last_seen_at moves, and an adopting node becomes
 * active.  A renewal holds the node for update and always writes; a session
 * holds it only for share (others may too), so it writes at most once a
 * minute and only when it gets the row at once (SKIP LOCKED): it never
 * waits, and two sessions of one node never deadlock on it.
 */
#define NODE_SEEN_SET \
	"UPDATE bc_join.nodes n SET last_seen_at = bc_join.compute_now(), " \
	"       state = CASE WHEN n.state = 'adopting' THEN 'active' ELSE n.state END, " \
	"       updated_at = CASE WHEN n.state = 'adopting' THEN bc_join.compute_now() ELSE n.updated_at END "

static BcPlan node_seen_locked = {
	NODE_SEEN_SET "WHERE n.id = $1 AND n.state <> 'retired'",
	1, {TEXTOID}
};

static BcPlan node_seen_shared = {
	NODE_SEEN_SET
	"WHERE n.id = (SELECT x.id FROM bc_join.nodes x WHERE x.id = $1 AND x.state <> 'retired' "
	"              AND (x.state = 'adopting' "
	"                   OR x.last_seen_at < bc_join.compute_now() - interval '1 minute') "
	"              FOR NO KEY UPDATE SKIP LOCKED)",
	1, {TEXTOID}
};

void
bc_node_seen(const char *node_id, bool locked)
{
	Datum		v = CStringGetTextDatum(node_id);

	bc_spi_exec(locked ? &node_seen_locked : &node_seen_shared, &v, NULL, false, 0);
}

/* A string member of a verified proof payload, or the refusal. */
char *
bc_proof_member(const char *who, Jsonb *payload, const char *name, const char *tenant)
{
	char	   *v = bc_jsonb_string(payload, name);

	if (v == NULL)
		bc_refuse_join(psprintf("%s:malformed-proof", who), tenant);
	return v;
}

/*
 * Check a proof: signed by the certificate's key, for purpose who, naming
 * serial, bound to this CSR, fresh and used once.  Returns its payload.
 */
Jsonb *
bc_check_node_proof(const char *who, const BcJoinRequest *req, const char *proof,
					const char *serial, bytea *cert_der, const char *node_id, const char *tenant)
{
	/*
	 * A request without a CSR (commands, jwt-svid) is bound by its purpose
	 * and members instead; a renewal or a session always has one.
	 */
	if (req->csr_der == NULL &&
		(strcmp(who, BC_PURPOSE_RENEW) == 0 || strcmp(who, BC_PURPOSE_SESSION) == 0))
		elog(ERROR, "a %s proof is checked without its CSR", who);
	if (req->csr_der != NULL)
		return bc_check_node_proof_bound(who, proof, serial, cert_der, node_id, tenant,
										 "csrSha256", req->csr_sha256_b64, "csr-binding");
	return bc_check_node_proof_bound(who, proof, serial, cert_der, node_id, tenant,
									 NULL, NULL, NULL);
}

/*
 * Check a proof: signed by the certificate's key, for purpose who, naming
 * serial, fresh and used once, and, when bind_member is given, bound to what
 * the request carries: that string member equals bind_value (a CSR's
 * csrSha256, an SSH key's sshKeySha256), else "<who>:<bind_refusal>".
 * Returns its payload.
 */
Jsonb *
bc_check_node_proof_bound(const char *who, const char *proof, const char *serial,
						  bytea *cert_der, const char *node_id, const char *tenant,
						  const char *bind_member, const char *bind_value,
						  const char *bind_refusal)
{
	X509	   *cert = NULL;
	unsigned char *payload = NULL;
	size_t		plen = 0;
	Jsonb	   *pj;
	JsonbValue *iat;
	double		iat_s;
	double		now_s = (double) bc_timestamp_to_unix(bc_now());
	Datum		v[4];
	bytea	   *subject;
	int			st;

	if (bc_cert_parse((unsigned char *) VARDATA_ANY(cert_der), VARSIZE_ANY_EXHDR(cert_der),
					  &cert) != BC_OK)
		elog(ERROR, "stored certificate %s does not parse", serial);
	cert = bc_own_x509(CurrentMemoryContext, &cert);
	st = bc_jws_verify_es256(X509_get0_pubkey(cert), proof, strlen(proof), BC_PROOF_MAX,
							 &payload, &plen);
	if (st != BC_OK)
		bc_refuse_join(psprintf("%s:proof", who), NULL);
	payload = (unsigned char *) bc_take_cstring((char *) payload);
	/* Verified; still scanned before jsonb reads it, so it cannot raise. */
	if (strlen((char *) payload) != plen || !bc_json_object_ok((char *) payload, plen))
		bc_refuse_join(psprintf("%s:malformed-proof", who), tenant);
	pj = bc_jsonb((char *) payload);
	if (!JB_ROOT_IS_OBJECT(pj))
		bc_refuse_join(psprintf("%s:malformed-proof", who), tenant);

	/* Signed by the current key: the tenant is authenticated from here. */
	if (strcmp(bc_proof_member(who, pj, "purpose", tenant), who) != 0 ||
		strcmp(bc_proof_member(who, pj, "serial", tenant), serial) != 0)
		bc_refuse_join(psprintf("%s:malformed-proof", who), tenant);
	if (bind_member != NULL &&
		strcmp(bc_proof_member(who, pj, bind_member, tenant), bind_value) != 0)
		bc_refuse_join(psprintf("%s:%s", who, bind_refusal), tenant);
	iat = getKeyJsonValueFromContainer(&pj->root, "iat", 3, NULL);
	if (iat == NULL || iat->type != jbvNumeric)
		bc_refuse_join(psprintf("%s:malformed-proof", who), tenant);
	iat_s = DatumGetFloat8(DirectFunctionCall1(numeric_float8, NumericGetDatum(iat->val.numeric)));
	if (iat_s < now_s - BC_PROOF_WINDOW || iat_s > now_s + BC_PROOF_WINDOW)
		bc_refuse_join(psprintf("%s:stale-proof", who), tenant);

	/* Once: the proof's hash is kept until it can no longer be fresh. */
	subject = palloc(VARHDRSZ + BC_SHA256_LEN);
	SET_VARSIZE(subject, VARHDRSZ + BC_SHA256_LEN);
	bc_sha256(proof, strlen(proof), (unsigned char *) VARDATA(subject));
	v[0] = CStringGetTextDatum(who);
	v[1] = PointerGetDatum(subject);
	v[2] = CStringGetTextDatum(node_id);
	v[3] = Float8GetDatum(iat_s + BC_PROOF_WINDOW);
	if (bc_spi_exec(&use_proof, v, NULL, false, 0) != 1)
		bc_refuse_join(psprintf("%s:reused", who), tenant);
	return pj;
}


/*
 * A whole request proven by a node key: parse and bound it (22023), check
 * the configuration, then run round (for purpose who) in its subtransaction.
 */
Jsonb *
bc_proof_request_round(Jsonb *jb, const char *who, BcRoundFn round)
{
	MemoryContext callcxt = CurrentMemoryContext;
	BcJoinRequest req;
	char	   *proof;
	Jsonb	   *out;

	bc_require_sql_version();

	bc_parse_proof_request(jb, &req, &proof, who, callcxt);
	req.attestor = who;
	bc_require_config();
	bc_require_primary();

	bc_spi_connect();
	out = bc_run_round(&req, round, proof, who, callcxt);
	SPI_finish();
	return out;
}
