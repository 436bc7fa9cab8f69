/*
 * result.c: what an attestor answers, parsed and checked by JoinService
 * after the attestor and before anything is issued.
 *
 * A malformed answer is the attestor's bug: INVALID_CONFIG, not a refusal.
 * A well-formed answer that breaks a rule (another role, a pool of another
 * tenant, a subject bound elsewhere, ...) is refused "join:<reason>".
 */
#include "bc_join.h"

#include "catalog/pg_type_d.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/numeric.h"

#define BC_ALLOWED_KINDS_MAX 64

static BcPlan pool_lookup = {
	"SELECT p.tenant_id, p.site_id, p.agent, s.custom "
	"FROM bc_join.pools p JOIN bc_join.sites s ON s.id = p.site_id WHERE p.id = $1",
	1, {TEXTOID}
};

enum
{
	Anum_pool_tenant = 1,
	Anum_pool_site,
	Anum_pool_agent,
	Anum_pool_custom_site
};

static BcPlan site_lookup = {
	"SELECT tenant_id, custom FROM bc_join.sites WHERE id = $1",
	1, {TEXTOID}
};

enum
{
	Anum_site_tenant = 1,
	Anum_site_custom
};

static BcPlan node_lookup = {
	"SELECT tenant_id, site_id, pool_id, role, state, node_key, trust "
	"FROM bc_join.nodes WHERE id = $1 FOR UPDATE",
	1, {TEXTOID}
};

enum
{
	Anum_node_tenant = 1,
	Anum_node_site,
	Anum_node_pool,
	Anum_node_role,
	Anum_node_state,
	Anum_node_node_key,
	Anum_node_trust
};

static BcPlan binding_lookup = {
	"SELECT node_id FROM bc_join.node_bindings WHERE subject = $1 AND attestor = $2",
	2, {BYTEAOID, TEXTOID}
};

enum
{
	Anum_bl_node = 1
};

static BcPlan bad_kind = {
	"SELECT k FROM unnest($1::text[]) k "
	"WHERE NOT EXISTS (SELECT 1 FROM bc_join.command_kinds c WHERE c.kind = k) "
	"  AND NOT (k ~ '^[a-z0-9-]+(\\.[a-z0-9-]+)*\\.\\*$' "
	"           AND EXISTS (SELECT 1 FROM bc_join.command_kinds c "
	"                       WHERE starts_with(c.kind, left(k, -1)))) "
	"LIMIT 1",
	1, {TEXTARRAYOID}
};

enum
{
	Anum_bk_kind = 1
};

/* A string member's value, or INVALID_CONFIG naming the member. */
static char *
answer_string(const char *attestor, const char *key, JsonbValue *v, int max)
{
	if (v->type != jbvString)
		bc_invalid_config("attestor \"%s\" answered a non-string \"%s\"", attestor, key);
	if (v->val.string.len > max || memchr(v->val.string.val, '\0', v->val.string.len))
		bc_invalid_config("attestor \"%s\" answered an over-long \"%s\"", attestor, key);
	return pnstrdup(v->val.string.val, v->val.string.len);
}

/* A whole-number member's value between lo and hi, or INVALID_CONFIG. */
static int
answer_int(const char *attestor, const char *key, JsonbValue *v, int lo, int hi)
{
	char	   *s;
	char	   *end;
	long		n;

	if (v->type != jbvNumeric)
		bc_invalid_config("attestor \"%s\" answered a non-number \"%s\"", attestor, key);
	s = DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(v->val.numeric)));
	n = strtol(s, &end, 10);
	if (*end != '\0' || n < lo || n > hi)
		bc_invalid_config("attestor \"%s\" answered \"%s\" %s, not a whole number from %d to %d",
						  attestor, key, s, lo, hi);
	return (int) n;
}

/* allowedKinds: an array of at most 64 strings, as text[]. */
static Datum
answer_kinds(const char *attestor, JsonbValue *v)
{
	JsonbIterator *it;
	JsonbValue	e;
	JsonbIteratorToken tok;
	Datum	   *elems;
	int			n = 0;

	if (v->type != jbvBinary || !JsonContainerIsArray(v->val.binary.data))
		bc_invalid_config("attestor \"%s\" answered allowedKinds that is not an array", attestor);
	elems = palloc(sizeof(Datum) * (BC_ALLOWED_KINDS_MAX + 1));
	it = JsonbIteratorInit(v->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &e, true)) != WJB_DONE)
	{
		if (tok != WJB_ELEM)
			continue;
		if (n >= BC_ALLOWED_KINDS_MAX)
			bc_invalid_config("attestor \"%s\" answered more than %d allowedKinds",
							  attestor, BC_ALLOWED_KINDS_MAX);
		elems[n++] = CStringGetTextDatum(answer_string(attestor, "allowedKinds", &e, 128));
	}
	return PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT));
}

