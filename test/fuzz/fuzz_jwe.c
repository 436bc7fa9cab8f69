/*
 * fuzz_jwe.c: bc_jwe_open, what the JoinService runs on a request's
 * sealedToken, with a fixed private key (derived from a fixed seed,
 * fuzz_common.c; make-corpus.sh seals the seeds to its public half) and
 * the header member the service asks for (csrSha256).
 */
#include <stdlib.h>
#include <string.h>

#include "bc_common.h"
#include "fuzz_common.h"

static EVP_PKEY *priv;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void) argc;
	(void) argv;
	priv = bc_fuzz_p256_key("encryption");
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *hdr = NULL;
	unsigned char *pt = NULL;
	size_t		len = 0;
	/* the service's bound of a token, or none asked for */
	const char *want = size > 0 && (data[0] & 1) ? NULL : "csrSha256";
	int			rc = bc_jwe_open(priv, (const char *) data, size, 256, want, &hdr, &pt, &len);

	if (rc == BC_OK)
	{
		BC_FUZZ_ASSERT(pt != NULL && len <= 256 && pt[len] == '\0');
		BC_FUZZ_ASSERT(want == NULL || hdr != NULL);
		bc_free_secret(pt, len + 1);
		bc_free(hdr);
	}
	else
		BC_FUZZ_ASSERT(rc == BC_EINVAL || rc == BC_EVERIFY || rc == BC_EUNSUPPORTED ||
					   rc == BC_ETOOBIG);
	return 0;
}
