/*
 * trust_bundles.c: the bundles of federated trust domains (trust_bundles.h).
 *
 * The gateway never fetches a foreign bundle: bc-join-federate does, on a
 * trusted host, and the database judges it (bc_join.store_fetched_bundle);
 * bc_join.signed_trust_bundles() signs the result with every signing key,
 * {"keys":[JWS...]}, each payload
 *   {"trustDomain": "<ours>", "issuedAt": "<RFC 3339>",
 *    "bundles": {"spiffe://<td>": {"keys":[JWK...], "spiffe_sequence": N, ...}}}.
 * bcd believes only a JWS a pinned signing key verifies
 * (bcd_service_keys_verify), for its own trust domain, issued no earlier
 * than the document it holds; a domain's spiffe_sequence lower than the one
 * held keeps that domain's bundle held (a replay of an older one).  Each
 * domain stays apart (SPIFFE Trust Domain and Bundle 4.2: never merged):
 * its x509-svid roots (x5c: exactly one certificate), its jwt-svid keys (kid
 * required; EC or RSA, bc_pkey_from_jwk_any), a JWK of another use or an
 * unknown kty ignored, as the standard says.  A bundle without keys is
 * held as such: every SVID of that domain is refused.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "core/log.h"
#include "core/transport.h"
#include "core/trust_bundles.h"

#ifndef BC_PATH_TRUST_BUNDLES
#define BC_PATH_TRUST_BUNDLES "/v1/trust-bundles"
#endif

/* Most keys in one bundle (the JWSs of the document: bcd_service_keys_first_verified's bound). */
#define TRUST_KEYS_MAX 64
/* The largest spiffe_sequence believed (JSON numbers are exact up to 2^53). */
#define SEQUENCE_MAX 9007199254740992LL

struct bcd_trust_bundles
{
	pthread_mutex_t mu;
	const bcd_service_keys *keys;
	bcd_trust_set *set;			/* the current generation (one reference is the store's) */
	int64_t		issued;			/* issuedAt of the document held (0: none) */
	char		last_error[256];	/* the last failure logged, not logged again */
};

/* Free a domain's contents. */
static void
domain_clear(bcd_trust_domain *d)
{
	for (int i = 0; i < d->n_jwt; i++)
		EVP_PKEY_free(d->jwt[i]);
	free(d->jwt);
	free(d->kid);
	free(d->x509);
	free(d->pem);
	free(d->jwks);
	memset(d, 0, sizeof(*d));
}

/* Free a set (no reference left). */
static void
set_free(bcd_trust_set *s)
{
	if (s == NULL)
		return;
	for (int i = 0; i < s->n; i++)
		domain_clear(&s->d[i]);
	free(s->d);
	free(s);
}

/* The empty store of keys' trust domain (trust_bundles.h). */
bcd_trust_bundles *
bcd_trust_bundles_new(const bcd_service_keys *keys)
{
	bcd_trust_bundles *t = calloc(1, sizeof(*t));

	if (t == NULL)
		return NULL;
	t->set = calloc(1, sizeof(*t->set));
	if (t->set == NULL || pthread_mutex_init(&t->mu, NULL) != 0)
	{
		free(t->set);
		free(t);
		return NULL;
	}
	t->set->refs = 1;
	t->keys = keys;
	return t;
}

/* Free the store (every reference released). */
void
bcd_trust_bundles_free(bcd_trust_bundles *t)
{
	if (t == NULL)
		return;
	set_free(t->set);
	pthread_mutex_destroy(&t->mu);
	free(t);
}

/* The generation now (trust_bundles.h). */
unsigned long
bcd_trust_bundles_gen(bcd_trust_bundles *t)
{
	unsigned long g;

	pthread_mutex_lock(&t->mu);
	g = t->set->gen;
	pthread_mutex_unlock(&t->mu);
	return g;
}

/* A reference to the set now (trust_bundles.h). */
bcd_trust_set *
bcd_trust_bundles_get(bcd_trust_bundles *t)
{
	bcd_trust_set *s;

	pthread_mutex_lock(&t->mu);
	s = t->set;
	s->refs++;
	pthread_mutex_unlock(&t->mu);
	return s;
}

