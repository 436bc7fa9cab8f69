/*
 * attestors/cloud_iid.c: the built-in cloud-iid attestor (docs/attestors.md,
 * "cloud-iid"): a cloud machine joins on its cloud's signed word about it.
 *
 * One verifier per provider behind one interface (CloudVerifier): it checks
 * the provider's evidence with the trust material in bc_join.cloud_trust
 * (the OpenSSL work is src/common/cloud.c) and names the instance: provider,
 * account, instance, and when it started.  Then, for every provider: the
 * account maps to one tenant and pool (bc_join.cloud_accounts, or the
 * registered resolver); the optional maximum instance age; the AWS binding
 * (a sealed join token of that tenant and pool, or an account opted in to
 * unbound admission); and the instance admitted once, forever
 * (attestation_uses, in this subtransaction: a refusal after it rolls it
 * back).  An instance an operator reset (bc_join.reset_cloud_instance)
 * reclaims the node bound to it.
 */
#include "bc_join.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "commands/trigger.h"
#include "utils/builtins.h"
#include "utils/formatting.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include <openssl/x509v3.h>

#define CLOUD "cloud-iid"
/* base64url of 16,384 bytes */
#define CLOUD_B64_MAX 21846
#define AWS_UNBOUND_SECONDS 300

static const char *const cloud_roles[] = {BC_ROLE_NODE, NULL};

/* What a verifier proved about the instance. */
typedef struct CloudIdentity
{
	char	   *account;
	char	   *instance;
	bool		has_started;
	int64		started;		/* AWS pendingTime, GCP instance_creation_timestamp */
} CloudIdentity;

/* A provider's settings (bc_join.cloud_providers). */
typedef struct CloudSettings
{
	char	   *audience;
	char	   *domain;
	bool		has_max_age;
	int64		max_age;
} CloudSettings;

/* The evidence members, by index. */
enum
{
	M_PROVIDER,
	M_DOCUMENT,
	M_PKCS7,
	M_TOKEN,
	M_COUNT
};

typedef struct CloudVerifier
{
	const char *provider;
	/* the members it takes besides provider (bit per M_*) */
	int			members;
	void		(*verify) (const BcJoinRequest *req, BcEvidenceMember *m,
						   const CloudSettings *set, int64 now, CloudIdentity *id);
} CloudVerifier;

static BcPlan provider_settings = {
	"SELECT audience, domain, extract(epoch FROM max_instance_age)::bigint "
	"FROM bc_join.cloud_providers WHERE provider = $1",
	1, {TEXTOID}
};

enum
{
	Anum_ps_audience = 1,
	Anum_ps_domain,
	Anum_ps_max_age
};

static BcPlan provider_trust = {
	"SELECT kind, material FROM bc_join.cloud_trust WHERE provider = $1 ORDER BY id",
	1, {TEXTOID}
};

enum
{
	Anum_trust_kind = 1,
	Anum_trust_material
};

static BcPlan account_mapping = {
	"SELECT tenant_id, pool_id, allow_unbound FROM bc_join.cloud_accounts "
	"WHERE provider = $1 AND account = $2 LIMIT 2",
	2, {TEXTOID, TEXTOID}
};

enum
{
	Anum_am_tenant = 1,
	Anum_am_pool,
	Anum_am_allow_unbound
};

