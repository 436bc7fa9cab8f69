/*
 * jwt.c: the JWT profile of bcd's Workload API (docs/agent.md, "The SPIFFE
 * Workload API"; the service side in docs/research/workload-api/INTERFACE.md).
 *
 * The jwt-svid keys are the "jwtKeys" of the pinned --service-keys file
 * (bc_join.service_keys(): public JWKs with their kid).  FetchJWTBundles
 * serves them as a JWKS; ValidateJWTSVID verifies a token against them
 * (ES256 through src/common's JOSE, i.e. OpenSSL: the kid must name one of
 * them), then its subject's trust domain (the Workload API validates a
 * JWT-SVID with the bundle of its subject's trust domain, and bcd holds one
 * bundle, its own: any other is refused), exp, nbf and aud.  FetchJWTSVID
 * asks the service: POST /v1/jwt-svid {"proof": JWS by the node key over
 * {purpose "jwt-svid", serial, iat, audience, session, context?, caller?}},
 * the answer verified with the pinned signing key (bcd_node_exchange) and
 * then checked: the proof's SHA-256, the session and context asked for, a
 * SPIFFE ID that is a session of this node.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "core/fileio.h"
#include "core/json.h"
#include "core/log.h"
#include "core/proof.h"
#include "workload/jwt.h"

#ifndef BC_PATH_JWT_SVID
#define BC_PATH_JWT_SVID "/v1/jwt-svid"
#endif
#ifndef BC_PURPOSE_JWT_SVID
#define BC_PURPOSE_JWT_SVID "jwt-svid"
#endif

/* jwt-svid keys kept at most. */
#define JWT_KEYS_MAX 8

struct bcd_wl_jwt
{
	int			n;
	EVP_PKEY   *key[JWT_KEYS_MAX];
	char		kid[JWT_KEYS_MAX][64];
	char	   *jwks;			/* {"keys":[...]} */
	size_t		jwks_len;
};

