/*
 * proof.h: a request proven by the node's current key (a renewal, a session
 * credential): {"csr", "proof"}, the proof a JWS ES256 over the purpose, the
 * current serial, the new CSR's hash and the time.
 */
#ifndef BCD_PROOF_H
#define BCD_PROOF_H

#include <stddef.h>

#include <jansson.h>
#include <openssl/evp.h>

int			bcd_proof_request(EVP_PKEY *node_key, const char *serial, const char *purpose,
							  json_t *extra, const unsigned char *csr, size_t csr_len,
							  char **body);

#endif							/* BCD_PROOF_H */
