/*
 * test_jose_x5c.c: cmocka tests of the x5c JWS of src/common (jose_x5c.c):
 * ES256, ES384, RS256 and PS256 round trips, the bounds (intermediates,
 * certificate size, key sizes), the header rules, alg against the leaf key,
 * fixed-width ECDSA, PS256's salt, and bc_cert_verify_path.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/rsa.h>
#include <openssl/x509v3.h>

#include "bc_common.h"

static const char payload[] = "{\"purpose\":\"x509pop\",\"nodeId\":\"\",\"csrSha256\":\"x\",\"iat\":1}";

/* A key: "P-256", "P-384", "P-521" or "RSA:<bits>". */
static EVP_PKEY *
make_key(const char *what)
{
	EVP_PKEY   *k;

	if (strncmp(what, "RSA:", 4) == 0)
		k = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t) atoi(what + 4));
	else
		k = EVP_PKEY_Q_keygen(NULL, NULL, "EC", what);
	assert_non_null(k);
	return k;
}

/* A certificate for key issued by issuer (NULL: self-signed); ca marks a CA. */
static X509 *
make_cert(EVP_PKEY *key, const char *cn, X509 *issuer, EVP_PKEY *issuer_key, int ca)
{
	X509	   *c = X509_new();
	X509V3_CTX v3;
	X509_EXTENSION *ext;

	assert_non_null(c);
	X509_set_version(c, X509_VERSION_3);
	ASN1_INTEGER_set(X509_get_serialNumber(c), (long) (random() & 0x7fffffff));
	X509_NAME_add_entry_by_txt(X509_get_subject_name(c), "CN", MBSTRING_ASC,
							   (const unsigned char *) cn, -1, -1, 0);
	X509_set_issuer_name(c, issuer ? X509_get_subject_name(issuer) : X509_get_subject_name(c));
	X509_gmtime_adj(X509_getm_notBefore(c), -60);
	X509_gmtime_adj(X509_getm_notAfter(c), 3600);
	X509_set_pubkey(c, key);
	X509V3_set_ctx(&v3, issuer ? issuer : c, c, NULL, NULL, 0);
	ext = X509V3_EXT_conf_nid(NULL, &v3, NID_basic_constraints,
							  ca ? "critical,CA:TRUE" : "critical,CA:FALSE");
	X509_add_ext(c, ext, -1);
	X509_EXTENSION_free(ext);
	ext = X509V3_EXT_conf_nid(NULL, &v3, NID_key_usage,
							  ca ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature");
	X509_add_ext(c, ext, -1);
	X509_EXTENSION_free(ext);
	ext = X509V3_EXT_conf_nid(NULL, &v3, NID_subject_key_identifier, "hash");
	X509_add_ext(c, ext, -1);
	X509_EXTENSION_free(ext);
	if (issuer != NULL)
	{
		ext = X509V3_EXT_conf_nid(NULL, &v3, NID_authority_key_identifier, "keyid");
		X509_add_ext(c, ext, -1);
		X509_EXTENSION_free(ext);
	}
	assert_true(X509_sign(c, issuer_key ? issuer_key : key, EVP_sha256()) > 0);
	return c;
}

/* Parse jws; the status, with *fault. */
static int
parse(const char *jws, int *fault)
{
	bc_x5c_jws j;
	int			rc = bc_jws_x5c_parse(jws, strlen(jws), 4096, &j, fault);

	bc_x5c_jws_free(&j);
	return rc;
}

/* Sign, parse and verify with each algorithm; a flipped bit fails. */
static void
test_round_trips(void **state)
{
	static const struct
	{
		const char *key;
		int			alg;
	}			cases[] = {
		{"P-256", BC_JWS_ES256}, {"P-384", BC_JWS_ES384},
		{"RSA:2048", BC_JWS_RS256}, {"RSA:2048", BC_JWS_PS256}
	};
	size_t		i;

	(void) state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
	{
		EVP_PKEY   *k = make_key(cases[i].key);
		X509	   *c = make_cert(k, "leaf", NULL, NULL, 0);
		char	   *jws = NULL;
		bc_x5c_jws j;
		int			fault;
		char	   *last;

		assert_int_equal(bc_jws_sign_x5c(k, cases[i].alg, &c, 1, (const unsigned char *) payload,
										 strlen(payload), &jws), BC_OK);
		assert_int_equal(bc_jws_x5c_parse(jws, strlen(jws), 4096, &j, &fault), BC_OK);
		assert_int_equal(j.alg, cases[i].alg);
		assert_int_equal(j.ncerts, 1);
		assert_int_equal(j.payload_len, strlen(payload));
		assert_memory_equal(j.payload, payload, strlen(payload));
		if (cases[i].alg == BC_JWS_ES256)
			assert_int_equal(j.sig_len, 64);
		if (cases[i].alg == BC_JWS_ES384)
			assert_int_equal(j.sig_len, 96);
		assert_int_equal(bc_jws_x5c_verify(&j, jws), BC_OK);
		j.sig[0] ^= 1;
		assert_int_equal(bc_jws_x5c_verify(&j, jws), BC_EVERIFY);
		bc_x5c_jws_free(&j);

		/* Over another payload byte: the signing input changed. */
		last = strchr(jws, '.') + 1;
		*last = *last == 'e' ? 'f' : 'e';
		assert_int_equal(bc_jws_x5c_parse(jws, strlen(jws), 4096, &j, &fault), BC_OK);
		assert_int_equal(bc_jws_x5c_verify(&j, jws), BC_EVERIFY);
		bc_x5c_jws_free(&j);
		free(jws);
		X509_free(c);
		EVP_PKEY_free(k);
	}
}

/* A JWS over header text hdr (signed by nobody: parse-only checks). */
static char *
jws_with_header(const char *hdr)
{
	char	   *h = malloc(bc_b64url_encoded_len(strlen(hdr)) + 1);
	char	   *p = malloc(bc_b64url_encoded_len(strlen(payload)) + 1);
	char	   *out = malloc(strlen(hdr) * 2 + strlen(payload) * 2 + 200);
	unsigned char sig[64] = {1};
	char		s[100];

	bc_b64url_encode((const unsigned char *) hdr, strlen(hdr), h);
	bc_b64url_encode((const unsigned char *) payload, strlen(payload), p);
	bc_b64url_encode(sig, sizeof(sig), s);
	sprintf(out, "%s.%s.%s", h, p, s);
	free(h);
	free(p);
	return out;
}

/* Standard base64 DER of a certificate, malloc()ed. */
static char *
cert_b64(X509 *c)
{
	unsigned char *der = NULL;
	size_t		n = 0;
	char	   *out;

	assert_int_equal(bc_cert_der(c, &der, &n), BC_OK);
	out = malloc(bc_b64_encoded_len(n) + 1);
	bc_b64_encode(der, n, out);
	free(der);
	return out;
}

/* The header's rules and the bounds, each its own fault. */
static void
test_refusals(void **state)
{
	EVP_PKEY   *k = make_key("P-256");
	X509	   *c = make_cert(k, "leaf", NULL, NULL, 0);
	char	   *b = cert_b64(c);
	char	   *hdr = malloc(200000);
	char	   *jws;
	int			fault;
	int			i;

	(void) state;
#define EXPECT(h, f) do { jws = jws_with_header(h); parse(jws, &fault); \
		assert_int_equal(fault, (f)); free(jws); } while (0)

	sprintf(hdr, "{\"alg\":\"ES256\",\"x5c\":[\"%s\"]}", b);
	EXPECT(hdr, BC_X5C_NONE);
	sprintf(hdr, "{\"alg\":\"ES256\",\"typ\":\"JWT\",\"x5c\":[\"%s\"]}", b);
	EXPECT(hdr, BC_X5C_NONE);
	sprintf(hdr, "{\"alg\":\"ES256\",\"typ\":1,\"x5c\":[\"%s\"]}", b);
	EXPECT(hdr, BC_X5C_MALFORMED);
	sprintf(hdr, "{\"alg\":\"ES256\",\"kid\":\"k\",\"x5c\":[\"%s\"]}", b);
	EXPECT(hdr, BC_X5C_MALFORMED);
	sprintf(hdr, "{\"alg\":\"ES256\",\"crit\":[\"b64\"],\"x5c\":[\"%s\"]}", b);
	EXPECT(hdr, BC_X5C_MALFORMED);
	sprintf(hdr, "{\"alg\":\"ES256\",\"alg\":\"ES256\",\"x5c\":[\"%s\"]}", b);
	EXPECT(hdr, BC_X5C_MALFORMED);
	sprintf(hdr, "{\"alg\":\"none\",\"x5c\":[\"%s\"]}", b);
	EXPECT(hdr, BC_X5C_MALFORMED);
	sprintf(hdr, "{\"alg\":\"ES384\",\"x5c\":[\"%s\"]}", b);
	EXPECT(hdr, BC_X5C_ALG_MISMATCH);
	sprintf(hdr, "{\"alg\":\"RS256\",\"x5c\":[\"%s\"]}", b);
	EXPECT(hdr, BC_X5C_ALG_MISMATCH);
	EXPECT("{\"alg\":\"ES256\",\"x5c\":[]}", BC_X5C_MALFORMED);
	EXPECT("{\"alg\":\"ES256\",\"x5c\":[\"AAAA\"]}", BC_X5C_MALFORMED);
	EXPECT("{\"alg\":\"ES256\",\"x5c\":[\"AA-_\"]}", BC_X5C_MALFORMED);
	EXPECT("[1]", BC_X5C_MALFORMED);

	/* Six certificates: too many, before any is parsed. */
	strcpy(hdr, "{\"alg\":\"ES256\",\"x5c\":[\"AAAA\"");
	for (i = 0; i < 5; i++)
		strcat(hdr, ",\"AAAA\"");
	strcat(hdr, "]}");
	EXPECT(hdr, BC_X5C_TOO_MANY_INTERMEDIATES);

	/* A certificate of 16,385 decoded bytes: oversized, before it is parsed. */
	strcpy(hdr, "{\"alg\":\"ES256\",\"x5c\":[\"");
	for (i = 0; i < 16388 / 3; i++)
		strcat(hdr, "AAAA");
	strcat(hdr, "\"]}");
	EXPECT(hdr, BC_X5C_OVERSIZED_CERT);

	/* Keys: RSA 1024 weak, P-521 not one of ours; every certificate counts. */
	{
		EVP_PKEY   *weak = make_key("RSA:1024");
		EVP_PKEY   *p521 = make_key("P-521");
		X509	   *wc = make_cert(weak, "weak", NULL, NULL, 1);
		X509	   *pc = make_cert(p521, "p521", NULL, NULL, 0);
		char	   *wb = cert_b64(wc);
		char	   *pb = cert_b64(pc);

		sprintf(hdr, "{\"alg\":\"ES256\",\"x5c\":[\"%s\",\"%s\"]}", b, wb);
		EXPECT(hdr, BC_X5C_WEAK_KEY);
		sprintf(hdr, "{\"alg\":\"ES256\",\"x5c\":[\"%s\"]}", pb);
		EXPECT(hdr, BC_X5C_KEY_TYPE);
		free(wb);
		free(pb);
		X509_free(wc);
		X509_free(pc);
		EVP_PKEY_free(weak);
		EVP_PKEY_free(p521);
	}

	/* Not three parts; an ES256 signature that is DER, not R||S. */
	assert_int_not_equal(parse("a.b", &fault), BC_OK);
	assert_int_equal(fault, BC_X5C_MALFORMED);
	assert_int_not_equal(parse("a.b.c.d", &fault), BC_OK);
	assert_int_equal(fault, BC_X5C_MALFORMED);
	{
		char	   *good = NULL;
		char	   *bad;

		assert_int_equal(bc_jws_sign_x5c(k, BC_JWS_ES256, &c, 1, (const unsigned char *) payload,
										 strlen(payload), &good), BC_OK);
		bad = malloc(strlen(good) + 10);
		strcpy(bad, good);
		strcat(bad, "AAAA");	/* 67 bytes of signature */
		assert_int_not_equal(parse(bad, &fault), BC_OK);
		assert_int_equal(fault, BC_X5C_MALFORMED);
		free(bad);
		free(good);
	}
#undef EXPECT
	free(hdr);
	free(b);
	X509_free(c);
	EVP_PKEY_free(k);
}