/* Release a reference (trust_bundles.h). */
void
bcd_trust_set_release(bcd_trust_bundles *t, bcd_trust_set *s)
{
	int			last;

	if (s == NULL)
		return;
	pthread_mutex_lock(&t->mu);
	last = --s->refs == 0;
	pthread_mutex_unlock(&t->mu);
	if (last)
		set_free(s);
}

/* The domain td of s, or NULL (trust_bundles.h). */
const bcd_trust_domain *
bcd_trust_set_find(const bcd_trust_set *s, const char *td)
{
	for (int i = 0; s != NULL && i < s->n; i++)
		if (strcmp(s->d[i].td, td) == 0)
			return &s->d[i];
	return NULL;
}

/* 1 when s is a trust domain as a SPIFFE ID spells one (no scheme). */
static int
td_ok(const char *s)
{
	size_t		n = strlen(s);

	if (n == 0 || n > 255)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '.' ||
			  s[i] == '-' || s[i] == '_'))
			return 0;
	return 1;
}

/* Append the x509-svid JWK's certificate (x5c: exactly one, DER; bc_spiffe_x5c_cert) to d. */
static int
add_x509(bcd_trust_domain *d, json_t *jwk, const char **what)
{
	unsigned char *der = NULL;
	int			der_len;
	X509	   *cert;
	BIO		   *bio = NULL;
	char	   *pem;
	long		pem_len;
	unsigned char *grown;
	int			rc = BC_EINVAL;

	*what = "an x509-svid key's x5c is not exactly one base64 DER certificate";
	cert = bc_spiffe_x5c_cert(jwk, NULL, 0, 0);
	if (cert == NULL)
		return BC_EINVAL;
	rc = BC_ENOMEM;
	der_len = i2d_X509(cert, &der);	/* the encoding received: OpenSSL keeps it */
	if (der_len <= 0)
		goto out;
	grown = realloc(d->x509, d->x509_len + (size_t) der_len);
	if (grown == NULL)
		goto out;
	d->x509 = grown;
	memcpy(d->x509 + d->x509_len, der, (size_t) der_len);
	d->x509_len += (size_t) der_len;
	bio = BIO_new(BIO_s_mem());
	if (bio == NULL || PEM_write_bio_X509(bio, cert) != 1)
		goto out;
	pem_len = BIO_get_mem_data(bio, &pem);
	{
		size_t		have = d->pem != NULL ? strlen(d->pem) : 0;
		char	   *more = realloc(d->pem, have + (size_t) pem_len + 1);

		if (more == NULL)
			goto out;
		memcpy(more + have, pem, (size_t) pem_len);
		more[have + (size_t) pem_len] = '\0';
		d->pem = more;
	}
	d->n_x509++;
	rc = BC_OK;
out:
	ERR_clear_error();
	BIO_free(bio);
	X509_free(cert);
	OPENSSL_free(der);
	return rc;
}

