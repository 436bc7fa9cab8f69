/*
 * daemon.c: the life of `bcd run` (and `bcd renew`) once its command line
 * is read: load the pinned keys, take the state directory's lock, compose
 * what it serves (the provisioner, provisioner.c, handed to its two
 * clients: the hooks' socket server, sessions.c, and the SPIFFE Workload
 * API, workload/; and for a TPM-bound node the attestation loop, attest.c,
 * which tells the provisioner when the service quarantined the node; and the
 * revocation watch, revocation.c, which tells it the CRL and when the node
 * certificate was revoked), then
 * load or join (join_loop.c) and renew (renewal.c),
 * joining again when the certificate expired, until SIGTERM or SIGINT.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bc_common.h"
#include "core/attest.h"
#include "core/clock.h"
#include "core/commands.h"
#include "core/daemon.h"
#include "core/delivery.h"
#include "core/join_loop.h"
#include "core/log.h"
#include "core/provisioner.h"
#include "core/renewal.h"
#include "core/revocation.h"
#include "core/sessions.h"
#include "core/signals.h"
#include "core/ssh_host.h"
#include "core/store.h"
#include "core/trust_bundles.h"
#include "workload/workload.h"

/* The provisioner's two clients while bcd run serves (its provisioner is bcd_agent's). */
typedef struct bcd_services
{
	bcd_hook_server *hooks;		/* the hooks' socket (sessions.c) */
	bcd_workload *workload;		/* the SPIFFE Workload API, when asked for (workload/) */
	bcd_attest *attest;			/* continuous attestation of a TPM-bound node (attest.c) */
	bcd_revwatch *revwatch;		/* the revocation watch: OCSP, the CRL (revocation.c) */
	bcd_ssh    *ssh;			/* SSH host certificates, CA keys, KRL (ssh_host.c) */
} bcd_services;

/*
 * An expired credential (or one whose renewal was refused once it expired):
 * come back as the same node by the producer that proves a credential held
 * (x509pop: the old certificate proven with its key, a new key's
 * certificate asked for); only if that is refused,
 * join with the token, when there is one.
 */
static bcd_rc
rejoin_as_itself(bcd_agent *a, bcd_credential *old, bcd_credential *cred)
{
	const bcd_run_opts *o = a->opts;
	const bcd_producer *prover = bcd_producer_held();
	bcd_rc		rc = BCD_RC_REFUSED;

	if (prover != NULL)
	{
		bcd_log("the certificate %s of %s expired at %s; joining again as the same node by "
				"%s, with a new key", old->serial, old->spiffe_id, old->not_after_text,
				prover->attestor);
		rc = bcd_join_loop(a, old, cred);
	}
	if (rc != BCD_RC_REFUSED)
		return rc;
	if (o->token == NULL && o->token_file == NULL)
	{
		bcd_log("%s: the service did not take %s back (the reason is in bc_join.events, "
				"security.join.refused); to join again this host needs a join token: "
				"start bcd with --token-file FILE", prover != NULL ? prover->attestor : "join",
				old->spiffe_id);
		return BCD_RC_REFUSED;
	}
	bcd_log("%s: the service did not take %s back; joining with the join token as a "
			"new node", prover != NULL ? prover->attestor : "join", old->spiffe_id);
	return bcd_join_loop(a, NULL, cred);
}

/* Load the stored credential or join; BCD_RC_OK with cred filled. */
static bcd_rc
credential_or_join(bcd_agent *a, bcd_credential *cred, int force_join)
{
	const bcd_run_opts *o = a->opts;
	bcd_credential old;
	char		err[512];
	int			have;
	bcd_rc		rc;

	if (o->memory_only)
	{
		/* bcd ramdisk: nothing stored; its token was spent by the first join. */
		if (!force_join)
			return bcd_join_loop(a, NULL, cred);
		memset(cred, 0, sizeof(*cred));
		bcd_log("the ramdisk's certificate expired before a renewal succeeded; it cannot "
				"join again without booting again (a new token, a new assertion)");
		return BCD_RC_FAILED;
	}
	have = bcd_store_load(o->state_dir, &a->keys, cred, err, sizeof(err)) == BC_OK;
	if (have && !force_join && (int64_t) time(NULL) < cred->not_after)
	{
		bcd_store_forget_work(o->state_dir, "join");
		return BCD_RC_OK;
	}
	if (have && o->renew_cmd)
	{
		bcd_log("the certificate %s expired at %s", cred->serial, cred->not_after_text);
		return BCD_RC_OK;		/* renewing is all that is left to try */
	}
	if (have)
	{
		old = *cred;
		memset(cred, 0, sizeof(*cred));
		rc = rejoin_as_itself(a, &old, cred);
		bcd_credential_free(&old);
		return rc;
	}
	if (!force_join)
		bcd_log("%s", err);
	if (o->renew_cmd)
	{
		bcd_log("renew: there is no credential to renew in %s", o->state_dir);
		return BCD_RC_FAILED;
	}
	return bcd_join_loop(a, NULL, cred);
}

