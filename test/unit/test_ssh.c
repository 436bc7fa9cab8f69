/*
 * test_ssh.c: cmocka tests of src/common/ssh.c (OpenSSH key blobs,
 * certificates, KRLs): exact bytes of the options blocks, their order, every
 * refusal of bc_ssh_cert_sign, parse(sign(x)) == x, the signature verified
 * by OpenSSL, every truncation of a certificate refused.  The interop with
 * the real ssh-keygen is test/tap/ssh_codec.t.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <openssl/evp.h>

#include "bc_common.h"
#include "bc_ssh.h"

/* Keys shared by the tests: the CA (P-256), certified keys (Ed25519, P-384). */
typedef struct fx
{
	EVP_PKEY   *ca;
	EVP_PKEY   *ed;
	EVP_PKEY   *p384;
	unsigned char *ed_blob;
	size_t		ed_len;
	unsigned char *p384_blob;
	size_t		p384_len;
} fx;

/* Make the keys and the blobs. */
static int
setup(void **state)
{
	fx		   *f = calloc(1, sizeof(*f));

	f->ca = bc_p256_generate();
	f->ed = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	f->p384 = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-384");
	if (!f->ca || !f->ed || !f->p384 ||
		bc_ssh_pubkey_blob(f->ed, &f->ed_blob, &f->ed_len) != BC_OK ||
		bc_ssh_pubkey_blob(f->p384, &f->p384_blob, &f->p384_len) != BC_OK)
		return -1;
	*state = f;
	return 0;
}

/* Free them. */
static int
teardown(void **state)
{
	fx		   *f = *state;

	EVP_PKEY_free(f->ca);
	EVP_PKEY_free(f->ed);
	EVP_PKEY_free(f->p384);
	free(f->ed_blob);
	free(f->p384_blob);
	free(f);
	return 0;
}

static const char *const two[] = {"root", "alice"};

/* A valid user certificate's parameters over blob. */
static bc_ssh_cert_params
user_params(const unsigned char *blob, size_t len)
{
	bc_ssh_cert_params p = {
		.type = BC_SSH_CERT_USER, .key_blob = blob, .key_blob_len = len, .serial = 4242,
		.key_id = "spiffe://td/s/1", .principals = two, .n_principals = 2,
		.valid_after = 1000, .valid_before = 2000,
	};

	return p;
}

/* Test reader: skip an SSH string at *p, return its bytes and length. */
static const unsigned char *
skip_str(const unsigned char **p, size_t *n)
{
	const unsigned char *d = *p;
	uint32_t	len = ((uint32_t) d[0] << 24) | ((uint32_t) d[1] << 16) | ((uint32_t) d[2] << 8) | d[3];

	*n = len;
	*p = d + 4 + len;
	return d + 4;
}

/* The critical options and extensions blocks of an Ed25519 certificate. */
static void
blocks(const unsigned char *cert, const unsigned char **crit, size_t *crit_n,
	   const unsigned char **ext, size_t *ext_n, const unsigned char **sig, size_t *sig_n,
	   size_t *signed_len)
{
	const unsigned char *p = cert;
	size_t		n;

	skip_str(&p, &n);			/* type */
	skip_str(&p, &n);			/* nonce */
	skip_str(&p, &n);			/* pk */
	p += 8 + 4;					/* serial, type */
	skip_str(&p, &n);			/* key id */
	skip_str(&p, &n);			/* principals */
	p += 16;
	*crit = skip_str(&p, crit_n);
	*ext = skip_str(&p, ext_n);
	skip_str(&p, &n);			/* reserved */
	skip_str(&p, &n);			/* signature key */
	*signed_len = (size_t) (p - cert);
	*sig = skip_str(&p, sig_n);
}