/* Parse the bundle of td (a JWKS) into d; BC_OK, or an error and *what. */
static int
parse_bundle(const char *td, json_t *bundle, bcd_trust_domain *d, json_t *jwks, const char **what)
{
	json_t	   *keys = json_object_get(bundle, "keys");
	json_t	   *seq = json_object_get(bundle, "spiffe_sequence");
	json_t	   *jwk;
	size_t		i;
	int			rc;

	memset(d, 0, sizeof(*d));
	snprintf(d->td, sizeof(d->td), "%s", td);
	d->sequence = -1;
	*what = "the bundle is not a JWKS of at most 64 keys";
	if (!json_is_object(bundle) || !json_is_array(keys) || json_array_size(keys) > TRUST_KEYS_MAX)
		return BC_EINVAL;
	*what = "spiffe_sequence is not an integer in [0, 2^53]";
	if (seq != NULL && (!json_is_integer(seq) || json_integer_value(seq) < 0 ||
						json_integer_value(seq) > SEQUENCE_MAX))
		return BC_EINVAL;
	if (seq != NULL)
		d->sequence = json_integer_value(seq);
	d->kid = calloc(TRUST_KEYS_MAX, sizeof(*d->kid));
	d->jwt = calloc(TRUST_KEYS_MAX, sizeof(*d->jwt));
	if (d->kid == NULL || d->jwt == NULL)
		return BC_ENOMEM;
	json_array_foreach(keys, i, jwk)
	{
		const char *use = json_string_value(json_object_get(jwk, "use"));
		const char *kid = json_string_value(json_object_get(jwk, "kid"));
		EVP_PKEY   *key = NULL;

		if (!json_is_object(jwk) || use == NULL)
			continue;			/* no use: ignored (the standard) */
		if (strcmp(use, "x509-svid") == 0)
		{
			rc = add_x509(d, jwk, what);
			if (rc != BC_OK)
				return rc;
		}
		else if (strcmp(use, "jwt-svid") == 0)
		{
			*what = "a jwt-svid key has no kid (or one over 63 bytes, or twice)";
			if (kid == NULL || kid[0] == '\0' || strlen(kid) >= BCD_KID_MAX)
				return BC_EINVAL;
			for (int k = 0; k < d->n_jwt; k++)
				if (strcmp(d->kid[k], kid) == 0)
					return BC_EINVAL;
			rc = bc_pkey_from_jwk_any(jwk, &key);
			if (rc == BC_EUNSUPPORTED)
				continue;		/* an unknown kty or curve: ignored (the standard) */
			*what = "a jwt-svid key is not a valid public JWK";
			if (rc != BC_OK)
				return rc;
			snprintf(d->kid[d->n_jwt], BCD_KID_MAX, "%s", kid);
			d->jwt[d->n_jwt++] = key;
			if (json_array_append(jwks, jwk) != 0)
				return BC_ENOMEM;
		}
	}
	return BC_OK;
}

/* A copy of src into dst (sets are immutable: a kept bundle is copied into the next one). */
static int
domain_copy(const bcd_trust_domain *src, bcd_trust_domain *dst)
{
	memset(dst, 0, sizeof(*dst));
	memcpy(dst->td, src->td, sizeof(dst->td));
	dst->sequence = src->sequence;
	dst->n_x509 = src->n_x509;
	dst->x509_len = src->x509_len;
	dst->x509 = src->x509_len > 0 ? malloc(src->x509_len) : NULL;
	dst->pem = src->pem != NULL ? strdup(src->pem) : NULL;
	dst->jwks = strdup(src->jwks);
	dst->jwks_len = src->jwks_len;
	dst->kid = calloc(TRUST_KEYS_MAX, sizeof(*dst->kid));
	dst->jwt = calloc(TRUST_KEYS_MAX, sizeof(*dst->jwt));
	if ((src->x509_len > 0 && dst->x509 == NULL) || (src->pem != NULL && dst->pem == NULL) ||
		dst->jwks == NULL || dst->kid == NULL || dst->jwt == NULL)
	{
		domain_clear(dst);
		return BC_ENOMEM;
	}
	if (src->x509_len > 0)
		memcpy(dst->x509, src->x509, src->x509_len);
	for (int k = 0; k < src->n_jwt; k++)
	{
		memcpy(dst->kid[k], src->kid[k], BCD_KID_MAX);
		EVP_PKEY_up_ref(src->jwt[k]);
		dst->jwt[k] = src->jwt[k];
	}
	dst->n_jwt = src->n_jwt;
	return BC_OK;
}

/* qsort order of domains. */
static int
domain_cmp(const void *a, const void *b)
{
	return strcmp(((const bcd_trust_domain *) a)->td, ((const bcd_trust_domain *) b)->td);
}


