/* bc_join--0.1.0.sql: the JoinService schema, entry points and privileges. */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION bc_join" to load this file. \quit

/*
 * Roles.  Cluster-wide, so created only when missing and never dropped with
 * the extension.  Neither can log in: grant them to login roles.
 *   bc_join_gateway   may call public.bc_join(jsonb) and the relayed entry
 *                     points, nothing else.
 *   bc_join_operator  administers tenants, sites, pools, tokens and join
 *                     requests, reads events, audit and public keys.
 */
DO $roles$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'bc_join_gateway') THEN
		CREATE ROLE bc_join_gateway NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'bc_join_operator') THEN
		CREATE ROLE bc_join_operator NOLOGIN;
	END IF;
END
$roles$;

/* ------------------------------------------------------------------ clock */

-- The service clock: transaction start plus bc_join.clock_offset (seconds,
-- superuser-only, 0 unless a test moves it).  Every expiry comparison uses it.
CREATE FUNCTION bc_join.compute_now() RETURNS timestamptz
	AS 'MODULE_PATHNAME', 'bc_compute_now'
	LANGUAGE C STABLE PARALLEL SAFE;

/* ---------------------------------------------------------------- tenants */

CREATE TABLE bc_join.tenants (
	id text PRIMARY KEY,
	name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
	created_at timestamptz NOT NULL DEFAULT bc_join.compute_now()
);
-- The root tenant receives refusal events that no evidence authenticated.
INSERT INTO bc_join.tenants (id, name) VALUES ('root', 'root');

CREATE TABLE bc_join.sites (
	id text PRIMARY KEY,
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
	-- a custom site is one a tenant runs itself; its nodes default to tenant-owned trust
	custom boolean NOT NULL DEFAULT true,
	created_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	UNIQUE (id, tenant_id)
);

CREATE TABLE bc_join.pools (
	id text PRIMARY KEY,
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	site_id text NOT NULL,
	name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
	agent text NOT NULL DEFAULT 'bcd',
	created_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	FOREIGN KEY (site_id, tenant_id) REFERENCES bc_join.sites (id, tenant_id)
);

/* ------------------------------------------------------------------ nodes */

CREATE TABLE bc_join.nodes (
	id text PRIMARY KEY,
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	site_id text REFERENCES bc_join.sites (id),
	pool_id text REFERENCES bc_join.pools (id),
	role text NOT NULL CHECK (role IN ('node', 'site', 'ramdisk')),
	state text NOT NULL DEFAULT 'adopting'
		CHECK (state IN ('adopting', 'active', 'retired')),
	trust text NOT NULL CHECK (trust IN ('platform', 'tenant-owned')),
	-- bumped by every reclaim: certificates of older generations are dead
	identity_generation integer NOT NULL DEFAULT 1 CHECK (identity_generation >= 1),
	attestor text NOT NULL,
	node_key text NOT NULL DEFAULT 'unattested',
	claims jsonb NOT NULL DEFAULT '{}',
	created_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	updated_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	retired_at timestamptz,
	CHECK (site_id IS NOT NULL OR pool_id IS NOT NULL)
);
CREATE INDEX nodes_tenant_idx ON bc_join.nodes (tenant_id);

CREATE TABLE bc_join.node_certs (
	serial text PRIMARY KEY CHECK (serial ~ '^[0-9a-f]{32}$'),
	node_id text NOT NULL REFERENCES bc_join.nodes (id) ON DELETE CASCADE,
	identity_generation integer NOT NULL,
	not_before timestamptz NOT NULL,
	not_after timestamptz NOT NULL,
	spki_sha256 bytea NOT NULL CHECK (length(spki_sha256) = 32),
	allowed_kinds text[],				-- NULL: unrestricted
	node_key_uri text,
	certificate bytea NOT NULL,			-- DER; public
	-- SHA-256 of the JoinRequest's CSR when a join issued it (NULL: a renewal)
	join_csr_sha256 bytea CHECK (length(join_csr_sha256) = 32),
	issued_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	revoked_at timestamptz,
	revocation_reason text,
	CHECK (not_after > not_before)
);
CREATE INDEX node_certs_node_idx ON bc_join.node_certs (node_id);
-- One key, one certificate: a CSR key admits at most one join (join:key-reused).
CREATE UNIQUE INDEX node_certs_spki_idx ON bc_join.node_certs (spki_sha256);

-- A stable hardware identity (32-byte hash) bound to one node for good.
CREATE TABLE bc_join.node_bindings (
	subject bytea PRIMARY KEY CHECK (length(subject) = 32),
	node_id text NOT NULL REFERENCES bc_join.nodes (id) ON DELETE CASCADE,
	attestor text NOT NULL,
	created_at timestamptz NOT NULL DEFAULT bc_join.compute_now()
);
CREATE INDEX node_bindings_node_idx ON bc_join.node_bindings (node_id);

/* ------------------------------------------------------------ join tokens */

CREATE TABLE bc_join.join_tokens (
	id text PRIMARY KEY,
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	pool_id text REFERENCES bc_join.pools (id),
	site_id text REFERENCES bc_join.sites (id),
	secret_sha256 bytea NOT NULL CHECK (length(secret_sha256) = 32),
	uses_total integer NOT NULL CHECK (uses_total >= 1),
	uses_left integer NOT NULL CHECK (uses_left >= 0 AND uses_left <= uses_total),
	expires_at timestamptz NOT NULL,
	role text NOT NULL CHECK (role IN ('node', 'site', 'ramdisk')),
	expect jsonb CHECK (expect IS NULL OR jsonb_typeof(expect) = 'object'),
	allow_reclaim boolean NOT NULL DEFAULT false,
	created_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	created_by text NOT NULL DEFAULT session_user,
	revoked_at timestamptz,
	CHECK (site_id IS NOT NULL OR pool_id IS NOT NULL)
);
CREATE INDEX join_tokens_tenant_idx ON bc_join.join_tokens (tenant_id);

/* --------------------------------------------------------------- sessions */

