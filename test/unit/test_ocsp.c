/*
 * test_ocsp.c: cmocka tests of src/common/ocsp.c: requests OpenSSL's own
 * client API builds, parsed and bounded (CertIDs, serials, the nonce and
 * every refusal); the issuer match; the responder certificate; the signed
 * answer verified by OpenSSL's OCSP_basic_verify and read back with
 * OCSP_resp_find_status; the unsigned error answers.  Run under ASan and
 * UBSan too (make unit-asan): nothing leaks on any path.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/ocsp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "bc_common.h"
#include "ocsp.h"
#include "ca_fixture.h"

/* A CA, another CA of the same name and another key, the responder's key. */
typedef struct ocsp_fixture
{
	EVP_PKEY   *ca_key;
	X509	   *ca;
	EVP_PKEY   *other_key;
	X509	   *other;
	EVP_PKEY   *rkey;
	int64_t		now;
} ocsp_fixture;

static int
setup(void **state)
{
	ocsp_fixture *f = calloc(1, sizeof(*f));

	if (f == NULL)
		return -1;
	f->ca_key = bc_p256_generate();
	f->other_key = bc_p256_generate();
	f->rkey = bc_p256_generate();
	if (f->ca_key == NULL || f->other_key == NULL || f->rkey == NULL)
		return -1;
	f->ca = make_ca(f->ca_key, "Test Node CA");
	f->other = make_ca(f->other_key, "Test Node CA");
	f->now = (int64_t) time(NULL);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	ocsp_fixture *f = *state;

	X509_free(f->ca);
	X509_free(f->other);
	EVP_PKEY_free(f->ca_key);
	EVP_PKEY_free(f->other_key);
	EVP_PKEY_free(f->rkey);
	free(f);
	return 0;
}

/* A CertID of ca's with md and a serial given as big-endian bytes (negative: neg). */
static OCSP_CERTID *
certid(const EVP_MD *md, X509 *ca, const unsigned char *serial, int len, int neg)
{
	BIGNUM	   *bn = BN_bin2bn(serial, len, NULL);
	ASN1_INTEGER *ai;
	OCSP_CERTID *id;

	assert_non_null(bn);
	BN_set_negative(bn, neg);
	ai = BN_to_ASN1_INTEGER(bn, NULL);
	assert_non_null(ai);
	id = OCSP_cert_id_new(md, X509_get_subject_name(ca), X509_get0_pubkey_bitstr(ca), ai);
	assert_non_null(id);
	ASN1_INTEGER_free(ai);
	BN_free(bn);
	return id;
}

/* The DER of req (malloc'd by OpenSSL), freeing req. */
static unsigned char *
der_of(OCSP_REQUEST *req, int *len)
{
	unsigned char *der = NULL;

	*len = i2d_OCSP_REQUEST(req, &der);
	assert_true(*len > 0);
	OCSP_REQUEST_free(req);
	return der;
}

/* A nonce extension whose extnValue is the given bytes (critical or not). */
static void
add_raw_ext(OCSP_REQUEST *req, int nid, const unsigned char *value, int len, int crit)
{
	ASN1_OCTET_STRING *os = ASN1_OCTET_STRING_new();
	X509_EXTENSION *ext;

	assert_non_null(os);
	assert_int_equal(ASN1_OCTET_STRING_set(os, value, len), 1);
	ext = X509_EXTENSION_create_by_NID(NULL, nid, crit, os);
	assert_non_null(ext);
	assert_int_equal(OCSP_REQUEST_add_ext(req, ext, -1), 1);
	X509_EXTENSION_free(ext);
	ASN1_OCTET_STRING_free(os);
}

/* Parse der; the return value (err kept in the fixture's buffer). */
static int
parse(const unsigned char *der, int len, bc_ocsp_request *r, char *err)
{
	return bc_ocsp_parse_request(der, (size_t) len, r, err, 160);
}

