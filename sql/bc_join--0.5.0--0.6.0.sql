-- bc_join 0.5.0 -> 0.6.0 (ALTER EXTENSION bc_join UPDATE).
-- Every change made to sql/bc_join.sql for 0.6.0 has its equivalent here
-- (docs/development.md, "Changing the schema"); test/tools/upgrade-check
-- proves a 0.5.0 database updated by this script equals a fresh 0.6.0.
\echo Use "ALTER EXTENSION bc_join UPDATE" to load this file. \quit

-- #46 oidc: OIDC discovery of the JWT-SVID issuer and the JWKS of its keys.
CREATE FUNCTION bc_join.oidc_discovery() RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_oidc_discovery' LANGUAGE C STABLE;
COMMENT ON FUNCTION bc_join.oidc_discovery() IS
	'Returns the OpenID Provider metadata of the JWT-SVID issuer, {issuer, jwks_uri, authorization_endpoint, response_types_supported, subject_types_supported, id_token_signing_alg_values_supported}: issuer is bc_join.jwt_issuer (the iss of JWT-SVIDs), jwks_uri issuer/v1/jwks; INVALID_CONFIG when bc_join.jwt_issuer is not set.';

CREATE FUNCTION bc_join.jwks() RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_jwks' LANGUAGE C STABLE;
COMMENT ON FUNCTION bc_join.jwks() IS
	'Returns {keys}: every jwt-svid key of the key directory (jwt-svid.key first, then jwt-svid.next.key and jwt-svid.previous.key) as a public JWK with kid, alg ES256 and use sig, never an X.509 key; INVALID_CONFIG without bc_join.jwt_issuer or jwt-svid.key.';

REVOKE ALL ON FUNCTION bc_join.oidc_discovery(), bc_join.jwks() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bc_join.oidc_discovery(), bc_join.jwks()
	TO bc_join_gateway, bc_join_operator, bc_join_tenant_operator;

-- jwtKeys lists every jwt-svid key now (jwt-svid.next.key, .previous.key).
COMMENT ON FUNCTION bc_join.service_keys() IS
	'Returns everything an agent pins in one document, {trustDomain, signingKey, encryptionKey, signingKeys, encryptionKeys, jwtKeys, nodeCa, issuedAt, signed}, to hand to bcd as --service-keys; jwtKeys are the jwt-svid keys'' public JWKs with their kids, jwt-svid.key''s first (the one that signs), then jwt-svid.next.key''s and jwt-svid.previous.key''s (empty without jwt-svid.key); signed is the document with issuedAt signed by the current signing key.';
-- end of #46 oidc