-- A session identity on a node, reserved when the session first asks.
CREATE TABLE bc_join.sessions (
	id text PRIMARY KEY,
	node_id text NOT NULL REFERENCES bc_join.nodes (id) ON DELETE CASCADE,
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	session_ref text NOT NULL CHECK (session_ref ~ '^[A-Za-z0-9._:-]{1,128}$'),
	context_ref text NOT NULL DEFAULT '' CHECK (context_ref ~ '^[A-Za-z0-9._:-]{0,128}$'),
	provisioned_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	UNIQUE (node_id, session_ref, context_ref)
);

CREATE TABLE bc_join.session_certs (
	serial text PRIMARY KEY CHECK (serial ~ '^[0-9a-f]{32}$'),
	session_id text NOT NULL REFERENCES bc_join.sessions (id) ON DELETE CASCADE,
	not_before timestamptz NOT NULL,
	not_after timestamptz NOT NULL,
	spki_sha256 bytea NOT NULL CHECK (length(spki_sha256) = 32),
	certificate bytea NOT NULL,
	issued_at timestamptz NOT NULL DEFAULT bc_join.compute_now()
);
CREATE INDEX session_certs_session_idx ON bc_join.session_certs (session_id);
CREATE INDEX session_certs_spki_idx ON bc_join.session_certs (spki_sha256);

/* ---------------------------------------------------------- join requests */

CREATE TABLE bc_join.join_requests (
	id text PRIMARY KEY,
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	attestor text NOT NULL,
	role text NOT NULL CHECK (role IN ('node', 'site', 'ramdisk')),
	csr_sha256 bytea NOT NULL CHECK (length(csr_sha256) = 32),
	claims jsonb NOT NULL DEFAULT '{}',
	state text NOT NULL DEFAULT 'pending'
		CHECK (state IN ('pending', 'approved', 'rejected', 'consumed')),
	detail jsonb NOT NULL DEFAULT '{}',	-- the attestor's own notes for the operator
	reason text,						-- the operator's, on reject
	created_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	decided_at timestamptz,
	decided_by text,
	consumed_at timestamptz,
	expires_at timestamptz NOT NULL
);
CREATE INDEX join_requests_pending_idx ON bc_join.join_requests (created_at)
	WHERE state = 'pending';

/* ------------------------------------------------------ single-use evidence */

-- Exactly as the Attestors page defines it: one row per piece of evidence
-- that must admit one join at most.
CREATE TABLE bc_join.attestation_uses (
	attestor text NOT NULL,
	subject bytea NOT NULL CHECK (length(subject) = 32), -- sha256 of what must be used once
	node_id text,
	used_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	expires_at timestamptz,                              -- NULL keeps it forever
	PRIMARY KEY (attestor, subject)
);

CREATE INDEX attestation_uses_expires_idx ON bc_join.attestation_uses (expires_at)
	WHERE expires_at IS NOT NULL;

/* -------------------------------------------------------------- attestors */

-- Custom attestors: SQL functions (evidence jsonb, context jsonb) RETURNS jsonb.
-- One registered with id 'join-token' replaces the built-in one.
CREATE TABLE bc_join.attestors (
	id text PRIMARY KEY CHECK (id ~ '^[a-z0-9._-]{1,64}$'),
	version text NOT NULL CHECK (length(version) BETWEEN 1 AND 64),
	roles text[] NOT NULL
		CHECK (cardinality(roles) >= 1 AND roles <@ ARRAY['node', 'site', 'ramdisk']),
	verify regprocedure NOT NULL,
	registered_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	registered_by text NOT NULL DEFAULT session_user
);

-- Any change to the registry: every backend forgets the attestors it cached.
CREATE FUNCTION bc_join.attestors_changed() RETURNS trigger
	AS 'MODULE_PATHNAME', 'bc_attestors_changed' LANGUAGE C;
CREATE TRIGGER attestors_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE
	ON bc_join.attestors FOR EACH STATEMENT EXECUTE FUNCTION bc_join.attestors_changed();

-- The command kinds a certificate's allowedKinds may name.
CREATE TABLE bc_join.command_kinds (
	kind text PRIMARY KEY CHECK (kind ~ '^[a-z0-9-]+(\.[a-z0-9-]+)+$'),
	description text NOT NULL DEFAULT ''
);
INSERT INTO bc_join.command_kinds (kind, description) VALUES
	('inventory.refresh', 'collect and report the hardware inventory'),
	('logs.collect', 'collect logs'),
	('diag.ping', 'answer a liveness probe'),
	('diag.run', 'run a diagnostic'),
	('disk.wipe', 'wipe the disks'),
	('deploy.image', 'write an operating system image'),
	('deploy.config', 'write configuration'),
	('boot.kexec', 'kexec into a deployed kernel'),
	('node.reboot', 'reboot'),
	('node.shutdown', 'power off');

-- The rate bound of security.join.refused events, per attestor and refusal
-- reason (JoinService's own join:* reasons count apart for each attestor, so
-- one attestor's refusals never hide another's).
-- A window is one minute; suppressed counts the refusals of the window that
-- were not recorded, and the first event of the next window reports them.
CREATE TABLE bc_join.refusal_rate (
	attestor text NOT NULL,
	refusal text NOT NULL,
	PRIMARY KEY (attestor, refusal),
	window_start timestamptz NOT NULL,
	recorded integer NOT NULL DEFAULT 0,
	suppressed bigint NOT NULL DEFAULT 0,
	carried bigint NOT NULL DEFAULT 0,		-- suppressed in the window before
	last_recorded boolean NOT NULL DEFAULT true
);

/* --------------------------------------------------------- events, audit */

CREATE TABLE bc_join.events (
	id bigserial PRIMARY KEY,
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	type text NOT NULL,
	payload jsonb NOT NULL DEFAULT '{}',
	at timestamptz NOT NULL DEFAULT bc_join.compute_now()
);
CREATE INDEX events_tenant_at_idx ON bc_join.events (tenant_id, at);

CREATE TABLE bc_join.audit_log (
	id bigserial PRIMARY KEY,
	at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	actor text NOT NULL DEFAULT session_user,
	action text NOT NULL,
	tenant_id text,
	node_id text,
	detail jsonb NOT NULL DEFAULT '{}'
);

/* ------------------------------------------------------- internal helpers */

