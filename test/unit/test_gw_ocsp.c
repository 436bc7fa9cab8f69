/*
 * test_gw_ocsp.c: cmocka tests of bc-gateway's OCSP decisions that need no
 * network: the GET form's decoding (ocsp_route.c), what a database answer is
 * and whether it may be cached (ocsp_cache.c: gw_ocsp_examine*, on responses
 * OpenSSL signs here), the per-CertID cache's step (gw_ocsp_decide, on the
 * document cache's NEXT_UPDATE moment), and If-None-Match (http_cache.c).
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

#include <openssl/evp.h>
#include <openssl/ocsp.h>
#include <openssl/x509.h>
#include <libpq-fe.h>

#include "db_pool.h"
#include "doc_cache.h"
#include "http_cache.h"
#include "ocsp_cache.h"
#include "ocsp_route.h"

/* ------------------------------------------------------------ GET decoding */

/* The GET tail: url-decoded, then base64; '/' and '+' raw or %-encoded alike. */
static void
test_get_decode(void **state)
{
	unsigned char der[64];
	size_t		len;
	const char *why;

	(void) state;
	/* base64 of 30 03 0a 01 01 fb ff: "MAMKAQH7/w==" */
	assert_int_equal(gw_ocsp_get_decode("MAMKAQH7/w==", der, sizeof(der), &len, &why), 0);
	assert_int_equal(len, 7);
	assert_memory_equal(der, "\x30\x03\x0a\x01\x01\xfb\xff", 7);
	assert_int_equal(gw_ocsp_get_decode("MAMKAQH7%2Fw%3D%3D", der, sizeof(der), &len, &why), 0);
	assert_int_equal(len, 7);
	assert_memory_equal(der, "\x30\x03\x0a\x01\x01\xfb\xff", 7);
	/* '+' is base64's, not a space (decode_plus 0) */
	assert_int_equal(gw_ocsp_get_decode("+/8=", der, sizeof(der), &len, &why), 0);
	assert_int_equal(len, 2);
	assert_memory_equal(der, "\xfb\xff", 2);
	assert_int_equal(gw_ocsp_get_decode("%2B%2F8%3D", der, sizeof(der), &len, &why), 0);
	assert_int_equal(len, 2);
}

/* What is refused: empty, not base64, a NUL, longer than a request may be, over the buffer. */
static void
test_get_decode_refused(void **state)
{
	unsigned char der[8];
	unsigned char *big = malloc(8192);
	char	   *tail = malloc(GW_OCSP_GET_TAIL_MAX + 2);
	size_t		len = 99;
	const char *why = NULL;

	(void) state;
	assert_non_null(big);
	assert_non_null(tail);
	assert_int_equal(gw_ocsp_get_decode("", der, sizeof(der), &len, &why), -1);
	assert_non_null(why);
	assert_int_equal(len, 0);
	assert_int_equal(gw_ocsp_get_decode(NULL, der, sizeof(der), &len, &why), -1);
	assert_int_equal(gw_ocsp_get_decode("not base64!", der, sizeof(der), &len, &why), -1);
	assert_int_equal(gw_ocsp_get_decode("MAMK%00AQH7", der, sizeof(der), &len, &why), -1);
	assert_int_equal(gw_ocsp_get_decode("%", der, sizeof(der), &len, &why), -1);
	assert_int_equal(gw_ocsp_get_decode("====", der, sizeof(der), &len, &why), -1);
	/* 12 bytes into an 8-byte buffer */
	assert_int_equal(gw_ocsp_get_decode("MAMKAQH7/wAAAAAAAAAA", der, sizeof(der), &len, &why), -1);
	/* longer than any request: refused before decoding */
	memset(tail, 'A', GW_OCSP_GET_TAIL_MAX + 1);
	tail[GW_OCSP_GET_TAIL_MAX + 1] = '\0';
	assert_int_equal(gw_ocsp_get_decode(tail, big, 8192, &len, &why), -1);
	assert_string_equal(why, "the request in the path is too long");
	/* 5468 characters decode to 4101 bytes: over BC_OCSP_REQUEST_MAX */
	tail[5468] = '\0';
	assert_int_equal(gw_ocsp_get_decode(tail, big, 8192, &len, &why), -1);
	assert_string_equal(why, "the request in the path is too long");
	/* 5460: 4095 bytes, accepted (within the 4096 the route takes) */
	tail[5460] = '\0';
	assert_int_equal(gw_ocsp_get_decode(tail, big, 4096, &len, &why), 0);
	assert_int_equal(len, 4095);
	free(tail);
	free(big);
}

