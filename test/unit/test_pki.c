/*
 * test_pki.c: cmocka tests of CSRs and node certificates of src/common:
 * create/parse/proof of possession, issue, chain verification, URI SANs.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ecdsa.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "bc_common.h"
#include "ca_fixture.h"

/* A test CA, a second unrelated CA and a node key. */
typedef struct pki_fixture
{
	EVP_PKEY   *ca_key;
	X509	   *ca;
	EVP_PKEY   *other_ca_key;
	X509	   *other_ca;
	EVP_PKEY   *node_key;
	int64_t		now;
} pki_fixture;

/* Make the CAs and the node key. */
static int
setup_pki(void **state)
{
	pki_fixture *f = calloc(1, sizeof(*f));

	if (f == NULL)
		return -1;
	f->ca_key = bc_p256_generate();
	f->other_ca_key = bc_p256_generate();
	f->node_key = bc_p256_generate();
	if (f->ca_key == NULL || f->other_ca_key == NULL || f->node_key == NULL)
		return -1;
	f->ca = make_ca(f->ca_key, "Test Node CA");
	f->other_ca = make_ca(f->other_ca_key, "Test Node CA");	/* same name, other key */
	f->now = (int64_t) time(NULL);
	*state = f;
	return 0;
}

/* Free the fixture. */
static int
teardown_pki(void **state)
{
	pki_fixture *f = *state;

	X509_free(f->ca);
	X509_free(f->other_ca);
	EVP_PKEY_free(f->ca_key);
	EVP_PKEY_free(f->other_ca_key);
	EVP_PKEY_free(f->node_key);
	free(f);
	return 0;
}

/* A CSR (DER) for key made directly with OpenSSL, for keys bc_csr_create refuses. */
static unsigned char *
openssl_csr_md(EVP_PKEY *key, const EVP_MD *md, int *len)
{
	X509_REQ   *req = X509_REQ_new();
	unsigned char *der = NULL;

	assert_non_null(req);
	assert_int_equal(X509_REQ_set_pubkey(req, key), 1);
	assert_true(X509_REQ_sign(req, key, md) > 0);
	*len = i2d_X509_REQ(req, &der);
	assert_true(*len > 0);
	X509_REQ_free(req);
	return der;
}

static unsigned char *
openssl_csr(EVP_PKEY *key, int *len)
{
	return openssl_csr_md(key, EVP_sha256(), len);
}

/* A CSR signed with anything but ecdsa-with-SHA256 is no proof of possession. */
static void
test_csr_signature_algorithm(void **state)
{
	pki_fixture *f = *state;
	const EVP_MD *mds[] = {EVP_sha1(), EVP_sha224(), EVP_sha384(), EVP_sha512(), EVP_sha256()};
	size_t		i;

	for (i = 0; i < sizeof(mds) / sizeof(mds[0]); i++)
	{
		int			len = 0;
		unsigned char *der = openssl_csr_md(f->node_key, mds[i], &len);
		bc_csr	   *req = NULL;

		assert_int_equal(bc_csr_parse(der, (size_t) len, &req), BC_OK);
		/* the signature itself is good: only the algorithm is wrong */
		assert_int_equal(bc_csr_verify_pop(req), mds[i] == EVP_sha256() ? BC_OK : BC_EVERIFY);
		bc_csr_free(req);
		OPENSSL_free(der);
	}
}

/* r and s to DER: zero is no signature, lengths are bounded, DER re-reads. */
static void
test_ecdsa_sig_to_der(void **state)
{
	unsigned char r[32];
	unsigned char z[32];
	unsigned char big[67];
	unsigned char *der = NULL;
	const unsigned char *p;
	size_t		len = 0;
	ECDSA_SIG  *sig;

	(void) state;
	memset(r, 0x42, sizeof(r));
	memset(z, 0, sizeof(z));
	memset(big, 1, sizeof(big));
	assert_int_equal(bc_ecdsa_sig_to_der(r, 32, z, 32, &der, &len), BC_EVERIFY);
	assert_null(der);
	assert_int_equal(bc_ecdsa_sig_to_der(big, 67, r, 32, &der, &len), BC_EINVAL);
	assert_int_equal(bc_ecdsa_sig_to_der(r, 0, r, 32, &der, &len), BC_EINVAL);
	assert_int_equal(bc_ecdsa_sig_to_der(r, 32, r + 1, 31, &der, &len), BC_OK);
	p = der;
	sig = d2i_ECDSA_SIG(NULL, &p, (long) len);
	assert_non_null(sig);
	assert_int_equal((size_t) (p - der), len);
	ECDSA_SIG_free(sig);
	free(der);
}

/* Create, parse and check a CSR; its SPKI hash is the key's. */
static void
test_csr_round_trip(void **state)
{
	pki_fixture *f = *state;
	unsigned char *der = NULL;
	size_t		len = 0;
	bc_csr	   *req = NULL;
	unsigned char h1[BC_SHA256_LEN];
	unsigned char h2[BC_SHA256_LEN];
	unsigned char h3[BC_SHA256_LEN];

	assert_int_equal(bc_csr_create(f->node_key, "node-1", &der, &len), BC_OK);
	assert_int_equal(bc_csr_parse(der, len, &req), BC_OK);
	assert_int_equal(bc_csr_verify_pop(req), BC_OK);
	assert_int_equal(EVP_PKEY_eq(bc_csr_pubkey(req), f->node_key), 1);
	assert_int_equal(bc_csr_spki_sha256(req, h1), BC_OK);
	assert_int_equal(bc_pkey_spki_sha256(f->node_key, h2), BC_OK);
	assert_int_equal(bc_pkey_spki_sha256(f->ca_key, h3), BC_OK);
	assert_memory_equal(h1, h2, sizeof(h1));
	assert_memory_not_equal(h1, h3, sizeof(h1));
	bc_csr_free(req);
	free(der);

	assert_int_equal(bc_csr_create(f->node_key, NULL, &der, &len), BC_OK);
	assert_int_equal(bc_csr_parse(der, len, &req), BC_OK);
	assert_int_equal(bc_csr_verify_pop(req), BC_OK);
	bc_csr_free(req);
	free(der);
}

