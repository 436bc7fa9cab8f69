/*
 * tpm-check: checks what `bcd tpm-evidence` (the tpm producer) makes with
 * the common library's checks (src/common/bc_tpm.h), the way the server's
 * tpm attestor does, without the server (test/agent/tpm.t).
 *
 *   tpm-check evidence EVIDENCE CSR ROOT ISSUER
 *       round 1: every member unmarshals; the EK passes bc_tpm_check_ek and
 *       its certificate chains to ROOT through ISSUER and is this EK's; the
 *       AK passes bc_tpm_check_ak; certifyInfo is the AK's valid signature
 *       over a certification of nodeKeyPub; nodeKeyPub is a node key and
 *       its key is the CSR's; the CSR's signature verifies.
 *   tpm-check challenge EVIDENCE CHALLENGE_OUT SECRET_OUT
 *       a challenge as the attestor makes it: MakeCredential in software for
 *       the AK's Name under ekPub, a fresh 32-byte secret, state "tpm-check".
 *   tpm-check answer ANSWER EVIDENCE CSR SECRET
 *       round 2: the round-1 members equal EVIDENCE's (EK, AK, node key),
 *       state is "tpm-check", secret is SECRET, the quote is the AK's valid
 *       signature with extraData SHA-256(secret || SHA-256(CSR)) over
 *       sha256:0-7 of a fresh TPM (all zero).
 *
 * Files hold base64url text (EVIDENCE, ANSWER, CHALLENGE) or raw bytes (CSR
 * as DER, SECRET).  Prints "ok: ..." per check, or "not ok: ..." and exits 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>

#include "bc_common.h"
#include "bc_tpm.h"

static int	failed;

static void
check(int ok, const char *what, const char *reason)
{
	printf("%s: %s%s%s\n", ok ? "ok" : "not ok", what, reason != NULL ? " " : "",
		   reason != NULL ? reason : "");
	if (!ok)
		failed = 1;
}

static unsigned char *
slurp(const char *path, size_t *n)
{
	FILE	   *f = fopen(path, "rb");
	unsigned char *buf = NULL;
	long		len;

	if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 ||
		fseek(f, 0, SEEK_SET) != 0 || (buf = malloc((size_t) len + 1)) == NULL ||
		fread(buf, 1, (size_t) len, f) != (size_t) len)
	{
		fprintf(stderr, "tpm-check: cannot read %s\n", path);
		exit(2);
	}
	fclose(f);
	buf[len] = '\0';
	*n = (size_t) len;
	return buf;
}

/* base64url text (trailing newline allowed) to bytes. */
static unsigned char *
unb64(const char *text, size_t n, size_t *out_len)
{
	unsigned char *out;

	while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r'))
		n--;
	out = malloc(bc_b64url_decoded_maxlen(n) + 1);
	if (out == NULL || bc_b64url_decode(text, n, out, bc_b64url_decoded_maxlen(n) + 1,
										out_len) != BC_OK)
	{
		fprintf(stderr, "tpm-check: not base64url\n");
		exit(2);
	}
	return out;
}

/* The evidence JSON in a base64url file. */
static json_t *
load_doc(const char *path)
{
	size_t		n;
	size_t		len;
	unsigned char *text = slurp(path, &n);
	unsigned char *raw = unb64((const char *) text, n, &len);
	json_t	   *doc = json_loadb((const char *) raw, len, JSON_REJECT_DUPLICATES, NULL);

	free(text);
	free(raw);
	if (!json_is_object(doc))
	{
		fprintf(stderr, "tpm-check: %s is not base64url of a JSON object\n", path);
		exit(2);
	}
	return doc;
}

/* Member name of doc, base64url-decoded (malloc), or NULL. */
static unsigned char *
member(json_t *doc, const char *name, size_t *len)
{
	const char *s = json_string_value(json_object_get(doc, name));

	*len = 0;
	return s == NULL ? NULL : unb64(s, strlen(s), len);
}

static void
parse_public(json_t *doc, const char *name, bc_tpm_public *out)
{
	size_t		n;
	unsigned char *b = member(doc, name, &n);

	check(b != NULL && bc_tpm_public_parse(b, n, out) == BC_OK, name,
		  "is a TPM2B_PUBLIC, every byte consumed");
	free(b);
}

static void
parse_attest(json_t *doc, const char *aname, const char *sname, bc_tpm_attest *att,
			 TPMT_SIGNATURE *sig)
{
	size_t		n;
	unsigned char *b = member(doc, aname, &n);

	check(b != NULL && bc_tpm_attest_parse(b, n, att) == BC_OK, aname, "is a TPMS_ATTEST");
	free(b);
	b = member(doc, sname, &n);
	check(b != NULL && bc_tpm_signature_parse(b, n, sig) == BC_OK, sname, "is a TPMT_SIGNATURE");
	free(b);
}

