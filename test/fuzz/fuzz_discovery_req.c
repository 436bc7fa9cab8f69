/*
 * fuzz_discovery_req.c: the request line a ramdisk (anyone on the
 * provisioning network) sends bcd serve-discovery, parsed by
 * bcd_discovery_parse_request (core/discovery_assertion.c).  Accepted
 * means: a verifying CSR and a valid MAC came out; refused leaves nothing
 * to free.
 */
#include <stdlib.h>
#include <string.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "core/discovery_assertion.h"
#include "fuzz_common.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned char *csr = NULL;
	size_t		csr_len = 99;
	char		mac[18];
	bc_csr	   *req = NULL;

	if (bcd_discovery_parse_request((const char *) data, size, &csr, &csr_len, mac) == BC_OK)
	{
		BC_FUZZ_ASSERT(csr != NULL && csr_len > 0 && bc_mac_valid(mac));
		BC_FUZZ_ASSERT(bc_csr_parse(csr, csr_len, &req) == BC_OK && bc_csr_verify_pop(req) == BC_OK);
		bc_csr_free(req);
		free(csr);
	}
	else
		BC_FUZZ_ASSERT(csr == NULL && csr_len == 0);
	return 0;
}
