/*
 * bc_join.sql: the JoinService schema, entry points and privileges, as the
 * current version installs them.  The one source of the install script: the
 * Makefile copies it to sql/bc_join--<default_version>.sql (as pgvector keeps
 * sql/vector.sql).  Every change here also goes in the upgrade script from
 * the version before (sql/bc_join--<previous>--<version>.sql), and a released
 * version never changes again: docs/development.md, "Changing the schema".
 */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION bc_join" to load this file. \quit

/*
 * Roles.  Cluster-wide, so created only when missing and never dropped with
 * the extension.  Neither can log in: grant them to login roles.
 *   bc_join_gateway   may call public.bc_join(jsonb) and the relayed entry
 *                     points, nothing else.
 *   bc_join_operator  administers tenants, sites, pools, tokens and join
 *                     requests, reads events, audit and public keys: the
 *                     platform operator, of every tenant.
 *   bc_join_tenant_operator  the same within the tenants of its members
 *                     alone (bc_join.grant_tenant_operator, row-level
 *                     security): granted by grant_tenant_operator, never
 *                     by hand.
 */
DO $roles$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'bc_join_gateway') THEN
		CREATE ROLE bc_join_gateway NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'bc_join_operator') THEN
		CREATE ROLE bc_join_operator NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'bc_join_tenant_operator') THEN
		CREATE ROLE bc_join_tenant_operator NOLOGIN;
	END IF;
END
$roles$;

/* --------------------------------------------------- the service clock */

-- The service clock: transaction start plus bc_join.clock_offset (seconds,
-- superuser-only, 0 unless a test moves it).  Every expiry comparison uses it.
CREATE FUNCTION bc_join.compute_now() RETURNS timestamptz
	AS 'MODULE_PATHNAME', 'bc_compute_now'
	LANGUAGE C STABLE PARALLEL SAFE;
COMMENT ON FUNCTION bc_join.compute_now() IS
	'Returns the service clock, the transaction start plus bc_join.clock_offset seconds, against which every expiry is compared.';
-- The service clock's current instant: clock_timestamp() plus the same
-- offset.  What the issuance log records (the insert's time: an open
-- transaction cannot backdate a row to its start).
CREATE FUNCTION bc_join.compute_clock() RETURNS timestamptz
	AS 'MODULE_PATHNAME', 'bc_compute_clock'
	LANGUAGE C VOLATILE PARALLEL SAFE;
COMMENT ON FUNCTION bc_join.compute_clock() IS
	'The service clock''s current instant: clock_timestamp() plus bc_join.clock_offset (the time of an issuance log row).';

-- The version of the loaded library (bc_join.so), beside pg_extension's
-- extversion of the schema: the library works only on its own (version.c).
CREATE FUNCTION bc_join.library_version() RETURNS text
	AS 'MODULE_PATHNAME', 'bc_library_version_sql'
	LANGUAGE C STABLE PARALLEL SAFE;
COMMENT ON FUNCTION bc_join.library_version() IS
	'The version of the loaded bc_join library; it works only when it equals the installed extension version (pg_extension.extversion).';

/* ------------------------------------ domains: the checks spelled once */

-- The checks the tables would otherwise repeat, each spelled once (the same
-- words and bounds as src/common/bc_protocol.h).  Columns an operator reads
-- and compares as text (roles, serials) stay text with a CHECK, so that
-- polymorphic functions (pgTAP's is(), coalesce with text) accept them.
-- are_agent_roles is C (src/ext/util.c, bc_role_valid): the CHECK constraints
-- that call it are prepared again for every statement that writes their table,
-- and a SQL body was read, analysed and planned each time (0.9.0).
CREATE FUNCTION bc_join.are_agent_roles(roles text[]) RETURNS boolean
	AS 'MODULE_PATHNAME', 'bc_are_agent_roles'
	LANGUAGE C IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION bc_join.are_agent_roles(text[]) IS
	'Returns whether roles is a non-empty list of agent roles (node, site, ramdisk): the one spelling of the roles in SQL.';
-- a SHA-256 digest
CREATE DOMAIN bc_join.sha256 AS bytea CHECK (length(VALUE) = 32);
-- a session or context selector: 0 to 128 of [A-Za-z0-9._:-]
CREATE DOMAIN bc_join.selector AS text CHECK (VALUE ~ '^[A-Za-z0-9._:-]{0,128}$');

/* ---------------------------------------------------- internal helpers */

-- A new identifier: prefix, underscore, 32 hex digits (122 random bits).
CREATE FUNCTION bc_join.new_id(prefix text) RETURNS text
	LANGUAGE sql VOLATILE
	SET search_path = pg_catalog, pg_temp
	AS $$ SELECT prefix || '_' || replace(gen_random_uuid()::text, '-', '') $$;
COMMENT ON FUNCTION bc_join.new_id(text) IS
	'Internal: returns a new identifier, prefix, underscore and 32 hex digits (122 random bits).';

-- 32 random bytes from the server's strong source, base64url without padding.
CREATE FUNCTION bc_join.random_secret() RETURNS text
	AS 'MODULE_PATHNAME', 'bc_random_secret'
	LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION bc_join.random_secret() IS
	'Internal: returns 32 random bytes from the server''s strong source as base64url without padding.';

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
COMMENT ON FUNCTION bc_join.invalid_input(text) IS
	'Internal: raises INVALID_INPUT (SQLSTATE 22023) with msg, the code in the detail; never returns.';

-- Check a function an operator registers for bc_join to call inside a join:
-- fn must be a plain function of exactly args returning ret (shape says so
-- in words), with a SET search_path of its own, since bc_join() runs with
-- search_path = pg_catalog, pg_temp and fn would inherit it: its unqualified
-- names would not be found at join time (or, worse, find someone else's
-- objects).  what names fn in the messages ("verify function", "resolver").
CREATE FUNCTION bc_join.check_callback(fn regprocedure, what text, args regtype[], ret regtype, shape text)
	RETURNS void
	LANGUAGE plpgsql
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	p pg_proc;
BEGIN
	SELECT * INTO p FROM pg_catalog.pg_proc WHERE oid = fn;
	IF NOT FOUND OR p.pronargs <> cardinality(args) OR p.prorettype <> ret OR p.proretset OR p.prokind <> 'f' THEN
		PERFORM bc_join.invalid_input(shape);
	END IF;
	FOR i IN 1 .. cardinality(args) LOOP
		IF p.proargtypes[i - 1] <> args[i] THEN
			PERFORM bc_join.invalid_input(shape);
		END IF;
	END LOOP;
	IF NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) c WHERE c LIKE 'search\_path=%') THEN
		RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
			MESSAGE = format('the %s %s has no SET search_path of its own', what, fn),
			DETAIL = format('INVALID_INPUT: bc_join() runs with search_path = pg_catalog, pg_temp, and a %s '
							'inherits it, so a table or function it names without a schema would not be found at join time.',
							what),
			HINT = format('Run: ALTER FUNCTION %s SET search_path = %s, pg_catalog, pg_temp;',
						  fn, quote_ident((SELECT n.nspname FROM pg_catalog.pg_namespace n
										   WHERE n.oid = p.pronamespace)));
	END IF;
END
$$;
COMMENT ON FUNCTION bc_join.check_callback(regprocedure, text, regtype[], regtype, text) IS
	'Internal: refuses (INVALID_INPUT) a function to be registered for joins unless it has exactly the given arguments and result and a SET search_path of its own; the HINT gives the ALTER FUNCTION.';

-- A retention or staleness setting (bc_join.retain_*, stale_after,
-- x509pop_grace, without the prefix) as an interval.
CREATE FUNCTION bc_join.setting_interval(name text) RETURNS interval
	AS 'MODULE_PATHNAME', 'bc_setting_interval'
	LANGUAGE C STABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION bc_join.setting_interval(text) IS
	'Returns a retention or staleness setting (retain_events, retain_expired_certificates, retain_sessions, retain_join_requests, stale_after, x509pop_grace) as an interval.';

-- Raise INVALID_CONFIG (SQLSTATE F0000) with msg; never returns.
CREATE FUNCTION bc_join.invalid_config(msg text) RETURNS void
	LANGUAGE plpgsql
	SET search_path = pg_catalog, pg_temp
	AS $$
BEGIN
	RAISE EXCEPTION USING ERRCODE = 'config_file_error', MESSAGE = msg,
		DETAIL = 'INVALID_CONFIG: the cloud-iid configuration would be inconsistent.';
END
$$;
COMMENT ON FUNCTION bc_join.invalid_config(text) IS
	'Internal: raises INVALID_CONFIG (SQLSTATE F0000) with msg; never returns.';

/* -------------------------------------------- tenants, sites and pools */

CREATE TABLE bc_join.tenants (
	id text PRIMARY KEY,
	name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
	created_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	-- the NOTIFY channel of the tenant's waiting join requests (#42.7): random, so
	-- that no one who cannot read this row can name it (LISTEN needs no grant)
	request_channel text NOT NULL DEFAULT bc_join.new_id('bc_join_requests'),
	-- the NOTIFY channel of the tenant's refused joins (#48), random for the
	-- same reason (bc_join.refusal_channel)
	refusal_channel text NOT NULL DEFAULT bc_join.new_id('bc_join_refusals')
);
COMMENT ON TABLE bc_join.tenants IS
	'The tenants; the tenant root exists from the start and receives the refusals no evidence authenticated; request_channel and refusal_channel are the random NOTIFY channels of the tenant''s waiting join requests and of its refused joins.';
-- The root tenant receives refusal events that no evidence authenticated.
INSERT INTO bc_join.tenants (id, name) VALUES ('root', 'root');

/*
 * The root tenant's row in a dump (#42.8): pg_dump keeps every row of
 * tenants, the root's too, and a restore's CREATE EXTENSION has made its own
 * root row already.  The dumped row replaces it, every column as it was
 * (created_at, request_channel), instead of conflicting: an INSERT of 'root'
 * while a root row exists updates that row and inserts nothing.  Only the
 * extension's owner and the superuser insert into tenants directly (every
 * other tenant comes from create_tenant(), with a new id).  A new column of
 * tenants goes here too (test/tap/dump_restore.t compares every column).
 */
CREATE FUNCTION bc_join.tenants_restore_root() RETURNS trigger
	LANGUAGE plpgsql
	SET search_path = pg_catalog, pg_temp
	AS $$
BEGIN
	IF NEW.id = 'root' AND EXISTS (SELECT 1 FROM bc_join.tenants t WHERE t.id = 'root') THEN
		UPDATE bc_join.tenants t
			SET name = NEW.name, created_at = NEW.created_at, request_channel = NEW.request_channel,
				refusal_channel = NEW.refusal_channel
			WHERE t.id = 'root';
		RETURN NULL;
	END IF;
	RETURN NEW;
END
$$;
COMMENT ON FUNCTION bc_join.tenants_restore_root() IS
	'Internal trigger: an INSERT of the root tenant while one exists (a restore after CREATE EXTENSION made its own) replaces that row''s columns and inserts nothing.';
CREATE TRIGGER restore_root BEFORE INSERT ON bc_join.tenants
	FOR EACH ROW WHEN (NEW.id = 'root') EXECUTE FUNCTION bc_join.tenants_restore_root();

CREATE TABLE bc_join.sites (
	id text PRIMARY KEY,
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
	-- a custom site is one a tenant runs itself; its nodes default to tenant-owned trust
	custom boolean NOT NULL DEFAULT true,
	created_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	UNIQUE (id, tenant_id)
);
COMMENT ON TABLE bc_join.sites IS
	'A tenant''s sites; custom (a tenant''s own site) makes its nodes tenant-owned by default.';

CREATE TABLE bc_join.pools (
	id text PRIMARY KEY,
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	site_id text NOT NULL,
	name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
	agent text NOT NULL DEFAULT 'bcd',
	created_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	FOREIGN KEY (site_id, tenant_id) REFERENCES bc_join.sites (id, tenant_id)
);
COMMENT ON TABLE bc_join.pools IS
	'A tenant''s pools, each in one of the tenant''s sites: what a join token or an attestor admits a node into.';

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
COMMENT ON FUNCTION bc_join.create_tenant(text) IS
	'Creates a tenant with this name and returns its id.';

-- Create a site of a tenant; returns its id.
CREATE FUNCTION bc_join.create_site(tenant_id text, name text) RETURNS text
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
COMMENT ON FUNCTION bc_join.create_site(text, text) IS
	'Creates a site of a tenant and returns its id.';

-- Create a pool in a site of the same tenant; returns its id.
CREATE FUNCTION bc_join.create_pool(tenant_id text, site_id text, name text) RETURNS text
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
COMMENT ON FUNCTION bc_join.create_pool(text, text, text) IS
	'Creates a pool in a site of the same tenant and returns its id.';

/* ------------------------------ nodes, their certificates and bindings */

CREATE TABLE bc_join.nodes (
	id text PRIMARY KEY,
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	site_id text REFERENCES bc_join.sites (id),
	pool_id text REFERENCES bc_join.pools (id),
	role text NOT NULL CHECK (bc_join.are_agent_roles(ARRAY[role])),
	state text NOT NULL DEFAULT 'adopting'
		CHECK (state = ANY ('{adopting,active,retired}'::text[])),
	trust text NOT NULL CHECK (trust = ANY ('{platform,tenant-owned}'::text[])),
	-- bumped by every reclaim: certificates of older generations are dead
	identity_generation integer NOT NULL DEFAULT 1 CHECK (identity_generation >= 1),
	attestor text NOT NULL,
	node_key text NOT NULL DEFAULT 'unattested',
	claims jsonb NOT NULL DEFAULT '{}',
	created_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	updated_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	retired_at timestamptz,
	-- when the node last joined, renewed or asked for a session (sessions
	-- move it at most once a minute); bc_join.stale_nodes reads it
	last_seen_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	CHECK (site_id IS NOT NULL OR pool_id IS NOT NULL)
);
COMMENT ON TABLE bc_join.nodes IS
	'The machines that joined: tenant, site, pool, role, state (adopting, active, retired), trust, identity generation, attestor, node key and claims.';
CREATE INDEX nodes_tenant_idx ON bc_join.nodes (tenant_id);

