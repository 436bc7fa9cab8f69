/*
 * service_keys.c: the pinned public keys of the JoinService, the JSON that
 * bc_join.service_keys() returns:
 * {"trustDomain": "...", "signingKey": {JWK}, "encryptionKey": {JWK},
 *  "signingKeys": [{JWK, "kid"}...], "encryptionKeys": [...],
 *  "nodeCa": "<PEM: the issuing CA .. the root>"}
 * and their rollover: bc_join.signed_service_keys() ({"keys": [JWS...]}, the
 * same document with issuedAt signed by each signing key) replaces the
 * signing and encryption keys when a JWS verifies with a key pinned already.
 *
 * What is pinned for good: the trust domain and the node CA's root (nodeCa's
 * last certificate).  A rollover that changes either is refused; rotating
 * the root means handing agents a new --service-keys file.
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
	char		issued_at[32];	/* of the rollover taken up, "" for the file's */
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
	*what = "issuedAt is not a timestamp";
	rc = BC_EINVAL;
	if (at != NULL && (!json_is_string(at) || json_string_length(at) >= sizeof(p->issued_at)))
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
	p->n_sig = 0;
	p->enc = NULL;
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
	keys->set->issued_at[0] = '\0';
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

/* Keep the set doc (taken up) in the state directory: {"base", "set"}. */
static void
keep(struct bcd_keyset *set, json_t *doc)
{
	json_t	   *kept = json_pack("{s:s,s:O}", "base", set->base, "set", doc);
	char	   *text = kept != NULL ? json_dumps(kept, JSON_COMPACT) : NULL;

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
	size_t		i;
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
	if (p.issued_at[0] == '\0')
		goto out;
	pthread_mutex_lock(&set->mu);
	if (set->issued_at[0] != '\0' && strcmp(p.issued_at, set->issued_at) < 0)
	{
		pthread_mutex_unlock(&set->mu);
		what = "it is older than the set pinned now";
		goto out;
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
		bcd_log("service keys rolled over (issued %s): signing keys %s", p.issued_at, kids);
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