-- A new identifier: prefix, underscore, 32 hex digits (122 random bits).
CREATE FUNCTION bc_join.new_id(prefix text) RETURNS text
	LANGUAGE sql VOLATILE
	SET search_path = pg_catalog, pg_temp
	AS $$ SELECT prefix || '_' || replace(gen_random_uuid()::text, '-', '') $$;

-- 32 random bytes from the server's strong source, base64url without padding.
CREATE FUNCTION bc_join.random_secret() RETURNS text
	AS 'MODULE_PATHNAME', 'bc_random_secret'
	LANGUAGE C VOLATILE STRICT;

-- Raise INVALID_INPUT (SQLSTATE 22023) with msg; detail carries the code.
CREATE FUNCTION bc_join.invalid_input(msg text) RETURNS void
	LANGUAGE plpgsql
	SET search_path = pg_catalog, pg_temp
	AS $$
BEGIN
	RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', MESSAGE = msg,
		DETAIL = 'INVALID_INPUT: the arguments were refused before anything was written.';
END
$$;

/* ---------------------------------------------------------- administration */

-- Create a tenant; returns its id.
CREATE FUNCTION bc_join.create_tenant(name text) RETURNS text
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	tid text := bc_join.new_id('ten');
BEGIN
	IF name IS NULL OR length(name) NOT BETWEEN 1 AND 200 THEN
		PERFORM bc_join.invalid_input('tenant name must be 1 to 200 characters');
	END IF;
	INSERT INTO bc_join.tenants (id, name) VALUES (tid, create_tenant.name);
	INSERT INTO bc_join.audit_log (action, tenant_id, detail)
		VALUES ('tenant.create', tid, jsonb_build_object('name', create_tenant.name));
	RETURN tid;
END
$$;

-- Create a site of a tenant; returns its id.
CREATE FUNCTION bc_join.create_site(tenant_id text, name text) RETURNS text
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	sid text := bc_join.new_id('site');
BEGIN
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

-- Create a pool in a site of the same tenant; returns its id.
CREATE FUNCTION bc_join.create_pool(tenant_id text, site_id text, name text) RETURNS text
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	pid text := bc_join.new_id('pool');
BEGIN
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

/*
 * Create a join token; returns "<id>.<secret>" once.  Only SHA-256 of the
 * secret is stored.  A node token names a pool (or a site); a site token
 * names a site and never a pool.  expect is an object of claims the joining
 * machine must present (jsonb containment: every key must match, every
 * listed MAC or GPU must be among the claimed ones).
 */