/* SHA-1, SHA-256 and SHA-384 CertIDs and a nonce, as OpenSSL's client makes them. */
static void
test_parse_request(void **state)
{
	ocsp_fixture *f = *state;
	static bc_ocsp_request r;
	OCSP_REQUEST *req = OCSP_REQUEST_new();
	unsigned char s1[] = {0x12, 0x34};
	unsigned char s2[16];
	unsigned char s3[20];
	unsigned char nonce[32];
	unsigned char *der;
	char		err[160];
	int			len;

	memset(s2, 0xab, sizeof(s2));
	memset(s3, 0x11, sizeof(s3));
	memset(nonce, 0x5a, sizeof(nonce));
	assert_non_null(OCSP_request_add0_id(req, certid(EVP_sha1(), f->ca, s1, sizeof(s1), 0)));
	assert_non_null(OCSP_request_add0_id(req, certid(EVP_sha256(), f->ca, s2, sizeof(s2), 0)));
	assert_non_null(OCSP_request_add0_id(req, certid(EVP_sha384(), f->ca, s3, sizeof(s3), 0)));
	assert_int_equal(OCSP_request_add1_nonce(req, nonce, sizeof(nonce)), 1);
	der = der_of(req, &len);
	assert_int_equal(parse(der, len, &r, err), 0);
	assert_int_equal(r.n, 3);
	assert_int_equal(r.ids[0].hash_nid, NID_sha1);
	assert_int_equal(r.ids[0].name_hash_len, 20);
	assert_string_equal(r.ids[0].serial_hex, "00000000000000000000000000001234");
	assert_int_equal(r.ids[1].hash_nid, NID_sha256);
	assert_int_equal(r.ids[1].key_hash_len, 32);
	assert_string_equal(r.ids[1].serial_hex, "abababababababababababababababab");
	assert_int_equal(r.ids[2].hash_nid, NID_sha384);
	assert_string_equal(r.ids[2].serial_hex, "1111111111111111111111111111111111111111");
	assert_int_equal(r.has_nonce, 1);
	assert_int_equal(r.nonce_len, sizeof(nonce));
	assert_memory_equal(r.nonce, nonce, sizeof(nonce));
	/* the issuer: SHA-1 and SHA-256 match; the same name with another key does not */
	assert_int_equal(bc_ocsp_issuer_matches(&r.ids[0], f->ca), 1);
	assert_int_equal(bc_ocsp_issuer_matches(&r.ids[1], f->ca), 1);
	assert_int_equal(bc_ocsp_issuer_matches(&r.ids[2], f->ca), 0);
	assert_int_equal(bc_ocsp_issuer_matches(&r.ids[0], f->other), 0);
	assert_int_equal(bc_ocsp_issuer_matches(&r.ids[1], f->other), 0);
	assert_int_equal(ERR_peek_error(), 0);
	OPENSSL_free(der);
}

/* Serials no certificate has: negative, zero, over 32 bytes. */
static void
test_parse_serials(void **state)
{
	ocsp_fixture *f = *state;
	static bc_ocsp_request r;
	OCSP_REQUEST *req = OCSP_REQUEST_new();
	unsigned char one[] = {0x01};
	unsigned char zero[] = {0x00};
	unsigned char big[33];
	unsigned char *der;
	char		err[160];
	int			len;

	memset(big, 0x7f, sizeof(big));
	assert_non_null(OCSP_request_add0_id(req, certid(EVP_sha1(), f->ca, one, 1, 1)));
	assert_non_null(OCSP_request_add0_id(req, certid(EVP_sha1(), f->ca, zero, 1, 0)));
	assert_non_null(OCSP_request_add0_id(req, certid(EVP_sha1(), f->ca, big, sizeof(big), 0)));
	der = der_of(req, &len);
	assert_int_equal(parse(der, len, &r, err), 0);
	assert_int_equal(r.n, 3);
	assert_string_equal(r.ids[0].serial_hex, "");
	assert_string_equal(r.ids[1].serial_hex, "");
	assert_string_equal(r.ids[2].serial_hex, "");
	assert_int_equal(r.has_nonce, 0);
	OPENSSL_free(der);
}

