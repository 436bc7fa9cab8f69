/*
 * verify.c: verify an answer of bc_join() or bc_join.renew() before using
 * anything in it.  One piece of code serves `bcd verify-response` and the
 * daemon (`bcd run`, `bcd renew`):
 *
 *   1. the outer JSON: a refusal is reported as such (it is unsigned, so it
 *      is only ever a reason to stop, never a reason to change anything);
 *   2. the JWS verifies with the pinned signing key its kid names (ES256 only);
 *   3. the payload's csrSha256 is SHA-256 of our own CSR DER;
 *   4. for "issued": certificateChain decodes, its leaf certifies our key,
 *      chains to the pinned node CA root through the further certificates,
 *      which are that path and nothing else, the
 *      SPIFFE ID is the one answered (a session credential's ends in
 *      /session/<sessionId>), the serial is the one answered.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "core/json.h"
#include "core/verify.h"

/* Most certificates accepted in certificateChain. */
#define CHAIN_MAX 8

/* 1 when s is a refusal code we are willing to print: [A-Z_], 1 to 64 chars. */
static int
is_printable_code(const char *s)
{
	size_t		i;

	for (i = 0; s[i] != '\0'; i++)
	{
		if (i >= 64 || !((s[i] >= 'A' && s[i] <= 'Z') || s[i] == '_'))
			return 0;
	}
	return i > 0;
}

/*
 * Find the JWS in the response text: the "response" member of the outer
 * object, or the whole (trimmed) text.  An outer refusal is BCD_RC_REFUSED
 * with its code in ans->refusal.
 */
static bcd_rc
extract_jws(const char *text, size_t len, bcd_answer *ans, char **jws,
			size_t *jws_len, char *err, size_t errlen)
{
	json_t	   *outer = NULL;
	json_t	   *member;
	json_error_t jerr;
	const char *code = BC_REFUSAL_CODE;
	bcd_rc		rc = BCD_RC_FAILED;

	*jws = NULL;
	while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' ||
					   text[len - 1] == ' ' || text[len - 1] == '\t'))
		len--;
	while (len > 0 && (*text == ' ' || *text == '\n' || *text == '\t' || *text == '\r'))
	{
		text++;
		len--;
	}
	if (len == 0 || text[0] != '{')
	{
		*jws = strndup(text, len);
		*jws_len = len;
		if (*jws == NULL)
			snprintf(err, errlen, "out of memory");
		return *jws == NULL ? BCD_RC_FAILED : BCD_RC_OK;
	}
	outer = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!json_is_object(outer))
	{
		snprintf(err, errlen, "the response is not valid JSON");
		goto out;
	}
	member = json_object_get(outer, "status");
	if (json_is_string(member) && strcmp(json_string_value(member), BC_STATUS_REFUSED) == 0)
	{
		member = json_object_get(json_object_get(outer, "error"), "code");
		if (json_is_string(member) && is_printable_code(json_string_value(member)))
			code = json_string_value(member);
		snprintf(ans->refusal, sizeof(ans->refusal), "%s", code);
		snprintf(err, errlen, "refused: %s", code);
		rc = BCD_RC_REFUSED;
		goto out;
	}
	member = json_object_get(outer, "response");
	if (!json_is_string(member))
	{
		snprintf(err, errlen, "the response has no signed \"response\"");
		goto out;
	}
	*jws = strdup(json_string_value(member));
	*jws_len = json_string_length(member);
	rc = *jws == NULL ? BCD_RC_FAILED : BCD_RC_OK;
out:
	json_decref(outer);
	return rc;
}

/* Decode certificateChain (standard base64 DER, leaf first) into certs. */
static int
decode_chain(json_t *payload, X509 **certs, size_t *n_certs)
{
	json_t	   *chain = json_object_get(payload, "certificateChain");
	unsigned char *der = NULL;
	size_t		der_len;
	size_t		i;
	int			rc = BC_EINVAL;

	*n_certs = 0;
	if (!json_is_array(chain) || json_array_size(chain) == 0 ||
		json_array_size(chain) > CHAIN_MAX)
		return BC_EINVAL;
	der = malloc(BC_DER_MAX);
	if (der == NULL)
		return BC_ENOMEM;
	for (i = 0; i < json_array_size(chain); i++)
	{
		json_t	   *item = json_array_get(chain, i);

		rc = BC_EINVAL;
		if (!json_is_string(item))
			break;
		rc = bc_b64_decode(json_string_value(item), json_string_length(item),
						   der, BC_DER_MAX, &der_len);
		if (rc == BC_OK)
			rc = bc_cert_parse(der, der_len, &certs[i]);
		if (rc != BC_OK)
			break;
		(*n_certs)++;
	}
	free(der);
	return rc;
}

