-- bc_join 0.2.0 -> 0.3.0 (ALTER EXTENSION bc_join UPDATE).
-- Every change made to sql/bc_join.sql for 0.3.0 has its equivalent here
-- (docs/development.md, "Changing the schema"); test/tools/upgrade-check
-- proves a 0.2.0 database updated by this script equals a fresh 0.3.0.
\echo Use "ALTER EXTENSION bc_join UPDATE" to load this file. \quit

-- What \dt+ bc_join.* shows: one sentence per table (0.2.0 commented only
-- functions and views; sql/regress_comments.sql now checks tables too).
COMMENT ON TABLE bc_join.tenants IS
	'The tenants; the tenant root exists from the start and receives the refusals no evidence authenticated.';
COMMENT ON TABLE bc_join.sites IS
	'A tenant''s sites; custom (a tenant''s own site) makes its nodes tenant-owned by default.';
COMMENT ON TABLE bc_join.pools IS
	'A tenant''s pools, each in one of the tenant''s sites: what a join token or an attestor admits a node into.';
COMMENT ON TABLE bc_join.nodes IS
	'The machines that joined: tenant, site, pool, role, state (adopting, active, retired), trust, identity generation, attestor, node key and claims.';
COMMENT ON TABLE bc_join.node_certs IS
	'Every node certificate issued: serial, node, identity generation, validity, the certified key''s SPKI SHA-256 (one key, one certificate), allowed command kinds, the DER and its revocation.';
COMMENT ON TABLE bc_join.node_bindings IS
	'Stable hardware identities (per attestor and subject) bound to one node for good: a machine that joins again is that node.';
COMMENT ON TABLE bc_join.join_tokens IS
	'Join tokens: only their secret''s SHA-256, uses, expiry, role, expected claims, reclaim, revocation and the pool or site they admit into.';
COMMENT ON TABLE bc_join.provisioning_tokens IS
	'One-time tokens for an existing node (the provisioned attestor): only their secret''s SHA-256, expiry, spent and revoked times.';
COMMENT ON TABLE bc_join.provisioning_resolver IS
	'At most one row: the function that maps the nodeId a provisioned agent names to a node id (superuser).';
COMMENT ON TABLE bc_join.sessions IS
	'Session identities on nodes (node, session and context selectors), reserved when a session first asks.';
COMMENT ON TABLE bc_join.session_certs IS
	'Every session certificate issued: serial, session, validity, the session key''s SPKI SHA-256, the DER, the node certificate it was proven with, the caller bcd saw, and its revocation.';
COMMENT ON TABLE bc_join.join_requests IS
	'Joins that wait for an operator (pending, approved, rejected, consumed), bound to the CSR they were made for, with their claims, detail and expiry.';
COMMENT ON TABLE bc_join.attestation_uses IS
	'Single-use evidence: one row per (attestor, subject hash) consumed, kept until expires_at (NULL: for ever) so a replay is refused.';
COMMENT ON TABLE bc_join.challenge_deadlines IS
	'A registered attestor''s challenge: its notAfter for the CSR it was made for, so a final round after it is refused challenge-expired.';
COMMENT ON TABLE bc_join.x509pop_roots IS
	'External PKIs whose leaves the x509pop attestor admits: each root its own trust store, with the tenant and pool its leaves join.';
COMMENT ON TABLE bc_join.attestors IS
	'Custom attestors registered with register_attestor: id, version, the roles they may admit and their verify function.';
COMMENT ON TABLE bc_join.command_kinds IS
	'The command kinds a certificate''s allowedKinds may name (register_command_kind).';
COMMENT ON TABLE bc_join.refusal_rate IS
	'The rate bound of security.join.refused events: per attestor and refusal, the current minute''s recorded and suppressed counts.';
COMMENT ON TABLE bc_join.events IS
	'What happened, per tenant: type (node.joined, security.join.refused, ...), payload and time; NOTIFY goes to each tenant''s channel.';
COMMENT ON TABLE bc_join.audit_log IS
	'The issuance log: every administrative action and issuance with its actor, in 16 hash chains, append-only (verify_audit_log, audit_anchor).';
COMMENT ON TABLE bc_join.tpm_ek_certificates IS
	'EK roots and intermediates of TPM vendors that the tpm attestor chains EK certificates to (add_tpm_ek_root).';
