/*
 * provision.c: one provisioning of a session credential through POST
 * /v1/session (bc_join.issue_session), run by a worker of the provisioner.
 *
 * A fresh P-256 key is generated for it, here and now (never in advance,
 * never kept spare), with its CSR; the request is proven by the node's
 * current key exactly as a renewal is (bcd_proof_request in proof.c), with
 * the session and context selectors added to the proof.  The answer is
 * verified like a join's (verify.c: the pinned signing key, csrSha256 of our
 * own CSR, the leaf certifies the new key and chains to the pinned node CA),
 * and then must name the node's own SPIFFE ID followed by /session/
 * <sessionId>, and the session and context asked for.  Only then are the key
 * and chain handed back, for delivery (delivery.c).
 *
 * SSH.  When the job asks for an SSH user certificate (bcd run
 * --ssh-user-certs, or a hook's bcd credential --ssh), the proof says
 * "sshUser": true, signed with the rest, so the gateway can neither add nor
 * drop it.  The answer then carries sshCertificate and sshSerial when the
 * pool's rule allowed one; ssh_user.c checks that it is a user certificate
 * of this session key before it is handed back with the key.  Without one
 * (none issued, or one not taken) the X.509 credential is still delivered,
 * and the reason is logged and kept for the hooks that asked (sessions.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "core/json.h"
#include "core/log.h"
#include "core/proof.h"
#include "core/provision.h"
#include "core/ssh_user.h"
#include "core/verify.h"

/* Check that a verified issued answer is for this node, session and context. */
static int
check_session(const bcd_node_snapshot *node, const bcd_job *job, const bcd_answer *ans,
			  char *err, size_t errlen)
{
	const char *session_id = bcd_json_str(ans->payload, "sessionId", NULL);
	char		want[1024];

	if (session_id == NULL)
	{
		snprintf(err, errlen, "the answer names no sessionId");
		return BC_EVERIFY;
	}
	if (!bc_spiffe_session_of(want, sizeof(want), node->spiffe_id, session_id) ||
		strcmp(want, ans->spiffe_id) != 0)
	{
		snprintf(err, errlen, "the certificate names %.200s, not a session of this node",
				 ans->spiffe_id);
		return BC_EVERIFY;
	}
	if (strcmp(bcd_json_str(ans->payload, "session", ""), job->session) != 0 ||
		strcmp(bcd_json_str(ans->payload, "context", ""), job->context) != 0)
	{
		snprintf(err, errlen, "the answer is for another session or context");
		return BC_EVERIFY;
	}
	return BC_OK;
}

/* Take a verified, checked answer's key and chain into job's result. */
static void
take_issued(bcd_job *job, EVP_PKEY *key, bcd_answer *ans)
{
	if (bcd_key_pem(key, &job->key_pem, &job->key_len) != BC_OK)
	{
		bcd_job_fail(job, BCD_CODE_FAILED, BCD_RESULT_FAILED, "cannot encode the session key");
		return;
	}
	job->chain_pem = ans->chain_pem;
	job->chain_len = ans->chain_pem_len;
	ans->chain_pem = NULL;
	snprintf(job->not_after, sizeof(job->not_after), "%s", ans->not_after);
	snprintf(job->serial, sizeof(job->serial), "%s", ans->serial);
	snprintf(job->spiffe_id, sizeof(job->spiffe_id), "%s", ans->spiffe_id);
	job->code = BCD_CODE_OK;
	job->result = BCD_RESULT_ISSUED;
	job->message[0] = '\0';
}

/*
 * Take the SSH user certificate of an issued answer for key into job (it
 * asked for one): the line of the .key-cert.pub file and its serial, or why
 * there is none (logged).
 */
static void
take_ssh(bcd_job *job, EVP_PKEY *key, bcd_answer *ans)
{
	bcd_ssh_user_rc rc;

	rc = bcd_ssh_user_take(ans->payload, key, job->spiffe_id, &job->ssh_cert, job->ssh_serial,
						   job->ssh_why, sizeof(job->ssh_why));
	if (rc == BCD_SSH_USER_BAD)
		bcd_log("session %s%s%s: the SSH certificate of the answer is not taken: %s",
				job->session, job->context[0] ? " context " : "", job->context, job->ssh_why);
	else if (rc == BCD_SSH_USER_NONE)
		bcd_log("session %s%s%s: no SSH certificate: %s", job->session,
				job->context[0] ? " context " : "", job->context, job->ssh_why);
}

