/*
 * agent.h: what bcd run's parts share once its command line is read: the
 * options (bcd_run_opts, with the command handlers) and the state the join
 * loop, renewal and the command poll share (bcd_agent).  A plain type
 * header: the orchestrators (daemon.h, join_loop.h, sessions.h,
 * provisioner.h) include it, never the other way round.
 */
#ifndef BCD_AGENT_H
#define BCD_AGENT_H

#include "core/backoff.h"
#include "core/outcome.h"
#include "core/service_keys.h"
#include "core/transport.h"
#include "producers/producer.h"

/* --workload-rule, at most. */
#define BCD_WORKLOAD_RULES_MAX 64

/* --svid-files (and --svid-files-reload), at most. */
#define BCD_SVID_FILES_MAX 16

/* --ssh-host-key (with --ssh-own-host-key's), --ssh-principal, at most. */
#define BCD_SSH_HOST_KEYS_MAX 4
#define BCD_SSH_PRINCIPALS_MAX 32

/* Handlers of --command-handler, at most. */
#define BCD_COMMAND_HANDLERS_MAX 16

/* --command-handler PREFIX=EXECUTABLE: commands whose kind starts with prefix. */
typedef struct bcd_command_handler
{
	const char *prefix;			/* into argv: "disk.", "disk.wipe", "" (every kind) */
	size_t		prefix_len;		/* without a trailing '*' */
	const char *exe;			/* absolute path */
} bcd_command_handler;

/* --sds-validation: how Envoy's SDS validation contexts check peers (workload/sds.c) */
#define BCD_SDS_VALIDATION_AUTO 0	/* the SPIFFE validator, unless the node asks for rootCA */
#define BCD_SDS_VALIDATION_SPIFFE 1
#define BCD_SDS_VALIDATION_ROOTCA 2

/* What the command line of bcd run / bcd renew asked for. */
typedef struct bcd_run_opts
{
	const char *gateway;		/* https://host:port */
	const char *gateway_ca;		/* PEM file pinned for TLS */
	const char *service_keys;
	const char *state_dir;
	const char *token;
	const char *token_file;
	const char *role;
	const char *attestor;
	/* the producer of the join's evidence, configured with its own options (producer.h) */
	const bcd_producer *producer;
	const char *claims;
	const char *hostname;
	long		max_retry_after;	/* seconds, clamp of every wait we are told */
	double		renew_at;		/* fraction of the lifetime */
	int			once;
	int			allow_linger;	/* --allow-linger: warn, do not refuse */
	int			renew_now;
	int			renew_cmd;		/* invoked as `bcd renew` */
	/* the hooks' socket (sessions.c) and the provisioner (provisioner.c), bcd run without --once only */
	const char *socket;			/* --socket PATH, or NULL for the default */
	const char *metrics_file;	/* --metrics-file PATH, or NULL */
	long		max_provisioning;
	long		max_queue;
	int			ssh_user_certs;	/* --ssh-user-certs: every hook's session credential asks an
								 * SSH user certificate (sessions.c, ssh_user.c) */
	/* the SPIFFE Workload API (workload/workload.c), the daemon only */
	const char *workload_api;	/* --workload-api PATH, "off", or NULL for the default */
	const char *workload_rules[BCD_WORKLOAD_RULES_MAX];	/* --workload-rule, as given */
	int			n_workload_rules;
	int			workload_api_mode;	/* --workload-api-mode: 0 (0600), 0600, 0660, 0666 */
	/* files mode (workload/files.c): 'DIR=>session=S[,context=C]', 'DIR=EXECUTABLE' */
	const char *svid_files[BCD_SVID_FILES_MAX];
	int			n_svid_files;
	const char *svid_files_reload[BCD_SVID_FILES_MAX];
	int			n_svid_files_reload;
	int			sds_validation; /* --sds-validation: BCD_SDS_VALIDATION_* */
	/* commands (commands.c): handlers, poll interval and a handler's bounds */
	bcd_command_handler handlers[BCD_COMMAND_HANDLERS_MAX];
	int			n_handlers;
	double		command_interval;	/* seconds between fetches */
	double		command_timeout;	/* seconds a handler may run */
	/* continuous attestation (attest.c), the daemon of a node whose producer quotes (tpm) */
	int			no_attest;		/* --no-attest */
	const char *event_log;		/* --event-log PATH, or NULL for the default */
	const char *ima_log;		/* --ima-log PATH, or NULL for the default */
	/* the revocation watch (revocation.c): OCSP of the node certificate, the CRL */
	long		status_interval;	/* --status-interval S: seconds, 0 none (default 10) */
	long		keys_interval;	/* --keys-interval S: seconds, 0: 6 status intervals */
	int			hook_crl;		/* --hook-crl: fetch the CRL for hooks without the Workload API */
	/* SSH, the host side (ssh_host.c; docs/agent.md, "SSH"), the daemon only */
	const char *ssh_host_keys[BCD_SSH_HOST_KEYS_MAX];	/* --ssh-host-key FILE.pub */
	int			n_ssh_host_keys;
	const char *ssh_own_host_key;	/* --ssh-own-host-key DIR */
	const char *ssh_cert_dir;	/* --ssh-cert-dir DIR, or NULL: each key's directory */
	const char *ssh_principals[BCD_SSH_PRINCIPALS_MAX];	/* --ssh-principal NAME */
	int			n_ssh_principals;
	const char *ssh_reload;		/* --ssh-reload EXECUTABLE */
	const char *ssh_krl;		/* --ssh-krl FILE */
	const char *ssh_user_ca;	/* --ssh-user-ca FILE */
	const char *ssh_host_ca;	/* --ssh-host-ca FILE */
	/*
	 * bcd ramdisk: no state directory (state_dir NULL), every key in memory
	 * only, no local socket.
	 */
	int			memory_only;
} bcd_run_opts;

/* The provisioner of bcd run (provisioner.h), its attestation loop (attest.h). */
struct bcd_provisioner;
struct bcd_attest;
struct bcd_revwatch;
struct bcd_ssh;

/* The daemon's state shared by the join loop and renewal. */
typedef struct bcd_agent
{
	const bcd_run_opts *opts;
	bcd_service_keys keys;
	bcd_http   *http;
	bcd_backoff backoff;
	struct bcd_provisioner *provisioner;	/* the node credential published to it; NULL with
											 * --once, for bcd renew and bcd ramdisk */
	struct bcd_attest *attest;	/* continuous attestation, a TPM-bound daemon's; else NULL */
	struct bcd_revwatch *revwatch;	/* the revocation watch, the daemon's; else NULL */
	struct bcd_ssh *ssh;		/* SSH host certificates and files (ssh_host.c), or NULL */
} bcd_agent;

#endif							/* BCD_AGENT_H */
