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

#include "core/service_keys.h"
#include "core/store.h"
#include "core/transport.h"

int			bcd_proof_request(EVP_PKEY *node_key, const char *serial, const char *purpose,
							  json_t *extra, const unsigned char *csr, size_t csr_len,
							  char **body);

/* A proof by the node key over {purpose, serial, iat} and extra's members; malloc()ed JWS. */
char	   *bcd_node_proof(const bcd_credential *cred, const char *purpose, json_t *extra);

/*
 * POST body (a request proven by cred's key, no CSR) to path and verify the
 * answer: issued, signed by the pinned signing key, its purpose, and for this
 * node (the SPIFFE ID ends in /node/<nodeId>).  The signed payload, or NULL
 * (logged).
 */
json_t	   *bcd_node_exchange(bcd_http *http, const bcd_service_keys *keys,
							  const bcd_credential *cred, const char *path, const char *body,
							  const char *purpose);
/*
 * The same, saying why there is no payload: *rc BCD_RC_OK (the payload),
 * BCD_RC_REFUSED, BCD_RC_RETRY, BCD_RC_STOPPED or BCD_RC_FAILED, with a
 * message for the caller in err.
 */
json_t	   *bcd_node_exchange_rc(bcd_http *http, const bcd_service_keys *keys,
								 const bcd_credential *cred, const char *path, const char *body,
								 const char *purpose, bcd_rc *rc, char *err, size_t errlen);

/*
 * The same for a request answered with one of several statuses (statuses
 * NULL-terminated: POST /v1/attest's "challenge", "attested",
 * "quarantined"); a signed payload's "status", when it has one, must be the
 * outer one.  purpose NULL: an answer that names none (POST /v1/ssh/host's,
 * bound to its request by the caller's own check of sshKeySha256).
 */
json_t	   *bcd_node_exchange_status(bcd_http *http, const bcd_service_keys *keys,
									 const bcd_credential *cred, const char *path,
									 const char *body, const char *purpose,
									 const char *const *statuses, bcd_rc *rc,
									 char *err, size_t errlen);

#endif							/* BCD_PROOF_H */
