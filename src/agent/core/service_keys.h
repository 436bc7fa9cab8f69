/*
 * service_keys.h: the pinned public keys of the JoinService, the JSON of
 * bc_join.service_keys(), against which bcd checks everything it is told.
 */
#ifndef BCD_SERVICE_KEYS_H
#define BCD_SERVICE_KEYS_H

#include <stddef.h>

#include <openssl/evp.h>
#include <openssl/x509.h>

/* Bound of the service-keys JSON file. */
#define BCD_SERVICE_KEYS_MAX (64 * 1024)

/* The pinned public keys of a JoinService (bc_join.service_keys()). */
typedef struct bcd_service_keys
{
	char	   *trust_domain;	/* malloc()ed */
	EVP_PKEY   *signing_key;	/* verifies responses (JWS ES256) */
	EVP_PKEY   *encryption_key; /* sealed tokens are encrypted to it */
	X509	   *node_ca;		/* issues node certificates */
} bcd_service_keys;

int			bcd_service_keys_load(const char *path, bcd_service_keys *keys,
								  char *err, size_t errlen);
void		bcd_service_keys_free(bcd_service_keys *keys);

#endif							/* BCD_SERVICE_KEYS_H */
