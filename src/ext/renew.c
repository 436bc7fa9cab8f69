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
 * carries forward only when proven again for the new key: a TPM AK
 * statement by the request's "tpm" member (attestors/tpm.c,
 * bc_tpm_renew_check), any other is refused key-statement-unknown.
 * The current certificate is locked and checked by proof.c (bc_lock_proof_cert,
 * bc_require_live_cert), as for sessions.
 * The old certificate is revoked (renewed): renewing twice from it fails,
 * except that a renewal repeated for the same new key (its answer was lost)
 * gets the certificate already issued to that key, and nothing new.
 * A renewal marks the node seen (bc_node_seen: last_seen_at, adopting ->
 * active).  Refusals are the one refusal, recorded as renew:<reason>.
 *
 * One revoked certificate renews (issue 45): one revoked cACompromise whose
 * issuer is a CA marked compromised (bc_join.mark_ca_compromised,
 * compromise.c), once, for a new key (renew:same-key otherwise), proven by
 * its key as any renewal; the new certificate comes from the current
 * intermediate.  It stays revoked cACompromise; compromise_renewals records
 * the renewal, and a second one is renew:superseded (the same new key again
 * gets the certificate already issued, as above).  Anyone holding only the
 * compromised CA's key has nothing to prove with: the proof is checked with
 * the key of the certificate stored under the serial, never one presented.
 */
#include "bc_join.h"

#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/numeric.h"


/* The live certificate this node already holds for the request's key. */
static BcPlan successor = {
	"SELECT serial, certificate, not_before, not_after FROM bc_join.node_certs "
	"WHERE node_id = $1 AND spki_sha256 = $2 AND identity_generation = $3 "
	"  AND revoked_at IS NULL AND not_after > bc_join.compute_now() "
	"ORDER BY issued_at DESC LIMIT 1",
	3, {TEXTOID, BYTEAOID, INT4OID}
};

enum
{
	Anum_succ_serial = 1,
	Anum_succ_certificate,
	Anum_succ_not_before,
	Anum_succ_not_after
};

/*
 * A renewal repeated because its answer was lost: the certificate was
 * renewed, and the node holds a live successor for this very key.  Answer
 * with that certificate again; issue nothing.  NULL when it is not that.
 */
