/*
 * attest_rules.h: the pure decisions of continuous attestation
 * (core/attest.c): the interval the service sets, the PCR selection a
 * challenge asks for, whole entries of the IMA binary list, and what an
 * answer does to the node's state.  No TPM, no I/O
 * (test/unit/test_bcd_attest.c).
 */
#ifndef BCD_ATTEST_RULES_H
#define BCD_ATTEST_RULES_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "core/outcome.h"

/*
 * Seconds until the next attestation from the service's member v
 * ("intervalSeconds", "nextSeconds"): an integer clamped to
 * [BC_ATTEST_INTERVAL_MIN, BC_ATTEST_INTERVAL_MAX]; fallback when v is
 * absent or not an integer.
 */
long		bcd_attest_interval(const json_t *v, long fallback);

/*
 * The challenge's "pcrs" (an array of 1 to 24 distinct integers 0..23) and
 * "bank" ("sha1", "sha256", "sha384", "sha512") as a TPM algorithm id and a
 * mask (bit i: PCR i).  0, or -1 with *why.
 */
int			bcd_attest_selection(const json_t *pcrs, const char *bank, uint16_t *alg,
								 uint32_t *mask, const char **why);

/* The name of a TPM algorithm id of a PCR bank ("sha256"), or NULL. */
const char *bcd_attest_bank_name(uint16_t alg);

/* An IMA template name's bound (TCG_EVENT_NAME_LEN_MAX). */
#define BCD_IMA_NAME_MAX 255

/*
 * The whole entries at the start of buf (len bytes) of an IMA binary
 * measurement list (little-endian: pcr u32, template digest[20], name_len
 * u32, name, data_len u32, data), at most max_entries of them and at most
 * max_bytes in all: their number, *used their bytes; -1 when an entry is
 * malformed (a name of 0 or over BCD_IMA_NAME_MAX bytes, data over
 * max_bytes).  What follows the last whole entry is not looked at.
 */
long		bcd_ima_whole_entries(const unsigned char *buf, size_t len, long max_entries,
								  size_t max_bytes, size_t *used);

/* What an attestation round did to the node (bcd_attest_decide). */
typedef enum bcd_attest_state
{
	BCD_ATTEST_UNKNOWN = 0,		/* not attested yet, or no answer since */
	BCD_ATTEST_HEALTHY,			/* the last quote was attested */
	BCD_ATTEST_QUARANTINED		/* the service quarantined the node */
} bcd_attest_state;

/*
 * The node's state after a second round ended with rc (BCD_RC_OK with the
 * signed status, else a refusal, no answer or a bad answer) from state
 * cur: attested makes it healthy, quarantined quarantines it; anything else
 * (a refusal, which proves nothing about the machine; no answer; an
 * answer that does not verify) leaves it as it was.
 */
bcd_attest_state bcd_attest_decide(bcd_attest_state cur, bcd_rc rc, const char *status);

#endif							/* BCD_ATTEST_RULES_H */
