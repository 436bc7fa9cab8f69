/*
 * join_request.c: `bcd join-request`: make a node key and CSR, seal the join
 * token to the service's encryption key and print the JoinRequest JSON.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <jansson.h>

#include "bc_common.h"
#include "bcd.h"

/* Bound of the --claims JSON. */
#define CLAIMS_MAX (16 * 1024)
/* Bound of the attestor's evidence bytes (the service takes 48 KiB of base64url). */
#define ATTESTATION_MAX (32 * 1024)
_Static_assert((ATTESTATION_MAX + 2) / 3 * 4 <= BC_ATTESTATION_B64_MAX,
			   "the evidence must fit the service's bound once encoded");

/* What the command line asked for. */
typedef struct join_request_opts
{
	const char *service_keys;
	const char *token;
	const char *token_file;
	const char *out_dir;
	const char *role;
	const char *attestor;
	const char *claims;
	const char *hostname;
	const char *attestation_file;
} join_request_opts;

/* Print the usage of bcd join-request to stream. */
static void
join_request_usage(FILE *stream)
{
	fputs("usage: bcd join-request --service-keys FILE [--token TOKEN | --token-file FILE]\n"
		  "                        --out-dir DIR [--role node|site|ramdisk]\n"
		  "                        [--attestor ID] [--attestation-file FILE]\n"
		  "                        [--claims JSON] [--hostname H]\n"
		  "\n"
		  "Makes a P-256 node key (DIR/node.key, 0600; DIR is created 0700) and a\n"
		  "CSR (DIR/node.csr.der), or reuses both when DIR already holds them (one\n"
		  "key and one CSR for every round of a join), seals the token to the\n"
		  "service's encryption key (JWE ECDH-ES+A256GCM, header csrSha256) and\n"
		  "prints the JoinRequest JSON.\n"
		  "  --service-keys FILE  the JSON of bc_join.service_keys()\n"
		  "  --token-file FILE    token read from FILE, one trailing newline stripped\n"
		  "                       (no token: the request carries no sealedToken)\n"
		  "  --attestation-file F the attestor's evidence bytes (at most 32 KiB)\n"
		  "  --role               default node\n"
		  "  --attestor           default join-token\n"
		  "  --claims JSON        object replacing the default {hostname, arch}\n"
		  "  --hostname H         claims.hostname (default: gethostname())\n",
		  stream);
}

