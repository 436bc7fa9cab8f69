/*
 * test_jose.c: cmocka tests of keys (PEM, JWK, thumbprint), JWS ES256 and
 * JWE ECDH-ES + A256GCM of src/common.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "bc_common.h"

/* Two P-256 keys shared by the tests. */
typedef struct jose_fixture
{
	EVP_PKEY   *key;
	EVP_PKEY   *other;
} jose_fixture;

/* Make the keys. */
static int
setup_keys(void **state)
{
	jose_fixture *f = calloc(1, sizeof(*f));

	if (f == NULL)
		return -1;
	f->key = bc_p256_generate();
	f->other = bc_p256_generate();
	*state = f;
	return f->key != NULL && f->other != NULL ? 0 : -1;
}

/* Free the keys. */
static int
teardown_keys(void **state)
{
	jose_fixture *f = *state;

	EVP_PKEY_free(f->key);
	EVP_PKEY_free(f->other);
	free(f);
	return 0;
}

/* base64url of a NUL-terminated string, malloc()ed. */
static char *
b64url_str(const char *s)
{
	char	   *out = malloc(bc_b64url_encoded_len(strlen(s)) + 1);

	assert_non_null(out);
	bc_b64url_encode((const unsigned char *) s, strlen(s), out);
	return out;
}

/* Split a compact serialization into at most 5 malloc()ed parts; returns the count. */
static int
split(const char *s, char *parts[5])
{
	int			n = 0;
	const char *start = s;
	const char *dot;

	while (n < 5)
	{
		dot = strchr(start, '.');
		parts[n] = strndup(start, dot == NULL ? strlen(start) : (size_t) (dot - start));
		assert_non_null(parts[n]);
		n++;
		if (dot == NULL)
			break;
		start = dot + 1;
	}
	return n;
}

/* Join n parts with dots, malloc()ed; frees nothing. */
static char *
join(char *parts[], int n)
{
	size_t		len = 1;
	char	   *out;
	int			i;

	for (i = 0; i < n; i++)
		len += strlen(parts[i]) + 1;
	out = calloc(1, len);
	assert_non_null(out);
	for (i = 0; i < n; i++)
	{
		if (i > 0)
			strcat(out, ".");
		strcat(out, parts[i]);
	}
	return out;
}

/* Free n parts. */
static void
free_parts(char *parts[], int n)
{
	int			i;

	for (i = 0; i < n; i++)
		free(parts[i]);
}

/* The decoded JSON of a base64url header part. */
static json_t *
decode_header(const char *part)
{
	unsigned char buf[4096];
	size_t		len = 0;
	json_error_t jerr;

	assert_int_equal(bc_b64url_decode(part, strlen(part), buf, sizeof(buf), &len), BC_OK);
	return json_loadb((const char *) buf, len, 0, &jerr);
}

/* base64url of a JSON value (compact, order kept), malloc()ed; consumes nothing. */
static char *
encode_header(json_t *hdr)
{
	char	   *text = json_dumps(hdr, JSON_COMPACT | JSON_PRESERVE_ORDER);
	char	   *out;

	assert_non_null(text);
	out = b64url_str(text);
	free(text);
	return out;
}

/* ------------------------------------------------------------------ keys */

