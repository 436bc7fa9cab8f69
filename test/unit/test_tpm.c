/*
 * test_tpm.c: cmocka tests of src/common's TPM half (tpm.c, tpm_credential.c)
 * on structures a real swtpm made through
 * tpm2-tools 5.4 (test/unit/tpm-fixture.sh, run from the group setup into a
 * scratch directory).  Without swtpm the setup fails and so does the test.
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

#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <tss2/tss2_mu.h>

#include "bc_common.h"
#include "bc_tpm.h"

#define FIXTURE_SCRIPT "test/unit/tpm-fixture.sh"

/* The qualifying data the fixture quoted with (tpm2_quote -q). */
static const unsigned char quote_q[32] = {
	0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b,
	0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17,
	0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f
};

/* Where the fixture lives: set once by the group setup. */
static char fixture_dir[256];

/* The bytes of a fixture file (malloc), asserting it is there. */
static unsigned char *
slurp(const char *name, size_t *n)
{
	char		path[512];
	FILE	   *f;
	unsigned char *buf = malloc(65536);
	size_t		got;

	assert_non_null(buf);
	snprintf(path, sizeof(path), "%s/%s", fixture_dir, name);
	f = fopen(path, "rb");
	if (f == NULL)
		fail_msg("fixture file %s missing", path);
	got = fread(buf, 1, 65536, f);
	fclose(f);
	*n = got;
	return buf;
}

/* Parse a TPM2B_PUBLIC fixture file. */
static void
load_public(const char *name, bc_tpm_public *out)
{
	size_t		n;
	unsigned char *b = slurp(name, &n);

	assert_int_equal(bc_tpm_public_parse(b, n, out), BC_OK);
	free(b);
}

/* Parse a TPMS_ATTEST fixture file. */
static void
load_attest(const char *name, bc_tpm_attest *out)
{
	size_t		n;
	unsigned char *b = slurp(name, &n);

	assert_int_equal(bc_tpm_attest_parse(b, n, out), BC_OK);
	free(b);
}

/* Parse a TPMT_SIGNATURE fixture file. */
static void
load_sig(const char *name, TPMT_SIGNATURE *out)
{
	size_t		n;
	unsigned char *b = slurp(name, &n);

	assert_int_equal(bc_tpm_signature_parse(b, n, out), BC_OK);
	free(b);
}

/* A PEM certificate fixture file. */
static X509 *
load_pem_cert(const char *name)
{
	char		path[512];
	char		err[128];
	X509	   *c;

	snprintf(path, sizeof(path), "%s/%s", fixture_dir, name);
	c = bc_cert_read_pem_file(path, err, sizeof(err));
	if (c == NULL)
		fail_msg("%s: %s", path, err);
	return c;
}

/* A DER EK certificate fixture file. */
static X509 *
load_ek_cert(const char *name)
{
	size_t		n;
	unsigned char *b = slurp(name, &n);
	X509	   *c = NULL;
	const char *why = NULL;

	assert_int_equal(bc_tpm_ek_cert_parse(b, n, &c, &why), BC_OK);
	free(b);
	return c;
}

