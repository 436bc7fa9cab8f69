/*
 * service_keys.c: the pinned public keys of the JoinService, the JSON that
 * bc_join.service_keys() returns:
 * {"trustDomain": "...", "signingKey": {JWK}, "encryptionKey": {JWK},
 *  "signingKeys": [{JWK, "kid"}...], "encryptionKeys": [...],
 *  "jwtKeys": [{JWK, "kid"}...],
 *  "nodeCa": "<PEM: the issuing CA .. the root>"}
 *  "issuedAt": "<RFC 3339>", "signed": "<JWS of the document with issuedAt>"}
 * and their rollover: bc_join.signed_service_keys() ({"keys": [JWS...]}, the
 * same document with issuedAt signed by each signing key) replaces the
 * signing and encryption keys when a JWS verifies with a key pinned already.
 *
 * What is pinned for good: the trust domain and the node CA's root (nodeCa's
 * last certificate).  A rollover that changes either is refused; rotating
 * the root means handing agents a new --service-keys file.
 *
 * No rollback: the pinned set has a time, the issuedAt of the file's
 * "signed" member (the document signed by its own current signing key, so
 * the time is the service's statement, not a line anyone could add) or of
 * the last rollover taken up; a rollover issued before it is refused, from
 * the first one on.  A key a rollover dropped (a signing key no longer
 * listed, an encryption key no longer current) is remembered (kept with the
 * rollover in the state directory) and never taken back.  A file without
 * "signed" (made before 0.2.0) still loads, without a time: until its first
 * rollover an older set is not recognised as older (docs/operator.md).
 *
 * The jwt-svid keys (jwtKeys: the current one first, then a staged or a
 * previous one) follow the same rules: taken up with every rollover, each
 * new list a new generation (the Workload API pushes its JWT bundle and
 * validates tokens with them), and a kid a rollover dropped never returns.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/err.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "core/fileio.h"
#include "core/log.h"
#include "core/service_keys.h"
#include "core/transport.h"

/* Longest trust domain accepted (a DNS name). */
#define TRUST_DOMAIN_MAX 255
/* Most certificates in nodeCa. */
#define NODE_CA_MAX 8
/* Most JWSs in a rollover. */
#define ROLLOVER_MAX 8
/* Keys remembered as dropped (the oldest forgotten first; older sets are refused by time anyway). */
#define DROPPED_MAX 32

/* One set of keys parsed from a service-keys document. */
typedef struct parsed_keys
{
	char	   *trust_domain;
	X509	   *anchor;
	int			n_sig;
	EVP_PKEY   *sig[BCD_PINNED_MAX];	/* [0] the current one */
	char		kid[BCD_PINNED_MAX][44];
	EVP_PKEY   *enc;
	char		issued_at[32];	/* "" when the document has none */
	int64_t		issued;			/* issued_at as Unix seconds (0: none) */
	int			n_jwt;			/* jwtKeys, the current one first */
	EVP_PKEY   *jwt[BCD_JWT_KEYS_MAX];
	char		jwt_kid[BCD_JWT_KEYS_MAX][BCD_KID_MAX];
	size_t		n_ca;			/* nodeCa's certificates (anchor the last) */
	X509	   *ca[NODE_CA_MAX];
} parsed_keys;

/* What may change, under its lock. */
struct bcd_keyset
{
	pthread_mutex_t mu;
	int			n_sig;
	EVP_PKEY   *sig[BCD_PINNED_MAX];
	char		kid[BCD_PINNED_MAX][44];
	EVP_PKEY   *enc;
	char		issued_at[32];	/* of the set pinned ("" for a file without "signed") */
	int64_t		issued;			/* the same as Unix seconds (0: no time) */
	int			n_jwt;			/* the jwt-svid keys, the current one first */
	EVP_PKEY   *jwt[BCD_JWT_KEYS_MAX];
	char		jwt_kid[BCD_JWT_KEYS_MAX][BCD_KID_MAX];
	unsigned long jwt_gen;		/* bumped whenever their list changes */
	int			n_dropped;		/* kids of keys a rollover dropped, never taken back */
	char		dropped[DROPPED_MAX][BCD_KID_MAX];
	char		base[44];		/* SHA-256 (b64url) of the --service-keys file */
	char	   *state_dir;		/* where a rollover is kept, or NULL */
};

/* 1 when s is a plausible SPIFFE trust domain: lower-case letters, digits, '.', '-', '_'. */
static int
trust_domain_is_valid(const char *s)
{
	size_t		i;

	if (s[0] == '\0')
		return 0;
	for (i = 0; s[i] != '\0'; i++)
	{
		char		c = s[i];

		if (i >= TRUST_DOMAIN_MAX)
			return 0;
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
			  c == '.' || c == '-' || c == '_'))
			return 0;
	}
	return 1;
}

