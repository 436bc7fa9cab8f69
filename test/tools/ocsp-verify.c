/*
 * ocsp-verify: bcd's revocation checks (src/agent/core/revcheck.c) run on
 * files, without a gateway, for test/agent/ocsp_verify.t, which makes the
 * answers with the openssl CLI (an index.txt responder) and the CRLs with
 * python3-cryptography: real OpenSSL on both sides.
 *
 *   ocsp-verify request LEAF ISSUER OUT
 *       the DER request bcd sends about LEAF (one SHA-256 CertID, no nonce)
 *   ocsp-verify response DER LEAF ISSUER ROOT CAS [NEWEST]
 *       prints "good", "revoked REASON", or "unknown", then "thisUpdate N";
 *       exit 1 with "refused: WHY" when bcd would not take it (NEWEST: the
 *       newest thisUpdate taken before, Unix seconds)
 *   ocsp-verify crl DER ROOT CAS [LEAF]
 *       prints "ok" (and "listed REASON" when LEAF is on it); exit 1 with
 *       "refused: WHY"
 *
 * LEAF, ISSUER, ROOT: one PEM certificate each; CAS: PEM certificates (the
 * node's chain after its leaf).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "core/revcheck.h"

/* One PEM certificate of path (exits on failure). */
static X509 *
cert(const char *path)
{
	FILE	   *f = fopen(path, "r");
	X509	   *x = f != NULL ? PEM_read_X509(f, NULL, NULL, NULL) : NULL;

	if (f != NULL)
		fclose(f);
	if (x == NULL)
	{
		fprintf(stderr, "ocsp-verify: cannot read a certificate from %s\n", path);
		exit(2);
	}
	return x;
}

/* Every PEM certificate of path. */
static STACK_OF(X509) *
certs(const char *path)
{
	STACK_OF(X509) *sk = sk_X509_new_null();
	FILE	   *f = fopen(path, "r");
	X509	   *x;

	while (f != NULL && sk != NULL && (x = PEM_read_X509(f, NULL, NULL, NULL)) != NULL)
		sk_X509_push(sk, x);
	if (f != NULL)
		fclose(f);
	return sk;
}

/* The bytes of path (malloc()ed) into *len (exits on failure). */
static unsigned char *
slurp(const char *path, size_t *len)
{
	FILE	   *f = fopen(path, "rb");
	unsigned char *buf = malloc(1 << 20);

	if (f == NULL || buf == NULL)
	{
		fprintf(stderr, "ocsp-verify: cannot read %s\n", path);
		exit(2);
	}
	*len = fread(buf, 1, 1 << 20, f);
	fclose(f);
	return buf;
}

int
main(int argc, char **argv)
{
	char		err[512];
	size_t		len;
	unsigned char *der;
	int			rc = 2;

	if (argc == 5 && strcmp(argv[1], "request") == 0)
	{
		X509	   *leaf = cert(argv[2]);
		X509	   *issuer = cert(argv[3]);
		FILE	   *f = fopen(argv[4], "wb");

		if (f != NULL && bcd_ocsp_request(leaf, issuer, &der, &len) == 0 &&
			fwrite(der, 1, len, f) == len)
			rc = 0;
		if (f != NULL)
			fclose(f);
		X509_free(leaf);
		X509_free(issuer);
		return rc;
	}
	if ((argc == 7 || argc == 8) && strcmp(argv[1], "response") == 0)
	{
		X509	   *leaf = cert(argv[3]);
		X509	   *issuer = cert(argv[4]);
		X509	   *root = cert(argv[5]);
		STACK_OF(X509) *cas = certs(argv[6]);
		bcd_ocsp_status st;

		der = slurp(argv[2], &len);
		if (bcd_ocsp_verify(der, len, leaf, issuer, root, cas, argc == 8 ? atoll(argv[7]) : 0,
							&st, err, sizeof(err)) != 0)
		{
			printf("refused: %s\n", err);
			rc = 1;
		}
		else
		{
			if (st.status == V_OCSP_CERTSTATUS_GOOD)
				printf("good\n");
			else if (st.status == V_OCSP_CERTSTATUS_REVOKED)
				printf("revoked %s\n", bcd_reason_name(st.reason));
			else
				printf("unknown\n");
			printf("thisUpdate %lld\n", (long long) st.this_update);
			rc = 0;
		}
		free(der);
		X509_free(leaf);
		X509_free(issuer);
		X509_free(root);
		sk_X509_pop_free(cas, X509_free);
		return rc;
	}
	if ((argc == 5 || argc == 6) && strcmp(argv[1], "crl") == 0)
	{
		X509	   *root = cert(argv[3]);
		STACK_OF(X509) *cas = certs(argv[4]);
		X509	   *leaf = argc == 6 ? cert(argv[5]) : NULL;
		bcd_crl_checked got;
		int			reason;
		int64_t		at;

		der = slurp(argv[2], &len);
		if (bcd_crl_verify(der, len, root, cas, &got, err, sizeof(err)) != 0)
		{
			printf("refused: %s\n", err);
			rc = 1;
		}
		else
		{
			printf("ok\n");
			if (leaf != NULL && bcd_crl_lists(got.crl, leaf, &reason, &at))
				printf("listed %s\n", bcd_reason_name(reason));
			X509_CRL_free(got.crl);
			rc = 0;
		}
		free(der);
		X509_free(root);
		X509_free(leaf);
		sk_X509_pop_free(cas, X509_free);
		return rc;
	}
	fprintf(stderr, "usage: ocsp-verify request|response|crl ... (see the file's comment)\n");
	return 2;
}