/* ------------------------------------------------------- responses examined */

/* A P-256 key and a self-signed certificate for it. */
static X509 *
self_signed(EVP_PKEY **key)
{
	X509	   *x = X509_new();

	*key = EVP_EC_gen("P-256");
	assert_non_null(*key);
	assert_non_null(x);
	X509_set_version(x, 2);
	ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
	X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC,
							   (const unsigned char *) "test responder", -1, -1, 0);
	X509_set_issuer_name(x, X509_get_subject_name(x));
	X509_gmtime_adj(X509_getm_notBefore(x), -60);
	X509_gmtime_adj(X509_getm_notAfter(x), 3600);
	X509_set_pubkey(x, *key);
	assert_true(X509_sign(x, *key, EVP_sha256()) > 0);
	return x;
}

/*
 * A signed OCSPResponse with n SingleResponses (good) for serials 1..n of the
 * certificate's issuer, nextUpdate next seconds from now; *key_der the first
 * CertID's DER.  Returns the DER (OPENSSL_free).
 */
static unsigned char *
signed_response(int n, long next, unsigned char *key_der, size_t *key_len, size_t *len)
{
	EVP_PKEY   *key;
	X509	   *ca = self_signed(&key);
	OCSP_BASICRESP *bs = OCSP_BASICRESP_new();
	OCSP_RESPONSE *resp;
	ASN1_TIME  *tu = X509_gmtime_adj(NULL, -10);
	ASN1_TIME  *nu = X509_gmtime_adj(NULL, next);
	unsigned char *der = NULL;
	int			l;

	for (int i = 1; i <= n; i++)
	{
		ASN1_INTEGER *serial = ASN1_INTEGER_new();
		OCSP_CERTID *id;

		ASN1_INTEGER_set(serial, i);
		id = OCSP_cert_id_new(EVP_sha1(), X509_get_subject_name(ca), X509_get0_pubkey_bitstr(ca), serial);
		assert_non_null(id);
		if (i == 1)
		{
			unsigned char *p = key_der;

			*key_len = (size_t) i2d_OCSP_CERTID(id, &p);
		}
		assert_non_null(OCSP_basic_add1_status(bs, id, V_OCSP_CERTSTATUS_GOOD, 0, NULL, tu, nu));
		OCSP_CERTID_free(id);
		ASN1_INTEGER_free(serial);
	}
	assert_true(OCSP_basic_sign(bs, ca, key, EVP_sha256(), NULL, OCSP_RESPID_KEY) == 1);
	resp = OCSP_response_create(OCSP_RESPONSE_STATUS_SUCCESSFUL, bs);
	assert_non_null(resp);
	l = i2d_OCSP_RESPONSE(resp, &der);
	assert_true(l > 0);
	*len = (size_t) l;
	OCSP_RESPONSE_free(resp);
	OCSP_BASICRESP_free(bs);
	ASN1_TIME_free(tu);
	ASN1_TIME_free(nu);
	X509_free(ca);
	EVP_PKEY_free(key);
	return der;
}

/* One SingleResponse echoing the key, nextUpdate ahead: cacheable, its times and max-age min(60, left). */
static void
test_examine_cacheable(void **state)
{
	unsigned char key[256];
	size_t		key_len = 0,
				len;
	unsigned char *der = signed_response(1, 300, key, &key_len, &len);
	struct gw_ocsp_answer a = {0};
	time_t		now = time(NULL);

	(void) state;
	gw_ocsp_examine_der(der, len, key, key_len, now, &a);
	assert_int_equal(a.status, OCSP_RESPONSE_STATUS_SUCCESSFUL);
	assert_ptr_equal(a.der, der);
	assert_true(a.cacheable);
	assert_true(a.next_update - now >= 299 && a.next_update - now <= 301);
	assert_true(a.this_update <= now);
	assert_int_equal(a.max_age, 60);

	/* another key (one byte of the serial changed): served, never cached under this key */
	key[key_len - 1] ^= 1;
	gw_ocsp_examine_der(der, len, key, key_len, now, &a);
	assert_int_equal(a.status, OCSP_RESPONSE_STATUS_SUCCESSFUL);
	assert_false(a.cacheable);
	/* no key: not for the cache */
	gw_ocsp_examine_der(der, len, NULL, 0, now, &a);
	assert_ptr_equal(a.der, der);
	assert_false(a.cacheable);
	OPENSSL_free(der);

	/* nextUpdate 30 s ahead: max-age 30 (or 29) */
	der = signed_response(1, 30, key, &key_len, &len);
	gw_ocsp_examine_der(der, len, key, key_len, time(NULL), &a);
	assert_true(a.cacheable);
	assert_true(a.max_age >= 29 && a.max_age <= 30);
	/* the same answer judged an hour later: past nextUpdate, not cacheable */
	gw_ocsp_examine_der(der, len, key, key_len, time(NULL) + 3600, &a);
	assert_false(a.cacheable);
	OPENSSL_free(der);
}