static BcPlan resolver = {
	"SELECT pg_catalog.to_regprocedure(resolve)::oid, resolve FROM bc_join.cloud_resolver",
	0, {InvalidOid}
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

/* A base64url member decoded (at most 16,384 bytes), or malformed. */
static bytea *
member_bytes(const char *b64)
{
	size_t		len = strlen(b64);
	size_t		n;
	bytea	   *out = palloc(VARHDRSZ + bc_b64url_decoded_maxlen(len) + 1);

	if (len == 0 ||
		bc_b64url_decode(b64, len, (unsigned char *) VARDATA(out),
						 bc_b64url_decoded_maxlen(len), &n) != BC_OK ||
		n > BC_CLOUD_DOC_MAX)
		refuse("malformed", NULL);
	SET_VARSIZE(out, VARHDRSZ + n);
	return out;
}

/* The trust material of kind for provider, every row concatenated (NULL: none). */
static char *
trust_material(const char *provider, const char *kind)
{
	Datum		v = CStringGetTextDatum(provider);
	StringInfoData buf;
	uint64		rows;
	uint64		i;

	initStringInfo(&buf);
	rows = bc_spi_exec(&provider_trust, &v, NULL, true, 0);
	for (i = 0; i < rows; i++)
	{
		char	   *k = bc_spi_row_text(i, Anum_trust_kind);

		if (strcmp(k, kind) == 0)
		{
			appendStringInfoString(&buf, bc_spi_row_text(i, Anum_trust_material));
			appendStringInfoChar(&buf, '\n');
		}
	}
	return buf.len > 0 ? buf.data : NULL;
}

/* The JWKS documents of gcp, one per row. */
static List *
trust_documents(const char *provider, const char *kind)
{
	Datum		v = CStringGetTextDatum(provider);
	List	   *out = NIL;
	uint64		rows;
	uint64		i;

	rows = bc_spi_exec(&provider_trust, &v, NULL, true, 0);
	for (i = 0; i < rows; i++)
	{
		char	   *k = bc_spi_row_text(i, Anum_trust_kind);

		if (strcmp(k, kind) == 0)
			out = lappend(out, bc_spi_row_text(i, Anum_trust_material));
	}
	return out;
}

/*
 * Certificates from configured PEM (NULL: none), owned by the current
 * memory context (borrowed: never freed here); INVALID_CONFIG when unreadable.
 */
static STACK_OF(X509) *
cert_stack(const char *pem)
{
	STACK_OF(X509) *sk = NULL;

	if (pem == NULL)
		return NULL;
	if (bc_cloud_certs_from_pem(pem, strlen(pem), &sk) != BC_OK)
		bc_invalid_config("cloud-iid trust material that is no PEM certificate is configured");
	return bc_own_x509_stack(CurrentMemoryContext, &sk);
}

/* ------------------------------------------------------------------ AWS */

/* AWS: the pkcs7 verified with the configured certificates, its content the document. */
static void
aws_verify(const BcJoinRequest *req, BcEvidenceMember *m, const CloudSettings *set,
		   int64 now, CloudIdentity *id)
{
	bytea	   *document = member_bytes(m[M_DOCUMENT].value);
	bytea	   *p7 = member_bytes(m[M_PKCS7].value);
	char	   *pem = trust_material("aws", "certificate");
	STACK_OF(X509) *certs;
	unsigned char *content = NULL;
	size_t		content_len = 0;
	const char *reason = NULL;
	int			st;
	BcDocField	f[] = {
		{.path = "accountId"}, {.path = "instanceId"}, {.path = "region"}, {.path = "pendingTime"}
	};
	int64		started;
	bool		same;

	if (pem == NULL)
		refuse("provider-disabled", NULL);
	certs = cert_stack(pem);
	st = bc_cloud_aws_verify((const unsigned char *) VARDATA(p7), VARSIZE(p7) - VARHDRSZ,
							 certs, &content, &content_len, &reason);
	if (st != BC_OK)
		refuse(reason ? reason : "bad-signature", NULL);
	/* Only the signed bytes count, and they must be the document sent. */
	same = content_len == VARSIZE(document) - VARHDRSZ &&
		memcmp(content, VARDATA(document), content_len) == 0;
	if (!same)
	{
		bc_free(content);
		refuse("content-mismatch", NULL);
	}
	{
		char	   *text = pnstrdup((char *) content, content_len);

		bc_free(content);
		if (!bc_doc_fields(text, content_len, f, lengthof(f)) ||
			f[0].value == NULL || f[1].value == NULL || f[2].value == NULL || f[3].value == NULL ||
			f[0].value[0] == '\0' || f[1].value[0] == '\0' ||
			bc_cloud_parse_rfc3339(f[3].value, &started) != BC_OK)
			refuse("malformed-document", NULL);
	}
	id->account = f[0].value;
	id->instance = f[1].value;
	id->has_started = true;
	id->started = started;
}

/* ------------------------------------------------------------------ GCP */

/* A JWT segment decoded as text, or malformed-token. */
static char *
segment(const char *s, size_t n, size_t cap, size_t *len)
{
	unsigned char *buf = palloc(bc_b64url_decoded_maxlen(n) + 1);

	if (n == 0 || bc_b64url_decode(s, n, buf, bc_b64url_decoded_maxlen(n), len) != BC_OK ||
		*len > cap)
		refuse("malformed-token", NULL);
	buf[*len] = '\0';
	return (char *) buf;
}

/* GCP: the JWT, RS256 by the one configured key its kid names, and its claims. */
static void
gcp_verify(const BcJoinRequest *req, BcEvidenceMember *m, const CloudSettings *set,
		   int64 now, CloudIdentity *id)
{
	const char *jwt = m[M_TOKEN].value;
	const char *dot1 = strchr(jwt, '.');
	const char *dot2 = dot1 ? strchr(dot1 + 1, '.') : NULL;
	char	   *header;
	char	   *payload;
	unsigned char *sig;
	size_t		hlen;
	size_t		plen;
	size_t		slen;
	BcDocField	h[] = {{.path = "alg"}, {.path = "kid"}};
	BcDocField	c[] = {
		{.path = "iss"}, {.path = "aud"}, {.path = "iat", .integer = true},
		{.path = "exp", .integer = true},
		{.path = "google.compute_engine.project_id"},
		{.path = "google.compute_engine.instance_id"},
		{.path = "google.compute_engine.instance_creation_timestamp", .integer = true}
	};
	List	   *jwks = trust_documents("gcp", "jwks");
	ListCell   *lc;
	EVP_PKEY   *key = NULL;
	int			matches = 0;
	int64		iat;
	int64		exp;

	if (jwks == NIL || set->audience == NULL)
		refuse("provider-disabled", NULL);
	if (dot2 == NULL || strchr(dot2 + 1, '.') != NULL)
		refuse("malformed-token", NULL);
	header = segment(jwt, dot1 - jwt, 1024, &hlen);
	if (!bc_doc_fields(header, hlen, h, lengthof(h)))
		refuse("malformed-token", NULL);
	/* exactly RS256: never none, HS256 keyed with a public key, ES256, PS256 */
	if (h[0].value == NULL || strcmp(h[0].value, "RS256") != 0)
		refuse("wrong-alg", NULL);
	if (h[1].value == NULL)
		refuse("unknown-key", NULL);
	payload = segment(dot1 + 1, dot2 - dot1 - 1, 8192, &plen);
	sig = (unsigned char *) segment(dot2 + 1, strlen(dot2 + 1), 1024, &slen);

	/*
	 * Exactly one configured key has this kid, across every row as within
	 * one, and it is an RSA key.  A key found is the context's at once
	 * (borrowed here, never freed by hand); a second match anywhere is
	 * unknown-key, whichever rows hold them.
	 */
	foreach(lc, jwks)
	{
		const char *doc = (const char *) lfirst(lc);
		EVP_PKEY   *k = NULL;
		int			n = 0;

		CHECK_FOR_INTERRUPTS();
		if (bc_cloud_jwks_rsa_key(doc, strlen(doc), h[1].value, &n, &k) != BC_OK)
			bc_invalid_config("a gcp JWKS in bc_join.cloud_trust is unreadable");
		matches += n;
		if (k != NULL)
			key = bc_own_pkey(CurrentMemoryContext, &k);
		if (matches > 1)
			refuse("unknown-key", NULL);
	}
	if (matches != 1 || key == NULL)
		refuse("unknown-key", NULL);
	if (bc_cloud_rs256_verify(key, jwt, dot2 - jwt, sig, slen) != BC_OK)
		refuse("bad-signature", NULL);

	/* The claims: signed, so read as they are. */
	if (!bc_doc_fields(payload, plen, c, lengthof(c)))
		refuse("malformed-token", NULL);
	if (c[0].value == NULL || strcmp(c[0].value, "https://accounts.google.com") != 0)
		refuse("wrong-issuer", NULL);
	if (c[1].value == NULL ||
		(strcmp(c[1].value, psprintf("%s#%s", set->audience, req->csr_sha256_b64)) != 0 &&
		 !bc_check_no_csr("the audience is <audience>#<csrSha256>")))
		refuse("wrong-audience", NULL);
	if (c[2].value == NULL || c[3].value == NULL)
		refuse("malformed-token", NULL);
	iat = strtoll(c[2].value, NULL, 10);
	exp = strtoll(c[3].value, NULL, 10);
	if (iat > now + 60)
		refuse("not-yet-valid", NULL);
	if (now >= exp + 60)
		refuse("expired", NULL);
	if (exp - iat > 3600)
		refuse("lifetime", NULL);
	if (c[4].value == NULL || c[5].value == NULL || c[4].value[0] == '\0' ||
		c[5].value[0] == '\0')
		refuse("no-instance", NULL);
	id->account = c[4].value;
	id->instance = c[5].value;
	if (c[6].value != NULL)
	{
		id->has_started = true;
		id->started = strtoll(c[6].value, NULL, 10);
	}
}

/* ---------------------------------------------------------------- Azure */

/* Azure: the attested document's PKCS#7, its signer chained, its content checked. */
static void
azure_verify(const BcJoinRequest *req, BcEvidenceMember *m, const CloudSettings *set,
			 int64 now, CloudIdentity *id)
{
	bytea	   *p7 = member_bytes(m[M_DOCUMENT].value);
	char	   *roots_pem = trust_material("azure", "root");
	char	   *inter_pem = trust_material("azure", "intermediate");
	STACK_OF(X509) *roots;
	STACK_OF(X509) *inter;
	unsigned char *content = NULL;
	size_t		content_len = 0;
	const char *reason = NULL;
	char		nonce[33];
	char	   *text;
	int			st;
	int			i;
	BcDocField	f[] = {
		{.path = "nonce"}, {.path = "timeStamp.createdOn"}, {.path = "timeStamp.expiresOn"},
		{.path = "vmId"}, {.path = "subscriptionId"}
	};
	int64		created;
	int64		expires;

	if (roots_pem == NULL || set->domain == NULL)
		refuse("provider-disabled", NULL);
	roots = cert_stack(roots_pem);
	inter = cert_stack(inter_pem);
	st = bc_cloud_azure_verify((const unsigned char *) VARDATA(p7), VARSIZE(p7) - VARHDRSZ,
							   roots, inter, set->domain, now, &content, &content_len, &reason);
	if (st != BC_OK)
		refuse(reason ? reason : "bad-signature", NULL);
	text = pnstrdup((char *) content, content_len);
	bc_free(content);

	if (!bc_doc_fields(text, content_len, f, lengthof(f)))
		refuse("malformed-document", NULL);
	/* nonce: the first 32 hex digits of SHA-256(CSR DER) */
	for (i = 0; i < 16; i++)
		snprintf(nonce + 2 * i, 3, "%02x", req->csr_sha256[i]);
	if (f[0].value == NULL ||
		(strcmp(f[0].value, nonce) != 0 && !bc_check_no_csr("the nonce is the CSR's")))
		refuse("wrong-nonce", NULL);
	if (bc_cloud_parse_azure_time(f[1].value, &created) != BC_OK ||
		bc_cloud_parse_azure_time(f[2].value, &expires) != BC_OK)
		refuse("malformed-document", NULL);
	if (created > now + 60)
		refuse("not-yet-valid", NULL);
	if (now > expires)
		refuse("expired", NULL);
	if (!bc_cloud_is_uuid(f[3].value) || !bc_cloud_is_uuid(f[4].value))
		refuse("malformed-document", NULL);
	id->account = asc_tolower(f[4].value, strlen(f[4].value));
	id->instance = asc_tolower(f[3].value, strlen(f[3].value));
}

static const CloudVerifier verifiers[] = {
	{"aws", (1 << M_DOCUMENT) | (1 << M_PKCS7), aws_verify},
	{"gcp", (1 << M_TOKEN), gcp_verify},
	{"azure", (1 << M_DOCUMENT), azure_verify},
};

/* -------------------------------------------------------- for everyone */

/* The tenant and pool the account maps to: its one row, or the resolver. */
static void
map_account(const BcJoinRequest *req, const char *provider, const CloudIdentity *id,
			char **tenant, char **pool, bool *allow_unbound)
{
	Datum		v[2];
	uint64		rows;

	v[0] = CStringGetTextDatum(provider);
	v[1] = CStringGetTextDatum(id->account);
	rows = bc_spi_exec(&account_mapping, v, NULL, true, 2);
	if (rows > 1)
		bc_invalid_config("%s account %s is mapped to more than one tenant and pool in bc_join.cloud_accounts",
						  provider, id->account);
	if (rows == 1)
	{
		*tenant = bc_spi_text_req(Anum_am_tenant);
		*pool = bc_spi_text_req(Anum_am_pool);
		*allow_unbound = bc_spi_bool(Anum_am_allow_unbound);
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
				bc_invalid_config("the cloud resolver answered something other than {\"tenantId\", \"poolId\"}");
			return;
		}
	}
	refuse("unknown-account", NULL);
}