/* Take up a signed document (trust_bundles.h). */
int
bcd_trust_bundles_take(bcd_trust_bundles *t, const char *text, size_t len, int *changed,
					   char *err, size_t errlen)
{
	json_t	   *doc = NULL;
	json_t	   *payload = NULL;
	json_t	   *bundles;
	json_t	   *at;
	const char *name;
	json_t	   *bundle;
	bcd_trust_set *next = NULL;
	bcd_trust_set *old = NULL;
	const char *what = "not {\"keys\": [JWS...]} with a JWS a pinned signing key verifies";
	char		why[512];
	int64_t		issued = 0;
	int			rc = BC_EVERIFY;

	*changed = 0;
	if (len > BCD_TRUST_DOC_MAX)
	{
		what = "over 4 MiB";
		rc = BC_ETOOBIG;
		goto out;
	}
	doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
	payload = bcd_service_keys_first_verified(t->keys, doc, BCD_TRUST_DOC_MAX);
	if (payload == NULL)
		goto out;
	rc = BC_EINVAL;
	what = "its trustDomain is not bcd's";
	if (!json_is_string(json_object_get(payload, "trustDomain")) ||
		strcmp(json_string_value(json_object_get(payload, "trustDomain")), t->keys->trust_domain) != 0)
		goto out;
	at = json_object_get(payload, "issuedAt");
	what = "its issuedAt is not a time YYYY-MM-DDTHH:MM:SSZ";
	if (!json_is_string(at) || bc_cloud_parse_rfc3339(json_string_value(at), &issued) != BC_OK ||
		issued <= 0)
		goto out;
	bundles = json_object_get(payload, "bundles");
	what = "its bundles are not an object of at most 64 trust domains";
	if (!json_is_object(bundles) || json_object_size(bundles) > BCD_TRUST_DOMAINS_MAX)
		goto out;
	pthread_mutex_lock(&t->mu);
	if (issued < t->issued)
	{
		pthread_mutex_unlock(&t->mu);
		snprintf(why, sizeof(why), "it is older than the one held (issuedAt %s)",
				 json_string_value(at));
		what = why;
		rc = BC_EVERIFY;
		goto out;
	}
	pthread_mutex_unlock(&t->mu);
	rc = BC_ENOMEM;
	what = "out of memory";
	next = calloc(1, sizeof(*next));
	if (next == NULL || (json_object_size(bundles) > 0 &&
						 (next->d = calloc(json_object_size(bundles), sizeof(*next->d))) == NULL))
		goto out;
	next->refs = 1;
	json_object_foreach(bundles, name, bundle)
	{
		bcd_trust_domain *d = &next->d[next->n];
		json_t	   *jwks = json_array();
		json_t	   *jdoc;
		const char *td = name + strlen(BC_SPIFFE_SCHEME);

		rc = BC_EINVAL;
		if (strncmp(name, BC_SPIFFE_SCHEME, strlen(BC_SPIFFE_SCHEME)) != 0 || !td_ok(td) ||
			strcmp(td, t->keys->trust_domain) == 0)
		{
			json_decref(jwks);
			snprintf(why, sizeof(why), "bundle key \"%.300s\" is not spiffe://<a trust domain "
					 "other than ours>", name);
			what = why;
			goto out;
		}
		rc = jwks != NULL ? parse_bundle(td, bundle, d, jwks, &what) : BC_ENOMEM;
		jdoc = rc == BC_OK ? json_pack("{s:o}", "keys", jwks) : NULL;
		if (rc != BC_OK)
			json_decref(jwks);
		if (rc == BC_OK && (jdoc == NULL ||
							(d->jwks = json_dumps(jdoc, JSON_COMPACT | JSON_PRESERVE_ORDER)) == NULL))
			rc = BC_ENOMEM;
		json_decref(jdoc);
		next->n++;
		if (rc != BC_OK)
		{
			snprintf(why, sizeof(why), "the bundle of %.300s: %s", name, what);
			what = why;
			goto out;
		}
		d->jwks_len = strlen(d->jwks);
	}
	if (next->n > 1)
		qsort(next->d, (size_t) next->n, sizeof(next->d[0]), domain_cmp);
	pthread_mutex_lock(&t->mu);
	/* a domain whose sequence went down keeps the bundle held (a replay) */
	for (int i = 0; i < next->n; i++)
	{
		const bcd_trust_domain *held = bcd_trust_set_find(t->set, next->d[i].td);

		if (held != NULL && next->d[i].sequence < held->sequence)
		{
			bcd_trust_domain copy;

			bcd_log("trust bundles: the bundle of spiffe://%s has spiffe_sequence %lld, lower "
					"than the one held (%lld); the one held is kept", next->d[i].td,
					(long long) next->d[i].sequence, (long long) held->sequence);
			if (domain_copy(held, &copy) != BC_OK)
			{
				pthread_mutex_unlock(&t->mu);
				rc = BC_ENOMEM;
				goto out;
			}
			domain_clear(&next->d[i]);
			next->d[i] = copy;
		}
	}
	/* a new generation only when something a workload sees changed */
	{
		int			same = next->n == t->set->n;

		for (int i = 0; same && i < next->n; i++)
		{
			const bcd_trust_domain *a = &next->d[i];
			const bcd_trust_domain *b = &t->set->d[i];

			same = strcmp(a->td, b->td) == 0 && a->x509_len == b->x509_len &&
				(a->x509_len == 0 || memcmp(a->x509, b->x509, a->x509_len) == 0) &&
				strcmp(a->jwks, b->jwks) == 0 && a->sequence == b->sequence;
		}
		t->issued = issued;
		if (!same)
		{
			next->gen = t->set->gen + 1;
			old = t->set;
			t->set = next;
			next = NULL;
			*changed = 1;
		}
	}
	t->last_error[0] = '\0';
	pthread_mutex_unlock(&t->mu);
	rc = BC_OK;
out:
	if (old != NULL)
		bcd_trust_set_release(t, old);
	set_free(next);
	if (rc != BC_OK)
		snprintf(err, errlen, "trust bundles refused: %s (%s)", what, bc_status_str(rc));
	json_decref(payload);
	json_decref(doc);
	return rc;
}

