/*
 * renewal.c: renewing the node certificate: when it is due (at --renew-at
 * of its lifetime), one renewal through POST /v1/renew, and the retries
 * until one succeeds.
 *
 * The request is {"csr": <base64url DER CSR of a new P-256 key>, "proof":
 * <JWS ES256 by the current node key over {"purpose":"renew","serial":
 * <current serial>,"csrSha256":<of the new CSR>,"iat":<now>}>}.  The answer
 * is verified like a join's (signature, csrSha256, chain, the leaf certifies
 * the new key) and must keep the SPIFFE ID (same tenant, same node) before
 * the new key and chain replace the old ones.  The proof is built by
 * bcd_proof_request (proof.c), which session credentials share.  The
 * producer of the node's attestor adds what the new key needs (its renewal
 * hook: tpm makes the new key in the TPM and adds "tpm").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "core/fileio.h"
#include "core/log.h"
#include "core/proof.h"
#include "core/renewal.h"
#include "core/signals.h"
#include "core/tpm_key.h"
#include "core/verify.h"

/*
 * What the producer of the node's attestor adds to a renewal for the new
 * key (tpm: its AK certifying the new key, made in the TPM too).  body is
 * replaced by the body with those members.
 */
static int
add_producer_members(bcd_agent *a, const char *workdir, char **body)
{
	const bcd_producer *producer = a->opts->producer;
	char	   *key_path = bcd_path_join(workdir, "node.key");
	char		err[512];
	json_t	   *doc = NULL;
	char	   *text = NULL;
	const char *csr_b64;
	unsigned char *csr = NULL;
	size_t		csr_len = 0;
	bcd_producer_input in;
	int			rc = BC_ENOMEM;

	if (key_path == NULL)
		goto out;
	doc = json_loads(*body, 0, NULL);
	csr_b64 = doc != NULL ? json_string_value(json_object_get(doc, "csr")) : NULL;
	if (csr_b64 == NULL ||
		(csr = malloc(bc_b64url_decoded_maxlen(strlen(csr_b64)) + 1)) == NULL ||
		bc_b64url_decode(csr_b64, strlen(csr_b64), csr, bc_b64url_decoded_maxlen(strlen(csr_b64)),
						 &csr_len) != BC_OK)
		goto out;
	in = (bcd_producer_input) {.keys = &a->keys,.csr = csr,.csr_len = csr_len,
		.key_path = key_path,.attestor = a->opts->attestor,.role = a->opts->role};
	rc = producer->renewal(&in, doc, err, sizeof(err));
	if (rc != BC_OK)
	{
		bcd_log("renew: the %s producer cannot prove the new key: %s", a->opts->attestor, err);
		goto out;
	}
	rc = BC_ENOMEM;
	if ((text = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER)) == NULL)
		goto out;
	free(*body);
	*body = text;
	rc = BC_OK;
out:
	free(csr);
	json_decref(doc);
	free(key_path);
	return rc;
}

/*
 * 1 when the pending key of DIR/renew is the current node key: the renewal
 * was stored (bcd_store_commit) and bcd stopped before removing DIR/renew.
 * Asking again with it would be refused (the service refuses a key already
 * in use), so the next renewal starts from a new key instead.
 */
static int
committed_already(EVP_PKEY *pending, EVP_PKEY *cur)
{
	int			same;

	bcd_tpm_key_lock();
	same = EVP_PKEY_eq(pending, cur) == 1;
	bcd_tpm_key_unlock();
	return same;
}

