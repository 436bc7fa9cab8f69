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

-- No row is appended while the trigger is replaced: a backend still running
-- the 0.1.0 library takes the old advisory keys, which the new trigger no
-- longer does; once this commits, such a backend cannot run the new trigger
-- (its library lacks audit_chain_take) and fails instead of appending.
LOCK TABLE bc_join.audit_log IN SHARE ROW EXCLUSIVE MODE;

-- The service clock's current instant (the time of an issuance log row).
CREATE FUNCTION bc_join.compute_clock() RETURNS timestamptz
	AS 'MODULE_PATHNAME', 'bc_compute_clock'
	LANGUAGE C VOLATILE PARALLEL SAFE;

-- The chains' locks as lock tags no SQL function makes (src/ext/locks.c).
CREATE FUNCTION bc_join.audit_chain_take() RETURNS smallint
	AS 'MODULE_PATHNAME', 'bc_audit_chain_take'
	LANGUAGE C VOLATILE;

-- Before every insert: the row joins one of 16 chains and, under that
-- chain's lock (held to the end of the transaction, so the joins of one
-- chain append one after the other), takes the next id, the insert's time
-- and the link to the chain's last row.  One chain for everything made the
-- lock a queue that every join waited in through its commit's WAL flush:
-- joins could not share a flush (group commit) and the rate stopped at one
-- flush per join, however many clients (docs/performance.md).  The last row
-- is found by the primary key (chain, id), whatever the statistics said
-- when a backend first planned the query: planned while the log was nearly
-- empty, a sequential scan and sort stays in a long-lived backend's cached
-- plan (the gateway's) and every later insert reads the whole log
-- (enable_seqscan off here; test/tap/audit_plan.t).
-- A row that arrives whole, with its chain, links and hash (pg_restore, or
-- psql reading a pg_dump), is kept exactly as it was hashed: only the
-- extension's owner can insert into the log, and verify_audit_log() checks
-- every row however it came.
CREATE OR REPLACE FUNCTION bc_join.audit_chain() RETURNS trigger
	LANGUAGE plpgsql
	SET search_path = pg_catalog, pg_temp
	SET enable_seqscan = off
	AS $$
DECLARE
	prev bytea;
	c smallint;
BEGIN
	IF NEW.hash IS NOT NULL THEN
		RETURN NEW;
	END IF;
	c := bc_join.audit_chain_take();
	SELECT a.hash INTO prev FROM bc_join.audit_log a WHERE a.chain = c ORDER BY a.id DESC LIMIT 1;
	NEW.id := nextval('bc_join.audit_log_id_seq');
	NEW.at := bc_join.compute_clock();
	NEW.chain := c;
	NEW.prev_hash := coalesce(prev, '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea);
	NEW.hash := sha256(NEW.prev_hash || bc_join.audit_content(NEW.id, NEW.at, NEW.actor, NEW.action,
															   NEW.tenant_id, NEW.node_id, NEW.detail));
	RETURN NEW;
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
REVOKE ALL ON FUNCTION bc_join.audit_chain_take() FROM PUBLIC;
-- Operators can check the log themselves (verify_audit_log() needs audit_content).
GRANT EXECUTE ON FUNCTION bc_join.verify_audit_log(text), bc_join.audit_anchor_payload(text),
	bc_join.audit_anchor_problems(text),
	bc_join.audit_content(bigint, timestamptz, text, text, text, text, jsonb),
	bc_join.compute_clock() TO bc_join_operator;
COMMENT ON FUNCTION bc_join.verify_audit_log(text) IS
	'True when the issuance log holds (verify_audit_log()) and is not behind the given anchor published earlier: every row the anchor names is in the log with the hash it signed.';
COMMENT ON FUNCTION bc_join.audit_anchor_payload(text) IS
	'The payload of an audit anchor this service signed, its signature checked with a signing key the service holds; INVALID_INPUT otherwise.';
COMMENT ON FUNCTION bc_join.audit_anchor_problems(text) IS
	'Where the issuance log does not hold against an anchor published earlier (a row it names missing or rewritten, or the log behind it after a restore from an older backup), one row each, or none.';
COMMENT ON FUNCTION bc_join.compute_clock() IS
	'The service clock''s current instant: clock_timestamp() plus bc_join.clock_offset (the time of an issuance log row).';
COMMENT ON FUNCTION bc_join.audit_chain_take() IS
	'Internal: the issuance log chain this transaction appends to, locked to its end by a lock no SQL function can take (pg_locks: advisory, objsubid 3); for the audit_chain trigger.';

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

/* ----------------------------------------------- #26.7 NOTIFY payloads */

-- LISTEN needs no grant: any role that can log in hears every NOTIFY of the
-- database.  0.1.0's payloads named the join request, the revoked serial,
-- the retired node; 0.2.0 sends none (bc_join_requests: a request waits,
-- look at pending_join_requests; bc_join_crl: a revocation committed, fetch
-- the CRL).

/*
 * Record a join request waiting for an operator, for the CSR of context, and
 * tell watchers: NOTIFY bc_join_requests_<tenant id> (no payload: "look"), and a
 * join_request.pending event in the tenant's stream.  Returns the id.
 */
CREATE OR REPLACE FUNCTION bc_join.create_join_request(tenant_id text, attestor text, context jsonb,
											detail jsonb DEFAULT '{}')
	RETURNS text
	LANGUAGE plpgsql
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	rid text := bc_join.new_id('jr');
BEGIN
	INSERT INTO bc_join.join_requests (id, tenant_id, attestor, role, csr_sha256, claims, detail, expires_at)
		VALUES (rid, create_join_request.tenant_id, create_join_request.attestor,
				context->>'role', bc_join.b64url_decode(context->>'csrSha256'),
				coalesce(context->'claims', '{}'), coalesce(create_join_request.detail, '{}'),
				bc_join.compute_now() +
					coalesce(nullif(current_setting('bc_join.join_request_ttl', true), ''), '1d')::interval);
	INSERT INTO bc_join.events (tenant_id, type, payload)
		VALUES (create_join_request.tenant_id, 'join_request.pending',
				jsonb_build_object('requestId', rid, 'attestor', create_join_request.attestor,
								   'role', context->>'role', 'csrSha256', context->>'csrSha256'));
	PERFORM pg_notify('bc_join_requests', '');
	RETURN rid;
END
$$;

-- Revoke one certificate, a node's or a session's, by serial; revoking a node
-- certificate revokes the session certificates asked with it.  reason: an
-- RFC 5280 reason name (keyCompromise, superseded, cessationOfOperation,
-- affiliationChanged, privilegeWithdrawn, unspecified) or any short text,
-- which the CRL carries as unspecified.  Returns false when it was already
-- revoked.  Audited, evented, and the gateway's cached CRL is told.
CREATE OR REPLACE FUNCTION bc_join.revoke_certificate(serial text, reason text) RETURNS boolean
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	node text;
	tenant text;
	sessions bigint := 0;
	kind text := 'node';
BEGIN
	IF reason IS NULL OR length(reason) NOT BETWEEN 1 AND 200 THEN
		PERFORM bc_join.invalid_input('a revocation needs a reason of 1 to 200 characters');
	END IF;
	SELECT c.node_id, n.tenant_id INTO node, tenant FROM bc_join.node_certs c
		JOIN bc_join.nodes n ON n.id = c.node_id WHERE c.serial = revoke_certificate.serial;
	IF FOUND THEN
		UPDATE bc_join.node_certs c SET revoked_at = bc_join.compute_now(),
			revocation_reason = revoke_certificate.reason
			WHERE c.serial = revoke_certificate.serial AND c.revoked_at IS NULL;
		IF NOT FOUND THEN
			RETURN false;
		END IF;
		UPDATE bc_join.session_certs sc SET revoked_at = bc_join.compute_now(),
			revocation_reason = revoke_certificate.reason
			WHERE sc.node_serial = revoke_certificate.serial AND sc.revoked_at IS NULL;
		GET DIAGNOSTICS sessions = ROW_COUNT;
	ELSE
		kind := 'session';
		SELECT s.node_id, s.tenant_id INTO node, tenant FROM bc_join.session_certs sc
			JOIN bc_join.sessions s ON s.id = sc.session_id WHERE sc.serial = revoke_certificate.serial;
		IF NOT FOUND THEN
			PERFORM bc_join.invalid_input('no certificate has this serial');
		END IF;
		UPDATE bc_join.session_certs sc SET revoked_at = bc_join.compute_now(),
			revocation_reason = revoke_certificate.reason
			WHERE sc.serial = revoke_certificate.serial AND sc.revoked_at IS NULL;
		IF NOT FOUND THEN
			RETURN false;
		END IF;
	END IF;
	INSERT INTO bc_join.events (tenant_id, type, payload)
		VALUES (tenant, 'certificate.revoked',
				jsonb_build_object('serial', serial, 'kind', kind, 'nodeId', node, 'reason', reason,
								   'sessionCertificates', sessions));
	INSERT INTO bc_join.audit_log (action, tenant_id, node_id, detail)
		VALUES ('certificate.revoke', tenant, node,
				jsonb_build_object('serial', serial, 'kind', kind, 'reason', reason,
								   'sessionCertificates', sessions));
	PERFORM pg_notify('bc_join_crl', '');
	RETURN true;
END
$$;

-- Retire a node: state retired, certificates revoked, bindings dropped.
CREATE OR REPLACE FUNCTION bc_join.retire_node(node_id text) RETURNS void
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	tenant text;
BEGIN
	UPDATE bc_join.nodes n SET state = 'retired', retired_at = bc_join.compute_now(),
		updated_at = bc_join.compute_now()
		WHERE n.id = retire_node.node_id AND n.state <> 'retired' RETURNING n.tenant_id INTO tenant;
	IF NOT FOUND THEN
		PERFORM bc_join.invalid_input('no live node has this id');
	END IF;
	UPDATE bc_join.node_certs c SET revoked_at = bc_join.compute_now(), revocation_reason = 'retired'
		WHERE c.node_id = retire_node.node_id AND c.revoked_at IS NULL;
	UPDATE bc_join.session_certs sc SET revoked_at = bc_join.compute_now(), revocation_reason = 'retired'
		FROM bc_join.sessions s
		WHERE s.id = sc.session_id AND s.node_id = retire_node.node_id AND sc.revoked_at IS NULL;
	PERFORM pg_notify('bc_join_crl', '');
	DELETE FROM bc_join.node_bindings b WHERE b.node_id = retire_node.node_id;
	INSERT INTO bc_join.events (tenant_id, type, payload)
		VALUES (tenant, 'node.retired', jsonb_build_object('nodeId', node_id));
	INSERT INTO bc_join.audit_log (action, tenant_id, node_id) VALUES ('node.retire', tenant, node_id);
END
$$;

/* ------------------------------------------- #26.7 revocation reasons */

-- 0.1.0 took any short text as an operator's revocation reason, and an
-- operator's 'retired' on a node that was not retired let the revoked
-- certificate reclaim its node by x509pop.  0.2.0 takes from operators only
-- RFC 5280's CRLReason names (check_revocation_reason), and the service's
-- own reasons stay apart: renewed (a renewal), reclaimed (a reclaim's older
-- certificates; 0.1.0 wrote superseded) and retired (retire_node).  The rows
-- 0.1.0 wrote are mapped (docs/operator.md, "Revocation"):
--  - an operator's (the certificate's serial, or a session certificate's
--    node certificate's, is in an audit row certificate.revoke): an RFC 5280
--    name in any case and spelling of separators becomes that name
--    (key-compromise: keyCompromise); retired becomes cessationOfOperation,
--    renewed and reclaimed superseded (the codes 0.1.0's CRL carried for
--    them); any other text (certificateHold, removeFromCRL included)
--    unspecified, the code 0.1.0's CRL carried for it.  The text as given
--    stays in the audit row and the certificate.revoked event;
--  - the service's: renewed stays, superseded becomes reclaimed, retired
--    stays where the node is retired (else it is mapped as an operator's).
CREATE FUNCTION bc_join.revocation_reason_from_0_1_0(reason text, by_operator boolean,
													 node_retired boolean)
	RETURNS text LANGUAGE sql IMMUTABLE
	SET search_path = pg_catalog, pg_temp
	AS $$
	SELECT CASE
		WHEN reason IS NULL THEN NULL
		WHEN NOT by_operator AND reason = 'renewed' THEN 'renewed'
		WHEN NOT by_operator AND reason = 'superseded' THEN 'reclaimed'
		WHEN NOT by_operator AND reason = 'retired' AND node_retired THEN 'retired'
		ELSE coalesce(
			(SELECT r FROM unnest(ARRAY['unspecified', 'keyCompromise', 'cACompromise',
					'affiliationChanged', 'superseded', 'cessationOfOperation', 'privilegeWithdrawn',
					'aACompromise']) r
			 WHERE lower(r) = lower(regexp_replace(reason, '[^[:alpha:]]', '', 'g'))),
			CASE lower(regexp_replace(reason, '[^[:alpha:]]', '', 'g'))
				WHEN 'retired' THEN 'cessationOfOperation'
				WHEN 'renewed' THEN 'superseded'
				WHEN 'reclaimed' THEN 'superseded'
				ELSE 'unspecified'
			END)
	END $$;

UPDATE bc_join.node_certs c
	SET revocation_reason = bc_join.revocation_reason_from_0_1_0(c.revocation_reason, x.by_operator,
																  x.node_retired)
	FROM (SELECT c2.serial, o.serial IS NOT NULL AS by_operator, n.state = 'retired' AS node_retired
		  FROM bc_join.node_certs c2
		  JOIN bc_join.nodes n ON n.id = c2.node_id
		  LEFT JOIN (SELECT DISTINCT a.detail->>'serial' AS serial FROM bc_join.audit_log a
					 WHERE a.action = 'certificate.revoke') o ON o.serial = c2.serial
		  WHERE c2.revocation_reason IS NOT NULL) x
	WHERE x.serial = c.serial;
UPDATE bc_join.session_certs sc
	SET revocation_reason = bc_join.revocation_reason_from_0_1_0(sc.revocation_reason, x.by_operator,
																  x.node_retired)
	FROM (SELECT sc2.serial, (o1.serial IS NOT NULL OR o2.serial IS NOT NULL) AS by_operator,
				 n.state = 'retired' AS node_retired
		  FROM bc_join.session_certs sc2
		  JOIN bc_join.sessions s ON s.id = sc2.session_id
		  JOIN bc_join.nodes n ON n.id = s.node_id
		  LEFT JOIN (SELECT DISTINCT a.detail->>'serial' AS serial FROM bc_join.audit_log a
					 WHERE a.action = 'certificate.revoke') o1 ON o1.serial = sc2.serial
		  LEFT JOIN (SELECT DISTINCT a.detail->>'serial' AS serial FROM bc_join.audit_log a
					 WHERE a.action = 'certificate.revoke') o2 ON o2.serial = sc2.node_serial
		  WHERE sc2.revocation_reason IS NOT NULL) x
	WHERE x.serial = sc.serial;
DROP FUNCTION bc_join.revocation_reason_from_0_1_0(text, boolean, boolean);

ALTER TABLE bc_join.node_certs ADD CONSTRAINT node_certs_revocation_reason_check
	CHECK (revocation_reason IN
		('unspecified', 'keyCompromise', 'cACompromise', 'affiliationChanged', 'superseded',
		 'cessationOfOperation', 'privilegeWithdrawn', 'aACompromise',
		 'renewed', 'reclaimed', 'retired'));
ALTER TABLE bc_join.session_certs ADD CONSTRAINT session_certs_revocation_reason_check
	CHECK (revocation_reason IN
		('unspecified', 'keyCompromise', 'cACompromise', 'affiliationChanged', 'superseded',
		 'cessationOfOperation', 'privilegeWithdrawn', 'aACompromise', 'retired'));

-- An operator's revocation reason: one of RFC 5280's CRLReason names that
-- the CRL's reasonCode carries (unspecified: none), or INVALID_INPUT.  Not
-- certificateHold (a revocation here is final: nothing releases a hold) nor
-- removeFromCRL (delta CRLs only); nor the service's own renewed, reclaimed
-- and retired, so that no operator's revocation is ever taken for one.
CREATE FUNCTION bc_join.check_revocation_reason(reason text) RETURNS void
	LANGUAGE plpgsql
	SET search_path = pg_catalog, pg_temp
	AS $$
BEGIN
	IF reason IS NULL OR reason NOT IN ('unspecified', 'keyCompromise', 'cACompromise',
			'affiliationChanged', 'superseded', 'cessationOfOperation', 'privilegeWithdrawn',
			'aACompromise') THEN
		PERFORM bc_join.invalid_input(CASE WHEN reason = 'certificateHold'
			THEN 'certificateHold is not taken: a revocation is final, nothing releases a hold'
			ELSE 'a revocation reason is one of unspecified, keyCompromise, cACompromise, '
				 'affiliationChanged, superseded, cessationOfOperation, privilegeWithdrawn, aACompromise'
			END);
	END IF;
END
$$;
REVOKE ALL ON FUNCTION bc_join.check_revocation_reason(text) FROM PUBLIC;
COMMENT ON FUNCTION bc_join.check_revocation_reason(text) IS
	'Internal: raises INVALID_INPUT unless reason is one of the RFC 5280 reason names an operator revokes for; returns nothing.';

-- Revoke one certificate, a node's or a session's, by serial; revoking a node
-- certificate revokes the session certificates asked with it.  reason: one
-- of RFC 5280's CRLReason names (check_revocation_reason).  Returns false
-- when it was already revoked.  Audited, evented, and the gateway's cached
-- CRL is told.
CREATE OR REPLACE FUNCTION bc_join.revoke_certificate(serial text, reason text) RETURNS boolean
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	node text;
	tenant text;
	sessions bigint := 0;
	kind text := 'node';
BEGIN
	PERFORM bc_join.check_revocation_reason(reason);
	SELECT c.node_id, n.tenant_id INTO node, tenant FROM bc_join.node_certs c
		JOIN bc_join.nodes n ON n.id = c.node_id WHERE c.serial = revoke_certificate.serial;
	IF FOUND THEN
		UPDATE bc_join.node_certs c SET revoked_at = bc_join.compute_now(),
			revocation_reason = revoke_certificate.reason
			WHERE c.serial = revoke_certificate.serial AND c.revoked_at IS NULL;
		IF NOT FOUND THEN
			RETURN false;
		END IF;
		UPDATE bc_join.session_certs sc SET revoked_at = bc_join.compute_now(),
			revocation_reason = revoke_certificate.reason
			WHERE sc.node_serial = revoke_certificate.serial AND sc.revoked_at IS NULL;
		GET DIAGNOSTICS sessions = ROW_COUNT;
	ELSE
		kind := 'session';
		SELECT s.node_id, s.tenant_id INTO node, tenant FROM bc_join.session_certs sc
			JOIN bc_join.sessions s ON s.id = sc.session_id WHERE sc.serial = revoke_certificate.serial;
		IF NOT FOUND THEN
			PERFORM bc_join.invalid_input('no certificate has this serial');
		END IF;
		UPDATE bc_join.session_certs sc SET revoked_at = bc_join.compute_now(),
			revocation_reason = revoke_certificate.reason
			WHERE sc.serial = revoke_certificate.serial AND sc.revoked_at IS NULL;
		IF NOT FOUND THEN
			RETURN false;
		END IF;
	END IF;
	INSERT INTO bc_join.events (tenant_id, type, payload)
		VALUES (tenant, 'certificate.revoked',
				jsonb_build_object('serial', serial, 'kind', kind, 'nodeId', node, 'reason', reason,
								   'sessionCertificates', sessions));
	INSERT INTO bc_join.audit_log (action, tenant_id, node_id, detail)
		VALUES ('certificate.revoke', tenant, node,
				jsonb_build_object('serial', serial, 'kind', kind, 'reason', reason,
								   'sessionCertificates', sessions));
	PERFORM pg_notify('bc_join_crl', '');
	RETURN true;
END
$$;
COMMENT ON FUNCTION bc_join.revoke_certificate(text, text) IS
	'Revokes a node or session certificate by serial (a node certificate''s session certificates with it) for an RFC 5280 reason name, audited and evented; returns false when it was revoked already.';

-- Revoke every live certificate of a node, and the session certificates asked
-- with them, for an RFC 5280 reason (check_revocation_reason); returns how
-- many node certificates were revoked.  The node stays (it may join again
-- through an attestor, never by x509pop with a revoked certificate);
-- retire_node also ends it.
CREATE OR REPLACE FUNCTION bc_join.revoke_node(node_id text, reason text) RETURNS integer
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	c record;
	n integer := 0;
BEGIN
	PERFORM bc_join.check_revocation_reason(reason);
	IF NOT EXISTS (SELECT 1 FROM bc_join.nodes x WHERE x.id = revoke_node.node_id) THEN
		PERFORM bc_join.invalid_input('no node has this id');
	END IF;
	FOR c IN SELECT serial FROM bc_join.node_certs x
			 WHERE x.node_id = revoke_node.node_id AND x.revoked_at IS NULL ORDER BY x.issued_at LOOP
		IF bc_join.revoke_certificate(c.serial, reason) THEN
			n := n + 1;
		END IF;
	END LOOP;
	RETURN n;
END
$$;
COMMENT ON FUNCTION bc_join.revoke_node(text, text) IS
	'Revokes every live certificate of a node and the session certificates asked with them for an RFC 5280 reason name; returns how many node certificates were revoked.';

/* ------------------------------------- #26.7 bounded pending join requests */

-- One single-use token made 200 pending join requests from software-made
-- EKs in 76 s.  A request now records the token it was made with, and at
-- most bc_join.pending_requests_per_token (10) wait for one token and
-- bc_join.pending_requests_per_tenant (1000) in one tenant; the view shows
-- the token and, for tpm, whether the EK came with a certificate.
ALTER TABLE bc_join.join_requests ADD COLUMN token_id text;
UPDATE bc_join.join_requests SET token_id = nullif(detail->>'tokenId', '') WHERE detail ? 'tokenId';
CREATE INDEX join_requests_pending_token_idx ON bc_join.join_requests (token_id)
	WHERE state = 'pending';
CREATE INDEX join_requests_pending_tenant_idx ON bc_join.join_requests (tenant_id)
	WHERE state = 'pending';

-- create_join_request: the bounds, and the token recorded.
/*
 * Record a join request waiting for an operator, for the CSR of context, and
 * tell watchers: NOTIFY bc_join_requests_<tenant id> (no payload: "look"), and a
 * join_request.pending event in the tenant's stream.  Returns the id.  At
 * most bc_join.pending_requests_per_token requests wait for one token (the
 * tokenId of detail, which the attestor checked) and
 * bc_join.pending_requests_per_tenant for one tenant; beyond that the join
 * is refused '<attestor>:pending-token-limit' or ':pending-tenant-limit'.
 */
CREATE OR REPLACE FUNCTION bc_join.create_join_request(tenant_id text, attestor text, context jsonb,
											detail jsonb DEFAULT '{}')
	RETURNS text
	LANGUAGE plpgsql
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	rid text := bc_join.new_id('jr');
	token text := nullif(create_join_request.detail->>'tokenId', '');
	per_token integer := coalesce(nullif(current_setting('bc_join.pending_requests_per_token', true), ''),
								  '10')::integer;
	per_tenant integer := coalesce(nullif(current_setting('bc_join.pending_requests_per_tenant', true), ''),
								   '1000')::integer;
BEGIN
	-- One request made at a time per tenant (the token's row is locked already), so the bounds hold.
	PERFORM 1 FROM bc_join.tenants t WHERE t.id = create_join_request.tenant_id FOR NO KEY UPDATE;
	IF token IS NOT NULL AND (SELECT count(*) FROM (
			SELECT 1 FROM bc_join.join_requests q
			WHERE q.token_id = token AND q.state = 'pending' AND q.expires_at > bc_join.compute_now()
			LIMIT per_token) x) >= per_token THEN
		PERFORM bc_join.refuse(create_join_request.attestor || ':pending-token-limit',
							   create_join_request.tenant_id);
	END IF;
	IF (SELECT count(*) FROM (
			SELECT 1 FROM bc_join.join_requests q
			WHERE q.tenant_id = create_join_request.tenant_id AND q.state = 'pending'
			  AND q.expires_at > bc_join.compute_now()
			LIMIT per_tenant) x) >= per_tenant THEN
		PERFORM bc_join.refuse(create_join_request.attestor || ':pending-tenant-limit',
							   create_join_request.tenant_id);
	END IF;
	INSERT INTO bc_join.join_requests (id, tenant_id, attestor, role, csr_sha256, claims, detail,
									   expires_at, token_id)
		VALUES (rid, create_join_request.tenant_id, create_join_request.attestor,
				context->>'role', bc_join.b64url_decode(context->>'csrSha256'),
				coalesce(context->'claims', '{}'), coalesce(create_join_request.detail, '{}'),
				bc_join.compute_now() +
					coalesce(nullif(current_setting('bc_join.join_request_ttl', true), ''), '1d')::interval,
				token);
	INSERT INTO bc_join.events (tenant_id, type, payload)
		VALUES (create_join_request.tenant_id, 'join_request.pending',
				jsonb_build_object('requestId', rid, 'attestor', create_join_request.attestor,
								   'role', context->>'role', 'csrSha256', context->>'csrSha256'));
	PERFORM pg_notify('bc_join_requests', '');
	RETURN rid;
END
$$;

COMMENT ON FUNCTION bc_join.create_join_request(text, text, jsonb, jsonb) IS
	'Records a join request for the CSR of context that waits for an operator (refused beyond bc_join.pending_requests_per_token for detail''s tokenId, or bc_join.pending_requests_per_tenant), notifies the tenant''s channel bc_join_requests_<tenant id> and its event stream, and returns the request id.';


-- What waits for an operator, readable at a glance.
CREATE OR REPLACE VIEW bc_join.pending_join_requests AS
	SELECT r.id,
		   t.name AS tenant,
		   r.attestor,
		   r.role,
		   concat_ws(' ',
					 'host=' || (r.claims->>'hostname'),
					 'serial=' || (r.claims->>'serial'),
					 'product=' || (r.claims->>'productUuid'),
					 CASE WHEN jsonb_array_length(coalesce(r.claims->'macs', '[]')) > 0
						  THEN 'macs=' || (SELECT string_agg(m, ',') FROM jsonb_array_elements_text(r.claims->'macs') m)
					 END) AS claims,
		   justify_interval(date_trunc('second', bc_join.compute_now() - r.created_at)) AS age,
		   r.detail,
		   justify_interval(date_trunc('second', r.expires_at - bc_join.compute_now())) AS expires_in,
		   r.created_at,
		   r.expires_at,
		   r.tenant_id,
		   r.token_id,
		   -- tpm: whether the EK came with a certificate; one that chains to a
		   -- configured root never waits (it is trusted), so it is 'none' (no
		   -- EK certificate: a software-made key looks so) or 'unchained'
		   r.detail->>'ekChain' AS ek_chain
	FROM bc_join.join_requests r JOIN bc_join.tenants t ON t.id = r.tenant_id
	WHERE r.state = 'pending' AND r.expires_at > bc_join.compute_now()
	ORDER BY r.created_at;

COMMENT ON VIEW bc_join.pending_join_requests IS
	'Join requests waiting for an operator and not yet expired, oldest first: id, tenant, attestor, role, the claims at a glance, age, detail, expires_in, the token that made it and, for tpm, whether the EK came with a certificate (ek_chain none or unchained).';

/* ------------------------------------------------------- #26.7 discovery */

-- set_discovery_site sets the lifetime of the site's ramdisk certificates too
-- (discovery_sites.cert_ttl_seconds had no setter): a fourth argument.
DROP FUNCTION bc_join.set_discovery_site(text, text, text[]);

-- Enable discovery on a site, or change its approval mode, its kinds (NULL
-- keeps them; at first the six defaults) and its ramdisks' certificate
-- lifetime (NULL keeps it; at first 7200 s; 60 to 7200).
CREATE FUNCTION bc_join.set_discovery_site(site_id text, approval text DEFAULT 'none',
										   allowed_kinds text[] DEFAULT NULL,
										   cert_ttl_seconds integer DEFAULT NULL)
	RETURNS void
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	k text;
BEGIN
	IF NOT EXISTS (SELECT 1 FROM bc_join.sites s WHERE s.id = set_discovery_site.site_id) THEN
		PERFORM bc_join.invalid_input('the site does not exist');
	END IF;
	IF approval IS NULL OR approval NOT IN ('none', 'unknown-machines', 'always') THEN
		PERFORM bc_join.invalid_input('approval must be none, unknown-machines or always');
	END IF;
	IF cert_ttl_seconds NOT BETWEEN 60 AND 7200 THEN
		PERFORM bc_join.invalid_input('cert_ttl_seconds must be between 60 and 7200');
	END IF;
	FOREACH k IN ARRAY coalesce(allowed_kinds, '{}') LOOP
		IF NOT EXISTS (SELECT 1 FROM bc_join.command_kinds c
					   WHERE c.kind = k OR (right(k, 2) = '.*' AND starts_with(c.kind, left(k, -1)))) THEN
			PERFORM bc_join.invalid_input(format('%s is no registered command kind or prefix.* glob', k));
		END IF;
	END LOOP;
	INSERT INTO bc_join.discovery_sites AS d (site_id, approval, allowed_kinds, cert_ttl_seconds)
		VALUES (site_id, approval, coalesce(allowed_kinds, ARRAY['inventory.refresh', 'logs.collect',
				'diag.*', 'disk.wipe', 'deploy.*', 'boot.kexec']), coalesce(cert_ttl_seconds, 7200))
		ON CONFLICT ON CONSTRAINT discovery_sites_pkey DO UPDATE SET approval = EXCLUDED.approval,
			allowed_kinds = coalesce(set_discovery_site.allowed_kinds, d.allowed_kinds),
			cert_ttl_seconds = coalesce(set_discovery_site.cert_ttl_seconds, d.cert_ttl_seconds),
			updated_at = bc_join.compute_now();
	INSERT INTO bc_join.audit_log (action, detail)
		VALUES ('discovery_site.set', jsonb_build_object('siteId', site_id, 'approval', approval,
				'allowedKinds', allowed_kinds, 'certTtlSeconds', cert_ttl_seconds));
END
$$;

REVOKE ALL ON FUNCTION bc_join.set_discovery_site(text, text, text[], integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bc_join.set_discovery_site(text, text, text[], integer) TO bc_join_operator;
COMMENT ON FUNCTION bc_join.set_discovery_site(text, text, text[], integer) IS
	'Enables the discovery attestor on a site (approval none, unknown-machines or always; the kinds its ramdisks'' certificates allow; their lifetime, 60 to 7200 s); returns nothing.';

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
/* #26.4 service keys: the pinned file carries its time, signed */

COMMENT ON FUNCTION bc_join.service_keys() IS
	'Returns everything an agent pins in one document, {trustDomain, signingKey, encryptionKey, signingKeys, encryptionKeys, nodeCa, issuedAt, signed}, to hand to bcd as --service-keys; signed is the document with issuedAt signed by the current signing key.';
COMMENT ON FUNCTION bc_join.signed_service_keys() IS
	'Returns {keys: [JWS...]}: service_keys() without signed, signed by each signing key in key_dir, the rollover agents accept when it is signed by a key they pin and is not older than the set they pin.';

/* #26.8 sessions: the caller bcd saw, recorded with each session certificate */

-- the process that asked bcd for it, as the host claims (signed by the node
-- key): {"pid", "exe", "unit", "cgroup"}; NULL from a bcd that sends none
ALTER TABLE bc_join.session_certs ADD COLUMN caller jsonb;

-- #31: tenant operators: approve, revoke and read within their own tenants, enforced by PostgreSQL

DO $roles$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'bc_join_tenant_operator') THEN
		CREATE ROLE bc_join_tenant_operator NOLOGIN;
	END IF;
END
$roles$;

/* ------------------------------------------------------- tenant operators */

/*
 * A tenant operator (#31): a role that administers and reads the tenants
 * granted to it (grant_tenant_operator) and nothing of any other, enforced
 * by PostgreSQL.  One row per (role, tenant) here; every role with a row is
 * a member of the NOLOGIN group bc_join_tenant_operator, which holds the
 * grants (SELECT on the tables and views below, EXECUTE on the
 * administrative functions that check tenants).  What it reads is cut down
 * by row-level security: every table it may read has one policy, the
 * caller's tenants (a row of its own here, pg_has_role) or every row for
 * the platform operator (bc_join_operator) and the superuser; views read
 * through it as their caller (security_invoker).  The administrative
 * functions are SECURITY DEFINER (they run as the extension's owner, whom
 * row-level security does not bind): each asks check_tenant() of the
 * object's tenant first.  The entry points of joins, renewals and sessions
 * run as the owner too: row-level security (enabled, not forced) changes
 * nothing for them, nor for pg_dump run by a superuser.  The role is kept
 * as regrole: its OID here, its name in a dump.
 */
CREATE TABLE bc_join.tenant_operator_grants (
	role regrole NOT NULL,
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	granted_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	granted_by text NOT NULL DEFAULT session_user,
	PRIMARY KEY (role, tenant_id)
);
CREATE INDEX tenant_operator_grants_tenant_idx ON bc_join.tenant_operator_grants (tenant_id);

-- The role that called, also inside a SECURITY DEFINER function (where
-- current_user is the extension's owner): the role SET ROLE made current,
-- else the session's user.  SET ROLE is refused inside a SECURITY DEFINER
-- function, and reaches only roles the session's user is a member of.
CREATE FUNCTION bc_join.calling_role() RETURNS oid
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, pg_temp
	AS $$
	SELECT r.oid FROM pg_catalog.pg_roles r
	WHERE r.rolname = CASE WHEN pg_catalog.current_setting('role') = 'none'
						   THEN session_user::text
						   ELSE pg_catalog.current_setting('role') END
$$;

-- Whether the calling role operates every tenant: the superuser, and the
-- members of bc_join_operator (with its privileges).
CREATE FUNCTION bc_join.is_platform_operator() RETURNS boolean
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, pg_temp
	AS $$ SELECT coalesce(pg_catalog.pg_has_role(bc_join.calling_role(), 'bc_join_operator', 'USAGE'), false) $$;

-- The check every administrative function makes first, with the tenant of
-- the object it was asked about (NULL when there is none): the platform
-- operator passes; a tenant operator passes for its own tenants; anything
-- else (another tenant's object, or none at all) is one refusal, the same
-- whether or not the object exists elsewhere.
CREATE FUNCTION bc_join.check_tenant(tenant_id text, what text) RETURNS void
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	me oid := bc_join.calling_role();
BEGIN
	IF coalesce(pg_has_role(me, 'bc_join_operator', 'USAGE'), false) THEN
		RETURN;
	END IF;
	IF check_tenant.tenant_id IS NOT NULL AND EXISTS (
			SELECT 1 FROM bc_join.tenant_operator_grants g
			WHERE g.tenant_id = check_tenant.tenant_id AND pg_has_role(me, g.role, 'USAGE')) THEN
		RETURN;
	END IF;
	RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
		MESSAGE = format('no %s with this id in the tenants you operate', what),
		DETAIL = 'ACCESS_DENIED: a tenant operator acts on the objects of its own tenants only.';
END
$$;

-- Make a role an operator of a tenant (the superuser or the platform
-- operator only); returns false when it was one already.
CREATE FUNCTION bc_join.grant_tenant_operator(role regrole, tenant_id text) RETURNS boolean
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	r pg_roles;
BEGIN
	IF NOT bc_join.is_platform_operator() THEN
		RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
			MESSAGE = 'only the superuser or a platform operator (bc_join_operator) makes tenant operators';
	END IF;
	SELECT * INTO r FROM pg_catalog.pg_roles x WHERE x.oid = grant_tenant_operator.role;
	IF NOT FOUND THEN
		PERFORM bc_join.invalid_input('no role has this name');
	END IF;
	IF r.rolsuper OR r.rolbypassrls OR r.rolname IN ('bc_join_gateway', 'bc_join_operator', 'bc_join_tenant_operator')
	   OR r.rolname LIKE 'pg\_%' OR pg_has_role(r.oid, 'bc_join_gateway', 'MEMBER')
	   OR pg_has_role(r.oid, 'bc_join_operator', 'MEMBER') THEN
		PERFORM bc_join.invalid_input('a tenant operator is a role of its own: not a superuser, a role that bypasses '
									  'row-level security, a gateway, a platform operator or one of the extension''s roles');
	END IF;
	IF grant_tenant_operator.tenant_id IS NULL OR grant_tenant_operator.tenant_id = 'root'
	   OR NOT EXISTS (SELECT 1 FROM bc_join.tenants t WHERE t.id = grant_tenant_operator.tenant_id) THEN
		PERFORM bc_join.invalid_input('no tenant has this id (the root tenant is the platform''s)');
	END IF;
	INSERT INTO bc_join.tenant_operator_grants (role, tenant_id)
		VALUES (r.oid, grant_tenant_operator.tenant_id) ON CONFLICT DO NOTHING;
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_auth_members m
				   WHERE m.roleid = 'bc_join_tenant_operator'::regrole AND m.member = r.oid) THEN
		EXECUTE format('GRANT bc_join_tenant_operator TO %I', r.rolname);
	END IF;
	INSERT INTO bc_join.events (tenant_id, type, payload)
		VALUES (grant_tenant_operator.tenant_id, 'tenant_operator.granted',
				jsonb_build_object('role', r.rolname, 'by', session_user));
	INSERT INTO bc_join.audit_log (action, tenant_id, detail)
		VALUES ('tenant_operator.grant', grant_tenant_operator.tenant_id, jsonb_build_object('role', r.rolname));
	RETURN true;
END
$$;

-- Take a tenant from a tenant operator; with its last tenant it leaves
-- bc_join_tenant_operator.  Returns whether it operated the tenant.
CREATE FUNCTION bc_join.revoke_tenant_operator(role regrole, tenant_id text) RETURNS boolean
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	rname text := (SELECT x.rolname FROM pg_catalog.pg_roles x WHERE x.oid = revoke_tenant_operator.role);
BEGIN
	IF NOT bc_join.is_platform_operator() THEN
		RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
			MESSAGE = 'only the superuser or a platform operator (bc_join_operator) takes tenant operators away';
	END IF;
	DELETE FROM bc_join.tenant_operator_grants g
		WHERE g.role = revoke_tenant_operator.role AND g.tenant_id = revoke_tenant_operator.tenant_id;
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	IF rname IS NOT NULL
	   AND NOT EXISTS (SELECT 1 FROM bc_join.tenant_operator_grants g WHERE g.role = revoke_tenant_operator.role)
	   AND EXISTS (SELECT 1 FROM pg_catalog.pg_auth_members m
				   WHERE m.roleid = 'bc_join_tenant_operator'::regrole AND m.member = revoke_tenant_operator.role) THEN
		EXECUTE format('REVOKE bc_join_tenant_operator FROM %I', rname);
	END IF;
	INSERT INTO bc_join.events (tenant_id, type, payload)
		VALUES (revoke_tenant_operator.tenant_id, 'tenant_operator.revoked',
				jsonb_build_object('role', coalesce(rname, revoke_tenant_operator.role::oid::text), 'by', session_user));
	INSERT INTO bc_join.audit_log (action, tenant_id, detail)
		VALUES ('tenant_operator.revoke', revoke_tenant_operator.tenant_id,
				jsonb_build_object('role', coalesce(rname, revoke_tenant_operator.role::oid::text)));
	RETURN true;
END
$$;

-- Who operates what: one row per tenant operator and tenant (a tenant
-- operator sees its own rows, the platform operator every row).
CREATE VIEW bc_join.tenant_operators WITH (security_invoker = true) AS
	SELECT g.role::text AS role, g.tenant_id, t.name AS tenant, r.rolcanlogin AS can_login,
		   r.oid IS NULL AS dropped, g.granted_at, g.granted_by
	FROM bc_join.tenant_operator_grants g
	JOIN bc_join.tenants t ON t.id = g.tenant_id
	LEFT JOIN pg_catalog.pg_roles r ON r.oid = g.role
	ORDER BY t.name, g.tenant_id, g.role::text;

/*
 * Row-level security.  One permissive policy per table, for every command
 * (writes are what the grants allow): the platform operator (an InitPlan,
 * evaluated once a query) or the caller's tenants, read from
 * tenant_operator_grants under its own policy (the caller's rows alone).
 * Rows of a node, a session or a site follow their parent's policy.
 * Enabled, not forced: the extension's owner (every SECURITY DEFINER
 * function: joins, renewals, sessions, administration) and the superuser
 * (pg_dump) read and write every row as before.
 */
ALTER TABLE bc_join.tenant_operator_grants ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.tenant_operator_grants
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE')) OR pg_catalog.pg_has_role(role, 'USAGE'));
ALTER TABLE bc_join.tenants ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.tenants
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR id IN (SELECT g.tenant_id FROM bc_join.tenant_operator_grants g));
ALTER TABLE bc_join.sites ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.sites
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR tenant_id IN (SELECT g.tenant_id FROM bc_join.tenant_operator_grants g));
ALTER TABLE bc_join.pools ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.pools
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR tenant_id IN (SELECT g.tenant_id FROM bc_join.tenant_operator_grants g));
ALTER TABLE bc_join.nodes ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.nodes
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR tenant_id IN (SELECT g.tenant_id FROM bc_join.tenant_operator_grants g));
ALTER TABLE bc_join.join_tokens ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.join_tokens
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR tenant_id IN (SELECT g.tenant_id FROM bc_join.tenant_operator_grants g));
ALTER TABLE bc_join.provisioning_tokens ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.provisioning_tokens
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR tenant_id IN (SELECT g.tenant_id FROM bc_join.tenant_operator_grants g));
ALTER TABLE bc_join.sessions ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.sessions
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR tenant_id IN (SELECT g.tenant_id FROM bc_join.tenant_operator_grants g));
ALTER TABLE bc_join.join_requests ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.join_requests
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR tenant_id IN (SELECT g.tenant_id FROM bc_join.tenant_operator_grants g));
ALTER TABLE bc_join.events ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.events
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR tenant_id IN (SELECT g.tenant_id FROM bc_join.tenant_operator_grants g));
ALTER TABLE bc_join.audit_log ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.audit_log
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR tenant_id IN (SELECT g.tenant_id FROM bc_join.tenant_operator_grants g));
ALTER TABLE bc_join.x509pop_roots ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.x509pop_roots
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR tenant_id IN (SELECT g.tenant_id FROM bc_join.tenant_operator_grants g));
ALTER TABLE bc_join.tpm_ek_enrollments ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.tpm_ek_enrollments
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR tenant_id IN (SELECT g.tenant_id FROM bc_join.tenant_operator_grants g));
ALTER TABLE bc_join.tpm_pcr_policies ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.tpm_pcr_policies
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR tenant_id IN (SELECT g.tenant_id FROM bc_join.tenant_operator_grants g));
ALTER TABLE bc_join.tpm_settings ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.tpm_settings
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR tenant_id IN (SELECT g.tenant_id FROM bc_join.tenant_operator_grants g));
ALTER TABLE bc_join.cloud_accounts ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.cloud_accounts
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR tenant_id IN (SELECT g.tenant_id FROM bc_join.tenant_operator_grants g));
ALTER TABLE bc_join.node_certs ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.node_certs
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR node_id IN (SELECT n.id FROM bc_join.nodes n));
ALTER TABLE bc_join.node_bindings ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.node_bindings
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR node_id IN (SELECT n.id FROM bc_join.nodes n));
ALTER TABLE bc_join.commands ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.commands
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR node_id IN (SELECT n.id FROM bc_join.nodes n));
ALTER TABLE bc_join.session_certs ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.session_certs
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR session_id IN (SELECT s.id FROM bc_join.sessions s));
ALTER TABLE bc_join.discovery_sites ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.discovery_sites
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR site_id IN (SELECT s.id FROM bc_join.sites s));
ALTER TABLE bc_join.discovery_machines ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.discovery_machines
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR site_id IN (SELECT s.id FROM bc_join.sites s));
-- The views a tenant operator reads, read as their caller: through the
-- policies above (a view runs as its owner otherwise, whom they do not bind).
ALTER VIEW bc_join.pending_join_requests SET (security_invoker = true);
ALTER VIEW bc_join.revoked_certificates SET (security_invoker = true);
ALTER VIEW bc_join.stale_nodes SET (security_invoker = true);
ALTER VIEW bc_join.command_status SET (security_invoker = true);

