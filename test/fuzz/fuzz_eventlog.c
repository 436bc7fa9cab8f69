/*
 * fuzz_eventlog.c: the measured-boot event log and the IMA binary list
 * (src/common/eventlog.c), both from the same input: bc_evlog_parse and,
 * when it parses, the replay of every bank its SpecID lists and each
 * event's data hash; bc_ima_parse and, when it parses, the replay of each
 * bank with and without a wanted PCR 10.  Properties: every refusal has a reason and leaves nothing
 * allocated; every parsed event or entry lies inside the input.
 */
#include <stdlib.h>
#include <string.h>

#include "eventlog.h"
#include "fuzz_common.h"

/* True when [p, p+n) lies inside [data, data+size). */
static int
inside(const uint8_t *data, size_t size, const void *p, size_t n)
{
	const uint8_t *q = p;

	return n == 0 || (q >= data && n <= size && q - data <= (ptrdiff_t) (size - n));
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint16_t banks[] = {BC_EVLOG_ALG_SHA1, BC_EVLOG_ALG_SHA256,
	BC_EVLOG_ALG_SHA384, BC_EVLOG_ALG_SHA512};
	static unsigned char pcrs[BC_EVLOG_NUM_PCRS][BC_EVLOG_MAX_DIGEST];
	bc_evlog	log;
	bc_ima_entry *e = NULL;
	size_t		n = 0;
	const char *why = NULL;
	int			rc;

	rc = bc_evlog_parse(data, size, &log, &why);
	if (rc != BC_OK)
		BC_FUZZ_ASSERT(why != NULL && log.events == NULL && log.n_events == 0);
	else
	{
		BC_FUZZ_ASSERT(log.n_events >= 1 && log.n_events <= BC_EVLOG_MAX_EVENTS);
		for (size_t i = 0; i < log.n_events; i++)
		{
			BC_FUZZ_ASSERT(log.events[i].pcr < BC_EVLOG_NUM_PCRS);
			BC_FUZZ_ASSERT(inside(data, size, log.events[i].data, log.events[i].data_len));
			for (int d = 0; d < log.events[i].n_digests; d++)
			{
				int			m;

				BC_FUZZ_ASSERT(bc_evlog_data_matches(&log.events[i], log.events[i].digests[d].alg, &m) == BC_OK);
			}
		}
		for (int b = 0; b < log.n_algs; b++)
		{
			uint32_t	mask;

			why = NULL;
			rc = bc_evlog_replay(&log, log.algs[b].alg, pcrs, &mask, &why);
			BC_FUZZ_ASSERT(rc == BC_OK || (rc == BC_EINVAL && why != NULL));
		}
		bc_evlog_free(&log);
	}

	why = NULL;
	rc = bc_ima_parse(data, size, &e, &n, &why);
	if (rc != BC_OK)
		BC_FUZZ_ASSERT(why != NULL && e == NULL && n == 0);
	else
	{
		BC_FUZZ_ASSERT(n <= BC_IMA_MAX_ENTRIES && (n == 0) == (e == NULL));
		for (size_t i = 0; i < n; i++)
		{
			BC_FUZZ_ASSERT(inside(data, size, e[i].data, e[i].data_len));
			BC_FUZZ_ASSERT(inside(data, size, e[i].path, e[i].path_len + 1));
			BC_FUZZ_ASSERT(e[i].path[e[i].path_len] == '\0' && strlen(e[i].path) == e[i].path_len);
			BC_FUZZ_ASSERT(e[i].file_digest_len >= 1 && e[i].file_digest_len <= BC_EVLOG_MAX_DIGEST);
		}
		for (size_t b = 0; b < sizeof(banks) / sizeof(banks[0]); b++)
		{
			unsigned char pcr10[BC_EVLOG_MAX_DIGEST] = {0},
						want[BC_EVLOG_MAX_DIGEST] = {0};
			long		at;

			rc = bc_ima_replay(e, n, banks[b], pcr10, NULL, &at, &why);
			BC_FUZZ_ASSERT(rc == BC_OK || (rc == BC_EVERIFY && why != NULL));
			if (rc == BC_OK)
			{
				BC_FUZZ_ASSERT(at == -1);
				memcpy(want, pcr10, sizeof(want));
				memset(pcr10, 0, sizeof(pcr10));
				rc = bc_ima_replay(e, n, banks[b], pcr10, want, &at, &why);
				BC_FUZZ_ASSERT(rc == BC_OK && at >= 0 && (size_t) at <= n &&
							   memcmp(pcr10, want, sizeof(want)) == 0);
			}
		}
		free(e);
	}
	return 0;
}