/* The public key of a JWK object. */
static int
jwk_key(json_t *jwk, EVP_PKEY **out)
{
	char	   *text;
	int			rc;

	*out = NULL;
	if (!json_is_object(jwk))
		return BC_EINVAL;
	text = json_dumps(jwk, JSON_COMPACT);
	if (text == NULL)
		return BC_ENOMEM;
	rc = bc_pkey_from_jwk(text, strlen(text), out);
	free(text);
	return rc;
}

static void
parsed_free(parsed_keys *p)
{
	int			i;

	free(p->trust_domain);
	if (p->n_ca == 0)
		X509_free(p->anchor);
	for (i = 0; i < (int) p->n_ca; i++)
		X509_free(p->ca[i]);
	for (i = 0; i < p->n_sig; i++)
		EVP_PKEY_free(p->sig[i]);
	for (i = 0; i < p->n_jwt; i++)
		EVP_PKEY_free(p->jwt[i]);
	EVP_PKEY_free(p->enc);
	memset(p, 0, sizeof(*p));
}

/* Add key to p's signing keys unless it is there already (by kid). */
static int
add_signing(parsed_keys *p, EVP_PKEY *key)
{
	char		kid[44];
	int			i;

	if (bc_jwk_thumbprint(key, kid) != BC_OK)
	{
		EVP_PKEY_free(key);
		return BC_EINVAL;
	}
	for (i = 0; i < p->n_sig; i++)
		if (strcmp(p->kid[i], kid) == 0)
		{
			EVP_PKEY_free(key);
			return BC_OK;
		}
	if (p->n_sig == BCD_PINNED_MAX)
	{
		EVP_PKEY_free(key);
		return BC_ETOOBIG;
	}
	memcpy(p->kid[p->n_sig], kid, sizeof(kid));
	p->sig[p->n_sig++] = key;
	return BC_OK;
}

/*
 * jwtKeys (absent or an array of at most BCD_JWT_KEYS_MAX public P-256 JWKs,
 * each with its own kid, the current one first) into p.
 */
static int
parse_jwt_keys(json_t *list, parsed_keys *p, const char **what)
{
	size_t		i;

	*what = "jwtKeys is not an array of at most 4 public P-256 JWKs, each with a kid of its own";
	if (list == NULL)
		return BC_OK;
	if (!json_is_array(list) || json_array_size(list) > BCD_JWT_KEYS_MAX)
		return BC_EINVAL;
	for (i = 0; i < json_array_size(list); i++)
	{
		json_t	   *jwk = json_array_get(list, i);
		json_t	   *kid = json_object_get(jwk, "kid");

		if (!json_is_string(kid) || json_string_length(kid) == 0 ||
			json_string_length(kid) >= BCD_KID_MAX ||
			strlen(json_string_value(kid)) != json_string_length(kid))
			return BC_EINVAL;
		for (int k = 0; k < p->n_jwt; k++)
			if (strcmp(p->jwt_kid[k], json_string_value(kid)) == 0)
				return BC_EINVAL;
		if (bc_pkey_from_jwk_object(jwk, &p->jwt[p->n_jwt]) != BC_OK)
			return BC_EINVAL;
		memcpy(p->jwt_kid[p->n_jwt], json_string_value(kid), json_string_length(kid) + 1);
		p->n_jwt++;
	}
	return BC_OK;
}

/* 1 when a and b list the same jwt-svid kids in the same order. */
static int
same_jwt(int na, char (*a)[BCD_KID_MAX], int nb, char (*b)[BCD_KID_MAX])
{
	if (na != nb)
		return 0;
	for (int i = 0; i < na; i++)
		if (strcmp(a[i], b[i]) != 0)
			return 0;
	return 1;
}