/* Check that a verified answer renews cur (issued, same SPIFFE ID), then store it. */
static bcd_rc
accept_renewal(bcd_agent *a, const bcd_credential *cur, EVP_PKEY *key,
			   const bcd_answer *ans, bcd_credential *next)
{
	char		err[512];

	if (strcmp(ans->spiffe_id, cur->spiffe_id) != 0)
	{
		bcd_log("renew: the new certificate names %s, not this node (%s); nothing was stored",
				ans->spiffe_id, cur->spiffe_id);
		return BCD_RC_FAILED;
	}
	if (!a->opts->memory_only &&
		bcd_store_commit(a->opts->state_dir, key, ans->chain_pem, ans->chain_pem_len,
						 err, sizeof(err)) != BC_OK)
	{
		bcd_log("renew: %s", err);
		return BCD_RC_FAILED;
	}
	if (bcd_credential_fill(next, key, ans->leaf) != BC_OK)
		return BCD_RC_FAILED;
	bcd_log("renewed %s: serial %s replaces %s, not after %s", next->spiffe_id,
			next->serial, cur->serial, next->not_after_text);
	return BCD_RC_OK;
}

/*
 * Renew cur once.  BCD_RC_OK (next filled, stored), BCD_RC_REFUSED,
 * BCD_RC_FAILED (a bad answer or a permanent error: nothing stored),
 * BCD_RC_RETRY (no answer, 429 or 5xx; *retry_after from the gateway or -1)
 * or BCD_RC_STOPPED.  The new key and CSR are kept in DIR/renew until the
 * renewal is answered, so a retry after a lost answer asks for the same key
 * (and the service answers with the certificate it already issued to it).
 */
bcd_rc
bcd_renew(bcd_agent *a, const bcd_credential *cur, bcd_credential *next,
		  long *retry_after)
{
	EVP_PKEY   *key = NULL;
	unsigned char *csr = NULL;
	size_t		csr_len = 0;
	char	   *body = NULL;
	bcd_http_reply reply;
	bcd_answer	ans;
	char		err[512];
	char	   *workdir = NULL;
	const char *what = "";
	bcd_rc		rc = BCD_RC_FAILED;

	memset(&reply, 0, sizeof(reply));
	memset(&ans, 0, sizeof(ans));
	memset(next, 0, sizeof(*next));
	*retry_after = -1;
	if (a->opts->memory_only)
	{
		/*
		 * bcd ramdisk: the new key in memory only.  An answer lost on the way
		 * cannot be asked for again with the same key; the next try makes a
		 * new one (docs/agent.md, "bcd ramdisk").
		 */
		if (bcd_node_key_and_csr(NULL, &key, &csr, &csr_len, &what) != BC_OK ||
			bcd_proof_request(cur->key, cur->serial, BC_PURPOSE_RENEW, NULL, csr, csr_len,
							  &body) != BC_OK)
		{
			bcd_log("renew: cannot make the new key, CSR or proof (%s)", what);
			goto out;
		}
		goto exchange;
	}
	workdir = bcd_store_work_dir(a->opts->state_dir, "renew");
	if (workdir != NULL &&
		bcd_node_key_and_csr(workdir, &key, &csr, &csr_len, &what) == BC_OK &&
		committed_already(key, cur->key))
	{
		/* Stored, then killed before DIR/renew was removed: start from a new key. */
		bcd_log("renew: the pending key in %s/renew is already the node key (a renewal "
				"stored before bcd stopped); starting from a new key", a->opts->state_dir);
		bcd_node_key_free(key);
		key = NULL;
		free(csr);
		csr = NULL;
		free(workdir);
		bcd_store_forget_work(a->opts->state_dir, "renew");
		workdir = bcd_store_work_dir(a->opts->state_dir, "renew");
		if (workdir != NULL &&
			bcd_node_key_and_csr(workdir, &key, &csr, &csr_len, &what) != BC_OK)
		{
			bcd_node_key_free(key);
			key = NULL;
		}
	}
	if (workdir == NULL || key == NULL ||
		bcd_proof_request(cur->key, cur->serial, BC_PURPOSE_RENEW, NULL, csr, csr_len, &body) != BC_OK)
	{
		bcd_log("renew: cannot make the new key, CSR or proof (%s)", what);
		goto out;
	}
	if (a->opts->producer != NULL && a->opts->producer->renewal != NULL &&
		add_producer_members(a, workdir, &body) != BC_OK)
		goto out;
exchange:
	rc = bcd_http_exchange(a->http, BC_PATH_RENEW, body, &reply, err, sizeof(err));
	if (rc == BCD_RC_RETRY)
	{
		*retry_after = reply.retry_after;
		bcd_log("renew: no answer (%s)", err);
	}
	else if (rc == BCD_RC_FAILED)
		bcd_log("renew: the gateway answered %s", err);
	if (rc != BCD_RC_OK)
		goto out;
	rc = bcd_answer_verify_fresh(a->http, &a->keys, reply.body, reply.len, csr, csr_len, key,
						   &ans, err, sizeof(err));
	if (rc == BCD_RC_OK)
		rc = accept_renewal(a, cur, key, &ans, next);
	else if (rc == BCD_RC_REFUSED)
		bcd_log("renew: the service refused the renewal of serial %s (%s); nothing was stored",
				cur->serial, ans.refusal);
	else if (rc == BCD_RC_DEFERRED)
	{
		bcd_log("renew: the service answered %s to a renewal; nothing was stored", ans.status);
		rc = BCD_RC_FAILED;
	}
	else
		bcd_log("renew: the answer does not verify, nothing was stored: %s", err);
out:
	/* Answered, stored or refused: the next renewal starts from a new key. */
	if (workdir != NULL && (rc == BCD_RC_OK || rc == BCD_RC_REFUSED))
		bcd_store_forget_work(a->opts->state_dir, "renew");
	free(workdir);
	bcd_answer_free(&ans);
	bcd_http_reply_free(&reply);
	free(body);
	free(csr);
	bcd_node_key_free(key);
	return rc;
}