/* PS256 with a salt other than 32 bytes does not verify. */
static void
test_ps256_salt(void **state)
{
	EVP_PKEY   *k = make_key("RSA:2048");
	X509	   *c = make_cert(k, "leaf", NULL, NULL, 0);
	char	   *jws = NULL;
	char	   *dot;
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	EVP_PKEY_CTX *pctx = NULL;
	unsigned char sig[512];
	size_t		sig_len = sizeof(sig);
	char	   *forged;
	bc_x5c_jws j;
	int			fault;

	(void) state;
	assert_int_equal(bc_jws_sign_x5c(k, BC_JWS_PS256, &c, 1, (const unsigned char *) payload,
									 strlen(payload), &jws), BC_OK);
	dot = strrchr(jws, '.');
	assert_true(EVP_DigestSignInit(md, &pctx, EVP_sha256(), NULL, k) == 1);
	EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING);
	EVP_PKEY_CTX_set_rsa_mgf1_md(pctx, EVP_sha256());
	EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, 20);
	assert_true(EVP_DigestSign(md, sig, &sig_len, (const unsigned char *) jws,
							   (size_t) (dot - jws)) == 1);
	forged = malloc((size_t) (dot - jws) + 1 + bc_b64url_encoded_len(sig_len) + 1);
	memcpy(forged, jws, (size_t) (dot - jws) + 1);
	bc_b64url_encode(sig, sig_len, forged + (dot - jws) + 1);
	assert_int_equal(bc_jws_x5c_parse(forged, strlen(forged), 4096, &j, &fault), BC_OK);
	assert_int_equal(bc_jws_x5c_verify(&j, forged), BC_EVERIFY);
	bc_x5c_jws_free(&j);
	free(forged);
	free(jws);
	EVP_MD_CTX_free(md);
	X509_free(c);
	EVP_PKEY_free(k);
}