static Jsonb *
repeated_renewal(const BcJoinRequest *req, const BcProofCert *c, MemoryContext outcxt)
{
	Datum		v[3];
	bool		isnull;
	BcRepeat	r;

	v[0] = CStringGetTextDatum(c->node_id);
	v[1] = PointerGetDatum(bc_bytea(req->csr_spki_sha256, BC_SHA256_LEN));
	v[2] = Int32GetDatum(c->generation);
	if (bc_spi_exec(&successor, v, NULL, true, 1) != 1)
		return NULL;
	memset(&r, 0, sizeof(r));
	strlcpy(r.serial_hex, bc_spi_text_req(Anum_succ_serial), sizeof(r.serial_hex));
	r.der = bc_spi_bytea_copy(Anum_succ_certificate);
	r.not_before = DatumGetTimestampTz(bc_spi_datum(Anum_succ_not_before, &isnull));
	r.not_after = DatumGetTimestampTz(bc_spi_datum(Anum_succ_not_after, &isnull));
	r.node_id = c->node_id;
	r.tenant_id = c->tenant;
	r.role = c->role;
	r.generation = c->generation;
	r.allowed_kinds = c->allowed_kinds;
	r.has_allowed_kinds = c->has_allowed_kinds;
	return bc_issued_again(req, &r, outcxt);
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
	char	   *serial = bc_proof_serial(proof, BC_PURPOSE_RENEW);
	Datum		v = CStringGetTextDatum(serial);
	BcProofCert c;
	int			ttl;
	BcIssued	issued;
	StringInfoData ev;
	Jsonb	   *evj;
	bool		ca_renewal;
	bool		renewed_before;

	bc_lock_proof_cert(BC_PURPOSE_RENEW, serial, true, &c);
	req->role = c.role;

	(void) bc_check_node_proof(BC_PURPOSE_RENEW, req, proof, serial, c.der, c.node_id, c.tenant);

	ca_renewal = c.revoked && c.revocation_reason != NULL &&
		strcmp(c.revocation_reason, "cACompromise") == 0 && bc_issuer_compromised(c.der);
	renewed_before = ca_renewal && bc_compromise_renewed(serial);
	if (c.revoked && (c.renewed || renewed_before) && c.generation == c.node_generation)
	{
		Jsonb	   *again = repeated_renewal(req, &c, outcxt);

		if (again != NULL)
			return again;
	}
	if (renewed_before)
		bc_refuse_join("renew:superseded", c.tenant);
	if (ca_renewal)
	{
		/* Revoked for its CA's compromise: every other condition holds as for any renewal. */
		BcProofCert live = c;

		live.revoked = false;
		bc_require_live_cert(BC_PURPOSE_RENEW, &live);
	}
	else
		bc_require_live_cert(BC_PURPOSE_RENEW, &c);
	/* A TPM statement is proven again for the new key; any other cannot be. */
	if (c.node_key_uri != NULL)
	{
		if (strncmp(c.node_key_uri, BC_TPM_AK_URN_PREFIX, strlen(BC_TPM_AK_URN_PREFIX)) != 0)
			bc_refuse_join("renew:key-statement-unknown", c.tenant);
		bc_tpm_renew_check(req, req->renew_tpm, c.node_id, c.tenant, c.node_key_uri);
	}
	if (bc_csr_verify_pop(req->csr) != BC_OK)
		bc_refuse_join("renew:csr-signature", c.tenant);
	/* A new key: one key, one certificate, and a re-key bounds what the compromise exposed. */
	if (ca_renewal && bc_cert_key_is(c.der, req->csr_spki_sha256))
		bc_refuse_join("renew:same-key", c.tenant);
	bc_key_reuse_check(req, BC_PURPOSE_RENEW, false);

	ttl = bc_cert_ttl;
	if (strcmp(c.role, BC_ROLE_RAMDISK) == 0 && ttl > BC_RAMDISK_TTL_MAX)
		ttl = BC_RAMDISK_TTL_MAX;
	if (!ca_renewal)
		bc_spi_exec(&revoke_cert, &v, NULL, false, 0);
	bc_issue_and_record(req, c.tenant, c.node_id, c.generation, c.allowed_kinds,
						c.has_allowed_kinds, c.node_key_uri, NULL, ttl, &issued);
	if (ca_renewal)
		bc_compromise_record_renewal(serial, issued.serial_hex);
	bc_node_seen(c.node_id, true);

	initStringInfo(&ev);
	bc_json_begin(&ev);
	bc_json_member(&ev, "nodeId", c.node_id);
	bc_json_member(&ev, "serial", issued.serial_hex);
	bc_json_member(&ev, "previousSerial", serial);
	bc_json_member(&ev, "csrSha256", req->csr_sha256_b64);
	bc_json_member_int(&ev, "identityGeneration", c.generation);
	if (ca_renewal)
		bc_json_member_bool(&ev, "caCompromise", true);
	bc_json_end(&ev);
	evj = bc_jsonb(ev.data);
	bc_emit_event_audit(c.tenant, "node.renewed", "node.renew", c.node_id, evj);

	return bc_issued_response(req, c.node_id, c.tenant, c.role, c.generation, &issued,
							  c.allowed_kinds, c.has_allowed_kinds, outcxt);
}

PG_FUNCTION_INFO_V1(bc_renew_request);

/* bc_join.renew(request jsonb): renew a node certificate. */
Datum
bc_renew_request(PG_FUNCTION_ARGS)
{
	PG_RETURN_JSONB_P(bc_proof_request_round(PG_GETARG_JSONB_P(0), BC_PURPOSE_RENEW, renew_round));
}
