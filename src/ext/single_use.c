/*
 * single_use.c: the bookkeeping that lets JoinService refuse to commit a
 * deferring round that consumed single-use evidence (a row in
 * attestation_uses, a token use, a join request): triggers and helpers
 * count what the running round consumed.
 */
#include "bc_join.h"

#include "commands/trigger.h"
#include "fmgr.h"
#include "utils/builtins.h"

/* Single-use evidence consumed since the running round began. */
static int	single_use_count = 0;

/* A join round begins: nothing consumed yet. */
void
bc_single_use_reset(void)
{
	single_use_count = 0;
}

/* Whether the running round consumed single-use evidence. */
bool
bc_single_use_consumed(void)
{
	return single_use_count > 0;
}

PG_FUNCTION_INFO_V1(bc_note_single_use);

/* Trigger on attestation_uses and join_tokens.uses_left: evidence consumed. */
Datum
bc_note_single_use(PG_FUNCTION_ARGS)
{
	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "bc_join.note_single_use() is a trigger");
	single_use_count++;
	return PointerGetDatum(NULL);
}

PG_FUNCTION_INFO_V1(bc_note_single_use_round);

/* note_single_use_round(): the same, for a consumption no trigger sees. */
Datum
bc_note_single_use_round(PG_FUNCTION_ARGS)
{
	single_use_count++;
	PG_RETURN_VOID();
}

/* ------------------------------------------------ the join round, repeats */

/*
 * The join round running in this backend: its CSR (what a row of
 * attestation_uses written in it records, through the column's default
 * bc_join.join_round_csr_sha256()) and, when it repeats a final round, the
 * certificate it asks for again.  A use spent by the round that issued
 * that certificate carries the same CSR: in the repeat, and only there, it
 * counts as this round's own (found spent by this very certificate).
 */
static bool join_round_active = false;
static unsigned char join_round_csr[BC_SHA256_LEN];
static const BcRepeat *join_round_repeat = NULL;

static BcPlan spent_by_csr = {
	"SELECT 1 FROM bc_join.attestation_uses "
	"WHERE attestor = $1 AND subject = $2 AND csr_sha256 = $3",
	3, {TEXTOID, BYTEAOID, BYTEAOID}
};

/* A join round begins: its CSR; no repeat yet. */
void
bc_join_round_begin(const BcJoinRequest *req)
{
	memcpy(join_round_csr, req->csr_sha256, BC_SHA256_LEN);
	join_round_repeat = NULL;
	join_round_active = true;
}

/* The running join round repeats req->repeat. */
void
bc_join_round_repeat(const BcJoinRequest *req)
{
	join_round_repeat = req->repeat;
}

/* The join round is over. */
void
bc_join_round_end(void)
{
	join_round_active = false;
	join_round_repeat = NULL;
}

/* The repeat the running join round is, or NULL. */
const BcRepeat *
bc_round_repeat(void)
{
	return join_round_active ? join_round_repeat : NULL;
}

/* In a repeat: (attestor, subject) was spent with this very CSR. */
bool
bc_spent_by_repeat(const char *attestor, const unsigned char subject[BC_SHA256_LEN])
{
	Datum		v[3];

	if (bc_round_repeat() == NULL)
		return false;
	v[0] = CStringGetTextDatum(attestor);
	v[1] = PointerGetDatum(bc_bytea(subject, BC_SHA256_LEN));
	v[2] = PointerGetDatum(bc_bytea(join_round_csr, BC_SHA256_LEN));
	return bc_spi_exec(&spent_by_csr, v, NULL, true, 1) == 1;
}

PG_FUNCTION_INFO_V1(bc_join_round_csr_sha256);

/*
 * join_round_csr_sha256(repeat_only boolean DEFAULT false): the SHA-256 of
 * the running join round's CSR, NULL outside one (or, with repeat_only,
 * outside a repeat).
 */
Datum
bc_join_round_csr_sha256(PG_FUNCTION_ARGS)
{
	bool		repeat_only = PG_NARGS() > 0 && !PG_ARGISNULL(0) && PG_GETARG_BOOL(0);

	if (!join_round_active || (repeat_only && join_round_repeat == NULL))
		PG_RETURN_NULL();
	PG_RETURN_BYTEA_P(bc_bytea(join_round_csr, BC_SHA256_LEN));
}
