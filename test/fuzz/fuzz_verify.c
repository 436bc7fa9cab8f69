/*
 * fuzz_verify.c: bcd's verification of an answer of a hostile gateway
 * (core/verify.c, bcd_answer_verify), against fixed pinned keys and a fixed
 * CSR: the real service keys and node CSR of make-corpus.sh's join
 * (keys/service-keys.json, keys/node.csr.der, public).  The seed answers
 * are the service's real answers to that CSR (issued, refused).
 */
#include <stdio.h>
#include <stdlib.h>

#include "bc_common.h"
#include "core/service_keys.h"
#include "core/verify.h"
#include "fuzz_common.h"

static bcd_service_keys keys;
static unsigned char *csr;
static size_t csr_len;
static EVP_PKEY *node_key;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char		err[512];
	bc_csr	   *parsed = NULL;

	(void) argc;
	(void) argv;
	if (bcd_service_keys_load(bc_fuzz_path("keys/service-keys.json"), &keys, err, sizeof(err)) != 0)
	{
		fprintf(stderr, "%s\n", err);
		abort();
	}
	csr = bc_fuzz_read_file("keys/node.csr.der", BC_DER_MAX, &csr_len);
	BC_FUZZ_ASSERT(bc_csr_parse(csr, csr_len, &parsed) == BC_OK);
	/* the node key's public half: what verify compares the leaf with */
	node_key = bc_csr_pubkey(parsed);
	BC_FUZZ_ASSERT(EVP_PKEY_up_ref(node_key) == 1);
	bc_csr_free(parsed);
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	bcd_answer	ans;
	char		err[1024];
	bcd_rc		rc;

	rc = bcd_answer_verify(&keys, (const char *) data, size, csr, csr_len, node_key, &ans,
						   err, sizeof(err));
	BC_FUZZ_ASSERT(rc == BCD_RC_OK || rc == BCD_RC_DEFERRED || rc == BCD_RC_REFUSED ||
				   rc == BCD_RC_FAILED);
	if (rc == BCD_RC_OK)
		BC_FUZZ_ASSERT(ans.leaf != NULL && ans.chain_pem != NULL && ans.spiffe_id != NULL);
	bcd_answer_free(&ans);
	return 0;
}