/* Every refusal: a reason, nothing half-filled, OpenSSL's queue empty. */
static void
test_parse_refusals(void **state)
{
	ocsp_fixture *f = *state;
	static bc_ocsp_request r;
	static const bc_ocsp_request zero;
	unsigned char s[] = {0x42};
	unsigned char big[BC_OCSP_REQUEST_MAX + 1];
	unsigned char nonce129[3 + 129] = {0x04, 0x81, 0x81};
	unsigned char empty_nonce[] = {0x04, 0x00};
	unsigned char not_octets[] = {0x02, 0x01, 0x05};
	unsigned char trailing_nonce[] = {0x04, 0x01, 0x07, 0x00};
	unsigned char ok_nonce[] = {0x04, 0x01, 0x07};
	unsigned char *der;
	unsigned char *der2;
	char		err[160];
	int			len;
	int			i;
	int			k;

	for (k = 0; k < 8; k++)
	{
		OCSP_REQUEST *req = OCSP_REQUEST_new();

		assert_non_null(OCSP_request_add0_id(req, certid(EVP_sha1(), f->ca, s, 1, 0)));
		switch (k)
		{
			case 0:				/* 17 CertIDs */
				for (i = 0; i < 16; i++)
					assert_non_null(OCSP_request_add0_id(req, certid(EVP_sha1(), f->ca, s, 1, 0)));
				break;
			case 1:
				add_raw_ext(req, NID_id_pkix_OCSP_Nonce, empty_nonce, sizeof(empty_nonce), 0);
				break;
			case 2:
				memset(nonce129 + 3, 0x33, 129);
				add_raw_ext(req, NID_id_pkix_OCSP_Nonce, nonce129, sizeof(nonce129), 0);
				break;
			case 3:
				add_raw_ext(req, NID_id_pkix_OCSP_Nonce, not_octets, sizeof(not_octets), 0);
				break;
			case 4:
				add_raw_ext(req, NID_id_pkix_OCSP_Nonce, trailing_nonce, sizeof(trailing_nonce), 0);
				break;
			case 5:				/* twice */
				add_raw_ext(req, NID_id_pkix_OCSP_Nonce, ok_nonce, sizeof(ok_nonce), 0);
				add_raw_ext(req, NID_id_pkix_OCSP_Nonce, ok_nonce, sizeof(ok_nonce), 0);
				break;
			case 6:				/* an unknown critical extension */
				add_raw_ext(req, NID_id_pkix_OCSP_CrlID, not_octets, sizeof(not_octets), 1);
				break;
			case 7:				/* a critical nonce is a nonce */
				add_raw_ext(req, NID_id_pkix_OCSP_Nonce, ok_nonce, sizeof(ok_nonce), 1);
				break;
		}
		der = der_of(req, &len);
		if (k == 7)
		{
			assert_int_equal(parse(der, len, &r, err), 0);
			assert_int_equal(r.nonce_len, 1);
			/* one byte more: trailing bytes after the OCSPRequest */
			der2 = malloc((size_t) len + 1);
			assert_non_null(der2);
			memcpy(der2, der, (size_t) len);
			der2[len] = 0;
			assert_int_equal(parse(der2, len + 1, &r, err), -1);
			assert_string_equal(err, "the request has bytes after its OCSPRequest");
			/* one byte less: not a DER OCSPRequest */
			assert_int_equal(parse(der2, len - 1, &r, err), -1);
			free(der2);
		}
		else
		{
			err[0] = '\0';
			assert_int_equal(parse(der, len, &r, err), -1);
			assert_true(err[0] != '\0');
		}
		assert_int_equal(ERR_peek_error(), 0);
		OPENSSL_free(der);
	}
	assert_memory_equal(&r, &zero, sizeof(r));
	memset(big, 0x30, sizeof(big));
	assert_int_equal(parse(big, sizeof(big), &r, err), -1);
	assert_string_equal(err, "the request is over 4096 bytes");
	assert_int_equal(bc_ocsp_parse_request(NULL, 0, &r, NULL, 0), -1);
	assert_int_equal(parse((const unsigned char *) "\x30\x04\x30\x02\x30\x00", 6, &r, err), -1);
	assert_string_equal(err, "the request has no certID");
}

