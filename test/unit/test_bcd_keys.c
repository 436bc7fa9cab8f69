/*
 * test_bcd_keys.c: bcd's jwt-svid keys across service-key rollovers
 * (core/service_keys.c: a generation per new list, a retired kid never
 * taken back) and the federated trust domains' signed bundles
 * (core/trust_bundles.c: a JWS by a pinned key, our trust domain, issuedAt
 * never older, a domain's sequence never lower, each domain apart), with
 * real keys and documents signed by src/common's JOSE.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <openssl/x509v3.h>

#include "bc_common.h"
#include "ca_fixture.h"
#include "core/service_keys.h"
#include "core/trust_bundles.h"

#define TD "agent.test"

/* What every test shares: the service's keys, a CA, the pinned set. */
typedef struct fixture
{
	EVP_PKEY   *sig;			/* the service's signing key */
	EVP_PKEY   *enc;
	EVP_PKEY   *jwt[3];			/* jwt-svid keys */
	char		jwt_kid[3][44];
	X509	   *ca;
	char	   *ca_pem;
	char		dir[64];
	bcd_service_keys keys;
} fixture;

/* The public JWK of key as a jansson object, with kid when not NULL. */
static json_t *
jwk_of(EVP_PKEY *key, const char *kid)
{
	char	   *text = NULL;
	json_t	   *o;

	assert_int_equal(bc_jwk_from_pkey(key, &text), BC_OK);
	o = json_loads(text, 0, NULL);
	free(text);
	assert_non_null(o);
	if (kid != NULL)
		json_object_set_new(o, "kid", json_string(kid));
	return o;
}

/* PEM of a certificate (malloc()ed). */
static char *
pem_of(X509 *cert)
{
	BIO		   *bio = BIO_new(BIO_s_mem());
	char	   *p;
	long		n;
	char	   *out;

	assert_int_equal(PEM_write_bio_X509(bio, cert), 1);
	n = BIO_get_mem_data(bio, &p);
	out = strndup(p, (size_t) n);
	BIO_free(bio);
	return out;
}

/* The service-keys document with jwtKeys the n keys idx[] and issuedAt at (NULL: none). */
static json_t *
doc_of(fixture *f, const int *idx, int n, const char *at)
{
	json_t	   *jwt = json_array();
	json_t	   *doc;

	for (int i = 0; i < n; i++)
		json_array_append_new(jwt, jwk_of(f->jwt[idx[i]], f->jwt_kid[idx[i]]));
	doc = json_pack("{s:s, s:o, s:o, s:o, s:s}", "trustDomain", TD, "signingKey",
					jwk_of(f->sig, NULL), "encryptionKey", jwk_of(f->enc, NULL), "jwtKeys", jwt,
					"nodeCa", f->ca_pem);
	assert_non_null(doc);
	if (at != NULL)
		json_object_set_new(doc, "issuedAt", json_string(at));
	return doc;
}

/* {"keys":[JWS of payload by key]} as text (malloc()ed). */
static char *
signed_by(EVP_PKEY *key, json_t *payload)
{
	char	   *text = json_dumps(payload, JSON_COMPACT);
	char	   *jws = NULL;
	char		kid[44];
	json_t	   *out;
	char	   *s;

	assert_int_equal(bc_jwk_thumbprint(key, kid), BC_OK);
	assert_int_equal(bc_jws_sign_es256(key, kid, (unsigned char *) text, strlen(text), &jws), BC_OK);
	out = json_pack("{s:[s]}", "keys", jws);
	s = json_dumps(out, JSON_COMPACT);
	json_decref(out);
	free(jws);
	free(text);
	return s;
}

/* A rollover to jwtKeys idx[] issued at: its status (err for the caller). */
static int
roll(fixture *f, const int *idx, int n, const char *at, char *err, size_t errlen)
{
	json_t	   *doc = doc_of(f, idx, n, at);
	char	   *text = signed_by(f->sig, doc);
	int			rc = bcd_service_keys_rollover(&f->keys, text, strlen(text), err, errlen);

	free(text);
	json_decref(doc);
	return rc;
}