/* Parse a service-keys document (an object); *what says what was wrong. */
static int
parse_doc(json_t *doc, parsed_keys *p, const char **what)
{
	json_t	   *td = json_object_get(doc, "trustDomain");
	json_t	   *sigs = json_object_get(doc, "signingKeys");
	json_t	   *pem = json_object_get(doc, "nodeCa");
	json_t	   *at = json_object_get(doc, "issuedAt");
	X509	   *certs[NODE_CA_MAX];
	size_t		ncerts = 0;
	EVP_PKEY   *k;
	size_t		i;
	int			rc;

	memset(p, 0, sizeof(*p));
	*what = "not a JSON object";
	rc = BC_EINVAL;
	if (!json_is_object(doc))
		goto out;
	*what = "trustDomain missing or not a valid trust domain";
	if (!json_is_string(td) || !trust_domain_is_valid(json_string_value(td)))
		goto out;
	rc = BC_ENOMEM;
	p->trust_domain = strdup(json_string_value(td));
	if (p->trust_domain == NULL)
		goto out;
	*what = "signingKey is not a public P-256 JWK";
	rc = jwk_key(json_object_get(doc, "signingKey"), &k);
	if (rc != BC_OK || (rc = add_signing(p, k)) != BC_OK)
		goto out;
	*what = "signingKeys is not an array of at most 4 public P-256 JWKs";
	rc = BC_EINVAL;
	if (sigs != NULL && !json_is_array(sigs))
		goto out;
	for (i = 0; sigs != NULL && i < json_array_size(sigs); i++)
	{
		rc = jwk_key(json_array_get(sigs, i), &k);
		if (rc != BC_OK || (rc = add_signing(p, k)) != BC_OK)
			goto out;
	}
	rc = parse_jwt_keys(json_object_get(doc, "jwtKeys"), p, what);
	if (rc != BC_OK)
		goto out;
	*what = "encryptionKey is not a public P-256 JWK";
	rc = jwk_key(json_object_get(doc, "encryptionKey"), &p->enc);
	if (rc != BC_OK)
		goto out;
	*what = "nodeCa is not a bundle of PEM certificates";
	rc = BC_EINVAL;
	if (!json_is_string(pem))
		goto out;
	rc = bc_cert_read_pem_bundle(NULL, json_string_value(pem), json_string_length(pem),
								 certs, NODE_CA_MAX, &ncerts, NULL, 0);
	if (rc != BC_OK)
		goto out;
	/* The root is what is pinned; the service sends the rest in every answer. */
	p->anchor = certs[ncerts - 1];
	p->n_ca = ncerts;
	memcpy(p->ca, certs, ncerts * sizeof(certs[0]));
	*what = "issuedAt is not a time YYYY-MM-DDTHH:MM:SSZ";
	rc = BC_EINVAL;
	if (at != NULL && (!json_is_string(at) || json_string_length(at) >= sizeof(p->issued_at) ||
					   bc_cloud_parse_rfc3339(json_string_value(at), &p->issued) != BC_OK ||
					   p->issued <= 0))
		goto out;
	if (at != NULL)
		memcpy(p->issued_at, json_string_value(at), json_string_length(at) + 1);
	rc = BC_OK;
out:
	if (rc != BC_OK)
		parsed_free(p);
	ERR_clear_error();
	return rc;
}

/* Move p's signing and encryption keys into set (under its lock, or alone). */
static void
set_take(struct bcd_keyset *set, parsed_keys *p)
{
	int			i;

	for (i = 0; i < set->n_sig; i++)
		EVP_PKEY_free(set->sig[i]);
	EVP_PKEY_free(set->enc);
	set->n_sig = p->n_sig;
	memcpy(set->sig, p->sig, sizeof(set->sig));
	memcpy(set->kid, p->kid, sizeof(set->kid));
	set->enc = p->enc;
	snprintf(set->issued_at, sizeof(set->issued_at), "%s", p->issued_at);
	set->issued = p->issued;
	if (!same_jwt(set->n_jwt, set->jwt_kid, p->n_jwt, p->jwt_kid))
		set->jwt_gen++;
	for (i = 0; i < set->n_jwt; i++)
		EVP_PKEY_free(set->jwt[i]);
	set->n_jwt = p->n_jwt;
	memcpy(set->jwt, p->jwt, sizeof(set->jwt));
	memcpy(set->jwt_kid, p->jwt_kid, sizeof(set->jwt_kid));
	p->n_sig = 0;
	p->n_jwt = 0;
	p->enc = NULL;
}

/* 1 when a and b hold the same keys, trust domain and node CA bundle. */
static int
same_set(const parsed_keys *a, const parsed_keys *b)
{
	size_t		i;

	if (strcmp(a->trust_domain, b->trust_domain) != 0 || a->n_sig != b->n_sig ||
		EVP_PKEY_eq(a->enc, b->enc) != 1 || a->n_ca != b->n_ca ||
		!same_jwt(a->n_jwt, (char (*)[BCD_KID_MAX]) a->jwt_kid, b->n_jwt,
				  (char (*)[BCD_KID_MAX]) b->jwt_kid))
		return 0;
	for (i = 0; i < (size_t) a->n_sig; i++)
		if (strcmp(a->kid[i], b->kid[i]) != 0)
			return 0;
	for (i = 0; i < a->n_ca; i++)
		if (X509_cmp(a->ca[i], b->ca[i]) != 0)
			return 0;
	return 1;
}

