/*
 * fuzz_state.c: sealed challenge state coming back in a request, opened
 * with a fixed key (from a fixed seed): bc_open_state (a 32-byte key) and
 * bc_open_state_p256 (a P-256 challenge.key), for the context "tpm".
 * The first byte chooses which; the rest is the state.
 */
#include "bc_common.h"
#include "fuzz_common.h"

static unsigned char key32[BC_STATE_KEY_LEN];
static EVP_PKEY *p256;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void) argc;
	(void) argv;
	bc_fuzz_secret32("challenge", key32);
	p256 = bc_fuzz_p256_key("challenge");
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned char *pt = NULL;
	size_t		len = 0;
	int			rc;

	if (size == 0)
		return 0;
	if (data[0] & 1)
		rc = bc_open_state_p256(p256, "tpm", (const char *) data + 1, size - 1, &pt, &len);
	else
		rc = bc_open_state(key32, "tpm", (const char *) data + 1, size - 1, &pt, &len);
	if (rc == BC_OK)
	{
		BC_FUZZ_ASSERT(pt != NULL && pt[len] == '\0' && size - 1 <= BC_STATE_MAX);
		bc_free_secret(pt, len + 1);
	}
	else
		BC_FUZZ_ASSERT(rc == BC_EINVAL || rc == BC_EVERIFY || rc == BC_ETOOBIG ||
					   rc == BC_EUNSUPPORTED);
	return 0;
}
