/*
 * jwt.h: the JWT profile of bcd's Workload API (jwt.c): the trust domain's
 * jwt-svid keys, ValidateJWTSVID, and the checks of a FetchJWTSVID's
 * audiences.  Fetching and caching JWT-SVIDs: jwt_svids.h.
 */
#ifndef BCD_WL_JWT_H
#define BCD_WL_JWT_H

#include <stddef.h>

#include <jansson.h>

#include "core/job.h"
#include "core/service_keys.h"
#include "core/trust_bundles.h"

/* The jwt-svid keys of the trust domain (the pinned service keys' jwtKeys). */
typedef struct bcd_wl_jwt bcd_wl_jwt;

bcd_wl_jwt *bcd_wl_jwt_new(const bcd_service_keys *keys);
void		bcd_wl_jwt_free(bcd_wl_jwt *j);
/* 1 when the keys changed since the last call (a rollover): the JWKS is the new one now. */
int			bcd_wl_jwt_take(bcd_wl_jwt *j);
/* 1 when kid names one of the keys now. */
int			bcd_wl_jwt_known(const bcd_wl_jwt *j, const char *kid);
/* How many jwt-svid keys are known. */
int			bcd_wl_jwt_keys(const bcd_wl_jwt *j);
/* Their JWKS, {"keys":[...]} (len bytes, owned by j). */
const char *bcd_wl_jwt_bundle(const bcd_wl_jwt *j, size_t *len);
/*
 * Verify token as a JWT-SVID: the bundle of its sub's trust domain is
 * picked first (trust_domain, bcd's own: ES256 with j's keys; or a domain
 * of fed that federates, the caller's rule's set, names: RS/PS/ES with that
 * domain's keys), then the kid within that bundle only; then sub a SPIFFE
 * ID of that domain, exp in the future, nbf (when present) past, aud holds
 * audience: BC_OK with *spiffe_id (malloc) and *claims (the payload), or
 * BC_EINVAL with err.
 */
int			bcd_wl_jwt_validate(const bcd_wl_jwt *j, const char *trust_domain,
								const bcd_trust_set *fed, const char *federates,
								const char *token, const char *audience,
								char **spiffe_id, json_t **claims, char *err, size_t errlen);
/*
 * The trust domain of id, a SPIFFE ID as the SPIFFE ID standard spells one
 * (spiffe://TRUST-DOMAIN[/SEGMENT...]), into td: BC_OK, or BC_EINVAL.
 */
int			bcd_wl_spiffe_trust_domain(const char *id, char *td, size_t tdlen);
/*
 * A FetchJWTSVID's audiences (n of them) checked as the service checks them
 * (1 to 8, each 1 to 256 printable ASCII bytes, none twice) and sorted into
 * out: BC_OK, or BC_EINVAL with a message for the caller in err.
 */
int			bcd_wl_jwt_audiences(char *const *aud, size_t n, bcd_audiences *out,
								 char *err, size_t errlen);

#endif							/* BCD_WL_JWT_H */
