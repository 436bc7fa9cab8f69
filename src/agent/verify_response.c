/*
 * verify_response.c: `bcd verify-response`: check a bc_join() response
 * against the pinned signing key and our own CSR before using anything in
 * it; on "issued", check and store the certificate chain.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>
#include <openssl/bio.h>
#include <openssl/pem.h>

#include "bc_common.h"
#include "bcd.h"

/* Bound of a response document (a JWS plus the outer JSON). */
#define RESPONSE_MAX (BC_JOSE_MAX + 4096)
/* Most certificates accepted in certificateChain. */
#define CHAIN_MAX 8

/* What the command line asked for. */
typedef struct verify_opts
{
	const char *service_keys;
	const char *dir;
	const char *response;
} verify_opts;

/* Print the usage of bcd verify-response to stream. */
static void
verify_usage(FILE *stream)
{
	fputs("usage: bcd verify-response --service-keys FILE --dir DIR --response FILE|-\n"
		  "\n"
		  "Verifies a bc_join() response ({\"status\",\"response\":JWS} or the bare JWS)\n"
		  "with the pinned signing key and DIR/node.csr.der.  On \"issued\" checks the\n"
		  "certificate against DIR/node.key and the pinned node CA, writes\n"
		  "DIR/node-chain.pem and prints the SPIFFE ID and notAfter, one per line.\n"
		  "Exit status: 0 issued, 1 failure (nothing written), 2 refused,\n"
		  "3 pending or challenge (printed on stdout), 64 usage.\n",
		  stream);
}

/* Parse argv into opts; BCD_EXIT_OK, -1 after --help, or a usage exit code. */
static int
parse_verify_args(int argc, char **argv, verify_opts *opts)
{
	static const struct option longopts[] = {
		{"service-keys", required_argument, NULL, 's'},
		{"dir", required_argument, NULL, 'd'},
		{"response", required_argument, NULL, 'r'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	int			c;

	memset(opts, 0, sizeof(*opts));
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1)
	{
		switch (c)
		{
			case 's': opts->service_keys = optarg; break;
			case 'd': opts->dir = optarg; break;
			case 'r': opts->response = optarg; break;
			case 'h':
				verify_usage(stdout);
				return -1;
			default:
				verify_usage(stderr);
				return BCD_EXIT_USAGE;
		}
	}
	if (optind != argc || opts->service_keys == NULL || opts->dir == NULL ||
		opts->response == NULL)
	{
		verify_usage(stderr);
		return BCD_EXIT_USAGE;
	}
	return BCD_EXIT_OK;
}

/* 1 when s is a refusal code we are willing to print: [A-Z_], 1 to 64 chars. */
static int
is_printable_code(const char *s)
{
	size_t		i;

	for (i = 0; s[i] != '\0'; i++)
	{
		if (i >= 64 || !((s[i] >= 'A' && s[i] <= 'Z') || s[i] == '_'))
			return 0;
	}
	return i > 0;
}

/*
 * Find the JWS in the response text: the "response" member of the outer
 * object, or the whole (trimmed) text.  An outer refusal is BCD_EXIT_REFUSED.
 */
static int
extract_jws(char *text, size_t len, char **jws, size_t *jws_len)
{
	json_t	   *outer;
	json_t	   *member;
	json_error_t jerr;
	const char *code = "ACCESS_DENIED";
	int			exit_code = BCD_EXIT_FAIL;

	while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' ||
					   text[len - 1] == ' ' || text[len - 1] == '\t'))
		text[--len] = '\0';
	while (len > 0 && (*text == ' ' || *text == '\n' || *text == '\t' || *text == '\r'))
	{
		text++;
		len--;
	}
	if (len == 0 || text[0] != '{')
	{
		*jws = strdup(text);
		*jws_len = len;
		return *jws == NULL ? BCD_EXIT_FAIL : BCD_EXIT_OK;
	}
	outer = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!json_is_object(outer))
	{
		fprintf(stderr, "bcd verify-response: the response is not valid JSON\n");
		goto out;
	}
	member = json_object_get(outer, "status");
	if (json_is_string(member) && strcmp(json_string_value(member), "refused") == 0)
	{
		member = json_object_get(json_object_get(outer, "error"), "code");
		if (json_is_string(member) && is_printable_code(json_string_value(member)))
			code = json_string_value(member);
		fprintf(stderr, "refused: %s\n", code);
		exit_code = BCD_EXIT_REFUSED;
		goto out;
	}
	member = json_object_get(outer, "response");
	if (!json_is_string(member))
	{
		fprintf(stderr, "bcd verify-response: the response has no signed \"response\"\n");
		goto out;
	}
	*jws = strdup(json_string_value(member));
	*jws_len = json_string_length(member);
	exit_code = *jws == NULL ? BCD_EXIT_FAIL : BCD_EXIT_OK;
