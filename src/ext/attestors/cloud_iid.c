/*
 * attestors/cloud_iid.c: the built-in cloud-iid attestor (docs/attestors.md,
 * "cloud-iid"): a cloud machine joins on its cloud's signed word about it.
 *
 * The clouds are rows of one registry, bc_join.cloud_providers: aws, gcp
 * and azure with the definitions the contract pins
 * (bc_join.cloud_builtin_provider), and any provider an operator defines
 * there.  A row names one of the document formats cloud-iid verifies
 * (attestors/cloud_formats.c: aws-pkcs7, azure-pkcs7, gcp-jwt), which fixes
 * the evidence's members, the trust material, the OpenSSL checks and how
 * the CSR is bound; the row says which signed members name the account,
 * the instance and its start.  Nothing tells the providers apart by name.
 * Then, for every provider: the account maps to one tenant and pool
 * and the roles it allows (bc_join.cloud_accounts, or the registered
 * resolver); the optional maximum instance age; the binding of a format
 * that binds nothing (a sealed join token of that tenant and pool, or an
 * account opted in to unbound admission); and the instance admitted once,
 * forever (attestation_uses, in this subtransaction: a refusal after it
 * rolls it back).  An instance an operator reset
 * (bc_join.reset_cloud_instance) reclaims the node bound to it.
 */
#include "bc_join.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "commands/trigger.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/formatting.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include <openssl/x509v3.h>

#define CLOUD BC_ATTESTOR_CLOUD_IID
/* base64url of 16,384 bytes */
#define CLOUD_B64_MAX 21846
#define UNBOUND_SECONDS 300
/* a provider's name: ^[a-z][a-z0-9-]{0,31}$ (bc_join.cloud_providers) */
#define PROVIDER_MAX 32

static const char *const cloud_roles[] = {BC_ROLE_NODE, BC_ROLE_SITE, NULL};

/*
 * The provider's row, or the definition of a built-in provider without one
 * (disabled); nothing for a name neither knows.
 */
static BcPlan provider_lookup = {
	"SELECT p.format, p.account_member, p.instance_member, p.started_member, p.require_members, "
	"       p.issuer, p.nonce_member, p.uuid_ids, p.audience, p.domain, "
	"       extract(epoch FROM p.max_instance_age)::bigint, true "
	"FROM bc_join.cloud_providers p WHERE p.provider = $1 "
	"UNION ALL "
	"SELECT b.format, b.account_member, b.instance_member, b.started_member, b.require_members, "
	"       b.issuer, b.nonce_member, b.uuid_ids, NULL, NULL, NULL, false "
	"FROM bc_join.cloud_builtin_provider($1) b "
	"ORDER BY 12 DESC LIMIT 1",
	1, {TEXTOID}
};

enum
{
	Anum_pl_format = 1,
	Anum_pl_account_member,
	Anum_pl_instance_member,
	Anum_pl_started_member,
	Anum_pl_require_members,
	Anum_pl_issuer,
	Anum_pl_nonce_member,
	Anum_pl_uuid_ids,
	Anum_pl_audience,
	Anum_pl_domain,
	Anum_pl_max_age,
	Anum_pl_enabled
};

static BcPlan account_mapping = {
	"SELECT tenant_id, pool_id, allow_unbound, $3 = ANY (roles) FROM bc_join.cloud_accounts "
	"WHERE provider = $1 AND account = $2 LIMIT 2",
	3, {TEXTOID, TEXTOID, TEXTOID}
};

enum
{
	Anum_am_tenant = 1,
	Anum_am_pool,
	Anum_am_allow_unbound,
	Anum_am_role_allowed
};

static BcPlan resolver = {
	"SELECT pg_catalog.to_regprocedure(resolve)::oid, resolve FROM bc_join.cloud_resolver",
	0, {InvalidOid}
};

static BcPlan pool_site = {
	"SELECT site_id FROM bc_join.pools WHERE id = $1",
	1, {TEXTOID}
};

enum
{
	Anum_psite_site = 1
};