/* Two SingleResponses, an unsigned error, garbage, trailing bytes: never cached; garbage is internalError. */
static void
test_examine_not_cacheable(void **state)
{
	unsigned char key[256];
	size_t		key_len = 0,
				len;
	unsigned char *der = signed_response(2, 300, key, &key_len, &len);
	unsigned char *longer;
	struct gw_ocsp_answer a = {0};
	static const unsigned char try_later[] = {0x30, 0x03, 0x0a, 0x01, 0x03};
	static const unsigned char junk[] = {0x30, 0x03, 0x0a, 0x01};

	(void) state;
	gw_ocsp_examine_der(der, len, key, key_len, time(NULL), &a);
	assert_int_equal(a.status, OCSP_RESPONSE_STATUS_SUCCESSFUL);
	assert_non_null(a.der);
	assert_false(a.cacheable);
	longer = malloc(len + 1);
	assert_non_null(longer);
	memcpy(longer, der, len);
	longer[len] = 0;
	gw_ocsp_examine_der(longer, len + 1, key, key_len, time(NULL), &a);
	assert_null(a.der);
	assert_int_equal(a.status, GW_OCSP_INTERNAL_ERROR);
	free(longer);
	OPENSSL_free(der);

	gw_ocsp_examine_der(try_later, sizeof(try_later), key, key_len, time(NULL), &a);
	assert_int_equal(a.status, OCSP_RESPONSE_STATUS_TRYLATER);
	assert_non_null(a.der);
	assert_false(a.cacheable);
	gw_ocsp_examine_der(junk, sizeof(junk), key, key_len, time(NULL), &a);
	assert_null(a.der);
	assert_int_equal(a.status, GW_OCSP_INTERNAL_ERROR);
	assert_non_null(a.reason);
}

/* The database's answer: bytea hex decoded; failures are tryLater (503-class) or internalError. */
static void
test_examine_db_result(void **state)
{
	unsigned char key[256];
	size_t		key_len = 0,
				len;
	unsigned char *der = signed_response(1, 300, key, &key_len, &len);
	char	   *hex = malloc(2 * len + 3);
	struct gw_ocsp_answer a;
	unsigned char *owned = NULL;
	struct gw_db_result r = {0};

	(void) state;
	assert_non_null(hex);
	hex[0] = '\\';
	hex[1] = 'x';
	for (size_t i = 0; i < len; i++)
		snprintf(hex + 2 + 2 * i, 3, "%02x", der[i]);
	r.status = GW_DB_OK;
	r.value = hex;
	r.value_len = strlen(hex);
	gw_ocsp_examine(&r, key, key_len, time(NULL), &a, &owned);
	assert_non_null(owned);
	assert_int_equal(a.len, len);
	assert_memory_equal(a.der, der, len);
	assert_true(a.cacheable);
	PQfreemem(owned);

	r.value = NULL;
	gw_ocsp_examine(&r, key, key_len, time(NULL), &a, &owned);
	assert_null(a.der);
	assert_int_equal(a.status, GW_OCSP_INTERNAL_ERROR);

	r.status = GW_DB_ERROR;
	r.sqlstate = "57014";
	gw_ocsp_examine(&r, key, key_len, time(NULL), &a, &owned);
	assert_int_equal(a.status, GW_OCSP_TRY_LATER);
	assert_string_equal(a.sqlstate, "57014");
	r.sqlstate = "F0000";		/* INVALID_CONFIG: ocsp.key missing */
	gw_ocsp_examine(&r, key, key_len, time(NULL), &a, &owned);
	assert_int_equal(a.status, GW_OCSP_INTERNAL_ERROR);
	r.status = GW_DB_UNAVAILABLE;
	gw_ocsp_examine(&r, key, key_len, time(NULL), &a, &owned);
	assert_int_equal(a.status, GW_OCSP_TRY_LATER);
	r.status = GW_DB_TIMEOUT;
	gw_ocsp_examine(&r, key, key_len, time(NULL), &a, &owned);
	assert_int_equal(a.status, GW_OCSP_TRY_LATER);
	assert_null(owned);
	free(hex);
	OPENSSL_free(der);
}