out:
	json_decref(outer);
	return exit_code;
}

/* base64url(SHA-256(DIR/node.csr.der)) into out (44 bytes). */
static int
our_csr_sha256(const char *dir, char out[44])
{
	char	   *path = bcd_path_join(dir, "node.csr.der");
	char	   *der = NULL;
	size_t		len = 0;
	unsigned char digest[BC_SHA256_LEN];
	int			rc = BC_ENOMEM;

	if (path != NULL)
		rc = bcd_read_file(path, BC_DER_MAX, &der, &len);
	if (rc == BC_OK)
		rc = bc_sha256(der, len, digest);
	if (rc == BC_OK)
		bc_b64url_encode(digest, sizeof(digest), out);
	free(der);
	free(path);
	return rc;
}

/* The string member name of obj, or NULL. */
static const char *
string_member(json_t *obj, const char *name)
{
	json_t	   *member = json_object_get(obj, name);

	return json_is_string(member) ? json_string_value(member) : NULL;
}

/* Print a pending or challenge deferral on stdout. */
static void
print_deferral(json_t *payload, const char *status)
{
	json_t	   *retry = json_object_get(payload, "retryAfterSeconds");
	const char *value;

	printf("%s\n", status);
	if ((value = string_member(payload, "requestId")) != NULL)
		printf("requestId: %s\n", value);
	if (json_is_integer(retry))
		printf("retryAfterSeconds: %lld\n", (long long) json_integer_value(retry));
	if ((value = string_member(payload, "challenge")) != NULL)
		printf("challenge: %s\n", value);
	if ((value = string_member(payload, "notAfter")) != NULL)
		printf("notAfter: %s\n", value);
}

/* Decode certificateChain (standard base64 DER, leaf first) into certs. */
static int
decode_chain(json_t *payload, X509 **certs, size_t *n_certs)
{
	json_t	   *chain = json_object_get(payload, "certificateChain");
	unsigned char *der = NULL;
	size_t		der_len;
	size_t		i;
	int			rc = BC_EINVAL;

	*n_certs = 0;
	if (!json_is_array(chain) || json_array_size(chain) == 0 ||
		json_array_size(chain) > CHAIN_MAX)
		return BC_EINVAL;
	der = malloc(BC_DER_MAX);
	if (der == NULL)
		return BC_ENOMEM;
	for (i = 0; i < json_array_size(chain); i++)
	{
		json_t	   *item = json_array_get(chain, i);

		rc = BC_EINVAL;
		if (!json_is_string(item))
			break;
		rc = bc_b64_decode(json_string_value(item), json_string_length(item),
						   der, BC_DER_MAX, &der_len);
		if (rc == BC_OK)
			rc = bc_cert_parse(der, der_len, &certs[i]);
		if (rc != BC_OK)
			break;
		(*n_certs)++;
	}
	free(der);
	return rc;
}

/* PEM of the leaf followed by the pinned CA, malloc()ed. */
static int
chain_pem(X509 *leaf, X509 *ca, char **out, size_t *len)
{
	BIO		   *bio = BIO_new(BIO_s_mem());
	char	   *data = NULL;
	long		n;
	int			rc = BC_ECRYPTO;

	*out = NULL;
	if (bio == NULL || PEM_write_bio_X509(bio, leaf) != 1 ||
		PEM_write_bio_X509(bio, ca) != 1)
		goto out;
	n = BIO_get_mem_data(bio, &data);
	rc = BC_ENOMEM;
	if (n <= 0 || (*out = malloc((size_t) n)) == NULL)
		goto out;
	memcpy(*out, data, (size_t) n);
	*len = (size_t) n;
	rc = BC_OK;
out:
	BIO_free(bio);
	return rc;
}

