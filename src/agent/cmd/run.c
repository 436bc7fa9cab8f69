/*
 * run.c: `bcd run`, the agent daemon: its command line; the daemon itself
 * is core/daemon.c.  `bcd renew` (renew.c) shares this command line.
 */
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bc_protocol.h"
#include "cmd/cmd.h"
#include "core/commands.h"
#include "core/daemon.h"
#include "core/join_request.h"
#include "core/linger.h"
#include "core/ssh_host.h"
#include "workload/files.h"
#include "workload/rules.h"

/* Bounds of --max-retry-after, in seconds. */
#define MAX_RETRY_AFTER_MAX 86400L
/* Defaults and upper bounds of --max-provisioning and --max-queue. */
#define MAX_PROVISIONING_DEFAULT 4
#define MAX_PROVISIONING_MAX 64
#define MAX_QUEUE_DEFAULT 256
#define MAX_QUEUE_MAX 4096

/* Print the usage of bcd run (or bcd renew) to stream. */
static void
run_usage(FILE *stream, int renew_cmd)
{
	if (renew_cmd)
		fputs("usage: bcd renew --once --gateway URL --gateway-ca FILE --service-keys FILE\n"
			  "                 --state-dir DIR [--max-retry-after S]\n"
			  "\n"
			  "Renews the credential in DIR once, now (the same as bcd run --renew-now\n"
			  "--once), prints the new serial and notAfter, one per line, and exits.\n"
			  "Options as for bcd run (see bcd run --help).\n", stream);
	else
		fputs("usage: bcd run --gateway URL --gateway-ca FILE --service-keys FILE\n"
			  "               --state-dir DIR [--token T | --token-file FILE]\n"
			  "               [--role node|site|ramdisk] [--attestor ID [ITS OPTIONS]]\n"
			  "               [--claims JSON]\n"
			  "               [--hostname H] [--max-retry-after S] [--renew-at F]\n"
			  "               [--once] [--renew-now] [--socket PATH]\n"
			  "               [--max-provisioning N] [--max-queue N] [--metrics-file PATH]\n"
			  "               [--ssh-user-certs]\n"
			  "               [--workload-api PATH|off] [--workload-rule RULE]...\n"
			  "               [--svid-files 'DIR=>TARGET']... [--svid-files-reload DIR=EXE]...\n"
			  "               [--command-handler PREFIX=EXECUTABLE]... [--command-interval S]\n"
			  "               [--command-timeout S] [--no-attest] [--event-log PATH]\n"
			  "               [--ima-log PATH] [--status-interval S] [--keys-interval S]\n"
			  "               [--hook-crl]\n"
			  "               [--ssh-host-key FILE.pub]... [--ssh-own-host-key DIR]\n"
			  "               [--ssh-cert-dir DIR] [--ssh-principal NAME]...\n"
			  "               [--ssh-reload EXECUTABLE] [--ssh-krl FILE]\n"
			  "               [--ssh-user-ca FILE] [--ssh-host-ca FILE]\n"
			  "\n"
			  "The agent daemon: joins the host when DIR holds no valid credential,\n"
			  "then renews the node certificate at about F of its lifetime, until\n"
			  "SIGTERM or SIGINT (exit 0).  DIR is locked: one bcd per state directory.\n"
			  "\n"
			  "  --gateway URL        the bc-gateway, https://HOST:PORT\n"
			  "  --gateway-ca FILE    PEM CA certificate(s) the gateway's TLS certificate\n"
			  "                       must chain to; the system store is not used\n"
			  "  --service-keys FILE  the JSON of bc_join.service_keys(): the pinned\n"
			  "                       signing key (answers), encryption key (sealed\n"
			  "                       tokens) and node CA (certificates)\n"
			  "  --state-dir DIR      the credential store: created 0700 if missing,\n"
			  "                       refused if another user owns it; holds lock,\n"
			  "                       node.key (0600), node-chain.pem, join/\n"
			  "  --token T            the join token (visible in ps: prefer --token-file)\n"
			  "  --token-file FILE    the join token, read at every join round (one\n"
			  "                       trailing newline stripped); without a token the\n"
			  "                       agent cannot join again once its certificate expired\n"
			  "  --role ROLE          node (default), site or ramdisk\n"
			  "  --attestor ID        the attestor of the join (default join-token); its\n"
			  "                       producer makes the evidence, with its own options\n"
			  "                       (\"Producers\" below)\n"
			  "  --claims JSON        the JoinRequest claims object (default hostname, arch)\n"
			  "  --hostname H         claims.hostname (default: gethostname())\n"
			  "  --max-retry-after S  longest wait the service or gateway may ask for\n"
			  "                       (pending, Retry-After), clamped to [1, S];\n"
			  "                       default 300\n"
			  "  --renew-at F         renew at F of the lifetime (0 < F < 1, default 0.5),\n"
			  "                       +-10% of the wait at random\n"
			  "  --once               join if needed (waiting through deferrals), print\n"
			  "                       the SPIFFE ID and notAfter, one per line, and exit\n"
			  "  --renew-now          renew at once; with --once print the new serial and\n"
			  "                       notAfter and exit (the same as bcd renew --once)\n"
			  "\n"
			  "The daemon (not --once) serves session credentials on a local socket\n"
			  "(docs/sessions.md, \"The host side\"); under socket activation it takes the\n"
			  "socket systemd passes and creates nothing:\n"
			  "  --socket PATH        default $XDG_RUNTIME_DIR/bcd/bcd.sock, or\n"
			  "                       DIR/run/bcd.sock when XDG_RUNTIME_DIR is unset; its\n"
			  "                       directory is made 0700 and must be ours\n"
			  "  --max-provisioning N provisionings in flight at most (default 4)\n"
			  "  --max-queue N        callers waiting at most (default 256); beyond: busy\n"
			  "  --metrics-file PATH  Prometheus text, rewritten atomically on change\n"
			  "  --ssh-user-certs     every hook's session credential asks for an OpenSSH\n"
			  "                       user certificate of its key too, written beside the\n"
			  "                       key (docs/agent.md, \"SSH user certificates for\n"
			  "                       sessions\"; one hook asks with bcd credential --ssh)\n"
			  "\n"
			  "The SPIFFE Workload API (docs/agent.md, \"The SPIFFE Workload API\"), the\n"
			  "daemon only, served with a rule or --workload-api PATH: SVIDs of sessions\n"
			  "for the callers the rules name:\n"
			  "  --workload-api PATH  its unix socket (default workload.sock next to the\n"
			  "                       socket above, made the same way), or off\n"
			  "  --workload-api-mode MODE  0600 (default: bcd's uid only), 0660 (and its\n"
			  "                       group) or 0666 (every local user: the rules decide;\n"
			  "                       put the socket in a directory they can reach)\n"
			  "  --workload-rule 'SELECTOR[,SELECTOR...]=>session=S[,context=C]'\n"
			  "                       a caller matching every selector (uid:N, gid:N,\n"
			  "                       exe:/PATH, unit:NAME.service, cgroup:/PATH) gets the\n"
			  "                       session S (context C) identity; repeatable (64)\n"
			  "  --sds-validation auto|spiffe|rootca  what Envoy's SDS validation contexts\n"
			  "                       are: Envoy's SPIFFE validator, or trusted_ca; auto\n"
			  "                       (default): the validator unless the node is Envoy\n"
			  "                       1.17 or older or sets disable_spiffe_cert_validation\n"
			  "\n"
			  "Files mode (docs/agent.md, \"Files mode\"), the daemon only: an identity\n"
			  "kept in a directory for software that reads files (nginx, HAProxy):\n"
			  "  --svid-files 'DIR=>session=S[,context=C][,federates=TD[+TD...]]'\n"
			  "                       keep svid.pem (leaf and intermediates), svid_key.pem\n"
			  "                       (0600), svid_bundle.pem (own trust domain) and\n"
			  "                       crl.pem in DIR, and each federated domain's roots in\n"
			  "                       DIR/federated/TD.pem (never merged), renewed as a\n"
			  "                       Workload API stream's; DIR must be bcd's user's, it\n"
			  "                       and every directory above it writable by root or\n"
			  "                       bcd's user only; repeatable (16)\n"
			  "  --svid-files-reload 'DIR=EXECUTABLE'  run EXECUTABLE (no arguments) after\n"
			  "                       each change in DIR; it and every directory above it\n"
			  "                       writable by root or bcd's user only\n"
			  "\n"
			  "Commands (docs/agent.md, \"Commands\"), the daemon only:\n"
			  "  --command-handler PREFIX=EXECUTABLE  run EXECUTABLE KIND ID, the payload\n"
			  "                       on stdin, for the commands whose kind starts with\n"
			  "                       PREFIX (disk.wipe, diag.*, or * for every kind); the\n"
			  "                       longest prefix wins; repeatable (16 at most)\n"
			  "  --command-interval S fetch the node's commands every S seconds\n"
			  "                       (default 30, [1, 3600])\n"
			  "  --command-timeout S  a handler is killed after S seconds (default 300,\n"
			  "                       [1, 3600]); its output is kept up to 8 KiB\n"
			  "\n"
			  "Continuous attestation (docs/agent.md, \"Continuous attestation\"), the\n"
			  "daemon of a TPM-bound node (--attestor tpm) only: a quote of the PCRs the\n"
			  "service asks for, the event log and the IMA list, at the service's interval:\n"
			  "  --no-attest          do not attest (the service may then count missed\n"
			  "                       intervals and quarantine the node)\n"
			  "  --event-log PATH     the UEFI event log (default\n"
			  "                       /sys/kernel/security/tpm0/binary_bios_measurements;\n"
			  "                       absent or unreadable: none is sent)\n"
			  "  --ima-log PATH       the IMA binary list (default /sys/kernel/security/\n"
			  "                       ima/binary_runtime_measurements; absent: none)\n"
			  "\n"
			  "Revocation (docs/agent.md, \"Revocation\"), the daemon only:\n"
			  "  --status-interval S  every S seconds check the node certificate by OCSP\n"
			  "                       (POST /v1/ocsp) and fetch the node CA's CRL when it\n"
			  "                       is wanted (default 10, [0, 3600]; 0: neither)\n"
			  "  --keys-interval S    take up the service keys (GET /v1/service-keys: a\n"
			  "                       signing key marked compromised, the jwt-svid keys) and\n"
			  "                       the federated bundles (GET /v1/trust-bundles) every S\n"
			  "                       seconds, at a status interval's round (default 6 status\n"
			  "                       intervals, [1, 86400]; needs --status-interval above 0)\n"
			  "  --hook-crl           fetch the CRL even without the Workload API, so\n"
			  "                       that hooks may ask for crl.pem (bcd credential --crl)\n"
			  "\n"
			  "SSH, the host side (docs/agent.md, \"SSH\"), the daemon only:\n"
			  "  --ssh-host-key FILE.pub  a host key of sshd (its public key; the private\n"
			  "                       key is never read): bcd keeps its OpenSSH host\n"
			  "                       certificate, proven by the node key, renewed with\n"
			  "                       the node certificate, as <name>-cert.pub beside it\n"
			  "                       (sshd_config HostCertificate); repeatable (4)\n"
			  "  --ssh-own-host-key DIR  the same for a key bcd makes once in DIR\n"
			  "                       (ssh_host_ecdsa_key, P-256 PKCS#8, 0600, and .pub)\n"
			  "  --ssh-cert-dir DIR   write the certificates into DIR instead\n"
			  "  --ssh-principal NAME ask for these principals only (default: all the\n"
			  "                       pool's rule allows); repeatable (32)\n"
			  "  --ssh-reload EXECUTABLE  run it (no arguments) after a host certificate\n"
			  "                       changed (say, kill -HUP sshd); checked as --producer\n"
			  "  --ssh-krl FILE       keep the service's OpenSSH KRL there (sshd_config\n"
			  "                       RevokedKeys, ssh_config RevokedHostKeys), checked\n"
			  "                       against the signed GET /v1/ssh/signed every\n"
			  "                       --status-interval; replaced atomically, never removed\n"
			  "  --ssh-user-ca FILE   the user CA keys (sshd_config TrustedUserCAKeys)\n"
			  "  --ssh-host-ca FILE   the host CA keys as @cert-authority * lines (for\n"
			  "                       known_hosts of this host's own ssh clients)\n"
			  "                       Every directory: bcd's uid's, it and every one above\n"
			  "                       writable by root or bcd's uid only\n"
			  "\n"
			  "The daemon refuses to start when lingering is enabled for its user\n"
			  "(/var/lib/systemd/linger/USER, loginctl enable-linger): the node\n"
			  "credential would stay resident while nobody is logged in.\n"
			  "  --allow-linger       start anyway, with a warning\n"
			  "\n", stream);
	if (!renew_cmd)
	{
		bcd_producers_usage(stream, BCD_CMD_RUN);
		fputs("\nExit status: 0 done (or stopped by SIGTERM/SIGINT), 1 failure (a bad\n"
			  "answer, another bcd holds DIR, ...), 2 the service refused, 64 usage.\n",
			  stream);
	}
}