/* The attestation loop asks for a join again: seen this often while waiting, seconds. */
#define REJOIN_CHECK_S 1.0

/*
 * Wait delay seconds; with command handlers, fetch and run the node's
 * commands every --command-interval meanwhile.  1 when stopped by a signal;
 * 2 when the attestation loop asks for a join again (attest.h); 3 when the
 * revocation watch asks for a renewal at once (a CA compromise), 4 for a join
 * again (the node revoked, a new token in --token-file: revocation.h).
 */
static int
wait_serving_commands(bcd_agent *a, const bcd_credential *cred, double delay)
{
	double		end = bcd_now_ms() / 1000.0 + (delay > 0 ? delay : 0);
	double		next_poll = 0;

	if (a->opts->n_handlers == 0 && a->attest == NULL && a->revwatch == NULL)
		return bcd_sleep(delay);
	for (;;)
	{
		double		now = bcd_now_ms() / 1000.0;
		double		step = end - now;

		if (bcd_attest_take_rejoin(a->attest))
			return 2;
		if (bcd_revwatch_take_renew(a->revwatch))
			return 3;
		if (bcd_revwatch_take_rejoin(a->revwatch))
			return 4;
		if (a->opts->n_handlers > 0 && now >= next_poll)
		{
			bcd_commands_poll(a, cred);
			next_poll = bcd_now_ms() / 1000.0 + a->opts->command_interval;
		}
		now = bcd_now_ms() / 1000.0;
		step = end - now;
		if (step <= 0)
			return 0;
		if (a->opts->n_handlers > 0 && next_poll - now < step)
			step = next_poll - now;
		if ((a->attest != NULL || a->revwatch != NULL) && step > REJOIN_CHECK_S)
			step = REJOIN_CHECK_S;
		if (bcd_sleep(step > 0 ? step : 0))
			return 1;
	}
}

/*
 * Join again by the node's attestor, once, on behalf of who ("attest": the
 * attestation loop saw the service refuse the certificate a quarantine
 * revoked, an operator readmitted the node: the tpm join of the same EK, the
 * same node; "revocation": the node certificate is revoked and an operator
 * wrote a new join token into --token-file); a refusal (still quarantined,
 * a token not good) leaves cred as it was.
 * BCD_RC_OK or BCD_RC_STOPPED.
 */
static bcd_rc
rejoin_again(bcd_agent *a, bcd_credential *cred, const char *who)
{
	bcd_credential next;
	bcd_rc		rc;

	if (strcmp(who, "attest") == 0)
		bcd_log("attest: joining again by %s, as the same node (readmitted)", a->opts->attestor);
	else
		bcd_log("revocation: joining again by %s (the node certificate %s is revoked)",
				a->opts->attestor, cred->serial);
	memset(&next, 0, sizeof(next));
	rc = bcd_join_loop(a, NULL, &next);
	if (rc == BCD_RC_STOPPED)
		return rc;
	if (rc != BCD_RC_OK)
	{
		if (strcmp(who, "attest") == 0)
			bcd_log("attest: joining again did not succeed; the node stays quarantined here");
		else
			bcd_log("revocation: joining again did not succeed (the reason is in bc_join.events, "
					"security.join.refused); the node stays revoked here until --token-file "
					"changes again");
		return BCD_RC_OK;
	}
	bcd_credential_free(cred);
	*cred = next;
	bcd_provisioner_publish(a->provisioner, cred);
	bcd_ssh_kick(a->ssh);
	return BCD_RC_OK;
}

