/*
 * fuzz_rollover.c: bcd taking up a service-keys rollover from a hostile
 * gateway (core/service_keys.c, bcd_service_keys_rollover: the body of
 * GET /v1/service-keys), against fixed pinned keys (keys/service-keys.json,
 * public).  Without the service's private key no input may be taken up: the
 * pinned set never changes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bc_common.h"
#include "core/service_keys.h"
#include "fuzz_common.h"

static bcd_service_keys keys;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char		err[512];

	(void) argc;
	(void) argv;
	if (bcd_service_keys_load(bc_fuzz_path("keys/service-keys.json"), &keys, err, sizeof(err)) != 0)
	{
		fprintf(stderr, "%s\n", err);
		abort();
	}
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char		err[512];
	int			rc;

	rc = bcd_service_keys_rollover(&keys, (const char *) data, size, err, sizeof(err));
	/* Nothing the fuzzer can make is signed by the pinned key. */
	BC_FUZZ_ASSERT(rc != BC_OK);
	BC_FUZZ_ASSERT(memchr(err, '\0', sizeof(err)) != NULL);
	return 0;
}
