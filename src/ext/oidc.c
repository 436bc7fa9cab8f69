/*
 * oidc.c: bc_join.oidc_discovery() and bc_join.jwks(), the two documents an
 * OpenID Connect relying party (AWS IAM, GCP workload identity federation,
 * Vault, go-oidc) reads to verify JWT-SVIDs (issue 46).  The gateway serves
 * them at GET /.well-known/openid-configuration and GET /v1/jwks.
 *
 * The issuer is bc_join.jwt_issuer, an https origin (its check hook in
 * bc_join.c): JWT-SVIDs carry it as iss, the discovery document as issuer,
 * so the two are one value byte for byte, as relying parties require.
 * Without it neither document is served (INVALID_CONFIG: the gateway's 503
 * with the reason in its log), so publishing for OIDC is the operator's
 * choice.  The keys are the jwt-svid keys of the key directory (current,
 * next, previous: service_keys.c), never the X.509 ones.
 */
#include "bc_join.h"
#include "bc_protocol.h"

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

/* bc_join.jwt_issuer, or INVALID_CONFIG when it is not set. */
static const char *
require_issuer(void)
{
	if (bc_jwt_issuer == NULL || bc_jwt_issuer[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_BC_INVALID_CONFIG),
				 errmsg("bc_join.jwt_issuer is not set"),
				 errdetail("INVALID_CONFIG: OIDC discovery publishes the issuer JWT-SVIDs carry as iss; "
						   "without one, JWT-SVIDs have no iss and nothing is published for OIDC."),
				 errhint("Set bc_join.jwt_issuer to the gateway's https origin, e.g. https://oidc.example.org.")));
	return bc_jwt_issuer;
}

PG_FUNCTION_INFO_V1(bc_oidc_discovery);

/*
 * oidc_discovery(): the OpenID Provider metadata of the JWT-SVID issuer:
 * issuer, jwks_uri (the issuer's /v1/jwks), authorization_endpoint "" (no
 * such endpoint: as SPIRE), response_types_supported ["id_token"],
 * subject_types_supported ["public"] and
 * id_token_signing_alg_values_supported ["ES256"] (jwt-svid keys are P-256).
 */
Datum
bc_oidc_discovery(PG_FUNCTION_ARGS)
{
	const char *issuer = require_issuer();
	StringInfoData buf;

	initStringInfo(&buf);
	bc_json_begin(&buf);
	bc_json_member(&buf, "issuer", issuer);
	bc_json_member(&buf, "jwks_uri", psprintf("%s%s", issuer, BC_PATH_JWKS));
	bc_json_member(&buf, "authorization_endpoint", "");
	bc_json_member_raw(&buf, "response_types_supported", "[\"id_token\"]");
	bc_json_member_raw(&buf, "subject_types_supported", "[\"public\"]");
	bc_json_member_raw(&buf, "id_token_signing_alg_values_supported", "[\"ES256\"]");
	bc_json_end(&buf);
	PG_RETURN_JSONB_P(bc_jsonb(buf.data));
}

PG_FUNCTION_INFO_V1(bc_jwks);

/*
 * jwks(): {"keys": [...]}, each jwt-svid key of the key directory (the
 * current one first, then the staged and the previous one) as a public JWK
 * with kid, "alg": "ES256" and "use": "sig"; INVALID_CONFIG without
 * bc_join.jwt_issuer or without jwt-svid.key.
 */
Datum
bc_jwks(PG_FUNCTION_ARGS)
{
	const BcKeys *k;
	StringInfoData buf;
	StringInfoData jwk;
	int			i;

	(void) require_issuer();
	k = bc_keys();
	if (k->n_jwt_svid == 0)
		ereport(ERROR,
				(errcode(ERRCODE_BC_INVALID_CONFIG),
				 errmsg("the key directory has no jwt-svid.key"),
				 errdetail("INVALID_CONFIG: the JWKS lists the keys JWT-SVIDs are signed with."),
				 errhint("Add one with tools/bc-join-keygen --add-jwt-key DIR.")));
	initStringInfo(&buf);
	bc_json_begin(&buf);
	bc_json_key(&buf, "keys");
	appendStringInfoChar(&buf, '[');
	for (i = 0; i < k->n_jwt_svid; i++)
	{
		initStringInfo(&jwk);
		bc_append_jwt_jwk(&jwk, k->jwt_svid_set[i], "alg", "ES256");
		jwk.len--;				/* reopen: then "use" */
		jwk.data[jwk.len] = '\0';
		bc_json_member(&jwk, "use", "sig");
		bc_json_end(&jwk);
		if (i > 0)
			appendStringInfoChar(&buf, ',');
		appendStringInfoString(&buf, jwk.data);
		pfree(jwk.data);
	}
	appendStringInfoChar(&buf, ']');
	bc_json_end(&buf);
	PG_RETURN_JSONB_P(bc_jsonb(buf.data));
}