/* The daemon's life once the state directory is locked. */
static bcd_rc
run_agent(bcd_agent *a)
{
	const bcd_run_opts *o = a->opts;
	bcd_credential cred;
	int			renew_now = o->renew_now;
	int			force_join = 0;
	double		delay;
	bcd_rc		rc;

	for (;;)
	{
		if (force_join)
			bcd_provisioner_publish(a->provisioner, NULL);
		rc = credential_or_join(a, &cred, force_join);
		if (rc != BCD_RC_OK)
			return rc;
		bcd_provisioner_publish(a->provisioner, &cred);
		bcd_ssh_kick(a->ssh);
		force_join = 0;
		if (o->once && !renew_now)
		{
			printf("%s\n%s\n", cred.spiffe_id, cred.not_after_text);
			bcd_credential_free(&cred);
			return fflush(stdout) == 0 ? BCD_RC_OK : BCD_RC_FAILED;
		}
		do
		{
			delay = renew_now ? 0 : bcd_renewal_delay(o, &cred);
			renew_now = 0;
			if (delay > 0)
				bcd_log("%s (serial %s, not after %s): renewal in %.0f s", cred.spiffe_id,
						cred.serial, cred.not_after_text, delay);
			switch (wait_serving_commands(a, &cred, delay))
			{
				case 0:
					rc = BCD_RC_OK;
					break;
				case 3:
					bcd_log("renewing now: the node certificate %s was revoked for a CA "
							"compromise", cred.serial);
					rc = BCD_RC_OK;
					break;
				case 2:
					rc = rejoin_again(a, &cred, "attest");
					continue;	/* a new certificate: its renewal is due later */
				case 4:
					rc = rejoin_again(a, &cred, "revocation");
					continue;
				default:
					rc = BCD_RC_STOPPED;
					break;
			}
			if (rc == BCD_RC_OK)
			{
				bcd_provisioner_renewing(a->provisioner, 1);
				rc = bcd_renew_until_done(a, &cred);
				if (rc == BCD_RC_OK)
				{
					bcd_provisioner_publish(a->provisioner, &cred);
					bcd_ssh_kick(a->ssh);
				}
				bcd_provisioner_renewing(a->provisioner, 0);
			}
			if (rc == BCD_RC_OK && o->once)
			{
				printf("%s\n%s\n", cred.serial, cred.not_after_text);
				rc = fflush(stdout) == 0 ? BCD_RC_OK : BCD_RC_FAILED;
				break;
			}
		} while (rc == BCD_RC_OK);
		bcd_credential_free(&cred);
		if (rc != BCD_RC_RETRY)
			return rc;
		force_join = 1;
	}
}

/*
 * 1 when bcd run serves the Workload API: a rule, or a --workload-api PATH
 * (not off); or files mode (--svid-files), which keeps its identities.
 */
static int
workload_wanted(const bcd_run_opts *o)
{
	return (o->workload_api != NULL ? strcmp(o->workload_api, "off") != 0 :
			o->n_workload_rules > 0) || o->n_svid_files > 0;
}

/*
 * Compose what the daemon serves: the provisioner, with the stored
 * credential already published when it is valid (a hook that socket
 * activation started bcd for must not be told there is no credential while
 * the store is being read), handed to the hooks' socket server and the
 * Workload API; both listen before anything runs, then the provisioner's
 * workers, the hooks' I/O thread and the Workload API's threads start.
 */
static int
start_services(bcd_agent *a, bcd_services *svc)
{
	const bcd_run_opts *o = a->opts;
	bcd_credential cred;
	char		err[1024];
	char	   *runtime_dir;
	int			rtfd = -1;
	int			have;
	int			rc = BC_ENOMEM;

	have = bcd_store_load(o->state_dir, &a->keys, &cred, err, sizeof(err)) == BC_OK;
	if (have && (int64_t) time(NULL) >= cred.not_after)
	{
		bcd_credential_free(&cred);
		have = 0;
	}
	a->provisioner = bcd_provisioner_new(o, &a->keys, have ? &cred : NULL);
	if (have)
		bcd_credential_free(&cred);
	runtime_dir = bcd_runtime_dir();
	snprintf(err, sizeof(err), "out of memory");
	if (a->provisioner != NULL && runtime_dir != NULL)
		rc = bcd_runtime_dir_open(runtime_dir, &rtfd, err, sizeof(err));
	if (rc == BC_OK)
		rc = bcd_hook_server_listen(o, a->provisioner, runtime_dir, rtfd, &svc->hooks,
									err, sizeof(err));
	if (rc == BC_OK && workload_wanted(o))
		rc = bcd_workload_start(o, &a->keys, bcd_hook_server_path(svc->hooks), runtime_dir,
								rtfd, a->provisioner, &svc->workload, err, sizeof(err));
	if (rtfd >= 0)
		close(rtfd);
	free(runtime_dir);
	if (rc == BC_OK)
		rc = bcd_provisioner_start(a->provisioner, err, sizeof(err));
	if (rc == BC_OK)
		rc = bcd_hook_server_run(svc->hooks, err, sizeof(err));
	if (rc == BC_OK)
		bcd_workload_run(svc->workload);
	if (rc == BC_OK && bcd_attest_wanted(o))
		rc = bcd_attest_start(o, &a->keys, a->provisioner, &svc->attest, err, sizeof(err));
	a->attest = svc->attest;
	if (rc == BC_OK && bcd_revwatch_wanted(o))
		rc = bcd_revwatch_start(o, &a->keys, a->provisioner, &svc->revwatch, err, sizeof(err));
	a->revwatch = svc->revwatch;
	if (rc == BC_OK && bcd_ssh_wanted(o))
		rc = bcd_ssh_start(o, &a->keys, a->provisioner, &svc->ssh, err, sizeof(err));
	a->ssh = svc->ssh;
	bcd_hook_server_set_ssh(svc->hooks, svc->ssh);
	if (rc != BC_OK)
		bcd_log("cannot serve the local socket: %s", err);
	return rc;
}