SELECT pg_catalog.pg_extension_config_dump('bc_join.tenant_operator_grants', '');

-- The administrative functions a tenant operator may call check the
-- object's tenant first (bc_join.check_tenant); discovery's audit rows name
-- their tenant; a pending request is told on its tenant's channel too.
CREATE OR REPLACE FUNCTION bc_join.create_site(tenant_id text, name text) RETURNS text
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	sid text := bc_join.new_id('site');
BEGIN
	PERFORM bc_join.check_tenant(create_site.tenant_id, 'tenant');
	IF NOT EXISTS (SELECT 1 FROM bc_join.tenants t WHERE t.id = create_site.tenant_id) THEN
		PERFORM bc_join.invalid_input('the tenant does not exist');
	END IF;
	IF name IS NULL OR length(name) NOT BETWEEN 1 AND 200 THEN
		PERFORM bc_join.invalid_input('site name must be 1 to 200 characters');
	END IF;
	INSERT INTO bc_join.sites (id, tenant_id, name, custom)
		VALUES (sid, create_site.tenant_id, create_site.name, create_site.tenant_id <> 'root');
	INSERT INTO bc_join.audit_log (action, tenant_id, detail)
		VALUES ('site.create', create_site.tenant_id,
				jsonb_build_object('siteId', sid, 'name', create_site.name));
	RETURN sid;