static BcPlan use_instance = {
	"INSERT INTO bc_join.attestation_uses (attestor, subject, node_id, expires_at) "
	"VALUES ('" BC_ATTESTOR_CLOUD_IID "', $1, $2, NULL) ON CONFLICT DO NOTHING",
	2, {BYTEAOID, TEXTOID}
};

static BcPlan bound_node = {
	"SELECT node_id FROM bc_join.node_bindings WHERE subject = $1 AND attestor = '" BC_ATTESTOR_CLOUD_IID "'",
	1, {BYTEAOID}
};

enum
{
	Anum_bn_node = 1
};

/* Refuse cloud-iid:<reason>. */
static void pg_attribute_noreturn()
refuse(const char *reason, const char *tenant)
{
	bc_refuse_join(psprintf(CLOUD ":%s", reason), tenant);
}

/* -------------------------------------------------------- for everyone */

/*
 * The provider the evidence names: its row, or a built-in's definition
 * (p->enabled false); false when no provider has that name.
 */
static bool
find_provider(const char *name, BcCloudProvider *p)
{
	Datum		v = CStringGetTextDatum(name);
	Datum		d;
	bool		isnull;
	char	   *format;
	int			i;

	memset(p, 0, sizeof(*p));
	if (bc_spi_exec(&provider_lookup, &v, NULL, true, 1) != 1)
		return false;
	p->name = pstrdup(name);
	format = bc_spi_text_req(Anum_pl_format);
	p->format = bc_cloud_format(format);
	if (p->format == NULL)
		bc_invalid_config("cloud provider %s has the unknown format %s", name, format);
	p->account_member = bc_spi_text_req(Anum_pl_account_member);
	p->instance_member = bc_spi_text_req(Anum_pl_instance_member);
	p->started_member = bc_spi_text(Anum_pl_started_member);
	d = bc_spi_datum(Anum_pl_require_members, &isnull);
	if (!isnull)
	{
		Datum	   *elems;
		bool	   *nulls;

		deconstruct_array(DatumGetArrayTypeP(d), TEXTOID, -1, false, TYPALIGN_INT,
						  &elems, &nulls, &p->n_require);
		p->require = palloc0(sizeof(char *) * (p->n_require + 1));
		for (i = 0; i < p->n_require; i++)
		{
			if (nulls[i])
				bc_invalid_config("cloud provider %s requires a NULL member", name);
			p->require[i] = TextDatumGetCString(elems[i]);
		}
	}
	p->issuer = bc_spi_text(Anum_pl_issuer);
	p->nonce_member = bc_spi_text(Anum_pl_nonce_member);
	p->uuid_ids = bc_spi_bool(Anum_pl_uuid_ids);
	p->audience = bc_spi_text(Anum_pl_audience);
	p->domain = bc_spi_text(Anum_pl_domain);
	d = bc_spi_datum(Anum_pl_max_age, &isnull);
	p->has_max_age = !isnull;
	if (!isnull)
		p->max_age = DatumGetInt64(d);
	p->enabled = bc_spi_bool(Anum_pl_enabled);
	/* what cloud_providers_check holds a row to, should one have gone round it */
	if (!bc_cloud_provider_coherent(p))
		bc_invalid_config("cloud provider %s is defined inconsistently for its format %s",
						  name, p->format->name);
	return true;
}

/* Whether a resolver's answer allows role: its "roles" (default ["node"]). */
static bool
resolver_allows(Jsonb *j, const char *role)
{
	JsonbValue *v = getKeyJsonValueFromContainer(&j->root, "roles", 5, NULL);
	bool		allowed = false;
	int			n;
	int			i;

	if (v == NULL)
		return strcmp(role, BC_ROLE_NODE) == 0;
	if (v->type != jbvBinary || !JsonContainerIsArray(v->val.binary.data) ||
		(n = JsonContainerSize(v->val.binary.data)) < 1 || n > 2)
		bc_invalid_config("the cloud resolver's \"roles\" must be an array of node and site");
	for (i = 0; i < n; i++)
	{
		JsonbValue *e = getIthJsonbValueFromContainer(v->val.binary.data, i);
		char	   *r;

		if (e == NULL || e->type != jbvString)
			bc_invalid_config("the cloud resolver's \"roles\" must be an array of node and site");
		r = pnstrdup(e->val.string.val, e->val.string.len);
		if (strcmp(r, BC_ROLE_NODE) != 0 && strcmp(r, BC_ROLE_SITE) != 0)
			bc_invalid_config("the cloud resolver's \"roles\" must be an array of node and site");
		if (strcmp(r, role) == 0)
			allowed = true;
	}
	return allowed;
}

