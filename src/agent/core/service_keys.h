/*
 * service_keys.h: the pinned public keys of the JoinService, the JSON of
 * bc_join.service_keys(), against which bcd checks everything it is told,
 * and their rollover (a new set signed by a key already pinned).
 */
#ifndef BCD_SERVICE_KEYS_H
#define BCD_SERVICE_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>
#include <openssl/x509.h>

/* Bound of the service-keys JSON file. */
#define BCD_SERVICE_KEYS_MAX (64 * 1024)
/* Most signing (or encryption) keys pinned at once. */
#define BCD_PINNED_MAX 4
/* Most jwt-svid keys (jwtKeys: current, staged, previous) held at once. */
#define BCD_JWT_KEYS_MAX 4
/* Longest kid kept, with its NUL. */
#define BCD_KID_MAX 64
/* The file in the state directory that keeps an accepted rollover. */
#define BCD_ROLLOVER_FILE "service-keys.json"

struct bcd_keyset;
struct bcd_http;

/*
 * The pinned keys of a JoinService.  The trust domain and the node CA's root
 * never change; the signing and encryption keys may, by a verified rollover,
 * while other threads verify with them (they take the set's lock).
 */
typedef struct bcd_service_keys
{
	char	   *trust_domain;	/* malloc()ed */
	X509	   *node_ca;		/* the root node certificates chain to (nodeCa's last) */
	struct bcd_keyset *set;		/* signing keys by kid, the current encryption key */
	/* bcd run's: the federated trust domains' bundles, signed by these keys (trust_bundles.c) */
	struct bcd_trust_bundles *trust;
} bcd_service_keys;

int			bcd_service_keys_load(const char *path, bcd_service_keys *keys,
								  char *err, size_t errlen);
void		bcd_service_keys_free(bcd_service_keys *keys);

/*
 * Keep accepted rollovers in state_dir (BCD_ROLLOVER_FILE), and take up the
 * one kept there when it grew from the same --service-keys file.
 */
void		bcd_service_keys_use_state(const bcd_service_keys *keys, const char *state_dir);

/*
 * Verify an ES256 JWS with the pinned signing key its header names (the
 * current one when it names none).  *unknown_kid (when not NULL) is 1 when
 * it names a key not pinned: a rollover may be due (bcd_service_keys_refresh).
 */
int			bcd_service_keys_verify(const bcd_service_keys *keys, const char *jws, size_t n,
									size_t max_payload, unsigned char **payload,
									size_t *payload_len, int *unknown_kid);

/*
 * The payload of the first JWS in doc's "keys" (a document signed by each
 * signing key: /v1/service-keys, /v1/trust-bundles; at most 8 looked at)
 * that a pinned signing key verifies, parsed as JSON (at most max_payload
 * bytes); NULL when none does.  The caller json_decref()s it.
 */
struct json_t *bcd_service_keys_first_verified(const bcd_service_keys *keys, struct json_t *doc,
											   size_t max_payload);

/*
 * The time of the set pinned now (Unix seconds): the signed issuedAt of the
 * --service-keys file or of the last rollover taken up; 0 for a file
 * without one (made before 0.2.0).
 */
int64_t		bcd_service_keys_issued(const bcd_service_keys *keys);

/* The current encryption key, the only one tokens are sealed to (a reference: EVP_PKEY_free it). */
EVP_PKEY   *bcd_service_keys_encryption(const bcd_service_keys *keys);

/*
 * Take up a rollover, the text of GET /v1/service-keys ({"keys": [JWS...]}):
 * a JWS by a pinned key whose payload names the same trust domain and root,
 * issued no earlier than the set pinned now, and bringing back no key a
 * rollover dropped.  BC_OK (the set replaced, kept in the state directory
 * when there is one) or an error with err.
 */
int			bcd_service_keys_rollover(const bcd_service_keys *keys, const char *text,
									  size_t len, char *err, size_t errlen);

/*
 * The CA certificates below the root in the nodeCa of text (GET
 * /v1/service-keys, verified by a pinned signing key), pushed onto out.
 */
int			bcd_service_keys_cas(const bcd_service_keys *keys, const char *text, size_t len,
								 STACK_OF(X509) *out);

/* GET /v1/service-keys through http and take it up (logged). */
int			bcd_service_keys_refresh(struct bcd_http *http, const bcd_service_keys *keys);

/*
 * The jwt-svid keys (jwtKeys of the set pinned now, taken up with every
 * rollover): their generation, bumped whenever the list of kids changes.
 */
unsigned long bcd_service_keys_jwt_gen(const bcd_service_keys *keys);

/*
 * Their JWKS, {"keys":[{kty, crv, x, y, kid, "use":"jwt-svid"}...]} the
 * current one first (malloc()ed, or NULL), with its generation and count.
 */
char	   *bcd_service_keys_jwks(const bcd_service_keys *keys, unsigned long *gen, int *n);

/* The jwt-svid key of kid (a reference: EVP_PKEY_free it), or NULL: none (retired or unknown). */
EVP_PKEY   *bcd_service_keys_jwt_key(const bcd_service_keys *keys, const char *kid);

#endif							/* BCD_SERVICE_KEYS_H */
