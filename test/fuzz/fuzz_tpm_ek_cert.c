/*
 * fuzz_tpm_ek_cert.c: an EK certificate from the tpm attestor's evidence:
 * bc_tpm_ek_cert_parse (DER, then only 0xff NV padding), then the chain and
 * key check against swtpm's fixed local CA and its RSA EK (keys/tpm-*.pem,
 * keys/tpm-ekr.pub, public, from swtpm by make-corpus.sh).
 */
#include <stdlib.h>
#include <time.h>

#include <openssl/x509.h>

#include "bc_common.h"
#include "bc_tpm.h"
#include "fuzz_common.h"

static bc_tpm_public ek;
static X509 *root;
static X509 *issuer;
static int64_t at;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	size_t		n;
	unsigned char *b = bc_fuzz_read_file("keys/tpm-ekr.pub", BC_TPM_STRUCT_MAX, &n);
	char		err[256];

	(void) argc;
	(void) argv;
	BC_FUZZ_ASSERT(bc_tpm_public_parse(b, n, &ek) == BC_OK);
	free(b);
	root = bc_cert_read_pem_file(bc_fuzz_path("keys/tpm-root.pem"), err, sizeof(err));
	issuer = bc_cert_read_pem_file(bc_fuzz_path("keys/tpm-issuer.pem"), err, sizeof(err));
	BC_FUZZ_ASSERT(root != NULL && issuer != NULL);
	{
		struct tm	tm;

		/* a fixed time: a day after the fixture's CA was made */
		BC_FUZZ_ASSERT(ASN1_TIME_to_tm(X509_get0_notBefore(issuer), &tm) == 1);
		at = (int64_t) timegm(&tm) + 86400;
	}
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	X509	   *cert = NULL;
	const char *reason = NULL;
	int			rc = bc_tpm_ek_cert_parse(data, size, &cert, &reason);

	if (rc != BC_OK)
	{
		BC_FUZZ_ASSERT(cert == NULL && reason != NULL);
		return 0;
	}
	(void) bc_tpm_check_ek_cert(cert, &ek, &root, 1, &issuer, 1, at, &reason);
	X509_free(cert);
	return 0;
}