static int
setup(void **state)
{
	fixture    *f = calloc(1, sizeof(*f));
	json_t	   *doc;
	char	   *text;
	char		path[96];
	char		err[512];
	FILE	   *fp;
	int			one[1] = {0};

	f->sig = bc_p256_generate();
	f->enc = bc_p256_generate();
	for (int i = 0; i < 3; i++)
	{
		f->jwt[i] = bc_p256_generate();
		assert_int_equal(bc_jwk_thumbprint(f->jwt[i], f->jwt_kid[i]), BC_OK);
	}
	f->ca = make_ca(f->sig, "test root");
	f->ca_pem = pem_of(f->ca);
	snprintf(f->dir, sizeof(f->dir), "/tmp/bcd-keys-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	/* the --service-keys file: jwtKeys [0], no time (a file may have none) */
	doc = doc_of(f, one, 1, NULL);
	text = json_dumps(doc, JSON_COMPACT);
	snprintf(path, sizeof(path), "%s/service-keys.json", f->dir);
	fp = fopen(path, "w");
	assert_non_null(fp);
	fputs(text, fp);
	fclose(fp);
	free(text);
	json_decref(doc);
	assert_int_equal(bcd_service_keys_load(path, &f->keys, err, sizeof(err)), BC_OK);
	unlink(path);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	fixture    *f = *state;

	bcd_trust_bundles_free(f->keys.trust);
	bcd_service_keys_free(&f->keys);
	EVP_PKEY_free(f->sig);
	EVP_PKEY_free(f->enc);
	for (int i = 0; i < 3; i++)
		EVP_PKEY_free(f->jwt[i]);
	X509_free(f->ca);
	free(f->ca_pem);
	rmdir(f->dir);
	free(f);
	return 0;
}

/* 1 when the JWKS lists exactly the kids idx[] in that order. */
static int
jwks_is(fixture *f, const int *idx, int n)
{
	unsigned long gen;
	int			count;
	char	   *text = bcd_service_keys_jwks(&f->keys, &gen, &count);
	json_t	   *doc = json_loads(text, 0, NULL);
	json_t	   *keys = json_object_get(doc, "keys");
	int			ok = count == n && (int) json_array_size(keys) == n;

	for (int i = 0; ok && i < n; i++)
		ok = strcmp(json_string_value(json_object_get(json_array_get(keys, i), "kid")),
					f->jwt_kid[idx[i]]) == 0 &&
			strcmp(json_string_value(json_object_get(json_array_get(keys, i), "use")), "jwt-svid") == 0;
	json_decref(doc);
	free(text);
	return ok;
}

/* 1 when kid idx is held. */
static int
held(fixture *f, int idx)
{
	EVP_PKEY   *k = bcd_service_keys_jwt_key(&f->keys, f->jwt_kid[idx]);

	EVP_PKEY_free(k);
	return k != NULL;
}

/* Stage, promote, retire: a generation each; a retired kid never comes back. */
static void
test_jwt_rollover(void **state)
{
	fixture    *f = *state;
	int			k0[] = {0};
	int			staged[] = {0, 1};
	int			promoted[] = {1, 0};
	int			retired[] = {1};
	int			back[] = {1, 0};
	int			staged_back[] = {1, 2, 0};
	unsigned long g0 = bcd_service_keys_jwt_gen(&f->keys);
	unsigned long g;
	char		err[512];

	assert_true(jwks_is(f, k0, 1) && held(f, 0) && !held(f, 1));
	assert_int_equal(roll(f, staged, 2, "2026-01-01T00:00:01Z", err, sizeof(err)), BC_OK);
	assert_true(bcd_service_keys_jwt_gen(&f->keys) > g0);
	assert_true(jwks_is(f, staged, 2) && held(f, 0) && held(f, 1));
	g = bcd_service_keys_jwt_gen(&f->keys);
	/* the same list again: no new generation */
	assert_int_equal(roll(f, staged, 2, "2026-01-01T00:00:02Z", err, sizeof(err)), BC_OK);
	assert_int_equal(bcd_service_keys_jwt_gen(&f->keys), g);
	assert_int_equal(roll(f, promoted, 2, "2026-01-01T00:00:03Z", err, sizeof(err)), BC_OK);
	assert_true(bcd_service_keys_jwt_gen(&f->keys) > g);
	assert_true(jwks_is(f, promoted, 2) && held(f, 0));
	assert_int_equal(roll(f, retired, 1, "2026-01-01T00:00:04Z", err, sizeof(err)), BC_OK);
	assert_true(jwks_is(f, retired, 1) && !held(f, 0));
	g = bcd_service_keys_jwt_gen(&f->keys);
	/* the retired kid, listed again (previous, or staged beside a new one): refused whole */
	assert_int_equal(roll(f, back, 2, "2026-01-01T00:00:05Z", err, sizeof(err)), BC_EVERIFY);
	assert_non_null(strstr(err, "brings back a jwt-svid key the pinned set dropped"));
	assert_int_equal(roll(f, staged_back, 3, "2026-01-01T00:00:06Z", err, sizeof(err)), BC_EVERIFY);
	assert_true(jwks_is(f, retired, 1) && !held(f, 0));
	assert_int_equal(bcd_service_keys_jwt_gen(&f->keys), g);
	/* an older list: refused */
	assert_int_equal(roll(f, staged, 2, "2026-01-01T00:00:00Z", err, sizeof(err)), BC_EVERIFY);
	assert_non_null(strstr(err, "older"));
}

/* jwtKeys that are not P-256 JWKs with a kid of their own: the rollover refused. */
static void
test_jwt_malformed(void **state)
{
	fixture    *f = *state;
	int			two[] = {1, 2};
	json_t	   *doc = doc_of(f, two, 2, "2026-02-01T00:00:00Z");
	json_t	   *jwt = json_object_get(doc, "jwtKeys");
	char	   *text;
	char		err[512];

	/* the same kid twice */
	json_object_set_new(json_array_get(jwt, 1), "kid", json_string(f->jwt_kid[1]));
	text = signed_by(f->sig, doc);
	assert_int_equal(bcd_service_keys_rollover(&f->keys, text, strlen(text), err, sizeof(err)),
					 BC_EINVAL);
	assert_non_null(strstr(err, "jwtKeys"));
	free(text);
	/* no kid */
	json_object_del(json_array_get(jwt, 1), "kid");
	text = signed_by(f->sig, doc);
	assert_int_equal(bcd_service_keys_rollover(&f->keys, text, strlen(text), err, sizeof(err)),
					 BC_EINVAL);
	free(text);
	json_decref(doc);
}

/* ------------------------------------------------------------ trust bundles */

/* base64 (standard) DER of cert (malloc()ed). */
static char *
b64_der(X509 *cert)
{
	unsigned char *der = NULL;
	int			n = i2d_X509(cert, &der);
	char	   *out = malloc(bc_b64_encoded_len((size_t) n) + 1);

	out[bc_b64_encode(der, (size_t) n, out)] = '\0';
	OPENSSL_free(der);
	return out;
}

/* An RSA JWK (n, e) of key with kid and use jwt-svid. */
static json_t *
rsa_jwk(EVP_PKEY *key, const char *kid)
{
	BIGNUM	   *n = NULL;
	BIGNUM	   *e = NULL;
	unsigned char buf[1024];
	char	   *ns;
	char	   *es;
	json_t	   *o;
	int			len;

	assert_int_equal(EVP_PKEY_get_bn_param(key, OSSL_PKEY_PARAM_RSA_N, &n), 1);
	assert_int_equal(EVP_PKEY_get_bn_param(key, OSSL_PKEY_PARAM_RSA_E, &e), 1);
	len = BN_bn2bin(n, buf);
	ns = bc_b64url_encode_alloc(buf, (size_t) len);
	len = BN_bn2bin(e, buf);
	es = bc_b64url_encode_alloc(buf, (size_t) len);
	o = json_pack("{s:s, s:s, s:s, s:s, s:s}", "kty", "RSA", "n", ns, "e", es, "kid", kid,
				  "use", "jwt-svid");
	free(ns);
	free(es);
	BN_free(n);
	BN_free(e);
	return o;
}

/* The signed trust bundles of one domain td with bundle, issued at, by key (text, malloc()ed). */
static char *
trust_doc(EVP_PKEY *key, const char *trust_domain, const char *td, json_t *bundle, const char *at)
{
	json_t	   *bundles = json_object();
	json_t	   *payload;
	char		name[300];
	char	   *s;

	snprintf(name, sizeof(name), "spiffe://%s", td);
	json_object_set(bundles, name, bundle);
	payload = json_pack("{s:s, s:s, s:o}", "trustDomain", trust_domain, "issuedAt", at,
						"bundles", bundles);
	s = signed_by(key, payload);
	json_decref(payload);
	return s;
}

/* Take text up: its status, *changed. */
static int
take(bcd_trust_bundles *t, char *text, int *changed, char *err, size_t errlen)
{
	int			rc = bcd_trust_bundles_take(t, text, strlen(text), changed, err, errlen);

	free(text);
	return rc;
}

/* The signed bundles: what is believed, what is refused, each domain apart. */
static void
test_trust_bundles(void **state)
{
	fixture    *f = *state;
	bcd_trust_bundles *t = bcd_trust_bundles_new(&f->keys);
	EVP_PKEY   *bkey = bc_p256_generate();
	X509	   *broot = make_ca(bkey, "b root");
	EVP_PKEY   *rsa = EVP_RSA_gen(2048);
	EVP_PKEY   *other = bc_p256_generate();
	char	   *x5c = b64_der(broot);
	json_t	   *bundle = json_pack("{s:[{s:s, s:s, s:s, s:s, s:[s]}, o, {s:s, s:s, s:s}], s:i}",
								   "keys", "kty", "EC", "crv", "P-256", "use", "x509-svid",
								   "x", "unused", "x5c", x5c, rsa_jwk(rsa, "b-rsa"),
								   "kty", "OKP", "use", "jwt-svid", "kid", "ed",
								   "spiffe_sequence", 5);
	bcd_trust_set *s;
	const bcd_trust_domain *d;
	char		err[640];
	int			changed;
	unsigned char *der = NULL;
	int			der_len = i2d_X509(broot, &der);

	assert_non_null(t);
	assert_int_equal(bcd_trust_bundles_gen(t), 0);
	assert_int_equal(take(t, trust_doc(f->sig, TD, "b.test", bundle, "2026-03-01T00:00:00Z"),
						  &changed, err, sizeof(err)), BC_OK);
	assert_true(changed);
	s = bcd_trust_bundles_get(t);
	d = bcd_trust_set_find(s, "b.test");
	assert_non_null(d);
	assert_int_equal(s->n, 1);
	/* one root (its DER as is), the RSA key by its kid; the OKP key ignored */
	assert_int_equal(d->n_x509, 1);
	assert_int_equal(d->x509_len, (size_t) der_len);
	assert_memory_equal(d->x509, der, (size_t) der_len);
	assert_int_equal(d->n_jwt, 1);
	assert_string_equal(d->kid[0], "b-rsa");
	assert_true(EVP_PKEY_is_a(d->jwt[0], "RSA"));
	assert_int_equal(d->sequence, 5);
	assert_non_null(strstr(d->pem, "BEGIN CERTIFICATE"));
	bcd_trust_set_release(t, s);
	/* the same again, later: no new generation */
	assert_int_equal(take(t, trust_doc(f->sig, TD, "b.test", bundle, "2026-03-01T00:00:01Z"),
						  &changed, err, sizeof(err)), BC_OK);
	assert_false(changed);
	/* a lower sequence, later: the held bundle kept */
	json_object_set_new(bundle, "spiffe_sequence", json_integer(4));
	json_array_remove(json_object_get(bundle, "keys"), 1);
	assert_int_equal(take(t, trust_doc(f->sig, TD, "b.test", bundle, "2026-03-01T00:00:02Z"),
						  &changed, err, sizeof(err)), BC_OK);
	assert_false(changed);
	s = bcd_trust_bundles_get(t);
	assert_int_equal(bcd_trust_set_find(s, "b.test")->n_jwt, 1);
	bcd_trust_set_release(t, s);
	/* a higher one: taken (the RSA key gone), a new generation */
	json_object_set_new(bundle, "spiffe_sequence", json_integer(6));
	assert_int_equal(take(t, trust_doc(f->sig, TD, "b.test", bundle, "2026-03-01T00:00:03Z"),
						  &changed, err, sizeof(err)), BC_OK);
	assert_true(changed);
	assert_int_equal(bcd_trust_bundles_gen(t), 2);
	/* refused: an older issuedAt, a key not pinned, another trust domain, our own as a bundle */
	assert_int_equal(take(t, trust_doc(f->sig, TD, "b.test", bundle, "2026-03-01T00:00:00Z"),
						  &changed, err, sizeof(err)), BC_EVERIFY);
	assert_non_null(strstr(err, "older"));
	assert_int_equal(take(t, trust_doc(other, TD, "b.test", bundle, "2026-03-02T00:00:00Z"),
						  &changed, err, sizeof(err)), BC_EVERIFY);
	assert_int_equal(take(t, trust_doc(f->sig, "other.test", "b.test", bundle, "2026-03-02T00:00:00Z"),
						  &changed, err, sizeof(err)), BC_EINVAL);
	assert_non_null(strstr(err, "trustDomain"));
	assert_int_equal(take(t, trust_doc(f->sig, TD, TD, bundle, "2026-03-02T00:00:00Z"),
						  &changed, err, sizeof(err)), BC_EINVAL);
	assert_int_equal(take(t, trust_doc(f->sig, TD, "B.test", bundle, "2026-03-02T00:00:00Z"),
						  &changed, err, sizeof(err)), BC_EINVAL);
	/* refused: x5c of two certificates; a jwt-svid key without a kid; a sequence over 2^53 */
	json_array_append_new(json_object_get(json_array_get(json_object_get(bundle, "keys"), 0), "x5c"),
						  json_string(x5c));
	assert_int_equal(take(t, trust_doc(f->sig, TD, "b.test", bundle, "2026-03-02T00:00:00Z"),
						  &changed, err, sizeof(err)), BC_EINVAL);
	assert_non_null(strstr(err, "x5c"));
	json_array_remove(json_object_get(json_array_get(json_object_get(bundle, "keys"), 0), "x5c"), 1);
	json_array_append_new(json_object_get(bundle, "keys"), rsa_jwk(rsa, "x"));
	json_object_del(json_array_get(json_object_get(bundle, "keys"),
								   json_array_size(json_object_get(bundle, "keys")) - 1), "kid");
	assert_int_equal(take(t, trust_doc(f->sig, TD, "b.test", bundle, "2026-03-02T00:00:00Z"),
						  &changed, err, sizeof(err)), BC_EINVAL);
	assert_non_null(strstr(err, "kid"));
	json_array_remove(json_object_get(bundle, "keys"), json_array_size(json_object_get(bundle, "keys")) - 1);
	json_object_set_new(bundle, "spiffe_sequence", json_integer(9007199254740993LL));
	assert_int_equal(take(t, trust_doc(f->sig, TD, "b.test", bundle, "2026-03-02T00:00:00Z"),
						  &changed, err, sizeof(err)), BC_EINVAL);
	/* none of that changed what is held */
	assert_int_equal(bcd_trust_bundles_gen(t), 2);
	/* an empty key set: held as such (every SVID of b.test invalid) */
	json_object_set_new(bundle, "spiffe_sequence", json_integer(7));
	json_array_clear(json_object_get(bundle, "keys"));
	assert_int_equal(take(t, trust_doc(f->sig, TD, "b.test", bundle, "2026-03-03T00:00:00Z"),
						  &changed, err, sizeof(err)), BC_OK);
	s = bcd_trust_bundles_get(t);
	d = bcd_trust_set_find(s, "b.test");
	assert_true(changed && d != NULL && d->n_x509 == 0 && d->n_jwt == 0);
	bcd_trust_set_release(t, s);
	/* garbage */
	assert_int_equal(take(t, strdup("{\"keys\":[\"a.b.c\"]}"), &changed, err, sizeof(err)), BC_EVERIFY);
	assert_int_equal(take(t, strdup("not json"), &changed, err, sizeof(err)), BC_EVERIFY);
	json_decref(bundle);
	OPENSSL_free(der);
	free(x5c);
	X509_free(broot);
	EVP_PKEY_free(bkey);
	EVP_PKEY_free(rsa);
	EVP_PKEY_free(other);
	bcd_trust_bundles_free(t);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_jwt_rollover, setup, teardown),
		cmocka_unit_test_setup_teardown(test_jwt_malformed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_trust_bundles, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
