/*
 * verify.h: an answer of bc_join(), bc_join.renew() or
 * bc_join.issue_session(), verified against the pinned keys and our own CSR
 * before anything in it is used.
 */
#ifndef BCD_VERIFY_H
#define BCD_VERIFY_H

#include <stddef.h>

#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/x509.h>

#include "bc_common.h"
#include "core/outcome.h"
#include "core/service_keys.h"

/* Bound of a response document (a JWS plus the outer JSON). */
#define BCD_RESPONSE_MAX (BC_JOSE_MAX + 4096)

/* What a verified answer says; pointers into payload live as long as it. */
typedef struct bcd_answer
{
	json_t	   *payload;		/* the signed payload, verified */
	const char *status;			/* BC_STATUS_ISSUED, _PENDING or _CHALLENGE */
	/* issued */
	X509	   *leaf;			/* certifies our key, chains to the pinned CA */
	char	   *spiffe_id;		/* malloc()ed */
	char		serial[41];		/* of the leaf, lower-case hex, >= 32 digits */
	char		not_after[64];	/* RFC 3339, as answered (or from the leaf) */
	char	   *chain_pem;		/* leaf, the issuing CA .. the pinned root, malloc()ed */
	size_t		chain_pem_len;
	/* pending and challenge */
	long		retry_after;	/* retryAfterSeconds, -1 when absent */
	const char *request_id;
	const char *challenge;
	const char *attestor;
	/* failed: signed by a key not pinned (a rollover may be due) */
	int			unknown_kid;
	/* refused: the outer error code (never from a signed payload) */
	char		refusal[72];
} bcd_answer;

/* BCD_RC_OK (issued), BCD_RC_DEFERRED, BCD_RC_REFUSED or BCD_RC_FAILED (why in err). */
bcd_rc		bcd_answer_verify(const bcd_service_keys *keys, const char *text,
							  size_t len, const unsigned char *csr,
							  size_t csr_len, EVP_PKEY *key, bcd_answer *ans,
							  char *err, size_t errlen);
/* The same, and again after a rollover when the answer names a key not pinned. */
bcd_rc		bcd_answer_verify_fresh(struct bcd_http *http, const bcd_service_keys *keys,
									const char *text, size_t len, const unsigned char *csr,
									size_t csr_len, EVP_PKEY *key, bcd_answer *ans,
									char *err, size_t errlen);
void		bcd_answer_free(bcd_answer *ans);
int			bcd_cert_serial_hex(X509 *cert, char out[41]);
void		bcd_cert_not_after(X509 *cert, char *buf, size_t len);

#endif							/* BCD_VERIFY_H */