/* Parse a number in [lo, hi] into *out; 0 on success. */
static int
parse_number(const char *s, double lo, double hi, double *out)
{
	char	   *end;

	*out = strtod(s, &end);
	return end == s || *end != '\0' || !isfinite(*out) || *out < lo || *out > hi;
}

/* Parse argv into o; BCD_RC_OK (*help set after --help), or BCD_RC_USAGE. */
static bcd_rc
parse_run_args(int argc, char **argv, bcd_run_opts *o, int *help)
{
	static const struct option longopts[] = {
		{"gateway", required_argument, NULL, 'g'},
		{"gateway-ca", required_argument, NULL, 'C'},
		{"service-keys", required_argument, NULL, 's'},
		{"state-dir", required_argument, NULL, 'd'},
		{"token", required_argument, NULL, 't'},
		{"token-file", required_argument, NULL, 'T'},
		{"role", required_argument, NULL, 'r'},
		{"attestor", required_argument, NULL, 'a'},
		{"claims", required_argument, NULL, 'c'},
		{"hostname", required_argument, NULL, 'H'},
		{"max-retry-after", required_argument, NULL, 'm'},
		{"renew-at", required_argument, NULL, 'R'},
		{"once", no_argument, NULL, 'o'},
		{"renew-now", no_argument, NULL, 'n'},
		{"socket", required_argument, NULL, 'S'},
		{"max-provisioning", required_argument, NULL, 'P'},
		{"max-queue", required_argument, NULL, 'Q'},
		{"metrics-file", required_argument, NULL, 'M'},
		{"ssh-user-certs", no_argument, NULL, 1101},
		{"workload-api", required_argument, NULL, 'w'},
		{"workload-rule", required_argument, NULL, 'u'},
		{"workload-api-mode", required_argument, NULL, 'X'},
		{"sds-validation", required_argument, NULL, 1001},
		{"command-handler", required_argument, NULL, 'K'},
		{"command-interval", required_argument, NULL, 'I'},
		{"command-timeout", required_argument, NULL, 'W'},
		{"allow-linger", no_argument, NULL, 'G'},
		{"no-attest", no_argument, NULL, 'A'},
		{"event-log", required_argument, NULL, 'E'},
		{"ima-log", required_argument, NULL, 'i'},
		{"status-interval", required_argument, NULL, 'V'},
		{"keys-interval", required_argument, NULL, 1002},
		{"hook-crl", no_argument, NULL, 'L'},
		{"svid-files", required_argument, NULL, 'f'},
		{"svid-files-reload", required_argument, NULL, 'y'},
		/* SSH, the host side (core/ssh_host.c) */
		{"ssh-host-key", required_argument, NULL, 1470},
		{"ssh-own-host-key", required_argument, NULL, 1471},
		{"ssh-cert-dir", required_argument, NULL, 1472},
		{"ssh-principal", required_argument, NULL, 1473},
		{"ssh-reload", required_argument, NULL, 1474},
		{"ssh-krl", required_argument, NULL, 1475},
		{"ssh-user-ca", required_argument, NULL, 1476},
		{"ssh-host-ca", required_argument, NULL, 1477},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	const char *bad = NULL;
	json_t	   *claims;
	double		v;
	int			server_opt = 0;
	int			attestor_set = 0;
	bcd_optparser parser;
	bcd_producer_setup setup;
	int			c;

	*help = 0;

	o->role = BC_ROLE_NODE;
	o->attestor = bcd_producer_default_attestor(BCD_CMD_RUN);	/* join-token */
	o->max_retry_after = 300;
	o->renew_at = 0.5;
	o->max_provisioning = MAX_PROVISIONING_DEFAULT;
	o->max_queue = MAX_QUEUE_DEFAULT;
	o->command_interval = 30;
	o->command_timeout = 300;
	o->status_interval = 10;
	if (bcd_optparser_init(&parser, longopts, BCD_CMD_RUN) != 0)
	{
		fprintf(stderr, "bcd: out of memory\n");
		return BCD_RC_FAILED;
	}
	while ((c = bcd_optparser_next(&parser, argc, argv, &bad)) != -1)
	{
		switch (c)
		{
			case 0: break;		/* a producer's option, in its own state */
			case 'g': o->gateway = optarg; break;
			case 'C': o->gateway_ca = optarg; break;
			case 's': o->service_keys = optarg; break;
			case 'd': o->state_dir = optarg; break;
			case 't': o->token = optarg; break;
			case 'T': o->token_file = optarg; break;
			case 'r': o->role = optarg; break;
			case 'a': o->attestor = optarg; attestor_set = 1; break;
			case 'c': o->claims = optarg; break;
			case 'H': o->hostname = optarg; break;
			case 'o': o->once = 1; break;
			case 'G': o->allow_linger = 1; break;
			case 'A': o->no_attest = 1; server_opt = 1; break;
			case 'E': o->event_log = optarg; server_opt = 1; break;
			case 'i': o->ima_log = optarg; server_opt = 1; break;
			case 'L': o->hook_crl = 1; server_opt = 1; break;
			case 'V':
				if (parse_number(optarg, 0, 3600, &v) || v != floor(v))
					bad = "--status-interval must be a whole number of seconds in [0, 3600]";
				o->status_interval = (long) v;
				server_opt = 1;
				break;
			case 1002:
				if (parse_number(optarg, 1, 86400, &v) || v != floor(v))
					bad = "--keys-interval must be a whole number of seconds in [1, 86400]";
				o->keys_interval = (long) v;
				server_opt = 1;
				break;
			case 'n': o->renew_now = 1; break;
			case 'S': o->socket = optarg; server_opt = 1; break;
			case 'M': o->metrics_file = optarg; server_opt = 1; break;
			case 1101: o->ssh_user_certs = 1; break;	/* refused with --once below */
			case 'w': o->workload_api = optarg; server_opt = 1; break;
			case 'X':
				server_opt = 1;
				if (strcmp(optarg, "0600") == 0)
					o->workload_api_mode = 0600;
				else if (strcmp(optarg, "0660") == 0)
					o->workload_api_mode = 0660;
				else if (strcmp(optarg, "0666") == 0)
					o->workload_api_mode = 0666;
				else
					bad = "--workload-api-mode must be 0600, 0660 or 0666";
				break;
			case 1001:
				server_opt = 1;
				if (strcmp(optarg, "auto") == 0)
					o->sds_validation = BCD_SDS_VALIDATION_AUTO;
				else if (strcmp(optarg, "spiffe") == 0)
					o->sds_validation = BCD_SDS_VALIDATION_SPIFFE;
				else if (strcmp(optarg, "rootca") == 0)
					o->sds_validation = BCD_SDS_VALIDATION_ROOTCA;
				else
					bad = "--sds-validation must be auto, spiffe or rootca";
				break;
			case 'u':
				if (o->n_workload_rules >= BCD_WORKLOAD_RULES_MAX)
					bad = "--workload-rule: 64 at most";
				else
					o->workload_rules[o->n_workload_rules++] = optarg;
				server_opt = 1;
				break;
			case 'f':
				if (o->n_svid_files >= BCD_SVID_FILES_MAX)
					bad = "--svid-files: 16 at most";
				else
					o->svid_files[o->n_svid_files++] = optarg;
				server_opt = 1;
				break;
			case 'y':
				if (o->n_svid_files_reload >= BCD_SVID_FILES_MAX)
					bad = "--svid-files-reload: 16 at most";
				else
					o->svid_files_reload[o->n_svid_files_reload++] = optarg;
				server_opt = 1;
				break;
			/* SSH, the host side (core/ssh_host.c) */
			case 1470:
				if (o->n_ssh_host_keys >= BCD_SSH_HOST_KEYS_MAX)
					bad = "--ssh-host-key: 4 at most";
				else
					o->ssh_host_keys[o->n_ssh_host_keys++] = optarg;
				server_opt = 1;
				break;
			case 1471: o->ssh_own_host_key = optarg; server_opt = 1; break;
			case 1472: o->ssh_cert_dir = optarg; server_opt = 1; break;
			case 1473:
				if (o->n_ssh_principals >= BCD_SSH_PRINCIPALS_MAX)
					bad = "--ssh-principal: 32 at most";
				else
					o->ssh_principals[o->n_ssh_principals++] = optarg;
				server_opt = 1;
				break;
			case 1474: o->ssh_reload = optarg; server_opt = 1; break;
			case 1475: o->ssh_krl = optarg; server_opt = 1; break;
			case 1476: o->ssh_user_ca = optarg; server_opt = 1; break;
			case 1477: o->ssh_host_ca = optarg; server_opt = 1; break;
			case 'P':
				if (parse_number(optarg, 1, MAX_PROVISIONING_MAX, &v) || v != floor(v))
					bad = "--max-provisioning must be a whole number in [1, 64]";
				o->max_provisioning = (long) v;
				server_opt = 1;
				break;
			case 'Q':
				if (parse_number(optarg, 1, MAX_QUEUE_MAX, &v) || v != floor(v))
					bad = "--max-queue must be a whole number in [1, 4096]";
				o->max_queue = (long) v;
				server_opt = 1;
				break;
			case 'm':
				if (parse_number(optarg, 1, MAX_RETRY_AFTER_MAX, &v))
					bad = "--max-retry-after must be a number of seconds in [1, 86400]";
				o->max_retry_after = (long) v;
				break;
			case 'R':
				if (parse_number(optarg, 0.01, 0.99, &v))
					bad = "--renew-at must be a fraction in [0.01, 0.99]";
				o->renew_at = v;
				break;
			case 'K':
				{
					const char *why = bcd_commands_add_handler(o, optarg);

					if (why != NULL && bad == NULL)
						bad = why;
					server_opt = 1;
				}
				break;
			case 'I':
				if (parse_number(optarg, 1, 3600, &v))
					bad = "--command-interval must be a number of seconds in [1, 3600]";
				o->command_interval = v;
				server_opt = 1;
				break;
			case 'W':
				if (parse_number(optarg, 1, 3600, &v))
					bad = "--command-timeout must be a number of seconds in [1, 3600]";
				o->command_timeout = v;
				server_opt = 1;
				break;
			case 'h':
				bcd_optparser_free(&parser);
				run_usage(stdout, o->renew_cmd);
				*help = 1;
				return BCD_RC_OK;
			default:
				bcd_optparser_free(&parser);
				run_usage(stderr, o->renew_cmd);
				return BCD_RC_USAGE;
		}
	}
	setup = (bcd_producer_setup) {
		.command = o->renew_cmd ? "renew" : "run",.attestor = o->attestor,
		.attestor_set = attestor_set,.role = o->role,.state_dir = o->state_dir,
		.has_token = o->token != NULL || o->token_file != NULL
	};
	if (bad != NULL)
		;
	else if (optind != argc || o->gateway == NULL || o->gateway_ca == NULL ||
		o->service_keys == NULL || o->state_dir == NULL)
		bad = "--gateway, --gateway-ca, --service-keys and --state-dir are required";
	else if (o->token != NULL && o->token_file != NULL)
		bad = "--token and --token-file exclude each other";
	else if ((o->producer = bcd_optparser_finish(&parser, &setup, &bad)) == NULL)
		;
	else if (!bc_role_valid(o->role))
		bad = "--role must be node, site or ramdisk";
	else if (strncmp(o->gateway, "https://", 8) != 0)
		bad = "--gateway must be an https:// URL";
	else if (o->renew_cmd && !o->once)
		bad = "bcd renew needs --once (the daemon renews by itself)";
	else if (server_opt && o->once)
		bad = "--socket, --max-provisioning, --max-queue, --metrics-file, --workload-*, "
			"--svid-files*, --command-*, --no-attest, --event-log, --ima-log, "
			"--status-interval, --keys-interval, --hook-crl and --ssh-* serve the daemon, not --once";
	else if (o->keys_interval > 0 && o->status_interval == 0)
		bad = "--keys-interval needs --status-interval above 0 (the watch that takes the keys up)";
	else if ((o->event_log != NULL || o->ima_log != NULL) && o->producer->quote == NULL)
		bad = "--event-log and --ima-log are for a node that attests (--attestor tpm)";
	else if ((o->event_log != NULL && o->event_log[0] != '/') ||
			 (o->ima_log != NULL && o->ima_log[0] != '/'))
		bad = "--event-log and --ima-log must be absolute paths";
	else if (o->workload_api != NULL && strcmp(o->workload_api, "off") != 0 &&
			 o->workload_api[0] != '/')
		bad = "--workload-api must be an absolute path, or off";
	else if ((o->n_svid_files > 0 || o->n_svid_files_reload > 0) &&
			 (bad = bcd_wl_files_check(o->svid_files, o->n_svid_files, o->svid_files_reload,
									   o->n_svid_files_reload)) != NULL)
		;
	else if ((bad = bcd_ssh_opts_check(o)) != NULL)
		;
	else if (o->n_workload_rules > 0)
	{
		static char why[1024];
		bcd_wl_rules *rules = bcd_wl_rules_parse(o->workload_rules, o->n_workload_rules, why,
												 sizeof(why));

		if (rules == NULL)
			bad = why;
		bcd_wl_rules_free(rules);
	}
	else if (o->metrics_file != NULL && o->metrics_file[0] != '/')
		bad = "--metrics-file must be an absolute path";
	else if (o->ssh_user_certs && o->once)
		bad = "--ssh-user-certs serves the daemon's session credentials, not --once";
	else if (o->claims != NULL)
	{
		claims = bcd_build_claims(o->claims, NULL);
		if (claims == NULL)
			bad = "--claims must be a JSON object";
		json_decref(claims);
	}
	o->attestor = setup.attestor;	/* the one a producer's options imply (--node-id) */
	bcd_optparser_free(&parser);
	if (bad != NULL)
	{
		fprintf(stderr, "bcd %s: %s\n", o->renew_cmd ? "renew" : "run", bad);
		return BCD_RC_USAGE;
	}
	return BCD_RC_OK;
}

/*
 * The daemon and lingering (docs/agent.md, "Running it under systemd"): 1 to
 * refuse to start (lingering enabled, no --allow-linger), 0 to go on (with a
 * warning when lingering is enabled, or cannot be told).
 */
static int
refuse_linger(int allow)
{
	char		user[256];
	char		path[PATH_MAX];
	int			l = bcd_linger_enabled(user, sizeof(user), path, sizeof(path));

	if (l < 0)
		fprintf(stderr, "bcd run: WARNING: cannot tell whether lingering is enabled for %s (%s)\n",
				user, path);
	if (l <= 0)
		return 0;
	fprintf(stderr, "bcd run: %slingering is enabled for %s (%s): the user's manager, and "
			"this daemon with the node credential, would stay running while nobody is logged "
			"in; %s (loginctl disable-linger %s)\n", allow ? "WARNING: " : "", user, path,
			allow ? "running anyway (--allow-linger)" : "refusing to start (--allow-linger "
			"to run anyway)", user);
	return !allow;
}

/* bcd run, or with renew_cmd bcd renew: parse the command line, run the daemon (cmd.h). */
bcd_rc
bcd_run_command(int argc, char **argv, int renew_cmd)
{
	bcd_run_opts opts;
	int			help;
	bcd_rc		rc;

	memset(&opts, 0, sizeof(opts));
	opts.renew_cmd = renew_cmd;
	opts.renew_now = renew_cmd;
	rc = parse_run_args(argc, argv, &opts, &help);
	if (rc != BCD_RC_OK || help)
		return rc;
	if (!opts.once && refuse_linger(opts.allow_linger))
		return BCD_RC_FAILED;
	return bcd_daemon_run(&opts);
}

/* bcd run ... */
bcd_rc
bcd_cmd_run(int argc, char **argv)
{
	return bcd_run_command(argc, argv, 0);
}
