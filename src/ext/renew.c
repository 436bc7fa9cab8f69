/*
 * renew.c: bc_join.renew(request jsonb), a node renewing its certificate.
 *
 * RenewRequest: {"csr": "<base64url DER CSR of the new key>", "proof": "<JWS>"}.
 * The proof is an ES256 JWS signed with the current certificate's key over
 * {"purpose":"renew","serial":"<current serial>","csrSha256":"<new CSR's>",
 *  "iat":<unix seconds>}: possession of the current key, bound to the new
 * CSR, fresh (iat within the replay window) and used once.  The CSR's own
 * signature proves possession of the new key.  The current certificate must
 * be unrevoked, of the node's current identity generation and unexpired; the
 * node live.  allowedKinds carry forward; a node key statement (nodeKeyUri)
 * carries forward only when proven again for the new key, which no renewal
 * proof can do yet, so such a certificate is refused key-statement-unknown.
 * The old certificate is revoked (renewed): renewing twice from it fails.
 * Refusals are the one refusal, recorded as renew:<reason>.
 */
#include "bc_join.h"

#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/numeric.h"

/* How far iat may lie from the service clock, in seconds. */
#define BC_RENEW_WINDOW 300
#define BC_PROOF_MAX 4096

static BcPlan lock_cert = {
	"SELECT c.node_id, c.identity_generation, c.not_after <= bc_join.compute_now() AS expired, "
	"       c.revoked_at IS NOT NULL AS revoked, c.certificate, c.allowed_kinds, c.node_key_uri, "
	"       n.identity_generation, n.state, n.tenant_id, n.role "
	"FROM bc_join.node_certs c JOIN bc_join.nodes n ON n.id = c.node_id "
	"WHERE c.serial = $1 FOR UPDATE OF c, n",
	1, {TEXTOID}
};

static BcPlan revoke_cert = {
	"UPDATE bc_join.node_certs SET revoked_at = bc_join.compute_now(), "
	"       revocation_reason = 'renewed' WHERE serial = $1",
	1, {TEXTOID}
};

static BcPlan use_proof = {
	"INSERT INTO bc_join.attestation_uses (attestor, subject, node_id, expires_at) "
	"VALUES ('renew', $1, $2, to_timestamp($3)) ON CONFLICT DO NOTHING",
	3, {BYTEAOID, TEXTOID, FLOAT8OID}
};

typedef struct BcRenewRequest
{
	char	   *proof;
} BcRenewRequest;

/* Parse and bound a RenewRequest into req (the CSR) and rr (the proof). */
static void
parse_renew_request(Jsonb *jb, BcJoinRequest *req, BcRenewRequest *rr, MemoryContext owner)
{
	JsonbIterator *it;
	JsonbValue	v;
	char	   *csr_b64 = NULL;

	memset(req, 0, sizeof(*req));
	memset(rr, 0, sizeof(*rr));
	if (VARSIZE_ANY_EXHDR(jb) > BC_REQUEST_MAX)
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
			rr->proof = bc_json_string_value(&v, key, BC_PROOF_MAX);
		else
			bc_invalid_input("unknown field \"%.64s\"", key);
	}
	if (csr_b64 == NULL)
		bc_invalid_input("\"csr\" is required");
	if (rr->proof == NULL)
		bc_invalid_input("\"proof\" is required");
	bc_parse_csr(csr_b64, req, owner);
	req->attestor = "renew";
	req->role = "node";
	req->claims = bc_jsonb("{}");
}

/* The serial a proof names, read before its signature can be checked. */
static char *
proof_serial(const char *proof)
{
	const char *p1 = strchr(proof, '.');
	const char *p2 = p1 ? strchr(p1 + 1, '.') : NULL;
	size_t		n;
	unsigned char *raw;
	size_t		len;
	Jsonb	   *jb;
	JsonbValue *serial;

	if (p2 == NULL)
		bc_refuse_join("renew:malformed-proof", NULL);
	n = p2 - (p1 + 1);
	raw = palloc(bc_b64url_decoded_maxlen(n) + 1);
	if (bc_b64url_decode(p1 + 1, n, raw, bc_b64url_decoded_maxlen(n), &len) != BC_OK)
		bc_refuse_join("renew:malformed-proof", NULL);
	raw[len] = '\0';
	jb = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum((char *) raw)));
	serial = JB_ROOT_IS_OBJECT(jb) ?
		getKeyJsonValueFromContainer(&jb->root, "serial", 6, NULL) : NULL;
	if (serial == NULL || serial->type != jbvString || serial->val.string.len != 32)
		bc_refuse_join("renew:malformed-proof", NULL);
	return pnstrdup(serial->val.string.val, 32);
}

