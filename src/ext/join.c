/*
 * join.c: bc_join(request jsonb), one join round in the caller's transaction.
 *
 *   parse and bound the request (22023)  ->  pick the attestor (0A000)
 *   -> subtransaction { role admitted? -> attestor verify -> validate the
 *      result -> proof of possession -> node, certificate, binding, events,
 *      audit, spend -> signed response }
 *   refusal (JR001): roll the subtransaction back, record
 *   security.join.refused, return the one refusal.
 *   any other error: roll back and raise it; nothing is recorded.
 */
#include "bc_join.h"

#include <time.h>

#include "access/xact.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

/* The attestors JoinService knows, built-in first. */
static const BcAttestor *const builtin_attestors[] = {
	&bc_join_token_attestor,
	NULL
};

static BcPlan pool_lookup = {
	"SELECT p.tenant_id, p.site_id, p.agent, s.custom "
	"FROM bc_join.pools p JOIN bc_join.sites s ON s.id = p.site_id WHERE p.id = $1",
	1, {TEXTOID}
};

static BcPlan site_lookup = {
	"SELECT tenant_id, custom FROM bc_join.sites WHERE id = $1",
	1, {TEXTOID}
};

static BcPlan insert_node = {
	"INSERT INTO bc_join.nodes (id, tenant_id, site_id, pool_id, role, trust, "
	"                           attestor, node_key, claims) "
	"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
	9, {TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, JSONBOID}
};

static BcPlan insert_cert = {
	"INSERT INTO bc_join.node_certs (serial, node_id, identity_generation, not_before, "
	"       not_after, spki_sha256, allowed_kinds, node_key_uri, certificate) "
	"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
	9, {TEXTOID, TEXTOID, INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID, BYTEAOID,
	TEXTARRAYOID, TEXTOID, BYTEAOID}
};

/* The attestor registered under id, or UNSUPPORTED (0A000). */
static const BcAttestor *
find_attestor(const char *id)
{
	int			i;

	for (i = 0; builtin_attestors[i] != NULL; i++)
	{
		if (strcmp(builtin_attestors[i]->id, id) == 0)
			return builtin_attestors[i];
	}
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("unknown attestor \"%s\"", id),
			 errdetail("UNSUPPORTED: no attestor with this id is registered.")));
	return NULL;				/* keep compiler quiet */
}

/* 1 when role is one the attestor may admit. */
static bool
role_admitted(const BcAttestor *att, const char *role)
{
	int			i;

	for (i = 0; att->roles[i] != NULL; i++)
	{
		if (strcmp(att->roles[i], role) == 0)
			return true;
	}
	return false;
}

/* A bytea of n bytes. */
static bytea *
make_bytea(const void *data, size_t n)
{
	bytea	   *b = palloc(VARHDRSZ + n);

	SET_VARSIZE(b, VARHDRSZ + n);
	memcpy(VARDATA(b), data, n);
	return b;
}

/* RFC 3339 UTC rendering of a timestamp, to the second. */
static char *
rfc3339(TimestampTz t)
{
	time_t		secs = (time_t) bc_timestamp_to_unix(t);
	struct tm	tm;
	char		buf[32];

	if (gmtime_r(&secs, &tm) == NULL)
		elog(ERROR, "timestamp out of range");
	strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
	return pstrdup(buf);
}

/* Append "name":"value" (value JSON-escaped) with a leading comma. */
static void
json_member(StringInfo buf, const char *name, const char *value)
{
	appendStringInfo(buf, ",\"%s\":", name);
	if (value == NULL)
		appendStringInfoString(buf, "null");
	else
		escape_json(buf, value);
}

/*
 * Validate what the attestor answered, before anything is written: the role
 * it admits, where the node goes, the lifetime.  Fills in site, trust and
 * the certificate lifetime.  Refusals are "join:<reason>".
 */
