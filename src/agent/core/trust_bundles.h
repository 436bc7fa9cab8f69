/*
 * trust_bundles.h: the bundles of the trust domains this one federates
 * with, as the JoinService judged and signed them (bc_join.signed_trust_bundles(),
 * GET /v1/trust-bundles), taken up by the revocation watch beside the
 * service keys and handed to the Workload API (docs/agent.md, "Federation").
 */
#ifndef BCD_TRUST_BUNDLES_H
#define BCD_TRUST_BUNDLES_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>

#include "core/service_keys.h"

/* Most federated trust domains held, jwt-svid keys per domain, bytes of the signed document. */
#define BCD_TRUST_DOMAINS_MAX 64
#define BCD_TRUST_JWT_MAX 64
#define BCD_TRUST_DOC_MAX (4 * 1024 * 1024)

struct bcd_http;

/* One federated trust domain's bundle, never merged with another's. */
typedef struct bcd_trust_domain
{
	char		td[256];		/* without the scheme */
	int64_t		sequence;		/* spiffe_sequence (-1: none) */
	unsigned char *x509;		/* its x509-svid roots, DER concatenated (workload.proto) */
	size_t		x509_len;
	int			n_x509;
	char	   *pem;			/* the same as PEM */
	char	   *jwks;			/* {"keys":[its jwt-svid JWKs]} */
	size_t		jwks_len;
	int			n_jwt;
	char		(*kid)[BCD_KID_MAX];
	EVP_PKEY  **jwt;			/* by kid (EC P-256/384/521 or RSA) */
} bcd_trust_domain;

/* One generation of them: immutable once made, shared by reference. */
typedef struct bcd_trust_set
{
	int			refs;			/* under the store's lock */
	unsigned long gen;
	int			n;
	bcd_trust_domain *d;		/* sorted by td */
} bcd_trust_set;

typedef struct bcd_trust_bundles bcd_trust_bundles;

/* A store for keys' trust domain (empty until a document is taken up), or NULL. */
bcd_trust_bundles *bcd_trust_bundles_new(const bcd_service_keys *keys);
void		bcd_trust_bundles_free(bcd_trust_bundles *t);

/*
 * Take up text, the body of GET /v1/trust-bundles ({"keys":[JWS...]}, a JWS
 * by a pinned signing key, bcd_service_keys_verify): its trustDomain ours,
 * its issuedAt never older than the one held, each domain's
 * spiffe_sequence never lower than the one held (that domain's bundle is
 * kept then, and logged).  BC_OK (*changed: a new generation) or an error
 * with err.
 */
int			bcd_trust_bundles_take(bcd_trust_bundles *t, const char *text, size_t len,
								   int *changed, char *err, size_t errlen);

/* GET /v1/trust-bundles through http and take it up (a failure logged when it differs from the last). */
int			bcd_trust_bundles_refresh(struct bcd_http *http, bcd_trust_bundles *t);

/* The generation now (0: none taken up yet). */
unsigned long bcd_trust_bundles_gen(bcd_trust_bundles *t);

/* The set now, a reference (bcd_trust_set_release it); never NULL. */
bcd_trust_set *bcd_trust_bundles_get(bcd_trust_bundles *t);
void		bcd_trust_set_release(bcd_trust_bundles *t, bcd_trust_set *s);

/* The domain td of s (no scheme), or NULL. */
const bcd_trust_domain *bcd_trust_set_find(const bcd_trust_set *s, const char *td);

#endif							/* BCD_TRUST_BUNDLES_H */
