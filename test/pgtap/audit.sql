-- audit.sql: the issuance log is a hash chain written with each row;
-- verify_audit_log() and tools/bc-audit-verify (offline, from a \copy
-- export) catch a row altered, removed or inserted; a signed anchor of the
-- head catches a history rewritten whole; the log is append-only.
\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only on
\getenv bcd BCJ_BCD
\getenv keys BCJ_SERVICE_KEYS
\getenv scratch BCJ_SCRATCH
\set d :scratch/pgtap_audit
\set mk `rm -rf :d && mkdir -p :d`

BEGIN;
SELECT plan(30);

SELECT bc_join.create_tenant('acme') AS tenant \gset
SELECT bc_join.create_site(:'tenant', 'dc-1') AS site \gset
SELECT bc_join.create_pool(:'tenant', :'site', 'workers') AS pool \gset
SELECT bc_join.create_join_token(:'tenant', :'pool', uses => 3) AS tok \gset
\set j1 `:bcd join-request --service-keys :keys --token :'tok' --out-dir :d/n1`
\set j2 `:bcd join-request --service-keys :keys --token :'tok' --out-dir :d/n2`
SELECT bc_join(:'j1') IS NOT NULL AS a \gset
SELECT bc_join(:'j2') IS NOT NULL AS b \gset

SELECT ok((SELECT count(*) FROM bc_join.audit_log) >= 6, 'the joins and the administration wrote audit rows');
SELECT ok(bool_and(length(hash) = 32 AND length(prev_hash) = 32), 'every row carries its hash and the one before')
	FROM bc_join.audit_log;
SELECT ok(bc_join.verify_audit_log(), 'verify_audit_log(): the chain holds');
CREATE FUNCTION pg_temp.plan_text(q text) RETURNS SETOF text LANGUAGE plpgsql AS $$
BEGIN RETURN QUERY EXECUTE 'EXPLAIN (VERBOSE, COSTS OFF) ' || q; END $$;

-- audit_content is C (a SQL function with its own search_path was parsed and
-- planned again in the trigger of every row); the bytes are those of the SQL
-- definition it replaced, kept here as the reference.
CREATE FUNCTION pg_temp.audit_content_ref(id bigint, at timestamptz, actor text, action text,
										  tenant_id text, node_id text, detail jsonb)
	RETURNS bytea LANGUAGE sql IMMUTABLE AS $$
	SELECT convert_to(string_agg(octet_length(f) || ':' || f, '|' ORDER BY n), 'UTF8')
	FROM unnest(ARRAY[id::text, ((extract(epoch FROM at) * 1000000)::bigint)::text, actor, action,
					  coalesce(tenant_id, '-'), coalesce(node_id, '-'), detail::text])
		 WITH ORDINALITY AS x(f, n) $$;
SELECT ok(bool_and(bc_join.audit_content(a.id, a.at, a.actor, a.action, a.tenant_id, a.node_id, a.detail)
				   = pg_temp.audit_content_ref(a.id, a.at, a.actor, a.action, a.tenant_id, a.node_id, a.detail)),
		  'audit_content: the reference bytes for every row the joins wrote')
	FROM bc_join.audit_log a;
SELECT is(bc_join.audit_content(v.id, v.at, v.actor, v.action, v.t, v.n, v.d),
		  pg_temp.audit_content_ref(v.id, v.at, v.actor, v.action, v.t, v.n, v.d), 'audit_content: ' || v.what)
FROM (VALUES
	('tenant and node NULL are -', 7::bigint, '2026-12-01 10:00:00.123456+00'::timestamptz, 'op', 'x', NULL, NULL, '{}'::jsonb),
	('non-ASCII text counts octets', 8, '2026-12-01 10:00:00+00', 'opé', 'ünïcode|:', 'tén', 'nœud', '{"k": "vä|l:ue", "n": [1, 2.50]}'),
	('before 1970 and a negative id', -3, '1969-12-31 23:59:59.999999+00', 'a', 'b', 'c', 'd', '[]'),
	('a NULL actor and detail are left out', 9, '2000-01-01 00:00:00+00', NULL, 'y', 't', 'n', NULL),
	('everything NULL is NULL', NULL, NULL, NULL, NULL, NULL, NULL, NULL)
) AS v(what, id, at, actor, action, t, n, d);
SELECT throws_ok($$SELECT bc_join.audit_content(1, 'infinity', 'a', 'b', 'c', 'd', '{}')$$,
				 '0A000', NULL, 'audit_content: an infinite time is refused, as the reference refuses it');