/* JWK output is canonical, parses back to the same key; thumbprint is stable. */
static void
test_jwk_round_trip(void **state)
{
	jose_fixture *f = *state;
	char	   *jwk = NULL;
	EVP_PKEY   *back = NULL;
	char		tp1[44];
	char		tp2[44];
	char		tp3[44];

	assert_int_equal(bc_pkey_is_p256(f->key), 1);
	assert_int_equal(bc_jwk_from_pkey(f->key, &jwk), BC_OK);
	assert_int_equal(strncmp(jwk, "{\"crv\":\"P-256\",\"kty\":\"EC\",\"x\":\"", 31), 0);
	assert_non_null(strstr(jwk, "\",\"y\":\""));
	assert_int_equal(strlen(jwk), 31 + 43 + 7 + 43 + 2);
	assert_int_equal(bc_pkey_from_jwk(jwk, strlen(jwk), &back), BC_OK);
	assert_int_equal(EVP_PKEY_eq(back, f->key), 1);
	assert_int_equal(bc_jwk_thumbprint(f->key, tp1), BC_OK);
	assert_int_equal(bc_jwk_thumbprint(back, tp2), BC_OK);
	assert_int_equal(bc_jwk_thumbprint(f->other, tp3), BC_OK);
	assert_int_equal(strlen(tp1), 43);
	assert_string_equal(tp1, tp2);
	assert_string_not_equal(tp1, tp3);
	EVP_PKEY_free(back);
	free(jwk);
}

/* Parse the JWK text after substituting x and y of key into fmt. */
static int
jwk_status(EVP_PKEY *key, const char *fmt)
{
	char	   *jwk = NULL;
	json_t	   *doc;
	json_error_t jerr;
	char		text[8192];
	EVP_PKEY   *out = NULL;
	int			rc;

	assert_int_equal(bc_jwk_from_pkey(key, &jwk), BC_OK);
	doc = json_loads(jwk, 0, &jerr);
	assert_non_null(doc);
	snprintf(text, sizeof(text), fmt,
			 json_string_value(json_object_get(doc, "x")),
			 json_string_value(json_object_get(doc, "y")));
	rc = bc_pkey_from_jwk(text, strlen(text), &out);
	assert_true(rc != BC_OK || out != NULL);
	EVP_PKEY_free(out);
	json_decref(doc);
	free(jwk);
	return rc;
}

/* JWK parsing ignores kid/use/alg and refuses everything else that is off. */
static void
test_jwk_refusals(void **state)
{
	jose_fixture *f = *state;
	char		big[6000];
	EVP_PKEY   *out = NULL;

	assert_int_equal(jwk_status(f->key, "{\"kid\":\"k\",\"use\":\"sig\",\"alg\":\"ES256\","
								"\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"%s\",\"y\":\"%s\"}"),
					 BC_OK);
	assert_int_equal(jwk_status(f->key, "{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"%s\","
								"\"y\":\"%s\",\"d\":\"AAAA\"}"), BC_EUNSUPPORTED);
	assert_int_equal(jwk_status(f->key, "{\"kty\":\"RSA\",\"crv\":\"P-256\",\"x\":\"%s\","
								"\"y\":\"%s\"}"), BC_EUNSUPPORTED);
	assert_int_equal(jwk_status(f->key, "{\"kty\":\"EC\",\"crv\":\"P-384\",\"x\":\"%s\","
								"\"y\":\"%s\"}"), BC_EUNSUPPORTED);
	assert_int_equal(jwk_status(f->key, "{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"%s\"}%s"),
					 BC_EINVAL);
	assert_int_equal(jwk_status(f->key, "{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"%s\","
								"\"x\":\"%s\"}"), BC_EINVAL);	/* duplicate */
	assert_int_equal(jwk_status(f->key, "[\"%s\",\"%s\"]"), BC_EINVAL);
	/* x and y swapped: (almost surely) not a point on the curve */
	assert_int_equal(jwk_status(f->key, "{\"kty\":\"EC\",\"crv\":\"P-256\",\"y\":\"%s\","
								"\"x\":\"%s\"}"), BC_EINVAL);
	/* a 31-byte coordinate */
	assert_int_equal(bc_pkey_from_jwk("{\"kty\":\"EC\",\"crv\":\"P-256\","
									  "\"x\":\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\","
									  "\"y\":\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"}",
									  116, &out), BC_EINVAL);
	memset(big, ' ', sizeof(big));
	big[0] = '{';
	big[sizeof(big) - 1] = '}';
	assert_int_equal(bc_pkey_from_jwk(big, sizeof(big), &out), BC_ETOOBIG);
	assert_null(out);
}

