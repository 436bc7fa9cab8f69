/*
 * main.c: bcd, the bc_join agent: one binary, one subcommand per task (cmd.h).
 */
#include <stdio.h>
#include <string.h>

#include "cmd/cmd.h"
#include "core/outcome.h"

/* One subcommand: its name, entry point and a one-line summary. */
typedef struct bcd_subcommand
{
	const char *name;
	bcd_rc		(*run) (int argc, char **argv);
	const char *summary;
} bcd_subcommand;

static const bcd_subcommand subcommands[] = {
	{"join-request", bcd_cmd_join_request,
	"make a node key and CSR, seal the join token, print the JoinRequest"},
	{"verify-response", bcd_cmd_verify_response,
	"verify a bc_join() response and store the issued certificate"},
	{"run", bcd_cmd_run,
	"the agent daemon: join through the gateway, keep the certificate renewed"},
	{"renew", bcd_cmd_renew,
	"renew the stored certificate once, now (bcd renew --once ...)"},
	{"credential", bcd_cmd_credential,
	"ask the local bcd for a session credential (what a hook runs)"},
	{"status", bcd_cmd_status,
	"print the local bcd's queue depth, in-flight count and counters"},
	{"tpm-evidence", bcd_cmd_tpm_evidence,
	"the tpm attestor's evidence (or a challenge's answer) by hand, no gateway"},
	{"sign-discovery-assertion", bcd_cmd_sign_discovery,
	"site agent: vouch for a PXE-booted machine's CSR (discovery evidence)"},
	{"serve-discovery", bcd_cmd_serve_discovery,
	"site agent: sign discovery assertions for ramdisks over TLS"},
	{"setup", bcd_cmd_setup,
	"write (apply) or probe (check) bcd's systemd user units; lingering off"},
	{"ramdisk", bcd_cmd_ramdisk,
	"a PXE-booted ramdisk: join by discovery, key in memory only, run commands"},
	{NULL, NULL, NULL}
};

/* Print the top-level usage to stream. */
static void
usage(FILE *stream)
{
	int			i;

	fputs("usage: bcd SUBCOMMAND [OPTIONS]\n"
		  "       bcd SUBCOMMAND --help\n\nsubcommands:\n", stream);
	for (i = 0; subcommands[i].name != NULL; i++)
		fprintf(stream, "  %-24s %s\n", subcommands[i].name, subcommands[i].summary);
	fputs("\n`bcd SUBCOMMAND --help` explains every option of a subcommand;\n"
		  "docs/agent.md describes the daemon (bcd run).\n", stream);
}

/* Run argv[1]'s subcommand (it sees argv[1..] as its argv); its outcome. */
static bcd_rc
dispatch(int argc, char **argv)
{
	int			i;

	if (argc < 2)
	{
		usage(stderr);
		return BCD_RC_USAGE;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
		strcmp(argv[1], "help") == 0)
	{
		usage(stdout);
		return BCD_RC_OK;
	}
	for (i = 0; subcommands[i].name != NULL; i++)
	{
		if (strcmp(argv[1], subcommands[i].name) == 0)
			return subcommands[i].run(argc - 1, argv + 1);
	}
	fprintf(stderr, "bcd: unknown subcommand \"%s\"\n", argv[1]);
	usage(stderr);
	return BCD_RC_USAGE;
}

/* bcd: the subcommand's outcome becomes the exit status here, and only here. */
int
main(int argc, char **argv)
{
	return bcd_exit_status(dispatch(argc, argv));
}
