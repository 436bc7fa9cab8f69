/*
 * attestors/discovery.c: the built-in discovery attestor, a PXE-booted
 * ramdisk vouched for by its site's agent (docs/attestors.md, "The built-in discovery attestor";
 * docs/attestors.md).
 *
 * Two pieces of evidence: a join token of role ramdisk (sealedToken) and
 * {"assertion": "<JWS>"}, an ES256 JWS by the node key of a site agent of
 * the token's site over {"purpose":"discovery","serial": <the site agent's
 * certificate>,"siteId","mac": "aa:bb:cc:dd:ee:ff","epoch": <the site's
 * discovery epoch>,"csrSha256": <this CSR's>,"iat","exp"}.  Checked: the
 * token (discovery:<token reason>), the assertion's signature by that
 * certificate's key, the certificate live and a site agent's of this site
 * and tenant, bound to this CSR, unexpired (exp at most an hour after iat),
 * the site enabled for discovery and the epoch its current one; the site's
 * approval mode may defer (bc_join.await_approval); used once
 * (attestation_uses until exp), spent with the token in the final round
 * only.  Result: role ramdisk on the site, certTtlSeconds and allowedKinds
 * from bc_join.discovery_sites.
 */
#include "bc_join.h"

#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/numeric.h"

static const char *const discovery_roles[] = {BC_ROLE_RAMDISK, NULL};

/* An assertion lives at most this long (exp - iat), in seconds. */
#define ASSERTION_LIFETIME_MAX 3600

static BcPlan token_site = {
	"SELECT coalesce($2, (SELECT p.site_id FROM bc_join.pools p WHERE p.id = $1))",
	2, {TEXTOID, TEXTOID}
};

enum
{
	Anum_ts_site = 1
};

static BcPlan agent_site = {
	"SELECT site_id FROM bc_join.nodes WHERE id = $1",
	1, {TEXTOID}
};

enum
{
	Anum_as_site = 1
};

static BcPlan site_config = {
	"SELECT epoch, approval, allowed_kinds, cert_ttl_seconds FROM bc_join.discovery_sites "
	"WHERE site_id = $1 FOR SHARE",
	1, {TEXTOID}
};

enum
{
	Anum_sc_epoch = 1,
	Anum_sc_approval,
	Anum_sc_kinds,
	Anum_sc_ttl
};

static BcPlan known_machine = {
	"SELECT 1 FROM bc_join.discovery_machines WHERE site_id = $1 AND mac = $2",
	2, {TEXTOID, TEXTOID}
};

static BcPlan await = {
	"SELECT bc_join.await_approval('" BC_ATTESTOR_DISCOVERY "', $1, $2, $3)::text",
	3, {TEXTOID, JSONBOID, JSONBOID}
};

enum
{
	Anum_aw_outcome = 1
};

static BcPlan use_assertion = {
	"INSERT INTO bc_join.attestation_uses (attestor, subject, expires_at) "
	"VALUES ('" BC_ATTESTOR_DISCOVERY "', $1, to_timestamp($2)) ON CONFLICT DO NOTHING",
	2, {BYTEAOID, FLOAT8OID}
};

static BcPlan remember_machine = {
	"INSERT INTO bc_join.discovery_machines AS m (site_id, mac, last_node_id, last_joined_at) "
	"VALUES ($1, $2, $3, bc_join.compute_now()) "
	"ON CONFLICT (site_id, mac) DO UPDATE SET last_node_id = excluded.last_node_id, "
	"       last_joined_at = bc_join.compute_now()",
	3, {TEXTOID, TEXTOID, TEXTOID}
};

/* The machine a final round admits: its site and MAC. */
typedef struct DiscoveryMachine
{
	char	   *site;
	char	   *mac;
} DiscoveryMachine;

/* Once admitted: the machine is remembered with the node it joined as. */
static void
remember_admitted(const BcAttestResult *res, const char *node_id)
{
	const DiscoveryMachine *m = (const DiscoveryMachine *) res->admitted_arg;
	Datum		v[3];

	v[0] = CStringGetTextDatum(m->site);
	v[1] = CStringGetTextDatum(m->mac);
	v[2] = CStringGetTextDatum(node_id);
	bc_spi_exec(&remember_machine, v, NULL, false, 0);
}

/* A string member of the verified assertion, or discovery:malformed-assertion. */
static char *
member_str(Jsonb *pj, const char *name, const char *tenant)
{
	char	   *v = bc_jsonb_string(pj, name);

	if (v == NULL)
		bc_refuse_join("discovery:malformed-assertion", tenant);
	return v;
}