/* PEM of certs[0..n) followed by the pinned root unless the chain holds it, malloc()ed. */
static int
chain_pem(X509 *const *certs, size_t n, X509 *root, char **out, size_t *len)
{
	BIO		   *bio = BIO_new(BIO_s_mem());
	char	   *data = NULL;
	long		size;
	size_t		i;
	int			rc = BC_ECRYPTO;

	*out = NULL;
	if (bio == NULL)
		goto out;
	for (i = 0; i < n; i++)
		if (PEM_write_bio_X509(bio, certs[i]) != 1)
			goto out;
	for (i = 1; i < n && X509_cmp(certs[i], root) != 0; i++)
		;
	if (i == n && PEM_write_bio_X509(bio, root) != 1)
		goto out;
	size = BIO_get_mem_data(bio, &data);
	rc = BC_ENOMEM;
	if (size <= 0 || (*out = malloc((size_t) size)) == NULL)
		goto out;
	memcpy(*out, data, (size_t) size);
	*len = (size_t) size;
	rc = BC_OK;
out:
	BIO_free(bio);
	return rc;
}

/*
 * 1 when certs[1..n) is one chain from the leaf's issuer towards the pinned
 * certificate (each issued by the next; the pinned one among them, or the
 * issuer of the last): the answer carries the issuing CA and its chain,
 * nothing else.  (The pinned certificate is the root, or, when an operator
 * pinned the intermediate itself, that intermediate.)
 */
static int
chain_is_one_path(X509 *const *certs, size_t n, X509 *pinned)
{
	size_t		i;

	for (i = 1; i + 1 < n; i++)
		if (X509_check_issued(certs[i + 1], certs[i]) != X509_V_OK)
			return 0;
	for (i = 1; i < n; i++)
		if (X509_cmp(certs[i], pinned) == 0)
			return 1;
	return n < 2 || X509_check_issued(pinned, certs[n - 1]) == X509_V_OK;
}

/*
 * 1 when the leaf's SPIFFE ID is the one the payload answered (or in our
 * trust domain): the node's, or with a sessionId (a session credential,
 * bc_join.issue_session) the node's followed by /session/<sessionId>.
 */
static int
check_spiffe_id(const char *spiffe, const char *trust_domain, json_t *payload)
{
	const char *tenant = bcd_json_str(payload, "tenantId", NULL);
	const char *node = bcd_json_str(payload, "nodeId", NULL);
	const char *session = bcd_json_str(payload, "sessionId", NULL);
	const char *answered = bcd_json_str(payload, "spiffeId", NULL);
	char		want[1024];

	if (answered != NULL && strcmp(answered, spiffe) != 0)
		return 0;
	if (tenant != NULL && node != NULL)
		return bc_spiffe_id(want, sizeof(want), trust_domain, tenant, node, session) &&
			strcmp(spiffe, want) == 0;
	return bc_spiffe_parse(spiffe, trust_domain, NULL);
}

/*
 * The certificate's serial in lower-case hex, zero-padded to 32 digits (the
 * service's 128 random bits, as its answers spell them); at most 20 bytes.
 */
int
bcd_cert_serial_hex(X509 *cert, char out[41])
{
	BIGNUM	   *bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), NULL);
	unsigned char bytes[20];
	int			n;
	int			i;
	int			rc = BC_EINVAL;

	out[0] = '\0';
	if (bn == NULL || BN_is_negative(bn) || BN_num_bytes(bn) > 20)
		goto out;
	n = BN_num_bytes(bn) > 16 ? BN_num_bytes(bn) : 16;
	if (BN_bn2binpad(bn, bytes, n) != n)
		goto out;
	for (i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", bytes[i]);
	rc = BC_OK;
out:
	BN_free(bn);
	return rc;
}

