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
SELECT plan(20);

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
