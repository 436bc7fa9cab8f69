/*
 * attestors/provisioned.c: the built-in provisioned attestor, a one-time
 * token for a node that exists (docs/attestors.md, "The built-in provisioned attestor").
 *
 * An operator makes the token for a node (bc_join.create_provisioning_token,
 * shown once, stored hashed); the agent sends it as sealedToken, sealed to
 * this CSR like any token, with evidence {"nodeId": "<node id>"}.  Checked:
 * a provisioning token (a join token is refused here, and JoinService
 * refuses a provisioning token to every other attestor), its secret in
 * constant time, live and unspent, and naming the node the evidence names
 * (directly, or through a registered resolver).  The result is a reclaim of
 * that node: identity generation + 1, its tenant, site, pool and role kept.
 * The token is spent in the same subtransaction as the certificate, so a
 * refusal after this point leaves it unspent.
 */
#include "bc_join.h"

#include "fmgr.h"
#include "utils/builtins.h"

static const char *const provisioned_roles[] = {BC_ROLE_NODE, BC_ROLE_SITE, BC_ROLE_RAMDISK, NULL};

static BcPlan lock_token = {
	"SELECT p.node_id, p.tenant_id, p.secret_sha256, p.expires_at <= bc_join.compute_now(), "
	"       p.spent_at IS NOT NULL, p.revoked_at IS NOT NULL, n.role, n.state "
	"FROM bc_join.provisioning_tokens p JOIN bc_join.nodes n ON n.id = p.node_id "
	"WHERE p.id = $1 FOR UPDATE OF p",
	1, {TEXTOID}
};

enum
{
	Anum_pt_node = 1,
	Anum_pt_tenant,
	Anum_pt_secret_sha256,
	Anum_pt_expired,
	Anum_pt_spent,
	Anum_pt_revoked,
	Anum_pt_role,
	Anum_pt_state
};

static BcPlan spend_token = {
	"UPDATE bc_join.provisioning_tokens SET spent_at = bc_join.compute_now() "
	"WHERE id = $1 AND spent_at IS NULL",
	1, {TEXTOID}
};

static BcPlan resolver = {
	"SELECT pg_catalog.to_regprocedure(resolve)::oid, resolve FROM bc_join.provisioning_resolver",
	0, {InvalidOid}
};

/* 1 when s[0..len) is prefix and 32 lower-case hex digits. */
static bool
is_id(const char *s, size_t len, const char *prefix)
{
	size_t		pl = strlen(prefix);

	return len == pl + 32 && strncmp(s, prefix, pl) == 0 &&
		strspn(s + pl, "0123456789abcdef") >= 32;
}

/* The node the agent's nodeId stands for: itself, or what the resolver answers. */
static char *
resolve_node(const BcJoinRequest *req, const char *node_ref, const char *tenant)
{
	FmgrInfo	flinfo;
	LOCAL_FCINFO(fcinfo, 2);
	Datum		d;

	if (bc_spi_exec(&resolver, NULL, NULL, true, 1) != 1)
		return pstrdup(node_ref);
	fmgr_info(bc_spi_callback_oid("provisioning resolver"), &flinfo);
	InitFunctionCallInfoData(*fcinfo, &flinfo, 2, InvalidOid, NULL, NULL);
	fcinfo->args[0].value = CStringGetTextDatum(node_ref);
	fcinfo->args[0].isnull = false;
	fcinfo->args[1].value = JsonbPGetDatum(bc_attestor_context(req));
	fcinfo->args[1].isnull = false;
	d = FunctionCallInvoke(fcinfo);
	if (fcinfo->isnull)
		bc_refuse_join("provisioned:unresolved", tenant);
	return TextDatumGetCString(d);
}

/* verify(): admit a machine holding a provisioning token for the node it names. */
static void
provisioned_verify(const BcJoinRequest *req, BcOutcome *out)
{
	BcEvidenceMember m[] = {{.name = "nodeId", .required = true, .max = 128}};
	BcAttestResult *res = &out->result;
	const char *dot;
	char	   *token_id;
	const char *secret;
	char	   *node;
	char	   *tenant;
	Datum		v;

	bc_evidence_members(BC_ATTESTOR_PROVISIONED, req->attestation, m, lengthof(m));
	if (req->token == NULL)
		bc_refuse_join("provisioned:no-token", NULL);

	/* "<id>.<secret>": a provisioning token, never a join token */
	dot = strrchr(req->token, '.');
	if (dot != NULL && is_id(req->token, dot - req->token, "jt_"))
		bc_refuse_join("provisioned:join-token", NULL);
	if (dot == NULL || !is_id(req->token, dot - req->token, "pt_") || strlen(dot + 1) != 43)
		bc_refuse_join("provisioned:malformed-token", NULL);
	token_id = pnstrdup(req->token, dot - req->token);
	secret = dot + 1;
	v = CStringGetTextDatum(token_id);
	bc_lock_token_secret(&lock_token, token_id, secret, Anum_pt_secret_sha256, "provisioned");

	/* The secret matched: the tenant is authenticated from here. */
	tenant = bc_spi_text_req(Anum_pt_tenant);
	node = bc_spi_text_req(Anum_pt_node);
	if (bc_spi_bool(Anum_pt_revoked))
		bc_refuse_join("provisioned:revoked", tenant);
	/* A repeat finds it spent by the certificate it asks for (the token is its subject). */
	if (bc_spi_bool(Anum_pt_spent) && bc_round_repeat() == NULL)
		bc_refuse_join("provisioned:spent", tenant);
	if (bc_spi_bool(Anum_pt_expired))
		bc_refuse_join("provisioned:expired", tenant);
	if (strcmp(bc_spi_text_req(Anum_pt_state), "retired") == 0)
		bc_refuse_join("provisioned:retired", tenant);
	res->role = bc_spi_text_req(Anum_pt_role);

	if (strcmp(resolve_node(req, m[0].value, tenant), node) != 0)
		bc_refuse_join("provisioned:wrong-node", tenant);

	/* Spent with the certificate: a later refusal rolls this back.  A repeat spends nothing. */
	if (bc_round_repeat() == NULL)
	{
		StringInfoData detail;

		if (bc_spi_exec(&spend_token, &v, NULL, false, 0) != 1)
			elog(ERROR, "provisioning token %s was spent under its lock", token_id);
		initStringInfo(&detail);
		bc_json_begin(&detail);
		bc_json_member(&detail, "tokenId", token_id);
		bc_json_member(&detail, "csrSha256", req->csr_sha256_b64);
		bc_json_end(&detail);
		bc_audit("provisioning_token.spend", tenant, node, bc_jsonb(detail.data));
	}

	/* The subject a repeat must prove again: this very token. */
	bc_sha256(token_id, strlen(token_id), res->subject);
	res->has_subject = true;
	res->tenant_id = tenant;
	res->node_id = node;
	res->operator_reclaim = true;
}

const BcAttestor bc_provisioned_attestor = {
	.id = BC_ATTESTOR_PROVISIONED,
	.version = "0.1.0",
	.roles = provisioned_roles,
	.verify = provisioned_verify,
};
