/*
 * jose-tool: a small command line over src/common for interoperability tests.
 *
 *   jose-tool sign KEY.pem [KID] < payload > jws
 *   jose-tool verify PUB.jwk < jws > payload          (exit 1 on failure)
 *   jose-tool verify-any PUB.jwk < jws > payload      (RS/PS/ES 256-512, an EC or RSA JWK)
 *   jose-tool x5c-verify < jws > payload              (x5c JWS, the leaf's key)
 *   jose-tool seal PUB.jwk HDRNAME HDRVALUE < pt > jwe
 *   jose-tool open KEY.pem HDRNAME < jwe > pt         (header value on stderr)
 *   jose-tool jwk KEY.pem                              (public JWK on stdout)
 *   jose-tool thumbprint KEY.pem                       (RFC 7638 thumbprint)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "bc_common.h"

/* Bound of anything read from stdin or a JWK file. */
#define INPUT_MAX (BC_JOSE_MAX + 1)

/* Print usage to stream. */
static void
usage(FILE *stream)
{
	fputs("usage:\n"
		  "  jose-tool sign KEY.pem [KID] < payload > jws\n"
		  "  jose-tool verify PUB.jwk < jws > payload\n"
		  "  jose-tool verify-any PUB.jwk < jws > payload (RS/PS/ES 256-512)\n"
		  "  jose-tool x5c-verify < jws > payload      (x5c JWS: ES256/ES384/RS256/PS256)\n"
		  "  jose-tool seal PUB.jwk HDRNAME HDRVALUE < plaintext > jwe\n"
		  "  jose-tool open KEY.pem HDRNAME < jwe > plaintext\n"
		  "      (prints the value of header member HDRNAME on stderr, one line)\n"
		  "  jose-tool jwk KEY.pem\n"
		  "  jose-tool thumbprint KEY.pem\n"
		  "KEY.pem is a P-256 private key in PEM; PUB.jwk a file holding a public JWK.\n"
		  "Exit status: 0 success, 1 failure (verification included), 2 usage.\n",
		  stream);
}

/* Read all of stream (at most INPUT_MAX bytes) into a malloc()ed, NUL-terminated buffer. */
static int
read_stream(FILE *stream, char **out, size_t *len)
{
	char	   *buf = malloc(INPUT_MAX + 1);
	size_t		got = 0;
	size_t		n;

	*out = NULL;
	if (buf == NULL)
		return BC_ENOMEM;
	while ((n = fread(buf + got, 1, INPUT_MAX + 1 - got, stream)) > 0)
	{
		got += n;
		if (got > INPUT_MAX)
		{
			free(buf);
			return BC_ETOOBIG;
		}
	}
	if (ferror(stream))
	{
		free(buf);
		return BC_EINVAL;
	}
	buf[got] = '\0';
	*out = buf;
	*len = got;
	return BC_OK;
}

/* Read a whole file (bounded) by path. */
static int
read_path(const char *path, char **out, size_t *len)
{
	FILE	   *f = fopen(path, "rb");
	int			rc;

	if (f == NULL)
		return BC_EINVAL;
	rc = read_stream(f, out, len);
	fclose(f);
	return rc;
}

/* Drop trailing white space (a newline after a compact serialization). */
static void
trim_trailing_space(char *s, size_t *len)
{
	while (*len > 0 && (s[*len - 1] == '\n' || s[*len - 1] == '\r' ||
						s[*len - 1] == ' ' || s[*len - 1] == '\t'))
		s[--(*len)] = '\0';
}

/* Load a public key from a JWK file. */
static int
load_jwk(const char *path, EVP_PKEY **key)
{
	char	   *json = NULL;
	size_t		len = 0;
	int			rc = read_path(path, &json, &len);

	if (rc == BC_OK)
		rc = bc_pkey_from_jwk(json, len, key);
	free(json);
	return rc;
}

/* Load a private key, printing the reason on failure. */
static EVP_PKEY *
load_private(const char *path)
{
	char		err[512];
	EVP_PKEY   *key = bc_pkey_read_pem_file(path, 1, err, sizeof(err));

	if (key == NULL)
		fprintf(stderr, "jose-tool: %s: %s\n", path, err);
	return key;
}

