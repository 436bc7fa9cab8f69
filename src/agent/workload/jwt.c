/*
 * jwt.c: the JWT profile of bcd's Workload API (docs/agent.md, "The SPIFFE
 * Workload API"; the service side in docs/research/workload-api/INTERFACE.md).
 *
 * The jwt-svid keys are the "jwtKeys" of the pinned service keys
 * (bc_join.service_keys(): public JWKs with their kid, the current one
 * first), followed through every rollover the revocation watch takes up
 * (core/service_keys.c: a new list is a new generation, a retired kid never
 * returns; docs/agent.md "JWT key rollover").  FetchJWTBundles
 * serves them as a JWKS; ValidateJWTSVID verifies a token against them
 * (ES256 through src/common's JOSE, i.e. OpenSSL: the kid must name one of
 * them), then its subject's trust domain (the Workload API validates a
 * JWT-SVID with the bundle of its subject's trust domain, and bcd holds one
 * bundle, its own: any other is refused), exp, nbf and aud.  The audiences
 * of a FetchJWTSVID are checked here as the service checks them, before
 * anything is asked of it; fetching and caching are jwt_svids.c's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "core/json.h"
#include "core/log.h"
#include "workload/jwt.h"
#include "workload/rules.h"

struct bcd_wl_jwt
{
	const bcd_service_keys *keys;	/* the jwt-svid keys: their jwtKeys */
	unsigned long gen;			/* the generation of jwks */
	int			n;
	char	   *jwks;			/* {"keys":[...]} */
	size_t		jwks_len;
};

/* The jwt-svid keys of keys (their jwtKeys, followed through rollovers), or NULL (out of memory). */
bcd_wl_jwt *
bcd_wl_jwt_new(const bcd_service_keys *keys)
{
	bcd_wl_jwt *j = calloc(1, sizeof(*j));

	if (j == NULL)
		return NULL;
	j->keys = keys;
	j->jwks = bcd_service_keys_jwks(keys, &j->gen, &j->n);
	if (j->jwks == NULL)
	{
		free(j);
		return NULL;
	}
	j->jwks_len = strlen(j->jwks);
	return j;
}

/* Free j. */
void
bcd_wl_jwt_free(bcd_wl_jwt *j)
{
	if (j == NULL)
		return;
	free(j->jwks);
	free(j);
}

/* Take up a new generation of the keys (jwt.h). */
int
bcd_wl_jwt_take(bcd_wl_jwt *j)
{
	unsigned long gen;
	int			n;
	char	   *jwks;

	if (bcd_service_keys_jwt_gen(j->keys) == j->gen)
		return 0;
	jwks = bcd_service_keys_jwks(j->keys, &gen, &n);
	if (jwks == NULL)
		return 0;				/* out of memory: tried again at the next tick */
	free(j->jwks);
	j->jwks = jwks;
	j->jwks_len = strlen(jwks);
	j->gen = gen;
	j->n = n;
	return 1;
}

/* 1 when kid names one of j's keys now (jwt.h). */
int
bcd_wl_jwt_known(const bcd_wl_jwt *j, const char *kid)
{
	EVP_PKEY   *key = bcd_service_keys_jwt_key(j->keys, kid);

	EVP_PKEY_free(key);
	return key != NULL;
}

/* The JWKS of j's keys. */
const char *
bcd_wl_jwt_bundle(const bcd_wl_jwt *j, size_t *len)
{
	*len = j->jwks_len;
	return j->jwks;
}

/* How many keys j holds. */
int
bcd_wl_jwt_keys(const bcd_wl_jwt *j)
{
	return j->n;
}

/* 1 when aud (a string or an array of strings) holds audience. */
static int
aud_has(json_t *aud, const char *audience)
{
	json_t	   *a;
	size_t		i;

	if (json_is_string(aud))
		return strcmp(json_string_value(aud), audience) == 0;
	json_array_foreach(aud, i, a)
		if (json_is_string(a) && strcmp(json_string_value(a), audience) == 0)
		return 1;
	return 0;
}

/* 1 when c may appear in a SPIFFE ID's trust domain (SPIFFE-ID.md 2.1). */
static int
td_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
}

/* 1 when c may appear in a SPIFFE ID's path segment (SPIFFE-ID.md 2.2). */
static int
path_char(char c)
{
	return td_char(c) || (c >= 'A' && c <= 'Z');
}

/* The longest SPIFFE ID, and trust domain, the standard allows (SPIFFE-ID.md 2.3). */
#define SPIFFE_ID_MAX 2048
#define TRUST_DOMAIN_MAX 255