/* The certificate's notAfter as RFC 3339 UTC into buf. */
void
bcd_cert_not_after(X509 *cert, char *buf, size_t len)
{
	struct tm	tm;

	buf[0] = '\0';
	if (ASN1_TIME_to_tm(X509_get0_notAfter(cert), &tm) == 1)
		strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Check an issued certificate against key and the pinned CA; fill ans. */
static int
check_issued(const bcd_service_keys *keys, EVP_PKEY *key, bcd_answer *ans,
			 char *err, size_t errlen)
{
	X509	   *certs[CHAIN_MAX] = {NULL};
	size_t		n_certs = 0;
	const char *what = "certificateChain is not a list of base64 DER certificates";
	const char *answered_serial;
	size_t		i;
	int			rc;

	rc = decode_chain(ans->payload, certs, &n_certs);
	if (rc != BC_OK)
		goto out;
	what = "the certificate is not for our key";
	rc = BC_EVERIFY;
	if (EVP_PKEY_eq(X509_get0_pubkey(certs[0]), key) != 1)
		goto out;
	what = "the certificate does not verify against the pinned node CA";
	rc = bc_cert_verify_path(certs[0], certs + 1, n_certs - 1, keys->node_ca, 0);
	if (rc != BC_OK)
		goto out;
	what = "the certificate chain carries a certificate that is not on its path to the pinned node CA";
	rc = BC_EVERIFY;
	if (!chain_is_one_path(certs, n_certs, keys->node_ca))
		goto out;
	what = "the certificate's SPIFFE ID is missing or not the one answered";
	rc = bc_cert_uri_san(certs[0], BC_SPIFFE_SCHEME, &ans->spiffe_id);
	if (rc != BC_OK)
		goto out;
	rc = BC_EVERIFY;
	if (!check_spiffe_id(ans->spiffe_id, keys->trust_domain, ans->payload))
		goto out;
	what = "the certificate's serial is not the one answered";
	rc = bcd_cert_serial_hex(certs[0], ans->serial);
	if (rc != BC_OK)
		goto out;
	answered_serial = bcd_json_str(ans->payload, "serial", NULL);
	rc = BC_EVERIFY;
	if (answered_serial != NULL && strcmp(answered_serial, ans->serial) != 0)
		goto out;
	what = "cannot encode the certificate chain";
	rc = chain_pem(certs, n_certs, keys->node_ca, &ans->chain_pem, &ans->chain_pem_len);
	if (rc != BC_OK)
		goto out;
	if (bcd_json_str(ans->payload, "notAfter", NULL) != NULL)
		snprintf(ans->not_after, sizeof(ans->not_after), "%s",
				 bcd_json_str(ans->payload, "notAfter", NULL));
	else
		bcd_cert_not_after(certs[0], ans->not_after, sizeof(ans->not_after));
	ans->leaf = certs[0];
	certs[0] = NULL;
out:
	if (rc != BC_OK)
		snprintf(err, errlen, "%s (%s)", what, bc_status_str(rc));
	for (i = 0; i < n_certs; i++)
		X509_free(certs[i]);
	return rc;
}

/* Verify the JWS and bind its payload to csr; ans->payload on success. */
static int
verify_payload(const bcd_service_keys *keys, const char *jws, size_t jws_len,
			   const unsigned char *csr, size_t csr_len, bcd_answer *ans,
			   char *err, size_t errlen)
{
	unsigned char *raw = NULL;
	size_t		raw_len = 0;
	char		want[64];
	json_error_t jerr;
	const char *got;
	int			rc;

	rc = bcd_service_keys_verify(keys, jws, jws_len, BC_JOSE_MAX, &raw, &raw_len,
								 &ans->unknown_kid);
	if (rc != BC_OK)
	{
		snprintf(err, errlen, "the response signature does not verify "
				 "with %s (%s)", ans->unknown_kid ? "any pinned signing key: it names another kid" :
				 "the pinned signing key", bc_status_str(rc));
		goto out;
	}
	rc = BC_EINVAL;
	ans->payload = json_loadb((const char *) raw, raw_len, JSON_REJECT_DUPLICATES, &jerr);
	if (!json_is_object(ans->payload))
	{
		snprintf(err, errlen, "the signed payload is not a JSON object");
		goto out;
	}
	rc = bc_sha256_b64url(csr, csr_len, want);
	if (rc != BC_OK)
		goto out;
	got = bcd_json_str(ans->payload, "csrSha256", NULL);
	rc = BC_EVERIFY;
	if (got == NULL || strlen(got) != strlen(want) || !bc_ct_equal(got, want, strlen(want)))
	{
		snprintf(err, errlen, "the response answers another CSR");
		goto out;
	}
	rc = BC_OK;
out:
	free(raw);
	return rc;
}

/* Fill the deferral members of ans from its payload. */
static void
read_deferral(bcd_answer *ans)
{
	json_t	   *retry = json_object_get(ans->payload, "retryAfterSeconds");

	ans->retry_after = -1;
	if (json_is_integer(retry))
		ans->retry_after = (long) json_integer_value(retry);
	else if (json_is_real(retry))
		ans->retry_after = (long) json_real_value(retry);
	ans->request_id = bcd_json_str(ans->payload, "requestId", NULL);
	ans->challenge = bcd_json_str(ans->payload, "challenge", NULL);
	ans->attestor = bcd_json_str(ans->payload, "attestor", NULL);
	if (bcd_json_str(ans->payload, "notAfter", NULL) != NULL)
		snprintf(ans->not_after, sizeof(ans->not_after), "%s",
				 bcd_json_str(ans->payload, "notAfter", NULL));
}

/*
 * Verify the answer text (the outer JSON, or a bare JWS) for our CSR and key.
 * BCD_RC_OK: issued and every check passed; BCD_RC_DEFERRED: a verified
 * pending or challenge; BCD_RC_REFUSED: the outer refusal; BCD_RC_FAILED:
 * anything else, with the reason in err.  Release ans with bcd_answer_free.
 */
bcd_rc
bcd_answer_verify(const bcd_service_keys *keys, const char *text, size_t len,
				  const unsigned char *csr, size_t csr_len, EVP_PKEY *key,
				  bcd_answer *ans, char *err, size_t errlen)
{
	char	   *jws = NULL;
	size_t		jws_len = 0;
	bcd_rc		rc;

	memset(ans, 0, sizeof(*ans));
	ans->retry_after = -1;
	err[0] = '\0';
	rc = extract_jws(text, len, ans, &jws, &jws_len, err, errlen);
	if (rc != BCD_RC_OK)
		goto out;
	rc = BCD_RC_FAILED;
	if (verify_payload(keys, jws, jws_len, csr, csr_len, ans, err, errlen) != BC_OK)
		goto out;
	ans->status = bcd_json_str(ans->payload, "status", NULL);
	if (ans->status == NULL)
		snprintf(err, errlen, "the signed payload has no status");
	else if (strcmp(ans->status, BC_STATUS_ISSUED) == 0)
		rc = check_issued(keys, key, ans, err, errlen) == BC_OK ?
			BCD_RC_OK : BCD_RC_FAILED;
	else if (strcmp(ans->status, BC_STATUS_PENDING) == 0 || strcmp(ans->status, BC_STATUS_CHALLENGE) == 0)
	{
		read_deferral(ans);
		rc = BCD_RC_DEFERRED;
	}
	else if (strcmp(ans->status, BC_STATUS_REFUSED) == 0)
	{
		snprintf(ans->refusal, sizeof(ans->refusal), "%s", BC_REFUSAL_CODE);
		snprintf(err, errlen, "refused: %s", BC_REFUSAL_CODE);
		rc = BCD_RC_REFUSED;
	}
	else
		snprintf(err, errlen, "unknown status in the signed payload");
out:
	free(jws);
	return rc;
}

/*
 * bcd_answer_verify, and once more after taking up the service's current
 * keys (GET /v1/service-keys through http) when the answer is signed by a
 * key not pinned: the service's signing key rotated since we last asked.
 */
bcd_rc
bcd_answer_verify_fresh(struct bcd_http *http, const bcd_service_keys *keys, const char *text,
						size_t len, const unsigned char *csr, size_t csr_len, EVP_PKEY *key,
						bcd_answer *ans, char *err, size_t errlen)
{
	bcd_rc		rc = bcd_answer_verify(keys, text, len, csr, csr_len, key, ans, err, errlen);

	if (rc == BCD_RC_FAILED && ans->unknown_kid && http != NULL &&
		bcd_service_keys_refresh(http, keys) == BC_OK)
	{
		bcd_answer_free(ans);
		rc = bcd_answer_verify(keys, text, len, csr, csr_len, key, ans, err, errlen);
	}
	return rc;
}

/* Release what bcd_answer_verify filled in. */
void
bcd_answer_free(bcd_answer *ans)
{
	json_decref(ans->payload);
	X509_free(ans->leaf);
	free(ans->spiffe_id);
	free(ans->chain_pem);
	memset(ans, 0, sizeof(*ans));
}