/* Act on the gateway's answer (200 or 403) to the session request of key and csr. */
static void
on_answer(bcd_http *http, const bcd_service_keys *keys, const bcd_node_snapshot *node, bcd_job *job,
		  const bcd_http_reply *reply, EVP_PKEY *key, const unsigned char *csr,
		  size_t csr_len)
{
	bcd_answer	ans;
	char		err[512];
	bcd_rc		rc;

	rc = bcd_answer_verify_fresh(http, keys, reply->body, reply->len, csr, csr_len, key, &ans,
								 err, sizeof(err));
	if (rc == BCD_RC_REFUSED)
		bcd_job_fail(job, BCD_CODE_REFUSED, BCD_RESULT_REFUSED,
				 "the service refused a session credential to this node (%s)", ans.refusal);
	else if (rc == BCD_RC_DEFERRED)
		bcd_job_fail(job, BCD_CODE_FAILED, BCD_RESULT_FAILED,
				 "the service answered %s to a session request", ans.status);
	else if (rc != BCD_RC_OK)
		bcd_job_fail(job, BCD_CODE_FAILED, BCD_RESULT_FAILED, "the answer does not verify: %s", err);
	else if (check_session(node, job, &ans, err, sizeof(err)) != BC_OK)
		bcd_job_fail(job, BCD_CODE_FAILED, BCD_RESULT_FAILED, "the answer does not verify: %s", err);
	else
	{
		take_issued(job, key, &ans);
		if (job->code == BCD_CODE_OK && job->ssh_user)
			take_ssh(job, key, &ans);
	}
	bcd_answer_free(&ans);
}

/*
 * Provision job's session credential with the node credential node (which
 * is present): fill job's result (code BCD_CODE_OK with the key and chain,
 * or a failure with its message).  Logs one line either way.
 */
void
bcd_provision(const bcd_service_keys *keys, bcd_http *http, const bcd_node_snapshot *node,
			  bcd_job *job)
{
	EVP_PKEY   *key = NULL;
	unsigned char *csr = NULL;
	size_t		csr_len = 0;
	json_t	   *extra = NULL;
	json_t	   *caller;
	char	   *body = NULL;
	bcd_http_reply reply;
	char		err[512];
	bcd_rc		rc;

	memset(&reply, 0, sizeof(reply));
	bcd_job_clear_result(job);
	key = bc_p256_generate();
	extra = job->context[0] != '\0' ?
		json_pack("{s:s, s:s}", "session", job->session, "context", job->context) :
		json_pack("{s:s}", "session", job->session);
	/* who asked: the host's claim, signed with the rest (docs/sessions.md, "Who asked") */
	if (extra != NULL && (caller = bcd_peer_json(&job->caller)) != NULL)
		json_object_set_new(extra, "caller", caller);
	/* an SSH user certificate too: signed, so the gateway can neither add nor drop it */
	if (extra != NULL && job->ssh_user && json_object_set_new(extra, "sshUser", json_true()) != 0)
	{
		json_decref(extra);
		extra = NULL;
	}
	if (key == NULL || extra == NULL || bc_csr_create(key, NULL, &csr, &csr_len) != BC_OK ||
		bcd_proof_request(node->key, node->serial, BC_PURPOSE_SESSION, extra, csr, csr_len,
						  &body) != BC_OK)
	{
		bcd_job_fail(job, BCD_CODE_FAILED, BCD_RESULT_FAILED, "cannot make the key, CSR or proof");
		goto out;
	}
	rc = bcd_http_exchange(http, BC_PATH_SESSION, body, &reply, err, sizeof(err));
	if (rc == BCD_RC_STOPPED)
		bcd_job_fail(job, BCD_CODE_UNAVAILABLE, BCD_RESULT_UNAVAILABLE, "bcd is stopping");
	else if (rc == BCD_RC_RETRY && reply.status == 0)
		bcd_job_fail(job, BCD_CODE_UNAVAILABLE, BCD_RESULT_UNAVAILABLE,
				 "the gateway does not answer (%s); try again later", err);
	else if (rc == BCD_RC_RETRY)
		bcd_job_fail(job, BCD_CODE_UNAVAILABLE, BCD_RESULT_UNAVAILABLE,
				 "the service is unavailable (%s); try again later", err);
	else if (rc != BCD_RC_OK)
		bcd_job_fail(job, BCD_CODE_FAILED, BCD_RESULT_FAILED, "the gateway answered %s", err);
	else
		on_answer(http, keys, node, job, &reply, key, csr, csr_len);
out:
	if (job->code == BCD_CODE_OK)
		bcd_log("session %s%s%s: issued %s (serial %s, not after %s)%s%s", job->session,
				job->context[0] ? " context " : "", job->context, job->spiffe_id,
				job->serial, job->not_after, job->ssh_cert != NULL ?
				", SSH user certificate serial " : "", job->ssh_serial);
	else
		bcd_log("session %s%s%s: %s: %s", job->session, job->context[0] ? " context " : "",
				job->context, bcd_code_name(job->code), job->message);
	bcd_http_reply_free(&reply);
	json_decref(extra);
	free(body);
	free(csr);
	EVP_PKEY_free(key);
}
