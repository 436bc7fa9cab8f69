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
 * The old certificate is revoked (renewed): renewing twice from it fails,
 * except that a renewal repeated for the same new key (its answer was lost)
 * gets the certificate already issued to that key, and nothing new.
 * Refusals are the one refusal, recorded as renew:<reason>.
 */
#include "bc_join.h"

#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/numeric.h"


static BcPlan lock_cert = {
	"SELECT c.node_id, c.identity_generation, c.not_after <= bc_join.compute_now() AS expired, "
	"       c.revoked_at IS NOT NULL AS revoked, c.certificate, c.allowed_kinds, c.node_key_uri, "
	"       n.identity_generation, n.state, n.tenant_id, n.role, "
	"       c.revocation_reason IS NOT DISTINCT FROM 'renewed' AS renewed "
	"FROM bc_join.node_certs c JOIN bc_join.nodes n ON n.id = c.node_id "
	"WHERE c.serial = $1 FOR UPDATE OF c, n",
	1, {TEXTOID}
};

/* The live certificate this node already holds for the request's key. */
static BcPlan successor = {
	"SELECT serial, certificate, not_before, not_after FROM bc_join.node_certs "
	"WHERE node_id = $1 AND spki_sha256 = $2 AND identity_generation = $3 "
	"  AND revoked_at IS NULL AND not_after > bc_join.compute_now() "
	"ORDER BY issued_at DESC LIMIT 1",
	3, {TEXTOID, BYTEAOID, INT4OID}
};

/*
 * A renewal repeated because its answer was lost: the certificate was
 * renewed, and the node holds a live successor for this very key.  Answer
 * with that certificate again; issue nothing.  NULL when it is not that.
 */
static Jsonb *
repeated_renewal(const BcJoinRequest *req, const char *node_id, const char *tenant,
				 const char *role, int generation, Datum kinds, bool has_kinds,
				 MemoryContext outcxt)
{
	Datum		v[3];
	bool		isnull;
	BcIssued	issued;
	bytea	   *spki = bc_bytea(req->csr_spki_sha256, BC_SHA256_LEN);
	bytea	   *der;

	v[0] = CStringGetTextDatum(node_id);
	v[1] = PointerGetDatum(spki);
	v[2] = Int32GetDatum(generation);
	if (bc_spi_exec(&successor, v, NULL, true, 1) != 1)
		return NULL;
	memset(&issued, 0, sizeof(issued));
	strlcpy(issued.serial_hex, bc_spi_text(1), sizeof(issued.serial_hex));
	der = DatumGetByteaPCopy(bc_spi_datum(2, &isnull));
	issued.leaf_der = (unsigned char *) VARDATA(der);
	issued.leaf_der_len = VARSIZE(der) - VARHDRSZ;
	issued.not_before = DatumGetTimestampTz(bc_spi_datum(3, &isnull));
	issued.not_after = DatumGetTimestampTz(bc_spi_datum(4, &isnull));
	issued.spiffe_id = psprintf("spiffe://%s/tenant/%s/node/%s", bc_trust_domain, tenant, node_id);
	return bc_issued_response(req, node_id, tenant, role, generation, &issued,
							  kinds, has_kinds, outcxt);
}

static BcPlan revoke_cert = {
	"UPDATE bc_join.node_certs SET revoked_at = bc_join.compute_now(), "
	"       revocation_reason = 'renewed' WHERE serial = $1",
	1, {TEXTOID}
};


/* The renewal round: check the current certificate and proof, issue the next. */
static Jsonb *
renew_round(BcJoinRequest *req, void *arg, MemoryContext outcxt)
{
	const char *proof = (const char *) arg;
	char	   *serial = bc_proof_serial(proof, "renew");
	Datum		v = CStringGetTextDatum(serial);
	bool		isnull;
	char	   *node_id;
	char	   *tenant;
	char	   *role;
	int			generation;
	bool		expired;
	bool		revoked;
	bool		renewed;
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
	renewed = DatumGetBool(bc_spi_datum(12, &isnull));
	req->role = role;

	(void) bc_check_node_proof("renew", req, proof, serial, der, node_id, tenant);

	if (revoked && renewed && generation == node_generation)
	{
		Jsonb	   *again = repeated_renewal(req, node_id, tenant, role, generation,
											 kinds, has_kinds, outcxt);

		if (again != NULL)
			return again;
	}
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
	(void) bc_key_reuse_check(req, "renew", false, outcxt);

	ttl = bc_cert_ttl;
	if (strcmp(role, "ramdisk") == 0 && ttl > BC_RAMDISK_TTL_MAX)
		ttl = BC_RAMDISK_TTL_MAX;
	bc_spi_exec(&revoke_cert, &v, NULL, false, 0);
	bc_issue_and_record(req, tenant, node_id, generation, kinds, has_kinds, NULL, false, ttl, &issued);

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
	PG_RETURN_JSONB_P(bc_proof_request_round(PG_GETARG_JSONB_P(0), "renew", renew_round));
}
