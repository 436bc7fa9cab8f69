/*
 * join_loop.c: join through the gateway until a certificate is issued, the
 * service refuses, or a stop signal arrives: the behaviour of runAgentJoin.
 *
 * One key and one CSR (kept in DIR/join/, so a restart reuses them; bcd
 * ramdisk: in memory only) serve every round.  Each round seals the token afresh (the same CSR); every
 * answer is verified (signature, csrSha256, chain) before anything in it is
 * used.  The evidence comes from the attestor's producer (producers/).
 * pending: wait retryAfterSeconds (clamped to [1, --max-retry-after],
 * +-10%) and ask again.  challenge: the producer of the attestor named
 * answers, when it answers challenges (join-token answers none).  No answer, 429 or 5xx: exponential backoff.
 * 403: the refusal is final.  A deferral is never taken for a join.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "core/fileio.h"
#include "core/join_loop.h"
#include "core/join_request.h"
#include "core/log.h"
#include "core/signals.h"
#include "core/verify.h"
#include "producers/producer.h"

/* Seconds to wait on pending when the service did not say. */
#define PENDING_DEFAULT_WAIT 30

/* What one round of the join needs and keeps across rounds. */
typedef struct join_state
{
	char	   *dir;			/* DIR/join */
	char	   *key_path;		/* DIR/join/node.key */
	EVP_PKEY   *key;
	unsigned char *csr;
	size_t		csr_len;
	json_t	   *claims;
	bcd_evidence answer;		/* a producer's answer to a challenge, for the next round */
	int			answered;		/* answer holds one */
	const char *attestor;		/* --attestor, or the held credential's prover's */
	const bcd_credential *held;	/* the certificate held (bcd_producer_held), else NULL */
	char	   *held_node_id;
} join_state;

/*
 * The producer of attestor for this join: the one proving a held
 * credential, the one the command line configured, else bcd's own.
 */
static const bcd_producer *
producer_of(bcd_agent *a, const join_state *js, const char *attestor)
{
	if (js->held != NULL)
		return bcd_producer_held();
	if (strcmp(attestor, js->attestor) == 0 && a->opts->producer != NULL)
		return a->opts->producer;
	return bcd_producer_for(attestor);
}

/* What a producer of this join works from. */
static bcd_producer_input
producer_input(bcd_agent *a, const join_state *js)
{
	bcd_producer_input in = {
		.keys = &a->keys,.csr = js->csr,.csr_len = js->csr_len,
		.token = a->opts->token,.token_file = a->opts->token_file,.key_path = js->key_path,
		.attestor = js->attestor,.role = a->opts->role,.claims = js->claims
	};

	if (js->held != NULL)
	{
		in.held_key = js->held->key;
		in.held_leaf = js->held->leaf;
		in.held_node_id = js->held_node_id;
	}
	return in;
}

/* The JoinRequest of this round: the producer's evidence made afresh, the same CSR. */
static int
round_request(bcd_agent *a, join_state *js, char **text, char *err, size_t errlen)
{
	const bcd_run_opts *o = a->opts;
	const bcd_producer *producer = producer_of(a, js, js->attestor);
	bcd_producer_input in = producer_input(a, js);
	bcd_evidence ev = {0};
	const bcd_evidence *use = &ev;
	json_t	   *claims = js->claims;
	int			rc = BC_OK;

	if (js->answered)
		use = &js->answer;
	else
		rc = producer->produce(&in, &ev, err, errlen);
	/* claims a producer adds (the external one may) over bcd's own */
	if (rc == BC_OK && use->claims != NULL &&
		((claims = json_deep_copy(js->claims)) == NULL ||
		 json_object_update(claims, use->claims) != 0))
		rc = BC_ENOMEM;
	if (rc == BC_OK)
	{
		rc = bcd_join_request_json(js->csr, js->csr_len, o->role, js->attestor,
								   use->attestation, use->sealed_token, claims, text);
		if (rc != BC_OK)
			snprintf(err, errlen, "cannot build the JoinRequest (%s)", bc_status_str(rc));
	}
	if (claims != js->claims)
		json_decref(claims);
	bcd_evidence_free(&ev);
	return rc;
}

