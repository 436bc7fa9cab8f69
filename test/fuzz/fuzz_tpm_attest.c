/*
 * fuzz_tpm_attest.c: a TPMS_ATTEST from the tpm attestor's evidence
 * (certifyInfo, a quote): bc_tpm_attest_parse, then the certify check
 * against a fixed node key and the quote check against a fixed nonce and
 * PCR policy (keys/tpm-node.pub, from swtpm by make-corpus.sh).
 */
#include <stdlib.h>
#include <string.h>

#include "bc_common.h"
#include "bc_tpm.h"
#include "fuzz_common.h"

static bc_tpm_public node;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	size_t		n;
	unsigned char *b = bc_fuzz_read_file("keys/tpm-node.pub", BC_TPM_STRUCT_MAX, &n);

	(void) argc;
	(void) argv;
	BC_FUZZ_ASSERT(bc_tpm_public_parse(b, n, &node) == BC_OK);
	free(b);
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bc_tpm_attest att;
	static const unsigned char nonce[32] = {
		0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
		16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31};
	static unsigned char values[8 * 32];
	bc_tpm_pcr_bank bank;
	TPMT_SIGNATURE sig;
	const char *reason = NULL;
	int			rc = bc_tpm_attest_parse(data, size, &att);

	if (rc != BC_OK)
	{
		BC_FUZZ_ASSERT(rc == BC_EINVAL || rc == BC_ETOOBIG);
		return 0;
	}
	BC_FUZZ_ASSERT(att.len == size);
	(void) bc_tpm_check_certify(&att, &node, &reason);
	memset(&sig, 0, sizeof(sig));
	sig.sigAlg = TPM2_ALG_ECDSA;
	sig.signature.ecdsa.hash = TPM2_ALG_SHA256;
	memset(&bank, 0, sizeof(bank));
	bank.hash_alg = TPM2_ALG_SHA256;
	bank.pcrs = 0xff;
	bank.values = values;
	bank.values_len = sizeof(values);
	(void) bc_tpm_check_quote(&att, &sig, nonce, sizeof(nonce), NULL, 0, &reason);
	(void) bc_tpm_check_quote(&att, &sig, nonce, sizeof(nonce), &bank, 1, &reason);
	return 0;
}
