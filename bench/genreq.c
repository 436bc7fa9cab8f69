/*
 * genreq.c: make JoinRequests in bulk for the benchmarks, as bcd join-request
 * makes one: a fresh P-256 key and CSR per request (no subject, signed with
 * SHA-256), the join token sealed to the service's encryption key (JWE
 * ECDH-ES + A256GCM, header csrSha256), claims {hostname, arch}.
 *
 *   genreq SERVICE_KEYS TOKENS START COUNT OUT_PREFIX
 *
 * Request i (START <= i < START + COUNT) uses line (i mod T) of TOKENS.
 * Writes OUT_PREFIX.rows: "i<TAB>JoinRequest JSON" (COPY text format), and
 * OUT_PREFIX.cfssl: one cfssl sign body {"certificate_request": "<PEM>"} per
 * line, for the same CSRs.  Built by bench/run from src/common only:
 *   cc -O2 -D_GNU_SOURCE -Isrc/common bench/genreq.c src/common/[*].c -lssl -lcrypto -ljansson
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "bc_common.h"

static void
die(const char *what, int rc)
{
	fprintf(stderr, "genreq: %s (%s)\n", what, bc_status_str(rc));
	exit(1);
}

int
main(int argc, char **argv)
{
	json_error_t jerr;
	json_t	   *keys;
	json_t	   *claims;
	char	   *jwk;
	EVP_PKEY   *enc = NULL;
	char	  **tokens = NULL;
	size_t		ntok = 0;
	char		line[4096];
	FILE	   *tf;
	FILE	   *rows;
	FILE	   *cf;
	long		start;
	long		count;
	long		i;
	char		path[4096];
	int			rc;

	if (argc != 6)
	{
		fprintf(stderr, "usage: genreq SERVICE_KEYS TOKENS START COUNT OUT_PREFIX\n");
		return 2;
	}
	start = atol(argv[3]);
	count = atol(argv[4]);

	keys = json_load_file(argv[1], 0, &jerr);
	if (keys == NULL)
		die("cannot read the service keys", BC_EINVAL);
	jwk = json_dumps(json_object_get(keys, "encryptionKey"), JSON_COMPACT);
	if (jwk == NULL)
		die("no encryptionKey in the service keys", BC_EINVAL);
	rc = bc_pkey_from_jwk(jwk, strlen(jwk), &enc);
	if (rc != BC_OK)
		die("bad encryptionKey", rc);

	tf = fopen(argv[2], "r");
	if (tf == NULL)
		die("cannot open the tokens", BC_EINVAL);
	while (fgets(line, sizeof(line), tf) != NULL)
	{
		line[strcspn(line, "\r\n")] = '\0';
		if (line[0] == '\0')
			continue;
		tokens = realloc(tokens, sizeof(char *) * (ntok + 1));
		tokens[ntok++] = strdup(line);
	}
	fclose(tf);
	if (ntok == 0)
		die("no tokens", BC_EINVAL);

	snprintf(path, sizeof(path), "%s.rows", argv[5]);
	rows = fopen(path, "w");
	snprintf(path, sizeof(path), "%s.cfssl", argv[5]);
	cf = fopen(path, "w");
	if (rows == NULL || cf == NULL)
		die("cannot write the output", BC_EINVAL);

	for (i = start; i < start + count; i++)
	{
		EVP_PKEY   *key = bc_p256_generate();
		unsigned char *csr = NULL;
		size_t		csr_len = 0;
		unsigned char digest[BC_SHA256_LEN];
		char		csr_sha256[64];
		char	   *csr64;
		char	   *csrb64;
		char	   *sealed = NULL;
		char		host[64];
		json_t	   *req;
		char	   *text;
		const char *tok = tokens[i % (long) ntok];
		size_t		k;
		size_t		b64len;

		if (key == NULL)
			die("cannot generate a key", BC_ECRYPTO);
		rc = bc_csr_create(key, NULL, &csr, &csr_len);
		if (rc != BC_OK)
			die("cannot make a CSR", rc);
		bc_sha256(csr, csr_len, digest);
		bc_b64url_encode(digest, sizeof(digest), csr_sha256);
		rc = bc_jwe_seal(enc, "csrSha256", csr_sha256, (const unsigned char *) tok,
						 strlen(tok), &sealed);
		if (rc != BC_OK)
			die("cannot seal the token", rc);
		csr64 = malloc(bc_b64url_encoded_len(csr_len) + 1);
		bc_b64url_encode(csr, csr_len, csr64);
		snprintf(host, sizeof(host), "bench-%ld", i);
		claims = json_pack("{s:s, s:s}", "hostname", host, "arch", "x86_64");
		req = json_pack("{s:s, s:s, s:s, s:s, s:o}", "csr", csr64, "role", "node",
						"attestor", "join-token", "sealedToken", sealed, "claims", claims);
		text = json_dumps(req, JSON_COMPACT | JSON_PRESERVE_ORDER);
		fprintf(rows, "%ld\t%s\n", i, text);

		/* The same CSR as PEM, newlines escaped for JSON. */
		csrb64 = malloc(bc_b64_encoded_len(csr_len) + 1);
		b64len = bc_b64_encode(csr, csr_len, csrb64);
		fputs("{\"certificate_request\":\"-----BEGIN CERTIFICATE REQUEST-----\\n", cf);
		for (k = 0; k < b64len; k += 64)
			fprintf(cf, "%.64s\\n", csrb64 + k);
		fputs("-----END CERTIFICATE REQUEST-----\\n\"}\n", cf);

		free(text);
		json_decref(req);
		free(csrb64);
		free(csr64);
		bc_free(sealed);
		bc_free(csr);
		EVP_PKEY_free(key);
	}
	if (fclose(rows) != 0 || fclose(cf) != 0)
		die("cannot write the output", BC_EINVAL);
	return 0;
}