CREATE TABLE bc_join.node_certs (
	serial text PRIMARY KEY CHECK (serial ~ '^[0-9a-f]{32}$'),
	node_id text NOT NULL REFERENCES bc_join.nodes (id) ON DELETE CASCADE,
	identity_generation integer NOT NULL,
	not_before timestamptz NOT NULL,
	not_after timestamptz NOT NULL,
	spki_sha256 bc_join.sha256 NOT NULL,
	allowed_kinds text[],				-- NULL: unrestricted
	node_key_uri text,
	certificate bytea NOT NULL,			-- DER; public
	-- SHA-256 of the JoinRequest's CSR when a join issued it (NULL: a renewal)
	join_csr_sha256 bc_join.sha256,
	issued_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	revoked_at timestamptz,
	-- an operator's RFC 5280 reason (revoke_certificate), or the service's own:
	-- renewed (a renewal replaced it), reclaimed (a reclaim re-keyed its node),
	-- retired (retire_node), attestation-failed (quarantine_node, #44)
	revocation_reason text,
	-- SHA-256 of what the join that issued it verified (attestor, tenant,
	-- role, token, bind, node key, the attestor's own subject): a final round
	-- repeated with its CSR must verify the same again.  NULL: a renewal, or
	-- a certificate from before 0.2.0 (never answered to a repeat)
	join_subject bc_join.sha256,
	CHECK (not_after > not_before),
	CONSTRAINT node_certs_revocation_reason_check CHECK (revocation_reason = ANY ('{unspecified,keyCompromise,cACompromise,affiliationChanged,superseded,cessationOfOperation,privilegeWithdrawn,aACompromise,renewed,reclaimed,retired,attestation-failed}'::text[]))
);
COMMENT ON TABLE bc_join.node_certs IS
	'Every node certificate issued: serial, node, identity generation, validity, the certified key''s SPKI SHA-256 (one key, one certificate), allowed command kinds, the DER and its revocation.';
CREATE INDEX node_certs_node_idx ON bc_join.node_certs (node_id);
-- One key, one certificate: a CSR key admits at most one join (join:key-reused).
CREATE UNIQUE INDEX node_certs_spki_idx ON bc_join.node_certs (spki_sha256);
-- prune_certificates: rows come in roughly notAfter order, so a BRIN index
-- finds the expired ones for a fraction of a btree's cost to every issuance.
CREATE INDEX node_certs_not_after_idx ON bc_join.node_certs USING brin (not_after);
-- bc_join.metrics() (#48): live and expiring certificates counted from this
-- alone (an index-only scan), never from the certificates' pages.
CREATE INDEX node_certs_live_idx ON bc_join.node_certs (not_after) WHERE revoked_at IS NULL;

-- A stable hardware identity (32-byte hash) bound to one node for good, per
-- attestor: one attestor's binding is never matched by another's result.
CREATE TABLE bc_join.node_bindings (
	attestor text NOT NULL,
	subject bc_join.sha256 NOT NULL,
	node_id text NOT NULL REFERENCES bc_join.nodes (id) ON DELETE CASCADE,
	created_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	PRIMARY KEY (attestor, subject)
);
COMMENT ON TABLE bc_join.node_bindings IS
	'Stable hardware identities (per attestor and subject) bound to one node for good: a machine that joins again is that node.';
CREATE INDEX node_bindings_node_idx ON bc_join.node_bindings (node_id);

-- Retire a node: state retired, certificates revoked, bindings dropped.
CREATE FUNCTION bc_join.retire_node(node_id text) RETURNS void
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
COMMENT ON FUNCTION bc_join.retire_node(text) IS
	'Retires a node (state retired, certificates revoked, bindings dropped); returns nothing.';

-- Delete a node with its certificates and bindings.
CREATE FUNCTION bc_join.delete_node(node_id text) RETURNS void
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
COMMENT ON FUNCTION bc_join.delete_node(text) IS
	'Deletes a node with its certificates and bindings; returns nothing.';

/* --------------------------------------------------------- join tokens */

CREATE TABLE bc_join.join_tokens (
	id text PRIMARY KEY,
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	pool_id text REFERENCES bc_join.pools (id),
	site_id text REFERENCES bc_join.sites (id),
	secret_sha256 bc_join.sha256 NOT NULL,
	uses_total integer NOT NULL CHECK (uses_total >= 1),
	uses_left integer NOT NULL CHECK (uses_left >= 0 AND uses_left <= uses_total),
	expires_at timestamptz NOT NULL,
	role text NOT NULL CHECK (bc_join.are_agent_roles(ARRAY[role])),
	expect jsonb CHECK (expect IS NULL OR jsonb_typeof(expect) = 'object'),
	allow_reclaim boolean NOT NULL DEFAULT false,
	created_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	created_by text NOT NULL DEFAULT session_user,
	revoked_at timestamptz,
	CHECK (site_id IS NOT NULL OR pool_id IS NOT NULL)
);
COMMENT ON TABLE bc_join.join_tokens IS
	'Join tokens: only their secret''s SHA-256, uses, expiry, role, expected claims, reclaim, revocation and the pool or site they admit into.';
CREATE INDEX join_tokens_tenant_idx ON bc_join.join_tokens (tenant_id);

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
COMMENT ON FUNCTION bc_join.create_join_token(text, text, integer, interval, text, jsonb, boolean, text) IS
	'Creates a join token for a pool (or a site) with a number of uses, a lifetime, a role and optional expected claims, and returns "<id>.<secret>", shown this once (only the secret''s SHA-256 is stored).';

-- Revoke a join token: no further join can use it.
CREATE FUNCTION bc_join.revoke_join_token(token_id text) RETURNS boolean
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
COMMENT ON FUNCTION bc_join.revoke_join_token(text) IS
	'Revokes a join token so that no further join can use it; returns true when it was revoked now, false when it was unknown or already revoked.';

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
COMMENT ON FUNCTION bc_join.check_join_token(text, text, jsonb) IS
	'Checks a join token without spending it (secret, revocation, expiry, uses, role, expected claims) and returns {tokenId, tenantId, poolId, siteId, role, allowReclaim}, or refuses ''<attestor>:<reason>''.';

-- Spend one use of a token checked in this transaction (final round only).
-- In a repeat of a final round (docs/attestors.md, "Repeats") the use was
-- spent by the certificate asked for again, and everything the attestor
-- writes is rolled back: nothing is spent.
CREATE FUNCTION bc_join.spend_join_token(token_id text) RETURNS void
	LANGUAGE plpgsql
	SET search_path = pg_catalog, pg_temp
	AS $$
BEGIN
	IF bc_join.join_round_csr_sha256(true) IS NOT NULL THEN
		RETURN;
	END IF;
	UPDATE bc_join.join_tokens t SET uses_left = t.uses_left - 1
		WHERE t.id = spend_join_token.token_id AND t.uses_left > 0;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'join token % has no use left to spend', token_id
			USING HINT = 'Check the token with bc_join.check_join_token() in the same transaction first.';
	END IF;
END
$$;
COMMENT ON FUNCTION bc_join.spend_join_token(text) IS
	'Spends one use of a join token checked in this transaction (final round only; in a repeat of one, nothing: the certificate spent it); returns nothing.';

/* ------------------------------------------------- provisioning tokens */

-- A one-time token for a node that exists (the provisioned attestor): a
-- machine re-imaged, or one the operator moves, comes back as that node.
CREATE TABLE bc_join.provisioning_tokens (
	id text PRIMARY KEY CHECK (id ~ '^pt_[0-9a-f]{32}$'),
	node_id text NOT NULL REFERENCES bc_join.nodes (id) ON DELETE CASCADE,
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	secret_sha256 bc_join.sha256 NOT NULL,
	expires_at timestamptz NOT NULL,
	created_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	created_by text NOT NULL DEFAULT session_user,
	spent_at timestamptz,
	revoked_at timestamptz
);
COMMENT ON TABLE bc_join.provisioning_tokens IS
	'One-time tokens for an existing node (the provisioned attestor): only their secret''s SHA-256, expiry, spent and revoked times.';
CREATE INDEX provisioning_tokens_node_idx ON bc_join.provisioning_tokens (node_id);

-- An optional resolver: maps the nodeId a provisioned agent names to a node id.
CREATE TABLE bc_join.provisioning_resolver (
	one boolean PRIMARY KEY DEFAULT true CHECK (one),
	resolve text NOT NULL,				-- the function, as regprocedure's text (see bc_join.attestors.verify)
	registered_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	registered_by text NOT NULL DEFAULT session_user
);
COMMENT ON TABLE bc_join.provisioning_resolver IS
	'At most one row: the function that maps the nodeId a provisioned agent names to a node id (superuser).';

-- A one-time provisioning token for an existing node; returned once, only its hash is stored.
CREATE FUNCTION bc_join.create_provisioning_token(node_id text, ttl interval DEFAULT '1 hour')
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
COMMENT ON FUNCTION bc_join.create_provisioning_token(text, interval) IS
	'Creates a one-time provisioning token for an existing node (the provisioned attestor: the machine comes back as that node) and returns it once; only its hash is stored.';

-- Revoke a provisioning token that was not used yet.
CREATE FUNCTION bc_join.revoke_provisioning_token(token_id text) RETURNS boolean
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
COMMENT ON FUNCTION bc_join.revoke_provisioning_token(text) IS
	'Revokes a provisioning token not used yet; returns whether one was revoked.';

-- Register (or with NULL remove) the resolver of provisioned joins:
-- resolve(node_ref text, context jsonb) RETURNS text, the node id that the
-- nodeId an agent names stands for (NULL: none).  Superuser only.
CREATE FUNCTION bc_join.register_provisioning_resolver(resolve regprocedure) RETURNS void
	LANGUAGE plpgsql
	SET search_path = pg_catalog, pg_temp
	AS $$
BEGIN
	IF resolve IS NULL THEN
		DELETE FROM bc_join.provisioning_resolver;
		INSERT INTO bc_join.audit_log (action, detail) VALUES ('provisioning_resolver.remove', '{}');
		RETURN;
	END IF;
	PERFORM bc_join.check_callback(resolve, 'resolver', ARRAY['text', 'jsonb']::regtype[], 'text',
		'resolve must be a function (node_ref text, context jsonb) RETURNS text');
	INSERT INTO bc_join.provisioning_resolver AS r (resolve) VALUES (resolve)
		ON CONFLICT (one) DO UPDATE SET resolve = EXCLUDED.resolve,
			registered_at = EXCLUDED.registered_at, registered_by = EXCLUDED.registered_by;
	INSERT INTO bc_join.audit_log (action, detail)
		VALUES ('provisioning_resolver.register', jsonb_build_object('resolve', resolve::text));
END
$$;
COMMENT ON FUNCTION bc_join.register_provisioning_resolver(regprocedure) IS
	'Registers the function (node_ref text, context jsonb) RETURNS text that maps the nodeId a provisioned agent names to a node id (NULL removes it); superuser only.';

/* ------------------------------------------------------------ sessions */

-- A session identity on a node, reserved when the session first asks.
CREATE TABLE bc_join.sessions (
	id text PRIMARY KEY,
	node_id text NOT NULL REFERENCES bc_join.nodes (id) ON DELETE CASCADE,
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	session_ref bc_join.selector NOT NULL CHECK (session_ref <> ''),
	context_ref bc_join.selector NOT NULL DEFAULT '',
	provisioned_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	UNIQUE (node_id, session_ref, context_ref)
);
COMMENT ON TABLE bc_join.sessions IS
	'Session identities on nodes (node, session and context selectors), reserved when a session first asks.';

CREATE TABLE bc_join.session_certs (
	serial text PRIMARY KEY CHECK (serial ~ '^[0-9a-f]{32}$'),
	session_id text NOT NULL REFERENCES bc_join.sessions (id) ON DELETE CASCADE,
	not_before timestamptz NOT NULL,
	not_after timestamptz NOT NULL,
	spki_sha256 bc_join.sha256 NOT NULL,
	certificate bytea NOT NULL,
	-- the node certificate the session was asked with: revoking it revokes this
	node_serial text,
	issued_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	revoked_at timestamptz,
	-- an operator's RFC 5280 reason (revoke_certificate, or its node certificate's), or retired
	revocation_reason text,
	-- the process that asked bcd for it, as the host claims (signed by the node
	-- key): {"pid", "exe", "unit", "cgroup"}; NULL from a bcd that sends none
	caller jsonb,
	CONSTRAINT session_certs_revocation_reason_check CHECK (revocation_reason = ANY ('{unspecified,keyCompromise,cACompromise,affiliationChanged,superseded,cessationOfOperation,privilegeWithdrawn,aACompromise,retired,attestation-failed}'::text[]))
);
COMMENT ON TABLE bc_join.session_certs IS
	'Every session certificate issued: serial, session, validity, the session key''s SPKI SHA-256, the DER, the node certificate it was proven with, the caller bcd saw, and its revocation.';
CREATE INDEX session_certs_node_serial_idx ON bc_join.session_certs (node_serial);
CREATE INDEX session_certs_session_idx ON bc_join.session_certs (session_id);
CREATE INDEX session_certs_spki_idx ON bc_join.session_certs (spki_sha256);
CREATE INDEX session_certs_not_after_idx ON bc_join.session_certs USING brin (not_after);
-- bc_join.metrics() (#48): live session certificates, as node_certs_live_idx.
CREATE INDEX session_certs_live_idx ON bc_join.session_certs (not_after) WHERE revoked_at IS NULL;

/* ------------------------------ join requests: approval by an operator */

CREATE TABLE bc_join.join_requests (
	id text PRIMARY KEY,
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	attestor text NOT NULL,
	role text NOT NULL CHECK (bc_join.are_agent_roles(ARRAY[role])),
	csr_sha256 bc_join.sha256 NOT NULL,
	claims jsonb NOT NULL DEFAULT '{}',
	state text NOT NULL DEFAULT 'pending'
		CHECK (state = ANY ('{pending,approved,rejected,consumed}'::text[])),
	detail jsonb NOT NULL DEFAULT '{}',	-- the attestor's own notes for the operator
	reason text,						-- the operator's, on reject
	created_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	decided_at timestamptz,
	decided_by text,
	consumed_at timestamptz,
	expires_at timestamptz NOT NULL,
	token_id text						-- the token the attestor checked (detail's tokenId)
);
COMMENT ON TABLE bc_join.join_requests IS
	'Joins that wait for an operator (pending, approved, rejected, consumed), bound to the CSR they were made for, with their claims, detail and expiry.';
CREATE INDEX join_requests_pending_idx ON bc_join.join_requests (created_at)
	WHERE state = 'pending';
-- The bounds of create_join_request: pending requests per token, per tenant.
CREATE INDEX join_requests_pending_token_idx ON bc_join.join_requests (token_id)
	WHERE state = 'pending';
CREATE INDEX join_requests_pending_tenant_idx ON bc_join.join_requests (tenant_id)
	WHERE state = 'pending';

/*
 * Record a join request waiting for an operator, for the CSR of context, and
 * tell watchers: NOTIFY on the tenant's request_channel (no payload: "look";
 * bc_join.request_channel(tenant) names it to the tenant's operators), and a
 * join_request.pending event in the tenant's stream.  Returns the id.  At
 * most bc_join.pending_requests_per_token requests wait for one token (the
 * tokenId of detail, which the attestor checked) and
 * bc_join.pending_requests_per_tenant for one tenant; beyond that the join
 * is refused '<attestor>:pending-token-limit' or ':pending-tenant-limit'.
 */
CREATE FUNCTION bc_join.create_join_request(tenant_id text, attestor text, context jsonb,
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
	-- told on the tenant's own channel only, its random request_channel
	-- (LISTEN needs no grant: a channel every tenant's requests reach, or one
	-- named after the tenant's id, which every certificate of the tenant
	-- shows, would tell any role that can log in when the tenant's requests
	-- begin waiting)
	PERFORM pg_notify(t.request_channel, '') FROM bc_join.tenants t
		WHERE t.id = create_join_request.tenant_id;
	RETURN rid;
END
$$;
COMMENT ON FUNCTION bc_join.create_join_request(text, text, jsonb, jsonb) IS
	'Records a join request for the CSR of context that waits for an operator (refused beyond bc_join.pending_requests_per_token for detail''s tokenId, or bc_join.pending_requests_per_tenant), notifies the tenant''s random request_channel and its event stream, and returns the request id.';

-- The NOTIFY channel of a tenant's waiting join requests, for its operators.
CREATE FUNCTION bc_join.request_channel(tenant_id text) RETURNS text
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
BEGIN
	PERFORM bc_join.check_tenant(request_channel.tenant_id, 'tenant');
	RETURN (SELECT t.request_channel FROM bc_join.tenants t WHERE t.id = request_channel.tenant_id);
END
$$;
COMMENT ON FUNCTION bc_join.request_channel(text) IS
	'Returns the random channel on which the tenant''s waiting join requests are notified (LISTEN on it); to the tenant''s operators and the platform operator only.';

-- The NOTIFY channel of a tenant's refused joins, for its operators (#48):
-- told {"event","type","attestor","refusal","at"[,"suppressedBefore"]} each
-- time a security.join.refused event is recorded in the tenant's stream.
CREATE FUNCTION bc_join.refusal_channel(tenant_id text) RETURNS text
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
BEGIN
	PERFORM bc_join.check_tenant(refusal_channel.tenant_id, 'tenant');
	RETURN (SELECT t.refusal_channel FROM bc_join.tenants t WHERE t.id = refusal_channel.tenant_id);
END
$$;
COMMENT ON FUNCTION bc_join.refusal_channel(text) IS
	'Returns the random channel on which the tenant''s refused joins are notified as they are recorded as events (LISTEN on it; payload: event id, type, attestor, refusal, time, no evidence); to the tenant''s operators and the platform operator only.';

-- New channels for a tenant's requests and refusals (after an operator of it was revoked).
CREATE FUNCTION bc_join.rotate_request_channel(tenant_id text) RETURNS text
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	chan text := bc_join.new_id('bc_join_requests');
BEGIN
	PERFORM bc_join.check_tenant(rotate_request_channel.tenant_id, 'tenant');
	UPDATE bc_join.tenants t SET request_channel = chan, refusal_channel = bc_join.new_id('bc_join_refusals')
		WHERE t.id = rotate_request_channel.tenant_id;
	IF NOT FOUND THEN
		PERFORM bc_join.invalid_input('the tenant does not exist');
	END IF;
	INSERT INTO bc_join.audit_log (action, tenant_id, detail)
		VALUES ('tenant.request_channel.rotate', rotate_request_channel.tenant_id, '{}');
	RETURN chan;
END
$$;
COMMENT ON FUNCTION bc_join.rotate_request_channel(text) IS
	'Gives the tenant a new random request channel and refusal channel and returns the request channel (the old ones are told nothing more): after revoking one of its operators, who knew the old ones; audited.';

/*
 * Consume an approved join request in the round that issues: it must be
 * approved and made for this CSR.  Refuses '<attestor>:<reason>' otherwise.
 * In a repeat, the request consumed for this CSR is the certificate's own
 * approval: found consumed by it, nothing changed.
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
COMMENT ON FUNCTION bc_join.await_approval(text, text, jsonb, jsonb, integer) IS
	'Runs the approval round of an attestor: returns a deferral while the join request is new or pending, NULL once it is approved (and consumed), and refuses ''<attestor>:rejected'' when it was rejected or ''<attestor>:request-expired'' once bc_join.join_request_ttl has passed.';

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

-- Approve a pending join request: the agent's next retry completes the join.
CREATE FUNCTION bc_join.approve_join_request(request_id text) RETURNS void
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
COMMENT ON FUNCTION bc_join.approve_join_request(text) IS
	'Approves a pending join request so that the agent''s next retry completes the join; returns nothing.';

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
COMMENT ON FUNCTION bc_join.reject_join_request(text, text) IS
	'Rejects a pending join request with a reason so that the agent''s next retry is refused; returns nothing.';

/* ------------------------------------------------- single-use evidence */

-- The SHA-256 of the running join round's CSR, NULL outside one (with
-- repeat_only, outside a round that repeats a final round for the
-- certificate its CSR holds): what a use records, and how a repeat finds
-- what the round that issued its certificate spent.
CREATE FUNCTION bc_join.join_round_csr_sha256(repeat_only boolean DEFAULT false) RETURNS bytea
	AS 'MODULE_PATHNAME', 'bc_join_round_csr_sha256' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION bc_join.join_round_csr_sha256(boolean) IS
	'Returns the SHA-256 of the running join round''s CSR (NULL outside one; with repeat_only, NULL outside a repeat of a final round): the default of attestation_uses.csr_sha256.';

-- One row per piece of evidence
-- that must admit one join at most.
CREATE TABLE bc_join.attestation_uses (
	attestor text NOT NULL,
	subject bc_join.sha256 NOT NULL,                     -- sha256 of what must be used once
	node_id text,
	used_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	expires_at timestamptz,                              -- NULL keeps it forever
	-- the CSR of the join round that spent it (NULL: no join's): a repeat of
	-- that round finds it spent by the very certificate it asks for
	csr_sha256 bc_join.sha256 DEFAULT bc_join.join_round_csr_sha256(),
	PRIMARY KEY (attestor, subject)
);
COMMENT ON TABLE bc_join.attestation_uses IS
	'Single-use evidence: one row per (attestor, subject hash) consumed, kept until expires_at (NULL: for ever) so a replay is refused.';

CREATE INDEX attestation_uses_expires_idx ON bc_join.attestation_uses (expires_at)
	WHERE expires_at IS NOT NULL;
-- A repeat of a final round finds the uses its certificate's round spent.
CREATE INDEX attestation_uses_csr_idx ON bc_join.attestation_uses (csr_sha256)
	WHERE csr_sha256 IS NOT NULL;

-- A registered attestor's challenge: its notAfter for the CSR it was made
-- to, recorded at the deferral (a new challenge replaces it) and enforced
-- at every final round of that attestor for that CSR
-- ('<attestor>:challenge-expired'), whatever the attestor's own state says.
-- prune_attestation_uses deletes a row bc_join.retain_join_requests (30
-- days) after its notAfter.
CREATE TABLE bc_join.challenge_deadlines (
	attestor text NOT NULL,
	csr_sha256 bc_join.sha256 NOT NULL,
	not_after timestamptz NOT NULL,
	PRIMARY KEY (attestor, csr_sha256)
);
COMMENT ON TABLE bc_join.challenge_deadlines IS
	'A registered attestor''s challenge: its notAfter for the CSR it was made for, so a final round after it is refused challenge-expired.';
CREATE INDEX challenge_deadlines_not_after_idx ON bc_join.challenge_deadlines (not_after);

-- Mark that single-use evidence was consumed in the running join round.
CREATE FUNCTION bc_join.note_single_use_round() RETURNS void
	AS 'MODULE_PATHNAME', 'bc_note_single_use_round' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION bc_join.note_single_use_round() IS
	'Internal: marks that single-use evidence was consumed in the running join round; returns nothing.';

-- Trigger: single-use evidence was consumed in the running join round.
CREATE FUNCTION bc_join.note_single_use() RETURNS trigger
	AS 'MODULE_PATHNAME', 'bc_note_single_use' LANGUAGE C;
COMMENT ON FUNCTION bc_join.note_single_use() IS
	'Trigger on attestation_uses: marks that single-use evidence was consumed in the running join round.';
CREATE TRIGGER attestation_uses_single_use AFTER INSERT ON bc_join.attestation_uses
	FOR EACH STATEMENT EXECUTE FUNCTION bc_join.note_single_use();
CREATE TRIGGER join_tokens_single_use AFTER UPDATE OF uses_left ON bc_join.join_tokens
	FOR EACH STATEMENT EXECUTE FUNCTION bc_join.note_single_use();

/*
 * Use a piece of evidence once: insert (attestor, subject) into
 * attestation_uses, or refuse '<attestor>:reused'.  subject is the SHA-256 of
 * what must be used once; expires_at NULL keeps the row forever.  Call it
 * only in the round that returns a result: JoinService fails a round that
 * consumed single-use evidence and then deferred.  In a repeat (a final
 * round repeated with the CSR of a current certificate) a use spent with
 * that CSR is the certificate's own: found spent by it, not refused.
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

/* --------------------- attestors: the registry and what attestors call */

-- Custom attestors: SQL functions (evidence jsonb, context jsonb) RETURNS jsonb.
-- One registered with id 'join-token' replaces the built-in one.
CREATE TABLE bc_join.attestors (
	id text PRIMARY KEY CHECK (id ~ '^[a-z0-9._-]{1,64}$'),
	version text NOT NULL CHECK (length(version) BETWEEN 1 AND 64),
	roles text[] NOT NULL
		CHECK (bc_join.are_agent_roles(roles)),
	-- The function, as regprocedure's schema-qualified text: a column of type
	-- regprocedure holds an OID, which pg_upgrade refuses in any table (OIDs
	-- of functions change), and which pg_dump would have to write as text
	-- anyway.  Resolved (to_regprocedure) each time the registry is read.
	verify text NOT NULL,
	registered_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	registered_by text NOT NULL DEFAULT session_user
);
COMMENT ON TABLE bc_join.attestors IS
	'Custom attestors registered with register_attestor: id, version, the roles they may admit and their verify function.';

-- Any change to the registry: every backend forgets the attestors it cached.
CREATE FUNCTION bc_join.attestors_changed() RETURNS trigger
	AS 'MODULE_PATHNAME', 'bc_attestors_changed' LANGUAGE C;
COMMENT ON FUNCTION bc_join.attestors_changed() IS
	'Trigger on attestors: makes every backend forget the attestors it cached.';
CREATE TRIGGER attestors_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE
	ON bc_join.attestors FOR EACH STATEMENT EXECUTE FUNCTION bc_join.attestors_changed();

-- base64url without padding, as JoinRequest fields and context hashes use it.
CREATE FUNCTION bc_join.b64url_encode(data bytea) RETURNS text
	AS 'MODULE_PATHNAME', 'bc_b64url_encode_sql' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION bc_join.b64url_encode(bytea) IS
	'Returns data encoded as base64url without padding.';
CREATE FUNCTION bc_join.b64url_decode(data text) RETURNS bytea
	AS 'MODULE_PATHNAME', 'bc_b64url_decode_sql' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION bc_join.b64url_decode(text) IS
	'Returns the bytes of base64url text without padding; raises an error on malformed input.';

-- ECDSA P-256 / SHA-256 verification (OpenSSL): public key as PEM
-- SubjectPublicKeyInfo, signature DER or raw r||s.  For attestors that check
-- a vendor's signature.
CREATE FUNCTION bc_join.ecdsa_verify(public_key_pem text, message bytea, signature bytea)
	RETURNS boolean
	AS 'MODULE_PATHNAME', 'bc_ecdsa_verify_sql' LANGUAGE C IMMUTABLE STRICT;
COMMENT ON FUNCTION bc_join.ecdsa_verify(text, bytea, bytea) IS
	'Verifies an ECDSA P-256 / SHA-256 signature (DER or raw r||s) over message with a PEM SubjectPublicKeyInfo public key and returns whether it holds.';

-- Register (or re-register) a custom attestor.  Superuser only: verify runs
-- inside every join with the JoinService's rights.
CREATE FUNCTION bc_join.register_attestor(id text, version text, roles text[], verify regprocedure)
	RETURNS void
	LANGUAGE plpgsql
	SET search_path = pg_catalog, pg_temp
	AS $$
BEGIN
	IF id IS NULL OR id !~ '^[a-z0-9._-]{1,64}$' THEN
		PERFORM bc_join.invalid_input('an attestor id is 1 to 64 of a-z, 0-9, ''.'', ''_'' and ''-''');
	END IF;
	IF NOT coalesce(bc_join.are_agent_roles(roles), false) THEN
		PERFORM bc_join.invalid_input('roles must be a non-empty subset of node, site and ramdisk');
	END IF;
	IF version IS NULL OR length(version) NOT BETWEEN 1 AND 64 THEN
		PERFORM bc_join.invalid_input('version must be 1 to 64 characters');
	END IF;
	PERFORM bc_join.check_callback(verify, 'verify function', ARRAY['jsonb', 'jsonb']::regtype[], 'jsonb',
		'verify must be a function (evidence jsonb, context jsonb) RETURNS jsonb');
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
COMMENT ON FUNCTION bc_join.register_attestor(text, text, text[], regprocedure) IS
	'Registers (or re-registers) a custom attestor: its id, version, the roles it may admit and its verify function, which must carry its own SET search_path; superuser only; returns nothing.';

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
COMMENT ON FUNCTION bc_join.unregister_attestor(text) IS
	'Removes a custom attestor, so that a built-in with the same id takes over again; returns true when one was removed.';

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
COMMENT ON FUNCTION bc_join.seal_challenge_state(text, jsonb, timestamptz) IS
	'Seals an attestor''s challenge state under challenge.key (AEAD), bound to the attestor, the CSR, the role and notAfter; returns it as text for the challenge (call it in the round that defers).';

/*
 * The plaintext of a state sealed by seal_challenge_state in the round
 * before; refuses '<attestor>:state-mismatch' (it does not open, or was
 * sealed for another attestor, CSR or role) and
 * '<attestor>:challenge-expired' (compute_now() past its notAfter).
 */
CREATE FUNCTION bc_join.open_challenge_state(attestor text, state text)
	RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_open_challenge_state_sql' LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION bc_join.open_challenge_state(text, text) IS
	'Opens challenge state sealed in an earlier round and returns its plaintext, or refuses ''<attestor>:state-mismatch'' or ''<attestor>:challenge-expired''.';

/* -------------------- the join and the requests proven by the node key */

/*
 * One join round: the entry point the contract names, callable unqualified.
 * Returns {"status", "response"} for a result or a deferral and
 * {"status":"refused","error":{...}} for every refusal; raises 22023 for
 * malformed input (a NULL request too: not STRICT, so that it is an error
 * and not a silent NULL) and 0A000 for an unknown attestor.
 */
CREATE FUNCTION public.bc_join(request jsonb) RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_join_request'
	LANGUAGE C VOLATILE CALLED ON NULL INPUT SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION public.bc_join(jsonb) IS
	'Runs one join round of a JoinRequest in this transaction (attestor, node, certificate, bindings, events, audit) and returns {"status", "response"}: the signed result or deferral, or the one uniform refusal.';

/*
 * The operator's diagnostic (#42.8): evidence captured from a machine (a
 * cloud's signed document, TPM evidence, ...) verified by the attestor's own
 * code, as a join round verifies it, at the time `at` (default: now), in a
 * subtransaction always rolled back: nothing is admitted, written or spent,
 * and no refusal is recorded.  csr: the DER CSR the evidence was made for,
 * when there is one (checks that bind the evidence to it are listed as
 * unchecked without it); no sealed join token is taken (checks a token
 * satisfies are listed as unchecked).  The platform operator's alone: it
 * reads every tenant's configuration.
 */
CREATE FUNCTION bc_join.check_evidence(attestor text, evidence bytea, at timestamptz DEFAULT NULL,
									   csr bytea DEFAULT NULL, role text DEFAULT 'node')
	RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_check_evidence_sql'
	LANGUAGE C VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION bc_join.check_evidence(text, bytea, timestamptz, bytea, text) IS
	'Verifies an attestor''s evidence bytes as a join round would, at the time at (default now; the CSR it was made for if given), admitting, writing and spending nothing; returns {ok, attestor, at, outcome (result, challenge, approval, refused), refusal, result, read (what the attestor read: account, instance, EK, AK ...), unchecked (what needs the CSR or a token)}.';

/*
 * Renew a node certificate: {"csr": <new key's CSR>, "proof": <JWS by the
 * current key over purpose, serial, csrSha256, iat>}.  Answers like a join:
 * the signed "issued" response or the one refusal.  See docs/protocol.md.
 */
CREATE FUNCTION bc_join.renew(request jsonb) RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_renew_request'
	LANGUAGE C VOLATILE STRICT SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION bc_join.renew(jsonb) IS
	'Renews a node certificate from a CSR for a new key and a proof signed by the current node key; returns the signed "issued" response or the one refusal, as a join does.';

/*
 * A session credential for a joined node: {"csr": <session key's CSR>,
 * "proof": <JWS by the node key over purpose "session", serial, csrSha256,
 * iat, session, context>}.  See docs/sessions.md.
 */
CREATE FUNCTION bc_join.issue_session(request jsonb) RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_issue_session_request'
	LANGUAGE C VOLATILE STRICT SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION bc_join.issue_session(jsonb) IS
	'Issues a session credential to a joined node from a session key''s CSR and a proof signed by the node key; returns the signed response or the one refusal (docs/sessions.md).';

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

/*
 * Refuse the join under way: raises the uniform refusal (SQLSTATE JR001)
 * carrying refusal ('<attestor>:<reason>') and, once evidence authenticated
 * one, the tenant whose event stream records it.  Never returns.
 */
CREATE FUNCTION bc_join.refuse(refusal text, tenant_id text DEFAULT NULL) RETURNS void
	AS 'MODULE_PATHNAME', 'bc_refuse' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION bc_join.refuse(text, text) IS
	'Refuses the join under way with the uniform refusal (SQLSTATE JR001) carrying ''<attestor>:<reason>'' and, when known, the tenant whose events record it; never returns.';

/* ---------------------------------------------------- the service keys */

-- The public JWK that signs every JoinResponse (agents pin it).
CREATE FUNCTION bc_join.signing_jwk() RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_signing_jwk' LANGUAGE C STABLE;
COMMENT ON FUNCTION bc_join.signing_jwk() IS
	'Returns the public JWK of the key that signs every JoinResponse (agents pin it).';

-- The public JWK that sealed tokens are encrypted to.
CREATE FUNCTION bc_join.encryption_jwk() RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_encryption_jwk' LANGUAGE C STABLE;
COMMENT ON FUNCTION bc_join.encryption_jwk() IS
	'Returns the public JWK that sealed join tokens are encrypted to.';

-- The node CA certificate, PEM.
CREATE FUNCTION bc_join.node_ca_certificate() RETURNS text
	AS 'MODULE_PATHNAME', 'bc_node_ca_certificate' LANGUAGE C STABLE;
COMMENT ON FUNCTION bc_join.node_ca_certificate() IS
	'Returns the node CA certificate as PEM.';

-- Everything an agent pins, in one document: trustDomain, signingKey and
-- encryptionKey (the current ones), signingKeys and encryptionKeys (every
-- key in key_dir with its kid, the current one first), jwtKeys (the
-- jwt-svid keys, current first, each with its kid), nodeCa (node-ca.crt:
-- the issuing CA, then its chain to the root), issuedAt and signed (the
-- document with issuedAt signed by the current signing key: the time agents
-- pin, so that no older rollover is taken up).  Hand it to bcd as
-- --service-keys.
CREATE FUNCTION bc_join.service_keys() RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_service_keys' LANGUAGE C STABLE;
COMMENT ON FUNCTION bc_join.service_keys() IS
	'Returns everything an agent pins in one document, {trustDomain, signingKey, encryptionKey, signingKeys, encryptionKeys, jwtKeys, nodeCa, issuedAt, signed}, to hand to bcd as --service-keys; jwtKeys are the jwt-svid keys'' public JWKs with their kids, jwt-svid.key''s first (the one that signs), then jwt-svid.next.key''s and jwt-svid.previous.key''s (empty without jwt-svid.key); signed is the document with issuedAt signed by the current signing key.';

-- The rollover agents accept: {"keys": [JWS...]}, service_keys() without
-- signed, signed once by each signing key in key_dir (the gateway's
-- GET /v1/service-keys).  An agent replaces its pinned set with one signed
-- by a key it already pins.
CREATE FUNCTION bc_join.signed_service_keys() RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_signed_service_keys' LANGUAGE C STABLE;
COMMENT ON FUNCTION bc_join.signed_service_keys() IS
	'Returns {keys: [JWS...]}: service_keys() without signed, signed by each signing key in key_dir, the rollover agents accept when it is signed by a key they pin and is not older than the set they pin.';

-- The SPIFFE bundle of the trust domain (a JWKS): the node CA roots as
-- x509-svid keys, jwt-svid.key as the jwt-svid key, spiffe_sequence (by
-- the keys: own_bundle_sequence, #46 federation) and spiffe_refresh_hint.
-- The gateway serves it at GET /v1/spiffe-bundle.
-- VOLATILE since 0.6.0: the first call with new keys records their sequence.
CREATE FUNCTION bc_join.spiffe_bundle() RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_spiffe_bundle' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION bc_join.spiffe_bundle() IS
	'Returns the trust domain''s SPIFFE bundle, {keys, spiffe_sequence, spiffe_refresh_hint}: an x509-svid key (with x5c) for each root of the node CA chain and the jwt-svid key (with its kid) when key_dir has jwt-svid.key; spiffe_sequence is the one own_bundle_sequence() gave these keys (the same on every HA node, higher for new keys).';

/* ------------------------------- events, refusals and the issuance log */

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
COMMENT ON TABLE bc_join.refusal_rate IS
	'The rate bound of security.join.refused events: per attestor and refusal, the current minute''s recorded and suppressed counts.';

CREATE TABLE bc_join.events (
	id bigserial PRIMARY KEY,
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	type text NOT NULL,
	payload jsonb NOT NULL DEFAULT '{}',
	at timestamptz NOT NULL DEFAULT bc_join.compute_now()
);
COMMENT ON TABLE bc_join.events IS
	'What happened, per tenant: type (node.joined, security.join.refused, ...), payload and time; NOTIFY goes to each tenant''s channel.';
CREATE INDEX events_tenant_at_idx ON bc_join.events (tenant_id, at);
-- prune_events: appended in time order, so BRIN (small, cheap for joins).
CREATE INDEX events_at_idx ON bc_join.events USING brin (at);

-- The issuance log: every row carries the hash of the row before it in its
-- chain and its own (16 hash chains, bc_join.audit_chain below), so that
-- history cannot be rewritten without it showing (verify_audit_log,
-- tools/bc-audit-verify).
CREATE TABLE bc_join.audit_log (
	id bigserial NOT NULL,
	at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	actor text NOT NULL DEFAULT session_user,
	action text NOT NULL,
	tenant_id text,
	node_id text,
	detail jsonb NOT NULL DEFAULT '{}',
	chain smallint NOT NULL DEFAULT 0 CHECK (chain >= 0 AND chain < 16),
	prev_hash bytea NOT NULL,			-- the hash of the chain's row before (32 zero bytes for its first)
	hash bytea NOT NULL,				-- SHA-256(prev_hash || bc_join.audit_content(row))
	-- Each chain's last row, and each chain in id order (verify_audit_log).  No
	-- index on id alone: the trigger's generic plan would walk it backwards
	-- filtering on the chain, through the whole log for a chain not used lately.
	PRIMARY KEY (chain, id)
);
COMMENT ON TABLE bc_join.audit_log IS
	'The issuance log: every administrative action and issuance with its actor, in 16 hash chains, append-only (verify_audit_log, audit_anchor).';

-- What a row's hash covers: each field length-prefixed (octets:value|), the
-- time as microseconds since the Unix epoch, NULL as '-'.  The same bytes
-- tools/bc-audit-verify computes from an export (bc_join.audit_export).
CREATE FUNCTION bc_join.audit_content(id bigint, at timestamptz, actor text, action text,
									  tenant_id text, node_id text, detail jsonb)
	RETURNS bytea
	AS 'MODULE_PATHNAME', 'bc_audit_content'
	LANGUAGE C IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION bc_join.audit_content(bigint, timestamptz, text, text, text, text, jsonb) IS
	'Returns the bytes an issuance log row''s hash covers: each field length-prefixed, the time in microseconds since the Unix epoch.';

-- The chain this transaction appends to, locked to its end (src/ext/locks.c):
-- the first of the 16 no other transaction holds, from its backend's own
-- (pid % 16) on; its own when all are held, waiting for it.  A lock tag no
-- SQL function makes: pg_advisory_xact_lock, which served here before, is a
-- keyspace every role of the cluster shares, and any role that could log in
-- could have held the 16 chains and stopped every join (issue 26).
CREATE FUNCTION bc_join.audit_chain_take() RETURNS smallint
	AS 'MODULE_PATHNAME', 'bc_audit_chain_take'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION bc_join.audit_chain_take() IS
	'Internal: the issuance log chain this transaction appends to, locked to its end by a lock no SQL function can take (pg_locks: advisory, objsubid 3); for the audit_chain trigger.';

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
CREATE FUNCTION bc_join.audit_chain() RETURNS trigger
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
CREATE TRIGGER audit_chain BEFORE INSERT ON bc_join.audit_log
	FOR EACH ROW EXECUTE FUNCTION bc_join.audit_chain();
-- The log is appended to, never rewritten in place.
CREATE FUNCTION bc_join.audit_append_only() RETURNS trigger
	LANGUAGE plpgsql
	SET search_path = pg_catalog, pg_temp
	AS $$
BEGIN
	RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
		MESSAGE = 'the issuance log is append-only',
		HINT = 'Rows are never updated or deleted; bc_join.verify_audit_log() would show it.';
END
$$;
CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON bc_join.audit_log
	FOR EACH STATEMENT EXECUTE FUNCTION bc_join.audit_append_only();

-- The log as tools/bc-audit-verify reads it (psql \copy ... CSV HEADER).
-- Each field as it goes into the hash (NULL as '-'), so that no tool has to
-- tell a NULL from an empty string in CSV.
CREATE VIEW bc_join.audit_export AS
	SELECT id, (extract(epoch FROM at) * 1000000)::bigint AS at_us, actor, action,
		   coalesce(tenant_id, '-') AS tenant_id, coalesce(node_id, '-') AS node_id,
		   detail::text AS detail, chain, encode(prev_hash, 'hex') AS prev_hash, encode(hash, 'hex') AS hash
	FROM bc_join.audit_log ORDER BY id;
COMMENT ON VIEW bc_join.audit_export IS
	'The issuance log as tools/bc-audit-verify reads it offline (psql \\copy ... CSV HEADER).';

-- Check the hash chains of the issuance log; the first rows that do not
-- hold, with why (altered: its hash is not its content's; removed or
-- inserted: it does not link to the row before it in its chain), or no row
-- when they hold.  Chain by chain, each in id order.
CREATE FUNCTION bc_join.audit_log_problems(max_rows integer DEFAULT 1)
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
END
$$;
COMMENT ON FUNCTION bc_join.audit_log_problems(integer) IS
	'Checks the issuance log''s hash chain and returns the first rows (at most max_rows) that do not hold, with why: altered, or not linked to the row before (a row removed or inserted).';

-- true when the whole issuance log chains (contract name).
CREATE FUNCTION bc_join.verify_audit_log() RETURNS boolean
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, pg_temp
	AS $$ SELECT NOT EXISTS (SELECT 1 FROM bc_join.audit_log_problems(1)) $$;
COMMENT ON FUNCTION bc_join.verify_audit_log() IS
	'Returns whether the whole issuance log chains: no row altered, removed or inserted.';

-- The chains' heads signed by the service signing key (a JWS, the same key as
-- every JoinResponse): published (the gateway's GET /v1/audit-anchor, or
-- anywhere), it lets anyone holding it detect a rewritten history later.
CREATE FUNCTION bc_join.audit_anchor() RETURNS text
	AS 'MODULE_PATHNAME', 'bc_audit_anchor' LANGUAGE C STABLE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION bc_join.audit_anchor() IS
	'Returns the issuance log''s head (id, hash, time) as a JWS signed by the service signing key, to publish: a later rewrite of the history shows against it.';

-- An anchor published earlier (bc_join.audit_anchor()'s JWS), its signature
-- checked with a signing key this service holds (current, next or
-- previous): its payload, or INVALID_INPUT when it is no anchor of this
-- service.
CREATE FUNCTION bc_join.audit_anchor_payload(anchor text) RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_audit_anchor_payload' LANGUAGE C STABLE STRICT SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION bc_join.audit_anchor_payload(text) IS
	'The payload of an audit anchor this service signed, its signature checked with a signing key the service holds; INVALID_INPUT otherwise.';

-- The log against an anchor published earlier: every row the anchor names
-- (the newest, and each chain's last) must be in the log, in its chain,
-- with the hash the anchor signed.  A row missing beyond a chain's end
-- means the log is behind what the world has seen: a restore from a
-- backup older than the anchor, or a rollback (docs/operator.md, "Backups,
-- restores and upgrades").  No row when the log holds against it.
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
COMMENT ON FUNCTION bc_join.audit_anchor_problems(text) IS
	'Where the issuance log does not hold against an anchor published earlier (a row it names missing or rewritten, or the log behind it after a restore from an older backup), one row each, or none.';

-- The same, and the log holds against an anchor published earlier: it is
-- not behind it (audit_anchor_problems above).
CREATE FUNCTION bc_join.verify_audit_log(anchor text) RETURNS boolean
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, pg_temp
	AS $$ SELECT bc_join.verify_audit_log()
				 AND NOT EXISTS (SELECT 1 FROM bc_join.audit_anchor_problems(anchor)) $$;
COMMENT ON FUNCTION bc_join.verify_audit_log(text) IS
	'True when the issuance log holds (verify_audit_log()) and is not behind the given anchor published earlier: every row the anchor names is in the log with the hash it signed.';

/* ---------------------------------------------- revocation and the CRL */

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
COMMENT ON FUNCTION bc_join.check_revocation_reason(text) IS
	'Internal: raises INVALID_INPUT unless reason is one of the RFC 5280 reason names an operator revokes for; returns nothing.';

-- Revoke one certificate, a node's or a session's, by serial; revoking a node
-- certificate revokes the session certificates asked with it.  reason: one
-- of RFC 5280's CRLReason names (check_revocation_reason).  Returns false
-- when it was already revoked.  Audited, evented, and the gateway's cached
-- CRL is told.
CREATE FUNCTION bc_join.revoke_certificate(serial text, reason text) RETURNS boolean
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
COMMENT ON FUNCTION bc_join.revoke_certificate(text, text) IS
	'Revokes a node or session certificate by serial (a node certificate''s session certificates with it) for an RFC 5280 reason name, audited and evented; returns false when it was revoked already.';

-- Revoke every live certificate of a node, and the session certificates asked
-- with them, for an RFC 5280 reason (check_revocation_reason); returns how
-- many node certificates were revoked.  The node stays (it may join again
-- through an attestor, never by x509pop with a revoked certificate);
-- retire_node also ends it.
CREATE FUNCTION bc_join.revoke_node(node_id text, reason text) RETURNS integer
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
COMMENT ON FUNCTION bc_join.revoke_node(text, text) IS
	'Revokes every live certificate of a node and the session certificates asked with them for an RFC 5280 reason name; returns how many node certificates were revoked.';

-- Every revoked certificate, node and session, with its reason.
CREATE VIEW bc_join.revoked_certificates AS
	SELECT c.serial, 'node'::text AS kind, c.node_id, n.tenant_id, c.revoked_at,
		   c.revocation_reason AS reason, c.not_after, c.not_after <= bc_join.compute_now() AS expired
	FROM bc_join.node_certs c JOIN bc_join.nodes n ON n.id = c.node_id
	WHERE c.revoked_at IS NOT NULL
	UNION ALL
	SELECT sc.serial, 'session', s.node_id, s.tenant_id, sc.revoked_at, sc.revocation_reason,
		   sc.not_after, sc.not_after <= bc_join.compute_now()
	FROM bc_join.session_certs sc JOIN bc_join.sessions s ON s.id = sc.session_id
	WHERE sc.revoked_at IS NOT NULL;
COMMENT ON VIEW bc_join.revoked_certificates IS
	'Every revoked certificate, node and session: serial, kind, node, tenant, when, reason, and whether it has expired since.';

-- The node CA's CRL (DER): every revoked certificate not yet expired.
CREATE FUNCTION bc_join.crl() RETURNS bytea
	AS 'MODULE_PATHNAME', 'bc_crl' LANGUAGE C STABLE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION bc_join.crl() IS
	'Returns the node CA''s CRL (DER, RFC 5280): every revoked certificate not yet expired, nextUpdate bc_join.crl_validity seconds on.';
-- The same as PEM, for psql and openssl.
CREATE FUNCTION bc_join.crl_pem() RETURNS text
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, pg_temp
	AS $$ SELECT '-----BEGIN X509 CRL-----' || E'\n' || encode(bc_join.crl(), 'base64') || E'\n'
				 || '-----END X509 CRL-----' || E'\n' $$;
COMMENT ON FUNCTION bc_join.crl_pem() IS
	'Returns bc_join.crl() as PEM, for psql and openssl.';

-- The node CA's OCSP responder (RFC 6960): a DER OCSPRequest in, a DER
-- OCSPResponse out, signed by ocsp.key's delegated responder certificate;
-- writes nothing (bc-gateway serves it at /v1/ocsp).
CREATE FUNCTION bc_join.ocsp_response(request bytea) RETURNS bytea
	AS 'MODULE_PATHNAME', 'bc_ocsp_response' LANGUAGE C VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION bc_join.ocsp_response(bytea) IS
	'Returns the DER OCSP response (RFC 6960) to a DER OCSP request: per CertID good, revoked (time and reason as in the CRL) or unknown, nextUpdate bc_join.ocsp_validity seconds on, the nonce echoed, signed by ocsp.key; malformedRequest (unsigned) for a malformed request.';

/* ------------------------------------------------------- x509pop roots */

-- External PKIs whose leaves x509pop admits: each root is its own trust
-- store (never merged) and admits into one tenant and pool.  Written only
-- through add_x509pop_root(), which validates the certificate.
CREATE TABLE bc_join.x509pop_roots (
	id text PRIMARY KEY,
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	pool_id text NOT NULL REFERENCES bc_join.pools (id),
	certificate bytea NOT NULL,			-- DER; public
	sha256 bc_join.sha256 NOT NULL UNIQUE,	-- of the DER: one root, one tenant and pool
	subject text NOT NULL,
	not_after timestamptz NOT NULL,
	created_at timestamptz NOT NULL DEFAULT bc_join.compute_now()
);
COMMENT ON TABLE bc_join.x509pop_roots IS
	'External PKIs whose leaves the x509pop attestor admits: each root its own trust store, with the tenant and pool its leaves join.';

CREATE FUNCTION bc_join.x509pop_root_parse(certificate_pem text, OUT der bytea, OUT sha256 bytea,
										   OUT subject text, OUT not_after timestamptz)
	AS 'MODULE_PATHNAME', 'bc_x509pop_root_parse'
	LANGUAGE C IMMUTABLE STRICT;
COMMENT ON FUNCTION bc_join.x509pop_root_parse(text) IS
	'Internal: parses exactly one PEM CA certificate within x509pop''s key limits and returns its DER, SHA-256, subject and notAfter; raises INVALID_INPUT otherwise.';

-- Add an external PKI root for x509pop: its leaves join tenant_id's pool_id; returns the root's id.
CREATE FUNCTION bc_join.add_x509pop_root(certificate_pem text, tenant_id text, pool_id text)
	RETURNS text
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	r record;
	rid text := bc_join.new_id('x5r');
BEGIN
	IF certificate_pem IS NULL OR tenant_id IS NULL OR pool_id IS NULL THEN
		PERFORM bc_join.invalid_input('certificate_pem, tenant_id and pool_id are required');
	END IF;
	IF NOT EXISTS (SELECT 1 FROM bc_join.pools p
				   WHERE p.id = add_x509pop_root.pool_id AND p.tenant_id = add_x509pop_root.tenant_id) THEN
		PERFORM bc_join.invalid_input('the pool does not exist in this tenant');
	END IF;
	SELECT * INTO r FROM bc_join.x509pop_root_parse(certificate_pem);
	IF r.not_after <= bc_join.compute_now() THEN
		PERFORM bc_join.invalid_input('the certificate has expired');
	END IF;
	IF EXISTS (SELECT 1 FROM bc_join.x509pop_roots x WHERE x.sha256 = r.sha256) THEN
		PERFORM bc_join.invalid_input('this root is already configured (remove it first to move it)');
	END IF;
	INSERT INTO bc_join.x509pop_roots (id, tenant_id, pool_id, certificate, sha256, subject, not_after)
		VALUES (rid, add_x509pop_root.tenant_id, add_x509pop_root.pool_id, r.der, r.sha256,
				r.subject, r.not_after);
	INSERT INTO bc_join.audit_log (action, tenant_id, detail)
		VALUES ('x509pop.root.add', add_x509pop_root.tenant_id,
				jsonb_build_object('rootId', rid, 'poolId', add_x509pop_root.pool_id,
								   'subject', r.subject, 'sha256', encode(r.sha256, 'hex')));
	RETURN rid;
END
$$;
COMMENT ON FUNCTION bc_join.add_x509pop_root(text, text, text) IS
	'Adds one PEM CA certificate of an external PKI as an x509pop root (its own trust store, never merged with another) whose leaves join the tenant''s pool, and returns the root''s id.';

-- Remove an x509pop root; returns whether one was removed.  Nodes it admitted stay.
CREATE FUNCTION bc_join.remove_x509pop_root(root_id text) RETURNS boolean
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	t text;
BEGIN
	DELETE FROM bc_join.x509pop_roots x WHERE x.id = remove_x509pop_root.root_id
		RETURNING x.tenant_id INTO t;
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	INSERT INTO bc_join.audit_log (action, tenant_id, detail)
		VALUES ('x509pop.root.remove', t, jsonb_build_object('rootId', root_id));
	RETURN true;
END
$$;
COMMENT ON FUNCTION bc_join.remove_x509pop_root(text) IS
	'Removes an x509pop root so that its leaves no longer join; returns true when one was removed.';

/* ----------------------------------------------------------------- tpm */

-- EK roots (self-signed) and intermediates, added with add_tpm_ek_root.
CREATE TABLE bc_join.tpm_ek_certificates (
	sha256 bytea PRIMARY KEY CHECK (length(sha256) = 32),	-- of the DER
	certificate bytea NOT NULL,
	is_root boolean NOT NULL,
	subject text NOT NULL,
	added_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	added_by text NOT NULL DEFAULT session_user
);
COMMENT ON TABLE bc_join.tpm_ek_certificates IS
	'EK roots and intermediates of TPM vendors that the tpm attestor chains EK certificates to (add_tpm_ek_root).';

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
COMMENT ON TABLE bc_join.tpm_ek_enrollments IS
	'EKs an operator enrolled, by the SHA-256 of their SPKI: trusted without a chain, each for its tenant.';

-- PCR policies per tenant (pool_id NULL) or per pool: the quote must show these values.
CREATE TABLE bc_join.tpm_pcr_policies (
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	pool_id text REFERENCES bc_join.pools (id),
	selection text NOT NULL,			-- normalized, e.g. sha256:0,1,2,3,4,5,6,7
	pcr_values bytea NOT NULL,			-- the selected PCRs' values, in that order
	created_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	created_by text NOT NULL DEFAULT session_user
);
COMMENT ON TABLE bc_join.tpm_pcr_policies IS
	'PCR policies per tenant (pool_id NULL) or per pool: the PCR values a tpm node''s quote must show.';
CREATE UNIQUE INDEX tpm_pcr_policies_idx ON bc_join.tpm_pcr_policies (tenant_id, coalesce(pool_id, ''));

-- Per tenant: what an EK neither enrolled nor chained gets (default refuse).
CREATE TABLE bc_join.tpm_settings (
	tenant_id text PRIMARY KEY REFERENCES bc_join.tenants (id),
	enrollment text NOT NULL CHECK (enrollment IN ('refuse', 'approval'))
);
COMMENT ON TABLE bc_join.tpm_settings IS
	'Per tenant: what an EK neither enrolled nor chained gets: refuse (the default) or approval (a join request for an operator).';

-- What the last tpm join proved of an EK: renewal checks it is still trusted.
CREATE TABLE bc_join.tpm_eks (
	ek_spki_sha256 bytea PRIMARY KEY CHECK (length(ek_spki_sha256) = 32),
	ek_public bytea NOT NULL,			-- TPM2B_PUBLIC as received
	ek_certificate bytea,				-- NULL when the EK was enrolled
	seen_at timestamptz NOT NULL DEFAULT bc_join.compute_now()
);
COMMENT ON TABLE bc_join.tpm_eks IS
	'What the last tpm join proved of a node''s EK, which renewal checks is still trusted.';

-- The checks behind the configuration functions (C: the attestor's own parsers).
CREATE FUNCTION bc_join.tpm_pcr_selection(selection text, pcr_values bytea) RETURNS text
	AS 'MODULE_PATHNAME', 'bc_tpm_pcr_selection_sql' LANGUAGE C IMMUTABLE STRICT;
COMMENT ON FUNCTION bc_join.tpm_pcr_selection(text, bytea) IS
	'Checks a PCR selection (tpm2-tools syntax, e.g. sha256:0-7) against its expected PCR values and returns the normalised selection; raises 22023 when they do not fit.';
CREATE FUNCTION bc_join.tpm_ek_certificate(certificate_pem text) RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_tpm_ek_certificate_sql' LANGUAGE C IMMUTABLE STRICT;
COMMENT ON FUNCTION bc_join.tpm_ek_certificate(text) IS
	'Parses one PEM EK root or intermediate certificate and returns what the tpm attestor keeps of it (DER, SHA-256, whether self-signed); raises 22023 otherwise.';

/*
 * Add an EK root (a self-signed CA certificate) or an intermediate (any
 * other CA certificate), one PEM certificate at a time.  Returns the hex
 * SHA-256 of its DER; adding it again changes nothing.
 */
CREATE FUNCTION bc_join.add_tpm_ek_root(pem text) RETURNS text
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	c jsonb := bc_join.tpm_ek_certificate(pem);
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
COMMENT ON FUNCTION bc_join.add_tpm_ek_root(text) IS
	'Adds an EK root (self-signed) or intermediate certificate that tpm EK certificates may chain to; returns the hex SHA-256 of its DER.';

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
COMMENT ON FUNCTION bc_join.remove_tpm_ek_root(text) IS
	'Removes an EK root or intermediate by the hex SHA-256 of its DER; returns whether one was removed.';

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
COMMENT ON FUNCTION bc_join.enroll_tpm_ek(text, text, text, text, text, bytea, text) IS
	'Enrolls an EK by the hex SHA-256 of its SubjectPublicKeyInfo for a tenant (and pool or site, and an optional PCR policy): it joins without an EK certificate or token.';

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
COMMENT ON FUNCTION bc_join.unenroll_tpm_ek(text) IS
	'Removes an EK enrollment; returns whether one was removed.';

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
COMMENT ON FUNCTION bc_join.set_tpm_pcr_policy(text, text, text, bytea) IS
	'Sets (or with NULL values removes) the PCR policy of a tenant, or of one of its pools: the selection and the expected PCR values a tpm quote must match.';

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
COMMENT ON FUNCTION bc_join.set_tpm_enrollment_mode(text, text) IS
	'Sets what happens to an EK neither enrolled nor chained that comes with a tenant''s sealed token: refuse (the default) or approval (a pending join request that approve_join_request enrolls).';

/* ----------------------------------------------------------- cloud-iid */

-- The cloud-iid attestor's configuration (docs/attestors.md, "cloud-iid"):
-- tables an operator edits in psql, each row checked as it is written.

-- The built-in providers' definitions, as the contract pins them
-- (ATTESTORS.md, "cloud-iid"): the document format each cloud's evidence
-- has and the members its account, instance and start are read from.  A
-- row of cloud_providers named aws, gcp or azure takes these, and nothing
-- else; any other name is a provider the operator defines in its row.
CREATE FUNCTION bc_join.cloud_builtin_provider(provider text)
	RETURNS TABLE (format text, account_member text, instance_member text, started_member text,
				   require_members text[], issuer text, nonce_member text, uuid_ids boolean)
	LANGUAGE sql IMMUTABLE STRICT
	SET search_path = pg_catalog, pg_temp
	AS $$
	SELECT b.format, b.account_member, b.instance_member, b.started_member, b.require_members,
		   b.issuer, b.nonce_member, b.uuid_ids
	FROM (VALUES
		('aws', 'aws-pkcs7', 'accountId', 'instanceId', 'pendingTime', ARRAY['region'],
		 NULL, NULL, false),
		('gcp', 'gcp-jwt', 'google.compute_engine.project_id', 'google.compute_engine.instance_id',
		 'google.compute_engine.instance_creation_timestamp', ARRAY[]::text[],
		 'https://accounts.google.com', NULL, false),
		('azure', 'azure-pkcs7', 'subscriptionId', 'vmId', NULL, ARRAY[]::text[],
		 NULL, 'nonce', true)
	) AS b(name, format, account_member, instance_member, started_member, require_members,
		   issuer, nonce_member, uuid_ids)
	WHERE b.name = cloud_builtin_provider.provider $$;
COMMENT ON FUNCTION bc_join.cloud_builtin_provider(text) IS
	'Returns the definition of a built-in cloud provider (aws, gcp, azure; no row for any other name): its document format and the members its account, instance and start are read from, as a cloud_providers row of that name holds them.';

-- What each provider's evidence is verified with; nothing is built in or
-- fetched.  kind, by the provider's format: certificate (aws-pkcs7: the
-- signing certificates, PEM), root and intermediate (azure-pkcs7: the
-- signer's trust anchors and intermediates, PEM), jwks (gcp-jwt: the
-- signing keys, JSON {"keys": [...]}).
CREATE TABLE bc_join.cloud_trust (
	id bigserial PRIMARY KEY,
	provider text NOT NULL CHECK (provider ~ '^[a-z][a-z0-9-]{0,31}$'),
	kind text NOT NULL CHECK (kind IN ('certificate', 'root', 'intermediate', 'jwks')),
	material text NOT NULL CHECK (length(material) BETWEEN 1 AND 65536),
	note text NOT NULL DEFAULT '' CHECK (length(note) <= 200),
	added_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	added_by text NOT NULL DEFAULT session_user
);
COMMENT ON TABLE bc_join.cloud_trust IS
	'What each cloud provider''s instance identity documents are verified with (AWS region certificates, Azure roots and intermediates, Google''s JWKS, a registered provider''s anchors); nothing is built in.';

-- The provider registry: one row per cloud the attestor accepts (a
-- provider without a row is disabled), built-in or defined here.
--   format: how its evidence is signed and bound to the CSR
--     aws-pkcs7    a JSON document beside a PKCS#7 SignedData over it, by a
--                  configured certificate; binds nothing (a join token)
--     azure-pkcs7  a PKCS#7 SignedData carrying the JSON document, by a
--                  signer that chains to a configured root and is named
--                  under domain; binds the CSR by nonce_member
--     gcp-jwt      an RS256 JWT by a configured JWKS key, iss = issuer;
--                  binds the CSR by aud = '<audience>#<csrSha256>'
--   account_member, instance_member: the signed JSON members (dotted
--     paths) that name the account and the instance; started_member the
--     instance's start (aws-pkcs7: RFC 3339; gcp-jwt: Unix seconds);
--     require_members: members that must be there besides; uuid_ids:
--     account and instance are UUIDs, compared in lower case
--   max_instance_age: optional, needs started_member
-- aws, gcp and azure take their definitions from cloud_builtin_provider().
CREATE TABLE bc_join.cloud_providers (
	provider text PRIMARY KEY CHECK (provider ~ '^[a-z][a-z0-9-]{0,31}$'),
	audience text,
	domain text,
	max_instance_age interval,
	updated_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	updated_by text NOT NULL DEFAULT session_user,
	format text NOT NULL CHECK (format IN ('aws-pkcs7', 'azure-pkcs7', 'gcp-jwt')),
	account_member text NOT NULL,
	instance_member text NOT NULL,
	started_member text,
	require_members text[] NOT NULL DEFAULT '{}'::text[],
	issuer text,
	nonce_member text,
	uuid_ids boolean NOT NULL DEFAULT false
);
COMMENT ON TABLE bc_join.cloud_providers IS
	'The cloud providers the cloud-iid attestor accepts (aws, gcp, azure, or one defined here): the document format, the members its account and instance are read from, and its settings.';

-- Which tenant and pool a cloud account joins: exactly one mapping per
-- (provider, account).  account: the AWS accountId, the GCP project_id, the
-- Azure subscriptionId in lower case (another provider: its account
-- member).  allow_unbound (aws-pkcs7 providers only): admit this account's
-- instances without a sealed join token, within 300 s of their start (such
-- a document binds nothing to the CSR).  roles: what its machines may join
-- as (node; site: a site agent of the pool's site).
CREATE TABLE bc_join.cloud_accounts (
	id bigserial PRIMARY KEY,
	provider text NOT NULL CHECK (provider ~ '^[a-z][a-z0-9-]{0,31}$'),
	account text NOT NULL CHECK (length(account) BETWEEN 1 AND 128),
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	pool_id text NOT NULL REFERENCES bc_join.pools (id),
	allow_unbound boolean NOT NULL DEFAULT false,
	created_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	created_by text NOT NULL DEFAULT session_user,
	roles text[] NOT NULL DEFAULT '{node}'::text[]
		CHECK (cardinality(roles) BETWEEN 1 AND 2 AND roles <@ ARRAY['node', 'site'])
);
COMMENT ON TABLE bc_join.cloud_accounts IS
	'Which tenant and pool a cloud account joins, and as which roles: exactly one mapping per provider and account.';
CREATE INDEX cloud_accounts_account_idx ON bc_join.cloud_accounts (provider, account);

-- An optional resolver for accounts without a mapping.
CREATE TABLE bc_join.cloud_resolver (
	one boolean PRIMARY KEY DEFAULT true CHECK (one),
	resolve text NOT NULL,				-- the function, as regprocedure's text (see bc_join.attestors.verify)
	registered_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	registered_by text NOT NULL DEFAULT session_user
);
COMMENT ON TABLE bc_join.cloud_resolver IS
	'At most one row: the function that maps an unmapped cloud account to a tenant and pool (superuser).';

-- The trust material parses (C: certificates, a JWKS with RSA keys).
CREATE FUNCTION bc_join.cloud_trust_check() RETURNS trigger
	AS 'MODULE_PATHNAME', 'bc_cloud_trust_check' LANGUAGE C;
CREATE TRIGGER cloud_trust_check BEFORE INSERT OR UPDATE ON bc_join.cloud_trust
	FOR EACH ROW EXECUTE FUNCTION bc_join.cloud_trust_check();

-- The trust material is of a kind its provider's format reads: the
-- provider is built in or has its row (register it first).  Security
-- definer: it raises with its own rights whoever edits (an operator).
CREATE FUNCTION bc_join.cloud_trust_format_check() RETURNS trigger
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	f text;
BEGIN
	SELECT p.format INTO f FROM bc_join.cloud_providers p WHERE p.provider = NEW.provider;
	IF NOT FOUND THEN
		SELECT b.format INTO f FROM bc_join.cloud_builtin_provider(NEW.provider) b;
	END IF;
	IF f IS NULL THEN
		PERFORM bc_join.invalid_input(format('cloud provider %s is not registered: insert its row into bc_join.cloud_providers first',
											 NEW.provider));
	END IF;
	IF NOT (f = 'aws-pkcs7' AND NEW.kind = 'certificate'
			OR f = 'azure-pkcs7' AND NEW.kind IN ('root', 'intermediate')
			OR f = 'gcp-jwt' AND NEW.kind = 'jwks') THEN
		PERFORM bc_join.invalid_input(format('%s is a %s provider: its trust material is of kind %s, not %s',
			NEW.provider, f, CASE f WHEN 'aws-pkcs7' THEN 'certificate' WHEN 'azure-pkcs7' THEN 'root or intermediate'
							   ELSE 'jwks' END, NEW.kind));
	END IF;
	RETURN NEW;
END
$$;
CREATE TRIGGER cloud_trust_format_check BEFORE INSERT OR UPDATE ON bc_join.cloud_trust
	FOR EACH ROW EXECUTE FUNCTION bc_join.cloud_trust_format_check();

-- A provider's row: a built-in takes its definition (and refuses another);
-- a defined one is complete and coherent for its format.  Security
-- definer: it raises with its own rights whoever edits (an operator).
CREATE FUNCTION bc_join.cloud_providers_check() RETURNS trigger
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	b record;
	path constant text := '^[A-Za-z0-9_$-]{1,64}(\.[A-Za-z0-9_$-]{1,64}){0,7}$';
	own text[];
	m text;
BEGIN
	SELECT * INTO b FROM bc_join.cloud_builtin_provider(NEW.provider);
	IF FOUND THEN
		IF coalesce(NEW.format, b.format) IS DISTINCT FROM b.format
		   OR coalesce(NEW.account_member, b.account_member) IS DISTINCT FROM b.account_member
		   OR coalesce(NEW.instance_member, b.instance_member) IS DISTINCT FROM b.instance_member
		   OR coalesce(NEW.started_member, b.started_member) IS DISTINCT FROM b.started_member
		   OR coalesce(NEW.issuer, b.issuer) IS DISTINCT FROM b.issuer
		   OR coalesce(NEW.nonce_member, b.nonce_member) IS DISTINCT FROM b.nonce_member THEN
			PERFORM bc_join.invalid_config(format('%s is built in: its format and members are fixed (bc_join.cloud_builtin_provider(%L)); set only audience, domain and max_instance_age',
												  NEW.provider, NEW.provider));
		END IF;
		NEW.format := b.format;
		NEW.account_member := b.account_member;
		NEW.instance_member := b.instance_member;
		NEW.started_member := b.started_member;
		NEW.require_members := b.require_members;
		NEW.issuer := b.issuer;
		NEW.nonce_member := b.nonce_member;
		NEW.uuid_ids := b.uuid_ids;
	END IF;
	IF NEW.format IS NULL OR NEW.format NOT IN ('aws-pkcs7', 'azure-pkcs7', 'gcp-jwt') THEN
		PERFORM bc_join.invalid_config(format('cloud provider %s needs a format: aws-pkcs7, azure-pkcs7 or gcp-jwt', NEW.provider));
	END IF;
	-- the members read from the signed document, each once
	own := CASE NEW.format WHEN 'azure-pkcs7' THEN ARRAY['timeStamp.createdOn', 'timeStamp.expiresOn']
						   WHEN 'gcp-jwt' THEN ARRAY['iss', 'aud', 'iat', 'exp'] ELSE ARRAY[]::text[] END;
	IF NEW.account_member IS NULL OR NEW.instance_member IS NULL THEN
		PERFORM bc_join.invalid_config(format('cloud provider %s needs an account_member and an instance_member', NEW.provider));
	END IF;
	IF NEW.require_members IS NULL OR cardinality(NEW.require_members) > 8 THEN
		PERFORM bc_join.invalid_config('require_members holds at most 8 members');
	END IF;
	FOREACH m IN ARRAY ARRAY[NEW.account_member, NEW.instance_member, NEW.started_member, NEW.nonce_member]
					   || NEW.require_members LOOP
		IF m IS NULL THEN
			CONTINUE;
		END IF;
		IF m !~ path THEN
			PERFORM bc_join.invalid_config(format('%L is no member path: names of letters, digits, _, $ and -, joined by dots (at most 8)', m));
		END IF;
		IF m = ANY (own) THEN
			PERFORM bc_join.invalid_config(format('%L is read by the %s format itself', m, NEW.format));
		END IF;
		own := own || m;
	END LOOP;
	IF NEW.format = 'azure-pkcs7' AND NEW.started_member IS NOT NULL THEN
		PERFORM bc_join.invalid_config('an azure-pkcs7 document reads no instance start: started_member must be NULL');
	END IF;
	IF NEW.max_instance_age IS NOT NULL AND NEW.started_member IS NULL THEN
		PERFORM bc_join.invalid_config(format('%s has no instance age (no started_member): max_instance_age must be NULL', NEW.provider));
	END IF;
	IF NEW.max_instance_age IS NOT NULL AND NEW.max_instance_age <= interval '0' THEN
		PERFORM bc_join.invalid_config('max_instance_age must be positive');
	END IF;
	IF NEW.format = 'gcp-jwt' AND (NEW.audience IS NULL OR length(NEW.audience) NOT BETWEEN 1 AND 512
								   OR NEW.audience !~ '^[\x21-\x7e]+$') THEN
		PERFORM bc_join.invalid_config(format('%s needs an audience: 1 to 512 printable ASCII characters, no space', NEW.provider));
	END IF;
	IF NEW.format <> 'gcp-jwt' AND NEW.audience IS NOT NULL THEN
		PERFORM bc_join.invalid_config('only a gcp-jwt provider (gcp) has an audience');
	END IF;
	IF NEW.format = 'gcp-jwt' AND (NEW.issuer IS NULL OR length(NEW.issuer) NOT BETWEEN 1 AND 512
								   OR NEW.issuer !~ '^[\x21-\x7e]+$') THEN
		PERFORM bc_join.invalid_config(format('%s needs an issuer (the iss its tokens carry): 1 to 512 printable ASCII characters', NEW.provider));
	END IF;
	IF NEW.format <> 'gcp-jwt' AND NEW.issuer IS NOT NULL THEN
		PERFORM bc_join.invalid_config('only a gcp-jwt provider (gcp) has an issuer');
	END IF;
	IF NEW.format = 'azure-pkcs7' AND (NEW.domain IS NULL OR NEW.domain !~ '^[a-z0-9-]+(\.[a-z0-9-]+)+$') THEN
		PERFORM bc_join.invalid_config(format('%s needs a domain (like metadata.azure.com), lower case', NEW.provider));
	END IF;
	IF NEW.format <> 'azure-pkcs7' AND NEW.domain IS NOT NULL THEN
		PERFORM bc_join.invalid_config('only an azure-pkcs7 provider (azure) has a domain');
	END IF;
	IF NEW.format = 'azure-pkcs7' AND NEW.nonce_member IS NULL THEN
		PERFORM bc_join.invalid_config(format('%s needs a nonce_member (the member that binds the CSR)', NEW.provider));
	END IF;
	IF NEW.format <> 'azure-pkcs7' AND NEW.nonce_member IS NOT NULL THEN
		PERFORM bc_join.invalid_config('only an azure-pkcs7 provider (azure) has a nonce_member');
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
CREATE TRIGGER cloud_providers_check BEFORE INSERT OR UPDATE ON bc_join.cloud_providers
	FOR EACH ROW EXECUTE FUNCTION bc_join.cloud_providers_check();

-- An account's row: one mapping, a pool of its tenant, and what its
-- provider allows (known when the provider is built in or has its row;
-- a restore brings accounts before providers, and a join checks again).
-- Security definer: it raises with its own rights whoever edits.
CREATE FUNCTION bc_join.cloud_accounts_check() RETURNS trigger
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	f text;
	u boolean;
BEGIN
	IF EXISTS (SELECT 1 FROM bc_join.cloud_accounts a
			   WHERE a.provider = NEW.provider AND a.account = NEW.account AND a.id <> NEW.id) THEN
		PERFORM bc_join.invalid_config(format('%s account %s is mapped already: one account, one tenant and pool',
											  NEW.provider, NEW.account));
	END IF;
	IF NOT EXISTS (SELECT 1 FROM bc_join.pools p WHERE p.id = NEW.pool_id AND p.tenant_id = NEW.tenant_id) THEN
		PERFORM bc_join.invalid_config(format('pool %s is not a pool of tenant %s', NEW.pool_id, NEW.tenant_id));
	END IF;
	SELECT p.format, p.uuid_ids INTO f, u FROM bc_join.cloud_providers p WHERE p.provider = NEW.provider;
	IF NOT FOUND THEN
		SELECT b.format, b.uuid_ids INTO f, u FROM bc_join.cloud_builtin_provider(NEW.provider) b;
	END IF;
	IF NEW.allow_unbound AND f IS NOT NULL AND f <> 'aws-pkcs7' THEN
		PERFORM bc_join.invalid_config(format('allow_unbound is for providers whose documents bind nothing (aws-pkcs7: aws); %s binds the CSR',
											  NEW.provider));
	END IF;
	IF NEW.provider = 'aws' AND NEW.account !~ '^[0-9]{12}$' THEN
		PERFORM bc_join.invalid_config('an aws account is its 12-digit accountId');
	END IF;
	IF u AND NEW.account !~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
		PERFORM bc_join.invalid_config(format('a %s account is a lower-case UUID (its subscriptionId for azure)', NEW.provider));
	END IF;
	RETURN NEW;
END
$$;
CREATE TRIGGER cloud_accounts_check BEFORE INSERT OR UPDATE ON bc_join.cloud_accounts
	FOR EACH ROW EXECUTE FUNCTION bc_join.cloud_accounts_check();

-- bind = SHA-256(provider 0x00 account 0x00 instance), as the cloud-iid attestor defines it (docs/attestors.md).
CREATE FUNCTION bc_join.cloud_instance_bind(provider text, account text, instance text) RETURNS bytea
	LANGUAGE sql IMMUTABLE STRICT
	SET search_path = pg_catalog, pg_temp
	AS $$ SELECT sha256(convert_to(provider, 'UTF8') || '\x00'::bytea || convert_to(account, 'UTF8')
						|| '\x00'::bytea || convert_to(instance, 'UTF8')) $$;
COMMENT ON FUNCTION bc_join.cloud_instance_bind(text, text, text) IS
	'Returns the cloud-iid bind of an instance, SHA-256(provider 0x00 account 0x00 instance), as node_bindings and attestation_uses hold it.';

/*
 * Let an instance be admitted once more: its once-forever use is dropped,
 * so that its next admission reclaims the node bound to it (rather than
 * making a second node).  Audited and evented; returns whether it had been
 * admitted.
 */
CREATE FUNCTION bc_join.reset_cloud_instance(provider text, account text, instance text)
	RETURNS boolean
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	b bytea;
	n bigint;
	node text;
	tenant text;
	lower_ids boolean;
BEGIN
	SELECT p.uuid_ids INTO lower_ids FROM bc_join.cloud_providers p
		WHERE p.provider = reset_cloud_instance.provider;
	IF NOT FOUND THEN
		SELECT x.uuid_ids INTO lower_ids FROM bc_join.cloud_builtin_provider(reset_cloud_instance.provider) x;
	END IF;
	IF lower_ids IS NULL OR account IS NULL OR account = '' OR instance IS NULL OR instance = '' THEN
		PERFORM bc_join.invalid_input('reset_cloud_instance needs a provider (aws, gcp, azure or one of bc_join.cloud_providers), an account and an instance');
	END IF;
	IF lower_ids THEN
		-- UUIDs (azure's subscription and VM) as the bind holds them: lower case
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
COMMENT ON FUNCTION bc_join.reset_cloud_instance(text, text, text) IS
	'Lets a cloud instance (provider, account, instance, as the refusal event names them) be admitted once more, reclaiming the node bound to it; audited and evented; returns whether it had been admitted.';

-- Register the function (provider text, account text, context jsonb)
-- RETURNS jsonb ({"tenantId", "poolId", "roles"?} or NULL; roles default
-- ["node"]) that maps accounts without a row in cloud_accounts; NULL
-- removes it.
CREATE FUNCTION bc_join.register_cloud_resolver(resolve regprocedure) RETURNS void
	LANGUAGE plpgsql
	SET search_path = pg_catalog, pg_temp
	AS $$
BEGIN
	IF resolve IS NULL THEN
		DELETE FROM bc_join.cloud_resolver;
		INSERT INTO bc_join.audit_log (action, detail) VALUES ('cloud_resolver.remove', '{}');
		RETURN;
	END IF;
	PERFORM bc_join.check_callback(resolve, 'resolver', ARRAY['text', 'text', 'jsonb']::regtype[], 'jsonb',
		'resolve must be a function (provider text, account text, context jsonb) RETURNS jsonb');
	INSERT INTO bc_join.cloud_resolver AS r (resolve) VALUES (resolve)
		ON CONFLICT (one) DO UPDATE SET resolve = EXCLUDED.resolve,
			registered_at = EXCLUDED.registered_at, registered_by = EXCLUDED.registered_by;
	INSERT INTO bc_join.audit_log (action, detail)
		VALUES ('cloud_resolver.register', jsonb_build_object('resolve', resolve::text));
END
$$;
COMMENT ON FUNCTION bc_join.register_cloud_resolver(regprocedure) IS
	'Registers the function (provider text, account text, context jsonb) RETURNS jsonb that maps a cloud account without a cloud_accounts row to {"tenantId", "poolId", "roles"?} (NULL removes it); superuser only.';

/* ----------------------------------------------------------- discovery */

-- A site whose PXE-booted ramdisks may join by the discovery attestor: off
-- until an operator enables it (set_discovery_site).  epoch fences site
-- assertions: one names the epoch it was signed in and is refused once the
-- epoch moved (bump_site_epoch; every new certificate of a site agent of
-- the site bumps it).  approval: none, unknown-machines (a MAC not seen in
-- discovery_machines waits for an operator) or always.  allowed_kinds: what
-- the ramdisk's certificate allows.
CREATE TABLE bc_join.discovery_sites (
	site_id text PRIMARY KEY REFERENCES bc_join.sites (id) ON DELETE CASCADE,
	epoch bigint NOT NULL DEFAULT 1 CHECK (epoch >= 1),
	approval text NOT NULL DEFAULT 'none' CHECK (approval IN ('none', 'unknown-machines', 'always')),
	allowed_kinds text[] NOT NULL DEFAULT ARRAY['inventory.refresh', 'logs.collect', 'diag.*',
		'disk.wipe', 'deploy.*', 'boot.kexec'],
	cert_ttl_seconds integer NOT NULL DEFAULT 7200 CHECK (cert_ttl_seconds BETWEEN 60 AND 7200),
	updated_at timestamptz NOT NULL DEFAULT bc_join.compute_now()
);
COMMENT ON TABLE bc_join.discovery_sites IS
	'Sites whose PXE-booted ramdisks may join by the discovery attestor: approval mode, the kinds and lifetime of their certificates, the site epoch.';

-- The machines (MACs) of a site that joined by discovery before, or that an
-- operator lists: known to approval 'unknown-machines'.
CREATE TABLE bc_join.discovery_machines (
	site_id text NOT NULL REFERENCES bc_join.sites (id) ON DELETE CASCADE,
	mac text NOT NULL CHECK (mac ~ '^[0-9a-f]{2}(:[0-9a-f]{2}){5}$'),
	last_node_id text,
	first_seen timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	last_joined_at timestamptz,
	PRIMARY KEY (site_id, mac)
);
COMMENT ON TABLE bc_join.discovery_machines IS
	'The machines (MACs) of a discovery site that joined by discovery before or that an operator listed: known to approval unknown-machines.';

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
COMMENT ON FUNCTION bc_join.set_discovery_site(text, text, text[], integer) IS
	'Enables the discovery attestor on a site (approval none, unknown-machines or always; the kinds its ramdisks'' certificates allow; their lifetime, 60 to 7200 s); returns nothing.';

-- Move a site's discovery epoch on: every assertion signed before is refused.
CREATE FUNCTION bc_join.bump_site_epoch(site_id text) RETURNS bigint
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
COMMENT ON FUNCTION bc_join.bump_site_epoch(text) IS
	'Moves a site''s discovery epoch on, so every site assertion signed before is refused; returns the new epoch.';

-- A site agent re-keyed (a join, a reclaim, a renewal: any new certificate):
-- its site's epoch moves on.  Done where the certificate is issued
-- (src/ext/admit.c), not by a trigger on node_certs, so that a restore,
-- which inserts the certificates again, leaves every epoch as it was.

/*
 * A site agent's site epoch, the one its discovery assertions must carry:
 * {"proof": <JWS by the site agent's node key over purpose "site-epoch",
 * serial, iat>}.  Answered signed.  See docs/attestors.md ("discovery").
 */
CREATE FUNCTION bc_join.site_epoch(request jsonb) RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_site_epoch_request'
	LANGUAGE C VOLATILE STRICT SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION bc_join.site_epoch(jsonb) IS
	'A site agent''s site and its current discovery epoch, signed by the service key; proven by the site agent''s node key (purpose site-epoch).';

/* ------------------------------------------------------------ commands */

-- The command kinds a certificate's allowedKinds may name.
CREATE TABLE bc_join.command_kinds (
	kind text PRIMARY KEY CHECK (kind ~ '^[a-z0-9-]+(\.[a-z0-9-]+)+$'),
	description text NOT NULL DEFAULT ''
);
COMMENT ON TABLE bc_join.command_kinds IS
	'The command kinds a certificate''s allowedKinds may name (register_command_kind).';
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
COMMENT ON FUNCTION bc_join.register_command_kind(text, text) IS
	'Registers a command kind (dotted lower-case words, like disk.wipe) that allowedKinds may name, keeping an existing one as it is; returns nothing.';

-- Does a certificate's allowed_kinds admit kind?  NULL allows every kind;
-- an entry is an exact kind or a prefix.* glob ("diag.*" admits "diag.run",
-- never "diag" itself), so "wipe" never admits "disk.wipe".
CREATE FUNCTION bc_join.kind_allowed(allowed text[], kind text) RETURNS boolean
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	SET search_path = pg_catalog, pg_temp
	AS $$
	SELECT allowed IS NULL OR kind = ANY (allowed)
		OR EXISTS (SELECT 1 FROM unnest(allowed) AS a
				   WHERE right(a, 2) = '.*' AND length(a) > 2 AND starts_with(kind, left(a, -1)))
$$;
COMMENT ON FUNCTION bc_join.kind_allowed(text[], text) IS
	'Whether allowed_kinds (exact kinds or prefix.* globs; NULL allows all) admits a command kind.';

-- Commands for a node, fetched by the node (bc_join.fetch_commands) with a
-- proof by its current key, and completed by it (bc_join.complete_command).
CREATE TABLE bc_join.commands (
	id text PRIMARY KEY,
	node_id text NOT NULL REFERENCES bc_join.nodes (id) ON DELETE CASCADE,
	kind text NOT NULL REFERENCES bc_join.command_kinds (kind),
	payload jsonb NOT NULL DEFAULT '{}' CHECK (octet_length(payload::text) <= 16384),
	state text NOT NULL DEFAULT 'queued'
		CHECK (state IN ('queued', 'dispatched', 'done', 'failed', 'expired')),
	created_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	created_by text NOT NULL DEFAULT session_user,
	expires_at timestamptz NOT NULL,
	dispatched_at timestamptz,
	dispatched_serial text,
	attempts integer NOT NULL DEFAULT 0 CHECK (attempts BETWEEN 0 AND 5),
	result jsonb CHECK (result IS NULL OR octet_length(result::text) <= 16384),
	completed_at timestamptz,
	CHECK (expires_at > created_at AND expires_at <= created_at + interval '7 days')
);
COMMENT ON TABLE bc_join.commands IS
	'Commands queued for nodes, fetched and completed by them with a proof by the node key: kind, payload, state, attempts, the certificate that fetched them, the result.';
CREATE INDEX commands_node_open_idx ON bc_join.commands (node_id, created_at)
	WHERE state IN ('queued', 'dispatched');

-- Queue a command for a node: the kind must be a registered command kind
-- and allowed by the node's current live certificate (allowed_kinds; NULL
-- allows every kind).  It expires after one hour
-- unless completed before.  Returns the command id.
-- Checked again at dispatch against the certificate that fetches it.
CREATE FUNCTION bc_join.enqueue_command(node_id text, kind text, payload jsonb)
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
COMMENT ON FUNCTION bc_join.enqueue_command(text, text, jsonb) IS
	'Queues a command (a registered kind the node''s live certificate allows, a JSON object payload) for one hour; returns its id.';

/*
 * A node's commands, handed out signed: {"proof": <JWS by the node key over
 * purpose "commands", serial, iat>}.  Kinds are checked again against that
 * certificate.  See docs/commands.md.
 */
CREATE FUNCTION bc_join.fetch_commands(request jsonb) RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_fetch_commands_request'
	LANGUAGE C VOLATILE STRICT SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION bc_join.fetch_commands(jsonb) IS
	'A node''s queued commands whose kinds its proving certificate allows, signed by the service key; proven by the node key (purpose commands).';

/*
 * A dispatched command's outcome: {"proof": <JWS by the node key over purpose
 * "complete", serial, iat, commandId, status, resultSha256>, "result":
 * <base64url of a JSON object>}.  See docs/commands.md.
 */
CREATE FUNCTION bc_join.complete_command(request jsonb) RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_complete_command_request'
	LANGUAGE C VOLATILE STRICT SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION bc_join.complete_command(jsonb) IS
	'Records a dispatched command''s outcome (done or failed, a JSON object result); proven by the node key (purpose complete).';

-- What operators read: every command with its node, tenant and outcome.
CREATE VIEW bc_join.command_status AS
	SELECT c.id, c.node_id, n.tenant_id, c.kind, c.state, c.attempts, c.created_at,
		   c.created_by, c.expires_at, c.dispatched_at, c.dispatched_serial, c.completed_at,
		   c.result, (c.result->>'exitCode')::text AS exit_code, c.result->>'reason' AS reason
	FROM bc_join.commands c JOIN bc_join.nodes n ON n.id = c.node_id;
COMMENT ON VIEW bc_join.command_status IS
	'Every command: node, tenant, kind, state, attempts, when dispatched and to which certificate, the result.';

/* ----------------------------------------- housekeeping and statistics */

/*
 * Delete up to batch expired attestation_uses rows (expires_at before
 * compute_now()); rows without an expiry stay; then, within the same batch,
 * challenge_deadlines whose notAfter is bc_join.retain_join_requests past.
 * Returns how many were deleted: call it again until it returns 0.  Rows
 * other sessions hold are skipped, so it never waits on a join.
 */
CREATE FUNCTION bc_join.prune_attestation_uses(batch integer DEFAULT 5000) RETURNS bigint
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

/*
 * Retention.  Each prune_* deletes up to batch rows past their retention
 * and returns how many: call it again until it returns 0.  Rows other
 * sessions hold are skipped (FOR UPDATE SKIP LOCKED), so a prune never waits
 * on a join, a renewal or a session.  The audit log is never pruned.
 */

-- Events older than bc_join.retain_events (90 days).
CREATE FUNCTION bc_join.prune_events(batch integer DEFAULT 5000) RETURNS bigint
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	cutoff timestamptz := bc_join.compute_now() - bc_join.setting_interval('retain_events');
	n bigint;
BEGIN
	IF batch IS NULL OR batch < 1 OR batch > 1000000 THEN
		PERFORM bc_join.invalid_input('batch must be between 1 and 1000000');
	END IF;
	DELETE FROM bc_join.events e
		WHERE e.ctid = ANY (ARRAY(
			SELECT x.ctid FROM bc_join.events x WHERE x.at < cutoff
			LIMIT batch FOR UPDATE SKIP LOCKED));
	GET DIAGNOSTICS n = ROW_COUNT;
	RETURN n;
END
$$;
COMMENT ON FUNCTION bc_join.prune_events(integer) IS
	'Deletes up to batch events older than bc_join.retain_events without waiting on joins and returns how many it deleted: call it again until it returns 0.';

/*
 * Node and session certificates expired more than
 * bc_join.retain_expired_certificates (30 days) ago, up to batch in all,
 * node certificates first.  Never one unexpired (so never a live one, nor a
 * revoked one the CRL still lists), never a node's newest certificate, and a
 * node certificate not before bc_join.x509pop_grace after its notAfter
 * either (x509pop reclaims by it).
 */
CREATE FUNCTION bc_join.prune_certificates(batch integer DEFAULT 5000) RETURNS bigint
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	now_ timestamptz := bc_join.compute_now();
	keep interval := bc_join.setting_interval('retain_expired_certificates');
	node_cutoff timestamptz := now_ - greatest(keep, bc_join.setting_interval('x509pop_grace'));
	n bigint;
	m bigint := 0;
BEGIN
	IF batch IS NULL OR batch < 1 OR batch > 1000000 THEN
		PERFORM bc_join.invalid_input('batch must be between 1 and 1000000');
	END IF;
	DELETE FROM bc_join.node_certs c
		WHERE c.ctid = ANY (ARRAY(
			SELECT x.ctid FROM bc_join.node_certs x
			WHERE x.not_after < node_cutoff AND x.not_after < now_
			  AND EXISTS (SELECT 1 FROM bc_join.node_certs y
						  WHERE y.node_id = x.node_id AND y.issued_at > x.issued_at)
			LIMIT batch FOR UPDATE SKIP LOCKED));
	GET DIAGNOSTICS n = ROW_COUNT;
	IF n < batch THEN
		DELETE FROM bc_join.session_certs c
			WHERE c.ctid = ANY (ARRAY(
				SELECT x.ctid FROM bc_join.session_certs x
				WHERE x.not_after < now_ - keep AND x.not_after < now_
				LIMIT batch - n FOR UPDATE SKIP LOCKED));
		GET DIAGNOSTICS m = ROW_COUNT;
		n := n + m;
		m := 0;
	END IF;
	-- #47: SSH certificates expired as long (a revoked one leaves the KRL: ssh_certs_deleted)
	IF n < batch THEN
		DELETE FROM bc_join.ssh_certs c
			WHERE c.ctid = ANY (ARRAY(
				SELECT x.ctid FROM bc_join.ssh_certs x
				WHERE x.valid_before < now_ - keep AND x.valid_before < now_
				LIMIT batch - n FOR UPDATE SKIP LOCKED));
		GET DIAGNOSTICS m = ROW_COUNT;
	END IF;
	RETURN n + m;
END
$$;
COMMENT ON FUNCTION bc_join.prune_certificates(integer) IS
	'Deletes up to batch node, session and SSH certificates expired longer than bc_join.retain_expired_certificates ago (never an unexpired one, never a node''s newest) and returns how many.';

/*
 * Sessions provisioned, and with no certificate expiring, within the last
 * bc_join.retain_sessions (7 days), with their (expired) certificates.  A
 * session asked for again after that gets a new session id.
 */
CREATE FUNCTION bc_join.prune_sessions(batch integer DEFAULT 5000) RETURNS bigint
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	cutoff timestamptz := bc_join.compute_now() - bc_join.setting_interval('retain_sessions');
	n bigint;
BEGIN
	IF batch IS NULL OR batch < 1 OR batch > 1000000 THEN
		PERFORM bc_join.invalid_input('batch must be between 1 and 1000000');
	END IF;
	DELETE FROM bc_join.sessions s
		WHERE s.ctid = ANY (ARRAY(
			SELECT x.ctid FROM bc_join.sessions x
			WHERE x.provisioned_at < cutoff
			  AND NOT EXISTS (SELECT 1 FROM bc_join.session_certs c
							  WHERE c.session_id = x.id AND c.not_after >= cutoff)
			LIMIT batch FOR UPDATE SKIP LOCKED));
	GET DIAGNOSTICS n = ROW_COUNT;
	RETURN n;
END
$$;
COMMENT ON FUNCTION bc_join.prune_sessions(integer) IS
	'Deletes up to batch sessions with no certificate expiring within bc_join.retain_sessions, with their certificates, and returns how many.';

/*
 * Join requests past bc_join.retain_join_requests (30 days): rejected or
 * consumed ones decided (consumed) longer ago, pending or approved ones
 * expired longer ago.  A pending request that has not expired always stays.
 */
CREATE FUNCTION bc_join.prune_join_requests(batch integer DEFAULT 5000) RETURNS bigint
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	now_ timestamptz := bc_join.compute_now();
	cutoff timestamptz := now_ - bc_join.setting_interval('retain_join_requests');
	n bigint;
BEGIN
	IF batch IS NULL OR batch < 1 OR batch > 1000000 THEN
		PERFORM bc_join.invalid_input('batch must be between 1 and 1000000');
	END IF;
	DELETE FROM bc_join.join_requests r
		WHERE r.ctid = ANY (ARRAY(
			SELECT x.ctid FROM bc_join.join_requests x
			WHERE (x.state IN ('rejected', 'consumed')
				   AND coalesce(x.consumed_at, x.decided_at, x.created_at) < cutoff)
			   OR (x.state IN ('pending', 'approved') AND x.expires_at < cutoff AND x.expires_at < now_)
			LIMIT batch FOR UPDATE SKIP LOCKED));
	GET DIAGNOSTICS n = ROW_COUNT;
	RETURN n;
END
$$;
COMMENT ON FUNCTION bc_join.prune_join_requests(integer) IS
	'Deletes up to batch join requests decided, or expired, longer than bc_join.retain_join_requests ago (never a pending one not expired) and returns how many.';

-- One batch of each prune (attestation uses too); returns the counts as
-- jsonb.  Call it again until every count is 0.
CREATE FUNCTION bc_join.prune(batch integer DEFAULT 5000) RETURNS jsonb
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
BEGIN
	RETURN jsonb_build_object(
		'events', bc_join.prune_events(batch),
		'certificates', bc_join.prune_certificates(batch),
		'sessions', bc_join.prune_sessions(batch),
		'joinRequests', bc_join.prune_join_requests(batch),
		'attestationUses', bc_join.prune_attestation_uses(batch));
END
$$;
COMMENT ON FUNCTION bc_join.prune(integer) IS
	'Runs one batch of every prune (events, certificates, sessions, join requests, attestation uses) and returns the counts as jsonb: call it again until every count is 0.';

-- Live nodes not seen (joined, renewed, asked for a session) for
-- bc_join.stale_after (3 days), longest unseen first, with the notAfter of
-- their newest certificate.
CREATE VIEW bc_join.stale_nodes AS
	SELECT n.id, n.tenant_id, n.site_id, n.pool_id, n.role, n.state, n.last_seen_at,
		   bc_join.compute_now() - n.last_seen_at AS unseen_for,
		   (SELECT c.not_after FROM bc_join.node_certs c WHERE c.node_id = n.id
			ORDER BY c.issued_at DESC LIMIT 1) AS last_not_after
	FROM bc_join.nodes n
	WHERE n.state <> 'retired'
	  AND n.last_seen_at < bc_join.compute_now() - bc_join.setting_interval('stale_after')
	ORDER BY n.last_seen_at;
COMMENT ON VIEW bc_join.stale_nodes IS
	'Live nodes not seen (joined, renewed, asked for a session) for bc_join.stale_after, longest unseen first, with the notAfter of their newest certificate.';

-- Rounds by attestor and outcome since the last reset (shared memory).
CREATE FUNCTION bc_join.attestor_stats(
	OUT attestor text, OUT outcome text, OUT calls bigint, OUT total_ms double precision,
	OUT mean_ms double precision, OUT min_ms double precision, OUT max_ms double precision,
	OUT p50_ms double precision, OUT p99_ms double precision, OUT histogram jsonb)
	RETURNS SETOF record
	AS 'MODULE_PATHNAME', 'bc_attestor_stats' LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION bc_join.attestor_stats() IS
	'Returns, from shared memory, one row per attestor and outcome since the last reset: calls, total, mean, min, max, p50 and p99 milliseconds, and the latency histogram (read it through the attestor_statistics view).';

-- The counterpart of meteredAttestor: verifications by attestor and outcome
-- (admitted, deferred-approval, deferred-challenge, refused, error) and their
-- timing.  p50/p99 are the upper bounds of the histogram buckets holding them.
CREATE VIEW bc_join.attestor_statistics AS
	SELECT * FROM bc_join.attestor_stats() ORDER BY attestor, outcome;
COMMENT ON VIEW bc_join.attestor_statistics IS
	'Verifications by attestor and outcome (admitted, deferred-approval, deferred-challenge, refused, error) since the last reset, with their timing in milliseconds (p50/p99 are histogram bucket bounds).';

-- Forget every counter; returns when.
CREATE FUNCTION bc_join.attestor_stats_reset() RETURNS timestamptz
	AS 'MODULE_PATHNAME', 'bc_attestor_stats_reset' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION bc_join.attestor_stats_reset() IS
	'Forgets every attestor counter in shared memory and returns the time of the reset.';

/* ---------------------------------------------------- tenant operators */

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
COMMENT ON TABLE bc_join.tenant_operator_grants IS
	'Which role operates which tenant (grant_tenant_operator): what row-level security and check_tenant read.';
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
COMMENT ON FUNCTION bc_join.calling_role() IS
	'Internal: the role that called, also inside a SECURITY DEFINER function: the role SET ROLE made current, else the session''s user.';

-- Whether the calling role operates every tenant: the superuser, and the
-- members of bc_join_operator (with its privileges).
CREATE FUNCTION bc_join.is_platform_operator() RETURNS boolean
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, pg_temp
	AS $$ SELECT coalesce(pg_catalog.pg_has_role(bc_join.calling_role(), 'bc_join_operator', 'USAGE'), false) $$;
COMMENT ON FUNCTION bc_join.is_platform_operator() IS
	'Internal: whether the calling role operates every tenant (the superuser, members of bc_join_operator).';

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
COMMENT ON FUNCTION bc_join.check_tenant(text, text) IS
	'Internal: returns when the calling role operates the tenant (a platform operator operates every tenant); raises 42501 ACCESS_DENIED otherwise, the same for an object of another tenant and for none.';

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
COMMENT ON FUNCTION bc_join.grant_tenant_operator(regrole, text) IS
	'Makes a role an operator of one tenant (it reads and administers that tenant''s objects alone, by row-level security and checks in every administrative function); superuser or platform operator only; audited and evented; returns false when it was one already.';

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
COMMENT ON FUNCTION bc_join.revoke_tenant_operator(regrole, text) IS
	'Takes a tenant from a tenant operator (with its last, its membership of bc_join_tenant_operator); superuser or platform operator only; audited and evented; returns whether it operated the tenant.';

-- Who operates what: one row per tenant operator and tenant (a tenant
-- operator sees its own rows, the platform operator every row).
CREATE VIEW bc_join.tenant_operators WITH (security_invoker = true) AS
	SELECT g.role::text AS role, g.tenant_id, t.name AS tenant, r.rolcanlogin AS can_login,
		   r.oid IS NULL AS dropped, g.granted_at, g.granted_by
	FROM bc_join.tenant_operator_grants g
	JOIN bc_join.tenants t ON t.id = g.tenant_id
	LEFT JOIN pg_catalog.pg_roles r ON r.oid = g.role
	ORDER BY t.name, g.tenant_id, g.role::text;
COMMENT ON VIEW bc_join.tenant_operators IS
	'Who operates what: each tenant operator role with a tenant it operates, whether it can log in or was dropped, when and by whom it was granted (a tenant operator sees its own rows).';

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

/* ------------------------------------------------------------- backups */

-- pg_dump keeps every row: the state of this CA is in these tables, and a
-- dump without them (pg_dump leaves out an extension's tables unless they
-- are marked) would restore a CA that forgot every node, certificate, token,
-- use of evidence and row of its issuance log.  The rows the install script
-- writes itself are left out (the built-in command kinds), so that a restore
-- does not insert them twice; so is nothing else.  The root tenant's row is
-- kept (its created_at and request_channel as they were) and replaces the
-- one the restore's CREATE EXTENSION made (tenants_restore_root()).  Every
-- table of the schema is marked (test: test/regress/sql/regress_backup.sql),
-- and every sequence the tables draw from.
SELECT pg_catalog.pg_extension_config_dump('bc_join.tenants', '');
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
SELECT pg_catalog.pg_extension_config_dump('bc_join.challenge_deadlines', '');
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
SELECT pg_catalog.pg_extension_config_dump('bc_join.tenant_operator_grants', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.events_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.audit_log_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.cloud_trust_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.cloud_accounts_id_seq', '');

/* ---------------------------------------------------------- privileges */

REVOKE ALL ON SCHEMA bc_join FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA bc_join FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA bc_join FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA bc_join FROM PUBLIC;
REVOKE ALL ON FUNCTION public.bc_join(jsonb) FROM PUBLIC;

-- The gateway: the relayed entry points and nothing else.
GRANT EXECUTE ON FUNCTION public.bc_join(jsonb) TO bc_join_gateway;
GRANT USAGE ON SCHEMA bc_join TO bc_join_gateway;
GRANT EXECUTE ON FUNCTION bc_join.renew(jsonb), bc_join.issue_session(jsonb), bc_join.crl(),
	bc_join.audit_anchor(), bc_join.fetch_commands(jsonb), bc_join.complete_command(jsonb),
	bc_join.site_epoch(jsonb), bc_join.signed_service_keys(),
	bc_join.issue_jwt_svid(jsonb), bc_join.spiffe_bundle(), bc_join.ocsp_response(bytea)
	TO bc_join_gateway;

-- Operators: administration, public keys, and reading what happened.
GRANT USAGE ON SCHEMA bc_join TO bc_join_operator;
GRANT EXECUTE ON FUNCTION
	bc_join.compute_now(),
	bc_join.library_version(),
	bc_join.create_tenant(text),
	bc_join.create_site(text, text),
	bc_join.create_pool(text, text, text),
	bc_join.create_join_token(text, text, integer, interval, text, jsonb, boolean, text),
	bc_join.revoke_join_token(text),
	bc_join.create_provisioning_token(text, interval),
	bc_join.revoke_provisioning_token(text),
	bc_join.revoke_certificate(text, text),
	bc_join.verify_audit_log(),
	bc_join.verify_audit_log(text),
	bc_join.audit_log_problems(integer),
	bc_join.request_channel(text),
	bc_join.refusal_channel(text),
	bc_join.rotate_request_channel(text),
	bc_join.check_evidence(text, bytea, timestamptz, bytea, text),
	bc_join.audit_anchor(),
	bc_join.audit_anchor_payload(text),
	bc_join.audit_anchor_problems(text),
	bc_join.audit_content(bigint, timestamptz, text, text, text, text, jsonb),
	bc_join.compute_clock(),
	bc_join.revoke_node(text, text),
	bc_join.crl(),
	bc_join.crl_pem(),
	bc_join.ocsp_response(bytea),
	bc_join.approve_join_request(text),
	bc_join.reject_join_request(text, text),
	bc_join.retire_node(text),
	bc_join.delete_node(text),
	bc_join.add_x509pop_root(text, text, text),
	bc_join.remove_x509pop_root(text),
	bc_join.register_command_kind(text, text),
	bc_join.prune_attestation_uses(integer),
	bc_join.prune_events(integer),
	bc_join.prune_certificates(integer),
	bc_join.prune_sessions(integer),
	bc_join.prune_join_requests(integer),
	bc_join.prune(integer),
	bc_join.setting_interval(text),
	bc_join.b64url_encode(bytea),
	bc_join.b64url_decode(text),
	bc_join.attestor_stats(),
	bc_join.attestor_stats_reset(),
	bc_join.signing_jwk(),
	bc_join.encryption_jwk(),
	bc_join.node_ca_certificate(),
	bc_join.service_keys(),
	bc_join.signed_service_keys(),
	bc_join.spiffe_bundle(),
	bc_join.add_tpm_ek_root(text),
	bc_join.remove_tpm_ek_root(text),
	bc_join.enroll_tpm_ek(text, text, text, text, text, bytea, text),
	bc_join.unenroll_tpm_ek(text),
	bc_join.set_tpm_pcr_policy(text, text, text, bytea),
	bc_join.set_tpm_enrollment_mode(text, text),
	bc_join.tpm_pcr_selection(text, bytea),
	bc_join.tpm_ek_certificate(text),
	bc_join.enqueue_command(text, text, jsonb),
	bc_join.kind_allowed(text[], text),
	bc_join.set_discovery_site(text, text, text[], integer),
	bc_join.bump_site_epoch(text)
	TO bc_join_operator;
GRANT SELECT ON
	bc_join.tenants, bc_join.sites, bc_join.pools, bc_join.nodes, bc_join.node_certs,
	bc_join.node_bindings, bc_join.join_requests, bc_join.attestation_uses,
	bc_join.events, bc_join.audit_log, bc_join.attestors, bc_join.command_kinds,
	bc_join.refusal_rate, bc_join.pending_join_requests, bc_join.attestor_statistics,
	bc_join.sessions, bc_join.session_certs, bc_join.revoked_certificates, bc_join.audit_export,
	bc_join.tpm_ek_certificates, bc_join.tpm_ek_enrollments, bc_join.tpm_pcr_policies,
	bc_join.tpm_settings, bc_join.tpm_eks,
	bc_join.x509pop_roots, bc_join.stale_nodes, bc_join.commands, bc_join.command_status,
	bc_join.discovery_sites
	TO bc_join_operator;
-- Custom attestors' challenges and when they expire.
GRANT SELECT ON bc_join.challenge_deadlines TO bc_join_operator;
-- discovery: operators list the machines a site knows (approval unknown-machines).
GRANT SELECT, INSERT, DELETE ON bc_join.discovery_machines TO bc_join_operator;
-- Token rows without their secret hash.
GRANT SELECT (id, tenant_id, pool_id, site_id, uses_total, uses_left, expires_at, role,
			  expect, allow_reclaim, created_at, created_by, revoked_at)
	ON bc_join.join_tokens TO bc_join_operator;
GRANT SELECT (id, node_id, tenant_id, expires_at, created_at, created_by, spent_at, revoked_at)
	ON bc_join.provisioning_tokens TO bc_join_operator;
GRANT SELECT ON bc_join.provisioning_resolver TO bc_join_operator;
-- cloud-iid: the operator edits its configuration in psql and resets instances.
GRANT SELECT, INSERT, UPDATE, DELETE ON bc_join.cloud_trust, bc_join.cloud_providers,
	bc_join.cloud_accounts TO bc_join_operator;
GRANT SELECT ON bc_join.cloud_resolver TO bc_join_operator;
GRANT USAGE ON SEQUENCE bc_join.cloud_trust_id_seq, bc_join.cloud_accounts_id_seq TO bc_join_operator;
GRANT EXECUTE ON FUNCTION bc_join.reset_cloud_instance(text, text, text),
	bc_join.cloud_instance_bind(text, text, text), bc_join.cloud_builtin_provider(text) TO bc_join_operator;

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
	bc_join.request_channel(text),
	bc_join.refusal_channel(text),
	bc_join.rotate_request_channel(text),
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
	bc_join.signed_service_keys(),
	bc_join.spiffe_bundle()
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

/* ------------------------------------- #44: continuous attestation (docs/attestation.md) */

/*
 * A TPM-bound node (its certificate carries urn:bc:tpm-ak:) attests at the
 * interval its pool sets: bc_join.attest() (two rounds: a nonce, then a quote
 * by its AK over it with the event log and the IMA list) judges the quote,
 * the replayed logs and the policy below inside the transaction.  A failure
 * the TPM signed quarantines the node in that same transaction
 * (bc_join.quarantine_node: certificates revoked, event, audit, NOTIFY).
 */

-- Per pool: how often, over which PCRs, and whether the policy is enforced.
CREATE TABLE bc_join.attestation_settings (
	pool_id text PRIMARY KEY REFERENCES bc_join.pools (id) ON DELETE CASCADE,
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	interval_seconds integer NOT NULL DEFAULT 60 CHECK (interval_seconds BETWEEN 5 AND 3600),
	-- the PCRs quoted and replayed from the event log (PCR 10 is always
	-- quoted too, for IMA, and never replayed from the event log)
	pcrs integer[] NOT NULL DEFAULT '{0,1,2,3,4,5,6,7}'
		CHECK (cardinality(pcrs) BETWEEN 1 AND 24 AND pcrs <@ '{0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23}'),
	-- observe: what nodes measure is recorded (boot_observations,
	-- ima_observations), the policy is not applied; enforce: it is
	mode text NOT NULL DEFAULT 'observe' CHECK (mode IN ('observe', 'enforce')),
	-- a healthy node without a passing quote for this many intervals is missed
	missed_intervals integer NOT NULL DEFAULT 3 CHECK (missed_intervals BETWEEN 1 AND 1000),
	-- what attestation_sweep() does to a missed node: quarantine it (revoke)
	-- or only write the event
	on_missed text NOT NULL DEFAULT 'event' CHECK (on_missed IN ('revoke', 'event')),
	updated_at timestamptz NOT NULL DEFAULT bc_join.compute_now()
);
COMMENT ON TABLE bc_join.attestation_settings IS
	'Continuous attestation per pool (set_attestation_settings): interval, PCRs quoted, mode (observe or enforce), how many missed intervals and what a miss does; a pool without a row: 60 s, PCRs 0-7, observe, 3, event.';

-- Measured-boot policy rows: an event allowed on a PCR (every event replayed
-- on a selected PCR must match one in enforce mode).
CREATE TABLE bc_join.boot_policy (
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	pool_id text REFERENCES bc_join.pools (id) ON DELETE CASCADE,	-- NULL: every pool of the tenant
	pcr integer NOT NULL CHECK (pcr BETWEEN 0 AND 23),
	event_type text NOT NULL CHECK (event_type ~ '^(EV_[A-Z0-9_]+|0x[0-9a-f]{8})$'),
	digest bytea NOT NULL CHECK (length(digest) = 32),	-- the event's SHA-256 bank digest
	note text,
	created_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	created_by text NOT NULL DEFAULT session_user
);
COMMENT ON TABLE bc_join.boot_policy IS
	'Measured-boot policy: per tenant (pool_id NULL) or pool, the (PCR, event type, SHA-256 digest) an event of a node''s event log may have; in enforce mode every event on a quoted PCR must match a row.';
CREATE UNIQUE INDEX boot_policy_idx ON bc_join.boot_policy
	(tenant_id, coalesce(pool_id, ''), pcr, event_type, digest);

-- Runtime (IMA) allowlist: a file's digest allowed at a path.
CREATE TABLE bc_join.ima_policy (
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	pool_id text REFERENCES bc_join.pools (id) ON DELETE CASCADE,	-- NULL: every pool of the tenant
	path text NOT NULL CHECK (length(path) BETWEEN 1 AND 4095),
	digest bytea NOT NULL CHECK (length(digest) BETWEEN 20 AND 64),	-- the file digest IMA lists
	note text,
	created_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	created_by text NOT NULL DEFAULT session_user
);
COMMENT ON TABLE bc_join.ima_policy IS
	'Runtime (IMA) allowlist per tenant (pool_id NULL) or pool: a file digest allowed at a path; in enforce mode every IMA entry not excluded must match a row.';
CREATE UNIQUE INDEX ima_policy_idx ON bc_join.ima_policy (tenant_id, coalesce(pool_id, ''), path, digest);

-- Paths IMA may measure with any digest (a regular expression on the path).
CREATE TABLE bc_join.ima_excludes (
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	pool_id text REFERENCES bc_join.pools (id) ON DELETE CASCADE,	-- NULL: every pool of the tenant
	path_regex text NOT NULL CHECK (length(path_regex) BETWEEN 1 AND 1024),
	note text,
	created_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	created_by text NOT NULL DEFAULT session_user
);
COMMENT ON TABLE bc_join.ima_excludes IS
	'IMA paths excluded from the runtime policy per tenant (pool_id NULL) or pool: a POSIX regular expression matched against the measured path.';

-- What nodes measured (observe mode), to be promoted into boot_policy.
CREATE TABLE bc_join.boot_observations (
	node_id text NOT NULL REFERENCES bc_join.nodes (id) ON DELETE CASCADE,
	pcr integer NOT NULL,
	event_type text NOT NULL,
	digest bytea NOT NULL,
	first_seen timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	last_seen timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	seen integer NOT NULL DEFAULT 1,
	PRIMARY KEY (node_id, pcr, event_type, digest)
);
COMMENT ON TABLE bc_join.boot_observations IS
	'Measured-boot events nodes reported in observe mode (PCR, event type, SHA-256 digest), first and last seen and in how many hours (last_seen moves at most once an hour): promote_observations() turns them into boot_policy rows.';

-- What IMA measured on nodes (observe mode), to be promoted into ima_policy.
CREATE TABLE bc_join.ima_observations (
	node_id text NOT NULL REFERENCES bc_join.nodes (id) ON DELETE CASCADE,
	path text NOT NULL,
	digest bytea NOT NULL,
	first_seen timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	last_seen timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	seen integer NOT NULL DEFAULT 1,
	PRIMARY KEY (node_id, path, digest)
);
COMMENT ON TABLE bc_join.ima_observations IS
	'Files IMA measured on nodes in observe mode (path, file digest), first and last seen and in how many hours (last_seen moves at most once an hour): promote_observations() turns them into ima_policy rows.';

-- Per node: where its attestation stands, and the TPM state it was last seen in.
CREATE TABLE bc_join.node_attestation (
	node_id text PRIMARY KEY REFERENCES bc_join.nodes (id) ON DELETE CASCADE,
	state text NOT NULL DEFAULT 'unattested' CHECK (state = ANY ('{unattested,healthy,quarantined}'::text[])),
	last_quote_at timestamptz,
	last_result text CHECK (last_result = ANY ('{passed,failed,missed}'::text[])),
	last_reason text,
	last_passed_at timestamptz,
	-- the TPM's clockInfo of the last accepted quote
	reset_count bigint,
	restart_count bigint,
	clock bigint,
	-- the IMA list: entries accepted so far, and PCR 10 (SHA-256) after them
	ima_offset bigint NOT NULL DEFAULT 0 CHECK (ima_offset >= 0),
	ima_pcr10 bytea,
	failures integer NOT NULL DEFAULT 0,
	quarantined_at timestamptz,
	quarantine_reason text,
	missed_reported_at timestamptz,
	readmitted_at timestamptz
);
COMMENT ON TABLE bc_join.node_attestation IS
	'Continuous attestation per node: state (unattested, healthy, quarantined), the last quote, its result and reason, the TPM resetCount/restartCount/clock of the last accepted quote, the IMA offset and running PCR 10, failures and quarantine.';
-- bc_join.metrics() (#48) counts the quarantined and the missed nodes from
-- these: few rows, and a quote that changes neither column stays a HOT update.
CREATE INDEX node_attestation_quarantined_idx ON bc_join.node_attestation (node_id)
	WHERE state = 'quarantined';
CREATE INDEX node_attestation_missed_idx ON bc_join.node_attestation (node_id)
	WHERE missed_reported_at IS NOT NULL;

-- Set a pool's attestation settings (NULL keeps a value, or takes the default).
CREATE FUNCTION bc_join.set_attestation_settings(pool_id text, mode text DEFAULT NULL,
		interval_seconds integer DEFAULT NULL, pcrs integer[] DEFAULT NULL,
		missed_intervals integer DEFAULT NULL, on_missed text DEFAULT NULL)
	RETURNS bc_join.attestation_settings
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	tenant text := (SELECT p.tenant_id FROM bc_join.pools p WHERE p.id = set_attestation_settings.pool_id);
	r bc_join.attestation_settings;
BEGIN
	PERFORM bc_join.check_tenant(tenant, 'pool');
	IF tenant IS NULL THEN
		PERFORM bc_join.invalid_input('no pool has this id');
	END IF;
	INSERT INTO bc_join.attestation_settings AS s (pool_id, tenant_id, mode, interval_seconds, pcrs,
			missed_intervals, on_missed)
		VALUES (set_attestation_settings.pool_id, tenant, coalesce(set_attestation_settings.mode, 'observe'),
				coalesce(set_attestation_settings.interval_seconds, 60),
				coalesce(set_attestation_settings.pcrs, '{0,1,2,3,4,5,6,7}'),
				coalesce(set_attestation_settings.missed_intervals, 3),
				coalesce(set_attestation_settings.on_missed, 'event'))
		ON CONFLICT ON CONSTRAINT attestation_settings_pkey DO UPDATE SET
			mode = coalesce(set_attestation_settings.mode, s.mode),
			interval_seconds = coalesce(set_attestation_settings.interval_seconds, s.interval_seconds),
			pcrs = coalesce(set_attestation_settings.pcrs, s.pcrs),
			missed_intervals = coalesce(set_attestation_settings.missed_intervals, s.missed_intervals),
			on_missed = coalesce(set_attestation_settings.on_missed, s.on_missed),
			updated_at = bc_join.compute_now()
		RETURNING * INTO r;
	INSERT INTO bc_join.audit_log (action, tenant_id, detail)
		VALUES ('attestation.settings', tenant, to_jsonb(r) - 'updated_at');
	RETURN r;
END
$$;
COMMENT ON FUNCTION bc_join.set_attestation_settings(text, text, integer, integer[], integer, text) IS
	'Sets a pool''s continuous attestation (mode observe|enforce, interval 5-3600 s, PCRs, missed intervals, on_missed revoke|event); NULL keeps the current value (or the default); audited; returns the row.';

/*
 * Quarantine a node, in the caller's transaction: node_attestation says so,
 * every live certificate of the node and the session certificates asked with
 * them are revoked (reason attestation-failed), the event node.quarantined
 * carries what failed, an audit row, NOTIFY on the tenant's request channel
 * and on bc_join_crl.  Internal: bc_join.attest() and attestation_sweep()
 * call it; false when the node was quarantined already (only the failure is
 * recorded then).
 */
CREATE FUNCTION bc_join.quarantine_node(node_id text, reason text, detail jsonb)
	RETURNS boolean
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	tenant text;
	serials text[];
	sessions bigint := 0;
	was text;
BEGIN
	SELECT n.tenant_id INTO tenant FROM bc_join.nodes n WHERE n.id = quarantine_node.node_id FOR UPDATE;
	IF NOT FOUND THEN
		PERFORM bc_join.invalid_input('no node has this id');
	END IF;
	INSERT INTO bc_join.node_attestation AS a (node_id) VALUES (quarantine_node.node_id)
		ON CONFLICT ON CONSTRAINT node_attestation_pkey DO NOTHING;
	SELECT a.state INTO was FROM bc_join.node_attestation a WHERE a.node_id = quarantine_node.node_id FOR UPDATE;
	UPDATE bc_join.node_attestation a SET state = 'quarantined', last_result = 'failed',
		last_reason = quarantine_node.reason, failures = a.failures + 1,
		quarantined_at = CASE WHEN was = 'quarantined' THEN a.quarantined_at ELSE bc_join.compute_now() END,
		quarantine_reason = CASE WHEN was = 'quarantined' THEN a.quarantine_reason ELSE quarantine_node.reason END
		WHERE a.node_id = quarantine_node.node_id;
	IF was = 'quarantined' THEN
		RETURN false;
	END IF;
	WITH r AS (
		UPDATE bc_join.node_certs c SET revoked_at = bc_join.compute_now(), revocation_reason = 'attestation-failed'
			WHERE c.node_id = quarantine_node.node_id AND c.revoked_at IS NULL RETURNING c.serial)
	SELECT coalesce(array_agg(r.serial ORDER BY r.serial), '{}') INTO serials FROM r;
	UPDATE bc_join.session_certs sc SET revoked_at = bc_join.compute_now(), revocation_reason = 'attestation-failed'
		FROM bc_join.sessions s
		WHERE s.id = sc.session_id AND s.node_id = quarantine_node.node_id AND sc.revoked_at IS NULL;
	GET DIAGNOSTICS sessions = ROW_COUNT;
	INSERT INTO bc_join.events (tenant_id, type, payload)
		VALUES (tenant, 'node.quarantined',
				jsonb_build_object('nodeId', node_id, 'reason', reason, 'detail', detail,
								   'revokedSerials', to_jsonb(serials), 'sessionCertificates', sessions));
	INSERT INTO bc_join.audit_log (action, tenant_id, node_id, detail)
		VALUES ('node.quarantine', tenant, node_id,
				jsonb_build_object('reason', reason, 'detail', detail, 'revokedSerials', to_jsonb(serials),
								   'sessionCertificates', sessions));
	PERFORM pg_notify(t.request_channel, '') FROM bc_join.tenants t WHERE t.id = tenant;
	PERFORM pg_notify('bc_join_crl', '');
	RETURN true;
END
$$;
COMMENT ON FUNCTION bc_join.quarantine_node(text, text, jsonb) IS
	'Internal: quarantines a node in the caller''s transaction (its live node and session certificates revoked for attestation-failed, event node.quarantined with what failed, audit row, NOTIFY to the tenant''s request channel and bc_join_crl); false when it was quarantined already.';

-- Readmit a quarantined node after a quote that passed the current policy.
CREATE FUNCTION bc_join.readmit_node(node_id text) RETURNS void
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	a bc_join.node_attestation;
	tenant text := (SELECT n.tenant_id FROM bc_join.nodes n WHERE n.id = readmit_node.node_id);
BEGIN
	PERFORM bc_join.check_tenant(tenant, 'node');
	SELECT * INTO a FROM bc_join.node_attestation x WHERE x.node_id = readmit_node.node_id FOR UPDATE;
	IF NOT FOUND OR a.state <> 'quarantined' THEN
		PERFORM bc_join.invalid_input('the node is not quarantined');
	END IF;
	IF a.last_passed_at IS NULL OR a.last_passed_at <= a.quarantined_at OR a.last_result <> 'passed' THEN
		RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
			MESSAGE = 'the node has no passing quote since it was quarantined',
			DETAIL = 'A quarantined node keeps attesting; its latest quote must pass the current policy before it is readmitted.',
			HINT = 'Look at bc_join.attestation_state and the node''s node.quarantined and security.join.refused events.';
	END IF;
	UPDATE bc_join.node_attestation x SET state = 'healthy', readmitted_at = bc_join.compute_now(),
		failures = 0, quarantined_at = NULL, quarantine_reason = NULL, missed_reported_at = NULL
		WHERE x.node_id = readmit_node.node_id;
	INSERT INTO bc_join.events (tenant_id, type, payload)
		VALUES (tenant, 'node.readmitted', jsonb_build_object('nodeId', node_id,
				'quarantinedAt', a.quarantined_at, 'reason', a.quarantine_reason));
	INSERT INTO bc_join.audit_log (action, tenant_id, node_id, detail)
		VALUES ('node.readmit', tenant, node_id, jsonb_build_object('quarantinedAt', a.quarantined_at,
				'reason', a.quarantine_reason));
END
$$;
COMMENT ON FUNCTION bc_join.readmit_node(text) IS
	'Readmits a quarantined node whose latest quote, made after the quarantine, passed the current policy: healthy again, evented and audited; its revoked certificates stay revoked (it joins again by its attestor as the same node).';

-- Copy a pool's observations into its policy; returns how many rows were added.
CREATE FUNCTION bc_join.promote_observations(pool_id text) RETURNS integer
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	tenant text := (SELECT p.tenant_id FROM bc_join.pools p WHERE p.id = promote_observations.pool_id);
	nb integer;
	ni integer;
BEGIN
	PERFORM bc_join.check_tenant(tenant, 'pool');
	IF tenant IS NULL THEN
		PERFORM bc_join.invalid_input('no pool has this id');
	END IF;
	INSERT INTO bc_join.boot_policy (tenant_id, pool_id, pcr, event_type, digest, note)
		SELECT DISTINCT tenant, promote_observations.pool_id, o.pcr, o.event_type, o.digest, 'promoted'
		FROM bc_join.boot_observations o JOIN bc_join.nodes n ON n.id = o.node_id
		WHERE n.pool_id = promote_observations.pool_id AND length(o.digest) = 32
		ON CONFLICT DO NOTHING;
	GET DIAGNOSTICS nb = ROW_COUNT;
	INSERT INTO bc_join.ima_policy (tenant_id, pool_id, path, digest, note)
		SELECT DISTINCT tenant, promote_observations.pool_id, o.path, o.digest, 'promoted'
		FROM bc_join.ima_observations o JOIN bc_join.nodes n ON n.id = o.node_id
		WHERE n.pool_id = promote_observations.pool_id
		ON CONFLICT DO NOTHING;
	GET DIAGNOSTICS ni = ROW_COUNT;
	INSERT INTO bc_join.audit_log (action, tenant_id, detail)
		VALUES ('attestation.promote', tenant, jsonb_build_object('poolId', pool_id, 'bootPolicy', nb, 'imaPolicy', ni));
	RETURN nb + ni;
END
$$;
COMMENT ON FUNCTION bc_join.promote_observations(text) IS
	'Adds what the pool''s nodes were observed to measure (boot_observations, ima_observations) to the pool''s boot_policy and ima_policy (rows already there are kept); audited; returns how many rows were added.';

/*
 * Nodes that stopped attesting, or never started: a healthy node whose last
 * passing quote is older than missed_intervals x interval_seconds of its
 * pool, and a node with a live certificate bound to a TPM AK (its node key
 * statement urn:bc:tpm-ak:, what POST /v1/attest requires) that has not
 * passed a quote for as long since that certificate was issued (its
 * node_attestation row missing, or unattested), get the event
 * node.attestation.missed (once per miss), and are quarantined when the pool
 * says on_missed = 'revoke'.  The second kind since 0.10.0: a host
 * compromised before its first quote, or whose bcd runs with --no-attest,
 * no longer keeps its certificates until they expire.  Run it from pg_cron
 * every minute.
 */
CREATE FUNCTION bc_join.attestation_sweep() RETURNS integer
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	m record;
	n integer := 0;
BEGIN
	-- AK-bound nodes never attested: a row of their own first (unattested),
	-- so that the loop below reports them once, as it does the others
	INSERT INTO bc_join.node_attestation (node_id)
		SELECT c.node_id
		FROM bc_join.node_certs c
		WHERE c.revoked_at IS NULL AND c.not_after > bc_join.compute_now()
		  AND starts_with(c.node_key_uri, 'urn:bc:tpm-ak:')
		  AND NOT EXISTS (SELECT 1 FROM bc_join.node_attestation a WHERE a.node_id = c.node_id)
		GROUP BY c.node_id
		ORDER BY c.node_id
		ON CONFLICT ON CONSTRAINT node_attestation_pkey DO NOTHING;
	FOR m IN
		SELECT a.node_id, x.tenant_id, coalesce(s.on_missed, 'event') AS on_missed,
			   coalesce(s.interval_seconds, 60) AS iv, coalesce(s.missed_intervals, 3) AS k,
			   a.last_passed_at
		FROM bc_join.node_attestation a JOIN bc_join.nodes x ON x.id = a.node_id
		LEFT JOIN bc_join.attestation_settings s ON s.pool_id = x.pool_id
		WHERE x.state <> 'retired' AND a.missed_reported_at IS NULL
		  AND (a.state = 'healthy'
			   AND coalesce(a.last_passed_at, '-infinity') < bc_join.compute_now()
				   - make_interval(secs => coalesce(s.interval_seconds, 60) * coalesce(s.missed_intervals, 3))
			   OR a.state = 'unattested'
			   AND (SELECT max(c.issued_at) FROM bc_join.node_certs c
					WHERE c.node_id = a.node_id AND c.revoked_at IS NULL
					  AND c.not_after > bc_join.compute_now()
					  AND starts_with(c.node_key_uri, 'urn:bc:tpm-ak:'))
				   < bc_join.compute_now()
				   - make_interval(secs => coalesce(s.interval_seconds, 60) * coalesce(s.missed_intervals, 3)))
		ORDER BY a.node_id
		FOR UPDATE OF a SKIP LOCKED
	LOOP
		UPDATE bc_join.node_attestation a SET missed_reported_at = bc_join.compute_now(), last_result = 'missed',
			last_reason = 'missed-intervals'
			WHERE a.node_id = m.node_id;
		INSERT INTO bc_join.events (tenant_id, type, payload)
			VALUES (m.tenant_id, 'node.attestation.missed',
					jsonb_build_object('nodeId', m.node_id, 'lastPassedAt', m.last_passed_at,
									   'intervalSeconds', m.iv, 'missedIntervals', m.k, 'action', m.on_missed));
		IF m.on_missed = 'revoke' THEN
			PERFORM bc_join.quarantine_node(m.node_id, 'missed-intervals',
				jsonb_build_object('lastPassedAt', m.last_passed_at, 'intervalSeconds', m.iv, 'missedIntervals', m.k));
		END IF;
		n := n + 1;
	END LOOP;
	RETURN n;
END
$$;
COMMENT ON FUNCTION bc_join.attestation_sweep() IS
	'Finds healthy nodes without a passing quote for missed_intervals intervals of their pool, and nodes with a live certificate bound to a TPM AK that have not passed one for as long since it was issued: event node.attestation.missed (once per miss), and quarantine when the pool says on_missed revoke; returns how many; run it from pg_cron every minute.';

/*
 * The attestation entry point (POST /v1/attest): round 1 {"proof"} answers
 * a nonce in a sealed state; round 2 {"proof", "state", "akPub", "quote",
 * "quoteSignature", "pcrValues", "eventLog"?, "ima"?} is judged: "attested",
 * "quarantined" (signed), or the one refusal.  See docs/protocol.md.
 */
CREATE FUNCTION bc_join.attest(request jsonb) RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_attest_request'
	LANGUAGE C VOLATILE STRICT SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION bc_join.attest(jsonb) IS
	'Continuous attestation of a TPM-bound node, proven by its node key (purpose attest): round 1 answers a nonce; round 2 judges the quote, the event log and IMA list replayed, the TPM clock and the pool''s policy, and quarantines the node in the same transaction when the TPM reported a failure; returns the signed answer or the one refusal.';

-- Each node's attestation as operators read it.
CREATE VIEW bc_join.attestation_state AS
	SELECT n.id AS node_id, n.tenant_id, n.pool_id, coalesce(a.state, 'unattested') AS state,
		   coalesce(s.mode, 'observe') AS mode, coalesce(s.interval_seconds, 60) AS interval_seconds,
		   a.last_quote_at, a.last_result, a.last_reason, a.last_passed_at, a.failures,
		   a.quarantined_at, a.quarantine_reason, a.readmitted_at, a.reset_count, a.restart_count,
		   a.ima_offset,
		   a.last_passed_at IS NOT NULL AND a.last_passed_at < bc_join.compute_now()
			   - make_interval(secs => coalesce(s.interval_seconds, 60) * coalesce(s.missed_intervals, 3)) AS overdue,
		   (SELECT count(*) FROM bc_join.boot_observations o WHERE o.node_id = n.id) AS boot_observed,
		   (SELECT count(*) FROM bc_join.boot_observations o WHERE o.node_id = n.id AND NOT EXISTS (
				SELECT 1 FROM bc_join.boot_policy p WHERE p.tenant_id = n.tenant_id
				AND (p.pool_id IS NULL OR p.pool_id = n.pool_id) AND p.pcr = o.pcr
				AND p.event_type = o.event_type AND p.digest = o.digest)) AS boot_observed_not_allowed,
		   (SELECT count(*) FROM bc_join.ima_observations o WHERE o.node_id = n.id) AS ima_observed,
		   (SELECT count(*) FROM bc_join.ima_observations o WHERE o.node_id = n.id AND NOT EXISTS (
				SELECT 1 FROM bc_join.ima_policy p WHERE p.tenant_id = n.tenant_id
				AND (p.pool_id IS NULL OR p.pool_id = n.pool_id) AND p.path = o.path
				AND p.digest = o.digest)) AS ima_observed_not_allowed
	FROM bc_join.nodes n
	LEFT JOIN bc_join.node_attestation a ON a.node_id = n.id
	LEFT JOIN bc_join.attestation_settings s ON s.pool_id = n.pool_id
	WHERE n.state <> 'retired';
COMMENT ON VIEW bc_join.attestation_state IS
	'Each live node''s continuous attestation: state, mode, last quote and its result and reason, last pass, failures, quarantine, TPM counters, IMA offset, overdue, and observed measurements against the allowed ones.';
ALTER VIEW bc_join.attestation_state SET (security_invoker = true);

ALTER TABLE bc_join.attestation_settings ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.attestation_settings
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR tenant_id IN (SELECT g.tenant_id FROM bc_join.tenant_operator_grants g));
ALTER TABLE bc_join.boot_policy ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.boot_policy
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR tenant_id IN (SELECT g.tenant_id FROM bc_join.tenant_operator_grants g));
ALTER TABLE bc_join.ima_policy ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.ima_policy
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR tenant_id IN (SELECT g.tenant_id FROM bc_join.tenant_operator_grants g));
ALTER TABLE bc_join.ima_excludes ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.ima_excludes
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR tenant_id IN (SELECT g.tenant_id FROM bc_join.tenant_operator_grants g));
ALTER TABLE bc_join.boot_observations ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.boot_observations
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR node_id IN (SELECT n.id FROM bc_join.nodes n));
ALTER TABLE bc_join.ima_observations ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.ima_observations
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR node_id IN (SELECT n.id FROM bc_join.nodes n));
ALTER TABLE bc_join.node_attestation ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.node_attestation
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR node_id IN (SELECT n.id FROM bc_join.nodes n));

SELECT pg_catalog.pg_extension_config_dump('bc_join.attestation_settings', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.boot_policy', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.ima_policy', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.ima_excludes', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.boot_observations', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.ima_observations', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.node_attestation', '');

REVOKE ALL ON bc_join.attestation_settings, bc_join.boot_policy, bc_join.ima_policy, bc_join.ima_excludes,
	bc_join.boot_observations, bc_join.ima_observations, bc_join.node_attestation,
	bc_join.attestation_state FROM PUBLIC;
REVOKE ALL ON FUNCTION bc_join.set_attestation_settings(text, text, integer, integer[], integer, text),
	bc_join.quarantine_node(text, text, jsonb), bc_join.readmit_node(text),
	bc_join.promote_observations(text), bc_join.attestation_sweep(), bc_join.attest(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bc_join.attest(jsonb) TO bc_join_gateway;
GRANT EXECUTE ON FUNCTION bc_join.set_attestation_settings(text, text, integer, integer[], integer, text),
	bc_join.readmit_node(text), bc_join.promote_observations(text), bc_join.attestation_sweep()
	TO bc_join_operator;
GRANT EXECUTE ON FUNCTION bc_join.set_attestation_settings(text, text, integer, integer[], integer, text),
	bc_join.readmit_node(text), bc_join.promote_observations(text)
	TO bc_join_tenant_operator;
GRANT SELECT ON bc_join.attestation_settings, bc_join.node_attestation, bc_join.boot_observations,
	bc_join.ima_observations, bc_join.attestation_state TO bc_join_operator, bc_join_tenant_operator;
GRANT SELECT, INSERT, UPDATE, DELETE ON bc_join.boot_policy, bc_join.ima_policy, bc_join.ima_excludes
	TO bc_join_operator, bc_join_tenant_operator;
GRANT DELETE ON bc_join.boot_observations, bc_join.ima_observations TO bc_join_operator, bc_join_tenant_operator;

-- issue 44: event log replay
/*
 * The operator's view of a machine's measured-boot event log (TCG PC Client
 * crypto-agile format, as /sys/kernel/security/tpm0/binary_bios_measurements)
 * and IMA list (binary_runtime_measurements): parsed and replayed per bank by
 * the code the attestation uses (src/common/eventlog.c), so a log from a
 * machine in the field can be examined and turned into policy.  Reads and
 * writes no table; a malformed log is ERROR 22023 with the reason in the
 * detail.  NULL when both arguments are NULL; either may be NULL.
 */
CREATE FUNCTION bc_join.replay_event_log(log bytea, ima bytea DEFAULT NULL) RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_replay_event_log_sql'
	LANGUAGE C IMMUTABLE PARALLEL SAFE
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION bc_join.replay_event_log(bytea, bytea) IS
	'Parses and replays a TCG crypto-agile event log and an IMA binary measurement list (either may be NULL); returns {algorithms, startupLocality, pcrs {bank {pcr: hex}}, events [{index, pcr, type, typeName, digests, dataHashed, dataSize, data}], ima {entries, pcr10 {bank: hex}, files [{pcr, template, path, alg, digest, templateHash, violation?}], violations}}; a malformed log is ERROR 22023.';
REVOKE ALL ON FUNCTION bc_join.replay_event_log(bytea, bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bc_join.replay_event_log(bytea, bytea) TO bc_join_operator, bc_join_tenant_operator;

-- issue 45: a compromised CA (helper c; docs/operator.md "A compromised CA key")
/*
 * An earlier intermediate whose key is known or suspected to be out:
 * mark_ca_compromised() records it and revokes (cACompromise) every live
 * node and session certificate it issued.  A node certificate so revoked
 * renews once, for a new key, from the current intermediate (bc_join.renew,
 * src/ext/renew.c); compromise_renewals records that renewal.  Nothing is
 * issued again from a CA recorded here (src/ext/compromise.c).
 */
CREATE TABLE bc_join.compromised_cas (
	certificate_sha256 bc_join.sha256 PRIMARY KEY,	-- SHA-256 of the DER below
	spki_sha256 bc_join.sha256 NOT NULL,		-- its key (nothing issues from that key again)
	subject text NOT NULL,						-- OpenSSL's one-line form, for people
	subject_name bytea NOT NULL,				-- the DER Name its certificates carry as issuer
	key_id bytea NOT NULL,						-- its subject key identifier (their authority key id)
	certificate bytea NOT NULL,					-- DER
	marked_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	marked_by text NOT NULL DEFAULT session_user,
	-- certificates mark_ca_compromised() revoked (every call for it added up)
	node_certificates bigint NOT NULL DEFAULT 0,
	session_certificates bigint NOT NULL DEFAULT 0
);
COMMENT ON TABLE bc_join.compromised_cas IS
	'Node CAs (earlier intermediates) marked compromised by mark_ca_compromised(): certificate, key, subject, key id, when and by whom, and how many node and session certificates the marking revoked; nothing issues from their keys again, and a node certificate they issued, revoked cACompromise, renews once.';
CREATE INDEX compromised_cas_spki_idx ON bc_join.compromised_cas (spki_sha256);

CREATE TABLE bc_join.compromise_renewals (
	serial text PRIMARY KEY REFERENCES bc_join.node_certs (serial) ON DELETE CASCADE,
	successor text NOT NULL,					-- the certificate the renewal issued
	renewed_at timestamptz NOT NULL DEFAULT bc_join.compute_now()
);
COMMENT ON TABLE bc_join.compromise_renewals IS
	'The one renewal each node certificate revoked for its CA''s compromise had: its serial, the serial issued, when; a second renewal from it is refused (renew:superseded).';

-- Internal: what mark_ca_compromised() needs of a PEM CA certificate; 22023
-- when it is none, 55000 when it is the current issuing CA or of its chain.
CREATE FUNCTION bc_join.compromised_ca_facts(ca_certificate text, OUT certificate bytea,
		OUT subject text, OUT subject_name bytea, OUT key_id bytea, OUT spki_sha256 bytea)
	AS 'MODULE_PATHNAME', 'bc_compromised_ca_facts'
	LANGUAGE C VOLATILE STRICT
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION bc_join.compromised_ca_facts(text) IS
	'Internal: the DER, subject, DER subject name, subject key id and key hash of a PEM CA certificate; refuses one that is no CA (22023) and the current issuing CA or its chain (55000).';

-- Internal: whether ca (DER) issued certificate (DER): OpenSSL's
-- comparison (X509_check_issued's): the issuer name and the authority key identifier.
CREATE FUNCTION bc_join.issued_by(certificate bytea, ca bytea) RETURNS boolean
	AS 'MODULE_PATHNAME', 'bc_issued_by'
	LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION bc_join.issued_by(bytea, bytea) IS
	'Internal: true when the CA certificate (DER) issued the certificate (DER): its issuer name is the CA''s subject and its authority key identifier the CA''s subject key identifier (as X509_check_issued compares them).';

-- Mark an earlier intermediate (PEM) compromised: recorded, every live node
-- and session certificate it issued revoked cACompromise, one event per
-- tenant that had any (and one in root), an audit row, NOTIFY bc_join_crl.
-- Returns how many certificates it revoked.  Joins, renewals and sessions
-- wait while it runs (it holds node_certs and session_certs EXCLUSIVE), so
-- that none is issued from the CA meanwhile.
CREATE FUNCTION bc_join.mark_ca_compromised(ca_certificate text) RETURNS bigint
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	ca record;
	per jsonb;
	nodes bigint;
	sessions bigint;
BEGIN
	IF ca_certificate IS NULL THEN
		PERFORM bc_join.invalid_input('ca_certificate is required');
	END IF;
	SELECT * INTO ca FROM bc_join.compromised_ca_facts(ca_certificate);
	LOCK TABLE bc_join.node_certs, bc_join.session_certs IN EXCLUSIVE MODE;
	INSERT INTO bc_join.compromised_cas (certificate_sha256, spki_sha256, subject, subject_name,
										 key_id, certificate)
		VALUES (sha256(ca.certificate), ca.spki_sha256, ca.subject, ca.subject_name, ca.key_id,
				ca.certificate)
		ON CONFLICT (certificate_sha256) DO NOTHING;
	-- The DER name or key id in the certificate's bytes first (cheap), then OpenSSL.
	WITH n AS (
		UPDATE bc_join.node_certs c SET revoked_at = bc_join.compute_now(),
			revocation_reason = 'cACompromise'
		WHERE c.revoked_at IS NULL AND c.not_after > bc_join.compute_now()
		  AND (position(ca.subject_name IN c.certificate) > 0 OR position(ca.key_id IN c.certificate) > 0)
		  AND bc_join.issued_by(c.certificate, ca.certificate)
		RETURNING c.node_id),
	s AS (
		UPDATE bc_join.session_certs sc SET revoked_at = bc_join.compute_now(),
			revocation_reason = 'cACompromise'
		WHERE sc.revoked_at IS NULL AND sc.not_after > bc_join.compute_now()
		  AND (position(ca.subject_name IN sc.certificate) > 0 OR position(ca.key_id IN sc.certificate) > 0)
		  AND bc_join.issued_by(sc.certificate, ca.certificate)
		RETURNING sc.session_id),
	k AS (
		SELECT x.tenant_id, 'node' AS kind FROM n JOIN bc_join.nodes x ON x.id = n.node_id
		UNION ALL
		SELECT y.tenant_id, 'session' FROM s JOIN bc_join.sessions y ON y.id = s.session_id)
	SELECT coalesce(jsonb_object_agg(g.tenant_id, jsonb_build_object('nodeCertificates', g.nodes,
																	  'sessionCertificates', g.sessions)), '{}')
		INTO per
		FROM (SELECT k.tenant_id, count(*) FILTER (WHERE k.kind = 'node') AS nodes,
					 count(*) FILTER (WHERE k.kind = 'session') AS sessions
			  FROM k GROUP BY k.tenant_id) g;
	SELECT coalesce(sum((v->>'nodeCertificates')::bigint), 0),
		   coalesce(sum((v->>'sessionCertificates')::bigint), 0)
		INTO nodes, sessions FROM jsonb_each(per) e(t, v);
	UPDATE bc_join.compromised_cas x SET node_certificates = x.node_certificates + nodes,
		session_certificates = x.session_certificates + sessions
		WHERE x.certificate_sha256 = sha256(ca.certificate);
	INSERT INTO bc_join.events (tenant_id, type, payload)
		SELECT e.t, 'ca.compromised',
			   jsonb_build_object('subject', ca.subject, 'keyId', encode(ca.key_id, 'hex')) || e.v
		FROM jsonb_each(per) e(t, v) WHERE e.t <> 'root'
		UNION ALL
		SELECT 'root', 'ca.compromised',
			   jsonb_build_object('subject', ca.subject, 'keyId', encode(ca.key_id, 'hex'),
								  'nodeCertificates', nodes, 'sessionCertificates', sessions,
								  'tenants', (SELECT count(*) FROM jsonb_object_keys(per)));
	INSERT INTO bc_join.audit_log (action, detail)
		VALUES ('ca.compromised',
				jsonb_build_object('subject', ca.subject, 'keyId', encode(ca.key_id, 'hex'),
								   'spkiSha256', encode(ca.spki_sha256, 'hex'),
								   'certificateSha256', encode(sha256(ca.certificate), 'hex'),
								   'nodeCertificates', nodes, 'sessionCertificates', sessions,
								   'tenants', per));
	PERFORM pg_notify('bc_join_crl', '');
	RETURN nodes + sessions;
END
$$;
COMMENT ON FUNCTION bc_join.mark_ca_compromised(text) IS
	'Marks an earlier intermediate (PEM) compromised: recorded in compromised_cas, every live node and session certificate it issued revoked cACompromise (its node certificates may renew once, for a new key), evented, audited, NOTIFY bc_join_crl; refuses the current issuing CA (rotate first); returns how many certificates it revoked.';

SELECT pg_catalog.pg_extension_config_dump('bc_join.compromised_cas', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.compromise_renewals', '');

REVOKE ALL ON bc_join.compromised_cas, bc_join.compromise_renewals FROM PUBLIC;
REVOKE ALL ON FUNCTION bc_join.compromised_ca_facts(text), bc_join.issued_by(bytea, bytea),
	bc_join.mark_ca_compromised(text) FROM PUBLIC;
-- The whole fleet's CA: the operator's, never a tenant operator's.
GRANT EXECUTE ON FUNCTION bc_join.mark_ca_compromised(text) TO bc_join_operator;
GRANT SELECT ON bc_join.compromised_cas, bc_join.compromise_renewals TO bc_join_operator;

-- A service signing key (its RFC 7638 kid) marked compromised: service_keys()
-- and signed_service_keys() publish it no more, nothing signs or verifies
-- with it again (src/ext/compromise.c; the current one is refused).
CREATE TABLE bc_join.compromised_keys (
	kid text PRIMARY KEY CHECK (kid ~ '^[A-Za-z0-9_-]{43}$'),
	held boolean NOT NULL,						-- the key directory held it when it was marked
	marked_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	marked_by text NOT NULL DEFAULT session_user
);
COMMENT ON TABLE bc_join.compromised_keys IS
	'Service signing keys (RFC 7638 kids) marked compromised by mark_key_compromised(): whether the key directory held it, when and by whom; never published, signed or verified with again.';

CREATE FUNCTION bc_join.mark_key_compromised(kid text) RETURNS boolean
	AS 'MODULE_PATHNAME', 'bc_mark_key_compromised'
	LANGUAGE C VOLATILE STRICT SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION bc_join.mark_key_compromised(text) IS
	'Marks a service signing key (its kid) compromised: service_keys() and signed_service_keys() publish it no more, nothing signs or verifies with it again; refuses the current signing key (promote another first); evented and audited; returns false when it was marked already.';

SELECT pg_catalog.pg_extension_config_dump('bc_join.compromised_keys', '');
REVOKE ALL ON bc_join.compromised_keys FROM PUBLIC;
REVOKE ALL ON FUNCTION bc_join.mark_key_compromised(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bc_join.mark_key_compromised(text) TO bc_join_operator;
GRANT SELECT ON bc_join.compromised_keys TO bc_join_operator;

-- The kids marked compromised, for the C code of every role that signs or
-- publishes keys (service_keys() and signed_service_keys() run as their
-- caller: the gateway, a tenant operator); kids are public, the rest of the
-- row is the operator's.
CREATE FUNCTION bc_join.compromised_kids() RETURNS SETOF text
	LANGUAGE sql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$ SELECT kid FROM bc_join.compromised_keys ORDER BY kid $$;
COMMENT ON FUNCTION bc_join.compromised_kids() IS
	'Returns the kids of the service signing keys marked compromised (public: what service_keys() leaves out), for roles that may not read compromised_keys.';
REVOKE ALL ON FUNCTION bc_join.compromised_kids() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bc_join.compromised_kids() TO bc_join_gateway, bc_join_operator, bc_join_tenant_operator;
-- end of issue 45: a compromised CA

-- #46 federation
/* ------------------------------------- #46: federation with other trust domains (docs/operator.md) */

/*
 * Another trust domain's bundle (SPIFFE Federation): the operator names the
 * domain, where its bundle endpoint is and how it is authenticated
 * (add_federation); bc-join-federate, a program run on a trusted host as a
 * member of bc_join_federation, fetches what is due (federation_due) and
 * hands the body to the database, which judges it (store_fetched_bundle):
 * the gateway never fetches.  Agents take the bundles signed by the signing
 * keys (signed_trust_bundles, GET /v1/trust-bundles).
 */
DO $roles$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'bc_join_federation') THEN
		CREATE ROLE bc_join_federation NOLOGIN;
	END IF;
END
$roles$;

CREATE TABLE bc_join.federated_trust_domains (
	trust_domain text PRIMARY KEY CHECK (trust_domain ~ '^[a-z0-9._-]{1,255}$'),
	endpoint_url text CHECK (endpoint_url ~ '^https://[^/?#@[:space:]]+(/[^#[:space:]]*)?$'),
	profile text NOT NULL CHECK (profile IN ('https_web', 'https_spiffe', 'static')),
	endpoint_spiffe_id text CHECK (endpoint_spiffe_id ~ '^spiffe://[a-z0-9._-]{1,255}(/[A-Za-z0-9._-]+)*$'),
	bundle jsonb,								-- the accepted bundle (JWK Set), NULL before the first
	sequence bigint CHECK (sequence >= 0),	-- its spiffe_sequence (NULL: it had none)
	refresh_hint integer CHECK (refresh_hint BETWEEN 60 AND 86400),	-- its spiffe_refresh_hint, clamped
	fetched_at timestamptz,					-- the last fetch that was not refused
	updated_at timestamptz,					-- when the bundle last changed
	next_fetch_at timestamptz,				-- NULL: static, never fetched
	last_error text,
	last_error_at timestamptz,
	added_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	added_by text NOT NULL DEFAULT session_user,
	CHECK ((profile = 'static') = (endpoint_url IS NULL)),
	CHECK ((profile = 'https_spiffe') = (endpoint_spiffe_id IS NOT NULL))
);
COMMENT ON TABLE bc_join.federated_trust_domains IS
	'Federated trust domains: the bundle endpoint (URL, profile https_web, https_spiffe with the endpoint''s SPIFFE ID, or static) and the last bundle accepted, its spiffe_sequence and clamped refresh hint, when it was fetched, changed and is due, and the last refusal or fetch error.';

SELECT pg_catalog.pg_extension_config_dump('bc_join.federated_trust_domains', '');

-- Internal: why another domain's bundle (text) may not be stored, NULL when
-- it may (src/common/spiffe_bundle.c, OpenSSL and jansson).
CREATE FUNCTION bc_join.federated_bundle_problem(bundle text) RETURNS text
	AS 'MODULE_PATHNAME', 'bc_federated_bundle_problem'
	LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION bc_join.federated_bundle_problem(text) IS
	'Internal: NULL when a federated bundle may be stored, else why not: over 256 KiB or 64 keys, not a JWK Set, spiffe_sequence or spiffe_refresh_hint not an integer up to 2^53, an x509-svid key whose x5c is not exactly one DER CA certificate holding the JWK''s key, a jwt-svid key without kid.';

-- Internal: the seconds until a domain's next fetch: a quarter of its
-- refresh hint, at least 60 s; 300 s without a hint.
CREATE FUNCTION bc_join.federation_interval(refresh_hint integer) RETURNS interval
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	SET search_path = pg_catalog, pg_temp
	AS $$ SELECT make_interval(secs => CASE WHEN refresh_hint IS NULL THEN 300
											ELSE greatest(60, refresh_hint / 4) END) $$;
COMMENT ON FUNCTION bc_join.federation_interval(integer) IS
	'Internal: the time from one fetch of a federated bundle to the next: a quarter of the refresh hint, at least 60 s; 300 s without a hint.';

-- Internal: the most bytes federated_bundles() may have in all (every domain's
-- bundle, as jsonb text), so that GET /v1/trust-bundles passes every bound on
-- its way: signed by up to 3 signing keys (BC_KEYSET_MAX), each JWS of
-- {trustDomain (up to 255 bytes), issuedAt, bundles} base64url (4/3), the
-- document {"keys": [JWS, JWS, JWS]} within the gateway's 256 KiB for a
-- document (src/gateway/documents.c) and each JWS within the JOSE bound of
-- the extension and bcd (BC_JOSE_MAX, 256 KiB): 3 x (64,318 x 4/3 + 180)
-- + 16 = 257,830 <= 262,144.
CREATE FUNCTION bc_join.federated_bundles_max() RETURNS integer
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	SET search_path = pg_catalog, pg_temp
	AS $$ SELECT 64000 $$;
COMMENT ON FUNCTION bc_join.federated_bundles_max() IS
	'Internal: the most bytes the federated bundles may have in all (federated_bundles() as text, 64000), so that every agent takes the signed GET /v1/trust-bundles (3 signing keys, the gateway''s and the JOSE bounds of 256 KiB).';

-- Internal: judge bundle for trust_domain (row locked) and store it;
-- {stored, changed, sequence, next_fetch_at} or {stored: false, refused}.
-- The caller decides what a refusal does (the fetcher's: recorded; the
-- operator's: an error).
CREATE FUNCTION bc_join.federation_accept(trust_domain text, bundle text, fetched boolean) RETURNS jsonb
	LANGUAGE plpgsql
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	r bc_join.federated_trust_domains;
	b jsonb;
	problem text;
	seq bigint;
	hint integer;
	now timestamptz := bc_join.compute_now();
	nxt timestamptz;
	changed boolean;
	total bigint;
BEGIN
	-- one store at a time: the total below holds for what is committed
	LOCK TABLE bc_join.federated_trust_domains IN SHARE ROW EXCLUSIVE MODE;
	SELECT * INTO r FROM bc_join.federated_trust_domains f
		WHERE f.trust_domain = federation_accept.trust_domain FOR UPDATE;
	IF NOT FOUND THEN
		PERFORM bc_join.invalid_input(format('trust domain %s is not federated', federation_accept.trust_domain));
	END IF;
	nxt := CASE WHEN r.profile = 'static' THEN NULL
				ELSE now + bc_join.federation_interval(r.refresh_hint) END;
	problem := bc_join.federated_bundle_problem(coalesce(bundle, ''));
	IF problem IS NULL THEN
		BEGIN
			b := bundle::jsonb;
		EXCEPTION WHEN data_exception THEN
			problem := 'the bundle is not JSON PostgreSQL takes: ' || SQLERRM;
		END;
	END IF;
	IF problem IS NULL THEN
		seq := (b->>'spiffe_sequence')::bigint;
		IF r.bundle IS NOT NULL AND r.sequence IS NOT NULL AND seq IS NULL THEN
			problem := format('the bundle has no spiffe_sequence, the stored one has %s', r.sequence);
		ELSIF r.bundle IS NOT NULL AND seq < r.sequence THEN
			problem := format('spiffe_sequence %s is lower than the stored %s', seq, r.sequence);
		ELSIF r.bundle IS NOT NULL AND seq = r.sequence AND b <> r.bundle THEN
			problem := format('spiffe_sequence %s is the stored one, but the content differs', seq);
		END IF;
	END IF;
	IF problem IS NULL THEN
		-- every domain's bundle goes to agents in one signed document: its bound
		SELECT octet_length(coalesce(jsonb_object_agg('spiffe://' || f.trust_domain,
				CASE WHEN f.trust_domain = r.trust_domain THEN b ELSE f.bundle END), '{}')::text)
			INTO total
			FROM bc_join.federated_trust_domains f
			WHERE f.bundle IS NOT NULL OR f.trust_domain = r.trust_domain;
		IF total > bc_join.federated_bundles_max() THEN
			problem := format('the federated bundles would be %s bytes in all with this one, over %s (what agents take in one signed document)',
							  total, bc_join.federated_bundles_max());
		END IF;
	END IF;
	IF problem IS NOT NULL THEN
		RETURN jsonb_build_object('stored', false, 'refused', problem, 'sequence', r.sequence,
								  'next_fetch_at', nxt);
	END IF;
	IF b ? 'spiffe_refresh_hint' THEN
		hint := least(greatest((b->>'spiffe_refresh_hint')::numeric, 60), 86400)::integer;
	END IF;
	nxt := CASE WHEN r.profile = 'static' THEN NULL ELSE now + bc_join.federation_interval(hint) END;
	changed := r.bundle IS DISTINCT FROM b;
	UPDATE bc_join.federated_trust_domains f
		SET bundle = b, sequence = seq, refresh_hint = hint,
			fetched_at = CASE WHEN fetched THEN now ELSE f.fetched_at END,
			updated_at = CASE WHEN changed THEN now ELSE f.updated_at END,
			next_fetch_at = nxt, last_error = NULL, last_error_at = NULL
		WHERE f.trust_domain = r.trust_domain;
	IF changed THEN
		INSERT INTO bc_join.events (tenant_id, type, payload)
			VALUES ('root', 'federation.bundle.updated',
					jsonb_build_object('trustDomain', r.trust_domain, 'sequence', seq,
									   'previousSequence', r.sequence,
									   'keys', jsonb_array_length(b->'keys'),
									   'by', CASE WHEN fetched THEN 'fetch' ELSE session_user::text END));
		PERFORM pg_notify('bc_join_federation', r.trust_domain);
	END IF;
	RETURN jsonb_build_object('stored', true, 'changed', changed, 'sequence', seq, 'next_fetch_at', nxt);
END
$$;
COMMENT ON FUNCTION bc_join.federation_accept(text, text, boolean) IS
	'Internal: judges a federated bundle (federated_bundle_problem; its spiffe_sequence neither lower than the stored one nor equal with other content, present once the stored one had one; every domain''s bundle with it at most federated_bundles_max() bytes) and stores it with its clamped hint and next fetch; a change is evented (federation.bundle.updated) and notified on bc_join_federation; returns {stored, changed, sequence, next_fetch_at} or {stored: false, refused, sequence, next_fetch_at} without storing anything.';

-- Federate with another trust domain (its bundle endpoint, or a bundle by hand).
CREATE FUNCTION bc_join.add_federation(trust_domain text, bundle_endpoint_url text DEFAULT NULL,
									   profile text DEFAULT 'https_web',
									   endpoint_spiffe_id text DEFAULT NULL,
									   bundle jsonb DEFAULT NULL) RETURNS void
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	td text := add_federation.trust_domain;
	own text := current_setting('bc_join.trust_domain', true);
	id_td text;
	res jsonb;
BEGIN
	IF td IS NULL OR length(td) > 255 OR td !~ '^[a-z0-9_-]+(\.[a-z0-9_-]+)*$' THEN
		PERFORM bc_join.invalid_input('trust_domain must be a trust domain name: labels of lower-case letters, digits, "-" and "_" joined by single dots, at most 255 characters, without spiffe://');
	END IF;
	IF td = own THEN
		PERFORM bc_join.invalid_input('trust_domain is this service''s own trust domain');
	END IF;
	IF profile IS NULL OR profile NOT IN ('https_web', 'https_spiffe', 'static') THEN
		PERFORM bc_join.invalid_input('profile must be https_web, https_spiffe or static');
	END IF;
	IF profile = 'static' THEN
		IF bundle_endpoint_url IS NOT NULL OR endpoint_spiffe_id IS NOT NULL OR bundle IS NULL THEN
			PERFORM bc_join.invalid_input('a static federation takes a bundle, and no endpoint URL or SPIFFE ID');
		END IF;
	ELSE
		IF bundle_endpoint_url IS NULL OR bundle_endpoint_url !~ '^https://[^/?#@[:space:]]+(/[^#[:space:]]*)?$' THEN
			PERFORM bc_join.invalid_input('bundle_endpoint_url must be an https:// URL without userinfo or fragment');
		END IF;
	END IF;
	IF profile = 'https_web' AND endpoint_spiffe_id IS NOT NULL THEN
		PERFORM bc_join.invalid_input('endpoint_spiffe_id belongs to the https_spiffe profile');
	END IF;
	IF profile = 'https_spiffe' THEN
		IF endpoint_spiffe_id IS NULL OR endpoint_spiffe_id !~ '^spiffe://[a-z0-9._-]{1,255}(/[A-Za-z0-9._-]+)*$' THEN
			PERFORM bc_join.invalid_input('the https_spiffe profile needs endpoint_spiffe_id, a SPIFFE ID');
		END IF;
		id_td := substring(endpoint_spiffe_id FROM '^spiffe://([^/]+)');
		IF id_td = own THEN
			PERFORM bc_join.invalid_input('endpoint_spiffe_id is in this service''s own trust domain');
		END IF;
		IF bundle IS NULL AND (id_td = td OR NOT EXISTS (
				SELECT 1 FROM bc_join.federated_trust_domains f
				WHERE f.trust_domain = id_td AND f.bundle IS NOT NULL)) THEN
			PERFORM bc_join.invalid_input(format('the https_spiffe profile needs a bundle of %s to authenticate the endpoint (bundle, or a federation with it first)', id_td));
		END IF;
	END IF;
	LOCK TABLE bc_join.federated_trust_domains IN SHARE ROW EXCLUSIVE MODE;	-- federation_accept's
	IF EXISTS (SELECT 1 FROM bc_join.federated_trust_domains f WHERE f.trust_domain = td) THEN
		PERFORM bc_join.invalid_input(format('trust domain %s is federated already (remove_federation first)', td));
	END IF;
	-- Every bcd holds at most 64 federated domains (BCD_TRUST_DOMAINS_MAX) and refuses
	-- a document with more, so the database never publishes more.
	IF (SELECT count(*) FROM bc_join.federated_trust_domains) >= 64 THEN
		PERFORM bc_join.invalid_input('64 trust domains are federated already, the most every bcd holds (remove_federation first)');
	END IF;
	INSERT INTO bc_join.federated_trust_domains (trust_domain, endpoint_url, profile, endpoint_spiffe_id,
												 bundle, next_fetch_at)
		VALUES (td, bundle_endpoint_url, profile, endpoint_spiffe_id, NULL,
				CASE WHEN profile <> 'static' THEN bc_join.compute_now() END);
	IF bundle IS NOT NULL THEN
		-- The first bundle: static's, or the bootstrap of an endpoint.
		res := bc_join.federation_accept(td, bundle::text, false);
		IF NOT (res->>'stored')::boolean THEN
			PERFORM bc_join.invalid_input('the bundle is refused: ' || (res->>'refused'));
		END IF;
		IF profile <> 'static' THEN
			UPDATE bc_join.federated_trust_domains f SET next_fetch_at = bc_join.compute_now()
				WHERE f.trust_domain = td;
		END IF;
	END IF;
	INSERT INTO bc_join.audit_log (action, detail)
		VALUES ('federation.added',
				jsonb_build_object('trustDomain', td, 'profile', profile, 'endpointUrl', bundle_endpoint_url,
								   'endpointSpiffeId', endpoint_spiffe_id, 'bundle', bundle IS NOT NULL));
	INSERT INTO bc_join.events (tenant_id, type, payload)
		VALUES ('root', 'federation.added',
				jsonb_build_object('trustDomain', td, 'profile', profile, 'endpointUrl', bundle_endpoint_url));
	PERFORM pg_notify('bc_join_federation', td);
END
$$;
COMMENT ON FUNCTION bc_join.add_federation(text, text, text, text, jsonb) IS
	'Federates with another trust domain (a name without spiffe://, never the own one): its bundle endpoint URL (https, no userinfo) with profile https_web (Web PKI and host name), or https_spiffe with the endpoint''s SPIFFE ID and a bundle to authenticate it (unless the ID''s domain is federated with a bundle already); or a static bundle and no URL; a bundle given is judged as a fetched one; audited, evented, notified on bc_join_federation.';

-- An operator's bundle for a federated domain (a static one's update, an
-- endpoint's new bootstrap): judged as a fetched one; returns its sequence.
CREATE FUNCTION bc_join.set_federated_bundle(trust_domain text, bundle jsonb) RETURNS bigint
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	res jsonb;
BEGIN
	IF bundle IS NULL THEN
		PERFORM bc_join.invalid_input('bundle is required');
	END IF;
	res := bc_join.federation_accept(set_federated_bundle.trust_domain, bundle::text, false);
	IF NOT (res->>'stored')::boolean THEN
		PERFORM bc_join.invalid_input('the bundle is refused: ' || (res->>'refused'));
	END IF;
	INSERT INTO bc_join.audit_log (action, detail)
		VALUES ('federation.bundle.set',
				jsonb_build_object('trustDomain', set_federated_bundle.trust_domain,
								   'sequence', res->'sequence', 'bundleSha256',
								   encode(sha256(convert_to(bundle::text, 'UTF8')), 'hex')));
	RETURN (res->>'sequence')::bigint;
END
$$;
COMMENT ON FUNCTION bc_join.set_federated_bundle(text, jsonb) IS
	'Sets a federated trust domain''s bundle by hand (a static domain''s, or a new bootstrap of an endpoint''s), judged as a fetched bundle (refused with the reason: INVALID_INPUT); audited; returns its spiffe_sequence.';

-- Stop federating with a trust domain; false when it was not federated.
CREATE FUNCTION bc_join.remove_federation(trust_domain text) RETURNS boolean
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
BEGIN
	DELETE FROM bc_join.federated_trust_domains f WHERE f.trust_domain = remove_federation.trust_domain;
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	INSERT INTO bc_join.audit_log (action, detail)
		VALUES ('federation.removed', jsonb_build_object('trustDomain', remove_federation.trust_domain));
	INSERT INTO bc_join.events (tenant_id, type, payload)
		VALUES ('root', 'federation.removed', jsonb_build_object('trustDomain', remove_federation.trust_domain));
	PERFORM pg_notify('bc_join_federation', remove_federation.trust_domain);
	RETURN true;
END
$$;
COMMENT ON FUNCTION bc_join.remove_federation(text) IS
	'Stops federating with a trust domain: its row and bundle go, agents drop it with the next signed_trust_bundles(); audited, evented, notified on bc_join_federation; false when it was not federated.';

-- What bc-join-federate fetches now: each domain due, and for https_spiffe
-- the bundle that authenticates its endpoint (the latest accepted bundle of
-- the endpoint ID's trust domain: self-serving rotates with it).
CREATE FUNCTION bc_join.federation_due()
	RETURNS TABLE (trust_domain text, endpoint_url text, profile text, endpoint_spiffe_id text,
				   endpoint_bundle jsonb)
	LANGUAGE sql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
	SELECT f.trust_domain, f.endpoint_url, f.profile, f.endpoint_spiffe_id,
		   (SELECT e.bundle FROM bc_join.federated_trust_domains e
			 WHERE f.profile = 'https_spiffe'
			   AND e.trust_domain = substring(f.endpoint_spiffe_id FROM '^spiffe://([^/]+)'))
	FROM bc_join.federated_trust_domains f
	WHERE f.profile <> 'static' AND f.next_fetch_at <= bc_join.compute_now()
	ORDER BY f.next_fetch_at, f.trust_domain
$$;
COMMENT ON FUNCTION bc_join.federation_due() IS
	'For bc-join-federate (bc_join_federation): the federated trust domains whose bundle is due, with endpoint URL, profile, endpoint SPIFFE ID and, for https_spiffe, the bundle of the endpoint ID''s trust domain that authenticates it.';

-- bc-join-federate's result for a domain: the body it fetched, or why it
-- has none (error); the database judges the body.
CREATE FUNCTION bc_join.store_fetched_bundle(trust_domain text, bundle text, error text DEFAULT NULL)
	RETURNS jsonb
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	r bc_join.federated_trust_domains;
	res jsonb;
	why text;
	now timestamptz := bc_join.compute_now();
BEGIN
	SELECT * INTO r FROM bc_join.federated_trust_domains f
		WHERE f.trust_domain = store_fetched_bundle.trust_domain FOR UPDATE;
	IF NOT FOUND OR r.profile = 'static' THEN
		PERFORM bc_join.invalid_input(format('trust domain %s is not federated through a bundle endpoint',
											 store_fetched_bundle.trust_domain));
	END IF;
	IF error IS NULL THEN
		res := bc_join.federation_accept(r.trust_domain, bundle, true);
		IF (res->>'stored')::boolean THEN
			RETURN res;
		END IF;
		why := res->>'refused';
		INSERT INTO bc_join.events (tenant_id, type, payload)
			VALUES ('root', 'federation.bundle.refused',
					jsonb_build_object('trustDomain', r.trust_domain, 'reason', why,
									   'storedSequence', r.sequence,
									   'bytes', octet_length(coalesce(bundle, ''))));
	ELSE
		why := 'fetch failed: ' || left(error, 1000);
		res := jsonb_build_object('stored', false, 'error', left(error, 1000), 'sequence', r.sequence,
								  'next_fetch_at', now + bc_join.federation_interval(r.refresh_hint));
		INSERT INTO bc_join.events (tenant_id, type, payload)
			VALUES ('root', 'federation.fetch.failed',
					jsonb_build_object('trustDomain', r.trust_domain, 'error', left(error, 1000)));
	END IF;
	UPDATE bc_join.federated_trust_domains f
		SET last_error = why, last_error_at = now,
			next_fetch_at = now + bc_join.federation_interval(r.refresh_hint)
		WHERE f.trust_domain = r.trust_domain;
	RETURN res;
END
$$;
COMMENT ON FUNCTION bc_join.store_fetched_bundle(text, text, text) IS
	'For bc-join-federate (bc_join_federation): the body fetched for a trust domain, judged by the database: stored when it passes (returns {stored, changed, sequence, next_fetch_at}), else refused, the old bundle kept, last_error set and evented federation.bundle.refused (returns {stored: false, refused, ...}); with error (the fetch failed) only last_error and federation.fetch.failed.';

-- The accepted bundles, {"spiffe://<td>": bundle}, for signed_trust_bundles().
CREATE FUNCTION bc_join.federated_bundles() RETURNS jsonb
	LANGUAGE sql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
	SELECT coalesce(jsonb_object_agg('spiffe://' || f.trust_domain, f.bundle ORDER BY f.trust_domain), '{}')
	FROM bc_join.federated_trust_domains f WHERE f.bundle IS NOT NULL
$$;
COMMENT ON FUNCTION bc_join.federated_bundles() IS
	'Returns the federated trust domains'' accepted bundles, {"spiffe://<td>": bundle} (public: what signed_trust_bundles() signs).';

-- The federated bundles as agents take them: {"keys": [JWS...]}.
CREATE FUNCTION bc_join.signed_trust_bundles() RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_signed_trust_bundles' LANGUAGE C STABLE;
COMMENT ON FUNCTION bc_join.signed_trust_bundles() IS
	'Returns {keys: [JWS...]}: {trustDomain, issuedAt, bundles: {"spiffe://<td>": bundle}} (every federated domain''s accepted bundle) signed by each signing key, as signed_service_keys(); the gateway''s GET /v1/trust-bundles.';

-- The own bundle's spiffe_sequence by its keys (D3): HA nodes with the same
-- keys publish the same sequence (the key directories' mtimes differ), and
-- a bundle with new keys a higher one than any before, so a federated peer
-- (which refuses a lower sequence) takes every rollover and no failover
-- looks like a step back.
CREATE TABLE bc_join.own_bundle_sequences (
	keys_sha256 bytea PRIMARY KEY CHECK (octet_length(keys_sha256) = 32),
	sequence bigint NOT NULL UNIQUE CHECK (sequence > 0 AND sequence <= 9007199254740992),
	first_served_at timestamptz NOT NULL DEFAULT bc_join.compute_now()
);
COMMENT ON TABLE bc_join.own_bundle_sequences IS
	'The spiffe_sequence of each set of keys spiffe_bundle() published (SHA-256 of its keys member): the same keys, the same sequence on every node; new keys the Unix seconds of the service clock or one more than the highest before, whichever is higher.';

SELECT pg_catalog.pg_extension_config_dump('bc_join.own_bundle_sequences', '');

-- The sequence of the keys whose hash is keys_sha256, recorded the first
-- time (spiffe_bundle() calls it from C).
CREATE FUNCTION bc_join.own_bundle_sequence(keys_sha256 bytea) RETURNS bigint
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	s bigint;
BEGIN
	SELECT o.sequence INTO s FROM bc_join.own_bundle_sequences o WHERE o.keys_sha256 = own_bundle_sequence.keys_sha256;
	IF FOUND THEN
		RETURN s;
	END IF;
	IF current_setting('transaction_read_only') = 'on' THEN
		RAISE EXCEPTION USING ERRCODE = 'config_file_error',
			MESSAGE = 'the SPIFFE bundle has keys without a sequence yet, and this transaction cannot record one',
			DETAIL = 'INVALID_CONFIG: a bundle''s spiffe_sequence is recorded (bc_join.own_bundle_sequences) the first time it is published, on the primary.',
			HINT = 'Call bc_join.spiffe_bundle() once on the primary (the gateway does).';
	END IF;
	-- One writer at a time: the re-check below sees what another recorded.
	LOCK TABLE bc_join.own_bundle_sequences IN SHARE ROW EXCLUSIVE MODE;
	SELECT o.sequence INTO s FROM bc_join.own_bundle_sequences o WHERE o.keys_sha256 = own_bundle_sequence.keys_sha256;
	IF FOUND THEN
		RETURN s;
	END IF;
	SELECT greatest(coalesce(max(o.sequence), 0) + 1, floor(extract(epoch FROM bc_join.compute_now()))::bigint)
		INTO s FROM bc_join.own_bundle_sequences o;
	INSERT INTO bc_join.own_bundle_sequences (keys_sha256, sequence) VALUES (own_bundle_sequence.keys_sha256, s);
	RETURN s;
END
$$;
COMMENT ON FUNCTION bc_join.own_bundle_sequence(bytea) IS
	'Internal (spiffe_bundle()): the spiffe_sequence of a set of keys (SHA-256 of the bundle''s keys member), recorded the first time: the service clock''s Unix seconds or one more than the highest recorded, whichever is higher; INVALID_CONFIG in a read-only transaction (a standby) for keys not recorded yet.';
REVOKE ALL ON bc_join.own_bundle_sequences FROM PUBLIC;
REVOKE ALL ON FUNCTION bc_join.own_bundle_sequence(bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bc_join.own_bundle_sequence(bytea)
	TO bc_join_gateway, bc_join_operator, bc_join_tenant_operator;
GRANT SELECT ON bc_join.own_bundle_sequences TO bc_join_operator;

-- Operators' view of the federations.
CREATE VIEW bc_join.federations AS
	SELECT f.trust_domain, f.profile, f.endpoint_url, f.endpoint_spiffe_id, f.sequence, f.refresh_hint,
		   jsonb_array_length(f.bundle->'keys') AS keys,
		   (SELECT count(*) FROM jsonb_array_elements(f.bundle->'keys') k WHERE k->>'use' = 'x509-svid') AS x509_keys,
		   (SELECT count(*) FROM jsonb_array_elements(f.bundle->'keys') k WHERE k->>'use' = 'jwt-svid') AS jwt_keys,
		   f.fetched_at, f.updated_at, f.next_fetch_at, f.last_error, f.last_error_at, f.added_at, f.added_by,
		   f.bundle
	FROM bc_join.federated_trust_domains f;
COMMENT ON VIEW bc_join.federations IS
	'The federated trust domains: profile, endpoint, sequence, hint, how many keys (x509-svid, jwt-svid; 0 keys: every SVID of the domain refused), when fetched, changed and due, the last error, and the bundle.';

REVOKE ALL ON bc_join.federated_trust_domains, bc_join.federations FROM PUBLIC;
REVOKE ALL ON FUNCTION bc_join.federated_bundle_problem(text), bc_join.federation_interval(integer),
	bc_join.federation_accept(text, text, boolean), bc_join.federated_bundles_max(),
	bc_join.add_federation(text, text, text, text, jsonb), bc_join.set_federated_bundle(text, jsonb),
	bc_join.remove_federation(text), bc_join.federation_due(),
	bc_join.store_fetched_bundle(text, text, text), bc_join.federated_bundles(),
	bc_join.signed_trust_bundles() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bc_join.add_federation(text, text, text, text, jsonb),
	bc_join.set_federated_bundle(text, jsonb), bc_join.remove_federation(text),
	bc_join.federated_bundles(), bc_join.signed_trust_bundles() TO bc_join_operator;
GRANT SELECT ON bc_join.federated_trust_domains, bc_join.federations TO bc_join_operator;
GRANT EXECUTE ON FUNCTION bc_join.federated_bundles(), bc_join.signed_trust_bundles() TO bc_join_gateway;
GRANT USAGE ON SCHEMA bc_join TO bc_join_federation;
GRANT EXECUTE ON FUNCTION bc_join.federation_due(), bc_join.store_fetched_bundle(text, text, text)
	TO bc_join_federation;
-- end of #46 federation

-- #46 oidc: OIDC discovery of the JWT-SVID issuer and the JWKS of its keys
-- (docs/operator.md, "OIDC for AWS IAM and other relying parties").  The
-- gateway serves them at GET /.well-known/openid-configuration and
-- GET /v1/jwks; both need bc_join.jwt_issuer (INVALID_CONFIG without it).
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
-- end of #46 oidc

-- #47 ssh
/*
 * SSH certificates (issue 47; docs/operator.md "21. SSH"): OpenSSH host
 * certificates for joined nodes' host keys (issue_ssh_host_cert, POST
 * /v1/ssh/host) and user certificates for sessions (issue_session with a
 * proof saying "sshUser": true), signed by ssh-host-ca.key and
 * ssh-user-ca.key of bc_join.key_dir; principals only from a pool's rule
 * (set_ssh_settings) within the names the platform operator gave the tenant
 * (allow_ssh_names); revoked with their node or session certificate
 * (ssh_cascade), listed in an OpenSSH KRL (ssh_krl, signed_ssh).
 */

-- What a tenant may ever be called: the SSH CAs are trust-domain wide, so
-- the platform operator alone gives each tenant its host names (a DNS name,
-- or *.suffix for one leftmost label) and user names (a name, prefix* or
-- *); no two tenants' names of a kind overlap.
CREATE TABLE bc_join.ssh_names (
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	kind text NOT NULL CHECK (kind IN ('host', 'user')),
	pattern text NOT NULL CHECK (length(pattern) BETWEEN 1 AND 255),
	created_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	created_by text NOT NULL DEFAULT session_user,
	PRIMARY KEY (tenant_id, kind, pattern)
);
COMMENT ON TABLE bc_join.ssh_names IS
	'The SSH names a tenant may be certified for, set by the platform operator only (allow_ssh_names): host patterns (a DNS name or *.suffix) and user patterns (a name, prefix* or *), neither overlapping another tenant''s.';

-- Per pool: the principals (templates) and options of its SSH certificates.
CREATE TABLE bc_join.ssh_settings (
	pool_id text PRIMARY KEY REFERENCES bc_join.pools (id) ON DELETE CASCADE,
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	host_principals text[] NOT NULL DEFAULT '{}' CHECK (cardinality(host_principals) <= 32),
	host_hostname_patterns text[] NOT NULL DEFAULT '{}' CHECK (cardinality(host_hostname_patterns) <= 32),
	user_principals text[] NOT NULL DEFAULT '{}' CHECK (cardinality(user_principals) <= 32),
	user_force_command text CHECK (length(user_force_command) BETWEEN 1 AND 1024),
	user_source_address text CHECK (length(user_source_address) BETWEEN 1 AND 1024),
	user_extensions text[] NOT NULL DEFAULT '{permit-pty}'
		CHECK (user_extensions <@ '{permit-X11-forwarding,permit-agent-forwarding,permit-port-forwarding,permit-pty,permit-user-rc}'),
	updated_at timestamptz NOT NULL DEFAULT bc_join.compute_now()
);
COMMENT ON TABLE bc_join.ssh_settings IS
	'SSH certificates per pool (set_ssh_settings): host principal templates ({node}, {pool}, {tenant}, {hostname}) and the hostname claims taken, user principal templates ({session}, {context}, {node}), force-command, source-address and extensions of user certificates; a pool without a row gets none.';

-- Every SSH certificate issued, host and user.
CREATE TABLE bc_join.ssh_certs (
	serial bigint PRIMARY KEY CHECK (serial > 0),
	kind text NOT NULL CHECK (kind = ANY ('{host,user}'::text[])),
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	node_id text NOT NULL REFERENCES bc_join.nodes (id) ON DELETE CASCADE,
	-- the node certificate whose key proved the request: revoking it revokes this
	node_serial text NOT NULL,
	-- a user certificate's session certificate: revoking it revokes this
	session_cert_serial text,
	ca_key bytea NOT NULL,				-- the CA's public key blob (the KRL needs no loaded key)
	key_sha256 bc_join.sha256 NOT NULL,	-- SHA-256 of the certified key's blob
	key_fingerprint text NOT NULL,		-- SHA256:... as ssh-keygen -l prints it
	key_id text NOT NULL,				-- the SPIFFE ID of the node or the session (sshd logs it)
	principals text[] NOT NULL CHECK (cardinality(principals) BETWEEN 1 AND 32),
	critical_options jsonb NOT NULL DEFAULT '{}',
	extensions text[] NOT NULL DEFAULT '{}',
	valid_after timestamptz NOT NULL,
	valid_before timestamptz NOT NULL,
	certificate bytea NOT NULL,			-- the certificate blob (public)
	issued_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	revoked_at timestamptz,
	revocation_reason text CHECK (revocation_reason = ANY ('{unspecified,keyCompromise,cACompromise,affiliationChanged,superseded,cessationOfOperation,privilegeWithdrawn,aACompromise,reclaimed,retired,attestation-failed}'::text[])),
	CHECK (valid_before > valid_after),
	CHECK ((kind = 'user') = (session_cert_serial IS NOT NULL))
);
COMMENT ON TABLE bc_join.ssh_certs IS
	'Every OpenSSH certificate issued: serial, kind (host, user), tenant, node, the node (and session) certificate it hangs on, the CA key, the certified key''s SHA-256 and fingerprint, key ID, principals, options, extensions, validity, the certificate and its revocation.';
CREATE INDEX ssh_certs_node_serial_idx ON bc_join.ssh_certs (node_serial, key_sha256);
CREATE INDEX ssh_certs_session_cert_idx ON bc_join.ssh_certs (session_cert_serial)
	WHERE session_cert_serial IS NOT NULL;
CREATE INDEX ssh_certs_valid_before_idx ON bc_join.ssh_certs USING brin (valid_before);
CREATE INDEX ssh_certs_revoked_idx ON bc_join.ssh_certs (ca_key, serial) WHERE revoked_at IS NOT NULL;
-- who holds a host name already (a claimed hostname: ssh_rule_principals)
CREATE INDEX ssh_certs_host_principals_idx ON bc_join.ssh_certs USING gin (principals)
	WHERE kind = 'host' AND revoked_at IS NULL;

-- The KRL's version and time: one row, bumped with every SSH revocation (in
-- the database, so every HA node serves the same KRL).  No row: version 0.
CREATE TABLE bc_join.ssh_krl_state (
	id boolean PRIMARY KEY DEFAULT true CHECK (id),
	version bigint NOT NULL CHECK (version > 0),
	changed_at timestamptz NOT NULL
);
COMMENT ON TABLE bc_join.ssh_krl_state IS
	'The OpenSSH KRL''s version and generation time (one row), bumped by every SSH certificate revocation; ssh_krl() is made from it and ssh_certs alone.';

-- Internal: one more KRL version, now.
CREATE FUNCTION bc_join.ssh_krl_bump() RETURNS void
	LANGUAGE sql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
	INSERT INTO bc_join.ssh_krl_state AS s (id, version, changed_at)
		VALUES (true, 1, bc_join.compute_now())
		ON CONFLICT (id) DO UPDATE SET version = s.version + 1,
			changed_at = greatest(bc_join.compute_now(), s.changed_at)
$$;
COMMENT ON FUNCTION bc_join.ssh_krl_bump() IS
	'Internal: bumps the KRL''s version (ssh_krl_state) with an SSH revocation.';

-- Whether name has the syntax of an SSH principal of kind: host, lower-case
-- LDH labels of at most 63, 253 in all, not an IPv4 literal (no IP
-- principals); user, [A-Za-z0-9._@-]{1,255}.  This and the four helpers
-- below have no SET clause, so that the planner inlines them into their
-- callers (the SECURITY DEFINER functions of this section, whose
-- search_path is pg_catalog, pg_temp): a rule is expanded at every session
-- that asks for an SSH certificate.
CREATE FUNCTION bc_join.ssh_name_valid(kind text, name text) RETURNS boolean
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	AS $$
	SELECT CASE kind
		WHEN 'host' THEN coalesce(length(name) <= 253
			AND name ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$'
			AND name !~ '(^|\.)[0-9]+$', false)
		WHEN 'user' THEN coalesce(name ~ '^[A-Za-z0-9._@-]{1,255}$', false)
		ELSE false END
$$;
COMMENT ON FUNCTION bc_join.ssh_name_valid(text, text) IS
	'Internal: whether name is an SSH principal of kind host (lower-case LDH labels, at most 253 octets, not an IPv4 literal) or user ([A-Za-z0-9._@-]{1,255}).';

-- Whether pattern (of ssh_names, or host_hostname_patterns) is well made:
-- host, a name or *.name; user, a name or a prefix followed by *.
CREATE FUNCTION bc_join.ssh_pattern_valid(kind text, pattern text) RETURNS boolean
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	AS $$
	SELECT CASE kind
		WHEN 'host' THEN bc_join.ssh_name_valid('host', CASE WHEN left(pattern, 2) = '*.'
															  THEN substr(pattern, 3) ELSE pattern END)
		WHEN 'user' THEN pattern = '*' OR bc_join.ssh_name_valid('user', CASE WHEN right(pattern, 1) = '*'
															  THEN left(pattern, -1) ELSE pattern END)
		ELSE false END
$$;
COMMENT ON FUNCTION bc_join.ssh_pattern_valid(text, text) IS
	'Internal: whether an SSH name pattern is well made: host, a name or *.name (one leftmost label); user, a name, prefix* or *.';

-- Whether name matches pattern: equal, or host *.suffix for exactly one more
-- leftmost label, or user prefix* for any name starting with prefix.
CREATE FUNCTION bc_join.ssh_name_matches(kind text, pattern text, name text) RETURNS boolean
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	AS $$
	SELECT coalesce(pattern = name OR CASE kind
		WHEN 'host' THEN left(pattern, 2) = '*.' AND length(name) > length(pattern) - 1
			AND right(name, length(pattern) - 1) = substr(pattern, 2)
			AND strpos(left(name, length(name) - length(pattern) + 1), '.') = 0
		WHEN 'user' THEN right(pattern, 1) = '*' AND starts_with(name, left(pattern, -1))
		ELSE false END, false)
$$;
COMMENT ON FUNCTION bc_join.ssh_name_matches(text, text, text) IS
	'Internal: whether an SSH principal matches a pattern (equal; host *.suffix: one more leftmost label; user prefix*: starts with prefix).';

-- Whether two host patterns name a host in common.
CREATE FUNCTION bc_join.ssh_host_patterns_overlap(a text, b text) RETURNS boolean
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	AS $$
	SELECT a = b OR bc_join.ssh_name_matches('host', a, b) OR bc_join.ssh_name_matches('host', b, a)
$$;
COMMENT ON FUNCTION bc_join.ssh_host_patterns_overlap(text, text) IS
	'Internal: whether two SSH host patterns name a host in common.';

-- Give a tenant SSH names (platform operator only): returns how many were new.
CREATE FUNCTION bc_join.allow_ssh_names(tenant_id text, kind text, patterns text[]) RETURNS integer
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	p text;
	other text;
	added text[] := '{}';
BEGIN
	IF NOT bc_join.is_platform_operator() THEN
		RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
			MESSAGE = 'only the platform operator gives tenants SSH names',
			DETAIL = 'ACCESS_DENIED: the SSH CAs are shared by every tenant of the trust domain.';
	END IF;
	IF NOT EXISTS (SELECT 1 FROM bc_join.tenants t WHERE t.id = allow_ssh_names.tenant_id) THEN
		PERFORM bc_join.invalid_input('no tenant has this id');
	END IF;
	IF kind IS NULL OR kind NOT IN ('host', 'user') THEN
		PERFORM bc_join.invalid_input('kind is host or user');
	END IF;
	IF patterns IS NULL OR cardinality(patterns) = 0 OR cardinality(patterns) > 1000 THEN
		PERFORM bc_join.invalid_input('patterns: 1 to 1000 patterns');
	END IF;
	-- The overlap check below must see every name committed before the lock:
	-- under repeatable read the snapshot was taken before it (at this
	-- statement), so a name given at the same time would be missed.  Read
	-- committed takes a snapshot per statement; serializable detects the
	-- conflict itself.
	IF current_setting('transaction_isolation') = 'repeatable read' THEN
		RAISE EXCEPTION USING ERRCODE = 'invalid_transaction_state',
			MESSAGE = 'allow_ssh_names cannot run under repeatable read',
			DETAIL = 'Its check that two tenants'' names do not overlap needs a snapshot taken after its lock.',
			HINT = 'Run it in a read committed (the default) or serializable transaction.';
	END IF;
	-- one at a time: two tenants' overlapping names are refused whatever the order
	LOCK TABLE bc_join.ssh_names IN SHARE ROW EXCLUSIVE MODE;
	FOREACH p IN ARRAY patterns LOOP
		IF NOT bc_join.ssh_pattern_valid(kind, p) THEN
			PERFORM bc_join.invalid_input(format('%s is no SSH %s name pattern', left(coalesce(p, 'NULL'), 300), kind));
		END IF;
		-- No two tenants' names overlap, host or user: with one user CA per
		-- trust domain and sshd's default (principal = account), tenant A's
		-- root would log in as root on tenant B's hosts.  User patterns
		-- overlap when equal or when one's prefix* matches the other (a
		-- name, or a prefix: svc-* and svc-a*); '*' overlaps every one.
		SELECT n.tenant_id INTO other FROM bc_join.ssh_names n
			WHERE n.kind = allow_ssh_names.kind AND n.tenant_id <> allow_ssh_names.tenant_id
			  AND CASE allow_ssh_names.kind WHEN 'host' THEN bc_join.ssh_host_patterns_overlap(n.pattern, p)
				  ELSE n.pattern = p OR bc_join.ssh_name_matches('user', n.pattern, p)
					  OR bc_join.ssh_name_matches('user', p, n.pattern) END
			LIMIT 1;
		IF FOUND THEN
			PERFORM bc_join.invalid_input(format('%s overlaps a %s name of tenant %s', p, kind, other));
		END IF;
		INSERT INTO bc_join.ssh_names (tenant_id, kind, pattern)
			VALUES (allow_ssh_names.tenant_id, allow_ssh_names.kind, p) ON CONFLICT DO NOTHING;
		IF FOUND THEN
			added := added || p;
		END IF;
	END LOOP;
	IF cardinality(added) > 0 THEN
		INSERT INTO bc_join.audit_log (action, tenant_id, detail)
			VALUES ('ssh.names', allow_ssh_names.tenant_id,
					jsonb_build_object('kind', kind, 'allowed', to_jsonb(added)));
	END IF;
	RETURN cardinality(added);
END
$$;
COMMENT ON FUNCTION bc_join.allow_ssh_names(text, text, text[]) IS
	'Gives a tenant SSH names of kind host (a DNS name or *.suffix) or user (a name, prefix* or *), never overlapping another tenant''s of that kind; the platform operator only; refused under repeatable read; audited; returns how many were new.';

-- Take SSH names from a tenant (platform operator only): returns how many
-- were removed.  Certificates already issued stay until they expire.
CREATE FUNCTION bc_join.disallow_ssh_names(tenant_id text, kind text, patterns text[]) RETURNS integer
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	removed text[];
BEGIN
	IF NOT bc_join.is_platform_operator() THEN
		RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
			MESSAGE = 'only the platform operator takes SSH names from tenants',
			DETAIL = 'ACCESS_DENIED: the SSH CAs are shared by every tenant of the trust domain.';
	END IF;
	IF kind IS NULL OR kind NOT IN ('host', 'user') THEN
		PERFORM bc_join.invalid_input('kind is host or user');
	END IF;
	WITH d AS (DELETE FROM bc_join.ssh_names n
			   WHERE n.tenant_id = disallow_ssh_names.tenant_id AND n.kind = disallow_ssh_names.kind
				 AND n.pattern = ANY (patterns) RETURNING n.pattern)
		SELECT coalesce(array_agg(d.pattern ORDER BY d.pattern), '{}') INTO removed FROM d;
	IF cardinality(removed) > 0 THEN
		INSERT INTO bc_join.audit_log (action, tenant_id, detail)
			VALUES ('ssh.names', disallow_ssh_names.tenant_id,
					jsonb_build_object('kind', kind, 'disallowed', to_jsonb(removed)));
	END IF;
	RETURN cardinality(removed);
END
$$;
COMMENT ON FUNCTION bc_join.disallow_ssh_names(text, text, text[]) IS
	'Takes SSH names of kind host or user from a tenant; the platform operator only; audited; returns how many were removed (certificates issued stay until they expire).';

-- Internal: whether a principal template uses only its kind's placeholders
-- and otherwise the characters of its kind's names.
CREATE FUNCTION bc_join.ssh_template_valid(kind text, template text) RETURNS boolean
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	AS $$
	SELECT coalesce(length(template) BETWEEN 1 AND 255 AND CASE kind
		WHEN 'host' THEN regexp_replace(template, '\{(node|pool|tenant|hostname)\}', 'x', 'g') ~ '^[a-z0-9.-]+$'
		WHEN 'user' THEN regexp_replace(template, '\{(session|context|node)\}', 'x', 'g') ~ '^[A-Za-z0-9._@-]+$'
		ELSE false END, false)
$$;
COMMENT ON FUNCTION bc_join.ssh_template_valid(text, text) IS
	'Internal: whether an SSH principal template uses only its kind''s placeholders (host: {node}, {pool}, {tenant}, {hostname}; user: {session}, {context}, {node}) and its kind''s name characters.';

-- Set a pool's SSH settings: NULL keeps a value (or takes the default), ''
-- clears force-command or source-address.
CREATE FUNCTION bc_join.set_ssh_settings(pool_id text, host_principals text[] DEFAULT NULL,
		host_hostname_patterns text[] DEFAULT NULL, user_principals text[] DEFAULT NULL,
		user_force_command text DEFAULT NULL, user_source_address text DEFAULT NULL,
		user_extensions text[] DEFAULT NULL)
	RETURNS bc_join.ssh_settings
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	tenant text := (SELECT p.tenant_id FROM bc_join.pools p WHERE p.id = set_ssh_settings.pool_id);
	r bc_join.ssh_settings;
	t text;
	a text;
	addrs text[] := '{}';
BEGIN
	PERFORM bc_join.check_tenant(tenant, 'pool');
	IF tenant IS NULL THEN
		PERFORM bc_join.invalid_input('no pool has this id');
	END IF;
	IF cardinality(host_principals) > 32 OR cardinality(user_principals) > 32
			OR cardinality(host_hostname_patterns) > 32 THEN
		PERFORM bc_join.invalid_input('at most 32 principal templates and 32 hostname patterns');
	END IF;
	FOREACH t IN ARRAY coalesce(host_principals, '{}') LOOP
		IF NOT bc_join.ssh_template_valid('host', t) THEN
			PERFORM bc_join.invalid_input(format('%s is no host principal template (placeholders {node}, {pool}, {tenant}, {hostname})', left(coalesce(t, 'NULL'), 300)));
		END IF;
	END LOOP;
	FOREACH t IN ARRAY coalesce(user_principals, '{}') LOOP
		IF NOT bc_join.ssh_template_valid('user', t) THEN
			PERFORM bc_join.invalid_input(format('%s is no user principal template (placeholders {session}, {context}, {node})', left(coalesce(t, 'NULL'), 300)));
		END IF;
	END LOOP;
	FOREACH t IN ARRAY coalesce(host_hostname_patterns, '{}') LOOP
		IF NOT bc_join.ssh_pattern_valid('host', t) THEN
			PERFORM bc_join.invalid_input(format('%s is no hostname pattern (a DNS name or *.suffix)', left(coalesce(t, 'NULL'), 300)));
		END IF;
	END LOOP;
	IF user_force_command <> '' AND (octet_length(user_force_command) > 1024
			OR user_force_command ~ '[\x01-\x1f\x7f]') THEN
		PERFORM bc_join.invalid_input('user_force_command: at most 1024 bytes, no control characters');
	END IF;
	IF user_source_address <> '' THEN
		IF cardinality(string_to_array(user_source_address, ',')) > 16 THEN
			PERFORM bc_join.invalid_input('user_source_address: at most 16 comma-separated CIDRs');
		END IF;
		FOREACH a IN ARRAY string_to_array(user_source_address, ',') LOOP
			BEGIN
				addrs := addrs || (btrim(a)::cidr)::text;
			EXCEPTION WHEN OTHERS THEN
				PERFORM bc_join.invalid_input(format('user_source_address: %s is no CIDR', left(a, 100)));
			END;
		END LOOP;
	END IF;
	IF user_extensions IS NOT NULL AND (array_position(user_extensions, NULL) IS NOT NULL OR NOT user_extensions <@
			'{permit-X11-forwarding,permit-agent-forwarding,permit-port-forwarding,permit-pty,permit-user-rc}') THEN
		PERFORM bc_join.invalid_input('user_extensions: permit-X11-forwarding, permit-agent-forwarding, permit-port-forwarding, permit-pty, permit-user-rc');
	END IF;
	INSERT INTO bc_join.ssh_settings AS s (pool_id, tenant_id, host_principals, host_hostname_patterns,
			user_principals, user_force_command, user_source_address, user_extensions)
		VALUES (set_ssh_settings.pool_id, tenant, coalesce(set_ssh_settings.host_principals, '{}'),
				coalesce(set_ssh_settings.host_hostname_patterns, '{}'),
				coalesce(set_ssh_settings.user_principals, '{}'),
				nullif(set_ssh_settings.user_force_command, ''),
				nullif(array_to_string(addrs, ','), ''),
				CASE WHEN set_ssh_settings.user_extensions IS NULL THEN '{permit-pty}'
					 ELSE ARRAY(SELECT DISTINCT e FROM unnest(set_ssh_settings.user_extensions) e ORDER BY e) END)
		ON CONFLICT ON CONSTRAINT ssh_settings_pkey DO UPDATE SET
			host_principals = coalesce(set_ssh_settings.host_principals, s.host_principals),
			host_hostname_patterns = coalesce(set_ssh_settings.host_hostname_patterns, s.host_hostname_patterns),
			user_principals = coalesce(set_ssh_settings.user_principals, s.user_principals),
			user_force_command = CASE WHEN set_ssh_settings.user_force_command IS NULL THEN s.user_force_command
									  ELSE nullif(set_ssh_settings.user_force_command, '') END,
			user_source_address = CASE WHEN set_ssh_settings.user_source_address IS NULL THEN s.user_source_address
									   ELSE nullif(array_to_string(addrs, ','), '') END,
			user_extensions = CASE WHEN set_ssh_settings.user_extensions IS NULL THEN s.user_extensions
								   ELSE ARRAY(SELECT DISTINCT e FROM unnest(set_ssh_settings.user_extensions) e
											  ORDER BY e) END,
			updated_at = bc_join.compute_now()
		RETURNING * INTO r;
	INSERT INTO bc_join.audit_log (action, tenant_id, detail)
		VALUES ('ssh.settings', tenant, to_jsonb(r) - 'updated_at');
	RETURN r;
END
$$;
COMMENT ON FUNCTION bc_join.set_ssh_settings(text, text[], text[], text[], text, text, text[]) IS
	'Sets a pool''s SSH certificates: host principal templates ({node}, {pool}, {tenant}, {hostname}), the hostname claims taken (patterns), user principal templates ({session}, {context}, {node}), force-command, source-address (at most 16 CIDRs) and extensions (permit-*) of user certificates; NULL keeps a value, '''' clears a text; audited; returns the row.';

-- Internal: the principals a pool's rule gives (kind host or user) with
-- these values of the placeholders (vars: node, pool, tenant, hostname;
-- session, context), each of its kind's syntax and within the tenant's
-- ssh_names, in the rule's order, once each; NULL when the pool has no rule
-- of that kind.  A hostname is taken only when it matches one of the
-- rule's host_hostname_patterns (a claim, never proof), and a principal
-- made from it is dropped when a live host certificate of another node
-- carries it already (vars' node: the asking one), so that no node of a pool
-- claims a name another holds.  In a host name an id's '_' is written '-'
-- ({node}: node-0190...), DNS labels having none.  One statement (no loop):
-- it runs at every session asking for SSH.
CREATE FUNCTION bc_join.ssh_rule_principals(kind text, pool_id text, vars jsonb) RETURNS text[]
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	s bc_join.ssh_settings;
	templates text[];
	v jsonb := coalesce(vars, '{}');
	h boolean := kind = 'host';
	out text[];
BEGIN
	SELECT * INTO s FROM bc_join.ssh_settings x WHERE x.pool_id = ssh_rule_principals.pool_id;
	IF NOT FOUND THEN
		RETURN NULL;
	END IF;
	templates := CASE kind WHEN 'host' THEN s.host_principals ELSE s.user_principals END;
	IF cardinality(templates) = 0 THEN
		RETURN NULL;
	END IF;
	IF h AND (v->>'hostname' IS NULL OR NOT bc_join.ssh_name_valid('host', v->>'hostname')
			OR NOT EXISTS (SELECT 1 FROM unnest(s.host_hostname_patterns) p
						   WHERE bc_join.ssh_name_matches('host', p, v->>'hostname'))) THEN
		v := v - 'hostname';
	END IF;
	-- Each template with its kind's placeholders replaced (one left unreplaced,
	-- a value missing, drops it); ids in a host name written with '-' for '_'
	-- (node_0190... as node-0190...: no '_' in a DNS label).  No value holds
	-- a brace (ids, selectors, a valid hostname), so none makes a placeholder.
	SELECT coalesce(array_agg(e.name ORDER BY e.ord), '{}') INTO out
	FROM (SELECT DISTINCT ON (x.name) x.name, x.ord
		  FROM (SELECT t.ord, h AND strpos(t.tpl, '{hostname}') > 0 AS claimed, CASE WHEN h THEN
					replace(replace(replace(replace(t.tpl,
						'{node}', coalesce(replace(v->>'node', '_', '-'), '{node}')),
						'{pool}', coalesce(replace(v->>'pool', '_', '-'), '{pool}')),
						'{tenant}', coalesce(replace(v->>'tenant', '_', '-'), '{tenant}')),
						'{hostname}', coalesce(v->>'hostname', '{hostname}'))
				ELSE replace(replace(replace(t.tpl,
						'{session}', coalesce(v->>'session', '{session}')),
						'{context}', coalesce(v->>'context', '{context}')),
						'{node}', coalesce(v->>'node', '{node}')) END AS name
				FROM unnest(templates) WITH ORDINALITY AS t(tpl, ord)) x
		  WHERE x.name !~ '[{}]' AND bc_join.ssh_name_valid(kind, x.name)
			AND EXISTS (SELECT 1 FROM bc_join.ssh_names n
						WHERE n.tenant_id = s.tenant_id AND n.kind = ssh_rule_principals.kind
						  AND bc_join.ssh_name_matches(n.kind, n.pattern, x.name))
			AND NOT (x.claimed AND EXISTS (
				SELECT 1 FROM bc_join.ssh_certs c
				WHERE c.kind = 'host' AND c.revoked_at IS NULL AND c.principals @> ARRAY[x.name]
				  AND c.valid_before > bc_join.compute_now() AND c.node_id IS DISTINCT FROM v->>'node'))
		  ORDER BY x.name, x.ord) e;
	RETURN out;
END
$$;
COMMENT ON FUNCTION bc_join.ssh_rule_principals(text, text, jsonb) IS
	'Internal: the principals of kind host or user a pool''s rule gives with these placeholder values, each of its kind''s syntax and within the tenant''s ssh_names (one made from the claimed hostname: also carried by no live host certificate of another node); NULL when the pool has no rule of that kind.';

-- Issue an OpenSSH host certificate: {"sshPublicKey": <base64 key blob>,
-- "proof": <JWS by the node key over purpose "ssh-host", serial,
-- sshKeySha256, iat, hostname?, principals?>}.  See docs/operator.md "21. SSH".
CREATE FUNCTION bc_join.issue_ssh_host_cert(request jsonb) RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_issue_ssh_host_cert'
	LANGUAGE C VOLATILE STRICT SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION bc_join.issue_ssh_host_cert(jsonb) IS
	'Issues an OpenSSH host certificate (ssh-host-ca.key) for a joined node''s SSH host key from a proof signed by the node key; principals from the pool''s rule within the tenant''s SSH names; valid to the node certificate''s notAfter; returns the signed response or the one refusal.';

-- Internal trigger: a node or session certificate revoked (not renewed)
-- revokes the SSH certificates that hang on it (a node certificate's: also
-- those of the certificates it renewed), with the same reason, one audit
-- row each, and bumps the KRL.
CREATE FUNCTION bc_join.ssh_cascade() RETURNS trigger
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	c record;
	n integer := 0;
	cause text := CASE TG_TABLE_NAME WHEN 'node_certs' THEN 'node-certificate' ELSE 'session-certificate' END;
	node_serials text[];
BEGIN
	-- A node certificate's: those proven with it, and with the certificates it
	-- renewed (a renewal revokes none: the old host certificate lives on, for
	-- the same host key, until the old notAfter), so that a revoked node keeps
	-- no live SSH certificate.  A session certificate's: its user certificate.
	IF TG_TABLE_NAME = 'node_certs' THEN
		node_serials := NEW.serial || ARRAY(SELECT r.serial FROM bc_join.node_certs r
											WHERE r.node_id = NEW.node_id AND r.revocation_reason = 'renewed');
	END IF;
	FOR c IN UPDATE bc_join.ssh_certs x SET revoked_at = NEW.revoked_at, revocation_reason = NEW.revocation_reason
			 WHERE x.revoked_at IS NULL
			   AND CASE WHEN node_serials IS NOT NULL THEN x.node_serial = ANY (node_serials)
					   ELSE x.session_cert_serial = NEW.serial END
			 RETURNING x.serial, x.kind, x.tenant_id, x.node_id LOOP
		INSERT INTO bc_join.audit_log (action, tenant_id, node_id, detail)
			VALUES ('ssh.certificate.revoke', c.tenant_id, c.node_id,
					jsonb_build_object('serial', c.serial::text, 'kind', c.kind, 'reason', NEW.revocation_reason,
									   'cause', cause, 'causeSerial', NEW.serial));
		n := n + 1;
	END LOOP;
	IF n > 0 THEN
		PERFORM bc_join.ssh_krl_bump();
		-- the KRL changed: the gateway refetches it (a reclaim's revocation
		-- sends no NOTIFY of its own)
		PERFORM pg_notify('bc_join_crl', '');
	END IF;
	RETURN NULL;
END
$$;
COMMENT ON FUNCTION bc_join.ssh_cascade() IS
	'Internal trigger: revoking a node or session certificate (not by renewal) revokes its SSH certificates (a node certificate''s: also those of the certificates it renewed) with the same reason, audited one by one, bumps the KRL and sends NOTIFY bc_join_crl.';
CREATE TRIGGER ssh_cascade AFTER UPDATE OF revoked_at ON bc_join.node_certs
	FOR EACH ROW WHEN (OLD.revoked_at IS NULL AND NEW.revoked_at IS NOT NULL
					   AND NEW.revocation_reason IS DISTINCT FROM 'renewed')
	EXECUTE FUNCTION bc_join.ssh_cascade();
CREATE TRIGGER ssh_cascade AFTER UPDATE OF revoked_at ON bc_join.session_certs
	FOR EACH ROW WHEN (OLD.revoked_at IS NULL AND NEW.revoked_at IS NOT NULL)
	EXECUTE FUNCTION bc_join.ssh_cascade();

-- Internal trigger: revoked SSH certificates deleted (pruned, or their node
-- deleted) leave the KRL, which then changes: its version is bumped.
CREATE FUNCTION bc_join.ssh_certs_deleted() RETURNS trigger
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
BEGIN
	IF EXISTS (SELECT 1 FROM gone g WHERE g.revoked_at IS NOT NULL) THEN
		PERFORM bc_join.ssh_krl_bump();
	END IF;
	RETURN NULL;
END
$$;
COMMENT ON FUNCTION bc_join.ssh_certs_deleted() IS
	'Internal trigger: deleting revoked SSH certificates (pruned, their node deleted) bumps the KRL''s version, whose content changes.';
CREATE TRIGGER ssh_certs_deleted AFTER DELETE ON bc_join.ssh_certs
	REFERENCING OLD TABLE AS gone FOR EACH STATEMENT
	EXECUTE FUNCTION bc_join.ssh_certs_deleted();

-- Revoke one SSH certificate by serial for an RFC 5280 reason name
-- (check_revocation_reason): false when it was revoked already.  Audited,
-- evented, the KRL bumped and the gateway's cached copy told.
CREATE FUNCTION bc_join.revoke_ssh_certificate(serial bigint, reason text) RETURNS boolean
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	c record;
BEGIN
	PERFORM bc_join.check_revocation_reason(reason);
	PERFORM bc_join.check_tenant((SELECT x.tenant_id FROM bc_join.ssh_certs x
								  WHERE x.serial = revoke_ssh_certificate.serial), 'SSH certificate');
	IF NOT EXISTS (SELECT 1 FROM bc_join.ssh_certs x WHERE x.serial = revoke_ssh_certificate.serial) THEN
		PERFORM bc_join.invalid_input('no SSH certificate has this serial');
	END IF;
	UPDATE bc_join.ssh_certs x SET revoked_at = bc_join.compute_now(),
		revocation_reason = revoke_ssh_certificate.reason
		WHERE x.serial = revoke_ssh_certificate.serial AND x.revoked_at IS NULL
		RETURNING x.kind, x.tenant_id, x.node_id INTO c;
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	INSERT INTO bc_join.audit_log (action, tenant_id, node_id, detail)
		VALUES ('ssh.certificate.revoke', c.tenant_id, c.node_id,
				jsonb_build_object('serial', serial::text, 'kind', c.kind, 'reason', reason,
								   'cause', 'operator'));
	INSERT INTO bc_join.events (tenant_id, type, payload)
		VALUES (c.tenant_id, 'ssh.certificate.revoked',
				jsonb_build_object('serial', serial::text, 'kind', c.kind, 'nodeId', c.node_id,
								   'reason', reason));
	PERFORM bc_join.ssh_krl_bump();
	PERFORM pg_notify('bc_join_crl', '');
	RETURN true;
END
$$;
COMMENT ON FUNCTION bc_join.revoke_ssh_certificate(bigint, text) IS
	'Revokes one SSH certificate by serial for an RFC 5280 reason name, audited and evented, listed in the KRL from now on; returns false when it was revoked already.';

-- Every SSH certificate with its state, for psql.
CREATE VIEW bc_join.ssh_certificates WITH (security_invoker = true) AS
	SELECT c.serial, c.kind, c.tenant_id, c.node_id, c.principals, c.key_id, c.key_fingerprint,
		   'SHA256:' || rtrim(encode(sha256(c.ca_key), 'base64'), '=') AS ca_fingerprint,
		   c.critical_options, c.extensions, c.valid_after, c.valid_before,
		   c.node_serial, c.session_cert_serial, c.issued_at, c.revoked_at, c.revocation_reason,
		   CASE WHEN c.revoked_at IS NOT NULL THEN 'revoked'
				WHEN c.valid_before <= bc_join.compute_now() THEN 'expired'
				ELSE 'live' END AS state
	FROM bc_join.ssh_certs c;
COMMENT ON VIEW bc_join.ssh_certificates IS
	'Every SSH certificate: serial, kind, tenant, node, principals, key ID, key and CA fingerprints, options, extensions, validity, the node and session certificates it hangs on, revocation and state (live, expired, revoked).';

-- The OpenSSH KRL (ssh-keygen -k format, unsigned): every revoked SSH
-- certificate not expired when the KRL last changed, by serial under its CA.
CREATE FUNCTION bc_join.ssh_krl() RETURNS bytea
	AS 'MODULE_PATHNAME', 'bc_ssh_krl' LANGUAGE C STABLE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION bc_join.ssh_krl() IS
	'Returns the OpenSSH KRL (unsigned, RevokedKeys / RevokedHostKeys): version and time of ssh_krl_state, the serials of every revoked SSH certificate not expired then, under its CA key; the same bytes until the next revocation.';

-- The SSH CA keys and the KRL's hash, signed as signed_trust_bundles().
CREATE FUNCTION bc_join.signed_ssh() RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_signed_ssh' LANGUAGE C STABLE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION bc_join.signed_ssh() IS
	'Returns {keys: [JWS...]}: {trustDomain, issuedAt, krlVersion, krlSha256, hostCa, userCa} (the KRL''s version and SHA-256, the SSH CA public key lines, current first) signed by each signing key, as signed_trust_bundles(); the gateway''s GET /v1/ssh/signed.';

-- The host CA's public keys, one OpenSSH line each (current first): for
-- @cert-authority lines of known_hosts.
CREATE FUNCTION bc_join.ssh_host_ca() RETURNS text
	AS 'MODULE_PATHNAME', 'bc_ssh_host_ca' LANGUAGE C STABLE;
COMMENT ON FUNCTION bc_join.ssh_host_ca() IS
	'Returns the SSH host CA public keys (ssh-host-ca.key, .next, .previous), one OpenSSH public key line each, for @cert-authority in known_hosts.';

-- The user CA's public keys, one OpenSSH line each (current first): for
-- sshd's TrustedUserCAKeys.
CREATE FUNCTION bc_join.ssh_user_ca() RETURNS text
	AS 'MODULE_PATHNAME', 'bc_ssh_user_ca' LANGUAGE C STABLE;
COMMENT ON FUNCTION bc_join.ssh_user_ca() IS
	'Returns the SSH user CA public keys (ssh-user-ca.key, .next, .previous), one OpenSSH public key line each, for sshd''s TrustedUserCAKeys.';

ALTER TABLE bc_join.ssh_names ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.ssh_names
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR tenant_id IN (SELECT g.tenant_id FROM bc_join.tenant_operator_grants g));
ALTER TABLE bc_join.ssh_settings ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.ssh_settings
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR tenant_id IN (SELECT g.tenant_id FROM bc_join.tenant_operator_grants g));
ALTER TABLE bc_join.ssh_certs ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.ssh_certs
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR tenant_id IN (SELECT g.tenant_id FROM bc_join.tenant_operator_grants g));

SELECT pg_catalog.pg_extension_config_dump('bc_join.ssh_names', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.ssh_settings', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.ssh_certs', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.ssh_krl_state', '');

REVOKE ALL ON bc_join.ssh_names, bc_join.ssh_settings, bc_join.ssh_certs, bc_join.ssh_krl_state,
	bc_join.ssh_certificates FROM PUBLIC;
REVOKE ALL ON FUNCTION bc_join.ssh_krl_bump(), bc_join.ssh_name_valid(text, text),
	bc_join.ssh_pattern_valid(text, text), bc_join.ssh_name_matches(text, text, text),
	bc_join.ssh_host_patterns_overlap(text, text), bc_join.allow_ssh_names(text, text, text[]),
	bc_join.disallow_ssh_names(text, text, text[]), bc_join.ssh_template_valid(text, text),
	bc_join.set_ssh_settings(text, text[], text[], text[], text, text, text[]),
	bc_join.ssh_rule_principals(text, text, jsonb), bc_join.issue_ssh_host_cert(jsonb),
	bc_join.ssh_cascade(), bc_join.ssh_certs_deleted(), bc_join.revoke_ssh_certificate(bigint, text),
	bc_join.ssh_krl(),
	bc_join.signed_ssh(), bc_join.ssh_host_ca(), bc_join.ssh_user_ca() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bc_join.issue_ssh_host_cert(jsonb), bc_join.ssh_krl(), bc_join.signed_ssh(),
	bc_join.ssh_host_ca(), bc_join.ssh_user_ca() TO bc_join_gateway;
GRANT EXECUTE ON FUNCTION bc_join.ssh_krl(), bc_join.signed_ssh(), bc_join.ssh_host_ca(),
	bc_join.ssh_user_ca(), bc_join.set_ssh_settings(text, text[], text[], text[], text, text, text[]),
	bc_join.revoke_ssh_certificate(bigint, text)
	TO bc_join_operator, bc_join_tenant_operator;
GRANT EXECUTE ON FUNCTION bc_join.allow_ssh_names(text, text, text[]),
	bc_join.disallow_ssh_names(text, text, text[]) TO bc_join_operator;
GRANT SELECT ON bc_join.ssh_names, bc_join.ssh_settings, bc_join.ssh_certs, bc_join.ssh_certificates
	TO bc_join_operator, bc_join_tenant_operator;
GRANT SELECT ON bc_join.ssh_krl_state TO bc_join_operator;

/* ------------------------------------- #48: the service's numbers for Prometheus */

/*
 * What the service knows, as Prometheus text exposition 0.0.4: the gateway's
 * metrics listener (bc-gateway --metrics-listen) serves it after its own
 * families.  Counters from shared memory, gauges from indexes only (never
 * the events or the audit log), bounded labels (docs/operator.md
 * "Watching it" lists every family; docs/performance.md its cost).
 */
CREATE FUNCTION bc_join.metrics() RETURNS text
	AS 'MODULE_PATHNAME', 'bc_metrics'
	LANGUAGE C VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	-- a few index-only scans: starting parallel workers costs more than they save
	SET max_parallel_workers_per_gather = 0;
COMMENT ON FUNCTION bc_join.metrics() IS
	'Returns the service''s numbers as Prometheus text (rounds and refusals by attestor and reason, pending join requests by tenant, live and expiring certificates, sessions, audit log and anchor times, key rotations, continuous-attestation failures, stale and quarantined nodes); to the gateway and the platform operator.';

REVOKE ALL ON FUNCTION bc_join.metrics() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bc_join.metrics() TO bc_join_gateway, bc_join_operator;