/* Act on a verified deferral: wait (pending), or have the producer answer a challenge. */
static bcd_rc
on_deferral(bcd_agent *a, join_state *js, const bcd_answer *ans)
{
	const char *attestor = ans->attestor != NULL ? ans->attestor : js->attestor;
	const bcd_producer *producer = producer_of(a, js, attestor);
	bcd_producer_input in = producer_input(a, js);
	long		wait = ans->retry_after > 0 ? ans->retry_after : PENDING_DEFAULT_WAIT;
	char		err[512];
	double		jittered;
	int			made;

	if (strcmp(ans->status, BC_STATUS_CHALLENGE) == 0)
	{
		if (producer->answer == NULL ||
			(producer->attestor != NULL && strcmp(producer->attestor, attestor) != 0))
		{
			bcd_log("join: the service sent a challenge for attestor %s, but no producer "
					"answers challenges for %s", attestor, attestor);
			return BCD_RC_FAILED;
		}
		bcd_evidence_free(&js->answer);
		js->answered = 0;
		if (ans->challenge == NULL)
		{
			bcd_log("join: the producer of %s cannot answer the challenge: the challenge is "
					"empty", attestor);
			return BCD_RC_FAILED;
		}
		made = producer->answer(&in, ans->challenge, &js->answer, err, sizeof(err));
		if (made == BCD_PRODUCER_RETRY)
		{
			/* not now: back off, and start the join over at round 1 (a new challenge) */
			bcd_evidence_free(&js->answer);
			jittered = bcd_backoff_next(&a->backoff, -1, a->opts->max_retry_after);
			bcd_log("join: the challenge cannot be answered now (%s); starting over in %.1f s",
					err, jittered);
			return bcd_sleep(jittered) ? BCD_RC_STOPPED : BCD_RC_RETRY;
		}
		if (made != BC_OK)
		{
			bcd_evidence_free(&js->answer);
			bcd_log("join: the producer of %s cannot answer the challenge: %s", attestor, err);
			return BCD_RC_FAILED;
		}
		js->answered = 1;
		return BCD_RC_RETRY;
	}
	if (wait > a->opts->max_retry_after)
		wait = a->opts->max_retry_after;
	if (wait < 1)
		wait = 1;
	jittered = bcd_jitter((double) wait, 0.1);
	bcd_log("join: pending (request %s awaits an operator's decision); asking again in %.1f s",
			ans->request_id != NULL ? ans->request_id : "?", jittered);
	return bcd_sleep(jittered) ? BCD_RC_STOPPED : BCD_RC_RETRY;
}

/* Store a verified issued answer as the node's credential. */
static bcd_rc
on_issued(bcd_agent *a, join_state *js, const bcd_answer *ans, bcd_credential *cred)
{
	char		err[512];

	if (a->opts->memory_only)
		;						/* bcd ramdisk: the key stays in memory, nothing is written */
	else if (bcd_store_commit(a->opts->state_dir, js->key, ans->chain_pem, ans->chain_pem_len,
							  err, sizeof(err)) != BC_OK)
	{
		bcd_log("join: %s", err);
		return BCD_RC_FAILED;
	}
	else
		bcd_store_forget_work(a->opts->state_dir, "join");
	if (bcd_credential_fill(cred, js->key, ans->leaf) != BC_OK)
		return BCD_RC_FAILED;
	bcd_log("joined as %s (serial %s, not after %s)", cred->spiffe_id, cred->serial,
			cred->not_after_text);
	return BCD_RC_OK;
}