/* GET /v1/trust-bundles and take it up (trust_bundles.h). */
int
bcd_trust_bundles_refresh(bcd_http *http, bcd_trust_bundles *t)
{
	bcd_http_reply reply;
	char		err[640];
	int			changed = 0;
	int			st = BC_EINVAL;
	bcd_rc		rc;

	memset(&reply, 0, sizeof(reply));
	rc = bcd_http_fetch(http, BC_PATH_TRUST_BUNDLES, NULL, NULL, 0, NULL, BCD_TRUST_DOC_MAX,
						&reply, NULL, 0, err, sizeof(err));
	if (rc == BCD_RC_OK && reply.status == 200)
		st = bcd_trust_bundles_take(t, reply.body, reply.len, &changed, err, sizeof(err));
	else if (rc == BCD_RC_OK)
		bcd_http_describe(&reply, err, sizeof(err));
	bcd_http_reply_free(&reply);
	if (st == BC_OK)
	{
		if (changed)
		{
			bcd_trust_set *s = bcd_trust_bundles_get(t);
			char		tds[512] = "";

			for (int i = 0; i < s->n; i++)
				snprintf(tds + strlen(tds), sizeof(tds) - strlen(tds), "%s%s (%d root(s), %d "
						 "jwt-svid key(s))", i > 0 ? ", " : "", s->d[i].td, s->d[i].n_x509,
						 s->d[i].n_jwt);
			bcd_log("trust bundles: generation %lu: %s", s->gen, s->n > 0 ? tds : "no federated "
					"trust domain");
			bcd_trust_set_release(t, s);
		}
		return BC_OK;
	}
	/* the same failure is told once, until something else happens */
	pthread_mutex_lock(&t->mu);
	if (strncmp(t->last_error, err, sizeof(t->last_error) - 1) != 0)
	{
		snprintf(t->last_error, sizeof(t->last_error), "%.255s", err);
		pthread_mutex_unlock(&t->mu);
		bcd_log("%s: %s", BC_PATH_TRUST_BUNDLES, err);
	}
	else
		pthread_mutex_unlock(&t->mu);
	return st;
}