/*
 * The file's time: "signed" (a JWS by one of p's own signing keys, named by
 * its kid) must hold the very document p is, with issuedAt, which becomes
 * p's time.  A file without it has no time (an issuedAt standing alone is
 * not believed).  BC_OK, or an error and *what.
 */
static int
take_signed_time(json_t *doc, parsed_keys *p, const char **what)
{
	json_t	   *sig = json_object_get(doc, "signed");
	json_t	   *inner = NULL;
	parsed_keys q;
	unsigned char *pl = NULL;
	size_t		plen = 0;
	char		kid[64];
	int			i;
	int			rc = BC_EVERIFY;

	memset(&q, 0, sizeof(q));
	if (sig == NULL)
	{
		*what = "issuedAt without \"signed\" is not a time bcd can believe (remove it, or "
			"pin the file bc_join.service_keys() wrote)";
		if (p->issued_at[0] != '\0')
			return BC_EINVAL;
		return BC_OK;
	}
	*what = "\"signed\" is not a JWS by one of the file's signing keys (by its kid)";
	if (!json_is_string(sig) ||
		bc_jws_header_kid(json_string_value(sig), json_string_length(sig), kid, sizeof(kid)) != BC_OK)
		goto out;
	for (i = 0; i < p->n_sig; i++)
		if (strcmp(kid, p->kid[i]) == 0)
			break;
	if (i == p->n_sig ||
		bc_jws_verify_es256(p->sig[i], json_string_value(sig), json_string_length(sig),
							BCD_SERVICE_KEYS_MAX, &pl, &plen) != BC_OK)
		goto out;
	inner = json_loadb((const char *) pl, plen, JSON_REJECT_DUPLICATES, NULL);
	rc = parse_doc(inner, &q, what);
	if (rc != BC_OK)
		goto out;
	rc = BC_EVERIFY;
	*what = "the document \"signed\" holds is not the file's (keys, trust domain, nodeCa or issuedAt differ)";
	if (!same_set(p, &q) || q.issued == 0 ||
		(p->issued_at[0] != '\0' && strcmp(p->issued_at, q.issued_at) != 0))
		goto out;
	memcpy(p->issued_at, q.issued_at, sizeof(p->issued_at));
	p->issued = q.issued;
	rc = BC_OK;
out:
	parsed_free(&q);
	json_decref(inner);
	free(pl);
	return rc;
}

/* Load and check the service-keys file at path (bounded to 64 KiB). */
int
bcd_service_keys_load(const char *path, bcd_service_keys *keys,
					  char *err, size_t errlen)
{
	char	   *text = NULL;
	size_t		len = 0;
	json_t	   *doc = NULL;
	json_error_t jerr;
	parsed_keys p;
	const char *what = "cannot read the file";
	int			rc;

	memset(keys, 0, sizeof(*keys));
	memset(&p, 0, sizeof(p));
	rc = bcd_read_file(path, BCD_SERVICE_KEYS_MAX, &text, &len);
	if (rc != BC_OK)
		goto out;
	doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	rc = parse_doc(doc, &p, &what);
	if (rc != BC_OK)
		goto out;
	rc = take_signed_time(doc, &p, &what);
	if (rc != BC_OK)
		goto out;
	rc = BC_ENOMEM;
	what = "out of memory";
	keys->set = calloc(1, sizeof(*keys->set));
	if (keys->set == NULL || pthread_mutex_init(&keys->set->mu, NULL) != 0)
	{
		free(keys->set);
		keys->set = NULL;
		goto out;
	}
	rc = bc_sha256_b64url((const unsigned char *) text, len, keys->set->base);
	if (rc != BC_OK)
		goto out;
	keys->trust_domain = p.trust_domain;
	keys->node_ca = p.anchor;
	p.trust_domain = NULL;
	p.anchor = NULL;
	p.n_ca--;					/* the last one, the anchor, is keys' now */
	set_take(keys->set, &p);
out:
	parsed_free(&p);
	if (rc != BC_OK)
	{
		snprintf(err, errlen, "%s: %s (%s)", path, what, bc_status_str(rc));
		bcd_service_keys_free(keys);
	}
	json_decref(doc);
	free(text);
	return rc;
}

/* Release what bcd_service_keys_load allocated. */
void
bcd_service_keys_free(bcd_service_keys *keys)
{
	free(keys->trust_domain);
	X509_free(keys->node_ca);
	if (keys->set != NULL)
	{
		parsed_keys p;

		memset(&p, 0, sizeof(p));
		set_take(keys->set, &p);
		pthread_mutex_destroy(&keys->set->mu);
		free(keys->set->state_dir);
		free(keys->set);
	}
	memset(keys, 0, sizeof(*keys));
}