/* Make the swtpm fixture. */
static int
setup_fixture(void **state)
{
	char		cmd[1024];
	const char *tmp = getenv("TMPDIR");

	(void) state;
	snprintf(fixture_dir, sizeof(fixture_dir), "%s/bc-tpm-XXXXXX",
			 tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
	if (mkdtemp(fixture_dir) == NULL)
		return -1;
	snprintf(cmd, sizeof(cmd), "bash %s setup %s/fx %ld", FIXTURE_SCRIPT, fixture_dir,
			 (long) getpid());
	strncat(fixture_dir, "/fx", sizeof(fixture_dir) - strlen(fixture_dir) - 1);
	if (system(cmd) != 0)
	{
		fprintf(stderr, "test_tpm: %s failed (swtpm and tpm2-tools are required)\n", cmd);
		return -1;
	}
	return 0;
}

/* Stop the swtpm and remove the scratch directory. */
static int
teardown_fixture(void **state)
{
	char		cmd[1024];
	char	   *slash;

	(void) state;
	snprintf(cmd, sizeof(cmd), "bash %s stop %s", FIXTURE_SCRIPT, fixture_dir);
	if (system(cmd) != 0)
		return -1;
	slash = strrchr(fixture_dir, '/');
	if (slash != NULL)
		*slash = '\0';
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fixture_dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* ------------------------------------------------------------- parsing */

/* Every structure the fixture wrote parses, consuming every byte; trailing, short, oversize refused. */
static void
test_parse_bounds(void **state)
{
	static const char *pubs[] = {"ekr.pub", "ekc.pub", "ekp.pub", "ak.pub", "akr.pub", "akpss.pub",
	"node.pub", "node2.pub", "nodenull.pub", "noderestricted.pub"};
	static const char *attests[] = {"certify.attest", "certify2.attest", "certifyr.attest",
	"quote8.attest", "quote10.attest", "quoter.attest"};
	static const char *sigs[] = {"certify.sig", "certify2.sig", "certifyr.sig",
	"quote8.sig", "quote10.sig", "quoter.sig"};
	unsigned char big[BC_TPM_STRUCT_MAX + 2];
	bc_tpm_public pub;
	bc_tpm_attest att;
	TPMT_SIGNATURE sig;
	size_t		i;

	(void) state;
	for (i = 0; i < sizeof(pubs) / sizeof(pubs[0]); i++)
	{
		size_t		n;
		unsigned char *b = slurp(pubs[i], &n);

		assert_true(n + 1 <= sizeof(big));
		assert_int_equal(bc_tpm_public_parse(b, n, &pub), BC_OK);
		assert_int_equal(pub.len, n - 2);
		assert_memory_equal(pub.bytes, b + 2, n - 2);
		/* a trailing byte */
		memcpy(big, b, n);
		big[n] = 0;
		assert_int_equal(bc_tpm_public_parse(big, n + 1, &pub), BC_EINVAL);
		/* a trailing byte counted in the size field */
		big[0] = (unsigned char) ((n - 1) >> 8);
		big[1] = (unsigned char) (n - 1);
		assert_int_equal(bc_tpm_public_parse(big, n + 1, &pub), BC_EINVAL);
		/* a short size field, short buffers */
		big[0] = (unsigned char) ((n - 3) >> 8);
		big[1] = (unsigned char) (n - 3);
		assert_int_equal(bc_tpm_public_parse(big, n, &pub), BC_EINVAL);
		assert_int_equal(bc_tpm_public_parse(b, n - 1, &pub), BC_EINVAL);
		assert_int_equal(bc_tpm_public_parse(b, 1, &pub), BC_EINVAL);
		assert_int_equal(bc_tpm_public_parse(b, 0, &pub), BC_EINVAL);
		free(b);
	}
	for (i = 0; i < sizeof(attests) / sizeof(attests[0]); i++)
	{
		size_t		n;
		unsigned char *b = slurp(attests[i], &n);

		assert_int_equal(bc_tpm_attest_parse(b, n, &att), BC_OK);
		assert_int_equal(att.len, n);
		memcpy(big, b, n);
		big[n] = 0;
		assert_int_equal(bc_tpm_attest_parse(big, n + 1, &att), BC_EINVAL);
		assert_int_equal(bc_tpm_attest_parse(b, n - 1, &att), BC_EINVAL);
		assert_int_equal(bc_tpm_attest_parse(b, 0, &att), BC_EINVAL);
		free(b);
	}
	for (i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
	{
		size_t		n;
		unsigned char *b = slurp(sigs[i], &n);

		assert_int_equal(bc_tpm_signature_parse(b, n, &sig), BC_OK);
		memcpy(big, b, n);
		big[n] = 0;
		assert_int_equal(bc_tpm_signature_parse(big, n + 1, &sig), BC_EINVAL);
		assert_int_equal(bc_tpm_signature_parse(b, n - 1, &sig), BC_EINVAL);
		free(b);
	}
	/* over the 1,024-byte cap, whatever the content */
	memset(big, 0, sizeof(big));
	assert_int_equal(bc_tpm_public_parse(big, BC_TPM_STRUCT_MAX + 1, &pub), BC_ETOOBIG);
	assert_int_equal(bc_tpm_attest_parse(big, BC_TPM_STRUCT_MAX + 1, &att), BC_ETOOBIG);
	assert_int_equal(bc_tpm_signature_parse(big, BC_TPM_STRUCT_MAX + 1, &sig), BC_ETOOBIG);
	assert_int_equal(bc_tpm_public_parse(NULL, 10, &pub), BC_EINVAL);
}

/*
 * Fuzz-style: every single-byte change of every structure either fails to
 * parse or goes through every check without a crash (ASan/UBSan watch), and
 * never passes the AK signature check.
 */
static void
test_mutations(void **state)
{
	static const char *attests[] = {"certify.attest", "quote8.attest"};
	static const char *pubs[] = {"ak.pub", "ekc.pub", "node.pub", "akr.pub"};
	bc_tpm_public ak, node, pub;
	bc_tpm_attest att;
	TPMT_SIGNATURE sig;
	const char *why;
	size_t		i, k;

	(void) state;
	load_public("ak.pub", &ak);
	load_public("node.pub", &node);
	for (k = 0; k < 2; k++)
	{
		size_t		n;
		unsigned char *b = slurp(attests[k], &n);
		TPMT_SIGNATURE good;

		load_sig(k == 0 ? "certify.sig" : "quote8.sig", &good);
		for (i = 0; i < n; i++)
		{
			unsigned char save = b[i];

			b[i] ^= 0x01;
			if (bc_tpm_attest_parse(b, n, &att) == BC_OK)
			{
				assert_int_equal(bc_tpm_verify_attest(&ak, &att, &good, &why), BC_EVERIFY);
				(void) bc_tpm_check_certify(&att, &node, &why);
				(void) bc_tpm_check_quote(&att, &good, quote_q, sizeof(quote_q), NULL, 0, &why);
			}
			b[i] = save;
		}
		free(b);
	}
	for (k = 0; k < sizeof(pubs) / sizeof(pubs[0]); k++)
	{
		size_t		n;
		unsigned char *b = slurp(pubs[k], &n);

		for (i = 0; i < n; i++)
		{
			unsigned char save = b[i];
			int			bit;

			for (bit = 0; bit < 8; bit += 7)
			{
				b[i] ^= (unsigned char) (1 << bit);
				if (bc_tpm_public_parse(b, n, &pub) == BC_OK)
				{
					unsigned char name[BC_TPM_NAME_MAX];
					size_t		nl;
					EVP_PKEY   *key = NULL;
					unsigned char *der = NULL;
					size_t		dl;

					(void) bc_tpm_name(&pub, name, &nl);
					if (bc_tpm_public_pkey(&pub, &key) == BC_OK)
						EVP_PKEY_free(key);
					if (bc_tpm_ek_spki(&pub, &der, &dl) == BC_OK)
						free(der);
					(void) bc_tpm_check_ek(&pub, &why);
					(void) bc_tpm_check_ak(&pub, &why);
					(void) bc_tpm_check_node_key(&pub, &why);
				}
				b[i] = save;
			}
		}
		free(b);
	}
	{
		size_t		n;
		unsigned char *b = slurp("certify.sig", &n);

		load_attest("certify.attest", &att);
		for (i = 0; i < n; i++)
		{
			unsigned char save = b[i];

			b[i] ^= 0x80;
			if (bc_tpm_signature_parse(b, n, &sig) == BC_OK)
				assert_int_equal(bc_tpm_verify_attest(&ak, &att, &sig, &why), BC_EVERIFY);
			b[i] = save;
		}
		free(b);
	}
}

/* ---------------------------------------------------------- names, keys */

/* The Name computed from ak.pub is what tpm2_createak -n wrote. */
static void
test_name(void **state)
{
	static const char *pairs[][2] = {{"ak.pub", "ak.name"}, {"akr.pub", "akr.name"}};
	size_t		i;

	(void) state;
	for (i = 0; i < 2; i++)
	{
		bc_tpm_public pub;
		unsigned char name[BC_TPM_NAME_MAX];
		size_t		name_len = 0;
		size_t		n;
		unsigned char *want;

		load_public(pairs[i][0], &pub);
		want = slurp(pairs[i][1], &n);
		assert_int_equal(bc_tpm_name(&pub, name, &name_len), BC_OK);
		assert_int_equal(name_len, 34);
		assert_int_equal(name_len, n);
		assert_memory_equal(name, want, n);
		free(want);
	}
}

/* The EK SPKI is tpm2_readpublic -f der's, for the RSA and the P-384 EK. */
static void
test_ek_spki(void **state)
{
	static const char *pairs[][2] = {{"ekr.pub", "ekr.der"}, {"ekc.pub", "ekc.der"}};
	size_t		i;

	(void) state;
	for (i = 0; i < 2; i++)
	{
		bc_tpm_public ek;
		unsigned char *der = NULL;
		size_t		der_len = 0;
		size_t		n;
		unsigned char *want;
		unsigned char h1[32], h2[32];

		load_public(pairs[i][0], &ek);
		want = slurp(pairs[i][1], &n);
		assert_int_equal(bc_tpm_ek_spki(&ek, &der, &der_len), BC_OK);
		assert_int_equal(der_len, n);
		assert_memory_equal(der, want, n);
		assert_int_equal(bc_tpm_ek_spki_sha256(&ek, h1), BC_OK);
		assert_int_equal(bc_sha256(want, n, h2), BC_OK);
		assert_memory_equal(h1, h2, 32);
		free(der);
		free(want);
	}
}

/* TPMT_PUBLIC to EVP_PKEY: RSA exponent 0 is 65537; ECC points checked on the curve. */
static void
test_public_pkey(void **state)
{
	bc_tpm_public pub;
	EVP_PKEY   *key = NULL;
	BIGNUM	   *e = NULL;

	(void) state;
	load_public("ekr.pub", &pub);
	assert_int_equal(pub.pub.publicArea.parameters.rsaDetail.exponent, 0);
	assert_int_equal(bc_tpm_public_pkey(&pub, &key), BC_OK);
	assert_int_equal(EVP_PKEY_get_bn_param(key, "e", &e), 1);
	assert_true(BN_is_word(e, 65537));
	assert_int_equal(EVP_PKEY_get_bits(key), 2048);
	BN_free(e);
	EVP_PKEY_free(key);

	load_public("ekc.pub", &pub);
	assert_int_equal(bc_tpm_public_pkey(&pub, &key), BC_OK);
	assert_int_equal(EVP_PKEY_get_bits(key), 384);
	EVP_PKEY_free(key);

	load_public("node.pub", &pub);
	assert_int_equal(bc_tpm_public_pkey(&pub, &key), BC_OK);
	assert_true(bc_pkey_is_p256(key));
	EVP_PKEY_free(key);
	/* a point off the curve */
	pub.pub.publicArea.unique.ecc.y.buffer[5] ^= 1;
	assert_int_equal(bc_tpm_public_pkey(&pub, &key), BC_EUNSUPPORTED);
	assert_null(key);
	/* an unknown curve, an unknown type */
	load_public("node.pub", &pub);
	pub.pub.publicArea.parameters.eccDetail.curveID = TPM2_ECC_BN_P256;
	assert_int_equal(bc_tpm_public_pkey(&pub, &key), BC_EUNSUPPORTED);
	pub.pub.publicArea.type = TPM2_ALG_KEYEDHASH;
	assert_int_equal(bc_tpm_public_pkey(&pub, &key), BC_EUNSUPPORTED);
	/* an RSA modulus shorter than its keyBits */
	load_public("akr.pub", &pub);
	pub.pub.publicArea.unique.rsa.size = 255;
	assert_int_equal(bc_tpm_public_pkey(&pub, &key), BC_EUNSUPPORTED);
}

/* ---------------------------------------------------------------- checks */

/* The EKs pass; other keys as EKs fail with their reason. */
static void
test_check_ek(void **state)
{
	bc_tpm_public pub;
	const char *why = "unset";

	(void) state;
	load_public("ekr.pub", &pub);
	assert_int_equal(bc_tpm_check_ek(&pub, &why), BC_OK);
	assert_null(why);
	load_public("ekp.pub", &pub);
	assert_int_equal(bc_tpm_check_ek(&pub, &why), BC_OK);
	load_public("ekc.pub", &pub);
	assert_int_equal(pub.pub.publicArea.nameAlg, TPM2_ALG_SHA384);
	assert_int_equal(pub.pub.publicArea.parameters.eccDetail.symmetric.keyBits.aes, 256);
	assert_int_equal(bc_tpm_check_ek(&pub, &why), BC_OK);
	load_public("ak.pub", &pub);
	assert_int_equal(bc_tpm_check_ek(&pub, &why), BC_EVERIFY);
	assert_string_equal(why, "ek-type");
	load_public("ekr.pub", &pub);
	pub.pub.publicArea.objectAttributes &= ~TPMA_OBJECT_RESTRICTED;
	assert_int_equal(bc_tpm_check_ek(&pub, &why), BC_EVERIFY);
	assert_string_equal(why, "ek-attributes");
	load_public("ekr.pub", &pub);
	pub.pub.publicArea.nameAlg = TPM2_ALG_SHA1;
	assert_int_equal(bc_tpm_check_ek(&pub, &why), BC_EVERIFY);
	assert_string_equal(why, "ek-name-alg");
	load_public("ekr.pub", &pub);
	pub.pub.publicArea.parameters.rsaDetail.symmetric.mode.aes = TPM2_ALG_CBC;
	assert_int_equal(bc_tpm_check_ek(&pub, &why), BC_EVERIFY);
	assert_string_equal(why, "ek-symmetric");
	load_public("ekr.pub", &pub);
	pub.pub.publicArea.parameters.rsaDetail.exponent = 65537;
	assert_int_equal(bc_tpm_check_ek(&pub, &why), BC_EVERIFY);
	assert_string_equal(why, "ek-type");
}

/*
 * The EKs swtpm and tpm2_createek make are the TCG templates exactly
 * (bc_tpm_ek_template), and every flip of a bit of their objectAttributes
 * or authPolicy, every other policy length, is refused.
 */
static void
test_ek_templates(void **state)
{
	static const struct
	{
		const char *file;
		int			tmpl;
	}			eks[] = {
		{"ekr.pub", BC_TPM_EK_L1_RSA2048},	/* tpm2_createek -G rsa (= swtpm's persisted EK) */
		{"ekp.pub", BC_TPM_EK_L2_P256},	/* tpm2_createek -G ecc */
		{"ekc.pub", BC_TPM_EK_H3_P384},	/* tpm2_createek -G ecc384 (= swtpm's P-384 EK) */
	};
	bc_tpm_public pub;
	TPM2B_PUBLIC t;
	const char *why = NULL;
	size_t		k;
	size_t		i;
	int			bit;
	int			flips = 0;

	(void) state;
	for (k = 0; k < sizeof(eks) / sizeof(eks[0]); k++)
	{
		const TPMT_PUBLIC *p;

		load_public(eks[k].file, &pub);
		p = &pub.pub.publicArea;
		assert_int_equal(bc_tpm_ek_template(eks[k].tmpl, &t), BC_OK);
		assert_int_equal(p->type, t.publicArea.type);
		assert_int_equal(p->nameAlg, t.publicArea.nameAlg);
		assert_int_equal(p->objectAttributes, t.publicArea.objectAttributes);
		assert_int_equal(p->authPolicy.size, t.publicArea.authPolicy.size);
		assert_memory_equal(p->authPolicy.buffer, t.publicArea.authPolicy.buffer, p->authPolicy.size);
		assert_memory_equal(&p->parameters, &t.publicArea.parameters, sizeof(p->parameters));
		assert_int_equal(bc_tpm_check_ek(&pub, &why), BC_OK);

		/* every bit of objectAttributes */
		for (bit = 0; bit < 32; bit++)
		{
			load_public(eks[k].file, &pub);
			pub.pub.publicArea.objectAttributes ^= (TPMA_OBJECT) 1u << bit;
			assert_int_equal(bc_tpm_check_ek(&pub, &why), BC_EVERIFY);
			assert_true(strcmp(why, "ek-attributes") == 0 || strcmp(why, "ek-policy") == 0);
			flips++;
		}
		/* every bit of authPolicy, and every other length */
		load_public(eks[k].file, &pub);
		for (i = 0; i < pub.pub.publicArea.authPolicy.size; i++)
		{
			for (bit = 0; bit < 8; bit++)
			{
				load_public(eks[k].file, &pub);
				pub.pub.publicArea.authPolicy.buffer[i] ^= (BYTE) (1 << bit);
				assert_int_equal(bc_tpm_check_ek(&pub, &why), BC_EVERIFY);
				assert_string_equal(why, "ek-policy");
				flips++;
			}
		}
		for (i = 0; i <= 64; i++)
		{
			load_public(eks[k].file, &pub);
			if (i == pub.pub.publicArea.authPolicy.size)
				continue;
			pub.pub.publicArea.authPolicy.size = (UINT16) i;
			assert_int_equal(bc_tpm_check_ek(&pub, &why), BC_EVERIFY);
			assert_string_equal(why, "ek-policy");
		}
	}
	/* another template's policy: low-range P-256 with policy B, the P-384 EK with policy A */
	load_public("ekp.pub", &pub);
	assert_int_equal(bc_tpm_ek_template(BC_TPM_EK_H2_P256, &t), BC_OK);
	pub.pub.publicArea.authPolicy = t.publicArea.authPolicy;
	assert_int_equal(bc_tpm_check_ek(&pub, &why), BC_EVERIFY);
	assert_string_equal(why, "ek-policy");
	load_public("ekc.pub", &pub);
	assert_int_equal(bc_tpm_ek_template(BC_TPM_EK_L1_RSA2048, &t), BC_OK);
	pub.pub.publicArea.authPolicy = t.publicArea.authPolicy;
	assert_int_equal(bc_tpm_check_ek(&pub, &why), BC_EVERIFY);
	assert_string_equal(why, "ek-policy");
	/* the high-range P-256 template as its own EK: userWithAuth and policy B */
	load_public("ekp.pub", &pub);
	assert_int_equal(bc_tpm_ek_template(BC_TPM_EK_H2_P256, &t), BC_OK);
	pub.pub.publicArea.objectAttributes = t.publicArea.objectAttributes;
	pub.pub.publicArea.authPolicy = t.publicArea.authPolicy;
	assert_int_equal(bc_tpm_check_ek(&pub, &why), BC_OK);
	assert_int_equal(bc_tpm_ek_template(99, &t), BC_EINVAL);
	print_message("%d flips of objectAttributes and authPolicy, every one refused\n", flips);
}

/* The ECDSA and RSASSA AKs pass; PSS, non-restricted, decrypt and the wrong nameAlg fail. */
static void
test_check_ak(void **state)
{
	bc_tpm_public pub;
	const char *why = NULL;

	(void) state;
	load_public("ak.pub", &pub);
	assert_int_equal(bc_tpm_check_ak(&pub, &why), BC_OK);
	load_public("akr.pub", &pub);
	assert_int_equal(bc_tpm_check_ak(&pub, &why), BC_OK);
	load_public("akpss.pub", &pub);
	assert_int_equal(bc_tpm_check_ak(&pub, &why), BC_EVERIFY);
	assert_string_equal(why, "ak-scheme");
	load_public("node.pub", &pub);	/* not restricted */
	assert_int_equal(bc_tpm_check_ak(&pub, &why), BC_EVERIFY);
	assert_string_equal(why, "ak-attributes");
	load_public("ekr.pub", &pub);	/* decrypt, not sign */
	assert_int_equal(bc_tpm_check_ak(&pub, &why), BC_EVERIFY);
	assert_string_equal(why, "ak-attributes");
	load_public("ekc.pub", &pub);	/* SHA-384 */
	assert_int_equal(bc_tpm_check_ak(&pub, &why), BC_EVERIFY);
	assert_string_equal(why, "ak-name-alg");
	load_public("ak.pub", &pub);
	pub.pub.publicArea.objectAttributes |= TPMA_OBJECT_DECRYPT;
	assert_int_equal(bc_tpm_check_ak(&pub, &why), BC_EVERIFY);
	assert_string_equal(why, "ak-attributes");
	load_public("ak.pub", &pub);
	pub.pub.publicArea.parameters.eccDetail.scheme.details.ecdsa.hashAlg = TPM2_ALG_SHA1;
	assert_int_equal(bc_tpm_check_ak(&pub, &why), BC_EVERIFY);
	assert_string_equal(why, "ak-scheme");
	load_public("akr.pub", &pub);
	pub.pub.publicArea.parameters.rsaDetail.exponent = 3;
	assert_int_equal(bc_tpm_check_ak(&pub, &why), BC_EVERIFY);
	assert_string_equal(why, "ak-scheme");
}

/* AK signatures over certify and quote verify (ECDSA and RSASSA); any change is refused. */
static void
test_verify_attest(void **state)
{
	static const char *good[][3] = {
		{"ak.pub", "certify.attest", "certify.sig"},
		{"ak.pub", "certify2.attest", "certify2.sig"},
		{"ak.pub", "quote8.attest", "quote8.sig"},
		{"ak.pub", "quote10.attest", "quote10.sig"},
		{"akr.pub", "certifyr.attest", "certifyr.sig"},
		{"akr.pub", "quoter.attest", "quoter.sig"},
	};
	bc_tpm_public ak, akr, pss;
	bc_tpm_attest att;
	TPMT_SIGNATURE sig, sig2;
	const char *why = NULL;
	size_t		i;

	(void) state;
	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++)
	{
		bc_tpm_public key;

		load_public(good[i][0], &key);
		load_attest(good[i][1], &att);
		load_sig(good[i][2], &sig);
		assert_int_equal(bc_tpm_verify_attest(&key, &att, &sig, &why), BC_OK);
		/* every bit of the signed bytes matters */
		for (size_t j = 0; j < att.len; j++)
		{
			att.bytes[j] ^= 0x10;
			assert_int_equal(bc_tpm_verify_attest(&key, &att, &sig, &why), BC_EVERIFY);
			assert_string_equal(why, "bad-signature");
			att.bytes[j] ^= 0x10;
		}
	}
	load_public("ak.pub", &ak);
	load_public("akr.pub", &akr);
	load_public("akpss.pub", &pss);
	load_attest("certify.attest", &att);
	load_sig("certify.sig", &sig);
	/* bit flips in r and s */
	sig2 = sig;
	sig2.signature.ecdsa.signatureR.buffer[3] ^= 0x04;
	assert_int_equal(bc_tpm_verify_attest(&ak, &att, &sig2, &why), BC_EVERIFY);
	assert_string_equal(why, "bad-signature");
	sig2 = sig;
	sig2.signature.ecdsa.signatureS.buffer[31] ^= 0x01;
	assert_int_equal(bc_tpm_verify_attest(&ak, &att, &sig2, &why), BC_EVERIFY);
	assert_string_equal(why, "bad-signature");
	/* r over 32 bytes */
	sig2 = sig;
	sig2.signature.ecdsa.signatureR.size = 33;
	assert_int_equal(bc_tpm_verify_attest(&ak, &att, &sig2, &why), BC_EVERIFY);
	assert_string_equal(why, "bad-signature");
	/* the signature's hash must be the AK's (SHA-1 refused) */
	sig2 = sig;
	sig2.signature.ecdsa.hash = TPM2_ALG_SHA1;
	assert_int_equal(bc_tpm_verify_attest(&ak, &att, &sig2, &why), BC_EVERIFY);
	assert_string_equal(why, "signature-scheme");
	sig2 = sig;
	sig2.signature.ecdsa.hash = TPM2_ALG_SHA384;
	assert_int_equal(bc_tpm_verify_attest(&ak, &att, &sig2, &why), BC_EVERIFY);
	assert_string_equal(why, "signature-scheme");
	sig2 = sig;
	sig2.sigAlg = TPM2_ALG_ECSCHNORR;
	assert_int_equal(bc_tpm_verify_attest(&ak, &att, &sig2, &why), BC_EVERIFY);
	assert_string_equal(why, "signature-scheme");
	/* an RSA signature for the ECDSA AK, the ECDSA signature for the RSA AK */
	load_sig("certifyr.sig", &sig2);
	assert_int_equal(bc_tpm_verify_attest(&ak, &att, &sig2, &why), BC_EVERIFY);
	assert_string_equal(why, "signature-scheme");
	assert_int_equal(bc_tpm_verify_attest(&akr, &att, &sig, &why), BC_EVERIFY);
	assert_string_equal(why, "signature-scheme");
	/* the RSA signature of another attest, a flipped RSA signature */
	load_attest("certifyr.attest", &att);
	load_sig("quoter.sig", &sig2);
	assert_int_equal(bc_tpm_verify_attest(&akr, &att, &sig2, &why), BC_EVERIFY);
	assert_string_equal(why, "bad-signature");
	load_sig("certifyr.sig", &sig2);
	sig2.signature.rsassa.sig.buffer[100] ^= 0x40;
	assert_int_equal(bc_tpm_verify_attest(&akr, &att, &sig2, &why), BC_EVERIFY);
	assert_string_equal(why, "bad-signature");
	/* a signature by one AK does not verify with another of the same kind: the PSS AK is refused first */
	load_sig("certifyr.sig", &sig2);
	assert_int_equal(bc_tpm_verify_attest(&pss, &att, &sig2, &why), BC_EVERIFY);
	assert_string_equal(why, "ak-scheme");
	/* the certify signature of node2 over node's certify */
	load_attest("certify.attest", &att);
	load_sig("certify2.sig", &sig2);
	assert_int_equal(bc_tpm_verify_attest(&ak, &att, &sig2, &why), BC_EVERIFY);
	assert_string_equal(why, "bad-signature");
}

/* certifyInfo names the certified key; another key's certify is refused. */
static void
test_check_certify(void **state)
{
	bc_tpm_public node, node2;
	bc_tpm_attest att;
	const char *why = NULL;

	(void) state;
	load_public("node.pub", &node);
	load_public("node2.pub", &node2);
	load_attest("certify.attest", &att);
	assert_int_equal(bc_tpm_check_certify(&att, &node, &why), BC_OK);
	/* tpm2-tools 5.4 always sends 00ff55aa */
	assert_int_equal(att.attest.extraData.size, 4);
	assert_int_equal(att.attest.extraData.buffer[0], 0x00);
	assert_int_equal(att.attest.extraData.buffer[1], 0xff);
	assert_int_equal(bc_tpm_check_certify(&att, &node2, &why), BC_EVERIFY);
	assert_string_equal(why, "certify-name");
	load_attest("certify2.attest", &att);
	assert_int_equal(bc_tpm_check_certify(&att, &node2, &why), BC_OK);
	assert_int_equal(bc_tpm_check_certify(&att, &node, &why), BC_EVERIFY);
	assert_string_equal(why, "certify-name");
	load_attest("certifyr.attest", &att);
	assert_int_equal(bc_tpm_check_certify(&att, &node, &why), BC_OK);
	att.attest.magic ^= 1;
	assert_int_equal(bc_tpm_check_certify(&att, &node, &why), BC_EVERIFY);
	assert_string_equal(why, "certify-magic");
	load_attest("quote8.attest", &att);
	assert_int_equal(bc_tpm_check_certify(&att, &node, &why), BC_EVERIFY);
	assert_string_equal(why, "certify-type");
}

/* Node key checks, and equality with a key by EVP_PKEY_eq. */
static void
test_check_node_key(void **state)
{
	bc_tpm_public pub, node2;
	const char *why = NULL;
	EVP_PKEY   *key = NULL;
	EVP_PKEY   *copy = NULL;
	unsigned char *der = NULL;
	const unsigned char *p;
	int			len;

	(void) state;
	load_public("node.pub", &pub);
	assert_int_equal(bc_tpm_check_node_key(&pub, &why), BC_OK);
	load_public("nodenull.pub", &pub);
	assert_int_equal(pub.pub.publicArea.parameters.eccDetail.scheme.scheme, TPM2_ALG_NULL);
	assert_int_equal(bc_tpm_check_node_key(&pub, &why), BC_OK);
	load_public("noderestricted.pub", &pub);
	assert_int_equal(bc_tpm_check_node_key(&pub, &why), BC_EVERIFY);
	assert_string_equal(why, "node-key-attributes");
	load_public("ak.pub", &pub);
	assert_int_equal(bc_tpm_check_node_key(&pub, &why), BC_EVERIFY);
	assert_string_equal(why, "node-key-attributes");
	load_public("ekc.pub", &pub);
	assert_int_equal(bc_tpm_check_node_key(&pub, &why), BC_EVERIFY);
	assert_string_equal(why, "node-key-type");
	load_public("akr.pub", &pub);
	assert_int_equal(bc_tpm_check_node_key(&pub, &why), BC_EVERIFY);
	assert_string_equal(why, "node-key-type");
	/* decrypt may be set (the tpm2-openssl provider sets it) */
	load_public("node.pub", &pub);
	pub.pub.publicArea.objectAttributes |= TPMA_OBJECT_DECRYPT;
	assert_int_equal(bc_tpm_check_node_key(&pub, &why), BC_OK);
	pub.pub.publicArea.objectAttributes &= ~TPMA_OBJECT_FIXEDTPM;
	assert_int_equal(bc_tpm_check_node_key(&pub, &why), BC_EVERIFY);
	assert_string_equal(why, "node-key-attributes");
	load_public("node.pub", &pub);
	pub.pub.publicArea.objectAttributes &= ~TPMA_OBJECT_SENSITIVEDATAORIGIN;
	assert_int_equal(bc_tpm_check_node_key(&pub, &why), BC_EVERIFY);
	assert_string_equal(why, "node-key-attributes");
	load_public("node.pub", &pub);
	pub.pub.publicArea.nameAlg = TPM2_ALG_SHA384;
	assert_int_equal(bc_tpm_check_node_key(&pub, &why), BC_OK);
	pub.pub.publicArea.nameAlg = TPM2_ALG_SHA1;
	assert_int_equal(bc_tpm_check_node_key(&pub, &why), BC_EVERIFY);
	assert_string_equal(why, "node-key-name-alg");
	load_public("node.pub", &pub);
	pub.pub.publicArea.parameters.eccDetail.scheme.details.ecdsa.hashAlg = TPM2_ALG_SHA384;
	assert_int_equal(bc_tpm_check_node_key(&pub, &why), BC_EVERIFY);
	assert_string_equal(why, "node-key-scheme");

	/* equality through a DER round trip (another encoding, the same key) */
	load_public("node.pub", &pub);
	load_public("node2.pub", &node2);
	assert_int_equal(bc_tpm_public_pkey(&pub, &key), BC_OK);
	EVP_PKEY_set_utf8_string_param(key, "point-format", "compressed");
	len = i2d_PUBKEY(key, &der);
	assert_true(len > 0 && len < 91);	/* compressed point */
	p = der;
	copy = d2i_PUBKEY(NULL, &p, len);
	assert_non_null(copy);
	assert_int_equal(bc_tpm_node_key_matches(&pub, copy, &why), BC_OK);
	assert_int_equal(bc_tpm_node_key_matches(&node2, copy, &why), BC_EVERIFY);
	assert_string_equal(why, "node-key-mismatch");
	assert_int_equal(bc_tpm_node_key_matches(&pub, NULL, &why), BC_EINVAL);
	OPENSSL_free(der);
	EVP_PKEY_free(copy);
	EVP_PKEY_free(key);
}

/* Quote: nonce, selection as (bank, set), digest over expected values with the signature's hash. */
static void
test_check_quote(void **state)
{
	static const unsigned char sha256_320_zeros_prefix[4] = {0x7b, 0x64, 0x36, 0xb0};
	unsigned char zeros[10 * 32];
	unsigned char other[8 * 32];
	unsigned char q2[32];
	bc_tpm_attest att;
	TPMT_SIGNATURE sig;
	bc_tpm_pcr_bank bank = {TPM2_ALG_SHA256, 0xff, zeros, 8 * 32};
	bc_tpm_pcr_bank two[2];
	const char *why = NULL;

	(void) state;
	memset(zeros, 0, sizeof(zeros));
	load_attest("quote8.attest", &att);
	load_sig("quote8.sig", &sig);
	assert_int_equal(bc_tpm_check_quote(&att, &sig, quote_q, 32, NULL, 0, &why), BC_OK);
	assert_int_equal(bc_tpm_check_quote(&att, &sig, quote_q, 32, &bank, 1, &why), BC_OK);
	/* nonce: one bit, one byte short, none */
	memcpy(q2, quote_q, 32);
	q2[31] ^= 1;
	assert_int_equal(bc_tpm_check_quote(&att, &sig, q2, 32, &bank, 1, &why), BC_EVERIFY);
	assert_string_equal(why, "quote-nonce");
	assert_int_equal(bc_tpm_check_quote(&att, &sig, quote_q, 31, &bank, 1, &why), BC_EVERIFY);
	assert_string_equal(why, "quote-nonce");
	assert_int_equal(bc_tpm_check_quote(&att, &sig, NULL, 0, NULL, 0, &why), BC_EVERIFY);
	assert_string_equal(why, "quote-nonce");
	/* another selection than the policy's */
	bank.pcrs = 0x3ff;
	bank.values_len = 10 * 32;
	assert_int_equal(bc_tpm_check_quote(&att, &sig, quote_q, 32, &bank, 1, &why), BC_EVERIFY);
	assert_string_equal(why, "pcr-selection");
	bank.pcrs = 0x7f;
	bank.values_len = 7 * 32;
	assert_int_equal(bc_tpm_check_quote(&att, &sig, quote_q, 32, &bank, 1, &why), BC_EVERIFY);
	assert_string_equal(why, "pcr-selection");
	bank.hash_alg = TPM2_ALG_SHA1;
	bank.pcrs = 0xff;
	bank.values_len = 8 * 20;
	assert_int_equal(bc_tpm_check_quote(&att, &sig, quote_q, 32, &bank, 1, &why), BC_EVERIFY);
	assert_string_equal(why, "pcr-selection");
	two[0] = (bc_tpm_pcr_bank) {TPM2_ALG_SHA256, 0xff, zeros, 8 * 32};
	two[1] = (bc_tpm_pcr_bank) {TPM2_ALG_SHA384, 0x01, zeros, 48};
	assert_int_equal(bc_tpm_check_quote(&att, &sig, quote_q, 32, two, 2, &why), BC_EVERIFY);
	assert_string_equal(why, "pcr-selection");
	/* sizeofSelect padding is ignored */
	bank = (bc_tpm_pcr_bank) {TPM2_ALG_SHA256, 0xff, zeros, 8 * 32};
	assert_int_equal(att.attest.attested.quote.pcrSelect.pcrSelections[0].sizeofSelect, 3);
	att.attest.attested.quote.pcrSelect.pcrSelections[0].sizeofSelect = 4;
	att.attest.attested.quote.pcrSelect.pcrSelections[0].pcrSelect[3] = 0;
	assert_int_equal(bc_tpm_check_quote(&att, &sig, quote_q, 32, &bank, 1, &why), BC_OK);
	att.attest.attested.quote.pcrSelect.pcrSelections[0].pcrSelect[3] = 0x80;
	assert_int_equal(bc_tpm_check_quote(&att, &sig, quote_q, 32, &bank, 1, &why), BC_EVERIFY);
	assert_string_equal(why, "pcr-selection");
	load_attest("quote8.attest", &att);
	/* the digest: one expected value differs */
	memset(other, 0, sizeof(other));
	other[3 * 32 + 7] = 1;
	bank.values = other;
	assert_int_equal(bc_tpm_check_quote(&att, &sig, quote_q, 32, &bank, 1, &why), BC_EVERIFY);
	assert_string_equal(why, "pcr-digest");
	bank.values = zeros;
	/* H is the signature's hash, not the bank's: a SHA-384 signature hash gives another digest */
	sig.signature.ecdsa.hash = TPM2_ALG_SHA384;
	assert_int_equal(bc_tpm_check_quote(&att, &sig, quote_q, 32, &bank, 1, &why), BC_EVERIFY);
	assert_string_equal(why, "pcr-digest");
	load_sig("quote8.sig", &sig);
	/* an incoherent policy is the caller's error */
	bank.values_len = 7 * 32;
	assert_int_equal(bc_tpm_check_quote(&att, &sig, quote_q, 32, &bank, 1, &why), BC_EINVAL);
	assert_string_equal(why, "pcr-policy");
	bank.values_len = 8 * 32;
	/* 10 PCRs: sha256 of 320 zero bytes */
	load_attest("quote10.attest", &att);
	load_sig("quote10.sig", &sig);
	assert_memory_equal(att.attest.attested.quote.pcrDigest.buffer, sha256_320_zeros_prefix, 4);
	assert_int_equal(bc_tpm_check_quote(&att, &sig, quote_q, 32, &bank, 1, &why), BC_EVERIFY);
	assert_string_equal(why, "pcr-selection");
	bank.pcrs = 0x3ff;
	bank.values_len = 10 * 32;
	assert_int_equal(bc_tpm_check_quote(&att, &sig, quote_q, 32, &bank, 1, &why), BC_OK);
	/* the RSA AK's quote */
	bank.pcrs = 0xff;
	bank.values_len = 8 * 32;
	load_attest("quoter.attest", &att);
	load_sig("quoter.sig", &sig);
	assert_int_equal(bc_tpm_check_quote(&att, &sig, quote_q, 32, &bank, 1, &why), BC_OK);
	/* a certify is no quote */
	load_attest("certify.attest", &att);
	assert_int_equal(bc_tpm_check_quote(&att, &sig, quote_q, 32, &bank, 1, &why), BC_EVERIFY);
	assert_string_equal(why, "quote-type");
	att.attest.magic = 0;
	assert_int_equal(bc_tpm_check_quote(&att, &sig, quote_q, 32, &bank, 1, &why), BC_EVERIFY);
	assert_string_equal(why, "quote-magic");
}

/* ------------------------------------------------------ EK certificates */

/* A self-signed CA certificate of a fresh key (not swtpm's). */
static X509 *
other_root(void)
{
	EVP_PKEY   *key = bc_p256_generate();
	X509	   *ca = X509_new();
	X509_NAME  *name = X509_get_subject_name(ca);
	X509V3_CTX	ctx;
	X509_EXTENSION *ext;

	assert_non_null(key);
	assert_int_equal(X509_set_version(ca, X509_VERSION_3), 1);
	assert_int_equal(X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
												(const unsigned char *) "swtpm-localca-rootca",
												-1, -1, 0), 1);
	assert_int_equal(X509_set_issuer_name(ca, name), 1);
	assert_non_null(X509_gmtime_adj(X509_getm_notBefore(ca), -3600));
	assert_non_null(X509_gmtime_adj(X509_getm_notAfter(ca), 86400));
	assert_int_equal(X509_set_pubkey(ca, key), 1);
	X509V3_set_ctx(&ctx, ca, ca, NULL, NULL, 0);
	ext = X509V3_EXT_conf_nid(NULL, &ctx, NID_basic_constraints, "critical,CA:TRUE");
	assert_non_null(ext);
	assert_int_equal(X509_add_ext(ca, ext, -1), 1);
	X509_EXTENSION_free(ext);
	assert_true(X509_sign(ca, key, EVP_sha256()) > 0);
	EVP_PKEY_free(key);
	return ca;
}

/* EK certificates parse (0xff padding ignored, anything else refused). */
static void
test_ek_cert_parse(void **state)
{
	size_t		n;
	unsigned char *b = slurp("ekr.crt", &n);
	unsigned char *pad = malloc(BC_TPM_EKCERT_MAX + 1);
	X509	   *c = NULL;
	const char *why = NULL;

	(void) state;
	assert_non_null(pad);
	assert_true(n + 64 <= BC_TPM_EKCERT_MAX);
	assert_int_equal(bc_tpm_ek_cert_parse(b, n, &c, &why), BC_OK);
	X509_free(c);
	memcpy(pad, b, n);
	memset(pad + n, 0xff, 64);
	assert_int_equal(bc_tpm_ek_cert_parse(pad, n + 64, &c, &why), BC_OK);
	X509_free(c);
	pad[n + 10] = 0x00;
	assert_int_equal(bc_tpm_ek_cert_parse(pad, n + 64, &c, &why), BC_EINVAL);
	assert_string_equal(why, "ek-cert-malformed");
	assert_null(c);
	assert_int_equal(bc_tpm_ek_cert_parse(b, n - 1, &c, &why), BC_EINVAL);
	assert_int_equal(bc_tpm_ek_cert_parse(b, 0, &c, &why), BC_EINVAL);
	memset(pad + n, 0xff, BC_TPM_EKCERT_MAX + 1 - n);
	assert_int_equal(bc_tpm_ek_cert_parse(pad, BC_TPM_EKCERT_MAX + 1, &c, &why), BC_ETOOBIG);
	free(pad);
	free(b);
}

/* The EK certificates chain to swtpm's local CA and certify their own EK only. */
static void
test_ek_cert_chain(void **state)
{
	X509	   *root = load_pem_cert("root.pem");
	X509	   *issuer = load_pem_cert("issuer.pem");
	X509	   *wrong = other_root();
	X509	   *ekr_cert = load_ek_cert("ekr.crt");
	X509	   *ekc_cert = load_ek_cert("ekc.crt");
	bc_tpm_public ekr, ekc;
	const char *why = NULL;
	X509	   *both[2];

	(void) state;
	load_public("ekr.pub", &ekr);
	load_public("ekc.pub", &ekc);
	assert_int_equal(bc_tpm_check_ek_cert(ekr_cert, &ekr, &root, 1, &issuer, 1, 0, &why), BC_OK);
	assert_null(why);
	assert_int_equal(bc_tpm_check_ek_cert(ekc_cert, &ekc, &root, 1, &issuer, 1, 0, &why), BC_OK);
	/* the certificate of the other EK */
	assert_int_equal(bc_tpm_check_ek_cert(ekc_cert, &ekr, &root, 1, &issuer, 1, 0, &why),
					 BC_EVERIFY);
	assert_string_equal(why, "ek-cert-mismatch");
	assert_int_equal(bc_tpm_check_ek_cert(ekr_cert, &ekc, &root, 1, &issuer, 1, 0, &why),
					 BC_EVERIFY);
	assert_string_equal(why, "ek-cert-mismatch");
	/* a wrong root (same subject name, other key) */
	assert_int_equal(bc_tpm_check_ek_cert(ekr_cert, &ekr, &wrong, 1, &issuer, 1, 0, &why),
					 BC_EVERIFY);
	assert_string_equal(why, "ek-chain");
	/* no intermediate */
	assert_int_equal(bc_tpm_check_ek_cert(ekr_cert, &ekr, &root, 1, NULL, 0, 0, &why),
					 BC_EVERIFY);
	assert_string_equal(why, "ek-chain");
	/* no partial chains: the intermediate as a root is not a trust anchor */
	assert_int_equal(bc_tpm_check_ek_cert(ekr_cert, &ekr, &issuer, 1, NULL, 0, 0, &why),
					 BC_EVERIFY);
	assert_string_equal(why, "ek-chain");
	/* the root as an untrusted certificate only */
	both[0] = root;
	both[1] = issuer;
	assert_int_equal(bc_tpm_check_ek_cert(ekr_cert, &ekr, NULL, 0, both, 2, 0, &why),
					 BC_EVERIFY);
	assert_string_equal(why, "ek-chain");
	/* a wrong root among the right ones is harmless */
	both[0] = wrong;
	both[1] = root;
	assert_int_equal(bc_tpm_check_ek_cert(ekr_cert, &ekr, both, 2, &issuer, 1, 0, &why), BC_OK);
	/* before the certificates' notBefore */
	assert_int_equal(bc_tpm_check_ek_cert(ekr_cert, &ekr, &root, 1, &issuer, 1, 86400, &why),
					 BC_EVERIFY);
	assert_string_equal(why, "ek-chain");
	X509_free(root);
	X509_free(issuer);
	X509_free(wrong);
	X509_free(ekr_cert);
	X509_free(ekc_cert);
}

/* ------------------------------------------------------- MakeCredential */

/* Write the tpm2-tools credential file and activate it on the swtpm; 0 when it worked. */
static int
activate(const char *ek, const unsigned char *blob, size_t blob_len,
		 const unsigned char *enc, size_t enc_len, unsigned char *out, size_t *out_len)
{
	static const unsigned char header[8] = {0xba, 0xdc, 0xc0, 0xde, 0, 0, 0, 1};
	char		cred[512], sec[512], cmd[2048];
	FILE	   *f;
	int			rc;

	snprintf(cred, sizeof(cred), "%s/cred-%s", fixture_dir, ek);
	snprintf(sec, sizeof(sec), "%s/secret-%s", fixture_dir, ek);
	unlink(sec);
	f = fopen(cred, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(header, 1, 8, f), 8);
	assert_int_equal(fwrite(blob, 1, blob_len, f), blob_len);
	assert_int_equal(fwrite(enc, 1, enc_len, f), enc_len);
	assert_int_equal(fclose(f), 0);
	snprintf(cmd, sizeof(cmd), "bash %s activate %s %s %s %s 2>/dev/null",
			 FIXTURE_SCRIPT, fixture_dir, ek, cred, sec);
	rc = system(cmd);
	if (rc != 0)
		return -1;
	f = fopen(sec, "rb");
	assert_non_null(f);
	*out_len = fread(out, 1, 128, f);
	fclose(f);
	return 0;
}

/* A software MakeCredential for the AK's Name activates on the swtpm: RSA-2048, P-256 and P-384 EKs. */
static void
test_make_credential(void **state)
{
	static const struct
	{
		const char *pub;
		const char *ek;
		size_t		blob_len;	/* 2 + 2 + |HMAC| + 2 + 32 */
		size_t		enc_len;
	}			eks[] = {
		{"ekr.pub", "rsa", 2 + 2 + 32 + 34, 2 + 256},
		{"ekp.pub", "ecc256", 2 + 2 + 32 + 34, 2 + 2 + 32 + 2 + 32},
		{"ekc.pub", "ecc384", 2 + 2 + 48 + 34, 2 + 2 + 48 + 2 + 48},
	};
	bc_tpm_public ak, akr, ek;
	unsigned char name[BC_TPM_NAME_MAX];
	unsigned char other[BC_TPM_NAME_MAX];
	size_t		name_len, other_len;
	size_t		i;

	(void) state;
	load_public("ak.pub", &ak);
	load_public("akr.pub", &akr);
	assert_int_equal(bc_tpm_name(&ak, name, &name_len), BC_OK);
	assert_int_equal(bc_tpm_name(&akr, other, &other_len), BC_OK);
	for (i = 0; i < sizeof(eks) / sizeof(eks[0]); i++)
	{
		unsigned char secret[BC_TPM_SECRET_LEN];
		unsigned char got[128];
		size_t		got_len = 0;
		unsigned char *blob = NULL, *enc = NULL;
		size_t		blob_len = 0, enc_len = 0;

		load_public(eks[i].pub, &ek);
		assert_int_equal(RAND_bytes(secret, sizeof(secret)), 1);
		assert_int_equal(bc_tpm_make_credential(&ek, name, name_len, secret, sizeof(secret),
												&blob, &blob_len, &enc, &enc_len), BC_OK);
		assert_int_equal(blob_len, eks[i].blob_len);
		assert_int_equal(enc_len, eks[i].enc_len);
		assert_int_equal(activate(eks[i].ek, blob, blob_len, enc, enc_len, got, &got_len), 0);
		assert_int_equal(got_len, sizeof(secret));
		assert_memory_equal(got, secret, sizeof(secret));
		free(blob);
		free(enc);

		/* made for another Name (the RSA AK's): the TPM refuses it for this AK */
		assert_int_equal(bc_tpm_make_credential(&ek, other, other_len, secret, sizeof(secret),
												&blob, &blob_len, &enc, &enc_len), BC_OK);
		assert_int_not_equal(activate(eks[i].ek, blob, blob_len, enc, enc_len, got, &got_len), 0);
		/* a flipped bit in the blob: the TPM's integrity check refuses it */
		free(blob);
		free(enc);
		assert_int_equal(bc_tpm_make_credential(&ek, name, name_len, secret, sizeof(secret),
												&blob, &blob_len, &enc, &enc_len), BC_OK);
		blob[blob_len - 1] ^= 1;
		assert_int_not_equal(activate(eks[i].ek, blob, blob_len, enc, enc_len, got, &got_len), 0);
		free(blob);
		free(enc);
	}
	/* refusals: an AK as EK, an empty or oversized secret, no name */
	{
		unsigned char secret[65] = {0};
		unsigned char *blob = NULL, *enc = NULL;
		size_t		blob_len = 0, enc_len = 0;

		assert_int_equal(bc_tpm_make_credential(&ak, name, name_len, secret, 32,
												&blob, &blob_len, &enc, &enc_len),
						 BC_EUNSUPPORTED);
		load_public("ekr.pub", &ek);
		assert_int_equal(bc_tpm_make_credential(&ek, name, name_len, secret, 0,
												&blob, &blob_len, &enc, &enc_len), BC_EINVAL);
		assert_int_equal(bc_tpm_make_credential(&ek, name, name_len, secret, 33,
												&blob, &blob_len, &enc, &enc_len), BC_EINVAL);
		assert_int_equal(bc_tpm_make_credential(&ek, NULL, 0, secret, 32,
												&blob, &blob_len, &enc, &enc_len), BC_EINVAL);
		assert_null(blob);
		assert_null(enc);
	}
}

/*
 * The software ActivateCredential of the fleet generator (bench/fleet.c): a
 * P-256 EK made from template L-2 around a key in hand gets back the secret
 * MakeCredential sealed for the AK's Name; made for another Name, or with a
 * bit flipped in the blob or in the ephemeral point, it is refused, as the
 * swtpm refuses it above; an RSA EK is not supported.
 */
static void
test_activate_credential(void **state)
{
	EVP_PKEY   *key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
	TPM2B_PUBLIC tp;
	BIGNUM	   *bx = NULL, *by = NULL;
	unsigned char wire[sizeof(TPM2B_PUBLIC)];
	size_t		off = 0;
	bc_tpm_public ek, ak, akr, ekr;
	unsigned char name[BC_TPM_NAME_MAX], other[BC_TPM_NAME_MAX];
	size_t		name_len, other_len;
	unsigned char secret[BC_TPM_SECRET_LEN], got[64];
	size_t		got_len;
	unsigned char *blob = NULL, *enc = NULL;
	size_t		blob_len = 0, enc_len = 0;

	(void) state;
	assert_non_null(key);
	assert_int_equal(bc_tpm_ek_template(BC_TPM_EK_L2_P256, &tp), BC_OK);
	assert_int_equal(EVP_PKEY_get_bn_param(key, "qx", &bx), 1);
	assert_int_equal(EVP_PKEY_get_bn_param(key, "qy", &by), 1);
	assert_int_equal(BN_bn2binpad(bx, tp.publicArea.unique.ecc.x.buffer, 32), 32);
	assert_int_equal(BN_bn2binpad(by, tp.publicArea.unique.ecc.y.buffer, 32), 32);
	BN_free(bx);
	BN_free(by);
	assert_int_equal(Tss2_MU_TPM2B_PUBLIC_Marshal(&tp, wire, sizeof(wire), &off), TSS2_RC_SUCCESS);
	assert_int_equal(bc_tpm_public_parse(wire, off, &ek), BC_OK);
	assert_int_equal(bc_tpm_check_ek(&ek, NULL), BC_OK);
	load_public("ak.pub", &ak);
	load_public("akr.pub", &akr);
	assert_int_equal(bc_tpm_name(&ak, name, &name_len), BC_OK);
	assert_int_equal(bc_tpm_name(&akr, other, &other_len), BC_OK);

	assert_int_equal(RAND_bytes(secret, sizeof(secret)), 1);
	assert_int_equal(bc_tpm_make_credential(&ek, name, name_len, secret, sizeof(secret),
											&blob, &blob_len, &enc, &enc_len), BC_OK);
	assert_int_equal(bc_tpm_activate_credential(&ek, key, name, name_len, blob, blob_len, enc, enc_len,
												got, &got_len), BC_OK);
	assert_int_equal(got_len, sizeof(secret));
	assert_memory_equal(got, secret, sizeof(secret));
	/* for another Name: the outer HMAC does not hold */
	assert_int_equal(bc_tpm_activate_credential(&ek, key, other, other_len, blob, blob_len, enc, enc_len,
												got, &got_len), BC_EINVAL);
	assert_int_equal(got_len, 0);
	/* a flipped bit in the encrypted credential */
	blob[blob_len - 1] ^= 1;
	assert_int_not_equal(bc_tpm_activate_credential(&ek, key, name, name_len, blob, blob_len, enc, enc_len,
													got, &got_len), BC_OK);
	blob[blob_len - 1] ^= 1;
	/* a flipped bit in the ephemeral point: off the curve, or another Z */
	enc[enc_len - 1] ^= 1;
	assert_int_not_equal(bc_tpm_activate_credential(&ek, key, name, name_len, blob, blob_len, enc, enc_len,
													got, &got_len), BC_OK);
	enc[enc_len - 1] ^= 1;
	/* truncated structures */
	assert_int_equal(bc_tpm_activate_credential(&ek, key, name, name_len, blob, blob_len - 1, enc, enc_len,
												got, &got_len), BC_EINVAL);
	assert_int_equal(bc_tpm_activate_credential(&ek, key, name, name_len, blob, blob_len, enc, enc_len - 1,
												got, &got_len), BC_EINVAL);
	/* the right ones still activate */
	assert_int_equal(bc_tpm_activate_credential(&ek, key, name, name_len, blob, blob_len, enc, enc_len,
												got, &got_len), BC_OK);
	free(blob);
	free(enc);
	/* an RSA EK */
	load_public("ekr.pub", &ekr);
	assert_int_equal(bc_tpm_activate_credential(&ekr, key, name, name_len, got, 1, got, 1, got, &got_len),
					 BC_EUNSUPPORTED);
	EVP_PKEY_free(key);
}

/* Run the tests. */
int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_bounds),
		cmocka_unit_test(test_mutations),
		cmocka_unit_test(test_name),
		cmocka_unit_test(test_ek_spki),
		cmocka_unit_test(test_public_pkey),
		cmocka_unit_test(test_check_ek),
		cmocka_unit_test(test_ek_templates),
		cmocka_unit_test(test_check_ak),
		cmocka_unit_test(test_verify_attest),
		cmocka_unit_test(test_check_certify),
		cmocka_unit_test(test_check_node_key),
		cmocka_unit_test(test_check_quote),
		cmocka_unit_test(test_ek_cert_parse),
		cmocka_unit_test(test_ek_cert_chain),
		cmocka_unit_test(test_make_credential),
		cmocka_unit_test(test_activate_credential),
	};

	/* libtss2-mu logs refused input to stderr; the tests refuse a lot of it. */
	setenv("TSS2_LOG", "all+NONE", 1);
	return cmocka_run_group_tests_name("tpm", tests, setup_fixture, teardown_fixture);
}