/* An integer member of the verified assertion (at most 15 digits, by the scan). */
static int64
member_int(Jsonb *pj, const char *name, const char *tenant)
{
	JsonbValue *v = getKeyJsonValueFromContainer(&pj->root, name, strlen(name), NULL);

	if (v == NULL || v->type != jbvNumeric)
		bc_refuse_join("discovery:malformed-assertion", tenant);
	return DatumGetInt64(DirectFunctionCall1(numeric_int8, NumericGetDatum(v->val.numeric)));
}

/* The assertion's payload, verified with the key of cert_der; refuses otherwise. */
static Jsonb *
verified_assertion(const char *jws, bytea *cert_der, const char *tenant)
{
	X509	   *cert = NULL;
	unsigned char *payload = NULL;
	size_t		plen = 0;
	Jsonb	   *pj;

	if (bc_cert_parse((unsigned char *) VARDATA_ANY(cert_der), VARSIZE_ANY_EXHDR(cert_der),
					  &cert) != BC_OK)
		elog(ERROR, "a stored certificate does not parse");
	cert = bc_own_x509(CurrentMemoryContext, &cert);
	if (bc_jws_verify_es256(X509_get0_pubkey(cert), jws, strlen(jws), BC_PROOF_MAX,
							&payload, &plen) != BC_OK)
		bc_refuse_join("discovery:assertion-signature", NULL);
	payload = (unsigned char *) bc_take_cstring((char *) payload);
	if (strlen((char *) payload) != plen || !bc_json_object_ok((char *) payload, plen))
		bc_refuse_join("discovery:malformed-assertion", tenant);
	pj = bc_jsonb((char *) payload);
	if (!JB_ROOT_IS_OBJECT(pj))
		bc_refuse_join("discovery:malformed-assertion", tenant);
	return pj;
}