END
$$;

CREATE OR REPLACE FUNCTION bc_join.create_pool(tenant_id text, site_id text, name text) RETURNS text
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	pid text := bc_join.new_id('pool');
BEGIN
	PERFORM bc_join.check_tenant(create_pool.tenant_id, 'tenant');
	IF NOT EXISTS (SELECT 1 FROM bc_join.sites s
				   WHERE s.id = create_pool.site_id AND s.tenant_id = create_pool.tenant_id) THEN
		PERFORM bc_join.invalid_input('the site does not exist in this tenant');
	END IF;
	IF name IS NULL OR length(name) NOT BETWEEN 1 AND 200 THEN
		PERFORM bc_join.invalid_input('pool name must be 1 to 200 characters');
	END IF;
	INSERT INTO bc_join.pools (id, tenant_id, site_id, name)
		VALUES (pid, create_pool.tenant_id, create_pool.site_id, create_pool.name);
	INSERT INTO bc_join.audit_log (action, tenant_id, detail)
		VALUES ('pool.create', create_pool.tenant_id,
				jsonb_build_object('poolId', pid, 'siteId', create_pool.site_id, 'name', create_pool.name));
	RETURN pid;
END
$$;

CREATE OR REPLACE FUNCTION bc_join.create_join_token(
	tenant_id text,
	pool_id text,
	uses integer DEFAULT 1,
	ttl interval DEFAULT '1 hour',
	role text DEFAULT 'node',
	expect jsonb DEFAULT NULL,
	allow_reclaim boolean DEFAULT false,
	site_id text DEFAULT NULL
) RETURNS text
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	tid text := bc_join.new_id('jt');
	secret text := bc_join.random_secret();
	psite text;
	bad text;