/* Parse a jsonb answer (result or deferral) of an attestor into out. */
void
bc_parse_outcome(const char *attestor, Jsonb *answer, BcOutcome *out)
{
	BcAttestResult *r = &out->result;
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	bool		any_result = false;

	memset(out, 0, sizeof(*out));
	if (!JB_ROOT_IS_OBJECT(answer) || JB_ROOT_IS_SCALAR(answer))
		bc_invalid_config("attestor \"%s\" answered something other than a JSON object", attestor);

	it = JsonbIteratorInit(&answer->root);
	(void) JsonbIteratorNext(&it, &v, true);
	while ((tok = JsonbIteratorNext(&it, &v, true)) == WJB_KEY)
	{
		char	   *key = pnstrdup(v.val.string.val, v.val.string.len);

		(void) JsonbIteratorNext(&it, &v, true);
		if (v.type == jbvNull)
			continue;
		if (strcmp(key, "deferred") == 0)
		{
			char	   *kind = answer_string(attestor, key, &v, 16);

			if (strcmp(kind, "approval") == 0)
				out->kind = "approval";
			else if (strcmp(kind, "challenge") == 0)
				out->kind = "challenge";
			else
				bc_invalid_config("attestor \"%s\" deferred with \"%s\", not approval or challenge",
								  attestor, kind);
			out->deferred = true;
			continue;
		}
		if (strcmp(key, "requestId") == 0)
			out->request_id = answer_string(attestor, key, &v, 128);
		else if (strcmp(key, "retryAfterSeconds") == 0)
			out->retry_after_seconds = answer_int(attestor, key, &v, INT_MIN, INT_MAX);
		else if (strcmp(key, "challenge") == 0)
			out->challenge_b64 = answer_string(attestor, key, &v, 16 * 1024);
		else if (strcmp(key, "notAfter") == 0)
		{
			out->not_after = DatumGetTimestampTz(DirectFunctionCall3(timestamptz_in,
																	 CStringGetDatum(answer_string(attestor, key, &v, 64)),
																	 ObjectIdGetDatum(InvalidOid),
																	 Int32GetDatum(-1)));
			out->has_not_after = true;
		}
		else
		{
			any_result = true;
			if (strcmp(key, "tenantId") == 0)
				r->tenant_id = answer_string(attestor, key, &v, 128);
			else if (strcmp(key, "role") == 0)
				r->role = answer_string(attestor, key, &v, 16);
			else if (strcmp(key, "poolId") == 0)
				r->pool_id = answer_string(attestor, key, &v, 128);
			else if (strcmp(key, "siteId") == 0)
				r->site_id = answer_string(attestor, key, &v, 128);
			else if (strcmp(key, "trust") == 0)
				r->trust = answer_string(attestor, key, &v, 32);
			else if (strcmp(key, "nodeId") == 0)
				r->node_id = answer_string(attestor, key, &v, 128);
			else if (strcmp(key, "tokenId") == 0)
				r->token_id = answer_string(attestor, key, &v, 128);
			else if (strcmp(key, "certTtlSeconds") == 0)
				r->cert_ttl_seconds = answer_int(attestor, key, &v, 1, INT_MAX);
			else if (strcmp(key, "allowedKinds") == 0)
			{
				r->allowed_kinds = answer_kinds(attestor, &v);
				r->has_allowed_kinds = true;
			}
			else if (strcmp(key, "bind") == 0)
			{
				char	   *b = answer_string(attestor, key, &v, 64);
				size_t		n;

				if (bc_b64url_decode(b, strlen(b), r->bind, sizeof(r->bind), &n) != BC_OK ||
					n != BC_SHA256_LEN)
					bc_invalid_config("attestor \"%s\" answered a bind that is not 32 bytes of base64url",
									  attestor);
				r->has_bind = true;
			}
			else if (strcmp(key, "nodeKey") == 0)
				r->node_key = answer_string(attestor, key, &v, 16);
			else if (strcmp(key, "nodeKeyUri") == 0)
				r->node_key_uri = answer_string(attestor, key, &v, 256);
			else
				bc_invalid_config("attestor \"%s\" answered an unknown member \"%.64s\"", attestor, key);
		}
	}
	if (out->deferred && any_result)
		bc_invalid_config("attestor \"%s\" answered a deferral with result members", attestor);
	if (!out->deferred && (out->request_id || out->challenge_b64 || out->has_not_after ||
						   out->retry_after_seconds))
		bc_invalid_config("attestor \"%s\" answered a result with deferral members", attestor);
}