/* The expected SPIFFE ID prefix or exact ID, checked against the leaf's. */
static int
check_spiffe_id(const char *spiffe, const char *trust_domain, json_t *payload)
{
	const char *tenant = string_member(payload, "tenantId");
	const char *node = string_member(payload, "nodeId");
	char		want[1024];
	int			n;

	if (tenant != NULL && node != NULL)
	{
		n = snprintf(want, sizeof(want), "spiffe://%s/tenant/%s/node/%s",
					 trust_domain, tenant, node);
		return n > 0 && (size_t) n < sizeof(want) && strcmp(spiffe, want) == 0;
	}
	n = snprintf(want, sizeof(want), "spiffe://%s/", trust_domain);
	return n > 0 && (size_t) n < sizeof(want) && strncmp(spiffe, want, (size_t) n) == 0;
}

/* The leaf's notAfter as ISO 8601 UTC into buf. */
static void
cert_not_after(X509 *cert, char *buf, size_t len)
{
	struct tm	tm;

	buf[0] = '\0';
	if (ASN1_TIME_to_tm(X509_get0_notAfter(cert), &tm) == 1)
		strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Check and store an issued certificate; print its SPIFFE ID and notAfter. */
static int
accept_issued(const verify_opts *opts, const bcd_service_keys *keys, json_t *payload)
{
	X509	   *certs[CHAIN_MAX] = {NULL};
	size_t		n_certs = 0;
	EVP_PKEY   *node_key = NULL;
	char	   *key_path = NULL;
	char		err[512];
	char	   *spiffe = NULL;
	char	   *pem = NULL;
	size_t		pem_len = 0;
	char		not_after[64];
	const char *what = "certificateChain is not a list of base64 DER certificates";
	size_t		i;
	int			rc;

	rc = decode_chain(payload, certs, &n_certs);
	if (rc != BC_OK)
		goto out;
	what = "cannot read node.key";
	rc = BC_ENOMEM;
	key_path = bcd_path_join(opts->dir, "node.key");
	if (key_path == NULL)
		goto out;
	rc = BC_EINVAL;
	node_key = bc_pkey_read_pem_file(key_path, 1, err, sizeof(err));
	if (node_key == NULL)
		goto out;
	what = "the certificate is not for our node key";
	rc = BC_EVERIFY;
	if (EVP_PKEY_eq(X509_get0_pubkey(certs[0]), node_key) != 1)
		goto out;
	what = "the certificate does not verify against the pinned node CA";
	rc = bc_cert_verify_chain(certs[0], keys->node_ca, 0);
	if (rc != BC_OK)
		goto out;
	what = "the certificate's SPIFFE ID is missing or not the one answered";
	rc = bc_cert_uri_san(certs[0], "spiffe://", &spiffe);
	if (rc != BC_OK)
		goto out;
	rc = BC_EVERIFY;
	if (!check_spiffe_id(spiffe, keys->trust_domain, payload))
		goto out;
	what = "cannot write node-chain.pem";
	rc = chain_pem(certs[0], keys->node_ca, &pem, &pem_len);
	if (rc == BC_OK)
		rc = bcd_write_file_atomic(opts->dir, "node-chain.pem", pem, pem_len, 0644);
	if (rc != BC_OK)
		goto out;
	if (string_member(payload, "notAfter") != NULL)
		snprintf(not_after, sizeof(not_after), "%s", string_member(payload, "notAfter"));
	else
		cert_not_after(certs[0], not_after, sizeof(not_after));
	printf("%s\n%s\n", spiffe, not_after);
out:
	if (rc != BC_OK)
		fprintf(stderr, "bcd verify-response: %s (%s)\n", what, bc_status_str(rc));
	free(pem);
	free(spiffe);
	EVP_PKEY_free(node_key);
	free(key_path);
	for (i = 0; i < n_certs; i++)
		X509_free(certs[i]);
	return rc;
}

/* Verify the signed payload, bind it to our CSR, then act on its status. */
static int
verify_signed(const verify_opts *opts, const bcd_service_keys *keys,
			  const char *jws, size_t jws_len)
{
	unsigned char *raw = NULL;
	size_t		raw_len = 0;
	json_t	   *payload = NULL;
	json_error_t jerr;
	char		want[44];
	const char *got;
	const char *status;
	int			exit_code = BCD_EXIT_FAIL;
	int			rc;

	rc = bc_jws_verify_es256(keys->signing_key, jws, jws_len, BC_JOSE_MAX,
							 &raw, &raw_len);
	if (rc != BC_OK)
	{
		fprintf(stderr, "bcd verify-response: the response signature does not verify "
				"with the pinned signing key (%s)\n", bc_status_str(rc));
		goto out;
	}
	payload = json_loadb((const char *) raw, raw_len, JSON_REJECT_DUPLICATES, &jerr);
	if (!json_is_object(payload))
	{
		fprintf(stderr, "bcd verify-response: the signed payload is not a JSON object\n");
		goto out;
	}
	if (our_csr_sha256(opts->dir, want) != BC_OK)
	{
		fprintf(stderr, "bcd verify-response: cannot read %s/node.csr.der\n", opts->dir);
		goto out;
	}
	got = string_member(payload, "csrSha256");
	if (got == NULL || strlen(got) != strlen(want) || !bc_ct_equal(got, want, strlen(want)))
	{
		fprintf(stderr, "bcd verify-response: the response answers another CSR\n");
		goto out;
	}
	status = string_member(payload, "status");
	if (status == NULL)
		fprintf(stderr, "bcd verify-response: the signed payload has no status\n");
	else if (strcmp(status, "issued") == 0)
		exit_code = accept_issued(opts, keys, payload) == BC_OK ?
			BCD_EXIT_OK : BCD_EXIT_FAIL;
	else if (strcmp(status, "pending") == 0 || strcmp(status, "challenge") == 0)
	{
		print_deferral(payload, status);
		exit_code = BCD_EXIT_DEFERRED;
	}
	else if (strcmp(status, "refused") == 0)
	{
		fprintf(stderr, "refused: ACCESS_DENIED\n");
		exit_code = BCD_EXIT_REFUSED;
	}
	else
		fprintf(stderr, "bcd verify-response: unknown status in the signed payload\n");
out:
	json_decref(payload);
	free(raw);
	return exit_code;
}

/* bcd verify-response ... */
int
bcd_cmd_verify_response(int argc, char **argv)
{
	verify_opts opts;
	bcd_service_keys keys;
	char		err[512];
	char	   *text = NULL;
	size_t		len = 0;
	char	   *jws = NULL;
	size_t		jws_len = 0;
	int			exit_code;

	exit_code = parse_verify_args(argc, argv, &opts);
	if (exit_code < 0)
		return BCD_EXIT_OK;
	if (exit_code != BCD_EXIT_OK)
		return exit_code;
	if (bcd_service_keys_load(opts.service_keys, &keys, err, sizeof(err)) != BC_OK)
	{
		fprintf(stderr, "bcd verify-response: %s\n", err);
		return BCD_EXIT_FAIL;
	}
	exit_code = BCD_EXIT_FAIL;
	if (bcd_read_file(opts.response, RESPONSE_MAX, &text, &len) != BC_OK)
	{
		fprintf(stderr, "bcd verify-response: cannot read the response (at most %d bytes)\n",
				RESPONSE_MAX);
		goto out;
	}
	exit_code = extract_jws(text, len, &jws, &jws_len);
	if (exit_code == BCD_EXIT_OK)
		exit_code = verify_signed(&opts, &keys, jws, jws_len);
out:
	free(jws);
	free(text);
	bcd_service_keys_free(&keys);
	return exit_code;
}
