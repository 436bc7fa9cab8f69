/*
 * fuzz_producer_output.c: what bcd reads of an external producer's stdout
 * (producers/exec.c, bcd_exec_output_parse), the answer of an executable
 * the operator named, which may be buggy, hostile or half-written.  Whatever
 * comes in: no crash, no leak; on success the attestation is non-empty
 * canonical base64url within the service's bound and the claims an object
 * within its bound; on failure nothing is returned and the reason is a
 * NUL-terminated line.
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "fuzz_common.h"
#include "producers/exec.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char		err[256];
	char	   *att = (char *) "unset";
	json_t	   *claims = (json_t *) 1;
	int			rc;

	memset(err, 'x', sizeof(err));
	rc = bcd_exec_output_parse((const char *) data, size, &att, &claims, err, sizeof(err));
	BC_FUZZ_ASSERT(rc == BC_OK || rc == BC_EINVAL || rc == BC_ENOMEM);
	if (rc != BC_OK)
	{
		BC_FUZZ_ASSERT(att == NULL && claims == NULL);
		BC_FUZZ_ASSERT(rc == BC_ENOMEM || memchr(err, '\0', sizeof(err)) != NULL);
		return 0;
	}
	BC_FUZZ_ASSERT(size <= BCD_EXEC_OUTPUT_MAX);
	BC_FUZZ_ASSERT(att != NULL && att[0] != '\0' && strlen(att) <= BC_ATTESTATION_B64_MAX);
	{
		size_t		n = strlen(att);
		size_t		cap = bc_b64url_decoded_maxlen(n) + 1;
		unsigned char *raw = malloc(cap);
		size_t		raw_len = 0;
		char	   *again;

		BC_FUZZ_ASSERT(raw != NULL);
		BC_FUZZ_ASSERT(bc_b64url_decode(att, n, raw, cap, &raw_len) == BC_OK);
		again = bc_b64url_encode_alloc(raw, raw_len);
		BC_FUZZ_ASSERT(again != NULL && strcmp(again, att) == 0);
		free(again);
		free(raw);
	}
	if (claims != NULL)
	{
		char	   *text = json_dumps(claims, JSON_COMPACT);

		BC_FUZZ_ASSERT(json_is_object(claims));
		BC_FUZZ_ASSERT(text != NULL && strlen(text) <= BCD_EXEC_CLAIMS_MAX);
		free(text);
		json_decref(claims);
	}
	free(att);
	return 0;
}
