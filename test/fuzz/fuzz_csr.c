/*
 * fuzz_csr.c: a JoinRequest's CSR as the JoinService takes it: bc_csr_parse
 * (DER, P-256 only, no trailing bytes), then the proof of possession
 * (bc_csr_verify_pop) and the key hash.
 */
#include "bc_common.h"
#include "fuzz_common.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	bc_csr	   *csr = NULL;
	unsigned char h[BC_SHA256_LEN];
	int			rc = bc_csr_parse(data, size, &csr);

	if (rc != BC_OK)
	{
		BC_FUZZ_ASSERT(csr == NULL);
		return 0;
	}
	BC_FUZZ_ASSERT(bc_pkey_is_p256(bc_csr_pubkey(csr)));
	rc = bc_csr_verify_pop(csr);
	BC_FUZZ_ASSERT(rc == BC_OK || rc == BC_EVERIFY || rc == BC_EINVAL || rc == BC_EUNSUPPORTED);
	BC_FUZZ_ASSERT(bc_csr_spki_sha256(csr, h) == BC_OK);
	bc_csr_free(csr);
	return 0;
}
