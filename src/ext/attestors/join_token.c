/*
 * attestors/join_token.c: the built-in join-token attestor, and the token
 * check every attestor may use (bc_join.check_join_token()).
 *
 * The simplest case: JoinService opened the sealed token (bound to this
 * CSR); lock the token row, compare the secret in constant time, check
 * revocation, expiry, uses, role and the expect binding.  The use is spent
 * by JoinService after the certificate is issued (bc_spend_join_token), in
 * the same transaction: check in every round, spend only in the round that
 * issues.
 */
#include "bc_join.h"

#include "utils/builtins.h"
#include "utils/jsonb.h"

static const char *const join_token_roles[] = {BC_ROLE_NODE, BC_ROLE_SITE, BC_ROLE_RAMDISK, NULL};

static BcPlan lock_token = {
	"SELECT tenant_id, pool_id, site_id, secret_sha256, uses_left, "
	"       expires_at <= bc_join.compute_now() AS expired, role, expect, "
	"       revoked_at IS NOT NULL AS revoked, allow_reclaim "
	"FROM bc_join.join_tokens WHERE id = $1 FOR UPDATE",
	1, {TEXTOID}
};

enum
{
	Anum_tok_tenant = 1,
	Anum_tok_pool,
	Anum_tok_site,
	Anum_tok_secret_sha256,
	Anum_tok_uses_left,
	Anum_tok_expired,
	Anum_tok_role,
	Anum_tok_expect,
	Anum_tok_revoked,
	Anum_tok_allow_reclaim
};

static BcPlan spend_token = {
	"UPDATE bc_join.join_tokens SET uses_left = uses_left - 1 "
	"WHERE id = $1 AND uses_left > 0",
	1, {TEXTOID}
};

static BcPlan token_expect = {
	"SELECT expect, allow_reclaim FROM bc_join.join_tokens WHERE id = $1",
	1, {TEXTOID}
};

enum
{
	Anum_expect_expect = 1,
	Anum_expect_allow_reclaim
};

/* 1 when id is "jt_" and 32 lower-case hex digits. */
static bool
is_token_id(const char *id, size_t len)
{
	size_t		i;

	if (len != 35 || strncmp(id, "jt_", 3) != 0)
		return false;
	for (i = 3; i < len; i++)
	{
		if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
			return false;
	}
	return true;
}

static BcPlan token_limit = {
	"SELECT tenant_id, secret_sha256, expect -> 'attestors' "
	"FROM bc_join.join_tokens WHERE id = $1",
	1, {TEXTOID}
};

enum
{
	Anum_limit_tenant = 1,
	Anum_limit_secret_sha256,
	Anum_limit_attestors
};

/*
 * Whether the SPI row's column secret_col (the SHA-256 of a token's secret)
 * is SHA-256(secret), compared in constant time.
 */
static bool
secret_matches(int secret_col, const char *secret)
{
	unsigned char secret_hash[BC_SHA256_LEN];
	bool		isnull;
	bytea	   *stored;
	bool		matched;

	bc_sha256(secret, strlen(secret), secret_hash);
	stored = DatumGetByteaPP(bc_spi_datum(secret_col, &isnull));
	matched = !isnull && VARSIZE_ANY_EXHDR(stored) == BC_SHA256_LEN &&
		bc_ct_equal(VARDATA_ANY(stored), secret_hash, BC_SHA256_LEN);
	OPENSSL_cleanse(secret_hash, sizeof(secret_hash));
	return matched;
}

/* Whether a token's "attestors" limit (a jsonb array of ids) lists attestor. */
static bool
limit_lists(Jsonb *limit, const char *attestor)
{
	Jsonb	   *listed = bc_jsonb(psprintf("[\"%s\"]", attestor));

	return JB_ROOT_IS_ARRAY(limit) && !JB_ROOT_IS_SCALAR(limit) &&
		DatumGetBool(DirectFunctionCall2(jsonb_contains, JsonbPGetDatum(limit),
										 JsonbPGetDatum(listed)));
}