/*
 * 1 when p may replace what keys pins: the same trust domain, and the pinned
 * node CA certificate in its nodeCa (the root; or the intermediate, when
 * that is what the --service-keys file named).
 */
static int
same_anchor(const bcd_service_keys *keys, const parsed_keys *p)
{
	size_t		i;

	if (strcmp(keys->trust_domain, p->trust_domain) != 0)
		return 0;
	for (i = 0; i < p->n_ca; i++)
		if (X509_cmp(keys->node_ca, p->ca[i]) == 0)
			return 1;
	return 0;
}

/* 1 when kid names a key a rollover dropped (under set's lock). */
static int
is_dropped(const struct bcd_keyset *set, const char *kid)
{
	int			i;

	for (i = 0; i < set->n_dropped; i++)
		if (strcmp(set->dropped[i], kid) == 0)
			return 1;
	return 0;
}

/* Remember kid as dropped, forgetting the oldest when full (under set's lock). */
static void
add_dropped(struct bcd_keyset *set, const char *kid)
{
	if (is_dropped(set, kid) || strlen(kid) >= sizeof(set->dropped[0]))
		return;
	if (set->n_dropped == DROPPED_MAX)
	{
		memmove(set->dropped[0], set->dropped[1], sizeof(set->dropped[0]) * (DROPPED_MAX - 1));
		set->n_dropped--;
	}
	snprintf(set->dropped[set->n_dropped++], sizeof(set->dropped[0]), "%s", kid);
}

/* Keep the set doc (taken up) in the state directory: {"base", "set", "dropped"}. */
static void
keep(struct bcd_keyset *set, json_t *doc)
{
	json_t	   *dropped = json_array();
	json_t	   *kept;
	char	   *text;
	int			i;

	for (i = 0; dropped != NULL && i < set->n_dropped; i++)
		json_array_append_new(dropped, json_string(set->dropped[i]));
	kept = dropped != NULL ? json_pack("{s:s,s:O,s:o}", "base", set->base, "set", doc,
									   "dropped", dropped) : NULL;
	text = kept != NULL ? json_dumps(kept, JSON_COMPACT) : NULL;

	if (set->state_dir != NULL &&
		(text == NULL ||
		 bcd_write_file_atomic(set->state_dir, BCD_ROLLOVER_FILE, text, strlen(text), 0600) != BC_OK))
		bcd_log("could not keep the service keys' rollover in %s/%s; "
				"it is in use until bcd stops", set->state_dir, BCD_ROLLOVER_FILE);
	free(text);
	json_decref(kept);
}

void
bcd_service_keys_use_state(const bcd_service_keys *keys, const char *state_dir)
{
	struct bcd_keyset *set = keys->set;
	char	   *path = bcd_path_join(state_dir, BCD_ROLLOVER_FILE);
	char	   *text = NULL;
	size_t		len = 0;
	json_t	   *doc = NULL;
	parsed_keys p;
	const char *what = NULL;

	memset(&p, 0, sizeof(p));
	pthread_mutex_lock(&set->mu);
	free(set->state_dir);
	set->state_dir = strdup(state_dir);
	if (path == NULL || bcd_read_file(path, BCD_SERVICE_KEYS_MAX * 2, &text, &len) != BC_OK)
		goto out;				/* none kept */
	doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_string(json_object_get(doc, "base")) ||
		strcmp(json_string_value(json_object_get(doc, "base")), set->base) != 0)
	{
		bcd_log("%s grew from another --service-keys file; not used", path);
		goto out;
	}
	if (parse_doc(json_object_get(doc, "set"), &p, &what) == BC_OK)
		what = NULL;
	if (what != NULL || !same_anchor(keys, &p))
	{
		bcd_log("%s is not a set of the pinned service (%s); not used", path,
				what != NULL ? what : "another trust domain or root");
		goto out;
	}
	if (p.issued == 0 || p.issued < set->issued)
	{
		bcd_log("%s is older than the --service-keys file (or has no issuedAt); not used", path);
		goto out;
	}
	{
		json_t	   *dropped = json_object_get(doc, "dropped");
		size_t		i;

		for (i = 0; i < json_array_size(dropped); i++)
			if (json_is_string(json_array_get(dropped, i)))
				add_dropped(set, json_string_value(json_array_get(dropped, i)));
	}
	set_take(set, &p);
out:
	pthread_mutex_unlock(&set->mu);
	parsed_free(&p);
	json_decref(doc);
	free(text);
	free(path);
}