/* PEM files: written 0600, read back as the same key; non-P-256 keys refused. */
static void
test_pem_files(void **state)
{
	jose_fixture *f = *state;
	char		dir[] = "/tmp/bc-test-pem-XXXXXX";
	char		path[128];
	char		err[256];
	struct stat st;
	EVP_PKEY   *back;
	EVP_PKEY   *p384;
	FILE	   *fp;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/k.pem", dir);
	assert_int_equal(bc_pkey_write_pem_file(f->key, path), BC_OK);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	back = bc_pkey_read_pem_file(path, 1, err, sizeof(err));
	assert_non_null(back);
	assert_int_equal(EVP_PKEY_eq(back, f->key), 1);
	EVP_PKEY_free(back);
	assert_null(bc_pkey_read_pem_file(path, 0, err, sizeof(err)));	/* not a public PEM */
	assert_true(strlen(err) > 0);

	p384 = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-384");
	assert_non_null(p384);
	assert_int_equal(bc_pkey_is_p256(p384), 0);
	fp = fopen(path, "w");
	assert_non_null(fp);
	assert_int_equal(PEM_write_PrivateKey(fp, p384, NULL, NULL, 0, NULL, NULL), 1);
	fclose(fp);
	assert_null(bc_pkey_read_pem_file(path, 1, err, sizeof(err)));
	assert_non_null(strstr(err, "P-256"));
	EVP_PKEY_free(p384);
	assert_null(bc_pkey_read_pem_file("/nonexistent/k.pem", 1, err, sizeof(err)));
	unlink(path);
	rmdir(dir);
}

/* ------------------------------------------------------------------- JWS */

/* Sign and verify, with and without kid; the header is exactly as documented. */
static void
test_jws_round_trip(void **state)
{
	jose_fixture *f = *state;
	const char *msg = "{\"status\":\"issued\"}";
	char	   *jws = NULL;
	char	   *parts[5];
	unsigned char *payload = NULL;
	size_t		len = 0;
	unsigned char hdr[256];
	size_t		hdr_len = 0;

	assert_int_equal(bc_jws_sign_es256(f->key, "k1", (const unsigned char *) msg,
									   strlen(msg), &jws), BC_OK);
	assert_int_equal(split(jws, parts), 3);
	assert_int_equal(bc_b64url_decode(parts[0], strlen(parts[0]), hdr, sizeof(hdr),
									  &hdr_len), BC_OK);
	assert_int_equal(hdr_len, strlen("{\"alg\":\"ES256\",\"kid\":\"k1\"}"));
	assert_memory_equal(hdr, "{\"alg\":\"ES256\",\"kid\":\"k1\"}", hdr_len);
	assert_int_equal(strlen(parts[2]), 86);	/* 64 bytes */
	free_parts(parts, 3);
	assert_int_equal(bc_jws_verify_es256(f->key, jws, strlen(jws), 1024, &payload, &len),
					 BC_OK);
	assert_int_equal(len, strlen(msg));
	assert_string_equal((char *) payload, msg);
	free(payload);
	assert_int_equal(bc_jws_verify_es256(f->key, jws, strlen(jws), len - 1, &payload, &len),
					 BC_ETOOBIG);
	assert_null(payload);
	free(jws);

	assert_int_equal(bc_jws_sign_es256(f->key, NULL, (const unsigned char *) "", 0, &jws),
					 BC_OK);
	assert_int_equal(strncmp(jws, "eyJhbGciOiJFUzI1NiJ9..", 22), 0);
	assert_int_equal(bc_jws_verify_es256(f->key, jws, strlen(jws), 10, &payload, &len),
					 BC_OK);
	assert_int_equal(len, 0);
	free(payload);
	free(jws);

	/* typ after kid (a JWT-SVID's header); verified like any other */
	assert_int_equal(bc_jws_sign_es256_typ(f->key, "k1", "JWT", (const unsigned char *) msg,
										   strlen(msg), &jws), BC_OK);
	assert_int_equal(split(jws, parts), 3);
	assert_int_equal(bc_b64url_decode(parts[0], strlen(parts[0]), hdr, sizeof(hdr),
									  &hdr_len), BC_OK);
	assert_int_equal(hdr_len, strlen("{\"alg\":\"ES256\",\"kid\":\"k1\",\"typ\":\"JWT\"}"));
	assert_memory_equal(hdr, "{\"alg\":\"ES256\",\"kid\":\"k1\",\"typ\":\"JWT\"}", hdr_len);
	free_parts(parts, 3);
	assert_int_equal(bc_jws_verify_es256(f->key, jws, strlen(jws), 1024, &payload, &len),
					 BC_OK);
	assert_string_equal((char *) payload, msg);
	free(payload);
	free(jws);
	/* typ without kid; NULL typ is the plain header */
	assert_int_equal(bc_jws_sign_es256_typ(f->key, NULL, "JWT", (const unsigned char *) "", 0,
										   &jws), BC_OK);
	assert_int_equal(strncmp(jws, "eyJhbGciOiJFUzI1NiIsInR5cCI6IkpXVCJ9..", 38), 0);
	free(jws);
	assert_int_equal(bc_jws_sign_es256_typ(f->key, NULL, NULL, (const unsigned char *) "", 0,
										   &jws), BC_OK);
	assert_int_equal(strncmp(jws, "eyJhbGciOiJFUzI1NiJ9..", 22), 0);
	free(jws);
}