/* Malformed, trailing, oversized and tampered CSRs are refused. */
static void
test_csr_refusals(void **state)
{
	pki_fixture *f = *state;
	unsigned char *der = NULL;
	unsigned char *longer;
	size_t		len = 0;
	size_t		i;
	bc_csr	   *req = NULL;
	int			tampered = 0;

	assert_int_equal(bc_csr_create(f->node_key, "node-1", &der, &len), BC_OK);
	longer = calloc(1, BC_DER_MAX + 1);
	assert_non_null(longer);
	memcpy(longer, der, len);
	assert_int_equal(bc_csr_parse(longer, len + 1, &req), BC_EINVAL);	/* trailing byte */
	assert_int_equal(bc_csr_parse(longer, BC_DER_MAX + 1, &req), BC_ETOOBIG);
	assert_int_equal(bc_csr_parse(der, len - 1, &req), BC_EINVAL);	/* truncated */
	assert_int_equal(bc_csr_parse(der, 0, &req), BC_EINVAL);
	assert_int_equal(bc_csr_parse((const unsigned char *) "garbage", 7, &req), BC_EINVAL);
	assert_null(req);
	free(longer);
	/* change the signed subject: the structure parses, the signature fails */
	for (i = 0; i + 6 <= len; i++)
	{
		if (memcmp(der + i, "node-1", 6) == 0)
		{
			der[i + 5] = '2';
			tampered = 1;
			break;
		}
	}
	assert_true(tampered);
	assert_int_equal(bc_csr_parse(der, len, &req), BC_OK);
	assert_int_equal(bc_csr_verify_pop(req), BC_EVERIFY);
	bc_csr_free(req);
	free(der);
}

/* CSRs with RSA or P-384 keys are BC_EUNSUPPORTED. */
static void
test_csr_other_key_types(void **state)
{
	EVP_PKEY   *keys[2];
	unsigned char *der;
	unsigned char *ours = NULL;
	size_t		ours_len = 0;
	int			len;
	int			i;
	bc_csr	   *req = NULL;

	(void) state;
	keys[0] = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t) 2048);
	keys[1] = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-384");
	for (i = 0; i < 2; i++)
	{
		assert_non_null(keys[i]);
		der = openssl_csr(keys[i], &len);
		assert_int_equal(bc_csr_parse(der, (size_t) len, &req), BC_EUNSUPPORTED);
		assert_null(req);
		OPENSSL_free(der);
		assert_int_equal(bc_csr_create(keys[i], NULL, &ours, &ours_len), BC_EUNSUPPORTED);
		assert_null(ours);
		EVP_PKEY_free(keys[i]);
	}
}

/* Issue a certificate for the node key with two URI SANs. */
static X509 *
issue(pki_fixture *f, EVP_PKEY *ca_key, X509 *ca, unsigned char serial[16])
{
	const char *uris[] = {
		"spiffe://example.org/tenant/t1/node/n1",
		"urn:bc:tpm-ak:sha256:abcd"
	};
	bc_cert_params p = {
		.ca_cert = ca,.ca_key = ca_key,.subject_key = f->node_key,
		.subject_cn = "n1",.uris = uris,.n_uris = 2,
		.not_before = f->now - 60,.not_after = f->now + 3600
	};
	X509	   *cert = NULL;

	assert_int_equal(bc_cert_issue(&p, serial, &cert), BC_OK);
	assert_non_null(cert);
	return cert;
}

/* A CRL of the CA: verifies with the CA key, names the revoked serial with its reason, and
 * an X509 store with CRL checking refuses the revoked certificate and accepts another. */
