/*
 * verify_response.c: `bcd verify-response`: check a bc_join() response
 * (core/verify.c does every check) and, on "issued", store the certificate chain.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "bc_common.h"
#include "cmd/cmd.h"
#include "core/fileio.h"
#include "core/json.h"
#include "core/service_keys.h"
#include "core/store.h"
#include "core/verify.h"

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

/* Parse argv into opts; BCD_RC_OK (*help set after --help), or BCD_RC_USAGE. */
static bcd_rc
parse_verify_args(int argc, char **argv, verify_opts *opts, int *help)
{
	static const struct option longopts[] = {
		{"service-keys", required_argument, NULL, 's'},
		{"dir", required_argument, NULL, 'd'},
		{"response", required_argument, NULL, 'r'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	int			c;

	*help = 0;
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
				*help = 1;
				return BCD_RC_OK;
			default:
				verify_usage(stderr);
				return BCD_RC_USAGE;
		}
	}
	if (optind != argc || opts->service_keys == NULL || opts->dir == NULL ||
		opts->response == NULL)
	{
		verify_usage(stderr);
		return BCD_RC_USAGE;
	}
	return BCD_RC_OK;
}

/* Print a verified pending or challenge deferral on stdout. */
static void
print_deferral(const bcd_answer *ans)
{
	const char *not_after = bcd_json_str(ans->payload, "notAfter", NULL);

	printf("%s\n", ans->status);
	if (ans->request_id != NULL)
		printf("requestId: %s\n", ans->request_id);
	if (ans->retry_after >= 0)
		printf("retryAfterSeconds: %ld\n", ans->retry_after);
	if (ans->challenge != NULL)
		printf("challenge: %s\n", ans->challenge);
	if (not_after != NULL)
		printf("notAfter: %s\n", not_after);
}

/* DIR/node.csr.der and DIR/node.key, or a message on stderr. */
static int
load_csr_and_key(const char *dir, char **csr, size_t *csr_len, EVP_PKEY **key)
{
	char	   *csr_path = bcd_path_join(dir, "node.csr.der");
	char	   *key_path = bcd_path_join(dir, "node.key");
	char		err[512];
	int			rc = BC_ENOMEM;

	*csr = NULL;
	*key = NULL;
	if (csr_path == NULL || key_path == NULL)
		goto out;
	rc = bcd_read_file(csr_path, BC_DER_MAX, csr, csr_len);
	if (rc != BC_OK)
	{
		fprintf(stderr, "bcd verify-response: cannot read %s/node.csr.der\n", dir);
		goto out;
	}
	rc = BC_EINVAL;
	*key = bc_pkey_read_pem_file(key_path, 1, err, sizeof(err));
	if (*key == NULL)
		fprintf(stderr, "bcd verify-response: cannot read node.key (%s)\n", err);
	else
		rc = BC_OK;
out:
	if (rc != BC_OK)
	{
		free(*csr);
		*csr = NULL;
	}
	free(csr_path);
	free(key_path);
	return rc;
}

/* bcd verify-response ... */
bcd_rc
bcd_cmd_verify_response(int argc, char **argv)
{
	verify_opts opts;
	bcd_service_keys keys;
	bcd_answer	ans;
	char		err[1024];
	char	   *text = NULL;
	size_t		len = 0;
	char	   *csr = NULL;
	size_t		csr_len = 0;
	EVP_PKEY   *key = NULL;
	long		holder;
	int			lock_fd = -1;
	int			help;
	bcd_rc		outcome;
	int			rc;

	memset(&ans, 0, sizeof(ans));
	outcome = parse_verify_args(argc, argv, &opts, &help);
	if (outcome != BCD_RC_OK || help)
		return outcome;
	if (bcd_service_keys_load(opts.service_keys, &keys, err, sizeof(err)) != BC_OK)
	{
		fprintf(stderr, "bcd verify-response: %s\n", err);
		return BCD_RC_FAILED;
	}
	outcome = BCD_RC_FAILED;
	/* DIR may be the state directory of a running bcd: its lock, until node-chain.pem is written */
	rc = bcd_state_lock(opts.dir, &lock_fd, &holder);
	if (rc != BC_OK)
	{
		bcd_state_lock_error(opts.dir, rc, holder, err, sizeof(err));
		fprintf(stderr, "bcd verify-response: %s; refusing to use it\n", err);
		goto out;
	}
	if (bcd_read_file(opts.response, BCD_RESPONSE_MAX, &text, &len) != BC_OK)
	{
		fprintf(stderr, "bcd verify-response: cannot read the response (at most %d bytes)\n",
				BCD_RESPONSE_MAX);
		goto out;
	}
	if (load_csr_and_key(opts.dir, &csr, &csr_len, &key) != BC_OK)
		goto out;
	outcome = bcd_answer_verify(&keys, text, len, (unsigned char *) csr, csr_len,
								  key, &ans, err, sizeof(err));
	if (outcome == BCD_RC_REFUSED)
		fprintf(stderr, "%s\n", err);
	else if (outcome == BCD_RC_DEFERRED)
		print_deferral(&ans);
	else if (outcome != BCD_RC_OK)
		fprintf(stderr, "bcd verify-response: %s\n", err);
	else if (bcd_write_file_atomic(opts.dir, "node-chain.pem", ans.chain_pem,
								   ans.chain_pem_len, 0644) != BC_OK)
	{
		fprintf(stderr, "bcd verify-response: cannot write node-chain.pem\n");
		outcome = BCD_RC_FAILED;
	}
	else
		printf("%s\n%s\n", ans.spiffe_id, ans.not_after);
out:
	if (lock_fd >= 0)
		close(lock_fd);
	bcd_answer_free(&ans);
	EVP_PKEY_free(key);
	free(csr);
	free(text);
	bcd_service_keys_free(&keys);
	return outcome;
}