/*
 * The tenant and pool the account maps to, and whether it allows the role
 * asked for: its one row, or the resolver.
 */
static void
map_account(const BcJoinRequest *req, const char *provider, const BcCloudIdentity *id,
			char **tenant, char **pool, bool *allow_unbound, bool *role_allowed)
{
	Datum		v[3];
	uint64		rows;

	v[0] = CStringGetTextDatum(provider);
	v[1] = CStringGetTextDatum(id->account);
	v[2] = CStringGetTextDatum(req->role);
	rows = bc_spi_exec(&account_mapping, v, NULL, true, 2);
	if (rows > 1)
		bc_invalid_config("%s account %s is mapped to more than one tenant and pool in bc_join.cloud_accounts",
						  provider, id->account);
	if (rows == 1)
	{
		*tenant = bc_spi_text_req(Anum_am_tenant);
		*pool = bc_spi_text_req(Anum_am_pool);
		*allow_unbound = bc_spi_bool(Anum_am_allow_unbound);
		*role_allowed = bc_spi_bool(Anum_am_role_allowed);
		return;
	}
	*allow_unbound = false;
	if (bc_spi_exec(&resolver, NULL, NULL, true, 1) == 1)
	{
		FmgrInfo	flinfo;
		LOCAL_FCINFO(fcinfo, 3);
		Datum		d;
		Jsonb	   *j;

		fmgr_info(bc_spi_callback_oid("cloud resolver"), &flinfo);
		InitFunctionCallInfoData(*fcinfo, &flinfo, 3, InvalidOid, NULL, NULL);
		fcinfo->args[0].value = v[0];
		fcinfo->args[0].isnull = false;
		fcinfo->args[1].value = v[1];
		fcinfo->args[1].isnull = false;
		fcinfo->args[2].value = JsonbPGetDatum(bc_attestor_context(req));
		fcinfo->args[2].isnull = false;
		d = FunctionCallInvoke(fcinfo);
		if (!fcinfo->isnull)
		{
			j = DatumGetJsonbP(d);
			*tenant = bc_jsonb_string(j, "tenantId");
			*pool = bc_jsonb_string(j, "poolId");
			if (*tenant == NULL || *pool == NULL)
				bc_invalid_config("the cloud resolver answered something other than {\"tenantId\", \"poolId\", \"roles\"?}");
			*role_allowed = resolver_allows(j, req->role);
			return;
		}
	}
	refuse("unknown-account", NULL);
}

/* {"provider", "account", "instance"} as JSON text, and "admission" or "role" when given. */
static char *
instance_json(const char *provider, const BcCloudIdentity *id, const char *admission,
			  const char *role)
{
	StringInfoData b;

	initStringInfo(&b);
	bc_json_begin(&b);
	bc_json_member(&b, "provider", provider);
	bc_json_member(&b, "account", id->account);
	bc_json_member(&b, "instance", id->instance);
	if (admission != NULL)
		bc_json_member(&b, "admission", admission);
	if (role != NULL)
		bc_json_member(&b, "role", role);
	bc_json_end(&b);
	return b.data;
}