CREATE FUNCTION bc_join.create_join_token(
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
	IF NOT EXISTS (SELECT 1 FROM bc_join.tenants t WHERE t.id = create_join_token.tenant_id) THEN
		PERFORM bc_join.invalid_input('the tenant does not exist');
	END IF;
	IF role IS NULL OR role NOT IN ('node', 'site', 'ramdisk') THEN
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
			WHERE k NOT IN ('productUuid', 'serial', 'macs', 'gpuUuids', 'hostname', 'arch') LIMIT 1;
		IF bad IS NOT NULL THEN
			PERFORM bc_join.invalid_input(format('expect names an unknown claim %L', bad));
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

-- Revoke a join token: no further join can use it.
CREATE FUNCTION bc_join.revoke_join_token(token_id text) RETURNS boolean
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	tenant text;
BEGIN
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

/* ------------------------------------------------------------ public keys */

-- The public JWK that signs every JoinResponse (agents pin it).
CREATE FUNCTION bc_join.signing_jwk() RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_signing_jwk' LANGUAGE C STABLE;

-- The public JWK that sealed tokens are encrypted to.
CREATE FUNCTION bc_join.encryption_jwk() RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_encryption_jwk' LANGUAGE C STABLE;

-- The node CA certificate, PEM.
CREATE FUNCTION bc_join.node_ca_certificate() RETURNS text
	AS 'MODULE_PATHNAME', 'bc_node_ca_certificate' LANGUAGE C STABLE;

-- Everything an agent pins, in one document: trustDomain, signingKey,
-- encryptionKey, nodeCa.  Hand it to bcd as --service-keys.
CREATE FUNCTION bc_join.service_keys() RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_service_keys' LANGUAGE C STABLE;

/* -------------------------------------------------------------- the join */

/*
 * One join round: the entry point the contract names, callable unqualified.
 * Returns {"status", "response"} for a result or a deferral and
 * {"status":"refused","error":{...}} for every refusal; raises 22023 for
 * malformed input and 0A000 for an unknown attestor.
 */
CREATE FUNCTION public.bc_join(request jsonb) RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_join_request'
	LANGUAGE C VOLATILE STRICT SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;

/*
 * Renew a node certificate: {"csr": <new key's CSR>, "proof": <JWS by the
 * current key over purpose, serial, csrSha256, iat>}.  Answers like a join:
 * the signed "issued" response or the one refusal.  See docs/protocol.md.
 */
CREATE FUNCTION bc_join.renew(request jsonb) RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_renew_request'
	LANGUAGE C VOLATILE STRICT SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;

/*
 * A session credential for a joined node: {"csr": <session key's CSR>,
 * "proof": <JWS by the node key over purpose "session", serial, csrSha256,
 * iat, session, context>}.  See docs/sessions.md.
 */
CREATE FUNCTION bc_join.issue_session(request jsonb) RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_issue_session_request'
	LANGUAGE C VOLATILE STRICT SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;

/*
 * Refuse the join under way: raises the uniform refusal (SQLSTATE JR001)
 * carrying refusal ('<attestor>:<reason>') and, once evidence authenticated
 * one, the tenant whose event stream records it.  Never returns.
 */
CREATE FUNCTION bc_join.refuse(refusal text, tenant_id text DEFAULT NULL) RETURNS void
	AS 'MODULE_PATHNAME', 'bc_refuse' LANGUAGE C VOLATILE;

/* ------------------------------------------------- helpers for attestors */

-- base64url without padding, as JoinRequest fields and context hashes use it.
CREATE FUNCTION bc_join.b64url_encode(data bytea) RETURNS text
	AS 'MODULE_PATHNAME', 'bc_b64url_encode_sql' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION bc_join.b64url_decode(data text) RETURNS bytea
	AS 'MODULE_PATHNAME', 'bc_b64url_decode_sql' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- ECDSA P-256 / SHA-256 verification (OpenSSL): public key as PEM
-- SubjectPublicKeyInfo, signature DER or raw r||s.  For attestors that check
-- a vendor's signature.
CREATE FUNCTION bc_join.ecdsa_verify(public_key_pem text, message bytea, signature bytea)
	RETURNS boolean
	AS 'MODULE_PATHNAME', 'bc_ecdsa_verify_sql' LANGUAGE C IMMUTABLE STRICT;

-- Mark that single-use evidence was consumed in the running join round.
CREATE FUNCTION bc_join.note_single_use_round() RETURNS void
	AS 'MODULE_PATHNAME', 'bc_note_single_use_round' LANGUAGE C VOLATILE;

-- Trigger: single-use evidence was consumed in the running join round.
CREATE FUNCTION bc_join.note_single_use() RETURNS trigger
	AS 'MODULE_PATHNAME', 'bc_note_single_use' LANGUAGE C;
CREATE TRIGGER attestation_uses_single_use AFTER INSERT ON bc_join.attestation_uses
	FOR EACH STATEMENT EXECUTE FUNCTION bc_join.note_single_use();
CREATE TRIGGER join_tokens_single_use AFTER UPDATE OF uses_left ON bc_join.join_tokens
	FOR EACH STATEMENT EXECUTE FUNCTION bc_join.note_single_use();

/*
 * Use a piece of evidence once: insert (attestor, subject) into
 * attestation_uses, or refuse '<attestor>:reused'.  subject is the SHA-256 of
 * what must be used once; expires_at NULL keeps the row forever.  Call it
 * only in the round that returns a result: JoinService fails a round that
 * consumed single-use evidence and then deferred.
 */
CREATE FUNCTION bc_join.use_once(attestor text, subject bytea,
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
	IF n <> 1 THEN
		PERFORM bc_join.refuse(use_once.attestor || ':reused');
	END IF;
END
$$;

/*
 * Check a join token in any round, without spending it: lock the row,
 * compare the secret in constant time, check revocation, expiry, uses, role
 * (context's) and the expect binding (against context's claims).  Returns
 * {tokenId, tenantId, poolId, siteId, role, allowReclaim}; refuses
 * '<attestor>:<reason>'.  Spend it with spend_join_token() in the final round.
 */
CREATE FUNCTION bc_join.check_join_token(attestor text, token text, context jsonb)
	RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_check_join_token_sql' LANGUAGE C VOLATILE STRICT;

-- Spend one use of a token checked in this transaction (final round only).
CREATE FUNCTION bc_join.spend_join_token(token_id text) RETURNS void
	LANGUAGE plpgsql
	SET search_path = pg_catalog, pg_temp
	AS $$
BEGIN
	UPDATE bc_join.join_tokens t SET uses_left = t.uses_left - 1
		WHERE t.id = spend_join_token.token_id AND t.uses_left > 0;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'join token % has no use left to spend', token_id
			USING HINT = 'Check the token with bc_join.check_join_token() in the same transaction first.';
	END IF;
END
$$;

/* --------------------------------------------------- join request helpers */

/*
 * Record a join request waiting for an operator, for the CSR of context, and
 * tell watchers: NOTIFY bc_join_requests with the request id, and a
 * join_request.pending event in the tenant's stream.  Returns the id.
 */
CREATE FUNCTION bc_join.create_join_request(tenant_id text, attestor text, context jsonb,
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
	PERFORM pg_notify('bc_join_requests', rid);
	RETURN rid;
END
$$;

/*
 * Consume an approved join request in the round that issues: it must be
 * approved and made for this CSR.  Refuses '<attestor>:<reason>' otherwise.
 */
CREATE FUNCTION bc_join.consume_join_request(request_id text, context jsonb) RETURNS void
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

/*
 * The approval round of an attestor in one call: for this CSR, create the
 * join request when there is none and defer; defer again while it is
 * pending; consume it and return NULL (go on and return a result) once
 * approved; refuse '<attestor>:rejected' when rejected.
 */
CREATE FUNCTION bc_join.await_approval(attestor text, tenant_id text, context jsonb,
									   detail jsonb DEFAULT '{}', retry_after_seconds integer DEFAULT 30)
	RETURNS jsonb
	LANGUAGE plpgsql
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	r bc_join.join_requests;
BEGIN
	SELECT * INTO r FROM bc_join.join_requests q
		WHERE q.attestor = await_approval.attestor
		  AND q.csr_sha256 = bc_join.b64url_decode(context->>'csrSha256')
		ORDER BY q.created_at DESC, q.id LIMIT 1;
	IF NOT FOUND THEN
		RETURN jsonb_build_object('deferred', 'approval',
			'requestId', bc_join.create_join_request(await_approval.tenant_id, attestor, context, detail),
			'retryAfterSeconds', retry_after_seconds);
	END IF;
	IF r.state IN ('pending', 'approved') AND r.expires_at <= bc_join.compute_now() THEN
		PERFORM bc_join.refuse(r.attestor || ':request-expired', r.tenant_id);
	END IF;
	IF r.state = 'pending' THEN
		RETURN jsonb_build_object('deferred', 'approval', 'requestId', r.id,
								  'retryAfterSeconds', retry_after_seconds);
	END IF;
	PERFORM bc_join.consume_join_request(r.id, context);
	RETURN NULL;
END
$$;

-- What waits for an operator, readable at a glance.
CREATE VIEW bc_join.pending_join_requests AS
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
		   r.tenant_id
	FROM bc_join.join_requests r JOIN bc_join.tenants t ON t.id = r.tenant_id
	WHERE r.state = 'pending' AND r.expires_at > bc_join.compute_now()
	ORDER BY r.created_at;

-- Approve a pending join request: the agent's next retry completes the join.
CREATE FUNCTION bc_join.approve_join_request(request_id text) RETURNS void
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	r bc_join.join_requests;
BEGIN
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

-- Reject a pending join request: the agent's next retry is refused.
CREATE FUNCTION bc_join.reject_join_request(request_id text, reason text) RETURNS void
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	r bc_join.join_requests;
BEGIN
	IF reason IS NULL OR length(reason) NOT BETWEEN 1 AND 500 THEN
		PERFORM bc_join.invalid_input('a rejection needs a reason of 1 to 500 characters');
	END IF;
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

/* -------------------------------------------------- attestor registration */

-- Register (or re-register) a custom attestor.  Superuser only: verify runs
-- inside every join with the JoinService's rights.
CREATE FUNCTION bc_join.register_attestor(id text, version text, roles text[], verify regprocedure)
	RETURNS void
	LANGUAGE plpgsql
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	p pg_proc;
BEGIN
	IF id IS NULL OR id !~ '^[a-z0-9._-]{1,64}$' THEN
		PERFORM bc_join.invalid_input('an attestor id is 1 to 64 of a-z, 0-9, ''.'', ''_'' and ''-''');
	END IF;
	IF roles IS NULL OR cardinality(roles) = 0 OR NOT roles <@ ARRAY['node', 'site', 'ramdisk'] THEN
		PERFORM bc_join.invalid_input('roles must be a non-empty subset of node, site and ramdisk');
	END IF;
	IF version IS NULL OR length(version) NOT BETWEEN 1 AND 64 THEN
		PERFORM bc_join.invalid_input('version must be 1 to 64 characters');
	END IF;
	SELECT * INTO p FROM pg_catalog.pg_proc WHERE oid = verify;
	IF p.pronargs <> 2 OR p.proargtypes[0] <> 'jsonb'::regtype OR p.proargtypes[1] <> 'jsonb'::regtype
	   OR p.prorettype <> 'jsonb'::regtype OR p.proretset OR p.prokind <> 'f' THEN
		PERFORM bc_join.invalid_input('verify must be a function (evidence jsonb, context jsonb) RETURNS jsonb');
	END IF;
	-- bc_join() runs with search_path = pg_catalog, pg_temp, and so would the
	-- attestor: without a search_path of its own, its unqualified names fail
	-- at join time (or, worse, find someone else's objects).
	IF NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) c WHERE c LIKE 'search\_path=%') THEN
		RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
			MESSAGE = format('the verify function %s has no SET search_path of its own', verify),
			DETAIL = 'INVALID_INPUT: bc_join() runs with search_path = pg_catalog, pg_temp, and an attestor '
					 'inherits it, so a table or function it names without a schema would not be found at join time.',
			HINT = format('Run: ALTER FUNCTION %s SET search_path = %s, pg_catalog, pg_temp;',
						  verify, quote_ident((SELECT n.nspname FROM pg_catalog.pg_namespace n
											   WHERE n.oid = p.pronamespace)));
	END IF;
	INSERT INTO bc_join.attestors AS a (id, version, roles, verify)
		VALUES (register_attestor.id, register_attestor.version, register_attestor.roles, register_attestor.verify)
		ON CONFLICT ON CONSTRAINT attestors_pkey DO UPDATE
		SET version = EXCLUDED.version, roles = EXCLUDED.roles, verify = EXCLUDED.verify,
			registered_at = EXCLUDED.registered_at, registered_by = EXCLUDED.registered_by;
	INSERT INTO bc_join.audit_log (action, detail)
		VALUES ('attestor.register', jsonb_build_object('attestor', id, 'version', version,
														'roles', roles, 'verify', verify::text));
END
$$;

-- Remove a custom attestor; a built-in with the same id takes over again.
CREATE FUNCTION bc_join.unregister_attestor(id text) RETURNS boolean
	LANGUAGE plpgsql
	SET search_path = pg_catalog, pg_temp
	AS $$
BEGIN
	DELETE FROM bc_join.attestors a WHERE a.id = unregister_attestor.id;
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	INSERT INTO bc_join.audit_log (action, detail)
		VALUES ('attestor.unregister', jsonb_build_object('attestor', id));
	RETURN true;
END
$$;

-- Register a command kind that allowedKinds may name.
CREATE FUNCTION bc_join.register_command_kind(kind text, description text DEFAULT '')
	RETURNS void
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
BEGIN
	IF kind IS NULL OR kind !~ '^[a-z0-9-]+(\.[a-z0-9-]+)+$' THEN
		PERFORM bc_join.invalid_input('a command kind is dotted lower-case words, like disk.wipe');
	END IF;
	INSERT INTO bc_join.command_kinds (kind, description)
		VALUES (kind, coalesce(description, '')) ON CONFLICT DO NOTHING;
END
$$;

/* ------------------------------------------------------------------ nodes */

-- Retire a node: state retired, certificates revoked, bindings dropped.
CREATE FUNCTION bc_join.retire_node(node_id text) RETURNS void
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
	DELETE FROM bc_join.node_bindings b WHERE b.node_id = retire_node.node_id;
	INSERT INTO bc_join.events (tenant_id, type, payload)
		VALUES (tenant, 'node.retired', jsonb_build_object('nodeId', node_id));
	INSERT INTO bc_join.audit_log (action, tenant_id, node_id) VALUES ('node.retire', tenant, node_id);
END
$$;

-- Delete a node with its certificates and bindings.
CREATE FUNCTION bc_join.delete_node(node_id text) RETURNS void
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	tenant text;
BEGIN
	DELETE FROM bc_join.nodes n WHERE n.id = delete_node.node_id RETURNING n.tenant_id INTO tenant;
	IF NOT FOUND THEN
		PERFORM bc_join.invalid_input('no node has this id');
	END IF;
	INSERT INTO bc_join.events (tenant_id, type, payload)
		VALUES (tenant, 'node.deleted', jsonb_build_object('nodeId', node_id));
	INSERT INTO bc_join.audit_log (action, tenant_id, node_id) VALUES ('node.delete', tenant, node_id);
END
$$;

/* ------------------------------------------------------------- housekeeping */

/*
 * Delete up to batch expired attestation_uses rows (expires_at before
 * compute_now()); rows without an expiry stay.  Returns how many were
 * deleted: call it again until it returns 0.  Rows other sessions hold are
 * skipped, so it never waits on a join.
 */
CREATE FUNCTION bc_join.prune_attestation_uses(batch integer DEFAULT 5000) RETURNS bigint
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	n bigint;
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
	RETURN n;
END
$$;

/* ------------------------------------------------------------- statistics */

-- Rounds by attestor and outcome since the last reset (shared memory).
CREATE FUNCTION bc_join.attestor_stats(
	OUT attestor text, OUT outcome text, OUT calls bigint, OUT total_ms double precision,
	OUT mean_ms double precision, OUT min_ms double precision, OUT max_ms double precision,
	OUT p50_ms double precision, OUT p99_ms double precision, OUT histogram jsonb)
	RETURNS SETOF record
	AS 'MODULE_PATHNAME', 'bc_attestor_stats' LANGUAGE C VOLATILE STRICT;

-- The counterpart of meteredAttestor: verifications by attestor and outcome
-- (admitted, deferred-approval, deferred-challenge, refused, error) and their
-- timing.  p50/p99 are the upper bounds of the histogram buckets holding them.
CREATE VIEW bc_join.attestor_statistics AS
	SELECT * FROM bc_join.attestor_stats() ORDER BY attestor, outcome;

-- Forget every counter; returns when.
CREATE FUNCTION bc_join.attestor_stats_reset() RETURNS timestamptz
	AS 'MODULE_PATHNAME', 'bc_attestor_stats_reset' LANGUAGE C VOLATILE;

/* ------------------------------------------------------- challenge state */

/*
 * A challenge's state, sealed under challenge.key for the running join
 * round's attestor, CSR and role, until not_after (at most a day ahead).
 * Call it in the round that defers with a challenge: JoinService gives the
 * signed response this notAfter.  Only the attestor of the running round
 * may call it (55000 otherwise).
 */
CREATE FUNCTION bc_join.seal_challenge_state(attestor text, plaintext jsonb, not_after timestamptz)
	RETURNS text
	AS 'MODULE_PATHNAME', 'bc_seal_challenge_state_sql' LANGUAGE C VOLATILE STRICT;

/*
 * The plaintext of a state sealed by seal_challenge_state in the round
 * before; refuses '<attestor>:state-mismatch' (it does not open, or was
 * sealed for another attestor, CSR or role) and
 * '<attestor>:challenge-expired' (compute_now() past its notAfter).
 */
CREATE FUNCTION bc_join.open_challenge_state(attestor text, state text)
	RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_open_challenge_state_sql' LANGUAGE C VOLATILE STRICT;

/* ------------------------------------------------------------------- tpm */

-- EK roots (self-signed) and intermediates, added with add_tpm_ek_root.
CREATE TABLE bc_join.tpm_ek_certificates (
	sha256 bytea PRIMARY KEY CHECK (length(sha256) = 32),	-- of the DER
	certificate bytea NOT NULL,
	is_root boolean NOT NULL,
	subject text NOT NULL,
	added_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	added_by text NOT NULL DEFAULT session_user
);

-- EKs an operator enrolled, by SHA-256 of their SPKI: trusted, and their tenant.
CREATE TABLE bc_join.tpm_ek_enrollments (
	ek_spki_sha256 bytea PRIMARY KEY CHECK (length(ek_spki_sha256) = 32),
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	pool_id text REFERENCES bc_join.pools (id),
	site_id text REFERENCES bc_join.sites (id),
	-- a PCR policy of this EK's own (else the pool's, else the tenant's)
	pcr_selection text,
	pcr_values bytea,
	request_id text,					-- the join request whose approval enrolled it
	created_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	created_by text NOT NULL DEFAULT session_user,
	CHECK (pool_id IS NOT NULL OR site_id IS NOT NULL),
	CHECK ((pcr_selection IS NULL) = (pcr_values IS NULL))
);

-- PCR policies per tenant (pool_id NULL) or per pool: the quote must show these values.
CREATE TABLE bc_join.tpm_pcr_policies (
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	pool_id text REFERENCES bc_join.pools (id),
	selection text NOT NULL,			-- normalized, e.g. sha256:0,1,2,3,4,5,6,7
	pcr_values bytea NOT NULL,			-- the selected PCRs' values, in that order
	created_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	created_by text NOT NULL DEFAULT session_user
);
CREATE UNIQUE INDEX tpm_pcr_policies_idx ON bc_join.tpm_pcr_policies (tenant_id, coalesce(pool_id, ''));

-- Per tenant: what an EK neither enrolled nor chained gets (default refuse).
CREATE TABLE bc_join.tpm_settings (
	tenant_id text PRIMARY KEY REFERENCES bc_join.tenants (id),
	enrollment text NOT NULL CHECK (enrollment IN ('refuse', 'approval'))
);

-- What the last tpm join proved of an EK: renewal checks it is still trusted.
CREATE TABLE bc_join.tpm_eks (
	ek_spki_sha256 bytea PRIMARY KEY CHECK (length(ek_spki_sha256) = 32),
	ek_public bytea NOT NULL,			-- TPM2B_PUBLIC as received
	ek_certificate bytea,				-- NULL when the EK was enrolled
	seen_at timestamptz NOT NULL DEFAULT bc_join.compute_now()
);

-- The checks behind the configuration functions (C: the attestor's own parsers).
CREATE FUNCTION bc_join.tpm_pcr_selection(selection text, pcr_values bytea) RETURNS text
	AS 'MODULE_PATHNAME', 'bc_tpm_pcr_selection_sql' LANGUAGE C IMMUTABLE STRICT;
CREATE FUNCTION bc_join.tpm_ek_certificate(certificate_pem text) RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_tpm_ek_certificate_sql' LANGUAGE C IMMUTABLE STRICT;

/*
 * Add an EK root (a self-signed CA certificate) or an intermediate (any
 * other CA certificate), one PEM certificate at a time.  Returns the hex
 * SHA-256 of its DER; adding it again changes nothing.
 */
CREATE FUNCTION bc_join.add_tpm_ek_root(certificate_pem text) RETURNS text
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	c jsonb := bc_join.tpm_ek_certificate(certificate_pem);
BEGIN
	INSERT INTO bc_join.tpm_ek_certificates (sha256, certificate, is_root, subject)
		VALUES (decode(c->>'sha256', 'hex'), decode(c->>'der', 'hex'), (c->>'isRoot')::boolean, c->>'subject')
		ON CONFLICT (sha256) DO NOTHING;
	IF FOUND THEN
		INSERT INTO bc_join.audit_log (action, detail)
			VALUES ('tpm.ek_root.add', jsonb_build_object('sha256', c->>'sha256', 'subject', c->>'subject',
														  'root', (c->>'isRoot')::boolean));
	END IF;
	RETURN c->>'sha256';
END
$$;

-- Remove an EK root or intermediate by the hex SHA-256 add_tpm_ek_root returned.
CREATE FUNCTION bc_join.remove_tpm_ek_root(sha256 text) RETURNS boolean
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
BEGIN
	IF sha256 IS NULL OR sha256 !~ '^[0-9a-f]{64}$' THEN
		PERFORM bc_join.invalid_input('sha256 is 64 lower-case hex digits');
	END IF;
	DELETE FROM bc_join.tpm_ek_certificates c WHERE c.sha256 = decode(remove_tpm_ek_root.sha256, 'hex');
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	INSERT INTO bc_join.audit_log (action, detail)
		VALUES ('tpm.ek_root.remove', jsonb_build_object('sha256', remove_tpm_ek_root.sha256));
	RETURN true;
END
$$;

/*
 * Enroll an EK by the hex SHA-256 of its SPKI (sha256sum of
 * `tpm2_readpublic -f der`): trusted without a certificate, joining tenant
 * tenant_id in pool pool_id (or at site site_id).  Optionally a PCR policy
 * of its own.  Enrolling it again replaces the enrollment.
 */
CREATE FUNCTION bc_join.enroll_tpm_ek(ek_spki_sha256 text, tenant_id text, pool_id text DEFAULT NULL,
									  site_id text DEFAULT NULL, pcr_selection text DEFAULT NULL,
									  pcr_values bytea DEFAULT NULL, request_id text DEFAULT NULL)
	RETURNS void
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	sel text;
BEGIN
	IF ek_spki_sha256 IS NULL OR lower(ek_spki_sha256) !~ '^[0-9a-f]{64}$' THEN
		PERFORM bc_join.invalid_input('ek_spki_sha256 is the 64 hex digits of SHA-256 over the EK''s DER SubjectPublicKeyInfo');
	END IF;
	IF NOT EXISTS (SELECT 1 FROM bc_join.tenants t WHERE t.id = enroll_tpm_ek.tenant_id) THEN
		PERFORM bc_join.invalid_input('no tenant has this id');
	END IF;
	IF pool_id IS NULL AND site_id IS NULL THEN
		PERFORM bc_join.invalid_input('an enrollment names a pool, or a site');
	END IF;
	IF pool_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM bc_join.pools p
			WHERE p.id = enroll_tpm_ek.pool_id AND p.tenant_id = enroll_tpm_ek.tenant_id
			  AND (enroll_tpm_ek.site_id IS NULL OR p.site_id = enroll_tpm_ek.site_id)) THEN
		PERFORM bc_join.invalid_input('the pool is not one of this tenant (at this site)');
	END IF;
	IF site_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM bc_join.sites s
			WHERE s.id = enroll_tpm_ek.site_id AND s.tenant_id = enroll_tpm_ek.tenant_id) THEN
		PERFORM bc_join.invalid_input('the site is not one of this tenant');
	END IF;
	IF (pcr_selection IS NULL) <> (pcr_values IS NULL) THEN
		PERFORM bc_join.invalid_input('a PCR policy is a selection and its values, both');
	END IF;
	IF pcr_selection IS NOT NULL THEN
		sel := bc_join.tpm_pcr_selection(pcr_selection, pcr_values);
	END IF;
	INSERT INTO bc_join.tpm_ek_enrollments AS e (ek_spki_sha256, tenant_id, pool_id, site_id,
												 pcr_selection, pcr_values, request_id)
		VALUES (decode(lower(ek_spki_sha256), 'hex'), tenant_id, pool_id, site_id, sel, pcr_values, request_id)
		ON CONFLICT ON CONSTRAINT tpm_ek_enrollments_pkey DO UPDATE SET tenant_id = excluded.tenant_id,
			pool_id = excluded.pool_id, site_id = excluded.site_id,
			pcr_selection = excluded.pcr_selection, pcr_values = excluded.pcr_values,
			request_id = excluded.request_id, created_at = bc_join.compute_now(), created_by = session_user;
	INSERT INTO bc_join.audit_log (action, tenant_id, detail)
		VALUES ('tpm.ek.enroll', tenant_id,
				jsonb_build_object('ekSpkiSha256', lower(ek_spki_sha256), 'poolId', pool_id, 'siteId', site_id,
								   'pcrSelection', sel, 'requestId', request_id));
END
$$;

-- Forget an EK's enrollment.
CREATE FUNCTION bc_join.unenroll_tpm_ek(ek_spki_sha256 text) RETURNS boolean
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	t text;
BEGIN
	IF ek_spki_sha256 IS NULL OR lower(ek_spki_sha256) !~ '^[0-9a-f]{64}$' THEN
		PERFORM bc_join.invalid_input('ek_spki_sha256 is 64 hex digits');
	END IF;
	DELETE FROM bc_join.tpm_ek_enrollments e WHERE e.ek_spki_sha256 = decode(lower(unenroll_tpm_ek.ek_spki_sha256), 'hex')
		RETURNING e.tenant_id INTO t;
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	INSERT INTO bc_join.audit_log (action, tenant_id, detail)
		VALUES ('tpm.ek.unenroll', t, jsonb_build_object('ekSpkiSha256', lower(ek_spki_sha256)));
	RETURN true;
END
$$;

/*
 * The PCR policy of a tenant (pool_id NULL) or of one of its pools:
 * selection like tpm2-tools' (sha256:0,1,2,3 or sha256:0-7+sha1:0) and the
 * selected PCRs' values concatenated in that order (what
 * `tpm2_pcrread -o FILE SELECTION` writes).  selection NULL removes it.
 */
CREATE FUNCTION bc_join.set_tpm_pcr_policy(tenant_id text, pool_id text, selection text, pcr_values bytea DEFAULT NULL)
	RETURNS void
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	sel text;
BEGIN
	IF NOT EXISTS (SELECT 1 FROM bc_join.tenants t WHERE t.id = set_tpm_pcr_policy.tenant_id) THEN
		PERFORM bc_join.invalid_input('no tenant has this id');
	END IF;
	IF pool_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM bc_join.pools p
			WHERE p.id = set_tpm_pcr_policy.pool_id AND p.tenant_id = set_tpm_pcr_policy.tenant_id) THEN
		PERFORM bc_join.invalid_input('the pool is not one of this tenant');
	END IF;
	DELETE FROM bc_join.tpm_pcr_policies p WHERE p.tenant_id = set_tpm_pcr_policy.tenant_id
		AND p.pool_id IS NOT DISTINCT FROM set_tpm_pcr_policy.pool_id;
	IF selection IS NOT NULL THEN
		IF pcr_values IS NULL THEN
			PERFORM bc_join.invalid_input('a PCR policy is a selection and its values, both');
		END IF;
		sel := bc_join.tpm_pcr_selection(selection, pcr_values);
		INSERT INTO bc_join.tpm_pcr_policies (tenant_id, pool_id, selection, pcr_values)
			VALUES (tenant_id, pool_id, sel, pcr_values);
	END IF;
	INSERT INTO bc_join.audit_log (action, tenant_id, detail)
		VALUES ('tpm.pcr_policy.set', tenant_id, jsonb_build_object('poolId', pool_id, 'selection', sel));
