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
#include "common/jsonapi.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/numeric.h"

static BcPlan use_proof = {
	"INSERT INTO bc_join.attestation_uses (attestor, subject, node_id, expires_at) "
	"VALUES ($1, $2, $3, to_timestamp($4)) ON CONFLICT DO NOTHING",
	4, {TEXTOID, BYTEAOID, TEXTOID, FLOAT8OID}
};

/* Parse and bound {"csr", "proof"} into req (the CSR) and *proof. */
void
bc_parse_proof_request(Jsonb *jb, BcJoinRequest *req, char **proof, MemoryContext owner)
{
	JsonbIterator *it;
	JsonbValue	v;
	char	   *csr_b64 = NULL;

	memset(req, 0, sizeof(*req));
	*proof = NULL;
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
			*proof = bc_json_string_value(&v, key, BC_PROOF_MAX);
		else
			bc_invalid_input("unknown field \"%.64s\"", key);
	}
	if (csr_b64 == NULL)
		bc_invalid_input("\"csr\" is required");
	if (*proof == NULL)
		bc_invalid_input("\"proof\" is required");
	bc_parse_csr(csr_b64, req, owner);
	req->role = "node";
	req->claims = bc_jsonb("{}");
}

/* 1 when text is well-formed JSON (checked without raising, so bad proofs are refusals). */
static bool
is_json(const char *text)
{
	JsonLexContext *lex = makeJsonLexContextCstringLen((char *) text, strlen(text),
													   GetDatabaseEncoding(), true);

	return pg_parse_json(lex, &nullSemAction) == JSON_SUCCESS;
}

/* The serial a proof names, read before its signature can be checked. */
char *
bc_proof_serial(const char *proof, const char *who)
{
	const char *p1 = strchr(proof, '.');
	const char *p2 = p1 ? strchr(p1 + 1, '.') : NULL;
	size_t		n;
	unsigned char *raw;
	size_t		len;
	Jsonb	   *jb;
	JsonbValue *serial;

	if (p2 == NULL)
		bc_refuse_join(psprintf("%s:malformed-proof", who), NULL);
	n = p2 - (p1 + 1);
	raw = palloc(bc_b64url_decoded_maxlen(n) + 1);
	if (bc_b64url_decode(p1 + 1, n, raw, bc_b64url_decoded_maxlen(n), &len) != BC_OK)
		bc_refuse_join(psprintf("%s:malformed-proof", who), NULL);
	raw[len] = '\0';
	if (memchr(raw, '\0', len) != NULL || !is_json((char *) raw))
		bc_refuse_join(psprintf("%s:malformed-proof", who), NULL);
	jb = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum((char *) raw)));
	serial = JB_ROOT_IS_OBJECT(jb) ?
		getKeyJsonValueFromContainer(&jb->root, "serial", 6, NULL) : NULL;
	if (serial == NULL || serial->type != jbvString || serial->val.string.len != 32)
		bc_refuse_join(psprintf("%s:malformed-proof", who), NULL);
	return pnstrdup(serial->val.string.val, 32);
}

/* A string member of a verified proof payload, or the refusal. */
char *
bc_proof_member(const char *who, Jsonb *payload, const char *name, const char *tenant)
{
	JsonbValue *v = getKeyJsonValueFromContainer(&payload->root, name, strlen(name), NULL);

	if (v == NULL || v->type != jbvString)
		bc_refuse_join(psprintf("%s:malformed-proof", who), tenant);
	return pnstrdup(v->val.string.val, v->val.string.len);
}

/*
 * Check a proof: signed by the certificate's key, for purpose who, naming
 * serial, bound to this CSR, fresh and used once.  Returns its payload.
 */
Jsonb *
bc_check_node_proof(const char *who, const BcJoinRequest *req, const char *proof,
					const char *serial, bytea *cert_der, const char *node_id, const char *tenant)
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
	bc_own_x509(CurrentMemoryContext, cert);
	st = bc_jws_verify_es256(X509_get0_pubkey(cert), proof, strlen(proof), BC_PROOF_MAX,
							 &payload, &plen);
	if (st != BC_OK)
		bc_refuse_join(psprintf("%s:proof", who), NULL);
	payload = (unsigned char *) bc_take_cstring((char *) payload);
	if (strlen((char *) payload) != plen || !is_json((char *) payload))
		bc_refuse_join(psprintf("%s:malformed-proof", who), tenant);
	pj = bc_jsonb((char *) payload);
	if (!JB_ROOT_IS_OBJECT(pj))
		bc_refuse_join(psprintf("%s:malformed-proof", who), tenant);

	/* Signed by the current key: the tenant is authenticated from here. */
	if (strcmp(bc_proof_member(who, pj, "purpose", tenant), who) != 0 ||
		strcmp(bc_proof_member(who, pj, "serial", tenant), serial) != 0)
		bc_refuse_join(psprintf("%s:malformed-proof", who), tenant);
	if (strcmp(bc_proof_member(who, pj, "csrSha256", tenant), req->csr_sha256_b64) != 0)
		bc_refuse_join(psprintf("%s:csr-binding", who), tenant);
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

	bc_parse_proof_request(jb, &req, &proof, callcxt);
	req.attestor = who;
	bc_require_config();

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	out = bc_run_round(&req, round, proof, who, callcxt);
	SPI_finish();
	return out;
}