/*
 * Stop what the daemon serves: the Workload API's threads, the
 * provisioner's workers (a request in flight aborted, its caller answered),
 * the hooks' I/O thread (the hooks still waiting answered unavailable);
 * nothing is asked of the provisioner after that: then its thread (every
 * client still waiting called back), then free them all.
 */
static void
stop_services(bcd_agent *a, bcd_services *svc)
{
	if (a->provisioner == NULL)
		return;
	bcd_stop_now();
	bcd_attest_stop(svc->attest);
	bcd_revwatch_stop(svc->revwatch);
	bcd_ssh_stop(svc->ssh);
	bcd_hook_server_set_ssh(svc->hooks, NULL);
	bcd_workload_stop(svc->workload);
	bcd_provisioner_stop_workers(a->provisioner);
	bcd_hook_server_stop(svc->hooks);
	bcd_provisioner_stop(a->provisioner);
	bcd_attest_free(svc->attest);
	svc->attest = NULL;
	a->attest = NULL;
	bcd_revwatch_free(svc->revwatch);
	svc->revwatch = NULL;
	a->revwatch = NULL;
	bcd_ssh_free(svc->ssh);
	svc->ssh = NULL;
	a->ssh = NULL;
	bcd_workload_free(svc->workload);
	bcd_hook_server_free(svc->hooks);
	bcd_provisioner_free(a->provisioner);
	a->provisioner = NULL;
}

/* The daemon: load the pinned keys, lock DIR, compose and serve, run (daemon.h). */
bcd_rc
bcd_daemon_run(const bcd_run_opts *opts)
{
	bcd_agent	agent;
	bcd_services services;
	char		err[1024];
	int			lock_fd = -1;
	int			started = 0;
	bcd_rc		rc;

	memset(&agent, 0, sizeof(agent));
	memset(&services, 0, sizeof(services));
	agent.opts = opts;
	bcd_signals_block();
	rc = BCD_RC_FAILED;
	if (bcd_service_keys_load(opts->service_keys, &agent.keys, err, sizeof(err)) != BC_OK)
	{
		bcd_log("%s", err);
		goto out;
	}
	if (access(opts->gateway_ca, R_OK) != 0)
	{
		bcd_log("cannot read --gateway-ca %s", opts->gateway_ca);
		goto out;
	}
	/* The producer starts before any key is read (tpm: the node's keys live in the TPM). */
	if (opts->producer != NULL && opts->producer->start != NULL)
	{
		if (opts->producer->start(err, sizeof(err)) != BC_OK)
		{
			bcd_log("--attestor %s: %s", opts->attestor, err);
			goto out;
		}
		started = 1;
	}
	if (!opts->memory_only && bcd_store_open(opts->state_dir, &lock_fd, err, sizeof(err)) != BC_OK)
	{
		bcd_log("%s", err);
		goto out;
	}
	/* A rollover taken up earlier replaces the --service-keys file's keys. */
	if (!opts->memory_only)
		bcd_service_keys_use_state(&agent.keys, opts->state_dir);
	if (bcd_service_keys_issued(&agent.keys) == 0)
		bcd_log("%s has no signed issuedAt (a file made before bc_join 0.2.0): until a first "
				"rollover is taken up, an older one cannot be told from a newer one; pin a file "
				"that bc_join.service_keys() writes now", opts->service_keys);
	agent.http = bcd_http_new(opts->gateway, opts->gateway_ca, err, sizeof(err));
	if (agent.http == NULL)
	{
		bcd_log("%s", err);
		goto out;
	}
	/* The service's current keys (a next key staged meanwhile); a failure is only logged. */
	if (!opts->once)
		(void) bcd_service_keys_refresh(agent.http, &agent.keys);
	/* The federated trust domains' bundles (none until one is taken up); the watch follows them. */
	if (!opts->once && !opts->memory_only)
	{
		agent.keys.trust = bcd_trust_bundles_new(&agent.keys);
		if (agent.keys.trust == NULL)
		{
			bcd_log("out of memory");
			goto out;
		}
		(void) bcd_trust_bundles_refresh(agent.http, agent.keys.trust);
	}
	if (!opts->once && !opts->memory_only && start_services(&agent, &services) != BC_OK)
		goto out;
	rc = run_agent(&agent);
	if (rc == BCD_RC_STOPPED)
		bcd_log("stopped by a signal");
out:
	stop_services(&agent, &services);
	bcd_http_free(agent.http);
	bcd_trust_bundles_free(agent.keys.trust);
	bcd_service_keys_free(&agent.keys);
	if (started && opts->producer->stop != NULL)
		opts->producer->stop();
	if (lock_fd >= 0)
		close(lock_fd);
	return rc;
}