END
$$;

/*
 * What a tenant's EK that is neither enrolled nor chained to a root gets
 * when a sealed join token of the tenant comes with it: 'refuse' (the
 * default) or 'approval' (a join request; approving it enrolls the EK).
 */
CREATE FUNCTION bc_join.set_tpm_enrollment_mode(tenant_id text, mode text) RETURNS void
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
BEGIN
	IF mode IS NULL OR mode NOT IN ('refuse', 'approval') THEN
		PERFORM bc_join.invalid_input('the tpm enrollment mode is refuse or approval');
	END IF;
	IF NOT EXISTS (SELECT 1 FROM bc_join.tenants t WHERE t.id = set_tpm_enrollment_mode.tenant_id) THEN
		PERFORM bc_join.invalid_input('no tenant has this id');
	END IF;
	INSERT INTO bc_join.tpm_settings AS s (tenant_id, enrollment) VALUES (tenant_id, mode)
		ON CONFLICT ON CONSTRAINT tpm_settings_pkey DO UPDATE SET enrollment = excluded.enrollment;
	INSERT INTO bc_join.audit_log (action, tenant_id, detail)
		VALUES ('tpm.enrollment_mode.set', tenant_id, jsonb_build_object('mode', mode));
END
$$;

/* ------------------------------------------------------------- privileges */