/* jose-tool sign KEY.pem [KID] */
static int
cmd_sign(int argc, char **argv)
{
	EVP_PKEY   *key = NULL;
	char	   *payload = NULL;
	size_t		len = 0;
	char	   *jws = NULL;
	int			rc = BC_EINVAL;

	if (argc < 3 || argc > 4)
	{
		usage(stderr);
		return 2;
	}
	key = load_private(argv[2]);
	if (key == NULL)
		goto out;
	rc = read_stream(stdin, &payload, &len);
	if (rc == BC_OK)
		rc = bc_jws_sign_es256(key, argc == 4 ? argv[3] : NULL,
							   (unsigned char *) payload, len, &jws);
	if (rc == BC_OK)
		printf("%s\n", jws);
out:
	if (rc != BC_OK)
		fprintf(stderr, "jose-tool sign: %s\n", bc_status_str(rc));
	free(jws);
	free(payload);
	EVP_PKEY_free(key);
	return rc == BC_OK ? 0 : 1;
}

/* jose-tool verify PUB.jwk */
static int
cmd_verify(int argc, char **argv)
{
	EVP_PKEY   *key = NULL;
	char	   *jws = NULL;
	size_t		len = 0;
	unsigned char *payload = NULL;
	size_t		payload_len = 0;
	int			rc;

	if (argc != 3)
	{
		usage(stderr);
		return 2;
	}
	rc = load_jwk(argv[2], &key);
	if (rc == BC_OK)
		rc = read_stream(stdin, &jws, &len);
	if (rc == BC_OK)
	{
		trim_trailing_space(jws, &len);
		rc = bc_jws_verify_es256(key, jws, len, BC_JOSE_MAX, &payload, &payload_len);
	}
	if (rc == BC_OK && fwrite(payload, 1, payload_len, stdout) != payload_len)
		rc = BC_EINVAL;
	if (rc != BC_OK)
		fprintf(stderr, "jose-tool verify: %s\n", bc_status_str(rc));
	free(payload);
	free(jws);
	EVP_PKEY_free(key);
	return rc == BC_OK ? 0 : 1;
}

/* jose-tool verify-any PUB.jwk: bc_pkey_from_jwk_any + bc_jws_verify_any; the payload on stdout. */
static int
cmd_verify_any(int argc, char **argv)
{
	EVP_PKEY   *key = NULL;
	char	   *text = NULL;
	size_t		text_len = 0;
	json_t	   *jwk = NULL;
	char	   *jws = NULL;
	size_t		len = 0;
	unsigned char *payload = NULL;
	size_t		payload_len = 0;
	int			rc;
	FILE	   *f;

	if (argc != 3)
	{
		usage(stderr);
		return 2;
	}
	f = fopen(argv[2], "r");
	rc = f != NULL ? read_stream(f, &text, &text_len) : BC_EINVAL;
	if (f != NULL)
		fclose(f);
	if (rc == BC_OK)
	{
		jwk = json_loadb(text, text_len, 0, NULL);
		rc = bc_pkey_from_jwk_any(jwk, &key);
	}
	if (rc == BC_OK)
		rc = read_stream(stdin, &jws, &len);
	if (rc == BC_OK)
	{
		trim_trailing_space(jws, &len);
		rc = bc_jws_verify_any(key, jws, len, BC_JOSE_MAX, &payload, &payload_len);
	}
	if (rc == BC_OK && fwrite(payload, 1, payload_len, stdout) != payload_len)
		rc = BC_EINVAL;
	if (rc != BC_OK)
		fprintf(stderr, "jose-tool verify-any: %s\n", bc_status_str(rc));
	free(payload);
	free(jws);
	free(text);
	json_decref(jwk);
	EVP_PKEY_free(key);
	return rc == BC_OK ? 0 : 1;
}

/* jose-tool x5c-verify: parse and verify an x5c JWS; the payload on stdout. */
static int
cmd_x5c_verify(int argc, char **argv)
{
	char	   *jws = NULL;
	size_t		len = 0;
	bc_x5c_jws	j;
	int			fault = BC_X5C_NONE;
	int			rc;

	(void) argv;
	memset(&j, 0, sizeof(j));
	if (argc != 2)
	{
		usage(stderr);
		return 2;
	}
	rc = read_stream(stdin, &jws, &len);
	if (rc == BC_OK)
	{
		trim_trailing_space(jws, &len);
		rc = bc_jws_x5c_parse(jws, len, BC_JOSE_MAX, &j, &fault);
	}
	if (rc == BC_OK)
		rc = bc_jws_x5c_verify(&j, jws);
	if (rc == BC_OK && fwrite(j.payload, 1, j.payload_len, stdout) != j.payload_len)
		rc = BC_EINVAL;
	if (rc != BC_OK)
		fprintf(stderr, "jose-tool x5c-verify: %s (fault %d)\n", bc_status_str(rc), fault);
	bc_x5c_jws_free(&j);
	free(jws);
	return rc == BC_OK ? 0 : 1;
}

