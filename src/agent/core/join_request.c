/*
 * join_request.c: the JoinRequest a join round sends (docs/protocol.md):
 * {"csr", "role", "attestor", "attestation"?, "sealedToken"?, "claims"},
 * the evidence as the attestor's producer made it (producers/).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <jansson.h>

#include "bc_common.h"
#include "core/join_request.h"

/* Bound of the --claims JSON. */
#define CLAIMS_MAX (16 * 1024)

/* The claims object: claims_json, or {hostname, arch}; hostname overrides hostname. */
json_t *
bcd_build_claims(const char *claims_json, const char *hostname)
{
	json_t	   *claims;
	json_error_t jerr;
	char		host[256];
	struct utsname uts;

	if (claims_json != NULL)
	{
		if (strlen(claims_json) > CLAIMS_MAX)
			return NULL;
		claims = json_loads(claims_json, JSON_REJECT_DUPLICATES, &jerr);
		if (!json_is_object(claims))
		{
			json_decref(claims);
			return NULL;
		}
	}
	else
	{
		claims = json_object();
		if (claims == NULL)
			return NULL;
		if (hostname == NULL && gethostname(host, sizeof(host)) == 0)
		{
			host[sizeof(host) - 1] = '\0';
			json_object_set_new(claims, "hostname", json_string(host));
		}
		if (uname(&uts) == 0)
			json_object_set_new(claims, "arch", json_string(uts.machine));
	}
	if (hostname != NULL &&
		json_object_set_new(claims, "hostname", json_string(hostname)) != 0)
	{
		json_decref(claims);
		return NULL;
	}
	return claims;
}

/*
 * The JoinRequest JSON for csr: the attestation (base64url) and the sealed
 * token as the producer made them (either may be NULL) and a copy of
 * claims.  *text_out is malloc()ed.
 */
int
bcd_join_request_json(const unsigned char *csr, size_t csr_len, const char *role,
					  const char *attestor, const char *attestation_b64,
					  const char *sealed_token, json_t *claims, char **text_out)
{
	char	   *csr64 = NULL;
	json_t	   *request = NULL;
	int			rc = BC_ENOMEM;

	*text_out = NULL;
	csr64 = bc_b64url_encode_alloc(csr, csr_len);
	if (csr64 == NULL)
		goto out;
	request = json_pack("{s:s, s:s, s:s}", "csr", csr64, "role", role,
						"attestor", attestor);
	if (request == NULL ||
		(attestation_b64 != NULL &&
		 json_object_set_new(request, "attestation", json_string(attestation_b64)) != 0) ||
		(sealed_token != NULL &&
		 json_object_set_new(request, "sealedToken", json_string(sealed_token)) != 0) ||
		json_object_set(request, "claims", claims) != 0)
		goto out;
	*text_out = json_dumps(request, JSON_COMPACT | JSON_PRESERVE_ORDER);
	if (*text_out != NULL)
		rc = BC_OK;
out:
	json_decref(request);
	free(csr64);
	return rc;
}