/* verify(): admit a ramdisk its site agent vouches for, with a ramdisk token. */
static void
discovery_verify(const BcJoinRequest *req, BcOutcome *out)
{
	BcEvidenceMember m[] = {{.name = "assertion", .required = true, .max = BC_PROOF_MAX}};
	BcAttestResult *res = &out->result;
	BcToken		tok;
	BcProofCert c;
	char	   *serial;
	char	   *site;
	char	   *tenant;
	Jsonb	   *pj;
	char	   *mac;
	int64		epoch;
	int64		iat;
	int64		exp;
	int64		now = bc_timestamp_to_unix(bc_now());
	Datum		v[3];
	char		nulls[2] = {' ', ' '};
	bool		isnull;
	char	   *approval;
	Datum		kinds;
	int			ttl;
	bytea	   *subject;
	DiscoveryMachine *machine;

	bc_evidence_members(BC_ATTESTOR_DISCOVERY, req->attestation, m, lengthof(m));
	if (req->token == NULL)
		bc_refuse_join("discovery:no-token", NULL);
	bc_check_join_token(BC_ATTESTOR_DISCOVERY, req->token, BC_ROLE_RAMDISK, req->claims, &tok);
	tenant = tok.tenant_id;
	(void) bc_check_token_expect(tok.token_id, req->claims, "discovery", "discovery", tenant);
	v[0] = tok.pool_id ? CStringGetTextDatum(tok.pool_id) : (Datum) 0;
	v[1] = tok.site_id ? CStringGetTextDatum(tok.site_id) : (Datum) 0;
	nulls[0] = tok.pool_id ? ' ' : 'n';
	nulls[1] = tok.site_id ? ' ' : 'n';
	if (bc_spi_exec(&token_site, v, nulls, true, 1) != 1 || (site = bc_spi_text(Anum_ts_site)) == NULL)
		elog(ERROR, "join token %s has neither site nor pool", tok.token_id);

	/* The site agent's certificate the assertion names, and its signature. */
	serial = bc_proof_serial(m[0].value, "discovery");
	bc_lock_proof_cert(BC_ATTESTOR_DISCOVERY, serial, false, &c);
	pj = verified_assertion(m[0].value, c.der, tenant);
	if (strcmp(member_str(pj, "purpose", tenant), "discovery") != 0 ||
		strcmp(member_str(pj, "serial", tenant), serial) != 0)
		bc_refuse_join("discovery:malformed-assertion", tenant);
	bc_require_live_cert(BC_ATTESTOR_DISCOVERY, &c);
	if (strcmp(c.role, BC_ROLE_SITE) != 0)
		bc_refuse_join("discovery:not-site-agent", tenant);
	if (strcmp(c.tenant, tenant) != 0)
		bc_refuse_join("discovery:tenant-mismatch", tenant);
	v[0] = CStringGetTextDatum(c.node_id);
	if (bc_spi_exec(&agent_site, v, NULL, true, 1) != 1 || bc_spi_text(Anum_as_site) == NULL ||
		strcmp(bc_spi_text(Anum_as_site), site) != 0 || strcmp(member_str(pj, "siteId", tenant), site) != 0)
		bc_refuse_join("discovery:site-mismatch", tenant);
	if (strcmp(member_str(pj, "csrSha256", tenant), req->csr_sha256_b64) != 0 &&
		!bc_check_no_csr("the assertion's csrSha256 is the CSR's"))
		bc_refuse_join("discovery:csr-binding", tenant);
	mac = member_str(pj, "mac", tenant);
	if (!bc_mac_valid(mac))
		bc_refuse_join("discovery:malformed-assertion", tenant);
	epoch = member_int(pj, "epoch", tenant);
	iat = member_int(pj, "iat", tenant);
	exp = member_int(pj, "exp", tenant);
	if (exp <= iat || exp - iat > ASSERTION_LIFETIME_MAX || iat > now + BC_PROOF_WINDOW)
		bc_refuse_join("discovery:malformed-assertion", tenant);
	if (exp <= now)
		bc_refuse_join("discovery:assertion-expired", tenant);

	/* The site: enabled, and the assertion signed in its current epoch. */
	v[0] = CStringGetTextDatum(site);
	if (bc_spi_exec(&site_config, v, NULL, false, 1) != 1)
		bc_refuse_join("discovery:site-not-enabled", tenant);
	if (bc_spi_int8(Anum_sc_epoch) != epoch)
		bc_refuse_join("discovery:stale-epoch", tenant);
	approval = bc_spi_text_req(Anum_sc_approval);
	kinds = bc_spi_datum(Anum_sc_kinds, &isnull);
	kinds = PointerGetDatum(DatumGetArrayTypePCopy(kinds));
	ttl = bc_spi_int4(Anum_sc_ttl);

	/* Approval: always, or for a MAC the site has not seen. */
	if (strcmp(approval, "always") == 0 ||
		(strcmp(approval, "unknown-machines") == 0 &&
		 (v[1] = CStringGetTextDatum(mac), bc_spi_exec(&known_machine, v, NULL, true, 1) != 1)))
	{
		StringInfoData detail;
		char	   *d;

		initStringInfo(&detail);
		bc_json_begin(&detail);
		bc_json_member(&detail, "mac", mac);
		bc_json_member(&detail, "siteId", site);
		bc_json_member(&detail, "siteAgent", c.node_id);
		bc_json_member(&detail, "tokenId", tok.token_id);
		bc_json_member(&detail, "approval", approval);
		bc_json_end(&detail);
		v[0] = CStringGetTextDatum(tenant);
		v[1] = JsonbPGetDatum(bc_attestor_context(req));
		v[2] = JsonbPGetDatum(bc_jsonb(detail.data));
		if (bc_spi_exec(&await, v, NULL, false, 1) != 1)
			elog(ERROR, "bc_join.await_approval returned no row");
		d = bc_spi_text(Anum_aw_outcome);
		if (d != NULL)
		{
			Jsonb	   *dj = bc_jsonb(d);
			JsonbValue *rid = getKeyJsonValueFromContainer(&dj->root, "requestId", 9, NULL);

			if (rid == NULL || rid->type != jbvString)
				elog(ERROR, "bc_join.await_approval answered no requestId");
			out->deferred = true;
			out->kind = "approval";
			out->request_id = pnstrdup(rid->val.string.val, rid->val.string.len);
			out->retry_after_seconds = 30;
			return;
		}
	}

	/* Final round: the assertion used once (until it expires); the machine remembered once admitted. */
	subject = palloc(VARHDRSZ + BC_SHA256_LEN);
	SET_VARSIZE(subject, VARHDRSZ + BC_SHA256_LEN);
	bc_sha256(m[0].value, strlen(m[0].value), (unsigned char *) VARDATA(subject));
	v[0] = PointerGetDatum(subject);
	v[1] = Float8GetDatum((double) exp);
	if (bc_spi_exec(&use_assertion, v, NULL, false, 0) != 1 &&
		!bc_spent_by_repeat(BC_ATTESTOR_DISCOVERY, (unsigned char *) VARDATA(subject)))
		bc_refuse_join("discovery:reused", tenant);
	machine = palloc(sizeof(DiscoveryMachine));
	machine->site = site;
	machine->mac = mac;
	res->admitted = remember_admitted;
	res->admitted_arg = machine;	/* bc_admit calls it: a repeat records nothing */

	/* The subject a repeat must prove again: this machine of this site. */
	{
		char	   *m = psprintf("%s%c%s", site, '\0', mac);

		bc_sha256(m, strlen(site) + 1 + strlen(mac), res->subject);
		res->has_subject = true;
	}

	res->tenant_id = tenant;
	res->role = BC_ROLE_RAMDISK;
	res->site_id = site;
	res->token_id = tok.token_id;
	res->spend_token = true;
	res->expect_checked = true;
	res->cert_ttl_seconds = ttl;
	res->allowed_kinds = kinds;
	res->has_allowed_kinds = true;
	{
		StringInfoData jd;

		initStringInfo(&jd);
		bc_json_begin(&jd);
		bc_json_member(&jd, "mac", mac);
		bc_json_member(&jd, "siteAgent", c.node_id);
		bc_json_member_int(&jd, "epoch", epoch);
		bc_json_end(&jd);
		res->joined_detail = jd.data;
	}
}

