/*
 * challenge_state.c: the state a challenge carries between two rounds, and
 * JoinService's enforcement of a challenge's notAfter for every attestor.
 *
 * A state is sealed (encrypted and authenticated) under challenge.key
 * (src/common/state.c, context "bc_join/challenge") around an envelope that
 * JoinService writes and checks itself:
 *
 *   "bcst" 0x01 | u8 len, attestor id | SHA-256(CSR DER) | u8 len, role |
 *   i64be notAfter (unix seconds) | the attestor's own payload
 *
 * Opening it in the answering round refuses "<attestor>:state-mismatch"
 * when it does not open or names another attestor, CSR or role, and
 * "<attestor>:challenge-expired" once the service clock is past notAfter.
 * The built-in tpm attestor and SQL attestors (seal_challenge_state /
 * open_challenge_state) go through the same two functions.  A round that
 * seals a state and defers with a challenge gets the state's notAfter as
 * the signed response's (bc_challenge_sealed_not_after): the two cannot
 * differ.
 */
#include "bc_join.h"

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#define ENVELOPE_MAGIC "bcst\001"
#define ENVELOPE_MAGIC_LEN 5
#define STATE_CONTEXT "bc_join/challenge"
/* The longest a challenge may stay open: one day. */
#define CHALLENGE_TTL_MAX 86400

/* The join round running in this backend (copies: nothing dangles). */
static bool round_active = false;
static char round_attestor[BC_ATTESTOR_ID_MAX + 1];
static char round_role[16];
static unsigned char round_csr_sha256[BC_SHA256_LEN];
static char round_csr_sha256_b64[44];
/* A state sealed in the running round, and its notAfter. */
static bool round_sealed = false;
static TimestampTz round_sealed_not_after;

/* A join round begins (join.c): the helpers act for req's attestor and CSR. */
void
bc_challenge_round_begin(const BcJoinRequest *req)
{
	round_active = true;
	strlcpy(round_attestor, req->attestor, sizeof(round_attestor));
	strlcpy(round_role, req->role, sizeof(round_role));
	memcpy(round_csr_sha256, req->csr_sha256, BC_SHA256_LEN);
	strlcpy(round_csr_sha256_b64, req->csr_sha256_b64, sizeof(round_csr_sha256_b64));
	round_sealed = false;
}

/* The join round is over. */
void
bc_challenge_round_end(void)
{
	round_active = false;
	round_sealed = false;
}

/* The notAfter of a state sealed in this round, when one was. */
bool
bc_challenge_sealed_not_after(TimestampTz *not_after)
{
	if (round_sealed)
		*not_after = round_sealed_not_after;
	return round_sealed;
}

/*
 * A registered attestor's challenge: its notAfter, recorded at the deferral
 * for the round's attestor and CSR (bc_join.challenge_deadlines; a new
 * challenge to the same CSR replaces it), and enforced at every final round
 * of that attestor for that CSR: past it, "<attestor>:challenge-expired",
 * whatever the attestor's own state says.  (The built-in tpm seals its
 * notAfter in the state instead and writes no row.)
 */
static BcPlan record_deadline = {
	"INSERT INTO bc_join.challenge_deadlines AS d (attestor, csr_sha256, not_after) "
	"VALUES ($1, $2, $3) ON CONFLICT (attestor, csr_sha256) DO UPDATE SET not_after = excluded.not_after",
	3, {TEXTOID, BYTEAOID, TIMESTAMPTZOID}
};

static BcPlan deadline_passed = {
	"SELECT not_after < bc_join.compute_now() FROM bc_join.challenge_deadlines "
	"WHERE attestor = $1 AND csr_sha256 = $2",
	2, {TEXTOID, BYTEAOID}
};

enum
{
	Anum_dp_passed = 1
};

/* Record the notAfter of a challenge the running round's attestor defers with. */
void
bc_challenge_deadline_record(const char *attestor, TimestampTz not_after)
{
	Datum		v[3];

	v[0] = CStringGetTextDatum(attestor);
	v[1] = PointerGetDatum(bc_bytea(round_csr_sha256, BC_SHA256_LEN));
	v[2] = TimestampTzGetDatum(not_after);
	bc_spi_exec(&record_deadline, v, NULL, false, 0);
}