static void
test_crl(void **state)
{
	pki_fixture *f = *state;
	unsigned char s1[16];
	unsigned char s2[16];
	X509	   *revoked = issue(f, f->ca_key, f->ca, s1);
	X509	   *good = issue(f, f->ca_key, f->ca, s2);
	bc_crl_entry e = {.revoked_at = f->now - 10,.reason = bc_crl_reason_code("keyCompromise")};
	unsigned char *der = NULL;
	size_t		len = 0;
	const unsigned char *p;
	X509_CRL   *crl;
	X509_REVOKED *r = NULL;
	X509_STORE *store;
	X509_STORE_CTX *ctx;

	memcpy(e.serial, s1, 16);
	assert_int_equal(bc_crl_reason_code("renewed"), CRL_REASON_SUPERSEDED);
	assert_int_equal(bc_crl_reason_code("reclaimed"), CRL_REASON_SUPERSEDED);
	assert_int_equal(bc_crl_reason_code("retired"), CRL_REASON_CESSATION_OF_OPERATION);
	assert_int_equal(bc_crl_reason_code("attestation-failed"), CRL_REASON_PRIVILEGE_WITHDRAWN);
	assert_int_equal(bc_crl_reason_code("cACompromise"), CRL_REASON_CA_COMPROMISE);
	assert_int_equal(bc_crl_reason_code("aACompromise"), CRL_REASON_AA_COMPROMISE);
	assert_int_equal(bc_crl_reason_code("certificateHold"), CRL_REASON_UNSPECIFIED);
	assert_int_equal(bc_crl_reason_code("no such"), CRL_REASON_UNSPECIFIED);
	assert_int_equal(bc_crl_build(f->ca, f->ca_key, &e, 1, f->now, f->now, 1, &der, &len), BC_EINVAL);
	assert_int_equal(bc_crl_build(f->ca, f->ca_key, &e, 1, f->now - 60, f->now + 3600, 7, &der, &len),
					 BC_OK);
	p = der;
	crl = d2i_X509_CRL(NULL, &p, (long) len);
	assert_non_null(crl);
	assert_int_equal(X509_CRL_verify(crl, X509_get0_pubkey(f->ca)), 1);
	assert_int_equal(X509_CRL_get0_by_cert(crl, &r, revoked), 1);
	assert_int_equal(X509_CRL_get0_by_cert(crl, &r, good), 0);

	store = X509_STORE_new();
	assert_int_equal(X509_STORE_add_cert(store, f->ca), 1);
	assert_int_equal(X509_STORE_add_crl(store, crl), 1);
	X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK);
	ctx = X509_STORE_CTX_new();
	assert_int_equal(X509_STORE_CTX_init(ctx, store, revoked, NULL), 1);
	assert_int_equal(X509_verify_cert(ctx), 0);
	assert_int_equal(X509_STORE_CTX_get_error(ctx), X509_V_ERR_CERT_REVOKED);
	X509_STORE_CTX_cleanup(ctx);
	assert_int_equal(X509_STORE_CTX_init(ctx, store, good, NULL), 1);
	assert_int_equal(X509_verify_cert(ctx), 1);
	X509_STORE_CTX_free(ctx);
	X509_STORE_free(store);
	X509_CRL_free(crl);
	free(der);
	X509_free(revoked);
	X509_free(good);
}

/* With a CRL URL, the certificate names it as its one distribution point. */
static void
test_cert_crl_dp(void **state)
{
	pki_fixture *f = *state;
	const char *uris[] = {"spiffe://example.org/tenant/t1/node/n1"};
	bc_cert_params p = {
		.ca_cert = f->ca,.ca_key = f->ca_key,.subject_key = f->node_key,
		.subject_cn = "n1",.uris = uris,.n_uris = 1,
		.not_before = f->now - 60,.not_after = f->now + 3600,
		.crl_url = "https://gw.example.org/v1/crl"
	};
	unsigned char serial[16];
	X509	   *cert = NULL;
	CRL_DIST_POINTS *dps;
	GENERAL_NAME *gn;

	assert_int_equal(bc_cert_issue(&p, serial, &cert), BC_OK);
	dps = X509_get_ext_d2i(cert, NID_crl_distribution_points, NULL, NULL);
	assert_non_null(dps);
	assert_int_equal(sk_DIST_POINT_num(dps), 1);
	gn = sk_GENERAL_NAME_value(sk_DIST_POINT_value(dps, 0)->distpoint->name.fullname, 0);
	assert_int_equal(gn->type, GEN_URI);
	assert_string_equal((const char *) ASN1_STRING_get0_data(gn->d.uniformResourceIdentifier),
						"https://gw.example.org/v1/crl");
	CRL_DIST_POINTS_free(dps);
	X509_free(cert);
	p.crl_url = "not a uri";
	assert_int_equal(bc_cert_issue(&p, serial, &cert), BC_EINVAL);
}

/* With an OCSP URL, the certificate's authorityInfoAccess names it, and only it. */
static void
test_cert_aia_ocsp(void **state)
{
	pki_fixture *f = *state;
	const char *uris[] = {"spiffe://example.org/tenant/t1/node/n1"};
	bc_cert_params p = {
		.ca_cert = f->ca,.ca_key = f->ca_key,.subject_key = f->node_key,
		.subject_cn = "n1",.uris = uris,.n_uris = 1,
		.not_before = f->now - 60,.not_after = f->now + 3600,
		.ocsp_url = "https://gw.example.org/v1/ocsp"
	};
	unsigned char serial[16];
	X509	   *cert = NULL;
	AUTHORITY_INFO_ACCESS *aia;
	ACCESS_DESCRIPTION *ad;
	int			crit = -1;

	assert_int_equal(bc_cert_issue(&p, serial, &cert), BC_OK);
	aia = X509_get_ext_d2i(cert, NID_info_access, &crit, NULL);
	assert_non_null(aia);
	assert_int_equal(crit, 0);
	assert_int_equal(sk_ACCESS_DESCRIPTION_num(aia), 1);
	ad = sk_ACCESS_DESCRIPTION_value(aia, 0);
	assert_int_equal(OBJ_obj2nid(ad->method), NID_ad_OCSP);
	assert_int_equal(ad->location->type, GEN_URI);
	assert_string_equal((const char *) ASN1_STRING_get0_data(ad->location->d.uniformResourceIdentifier),
						"https://gw.example.org/v1/ocsp");
	AUTHORITY_INFO_ACCESS_free(aia);
	X509_free(cert);
	p.ocsp_url = "http://bad url/";
	assert_int_equal(bc_cert_issue(&p, serial, &cert), BC_EINVAL);
	p.ocsp_url = NULL;
	assert_int_equal(bc_cert_issue(&p, serial, &cert), BC_OK);
	assert_null(X509_get_ext_d2i(cert, NID_info_access, NULL, NULL));
	X509_free(cert);
}

