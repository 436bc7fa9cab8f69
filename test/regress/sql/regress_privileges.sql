-- regress_privileges: REVOKE ALL FROM PUBLIC, a gateway role that can only
-- call bc_join(), an operator role that administers and reads, settings and
-- keys out of reach.
\set VERBOSITY terse
SELECT rolname, rolcanlogin FROM pg_roles
	WHERE rolname IN ('bc_join_gateway', 'bc_join_operator', 'bc_join_tenant_operator') ORDER BY 1;
CREATE ROLE regress_gw LOGIN IN ROLE bc_join_gateway;
CREATE ROLE regress_op LOGIN IN ROLE bc_join_operator;
CREATE ROLE regress_top LOGIN IN ROLE bc_join_tenant_operator;
CREATE ROLE regress_nobody LOGIN;

-- Anyone else: nothing at all.
SET ROLE regress_nobody;
SELECT bc_join('{}');
SELECT count(*) FROM bc_join.nodes;
SELECT bc_join.create_tenant('x');
SELECT bc_join.service_keys();
RESET ROLE;

-- The gateway: bc_join() and nothing else.
SET ROLE regress_gw;
SELECT bc_join('[]');
SELECT count(*) FROM bc_join.nodes;
SELECT count(*) FROM bc_join.events;
SELECT bc_join.create_tenant('x');
SELECT bc_join.compute_now() IS NOT NULL;
SELECT bc_join.refuse('x:y');
RESET ROLE;

-- The operator: administration and reading; never the join itself.
SET ROLE regress_op;
SELECT bc_join('{}');
SELECT bc_join.create_tenant('ops') ~ '^ten_[0-9a-f]{32}$' AS created;
SELECT count(*) >= 1 AS reads_tenants FROM bc_join.tenants;
SELECT count(*) >= 0 AS reads_events FROM bc_join.events;
SELECT id FROM bc_join.join_tokens LIMIT 0;
SELECT secret_sha256 FROM bc_join.join_tokens;
INSERT INTO bc_join.tenants (id, name) VALUES ('t', 't');
UPDATE bc_join.join_tokens SET uses_left = 100;
DELETE FROM bc_join.events;
SELECT key FROM jsonb_each(bc_join.signing_jwk()) ORDER BY 1;
SELECT key FROM jsonb_each(bc_join.service_keys()) ORDER BY 1;
SELECT bc_join.node_ca_certificate() LIKE '-----BEGIN CERTIFICATE-----%' AS ca_pem;
RESET ROLE;

-- Settings: superuser-only, the key directory hidden from everyone else.
SELECT name, context FROM pg_settings WHERE name LIKE 'bc_join.%' ORDER BY 1;
SET ROLE regress_op;
-- Reading it is refused with 42501 on every major (the message's words
-- differ: 15 says "must be superuser or have privileges of ...", 16 and
-- later "permission denied to examine ..."), so the state is what is shown.
DO $$ BEGIN EXECUTE 'SHOW bc_join.key_dir'; RAISE NOTICE 'SHOW: read';
EXCEPTION WHEN insufficient_privilege THEN RAISE NOTICE 'SHOW: refused %', SQLSTATE; END $$;
DO $$ BEGIN PERFORM current_setting('bc_join.key_dir'); RAISE NOTICE 'current_setting: read';
EXCEPTION WHEN insufficient_privilege THEN RAISE NOTICE 'current_setting: refused %', SQLSTATE; END $$;
SET bc_join.key_dir = '/tmp';
SET bc_join.clock_offset = 3600;
SET bc_join.trust_domain = 'evil.example';
SELECT pg_read_file('/etc/hostname');
RESET ROLE;

-- Every function of the extension: who may run it.
SELECT p.oid::regprocedure AS function,
	   has_function_privilege('regress_gw', p.oid, 'EXECUTE') AS gateway,
	   has_function_privilege('regress_op', p.oid, 'EXECUTE') AS operator,
	   has_function_privilege('regress_top', p.oid, 'EXECUTE') AS tenant_op,
	   has_function_privilege('regress_nobody', p.oid, 'EXECUTE') AS nobody,
	   p.prosecdef AS security_definer,
	   coalesce(array_to_string(p.proconfig, ','), '') AS config
FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e'
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'bc_join'
ORDER BY p.oid::regprocedure::text;

-- Every table and view: what the tenant operator (bc_join_tenant_operator)
-- may do, and whether row-level security cuts its rows down (a view reads
-- as its caller: security_invoker).
SELECT c.relname, c.relkind,
	   has_table_privilege('regress_top', c.oid, 'SELECT') AS tenant_op_select,
	   has_any_column_privilege('regress_top', c.oid, 'SELECT') AS tenant_op_columns,
	   has_table_privilege('regress_top', c.oid, 'INSERT,UPDATE,DELETE,TRUNCATE') AS tenant_op_writes,
	   c.relrowsecurity AS rls, c.relforcerowsecurity AS forced,
	   coalesce(array_to_string(c.reloptions, ','), '') AS options
FROM pg_class c WHERE c.relnamespace = 'bc_join'::regnamespace AND c.relkind IN ('r', 'v')
ORDER BY c.relname;

DROP ROLE regress_gw, regress_op, regress_top, regress_nobody;