/*
 * A sealed token offered to an attestor that takes none (x509pop, a custom
 * attestor that returns no tokenId): a join token whose secret matches and
 * whose expect names attestors without this one is refused
 * "<attestor>:token-attestor" (ATTESTORS.md: every other attestor refuses
 * it), in the token's tenant.  Anything else about the token (malformed,
 * unknown, spent, expired) is left to the attestor, and nothing is spent or
 * locked here.
 */
void
bc_refuse_token_limited_to_others(const char *attestor, const char *token)
{
	const char *dot;
	Datum		v;
	bool		isnull;
	Datum		limit;

	if (token == NULL || (dot = strrchr(token, '.')) == NULL ||
		!is_token_id(token, dot - token) || strlen(dot + 1) != 43)
		return;
	v = CStringGetTextDatum(pnstrdup(token, dot - token));
	if (bc_spi_exec(&token_limit, &v, NULL, true, 1) != 1 ||
		!secret_matches(Anum_limit_secret_sha256, dot + 1))
		return;
	limit = bc_spi_datum(Anum_limit_attestors, &isnull);
	if (!isnull && !limit_lists(DatumGetJsonbP(limit), attestor))
		bc_refuse_join(psprintf("%s:token-attestor", attestor),
					   bc_spi_text_req(Anum_limit_tenant));
}

/*
 * Enforce a token's expect binding: its "attestors" member, when there is
 * one, must list attestor (else "<attestor>:token-attestor": stripping the
 * evidence off a tpm request must not make it a plain token join); the
 * claims must contain the rest (else "<who>:expect").
 */
static void
enforce_expect(Jsonb *expect, Jsonb *claims, const char *attestor, const char *who,
			   const char *tenant)
{
	JsonbValue *limit = getKeyJsonValueFromContainer(&expect->root, "attestors", 9, NULL);
	Jsonb	   *rest = expect;

	if (limit != NULL)
	{
		if (limit->type != jbvBinary || !limit_lists(JsonbValueToJsonb(limit), attestor))
			bc_refuse_join(psprintf("%s:token-attestor", attestor), tenant);
		rest = DatumGetJsonbP(DirectFunctionCall2(jsonb_delete, JsonbPGetDatum(expect),
												  CStringGetTextDatum("attestors")));
	}
	if (!DatumGetBool(DirectFunctionCall2(jsonb_contains, JsonbPGetDatum(claims),
										  JsonbPGetDatum(rest))))
		bc_refuse_join(psprintf("%s:expect", who), tenant);
}

/* Enforce a token's expect binding for attestor; refuses "<who>:expect"; returns allow_reclaim. */
bool
bc_check_token_expect(const char *token_id, Jsonb *claims, const char *attestor,
					  const char *who, const char *tenant)
{
	Datum		v = CStringGetTextDatum(token_id);
	bool		isnull;
	Datum		expect;

	if (bc_spi_exec(&token_expect, &v, NULL, true, 1) != 1)
		bc_refuse_join(psprintf("%s:unknown-token", who), tenant);
	expect = bc_spi_datum(Anum_expect_expect, &isnull);
	if (!isnull)
		enforce_expect(DatumGetJsonbP(expect), claims, attestor, who, tenant);
	return bc_spi_bool(Anum_expect_allow_reclaim);
}

/* Spend one use of a token that was checked (and locked) in this transaction. */
void
bc_spend_join_token(const char *token_id)
{
	Datum		v = CStringGetTextDatum(token_id);

	if (bc_spi_exec(&spend_token, &v, NULL, false, 0) != 1)
		elog(ERROR, "join token %s had no use left to spend", token_id);
}

/*
 * Lock the row of token id with plan (its column secret_col holding the
 * SHA-256 of the secret) and compare secret with it in constant time, doing
 * the same work for an id nobody issued; refuses "<who>:unknown" and
 * "<who>:secret".  The locked row stays the last SPI result.
 */
