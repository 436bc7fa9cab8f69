/*
 * bench/ossl-ops.c: what each OpenSSL 3 operation of a join costs on this
 * machine, one core, through the calls the extension makes, next to the
 * same operation through OpenSSL's older EC_KEY interface (deprecated in
 * 3.0, used here only to compare: it skips the provider machinery).  If the
 * two columns are close, the arithmetic is the floor and no change of
 * interface would make a join cheaper.
 *
 *   cc -O2 bench/ossl-ops.c -lcrypto -o ossl-ops && ./ossl-ops [iterations]
 *
 * Prints "name<TAB>evp_us<TAB>ec_key_us" lines (ec_key_us is "-" where there
 * is no counterpart).  bench/run builds and runs it for section 2.
 */
#define OPENSSL_SUPPRESS_DEPRECATED
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/ecdsa.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/obj_mac.h>
#include <openssl/sha.h>

static int	iterations = 4000;

static double
now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void
need(int ok, const char *what)
{
	if (!ok)
	{
		fprintf(stderr, "ossl-ops: %s failed\n", what);
		ERR_print_errors_fp(stderr);
		exit(1);
	}
}

#define TIME(var, body) \
	do { \
		double t0_ = now(); \
		for (int i_ = 0; i_ < iterations; i_++) { body; } \
		var = (now() - t0_) * 1e6 / iterations; \
	} while (0)

