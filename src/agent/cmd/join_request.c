/*
 * join_request.c: `bcd join-request`: make a node key and CSR
 * (core/store.c), have the join-token producer seal the token
 * (producers/join_token.c) and print the JoinRequest (core/join_request.c).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <jansson.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "cmd/cmd.h"
#include "core/fileio.h"
#include "core/join_request.h"
#include "core/service_keys.h"
#include "core/store.h"
#include "producers/exec.h"
#include "producers/producer.h"

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
	const char *producer;		/* --producer PATH (kept by producers/exec.c) */
	int			attestor_set;
} join_request_opts;

/* Print the usage of bcd join-request to stream. */
static void
join_request_usage(FILE *stream)
{
	fputs("usage: bcd join-request --service-keys FILE [--token TOKEN | --token-file FILE]\n"
		  "                        --out-dir DIR [--role node|site|ramdisk]\n"
		  "                        [--attestor ID] [--attestation-file FILE]\n"
		  "                        [--producer PATH [--producer-timeout S]]\n"
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
		  "  --producer PATH      the evidence of round 1 from the external producer\n"
		  "                       of --attestor ID (as bcd run --producer; docs/agent.md,\n"
		  "                       \"Writing a producer\"); exits 75 when it says not now\n"
		  "  --producer-timeout S it is killed after S seconds (default 30)\n"
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
		{"producer", required_argument, NULL, 'F'},
		{"producer-timeout", required_argument, NULL, 'Y'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	const char *producer_timeout = NULL;
	const char *bad;
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
			case 'a': opts->attestor = optarg; opts->attestor_set = 1; break;
			case 'F': opts->producer = optarg; break;
			case 'Y': producer_timeout = optarg; break;
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
	if (!bc_role_valid(opts->role))
	{
		fprintf(stderr, "bcd join-request: --role must be node, site or ramdisk\n");
		return BCD_RC_USAGE;
	}
	if (opts->producer != NULL && bcd_producer_builtin(opts->attestor) != NULL)
		bad = "--producer is for a custom attestor; bcd has its own producer of this one";
	else
		bad = bcd_exec_producer_set(opts->producer, producer_timeout, opts->attestor,
									opts->attestor_set);
	if (bad == NULL && opts->producer != NULL && opts->attestation_file != NULL)
		bad = "--producer and --attestation-file exclude each other";
	if (bad != NULL)
	{
		fprintf(stderr, "bcd join-request: %s\n", bad);
		return BCD_RC_USAGE;
	}
	return BCD_RC_OK;
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

/* Key, CSR, sealed token and the JoinRequest, printed on stdout. */
static int
make_join_request(const join_request_opts *opts, const bcd_service_keys *keys,
				  const char *token)
{
	EVP_PKEY   *key = NULL;
	unsigned char *csr = NULL;
	size_t		csr_len = 0;
	char	   *attestation = NULL;
	bcd_producer_input in;
	bcd_evidence ev = {0};
	char		why[512];
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
	in = (bcd_producer_input) {.keys = keys, .csr = csr, .csr_len = csr_len, .token = token,
		.attestor = opts->attestor, .role = opts->role, .claims = claims};
	if (opts->producer != NULL)
	{
		/* the external producer's evidence, and the claims it adds */
		rc = bcd_producer_exec.produce(&in, &ev, why, sizeof(why));
		if (rc != BC_OK)
		{
			fprintf(stderr, "bcd join-request: %s\n", why);
			rc = rc == BCD_PRODUCER_RETRY ? BCD_PRODUCER_RETRY : BC_EINVAL;
			goto done;
		}
		if (ev.claims != NULL && json_object_update(claims, ev.claims) != 0)
			rc = BC_ENOMEM;
		attestation = ev.attestation;
		ev.attestation = NULL;
	}
	else
		rc = bcd_producer_join_token.produce(&in, &ev, why, sizeof(why));
	if (rc == BC_OK)
		rc = bcd_join_request_json(csr, csr_len, opts->role, opts->attestor,
								   attestation, ev.sealed_token, claims, &text);
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
	bcd_evidence_free(&ev);
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
	rc = bcd_join_token_load(opts.token, opts.token_file, &token, &token_len);
	if (rc != BC_OK)
		fprintf(stderr, "bcd join-request: cannot read a non-empty token (%s)\n",
				bc_status_str(rc));
	else
		rc = make_join_request(&opts, &keys, token);
	if (token != NULL)
		bc_free_secret(token, token_len + 1);
	bcd_service_keys_free(&keys);
	if (rc == BCD_PRODUCER_RETRY)
		return BCD_RC_TRY_LATER;	/* exit 75: the producer cannot now; ask again later */
	return rc == BC_OK ? BCD_RC_OK : BCD_RC_FAILED;
}