/* The responder certificate, then an answer OpenSSL verifies and reads back. */
static void
test_response(void **state)
{
	ocsp_fixture *f = *state;
	static bc_ocsp_request r;
	OCSP_REQUEST *req = OCSP_REQUEST_new();
	OCSP_REQUEST *req2;
	unsigned char s[3][1] = {{0x01}, {0x02}, {0x03}};
	bc_ocsp_single singles[3] = {
		{V_OCSP_CERTSTATUS_GOOD, -1, 0},
		{V_OCSP_CERTSTATUS_REVOKED, CRL_REASON_KEY_COMPROMISE, 0},
		{V_OCSP_CERTSTATUS_UNKNOWN, -1, 0},
	};
	X509	   *rc = NULL;
	X509_STORE *store = X509_STORE_new();
	OCSP_RESPONSE *resp;
	OCSP_BASICRESP *bs;
	const unsigned char *p;
	unsigned char *der;
	unsigned char *out = NULL;
	size_t		outlen = 0;
	char		err[160];
	int			len;
	int			i;

	singles[1].revoked_at = f->now - 100;
	for (i = 0; i < 3; i++)
		assert_non_null(OCSP_request_add0_id(req, certid(i == 1 ? EVP_sha256() : EVP_sha1(), f->ca,
														  s[i], 1, 0)));
	assert_int_equal(OCSP_request_add1_nonce(req, NULL, -1), 1);
	der = der_of(req, &len);
	assert_int_equal(parse(der, len, &r, err), 0);

	/* the responder: issued by the CA, OCSPSigning only, nocheck */
	assert_int_equal(bc_ocsp_responder_cert(f->ca, f->ca_key, f->rkey, f->now - 300,
											f->now + 86100, &rc), BC_OK);
	assert_int_equal(X509_check_issued(f->ca, rc), X509_V_OK);
	assert_int_equal(X509_verify(rc, f->ca_key), 1);
	assert_int_equal(X509_get_extension_flags(rc) & EXFLAG_XKUSAGE, EXFLAG_XKUSAGE);
	assert_int_equal(X509_get_extended_key_usage(rc), XKU_OCSP_SIGN);
	assert_true(X509_get_ext_by_NID(rc, NID_id_pkix_OCSP_noCheck, -1) >= 0);
	assert_int_equal(X509_EXTENSION_get_critical(X509_get_ext(rc, X509_get_ext_by_NID(rc, NID_id_pkix_OCSP_noCheck, -1))), 0);
	assert_int_equal(X509_get_key_usage(rc), KU_DIGITAL_SIGNATURE);
	assert_int_equal(X509_check_ca(rc), 0);

	assert_int_equal(bc_ocsp_response_der(&r, singles, f->now, f->now + 300, rc, f->ca, f->rkey,
										  &out, &outlen), BC_OK);
	p = out;
	resp = d2i_OCSP_RESPONSE(NULL, &p, (long) outlen);
	assert_non_null(resp);
	assert_int_equal(OCSP_response_status(resp), OCSP_RESPONSE_STATUS_SUCCESSFUL);
	bs = OCSP_response_get1_basic(resp);
	assert_non_null(bs);
	/* certs: the responder, then its issuer (a client holding only the root builds the chain) */
	assert_int_equal(sk_X509_num(OCSP_resp_get0_certs(bs)), 2);
	assert_int_equal(X509_cmp(sk_X509_value(OCSP_resp_get0_certs(bs), 0), rc), 0);
	assert_int_equal(X509_cmp(sk_X509_value(OCSP_resp_get0_certs(bs), 1), f->ca), 0);
	assert_int_equal(X509_STORE_add_cert(store, f->ca), 1);
	assert_int_equal(OCSP_basic_verify(bs, NULL, store, 0), 1);
	p = der;
	req2 = d2i_OCSP_REQUEST(NULL, &p, len);
	assert_non_null(req2);
	assert_int_equal(OCSP_check_nonce(req2, bs), 1);
	for (i = 0; i < 3; i++)
	{
		OCSP_CERTID *id = OCSP_onereq_get0_id(OCSP_request_onereq_get0(req2, i));
		int			status = -1;
		int			reason = -2;
		ASN1_GENERALIZEDTIME *rev = NULL;
		ASN1_GENERALIZEDTIME *thisupd = NULL;
		ASN1_GENERALIZEDTIME *nextupd = NULL;
		int			day;
		int			sec;

		assert_int_equal(OCSP_resp_find_status(bs, id, &status, &reason, &rev, &thisupd, &nextupd), 1);
		assert_int_equal(status, singles[i].status);
		assert_int_equal(OCSP_check_validity(thisupd, nextupd, 5, -1), 1);
		assert_int_equal(ASN1_TIME_diff(&day, &sec, thisupd, nextupd), 1);
		assert_int_equal(day * 86400 + sec, 300);
		if (status == V_OCSP_CERTSTATUS_REVOKED)
		{
			assert_int_equal(reason, CRL_REASON_KEY_COMPROMISE);
			assert_int_equal(ASN1_TIME_cmp_time_t(rev, (time_t) singles[1].revoked_at), 0);
		}
	}
	/* byKey: the responder's key hash */
	{
		const ASN1_OCTET_STRING *kid = NULL;
		const X509_NAME *name = NULL;

		assert_int_equal(OCSP_resp_get0_id(bs, &kid, &name), 1);
		assert_null(name);
		assert_non_null(kid);
	}
	/* the answer's signature covers it: a flipped bit fails (in producedAt, the
	 * first GeneralizedTime: the seconds' last digit stays a digit) */
	for (i = 0; i + 17 <= (int) outlen && !(out[i] == 0x18 && out[i + 1] == 0x0f); i++)
		;
	assert_true(i + 17 <= (int) outlen);
	out[i + 2 + 13] ^= 0x01;
	p = out;
	OCSP_RESPONSE_free(resp);
	OCSP_BASICRESP_free(bs);
	resp = d2i_OCSP_RESPONSE(NULL, &p, (long) outlen);
	bs = resp != NULL ? OCSP_response_get1_basic(resp) : NULL;
	if (bs != NULL)
		assert_true(OCSP_basic_verify(bs, NULL, store, 0) != 1);
	ERR_clear_error();
	OCSP_RESPONSE_free(resp);
	OCSP_BASICRESP_free(bs);
	OCSP_REQUEST_free(req2);
	X509_STORE_free(store);
	X509_free(rc);
	free(out);
	OPENSSL_free(der);
}