/* verify(): admit a cloud instance on its provider's signed word, once. */
static void
cloud_iid_verify(const BcJoinRequest *req, BcOutcome *out)
{
	BcEvidenceMember m[BC_CLOUD_M_COUNT] = {
		{.name = "provider", .required = true, .max = PROVIDER_MAX},
		{.name = "document", .max = CLOUD_B64_MAX},
		{.name = "pkcs7", .max = CLOUD_B64_MAX},
		{.name = "token", .max = 16384},
	};
	BcAttestResult *res = &out->result;
	BcCloudProvider p;
	BcCloudIdentity id;
	char	   *tenant;
	char	   *pool;
	char	   *site = NULL;
	bool		allow_unbound;
	bool		role_allowed;
	bool		site_agent = strcmp(req->role, BC_ROLE_SITE) == 0;
	const char *admission = "token";
	int64		now = bc_timestamp_to_unix(bc_now());
	StringInfoData bindin;
	Datum		v[2];
	char		vn[2] = {' ', 'n'};
	int			i;

	bc_evidence_members(CLOUD, req->attestation, m, lengthof(m));
	/* A provider nobody defined is no provider: malformed, like a member too many. */
	if (!find_provider(m[BC_CLOUD_M_PROVIDER].value, &p))
		refuse("malformed", NULL);
	for (i = BC_CLOUD_M_DOCUMENT; i < BC_CLOUD_M_COUNT; i++)
		if ((m[i].value != NULL) != ((p.format->members & (1 << i)) != 0))
			refuse("malformed", NULL);

	/* The provider is enabled: it has a row in cloud_providers. */
	if (!p.enabled)
		refuse("provider-disabled", NULL);
	if (p.has_max_age && p.started_member == NULL)
		bc_invalid_config("%s has no instance age, but bc_join.cloud_providers sets max_instance_age for it",
						  p.name);

	memset(&id, 0, sizeof(id));
	p.format->verify(req, m, &p, now, &id);
	bc_check_note("provider", p.name);
	bc_check_note("account", id.account);
	bc_check_note("instance", id.instance);
	if (id.has_started)
		bc_check_note("started", bc_rfc3339(time_t_to_timestamptz((pg_time_t) id.started)));

	/* The instance's names, as signed (UUIDs in lower case). */
	if (id.account == NULL || id.instance == NULL || id.account[0] == '\0' || id.instance[0] == '\0')
		refuse(p.format->no_identity, NULL);
	if (p.uuid_ids)
	{
		if (!bc_cloud_is_uuid(id.account) || !bc_cloud_is_uuid(id.instance))
			refuse(p.format->no_identity, NULL);
		id.account = asc_tolower(id.account, strlen(id.account));
		id.instance = asc_tolower(id.instance, strlen(id.instance));
	}

	/* The account's tenant and pool, and the roles it allows. */
	map_account(req, p.name, &id, &tenant, &pool, &allow_unbound, &role_allowed);
	if (!role_allowed)
		bc_refuse_join_detail(CLOUD ":role", tenant, instance_json(p.name, &id, NULL, req->role));
	if (site_agent)
	{
		/* a site agent joins the site of the account's pool, never a pool */
		v[0] = CStringGetTextDatum(pool);
		if (bc_spi_exec(&pool_site, v, NULL, true, 1) != 1)
			bc_invalid_config("the pool %s of %s account %s does not exist", pool, p.name, id.account);
		site = bc_spi_text_req(Anum_psite_site);
	}

	/* An optional maximum instance age. */
	if (p.has_max_age && (!id.has_started || now - id.started > p.max_age))
		refuse("too-old", tenant);

	/* A sealed join token binds the CSR (a format that binds nothing needs one unless opted in). */
	if (req->token != NULL)
	{
		BcToken		tok;

		bc_check_join_token(CLOUD, req->token, req->role, req->claims, &tok);
		if (strcmp(tok.tenant_id, tenant) != 0 ||
			(site_agent ? tok.pool_id != NULL || tok.site_id == NULL || strcmp(tok.site_id, site) != 0
			 : tok.pool_id == NULL || strcmp(tok.pool_id, pool) != 0))
			refuse("token-mismatch", tenant);
		res->token_id = tok.token_id;
		res->spend_token = true;
		res->expect_checked = true;
		res->allow_reclaim = tok.allow_reclaim;
	}
	else if (!p.format->binds_csr)
	{
		if (!allow_unbound && bc_check_no_token("a sealed join token of the account's tenant and pool"))
			admission = "token";
		else
		{
			if (!allow_unbound)
				refuse("no-token", tenant);
			if (!id.has_started || now - id.started > UNBOUND_SECONDS)
				refuse("unbound-stale", tenant);
			admission = "aws-unbound";
		}
	}
	else
		admission = "bound";

	/* bind = SHA-256(provider 0x00 account 0x00 instance) */
	initStringInfo(&bindin);
	appendStringInfoString(&bindin, p.name);
	appendStringInfoChar(&bindin, '\0');
	appendBinaryStringInfo(&bindin, id.account, strlen(id.account));
	appendStringInfoChar(&bindin, '\0');
	appendBinaryStringInfo(&bindin, id.instance, strlen(id.instance));
	bc_sha256(bindin.data, bindin.len, res->bind);
	res->has_bind = true;

	/* An instance an operator reset comes back as the node bound to it. */
	v[0] = PointerGetDatum(bc_bytea(res->bind, BC_SHA256_LEN));
	if (bc_spi_exec(&bound_node, v, NULL, true, 1) == 1)
	{
		res->node_id = bc_spi_text_req(Anum_bn_node);
		/* the operator's reset is the word that allows this reclaim */
		res->allow_reclaim = true;
		v[1] = CStringGetTextDatum(res->node_id);
		vn[1] = ' ';
	}

	/* Once, forever (a repeat finds it spent by the certificate it asks for). */
	if (bc_spi_exec(&use_instance, v, vn, false, 0) != 1 && !bc_spent_by_repeat(CLOUD, res->bind))
		bc_refuse_join_detail(CLOUD ":already-admitted", tenant,
							  instance_json(p.name, &id, NULL, NULL));

	res->tenant_id = tenant;
	if (site_agent)
		res->site_id = site;
	else
		res->pool_id = pool;
	res->role = pstrdup(req->role);
	res->joined_detail = instance_json(p.name, &id, admission, NULL);
}

