/*
 * seed-tool.c: make-corpus.sh's helper: seeds sealed to the fixed keys the
 * targets derive from their fixed seed (fuzz_common.c), so that the seeds
 * open.  Prints one seed on stdout.  Not a fuzz target.
 *
 *   seed-tool jwe CSRSHA256 PLAINTEXT    a sealed token (fuzz_jwe)
 *   seed-tool state PLAINTEXT            bc_seal_state, context tpm (fuzz_state)
 *   seed-tool state-p256 PLAINTEXT       bc_seal_state_p256, context tpm
 */
#include <stdio.h>
#include <string.h>

#include "bc_common.h"
#include "fuzz_common.h"

int
main(int argc, char **argv)
{
	char	   *out = NULL;
	int			rc = BC_EINVAL;

	if (argc == 4 && strcmp(argv[1], "jwe") == 0)
	{
		EVP_PKEY   *k = bc_fuzz_p256_key("encryption");

		rc = bc_jwe_seal(k, "csrSha256", argv[2], (const unsigned char *) argv[3],
						 strlen(argv[3]), &out);
		EVP_PKEY_free(k);
	}
	else if (argc == 3 && strcmp(argv[1], "state") == 0)
	{
		unsigned char key32[BC_STATE_KEY_LEN];

		bc_fuzz_secret32("challenge", key32);
		rc = bc_seal_state(key32, "tpm", (const unsigned char *) argv[2], strlen(argv[2]), &out);
	}
	else if (argc == 3 && strcmp(argv[1], "state-p256") == 0)
	{
		EVP_PKEY   *k = bc_fuzz_p256_key("challenge");

		rc = bc_seal_state_p256(k, "tpm", (const unsigned char *) argv[2], strlen(argv[2]), &out);
		EVP_PKEY_free(k);
	}
	else
	{
		fputs("usage: seed-tool jwe CSRSHA256 PT | state PT | state-p256 PT\n", stderr);
		return 2;
	}
	if (rc != BC_OK)
	{
		fprintf(stderr, "seed-tool: %s\n", bc_status_str(rc));
		return 1;
	}
	fputs(out, stdout);
	bc_free(out);
	return 0;
}