/* The issued certificate has exactly the documented shape. */
static void
test_cert_issue_shape(void **state)
{
	pki_fixture *f = *state;
	unsigned char serial[16];
	unsigned char got[16];
	X509	   *cert = issue(f, f->ca_key, f->ca, serial);
	BIGNUM	   *bn;
	BASIC_CONSTRAINTS *bc;
	int			crit = -1;
	char	   *uri = NULL;
	unsigned char *der = NULL;
	size_t		der_len = 0;
	X509	   *back = NULL;

	assert_int_equal(X509_get_version(cert), X509_VERSION_3);
	bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), NULL);
	assert_non_null(bn);
	assert_false(BN_is_negative(bn));
	assert_int_equal(BN_bn2binpad(bn, got, 16), 16);
	assert_memory_equal(got, serial, 16);
	BN_free(bn);
	assert_int_equal(X509_NAME_cmp(X509_get_issuer_name(cert), X509_get_subject_name(f->ca)), 0);
	assert_int_equal(EVP_PKEY_eq(X509_get0_pubkey(cert), f->node_key), 1);
	assert_int_equal(X509_get_signature_nid(cert), NID_ecdsa_with_SHA256);
	bc = X509_get_ext_d2i(cert, NID_basic_constraints, &crit, NULL);
	assert_non_null(bc);
	assert_int_equal(crit, 1);
	assert_int_equal(bc->ca, 0);
	BASIC_CONSTRAINTS_free(bc);
	assert_true(X509_get_key_usage(cert) & KU_DIGITAL_SIGNATURE);
	assert_false(X509_get_key_usage(cert) & KU_KEY_CERT_SIGN);
	assert_true(X509_get_extended_key_usage(cert) & XKU_SSL_CLIENT);
	assert_true(X509_get_extended_key_usage(cert) & XKU_SSL_SERVER);
	assert_non_null(X509_get0_subject_key_id(cert));
	assert_non_null(X509_get0_authority_key_id(cert));
	assert_int_equal(ASN1_OCTET_STRING_cmp(X509_get0_authority_key_id(cert),
										   X509_get0_subject_key_id(f->ca)), 0);
	/* each extension is the one OpenSSL's configuration strings make */
	{
		static const struct
		{
			int			nid;
			const char *conf;
		}			want[] = {
			{NID_basic_constraints, "critical,CA:FALSE"},
			{NID_key_usage, "critical,digitalSignature"},
			{NID_ext_key_usage, "clientAuth,serverAuth"},
			{NID_subject_key_identifier, "hash"},
			{NID_authority_key_identifier, "keyid:always"},
		};
		X509V3_CTX	v3;
		size_t		i;

		X509V3_set_ctx(&v3, f->ca, cert, NULL, NULL, 0);
		X509V3_set_ctx_nodb(&v3);
		for (i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		{
			X509_EXTENSION *ref = X509V3_EXT_conf_nid(NULL, &v3, want[i].nid, want[i].conf);
			int			at = X509_get_ext_by_NID(cert, want[i].nid, -1);
			X509_EXTENSION *got_ext;

			assert_non_null(ref);
			assert_true(at >= 0);
			assert_int_equal(X509_get_ext_by_NID(cert, want[i].nid, at), -1);	/* once */
			got_ext = X509_get_ext(cert, at);
			assert_int_equal(X509_EXTENSION_get_critical(got_ext), X509_EXTENSION_get_critical(ref));
			assert_int_equal(ASN1_OCTET_STRING_cmp(X509_EXTENSION_get_data(got_ext),
												   X509_EXTENSION_get_data(ref)), 0);
			X509_EXTENSION_free(ref);
		}
		assert_int_equal(X509_get_ext_count(cert), 6);	/* and the subjectAltName */
	}
	assert_int_equal(bc_cert_uri_san(cert, "spiffe://", &uri), BC_OK);
	assert_string_equal(uri, "spiffe://example.org/tenant/t1/node/n1");
	free(uri);
	assert_int_equal(bc_cert_uri_san(cert, "urn:bc:tpm-ak:", &uri), BC_OK);
	assert_string_equal(uri, "urn:bc:tpm-ak:sha256:abcd");
	free(uri);
	assert_int_equal(bc_cert_uri_san(cert, "", &uri), BC_OK);	/* the first one */
	assert_string_equal(uri, "spiffe://example.org/tenant/t1/node/n1");
	free(uri);
	assert_int_equal(bc_cert_uri_san(cert, "https://", &uri), BC_EINVAL);
	assert_null(uri);
	assert_int_equal(bc_cert_uri_san(f->ca, "spiffe://", &uri), BC_EINVAL);	/* no SAN */
	/* DER round trip; trailing bytes refused */
	assert_int_equal(bc_cert_der(cert, &der, &der_len), BC_OK);
	assert_int_equal(bc_cert_parse(der, der_len, &back), BC_OK);
	assert_int_equal(X509_cmp(back, cert), 0);
	X509_free(back);
	back = NULL;
	assert_int_equal(bc_cert_parse(der, der_len - 1, &back), BC_EINVAL);
	der = realloc(der, der_len + 1);
	assert_non_null(der);
	der[der_len] = 0;
	assert_int_equal(bc_cert_parse(der, der_len + 1, &back), BC_EINVAL);
	assert_null(back);
	free(der);
	X509_free(cert);
}

