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


/* ------------------------------------------- #26.5 and #27: the issuance log */

-- No row is appended while the heads are read and the trigger replaced (a
-- backend still running the 0.1.0 library would otherwise slip one in).
LOCK TABLE bc_join.audit_log IN SHARE ROW EXCLUSIVE MODE;

-- The service clock's current instant (the time of an issuance log row).
CREATE FUNCTION bc_join.compute_clock() RETURNS timestamptz
	AS 'MODULE_PATHNAME', 'bc_compute_clock'
	LANGUAGE C VOLATILE PARALLEL SAFE;

-- The CSR key's lock as a row lock (no advisory lock any role could hold).
CREATE TABLE bc_join.key_locks (
	slot smallint PRIMARY KEY CHECK (slot >= 0 AND slot < 1024)
);
INSERT INTO bc_join.key_locks (slot) SELECT s FROM generate_series(0, 1023) AS s;

-- The chains' heads, from the log as it is.
CREATE TABLE bc_join.audit_chains (
	chain smallint PRIMARY KEY CHECK (chain >= 0 AND chain < 16),
	last_id bigint,
	last_hash bytea NOT NULL CHECK (length(last_hash) = 32)
);
INSERT INTO bc_join.audit_chains (chain, last_id, last_hash)
	SELECT c, l.id, coalesce(l.hash, '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea)
	FROM generate_series(0, 15) AS c
	LEFT JOIN LATERAL (SELECT a.id, a.hash FROM bc_join.audit_log a WHERE a.chain = c
					   ORDER BY a.id DESC LIMIT 1) l ON true;

CREATE OR REPLACE FUNCTION bc_join.audit_chain() RETURNS trigger
	LANGUAGE plpgsql
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	prev bytea;
	own integer := pg_backend_pid() % 16;
	c smallint;
BEGIN
	IF NEW.hash IS NOT NULL THEN
		UPDATE bc_join.audit_chains h SET last_id = NEW.id, last_hash = NEW.hash
			WHERE h.chain = NEW.chain AND (h.last_id IS NULL OR h.last_id < NEW.id);
		RETURN NEW;
	END IF;
	SELECT h.chain, h.last_hash INTO c, prev FROM bc_join.audit_chains h
		ORDER BY (h.chain - own + 16) % 16 LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED;
	IF NOT FOUND THEN
		SELECT h.chain, h.last_hash INTO c, prev FROM bc_join.audit_chains h
			WHERE h.chain = own FOR NO KEY UPDATE;
	END IF;
	NEW.id := nextval('bc_join.audit_log_id_seq');
	NEW.at := bc_join.compute_clock();
	NEW.chain := c;
	NEW.prev_hash := prev;
	NEW.hash := sha256(NEW.prev_hash || bc_join.audit_content(NEW.id, NEW.at, NEW.actor, NEW.action,
															   NEW.tenant_id, NEW.node_id, NEW.detail));
	UPDATE bc_join.audit_chains h SET last_id = NEW.id, last_hash = NEW.hash WHERE h.chain = c;
	RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION bc_join.audit_log_problems(max_rows integer DEFAULT 1)
	RETURNS TABLE (id bigint, problem text)
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	r bc_join.audit_log;
	zero constant bytea := '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea;
	prev bytea := zero;
	cur smallint := 0;
	found_n integer := 0;
BEGIN
	FOR r IN SELECT * FROM bc_join.audit_log a ORDER BY a.chain, a.id LOOP
		IF r.chain <> cur THEN
			cur := r.chain;
			prev := zero;
		END IF;
		IF r.hash <> sha256(r.prev_hash || bc_join.audit_content(r.id, r.at, r.actor, r.action,
																 r.tenant_id, r.node_id, r.detail)) THEN
			id := r.id; problem := 'altered: the row''s hash is not its content''s';
			RETURN NEXT; found_n := found_n + 1;
		ELSIF r.prev_hash <> prev THEN
			id := r.id; problem := 'does not link to the row before it in chain ' || r.chain ||
				': a row was removed or inserted before it';
			RETURN NEXT; found_n := found_n + 1;
		END IF;
		EXIT WHEN found_n >= max_rows;
		prev := r.hash;
	END LOOP;
	-- Each chain's head must be its last row (the next row links to it).
	IF found_n < max_rows THEN
		FOR id, problem IN
			SELECT h.last_id, 'chain ' || h.chain || '''s head (bc_join.audit_chains) is not its last row ' ||
				   coalesce(l.id::text, 'none') || ': the next row would not link to it'
			FROM bc_join.audit_chains h
			LEFT JOIN LATERAL (SELECT a.id, a.hash FROM bc_join.audit_log a WHERE a.chain = h.chain
							   ORDER BY a.id DESC LIMIT 1) l ON true
			WHERE h.last_id IS DISTINCT FROM l.id
			   OR h.last_hash <> coalesce(l.hash, zero)
			ORDER BY h.chain
		LOOP
			RETURN NEXT; found_n := found_n + 1;
			EXIT WHEN found_n >= max_rows;
		END LOOP;
	END IF;
END
$$;

CREATE FUNCTION bc_join.audit_anchor_payload(anchor text) RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_audit_anchor_payload' LANGUAGE C STABLE STRICT SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION bc_join.audit_anchor_problems(anchor text)
	RETURNS TABLE (chain smallint, id bigint, problem text)
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	a jsonb := bc_join.audit_anchor_payload(anchor);
	h jsonb;
	named_chain smallint;
	named_id bigint;
	named_hash text;
	got_chain smallint;
	got_hash bytea;
	chain_end bigint;
BEGIN
	FOR h IN
		SELECT jsonb_build_object('chain', NULL, 'id', a->'headId', 'hash', a->'headHash')
		WHERE (a->>'headId')::bigint <> 0
		UNION ALL
		SELECT x FROM jsonb_array_elements(coalesce(a->'heads', '[]')) AS x
	LOOP
		named_chain := (h->>'chain')::smallint;
		named_id := (h->>'id')::bigint;
		named_hash := h->>'hash';
		SELECT l.chain, l.hash INTO got_chain, got_hash FROM bc_join.audit_log l
			WHERE l.id = named_id AND (named_chain IS NULL OR l.chain = named_chain);
		chain := named_chain;
		id := named_id;
		IF FOUND THEN
			IF encode(got_hash, 'hex') <> named_hash THEN
				problem := format('row %s is not the row the anchor of %s signed: the history was rewritten',
								  named_id, a->>'at');
				RETURN NEXT;
			END IF;
			CONTINUE;
		END IF;
		SELECT max(l.id) INTO chain_end FROM bc_join.audit_log l
			WHERE named_chain IS NULL OR l.chain = named_chain;
		IF chain_end IS NULL OR chain_end < named_id THEN
			problem := format('the log is behind the anchor of %s: %s ends at row %s, the anchor names row %s '
							  '(restored from a backup older than the anchor, or rolled back)',
							  a->>'at', CASE WHEN named_chain IS NULL THEN 'the log'
											 ELSE 'chain ' || named_chain END,
							  coalesce(chain_end::text, 'none'), named_id);
		ELSE
			problem := format('row %s, which the anchor of %s names, is missing from the log: it was removed',
							  named_id, a->>'at');
		END IF;
		RETURN NEXT;
	END LOOP;
END
$$;

CREATE FUNCTION bc_join.verify_audit_log(anchor text) RETURNS boolean
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, pg_temp
	AS $$ SELECT bc_join.verify_audit_log()
				 AND NOT EXISTS (SELECT 1 FROM bc_join.audit_anchor_problems(anchor)) $$;

REVOKE ALL ON FUNCTION bc_join.compute_clock(), bc_join.audit_anchor_payload(text),
	bc_join.audit_anchor_problems(text), bc_join.verify_audit_log(text) FROM PUBLIC;
REVOKE ALL ON TABLE bc_join.key_locks, bc_join.audit_chains FROM PUBLIC;
-- Operators can check the log themselves (verify_audit_log() needs audit_content).
GRANT EXECUTE ON FUNCTION bc_join.verify_audit_log(text), bc_join.audit_anchor_payload(text),
	bc_join.audit_anchor_problems(text),
	bc_join.audit_content(bigint, timestamptz, text, text, text, text, jsonb),
	bc_join.compute_clock() TO bc_join_operator;
GRANT SELECT ON bc_join.audit_chains TO bc_join_operator;
COMMENT ON FUNCTION bc_join.verify_audit_log(text) IS
	'True when the issuance log holds (verify_audit_log()) and is not behind the given anchor published earlier: every row the anchor names is in the log with the hash it signed.';
COMMENT ON FUNCTION bc_join.audit_anchor_payload(text) IS
	'The payload of an audit anchor this service signed, its signature checked with a signing key the service holds; INVALID_INPUT otherwise.';
COMMENT ON FUNCTION bc_join.audit_anchor_problems(text) IS
	'Where the issuance log does not hold against an anchor published earlier (a row it names missing or rewritten, or the log behind it after a restore from an older backup), one row each, or none.';
COMMENT ON FUNCTION bc_join.compute_clock() IS
	'The service clock''s current instant: clock_timestamp() plus bc_join.clock_offset (the time of an issuance log row).';
COMMENT ON FUNCTION bc_join.audit_log_problems(integer) IS
	'Checks the issuance log''s hash chains and returns the first rows (at most max_rows) that do not hold, with why: altered, not linked to the row before (a row removed or inserted), or a chain''s head (audit_chains) not its last row.';
SELECT pg_catalog.pg_extension_config_dump('bc_join.audit_chains', 'WHERE false');
SELECT pg_catalog.pg_extension_config_dump('bc_join.key_locks', 'WHERE false');

/* --------------------------------------- #27: restore-safe triggers, pg_upgrade */

-- cloud_providers: an insert keeps the time and author it brings (a restore).
CREATE OR REPLACE FUNCTION bc_join.cloud_providers_check() RETURNS trigger
	LANGUAGE plpgsql
	SET search_path = pg_catalog, pg_temp
	AS $$
BEGIN
	IF NEW.provider = 'azure' AND NEW.max_instance_age IS NOT NULL THEN
		PERFORM bc_join.invalid_config('azure has no instance age: max_instance_age must be NULL');
	END IF;
	IF NEW.max_instance_age IS NOT NULL AND NEW.max_instance_age <= interval '0' THEN
		PERFORM bc_join.invalid_config('max_instance_age must be positive');
	END IF;
	IF NEW.provider = 'gcp' AND (NEW.audience IS NULL OR length(NEW.audience) NOT BETWEEN 1 AND 512
								 OR NEW.audience !~ '^[\x21-\x7e]+$') THEN
		PERFORM bc_join.invalid_config('gcp needs an audience: 1 to 512 printable ASCII characters, no space');
	END IF;
	IF NEW.provider <> 'gcp' AND NEW.audience IS NOT NULL THEN
		PERFORM bc_join.invalid_config('only gcp has an audience');
	END IF;
	IF NEW.provider = 'azure' AND (NEW.domain IS NULL OR NEW.domain !~ '^[a-z0-9-]+(\.[a-z0-9-]+)+$') THEN
		PERFORM bc_join.invalid_config('azure needs a domain (like metadata.azure.com), lower case');
	END IF;
	IF NEW.provider <> 'azure' AND NEW.domain IS NOT NULL THEN
		PERFORM bc_join.invalid_config('only azure has a domain');
	END IF;
	-- An update records who and when; an insert has both from the column
	-- defaults, or keeps them as a restore brings them.
	IF TG_OP = 'UPDATE' THEN
		NEW.updated_at := bc_join.compute_now();
		NEW.updated_by := session_user;
	END IF;
	RETURN NEW;
END
$$;

-- The site epoch moves on where a certificate is issued (src/ext/admit.c),
-- not in a trigger a restore would fire.
DROP TRIGGER site_agent_rekeyed ON bc_join.node_certs;
DROP FUNCTION bc_join.site_agent_rekeyed();

-- Registered functions as regprocedure's schema-qualified text: pg_upgrade
-- refuses a regprocedure column in any table.
DO $text$
BEGIN
	PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
	ALTER TABLE bc_join.attestors ALTER COLUMN verify TYPE text USING verify::text;
	ALTER TABLE bc_join.provisioning_resolver ALTER COLUMN resolve TYPE text USING resolve::text;
	ALTER TABLE bc_join.cloud_resolver ALTER COLUMN resolve TYPE text USING resolve::text;
END
$text$;
