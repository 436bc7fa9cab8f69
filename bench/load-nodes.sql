-- Bulk-load :n joined nodes, numbered from :start, as joins leave them: the
-- node (a random-looking id like a join's), its certificate (a real join's
-- size, random serial and SPKI hash), its node.joined event and its audit
-- row; then VACUUM ANALYZE.  Marked attestor 'bench-bulk' so that bench/run
-- can tell them from the nodes its runs join.  psql -v start=.. -v n=..
\set ON_ERROR_STOP on
INSERT INTO bc_join.nodes (id, tenant_id, site_id, pool_id, role, trust, attestor, node_key, claims)
  SELECT 'node_' || md5('bulk-' || g), s.tenant_id, s.site_id, s.pool_id, 'node', s.trust,
         'bench-bulk', 'unattested', s.claims
  FROM bench.sample s, generate_series(:start, :start + :n - 1) g;
INSERT INTO bc_join.node_certs (serial, node_id, identity_generation, not_before, not_after,
                                spki_sha256, certificate)
  SELECT md5('serial-' || g), 'node_' || md5('bulk-' || g), 1, now() - interval '1 minute',
         now() + interval '1 day', sha256(('spki-' || g)::bytea), s.certificate
  FROM bench.sample s, generate_series(:start, :start + :n - 1) g;
INSERT INTO bc_join.events (tenant_id, type, payload)
  SELECT s.tenant_id, 'node.joined', s.payload
  FROM bench.sample s, generate_series(:start, :start + :n - 1) g;
-- The audit rows in transactions of at most 50,000: one INSERT of many more
-- rows through the chain's row trigger grows worse than linearly (80,000 rows
-- in 1.9 s, 160,000 in over 300 s on the bench machine; a join writes one).
SELECT format('INSERT INTO bc_join.audit_log (action, tenant_id, node_id, detail) '
              'SELECT ''node.join'', s.tenant_id, ''node_'' || md5(''bulk-'' || g), s.payload '
              'FROM bench.sample s, generate_series(%s, %s) g', b, least(b + 49999, :start + :n - 1))
  FROM generate_series(:start, :start + :n - 1, 50000) b \gexec
VACUUM ANALYZE bc_join.nodes, bc_join.node_certs, bc_join.events, bc_join.audit_log;