/* Check a deferral: approval needs a request, challenge non-empty bytes. */
void
bc_validate_deferral(const char *attestor, BcOutcome *out)
{
	if (bc_single_use_consumed())
		bc_invalid_config("attestor \"%s\" consumed single-use evidence in a round that deferred",
						  attestor);
	if (strcmp(out->kind, "approval") == 0)
	{
		if (out->request_id == NULL || out->request_id[0] == '\0')
			bc_invalid_config("attestor \"%s\" deferred for approval without a requestId", attestor);
		if (out->retry_after_seconds == 0)
			out->retry_after_seconds = 30;
		if (out->retry_after_seconds < 1)
			out->retry_after_seconds = 1;
		if (out->retry_after_seconds > 86400)
			out->retry_after_seconds = 86400;
	}
	else
	{
		unsigned char *buf;
		size_t		n = 0;
		size_t		len;

		if (out->challenge_b64 != NULL)
		{
			len = strlen(out->challenge_b64);
			buf = palloc(bc_b64url_decoded_maxlen(len) + 1);
			if (bc_b64url_decode(out->challenge_b64, len, buf,
								 bc_b64url_decoded_maxlen(len), &n) != BC_OK)
				n = 0;
		}
		if (n == 0)
			bc_invalid_config("attestor \"%s\" deferred with a challenge that is not non-empty base64url",
							  attestor);
		/* A sealed state carries the notAfter JoinService enforces: the same one. */
		{
			TimestampTz sealed;

			if (bc_challenge_sealed_not_after(&sealed))
			{
				if (out->has_not_after &&
					bc_timestamp_to_unix(out->not_after) != bc_timestamp_to_unix(sealed))
					bc_invalid_config("attestor \"%s\" deferred with a notAfter other than its sealed state's",
									  attestor);
				out->not_after = sealed;
				out->has_not_after = true;
			}
		}
		if (!out->has_not_after)
		{
			out->not_after = bc_now() + 300 * USECS_PER_SEC;
			out->has_not_after = true;
		}
	}
}

/* 1 when uri is a well-formed urn:bc:tpm-ak:<nameAlg>:<hex digest>. */
static bool
is_tpm_ak_statement(const char *uri)
{
	static const struct
	{
		const char *alg;
		size_t		hexlen;
	}			algs[] = {{"sha256", 64}, {"sha384", 96}, {"sha512", 128}};
	const char *prefix = BC_TPM_AK_URN_PREFIX;
	size_t		i;
	size_t		j;

	if (strncmp(uri, prefix, strlen(prefix)) != 0)
		return false;
	uri += strlen(prefix);
	for (i = 0; i < lengthof(algs); i++)
	{
		size_t		al = strlen(algs[i].alg);

		if (strncmp(uri, algs[i].alg, al) != 0 || uri[al] != ':')
			continue;
		if (strlen(uri + al + 1) != algs[i].hexlen)
			return false;
		for (j = al + 1; uri[j]; j++)
		{
			if (!((uri[j] >= '0' && uri[j] <= '9') || (uri[j] >= 'a' && uri[j] <= 'f')))
				return false;
		}
		return true;
	}
	return false;
}

