/*
 * fuzz_jws.c: bc_jws_verify_es256, what bcd runs on every answer of a
 * (hostile) gateway, against a fixed key: the real signing key of the
 * service that signed the seed responses (its public JWK committed in
 * keys/service-keys.json by make-corpus.sh).
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "bc_common.h"
#include "fuzz_common.h"

static EVP_PKEY *pinned;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	size_t		n;
	unsigned char *text = bc_fuzz_read_file("keys/service-keys.json", 64 * 1024, &n);
	json_t	   *doc = json_loadb((const char *) text, n, 0, NULL);

	(void) argc;
	(void) argv;
	BC_FUZZ_ASSERT(doc != NULL);
	BC_FUZZ_ASSERT(bc_pkey_from_jwk_object(json_object_get(doc, "signingKey"), &pinned) == BC_OK);
	json_decref(doc);
	free(text);
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned char *payload = NULL;
	size_t		len = 0;
	/* the bound bcd uses, and a small one */
	size_t		max = size > 0 && (data[0] & 1) ? 64 : BC_JOSE_MAX;
	int			rc = bc_jws_verify_es256(pinned, (const char *) data, size, max, &payload, &len);

	if (rc == BC_OK)
	{
		BC_FUZZ_ASSERT(payload != NULL && len <= max && payload[len] == '\0');
		bc_free(payload);
	}
	else
		BC_FUZZ_ASSERT(rc == BC_EINVAL || rc == BC_EVERIFY || rc == BC_EUNSUPPORTED ||
					   rc == BC_ETOOBIG);
	return 0;
}