static void
validate_result(const BcJoinRequest *req, BcAttestResult *res, int *ttl)
{
	bool		isnull;
	bool		custom_site = false;
	const char *tenant = res->tenant_id;

	if (res->tenant_id == NULL || res->role == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_BC_INVALID_CONFIG),
				 errmsg("attestor \"%s\" returned a result without tenantId or role", req->attestor),
				 errdetail("INVALID_CONFIG: a result names the tenant and the role it admits.")));
	if (strcmp(res->role, req->role) != 0)
		bc_refuse_join("join:role", tenant);

	if (res->pool_id != NULL)
	{
		Datum		v = CStringGetTextDatum(res->pool_id);
		char	   *pool_tenant;
		char	   *pool_site;
		char	   *agent;

		if (strcmp(req->role, "site") == 0)
			bc_refuse_join("join:site-pool", tenant);
		if (bc_spi_exec(&pool_lookup, &v, NULL, true, 1) != 1)
			bc_refuse_join("join:pool-unknown", tenant);
		pool_tenant = bc_spi_text(1);
		pool_site = bc_spi_text(2);
		agent = bc_spi_text(3);
		custom_site = DatumGetBool(bc_spi_datum(4, &isnull));
		if (strcmp(pool_tenant, res->tenant_id) != 0)
			bc_refuse_join("join:pool-tenant", tenant);
		if (res->site_id != NULL && strcmp(res->site_id, pool_site) != 0)
			bc_refuse_join("join:pool-site", tenant);
		if (strcmp(agent, "bcd") != 0)
			bc_refuse_join("join:pool-agent", tenant);
		res->site_id = pool_site;
	}
	else
	{
		Datum		v;

		if (res->site_id == NULL)
			bc_refuse_join("join:no-site", tenant);
		v = CStringGetTextDatum(res->site_id);
		if (bc_spi_exec(&site_lookup, &v, NULL, true, 1) != 1)
			bc_refuse_join("join:site-unknown", tenant);
		if (strcmp(bc_spi_text(1), res->tenant_id) != 0)
			bc_refuse_join("join:site-tenant", tenant);
		custom_site = DatumGetBool(bc_spi_datum(2, &isnull));
	}

	if (res->trust == NULL)
		res->trust = custom_site ? "tenant-owned" : "platform";

	if (res->token_id != NULL && !res->expect_checked)
		bc_check_token_expect(res->token_id, req->claims, "join");

	*ttl = bc_cert_ttl;
	if (res->cert_ttl_seconds > 0 && res->cert_ttl_seconds < *ttl)
		*ttl = res->cert_ttl_seconds;
	if (strcmp(req->role, "ramdisk") == 0 && *ttl > BC_RAMDISK_TTL_MAX)
		*ttl = BC_RAMDISK_TTL_MAX;
}

/*
 * Admit: insert the node, issue and record its certificate, write node.joined
 * and the audit row, spend the token's use.  Returns the signed response.
 */
static Jsonb *
admit(const BcJoinRequest *req, BcAttestResult *res, int ttl, MemoryContext outcxt)
{
	const BcKeys *keys = bc_keys();
	char	   *node_id = bc_new_id("node");
	const char *node_key = res->node_key ? res->node_key : "unattested";
	BcIssued	issued;
	Datum		nv[9];
	char		nn[9];
	StringInfoData payload;
	StringInfoData ev;
	char	   *leaf_b64;
	char	   *ca_b64;
	char	   *jws = NULL;
	char	   *issued_at;
	int			st;
	int			i;
	MemoryContext old;
	Jsonb	   *out;

	if (res->node_id != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("reclaiming a node is not supported yet"),
				 errdetail("UNSUPPORTED: attestor \"%s\" returned a nodeId.", req->attestor)));

	for (i = 0; i < 9; i++)
		nn[i] = ' ';
	nv[0] = CStringGetTextDatum(node_id);
	nv[1] = CStringGetTextDatum(res->tenant_id);
	nv[2] = CStringGetTextDatum(res->site_id);
	if (res->pool_id)
		nv[3] = CStringGetTextDatum(res->pool_id);
	else
		nn[3] = 'n';
	nv[4] = CStringGetTextDatum(req->role);
	nv[5] = CStringGetTextDatum(res->trust);
	nv[6] = CStringGetTextDatum(req->attestor);
	nv[7] = CStringGetTextDatum(node_key);
	nv[8] = JsonbPGetDatum(req->claims);
	bc_spi_exec(&insert_node, nv, nn, false, 0);

	/* Proof of possession was checked by the caller; certify the CSR's key. */
	bc_issue_node_cert(req, res->tenant_id, node_id, res->node_key_uri, ttl, &issued);

	for (i = 0; i < 9; i++)
		nn[i] = ' ';
	nv[0] = CStringGetTextDatum(issued.serial_hex);
	nv[1] = CStringGetTextDatum(node_id);
	nv[2] = Int32GetDatum(1);
	nv[3] = TimestampTzGetDatum(issued.not_before);
	nv[4] = TimestampTzGetDatum(issued.not_after);
	nv[5] = PointerGetDatum(make_bytea(req->csr_spki_sha256, BC_SHA256_LEN));
	nn[6] = 'n';				/* allowed kinds: unrestricted */
	if (res->node_key_uri)
		nv[7] = CStringGetTextDatum(res->node_key_uri);
	else
		nn[7] = 'n';
	nv[8] = PointerGetDatum(make_bytea(issued.leaf_der, issued.leaf_der_len));
	bc_spi_exec(&insert_cert, nv, nn, false, 0);

	/* node.joined, then the audit row. */
	initStringInfo(&ev);
	appendStringInfoString(&ev, "{\"nodeId\":");
	escape_json(&ev, node_id);
	json_member(&ev, "attestor", req->attestor);
	json_member(&ev, "nodeKey", node_key);
	json_member(&ev, "role", req->role);
	json_member(&ev, "siteId", res->site_id);
	json_member(&ev, "poolId", res->pool_id);
	json_member(&ev, "tokenId", res->token_id);
	json_member(&ev, "serial", issued.serial_hex);
	json_member(&ev, "spiffeId", issued.spiffe_id);
	json_member(&ev, "csrSha256", req->csr_sha256_b64);
	appendStringInfoChar(&ev, '}');
	{
		Jsonb	   *evj = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(ev.data)));

		bc_emit_event(res->tenant_id, "node.joined", evj);
		bc_audit("node.join", res->tenant_id, node_id, evj);
	}

	if (res->spend_token)
		bc_spend_join_token(res->token_id);

	/* The signed response, bound to the CSR. */
	leaf_b64 = palloc(bc_b64_encoded_len(issued.leaf_der_len) + 1);
	bc_b64_encode(issued.leaf_der, issued.leaf_der_len, leaf_b64);
	ca_b64 = palloc(bc_b64_encoded_len(keys->node_ca_der_len) + 1);
	bc_b64_encode(keys->node_ca_der, keys->node_ca_der_len, ca_b64);
	issued_at = rfc3339(bc_now());

	initStringInfo(&payload);
	appendStringInfoString(&payload, "{\"status\":\"issued\"");
	json_member(&payload, "csrSha256", req->csr_sha256_b64);
	json_member(&payload, "issuedAt", issued_at);
	json_member(&payload, "nodeId", node_id);
	json_member(&payload, "tenantId", res->tenant_id);
	json_member(&payload, "role", req->role);
	json_member(&payload, "spiffeId", issued.spiffe_id);
	json_member(&payload, "serial", issued.serial_hex);
	appendStringInfo(&payload, ",\"identityGeneration\":1,\"certificateChain\":[\"%s\",\"%s\"]",
					 leaf_b64, ca_b64);
	json_member(&payload, "notAfter", rfc3339(issued.not_after));
	appendStringInfoChar(&payload, '}');

	st = bc_jws_sign_es256(keys->signing, keys->signing_kid,
						   (unsigned char *) payload.data, payload.len, &jws);
	if (st != BC_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not sign the join response"),
				 bc_errdetail_openssl(bc_status_str(st))));

	old = MemoryContextSwitchTo(outcxt);
	jws = bc_take_cstring(jws);
	{
		StringInfoData o;

		initStringInfo(&o);
		appendStringInfo(&o, "{\"status\":\"issued\",\"response\":\"%s\"}", jws);
		out = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(o.data)));
	}
	MemoryContextSwitchTo(old);
	return out;
}