int
main(int argc, char **argv)
{
	EVP_PKEY   *priv;
	EVP_PKEY   *peer;
	EVP_PKEY   *params = NULL;
	EVP_PKEY_CTX *fd;
	EVP_PKEY_CTX *pctx;
	EVP_PKEY_CTX *dc;
	EVP_MD_CTX *sign_base;
	EC_GROUP   *group;
	EC_KEY	   *ec_priv;
	unsigned char pt[65];
	unsigned char ppt[65];
	unsigned char msg[600];
	unsigned char sig[80];
	unsigned char z[32];
	unsigned char dg[32];
	size_t		len;
	size_t		sig_len;
	char		grp[] = "prime256v1";
	double		a;
	double		b;

	if (argc > 1)
		iterations = atoi(argv[1]);
	if (iterations <= 0)
		iterations = 4000;
	memset(msg, 7, sizeof(msg));
	priv = EVP_EC_gen("P-256");
	peer = EVP_EC_gen("P-256");
	need(priv != NULL && peer != NULL, "keygen");
	need(EVP_PKEY_get_octet_string_param(peer, OSSL_PKEY_PARAM_ENCODED_PUBLIC_KEY, pt, 65, &len) == 1 &&
		 len == 65, "peer point");
	need(EVP_PKEY_get_octet_string_param(priv, OSSL_PKEY_PARAM_ENCODED_PUBLIC_KEY, ppt, 65, &len) == 1 &&
		 len == 65, "own point");

	/* importing a public key from its point */
	fd = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
	need(fd != NULL && EVP_PKEY_fromdata_init(fd) == 1, "fromdata_init");
	{
		OSSL_PARAM	p[2] = {OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, grp, 0),
		OSSL_PARAM_construct_end()};

		need(EVP_PKEY_fromdata(fd, &params, EVP_PKEY_KEY_PARAMETERS, p) == 1, "parameter key");
	}
	group = EC_GROUP_new_by_curve_name(NID_X9_62_prime256v1);
	need(group != NULL, "group");
	TIME(a, {
		OSSL_PARAM p[3];
		EVP_PKEY * k = NULL;
		p[0] = OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, grp, 0);
		p[1] = OSSL_PARAM_construct_octet_string(OSSL_PKEY_PARAM_PUB_KEY, pt, 65);
		p[2] = OSSL_PARAM_construct_end();
		need(EVP_PKEY_fromdata(fd, &k, EVP_PKEY_PUBLIC_KEY, p) == 1, "fromdata");
		EVP_PKEY_free(k);
	});
	TIME(b, {
		EC_KEY * k = EC_KEY_new();
		need(k != NULL && EC_KEY_set_group(k, group) == 1 &&
			 EC_KEY_oct2key(k, pt, 65, NULL) == 1, "oct2key");
		EC_KEY_free(k);
	});
	printf("import a point, EVP_PKEY_fromdata\t%.1f\t%.1f\n", a, b);
	TIME(a, {
		EVP_PKEY * k = EVP_PKEY_dup(params);
		need(k != NULL && EVP_PKEY_set1_encoded_public_key(k, pt, 65) == 1, "set1_encoded");
		EVP_PKEY_free(k);
	});
	printf("import a point, copy of a parameter key (bc_join)\t%.1f\t%.1f\n", a, b);

	/* ECDH with the kept derive context, the peer key imported as bc_join does */
	dc = EVP_PKEY_CTX_new_from_pkey(NULL, priv, NULL);
	need(dc != NULL && EVP_PKEY_derive_init(dc) == 1, "derive_init");
	ec_priv = EC_KEY_dup(EVP_PKEY_get0_EC_KEY(priv));
	need(ec_priv != NULL, "EC_KEY of the private key");
	TIME(a, {
		EVP_PKEY * k = EVP_PKEY_dup(params);
		need(k != NULL && EVP_PKEY_set1_encoded_public_key(k, pt, 65) == 1, "set1_encoded");
		need(EVP_PKEY_derive_set_peer_ex(dc, k, 0) == 1, "set_peer");
		len = sizeof(z);
		need(EVP_PKEY_derive(dc, z, &len) == 1, "derive");
		EVP_PKEY_free(k);
	});
	TIME(b, {
		EC_POINT * P = EC_POINT_new(group);
		need(P != NULL && EC_POINT_oct2point(group, P, pt, 65, NULL) == 1, "oct2point");
		need(ECDH_compute_key(z, sizeof(z), P, ec_priv, NULL) == 32, "ECDH_compute_key");
		EC_POINT_free(P);
	});
	printf("ECDH (the sealed token), import included\t%.1f\t%.1f\n", a, b);

	/* ES256 sign of 600 bytes with the kept signing context */
	sign_base = EVP_MD_CTX_new();
	need(sign_base != NULL &&
		 EVP_DigestSignInit(sign_base, NULL, EVP_sha256(), NULL, priv) == 1, "DigestSignInit");
	TIME(a, {
		EVP_MD_CTX * m = EVP_MD_CTX_new();
		need(m != NULL && EVP_MD_CTX_copy_ex(m, sign_base) == 1, "copy");
		sig_len = sizeof(sig);
		need(EVP_DigestSign(m, sig, &sig_len, msg, sizeof(msg)) == 1, "DigestSign");
		EVP_MD_CTX_free(m);
	});
	TIME(b, {
		ECDSA_SIG * s;
		SHA256(msg, sizeof(msg), dg);
		s = ECDSA_do_sign(dg, 32, ec_priv);
		need(s != NULL, "ECDSA_do_sign");
		ECDSA_SIG_free(s);
	});
	printf("ECDSA sign (certificate, response)\t%.1f\t%.1f\n", a, b);

	/* ES256 verify of 600 bytes with a key imported from its point (the CSR) */
	sig_len = sizeof(sig);
	{
		EVP_MD_CTX *m = EVP_MD_CTX_new();

		need(m != NULL && EVP_DigestSignInit(m, NULL, EVP_sha256(), NULL, priv) == 1 &&
			 EVP_DigestSign(m, sig, &sig_len, msg, sizeof(msg)) == 1, "signature to verify");
		EVP_MD_CTX_free(m);
	}
	TIME(a, {
		EVP_PKEY * k = EVP_PKEY_dup(params);
		EVP_MD_CTX * v = EVP_MD_CTX_new();
		need(k != NULL && EVP_PKEY_set1_encoded_public_key(k, ppt, 65) == 1, "set1_encoded");
		need(v != NULL && EVP_DigestVerifyInit(v, NULL, EVP_sha256(), NULL, k) == 1 &&
			 EVP_DigestVerify(v, sig, sig_len, msg, sizeof(msg)) == 1, "DigestVerify");
		EVP_MD_CTX_free(v);
		EVP_PKEY_free(k);
	});
	TIME(b, {
		EC_KEY * k = EC_KEY_new();
		const unsigned char *q = sig;
		ECDSA_SIG * s = d2i_ECDSA_SIG(NULL, &q, (long) sig_len);
		need(k != NULL && s != NULL && EC_KEY_set_group(k, group) == 1 &&
			 EC_KEY_oct2key(k, ppt, 65, NULL) == 1, "verify setup");
		SHA256(msg, sizeof(msg), dg);
		need(ECDSA_do_verify(dg, 32, s, k) == 1, "ECDSA_do_verify");
		ECDSA_SIG_free(s);
		EC_KEY_free(k);
	});
	printf("ECDSA verify (the CSR), import included\t%.1f\t%.1f\n", a, b);

	/* what the machinery alone costs: a context made per key, no arithmetic */
	TIME(a, {
		pctx = EVP_PKEY_CTX_new_from_pkey(NULL, priv, NULL);
		need(pctx != NULL && EVP_PKEY_sign_init(pctx) == 1, "sign_init");
		EVP_PKEY_CTX_free(pctx);
	});
	printf("a signing context made (no arithmetic)\t%.1f\t-\n", a);

	EC_KEY_free(ec_priv);
	EC_GROUP_free(group);
	EVP_MD_CTX_free(sign_base);
	EVP_PKEY_CTX_free(dc);
	EVP_PKEY_CTX_free(fd);
	EVP_PKEY_free(params);
	EVP_PKEY_free(priv);
	EVP_PKEY_free(peer);
	return 0;
}