BEGIN
	PERFORM bc_join.check_tenant(create_join_token.tenant_id, 'tenant');
	IF NOT EXISTS (SELECT 1 FROM bc_join.tenants t WHERE t.id = create_join_token.tenant_id) THEN
		PERFORM bc_join.invalid_input('the tenant does not exist');
	END IF;
	IF NOT coalesce(bc_join.are_agent_roles(ARRAY[role]), false) THEN
		PERFORM bc_join.invalid_input('role must be node, site or ramdisk');
	END IF;
	IF uses IS NULL OR uses NOT BETWEEN 1 AND 1000000 THEN
		PERFORM bc_join.invalid_input('uses must be between 1 and 1000000');
	END IF;
	IF ttl IS NULL OR ttl <= interval '0' OR ttl > interval '366 days' THEN
		PERFORM bc_join.invalid_input('ttl must be positive and at most 366 days');
	END IF;
	IF create_join_token.pool_id IS NOT NULL THEN
		IF role = 'site' THEN
			PERFORM bc_join.invalid_input('a site token never takes a pool');
		END IF;
		SELECT p.site_id INTO psite FROM bc_join.pools p
			WHERE p.id = create_join_token.pool_id AND p.tenant_id = create_join_token.tenant_id;
		IF NOT FOUND THEN
			PERFORM bc_join.invalid_input('the pool does not exist in this tenant');
		END IF;
		IF create_join_token.site_id IS NOT NULL AND create_join_token.site_id <> psite THEN
			PERFORM bc_join.invalid_input('the pool is not in that site');
		END IF;
	ELSIF create_join_token.site_id IS NULL THEN
		PERFORM bc_join.invalid_input('a token without a pool needs a site');
	ELSIF NOT EXISTS (SELECT 1 FROM bc_join.sites s
					  WHERE s.id = create_join_token.site_id AND s.tenant_id = create_join_token.tenant_id) THEN
		PERFORM bc_join.invalid_input('the site does not exist in this tenant');
	END IF;
	IF expect IS NOT NULL THEN
		IF jsonb_typeof(expect) <> 'object' THEN
			PERFORM bc_join.invalid_input('expect must be a JSON object of claims');
		END IF;
		SELECT k INTO bad FROM jsonb_object_keys(expect) k
			WHERE k NOT IN ('productUuid', 'serial', 'macs', 'gpuUuids', 'hostname', 'arch', 'attestors') LIMIT 1;
		IF bad IS NOT NULL THEN
			PERFORM bc_join.invalid_input(format('expect names an unknown claim %L', bad));
		END IF;
		-- "attestors": the attestors that may use the token (every other refuses it)
		IF expect ? 'attestors' AND (jsonb_typeof(expect->'attestors') <> 'array'
				OR jsonb_array_length(expect->'attestors') = 0
				OR EXISTS (SELECT 1 FROM jsonb_array_elements(expect->'attestors') a
						   WHERE jsonb_typeof(a) <> 'string' OR a #>> '{}' !~ '^[a-z0-9._-]{1,64}$')) THEN
			PERFORM bc_join.invalid_input('expect''s attestors must be a non-empty array of attestor ids');
		END IF;
	END IF;

	INSERT INTO bc_join.join_tokens (id, tenant_id, pool_id, site_id, secret_sha256,
									 uses_total, uses_left, expires_at, role, expect, allow_reclaim)
		VALUES (tid, create_join_token.tenant_id, create_join_token.pool_id,
				COALESCE(create_join_token.site_id, psite),
				sha256(convert_to(secret, 'UTF8')), uses, uses,
				bc_join.compute_now() + ttl, role, expect, allow_reclaim);
	INSERT INTO bc_join.audit_log (action, tenant_id, detail)
		VALUES ('join_token.create', create_join_token.tenant_id,
				jsonb_build_object('tokenId', tid, 'poolId', create_join_token.pool_id,
								   'uses', uses, 'role', role, 'expiresAt', bc_join.compute_now() + ttl,
								   'allowReclaim', allow_reclaim));
	RETURN tid || '.' || secret;
END
$$;

CREATE OR REPLACE FUNCTION bc_join.create_provisioning_token(node_id text, ttl interval DEFAULT '1 hour')
	RETURNS text
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	tid text := bc_join.new_id('pt');
	secret text := bc_join.random_secret();
	n bc_join.nodes;
BEGIN
	PERFORM bc_join.check_tenant((SELECT x.tenant_id FROM bc_join.nodes x
								  WHERE x.id = create_provisioning_token.node_id), 'node');
	SELECT * INTO n FROM bc_join.nodes x WHERE x.id = create_provisioning_token.node_id;
	IF NOT FOUND THEN
		PERFORM bc_join.invalid_input('no node has this id');
	END IF;
	IF n.state = 'retired' THEN
		PERFORM bc_join.invalid_input('the node is retired');
	END IF;
	IF ttl IS NULL OR ttl <= interval '0' OR ttl > interval '30 days' THEN
		PERFORM bc_join.invalid_input('ttl must be positive and at most 30 days');
	END IF;
	INSERT INTO bc_join.provisioning_tokens (id, node_id, tenant_id, secret_sha256, expires_at)
		VALUES (tid, n.id, n.tenant_id, sha256(convert_to(secret, 'UTF8')), bc_join.compute_now() + ttl);
	INSERT INTO bc_join.audit_log (action, tenant_id, node_id, detail)
		VALUES ('provisioning_token.create', n.tenant_id, n.id,
				jsonb_build_object('tokenId', tid, 'expiresAt', bc_join.compute_now() + ttl));
	RETURN tid || '.' || secret;
END
$$;

CREATE OR REPLACE FUNCTION bc_join.revoke_provisioning_token(token_id text) RETURNS boolean
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	t bc_join.provisioning_tokens;
BEGIN
	PERFORM bc_join.check_tenant((SELECT p.tenant_id FROM bc_join.provisioning_tokens p
								  WHERE p.id = revoke_provisioning_token.token_id), 'provisioning token');
	UPDATE bc_join.provisioning_tokens p SET revoked_at = bc_join.compute_now()
		WHERE p.id = revoke_provisioning_token.token_id AND p.revoked_at IS NULL AND p.spent_at IS NULL
		RETURNING * INTO t;
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	INSERT INTO bc_join.audit_log (action, tenant_id, node_id, detail)
		VALUES ('provisioning_token.revoke', t.tenant_id, t.node_id, jsonb_build_object('tokenId', t.id));
	RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION bc_join.revoke_join_token(token_id text) RETURNS boolean
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	tenant text;
BEGIN
	PERFORM bc_join.check_tenant((SELECT t.tenant_id FROM bc_join.join_tokens t
								  WHERE t.id = revoke_join_token.token_id), 'join token');
	UPDATE bc_join.join_tokens t SET revoked_at = bc_join.compute_now()
		WHERE t.id = revoke_join_token.token_id AND t.revoked_at IS NULL
		RETURNING t.tenant_id INTO tenant;
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	INSERT INTO bc_join.audit_log (action, tenant_id, detail)
		VALUES ('join_token.revoke', tenant, jsonb_build_object('tokenId', token_id));
	RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION bc_join.create_join_request(tenant_id text, attestor text, context jsonb,
											detail jsonb DEFAULT '{}')
	RETURNS text
	LANGUAGE plpgsql
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	rid text := bc_join.new_id('jr');
	token text := nullif(create_join_request.detail->>'tokenId', '');
	per_token integer := coalesce(nullif(current_setting('bc_join.pending_requests_per_token', true), ''),
								  '10')::integer;
	per_tenant integer := coalesce(nullif(current_setting('bc_join.pending_requests_per_tenant', true), ''),
								   '1000')::integer;
BEGIN
	-- One request made at a time per tenant (the token's row is locked already), so the bounds hold.
	PERFORM 1 FROM bc_join.tenants t WHERE t.id = create_join_request.tenant_id FOR NO KEY UPDATE;
	IF token IS NOT NULL AND (SELECT count(*) FROM (
			SELECT 1 FROM bc_join.join_requests q
			WHERE q.token_id = token AND q.state = 'pending' AND q.expires_at > bc_join.compute_now()
			LIMIT per_token) x) >= per_token THEN
		PERFORM bc_join.refuse(create_join_request.attestor || ':pending-token-limit',
							   create_join_request.tenant_id);
	END IF;
	IF (SELECT count(*) FROM (
			SELECT 1 FROM bc_join.join_requests q
			WHERE q.tenant_id = create_join_request.tenant_id AND q.state = 'pending'
			  AND q.expires_at > bc_join.compute_now()
			LIMIT per_tenant) x) >= per_tenant THEN
		PERFORM bc_join.refuse(create_join_request.attestor || ':pending-tenant-limit',
							   create_join_request.tenant_id);
	END IF;
	INSERT INTO bc_join.join_requests (id, tenant_id, attestor, role, csr_sha256, claims, detail,
									   expires_at, token_id)
		VALUES (rid, create_join_request.tenant_id, create_join_request.attestor,
				context->>'role', bc_join.b64url_decode(context->>'csrSha256'),
				coalesce(context->'claims', '{}'), coalesce(create_join_request.detail, '{}'),
				bc_join.compute_now() +
					coalesce(nullif(current_setting('bc_join.join_request_ttl', true), ''), '1d')::interval,
				token);
	INSERT INTO bc_join.events (tenant_id, type, payload)
		VALUES (create_join_request.tenant_id, 'join_request.pending',
				jsonb_build_object('requestId', rid, 'attestor', create_join_request.attestor,
								   'role', context->>'role', 'csrSha256', context->>'csrSha256'));
	-- told on the tenant's own channel only, bc_join_requests_<tenant id>
	-- (LISTEN needs no grant: a channel every tenant's requests reach would
	-- tell any role when another tenant's request began waiting); a channel
	-- name is at most 63 bytes, and bc_join's tenant ids are far shorter
	IF octet_length(create_join_request.tenant_id) <= 46 THEN
		PERFORM pg_notify('bc_join_requests_' || create_join_request.tenant_id, '');
	END IF;
	RETURN rid;
END
$$;

CREATE OR REPLACE FUNCTION bc_join.approve_join_request(request_id text) RETURNS void
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	r bc_join.join_requests;
BEGIN
	PERFORM bc_join.check_tenant((SELECT q.tenant_id FROM bc_join.join_requests q
								  WHERE q.id = approve_join_request.request_id), 'join request');
	UPDATE bc_join.join_requests q SET state = 'approved', decided_at = bc_join.compute_now(),
		decided_by = session_user
		WHERE q.id = request_id AND q.state = 'pending' AND q.expires_at > bc_join.compute_now()
		RETURNING * INTO r;
	IF NOT FOUND THEN
		IF EXISTS (SELECT 1 FROM bc_join.join_requests q WHERE q.id = request_id AND q.state = 'pending') THEN
			PERFORM bc_join.invalid_input('this join request expired: the agent must ask again');
		END IF;
		PERFORM bc_join.invalid_input('no pending join request has this id');
	END IF;
	-- A tpm request waits for its EK: approving it enrolls the EK for the request's tenant.
	IF r.attestor = 'tpm' AND r.detail ? 'ekSpkiSha256' THEN
		PERFORM bc_join.enroll_tpm_ek(r.detail->>'ekSpkiSha256', r.tenant_id, r.detail->>'poolId',
									  r.detail->>'siteId', request_id => r.id);
	END IF;
	INSERT INTO bc_join.events (tenant_id, type, payload)
		VALUES (r.tenant_id, 'join_request.approved', jsonb_build_object('requestId', r.id, 'by', session_user));
	INSERT INTO bc_join.audit_log (action, tenant_id, detail)
		VALUES ('join_request.approve', r.tenant_id, jsonb_build_object('requestId', r.id));
END
$$;

CREATE OR REPLACE FUNCTION bc_join.reject_join_request(request_id text, reason text) RETURNS void
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	r bc_join.join_requests;
BEGIN
	IF reason IS NULL OR length(reason) NOT BETWEEN 1 AND 500 THEN
		PERFORM bc_join.invalid_input('a rejection needs a reason of 1 to 500 characters');
	END IF;
	PERFORM bc_join.check_tenant((SELECT q.tenant_id FROM bc_join.join_requests q
								  WHERE q.id = reject_join_request.request_id), 'join request');
	UPDATE bc_join.join_requests q SET state = 'rejected', decided_at = bc_join.compute_now(),
		decided_by = session_user, reason = reject_join_request.reason
		WHERE q.id = request_id AND q.state = 'pending' RETURNING * INTO r;
	IF NOT FOUND THEN
		PERFORM bc_join.invalid_input('no pending join request has this id');
	END IF;
	INSERT INTO bc_join.events (tenant_id, type, payload)
		VALUES (r.tenant_id, 'join_request.rejected',
				jsonb_build_object('requestId', r.id, 'by', session_user, 'reason', reason));
	INSERT INTO bc_join.audit_log (action, tenant_id, detail)
		VALUES ('join_request.reject', r.tenant_id, jsonb_build_object('requestId', r.id, 'reason', reason));
END
$$;

CREATE OR REPLACE FUNCTION bc_join.revoke_certificate(serial text, reason text) RETURNS boolean
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	node text;
	tenant text;
	sessions bigint := 0;
	kind text := 'node';
BEGIN
	PERFORM bc_join.check_revocation_reason(reason);
	PERFORM bc_join.check_tenant(coalesce(
		(SELECT n.tenant_id FROM bc_join.node_certs c JOIN bc_join.nodes n ON n.id = c.node_id
		 WHERE c.serial = revoke_certificate.serial),
		(SELECT s.tenant_id FROM bc_join.session_certs sc JOIN bc_join.sessions s ON s.id = sc.session_id
		 WHERE sc.serial = revoke_certificate.serial)), 'certificate');
	SELECT c.node_id, n.tenant_id INTO node, tenant FROM bc_join.node_certs c
		JOIN bc_join.nodes n ON n.id = c.node_id WHERE c.serial = revoke_certificate.serial;
	IF FOUND THEN
		UPDATE bc_join.node_certs c SET revoked_at = bc_join.compute_now(),
			revocation_reason = revoke_certificate.reason
			WHERE c.serial = revoke_certificate.serial AND c.revoked_at IS NULL;
		IF NOT FOUND THEN
			RETURN false;
		END IF;
		UPDATE bc_join.session_certs sc SET revoked_at = bc_join.compute_now(),
			revocation_reason = revoke_certificate.reason
			WHERE sc.node_serial = revoke_certificate.serial AND sc.revoked_at IS NULL;
		GET DIAGNOSTICS sessions = ROW_COUNT;
	ELSE
		kind := 'session';
		SELECT s.node_id, s.tenant_id INTO node, tenant FROM bc_join.session_certs sc
			JOIN bc_join.sessions s ON s.id = sc.session_id WHERE sc.serial = revoke_certificate.serial;
		IF NOT FOUND THEN
			PERFORM bc_join.invalid_input('no certificate has this serial');
		END IF;
		UPDATE bc_join.session_certs sc SET revoked_at = bc_join.compute_now(),
			revocation_reason = revoke_certificate.reason
			WHERE sc.serial = revoke_certificate.serial AND sc.revoked_at IS NULL;
		IF NOT FOUND THEN
			RETURN false;
		END IF;
	END IF;
	INSERT INTO bc_join.events (tenant_id, type, payload)
		VALUES (tenant, 'certificate.revoked',
				jsonb_build_object('serial', serial, 'kind', kind, 'nodeId', node, 'reason', reason,
								   'sessionCertificates', sessions));
	INSERT INTO bc_join.audit_log (action, tenant_id, node_id, detail)
		VALUES ('certificate.revoke', tenant, node,
				jsonb_build_object('serial', serial, 'kind', kind, 'reason', reason,
								   'sessionCertificates', sessions));
	PERFORM pg_notify('bc_join_crl', '');
	RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION bc_join.revoke_node(node_id text, reason text) RETURNS integer
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	c record;
	n integer := 0;
BEGIN
	PERFORM bc_join.check_revocation_reason(reason);
	PERFORM bc_join.check_tenant((SELECT x.tenant_id FROM bc_join.nodes x WHERE x.id = revoke_node.node_id), 'node');
	IF NOT EXISTS (SELECT 1 FROM bc_join.nodes x WHERE x.id = revoke_node.node_id) THEN
		PERFORM bc_join.invalid_input('no node has this id');
	END IF;
	FOR c IN SELECT serial FROM bc_join.node_certs x
			 WHERE x.node_id = revoke_node.node_id AND x.revoked_at IS NULL ORDER BY x.issued_at LOOP
		IF bc_join.revoke_certificate(c.serial, reason) THEN
			n := n + 1;
		END IF;
	END LOOP;
	RETURN n;
END
$$;

CREATE OR REPLACE FUNCTION bc_join.retire_node(node_id text) RETURNS void
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	tenant text;
BEGIN
	PERFORM bc_join.check_tenant((SELECT x.tenant_id FROM bc_join.nodes x WHERE x.id = retire_node.node_id), 'node');
	UPDATE bc_join.nodes n SET state = 'retired', retired_at = bc_join.compute_now(),
		updated_at = bc_join.compute_now()
		WHERE n.id = retire_node.node_id AND n.state <> 'retired' RETURNING n.tenant_id INTO tenant;
	IF NOT FOUND THEN
		PERFORM bc_join.invalid_input('no live node has this id');
	END IF;
	UPDATE bc_join.node_certs c SET revoked_at = bc_join.compute_now(), revocation_reason = 'retired'
		WHERE c.node_id = retire_node.node_id AND c.revoked_at IS NULL;
	UPDATE bc_join.session_certs sc SET revoked_at = bc_join.compute_now(), revocation_reason = 'retired'
		FROM bc_join.sessions s
		WHERE s.id = sc.session_id AND s.node_id = retire_node.node_id AND sc.revoked_at IS NULL;
	PERFORM pg_notify('bc_join_crl', '');
	DELETE FROM bc_join.node_bindings b WHERE b.node_id = retire_node.node_id;
	INSERT INTO bc_join.events (tenant_id, type, payload)
		VALUES (tenant, 'node.retired', jsonb_build_object('nodeId', node_id));
	INSERT INTO bc_join.audit_log (action, tenant_id, node_id) VALUES ('node.retire', tenant, node_id);
END
$$;

CREATE OR REPLACE FUNCTION bc_join.delete_node(node_id text) RETURNS void
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	tenant text;
BEGIN
	PERFORM bc_join.check_tenant((SELECT x.tenant_id FROM bc_join.nodes x WHERE x.id = delete_node.node_id), 'node');
	DELETE FROM bc_join.nodes n WHERE n.id = delete_node.node_id RETURNING n.tenant_id INTO tenant;
	IF NOT FOUND THEN
		PERFORM bc_join.invalid_input('no node has this id');
	END IF;
	INSERT INTO bc_join.events (tenant_id, type, payload)
		VALUES (tenant, 'node.deleted', jsonb_build_object('nodeId', node_id));
	INSERT INTO bc_join.audit_log (action, tenant_id, node_id) VALUES ('node.delete', tenant, node_id);
END
$$;

CREATE OR REPLACE FUNCTION bc_join.reset_cloud_instance(provider text, account text, instance text)
	RETURNS boolean
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	b bytea;
	n bigint;
	node text;
	tenant text;
BEGIN
	IF provider IS NULL OR provider NOT IN ('aws', 'gcp', 'azure') OR account IS NULL OR account = ''
	   OR instance IS NULL OR instance = '' THEN
		PERFORM bc_join.invalid_input('reset_cloud_instance needs a provider (aws, gcp, azure), an account and an instance');
	END IF;
	IF provider = 'azure' THEN
		-- the subscription and the VM as the bind holds them: lower case
		account := lower(account);
		instance := lower(instance);
	END IF;
	b := bc_join.cloud_instance_bind(provider, account, instance);
	SELECT nb.node_id, x.tenant_id INTO node, tenant
		FROM bc_join.node_bindings nb JOIN bc_join.nodes x ON x.id = nb.node_id
		WHERE nb.subject = b;
	IF tenant IS NULL THEN
		SELECT a.tenant_id INTO tenant FROM bc_join.cloud_accounts a
			WHERE a.provider = reset_cloud_instance.provider AND a.account = reset_cloud_instance.account
			LIMIT 1;
	END IF;
	-- a tenant operator resets the instances of its tenants' nodes and accounts only
	PERFORM bc_join.check_tenant(tenant, 'cloud instance');
	DELETE FROM bc_join.attestation_uses u WHERE u.attestor = 'cloud-iid' AND u.subject = b;
	GET DIAGNOSTICS n = ROW_COUNT;
	INSERT INTO bc_join.audit_log (action, tenant_id, node_id, detail)
		VALUES ('cloud_instance.reset', tenant, node,
				jsonb_build_object('provider', provider, 'account', account, 'instance', instance,
								   'wasAdmitted', n > 0));
	INSERT INTO bc_join.events (tenant_id, type, payload)
		VALUES (coalesce(tenant, 'root'), 'cloud_instance.reset',
				jsonb_build_object('provider', provider, 'account', account, 'instance', instance,
								   'nodeId', node, 'wasAdmitted', n > 0));
	RETURN n > 0;
END
$$;

CREATE OR REPLACE FUNCTION bc_join.enqueue_command(node_id text, kind text, payload jsonb)
	RETURNS text
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	n bc_join.nodes;
	kinds text[];
	found_cert boolean := false;
	cid text := bc_join.new_id('cmd');
	t_now timestamptz := bc_join.compute_now();
BEGIN
	IF node_id IS NULL OR kind IS NULL THEN
		PERFORM bc_join.invalid_input('node_id and kind are required');
	END IF;
	IF payload IS NULL THEN
		payload := '{}';
	END IF;
	IF jsonb_typeof(payload) <> 'object' OR octet_length(payload::text) > 16384 THEN
		PERFORM bc_join.invalid_input('the payload must be a JSON object of at most 16384 bytes');
	END IF;
	PERFORM bc_join.check_tenant((SELECT x.tenant_id FROM bc_join.nodes x WHERE x.id = enqueue_command.node_id), 'node');
	SELECT * INTO n FROM bc_join.nodes x WHERE x.id = enqueue_command.node_id FOR SHARE;
	IF NOT FOUND THEN
		PERFORM bc_join.invalid_input('the node does not exist');
	END IF;
	IF n.state = 'retired' THEN
		PERFORM bc_join.invalid_input('the node is retired');
	END IF;
	IF NOT EXISTS (SELECT 1 FROM bc_join.command_kinds k WHERE k.kind = enqueue_command.kind) THEN
		PERFORM bc_join.invalid_input(format('%s is no registered command kind', kind));
	END IF;
	SELECT true, c.allowed_kinds INTO found_cert, kinds FROM bc_join.node_certs c
		WHERE c.node_id = n.id AND c.identity_generation = n.identity_generation
		  AND c.revoked_at IS NULL AND c.not_before <= t_now AND c.not_after > t_now
		ORDER BY c.issued_at DESC LIMIT 1;
	IF NOT coalesce(found_cert, false) THEN
		PERFORM bc_join.invalid_input('the node holds no live certificate');
	END IF;
	IF NOT bc_join.kind_allowed(kinds, kind) THEN
		PERFORM bc_join.invalid_input(format('the node''s certificate does not allow command kind %s', kind));
	END IF;
	INSERT INTO bc_join.commands (id, node_id, kind, payload, created_at, expires_at)
		VALUES (cid, n.id, kind, payload, t_now, t_now + interval '1 hour');
	INSERT INTO bc_join.audit_log (action, tenant_id, node_id, detail)
		VALUES ('command.enqueue', n.tenant_id, n.id,
				jsonb_build_object('commandId', cid, 'kind', kind));
	RETURN cid;
END
$$;

CREATE OR REPLACE FUNCTION bc_join.set_discovery_site(site_id text, approval text DEFAULT 'none',
										   allowed_kinds text[] DEFAULT NULL,
										   cert_ttl_seconds integer DEFAULT NULL)
	RETURNS void
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	k text;
	tenant text := (SELECT s.tenant_id FROM bc_join.sites s WHERE s.id = set_discovery_site.site_id);
BEGIN
	PERFORM bc_join.check_tenant(tenant, 'site');
	IF NOT EXISTS (SELECT 1 FROM bc_join.sites s WHERE s.id = set_discovery_site.site_id) THEN
		PERFORM bc_join.invalid_input('the site does not exist');
	END IF;
	IF approval IS NULL OR approval NOT IN ('none', 'unknown-machines', 'always') THEN
		PERFORM bc_join.invalid_input('approval must be none, unknown-machines or always');
	END IF;
	IF cert_ttl_seconds NOT BETWEEN 60 AND 7200 THEN
		PERFORM bc_join.invalid_input('cert_ttl_seconds must be between 60 and 7200');
	END IF;
	FOREACH k IN ARRAY coalesce(allowed_kinds, '{}') LOOP
		IF NOT EXISTS (SELECT 1 FROM bc_join.command_kinds c
					   WHERE c.kind = k OR (right(k, 2) = '.*' AND starts_with(c.kind, left(k, -1)))) THEN
			PERFORM bc_join.invalid_input(format('%s is no registered command kind or prefix.* glob', k));
		END IF;
	END LOOP;
	INSERT INTO bc_join.discovery_sites AS d (site_id, approval, allowed_kinds, cert_ttl_seconds)
		VALUES (site_id, approval, coalesce(allowed_kinds, ARRAY['inventory.refresh', 'logs.collect',
				'diag.*', 'disk.wipe', 'deploy.*', 'boot.kexec']), coalesce(cert_ttl_seconds, 7200))
		ON CONFLICT ON CONSTRAINT discovery_sites_pkey DO UPDATE SET approval = EXCLUDED.approval,
			allowed_kinds = coalesce(set_discovery_site.allowed_kinds, d.allowed_kinds),
			cert_ttl_seconds = coalesce(set_discovery_site.cert_ttl_seconds, d.cert_ttl_seconds),
			updated_at = bc_join.compute_now();
	INSERT INTO bc_join.audit_log (action, tenant_id, detail)
		VALUES ('discovery_site.set', tenant, jsonb_build_object('siteId', site_id, 'approval', approval,
				'allowedKinds', allowed_kinds, 'certTtlSeconds', cert_ttl_seconds));
END
$$;

CREATE OR REPLACE FUNCTION bc_join.bump_site_epoch(site_id text) RETURNS bigint
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	e bigint;
	tenant text := (SELECT s.tenant_id FROM bc_join.sites s WHERE s.id = bump_site_epoch.site_id);
BEGIN
	PERFORM bc_join.check_tenant(tenant, 'site');
	UPDATE bc_join.discovery_sites d SET epoch = d.epoch + 1, updated_at = bc_join.compute_now()
		WHERE d.site_id = bump_site_epoch.site_id RETURNING d.epoch INTO e;
	IF NOT FOUND THEN
		PERFORM bc_join.invalid_input('discovery is not enabled on the site');
	END IF;
	INSERT INTO bc_join.audit_log (action, tenant_id, detail)
		VALUES ('discovery_site.bump_epoch', tenant, jsonb_build_object('siteId', site_id, 'epoch', e));
	RETURN e;
END
$$;

REVOKE ALL ON FUNCTION bc_join.calling_role(), bc_join.is_platform_operator(), bc_join.check_tenant(text, text),
	bc_join.grant_tenant_operator(regrole, text), bc_join.revoke_tenant_operator(regrole, text) FROM PUBLIC;
REVOKE ALL ON bc_join.tenant_operator_grants, bc_join.tenant_operators FROM PUBLIC;

-- Tenant operators (#31): make them, and see who operates what.
GRANT EXECUTE ON FUNCTION bc_join.grant_tenant_operator(regrole, text),
	bc_join.revoke_tenant_operator(regrole, text) TO bc_join_operator;
GRANT SELECT ON bc_join.tenant_operator_grants, bc_join.tenant_operators TO bc_join_operator;

-- A tenant operator: the administration of its tenants' objects (each
-- function checks the object's tenant) and public keys; reading its
-- tenants' rows (row-level security).  Nothing that has no tenant (the
-- attestor, tpm, x509pop and cloud-iid configuration, statistics, the
-- issuance log's verification, housekeeping), no tenant made or granted.
GRANT USAGE ON SCHEMA bc_join TO bc_join_tenant_operator;
GRANT EXECUTE ON FUNCTION
	bc_join.compute_now(),
	bc_join.library_version(),
	bc_join.setting_interval(text),
	bc_join.kind_allowed(text[], text),
	bc_join.b64url_encode(bytea),
	bc_join.b64url_decode(text),
	bc_join.create_site(text, text),
	bc_join.create_pool(text, text, text),
	bc_join.create_join_token(text, text, integer, interval, text, jsonb, boolean, text),
	bc_join.revoke_join_token(text),
	bc_join.create_provisioning_token(text, interval),
	bc_join.revoke_provisioning_token(text),
	bc_join.approve_join_request(text),
	bc_join.reject_join_request(text, text),
	bc_join.revoke_certificate(text, text),
	bc_join.revoke_node(text, text),
	bc_join.retire_node(text),
	bc_join.delete_node(text),
	bc_join.enqueue_command(text, text, jsonb),
	bc_join.reset_cloud_instance(text, text, text),
	bc_join.cloud_instance_bind(text, text, text),
	bc_join.set_discovery_site(text, text, text[], integer),
	bc_join.bump_site_epoch(text),
	bc_join.signing_jwk(),
	bc_join.encryption_jwk(),
	bc_join.node_ca_certificate(),
	bc_join.service_keys(),
	bc_join.signed_service_keys()
	TO bc_join_tenant_operator;
GRANT SELECT ON
	bc_join.tenants, bc_join.sites, bc_join.pools, bc_join.nodes, bc_join.node_certs,
	bc_join.node_bindings, bc_join.sessions, bc_join.session_certs, bc_join.join_requests,
	bc_join.events, bc_join.audit_log, bc_join.commands, bc_join.command_kinds,
	bc_join.x509pop_roots, bc_join.tpm_ek_enrollments, bc_join.tpm_pcr_policies, bc_join.tpm_settings,
	bc_join.cloud_accounts, bc_join.discovery_sites,
	bc_join.pending_join_requests, bc_join.revoked_certificates, bc_join.stale_nodes,
	bc_join.command_status, bc_join.tenant_operator_grants, bc_join.tenant_operators
	TO bc_join_tenant_operator;
GRANT SELECT, INSERT, DELETE ON bc_join.discovery_machines TO bc_join_tenant_operator;
GRANT SELECT (id, tenant_id, pool_id, site_id, uses_total, uses_left, expires_at, role,
			  expect, allow_reclaim, created_at, created_by, revoked_at)
	ON bc_join.join_tokens TO bc_join_tenant_operator;
GRANT SELECT (id, node_id, tenant_id, expires_at, created_at, created_by, spent_at, revoked_at)
	ON bc_join.provisioning_tokens TO bc_join_tenant_operator;

-- Tenant operators (#31).
COMMENT ON FUNCTION bc_join.grant_tenant_operator(regrole, text) IS
	'Makes a role an operator of one tenant (it reads and administers that tenant''s objects alone, by row-level security and checks in every administrative function); superuser or platform operator only; audited and evented; returns false when it was one already.';
COMMENT ON FUNCTION bc_join.revoke_tenant_operator(regrole, text) IS
	'Takes a tenant from a tenant operator (with its last, its membership of bc_join_tenant_operator); superuser or platform operator only; audited and evented; returns whether it operated the tenant.';
COMMENT ON VIEW bc_join.tenant_operators IS
	'Who operates what: each tenant operator role with a tenant it operates, whether it can log in or was dropped, when and by whom it was granted (a tenant operator sees its own rows).';
COMMENT ON FUNCTION bc_join.calling_role() IS
	'Internal: the role that called, also inside a SECURITY DEFINER function: the role SET ROLE made current, else the session''s user.';
COMMENT ON FUNCTION bc_join.is_platform_operator() IS
	'Internal: whether the calling role operates every tenant (the superuser, members of bc_join_operator).';
COMMENT ON FUNCTION bc_join.check_tenant(text, text) IS
	'Internal: returns when the calling role operates the tenant (a platform operator operates every tenant); raises 42501 ACCESS_DENIED otherwise, the same for an object of another tenant and for none.';
