/*
 * attest_rules.c: the pure decisions of continuous attestation
 * (attest_rules.h; the loop is attest.c).
 */
#include <string.h>

#include <tss2/tss2_tpm2_types.h>

#include "bc_protocol.h"
#include "core/attest_rules.h"

/* Seconds until the next round, from the service's member (attest_rules.h). */
long
bcd_attest_interval(const json_t *v, long fallback)
{
	json_int_t	n;

	if (!json_is_integer(v))
		return fallback;
	n = json_integer_value(v);
	if (n < BC_ATTEST_INTERVAL_MIN)
		return BC_ATTEST_INTERVAL_MIN;
	if (n > BC_ATTEST_INTERVAL_MAX)
		return BC_ATTEST_INTERVAL_MAX;
	return (long) n;
}

static const struct
{
	const char *name;
	uint16_t	alg;
}			banks[] = {
	{"sha1", TPM2_ALG_SHA1}, {"sha256", TPM2_ALG_SHA256},
	{"sha384", TPM2_ALG_SHA384}, {"sha512", TPM2_ALG_SHA512},
};

/* The name of a bank's algorithm id (attest_rules.h). */
const char *
bcd_attest_bank_name(uint16_t alg)
{
	for (size_t i = 0; i < sizeof(banks) / sizeof(banks[0]); i++)
		if (banks[i].alg == alg)
			return banks[i].name;
	return NULL;
}

/* The challenge's PCR selection (attest_rules.h). */
int
bcd_attest_selection(const json_t *pcrs, const char *bank, uint16_t *alg, uint32_t *mask,
					 const char **why)
{
	size_t		i;
	const json_t *v;

	*alg = 0;
	*mask = 0;
	for (i = 0; bank != NULL && i < sizeof(banks) / sizeof(banks[0]); i++)
		if (strcmp(bank, banks[i].name) == 0)
			*alg = banks[i].alg;
	if (*alg == 0)
	{
		*why = "the challenge's bank is not sha1, sha256, sha384 or sha512";
		return -1;
	}
	if (!json_is_array(pcrs) || json_array_size(pcrs) == 0 || json_array_size(pcrs) > 24)
	{
		*why = "the challenge's pcrs is not an array of 1 to 24 PCRs";
		return -1;
	}
	json_array_foreach(pcrs, i, v)
	{
		json_int_t	n = json_is_integer(v) ? json_integer_value(v) : -1;

		if (n < 0 || n > 23 || (*mask & (1u << n)))
		{
			*why = "the challenge's pcrs holds something else than distinct PCRs 0..23";
			*mask = 0;
			return -1;
		}
		*mask |= 1u << n;
	}
	return 0;
}

/* A little-endian u32 at p. */
static uint32_t
le32(const unsigned char *p)
{
	return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24;
}

/* The whole IMA entries at the start of buf (attest_rules.h). */
long
bcd_ima_whole_entries(const unsigned char *buf, size_t len, long max_entries, size_t max_bytes,
					  size_t *used)
{
	size_t		off = 0;
	long		n = 0;

	*used = 0;
	while (n < max_entries)
	{
		size_t		at = off;
		uint32_t	name_len;
		uint32_t	data_len;

		/* pcr, template digest, name_len */
		if (len - at < 4 + 20 + 4)
			break;
		name_len = le32(buf + at + 24);
		if (name_len == 0 || name_len > BCD_IMA_NAME_MAX)
			return -1;
		at += 28;
		if (len - at < (size_t) name_len + 4)
			break;
		at += name_len;
		data_len = le32(buf + at);
		at += 4;
		if (data_len > max_bytes)
			return -1;
		if (len - at < data_len)
			break;
		at += data_len;
		if (at > max_bytes)
			break;
		off = at;
		n++;
	}
	*used = off;
	return n;
}

/* The node's state after a second round (attest_rules.h). */
bcd_attest_state
bcd_attest_decide(bcd_attest_state cur, bcd_rc rc, const char *status)
{
	if (rc != BCD_RC_OK || status == NULL)
		return cur;
	if (strcmp(status, BC_STATUS_ATTESTED) == 0)
		return BCD_ATTEST_HEALTHY;
	if (strcmp(status, BC_STATUS_QUARANTINED) == 0)
		return BCD_ATTEST_QUARANTINED;
	return cur;
}