/* Two certificates never share a serial. */
static void
test_cert_serials_differ(void **state)
{
	pki_fixture *f = *state;
	unsigned char s1[16];
	unsigned char s2[16];
	X509	   *c1 = issue(f, f->ca_key, f->ca, s1);
	X509	   *c2 = issue(f, f->ca_key, f->ca, s2);

	assert_memory_not_equal(s1, s2, 16);
	X509_free(c1);
	X509_free(c2);
}

/*
 * Serials carry 128 random bits, both ways of issuing: each is the positive
 * INTEGER of the 16 bytes handed back, at most 128 bits, encoded in 16
 * bytes or, when its top bit is set, 17 (a leading zero); of 64 serials at
 * least one has its top bit set and one has not (each fails with
 * probability 2^-64; the old code cleared that bit, 127 random bits).
 */
static void
test_cert_serial_bits(void **state)
{
	pki_fixture *f = *state;
	const char *uris[] = {"spiffe://example.org/tenant/t1/node/n1"};
	unsigned char *csr_der = NULL;
	size_t		csr_len = 0;
	bc_csr	   *csr = NULL;
	int			top_set = 0;
	int			top_clear = 0;
	int			k;

	assert_int_equal(bc_csr_create(f->node_key, NULL, &csr_der, &csr_len), BC_OK);
	assert_int_equal(bc_csr_parse(csr_der, csr_len, &csr), BC_OK);
	for (k = 0; k < 128; k++)
	{
		bc_cert_params p = {
			.ca_cert = f->ca,.ca_key = f->ca_key,.subject_csr = csr,
			.uris = uris,.n_uris = 1,
			.not_before = f->now - 60,.not_after = f->now + 3600
		};
		unsigned char s[16];
		unsigned char back[16];
		unsigned char *der = NULL;
		size_t		len = 0;
		X509	   *c = NULL;
		const ASN1_INTEGER *ai;
		unsigned char *enc = NULL;
		int			enclen;
		BIGNUM	   *bn;

		if (k % 2 == 0)
		{
			assert_int_equal(bc_cert_issue_der(&p, s, &der, &len), BC_OK);
			assert_int_equal(bc_cert_parse(der, len, &c), BC_OK);
			OPENSSL_free(der);
		}
		else
			assert_int_equal(bc_cert_issue(&p, s, &c), BC_OK);
		assert_int_equal(X509_verify(c, f->ca_key), 1);
		ai = X509_get0_serialNumber(c);
		bn = ASN1_INTEGER_to_BN(ai, NULL);
		assert_non_null(bn);
		assert_false(BN_is_negative(bn));
		assert_true(BN_num_bits(bn) <= 128);
		assert_int_equal(BN_bn2binpad(bn, back, 16), 16);
		assert_memory_equal(s, back, 16);
		enclen = i2d_ASN1_INTEGER(ai, &enc);
		/* tag, length, then 16 bytes or a zero and 16 */
		if (s[0] & 0x80)
		{
			top_set++;
			assert_int_equal(enclen, 2 + 17);
			assert_int_equal(enc[2], 0);
		}
		else
		{
			top_clear++;
			assert_true(enclen <= 2 + 16);
		}
		OPENSSL_free(enc);
		BN_free(bn);
		X509_free(c);
	}
	assert_true(top_set > 0);
	assert_true(top_clear > 0);
	bc_csr_free(csr);
	OPENSSL_free(csr_der);
}

/* The chain verifies against its CA only, and only within its validity. */
static void
test_cert_verify_chain(void **state)
{
	pki_fixture *f = *state;
	unsigned char serial[16];
	X509	   *cert = issue(f, f->ca_key, f->ca, serial);
	X509	   *foreign = issue(f, f->other_ca_key, f->other_ca, serial);

	assert_int_equal(bc_cert_verify_chain(cert, f->ca, 0), BC_OK);
	assert_int_equal(bc_cert_verify_chain(cert, f->ca, f->now + 1800), BC_OK);
	assert_int_equal(bc_cert_verify_chain(cert, f->other_ca, 0), BC_EVERIFY);
	assert_int_equal(bc_cert_verify_chain(foreign, f->ca, 0), BC_EVERIFY);
	assert_int_equal(bc_cert_verify_chain(cert, f->ca, f->now + 3601), BC_EVERIFY);
	assert_int_equal(bc_cert_verify_chain(cert, f->ca, f->now - 120), BC_EVERIFY);
	assert_int_equal(bc_cert_verify_chain(f->ca, f->ca, 0), BC_OK);
	X509_free(cert);
	X509_free(foreign);
}