/* Verify text with the fixture key; returns the status (payload freed). */
static int
jws_status(EVP_PKEY *key, const char *jws)
{
	unsigned char *payload = NULL;
	size_t		len = 0;
	int			rc = bc_jws_verify_es256(key, jws, strlen(jws), 4096, &payload, &len);

	assert_true((rc == BC_OK) == (payload != NULL));
	free(payload);
	return rc;
}

/* Verify parts h.p.s (any of them replaced); returns the status. */
static int
jws_parts_status(EVP_PKEY *key, const char *h, const char *p, const char *s)
{
	char	   *parts[3] = {(char *) h, (char *) p, (char *) s};
	char	   *jws = join(parts, 3);
	int			rc = jws_status(key, jws);

	free(jws);
	return rc;
}

/* Tampering, wrong keys, other algorithms and malformed serializations fail. */
static void
test_jws_refusals(void **state)
{
	jose_fixture *f = *state;
	const char *msg = "{\"status\":\"issued\",\"csrSha256\":\"abc\"}";
	char	   *jws = NULL;
	char	   *p[5];
	char	   *h;
	char	   *other_payload = b64url_str("{\"status\":\"refused\",\"csrSha256\":\"abc\"}");
	unsigned char sig[64];
	size_t		sig_len;
	char		sig64[100];
	char		big[6000];

	assert_int_equal(bc_jws_sign_es256(f->key, "k", (const unsigned char *) msg,
									   strlen(msg), &jws), BC_OK);
	assert_int_equal(split(jws, p), 3);
	assert_int_equal(jws_status(f->key, jws), BC_OK);
	assert_int_equal(jws_status(f->other, jws), BC_EVERIFY);	/* wrong key */
	assert_int_equal(jws_parts_status(f->key, p[0], other_payload, p[2]), BC_EVERIFY);
	h = b64url_str("{\"alg\":\"ES256\",\"kid\":\"x\"}");
	assert_int_equal(jws_parts_status(f->key, h, p[1], p[2]), BC_EVERIFY);
	free(h);
	/* flip one signature bit */
	assert_int_equal(bc_b64url_decode(p[2], strlen(p[2]), sig, sizeof(sig), &sig_len), BC_OK);
	sig[10] ^= 0x01;
	bc_b64url_encode(sig, 64, sig64);
	assert_int_equal(jws_parts_status(f->key, p[0], p[1], sig64), BC_EVERIFY);
	sig[10] ^= 0x01;
	/* r = 0, s = 0 */
	memset(sig, 0, 32);
	bc_b64url_encode(sig, 64, sig64);
	assert_int_equal(jws_parts_status(f->key, p[0], p[1], sig64), BC_EVERIFY);
	assert_int_equal(bc_b64url_decode(p[2], strlen(p[2]), sig, sizeof(sig), &sig_len), BC_OK);
	memset(sig + 32, 0, 32);
	bc_b64url_encode(sig, 64, sig64);
	assert_int_equal(jws_parts_status(f->key, p[0], p[1], sig64), BC_EVERIFY);
	/* signature of 63 and 65 bytes, and the empty one */
	bc_b64url_encode(sig, 63, sig64);
	assert_int_equal(jws_parts_status(f->key, p[0], p[1], sig64), BC_EINVAL);
	assert_int_equal(jws_parts_status(f->key, p[0], p[1], ""), BC_EINVAL);
	memset(big, 'A', sizeof(big));
	big[87] = '\0';				/* 87 chars: 65 bytes */
	assert_int_equal(jws_parts_status(f->key, p[0], p[1], big), BC_EINVAL);
	/* other algorithms, crit, non-object headers */
	h = b64url_str("{\"alg\":\"none\"}");
	assert_int_equal(jws_parts_status(f->key, h, p[1], ""), BC_EUNSUPPORTED);
	free(h);
	h = b64url_str("{\"alg\":\"HS256\"}");
	assert_int_equal(jws_parts_status(f->key, h, p[1], p[2]), BC_EUNSUPPORTED);
	free(h);
	h = b64url_str("{\"kid\":\"k\"}");
	assert_int_equal(jws_parts_status(f->key, h, p[1], p[2]), BC_EUNSUPPORTED);
	free(h);
	h = b64url_str("{\"alg\":\"ES256\",\"crit\":[\"exp\"],\"exp\":1}");
	assert_int_equal(jws_parts_status(f->key, h, p[1], p[2]), BC_EUNSUPPORTED);
	free(h);
	h = b64url_str("[\"alg\",\"ES256\"]");
	assert_int_equal(jws_parts_status(f->key, h, p[1], p[2]), BC_EINVAL);
	free(h);
	h = b64url_str("\"ES256\"");
	assert_int_equal(jws_parts_status(f->key, h, p[1], p[2]), BC_EINVAL);
	free(h);
	h = b64url_str("{\"alg\":\"ES256\",\"alg\":\"ES256\"}");
	assert_int_equal(jws_parts_status(f->key, h, p[1], p[2]), BC_EINVAL);
	free(h);
	memset(big, ' ', sizeof(big));
	memcpy(big, "{\"alg\":\"ES256\"", 14);
	big[5000] = '}';
	big[5001] = '\0';
	h = b64url_str(big);
	assert_int_equal(jws_parts_status(f->key, h, p[1], p[2]), BC_ETOOBIG);
	free(h);
	/* segment counts, characters, truncation */
	assert_int_equal(jws_parts_status(f->key, p[0], p[1], "a.b"), BC_EINVAL);
	{
		char	   *two[2] = {p[0], p[1]};
		char	   *s2 = join(two, 2);

		assert_int_equal(jws_status(f->key, s2), BC_EINVAL);
		free(s2);
	}
	p[1][3] = '+';
	assert_int_equal(jws_parts_status(f->key, p[0], p[1], p[2]), BC_EINVAL);
	jws[strlen(jws) - 5] = '\0';
	assert_int_not_equal(jws_status(f->key, jws), BC_OK);
	jws[40] = '\0';
	assert_int_not_equal(jws_status(f->key, jws), BC_OK);
	assert_int_equal(jws_status(f->key, ""), BC_EINVAL);
	free_parts(p, 3);
	free(other_payload);
	free(jws);
}