/* Options are sorted and double-wrapped, flags empty: the exact bytes. */
static void
test_options_bytes(void **state)
{
	fx		   *f = *state;
	bc_ssh_cert_params p = user_params(f->ed_blob, f->ed_len);
	unsigned char *cert;
	size_t		len,
				cn,
				en,
				sn,
				signed_len;
	const unsigned char *crit,
			   *ext,
			   *sig;
	static const unsigned char want_crit[] =
		"\0\0\0\x0d" "force-command" "\0\0\0\x06" "\0\0\0\x02" "ls"
		"\0\0\0\x0e" "source-address" "\0\0\0\x0f" "\0\0\0\x0b" "10.0.0.0/8,";
	static const unsigned char want_ext[] =
		"\0\0\0\x15" "permit-X11-forwarding" "\0\0\0\0"
		"\0\0\0\x17" "permit-agent-forwarding" "\0\0\0\0"
		"\0\0\0\x0a" "permit-pty" "\0\0\0\0";

	p.force_command = "ls";
	p.source_address = "10.0.0.0/8,";
	p.extensions = BC_SSH_EXT_PTY | BC_SSH_EXT_AGENT | BC_SSH_EXT_X11;
	assert_int_equal(bc_ssh_cert_sign(&p, f->ca, &cert, &len), BC_OK);
	blocks(cert, &crit, &cn, &ext, &en, &sig, &sn, &signed_len);
	assert_int_equal(cn, sizeof(want_crit) - 1);
	assert_memory_equal(crit, want_crit, cn);
	assert_int_equal(en, sizeof(want_ext) - 1);
	assert_memory_equal(ext, want_ext, en);
	free(cert);
}

/* The signature is ECDSA P-256 SHA-256 over everything before it: OpenSSL verifies it. */
static void
test_signature_verifies(void **state)
{
	fx		   *f = *state;
	bc_ssh_cert_params p = user_params(f->ed_blob, f->ed_len);
	unsigned char *cert,
			   *der;
	size_t		len,
				cn,
				en,
				sn,
				signed_len,
				n,
				rn,
				sn2,
				der_len;
	const unsigned char *crit,
			   *ext,
			   *sig,
			   *q,
			   *r,
			   *s;
	EVP_MD_CTX *md = EVP_MD_CTX_new();

	assert_int_equal(bc_ssh_cert_sign(&p, f->ca, &cert, &len), BC_OK);
	blocks(cert, &crit, &cn, &ext, &en, &sig, &sn, &signed_len);
	assert_int_equal(signed_len + 4 + sn, len);
	q = sig;
	r = skip_str(&q, &n);
	assert_int_equal(n, strlen("ecdsa-sha2-nistp256"));
	assert_memory_equal(r, "ecdsa-sha2-nistp256", n);
	s = skip_str(&q, &n);		/* mpint r, mpint s */
	q = s;
	r = skip_str(&q, &rn);
	s = skip_str(&q, &sn2);
	/* SSH mpint: no needless leading zero, a zero when the top bit is set */
	assert_true(rn >= 1 && rn <= 33 && (r[0] & 0x80) == 0 && (rn == 1 || r[0] != 0 || (r[1] & 0x80)));
	assert_true(sn2 >= 1 && sn2 <= 33 && (s[0] & 0x80) == 0);
	assert_int_equal(bc_ecdsa_sig_to_der(r, rn, s, sn2, &der, &der_len), BC_OK);
	assert_int_equal(EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, f->ca), 1);
	assert_int_equal(EVP_DigestVerify(md, der, der_len, cert, signed_len), 1);
	cert[20] ^= 1;				/* inside the nonce */
	assert_int_equal(EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, f->ca), 1);
	assert_int_not_equal(EVP_DigestVerify(md, der, der_len, cert, signed_len), 1);
	EVP_MD_CTX_free(md);
	free(der);
	free(cert);
}

