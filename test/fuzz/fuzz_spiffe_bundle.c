/*
 * fuzz_spiffe_bundle.c: another trust domain's SPIFFE bundle as the database
 * judges it (bc_spiffe_bundle_check, run inside the backend by
 * store_fetched_bundle) and as bc-join-federate takes its x509-svid roots
 * (bc_spiffe_bundle_x509_roots), with their properties: a refusal says why,
 * roots come only from a bundle the check accepts, each one a CA.
 */
#include <string.h>

#include <openssl/x509v3.h>

#include "bc_common.h"
#include "fuzz_common.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *in = (const char *) data;
	char		why[256];
	STACK_OF(X509) *roots = NULL;
	int			rc = bc_spiffe_bundle_check(in, size, why, sizeof(why));
	int			rr = bc_spiffe_bundle_x509_roots(in, size, &roots);

	BC_FUZZ_ASSERT(rc == BC_OK ? why[0] == '\0' : why[0] != '\0' && strlen(why) < sizeof(why));
	BC_FUZZ_ASSERT((rr == BC_OK) == (rc == BC_OK));
	BC_FUZZ_ASSERT((rr == BC_OK) == (roots != NULL));
	for (int i = 0; roots != NULL && i < sk_X509_num(roots); i++)
		BC_FUZZ_ASSERT((X509_get_extension_flags(sk_X509_value(roots, i)) & EXFLAG_CA) != 0);
	sk_X509_pop_free(roots, X509_free);
	return 0;
}
