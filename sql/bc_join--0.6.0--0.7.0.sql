-- bc_join 0.6.0 -> 0.7.0 (ALTER EXTENSION bc_join UPDATE).
-- Every change made to sql/bc_join.sql for 0.7.0 has its equivalent here
-- (docs/development.md, "Changing the schema"); test/tools/upgrade-check
-- proves a 0.6.0 database updated by this script equals a fresh 0.7.0.
\echo Use "ALTER EXTENSION bc_join UPDATE" to load this file. \quit

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
	kind text NOT NULL CHECK (kind IN ('host', 'user')),
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
	revocation_reason text CHECK (revocation_reason IN
		('unspecified', 'keyCompromise', 'cACompromise', 'affiliationChanged', 'superseded',
		 'cessationOfOperation', 'privilegeWithdrawn', 'aACompromise',
		 'reclaimed', 'retired', 'attestation-failed')),
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

-- #47: prune_certificates prunes expired SSH certificates too.
CREATE OR REPLACE FUNCTION bc_join.prune_certificates(batch integer DEFAULT 5000) RETURNS bigint
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