/* parse(sign(x)) == x, for a user certificate over Ed25519 and a host certificate over P-384. */
static void
test_roundtrip(void **state)
{
	fx		   *f = *state;
	bc_ssh_cert_params p = user_params(f->ed_blob, f->ed_len);
	bc_ssh_cert_info i;
	unsigned char *cert,
			   *ca_blob;
	size_t		len,
				ca_len;
	const char *hp[] = {"h1.example", "h1"};

	assert_int_equal(bc_ssh_pubkey_blob(f->ca, &ca_blob, &ca_len), BC_OK);
	p.force_command = "echo forced";
	p.extensions = BC_SSH_EXT_PTY;
	assert_int_equal(bc_ssh_cert_sign(&p, f->ca, &cert, &len), BC_OK);
	assert_int_equal(bc_ssh_cert_parse(cert, len, &i), BC_OK);
	assert_int_equal(i.type, BC_SSH_CERT_USER);
	assert_int_equal(i.serial, 4242);
	assert_string_equal(i.key_id, "spiffe://td/s/1");
	assert_int_equal(i.n_principals, 2);
	assert_string_equal(i.principals[0], "root");
	assert_string_equal(i.principals[1], "alice");
	assert_int_equal(i.valid_after, 1000);
	assert_int_equal(i.valid_before, 2000);
	assert_int_equal(i.key_blob_len, f->ed_len);
	assert_memory_equal(i.key_blob, f->ed_blob, f->ed_len);
	assert_int_equal(i.ca_blob_len, ca_len);
	assert_memory_equal(i.ca_blob, ca_blob, ca_len);
	bc_ssh_cert_info_free(&i);
	free(cert);

	p = user_params(f->p384_blob, f->p384_len);
	p.type = BC_SSH_CERT_HOST;
	p.principals = hp;
	p.serial = UINT64_MAX;
	assert_int_equal(bc_ssh_cert_sign(&p, f->ca, &cert, &len), BC_OK);
	assert_int_equal(bc_ssh_cert_parse(cert, len, &i), BC_OK);
	assert_int_equal(i.type, BC_SSH_CERT_HOST);
	assert_true(i.serial == UINT64_MAX);
	assert_string_equal(i.principals[0], "h1.example");
	assert_int_equal(i.key_blob_len, f->p384_len);
	assert_memory_equal(i.key_blob, f->p384_blob, f->p384_len);
	bc_ssh_cert_info_free(&i);
	free(cert);
	free(ca_blob);
}

/* Every truncation of a valid certificate, and one byte more, is refused. */
static void
test_truncations(void **state)
{
	fx		   *f = *state;
	bc_ssh_cert_params p = user_params(f->ed_blob, f->ed_len);
	bc_ssh_cert_info i;
	unsigned char *cert,
			   *big;
	size_t		len;

	p.source_address = "127.0.0.1/32";
	p.extensions = BC_SSH_EXT_PTY | BC_SSH_EXT_PORT;
	assert_int_equal(bc_ssh_cert_sign(&p, f->ca, &cert, &len), BC_OK);
	for (size_t k = 0; k < len; k++)
	{
		unsigned char *t = malloc(k ? k : 1);	/* exact size: ASan sees any over-read */

		memcpy(t, cert, k);
		assert_int_equal(bc_ssh_cert_parse(t, k, &i), BC_EINVAL);
		assert_null(i.key_blob);
		free(t);
	}
	/* the same certificate with its two extensions swapped: unsorted, refused */
	{
		const unsigned char *crit,
				   *ext,
				   *sig;
		size_t		cn,
					en,
					sn,
					signed_len;
		static const unsigned char swapped[] =
			"\0\0\0\x0a" "permit-pty" "\0\0\0\0"
			"\0\0\0\x16" "permit-port-forwarding" "\0\0\0\0";

		blocks(cert, &crit, &cn, &ext, &en, &sig, &sn, &signed_len);
		assert_int_equal(en, sizeof(swapped) - 1);
		big = malloc(len);
		memcpy(big, cert, len);
		memcpy(big + (ext - cert), swapped, en);
		assert_int_equal(bc_ssh_cert_parse(big, len, &i), BC_EINVAL);
		memcpy(big + (ext - cert), ext, en);
		assert_int_equal(bc_ssh_cert_parse(big, len, &i), BC_OK);
		bc_ssh_cert_info_free(&i);
		free(big);
	}
	big = malloc(len + 1);
	memcpy(big, cert, len);
	big[len] = 0;
	assert_int_equal(bc_ssh_cert_parse(big, len + 1, &i), BC_EINVAL);
	free(big);
	free(cert);
}