/* The trust domain of a SPIFFE ID as the standard spells one (jwt.h). */
int
bcd_wl_spiffe_trust_domain(const char *id, char *td, size_t tdlen)
{
	const char *p;
	size_t		n;

	if (id == NULL || strlen(id) > SPIFFE_ID_MAX ||
		strncmp(id, BC_SPIFFE_SCHEME, strlen(BC_SPIFFE_SCHEME)) != 0)
		return BC_EINVAL;
	p = id + strlen(BC_SPIFFE_SCHEME);
	for (n = 0; p[n] != '\0' && p[n] != '/'; n++)
		if (!td_char(p[n]))
			return BC_EINVAL;
	if (n == 0 || n > TRUST_DOMAIN_MAX || n >= tdlen)
		return BC_EINVAL;
	memcpy(td, p, n);
	td[n] = '\0';
	/* the path: "/" SEGMENT ..., no segment empty, "." or ".." */
	for (p += n; *p == '/';)
	{
		size_t		len = 0;

		p++;
		while (p[len] != '\0' && p[len] != '/')
		{
			if (!path_char(p[len]))
				return BC_EINVAL;
			len++;
		}
		if (len == 0 || (len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.'))
			return BC_EINVAL;
		p += len;
	}
	return *p == '\0' ? BC_OK : BC_EINVAL;
}

/* The longest JWT-SVID payload read. */
#define JWT_PAYLOAD_MAX (64 * 1024)

/*
 * The trust domain of the token's sub, read before anything is verified,
 * to pick the bundle it must verify with (a colliding kid in another
 * domain's bundle never comes into it).  BC_OK, or BC_EINVAL with err.
 */
static int
unverified_trust_domain(const char *token, char *td, size_t tdlen, char *err, size_t errlen)
{
	const char *dot1 = strchr(token, '.');
	const char *dot2 = dot1 != NULL ? strchr(dot1 + 1, '.') : NULL;
	unsigned char *buf = NULL;
	size_t		len = 0;
	json_t	   *doc = NULL;
	const char *sub;
	int			rc = BC_EINVAL;

	if (dot2 == NULL || (size_t) (dot2 - dot1 - 1) > JWT_PAYLOAD_MAX * 4 / 3 + 4 ||
		(buf = malloc(JWT_PAYLOAD_MAX)) == NULL ||
		bc_b64url_decode(dot1 + 1, (size_t) (dot2 - dot1 - 1), buf, JWT_PAYLOAD_MAX, &len) != BC_OK ||
		(doc = json_loadb((const char *) buf, len, JSON_REJECT_DUPLICATES, NULL)) == NULL)
		snprintf(err, errlen, "the token's payload is not a JSON object");
	else if ((sub = bcd_json_str(doc, "sub", NULL)) == NULL)
		snprintf(err, errlen, "the token has no subject (sub)");
	else if (bcd_wl_spiffe_trust_domain(sub, td, tdlen) != BC_OK)
		snprintf(err, errlen, "the token's subject (sub) is not a SPIFFE ID");
	else
		rc = BC_OK;
	json_decref(doc);
	free(buf);
	return rc;
}

/* ValidateJWTSVID's checks of token for audience (jwt.h). */
int
bcd_wl_jwt_validate(const bcd_wl_jwt *j, const char *trust_domain, const bcd_trust_set *fed,
					const char *federates, const char *token, const char *audience,
					char **spiffe_id, json_t **claims, char *err, size_t errlen)
{
	char		kid[64];
	char		td[TRUST_DOMAIN_MAX + 1];
	char		td2[TRUST_DOMAIN_MAX + 1];
	unsigned char *payload = NULL;
	size_t		plen = 0;
	json_t	   *doc = NULL;
	json_t	   *exp;
	json_t	   *nbf;
	const char *sub;
	double		now = (double) time(NULL);
	EVP_PKEY   *key = NULL;
	int			rc;

	*spiffe_id = NULL;
	*claims = NULL;
	if (audience == NULL || audience[0] == '\0')
	{
		snprintf(err, errlen, "audience must be specified");
		return BC_EINVAL;
	}
	if (token == NULL || token[0] == '\0')
	{
		snprintf(err, errlen, "svid must be specified");
		return BC_EINVAL;
	}
	if (bc_jws_header_kid(token, strlen(token), kid, sizeof(kid)) != BC_OK)
	{
		snprintf(err, errlen, "the token is not a JWS with a kid");
		return BC_EINVAL;
	}
	/* the bundle of the subject's trust domain, then the kid within that bundle only */
	if (unverified_trust_domain(token, td, sizeof(td), err, errlen) != BC_OK)
		return BC_EINVAL;
	if (strcmp(td, trust_domain) == 0)
	{
		key = bcd_service_keys_jwt_key(j->keys, kid);
		if (key == NULL)
		{
			snprintf(err, errlen, "unknown kid: the token's kid names no jwt-svid key of trust "
					 "domain " BC_SPIFFE_SCHEME "%s (never one, or retired)", trust_domain);
			return BC_EINVAL;
		}
		rc = bc_jws_verify_es256(key, token, strlen(token), JWT_PAYLOAD_MAX, &payload, &plen);
		EVP_PKEY_free(key);
	}
	else
	{
		const bcd_trust_domain *d = NULL;
		int			i;

		if (federates != NULL && bcd_wl_federates_has(federates, td))
			d = bcd_trust_set_find(fed, td);
		if (d == NULL)
		{
			snprintf(err, errlen, "the token's subject is in trust domain " BC_SPIFFE_SCHEME
					 "%s; bcd holds the bundle of trust domain " BC_SPIFFE_SCHEME "%s%s, so it "
					 "cannot validate it", td, trust_domain,
					 federates != NULL && federates[0] != '\0' ?
					 " and of the federated ones this caller's rule names only" : " only");
			return BC_EINVAL;
		}
		for (i = 0; i < d->n_jwt; i++)
			if (strcmp(d->kid[i], kid) == 0)
				break;
		if (i == d->n_jwt)
		{
			snprintf(err, errlen, "unknown kid: the token's kid names no jwt-svid key of the "
					 "federated trust domain " BC_SPIFFE_SCHEME "%s", td);
			return BC_EINVAL;
		}
		rc = bc_jws_verify_any(d->jwt[i], token, strlen(token), JWT_PAYLOAD_MAX, &payload, &plen);
	}
	if (rc != BC_OK)
	{
		snprintf(err, errlen, rc == BC_EUNSUPPORTED ? "the token's alg is not one its key signs "
				 "with" : "the token's signature does not verify");
		return BC_EINVAL;
	}
	doc = json_loadb((const char *) payload, plen, JSON_REJECT_DUPLICATES, NULL);
	free(payload);
	exp = json_object_get(doc, "exp");
	nbf = json_object_get(doc, "nbf");
	sub = bcd_json_str(doc, "sub", NULL);
	if (!json_is_object(doc) || sub == NULL)
		snprintf(err, errlen, "the token has no subject (sub)");
	else if (bcd_wl_spiffe_trust_domain(sub, td2, sizeof(td2)) != BC_OK || strcmp(td, td2) != 0)
		snprintf(err, errlen, "the token's subject (sub) is not a SPIFFE ID of trust domain %s", td);
	else if (!json_is_number(exp))
		snprintf(err, errlen, "the token has no expiry (exp)");
	else if (json_number_value(exp) <= now)
		snprintf(err, errlen, "the token has expired");
	else if (nbf != NULL && (!json_is_number(nbf) || json_number_value(nbf) > now))
		snprintf(err, errlen, "the token is not valid yet (nbf)");
	else if (!aud_has(json_object_get(doc, "aud"), audience))
		snprintf(err, errlen, "the token is not for audience %.200s", audience);
	else
	{
		*spiffe_id = strdup(sub);
		*claims = doc;
		if (*spiffe_id == NULL)
		{
			*claims = NULL;
			json_decref(doc);
			snprintf(err, errlen, "out of memory");
			return BC_ENOMEM;
		}
		return BC_OK;
	}
	json_decref(doc);
	return BC_EINVAL;
}

/* qsort order of audiences. */
static int
aud_cmp(const void *a, const void *b)
{
	return strcmp((const char *) a, (const char *) b);
}

/* A FetchJWTSVID's audiences, checked and sorted (jwt.h). */
int
bcd_wl_jwt_audiences(char *const *aud, size_t n, bcd_audiences *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof(*out));
	if (n == 0)
	{
		snprintf(err, errlen, "audience must be specified");
		return BC_EINVAL;
	}
	if (n > BCD_JWT_AUDIENCES_MAX)
	{
		snprintf(err, errlen, "at most %d audiences may be asked for at once; this request "
				 "has %zu", BCD_JWT_AUDIENCES_MAX, n);
		return BC_EINVAL;
	}
	for (size_t i = 0; i < n; i++)
	{
		size_t		len = strlen(aud[i]);

		if (len == 0)
		{
			snprintf(err, errlen, "audience %zu is empty", i + 1);
			return BC_EINVAL;
		}
		if (len > BCD_JWT_AUDIENCE_LEN_MAX)
		{
			snprintf(err, errlen, "audience %zu is %zu bytes long; at most %d are allowed",
					 i + 1, len, BCD_JWT_AUDIENCE_LEN_MAX);
			return BC_EINVAL;
		}
		for (size_t k = 0; k < len; k++)
		{
			unsigned char c = (unsigned char) aud[i][k];

			if (c < 0x20 || c > 0x7e)
			{
				snprintf(err, errlen, "audience %zu has a byte (0x%02x) outside printable "
						 "ASCII (0x20-0x7e)", i + 1, c);
				return BC_EINVAL;
			}
		}
		memcpy(out->v[i], aud[i], len + 1);
	}
	out->n = (int) n;
	qsort(out->v, n, sizeof(out->v[0]), aud_cmp);
	for (int i = 1; i < out->n; i++)
		if (strcmp(out->v[i - 1], out->v[i]) == 0)
		{
			snprintf(err, errlen, "audience \"%.64s\" is given twice", out->v[i]);
			memset(out, 0, sizeof(*out));
			return BC_EINVAL;
		}
	return BC_OK;
}