int
bcd_service_keys_verify(const bcd_service_keys *keys, const char *jws, size_t n,
						size_t max_payload, unsigned char **payload,
						size_t *payload_len, int *unknown_kid)
{
	struct bcd_keyset *set = keys->set;
	char		kid[64];
	EVP_PKEY   *key = NULL;
	int			rc;
	int			i;

	*payload = NULL;
	*payload_len = 0;
	if (unknown_kid != NULL)
		*unknown_kid = 0;
	rc = bc_jws_header_kid(jws, n, kid, sizeof(kid));
	if (rc != BC_OK)
		return rc == BC_ETOOBIG ? rc : BC_EINVAL;
	pthread_mutex_lock(&set->mu);
	for (i = 0; i < set->n_sig && key == NULL; i++)
		if (kid[0] == '\0' ? i == 0 : strcmp(kid, set->kid[i]) == 0)
			key = set->sig[i];
	if (key != NULL)
		EVP_PKEY_up_ref(key);
	pthread_mutex_unlock(&set->mu);
	if (key == NULL)
	{
		if (unknown_kid != NULL)
			*unknown_kid = 1;
		return BC_EVERIFY;
	}
	rc = bc_jws_verify_es256(key, jws, n, max_payload, payload, payload_len);
	EVP_PKEY_free(key);
	return rc;
}

int64_t
bcd_service_keys_issued(const bcd_service_keys *keys)
{
	int64_t		t;

	pthread_mutex_lock(&keys->set->mu);
	t = keys->set->issued;
	pthread_mutex_unlock(&keys->set->mu);
	return t;
}

EVP_PKEY *
bcd_service_keys_encryption(const bcd_service_keys *keys)
{
	EVP_PKEY   *key;

	pthread_mutex_lock(&keys->set->mu);
	key = keys->set->enc;
	EVP_PKEY_up_ref(key);
	pthread_mutex_unlock(&keys->set->mu);
	return key;
}