static X509 *
read_pem_cert(const char *path)
{
	FILE	   *f = fopen(path, "r");
	X509	   *x = f != NULL ? PEM_read_X509(f, NULL, NULL, NULL) : NULL;

	if (f != NULL)
		fclose(f);
	if (x == NULL)
	{
		fprintf(stderr, "tpm-check: no certificate in %s\n", path);
		exit(2);
	}
	return x;
}

static int
cmd_evidence(const char *ev_path, const char *csr_path, const char *root_path,
			 const char *issuer_path)
{
	json_t	   *doc = load_doc(ev_path);
	static bc_tpm_public ek, ak, node;
	static bc_tpm_attest att;
	TPMT_SIGNATURE sig;
	const char *why = NULL;
	unsigned char *certb;
	size_t		certn;
	size_t		csr_len;
	unsigned char *csr = slurp(csr_path, &csr_len);
	bc_csr	   *req = NULL;
	X509	   *cert = NULL;
	X509	   *root = read_pem_cert(root_path);
	X509	   *issuer = read_pem_cert(issuer_path);
	const char *allowed[] = {"ekPub", "ekCert", "akPub", "nodeKeyPub", "certifyInfo",
	"certifySignature"};
	const char *k;
	json_t	   *v;
	size_t		i;
	int			known;

	json_object_foreach(doc, k, v)
	{
		known = 0;
		for (i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
			known |= strcmp(k, allowed[i]) == 0;
		check(known && json_is_string(v), k, "is a round-1 member (a string)");
	}
	parse_public(doc, "ekPub", &ek);
	check(bc_tpm_check_ek(&ek, &why) == BC_OK, "the EK passes bc_tpm_check_ek", why);
	certb = member(doc, "ekCert", &certn);
	check(certb != NULL && bc_tpm_ek_cert_parse(certb, certn, &cert, &why) == BC_OK,
		  "ekCert is one DER certificate", why);
	if (certb != NULL)
	{
		const unsigned char *p = certb;
		X509	   *x = d2i_X509(NULL, &p, (long) certn);

		check(x != NULL && (size_t) (p - certb) == certn, "ekCert has no NV padding left",
			  NULL);
		X509_free(x);
	}
	why = NULL;
	check(cert != NULL && bc_tpm_check_ek_cert(cert, &ek, &root, 1, &issuer, 1, 0, &why) == BC_OK,
		  "ekCert chains to the swtpm root through its issuer and certifies ekPub", why);
	parse_public(doc, "akPub", &ak);
	why = NULL;
	check(bc_tpm_check_ak(&ak, &why) == BC_OK, "the AK passes bc_tpm_check_ak", why);
	parse_public(doc, "nodeKeyPub", &node);
	why = NULL;
	check(bc_tpm_check_node_key(&node, &why) == BC_OK, "nodeKeyPub passes "
		  "bc_tpm_check_node_key", why);
	parse_attest(doc, "certifyInfo", "certifySignature", &att, &sig);
	why = NULL;
	check(bc_tpm_verify_attest(&ak, &att, &sig, &why) == BC_OK,
		  "certifyInfo is signed by the AK", why);
	why = NULL;
	check(bc_tpm_check_certify(&att, &node, &why) == BC_OK,
		  "certifyInfo certifies the Name of nodeKeyPub", why);
	check(bc_csr_parse(csr, csr_len, &req) == BC_OK && bc_csr_verify_pop(req) == BC_OK,
		  "the CSR parses and its signature (made in the TPM) verifies", NULL);
	why = NULL;
	check(req != NULL && bc_tpm_node_key_matches(&node, bc_csr_pubkey(req), &why) == BC_OK,
		  "nodeKeyPub is the CSR's key", why);
	bc_csr_free(req);
	X509_free(cert);
	X509_free(root);
	X509_free(issuer);
	free(certb);
	free(csr);
	json_decref(doc);
	return failed;
}

static void
write_file(const char *path, const void *data, size_t n)
{
	FILE	   *f = fopen(path, "wb");

	if (f == NULL || fwrite(data, 1, n, f) != n || fclose(f) != 0)
	{
		fprintf(stderr, "tpm-check: cannot write %s\n", path);
		exit(2);
	}
}

static int
cmd_challenge(const char *ev_path, const char *out_path, const char *secret_path)
{
	json_t	   *doc = load_doc(ev_path);
	static bc_tpm_public ek, ak;
	unsigned char name[BC_TPM_NAME_MAX];
	size_t		name_len;
	unsigned char secret[BC_TPM_SECRET_LEN];
	unsigned char *blob = NULL;
	unsigned char *enc = NULL;
	size_t		blob_len;
	size_t		enc_len;
	char	   *b1;
	char	   *b2;
	char	   *text;
	char	   *out;
	json_t	   *ch;

	parse_public(doc, "ekPub", &ek);
	parse_public(doc, "akPub", &ak);
	if (failed || bc_tpm_name(&ak, name, &name_len) != BC_OK ||
		RAND_bytes(secret, sizeof(secret)) != 1 ||
		bc_tpm_make_credential(&ek, name, name_len, secret, sizeof(secret), &blob, &blob_len,
							   &enc, &enc_len) != BC_OK)
	{
		fprintf(stderr, "tpm-check: cannot make the challenge\n");
		return 2;
	}
	b1 = bc_b64url_encode_alloc(blob, blob_len);
	b2 = bc_b64url_encode_alloc(enc, enc_len);
	ch = json_pack("{s:s, s:s, s:s}", "credentialBlob", b1, "encryptedSecret", b2,
				   "state", "tpm-check");
	text = json_dumps(ch, JSON_COMPACT);
	out = bc_b64url_encode_alloc((const unsigned char *) text, strlen(text));
	write_file(out_path, out, strlen(out));
	write_file(secret_path, secret, sizeof(secret));
	printf("ok: a challenge for the AK's Name under ekPub\n");
	free(b1);
	free(b2);
	free(text);
	free(out);
	free(blob);
	free(enc);
	json_decref(ch);
	json_decref(doc);
	return 0;
}

static int
cmd_answer(const char *ans_path, const char *ev_path, const char *csr_path,
		   const char *secret_path)
{
	json_t	   *ans = load_doc(ans_path);
	json_t	   *ev = load_doc(ev_path);
	static bc_tpm_public ak;
	static bc_tpm_attest att;
	TPMT_SIGNATURE sig;
	const char *why = NULL;
	const char *same[] = {"ekPub", "ekCert", "akPub", "nodeKeyPub"};
	size_t		csr_len;
	size_t		secret_len;
	size_t		got_len;
	unsigned char *csr = slurp(csr_path, &csr_len);
	unsigned char *secret = slurp(secret_path, &secret_len);
	unsigned char *got;
	unsigned char buf[64];
	unsigned char nonce[32];
	static const unsigned char zeros[8 * 32];
	bc_tpm_pcr_bank bank = {TPM2_ALG_SHA256, 0xff, zeros, sizeof(zeros)};
	size_t		i;

	for (i = 0; i < sizeof(same) / sizeof(same[0]); i++)
		check(json_equal(json_object_get(ans, same[i]), json_object_get(ev, same[i])),
			  same[i], "is round 1's");
	check(json_equal(json_object_get(ans, "state"), json_string("tpm-check")),
		  "state is returned as received", NULL);
	got = member(ans, "secret", &got_len);
	check(got != NULL && got_len == secret_len && secret_len == 32 &&
		  memcmp(got, secret, 32) == 0, "secret is the one MakeCredential sealed "
		  "(ActivateCredential with the EK's policy session)", NULL);
	free(got);
	parse_public(ans, "akPub", &ak);
	parse_attest(ans, "quote", "quoteSignature", &att, &sig);
	check(bc_tpm_verify_attest(&ak, &att, &sig, &why) == BC_OK, "the quote is signed by "
		  "the AK", why);
	memcpy(buf, secret, 32);
	if (bc_sha256(csr, csr_len, buf + 32) != BC_OK || bc_sha256(buf, 64, nonce) != BC_OK)
		return 2;
	why = NULL;
	check(bc_tpm_check_quote(&att, &sig, nonce, 32, &bank, 1, &why) == BC_OK,
		  "the quote's extraData is SHA-256(secret || SHA-256(CSR)) and it covers "
		  "sha256:0-7 (zero on a fresh TPM)", why);
	free(csr);
	free(secret);
	json_decref(ans);
	json_decref(ev);
	return failed;
}

int
main(int argc, char **argv)
{
	if (argc == 6 && strcmp(argv[1], "evidence") == 0)
		return cmd_evidence(argv[2], argv[3], argv[4], argv[5]);
	if (argc == 5 && strcmp(argv[1], "challenge") == 0)
		return cmd_challenge(argv[2], argv[3], argv[4]);
	if (argc == 6 && strcmp(argv[1], "answer") == 0)
		return cmd_answer(argv[2], argv[3], argv[4], argv[5]);
	fprintf(stderr, "usage: tpm-check evidence EVIDENCE CSR ROOT ISSUER\n"
			"       tpm-check challenge EVIDENCE CHALLENGE_OUT SECRET_OUT\n"
			"       tpm-check answer ANSWER EVIDENCE CSR SECRET\n");
	return 2;
}
