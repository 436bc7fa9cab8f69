/*
 * proof.c: a request proven by the node's current key, shared by renewal
 * (renewal.c) and session credentials (provision.c); the service checks it
 * in src/ext/proof.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bc_common.h"
#include "core/proof.h"
#include "core/tpm_key.h"

/*
 * The body of a request proven by the node's current key (a renewal, a
 * session credential): {"csr": <base64url DER of csr>, "proof": <JWS ES256 by
 * node_key over {"purpose", "serial": <the current serial>, "csrSha256": <of
 * csr>, "iat": <now>} and the members of extra (may be NULL)>}.
 */
int
bcd_proof_request(EVP_PKEY *node_key, const char *serial, const char *purpose,
				  json_t *extra, const unsigned char *csr, size_t csr_len, char **body)
{
	char		csr_sha256[44];
	char	   *csr64 = NULL;
	char	   *claims = NULL;
	char	   *proof = NULL;
	json_t	   *doc = NULL;
	int			rc;

	*body = NULL;
	rc = bc_sha256_b64url(csr, csr_len, csr_sha256);
	if (rc != BC_OK)
		goto out;
	rc = BC_ENOMEM;
	doc = json_pack("{s:s, s:s, s:s, s:I}", "purpose", purpose, "serial", serial,
					"csrSha256", csr_sha256, "iat", (json_int_t) time(NULL));
	if (doc == NULL || (extra != NULL && json_object_update(doc, extra) != 0) ||
		(claims = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER)) == NULL)
		goto out;
	bcd_tpm_key_lock();
	rc = bc_jws_sign_es256(node_key, NULL, (const unsigned char *) claims,
						   strlen(claims), &proof);
	bcd_tpm_key_unlock();
	if (rc != BC_OK)
		goto out;
	rc = BC_ENOMEM;
	csr64 = bc_b64url_encode_alloc(csr, csr_len);
	if (csr64 == NULL)
		goto out;
	json_decref(doc);
	doc = json_pack("{s:s, s:s}", "csr", csr64, "proof", proof);
	if (doc != NULL &&
		(*body = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER)) != NULL)
		rc = BC_OK;
out:
	json_decref(doc);
	free(claims);
	free(proof);
	free(csr64);
	return rc;
}