int
bcd_service_keys_rollover(const bcd_service_keys *keys, const char *text, size_t len,
						  char *err, size_t errlen)
{
	struct bcd_keyset *set = keys->set;
	json_t	   *doc = NULL;
	json_t	   *list;
	json_t	   *signed_doc = NULL;
	parsed_keys p;
	const char *what = "not {\"keys\": [JWS...]}";
	char		why[200];
	char		enc_kid[44];
	char		old_enc_kid[44];
	size_t		i;
	int			j;
	int			changed;
	int			rc = BC_EINVAL;

	memset(&p, 0, sizeof(p));
	if (len > BCD_SERVICE_KEYS_MAX * 2)
	{
		rc = BC_ETOOBIG;
		goto out;
	}
	doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
	list = json_object_get(doc, "keys");
	if (!json_is_object(doc) || json_object_size(doc) != 1 || !json_is_array(list) ||
		json_array_size(list) == 0 || json_array_size(list) > ROLLOVER_MAX)
		goto out;
	what = "no JWS in it is signed by a pinned signing key";
	rc = BC_EVERIFY;
	for (i = 0; i < json_array_size(list) && signed_doc == NULL; i++)
	{
		json_t	   *jws = json_array_get(list, i);
		unsigned char *pl = NULL;
		size_t		plen = 0;
		char		kid[64];

		/* Only a JWS naming a pinned key (the current one is no default here). */
		if (!json_is_string(jws) ||
			bc_jws_header_kid(json_string_value(jws), json_string_length(jws), kid, sizeof(kid)) != BC_OK ||
			kid[0] == '\0')
			continue;
		if (bcd_service_keys_verify(keys, json_string_value(jws), json_string_length(jws),
									BCD_SERVICE_KEYS_MAX, &pl, &plen, NULL) == BC_OK)
			signed_doc = json_loadb((const char *) pl, plen, JSON_REJECT_DUPLICATES, NULL);
		free(pl);
	}
	if (signed_doc == NULL)
		goto out;
	rc = parse_doc(signed_doc, &p, &what);
	if (rc != BC_OK)
		goto out;
	rc = BC_EVERIFY;
	what = "it names another trust domain or node CA root";
	if (!same_anchor(keys, &p))
		goto out;
	what = "it has no issuedAt";
	if (p.issued == 0)
		goto out;
	if (bc_jwk_thumbprint(p.enc, enc_kid) != BC_OK)
	{
		what = "its encryption key has no thumbprint";
		goto out;
	}
	pthread_mutex_lock(&set->mu);
	if (set->issued != 0 && p.issued < set->issued)
	{
		pthread_mutex_unlock(&set->mu);
		snprintf(why, sizeof(why), "it is older than the set pinned now (issued %s, pinned %s)",
				 p.issued_at, set->issued_at);
		what = why;
		goto out;
	}
	for (i = 0; i < (size_t) p.n_sig; i++)
		if (is_dropped(set, p.kid[i]))
			break;
	for (j = 0; j < p.n_jwt; j++)
		if (is_dropped(set, p.jwt_kid[j]))
		{
			pthread_mutex_unlock(&set->mu);
			snprintf(why, sizeof(why), "it brings back a jwt-svid key the pinned set dropped "
					 "(kid %s)", p.jwt_kid[j]);
			what = why;
			goto out;
		}
	if (i < (size_t) p.n_sig || is_dropped(set, enc_kid))
	{
		pthread_mutex_unlock(&set->mu);
		snprintf(why, sizeof(why), "it brings back a key the pinned set dropped (%s key %s)",
				 i < (size_t) p.n_sig ? "signing" : "encryption",
				 i < (size_t) p.n_sig ? p.kid[i] : enc_kid);
		what = why;
		goto out;
	}
	/* What this rollover drops: signing keys it no longer lists, the encryption key it replaces. */
	for (j = 0; j < set->n_sig; j++)
	{
		for (i = 0; i < (size_t) p.n_sig; i++)
			if (strcmp(set->kid[j], p.kid[i]) == 0)
				break;
		if (i == (size_t) p.n_sig)
			add_dropped(set, set->kid[j]);
	}
	if (bc_jwk_thumbprint(set->enc, old_enc_kid) == BC_OK && strcmp(old_enc_kid, enc_kid) != 0)
		add_dropped(set, old_enc_kid);
	/* jwt-svid keys it no longer lists are retired: their tokens validate no more */
	for (j = 0; j < set->n_jwt; j++)
	{
		int			k;

		for (k = 0; k < p.n_jwt; k++)
			if (strcmp(set->jwt_kid[j], p.jwt_kid[k]) == 0)
				break;
		if (k == p.n_jwt)
			add_dropped(set, set->jwt_kid[j]);
	}
	if (!same_jwt(set->n_jwt, set->jwt_kid, p.n_jwt, p.jwt_kid))
	{
		char		kids[BCD_JWT_KEYS_MAX * (BCD_KID_MAX + 1) + 8] = "";

		for (j = 0; j < p.n_jwt; j++)
			snprintf(kids + strlen(kids), sizeof(kids) - strlen(kids), "%s%s",
					 j > 0 ? " " : "", p.jwt_kid[j]);
		bcd_log("jwt-svid keys rolled over (issued %s): %s", p.issued_at,
				p.n_jwt > 0 ? kids : "none");
	}
	changed = set->n_sig != p.n_sig || EVP_PKEY_eq(set->enc, p.enc) != 1;
	for (i = 0; !changed && i < (size_t) p.n_sig; i++)
		changed = strcmp(set->kid[i], p.kid[i]) != 0;
	if (changed)
	{
		char		kids[BCD_PINNED_MAX * 46] = "";

		for (i = 0; i < (size_t) p.n_sig; i++)
			snprintf(kids + strlen(kids), sizeof(kids) - strlen(kids), "%s%s",
					 i > 0 ? " " : "", p.kid[i]);
		bcd_log("service keys rolled over (issued %s): signing keys %s, encryption key %s",
				p.issued_at, kids, enc_kid);
	}
	set_take(set, &p);
	keep(set, signed_doc);
	pthread_mutex_unlock(&set->mu);
	rc = BC_OK;
out:
	if (rc != BC_OK)
		snprintf(err, errlen, "service keys rollover refused: %s (%s)", what, bc_status_str(rc));
	parsed_free(&p);
	json_decref(signed_doc);
	json_decref(doc);
	return rc;
}

int
bcd_service_keys_refresh(bcd_http *http, const bcd_service_keys *keys)
{
	bcd_http_reply reply;
	char		err[512];
	bcd_rc		rc;
	int			st = BC_EINVAL;

	rc = bcd_http_exchange(http, BC_PATH_SERVICE_KEYS, NULL, &reply, err, sizeof(err));
	if (rc == BCD_RC_OK && reply.status == 200)
		st = bcd_service_keys_rollover(keys, reply.body, reply.len, err, sizeof(err));
	else if (rc == BCD_RC_OK)
		bcd_http_describe(&reply, err, sizeof(err));
	if (st != BC_OK)
		bcd_log("%s: %s", BC_PATH_SERVICE_KEYS, err);
	bcd_http_reply_free(&reply);
	return st;
}