/* A string member of a verified proof payload, or the refusal. */
static char *
proof_member(Jsonb *payload, const char *name, const char *tenant)
{
	JsonbValue *v = getKeyJsonValueFromContainer(&payload->root, name, strlen(name), NULL);

	if (v == NULL || v->type != jbvString)
		bc_refuse_join("renew:malformed-proof", tenant);
	return pnstrdup(v->val.string.val, v->val.string.len);
}

/* Check the proof: signed by the certificate's key, bound to this CSR, fresh, once. */
static void
check_proof(const BcJoinRequest *req, const char *proof, const char *serial,
			bytea *cert_der, const char *node_id, const char *tenant)
{
	X509	   *cert = NULL;
	unsigned char *payload = NULL;
	size_t		plen = 0;
	Jsonb	   *pj;
	JsonbValue *iat;
	double		iat_s;
	double		now_s = (double) bc_timestamp_to_unix(bc_now());
	Datum		v[3];
	bytea	   *subject;
	int			st;

	if (bc_cert_parse((unsigned char *) VARDATA_ANY(cert_der), VARSIZE_ANY_EXHDR(cert_der),
					  &cert) != BC_OK)
		elog(ERROR, "stored certificate %s does not parse", serial);
	bc_own_x509(CurrentMemoryContext, cert);
	st = bc_jws_verify_es256(X509_get0_pubkey(cert), proof, strlen(proof), BC_PROOF_MAX,
							 &payload, &plen);
	if (st != BC_OK)
		bc_refuse_join("renew:proof", NULL);
	payload = (unsigned char *) bc_take_cstring((char *) payload);
	pj = bc_jsonb((char *) payload);
	if (!JB_ROOT_IS_OBJECT(pj))
		bc_refuse_join("renew:malformed-proof", tenant);

	/* Signed by the current key: the tenant is authenticated from here. */
	if (strcmp(proof_member(pj, "purpose", tenant), "renew") != 0 ||
		strcmp(proof_member(pj, "serial", tenant), serial) != 0)
		bc_refuse_join("renew:malformed-proof", tenant);
	if (strcmp(proof_member(pj, "csrSha256", tenant), req->csr_sha256_b64) != 0)
		bc_refuse_join("renew:csr-binding", tenant);
	iat = getKeyJsonValueFromContainer(&pj->root, "iat", 3, NULL);
	if (iat == NULL || iat->type != jbvNumeric)
		bc_refuse_join("renew:malformed-proof", tenant);
	iat_s = DatumGetFloat8(DirectFunctionCall1(numeric_float8, NumericGetDatum(iat->val.numeric)));
	if (iat_s < now_s - BC_RENEW_WINDOW || iat_s > now_s + BC_RENEW_WINDOW)
		bc_refuse_join("renew:stale-proof", tenant);

	/* Once: the proof's hash is kept until it can no longer be fresh. */
	subject = palloc(VARHDRSZ + BC_SHA256_LEN);
	SET_VARSIZE(subject, VARHDRSZ + BC_SHA256_LEN);
	bc_sha256(proof, strlen(proof), (unsigned char *) VARDATA(subject));
	v[0] = PointerGetDatum(subject);
	v[1] = CStringGetTextDatum(node_id);
	v[2] = Float8GetDatum(iat_s + BC_RENEW_WINDOW);
	if (bc_spi_exec(&use_proof, v, NULL, false, 0) != 1)
		bc_refuse_join("renew:reused", tenant);
}