/* A chain through an intermediate to its root alone; not to another root. */
static void
test_verify_path(void **state)
{
	EVP_PKEY   *rk = make_key("P-256");
	EVP_PKEY   *ik = make_key("P-384");
	EVP_PKEY   *lk = make_key("P-256");
	EVP_PKEY   *ok = make_key("P-256");
	X509	   *root = make_cert(rk, "root", NULL, NULL, 1);
	X509	   *other = make_cert(ok, "other", NULL, NULL, 1);
	X509	   *inter = make_cert(ik, "inter", root, rk, 1);
	X509	   *leaf = make_cert(lk, "leaf", inter, ik, 0);
	int64_t		na;

	(void) state;
	assert_int_equal(bc_cert_verify_path(leaf, &inter, 1, root, 0), BC_OK);
	assert_int_equal(bc_cert_verify_path(leaf, NULL, 0, root, 0), BC_EVERIFY);
	assert_int_equal(bc_cert_verify_path(leaf, &inter, 1, other, 0), BC_EVERIFY);
	assert_int_equal(bc_cert_verify_path(leaf, &inter, 1, inter, 0), BC_OK);	/* partial */
	assert_int_equal(bc_cert_not_after(leaf, &na), BC_OK);
	assert_true(na > (int64_t) time(NULL) + 3000 && na <= (int64_t) time(NULL) + 3600);
	assert_int_equal(bc_cert_verify_path(leaf, &inter, 1, root, na + 10), BC_EVERIFY);
	assert_int_equal(bc_cert_verify_path(leaf, &inter, 1, root, na - 10), BC_OK);
	X509_free(leaf);
	X509_free(inter);
	X509_free(other);
	X509_free(root);
	EVP_PKEY_free(rk);
	EVP_PKEY_free(ik);
	EVP_PKEY_free(lk);
	EVP_PKEY_free(ok);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trips),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_ps256_salt),
		cmocka_unit_test(test_verify_path),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