/* A final round after a recorded challenge's notAfter: "<attestor>:challenge-expired". */
void
bc_challenge_deadline_check(const char *attestor, const char *tenant)
{
	Datum		v[2];

	v[0] = CStringGetTextDatum(attestor);
	v[1] = PointerGetDatum(bc_bytea(round_csr_sha256, BC_SHA256_LEN));
	if (bc_spi_exec(&deadline_passed, v, NULL, true, 1) == 1 && bc_spi_bool(Anum_dp_passed))
		bc_refuse_join(psprintf("%s:challenge-expired", attestor), tenant);
}

/* INVALID_CONFIG unless challenge.key is loaded. */
static const BcKeys *
challenge_keys(void)
{
	const BcKeys *k = bc_keys();

	if (!k->has_challenge)
		ereport(ERROR,
				(errcode(ERRCODE_BC_INVALID_CONFIG),
				 errmsg("bc_join has no challenge.key"),
				 errdetail("INVALID_CONFIG: a challenge's state is sealed under challenge.key in bc_join.key_dir."),
				 errhint("Create it with tools/bc-join-keygen, or with openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256.")));
	return k;
}

/* Seal payload for the running round's attestor and CSR, valid until not_after. */
char *
bc_challenge_seal(const char *attestor, TimestampTz not_after,
				  const unsigned char *payload, size_t n)
{
	const BcKeys *k = challenge_keys();
	StringInfoData env;
	size_t		alen = strlen(attestor);
	size_t		rlen = strlen(round_role);
	int64		na;
	unsigned char be[8];
	char	   *state = NULL;
	int			st;
	int			i;

	if (!round_active || strcmp(attestor, round_attestor) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("a challenge state can only be sealed by the attestor of the running join round")));
	/* Whole seconds: the signed response says notAfter to the second. */
	na = bc_timestamp_to_unix(not_after);
	not_after = time_t_to_timestamptz((pg_time_t) na);
	if (not_after <= bc_now() || not_after > bc_now() + (int64) CHALLENGE_TTL_MAX * USECS_PER_SEC)
		bc_invalid_input("a challenge's notAfter must lie within a day after compute_now()");

	initStringInfo(&env);
	appendBinaryStringInfo(&env, ENVELOPE_MAGIC, ENVELOPE_MAGIC_LEN);
	appendStringInfoChar(&env, (char) alen);
	appendBinaryStringInfo(&env, attestor, alen);
	appendBinaryStringInfo(&env, (const char *) round_csr_sha256, BC_SHA256_LEN);
	appendStringInfoChar(&env, (char) rlen);
	appendBinaryStringInfo(&env, round_role, rlen);
	for (i = 0; i < 8; i++)
		be[i] = (unsigned char) ((uint64) na >> (56 - 8 * i));
	appendBinaryStringInfo(&env, (const char *) be, 8);
	appendBinaryStringInfo(&env, (const char *) payload, n);

	if (k->challenge_pkey != NULL)
		st = bc_seal_state_p256(k->challenge_pkey, STATE_CONTEXT,
								(unsigned char *) env.data, env.len, &state);
	else
		st = bc_seal_state(k->challenge32, STATE_CONTEXT,
						   (unsigned char *) env.data, env.len, &state);
	OPENSSL_cleanse(env.data, env.len);
	if (st == BC_ETOOBIG)
		bc_invalid_input("a challenge state is over %d characters sealed", BC_STATE_MAX);
	if (st != BC_OK)
		bc_key_failed("seal a challenge state with challenge.key", k->challenge_pkey, st);
	round_sealed = true;
	round_sealed_not_after = not_after;
	return bc_take_cstring(state);
}

/*
 * Open a state for the running round's attestor: it must open and name this
 * attestor, CSR and role ("<attestor>:state-mismatch") and be unexpired
 * ("<attestor>:challenge-expired").  The attestor's payload in *payload.
 */
