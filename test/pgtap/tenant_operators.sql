-- tenant_operators.sql: operators of one tenant (#31), tried as an attacker
-- would.  Two tenants (A and B) with rows in every table a tenant operator
-- may read, an operator of each (op_a, op_b), a platform operator (plat, a
-- member of bc_join_operator), a role with no grant (nobody) and a gateway
-- (gw).  Every attempt runs as its role (pg_temp.try: SET ROLE, the
-- statement, RESET ROLE) and is logged in pg_temp.attempts; the tests count
-- them.  A tenant operator sees exactly its tenant's rows in every table
-- and view, with hand-written filters and a qual that would fail on another
-- tenant's row; every administrative function refuses another tenant's
-- object with the one error it gives a guessed id; no write reaches another
-- tenant (B's rows are hashed before and after); the platform operator sees
-- and does everything; the gateway's join runs as before.  What needs a
-- login of its own (SET ROLE, search_path, LISTEN) is test/tap/tenant_operators.t.
\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only on
\getenv bcd BCJ_BCD
\getenv keys BCJ_SERVICE_KEYS
\getenv scratch BCJ_SCRATCH
\set d :scratch/pgtap_tenant_operators
\set mk `rm -rf :d && mkdir -p :d`

BEGIN;
SELECT plan(46);

SET client_min_messages = warning;
CREATE ROLE op_a LOGIN;
CREATE ROLE op_b LOGIN;
CREATE ROLE plat LOGIN IN ROLE bc_join_operator;
CREATE ROLE nobody LOGIN;
CREATE ROLE gw LOGIN IN ROLE bc_join_gateway;

------------------------------------------------------------------ two tenants
SELECT bc_join.create_tenant('tenant-a') AS ta \gset
SELECT bc_join.create_tenant('tenant-b') AS tb \gset
SELECT bc_join.create_site(:'ta', 'dc-a') AS site_a \gset
SELECT bc_join.create_site(:'tb', 'dc-b') AS site_b \gset
SELECT bc_join.create_pool(:'ta', :'site_a', 'pa') AS pool_a \gset
SELECT bc_join.create_pool(:'tb', :'site_b', 'pb') AS pool_b \gset
SELECT bc_join.create_join_token(:'ta', :'pool_a', uses => 5) AS tok_a \gset
SELECT bc_join.create_join_token(:'tb', :'pool_b', uses => 5) AS tok_b \gset
SELECT split_part(:'tok_a', '.', 1) AS tid_a, split_part(:'tok_b', '.', 1) AS tid_b \gset
\set ja `:bcd join-request --service-keys :keys --token :'tok_a' --out-dir :d/a`
\set jb `:bcd join-request --service-keys :keys --token :'tok_b' --out-dir :d/b`
\set jb2 `:bcd join-request --service-keys :keys --token :'tok_b' --out-dir :d/b2`
SELECT bc_join(:'ja') IS NOT NULL AS x \gset
SELECT bc_join(:'jb') IS NOT NULL AS x \gset
SELECT id AS node_a FROM bc_join.nodes WHERE tenant_id = :'ta' \gset
SELECT id AS node_b FROM bc_join.nodes WHERE tenant_id = :'tb' \gset
SELECT serial AS serial_a FROM bc_join.node_certs WHERE node_id = :'node_a' \gset
SELECT serial AS serial_b FROM bc_join.node_certs WHERE node_id = :'node_b' \gset
-- sessions, session certificates (one revoked), join requests, commands,
-- provisioning tokens, discovery, tpm, cloud-iid: a row of each tenant
INSERT INTO bc_join.sessions (id, node_id, tenant_id, session_ref) VALUES
	('sess_a', :'node_a', :'ta', 'web'), ('sess_b', :'node_b', :'tb', 'web');
INSERT INTO bc_join.session_certs (serial, session_id, not_before, not_after, spki_sha256, certificate, node_serial)
SELECT md5(s || n), s, now(), now() + interval '1 hour', sha256(convert_to(s || n, 'UTF8')), '\x00', ns
FROM (VALUES ('sess_a', :'serial_a'), ('sess_b', :'serial_b')) v(s, ns), generate_series(1, 2) n;
SELECT md5('sess_a1') AS sserial_a, md5('sess_b1') AS sserial_b \gset
SELECT bc_join.revoke_certificate(md5('sess_a2'), 'superseded') AND bc_join.revoke_certificate(md5('sess_b2'), 'superseded') AS x \gset
INSERT INTO bc_join.join_requests (id, tenant_id, attestor, role, csr_sha256, expires_at) VALUES
	('jr_a', :'ta', 'approve-me', 'node', sha256('a'), bc_join.compute_now() + interval '1 hour'),
	('jr_a2', :'ta', 'approve-me', 'node', sha256('a2'), bc_join.compute_now() + interval '1 hour'),
	('jr_b', :'tb', 'approve-me', 'node', sha256('b'), bc_join.compute_now() + interval '1 hour');
SELECT bc_join.enqueue_command(:'node_a', 'diag.ping', '{}') AS cmd_a \gset
SELECT bc_join.enqueue_command(:'node_b', 'diag.ping', '{}') AS cmd_b \gset
SELECT split_part(bc_join.create_provisioning_token(:'node_a'), '.', 1) AS pt_a \gset
SELECT split_part(bc_join.create_provisioning_token(:'node_b'), '.', 1) AS pt_b \gset
SELECT bc_join.set_discovery_site(:'site_a', 'unknown-machines') IS NULL AS x \gset
SELECT bc_join.set_discovery_site(:'site_b', 'unknown-machines') IS NULL AS x \gset
INSERT INTO bc_join.discovery_machines (site_id, mac) VALUES
	(:'site_a', '02:00:00:00:00:0a'), (:'site_b', '02:00:00:00:00:0b');
SELECT string_agg(bc_join.set_tpm_enrollment_mode(t, 'approval')::text, ',') AS x FROM unnest(ARRAY[:'ta', :'tb']) t \gset
SELECT string_agg(bc_join.enroll_tpm_ek(encode(sha256(convert_to(t, 'UTF8')), 'hex'), t, p)::text, ',') AS x
	FROM (VALUES (:'ta', :'pool_a'), (:'tb', :'pool_b')) v(t, p) \gset
INSERT INTO bc_join.node_bindings (attestor, subject, node_id) VALUES
	('x', sha256('a'), :'node_a'), ('x', sha256('b'), :'node_b');
INSERT INTO bc_join.tpm_pcr_policies (tenant_id, selection, pcr_values) VALUES
	(:'ta', 'sha256:0', sha256('a')), (:'tb', 'sha256:0', sha256('b'));
INSERT INTO bc_join.cloud_accounts (provider, account, tenant_id, pool_id) VALUES
	('aws', '111111111111', :'ta', :'pool_a'), ('aws', '222222222222', :'tb', :'pool_b');
-- both nodes unseen for a week: stale_nodes lists them
UPDATE bc_join.nodes SET last_seen_at = bc_join.compute_now() - interval '7 days';

------------------------------------------------------------------ attempts
CREATE TEMP TABLE attempts (n serial, who text, what text, q text, got text, pass boolean);
GRANT ALL ON attempts, attempts_n_seq TO PUBLIC;
-- Run q as role who; its first value, or err:SQLSTATE:message.
CREATE FUNCTION pg_temp.try(who text, q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	r text;
	path text := current_setting('search_path');
	rs text := current_setting('row_security');
BEGIN
	EXECUTE format('SET ROLE %I', who);
	BEGIN
		EXECUTE q INTO r;
		r := 'ok:' || coalesce(r, '<null>');
	EXCEPTION WHEN OTHERS THEN
		r := 'err:' || SQLSTATE || ':' || SQLERRM;
	END;
	RESET ROLE;
	-- what an attempt SET LOCAL stays for the attempt alone
	PERFORM set_config('search_path', path, true), set_config('row_security', rs, true);
	RETURN r;
END $$;
-- Log one attempt: what it is, and whether what came back is expected.
CREATE FUNCTION pg_temp.att(who text, what text, q text, expected text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
	got text := pg_temp.try(who, q);
BEGIN
	INSERT INTO pg_temp.attempts (who, what, q, got, pass) VALUES (who, what, q, got, got = expected);
	RETURN got = expected;
END $$;
CREATE FUNCTION pg_temp.report(w text) RETURNS text LANGUAGE sql AS $$
	SELECT coalesce(string_agg(format('%s %s: %s -> %s', who, what, q, got), E'\n' ORDER BY n), '')
	FROM pg_temp.attempts WHERE what LIKE w AND NOT coalesce(pass, false) $$;

-- Each relation a tenant operator may read, and the tenant of a row (as
-- the superuser sees it).
CREATE TEMP TABLE rels (rel text, tenant_of text, whole_row boolean DEFAULT true);
INSERT INTO rels (rel, tenant_of) VALUES
	('tenants', 'id'), ('sites', 'tenant_id'), ('pools', 'tenant_id'), ('nodes', 'tenant_id'),
	('node_certs', '(SELECT n.tenant_id FROM bc_join.nodes n WHERE n.id = x.node_id)'),
	('node_bindings', '(SELECT n.tenant_id FROM bc_join.nodes n WHERE n.id = x.node_id)'),
	('sessions', 'tenant_id'),
	('session_certs', '(SELECT s.tenant_id FROM bc_join.sessions s WHERE s.id = x.session_id)'),
	('join_requests', 'tenant_id'), ('events', 'tenant_id'), ('audit_log', 'tenant_id'),
	('commands', '(SELECT n.tenant_id FROM bc_join.nodes n WHERE n.id = x.node_id)'),
	('x509pop_roots', 'tenant_id'), ('tpm_ek_enrollments', 'tenant_id'), ('tpm_pcr_policies', 'tenant_id'),
	('tpm_settings', 'tenant_id'), ('cloud_accounts', 'tenant_id'),
	('discovery_sites', '(SELECT s.tenant_id FROM bc_join.sites s WHERE s.id = x.site_id)'),
	('discovery_machines', '(SELECT s.tenant_id FROM bc_join.sites s WHERE s.id = x.site_id)'),
	('pending_join_requests', 'tenant_id'), ('revoked_certificates', 'tenant_id'),
	('stale_nodes', 'tenant_id'), ('command_status', 'tenant_id'),
	('tenant_operator_grants', 'tenant_id'), ('tenant_operators', 'tenant_id');
INSERT INTO rels (rel, tenant_of, whole_row) VALUES
	('join_tokens', 'tenant_id', false), ('provisioning_tokens', 'tenant_id', false);
-- Every row of a tenant, hashed table by table (what no attempt may change).
CREATE FUNCTION pg_temp.snapshot(t text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	r record;
	h text;
	acc text := '';
BEGIN
	FOR r IN SELECT * FROM pg_temp.rels
			 WHERE rel NOT IN ('pending_join_requests', 'revoked_certificates', 'stale_nodes', 'command_status',
							   'tenant_operators') ORDER BY rel LOOP
		EXECUTE format('SELECT md5(coalesce(string_agg(x::text, ''|'' ORDER BY x::text), '''')) FROM bc_join.%I x WHERE %s = %L',
					   r.rel, r.tenant_of, t) INTO h;
		acc := acc || r.rel || '=' || h || ' ';
	END LOOP;
	RETURN acc;
END $$;

------------------------------------------------------------------ making tenant operators
SELECT is(pg_temp.try('plat', format('SELECT bc_join.grant_tenant_operator(%L, %L)', 'op_a', :'ta')), 'ok:true',
	'the platform operator makes op_a an operator of tenant A');
SELECT is(bc_join.grant_tenant_operator('op_b', :'tb'), true, 'the superuser makes op_b an operator of tenant B');
SELECT is(bc_join.grant_tenant_operator('op_b', :'tb'), false, 'granting it again changes nothing (false)');
SELECT ok(pg_has_role('op_a', 'bc_join_tenant_operator', 'MEMBER') AND pg_has_role('op_b', 'bc_join_tenant_operator', 'MEMBER'),
	'both are members of bc_join_tenant_operator');
SELECT is((SELECT count(*)::int FROM bc_join.events WHERE type = 'tenant_operator.granted' AND tenant_id IN (:'ta', :'tb'))
		  + (SELECT count(*)::int FROM bc_join.audit_log WHERE action = 'tenant_operator.grant' AND tenant_id IN (:'ta', :'tb')),
	4, 'each grant made is an event and an audit row of its tenant');
SELECT is(string_agg(role || ' ' || tenant, ',' ORDER BY tenant), 'op_a tenant-a,op_b tenant-b',
	'tenant_operators: who operates what') FROM bc_join.tenant_operators WHERE tenant_id IN (:'ta', :'tb');
SELECT is(pg_temp.try('op_a', format('SELECT bc_join.grant_tenant_operator(%L, %L)', 'op_a', :'tb')),
	'err:42501:permission denied for function grant_tenant_operator', 'a tenant operator cannot grant itself another tenant');
SELECT is(pg_temp.try('op_a', format('SELECT bc_join.revoke_tenant_operator(%L, %L)', 'op_b', :'tb')),
	'err:42501:permission denied for function revoke_tenant_operator', 'nor take one from another operator');
SELECT is(pg_temp.try('plat', format('SELECT bc_join.grant_tenant_operator(%L, %L)', r, :'ta')),
	'err:22023:a tenant operator is a role of its own: not a superuser, a role that bypasses row-level security, a gateway, a platform operator or one of the extension''s roles',
	format('%s cannot be made a tenant operator', r))
	FROM unnest(ARRAY['gw', 'plat', 'bc_join_gateway', 'bc_join_operator', 'bc_join_tenant_operator', 'postgres']) r;
SELECT is(pg_temp.try('plat', format('SELECT bc_join.grant_tenant_operator(%L, %L)', 'op_a', t)),
	'err:22023:no tenant has this id (the root tenant is the platform''s)', format('no tenant operator of %s', t))
	FROM unnest(ARRAY['root', 'ten_00000000000000000000000000000000']) t;

SELECT pg_temp.snapshot(:'tb') AS before_b, pg_temp.snapshot(:'ta') AS before_a \gset

------------------------------------------------------------------ reading
-- op_a and op_b see exactly their tenant's rows; plat every row; nobody and gw nothing
CREATE FUNCTION pg_temp.own_count(rel text, tenant_of text, t text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE c bigint;
BEGIN
	EXECUTE format('SELECT count(*) FROM bc_join.%I x WHERE %s = %L', rel, tenant_of, t) INTO c;
	RETURN 'ok:' || c;
END $$;
SELECT count(*) FROM (
	SELECT pg_temp.att('op_a', 'read-own', format('SELECT count(*) FROM bc_join.%I', rel), pg_temp.own_count(rel, tenant_of, :'ta')),
		   pg_temp.att('op_b', 'read-own', format('SELECT count(*) FROM bc_join.%I', rel), pg_temp.own_count(rel, tenant_of, :'tb')),
		   pg_temp.att('plat', 'read-all', format('SELECT count(*) FROM bc_join.%I', rel),
					   pg_temp.own_count(rel, 'true', 'true')),
		   pg_temp.att('nobody', 'read-none', format('SELECT count(*) FROM bc_join.%I', rel), 'err:42501:permission denied for schema bc_join'),
		   pg_temp.att('gw', 'read-none', format('SELECT count(*) FROM bc_join.%I', rel),
					   format('err:42501:permission denied for %s %s', CASE WHEN rel IN ('pending_join_requests', 'revoked_certificates',
						   'stale_nodes', 'command_status', 'tenant_operators') THEN 'view' ELSE 'table' END, rel))
	FROM rels) x \gset
SELECT ok((SELECT count(*) FROM bc_join.nodes WHERE tenant_id = :'ta') = 1 AND (SELECT count(*) FROM bc_join.nodes WHERE tenant_id = :'tb') = 1
	AND (SELECT count(*) FROM bc_join.session_certs) >= 4 AND (SELECT count(*) FROM bc_join.stale_nodes WHERE tenant_id IN (:'ta', :'tb')) = 2
	AND (SELECT count(*) FROM bc_join.revoked_certificates WHERE tenant_id IN (:'ta', :'tb')) = 2
	AND (SELECT count(*) FROM bc_join.pending_join_requests WHERE tenant_id IN (:'ta', :'tb')) = 3,
	'every relation holds rows of both tenants');
SELECT is(pg_temp.report('read-own'), '', format('%s reads, by each tenant operator of every table and view: exactly its tenant''s rows',
	(SELECT count(*) FROM attempts WHERE what = 'read-own')));
SELECT is(pg_temp.report('read-all'), '', format('%s reads by the platform operator: every row',
	(SELECT count(*) FROM attempts WHERE what = 'read-all')));
SELECT is(pg_temp.report('read-none'), '', format('%s reads by a role with no grant and by the gateway: refused',
	(SELECT count(*) FROM attempts WHERE what = 'read-none')));

-- hand-written queries naming B's ids, and a qual that fails on any row of B
-- it is shown (it is not: the policy's qual runs first)
CREATE TEMP TABLE b_ids AS SELECT unnest(ARRAY[:'tb', :'site_b', :'pool_b', :'node_b', :'serial_b', 'sess_b', :'sserial_b',
	'jr_b', :'cmd_b', :'pt_b', :'tid_b']) id;
GRANT SELECT ON b_ids TO PUBLIC;
SELECT count(*) FROM (
	SELECT pg_temp.att('op_a', 'read-b', format('SELECT count(*) FROM bc_join.%I x WHERE x::text ~ %L', rel,
						   (SELECT string_agg(id, '|') FROM b_ids)), 'ok:0'),
		   pg_temp.att('op_a', 'read-b', format('SELECT count(*) FROM bc_join.%I x WHERE 1 / (CASE WHEN x::text ~ %L THEN 0 ELSE 1 END) = 1', rel,
						   (SELECT string_agg(id, '|') FROM b_ids)), pg_temp.own_count(rel, tenant_of, :'ta'))
	FROM rels WHERE whole_row) x \gset
SELECT count(*) FROM (
	SELECT pg_temp.att('op_a', 'read-b', q, 'ok:0') FROM unnest(ARRAY[
		format('SELECT count(*) FROM bc_join.join_tokens WHERE id = %L OR tenant_id = %L OR true AND tenant_id <> %L', :'tid_b', :'tb', :'ta'),
		format('SELECT count(*) FROM bc_join.provisioning_tokens WHERE id = %L OR node_id = %L', :'pt_b', :'node_b'),
		format('SELECT count(*) FROM bc_join.nodes n JOIN bc_join.node_certs c ON c.node_id = n.id WHERE c.serial = %L', :'serial_b'),
		format('SELECT count(*) FROM bc_join.node_certs WHERE node_id = %L', :'node_b'),
		format('SELECT count(*) FROM bc_join.session_certs WHERE node_serial = %L', :'serial_b'),
		format('SELECT count(*) FROM bc_join.events WHERE payload @> %L OR payload::text LIKE %L', jsonb_build_object('nodeId', :'node_b'), '%' || :'node_b' || '%'),
		format('SELECT count(*) FROM bc_join.audit_log WHERE detail @> %L OR node_id = %L', jsonb_build_object('tokenId', :'tid_b'), :'node_b'),
		format('SELECT count(*) FROM bc_join.commands WHERE id = %L', :'cmd_b'),
		format('SELECT count(*) FROM bc_join.tenants WHERE id = %L OR name = %L', :'tb', 'tenant-b'),
		format('SELECT count(*) FROM (SELECT tenant_id FROM bc_join.nodes UNION ALL SELECT tenant_id FROM bc_join.events) u WHERE tenant_id = %L', :'tb'),
		format('SELECT count(*) FROM bc_join.nodes WHERE id IN (SELECT node_id FROM bc_join.node_certs WHERE serial = %L)', :'serial_b'),
		format('SELECT count(*) FROM bc_join.pending_join_requests WHERE id = %L', 'jr_b'),
		format('SELECT count(*) FROM bc_join.tenant_operator_grants WHERE role = %L::regrole', 'op_b'),
		format('SELECT count(*) FROM bc_join.discovery_machines WHERE site_id = %L', :'site_b'),
		format('SELECT count(*) FROM bc_join.cloud_accounts WHERE account = %L', '222222222222'),
		format('WITH RECURSIVE r AS (SELECT id FROM bc_join.nodes WHERE id = %L UNION SELECT id FROM r) SELECT count(*) FROM r', :'node_b')
	]) q) x \gset
-- the control: the very same reads by the platform operator find tenant B's
-- rows in every relation that has one (x509pop_roots has none)
SELECT is((SELECT string_agg(rel, ',' ORDER BY rel) FROM rels
		   WHERE whole_row AND pg_temp.try('plat', format('SELECT count(*) FROM bc_join.%I x WHERE x::text ~ %L', rel,
				(SELECT string_agg(id, '|') FROM b_ids))) = 'ok:0'), 'x509pop_roots',
	'the control: as the platform operator, the same queries find B''s rows in every other relation');
SELECT is(pg_temp.report('read-b'), '', format('%s hand-written reads of tenant B''s rows by op_a (its ids, jsonb containment, joins, unions, a failing qual): none shown',
	(SELECT count(*) FROM attempts WHERE what = 'read-b')));
SELECT is(pg_temp.try('op_a', 'SET LOCAL row_security = off; SELECT count(*) FROM bc_join.nodes'),
	'err:42501:query would be affected by row-level security policy for table "nodes"',
	'row_security = off: the query is refused, not run without the policy');
SELECT is(pg_temp.try('op_a', 'SELECT secret_sha256 FROM bc_join.join_tokens'),
	'err:42501:permission denied for table join_tokens', 'no token secret hash, of any tenant');

------------------------------------------------------------------ the administrative functions
-- op_a with B's ids and with guessed ids: the same refusal; B unchanged
CREATE TEMP TABLE calls (what text, q_b text, q_guess text, expected text);
INSERT INTO calls VALUES
	('create_site', format('SELECT bc_join.create_site(%L, %L)', :'tb', 'x'), format('SELECT bc_join.create_site(%L, %L)', 'ten_0123456789abcdef0123456789abcdef', 'x'),
	 'err:42501:no tenant with this id in the tenants you operate'),
	('create_pool', format('SELECT bc_join.create_pool(%L, %L, %L)', :'tb', :'site_b', 'x'), format('SELECT bc_join.create_pool(%L, %L, %L)', 'ten_x', :'site_b', 'x'),
	 'err:42501:no tenant with this id in the tenants you operate'),
	('create_pool', format('SELECT bc_join.create_pool(%L, %L, %L)', :'ta', :'site_b', 'x'), format('SELECT bc_join.create_pool(%L, %L, %L)', :'ta', 'site_x', 'x'),
	 'err:22023:the site does not exist in this tenant'),
	('create_join_token', format('SELECT bc_join.create_join_token(%L, %L)', :'tb', :'pool_b'), format('SELECT bc_join.create_join_token(%L, %L)', 'root', 'pool_x'),
	 'err:42501:no tenant with this id in the tenants you operate'),
	('create_join_token', format('SELECT bc_join.create_join_token(%L, %L)', :'ta', :'pool_b'), format('SELECT bc_join.create_join_token(%L, %L)', :'ta', 'pool_x'),
	 'err:22023:the pool does not exist in this tenant'),
	('create_join_token', format('SELECT bc_join.create_join_token(%L, NULL, role => %L, site_id => %L)', :'ta', 'site', :'site_b'),
	 format('SELECT bc_join.create_join_token(%L, NULL, role => %L, site_id => %L)', :'ta', 'site', 'site_x'),
	 'err:22023:the site does not exist in this tenant'),
	('revoke_join_token', format('SELECT bc_join.revoke_join_token(%L)', :'tid_b'), format('SELECT bc_join.revoke_join_token(%L)', 'jt_x'),
	 'err:42501:no join token with this id in the tenants you operate'),
	('create_provisioning_token', format('SELECT bc_join.create_provisioning_token(%L)', :'node_b'), format('SELECT bc_join.create_provisioning_token(%L)', 'node_x'),
	 'err:42501:no node with this id in the tenants you operate'),
	('revoke_provisioning_token', format('SELECT bc_join.revoke_provisioning_token(%L)', :'pt_b'), format('SELECT bc_join.revoke_provisioning_token(%L)', 'pt_x'),
	 'err:42501:no provisioning token with this id in the tenants you operate'),
	('approve_join_request', format('SELECT bc_join.approve_join_request(%L)', 'jr_b'), format('SELECT bc_join.approve_join_request(%L)', 'jr_x'),
	 'err:42501:no join request with this id in the tenants you operate'),
	('reject_join_request', format('SELECT bc_join.reject_join_request(%L, %L)', 'jr_b', 'no'), format('SELECT bc_join.reject_join_request(%L, %L)', 'jr_x', 'no'),
	 'err:42501:no join request with this id in the tenants you operate'),
	('revoke_certificate', format('SELECT bc_join.revoke_certificate(%L, %L)', :'serial_b', 'keyCompromise'), format('SELECT bc_join.revoke_certificate(%L, %L)', md5('x'), 'keyCompromise'),
	 'err:42501:no certificate with this id in the tenants you operate'),
	('revoke_certificate', format('SELECT bc_join.revoke_certificate(%L, %L)', :'sserial_b', 'keyCompromise'), format('SELECT bc_join.revoke_certificate(%L, %L)', md5('y'), 'keyCompromise'),
	 'err:42501:no certificate with this id in the tenants you operate'),
	('revoke_certificate', format('SELECT bc_join.revoke_certificate(%L, %L)', md5('sess_b2'), 'keyCompromise'), format('SELECT bc_join.revoke_certificate(%L, %L)', 'zz', 'keyCompromise'),
	 'err:42501:no certificate with this id in the tenants you operate'),
	('revoke_node', format('SELECT bc_join.revoke_node(%L, %L)', :'node_b', 'unspecified'), format('SELECT bc_join.revoke_node(%L, %L)', 'node_x', 'unspecified'),
	 'err:42501:no node with this id in the tenants you operate'),
	('retire_node', format('SELECT bc_join.retire_node(%L)', :'node_b'), format('SELECT bc_join.retire_node(%L)', 'node_x'),
	 'err:42501:no node with this id in the tenants you operate'),
	('delete_node', format('SELECT bc_join.delete_node(%L)', :'node_b'), format('SELECT bc_join.delete_node(%L)', 'node_x'),
	 'err:42501:no node with this id in the tenants you operate'),
	('enqueue_command', format('SELECT bc_join.enqueue_command(%L, %L, %L)', :'node_b', 'diag.ping', '{}'), format('SELECT bc_join.enqueue_command(%L, %L, %L)', 'node_x', 'diag.ping', '{}'),
	 'err:42501:no node with this id in the tenants you operate'),
	('reset_cloud_instance', format('SELECT bc_join.reset_cloud_instance(%L, %L, %L)', 'aws', '222222222222', 'i-0b'), format('SELECT bc_join.reset_cloud_instance(%L, %L, %L)', 'aws', '333333333333', 'i-0b'),
	 'err:42501:no cloud instance with this id in the tenants you operate'),
	('set_discovery_site', format('SELECT bc_join.set_discovery_site(%L, %L)', :'site_b', 'always'), format('SELECT bc_join.set_discovery_site(%L, %L)', 'site_x', 'always'),
	 'err:42501:no site with this id in the tenants you operate'),
	('bump_site_epoch', format('SELECT bc_join.bump_site_epoch(%L)', :'site_b'), format('SELECT bc_join.bump_site_epoch(%L)', 'site_x'),
	 'err:42501:no site with this id in the tenants you operate');
SELECT count(*) FROM (
	SELECT pg_temp.att('op_a', 'call-b', q_b, expected), pg_temp.att('op_a', 'call-guess', q_guess, expected)
	FROM calls) x \gset
-- crafted jsonb: another tenant's ids inside the arguments name nothing
SELECT pg_temp.att('op_a', 'call-b', format('SELECT bc_join.enqueue_command(%L, %L, %L)', :'node_b', 'diag.ping',
		   jsonb_build_object('nodeId', :'node_a', 'tenantId', :'ta')), 'err:42501:no node with this id in the tenants you operate') AS x \gset
SELECT pg_temp.att('op_a', 'call-b', format('SELECT bc_join.create_join_token(%L, %L, expect => %L)', :'tb', :'pool_b',
		   jsonb_build_object('serial', 'x')), 'err:42501:no tenant with this id in the tenants you operate') AS x \gset
SELECT pg_temp.att('op_a', 'call-b', format('SELECT count(*) FROM bc_join.commands WHERE payload @> %L OR id = %L', '{}', :'cmd_b'), 'ok:1') AS x \gset
SELECT is(pg_temp.report('call-b%'), '', format('%s calls by op_a of every administrative function with tenant B''s objects: refused',
	(SELECT count(*) FROM attempts WHERE what LIKE 'call-b%')));
SELECT is(pg_temp.report('call-guess'), '', format('%s calls with guessed ids: the very same refusal (nothing says B''s exist)',
	(SELECT count(*) FROM attempts WHERE what = 'call-guess')));

-- what a tenant operator may not call at all, nor write by hand
SELECT count(*) FROM (
	SELECT pg_temp.att('op_a', 'forbidden', q, e) FROM (VALUES
		(format('SELECT bc_join.create_tenant(%L)', 'x'), 'err:42501:permission denied for function create_tenant'),
		(format('SELECT bc_join(%L)', :'jb2'), 'err:42501:permission denied for function bc_join'),
		('SELECT bc_join.renew(''{}'')', 'err:42501:permission denied for function renew'),
		('SELECT bc_join.issue_session(''{}'')', 'err:42501:permission denied for function issue_session'),
		(format('SELECT bc_join.enroll_tpm_ek(%L, %L, %L)', encode(sha256('ek-x'), 'hex'), :'tb', :'pool_b'), 'err:42501:permission denied for function enroll_tpm_ek'),
		(format('SELECT bc_join.unenroll_tpm_ek(%L)', encode(sha256(convert_to(:'tb', 'UTF8')), 'hex')), 'err:42501:permission denied for function unenroll_tpm_ek'),
		(format('SELECT bc_join.set_tpm_enrollment_mode(%L, %L)', :'tb', 'refuse'), 'err:42501:permission denied for function set_tpm_enrollment_mode'),
		(format('SELECT bc_join.set_tpm_pcr_policy(%L, NULL, NULL)', :'tb'), 'err:42501:permission denied for function set_tpm_pcr_policy'),
		(format('SELECT bc_join.add_x509pop_root(%L, %L, %L)', 'x', :'tb', :'pool_b'), 'err:42501:permission denied for function add_x509pop_root'),
		('SELECT bc_join.prune()', 'err:42501:permission denied for function prune'),
		('SELECT bc_join.prune_events()', 'err:42501:permission denied for function prune_events'),
		('SELECT bc_join.verify_audit_log()', 'err:42501:permission denied for function verify_audit_log'),
		('SELECT count(*) FROM bc_join.attestor_statistics', 'err:42501:permission denied for view attestor_statistics'),
		('SELECT count(*) FROM bc_join.audit_export', 'err:42501:permission denied for view audit_export'),
		('SELECT count(*) FROM bc_join.attestation_uses', 'err:42501:permission denied for table attestation_uses'),
		('SELECT count(*) FROM bc_join.refusal_rate', 'err:42501:permission denied for table refusal_rate'),
		('SELECT count(*) FROM bc_join.cloud_trust', 'err:42501:permission denied for table cloud_trust'),
		('SELECT bc_join.crl()', 'err:42501:permission denied for function crl'),
		('SELECT bc_join.check_tenant(NULL, ''x'')', 'err:42501:permission denied for function check_tenant'),
		(format('SELECT bc_join.register_command_kind(%L)', 'x.y'), 'err:42501:permission denied for function register_command_kind'),
		(format('INSERT INTO bc_join.nodes (id, tenant_id, pool_id, role, trust, attestor) VALUES (%L, %L, %L, %L, %L, %L)', 'node_evil', :'tb', :'pool_b', 'node', 'platform', 'x'),
		 'err:42501:permission denied for table nodes'),
		(format('UPDATE bc_join.nodes SET state = %L WHERE tenant_id = %L', 'retired', :'tb'), 'err:42501:permission denied for table nodes'),
		(format('UPDATE bc_join.join_requests SET state = %L WHERE id = %L', 'approved', 'jr_b'), 'err:42501:permission denied for table join_requests'),
		(format('DELETE FROM bc_join.events WHERE tenant_id = %L', :'tb'), 'err:42501:permission denied for table events'),
		('TRUNCATE bc_join.events', 'err:42501:permission denied for table events'),
		(format('INSERT INTO bc_join.tenant_operator_grants (role, tenant_id) VALUES (%L, %L)', 'op_a', :'tb'), 'err:42501:permission denied for table tenant_operator_grants'),
		(format('INSERT INTO bc_join.cloud_accounts (provider, account, tenant_id, pool_id) VALUES (%L, %L, %L, %L)', 'aws', '444444444444', :'ta', :'pool_a'),
		 'err:42501:permission denied for table cloud_accounts'),
		(format('INSERT INTO bc_join.discovery_machines (site_id, mac) VALUES (%L, %L)', :'site_b', '02:00:00:00:00:0c'),
		 'err:42501:new row violates row-level security policy for table "discovery_machines"'),
		(format('WITH d AS (DELETE FROM bc_join.discovery_machines WHERE site_id = %L RETURNING 1) SELECT count(*) FROM d', :'site_b'), 'ok:0'),
		('ALTER TABLE bc_join.nodes DISABLE ROW LEVEL SECURITY', 'err:42501:must be owner of table nodes'),
		('DROP POLICY tenant_operator ON bc_join.nodes', 'err:42501:must be owner of relation nodes'),
		(format('CREATE POLICY evil ON bc_join.nodes USING (true)'), 'err:42501:must be owner of table nodes'),
		('ALTER VIEW bc_join.stale_nodes SET (security_invoker = false)', 'err:42501:must be owner of view stale_nodes'),
		-- the same refusal (42501) on every major; PostgreSQL 16 reworded it
		('GRANT bc_join_operator TO op_a', CASE WHEN current_setting('server_version_num')::int >= 160000
			THEN 'err:42501:permission denied to grant role "bc_join_operator"'
			ELSE 'err:42501:must have admin option on role "bc_join_operator"' END),
		('SELECT set_config(''search_path'', ''pg_temp, bc_join'', true), count(*) FROM bc_join.nodes', 'ok:' || 'pg_temp, bc_join')
	) v(q, e)) x \gset
SELECT is(pg_temp.report('forbidden'), '', format('%s calls and writes outside a tenant operator''s grants: refused',
	(SELECT count(*) FROM attempts WHERE what = 'forbidden')));

SELECT is(pg_temp.snapshot(:'tb'), :'before_b', 'tenant B''s rows, every table: unchanged by all of op_a''s attempts');

-- within its own tenant a tenant operator does what an operator does
SELECT count(*) FROM (
	SELECT pg_temp.att('op_a', 'own', q, e) FROM (VALUES
		(format('SELECT bc_join.create_site(%L, %L) LIKE %L', :'ta', 'dc-a2', 'site\_%'), 'ok:true'),
		(format('SELECT bc_join.create_pool(%L, %L, %L) LIKE %L', :'ta', :'site_a', 'pa2', 'pool\_%'), 'ok:true'),
		(format('SELECT bc_join.create_join_token(%L, %L) LIKE %L', :'ta', :'pool_a', 'jt\_%'), 'ok:true'),
		(format('SELECT bc_join.revoke_join_token(%L)', :'tid_a'), 'ok:true'),
		(format('SELECT bc_join.revoke_join_token(%L)', :'tid_a'), 'ok:false'),
		(format('SELECT bc_join.revoke_provisioning_token(%L)', :'pt_a'), 'ok:true'),
		(format('SELECT bc_join.approve_join_request(%L)', 'jr_a'), 'ok:'),
		(format('SELECT bc_join.reject_join_request(%L, %L)', 'jr_a2', 'not ours'), 'ok:'),
		(format('SELECT bc_join.enqueue_command(%L, %L, %L) LIKE %L', :'node_a', 'diag.ping', '{}', 'cmd\_%'), 'ok:true'),
		(format('SELECT bc_join.revoke_certificate(%L, %L)', :'sserial_a', 'keyCompromise'), 'ok:true'),
		(format('SELECT bc_join.set_discovery_site(%L, %L)', :'site_a', 'always'), 'ok:'),
		(format('SELECT bc_join.bump_site_epoch(%L)', :'site_a'), 'ok:2'),
		(format('SELECT bc_join.reset_cloud_instance(%L, %L, %L)', 'aws', '111111111111', 'i-0a'), 'ok:false'),
		(format('WITH i AS (INSERT INTO bc_join.discovery_machines (site_id, mac) VALUES (%L, %L) RETURNING 1) SELECT count(*) FROM i', :'site_a', '02:00:00:00:00:1a'), 'ok:1'),
		(format('SELECT bc_join.revoke_node(%L, %L)', :'node_a', 'keyCompromise'), 'ok:1'),
		(format('SELECT bc_join.retire_node(%L)', :'node_a'), 'ok:'),
		('SELECT (bc_join.service_keys() ? ''signed'')::text', 'ok:true')
	) v(q, e)) x \gset
SELECT is(pg_temp.report('own'), '', format('%s administrative acts by op_a on tenant A''s own objects: done',
	(SELECT count(*) FROM attempts WHERE what = 'own')));
SELECT is((SELECT state FROM bc_join.join_requests WHERE id = 'jr_a') || ' ' || (SELECT state FROM bc_join.nodes WHERE id = :'node_a'),
	'approved retired', 'op_a''s approval and retirement took effect');
SELECT is((SELECT count(*)::int FROM bc_join.audit_log WHERE tenant_id = :'ta'
		   AND action IN ('discovery_site.set', 'discovery_site.bump_epoch', 'node.retire', 'join_request.approve', 'join_request.reject')),
	6, 'its acts are audited in tenant A (discovery''s too)');
SELECT is(pg_temp.try('op_a', format('SELECT count(*) FROM bc_join.audit_log WHERE action = %L', 'node.retire')), 'ok:1',
	'and it reads its own audit rows');
SELECT is(pg_temp.snapshot(:'tb'), :'before_b', 'tenant B''s rows: still unchanged');

------------------------------------------------------------------ the platform operator
SELECT is(pg_temp.try('plat', format('SELECT bc_join.approve_join_request(%L)', 'jr_b')), 'ok:', 'the platform operator approves in tenant B');
SELECT is(pg_temp.try('plat', format('SELECT bc_join.enqueue_command(%L, %L, %L) LIKE %L', :'node_b', 'diag.ping', '{}', 'cmd\_%')), 'ok:true',
	'and queues commands there');
SELECT is(pg_temp.try('plat', format('SELECT bc_join.revoke_join_token(%L)', 'jt_x')), 'ok:false',
	'its unknown ids are as before (false, not an error)');

------------------------------------------------------------------ the gateway
SELECT is(pg_temp.try('gw', format('SELECT bc_join(%L)->>%L', :'jb2', 'status')), 'ok:issued',
	'the gateway''s join runs as before, row-level security or not');
SELECT is((SELECT count(*)::int FROM bc_join.nodes WHERE tenant_id = :'tb'), 2, 'and made tenant B''s second node');
SELECT is(pg_temp.try('op_b', 'SELECT count(*) FROM bc_join.nodes'), 'ok:2', 'which op_b sees at once');
SELECT is(pg_temp.try('op_a', format('SELECT count(*) FROM bc_join.nodes WHERE tenant_id = %L', :'tb')), 'ok:0', 'and op_a does not');
SELECT is(pg_temp.try('gw', 'SELECT count(*) FROM bc_join.tenant_operators'),
	'err:42501:permission denied for view tenant_operators', 'the gateway reads no table, the new view neither');

------------------------------------------------------------------ taking a tenant away
SELECT is(pg_temp.try('plat', format('SELECT bc_join.revoke_tenant_operator(%L, %L)', 'op_a', :'ta')), 'ok:true',
	'the platform operator takes tenant A from op_a');
SELECT ok(NOT pg_has_role('op_a', 'bc_join_tenant_operator', 'MEMBER'), 'with its last tenant op_a leaves bc_join_tenant_operator');
SELECT is(pg_temp.try('op_a', 'SELECT count(*) FROM bc_join.nodes'), 'err:42501:permission denied for schema bc_join',
	'and reads nothing');
SELECT ok(EXISTS (SELECT 1 FROM bc_join.events WHERE type = 'tenant_operator.revoked' AND tenant_id = :'ta')
	AND EXISTS (SELECT 1 FROM bc_join.audit_log WHERE action = 'tenant_operator.revoke' AND tenant_id = :'ta'),
	'evented and audited');
-- a member of bc_join_tenant_operator without a tenant sees no row
GRANT bc_join_tenant_operator TO nobody;
SELECT is(pg_temp.try('nobody', 'SELECT count(*) FROM bc_join.nodes') || ' ' || pg_temp.try('nobody', format('SELECT bc_join.retire_node(%L)', :'node_b')),
	'ok:0 err:42501:no node with this id in the tenants you operate', 'the group role alone, no tenant: no row, no act');

SELECT diag(format('tenant operator attempts: %s in all', (SELECT count(*) FROM attempts)));

SELECT * FROM finish();
ROLLBACK;
