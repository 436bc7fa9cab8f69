/*
 * proof.c: a request proven by the node's current key, shared by renewal
 * (renewal.c) and session credentials (provision.c); the service checks it
 * in src/ext/proof.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "core/log.h"
#include "core/proof.h"
#include "core/tpm_key.h"

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
	bcd_tpm_key_lock();
	rc = bc_jws_sign_es256(node_key, NULL, (const unsigned char *) claims,
						   strlen(claims), &proof);
	bcd_tpm_key_unlock();
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

/* A proof by the node key over purpose, serial, iat and extra's members; malloc()ed JWS. */
char *
bcd_node_proof(const bcd_credential *cred, const char *purpose, json_t *extra)
{
	json_t	   *doc = json_pack("{s:s, s:s, s:I}", "purpose", purpose, "serial", cred->serial,
								"iat", (json_int_t) time(NULL));
	char	   *claims = NULL;
	char	   *jws = NULL;

	if (doc == NULL || (extra != NULL && json_object_update(doc, extra) != 0) ||
		(claims = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER)) == NULL)
		goto out;
	bcd_tpm_key_lock();
	if (bc_jws_sign_es256(cred->key, NULL, (const unsigned char *) claims, strlen(claims),
						  &jws) != BC_OK)
		jws = NULL;
	bcd_tpm_key_unlock();
out:
	json_decref(doc);
	free(claims);
	return jws;
}

/*
 * POST body to path and verify the answer's signed payload: the purpose,
 * our node (the SPIFFE ID ends in /node/<nodeId>).  The payload with *rc
 * BCD_RC_OK, or NULL (logged) with *rc and why in err: BCD_RC_REFUSED (the
 * service refused; its reason is in bc_join.events), BCD_RC_RETRY (no
 * answer, 429 or 5xx), BCD_RC_STOPPED, or BCD_RC_FAILED (any other status,
 * an answer not signed by the pinned key or not for this node).
 */
json_t *
bcd_node_exchange_rc(bcd_http *http, const bcd_service_keys *keys, const bcd_credential *cred,
					 const char *path, const char *body, const char *purpose, bcd_rc *rc,
					 char *err, size_t errlen)
{
	static const char *const issued[] = {BC_STATUS_ISSUED, NULL};

	return bcd_node_exchange_status(http, keys, cred, path, body, purpose, issued, rc,
									err, errlen);
}

/* 1 when status is one of the NULL-terminated list. */
static int
status_in(const char *status, const char *const *list)
{
	for (; status != NULL && *list != NULL; list++)
		if (strcmp(status, *list) == 0)
			return 1;
	return 0;
}

/*
 * The same for a request answered with one of several signed statuses
 * (statuses, NULL-terminated): the signed payload's "status" must be the
 * outer one; its "purpose" is not looked at when purpose is NULL.
 */
json_t *
bcd_node_exchange_status(bcd_http *http, const bcd_service_keys *keys,
						 const bcd_credential *cred, const char *path, const char *body,
						 const char *purpose, const char *const *statuses, bcd_rc *rc,
						 char *err, size_t errlen)
{
	bcd_http_reply reply;
	json_t	   *doc = NULL;
	json_t	   *payload = NULL;
	unsigned char *pl = NULL;
	size_t		plen = 0;
	const char *status;
	const char *jws;
	const char *node;
	bc_spiffe_parts sp;
	int			unknown_kid = 0;

	memset(&reply, 0, sizeof(reply));
	*rc = bcd_http_exchange(http, path, body, &reply, err, errlen);
	if (*rc != BCD_RC_OK)
	{
		if (*rc == BCD_RC_RETRY && reply.status == 0)
		{
			char		why[512];

			snprintf(why, sizeof(why), "%s", err);
			snprintf(err, errlen, "the gateway does not answer (%s)", why);
		}
		else if (*rc == BCD_RC_STOPPED)
			snprintf(err, errlen, "bcd is stopping");
		bcd_log("%s: %s", path, err);
		goto out;
	}
	*rc = BCD_RC_FAILED;
	doc = json_loadb(reply.body, reply.len, JSON_REJECT_DUPLICATES, NULL);
	status = json_string_value(json_object_get(doc, "status"));
	jws = json_string_value(json_object_get(doc, "response"));
	if (status != NULL && strcmp(status, BC_STATUS_REFUSED) == 0)
	{
		*rc = BCD_RC_REFUSED;
		snprintf(err, errlen, "the service refused it (the reason is in bc_join.events, "
				 "security.join.refused)");
		bcd_log("%s: refused (the reason is in bc_join.events, security.join.refused)", path);
		goto out;
	}
	if (status_in(status, statuses) && jws != NULL &&
		bcd_service_keys_verify(keys, jws, strlen(jws), BCD_HTTP_BODY_MAX, &pl, &plen,
								&unknown_kid) != BC_OK && unknown_kid &&
		bcd_service_keys_refresh(http, keys) == BC_OK)
		(void) bcd_service_keys_verify(keys, jws, strlen(jws), BCD_HTTP_BODY_MAX, &pl, &plen, NULL);
	if (pl == NULL)
	{
		snprintf(err, errlen, "the answer is not signed by the pinned signing key");
		bcd_log("%s: the answer is not signed by the pinned signing key; ignored", path);
		goto out;
	}
	payload = json_loadb((const char *) pl, plen, JSON_REJECT_DUPLICATES, NULL);
	node = json_string_value(json_object_get(payload, "nodeId"));
	if (payload == NULL ||
		(purpose != NULL && (!json_is_string(json_object_get(payload, "purpose")) ||
							 strcmp(json_string_value(json_object_get(payload, "purpose")),
									purpose) != 0)) ||
		node == NULL || !bc_spiffe_parse(cred->spiffe_id, NULL, &sp) || sp.session != NULL ||
		strlen(node) != sp.node_len || strncmp(sp.node, node, sp.node_len) != 0 ||
		(json_object_get(payload, "status") != NULL &&
		 (!json_is_string(json_object_get(payload, "status")) ||
		  strcmp(json_string_value(json_object_get(payload, "status")), status) != 0)))
	{
		snprintf(err, errlen, "the signed answer is not for this node or request");
		bcd_log("%s: the signed answer is not for this node or request; ignored", path);
		json_decref(payload);
		payload = NULL;
		goto out;
	}
	*rc = BCD_RC_OK;
out:
	free(pl);
	json_decref(doc);
	bcd_http_reply_free(&reply);
	return payload;
}

/* bcd_node_exchange_rc for a caller that needs no reason: the payload or NULL (logged). */
json_t *
bcd_node_exchange(bcd_http *http, const bcd_service_keys *keys, const bcd_credential *cred,
				  const char *path, const char *body, const char *purpose)
{
	char		err[512];
	bcd_rc		rc;

	return bcd_node_exchange_rc(http, keys, cred, path, body, purpose, &rc, err, sizeof(err));
}