/* A reclaim keeps the node's tenant, site, pool and role. */
static void
validate_reclaim(const BcJoinRequest *req, BcAttestResult *res)
{
	Datum		v = CStringGetTextDatum(res->node_id);
	const char *tenant = res->tenant_id;
	char	   *site;
	char	   *pool;
	char	   *node_key;

	if (bc_spi_exec(&node_lookup, &v, NULL, false, 1) != 1)
		bc_refuse_join("join:reclaim-unknown", tenant);
	if (strcmp(bc_spi_text_req(Anum_node_tenant), res->tenant_id) != 0)
		bc_refuse_join("join:reclaim-tenant", NULL);
	site = bc_spi_text(Anum_node_site);
	pool = bc_spi_text(Anum_node_pool);
	if (strcmp(bc_spi_text_req(Anum_node_role), res->role) != 0)
		bc_refuse_join("join:reclaim-role", tenant);
	if (strcmp(bc_spi_text_req(Anum_node_state), "retired") == 0)
		bc_refuse_join("join:reclaim-retired", tenant);
	node_key = bc_spi_text_req(Anum_node_node_key);
	res->trust = bc_spi_text_req(Anum_node_trust);
	if (res->pool_id != NULL && (pool == NULL || strcmp(res->pool_id, pool) != 0))
		bc_refuse_join("join:reclaim-pool", tenant);
	if (res->site_id != NULL && (site == NULL || strcmp(res->site_id, site) != 0))
		bc_refuse_join("join:reclaim-site", tenant);
	res->pool_id = pool;
	res->site_id = site;

	/* Through a token, only when the token allows it. */
	if (res->token_id != NULL && !res->allow_reclaim)
		bc_refuse_join("join:reclaim-not-allowed", tenant);
	/*
	 * A hardware key never gives way to an unproven one unless an operator
	 * said so: a join token allowing reclaim, or a provisioning token made
	 * for this very node.
	 */
	if (strcmp(node_key, "tpm") == 0 &&
		(res->node_key == NULL || strcmp(res->node_key, "tpm") != 0) &&
		!(res->token_id != NULL && res->allow_reclaim) && !res->operator_reclaim)
		bc_refuse_join("join:hardware-key-enrolled", tenant);
}

/* Where a new node goes: its pool (in the tenant, in the site), or its site. */
static void
validate_placement(const BcJoinRequest *req, BcAttestResult *res, bool *custom_site)
{
	const char *tenant = res->tenant_id;

	if (res->pool_id != NULL)
	{
		Datum		v = CStringGetTextDatum(res->pool_id);
		char	   *pool_site;

		if (strcmp(req->role, BC_ROLE_SITE) == 0)
			bc_refuse_join("join:site-pool", tenant);
		if (bc_spi_exec(&pool_lookup, &v, NULL, true, 1) != 1)
			bc_refuse_join("join:pool-unknown", tenant);
		pool_site = bc_spi_text_req(Anum_pool_site);
		if (strcmp(bc_spi_text_req(Anum_pool_tenant), res->tenant_id) != 0)
			bc_refuse_join("join:pool-tenant", tenant);
		if (res->site_id != NULL && strcmp(res->site_id, pool_site) != 0)
			bc_refuse_join("join:pool-site", tenant);
		if (strcmp(bc_spi_text_req(Anum_pool_agent), "bcd") != 0)
			bc_refuse_join("join:pool-agent", tenant);
		*custom_site = bc_spi_bool(Anum_pool_custom_site);
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
		if (strcmp(bc_spi_text_req(Anum_site_tenant), res->tenant_id) != 0)
			bc_refuse_join("join:site-tenant", tenant);
		*custom_site = bc_spi_bool(Anum_site_custom);
	}
}

/*
 * Validate a result before anything is written: the role, the placement
 * or the reclaim, the token's expect binding, the binding, the allowed
 * kinds, the node key statement, the lifetime (into *ttl).
 */
