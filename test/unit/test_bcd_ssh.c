/*
 * test_bcd_ssh.c: what bcd believes of the service about SSH, the host side
 * (core/ssh_docs.c): the signed document of GET /v1/ssh/signed (a JWS by a
 * pinned key, our trust domain, issuedAt never older, krlVersion never
 * lower, every CA line a plain key written again), the KRL against its
 * signed hash, a host certificate answered by POST /v1/ssh/host (for our
 * key, a host certificate, within the node certificate, its serial, the
 * principals asked) and one held on disk; with real keys, certificates and
 * KRLs made by src/common's ssh.c and documents signed by its JOSE.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "bc_common.h"
#include "bc_ssh.h"
#include "ca_fixture.h"
#include "core/service_keys.h"
#include "core/ssh_host.h"

#define TD "agent.test"
#define NOT_AFTER 2000000000LL
/* bcd's clock in the signed document's tests: 2026-12-07T05:00:00Z */
#define NOW 1796619600LL

/* What every test shares: the service's keys, the pinned set, SSH keys. */
typedef struct fixture
{
	EVP_PKEY   *sig;			/* the service's signing key */
	EVP_PKEY   *enc;
	EVP_PKEY   *other;			/* a key nobody pinned */
	X509	   *ca;
	char		dir[64];
	bcd_service_keys keys;
	EVP_PKEY   *ssh_ca;			/* the SSH host CA */
	EVP_PKEY   *host;			/* a host key */
	EVP_PKEY   *host2;			/* another */
	unsigned char *ca_blob,
			   *blob,
			   *blob2;
	size_t		ca_blob_len,
				blob_len,
				blob2_len;
} fixture;

/* The public JWK of key as a jansson object. */
static json_t *
jwk_of(EVP_PKEY *key)
{
	char	   *text = NULL;
	json_t	   *o;

	assert_int_equal(bc_jwk_from_pkey(key, &text), BC_OK);
	o = json_loads(text, 0, NULL);
	free(text);
	assert_non_null(o);
	return o;
}

/* {"keys":[JWS of payload by key]} as text (malloc()ed); payload is taken. */
static char *
signed_by(EVP_PKEY *key, json_t *payload)
{
	char	   *text = json_dumps(payload, JSON_COMPACT);
	char	   *jws = NULL;
	char		kid[44];
	json_t	   *out;
	char	   *s;

	assert_int_equal(bc_jwk_thumbprint(key, kid), BC_OK);
	assert_int_equal(bc_jws_sign_es256(key, kid, (unsigned char *) text, strlen(text), &jws), BC_OK);
	out = json_pack("{s:[s]}", "keys", jws);
	s = json_dumps(out, JSON_COMPACT);
	json_decref(out);
	json_decref(payload);
	free(jws);
	free(text);
	return s;
}

/* The wire blob of key (malloc()ed). */
static unsigned char *
blob_of(EVP_PKEY *key, size_t *len)
{
	unsigned char *b = NULL;

	assert_int_equal(bc_ssh_pubkey_blob(key, &b, len), BC_OK);
	return b;
}

