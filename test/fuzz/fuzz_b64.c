/*
 * fuzz_b64.c: the base64url decoder (every JoinRequest field, every JOSE
 * part) and the padded base64 decoder (certificateChain), with their
 * properties: what decodes re-encodes to the same text, and the bound holds.
 */
#include <stdlib.h>
#include <string.h>

#include "bc_common.h"
#include "fuzz_common.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *in = (const char *) data;
	size_t		cap = bc_b64url_decoded_maxlen(size);
	unsigned char *out = malloc(cap + 1);
	size_t		outlen = 0;
	int			rc;

	BC_FUZZ_ASSERT(out != NULL);
	rc = bc_b64url_decode(in, size, out, cap, &outlen);
	if (rc == BC_OK)
	{
		char	   *again = bc_b64url_encode_alloc(out, outlen);

		BC_FUZZ_ASSERT(outlen <= cap);
		BC_FUZZ_ASSERT(again != NULL && strlen(again) == size && memcmp(again, in, size) == 0);
		bc_free(again);
		/* one byte short of room is refused, never overrun */
		if (outlen > 0)
			BC_FUZZ_ASSERT(bc_b64url_decode(in, size, out, outlen - 1, &outlen) == BC_ETOOBIG);
	}
	else
		BC_FUZZ_ASSERT(rc == BC_EINVAL || rc == BC_ETOOBIG);

	rc = bc_b64_decode(in, size, out, cap, &outlen);
	if (rc == BC_OK)
	{
		char	   *again = malloc(bc_b64_encoded_len(outlen) + 1);

		BC_FUZZ_ASSERT(again != NULL && outlen <= cap);
		bc_b64_encode(out, outlen, again);
		BC_FUZZ_ASSERT(strlen(again) == size && memcmp(again, in, size) == 0);
		free(again);
	}
	free(out);
	return 0;
}