void
bc_lock_token_secret(BcPlan *plan, const char *id, const char *secret, int secret_col,
					 const char *who)
{
	static const unsigned char dummy_hash[BC_SHA256_LEN];
	Datum		v = CStringGetTextDatum(id);
	bool		found;
	bool		matched;

	found = bc_spi_exec(plan, &v, NULL, false, 1) == 1;
	if (found)
		matched = secret_matches(secret_col, secret);
	else
	{
		/* The same work as a known token, so timing tells nothing. */
		unsigned char secret_hash[BC_SHA256_LEN];

		bc_sha256(secret, strlen(secret), secret_hash);
		(void) bc_ct_equal(dummy_hash, secret_hash, BC_SHA256_LEN);
		OPENSSL_cleanse(secret_hash, sizeof(secret_hash));
		matched = false;
	}
	if (!found)
		bc_refuse_join(psprintf("%s:unknown", who), NULL);
	if (!matched)
		bc_refuse_join(psprintf("%s:secret", who), NULL);
}

/*
 * Lock and check a token for this round without spending it: the secret in
 * constant time, then revocation, expiry, uses, role and expect.  Refusals
 * are "<who>:<reason>"; from the matched secret on they carry the tenant.
 */
void
bc_check_join_token(const char *who, const char *token, const char *role,
					Jsonb *claims, BcToken *out)
{
	const char *dot;
	char	   *token_id;
	const char *secret;
	bool		isnull;
	Datum		e;
	char	   *tenant;

	memset(out, 0, sizeof(*out));

	/* "<id>.<secret>" */
	dot = strrchr(token, '.');
	if (dot == NULL || !is_token_id(token, dot - token) || strlen(dot + 1) != 43)
		bc_refuse_join(psprintf("%s:malformed", who), NULL);
	token_id = pnstrdup(token, dot - token);
	secret = dot + 1;
	bc_lock_token_secret(&lock_token, token_id, secret, Anum_tok_secret_sha256, who);

	/* The secret matched: from here on the tenant is authenticated. */
	tenant = bc_spi_text_req(Anum_tok_tenant);
	if (bc_spi_bool(Anum_tok_revoked))
		bc_refuse_join(psprintf("%s:revoked", who), tenant);
	if (bc_spi_bool(Anum_tok_expired))
		bc_refuse_join(psprintf("%s:expired", who), tenant);
	/* In a repeat the use was spent by the certificate asked for (its subject names the token). */
	if (bc_spi_int4(Anum_tok_uses_left) <= 0 && bc_round_repeat() == NULL)
		bc_refuse_join(psprintf("%s:spent", who), tenant);
	out->role = bc_spi_text_req(Anum_tok_role);
	if (strcmp(out->role, role) != 0)
		bc_refuse_join(psprintf("%s:role", who), tenant);
	e = bc_spi_datum(Anum_tok_expect, &isnull);
	if (!isnull)
		enforce_expect(DatumGetJsonbP(e), claims, who, who, tenant);

	out->token_id = token_id;
	out->tenant_id = tenant;
	out->pool_id = bc_spi_text(Anum_tok_pool);	/* NULL: a site token */
	out->site_id = bc_spi_text(Anum_tok_site);	/* NULL: a pool token */
	out->allow_reclaim = bc_spi_bool(Anum_tok_allow_reclaim);
}

/* verify(): admit a machine holding a valid join token, sealed to its CSR. */
static void
join_token_verify(const BcJoinRequest *req, BcOutcome *out)
{
	BcToken		tok;
	BcAttestResult *res = &out->result;

	if (req->token == NULL)
		bc_refuse_join("join-token:no-evidence", NULL);
	bc_check_join_token(BC_ATTESTOR_JOIN_TOKEN, req->token, req->role, req->claims, &tok);

	res->tenant_id = tok.tenant_id;
	res->role = tok.role;
	res->pool_id = tok.pool_id;
	res->site_id = tok.site_id;
	res->token_id = tok.token_id;
	res->allow_reclaim = tok.allow_reclaim;
	res->spend_token = true;
	res->expect_checked = true;
}

const BcAttestor bc_join_token_attestor = {
	.id = BC_ATTESTOR_JOIN_TOKEN,
	.version = "0.1.0",
	.roles = join_token_roles,
	.verify = join_token_verify,
};
