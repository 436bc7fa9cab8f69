/*
 * bc_join--0.1.0--0.2.0.sql: ALTER EXTENSION bc_join UPDATE from 0.1.0 (the
 * released install script of commit e420d1d) to 0.2.0.  What a fresh install
 * of 0.2.0 (sql/bc_join.sql) makes, reached from 0.1.0: test/tap/upgrade.t
 * compares the two schemas object by object, privileges and comments
 * included, and keeps every row.
 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION bc_join UPDATE TO '0.2.0'" to load this file. \quit

/* ---------------------------------------------------------------- version */

CREATE FUNCTION bc_join.library_version() RETURNS text
	AS 'MODULE_PATHNAME', 'bc_library_version_sql'
	LANGUAGE C STABLE PARALLEL SAFE;
REVOKE ALL ON FUNCTION bc_join.library_version() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bc_join.library_version() TO bc_join_operator;
COMMENT ON FUNCTION bc_join.library_version() IS
	'The version of the loaded bc_join library; it works only when it equals the installed extension version (pg_extension.extversion).';

/* ---------------------------------------------------------------- backups */

-- pg_dump keeps every row: the state of this CA is in these tables, and a
-- dump without them (pg_dump leaves out an extension's tables unless they
-- are marked) would restore a CA that forgot every node, certificate, token,
-- use of evidence and row of its issuance log.  The rows the install script
-- writes itself (the root tenant, the built-in command kinds) are left out,
-- so that a restore does not insert them twice; so is nothing else.  Every
-- table of the schema is marked (test: sql/regress_backup.sql), and every
-- sequence the tables draw from.
SELECT pg_catalog.pg_extension_config_dump('bc_join.tenants', 'WHERE id <> ''root''');
SELECT pg_catalog.pg_extension_config_dump('bc_join.sites', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.pools', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.nodes', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.node_certs', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.node_bindings', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.join_tokens', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.provisioning_tokens', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.provisioning_resolver', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.sessions', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.session_certs', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.join_requests', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.attestation_uses', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.x509pop_roots', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.attestors', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.command_kinds', 'WHERE kind NOT IN (''inventory.refresh'', ''logs.collect'', ''diag.ping'', ''diag.run'', ''disk.wipe'', ''deploy.image'', ''deploy.config'', ''boot.kexec'', ''node.reboot'', ''node.shutdown'')');
SELECT pg_catalog.pg_extension_config_dump('bc_join.refusal_rate', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.events', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.audit_log', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.tpm_ek_certificates', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.tpm_ek_enrollments', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.tpm_pcr_policies', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.tpm_settings', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.tpm_eks', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.cloud_trust', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.cloud_providers', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.cloud_accounts', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.cloud_resolver', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.commands', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.discovery_sites', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.discovery_machines', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.events_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.audit_log_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.cloud_trust_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.cloud_accounts_id_seq', '');

/* #26.4 service keys: the pinned file carries its time, signed */

COMMENT ON FUNCTION bc_join.service_keys() IS
	'Returns everything an agent pins in one document, {trustDomain, signingKey, encryptionKey, signingKeys, encryptionKeys, nodeCa, issuedAt, signed}, to hand to bcd as --service-keys; signed is the document with issuedAt signed by the current signing key.';
COMMENT ON FUNCTION bc_join.signed_service_keys() IS
	'Returns {keys: [JWS...]}: service_keys() without signed, signed by each signing key in key_dir, the rollover agents accept when it is signed by a key they pin and is not older than the set they pin.';

/* #26.8 sessions: the caller bcd saw, recorded with each session certificate */

-- the process that asked bcd for it, as the host claims (signed by the node
-- key): {"pid", "exe", "unit", "cgroup"}; NULL from a bcd that sends none
ALTER TABLE bc_join.session_certs ADD COLUMN caller jsonb;