static int
setup(void **state)
{
	fixture    *f = calloc(1, sizeof(*f));
	json_t	   *doc;
	char	   *text;
	char		path[96];
	char		err[512];
	BIO		   *bio = BIO_new(BIO_s_mem());
	char	   *pem;
	long		n;
	FILE	   *fp;

	f->sig = bc_p256_generate();
	f->enc = bc_p256_generate();
	f->other = bc_p256_generate();
	f->ca = make_ca(f->sig, "test root");
	assert_int_equal(PEM_write_bio_X509(bio, f->ca), 1);
	n = BIO_get_mem_data(bio, &pem);
	doc = json_pack("{s:s, s:o, s:o, s:[], s:s#}", "trustDomain", TD, "signingKey",
					jwk_of(f->sig), "encryptionKey", jwk_of(f->enc), "jwtKeys", "nodeCa", pem,
					(int) n);
	BIO_free(bio);
	text = json_dumps(doc, JSON_COMPACT);
	snprintf(f->dir, sizeof(f->dir), "/tmp/bcd-ssh-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(path, sizeof(path), "%s/service-keys.json", f->dir);
	fp = fopen(path, "w");
	assert_non_null(fp);
	fputs(text, fp);
	fclose(fp);
	free(text);
	json_decref(doc);
	assert_int_equal(bcd_service_keys_load(path, &f->keys, err, sizeof(err)), BC_OK);
	unlink(path);
	f->ssh_ca = bc_p256_generate();
	f->host = bc_p256_generate();
	f->host2 = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	assert_non_null(f->host2);
	f->ca_blob = blob_of(f->ssh_ca, &f->ca_blob_len);
	f->blob = blob_of(f->host, &f->blob_len);
	f->blob2 = blob_of(f->host2, &f->blob2_len);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	fixture    *f = *state;

	bcd_service_keys_free(&f->keys);
	EVP_PKEY_free(f->sig);
	EVP_PKEY_free(f->enc);
	EVP_PKEY_free(f->other);
	EVP_PKEY_free(f->ssh_ca);
	EVP_PKEY_free(f->host);
	EVP_PKEY_free(f->host2);
	free(f->ca_blob);
	free(f->blob);
	free(f->blob2);
	X509_free(f->ca);
	rmdir(f->dir);
	free(f);
	return 0;
}

/* A signed payload of GET /v1/ssh/signed; host_line NULL: the SSH CA's. */
static json_t *
signed_payload(fixture *f, const char *td, const char *at, json_int_t version, const char *sha,
			   const char *host_line)
{
	char	   *line = bc_ssh_pubkey_line(f->ca_blob, f->ca_blob_len, "gateway text\tignored");
	json_t	   *p;

	assert_non_null(line);
	line[strlen(line) - 1] = '\0';
	p = json_pack("{s:s, s:s, s:I, s:s, s:[s], s:[s]}", "trustDomain", td, "issuedAt", at,
				  "krlVersion", version, "krlSha256", sha, "hostCa",
				  host_line != NULL ? host_line : line, "userCa", line);
	free(line);
	assert_non_null(p);
	return p;
}

/* Take text (freed) with held: its status, out filled (cleared by the caller). */
static int
take(fixture *f, char *text, const bcd_ssh_signed *held, bcd_ssh_signed *out, char *err)
{
	int			rc = bcd_ssh_signed_take(&f->keys, text, strlen(text), held, NOW, out, err, 512);

	free(text);
	return rc;
}

#define SHA_A "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"

/* The signed document: believed from a pinned key only, never older, never a lower krlVersion. */
static void
test_signed(void **state)
{
	fixture    *f = *state;
	bcd_ssh_signed held;
	bcd_ssh_signed next;
	char		err[512];
	char		expect[1024];
	char	   *line = bc_ssh_pubkey_line(f->ca_blob, f->ca_blob_len, "bc_join-host-ca@" TD);
	char	   *cert_line;
	unsigned char *cert = NULL;
	size_t		cert_len = 0;
	const char *principals[] = {"h.example"};
	bc_ssh_cert_params p = {
		.type = BC_SSH_CERT_HOST,.key_blob = f->blob,.key_blob_len = f->blob_len,.serial = 7,
		.key_id = "k",.principals = principals,.n_principals = 1,.valid_after = 1,
		.valid_before = NOT_AFTER
	};

	/* taken: the lines written again from their blobs, with our comment */
	assert_int_equal(take(f, signed_by(f->sig, signed_payload(f, TD, "2026-12-07T04:00:00Z", 5,
																	 SHA_A, NULL)),
						  NULL, &held, err), BC_OK);
	assert_int_equal(held.krl_version, 5);
	assert_string_equal(held.krl_sha256, SHA_A);
	assert_int_equal(held.n_host_ca, 1);
	assert_int_equal(held.n_user_ca, 1);
	snprintf(expect, sizeof(expect), "@cert-authority * %s", line);
	assert_string_equal(held.host_ca, expect);
	free(line);
	line = bc_ssh_pubkey_line(f->ca_blob, f->ca_blob_len, "bc_join-user-ca@" TD);
	assert_string_equal(held.user_ca, line);
	free(line);

	/* the same again, and a newer one with a higher version: taken */
	assert_int_equal(take(f, signed_by(f->sig, signed_payload(f, TD, "2026-12-07T04:00:00Z", 5,
																	 SHA_A, NULL)),
						  &held, &next, err), BC_OK);
	bcd_ssh_signed_clear(&next);
	assert_int_equal(take(f, signed_by(f->sig, signed_payload(f, TD, "2026-12-07T04:00:10Z", 6,
																	 SHA_A, NULL)),
						  &held, &next, err), BC_OK);
	bcd_ssh_signed_clear(&next);

	/* older issuedAt: refused (a replay) */
	assert_int_equal(take(f, signed_by(f->sig, signed_payload(f, TD, "2026-12-07T03:59:59Z", 5,
																	 SHA_A, NULL)),
						  &held, &next, err), BC_EVERIFY);
	assert_non_null(strstr(err, "older"));
	assert_null(next.host_ca);
	/* a lower krlVersion, even newer: refused (a revoked certificate would come back) */
	assert_int_equal(take(f, signed_by(f->sig, signed_payload(f, TD, "2026-12-07T05:00:00Z", 4,
																	 SHA_A, NULL)),
						  &held, &next, err), BC_EVERIFY);
	assert_non_null(strstr(err, "krlVersion 4 is lower"));
	/* signed by a key not pinned: refused */
	assert_int_equal(take(f, signed_by(f->other, signed_payload(f, TD, "2026-12-07T05:00:00Z", 9,
																	   SHA_A, NULL)),
						  &held, &next, err), BC_EVERIFY);
	/* another trust domain: refused */
	assert_int_equal(take(f, signed_by(f->sig, signed_payload(f, "other.test",
																	 "2026-12-07T05:00:00Z", 9,
																	 SHA_A, NULL)),
						  &held, &next, err), BC_EINVAL);
	assert_non_null(strstr(err, "trustDomain"));
	/* a krlSha256 that is not 32 bytes */
	assert_int_equal(take(f, signed_by(f->sig, signed_payload(f, TD, "2026-12-07T05:00:00Z", 9,
																	 "AAAA", NULL)),
						  &held, &next, err), BC_EINVAL);
	/* a CA line that is a certificate, or garbage, or two lines: refused */
	assert_int_equal(bc_ssh_cert_sign(&p, f->ssh_ca, &cert, &cert_len), BC_OK);
	cert_line = bc_ssh_pubkey_line(cert, cert_len, NULL);
	cert_line[strlen(cert_line) - 1] = '\0';
	assert_int_equal(take(f, signed_by(f->sig, signed_payload(f, TD, "2026-12-07T05:00:00Z", 9,
																	 SHA_A, cert_line)),
						  &held, &next, err), BC_EINVAL);
	assert_non_null(strstr(err, "plain"));
	assert_int_equal(take(f, signed_by(f->sig, signed_payload(f, TD, "2026-12-07T05:00:00Z", 9,
																	 SHA_A, "ssh-ed25519 AAAA")),
						  &held, &next, err), BC_EINVAL);
	line = bc_ssh_pubkey_line(f->ca_blob, f->ca_blob_len, NULL);
	snprintf(expect, sizeof(expect), "%s%s", line, line);
	expect[strlen(expect) - 1] = '\0';
	assert_int_equal(take(f, signed_by(f->sig, signed_payload(f, TD, "2026-12-07T05:00:00Z", 9,
																	 SHA_A, expect)),
						  &held, &next, err), BC_EINVAL);
	/* not a document at all, not JSON, over 256 KiB */
	assert_int_equal(bcd_ssh_signed_take(&f->keys, "{\"keys\":[\"x.y.z\"]}", 18, &held, NOW, &next,
										 err, sizeof(err)), BC_EVERIFY);
	assert_int_equal(bcd_ssh_signed_take(&f->keys, "not json", 8, &held, NOW, &next, err, sizeof(err)),
					 BC_EVERIFY);
	assert_int_equal(bcd_ssh_signed_take(&f->keys, "{}", BCD_SSH_SIGNED_MAX + 1, &held, NOW, &next,
										 err, sizeof(err)), BC_ETOOBIG);
	/* nine CA lines: refused */
	{
		json_t	   *p9 = signed_payload(f, TD, "2026-12-07T05:00:00Z", 9, SHA_A, NULL);
		json_t	   *arr = json_object_get(p9, "userCa");
		json_t	   *one = json_array_get(arr, 0);

		for (int i = 0; i < 8; i++)
			json_array_append(arr, one);
		assert_int_equal(take(f, signed_by(f->sig, p9), &held, &next, err), BC_EINVAL);
		assert_non_null(strstr(err, "at most 8"));
	}
	free(line);
	free(cert_line);
	free(cert);
	bcd_ssh_signed_clear(&held);
}

/* The KRL: exactly the one whose SHA-256 was signed. */
static void
test_krl(void **state)
{
	fixture    *f = *state;
	uint64_t	serials[] = {3, 9};
	bc_ssh_krl_ca ca = {f->ca_blob, f->ca_blob_len, serials, 2};
	unsigned char *krl = NULL;
	size_t		len = 0;
	bcd_ssh_signed s;
	char		err[512];

	memset(&s, 0, sizeof(s));
	assert_int_equal(bc_ssh_krl_build(4, 1700000000, "", &ca, 1, &krl, &len), BC_OK);
	assert_int_equal(bc_sha256_b64url(krl, len, s.krl_sha256), BC_OK);
	assert_int_equal(bcd_ssh_krl_check(&s, krl, len, err, sizeof(err)), BC_OK);
	assert_int_equal(bcd_ssh_krl_version(krl, len), 4);
	assert_int_equal(bcd_ssh_krl_version(krl, 19), -1);
	/* one byte changed (a serial dropped by the gateway): refused */
	krl[len - 1] ^= 1;
	assert_int_equal(bcd_ssh_krl_check(&s, krl, len, err, sizeof(err)), BC_EVERIFY);
	assert_non_null(strstr(err, "krlSha256"));
	krl[len - 1] ^= 1;
	/* shorter: refused */
	assert_int_equal(bcd_ssh_krl_check(&s, krl, len - 8, err, sizeof(err)), BC_EVERIFY);
	/* not a KRL */
	krl[0] = 'X';
	assert_int_equal(bcd_ssh_krl_check(&s, krl, len, err, sizeof(err)), BC_EINVAL);
	assert_int_equal(bcd_ssh_krl_version(krl, len), -1);
	assert_int_equal(bcd_ssh_krl_check(&s, krl, 5, err, sizeof(err)), BC_EINVAL);
	/* over BC_SSH_KRL_MAX */
	assert_int_equal(bcd_ssh_krl_check(&s, krl, (size_t) BC_SSH_KRL_MAX + 1, err, sizeof(err)),
					 BC_ETOOBIG);
	free(krl);
}

/* A certificate of type over key blob, serial, principals, valid before vb; base64 (malloc()ed). */
static char *
cert_b64(fixture *f, int type, const unsigned char *blob, size_t blob_len, uint64_t serial,
		 const char *const *principals, size_t n, uint64_t vb)
{
	bc_ssh_cert_params p = {
		.type = type,.key_blob = blob,.key_blob_len = blob_len,.serial = serial,
		.key_id = "spiffe://" TD "/node/n1",.principals = principals,.n_principals = n,
		.valid_after = 1000,.valid_before = vb
	};
	unsigned char *cert = NULL;
	size_t		len = 0;
	char	   *b64;

	assert_int_equal(bc_ssh_cert_sign(&p, f->ssh_ca, &cert, &len), BC_OK);
	b64 = malloc(bc_b64_encoded_len(len) + 1);
	b64[bc_b64_encode(cert, len, b64)] = '\0';
	free(cert);
	return b64;
}

/* The answer's payload for blob (sha of key_for), certificate b64 (taken), serial. */
static json_t *
answer(const unsigned char *key_for, size_t key_for_len, char *b64, const char *serial)
{
	char		sha[44];
	json_t	   *p;

	assert_int_equal(bc_sha256_b64url(key_for, key_for_len, sha), BC_OK);
	p = json_pack("{s:s, s:s, s:s, s:s}", "status", "issued", "sshKeySha256", sha,
				  "sshCertificate", b64, "sshSerial", serial);
	free(b64);
	return p;
}

/* Check payload (taken) for f's host key: its status. */
static int
check(fixture *f, json_t *payload, const char *const *asked, size_t n_asked, char *err)
{
	unsigned char *cert = NULL;
	size_t		len = 0;
	bc_ssh_cert_info info;
	int			rc = bcd_ssh_host_answer(payload, f->blob, f->blob_len, NOT_AFTER, asked, n_asked,
										 &cert, &len, &info, err, 512);

	if (rc == BC_OK)
	{
		assert_non_null(cert);
		assert_int_equal(info.type, BC_SSH_CERT_HOST);
		assert_int_equal(info.serial, 77);
		assert_memory_equal(info.ca_blob, f->ca_blob, f->ca_blob_len);
	}
	else
		assert_null(cert);
	bc_ssh_cert_info_free(&info);
	free(cert);
	json_decref(payload);
	return rc;
}

/* POST /v1/ssh/host's answer: for our key, a host certificate, within the node certificate. */
static void
test_host_answer(void **state)
{
	fixture    *f = *state;
	const char *const names[] = {"h1.example", "h2.example"};
	const char *const asked[] = {"h1.example"};
	char		err[512];

	/* right */
	assert_int_equal(check(f, answer(f->blob, f->blob_len,
									 cert_b64(f, BC_SSH_CERT_HOST, f->blob, f->blob_len, 77,
											  names, 2, NOT_AFTER), "77"), NULL, 0, err), BC_OK);
	/* valid before earlier than the node certificate: taken (the rule may say so) */
	assert_int_equal(check(f, answer(f->blob, f->blob_len,
									 cert_b64(f, BC_SSH_CERT_HOST, f->blob, f->blob_len, 77,
											  names, 2, NOT_AFTER - 60), "77"), NULL, 0, err),
					 BC_OK);
	/* the answer names another key's hash */
	assert_int_equal(check(f, answer(f->blob2, f->blob2_len,
									 cert_b64(f, BC_SSH_CERT_HOST, f->blob, f->blob_len, 77,
											  names, 2, NOT_AFTER), "77"), NULL, 0, err),
					 BC_EVERIFY);
	assert_non_null(strstr(err, "sshKeySha256"));
	/* a certificate of another key under our key's hash */
	assert_int_equal(check(f, answer(f->blob, f->blob_len,
									 cert_b64(f, BC_SSH_CERT_HOST, f->blob2, f->blob2_len, 77,
											  names, 2, NOT_AFTER), "77"), NULL, 0, err),
					 BC_EINVAL);
	assert_non_null(strstr(err, "another key"));
	/* a user certificate */
	assert_int_equal(check(f, answer(f->blob, f->blob_len,
									 cert_b64(f, BC_SSH_CERT_USER, f->blob, f->blob_len, 77,
											  names, 2, NOT_AFTER), "77"), NULL, 0, err),
					 BC_EINVAL);
	assert_non_null(strstr(err, "not a host"));
	/* valid through the node certificate's last second (notAfter + 1, exclusive): taken */
	assert_int_equal(check(f, answer(f->blob, f->blob_len,
									 cert_b64(f, BC_SSH_CERT_HOST, f->blob, f->blob_len, 77,
											  names, 2, NOT_AFTER + 1), "77"), NULL, 0, err),
					 BC_OK);
	/* valid beyond the node certificate */
	assert_int_equal(check(f, answer(f->blob, f->blob_len,
									 cert_b64(f, BC_SSH_CERT_HOST, f->blob, f->blob_len, 77,
											  names, 2, NOT_AFTER + 2), "77"), NULL, 0, err),
					 BC_EINVAL);
	assert_non_null(strstr(err, "beyond"));
	/* sshSerial not the certificate's */
	assert_int_equal(check(f, answer(f->blob, f->blob_len,
									 cert_b64(f, BC_SSH_CERT_HOST, f->blob, f->blob_len, 77,
											  names, 2, NOT_AFTER), "78"), NULL, 0, err),
					 BC_EVERIFY);
	/* principals beyond those asked */
	assert_int_equal(check(f, answer(f->blob, f->blob_len,
									 cert_b64(f, BC_SSH_CERT_HOST, f->blob, f->blob_len, 77,
											  names, 2, NOT_AFTER), "77"), asked, 1, err),
					 BC_EVERIFY);
	assert_non_null(strstr(err, "h2.example"));
	assert_int_equal(check(f, answer(f->blob, f->blob_len,
									 cert_b64(f, BC_SSH_CERT_HOST, f->blob, f->blob_len, 77,
											  names, 1, NOT_AFTER), "77"), asked, 1, err), BC_OK);
	/* no certificate, not base64, truncated */
	assert_int_equal(check(f, answer(f->blob, f->blob_len, strdup("!!!"), "77"), NULL, 0, err),
					 BC_EINVAL);
	{
		char	   *b = cert_b64(f, BC_SSH_CERT_HOST, f->blob, f->blob_len, 77, names, 2, NOT_AFTER);

		b[strlen(b) - 8] = '\0';
		assert_int_equal(check(f, answer(f->blob, f->blob_len, b, "77"), NULL, 0, err),
						 BC_EINVAL);
	}
	assert_int_equal(check(f, json_pack("{s:s}", "status", "issued"), NULL, 0, err), BC_EVERIFY);
}

/* A certificate file held: kept only when it is right for this key and node certificate. */
static void
test_host_held(void **state)
{
	fixture    *f = *state;
	const char *const names[] = {"h1.example"};
	char	   *b64 = cert_b64(f, BC_SSH_CERT_HOST, f->blob, f->blob_len, 77, names, 1, NOT_AFTER);
	unsigned char cert[BC_SSH_CERT_MAX];
	size_t		len = 0;
	char	   *line;
	bc_ssh_cert_info info;
	char		err[512];

	assert_int_equal(bc_b64_decode(b64, strlen(b64), cert, sizeof(cert), &len), BC_OK);
	line = bc_ssh_pubkey_line(cert, len, "spiffe://" TD "/node/n1");
	assert_int_equal(bcd_ssh_host_cert_held(line, strlen(line), f->blob, f->blob_len, NOT_AFTER,
											NULL, &info, err, sizeof(err)), BC_OK);
	assert_int_equal(info.serial, 77);
	assert_null(info.ca_blob);
	bc_ssh_cert_info_free(&info);
	/* notAfter + 1 (the same end) held too */
	assert_int_equal(bcd_ssh_host_cert_held(line, strlen(line), f->blob, f->blob_len, NOT_AFTER - 1,
											NULL, &info, err, sizeof(err)), BC_OK);
	bc_ssh_cert_info_free(&info);
	assert_int_equal(bcd_ssh_host_cert_held(line, strlen(line), f->blob, f->blob_len, NOT_AFTER - 2,
											NULL, &info, err, sizeof(err)), BC_EINVAL);
	/* a renewal moved notAfter: asked for again */
	assert_int_equal(bcd_ssh_host_cert_held(line, strlen(line), f->blob, f->blob_len,
											NOT_AFTER + 3600, NULL, &info, err, sizeof(err)), BC_EINVAL);
	assert_non_null(strstr(err, "ends before"));
	/* for another key (sshd's key replaced) */
	assert_int_equal(bcd_ssh_host_cert_held(line, strlen(line), f->blob2, f->blob2_len,
											NOT_AFTER, NULL, &info, err, sizeof(err)), BC_EINVAL);
	/* not a certificate line */
	assert_int_equal(bcd_ssh_host_cert_held("junk\n", 5, f->blob, f->blob_len, NOT_AFTER,
											NULL, &info, err, sizeof(err)), BC_EINVAL);

	/* the CA among the signed host CA keys: kept; a retired CA (published no more): asked again */
	{
		bcd_ssh_signed pub;
		EVP_PKEY   *next_ca = bc_p256_generate();
		size_t		nlen = 0;
		unsigned char *nblob = blob_of(next_ca, &nlen);
		char	   *nline = bc_ssh_pubkey_line(nblob, nlen, NULL);

		nline[strlen(nline) - 1] = '\0';
		assert_int_equal(take(f, signed_by(f->sig, signed_payload(f, TD, "2026-12-07T05:00:00Z",
																		 1, SHA_A, NULL)),
							  NULL, &pub, err), BC_OK);
		assert_int_equal(bcd_ssh_host_cert_held(line, strlen(line), f->blob, f->blob_len,
												NOT_AFTER, &pub, &info, err, sizeof(err)), BC_OK);
		bc_ssh_cert_info_free(&info);
		bcd_ssh_signed_clear(&pub);
		assert_int_equal(take(f, signed_by(f->sig, signed_payload(f, TD, "2026-12-07T05:00:00Z",
																		 1, SHA_A, nline)),
							  NULL, &pub, err), BC_OK);
		assert_int_equal(bcd_ssh_host_cert_held(line, strlen(line), f->blob, f->blob_len,
												NOT_AFTER, &pub, &info, err, sizeof(err)),
						 BC_EINVAL);
		assert_non_null(strstr(err, "no longer among the signed host CA keys"));
		assert_int_equal(bcd_ssh_host_ca_published(&pub, f->ca_blob, f->ca_blob_len), 0);
		assert_int_equal(bcd_ssh_host_ca_published(&pub, nblob, nlen), 1);
		bcd_ssh_signed_clear(&pub);
		/* no host CA key known (no signed document taken up): not a reason */
		assert_int_equal(bcd_ssh_host_ca_published(&pub, f->ca_blob, f->ca_blob_len), 1);
		free(nline);
		free(nblob);
		EVP_PKEY_free(next_ca);
	}
	free(line);
	free(b64);
}

/* The signed document's age: at most BCD_SSH_SIGNED_MAX_AGE before bcd's clock. */
static void
test_signed_age(void **state)
{
	fixture    *f = *state;
	bcd_ssh_signed next;
	char		err[512];

	/* exactly an hour old: taken; a second more: refused, with nothing held (after a start) */
	assert_int_equal(take(f, signed_by(f->sig, signed_payload(f, TD, "2026-12-07T04:00:00Z", 1,
																	 SHA_A, NULL)),
						  NULL, &next, err), BC_OK);
	bcd_ssh_signed_clear(&next);
	assert_int_equal(take(f, signed_by(f->sig, signed_payload(f, TD, "2026-12-07T03:59:59Z", 1,
																	 SHA_A, NULL)),
						  NULL, &next, err), BC_EVERIFY);
	assert_non_null(strstr(err, "more than 3600 s old"));
	assert_null(next.host_ca);
	/* a week old, a higher krlVersion than any held: refused all the same */
	assert_int_equal(take(f, signed_by(f->sig, signed_payload(f, TD, "2026-11-30T05:00:00Z", 99,
																	 SHA_A, NULL)),
						  NULL, &next, err), BC_EVERIFY);
}

/* The floor across a restart: saved in the state directory, loaded, older documents refused. */
static void
test_floor(void **state)
{
	fixture    *f = *state;
	bcd_ssh_signed held;
	bcd_ssh_signed next;
	char		err[512];
	char		path[128];
	int64_t		issued = 0;
	int64_t		version = -1;
	FILE	   *fp;

	memset(&held, 0, sizeof(held));
	bcd_ssh_signed_clear(&held);
	/* nothing kept yet: nothing changes */
	bcd_ssh_floor_load(f->dir, &issued, &version);
	assert_int_equal(issued, 0);
	assert_int_equal(version, -1);
	/* 04:30:00 and version 7 kept; a restart loads them */
	assert_int_equal(bcd_ssh_floor_save(f->dir, NOW - 1800, 7), BC_OK);
	snprintf(path, sizeof(path), "%s/" BCD_SSH_FLOOR_FILE, f->dir);
	bcd_ssh_floor_load(f->dir, &held.issued, &held.krl_version);
	assert_int_equal(held.issued, NOW - 1800);
	assert_int_equal(held.krl_version, 7);
	/* within the hour but older than the floor, or a lower version: refused after the restart */
	assert_int_equal(take(f, signed_by(f->sig, signed_payload(f, TD, "2026-12-07T04:29:59Z", 7,
																	 SHA_A, NULL)),
						  &held, &next, err), BC_EVERIFY);
	assert_non_null(strstr(err, "older than the one held"));
	assert_int_equal(take(f, signed_by(f->sig, signed_payload(f, TD, "2026-12-07T04:40:00Z", 6,
																	 SHA_A, NULL)),
						  &held, &next, err), BC_EVERIFY);
	assert_int_equal(take(f, signed_by(f->sig, signed_payload(f, TD, "2026-12-07T04:40:00Z", 7,
																	 SHA_A, NULL)),
						  &held, &next, err), BC_OK);
	bcd_ssh_signed_clear(&next);
	/* a floor never lowers what is held already (the KRL file's version) */
	issued = NOW;
	version = 9;
	bcd_ssh_floor_load(f->dir, &issued, &version);
	assert_int_equal(issued, NOW);
	assert_int_equal(version, 9);
	/* a damaged file changes nothing */
	fp = fopen(path, "w");
	assert_non_null(fp);
	fputs("12 x\n", fp);
	fclose(fp);
	issued = 0;
	version = -1;
	bcd_ssh_floor_load(f->dir, &issued, &version);
	assert_int_equal(issued, 0);
	assert_int_equal(version, -1);
	unlink(path);
}

/* The hostname claim: lower case, one trailing dot dropped. */
static void
test_hostname(void **state)
{
	char		a[] = "DB.Hosts.Test.";
	char		b[] = "db.hosts.test";
	char		c[] = ".";

	(void) state;
	bcd_ssh_hostname_norm(a);
	assert_string_equal(a, "db.hosts.test");
	bcd_ssh_hostname_norm(b);
	assert_string_equal(b, "db.hosts.test");
	bcd_ssh_hostname_norm(c);
	assert_string_equal(c, ".");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_signed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_krl, setup, teardown),
		cmocka_unit_test_setup_teardown(test_host_answer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_host_held, setup, teardown),
		cmocka_unit_test_setup_teardown(test_signed_age, setup, teardown),
		cmocka_unit_test_setup_teardown(test_floor, setup, teardown),
		cmocka_unit_test(test_hostname),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