-- are_agent_roles is C (0.9.0): the CHECK constraints that call it are
-- prepared again for every statement writing their table, and the SQL body it
-- had was read, analysed and planned each time.  Its answers are those of the
-- SQL definition it replaced, kept here as the reference, on every shape of
-- input: each role, combinations, case, padding, NULL elements, empty and
-- multi-dimensional arrays, NULL.
CREATE FUNCTION pg_temp.are_agent_roles_ref(roles text[]) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
	SELECT roles IS NOT NULL AND pg_catalog.cardinality(roles) >= 1
		   AND roles OPERATOR(pg_catalog.<@) ARRAY['node', 'site', 'ramdisk']::text[] $$;
SELECT is((SELECT l.lanname::text FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang WHERE p.oid = 'bc_join.are_agent_roles(text[])'::regprocedure),
		  'c', 'are_agent_roles is a C function (no SQL body planned again at each statement)');
SELECT is((SELECT array_agg(r::text ORDER BY r::text) FROM (VALUES
			(ARRAY['node']), (ARRAY['site']), (ARRAY['ramdisk']), (ARRAY['site', 'ramdisk']),
			(ARRAY['node', 'node']), (ARRAY['evil']), (ARRAY['node', 'evil']), (ARRAY['Node']),
			(ARRAY['node ']), (ARRAY['nod']), (ARRAY['nodes']), (ARRAY['']), ('{}'::text[]),
			(NULL::text[]), (ARRAY[NULL::text]), (ARRAY['node', NULL]), (ARRAY[['node', 'site'], ['ramdisk', 'node']]),
			(ARRAY[['node', 'evil'], ['site', 'site']]), ('[0:1]={node,site}'::text[]), (ARRAY[E'node\n']))
			AS v(r) WHERE bc_join.are_agent_roles(r) IS DISTINCT FROM pg_temp.are_agent_roles_ref(r)), NULL,
		  'are_agent_roles answers as its SQL reference on 20 shapes of input');
SELECT is(array_agg(bc_join.are_agent_roles(r) ORDER BY n), ARRAY[true, true, false, false, false, false],
		  'are_agent_roles: node, site+ramdisk; not evil, node+evil, empty, NULL')
	FROM (VALUES (1, ARRAY['node']), (2, ARRAY['site', 'ramdisk']), (3, ARRAY['evil']),
				 (4, ARRAY['node', 'evil']), (5, '{}'::text[]), (6, NULL::text[])) AS v(n, r);

SELECT is((SELECT count(*) FROM bc_join.audit_log_problems(10)), 0::bigint, 'no problem listed');
SELECT ok(a.prev_hash = (SELECT b.hash FROM bc_join.audit_log b WHERE b.id < a.id ORDER BY b.id DESC LIMIT 1),
		  'the last row links to the one before it')
	FROM bc_join.audit_log a ORDER BY a.id DESC LIMIT 1;
SELECT throws_ok($$UPDATE bc_join.audit_log SET detail = '{}'$$, '42501', 'the issuance log is append-only',
				 'an update is refused');
SELECT throws_ok($$DELETE FROM bc_join.audit_log$$, '42501', NULL, 'so is a delete');

-- offline: the export verifies
\o :d/audit.csv
COPY (SELECT * FROM bc_join.audit_export) TO STDOUT CSV HEADER;
\o
\set v `tools/bc-audit-verify :d/audit.csv 2>&1; echo "exit=$?"`
SELECT ok(:'v' ~ '^ok: \d+ rows chain' AND :'v' ~ 'exit=0$', 'tools/bc-audit-verify accepts the export offline');
SELECT bc_join.audit_anchor() AS anchor \gset
\set w `printf %s :'anchor' > :d/anchor.jws; tools/bc-audit-verify :d/audit.csv --anchor :d/anchor.jws --service-keys :keys 2>&1; echo "exit=$?"`
SELECT ok(:'w' ~ 'exit=0$', 'and the signed anchor of its head');
SELECT id AS mid FROM bc_join.audit_log ORDER BY id OFFSET 2 LIMIT 1 \gset

