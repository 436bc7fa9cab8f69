/*
 * renew.c: one renewal through POST /v1/renew.
 *
 * The request is {"csr": <base64url DER CSR of a new P-256 key>, "proof":
 * <JWS ES256 by the current node key over {"purpose":"renew","serial":
 * <current serial>,"csrSha256":<of the new CSR>,"iat":<now>}>}.  The answer
 * is verified like a join's (signature, csrSha256, chain, the leaf certifies
 * the new key) and must keep the SPIFFE ID (same tenant, same node) before
 * the new key and chain replace the old ones.  The proof is built by
 * bcd_proof_request, which session credentials share (sessions.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon.h"

/*
 * The body of a request proven by the node's current key (a renewal, a
 * session credential): {"csr": <base64url DER of csr>, "proof": <JWS ES256 by
 * node_key over {"purpose", "serial": <the current serial>, "csrSha256": <of
 * csr>, "iat": <now>} and the members of extra (may be NULL)>}.
 */
int
bcd_proof_request(EVP_PKEY *node_key, const char *serial, const char *purpose,
				  json_t *extra, const unsigned char *csr, size_t csr_len, char **body)
{
	char		csr_sha256[44];
	char	   *csr64 = NULL;
	char	   *claims = NULL;
	char	   *proof = NULL;
	json_t	   *doc = NULL;
	int			rc;

	*body = NULL;
	rc = bc_sha256_b64url(csr, csr_len, csr_sha256);
	if (rc != BC_OK)
		goto out;
	rc = BC_ENOMEM;
	doc = json_pack("{s:s, s:s, s:s, s:I}", "purpose", purpose, "serial", serial,
					"csrSha256", csr_sha256, "iat", (json_int_t) time(NULL));
	if (doc == NULL || (extra != NULL && json_object_update(doc, extra) != 0) ||
		(claims = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER)) == NULL)
		goto out;
	rc = bc_jws_sign_es256(node_key, NULL, (const unsigned char *) claims,
						   strlen(claims), &proof);
	if (rc != BC_OK)
		goto out;
	rc = BC_ENOMEM;
	csr64 = bc_b64url_encode_alloc(csr, csr_len);
	if (csr64 == NULL)
		goto out;
	json_decref(doc);
	doc = json_pack("{s:s, s:s}", "csr", csr64, "proof", proof);
	if (doc != NULL &&
		(*body = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER)) != NULL)
		rc = BC_OK;
out:
	json_decref(doc);
	free(claims);
	free(proof);
	free(csr64);
	return rc;
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
	if (bcd_store_commit(a->opts->state_dir, key, ans->chain_pem, ans->chain_pem_len,
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
	workdir = bcd_store_work_dir(a->opts->state_dir, "renew");
	if (workdir == NULL ||
		bcd_node_key_and_csr(workdir, &key, &csr, &csr_len, &what) != BC_OK ||
		bcd_proof_request(cur->key, cur->serial, BC_PURPOSE_RENEW, NULL, csr, csr_len, &body) != BC_OK)
	{
		bcd_log("renew: cannot make the new key, CSR or proof (%s)", what);
		goto out;
	}
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
	rc = bcd_answer_verify(&a->keys, reply.body, reply.len, csr, csr_len, key,
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
	EVP_PKEY_free(key);
	return rc;
}
