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

	(void) bc_check_node_proof("renew", req, proof, serial, der, node_id, tenant);

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
	PG_RETURN_JSONB_P(bc_proof_request_round(PG_GETARG_JSONB_P(0), "renew", renew_round));
}