bcd_wl_jwt *
bcd_wl_jwt_new(const char *service_keys_path)
{
	bcd_wl_jwt *j = calloc(1, sizeof(*j));
	json_t	   *doc = json_load_file(service_keys_path, JSON_REJECT_DUPLICATES, NULL);
	json_t	   *keys = json_object_get(doc, "jwtKeys");
	json_t	   *jwks = json_array();
	json_t	   *out;
	json_t	   *k;
	size_t		i;

	if (j == NULL || jwks == NULL)
		goto fail;
	json_array_foreach(keys, i, k)
	{
		const char *kid = bcd_json_str(k, "kid", NULL);
		EVP_PKEY   *pub = NULL;
		json_t	   *copy;

		if (j->n >= JWT_KEYS_MAX || kid == NULL || strlen(kid) >= sizeof(j->kid[0]) ||
			bc_pkey_from_jwk_object(k, &pub) != BC_OK)
		{
			bcd_log("workload api: a jwtKeys entry of %s is not a P-256 JWK with a kid; ignored",
					service_keys_path);
			continue;
		}
		j->key[j->n] = pub;
		snprintf(j->kid[j->n], sizeof(j->kid[0]), "%s", kid);
		j->n++;
		copy = json_pack("{s:s, s:s, s:O, s:O, s:s, s:s}", "kty", "EC", "crv", "P-256",
						 "x", json_object_get(k, "x"), "y", json_object_get(k, "y"),
						 "kid", kid, "use", "jwt-svid");
		if (copy != NULL)
			json_array_append_new(jwks, copy);
	}
	out = json_pack("{s:o}", "keys", jwks);
	jwks = NULL;
	j->jwks = out != NULL ? json_dumps(out, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	json_decref(out);
	if (j->jwks == NULL)
		goto fail;
	j->jwks_len = strlen(j->jwks);
	json_decref(doc);
	return j;
fail:
	json_decref(jwks);
	json_decref(doc);
	bcd_wl_jwt_free(j);
	return NULL;
}

void
bcd_wl_jwt_free(bcd_wl_jwt *j)
{
	if (j == NULL)
		return;
	for (int i = 0; i < j->n; i++)
		EVP_PKEY_free(j->key[i]);
	free(j->jwks);
	free(j);
}

const char *
bcd_wl_jwt_bundle(const bcd_wl_jwt *j, size_t *len)
{
	*len = j->jwks_len;
	return j->jwks;
}

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

/* ValidateJWTSVID's checks of token for audience (jwt.h). */
int
bcd_wl_jwt_validate(const bcd_wl_jwt *j, const char *trust_domain, const char *token,
					const char *audience, char **spiffe_id, json_t **claims, char *err,
					size_t errlen)
{
	char		kid[64];
	char		td[TRUST_DOMAIN_MAX + 1];
	unsigned char *payload = NULL;
	size_t		plen = 0;
	json_t	   *doc = NULL;
	json_t	   *exp;
	json_t	   *nbf;
	const char *sub;
	double		now = (double) time(NULL);
	int			i;

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
	for (i = 0; i < j->n; i++)
		if (strcmp(j->kid[i], kid) == 0)
			break;
	if (i == j->n)
	{
		snprintf(err, errlen, "the token's kid names no jwt-svid key of trust domain "
				 BC_SPIFFE_SCHEME "%s", trust_domain);
		return BC_EINVAL;
	}
	if (bc_jws_verify_es256(j->key[i], token, strlen(token), 64 * 1024, &payload, &plen) != BC_OK)
	{
		snprintf(err, errlen, "the token's signature does not verify");
		return BC_EINVAL;
	}
	doc = json_loadb((const char *) payload, plen, JSON_REJECT_DUPLICATES, NULL);
	free(payload);
	exp = json_object_get(doc, "exp");
	nbf = json_object_get(doc, "nbf");
	sub = bcd_json_str(doc, "sub", NULL);
	if (!json_is_object(doc) || sub == NULL)
		snprintf(err, errlen, "the token has no subject (sub)");
	else if (bcd_wl_spiffe_trust_domain(sub, td, sizeof(td)) != BC_OK)
		snprintf(err, errlen, "the token's subject (sub) is not a SPIFFE ID");
	else if (strcmp(td, trust_domain) != 0)
		snprintf(err, errlen, "the token's subject is in trust domain " BC_SPIFFE_SCHEME "%s; "
				 "bcd holds the bundle of trust domain " BC_SPIFFE_SCHEME "%s only, so it "
				 "cannot validate it", td, trust_domain);
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

int
bcd_wl_jwt_fetch(const bcd_service_keys *keys, bcd_http *http, const bcd_node_snapshot *node,
				 const char *session, const char *context, const bcd_peer *caller,
				 char *const *audience, size_t n_audience, char **spiffe_id, char **token,
				 char *err, size_t errlen)
{
	bcd_credential cred;
	json_t	   *extra = json_object();
	json_t	   *aud = json_array();
	json_t	   *who;
	json_t	   *payload = NULL;
	json_t	   *req = NULL;
	char	   *proof = NULL;
	char	   *body = NULL;
	char		proof_sha[44];
	char		want[1024];
	const char *sid;
	int			rc = BC_EINVAL;

	*spiffe_id = *token = NULL;
	snprintf(err, errlen, "out of memory");
	if (extra == NULL || aud == NULL)
		goto out;
	for (size_t i = 0; i < n_audience; i++)
		json_array_append_new(aud, json_string(audience[i]));
	json_object_set(extra, "audience", aud);
	json_object_set_new(extra, "session", json_string(session));
	if (context[0] != '\0')
		json_object_set_new(extra, "context", json_string(context));
	if ((who = bcd_peer_json(caller)) != NULL)
		json_object_set_new(extra, "caller", who);
	memset(&cred, 0, sizeof(cred));
	cred.key = node->key;
	cred.spiffe_id = (char *) node->spiffe_id;
	snprintf(cred.serial, sizeof(cred.serial), "%s", node->serial);
	proof = bcd_node_proof(&cred, BC_PURPOSE_JWT_SVID, extra);
	req = proof != NULL ? json_pack("{s:s}", "proof", proof) : NULL;
	body = req != NULL ? json_dumps(req, JSON_COMPACT) : NULL;
	if (body == NULL || bc_sha256_b64url(proof, strlen(proof), proof_sha) != BC_OK)
		goto out;
	payload = bcd_node_exchange(http, keys, &cred, BC_PATH_JWT_SVID, body, BC_PURPOSE_JWT_SVID);
	if (payload == NULL)
	{
		snprintf(err, errlen, "the service issued no JWT-SVID (bcd's log says why)");
		rc = BC_EVERIFY;
		goto out;
	}
	sid = bcd_json_str(payload, "sessionId", NULL);
	if (strcmp(bcd_json_str(payload, "proofSha256", ""), proof_sha) != 0 ||
		strcmp(bcd_json_str(payload, "session", ""), session) != 0 ||
		strcmp(bcd_json_str(payload, "context", ""), context) != 0 || sid == NULL ||
		!bc_spiffe_session_of(want, sizeof(want), node->spiffe_id, sid) ||
		strcmp(bcd_json_str(payload, "spiffeId", ""), want) != 0 ||
		bcd_json_str(payload, "token", NULL) == NULL)
	{
		snprintf(err, errlen, "the signed answer is not for this request");
		bcd_log("workload api: %s: %s; ignored", BC_PATH_JWT_SVID, err);
		goto out;
	}
	*spiffe_id = strdup(want);
	*token = strdup(bcd_json_str(payload, "token", ""));
	if (*spiffe_id == NULL || *token == NULL)
	{
		free(*spiffe_id);
		free(*token);
		*spiffe_id = *token = NULL;
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	rc = BC_OK;
out:
	json_decref(payload);
	json_decref(req);
	json_decref(extra);
	json_decref(aud);
	free(proof);
	free(body);
	return rc;
}