-- someone with the table rewrites it (a superuser can switch the triggers off)
ALTER TABLE bc_join.audit_log DISABLE TRIGGER audit_append_only;
SAVEPOINT t;
UPDATE bc_join.audit_log SET detail = detail || '{"tampered": true}' WHERE id = :mid;
SELECT ok(NOT bc_join.verify_audit_log(), 'a row altered: verify_audit_log() is false');
SELECT is(id || ' ' || split_part(problem, ':', 1), :mid || ' altered', 'and names the row, altered')
	FROM bc_join.audit_log_problems();
\o :d/altered.csv
COPY (SELECT * FROM bc_join.audit_export) TO STDOUT CSV HEADER;
\o
\set v `tools/bc-audit-verify :d/altered.csv 2>&1; echo "exit=$?"`
SELECT ok(:'v' ~ ('row ' || :mid || ': altered') AND :'v' ~ 'exit=1$', 'tools/bc-audit-verify names it too');
ROLLBACK TO SAVEPOINT t;
DELETE FROM bc_join.audit_log WHERE id = :mid;
SELECT ok((SELECT id FROM bc_join.audit_log_problems()) > :mid, 'a row removed: the next row no longer links');
\o :d/removed.csv
COPY (SELECT * FROM bc_join.audit_export) TO STDOUT CSV HEADER;
\o
\set v `tools/bc-audit-verify :d/removed.csv 2>&1; echo "exit=$?"`
SELECT ok(:'v' ~ 'does not link' AND :'v' ~ 'exit=1$', 'offline too');
ROLLBACK TO SAVEPOINT t;
ALTER TABLE bc_join.audit_log DISABLE TRIGGER audit_chain;
INSERT INTO bc_join.audit_log (id, action, detail, prev_hash, hash)
	SELECT :mid::bigint * 1000 + 1, 'node.join', '{"forged": true}', a.hash, a.hash FROM bc_join.audit_log a WHERE a.id = :mid;
SELECT ok(NOT bc_join.verify_audit_log(), 'a row inserted: verify_audit_log() is false');
ROLLBACK TO SAVEPOINT t;
-- the whole history rewritten after row mid, every later hash recomputed
UPDATE bc_join.audit_log SET detail = detail || '{"rewritten": true}' WHERE id = :mid;
DO $$
DECLARE r record; prev bytea;
BEGIN
	FOR r IN SELECT * FROM bc_join.audit_log ORDER BY id LOOP
		IF prev IS NOT NULL THEN
			UPDATE bc_join.audit_log SET prev_hash = prev WHERE id = r.id;
		END IF;
		UPDATE bc_join.audit_log a SET hash = sha256(a.prev_hash || bc_join.audit_content(a.id, a.at, a.actor, a.action, a.tenant_id, a.node_id, a.detail))
			WHERE a.id = r.id RETURNING a.hash INTO prev;
	END LOOP;
END $$;
SELECT ok(bc_join.verify_audit_log(), 'a history rewritten whole chains again (as it would)');
\o :d/rewritten.csv
COPY (SELECT * FROM bc_join.audit_export) TO STDOUT CSV HEADER;
\o
\set v `tools/bc-audit-verify :d/rewritten.csv 2>&1; echo "exit=$?"`
SELECT ok(:'v' ~ 'exit=0$', 'the chain alone cannot tell');
\set v `tools/bc-audit-verify :d/rewritten.csv --anchor :d/anchor.jws --service-keys :keys 2>&1; echo "exit=$?"`
SELECT ok(:'v' ~ 'history was rewritten' AND :'v' ~ 'exit=1$', 'but the anchor published before shows it');
ROLLBACK TO SAVEPOINT t;
ALTER TABLE bc_join.audit_log ENABLE TRIGGER audit_chain;
ALTER TABLE bc_join.audit_log ENABLE TRIGGER audit_append_only;
\set bad `printf 'x.y.z' > :d/bad.jws; tools/bc-audit-verify :d/audit.csv --anchor :d/bad.jws --service-keys :keys 2>&1; echo "exit=$?"`
SELECT ok(:'bad' ~ 'exit=1$', 'a forged anchor is refused');
SELECT ok(bc_join.verify_audit_log(), 'the untouched log still holds');

SELECT * FROM finish();
ROLLBACK;