/* The round inside a subtransaction; a refusal becomes an event and the one answer. */
static Jsonb *
run_join(const BcJoinRequest *req, const BcAttestor *att, MemoryContext outcxt)
{
	MemoryContext spicxt = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	Jsonb	   *volatile response = NULL;
	char	   *volatile refusal = NULL;
	char	   *volatile refused_tenant = NULL;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(spicxt);

	PG_TRY();
	{
		BcAttestResult res;
		int			ttl;

		memset(&res, 0, sizeof(res));
		if (!role_admitted(att, req->role))
			bc_refuse_join(psprintf("%s:role-not-admitted", att->id), NULL);

		att->verify(req, &res);
		validate_result(req, &res, &ttl);

		/* Proof of possession: the CSR is signed by the key it asks for. */
		if (bc_csr_verify_pop(req->csr) != BC_OK)
			bc_refuse_join("join:csr-signature", res.tenant_id);

		response = admit(req, &res, ttl, outcxt);

		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(spicxt);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;
		char	   *r;
		char	   *t;

		MemoryContextSwitchTo(spicxt);
		edata = CopyErrorData();
		FlushErrorState();

		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(spicxt);
		CurrentResourceOwner = oldowner;

		/* Only the refusal is answered; any other error fails the join. */
		if (!bc_take_refusal(&r, &t) || edata->sqlerrcode != ERRCODE_BC_JOIN_REFUSED)
		{
			if (edata->sqlerrcode == ERRCODE_BC_JOIN_REFUSED)
				r = psprintf("%s:refused", att->id);
			else
				ReThrowError(edata);
		}
		refusal = r;
		refused_tenant = t;
	}
	PG_END_TRY();

	if (refusal != NULL)
	{
		MemoryContext old;

		bc_record_refusal(refusal, refused_tenant, req);
		old = MemoryContextSwitchTo(outcxt);
		response = bc_refusal_response();
		MemoryContextSwitchTo(old);
	}
	return response;
}

PG_FUNCTION_INFO_V1(bc_join_request);

/* bc_join(request jsonb): one join round. */
Datum
bc_join_request(PG_FUNCTION_ARGS)
{
	Jsonb	   *jb = PG_GETARG_JSONB_P(0);
	MemoryContext callcxt = CurrentMemoryContext;
	BcJoinRequest req;
	const BcAttestor *att;
	Jsonb	   *out;

	bc_parse_join_request(jb, &req, callcxt);
	att = find_attestor(req.attestor);

	/* A misconfigured service fails loudly before anything is written. */
	(void) bc_keys();
	if (bc_trust_domain == NULL || bc_trust_domain[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_BC_INVALID_CONFIG),
				 errmsg("bc_join.trust_domain is not set"),
				 errdetail("INVALID_CONFIG: every identity is issued under the trust domain.")));

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	out = run_join(&req, att, callcxt);
	SPI_finish();

	PG_RETURN_JSONB_P(out);
}