const BcAttestor bc_cloud_iid_attestor = {
	.id = CLOUD,
	.version = "0.1.0",
	.roles = cloud_roles,
	.verify = cloud_iid_verify,
};

PG_FUNCTION_INFO_V1(bc_cloud_trust_check);

/* Trigger on cloud_trust: the material parses as its kind says (22023 otherwise). */
Datum
bc_cloud_trust_check(PG_FUNCTION_ARGS)
{
	TriggerData *trig = (TriggerData *) fcinfo->context;
	HeapTuple	tup;
	TupleDesc	desc;
	char	   *kind;
	char	   *material;
	bool		ok;

	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "bc_join.cloud_trust_check() is a trigger");
	tup = TRIGGER_FIRED_BY_UPDATE(trig->tg_event) ? trig->tg_newtuple : trig->tg_trigtuple;
	desc = trig->tg_relation->rd_att;
	kind = SPI_getvalue(tup, desc, SPI_fnumber(desc, "kind"));
	material = SPI_getvalue(tup, desc, SPI_fnumber(desc, "material"));
	if (kind == NULL || material == NULL)
		PG_RETURN_POINTER(tup);	/* NOT NULL refuses it */
	if (strcmp(kind, "jwks") == 0)
	{
		int			rsa = 0;

		ok = bc_cloud_jwks_check(material, strlen(material), &rsa) == BC_OK && rsa > 0;
		if (!ok)
			bc_invalid_input("jwks trust material (gcp-jwt providers) must be a JWKS ({\"keys\": [...]}) with at least one RSA key (2048 to 8192 bits), every key with a kid");
	}
	else
	{
		STACK_OF(X509) *sk = NULL;
		bool		self_signed = true;
		int			i;

		ok = bc_cloud_certs_from_pem(material, strlen(material), &sk) == BC_OK;
		for (i = 0; ok && i < sk_X509_num(sk); i++)
			if (X509_check_issued(sk_X509_value(sk, i), sk_X509_value(sk, i)) != X509_V_OK)
				self_signed = false;
		sk_X509_pop_free(sk, X509_free);
		if (!ok)
			bc_invalid_input("%s trust material must be one or more PEM certificates and nothing else", kind);
		if (strcmp(kind, "root") == 0 && !self_signed)
			bc_invalid_input("a root (azure-pkcs7 providers) must be self-signed (add other CA certificates as intermediate)");
	}
	PG_RETURN_POINTER(tup);
}
