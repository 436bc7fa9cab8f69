/* fuzz_common.c: fixed keys and files for the libFuzzer targets (fuzz_common.h). */
#include "fuzz_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/param_build.h>
#include <openssl/sha.h>

void
bc_fuzz_fail(const char *file, int line, const char *what)
{
	fprintf(stderr, "%s:%d: fuzz property failed: %s\n", file, line, what);
	abort();
}

void
bc_fuzz_secret32(const char *name, unsigned char out[32])
{
	char		buf[256];
	int			n = snprintf(buf, sizeof(buf), "bc_join fuzz key: %s", name);

	SHA256((const unsigned char *) buf, (size_t) n, out);
}

EVP_PKEY *
bc_fuzz_p256_key(const char *name)
{
	unsigned char d[32];
	unsigned char pub[65];
	EC_GROUP   *group = EC_GROUP_new_by_curve_name(NID_X9_62_prime256v1);
	EC_POINT   *pt = group ? EC_POINT_new(group) : NULL;
	BIGNUM	   *priv;
	OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
	OSSL_PARAM *params = NULL;
	EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
	EVP_PKEY   *key = NULL;

	bc_fuzz_secret32(name, d);
	priv = BN_bin2bn(d, sizeof(d), NULL);
	if (pt == NULL || priv == NULL || bld == NULL || ctx == NULL ||
		!EC_POINT_mul(group, pt, priv, NULL, NULL, NULL) ||
		EC_POINT_point2oct(group, pt, POINT_CONVERSION_UNCOMPRESSED, pub, sizeof(pub), NULL) != sizeof(pub) ||
		!OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0) ||
		!OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_PRIV_KEY, priv) ||
		!OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, pub, sizeof(pub)) ||
		(params = OSSL_PARAM_BLD_to_param(bld)) == NULL ||
		EVP_PKEY_fromdata_init(ctx) <= 0 ||
		EVP_PKEY_fromdata(ctx, &key, EVP_PKEY_KEYPAIR, params) <= 0)
	{
		fprintf(stderr, "bc_fuzz_p256_key: cannot make the key %s\n", name);
		abort();
	}
	OSSL_PARAM_free(params);
	OSSL_PARAM_BLD_free(bld);
	EVP_PKEY_CTX_free(ctx);
	BN_clear_free(priv);
	EC_POINT_free(pt);
	EC_GROUP_free(group);
	return key;
}

const char *
bc_fuzz_path(const char *rel)
{
	static char buf[4096];
	const char *dir = getenv("BCJ_FUZZ_DIR");

	snprintf(buf, sizeof(buf), "%s/%s", dir && *dir ? dir : BC_FUZZ_DIR, rel);
	return buf;
}

unsigned char *
bc_fuzz_read_file(const char *rel, size_t cap, size_t *len)
{
	const char *path = bc_fuzz_path(rel);
	FILE	   *f = fopen(path, "rb");
	unsigned char *buf = malloc(cap + 1);
	size_t		n;

	if (f == NULL || buf == NULL)
	{
		fprintf(stderr, "bc_fuzz_read_file: cannot read %s (test/fuzz/make-corpus.sh writes it)\n", path);
		abort();
	}
	n = fread(buf, 1, cap, f);
	fclose(f);
	buf[n] = '\0';
	*len = n;
	return buf;
}
