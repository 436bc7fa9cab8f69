/*
 * check_state.c: the state of a running bc_join.check_evidence() round
 * (check.c) and the calls the verifiers make into it: bc_checking,
 * bc_check_no_csr, bc_check_no_token and bc_check_note.  Outside a check
 * the first three are false and the last does nothing.  A leaf: the
 * attestors call it, and check.c calls the attestors (through registry.c and
 * join.c), so this state lives in neither.
 */
#include "bc_join.h"

#include "utils/json.h"
#include "utils/memutils.h"

/* The running check: its memory (the call's), what is absent, what was read and left out. */
static bool checking = false;
static bool check_no_csr = false;
static MemoryContext check_cxt = NULL;
static StringInfo check_read = NULL;	/* JSON members */
static StringInfo check_unchecked = NULL;	/* JSON strings */

/*
 * A check begins: what the verifiers note goes in cxt (the call's memory,
 * which the round's rolled-back subtransaction does not take along);
 * no_csr when the operator gave no CSR.
 */
void
bc_check_begin(MemoryContext cxt, bool no_csr)
{
	MemoryContext old = MemoryContextSwitchTo(cxt);

	check_read = makeStringInfo();
	check_unchecked = makeStringInfo();
	MemoryContextSwitchTo(old);
	check_cxt = cxt;
	check_no_csr = no_csr;
	checking = true;
}

/* The check ended (also on an error): the calls above are no-ops again. */
void
bc_check_end(void)
{
	checking = false;
	check_no_csr = false;
}

/* What the verifiers read, as JSON members (the last check's, in its memory). */
const char *
bc_check_read(void)
{
	return check_read != NULL ? check_read->data : "";
}

/* What was left unchecked, as JSON strings (the last check's, in its memory). */
const char *
bc_check_unchecked(void)
{
	return check_unchecked != NULL ? check_unchecked->data : "";
}

/* True while a check_evidence() round runs. */
bool
bc_checking(void)
{
	return checking;
}

/* Note one unchecked step in the answer (the call's memory: the subtransaction's goes). */
static void
note_unchecked(const char *what)
{
	MemoryContext old = MemoryContextSwitchTo(check_cxt);

	if (check_unchecked->len > 0)
		appendStringInfoChar(check_unchecked, ',');
	escape_json(check_unchecked, what);
	MemoryContextSwitchTo(old);
}

/*
 * In a check without a CSR, the check `what` (a binding of the evidence to
 * the request's CSR) cannot be made: noted, and true (the caller goes on).
 * Anywhere else false: the caller checks as always.
 */
bool
bc_check_no_csr(const char *what)
{
	if (!checking || !check_no_csr)
		return false;
	note_unchecked(psprintf("%s (no CSR given)", what));
	return true;
}

/*
 * In a check, which brings no sealed join token, the check `what` (one a
 * token would satisfy) is not made: noted, and true.  Anywhere else false.
 */
bool
bc_check_no_token(const char *what)
{
	if (!checking)
		return false;
	note_unchecked(psprintf("%s (no sealed join token given)", what));
	return true;
}

/* What a verifier read, for the answer's "read" (the last value of a key counts). */
void
bc_check_note(const char *key, const char *value)
{
	MemoryContext old;

	if (!checking || value == NULL)
		return;
	old = MemoryContextSwitchTo(check_cxt);
	if (check_read->len > 0)
		appendStringInfoChar(check_read, ',');
	escape_json(check_read, key);
	appendStringInfoChar(check_read, ':');
	escape_json(check_read, value);
	MemoryContextSwitchTo(old);
}