COMMENT ON TABLE bc_join.tpm_ek_enrollments IS
	'EKs an operator enrolled, by the SHA-256 of their SPKI: trusted without a chain, each for its tenant.';
COMMENT ON TABLE bc_join.tpm_pcr_policies IS
	'PCR policies per tenant (pool_id NULL) or per pool: the PCR values a tpm node''s quote must show.';
COMMENT ON TABLE bc_join.tpm_settings IS
	'Per tenant: what an EK neither enrolled nor chained gets: refuse (the default) or approval (a join request for an operator).';
COMMENT ON TABLE bc_join.tpm_eks IS
	'What the last tpm join proved of a node''s EK, which renewal checks is still trusted.';
COMMENT ON TABLE bc_join.cloud_trust IS
	'What each cloud provider''s instance identity documents are verified with (AWS region certificates, Azure roots and intermediates, Google''s JWKS); nothing is built in.';
COMMENT ON TABLE bc_join.cloud_providers IS
	'Per cloud provider: whether the cloud-iid attestor accepts it, and its settings.';
COMMENT ON TABLE bc_join.cloud_accounts IS
	'Which tenant and pool a cloud account joins: exactly one mapping per provider and account.';
COMMENT ON TABLE bc_join.cloud_resolver IS
	'At most one row: the function that maps an unmapped cloud account to a tenant and pool (superuser).';
COMMENT ON TABLE bc_join.commands IS
	'Commands queued for nodes, fetched and completed by them with a proof by the node key: kind, payload, state, attempts, the certificate that fetched them, the result.';
COMMENT ON TABLE bc_join.discovery_sites IS
	'Sites whose PXE-booted ramdisks may join by the discovery attestor: approval mode, the kinds and lifetime of their certificates, the site epoch.';
COMMENT ON TABLE bc_join.discovery_machines IS
	'The machines (MACs) of a discovery site that joined by discovery before or that an operator listed: known to approval unknown-machines.';
COMMENT ON TABLE bc_join.tenant_operator_grants IS
	'Which role operates which tenant (grant_tenant_operator): what row-level security and check_tenant read.';

-- service_keys() publishes jwtKeys (#33: the optional jwt-svid.key).
COMMENT ON FUNCTION bc_join.service_keys() IS
	'Returns everything an agent pins in one document, {trustDomain, signingKey, encryptionKey, signingKeys, encryptionKeys, jwtKeys, nodeCa, issuedAt, signed}, to hand to bcd as --service-keys; jwtKeys is jwt-svid.key''s public JWK with its kid (empty without one); signed is the document with issuedAt signed by the current signing key.';

-- #33: JWT-SVIDs and the SPIFFE bundle.
/*
 * A JWT-SVID for a joined node's session: {"proof": <JWS by the node key
 * over purpose "jwt-svid", serial, iat, audience, session, context>}; no
 * CSR.  See docs/sessions.md.
 */
CREATE FUNCTION bc_join.issue_jwt_svid(request jsonb) RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_issue_jwt_svid_request'
	LANGUAGE C VOLATILE STRICT SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION bc_join.issue_jwt_svid(jsonb) IS
	'Issues a JWT-SVID (signed by jwt-svid.key) to a joined node''s session from a proof signed by the node key naming its audience; returns the signed response or the one refusal (docs/sessions.md).';

-- The SPIFFE bundle of the trust domain (a JWKS): the node CA roots as
-- x509-svid keys, jwt-svid.key as the jwt-svid key, spiffe_sequence and
-- spiffe_refresh_hint.  The gateway serves it at GET /v1/spiffe-bundle.
CREATE FUNCTION bc_join.spiffe_bundle() RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_spiffe_bundle' LANGUAGE C STABLE;
COMMENT ON FUNCTION bc_join.spiffe_bundle() IS
	'Returns the trust domain''s SPIFFE bundle, {keys, spiffe_sequence, spiffe_refresh_hint}: an x509-svid key (with x5c) for each root of the node CA chain and the jwt-svid key (with its kid) when key_dir has jwt-svid.key; spiffe_sequence is the newest mtime of key_dir.';
REVOKE ALL ON FUNCTION bc_join.issue_jwt_svid(jsonb), bc_join.spiffe_bundle() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bc_join.issue_jwt_svid(jsonb), bc_join.spiffe_bundle() TO bc_join_gateway;
GRANT EXECUTE ON FUNCTION bc_join.spiffe_bundle() TO bc_join_operator, bc_join_tenant_operator;