bytea *
bc_challenge_open(const char *attestor, const char *state, const char *tenant,
				  TimestampTz *not_after_out)
{
	const BcKeys *k = challenge_keys();
	unsigned char *pt = NULL;
	size_t		n = 0;
	size_t		off;
	size_t		alen;
	size_t		rlen;
	int64		na = 0;
	bytea	   *payload;
	bool		ok;
	int			st;
	int			i;
	char	   *mismatch;

	if (!round_active || strcmp(attestor, round_attestor) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("a challenge state can only be opened by the attestor of the running join round")));
	mismatch = psprintf("%s:state-mismatch", attestor);
	if (strlen(state) > BC_STATE_MAX)
		bc_refuse_join(mismatch, tenant);
	if (k->challenge_pkey != NULL)
		st = bc_open_state_p256(k->challenge_pkey, STATE_CONTEXT, state, strlen(state), &pt, &n);
	else
		st = bc_open_state(k->challenge32, STATE_CONTEXT, state, strlen(state), &pt, &n);
	/* A state that does not open is the requester's; challenge.key failing is not. */
	if (st != BC_OK && !bc_status_is_input(st))
		bc_key_failed("open a challenge state with challenge.key", k->challenge_pkey, st);
	if (st != BC_OK)
		bc_refuse_join(mismatch, tenant);

	/* The envelope: magic, attestor, CSR, role, notAfter. */
	alen = strlen(attestor);
	rlen = strlen(round_role);
	off = ENVELOPE_MAGIC_LEN;
	ok = n >= off + 1 + alen + BC_SHA256_LEN + 1 + rlen + 8 &&
		memcmp(pt, ENVELOPE_MAGIC, ENVELOPE_MAGIC_LEN) == 0 &&
		pt[off] == alen && memcmp(pt + off + 1, attestor, alen) == 0;
	if (ok)
	{
		off += 1 + alen;
		ok = CRYPTO_memcmp(pt + off, round_csr_sha256, BC_SHA256_LEN) == 0;
		off += BC_SHA256_LEN;
	}
	if (ok)
	{
		ok = pt[off] == rlen && memcmp(pt + off + 1, round_role, rlen) == 0;
		off += 1 + rlen;
	}
	if (ok)
	{
		for (i = 0; i < 8; i++)
			na = (int64) (((uint64) na << 8) | pt[off + i]);
		off += 8;
	}
	if (!ok)
	{
		bc_free_secret(pt, n + 1);
		bc_refuse_join(mismatch, tenant);
	}
	payload = bc_bytea(pt + off, n - off);
	bc_free_secret(pt, n + 1);

	if (bc_timestamp_to_unix(bc_now()) > na)
		bc_refuse_join(psprintf("%s:challenge-expired", attestor), tenant);
	if (not_after_out != NULL)
		*not_after_out = time_t_to_timestamptz((pg_time_t) na);
	return payload;
}

PG_FUNCTION_INFO_V1(bc_seal_challenge_state_sql);

/*
 * seal_challenge_state(attestor, plaintext jsonb, not_after): a state for
 * the running round's CSR and role, to hand out in a challenge deferral.
 */
Datum
bc_seal_challenge_state_sql(PG_FUNCTION_ARGS)
{
	char	   *attestor = text_to_cstring(PG_GETARG_TEXT_PP(0));
	Jsonb	   *pt = PG_GETARG_JSONB_P(1);
	TimestampTz na = PG_GETARG_TIMESTAMPTZ(2);
	char	   *text = JsonbToCString(NULL, &pt->root, VARSIZE(pt));

	PG_RETURN_TEXT_P(cstring_to_text(bc_challenge_seal(attestor, na, (unsigned char *) text,
													   strlen(text))));
}

PG_FUNCTION_INFO_V1(bc_open_challenge_state_sql);

/*
 * open_challenge_state(attestor, state): the plaintext sealed in the round
 * before, or the refusal (state-mismatch, challenge-expired).
 */
Datum
bc_open_challenge_state_sql(PG_FUNCTION_ARGS)
{
	char	   *attestor = text_to_cstring(PG_GETARG_TEXT_PP(0));
	char	   *state = text_to_cstring(PG_GETARG_TEXT_PP(1));
	bytea	   *payload = bc_challenge_open(attestor, state, NULL, NULL);
	char	   *s = text_to_cstring((text *) payload);

	PG_RETURN_JSONB_P(bc_jsonb(s));
}