/* jose-tool seal PUB.jwk HDRNAME HDRVALUE */
static int
cmd_seal(int argc, char **argv)
{
	EVP_PKEY   *key = NULL;
	char	   *pt = NULL;
	size_t		len = 0;
	char	   *jwe = NULL;
	int			rc;

	if (argc != 5)
	{
		usage(stderr);
		return 2;
	}
	rc = load_jwk(argv[2], &key);
	if (rc == BC_OK)
		rc = read_stream(stdin, &pt, &len);
	if (rc == BC_OK)
		rc = bc_jwe_seal(key, argv[3], argv[4], (unsigned char *) pt, len, &jwe);
	if (rc == BC_OK)
		printf("%s\n", jwe);
	else
		fprintf(stderr, "jose-tool seal: %s\n", bc_status_str(rc));
	if (pt != NULL)
		bc_free_secret(pt, len);
	free(jwe);
	EVP_PKEY_free(key);
	return rc == BC_OK ? 0 : 1;
}

/* jose-tool open KEY.pem HDRNAME */
static int
cmd_open(int argc, char **argv)
{
	EVP_PKEY   *key = NULL;
	char	   *jwe = NULL;
	size_t		len = 0;
	char	   *value = NULL;
	unsigned char *pt = NULL;
	size_t		pt_len = 0;
	int			rc = BC_EINVAL;

	if (argc != 4)
	{
		usage(stderr);
		return 2;
	}
	key = load_private(argv[2]);
	if (key == NULL)
		goto out;
	rc = read_stream(stdin, &jwe, &len);
	if (rc != BC_OK)
		goto out;
	trim_trailing_space(jwe, &len);
	rc = bc_jwe_open(key, jwe, len, BC_JOSE_MAX, argv[3], &value, &pt, &pt_len);
	if (rc != BC_OK)
		goto out;
	fprintf(stderr, "%s\n", value);
	if (fwrite(pt, 1, pt_len, stdout) != pt_len)
		rc = BC_EINVAL;
out:
	if (rc != BC_OK)
		fprintf(stderr, "jose-tool open: %s\n", bc_status_str(rc));
	if (pt != NULL)
		bc_free_secret(pt, pt_len + 1);
	free(value);
	free(jwe);
	EVP_PKEY_free(key);
	return rc == BC_OK ? 0 : 1;
}

/* jose-tool jwk KEY.pem and jose-tool thumbprint KEY.pem */
static int
cmd_jwk(int argc, char **argv, int thumbprint)
{
	EVP_PKEY   *key;
	char	   *jwk = NULL;
	char		tp[44];
	int			rc;

	if (argc != 3)
	{
		usage(stderr);
		return 2;
	}
	key = load_private(argv[2]);
	if (key == NULL)
		return 1;
	if (thumbprint)
		rc = bc_jwk_thumbprint(key, tp);
	else
		rc = bc_jwk_from_pkey(key, &jwk);
	if (rc == BC_OK)
		printf("%s\n", thumbprint ? tp : jwk);
	else
		fprintf(stderr, "jose-tool: %s\n", bc_status_str(rc));
	free(jwk);
	EVP_PKEY_free(key);
	return rc == BC_OK ? 0 : 1;
}

/* Dispatch on the subcommand. */
int
main(int argc, char **argv)
{
	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
	{
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (strcmp(argv[1], "sign") == 0)
		return cmd_sign(argc, argv);
	if (strcmp(argv[1], "verify") == 0)
		return cmd_verify(argc, argv);
	if (strcmp(argv[1], "verify-any") == 0)
		return cmd_verify_any(argc, argv);
	if (strcmp(argv[1], "x5c-verify") == 0)
		return cmd_x5c_verify(argc, argv);
	if (strcmp(argv[1], "seal") == 0)
		return cmd_seal(argc, argv);
	if (strcmp(argv[1], "open") == 0)
		return cmd_open(argc, argv);
	if (strcmp(argv[1], "jwk") == 0)
		return cmd_jwk(argc, argv, 0);
	if (strcmp(argv[1], "thumbprint") == 0)
		return cmd_jwk(argc, argv, 1);
	usage(stderr);
	return 2;
}