/* Each refusal of bc_ssh_cert_sign. */
static void
test_sign_refusals(void **state)
{
	fx		   *f = *state;
	bc_ssh_cert_params p;
	unsigned char *cert = NULL;
	size_t		len;
	const char *bad[] = {"", "a,b", "a b", "a\tb", "*.example", "h?", "a\nb"};
	const char *one[1];
	char		longname[BC_SSH_PRINCIPAL_MAX + 2];
	const char *many[BC_SSH_PRINCIPALS_MAX + 1];
	EVP_PKEY   *p384ca = f->p384;

#define REFUSED(mod) do { p = user_params(f->ed_blob, f->ed_len); mod; \
		assert_int_equal(bc_ssh_cert_sign(&p, f->ca, &cert, &len), BC_EINVAL); assert_null(cert); } while (0)
	REFUSED(p.serial = 0);
	REFUSED(p.n_principals = 0);
	REFUSED(p.valid_after = p.valid_before);
	REFUSED(p.valid_after = p.valid_before + 1);
	REFUSED(p.type = 3);
	REFUSED(p.key_id = NULL);
	REFUSED(p.key_id = "");
	REFUSED(p.key_id = "a\nb");
	REFUSED(p.extensions = 32);
	REFUSED((p.type = BC_SSH_CERT_HOST, p.force_command = "x"));
	REFUSED((p.type = BC_SSH_CERT_HOST, p.source_address = "10.0.0.0/8"));
	REFUSED((p.type = BC_SSH_CERT_HOST, p.extensions = BC_SSH_EXT_PTY));
	REFUSED(p.force_command = "a\nb");
	REFUSED(p.key_blob_len--);
	REFUSED(p.key_blob = NULL);
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++)
	{
		one[0] = bad[k];
		REFUSED((p.principals = one, p.n_principals = 1));
	}
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	one[0] = longname;
	REFUSED((p.principals = one, p.n_principals = 1));
	for (size_t k = 0; k < BC_SSH_PRINCIPALS_MAX + 1; k++)
		many[k] = "a";
	REFUSED((p.principals = many, p.n_principals = BC_SSH_PRINCIPALS_MAX + 1));
	/* the CA must be P-256 */
	p = user_params(f->ed_blob, f->ed_len);
	assert_int_equal(bc_ssh_cert_sign(&p, p384ca, &cert, &len), BC_EINVAL);
	/* and the limits themselves pass */
	longname[sizeof(longname) - 2] = '\0';
	p.principals = many;
	p.n_principals = BC_SSH_PRINCIPALS_MAX;
	many[0] = longname;
	assert_int_equal(bc_ssh_cert_sign(&p, f->ca, &cert, &len), BC_OK);
	free(cert);
#undef REFUSED
}