const BcAttestor bc_discovery_attestor = {
	.id = BC_ATTESTOR_DISCOVERY,
	.version = "0.1.0",
	.roles = discovery_roles,
	.verify = discovery_verify,
};

/* ----------------------------------------- bc_join.site_epoch(request) */

/*
 * A site agent asks for its site's current discovery epoch, the one its
 * assertions must carry: {"proof": JWS by its node key over
 * {"purpose":"site-epoch","serial","iat"}}, fresh and used once, like a
 * command fetch.  Answered signed with the service key:
 * {"purpose":"site-epoch","nodeId","serial","siteId","epoch","iat"}.
 * Refusals (the one refusal outside): site-epoch:<the proof's reasons>,
 * not-site-agent (the certificate is not a site agent's), site-not-enabled.
 */
static Jsonb *
site_epoch_round(BcJoinRequest *req, void *arg, MemoryContext outcxt)
{
	BcNodeRequest *a = (BcNodeRequest *) arg;
	BcProofCert c;
	Datum		v[1];
	char	   *site;
	int64		epoch;
	StringInfoData payload;

	(void) bc_node_request_proven(BC_PURPOSE_SITE_EPOCH, req, a->proof, &c);
	if (c.role == NULL || strcmp(c.role, BC_ROLE_SITE) != 0)
		bc_refuse_join(BC_PURPOSE_SITE_EPOCH ":not-site-agent", c.tenant);
	v[0] = CStringGetTextDatum(c.node_id);
	if (bc_spi_exec(&agent_site, v, NULL, true, 1) != 1 || (site = bc_spi_text(Anum_as_site)) == NULL)
		bc_refuse_join(BC_PURPOSE_SITE_EPOCH ":not-site-agent", c.tenant);
	v[0] = CStringGetTextDatum(site);
	if (bc_spi_exec(&site_config, v, NULL, false, 1) != 1)
		bc_refuse_join(BC_PURPOSE_SITE_EPOCH ":site-not-enabled", c.tenant);
	epoch = bc_spi_int8(Anum_sc_epoch);
	bc_node_seen(c.node_id, false);

	initStringInfo(&payload);
	bc_json_begin(&payload);
	bc_json_member(&payload, "purpose", BC_PURPOSE_SITE_EPOCH);
	bc_json_member(&payload, "nodeId", c.node_id);
	bc_json_member(&payload, "serial", c.serial);
	bc_json_member(&payload, "siteId", site);
	bc_json_member_int(&payload, "epoch", epoch);
	bc_json_member_int(&payload, "iat", bc_timestamp_to_unix(bc_now()));
	bc_json_end(&payload);
	return bc_signed_response(BC_STATUS_ISSUED, &payload, outcxt);
}

PG_FUNCTION_INFO_V1(bc_site_epoch_request);

/* bc_join.site_epoch(request jsonb): the proving site agent's site epoch, signed. */
Datum
bc_site_epoch_request(PG_FUNCTION_ARGS)
{
	PG_RETURN_JSONB_P(bc_node_request_round(PG_GETARG_JSONB_P(0), BC_PURPOSE_SITE_EPOCH,
											site_epoch_round));
}