/* ------------------------------------------------------------ the cache step */

/* A kept answer left seconds before nextUpdate (both clocks), nothing notified. */
static struct gw_doc_moment
kept(double left)
{
	struct gw_doc_moment m = {
		.rule = GW_DOC_NEXT_UPDATE, .has_copy = 1, .wall_left = left, .mono_left = left,
	};

	return m;
}

/* Current: a hit; a notification, a gap in listening or nextUpdate passed: a call (or wait for the one in flight). */
static void
test_decide(void **state)
{
	struct gw_doc_moment m = kept(100);
	struct gw_doc_moment none = {.rule = GW_DOC_NEXT_UPDATE};

	(void) state;
	assert_int_equal(gw_ocsp_decide(&m, 0), GW_OCSP_HIT);
	assert_int_equal(gw_ocsp_decide(&m, 1), GW_OCSP_HIT);
	m.unseen = 1;				/* NOTIFY bc_join_crl since its call started, or a listening gap */
	assert_int_equal(gw_ocsp_decide(&m, 0), GW_OCSP_FETCH);
	assert_int_equal(gw_ocsp_decide(&m, 1), GW_OCSP_WAIT);
	m = kept(0);
	assert_int_equal(gw_ocsp_decide(&m, 0), GW_OCSP_FETCH);
	m = kept(100);
	m.mono_left = -1;			/* the wall clock went back: the monotonic clock still says expired */
	assert_int_equal(gw_ocsp_decide(&m, 0), GW_OCSP_FETCH);
	assert_int_equal(gw_ocsp_decide(&none, 0), GW_OCSP_FETCH);
	assert_int_equal(gw_ocsp_decide(&none, 1), GW_OCSP_WAIT);
}

/* ------------------------------------------------------------- If-None-Match */

/* If-None-Match: a list, weak tags, "*", junk around; never a prefix or an unquoted tag. */
static void
test_etag_matches(void **state)
{
	char		etag[GW_ETAG_LEN];
	char		buf[128];

	(void) state;
	gw_etag("abc", 3, etag);
	assert_int_equal(strlen(etag), 34);
	assert_int_equal(etag[0], '"');
	assert_int_equal(etag[33], '"');
	/* SHA-256("abc") starts ba7816bf8f01cfea414140de5dae2223 */
	assert_string_equal(etag, "\"ba7816bf8f01cfea414140de5dae2223\"");
	assert_true(gw_etag_matches(etag, etag));
	snprintf(buf, sizeof(buf), "W/%s", etag);
	assert_true(gw_etag_matches(buf, etag));
	snprintf(buf, sizeof(buf), "\"x\", W/\"y\" ,%s", etag);
	assert_true(gw_etag_matches(buf, etag));
	assert_true(gw_etag_matches("*", etag));
	assert_false(gw_etag_matches(NULL, etag));
	assert_false(gw_etag_matches("", etag));
	assert_false(gw_etag_matches("\"ba7816bf\"", etag));
	assert_false(gw_etag_matches("ba7816bf8f01cfea414140de5dae2223", etag));
	assert_false(gw_etag_matches("\"ba7816bf8f01cfea414140de5dae2223", etag));
	snprintf(buf, sizeof(buf), "junk, %s", etag);
	assert_true(gw_etag_matches(buf, etag));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_get_decode),
		cmocka_unit_test(test_get_decode_refused),
		cmocka_unit_test(test_examine_cacheable),
		cmocka_unit_test(test_examine_not_cacheable),
		cmocka_unit_test(test_examine_db_result),
		cmocka_unit_test(test_decide),
		cmocka_unit_test(test_etag_matches),
	};

	return cmocka_run_group_tests_name("gw_ocsp", tests, NULL, NULL);
}
