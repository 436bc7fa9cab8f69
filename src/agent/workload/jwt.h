/* jwt.h: the JWT profile of bcd's Workload API (jwt.c). */
#ifndef BCD_WL_JWT_H
#define BCD_WL_JWT_H

#include <stddef.h>

#include <jansson.h>

#include "core/node_credential.h"
#include "core/peer.h"
#include "core/service_keys.h"
#include "core/transport.h"

/* The jwt-svid keys of the trust domain (the --service-keys file's jwtKeys). */
typedef struct bcd_wl_jwt bcd_wl_jwt;

bcd_wl_jwt *bcd_wl_jwt_new(const char *service_keys_path);
void		bcd_wl_jwt_free(bcd_wl_jwt *j);
/* How many jwt-svid keys are known. */
int			bcd_wl_jwt_keys(const bcd_wl_jwt *j);
/* Their JWKS, {"keys":[...]} (len bytes, owned by j). */
const char *bcd_wl_jwt_bundle(const bcd_wl_jwt *j, size_t *len);
/*
 * Verify token as a JWT-SVID of trust_domain (ES256, its kid one of the
 * keys; sub a SPIFFE ID of trust_domain, the only one bcd holds a bundle
 * for; exp in the future, nbf (when present) past; aud holds audience):
 * BC_OK with *spiffe_id (malloc) and *claims (the payload), or BC_EINVAL
 * with err.
 */
int			bcd_wl_jwt_validate(const bcd_wl_jwt *j, const char *trust_domain,
								const char *token, const char *audience,
								char **spiffe_id, json_t **claims, char *err, size_t errlen);
/*
 * The trust domain of id, a SPIFFE ID as the SPIFFE ID standard spells one
 * (spiffe://TRUST-DOMAIN[/SEGMENT...]), into td: BC_OK, or BC_EINVAL.
 */
int			bcd_wl_spiffe_trust_domain(const char *id, char *td, size_t tdlen);
/*
 * POST /v1/jwt-svid for (session, context) proven by node (blocking): BC_OK
 * with *spiffe_id and *token (malloc), BC_EVERIFY when the service issued
 * none (logged), another error with err.
 */
int			bcd_wl_jwt_fetch(const bcd_service_keys *keys, bcd_http *http,
							 const bcd_node_snapshot *node, const char *session,
							 const char *context, const bcd_peer *caller,
							 char *const *audience, size_t n_audience, char **spiffe_id,
							 char **token, char *err, size_t errlen);

#endif							/* BCD_WL_JWT_H */
