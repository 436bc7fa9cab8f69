/*
 * fuzz_tpm_public.c: a TPM2B_PUBLIC from the tpm attestor's evidence (EK,
 * AK, node key): bc_tpm_public_parse, then what the attestor does with a
 * parsed one: its Name, its key, the EK, AK and node-key checks.
 */
#include "bc_common.h"
#include "bc_tpm.h"
#include "fuzz_common.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bc_tpm_public pub;
	unsigned char name[BC_TPM_NAME_MAX];
	unsigned char spki_h[BC_SHA256_LEN];
	size_t		name_len = 0;
	const char *reason = NULL;
	EVP_PKEY   *key = NULL;
	int			rc = bc_tpm_public_parse(data, size, &pub);

	if (rc != BC_OK)
	{
		BC_FUZZ_ASSERT(rc == BC_EINVAL || rc == BC_ETOOBIG);
		return 0;
	}
	BC_FUZZ_ASSERT(pub.len + 2 == size);
	(void) bc_tpm_name(&pub, name, &name_len);
	if (bc_tpm_public_pkey(&pub, &key) == BC_OK)
	{
		(void) bc_tpm_node_key_matches(&pub, key, &reason);
		EVP_PKEY_free(key);
	}
	(void) bc_tpm_ek_spki_sha256(&pub, spki_h);
	(void) bc_tpm_check_ek(&pub, &reason);
	(void) bc_tpm_check_ak(&pub, &reason);
	(void) bc_tpm_check_node_key(&pub, &reason);
	return 0;
}
