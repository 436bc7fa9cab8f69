/*
 * sign_discovery.c: `bcd sign-discovery-assertion`, the site agent's half of
 * the discovery attestor: vouch for one PXE-booted machine (its MAC) and the
 * CSR its ramdisk made, with the site agent's own node key
 * (docs/attestors.md, "discovery").
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "bc_common.h"
#include "cmd/cmd.h"
#include "core/discovery_assertion.h"
#include "core/fileio.h"
#include "core/service_keys.h"
#include "core/store.h"

/* A CSR file, in bytes, at most. */
#define CSR_FILE_MAX 16384

static void
sign_usage(FILE *stream)
{
	fputs("usage: bcd sign-discovery-assertion --state-dir DIR --service-keys FILE\n"
		  "                                    --site SITE --mac MAC --epoch N\n"
		  "                                    --csr FILE [--ttl SECONDS]\n"
		  "\n"
		  "Prints the discovery evidence {\"assertion\": JWS} a ramdisk sends as its\n"
		  "JoinRequest attestation: a JWS ES256 by the site agent's node key (DIR, as\n"
		  "bcd run keeps it; read, not locked) over {\"purpose\":\"discovery\", its\n"
		  "certificate's serial, siteId, mac, epoch, the CSR's SHA-256, iat, exp}.\n"
		  "  --site SITE   the site id (the site agent's own)\n"
		  "  --mac MAC     the machine's MAC, aa:bb:cc:dd:ee:ff (lower-case)\n"
		  "  --epoch N     the site's discovery epoch (bc_join.discovery_sites)\n"
		  "  --csr FILE    the ramdisk's CSR, DER\n"
		  "  --ttl S       lifetime of the assertion (default 600, [1, 3600])\n", stream);
}

bcd_rc
bcd_cmd_sign_discovery(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"state-dir", required_argument, NULL, 'd'},
		{"service-keys", required_argument, NULL, 's'},
		{"site", required_argument, NULL, 'S'},
		{"mac", required_argument, NULL, 'm'},
		{"epoch", required_argument, NULL, 'e'},
		{"csr", required_argument, NULL, 'c'},
		{"ttl", required_argument, NULL, 't'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	const char *dir = NULL, *keys_path = NULL, *site = NULL, *mac = NULL, *csr_path = NULL;
	long long	epoch = 0;
	long		ttl = 600;
	char	   *end;
	char		err[512];
	char	   *csr = NULL;
	size_t		csr_len = 0;
	char	   *jws = NULL;
	bcd_service_keys keys;
	bcd_credential cred;
	int			have_keys = 0, have_cred = 0;
	time_t		now = time(NULL);
	bcd_rc		rc = BCD_RC_FAILED;
	int			c;

	memset(&keys, 0, sizeof(keys));
	memset(&cred, 0, sizeof(cred));
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1)
	{
		switch (c)
		{
			case 'd': dir = optarg; break;
			case 's': keys_path = optarg; break;
			case 'S': site = optarg; break;
			case 'm': mac = optarg; break;
			case 'c': csr_path = optarg; break;
			case 'e':
				epoch = strtoll(optarg, &end, 10);
				if (end == optarg || *end != '\0' || epoch < 1 || epoch > 999999999999999LL)
				{
					fputs("bcd sign-discovery-assertion: --epoch must be a whole number >= 1\n", stderr);
					return BCD_RC_USAGE;
				}
				break;
			case 't':
				ttl = strtol(optarg, &end, 10);
				if (end == optarg || *end != '\0' || ttl < 1 || ttl > 3600)
				{
					fputs("bcd sign-discovery-assertion: --ttl must be seconds in [1, 3600]\n", stderr);
					return BCD_RC_USAGE;
				}
				break;
			case 'h':
				sign_usage(stdout);
				return BCD_RC_OK;
			default:
				sign_usage(stderr);
				return BCD_RC_USAGE;
		}
	}
	if (optind != argc || dir == NULL || keys_path == NULL || site == NULL || mac == NULL ||
		csr_path == NULL || epoch == 0)
	{
		sign_usage(stderr);
		return BCD_RC_USAGE;
	}
	if (bcd_service_keys_load(keys_path, &keys, err, sizeof(err)) != BC_OK)
	{
		fprintf(stderr, "bcd sign-discovery-assertion: %s\n", err);
		goto out;
	}
	have_keys = 1;
	if (bcd_store_load(dir, &keys, &cred, err, sizeof(err)) != BC_OK)
	{
		fprintf(stderr, "bcd sign-discovery-assertion: %s\n", err);
		goto out;
	}
	have_cred = 1;
	if ((int64_t) now >= cred.not_after)
	{
		fprintf(stderr, "bcd sign-discovery-assertion: the certificate %s expired at %s\n",
				cred.serial, cred.not_after_text);
		goto out;
	}
	if (bcd_read_file(csr_path, CSR_FILE_MAX, &csr, &csr_len) != BC_OK)
	{
		fprintf(stderr, "bcd sign-discovery-assertion: cannot read --csr %s\n", csr_path);
		goto out;
	}
	if (bcd_discovery_sign(&cred, site, mac, epoch, (unsigned char *) csr, csr_len, ttl,
						   &jws) != BC_OK)
	{
		fputs("bcd sign-discovery-assertion: cannot sign\n", stderr);
		goto out;
	}
	printf("{\"assertion\":\"%s\"}\n", jws);
	rc = fflush(stdout) == 0 ? BCD_RC_OK : BCD_RC_FAILED;
out:
	free(jws);
	free(csr);
	if (have_cred)
		bcd_credential_free(&cred);
	if (have_keys)
		bcd_service_keys_free(&keys);
	return rc;
}
