/*
 * fuzz_tpm_signature.c: a TPMT_SIGNATURE from the tpm attestor's evidence:
 * bc_tpm_signature_parse, then the AK's signature check over a fixed
 * certifyInfo with a fixed AK (keys/tpm-ak.pub, keys/tpm-certify.attest,
 * from swtpm by make-corpus.sh; the seed signature verifies).
 */
#include <stdlib.h>

#include "bc_common.h"
#include "bc_tpm.h"
#include "fuzz_common.h"

static bc_tpm_public ak;
static bc_tpm_attest att;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	size_t		n;
	unsigned char *b = bc_fuzz_read_file("keys/tpm-ak.pub", BC_TPM_STRUCT_MAX, &n);

	(void) argc;
	(void) argv;
	BC_FUZZ_ASSERT(bc_tpm_public_parse(b, n, &ak) == BC_OK);
	free(b);
	b = bc_fuzz_read_file("keys/tpm-certify.attest", BC_TPM_STRUCT_MAX, &n);
	BC_FUZZ_ASSERT(bc_tpm_attest_parse(b, n, &att) == BC_OK);
	free(b);
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	TPMT_SIGNATURE sig;
	const char *reason = NULL;
	int			rc = bc_tpm_signature_parse(data, size, &sig);

	if (rc != BC_OK)
	{
		BC_FUZZ_ASSERT(rc == BC_EINVAL || rc == BC_ETOOBIG);
		return 0;
	}
	rc = bc_tpm_verify_attest(&ak, &att, &sig, &reason);
	BC_FUZZ_ASSERT(rc == BC_OK || reason != NULL);
	return 0;
}
