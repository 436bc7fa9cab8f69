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


/* #26.3 a repeat needs evidence; #26.7 a custom attestor's challenge expires */

-- A repeat (a final round repeated with the CSR of a current certificate)
-- must verify again for the subject the issuing round verified: recorded on
-- the certificate.  Certificates issued before 0.2.0 have none and are
-- never answered to a repeat.
ALTER TABLE bc_join.node_certs ADD COLUMN join_subject bc_join.sha256;

CREATE FUNCTION bc_join.join_round_csr_sha256(repeat_only boolean DEFAULT false) RETURNS bytea
	AS 'MODULE_PATHNAME', 'bc_join_round_csr_sha256' LANGUAGE C VOLATILE;
REVOKE ALL ON FUNCTION bc_join.join_round_csr_sha256(boolean) FROM PUBLIC;
COMMENT ON FUNCTION bc_join.join_round_csr_sha256(boolean) IS
	'Returns the SHA-256 of the running join round''s CSR (NULL outside one; with repeat_only, NULL outside a repeat of a final round): the default of attestation_uses.csr_sha256.';

-- The CSR of the join round that spent a use (added, then given its
-- default: the existing rows stay NULL, no rewrite).
ALTER TABLE bc_join.attestation_uses ADD COLUMN csr_sha256 bc_join.sha256;
ALTER TABLE bc_join.attestation_uses ALTER COLUMN csr_sha256 SET DEFAULT bc_join.join_round_csr_sha256();

CREATE TABLE bc_join.challenge_deadlines (
	attestor text NOT NULL,
	csr_sha256 bc_join.sha256 NOT NULL,
	not_after timestamptz NOT NULL,
	PRIMARY KEY (attestor, csr_sha256)
);
CREATE INDEX challenge_deadlines_not_after_idx ON bc_join.challenge_deadlines (not_after);
SELECT pg_catalog.pg_extension_config_dump('bc_join.challenge_deadlines', '');
GRANT SELECT ON bc_join.challenge_deadlines TO bc_join_operator;

CREATE OR REPLACE FUNCTION bc_join.use_once(attestor text, subject bytea,
								 expires_at timestamptz DEFAULT NULL, node_id text DEFAULT NULL)
	RETURNS void
	LANGUAGE plpgsql
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	n bigint;
BEGIN
	IF subject IS NULL OR length(subject) <> 32 THEN
		RAISE EXCEPTION USING ERRCODE = 'config_file_error',
			MESSAGE = 'use_once needs a 32-byte subject',
			DETAIL = 'INVALID_CONFIG: the subject is the SHA-256 of what must be used once.';
	END IF;
	INSERT INTO bc_join.attestation_uses (attestor, subject, node_id, expires_at)
		VALUES (use_once.attestor, use_once.subject, use_once.node_id, use_once.expires_at)
		ON CONFLICT DO NOTHING;
	GET DIAGNOSTICS n = ROW_COUNT;
	IF n <> 1 AND NOT EXISTS (
		SELECT 1 FROM bc_join.attestation_uses u
		WHERE u.attestor = use_once.attestor AND u.subject = use_once.subject
		  AND u.csr_sha256 = bc_join.join_round_csr_sha256(true)) THEN
		PERFORM bc_join.refuse(use_once.attestor || ':reused');
	END IF;
END
$$;
COMMENT ON FUNCTION bc_join.use_once(text, bytea, timestamptz, text) IS
	'Records a piece of single-use evidence (the SHA-256 subject) for an attestor, or refuses ''<attestor>:reused'' when it was used before (in a repeat, a use spent with the same CSR is the certificate''s own); call it only in a round that returns a result; returns nothing.';

CREATE OR REPLACE FUNCTION bc_join.consume_join_request(request_id text, context jsonb) RETURNS void
	LANGUAGE plpgsql
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	r bc_join.join_requests;
BEGIN
	SELECT * INTO r FROM bc_join.join_requests WHERE id = request_id FOR UPDATE;
	IF NOT FOUND THEN
		PERFORM bc_join.refuse('join:request-unknown');
	END IF;
	IF r.csr_sha256 <> bc_join.b64url_decode(context->>'csrSha256') THEN
		PERFORM bc_join.refuse(r.attestor || ':request-csr', r.tenant_id);
	END IF;
	IF r.state = 'consumed' AND r.csr_sha256 = bc_join.join_round_csr_sha256(true) THEN
		RETURN;
	END IF;
	IF r.state = 'rejected' THEN
		PERFORM bc_join.refuse(r.attestor || ':rejected', r.tenant_id);
	ELSIF r.state = 'consumed' THEN
		PERFORM bc_join.refuse(r.attestor || ':request-consumed', r.tenant_id);
	ELSIF r.expires_at <= bc_join.compute_now() THEN
		PERFORM bc_join.refuse(r.attestor || ':request-expired', r.tenant_id);
	ELSIF r.state <> 'approved' THEN
		PERFORM bc_join.refuse(r.attestor || ':request-pending', r.tenant_id);
	END IF;
	UPDATE bc_join.join_requests SET state = 'consumed', consumed_at = bc_join.compute_now()
		WHERE id = request_id;
	PERFORM bc_join.note_single_use_round();
END
$$;
COMMENT ON FUNCTION bc_join.consume_join_request(text, jsonb) IS
	'Consumes an approved join request made for the CSR of context in the round that issues (in a repeat, finds it consumed by the certificate asked for), or refuses ''<attestor>:<reason>''; returns nothing.';

CREATE OR REPLACE FUNCTION bc_join.prune_attestation_uses(batch integer DEFAULT 5000) RETURNS bigint
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	n bigint;
	m bigint := 0;
BEGIN
	IF batch IS NULL OR batch < 1 OR batch > 1000000 THEN
		PERFORM bc_join.invalid_input('batch must be between 1 and 1000000');
	END IF;
	DELETE FROM bc_join.attestation_uses u
		WHERE u.ctid = ANY (ARRAY(
			SELECT x.ctid FROM bc_join.attestation_uses x
			WHERE x.expires_at < bc_join.compute_now()
			LIMIT batch FOR UPDATE SKIP LOCKED));
	GET DIAGNOSTICS n = ROW_COUNT;
	IF n < batch THEN
		DELETE FROM bc_join.challenge_deadlines d
			WHERE d.ctid = ANY (ARRAY(
				SELECT x.ctid FROM bc_join.challenge_deadlines x
				WHERE x.not_after < bc_join.compute_now() - bc_join.setting_interval('retain_join_requests')
				LIMIT batch - n FOR UPDATE SKIP LOCKED));
		GET DIAGNOSTICS m = ROW_COUNT;
	END IF;
	RETURN n + m;
END
$$;
COMMENT ON FUNCTION bc_join.prune_attestation_uses(integer) IS
	'Deletes up to batch expired attestation_uses rows, and challenge_deadlines past bc_join.retain_join_requests, without waiting on joins and returns how many it deleted: call it again until it returns 0.';