/* ------------------------------------------------------------------- JWE */

/* Seal and open with a header member; empty plaintext; no header member. */
static void
test_jwe_round_trip(void **state)
{
	jose_fixture *f = *state;
	const char *token = "bcjt_secret-token";
	char	   *jwe = NULL;
	char	   *parts[5];
	char	   *value = NULL;
	unsigned char *pt = NULL;
	size_t		len = 0;
	json_t	   *hdr;

	assert_int_equal(bc_jwe_seal(f->key, "csrSha256", "abc_-", (const unsigned char *) token,
								 strlen(token), &jwe), BC_OK);
	assert_int_equal(split(jwe, parts), 5);
	hdr = decode_header(parts[0]);
	assert_non_null(hdr);
	assert_string_equal(json_string_value(json_object_get(hdr, "alg")), "ECDH-ES");
	assert_string_equal(json_string_value(json_object_get(hdr, "enc")), "A256GCM");
	assert_string_equal(json_string_value(json_object_get(hdr, "csrSha256")), "abc_-");
	assert_true(json_is_object(json_object_get(hdr, "epk")));
	assert_string_equal(parts[1], "");
	assert_int_equal(strlen(parts[2]), 16);	/* 12-byte IV */
	assert_int_equal(strlen(parts[4]), 22);	/* 16-byte tag */
	json_decref(hdr);
	free_parts(parts, 5);
	assert_int_equal(bc_jwe_open(f->key, jwe, strlen(jwe), 1024, "csrSha256", &value,
								 &pt, &len), BC_OK);
	assert_string_equal(value, "abc_-");
	assert_int_equal(len, strlen(token));
	assert_string_equal((char *) pt, token);
	bc_free_secret(pt, len + 1);
	free(value);
	assert_int_equal(bc_jwe_open(f->key, jwe, strlen(jwe), 1024, "missing", &value,
								 &pt, &len), BC_EINVAL);
	assert_null(pt);
	assert_int_equal(bc_jwe_open(f->key, jwe, strlen(jwe), strlen(token) - 1, NULL, NULL,
								 &pt, &len), BC_ETOOBIG);
	assert_int_equal(bc_jwe_open(f->other, jwe, strlen(jwe), 1024, NULL, NULL,
								 &pt, &len), BC_EVERIFY);	/* wrong recipient */
	free(jwe);

	assert_int_equal(bc_jwe_seal(f->key, NULL, NULL, (const unsigned char *) "", 0, &jwe),
					 BC_OK);
	assert_int_equal(bc_jwe_open(f->key, jwe, strlen(jwe), 0, NULL, NULL, &pt, &len), BC_OK);
	assert_int_equal(len, 0);
	bc_free_secret(pt, len + 1);
	free(jwe);

	assert_int_equal(bc_jwe_seal(f->key, "alg", "x", (const unsigned char *) "a", 1, &jwe),
					 BC_EINVAL);
	assert_int_equal(bc_jwe_seal(f->key, "epk", "x", (const unsigned char *) "a", 1, &jwe),
					 BC_EINVAL);
	assert_null(jwe);
}