/* {"provider", "account", "instance"} as JSON text. */
static char *
instance_json(const char *provider, const CloudIdentity *id, const char *admission)
{
	StringInfoData b;

	initStringInfo(&b);
	bc_json_begin(&b);
	bc_json_member(&b, "provider", provider);
	bc_json_member(&b, "account", id->account);
	bc_json_member(&b, "instance", id->instance);
	if (admission != NULL)
		bc_json_member(&b, "admission", admission);
	bc_json_end(&b);
	return b.data;
}

/* verify(): admit a cloud instance on its provider's signed word, once. */
static void
cloud_iid_verify(const BcJoinRequest *req, BcOutcome *out)
{
	BcEvidenceMember m[M_COUNT] = {
		{.name = "provider", .required = true, .max = 8},
		{.name = "document", .max = CLOUD_B64_MAX},
		{.name = "pkcs7", .max = CLOUD_B64_MAX},
		{.name = "token", .max = 16384},
	};
	BcAttestResult *res = &out->result;
	const CloudVerifier *ver = NULL;
	CloudSettings set;
	CloudIdentity id;
	char	   *tenant;
	char	   *pool;
	bool		allow_unbound;
	const char *admission = "token";
	int64		now = bc_timestamp_to_unix(bc_now());
	StringInfoData bindin;
	Datum		v[2];
	char		vn[2] = {' ', 'n'};
	bool		isnull;
	int			i;

	bc_evidence_members(CLOUD, req->attestation, m, lengthof(m));
	for (i = 0; i < (int) lengthof(verifiers); i++)
		if (strcmp(verifiers[i].provider, m[M_PROVIDER].value) == 0)
			ver = &verifiers[i];
	if (ver == NULL)
		refuse("malformed", NULL);
	for (i = M_DOCUMENT; i < M_COUNT; i++)
		if ((m[i].value != NULL) != ((ver->members & (1 << i)) != 0))
			refuse("malformed", NULL);

	/* The provider is enabled: it has a row in cloud_providers. */
	memset(&set, 0, sizeof(set));
	v[0] = CStringGetTextDatum(ver->provider);
	if (bc_spi_exec(&provider_settings, v, NULL, true, 1) != 1)
		refuse("provider-disabled", NULL);
	set.audience = bc_spi_text(Anum_ps_audience);
	set.domain = bc_spi_text(Anum_ps_domain);
	{
		Datum		d = bc_spi_datum(Anum_ps_max_age, &isnull);

		set.has_max_age = !isnull;
		if (!isnull)
			set.max_age = DatumGetInt64(d);
	}
	if (strcmp(ver->provider, "azure") == 0 && set.has_max_age)
		bc_invalid_config("azure has no instance age, but bc_join.cloud_providers sets max_instance_age for it");

	memset(&id, 0, sizeof(id));
	ver->verify(req, m, &set, now, &id);
	bc_check_note("provider", ver->provider);
	bc_check_note("account", id.account);
	bc_check_note("instance", id.instance);
	if (id.has_started)
		bc_check_note("started", bc_rfc3339(time_t_to_timestamptz((pg_time_t) id.started)));

	/* The account's tenant and pool. */
	map_account(req, ver->provider, &id, &tenant, &pool, &allow_unbound);

	/* An optional maximum instance age. */
	if (set.has_max_age && (!id.has_started || now - id.started > set.max_age))
		refuse("too-old", tenant);

	/* A sealed join token binds the CSR (AWS needs one unless opted in). */
	if (req->token != NULL)
	{
		BcToken		tok;

		bc_check_join_token(CLOUD, req->token, req->role, req->claims, &tok);
		if (strcmp(tok.tenant_id, tenant) != 0 || tok.pool_id == NULL ||
			strcmp(tok.pool_id, pool) != 0)
			refuse("token-mismatch", tenant);
		res->token_id = tok.token_id;
		res->spend_token = true;
		res->expect_checked = true;
		res->allow_reclaim = tok.allow_reclaim;
	}
	else if (strcmp(ver->provider, "aws") == 0)
	{
		if (!allow_unbound && bc_check_no_token("a sealed join token of the account's tenant and pool"))
			admission = "token";
		else
		{
			if (!allow_unbound)
				refuse("no-token", tenant);
			if (now - id.started > AWS_UNBOUND_SECONDS)
				refuse("unbound-stale", tenant);
			admission = "aws-unbound";
		}
	}
	else
		admission = "bound";

	/* bind = SHA-256(provider 0x00 account 0x00 instance) */
	initStringInfo(&bindin);
	appendStringInfoString(&bindin, ver->provider);
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
							  instance_json(ver->provider, &id, NULL));

	res->tenant_id = tenant;
	res->pool_id = pool;
	res->role = pstrdup(req->role);
	res->joined_detail = instance_json(ver->provider, &id, admission);
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
			bc_invalid_input("gcp trust material must be a JWKS ({\"keys\": [...]}) with at least one RSA key (2048 to 8192 bits), every key with a kid");
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
			bc_invalid_input("an azure root must be self-signed (add other CA certificates as intermediate)");
	}
	PG_RETURN_POINTER(tup);
}