REVOKE ALL ON SCHEMA bc_join FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA bc_join FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA bc_join FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA bc_join FROM PUBLIC;
REVOKE ALL ON FUNCTION public.bc_join(jsonb) FROM PUBLIC;

-- The gateway: the relayed entry points and nothing else.
GRANT EXECUTE ON FUNCTION public.bc_join(jsonb) TO bc_join_gateway;
GRANT USAGE ON SCHEMA bc_join TO bc_join_gateway;
GRANT EXECUTE ON FUNCTION bc_join.renew(jsonb), bc_join.issue_session(jsonb) TO bc_join_gateway;

-- Operators: administration, public keys, and reading what happened.
GRANT USAGE ON SCHEMA bc_join TO bc_join_operator;
GRANT EXECUTE ON FUNCTION
	bc_join.compute_now(),
	bc_join.create_tenant(text),
	bc_join.create_site(text, text),
	bc_join.create_pool(text, text, text),
	bc_join.create_join_token(text, text, integer, interval, text, jsonb, boolean, text),
	bc_join.revoke_join_token(text),
	bc_join.approve_join_request(text),
	bc_join.reject_join_request(text, text),
	bc_join.retire_node(text),
	bc_join.delete_node(text),
	bc_join.register_command_kind(text, text),
	bc_join.prune_attestation_uses(integer),
	bc_join.b64url_encode(bytea),
	bc_join.b64url_decode(text),
	bc_join.attestor_stats(),
	bc_join.attestor_stats_reset(),
	bc_join.signing_jwk(),
	bc_join.encryption_jwk(),
	bc_join.node_ca_certificate(),
	bc_join.service_keys(),
	bc_join.add_tpm_ek_root(text),
	bc_join.remove_tpm_ek_root(text),
	bc_join.enroll_tpm_ek(text, text, text, text, text, bytea, text),
	bc_join.unenroll_tpm_ek(text),
	bc_join.set_tpm_pcr_policy(text, text, text, bytea),
	bc_join.set_tpm_enrollment_mode(text, text),
	bc_join.tpm_pcr_selection(text, bytea),
	bc_join.tpm_ek_certificate(text)
	TO bc_join_operator;
GRANT SELECT ON
	bc_join.tenants, bc_join.sites, bc_join.pools, bc_join.nodes, bc_join.node_certs,
	bc_join.node_bindings, bc_join.join_requests, bc_join.attestation_uses,
	bc_join.events, bc_join.audit_log, bc_join.attestors, bc_join.command_kinds,
	bc_join.refusal_rate, bc_join.pending_join_requests, bc_join.attestor_statistics,
	bc_join.sessions, bc_join.session_certs,
	bc_join.tpm_ek_certificates, bc_join.tpm_ek_enrollments, bc_join.tpm_pcr_policies,
	bc_join.tpm_settings, bc_join.tpm_eks
	TO bc_join_operator;
-- Token rows without their secret hash.
GRANT SELECT (id, tenant_id, pool_id, site_id, uses_total, uses_left, expires_at, role,
			  expect, allow_reclaim, created_at, created_by, revoked_at)
	ON bc_join.join_tokens TO bc_join_operator;
