/*
 * join_request.h: the JoinRequest document a join round sends: the CSR,
 * role, attestor, the producer's evidence and the claims.
 */
#ifndef BCD_JOIN_REQUEST_H
#define BCD_JOIN_REQUEST_H

#include <stddef.h>

#include <jansson.h>

/* The claims object: claims_json, or {hostname, arch}; hostname overrides hostname. */
json_t	   *bcd_build_claims(const char *claims_json, const char *hostname);

/*
 * The JoinRequest JSON for csr: attestation (base64url) and sealed_token
 * as a producer made them (either may be NULL) and a copy of claims.
 */
int			bcd_join_request_json(const unsigned char *csr, size_t csr_len,
								  const char *role, const char *attestor,
								  const char *attestation_b64, const char *sealed_token,
								  json_t *claims, char **text_out);

#endif							/* BCD_JOIN_REQUEST_H */