/* The first JWS of doc a pinned key verifies, its payload parsed (service_keys.h). */
json_t *
bcd_service_keys_first_verified(const bcd_service_keys *keys, json_t *doc, size_t max_payload)
{
	json_t	   *list = json_object_get(doc, "keys");
	json_t	   *out = NULL;

	if (!json_is_object(doc) || !json_is_array(list))
		return NULL;
	for (size_t i = 0; i < json_array_size(list) && i < ROLLOVER_MAX && out == NULL; i++)
	{
		json_t	   *jws = json_array_get(list, i);
		unsigned char *pl = NULL;
		size_t		plen = 0;

		if (json_is_string(jws) &&
			bcd_service_keys_verify(keys, json_string_value(jws), json_string_length(jws),
									max_payload, &pl, &plen, NULL) == BC_OK)
			out = json_loadb((const char *) pl, plen, JSON_REJECT_DUPLICATES, NULL);
		free(pl);
	}
	return out;
}

/*
 * The CA certificates below the root in the nodeCa of the service's current
 * keys (the text of GET /v1/service-keys: a JWS verified by a pinned signing
 * key, its payload's nodeCa), pushed onto out (the caller frees them): the
 * issuing intermediate after a rotation, which the revocation watch needs
 * to verify a CRL or OCSP answer signed under it before this node renewed.
 * They are no trust anchor: whatever uses them still chains to the pinned
 * root.  BC_OK, or an error.
 */
int
bcd_service_keys_cas(const bcd_service_keys *keys, const char *text, size_t len,
					 STACK_OF(X509) *out)
{
	json_t	   *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
	json_t	   *payload = NULL;
	json_t	   *pem;
	X509	   *certs[NODE_CA_MAX];
	size_t		n = 0;
	int			rc = BC_EVERIFY;

	payload = bcd_service_keys_first_verified(keys, doc, BCD_SERVICE_KEYS_MAX);
	pem = json_object_get(payload, "nodeCa");
	if (json_is_string(pem) &&
		(rc = bc_cert_read_pem_bundle(NULL, json_string_value(pem), json_string_length(pem),
									  certs, NODE_CA_MAX, &n, NULL, 0)) == BC_OK)
		for (size_t i = 0; i < n; i++)
		{
			if (X509_cmp(certs[i], keys->node_ca) != 0 && sk_X509_push(out, certs[i]) > 0)
				continue;
			X509_free(certs[i]);
		}
	json_decref(payload);
	json_decref(doc);
	return rc;
}

unsigned long
bcd_service_keys_jwt_gen(const bcd_service_keys *keys)
{
	unsigned long gen;

	pthread_mutex_lock(&keys->set->mu);
	gen = keys->set->jwt_gen;
	pthread_mutex_unlock(&keys->set->mu);
	return gen;
}

char *
bcd_service_keys_jwks(const bcd_service_keys *keys, unsigned long *gen, int *n)
{
	struct bcd_keyset *set = keys->set;
	json_t	   *list = json_array();
	json_t	   *doc;
	char	   *text = NULL;
	int			i;

	pthread_mutex_lock(&set->mu);
	*gen = set->jwt_gen;
	*n = set->n_jwt;
	for (i = 0; list != NULL && i < set->n_jwt; i++)
	{
		char	   *jwk = NULL;
		json_t	   *o = NULL;

		if (bc_jwk_from_pkey(set->jwt[i], &jwk) == BC_OK)
			o = json_loads(jwk, 0, NULL);
		free(jwk);
		if (o == NULL || json_object_set_new(o, "kid", json_string(set->jwt_kid[i])) != 0 ||
			json_object_set_new(o, "use", json_string("jwt-svid")) != 0)
		{
			json_decref(o);
			o = NULL;
		}
		if (o == NULL || json_array_append_new(list, o) != 0)
		{
			json_decref(list);
			list = NULL;
		}
	}
	pthread_mutex_unlock(&set->mu);
	doc = list != NULL ? json_pack("{s:o}", "keys", list) : NULL;
	if (doc != NULL)
		text = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(doc);
	return text;
}

EVP_PKEY *
bcd_service_keys_jwt_key(const bcd_service_keys *keys, const char *kid)
{
	struct bcd_keyset *set = keys->set;
	EVP_PKEY   *key = NULL;

	pthread_mutex_lock(&set->mu);
	for (int i = 0; i < set->n_jwt && key == NULL; i++)
		if (strcmp(set->jwt_kid[i], kid) == 0)
			key = set->jwt[i];
	if (key != NULL)
		EVP_PKEY_up_ref(key);
	pthread_mutex_unlock(&set->mu);
	return key;
}