/* The renewal round: check the current certificate and proof, issue the next. */
static Jsonb *
renew_round(BcJoinRequest *req, void *arg, MemoryContext outcxt)
{
	BcRenewRequest *rr = (BcRenewRequest *) arg;
	char	   *serial = proof_serial(rr->proof);
	Datum		v = CStringGetTextDatum(serial);
	bool		isnull;
	char	   *node_id;
	char	   *tenant;
	char	   *role;
	int			generation;
	bool		expired;
	bool		revoked;
	bytea	   *der;
	Datum		kinds;
	bool		has_kinds;
	bool		has_key_uri;
	int			node_generation;
	char	   *state;
	int			ttl;
	BcIssued	issued;
	StringInfoData ev;
	Jsonb	   *evj;

	if (bc_spi_exec(&lock_cert, &v, NULL, false, 1) != 1)
		bc_refuse_join("renew:unknown-certificate", NULL);
	node_id = bc_spi_text(1);
	generation = DatumGetInt32(bc_spi_datum(2, &isnull));
	expired = DatumGetBool(bc_spi_datum(3, &isnull));
	revoked = DatumGetBool(bc_spi_datum(4, &isnull));
	der = DatumGetByteaPCopy(bc_spi_datum(5, &isnull));
	kinds = bc_spi_datum(6, &has_kinds);
	has_kinds = !has_kinds;
	if (has_kinds)
		kinds = PointerGetDatum(DatumGetArrayTypePCopy(kinds));
	(void) bc_spi_datum(7, &has_key_uri);
	has_key_uri = !has_key_uri;
	node_generation = DatumGetInt32(bc_spi_datum(8, &isnull));
	state = bc_spi_text(9);
	tenant = bc_spi_text(10);
	role = bc_spi_text(11);
	req->role = role;

	check_proof(req, rr->proof, serial, der, node_id, tenant);

	if (revoked)
		bc_refuse_join("renew:revoked", tenant);
	if (generation != node_generation)
		bc_refuse_join("renew:superseded", tenant);
	if (expired)
		bc_refuse_join("renew:expired", tenant);
	if (strcmp(state, "retired") == 0)
		bc_refuse_join("renew:retired", tenant);
	if (has_key_uri)
		bc_refuse_join("renew:key-statement-unknown", tenant);
	if (bc_csr_verify_pop(req->csr) != BC_OK)
		bc_refuse_join("renew:csr-signature", tenant);

	ttl = bc_cert_ttl;
	if (strcmp(role, "ramdisk") == 0 && ttl > BC_RAMDISK_TTL_MAX)
		ttl = BC_RAMDISK_TTL_MAX;
	bc_spi_exec(&revoke_cert, &v, NULL, false, 0);
	bc_issue_and_record(req, tenant, node_id, generation, kinds, has_kinds, NULL, ttl, &issued);

	initStringInfo(&ev);
	appendStringInfoString(&ev, "{\"nodeId\":");
	escape_json(&ev, node_id);
	bc_json_member(&ev, "serial", issued.serial_hex);
	bc_json_member(&ev, "previousSerial", serial);
	bc_json_member(&ev, "csrSha256", req->csr_sha256_b64);
	appendStringInfo(&ev, ",\"identityGeneration\":%d}", generation);
	evj = bc_jsonb(ev.data);
	bc_emit_event(tenant, "node.renewed", evj);
	bc_audit("node.renew", tenant, node_id, evj);

	return bc_issued_response(req, node_id, tenant, role, generation, &issued,
							  kinds, has_kinds, outcxt);
}

PG_FUNCTION_INFO_V1(bc_renew_request);

/* bc_join.renew(request jsonb): renew a node certificate. */
Datum
bc_renew_request(PG_FUNCTION_ARGS)
{
	Jsonb	   *jb = PG_GETARG_JSONB_P(0);
	MemoryContext callcxt = CurrentMemoryContext;
	BcJoinRequest req;
	BcRenewRequest rr;
	Jsonb	   *out;

	parse_renew_request(jb, &req, &rr, callcxt);
	(void) bc_keys();
	if (bc_trust_domain == NULL || bc_trust_domain[0] == '\0')
		bc_invalid_config("bc_join.trust_domain is not set");

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	out = bc_run_round(&req, renew_round, &rr, "renew", callcxt);
	SPI_finish();
	PG_RETURN_JSONB_P(out);
}
