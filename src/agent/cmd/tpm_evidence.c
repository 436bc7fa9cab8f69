/*
 * tpm_evidence.c: `bcd tpm-evidence`, the tpm producer by hand, without a
 * gateway: the node key (in the TPM) and CSR in DIR, and on stdout the
 * round-1 evidence, or with --challenge the answer to a challenge (what
 * `bcd run --attestor tpm` sends as JoinRequest.attestation).  For
 * debugging a machine's TPM and for tests.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "cmd/cmd.h"
#include "core/fileio.h"
#include "core/store.h"
#include "core/tpm_esys.h"
#include "core/tpm_key.h"
#include "producers/producer.h"

/* Bound of a --challenge file. */
#define CHALLENGE_FILE_MAX 8192

static void
usage(FILE *stream)
{
	fputs("usage: bcd tpm-evidence --out-dir DIR [--tcti CONF] [--tpm-ek rsa|p384]\n"
		  "                        [--tpm-pcrs SEL] [--challenge FILE]\n"
		  "\n"
		  "Makes (or reuses) DIR/node.key, a P-256 key in the TPM (TSS2 PRIVATE KEY),\n"
		  "DIR/node.csr.der and the AK (DIR/tpm-ak.pub, DIR/tpm-ak.priv), then prints\n"
		  "the tpm attestor's round-1 evidence (base64url JSON, docs/protocol.md) or,\n"
		  "with --challenge FILE (the base64url challenge), the answer to it.\n"
		  "  --tcti CONF      default device:/dev/tpmrm0 (a resource manager is needed)\n"
		  "  --tpm-ek         rsa (default, 0x81010001) or p384 (0x81010016)\n"
		  "  --tpm-pcrs SEL   the quote's PCRs, default sha256:0-7\n", stream);
}

/* bcd tpm-evidence ... */
bcd_rc
bcd_cmd_tpm_evidence(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"out-dir", required_argument, NULL, 'd'},
		{"tcti", required_argument, NULL, 'X'},
		{"tpm-ek", required_argument, NULL, 'E'},
		{"tpm-pcrs", required_argument, NULL, 'p'},
		{"challenge", required_argument, NULL, 'c'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	const char *out_dir = NULL;
	const char *bad = NULL;
	bcd_producer_setup setup = {.command = "tpm-evidence",.attestor = BC_ATTESTOR_TPM,.attestor_set = 1};
	const char *challenge_file = NULL;
	bcd_producer_input in;
	bcd_evidence ev = {0};
	EVP_PKEY   *key = NULL;
	unsigned char *csr = NULL;
	size_t		csr_len = 0;
	char	   *challenge = NULL;
	size_t		challenge_len = 0;
	char	   *key_path = NULL;
	const char *what = "";
	char		err[1024];
	long		holder;
	int			lock_fd = -1;
	int			c;
	int			rc;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1)
	{
		switch (c)
		{
			case 'd': out_dir = optarg; break;
			/* the tpm producer's own options, into its own state */
			case 'X': bad = bad ? bad : bcd_producer_tpm.set_option("tcti", optarg); break;
			case 'E': bad = bad ? bad : bcd_producer_tpm.set_option("tpm-ek", optarg); break;
			case 'p': bad = bad ? bad : bcd_producer_tpm.set_option("tpm-pcrs", optarg); break;
			case 'c': challenge_file = optarg; break;
			case 'h': usage(stdout); return BCD_RC_OK;
			default: usage(stderr); return BCD_RC_USAGE;
		}
	}
	if (optind != argc || out_dir == NULL || bad != NULL)
	{
		usage(stderr);
		return BCD_RC_USAGE;
	}
	setup.state_dir = out_dir;
	bad = bcd_producer_tpm.configure(&setup);
	if (bad != NULL)
	{
		fprintf(stderr, "bcd tpm-evidence: %s\n", bad);
		return BCD_RC_USAGE;
	}
	rc = bcd_producer_tpm.start(err, sizeof(err));
	if (rc != BC_OK)
	{
		fprintf(stderr, "bcd tpm-evidence: %s\n", err);
		return BCD_RC_FAILED;
	}
	what = "cannot create the output directory";
	rc = bcd_ensure_dir(out_dir);
	if (rc != BC_OK)
		goto out;
	rc = bcd_state_lock(out_dir, &lock_fd, &holder);
	if (rc != BC_OK)
	{
		bcd_state_lock_error(out_dir, rc, holder, err, sizeof(err));
		fprintf(stderr, "bcd tpm-evidence: %s; refusing to write in it\n", err);
		rc = BC_EINVAL;
		goto done;
	}
	rc = bcd_node_key_and_csr(out_dir, &key, &csr, &csr_len, &what);
	if (rc != BC_OK)
		goto out;
	what = "out of memory";
	rc = BC_ENOMEM;
	key_path = bcd_path_join(out_dir, "node.key");
	if (key_path == NULL)
		goto out;
	if (challenge_file != NULL)
	{
		what = "cannot read --challenge";
		rc = bcd_read_file(challenge_file, CHALLENGE_FILE_MAX, &challenge, &challenge_len);
		while (rc == BC_OK && challenge_len > 0 &&
			   (challenge[challenge_len - 1] == '\n' || challenge[challenge_len - 1] == '\r'))
			challenge[--challenge_len] = '\0';
		if (rc != BC_OK)
			goto out;
	}
	in = (bcd_producer_input) {.csr = csr,.csr_len = csr_len,.key_path = key_path,.attestor = BC_ATTESTOR_TPM};
	rc = challenge != NULL ?
		bcd_producer_tpm.answer(&in, challenge, &ev, err, sizeof(err)) :
		bcd_producer_tpm.produce(&in, &ev, err, sizeof(err));
	what = err;
	if (rc != BC_OK)
		goto out;
	what = "cannot write to standard output";
	rc = printf("%s\n", ev.attestation) < 0 || fflush(stdout) != 0 ? BC_EINVAL : BC_OK;
out:
	if (rc != BC_OK)
		fprintf(stderr, "bcd tpm-evidence: %s (%s)\n", what, bc_status_str(rc));
done:
	if (lock_fd >= 0)
		close(lock_fd);
	bcd_evidence_free(&ev);
	free(challenge);
	free(key_path);
	free(csr);
	bcd_node_key_free(key);
	bcd_producer_tpm.stop();
	return rc == BC_OK ? BCD_RC_OK : BCD_RC_FAILED;
}