/*
 * Seconds from now until the renewal of cred is due (0: now), +-10% of it at
 * random: at --renew-at of the lifetime, counted from notBefore, or from when
 * we got the certificate when that is later (the service backdates notBefore
 * for clock skew, which would otherwise eat a short lifetime).
 */
double
bcd_renewal_delay(const bcd_run_opts *o, const bcd_credential *cred)
{
	int64_t		start = cred->obtained > cred->not_before ? cred->obtained : cred->not_before;
	double		lifetime = (double) (cred->not_after - start);
	double		due = (double) start + o->renew_at * lifetime;
	double		delay = due - (double) time(NULL);

	return delay > 0 ? bcd_jitter(delay, 0.1) : 0;
}

/*
 * Renew cred until it is renewed (cred replaced), backing off on failures.
 * BCD_RC_OK, BCD_RC_STOPPED, BCD_RC_RETRY (expired: join again, as the
 * same node by x509pop first), or with --once the failure's outcome.
 */
bcd_rc
bcd_renew_until_done(bcd_agent *a, bcd_credential *cred)
{
	const bcd_run_opts *o = a->opts;
	bcd_credential next;
	long		retry_after;
	double		wait;
	bcd_rc		rc;

	bcd_backoff_reset(&a->backoff);
	for (;;)
	{
		rc = bcd_renew(a, cred, &next, &retry_after);
		if (rc == BCD_RC_OK)
		{
			bcd_credential_free(cred);
			*cred = next;
			/* Each renewal also takes up the service's current keys (logged when it fails). */
			if (!o->once)
				(void) bcd_service_keys_refresh(a->http, &a->keys);
			return BCD_RC_OK;
		}
		if (rc == BCD_RC_STOPPED || (o->once && rc != BCD_RC_RETRY))
			return rc;
		wait = bcd_backoff_next(&a->backoff, retry_after, o->max_retry_after);
		bcd_log("renew: trying again in %.1f s", wait);
		if (bcd_sleep(wait))
			return BCD_RC_STOPPED;
		if ((int64_t) time(NULL) >= cred->not_after && !o->once)
		{
			bcd_log("the certificate %s expired at %s; joining again", cred->serial,
					cred->not_after_text);
			return BCD_RC_RETRY;
		}
	}
}