/* PEM bundles: in order, bounded, nothing but certificates taken. */
static void
test_cert_pem_bundle(void **state)
{
	pki_fixture *f = *state;
	BIO		   *bio = BIO_new(BIO_s_mem());
	X509	   *out[3];
	size_t		n = 9;
	char		err[256];
	char	   *pem;
	long		len;
	char	   *text;

	assert_non_null(bio);
	assert_int_equal(PEM_write_bio_X509(bio, f->ca), 1);
	BIO_puts(bio, "some text between\n");
	assert_int_equal(PEM_write_bio_X509(bio, f->other_ca), 1);
	len = BIO_get_mem_data(bio, &pem);
	text = strndup(pem, (size_t) len);

	assert_int_equal(bc_cert_read_pem_bundle(NULL, text, strlen(text), out, 3, &n, err, sizeof(err)), BC_OK);
	assert_int_equal(n, 2);
	assert_int_equal(X509_cmp(out[0], f->ca), 0);
	assert_int_equal(X509_cmp(out[1], f->other_ca), 0);
	X509_free(out[0]);
	X509_free(out[1]);
	/* over the bound: nothing handed back */
	assert_int_equal(bc_cert_read_pem_bundle(NULL, text, strlen(text), out, 1, &n, err, sizeof(err)), BC_ETOOBIG);
	assert_int_equal(n, 0);
	/* no certificate, a cut one */
	assert_int_equal(bc_cert_read_pem_bundle(NULL, "nothing", 7, out, 3, &n, err, sizeof(err)), BC_EINVAL);
	assert_int_equal(n, 0);
	assert_int_equal(bc_cert_read_pem_bundle(NULL, text, strlen(text) - 40, out, 3, &n, err, sizeof(err)), BC_EINVAL);
	assert_int_equal(n, 0);
	assert_true(strlen(err) > 0);
	free(text);
	BIO_free(bio);
}

/* An empty subject gets a critical SAN, and the strict chain check accepts it. */
static void
test_cert_empty_subject(void **state)
{
	pki_fixture *f = *state;
	const char *uris[] = {"spiffe://example.org/tenant/t1/node/n1"};
	bc_cert_params p = {
		.ca_cert = f->ca,.ca_key = f->ca_key,.subject_key = f->node_key,
		.uris = uris,.n_uris = 1,.not_before = f->now - 60,.not_after = f->now + 60
	};
	unsigned char serial[16];
	X509	   *cert = NULL;
	GENERAL_NAMES *names;
	int			crit = -1;

	assert_int_equal(bc_cert_issue(&p, serial, &cert), BC_OK);
	assert_int_equal(X509_NAME_entry_count(X509_get_subject_name(cert)), 0);
	names = X509_get_ext_d2i(cert, NID_subject_alt_name, &crit, NULL);
	assert_non_null(names);
	assert_int_equal(crit, 1);
	GENERAL_NAMES_free(names);
	assert_int_equal(bc_cert_verify_chain(cert, f->ca, 0), BC_OK);
	X509_free(cert);
}

/* A certificate for a CSR's key, its bits copied from the CSR, certifies that key. */
static void
test_cert_from_csr(void **state)
{
	pki_fixture *f = *state;
	const char *uris[] = {"spiffe://example.org/tenant/t1/node/n1"};
	unsigned char *der = NULL;
	size_t		len = 0;
	bc_csr	   *csr = NULL;
	unsigned char serial[16];
	unsigned char h1[BC_SHA256_LEN];
	unsigned char h2[BC_SHA256_LEN];
	X509	   *issued = NULL;
	X509	   *cert = NULL;
	unsigned char *cert_der = NULL;
	size_t		cert_len = 0;
	bc_cert_params p = {
		.ca_cert = f->ca,.ca_key = f->ca_key,.subject_cn = "n1",
		.uris = uris,.n_uris = 1,.not_before = f->now - 60,.not_after = f->now + 60
	};

	assert_int_equal(bc_csr_create(f->node_key, NULL, &der, &len), BC_OK);
	assert_int_equal(bc_csr_parse(der, len, &csr), BC_OK);
	p.subject_csr = csr;
	assert_int_equal(bc_cert_issue(&p, serial, &issued), BC_OK);
	/* what a relying party sees: the DER, parsed again */
	assert_int_equal(bc_cert_der(issued, &cert_der, &cert_len), BC_OK);
	assert_int_equal(bc_cert_parse(cert_der, cert_len, &cert), BC_OK);
	assert_int_equal(EVP_PKEY_eq(X509_get0_pubkey(cert), f->node_key), 1);
	assert_int_equal(bc_cert_verify_chain(cert, f->ca, 0), BC_OK);
	assert_int_equal(bc_csr_spki_sha256(csr, h1), BC_OK);
	assert_int_equal(bc_pkey_spki_sha256(X509_get0_pubkey(cert), h2), BC_OK);
	assert_memory_equal(h1, h2, sizeof(h1));
	/* the certificate's own SPKI encoding hashes the same, and so does the CA's */
	memset(h2, 0, sizeof(h2));
	assert_int_equal(bc_cert_spki_sha256(cert, h2), BC_OK);
	assert_memory_equal(h1, h2, sizeof(h1));
	assert_int_equal(bc_cert_spki_sha256(f->ca, h1), BC_OK);
	assert_int_equal(bc_pkey_spki_sha256(f->ca_key, h2), BC_OK);
	assert_memory_equal(h1, h2, sizeof(h1));
	assert_int_equal(bc_cert_spki_sha256(NULL, h2), BC_EINVAL);
	X509_free(cert);
	X509_free(issued);
	free(cert_der);
	bc_csr_free(csr);
	free(der);
}

/*
 * bc_cert_issue_der (templates, encoded once) gives bc_cert_issue's
 * certificate: the same TBSCertificate byte for byte once the serial is the
 * same (each draws its own), with and without a CN, two SANs and a CRL
 * distribution point; its signature verifies under the CA; its serial is
 * the one handed back; a bit flipped in the TBS breaks the signature.
 */