/* Open parts (some replaced) with the fixture key; returns the status. */
static int
jwe_parts_status(EVP_PKEY *key, char *parts[5])
{
	char	   *jwe = join(parts, 5);
	unsigned char *pt = NULL;
	size_t		len = 0;
	char	   *value = NULL;
	int			rc = bc_jwe_open(key, jwe, strlen(jwe), 4096, "csrSha256", &value, &pt, &len);

	assert_true((rc == BC_OK) == (pt != NULL));
	if (pt != NULL)
		bc_free_secret(pt, len + 1);
	free(value);
	free(jwe);
	return rc;
}

/* Replace part i with a new string, freeing the old one; returns the old one. */
static char *
swap_part(char *parts[5], int i, char *replacement)
{
	char	   *old = parts[i];

	parts[i] = replacement;
	return old;
}

/* Open with header member name set to value (json), then restore; returns the status. */
static int
jwe_header_status(EVP_PKEY *key, char *parts[5], const char *name, json_t *value)
{
	json_t	   *hdr = decode_header(parts[0]);
	char	   *old;
	int			rc;

	assert_non_null(hdr);
	if (value == NULL)
		json_object_del(hdr, name);
	else
		json_object_set_new(hdr, name, value);
	old = swap_part(parts, 0, encode_header(hdr));
	rc = jwe_parts_status(key, parts);
	free(swap_part(parts, 0, old));
	json_decref(hdr);
	return rc;
}