/* Parse argv into opts; BCD_RC_OK (*help set after --help), or BCD_RC_USAGE. */
static bcd_rc
parse_join_request_args(int argc, char **argv, join_request_opts *opts, int *help)
{
	static const struct option longopts[] = {
		{"service-keys", required_argument, NULL, 's'},
		{"token", required_argument, NULL, 't'},
		{"token-file", required_argument, NULL, 'T'},
		{"out-dir", required_argument, NULL, 'o'},
		{"role", required_argument, NULL, 'r'},
		{"attestor", required_argument, NULL, 'a'},
		{"claims", required_argument, NULL, 'c'},
		{"hostname", required_argument, NULL, 'H'},
		{"attestation-file", required_argument, NULL, 'A'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	int			c;

	*help = 0;
	memset(opts, 0, sizeof(*opts));
	opts->role = BC_ROLE_NODE;
	opts->attestor = BC_ATTESTOR_JOIN_TOKEN;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1)
	{
		switch (c)
		{
			case 's': opts->service_keys = optarg; break;
			case 't': opts->token = optarg; break;
			case 'T': opts->token_file = optarg; break;
			case 'o': opts->out_dir = optarg; break;
			case 'r': opts->role = optarg; break;
			case 'a': opts->attestor = optarg; break;
			case 'c': opts->claims = optarg; break;
			case 'H': opts->hostname = optarg; break;
			case 'A': opts->attestation_file = optarg; break;
			case 'h':
				join_request_usage(stdout);
				*help = 1;
				return BCD_RC_OK;
			default:
				join_request_usage(stderr);
				return BCD_RC_USAGE;
		}
	}
	if (optind != argc || opts->service_keys == NULL || opts->out_dir == NULL ||
		(opts->token != NULL && opts->token_file != NULL))
	{
		join_request_usage(stderr);
		return BCD_RC_USAGE;
	}
	if (strcmp(opts->role, BC_ROLE_NODE) != 0 && strcmp(opts->role, BC_ROLE_SITE) != 0 &&
		strcmp(opts->role, BC_ROLE_RAMDISK) != 0)
	{
		fprintf(stderr, "bcd join-request: --role must be node, site or ramdisk\n");
		return BCD_RC_USAGE;
	}
	return BCD_RC_OK;
}

/*
 * The join token: token as given, or read from token_file with one trailing
 * newline stripped; *out is NULL when neither is set.  Release *out with
 * bc_free_secret(*out, *len + 1).
 */
int
bcd_load_token(const char *token, const char *token_file, char **out, size_t *len)
{
	int			rc;

	*out = NULL;
	*len = 0;
	if (token == NULL && token_file == NULL)
		return BC_OK;
	if (token != NULL)
	{
		*len = strlen(token);
		*out = strdup(token);
		rc = *out == NULL ? BC_ENOMEM : BC_OK;
	}
	else
	{
		/* the service's bound (BC_TOKEN_MAX), and room for a trailing CR LF */
		rc = bcd_read_file(token_file, BC_TOKEN_MAX + 2, out, len);
		if (rc == BC_OK && *len > 0 && (*out)[*len - 1] == '\n')
		{
			(*out)[--(*len)] = '\0';
			if (*len > 0 && (*out)[*len - 1] == '\r')
				(*out)[--(*len)] = '\0';
		}
	}
	if (rc == BC_OK && (*len == 0 || *len > BC_TOKEN_MAX || memchr(*out, '\0', *len) != NULL))
	{
		bc_free_secret(*out, *len + 1);
		*out = NULL;
		*len = 0;
		rc = BC_EINVAL;
	}
	return rc;
}

/* The claims object: claims_json, or {hostname, arch}; hostname overrides hostname. */
json_t *
bcd_build_claims(const char *claims_json, const char *hostname)
{
	json_t	   *claims;
	json_error_t jerr;
	char		host[256];
	struct utsname uts;

	if (claims_json != NULL)
	{
		if (strlen(claims_json) > CLAIMS_MAX)
			return NULL;
		claims = json_loads(claims_json, JSON_REJECT_DUPLICATES, &jerr);
		if (!json_is_object(claims))
		{
			json_decref(claims);
			return NULL;
		}
	}
	else
	{
		claims = json_object();
		if (claims == NULL)
			return NULL;
		if (hostname == NULL && gethostname(host, sizeof(host)) == 0)
		{
			host[sizeof(host) - 1] = '\0';
			json_object_set_new(claims, "hostname", json_string(host));
		}
		if (uname(&uts) == 0)
			json_object_set_new(claims, "arch", json_string(uts.machine));
	}
	if (hostname != NULL &&
		json_object_set_new(claims, "hostname", json_string(hostname)) != 0)
	{
		json_decref(claims);
		return NULL;
	}
	return claims;
}

/* Write the new node key as DIR/node.key (0600) via a temporary file and rename. */
static int
write_node_key(const char *dir, EVP_PKEY *key)
{
	char	   *tmp = bcd_path_join(dir, "node.key.tmp");
	char	   *path = bcd_path_join(dir, "node.key");
	int			rc = BC_ENOMEM;

	if (tmp == NULL || path == NULL)
		goto out;
	unlink(tmp);
	rc = bc_pkey_write_pem_file(key, tmp);
	if (rc == BC_OK && rename(tmp, path) != 0)
		rc = BC_EINVAL;
	if (rc != BC_OK)
		unlink(tmp);
out:
	free(tmp);
	free(path);
	return rc;
}

/*
 * The node key and CSR of DIR when both are there (and match), else new ones
 * written there.  One key and one CSR serve every round of a join.
 */
int
bcd_node_key_and_csr(const char *dir, EVP_PKEY **key, unsigned char **csr, size_t *csr_len,
				 const char **what)
{
	char	   *key_path = bcd_path_join(dir, "node.key");
	char	   *csr_path = bcd_path_join(dir, "node.csr.der");
	char		err[256];
	bc_csr	   *req = NULL;
	int			rc = BC_ENOMEM;

	*key = NULL;
	*csr = NULL;
	if (key_path == NULL || csr_path == NULL)
		goto out;
	if (access(key_path, F_OK) == 0 && access(csr_path, F_OK) == 0)
	{
		*what = "cannot reuse DIR/node.key and DIR/node.csr.der";
		rc = BC_EINVAL;
		*key = bc_pkey_read_pem_file(key_path, 1, err, sizeof(err));
		if (*key == NULL)
			goto out;
		rc = bcd_read_file(csr_path, BC_DER_MAX, (char **) csr, csr_len);
		if (rc == BC_OK)
			rc = bc_csr_parse(*csr, *csr_len, &req);
		if (rc == BC_OK && EVP_PKEY_eq(bc_csr_pubkey(req), *key) != 1)
			rc = BC_EINVAL;
		goto out;
	}
	*what = "cannot generate the node key";
	rc = BC_ECRYPTO;
	*key = bc_p256_generate();
	if (*key == NULL)
		goto out;
	*what = "cannot write node.key";
	rc = write_node_key(dir, *key);
	if (rc != BC_OK)
		goto out;
	*what = "cannot create the CSR";
	rc = bc_csr_create(*key, NULL, csr, csr_len);
	if (rc != BC_OK)
		goto out;
	*what = "cannot write node.csr.der";
	rc = bcd_write_file_atomic(dir, "node.csr.der", *csr, *csr_len, 0644);
out:
	if (rc != BC_OK)
	{
		EVP_PKEY_free(*key);
		*key = NULL;
		free(*csr);
		*csr = NULL;
	}
	bc_csr_free(req);
	free(key_path);
	free(csr_path);
	return rc;
}

/* The attestor's evidence from --attestation-file, as base64url (or NULL). */
static int
load_attestation(const char *path, char **b64)
{
	char	   *raw = NULL;
	size_t		len = 0;
	int			rc;

	*b64 = NULL;
	if (path == NULL)
		return BC_OK;
	rc = bcd_read_file(path, ATTESTATION_MAX, &raw, &len);
	if (rc != BC_OK)
		return rc;
	*b64 = bc_b64url_encode_alloc((unsigned char *) raw, len);
	if (*b64 == NULL)
		rc = BC_ENOMEM;
	free(raw);
	return rc;
}

/*
 * The JoinRequest JSON for csr: the token (when not NULL) sealed to the
 * service's encryption key with header csrSha256, the attestation (base64url,
 * may be NULL) and a copy of claims.  *text_out is malloc()ed.
 */
int
bcd_join_request_json(const bcd_service_keys *keys, const unsigned char *csr,
					  size_t csr_len, const char *role, const char *attestor,
					  const char *attestation_b64, const char *token,
					  size_t token_len, json_t *claims, char **text_out)
{
	char		csr_sha256[44];
	char	   *csr64 = NULL;
	char	   *sealed = NULL;
	json_t	   *request = NULL;
	int			rc;

	*text_out = NULL;
	rc = bc_sha256_b64url(csr, csr_len, csr_sha256);
	if (rc != BC_OK)
		goto out;
	if (token != NULL)
	{
		rc = bc_jwe_seal(keys->encryption_key, "csrSha256", csr_sha256,
						 (const unsigned char *) token, token_len, &sealed);
		if (rc != BC_OK)
			goto out;
	}
	rc = BC_ENOMEM;
	csr64 = bc_b64url_encode_alloc(csr, csr_len);
	if (csr64 == NULL)
		goto out;
	request = json_pack("{s:s, s:s, s:s}", "csr", csr64, "role", role,
						"attestor", attestor);
	if (request == NULL ||
		(attestation_b64 != NULL &&
		 json_object_set_new(request, "attestation", json_string(attestation_b64)) != 0) ||
		(sealed != NULL &&
		 json_object_set_new(request, "sealedToken", json_string(sealed)) != 0) ||
		json_object_set(request, "claims", claims) != 0)
		goto out;
	*text_out = json_dumps(request, JSON_COMPACT | JSON_PRESERVE_ORDER);
	if (*text_out != NULL)
		rc = BC_OK;
out:
	json_decref(request);
	free(sealed);
	free(csr64);
	return rc;
}

/* Key, CSR, sealed token and the JoinRequest, printed on stdout. */
static int
make_join_request(const join_request_opts *opts, const bcd_service_keys *keys,
				  const char *token, size_t token_len)
{
	EVP_PKEY   *key = NULL;
	unsigned char *csr = NULL;
	size_t		csr_len = 0;
	char	   *attestation = NULL;
	json_t	   *claims = NULL;
	char	   *text = NULL;
	const char *what = "";
	char		lock_err[1024];
	long		holder;
	int			lock_fd = -1;
	int			rc = BC_EINVAL;

	what = "--claims must be a JSON object";
	claims = bcd_build_claims(opts->claims, opts->hostname);
	if (claims == NULL)
		goto out;
	what = "cannot create the output directory";
	if (bcd_ensure_dir(opts->out_dir) != BC_OK)
		goto out;
	/* DIR may be the state directory of a running bcd: its lock, for the whole write */
	rc = bcd_state_lock(opts->out_dir, &lock_fd, &holder);
	if (rc != BC_OK)
	{
		bcd_state_lock_error(opts->out_dir, rc, holder, lock_err, sizeof(lock_err));
		fprintf(stderr, "bcd join-request: %s; refusing to write in it\n", lock_err);
		rc = BC_EINVAL;
		goto done;
	}
	rc = bcd_node_key_and_csr(opts->out_dir, &key, &csr, &csr_len, &what);
	if (rc != BC_OK)
		goto out;
	what = "cannot read --attestation-file";
	rc = load_attestation(opts->attestation_file, &attestation);
	if (rc != BC_OK)
		goto out;
	what = "cannot build the JoinRequest (sealing the token)";
	rc = bcd_join_request_json(keys, csr, csr_len, opts->role, opts->attestor,
							   attestation, token, token_len, claims, &text);
	if (rc != BC_OK)
		goto out;
	what = "cannot write to standard output";
	rc = printf("%s\n", text) < 0 || fflush(stdout) != 0 ? BC_EINVAL : BC_OK;
out:
	if (rc != BC_OK)
		fprintf(stderr, "bcd join-request: %s (%s)\n", what, bc_status_str(rc));
done:
	if (lock_fd >= 0)
		close(lock_fd);
	free(text);
	json_decref(claims);
	free(attestation);
	free(csr);
	EVP_PKEY_free(key);
	return rc;
}

/* bcd join-request ... */
bcd_rc
bcd_cmd_join_request(int argc, char **argv)
{
	join_request_opts opts;
	bcd_service_keys keys;
	char		err[512];
	char	   *token = NULL;
	size_t		token_len = 0;
	int			help;
	bcd_rc		outcome;
	int			rc;

	outcome = parse_join_request_args(argc, argv, &opts, &help);
	if (outcome != BCD_RC_OK || help)
		return outcome;
	if (bcd_service_keys_load(opts.service_keys, &keys, err, sizeof(err)) != BC_OK)
	{
		fprintf(stderr, "bcd join-request: %s\n", err);
		return BCD_RC_FAILED;
	}
	rc = bcd_load_token(opts.token, opts.token_file, &token, &token_len);
	if (rc != BC_OK)
		fprintf(stderr, "bcd join-request: cannot read a non-empty token (%s)\n",
				bc_status_str(rc));
	else
		rc = make_join_request(&opts, &keys, token, token_len);
	if (token != NULL)
		bc_free_secret(token, token_len + 1);
	bcd_service_keys_free(&keys);
	return rc == BC_OK ? BCD_RC_OK : BCD_RC_FAILED;
}