static void
test_cert_issue_der_matches(void **state)
{
	pki_fixture *f = *state;
	const char *uris[] = {"spiffe://example.org/tenant/t1/node/n1", "urn:bc:site:s1"};
	const char *const cns[] = {"n1", NULL};
	const char *const crls[] = {NULL, "http://ca.example/node.crl"};
	const char *const ocsps[] = {NULL, "http://gw.example/v1/ocsp"};
	unsigned char *csr_der = NULL;
	size_t		csr_len = 0;
	bc_csr	   *csr = NULL;
	int			k;

	assert_int_equal(bc_csr_create(f->node_key, NULL, &csr_der, &csr_len), BC_OK);
	assert_int_equal(bc_csr_parse(csr_der, csr_len, &csr), BC_OK);
	for (k = 0; k < 8; k++)
	{
		bc_cert_params p = {
			.ca_cert = f->ca,.ca_key = f->ca_key,.subject_csr = csr,
			.subject_cn = cns[k % 2],.uris = uris,.n_uris = k % 4 < 2 ? 1 : 2,
			.not_before = f->now - 60,.not_after = f->now + 86400 * 400,
			.crl_url = crls[k / 2 % 2],.ocsp_url = ocsps[k / 4 % 2]
		};
		unsigned char s1[16];
		unsigned char s2[16];
		unsigned char *der = NULL;
		size_t		len = 0;
		X509	   *a = NULL;
		X509	   *b = NULL;
		unsigned char *ta = NULL;
		unsigned char *tb = NULL;
		int			la;
		int			lb;
		BIGNUM	   *bn;
		const unsigned char *q;

		assert_int_equal(bc_cert_issue_der(&p, s1, &der, &len), BC_OK);
		assert_int_equal(bc_cert_parse(der, len, &a), BC_OK);
		assert_int_equal(X509_verify(a, f->ca_key), 1);
		assert_int_equal(bc_cert_verify_chain(a, f->ca, 0), BC_OK);
		assert_int_equal(EVP_PKEY_eq(X509_get0_pubkey(a), f->node_key), 1);
		bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(a), NULL);
		assert_non_null(bn);
		assert_int_equal(BN_bn2binpad(bn, s2, 16), 16);
		assert_memory_equal(s1, s2, 16);
		BN_free(bn);

		assert_int_equal(bc_cert_issue(&p, s2, &b), BC_OK);
		assert_int_equal(X509_set_serialNumber(b, (ASN1_INTEGER *) X509_get0_serialNumber(a)), 1);
		la = i2d_re_X509_tbs(a, &ta);
		lb = i2d_re_X509_tbs(b, &tb);
		assert_true(la > 0);
		assert_int_equal(la, lb);
		assert_memory_equal(ta, tb, (size_t) la);
		/* and the DER as issued is what OpenSSL's own decoder re-encodes */
		X509_free(a);
		a = NULL;
		q = der;
		a = d2i_X509(NULL, &q, (long) len);
		assert_non_null(a);
		OPENSSL_free(ta);
		ta = NULL;
		assert_int_equal(i2d_re_X509_tbs(a, &ta), la);
		assert_memory_equal(ta, tb, (size_t) la);
		X509_free(a);

		/* a bit flipped in the issued certificate's TBS: its signature fails */
		der[len / 2] ^= 0x01;
		q = der;
		a = d2i_X509(NULL, &q, (long) len);
		if (a != NULL)
			assert_int_not_equal(X509_verify(a, f->ca_key), 1);
		X509_free(a);
		ERR_clear_error();
		OPENSSL_free(ta);
		OPENSSL_free(tb);
		X509_free(b);
		free(der);
	}
	{
		bc_cert_params p = {
			.ca_cert = f->ca,.ca_key = f->ca_key,.subject_key = f->node_key,
			.uris = uris,.n_uris = 1,.not_before = f->now - 60,.not_after = f->now + 60
		};
		unsigned char s[16];
		unsigned char *der = NULL;
		size_t		len = 0;

		/* a key without a CSR: bc_cert_issue's case only */
		assert_int_equal(bc_cert_issue_der(&p, s, &der, &len), BC_EINVAL);
		assert_null(der);
		p.subject_key = NULL;
		p.subject_csr = csr;
		p.n_uris = 0;			/* no SAN and no CN */
		assert_int_equal(bc_cert_issue_der(&p, s, &der, &len), BC_EINVAL);
		p.n_uris = 1;
		p.crl_url = "http://bad url/";
		assert_int_equal(bc_cert_issue_der(&p, s, &der, &len), BC_EINVAL);
		p.crl_url = NULL;
		p.ocsp_url = "http://bad url/";
		assert_int_equal(bc_cert_issue_der(&p, s, &der, &len), BC_EINVAL);
		p.ocsp_url = NULL;
		p.not_after = p.not_before;
		assert_int_equal(bc_cert_issue_der(&p, s, &der, &len), BC_EINVAL);
		assert_null(der);
	}
	bc_csr_free(csr);
	free(csr_der);
}

/* A CSR whose point is not on the curve is refused before anything uses it. */
static void
test_csr_point_off_curve(void **state)
{
	pki_fixture *f = *state;
	unsigned char *der = NULL;
	size_t		len = 0;
	bc_csr	   *csr = NULL;
	size_t		i;
	int			found = 0;

	assert_int_equal(bc_csr_create(f->node_key, NULL, &der, &len), BC_OK);
	/* the uncompressed point follows the BIT STRING header 03 42 00 04 */
	for (i = 0; i + 4 < len; i++)
	{
		if (der[i] == 0x03 && der[i + 1] == 0x42 && der[i + 2] == 0x00 && der[i + 3] == 0x04)
		{
			der[i + 4 + 63] ^= 0x01;	/* the last byte of y */
			found = 1;
			break;
		}
	}
	assert_true(found);
	assert_int_equal(bc_csr_parse(der, len, &csr), BC_EINVAL);
	assert_null(csr);
	free(der);
}