/* Flip a bit of the decoded part i, re-encode, open, restore; returns the status. */
static int
jwe_flip_status(EVP_PKEY *key, char *parts[5], int i)
{
	unsigned char buf[4096];
	size_t		len = 0;
	char		enc[6000];
	char	   *old;
	int			rc;

	assert_int_equal(bc_b64url_decode(parts[i], strlen(parts[i]), buf, sizeof(buf), &len),
					 BC_OK);
	assert_true(len > 0);
	buf[len - 1] ^= 0x01;
	bc_b64url_encode(buf, len, enc);
	old = swap_part(parts, i, enc);
	rc = jwe_parts_status(key, parts);
	swap_part(parts, i, old);
	return rc;
}

/* Tampered parts, other algorithms, zip, crit, bad epk, IV and tag lengths fail. */
static void
test_jwe_refusals(void **state)
{
	jose_fixture *f = *state;
	char	   *jwe = NULL;
	char	   *parts[5];
	char	   *old;
	json_t	   *hdr;
	json_t	   *epk;
	unsigned char y[32];
	size_t		y_len = 0;
	char		y64[44];
	unsigned char *pt = NULL;
	size_t		len;

	assert_int_equal(bc_jwe_seal(f->key, "csrSha256", "abc", (const unsigned char *) "token",
								 5, &jwe), BC_OK);
	assert_int_equal(split(jwe, parts), 5);
	assert_int_equal(jwe_parts_status(f->key, parts), BC_OK);
	assert_int_equal(jwe_flip_status(f->key, parts, 3), BC_EVERIFY);	/* ciphertext */
	assert_int_equal(jwe_flip_status(f->key, parts, 4), BC_EVERIFY);	/* tag */
	assert_int_equal(jwe_flip_status(f->key, parts, 2), BC_EVERIFY);	/* iv */
	assert_int_equal(jwe_flip_status(f->key, parts, 0), BC_EINVAL);	/* header text */
	/* header members changed (authenticated data) */
	assert_int_equal(jwe_header_status(f->key, parts, "csrSha256", json_string("abd")),
					 BC_EVERIFY);
	assert_int_equal(jwe_header_status(f->key, parts, "apu", json_string("QWxpY2U")),
					 BC_EVERIFY);
	assert_int_equal(jwe_header_status(f->key, parts, "apu", json_integer(1)), BC_EINVAL);
	assert_int_equal(jwe_header_status(f->key, parts, "zip", json_string("DEF")),
					 BC_EUNSUPPORTED);
	assert_int_equal(jwe_header_status(f->key, parts, "crit", json_pack("[s]", "x")),
					 BC_EUNSUPPORTED);
	assert_int_equal(jwe_header_status(f->key, parts, "alg", json_string("ECDH-ES+A256KW")),
					 BC_EUNSUPPORTED);
	assert_int_equal(jwe_header_status(f->key, parts, "alg", json_string("dir")),
					 BC_EUNSUPPORTED);
	assert_int_equal(jwe_header_status(f->key, parts, "enc", json_string("A128GCM")),
					 BC_EUNSUPPORTED);
	assert_int_equal(jwe_header_status(f->key, parts, "epk", NULL), BC_EINVAL);
	assert_int_equal(jwe_header_status(f->key, parts, "csrSha256", NULL), BC_EINVAL);
	/* an epk that is not on the curve */
	hdr = decode_header(parts[0]);
	epk = json_deep_copy(json_object_get(hdr, "epk"));
	assert_int_equal(bc_b64url_decode(json_string_value(json_object_get(epk, "y")), 43,
									  y, sizeof(y), &y_len), BC_OK);
	y[31] ^= 0x01;
	bc_b64url_encode(y, 32, y64);
	json_object_set_new(epk, "y", json_string(y64));
	assert_int_equal(jwe_header_status(f->key, parts, "epk", epk), BC_EINVAL);
	/* a P-256 epk that is another valid key: decrypts with the wrong key */
	{
		char	   *other_jwk = NULL;
		json_error_t jerr;

		assert_int_equal(bc_jwk_from_pkey(f->other, &other_jwk), BC_OK);
		assert_int_equal(jwe_header_status(f->key, parts, "epk",
										   json_loads(other_jwk, 0, &jerr)), BC_EVERIFY);
		free(other_jwk);
	}
	json_decref(hdr);
	/* non-empty encrypted key, IV of 16 bytes, tag of 15 bytes */
	old = swap_part(parts, 1, "AAAA");
	assert_int_equal(jwe_parts_status(f->key, parts), BC_EINVAL);
	swap_part(parts, 1, old);
	old = swap_part(parts, 2, "AAAAAAAAAAAAAAAAAAAAAA");
	assert_int_equal(jwe_parts_status(f->key, parts), BC_EINVAL);
	swap_part(parts, 2, old);
	old = swap_part(parts, 4, "AAAAAAAAAAAAAAAAAAAA");
	assert_int_equal(jwe_parts_status(f->key, parts), BC_EINVAL);
	swap_part(parts, 4, old);
	assert_int_equal(jwe_parts_status(f->key, parts), BC_OK);	/* restored */
	/* four parts; oversized input */
	{
		char	   *four = join(parts, 4);

		assert_int_equal(bc_jwe_open(f->key, four, strlen(four), 4096, NULL, NULL, &pt, &len),
						 BC_EINVAL);
		free(four);
	}
	assert_int_equal(bc_jwe_open(f->key, jwe, BC_JOSE_MAX + 1, 4096, NULL, NULL, &pt, &len),
					 BC_ETOOBIG);
	assert_null(pt);
	free_parts(parts, 5);
	free(jwe);
}

/* Sealing more than BC_JOSE_MAX bytes is refused. */
static void
test_jwe_oversized_seal(void **state)
{
	jose_fixture *f = *state;
	unsigned char *big = calloc(1, BC_JOSE_MAX);
	char	   *jwe = NULL;

	assert_non_null(big);
	assert_int_equal(bc_jwe_seal(f->key, NULL, NULL, big, BC_JOSE_MAX, &jwe), BC_ETOOBIG);
	assert_null(jwe);
	assert_int_equal(bc_jws_sign_es256(f->key, NULL, big, BC_JOSE_MAX, &jwe), BC_ETOOBIG);
	assert_null(jwe);
	free(big);
}

/* Run the tests. */
int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_jwk_round_trip),
		cmocka_unit_test(test_jwk_refusals),
		cmocka_unit_test(test_pem_files),
		cmocka_unit_test(test_jws_round_trip),
		cmocka_unit_test(test_jws_refusals),
		cmocka_unit_test(test_jwe_round_trip),
		cmocka_unit_test(test_jwe_refusals),
		cmocka_unit_test(test_jwe_oversized_seal),
	};

	return cmocka_run_group_tests_name("jose", tests, setup_keys, teardown_keys);
}