/* Unsigned error answers: the status, no responseBytes; never "successful". */
static void
test_error_answers(void **state)
{
	static const int statuses[] = {
		OCSP_RESPONSE_STATUS_MALFORMEDREQUEST, OCSP_RESPONSE_STATUS_INTERNALERROR,
		OCSP_RESPONSE_STATUS_TRYLATER, OCSP_RESPONSE_STATUS_SIGREQUIRED,
		OCSP_RESPONSE_STATUS_UNAUTHORIZED
	};
	unsigned char *der = NULL;
	size_t		len = 0;
	size_t		i;

	(void) state;
	for (i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++)
	{
		const unsigned char *p;
		OCSP_RESPONSE *resp;

		assert_int_equal(bc_ocsp_error_der(statuses[i], &der, &len), BC_OK);
		p = der;
		resp = d2i_OCSP_RESPONSE(NULL, &p, (long) len);
		assert_non_null(resp);
		assert_int_equal(OCSP_response_status(resp), statuses[i]);
		assert_null(OCSP_response_get1_basic(resp));
		assert_int_equal(len, 5);
		ERR_clear_error();
		OCSP_RESPONSE_free(resp);
		free(der);
	}
	assert_int_equal(bc_ocsp_error_der(OCSP_RESPONSE_STATUS_SUCCESSFUL, &der, &len), BC_EINVAL);
	assert_null(der);
	assert_int_equal(bc_ocsp_error_der(4, &der, &len), BC_EINVAL);
	assert_int_equal(bc_ocsp_error_der(7, &der, &len), BC_EINVAL);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_request),
		cmocka_unit_test(test_parse_serials),
		cmocka_unit_test(test_parse_refusals),
		cmocka_unit_test(test_response),
		cmocka_unit_test(test_error_answers),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