/* One round: BCD_RC_OK, BCD_RC_REFUSED, BCD_RC_FAILED, BCD_RC_RETRY or BCD_RC_STOPPED. */
static bcd_rc
join_round(bcd_agent *a, join_state *js, bcd_credential *cred)
{
	bcd_http_reply reply;
	bcd_answer	ans;
	char		err[512];
	char	   *request = NULL;
	double		wait;
	bcd_rc		rc;

	int			made;

	memset(&ans, 0, sizeof(ans));
	memset(&reply, 0, sizeof(reply));
	made = round_request(a, js, &request, err, sizeof(err));
	if (made == BCD_PRODUCER_RETRY)
	{
		wait = bcd_backoff_next(&a->backoff, -1, a->opts->max_retry_after);
		bcd_log("join: the evidence cannot be made now (%s); trying again in %.1f s", err, wait);
		rc = bcd_sleep(wait) ? BCD_RC_STOPPED : BCD_RC_RETRY;
		goto out;
	}
	if (made != BC_OK)
	{
		bcd_log("join: %s", err);
		rc = BCD_RC_FAILED;
		goto out;
	}
	rc = bcd_http_exchange(a->http, BC_PATH_JOIN, request, &reply, err, sizeof(err));
	if (rc == BCD_RC_RETRY)
	{
		wait = bcd_backoff_next(&a->backoff, reply.retry_after, a->opts->max_retry_after);
		bcd_log("join: no answer (%s); trying again in %.1f s", err, wait);
		rc = bcd_sleep(wait) ? BCD_RC_STOPPED : BCD_RC_RETRY;
		goto out;
	}
	if (rc == BCD_RC_FAILED)
		bcd_log("join: the gateway answered %s; giving up", err);
	if (rc != BCD_RC_OK)
		goto out;
	rc = bcd_answer_verify_fresh(a->http, &a->keys, reply.body, reply.len, js->csr, js->csr_len,
						   js->key, &ans, err, sizeof(err));
	/* an answer resets the backoff, but a challenge only once it is answered */
	if (rc != BCD_RC_DEFERRED || ans.status == NULL ||
		strcmp(ans.status, BC_STATUS_CHALLENGE) != 0)
		bcd_backoff_reset(&a->backoff);
	if (rc == BCD_RC_OK)
		rc = on_issued(a, js, &ans, cred);
	else if (rc == BCD_RC_DEFERRED)
		rc = on_deferral(a, js, &ans);
	else if (rc == BCD_RC_REFUSED)
		bcd_log("join: the service refused the %s join (%s); a refusal is final, "
				"not trying again", js->attestor, ans.refusal);
	else
		bcd_log("join: the answer does not verify, nothing was stored: %s", err);
out:
	bcd_answer_free(&ans);
	bcd_http_reply_free(&reply);
	free(request);
	return rc;
}

/*
 * Join until a credential is stored in the state directory (filled into
 * cred): BCD_RC_OK, BCD_RC_REFUSED, BCD_RC_FAILED or BCD_RC_STOPPED.
 */
bcd_rc
bcd_join_loop(bcd_agent *a, const bcd_credential *held, bcd_credential *cred)
{
	join_state	js;
	const char *what = "cannot create the join directory";
	bcd_rc		rc = BCD_RC_FAILED;

	memset(&js, 0, sizeof(js));
	memset(cred, 0, sizeof(*cred));
	js.attestor = a->opts->attestor;
	if (held != NULL)
	{
		bc_spiffe_parts p;

		what = "the held certificate names no node";
		if (!bc_spiffe_parse(held->spiffe_id, NULL, &p) || p.session != NULL)
			goto out;
		js.held_node_id = strndup(p.node, p.node_len);
		if (js.held_node_id == NULL)
			goto out;
		js.held = held;
		what = "no producer proves a credential held";
		if (bcd_producer_held() == NULL)
			goto out;
		js.attestor = bcd_producer_held()->attestor;
		what = "cannot create the join directory";
	}
	if (!a->opts->memory_only)
	{
		js.dir = bcd_store_work_dir(a->opts->state_dir, "join");
		if (js.dir == NULL || (js.key_path = bcd_path_join(js.dir, "node.key")) == NULL)
			goto out;
	}
	if (bcd_node_key_and_csr(js.dir, &js.key, &js.csr, &js.csr_len, &what) != BC_OK)
		goto out;
	what = "--claims must be a JSON object";
	js.claims = bcd_build_claims(a->opts->claims, a->opts->hostname);
	if (js.claims == NULL)
		goto out;
	what = NULL;
	bcd_backoff_reset(&a->backoff);
	do
		rc = join_round(a, &js, cred);
	while (rc == BCD_RC_RETRY);
out:
	if (what != NULL)
		bcd_log("join: %s", what);
	json_decref(js.claims);
	bcd_evidence_free(&js.answer);
	free(js.csr);
	bcd_node_key_free(js.key);
	free(js.key_path);
	free(js.dir);
	free(js.held_node_id);
	return rc;
}
