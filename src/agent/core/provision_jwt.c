/*
 * provision_jwt.c: one provisioning of a JWT-SVID through POST
 * /v1/jwt-svid (bc_join.issue_jwt_svid), run by a worker of the
 * provisioner exactly as a session credential is (workers.c): the Workload
 * API asks for it (workload/jwt_svids.c), coalesced by (session, context,
 * audiences) with every other caller of that key (provisioner.c).
 *
 * The request is {"proof": JWS by the node key over {purpose "jwt-svid",
 * serial, iat, audience, session, context?, caller?}} (proof.c); the answer
 * is verified with the pinned signing key (bcd_node_exchange_rc) and then
 * checked: the proof's SHA-256, the session and context asked for, a SPIFFE
 * ID that is a session of this node, a token, and its lifetime (expiresAt -
 * issuedAt, the service's own clock for both), which decides how long the
 * Workload API keeps it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "core/json.h"
#include "core/log.h"
#include "core/proof.h"
#include "core/provision.h"

/* The proof's claims beyond purpose, serial and iat: audience, session, context, caller. */
static json_t *
proof_extra(const bcd_job *job)
{
	json_t	   *extra = json_object();
	json_t	   *aud = json_array();
	json_t	   *who;
	int			bad = extra == NULL || aud == NULL;

	for (int i = 0; !bad && i < job->audience.n; i++)
		bad |= json_array_append_new(aud, json_string(job->audience.v[i])) != 0;
	bad |= json_object_set_new(extra, "audience", aud) != 0;
	aud = NULL;
	bad |= json_object_set_new(extra, "session", json_string(job->session)) != 0;
	if (job->context[0] != '\0')
		bad |= json_object_set_new(extra, "context", json_string(job->context)) != 0;
	/* who asked: the host's claim, signed with the rest (docs/sessions.md, "Who asked") */
	if ((who = bcd_peer_json(&job->caller)) != NULL)
		bad |= json_object_set_new(extra, "caller", who) != 0;
	json_decref(aud);
	if (bad)
	{
		json_decref(extra);
		return NULL;
	}
	return extra;
}

/*
 * Check a verified issued answer against the request (proof_sha the proof's
 * SHA-256) and take its token into job's result.
 */
static void
take_answer(const bcd_node_snapshot *node, bcd_job *job, json_t *payload, const char *proof_sha)
{
	const char *sid = bcd_json_str(payload, "sessionId", NULL);
	const char *token = bcd_json_str(payload, "token", NULL);
	const char *expires = bcd_json_str(payload, "expiresAt", NULL);
	const char *issued = bcd_json_str(payload, "issuedAt", NULL);
	char		want[sizeof(job->spiffe_id)];
	int64_t		exp_at = 0;
	int64_t		iat = 0;

	if (strcmp(bcd_json_str(payload, "proofSha256", ""), proof_sha) != 0 ||
		strcmp(bcd_json_str(payload, "session", ""), job->session) != 0 ||
		strcmp(bcd_json_str(payload, "context", ""), job->context) != 0 || sid == NULL ||
		!bc_spiffe_session_of(want, sizeof(want), node->spiffe_id, sid) ||
		strcmp(bcd_json_str(payload, "spiffeId", ""), want) != 0 || token == NULL ||
		expires == NULL || issued == NULL ||
		bc_cloud_parse_rfc3339(expires, &exp_at) != BC_OK ||
		bc_cloud_parse_rfc3339(issued, &iat) != BC_OK || exp_at <= iat)
	{
		bcd_job_fail(job, BCD_CODE_FAILED, BCD_RESULT_FAILED,
					 "the service's signed answer is not for this request; bcd ignored it");
		return;
	}
	job->token = strdup(token);
	if (job->token == NULL)
	{
		bcd_job_fail(job, BCD_CODE_FAILED, BCD_RESULT_FAILED, "out of memory");
		return;
	}
	job->token_ttl = (long) (exp_at - iat);
	memcpy(job->spiffe_id, want, sizeof(job->spiffe_id));
	job->code = BCD_CODE_OK;
	job->result = BCD_RESULT_ISSUED;
	job->message[0] = '\0';
}

/*
 * Provision job's JWT-SVID (job->audience, sorted) with the node credential
 * node (which is present): fill job's result (BCD_CODE_OK with token,
 * token_ttl and spiffe_id, or a failure with a message the Workload API
 * hands its caller).  Logs one line either way.
 */
void
bcd_provision_jwt(const bcd_service_keys *keys, bcd_http *http, const bcd_node_snapshot *node,
				  bcd_job *job)
{
	bcd_credential cred;
	json_t	   *extra = NULL;
	json_t	   *req = NULL;
	json_t	   *payload = NULL;
	char	   *proof = NULL;
	char	   *body = NULL;
	char		proof_sha[44];
	char		err[512];
	bcd_rc		rc;

	bcd_job_clear_result(job);
	memset(&cred, 0, sizeof(cred));
	cred.key = node->key;
	cred.spiffe_id = (char *) node->spiffe_id;
	snprintf(cred.serial, sizeof(cred.serial), "%s", node->serial);
	extra = proof_extra(job);
	proof = extra != NULL ? bcd_node_proof(&cred, BC_PURPOSE_JWT_SVID, extra) : NULL;
	req = proof != NULL ? json_pack("{s:s}", "proof", proof) : NULL;
	body = req != NULL ? json_dumps(req, JSON_COMPACT) : NULL;
	if (body == NULL || bc_sha256_b64url(proof, strlen(proof), proof_sha) != BC_OK)
	{
		bcd_job_fail(job, BCD_CODE_FAILED, BCD_RESULT_FAILED, "cannot make the proof");
		goto out;
	}
	payload = bcd_node_exchange_rc(http, keys, &cred, BC_PATH_JWT_SVID, body,
								   BC_PURPOSE_JWT_SVID, &rc, err, sizeof(err));
	if (rc == BCD_RC_OK)
		take_answer(node, job, payload, proof_sha);
	else if (rc == BCD_RC_STOPPED)
		bcd_job_fail(job, BCD_CODE_UNAVAILABLE, BCD_RESULT_UNAVAILABLE, "bcd is stopping");
	else if (rc == BCD_RC_RETRY)
		bcd_job_fail(job, BCD_CODE_UNAVAILABLE, BCD_RESULT_UNAVAILABLE,
					 "no JWT-SVID: %s; try again later", err);
	else if (rc == BCD_RC_REFUSED)
		bcd_job_fail(job, BCD_CODE_REFUSED, BCD_RESULT_REFUSED,
					 "no JWT-SVID: the service refused this node a JWT-SVID for session %s "
					 "(not something the caller can fix: the node may be revoked or past its "
					 "bc_join.sessions_per_node or new_sessions_per_minute; the reason is in "
					 "bc_join.events, security.join.refused)", job->session);
	else
		bcd_job_fail(job, BCD_CODE_FAILED, BCD_RESULT_FAILED, "no JWT-SVID: %s", err);
out:
	if (job->code == BCD_CODE_OK)
		bcd_log("session %s%s%s: JWT-SVID of %s for %d audience(s), valid %ld s",
				job->session, job->context[0] ? " context " : "", job->context,
				job->spiffe_id, job->audience.n, job->token_ttl);
	else
		bcd_log("session %s%s%s: JWT-SVID: %s: %s", job->session,
				job->context[0] ? " context " : "", job->context, bcd_code_name(job->code),
				job->message);
	json_decref(payload);
	json_decref(req);
	json_decref(extra);
	free(proof);
	free(body);
}