/* Public key blobs: exact wire form, round trip, off-curve and trailing bytes refused. */
static void
test_pubkey(void **state)
{
	fx		   *f = *state;
	EVP_PKEY   *k = NULL;
	unsigned char *b2,
			   *bad;
	size_t		n2;
	char		fp[64];
	char	   *line;

	assert_int_equal(f->ed_len, 4 + 11 + 4 + 32);
	assert_memory_equal(f->ed_blob, "\0\0\0\x0bssh-ed25519\0\0\0\x20", 19);
	assert_int_equal(f->p384_len, 4 + 19 + 4 + 8 + 4 + 97);
	assert_int_equal(bc_ssh_pubkey_parse(f->p384_blob, f->p384_len, &k), BC_OK);
	assert_int_equal(bc_ssh_pubkey_blob(k, &b2, &n2), BC_OK);
	assert_int_equal(n2, f->p384_len);
	assert_memory_equal(b2, f->p384_blob, n2);
	assert_int_equal(EVP_PKEY_eq(k, f->p384), 1);
	EVP_PKEY_free(k);
	free(b2);
	/* off the curve: the last byte of y changed */
	bad = malloc(f->p384_len + 1);
	memcpy(bad, f->p384_blob, f->p384_len);
	bad[f->p384_len - 1] ^= 1;
	assert_int_equal(bc_ssh_pubkey_parse(bad, f->p384_len, &k), BC_EINVAL);
	assert_null(k);
	assert_int_equal(bc_ssh_pubkey_parse(bad, f->p384_len, NULL), BC_EINVAL);
	/* one byte more, one less */
	memcpy(bad, f->p384_blob, f->p384_len);
	bad[f->p384_len] = 0;
	assert_int_equal(bc_ssh_pubkey_parse(bad, f->p384_len + 1, NULL), BC_EINVAL);
	assert_int_equal(bc_ssh_pubkey_parse(bad, f->p384_len - 1, NULL), BC_EINVAL);
	/* the curve name must be the type's */
	memcpy(bad + 4 + 19 + 4 + 5, "521", 3);
	assert_int_equal(bc_ssh_pubkey_parse(bad, f->p384_len, NULL), BC_EINVAL);
	free(bad);
	/* line and back; a line whose type is not the blob's */
	line = bc_ssh_pubkey_line(f->ed_blob, f->ed_len, "c");
	assert_non_null(line);
	assert_memory_equal(line, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI", 37);
	assert_string_equal(line + strlen(line) - 3, " c\n");
	assert_int_equal(bc_ssh_pubkey_line_parse(line, strlen(line), &b2, &n2), BC_OK);
	assert_int_equal(n2, f->ed_len);
	assert_memory_equal(b2, f->ed_blob, n2);
	free(b2);
	memcpy(line, "ssh-ed25518", 11);
	assert_int_equal(bc_ssh_pubkey_line_parse(line, strlen(line), &b2, &n2), BC_EINVAL);
	free(line);
	assert_int_equal(bc_ssh_fingerprint(f->ed_blob, f->ed_len, fp), BC_OK);
	assert_int_equal(strlen(fp), 7 + 43);
	assert_memory_equal(fp, "SHA256:", 7);
}

/* The KRL: exact header and section bytes; unsorted, repeated, zero serials refused. */
static void
test_krl(void **state)
{
	fx		   *f = *state;
	uint64_t	s[] = {7, 0x0102030405060708ULL};
	uint64_t	unsorted[] = {8, 7};
	uint64_t	zero[] = {0};
	bc_ssh_krl_ca ca = {f->ed_blob, f->ed_len, s, 2};
	unsigned char *krl = NULL;
	size_t		len;
	static const unsigned char head[] =
		"SSHKRL\n\0" "\0\0\0\x01" "\0\0\0\0\0\0\0\x05" "\0\0\0\0\0\0\0\x09"
		"\0\0\0\0\0\0\0\0" "\0\0\0\0" "\0\0\0\x01" "c";
	size_t		hn = sizeof(head) - 1;

	assert_int_equal(bc_ssh_krl_build(5, 9, "c", &ca, 1, &krl, &len), BC_OK);
	assert_int_equal(len, hn + 1 + 4 + (4 + f->ed_len) + 4 + 1 + 4 + 16);
	assert_memory_equal(krl, head, hn);
	assert_int_equal(krl[hn], 1);	/* CERTIFICATES */
	assert_memory_equal(krl + hn + 5 + 4, f->ed_blob, f->ed_len);
	assert_memory_equal(krl + hn + 5 + 4 + f->ed_len, "\0\0\0\0\x20\0\0\0\x10", 9);
	assert_memory_equal(krl + len - 16, "\0\0\0\0\0\0\0\x07\x01\x02\x03\x04\x05\x06\x07\x08", 16);
	free(krl);
	krl = NULL;
	ca.serials = unsorted;
	assert_int_equal(bc_ssh_krl_build(5, 9, "c", &ca, 1, &krl, &len), BC_EINVAL);
	ca.serials = zero;
	ca.n_serials = 1;
	assert_int_equal(bc_ssh_krl_build(5, 9, "c", &ca, 1, &krl, &len), BC_EINVAL);
	ca.serials = s;
	ca.ca_blob_len--;
	assert_int_equal(bc_ssh_krl_build(5, 9, "c", &ca, 1, &krl, &len), BC_EINVAL);
	assert_null(krl);
	/* no CA: a header alone */
	assert_int_equal(bc_ssh_krl_build(5, 9, "c", NULL, 0, &krl, &len), BC_OK);
	assert_int_equal(len, hn);
	free(krl);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_options_bytes),
		cmocka_unit_test(test_signature_verifies),
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_truncations),
		cmocka_unit_test(test_sign_refusals),
		cmocka_unit_test(test_pubkey),
		cmocka_unit_test(test_krl),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