void
bc_validate_result(const BcJoinRequest *req, BcAttestResult *res, int *ttl)
{
	const char *tenant = res->tenant_id;
	bool		custom_site = false;

	if (res->tenant_id == NULL || res->role == NULL)
		bc_invalid_config("attestor \"%s\" returned a result without tenantId or role", req->attestor);
	if (res->trust != NULL && strcmp(res->trust, "platform") != 0 &&
		strcmp(res->trust, "tenant-owned") != 0)
		bc_invalid_config("attestor \"%s\" returned trust \"%s\", not platform or tenant-owned",
						  req->attestor, res->trust);
	if (res->node_key != NULL && strcmp(res->node_key, "tpm") != 0)
		bc_invalid_config("attestor \"%s\" returned nodeKey \"%s\"; the only proven node key is \"tpm\"",
						  req->attestor, res->node_key);
	if (strcmp(res->role, req->role) != 0)
		bc_refuse_join("join:role", tenant);

	/* A token the attestor consumed: JoinService enforces its expect binding. */
	if (res->token_id != NULL && !res->expect_checked)
		res->allow_reclaim = bc_check_token_expect(res->token_id, req->claims, req->attestor, "join",
													tenant);

	if (res->node_id != NULL)
		validate_reclaim(req, res);
	else
	{
		validate_placement(req, res, &custom_site);
		if (res->trust == NULL)
			res->trust = custom_site ? "tenant-owned" : "platform";
	}

	/* A subject bound to another node never admits this one. */
	if (res->has_bind)
	{
		Datum		v[2];

		v[0] = PointerGetDatum(bc_bytea(res->bind, BC_SHA256_LEN));
		v[1] = CStringGetTextDatum(req->attestor);
		if (bc_spi_exec(&binding_lookup, v, NULL, true, 1) == 1 &&
			(res->node_id == NULL || strcmp(bc_spi_text(Anum_bl_node), res->node_id) != 0))
			bc_refuse_join("join:bound-elsewhere", tenant);
	}

	/* allowedKinds: registered kinds or prefix.* globs that name some. */
	if (res->has_allowed_kinds)
	{
		Datum		v = res->allowed_kinds;

		if (bc_spi_exec(&bad_kind, &v, NULL, true, 1) == 1)
			bc_invalid_config("attestor \"%s\" returned allowedKinds entry \"%s\", which is no registered command kind or prefix.* glob",
							  req->attestor, bc_spi_text(Anum_bk_kind));
	}

	/*
	 * Only a statement the service can prove again at renewal: a
	 * urn:bc:tpm-ak: one the built-in tpm attestor proved (a renewal proves
	 * it again against the EK that attestor recorded; any other attestor's
	 * would get a certificate that could never renew).
	 */
	if (res->node_key_uri != NULL &&
		(!res->statement_proven || !is_tpm_ak_statement(res->node_key_uri)))
		bc_refuse_join("join:node-key-statement", tenant);

	*ttl = bc_cert_ttl;
	if (res->cert_ttl_seconds > 0 && res->cert_ttl_seconds < *ttl)
		*ttl = res->cert_ttl_seconds;
	if (strcmp(req->role, BC_ROLE_RAMDISK) == 0 && *ttl > BC_RAMDISK_TTL_MAX)
		*ttl = BC_RAMDISK_TTL_MAX;
}

/* Append a member of the subject: its bytes and a 0x00 (NULL as nothing). */
static void
subject_part(StringInfo b, const char *s)
{
	if (s != NULL)
		appendBinaryStringInfo(b, s, strlen(s));
	appendStringInfoChar(b, '\0');
}

/* Append 32 bytes as lower-case hex and a 0x00, or only the 0x00. */
static void
subject_hex(StringInfo b, const unsigned char *h, bool has)
{
	int			i;

	if (has)
		for (i = 0; i < BC_SHA256_LEN; i++)
			appendStringInfo(b, "%02x", h[i]);
	appendStringInfoChar(b, '\0');
}

/* The subject a round verified (see bc_join.h). */
void
bc_result_subject(const BcJoinRequest *req, const BcAttestResult *res,
				  unsigned char out[BC_SHA256_LEN])
{
	StringInfoData b;

	initStringInfo(&b);
	subject_part(&b, "bc_join/join-subject/1");
	subject_part(&b, req->attestor);
	subject_part(&b, res->tenant_id);
	subject_part(&b, res->role);
	subject_part(&b, res->token_id);
	subject_hex(&b, res->bind, res->has_bind);
	subject_part(&b, res->node_key);
	subject_part(&b, res->node_key_uri);
	subject_hex(&b, res->subject, res->has_subject);
	bc_sha256(b.data, b.len, out);
	pfree(b.data);
}

/* A repeat's result is for the issuing round's subject (see bc_join.h). */
void
bc_validate_repeat(const BcJoinRequest *req, BcAttestResult *res)
{
	const BcRepeat *r = req->repeat;
	unsigned char subject[BC_SHA256_LEN];

	if (res->tenant_id == NULL || res->role == NULL)
		bc_invalid_config("attestor \"%s\" returned a result without tenantId or role", req->attestor);
	if (res->node_key != NULL && strcmp(res->node_key, "tpm") != 0)
		bc_invalid_config("attestor \"%s\" returned nodeKey \"%s\"; the only proven node key is \"tpm\"",
						  req->attestor, res->node_key);
	if (strcmp(res->role, req->role) != 0)
		bc_refuse_join("join:role", res->tenant_id);
	/* A token the attestor consumed: its expect binding, as in every round. */
	if (res->token_id != NULL && !res->expect_checked)
		(void) bc_check_token_expect(res->token_id, req->claims, req->attestor, "join",
									 res->tenant_id);
	bc_result_subject(req, res, subject);
	if (strcmp(res->tenant_id, r->tenant_id) != 0 || strcmp(res->role, r->role) != 0 ||
		(res->node_id != NULL && strcmp(res->node_id, r->node_id) != 0) ||
		memcmp(subject, r->subject, BC_SHA256_LEN) != 0)
		bc_refuse_join("join:repeat-subject", NULL);
}