/*
 * A CSR whose key BIT STRING claims unused bits is refused, even when the
 * point is on the curve once they are masked off (y even: nothing masked).
 */
static void
test_csr_key_unused_bits(void **state)
{
	(void) state;
	for (int tries = 0; tries < 64; tries++)
	{
		EVP_PKEY   *key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
		unsigned char *der = NULL;
		size_t		len = 0;
		bc_csr	   *csr = NULL;
		size_t		i;
		int			at = -1;

		assert_non_null(key);
		assert_int_equal(bc_csr_create(key, NULL, &der, &len), BC_OK);
		for (i = 0; i + 4 + 64 < len; i++)
			if (der[i] == 0x03 && der[i + 1] == 0x42 && der[i + 2] == 0x00 && der[i + 3] == 0x04)
			{
				at = (int) i;
				break;
			}
		assert_true(at >= 0);
		if ((der[at + 4 + 63] & 0x01) != 0)
		{
			/* y odd: masking would move the point; try a key whose y is even */
			free(der);
			EVP_PKEY_free(key);
			continue;
		}
		assert_int_equal(bc_csr_parse(der, len, &csr), BC_OK);	/* as made: taken */
		bc_csr_free(csr);
		csr = NULL;
		der[at + 2] = 0x01;		/* one unused bit */
		assert_int_equal(bc_csr_parse(der, len, &csr), BC_EINVAL);
		assert_null(csr);
		free(der);
		EVP_PKEY_free(key);
		return;
	}
	fail_msg("no key with an even y in 64 tries");
}

/* Bad issue parameters are refused before anything is signed. */
static void
test_cert_issue_refusals(void **state)
{
	pki_fixture *f = *state;
	const char *bad_uri[] = {"spiffe://example.org/has space"};
	EVP_PKEY   *p384 = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-384");
	bc_cert_params p = {
		.ca_cert = f->ca,.ca_key = f->ca_key,.subject_key = f->node_key,
		.not_before = f->now,.not_after = f->now + 60
	};
	bc_cert_params q;
	unsigned char serial[16];
	X509	   *cert = NULL;

	assert_int_equal(bc_cert_issue(&p, serial, &cert), BC_EINVAL);	/* no SAN, no CN */
	q = p;
	q.subject_cn = "n1";
	assert_int_equal(bc_cert_issue(&q, serial, &cert), BC_OK);	/* CN, no SAN */
	assert_int_equal(bc_cert_verify_chain(cert, f->ca, 0), BC_OK);
	X509_free(cert);
	cert = NULL;
	q = p;
	q.not_after = q.not_before;
	assert_int_equal(bc_cert_issue(&q, serial, &cert), BC_EINVAL);
	q = p;
	q.ca_key = f->other_ca_key;	/* does not match the CA certificate */
	assert_int_equal(bc_cert_issue(&q, serial, &cert), BC_EINVAL);
	q = p;
	q.uris = bad_uri;
	q.n_uris = 1;
	assert_int_equal(bc_cert_issue(&q, serial, &cert), BC_EINVAL);
	q = p;
	q.subject_key = p384;
	assert_int_equal(bc_cert_issue(&q, serial, &cert), BC_EUNSUPPORTED);
	assert_null(cert);
	EVP_PKEY_free(p384);
}

/* A PEM certificate file reads back; a missing file gives a reason. */
static void
test_cert_pem_file(void **state)
{
	pki_fixture *f = *state;
	char		path[] = "/tmp/bc-test-ca-XXXXXX";
	char		err[256];
	int			fd = mkstemp(path);
	FILE	   *fp;
	X509	   *back;

	assert_true(fd >= 0);
	fp = fdopen(fd, "w");
	assert_non_null(fp);
	assert_int_equal(PEM_write_X509(fp, f->ca), 1);
	fclose(fp);
	back = bc_cert_read_pem_file(path, err, sizeof(err));
	assert_non_null(back);
	assert_int_equal(X509_cmp(back, f->ca), 0);
	X509_free(back);
	unlink(path);
	assert_null(bc_cert_read_pem_file(path, err, sizeof(err)));
	assert_true(strlen(err) > 0);
}

/* Run the tests. */
int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_csr_round_trip),
		cmocka_unit_test(test_csr_refusals),
		cmocka_unit_test(test_csr_signature_algorithm),
		cmocka_unit_test(test_ecdsa_sig_to_der),
		cmocka_unit_test(test_csr_other_key_types),
		cmocka_unit_test(test_cert_issue_shape),
		cmocka_unit_test(test_crl),
		cmocka_unit_test(test_cert_crl_dp),
		cmocka_unit_test(test_cert_aia_ocsp),
		cmocka_unit_test(test_cert_serials_differ),
		cmocka_unit_test(test_cert_serial_bits),
		cmocka_unit_test(test_cert_verify_chain),
		cmocka_unit_test(test_cert_pem_bundle),
		cmocka_unit_test(test_cert_empty_subject),
		cmocka_unit_test(test_cert_from_csr),
		cmocka_unit_test(test_cert_issue_der_matches),
		cmocka_unit_test(test_csr_point_off_curve),
		cmocka_unit_test(test_csr_key_unused_bits),
		cmocka_unit_test(test_cert_issue_refusals),
		cmocka_unit_test(test_cert_pem_file),
	};

	return cmocka_run_group_tests_name("pki", tests, setup_pki, teardown_pki);
}
