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
	issued_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	revoked_at timestamptz,
	revocation_reason text,
	CHECK (not_after > not_before)
);
CREATE INDEX node_certs_node_idx ON bc_join.node_certs (node_id);
CREATE INDEX node_certs_spki_idx ON bc_join.node_certs (spki_sha256);

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
	expires_at timestamptz
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
 * Refuse the join under way: raises the uniform refusal (SQLSTATE JR001)
 * carrying refusal ('<attestor>:<reason>') and, once evidence authenticated
 * one, the tenant whose event stream records it.  Never returns.
 */
CREATE FUNCTION bc_join.refuse(refusal text, tenant_id text DEFAULT NULL) RETURNS void
	AS 'MODULE_PATHNAME', 'bc_refuse' LANGUAGE C VOLATILE;

/* ------------------------------------------------------------- privileges */

REVOKE ALL ON SCHEMA bc_join FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA bc_join FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA bc_join FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA bc_join FROM PUBLIC;
REVOKE ALL ON FUNCTION public.bc_join(jsonb) FROM PUBLIC;

-- The gateway: the join entry point and nothing else.
GRANT EXECUTE ON FUNCTION public.bc_join(jsonb) TO bc_join_gateway;

-- Operators: administration, public keys, and reading what happened.
GRANT USAGE ON SCHEMA bc_join TO bc_join_operator;
GRANT EXECUTE ON FUNCTION
	bc_join.compute_now(),
	bc_join.create_tenant(text),
	bc_join.create_site(text, text),
	bc_join.create_pool(text, text, text),
	bc_join.create_join_token(text, text, integer, interval, text, jsonb, boolean, text),
	bc_join.revoke_join_token(text),
	bc_join.signing_jwk(),
	bc_join.encryption_jwk(),
	bc_join.node_ca_certificate(),
	bc_join.service_keys()
	TO bc_join_operator;
GRANT SELECT ON
	bc_join.tenants, bc_join.sites, bc_join.pools, bc_join.nodes, bc_join.node_certs,
	bc_join.node_bindings, bc_join.join_requests, bc_join.attestation_uses,
	bc_join.events, bc_join.audit_log
	TO bc_join_operator;
-- Token rows without their secret hash.
GRANT SELECT (id, tenant_id, pool_id, site_id, uses_total, uses_left, expires_at, role,
			  expect, allow_reclaim, created_at, created_by, revoked_at)
	ON bc_join.join_tokens TO bc_join_operator;
