-- regress_admin: the administration functions check their arguments
-- (INVALID_INPUT, SQLSTATE 22023) and audit what they create.
\set VERBOSITY default
\set SHOW_CONTEXT never
SELECT bc_join.create_tenant('acme') AS tenant \gset
SELECT bc_join.create_tenant('other') AS other \gset
SELECT bc_join.create_site(:'tenant', 'dc-1') AS site \gset
SELECT bc_join.create_site(:'other', 'dc-2') AS othersite \gset
SELECT bc_join.create_pool(:'tenant', :'site', 'gpu') AS pool \gset
SELECT :'tenant' ~ '^ten_[0-9a-f]{32}$' AS tenant_id,
	   :'site' ~ '^site_[0-9a-f]{32}$' AS site_id,
	   :'pool' ~ '^pool_[0-9a-f]{32}$' AS pool_id;
-- one error in full: the SQLSTATE's code is in the detail
SELECT bc_join.create_tenant('');
\set VERBOSITY terse
-- tenants, sites, pools
SELECT bc_join.create_tenant('');
SELECT bc_join.create_tenant(NULL);
SELECT bc_join.create_site('ten_nope', 'x');
SELECT bc_join.create_site(:'tenant', repeat('s', 201));
SELECT bc_join.create_pool(:'tenant', :'othersite', 'x');
SELECT bc_join.create_pool(:'tenant', 'site_nope', 'x');
-- tokens
SELECT bc_join.create_join_token('ten_nope', :'pool');
SELECT bc_join.create_join_token(:'other', :'pool');
SELECT bc_join.create_join_token(:'tenant', 'pool_nope');
SELECT bc_join.create_join_token(:'tenant', :'pool', uses => 0);
SELECT bc_join.create_join_token(:'tenant', :'pool', uses => 1000001);
SELECT bc_join.create_join_token(:'tenant', :'pool', ttl => '-1 hour');
SELECT bc_join.create_join_token(:'tenant', :'pool', ttl => '400 days');
SELECT bc_join.create_join_token(:'tenant', :'pool', role => 'admin');
SELECT bc_join.create_join_token(:'tenant', :'pool', role => 'site');
SELECT bc_join.create_join_token(:'tenant', NULL);
SELECT bc_join.create_join_token(:'tenant', NULL, site_id => :'othersite');
SELECT bc_join.create_join_token(:'tenant', :'pool', site_id => :'othersite');
SELECT bc_join.create_join_token(:'tenant', :'pool', expect => '["serial"]');
SELECT bc_join.create_join_token(:'tenant', :'pool', expect => '{"colour":"red"}');
-- good ones
SELECT bc_join.create_join_token(:'tenant', :'pool', uses => 3, expect => '{"serial":"SN1"}') ~ '^jt_[0-9a-f]{32}\.[A-Za-z0-9_-]{43}$' AS node_token;
SELECT bc_join.create_join_token(:'tenant', NULL, role => 'site', site_id => :'site') IS NOT NULL AS site_token;
SELECT t.uses_total, t.uses_left, t.role, t.expect, t.site_id = :'site' AS in_site,
	   t.expires_at - t.created_at AS ttl
FROM bc_join.join_tokens t WHERE t.tenant_id = :'tenant' ORDER BY t.role;
-- two tokens never share a secret or an id
SELECT count(DISTINCT bc_join.create_join_token(:'tenant', :'pool')) AS distinct_tokens FROM generate_series(1, 20);
-- revocation
SELECT bc_join.revoke_join_token(t.id) AS revoked, bc_join.revoke_join_token(t.id) AS again
FROM bc_join.join_tokens t WHERE t.tenant_id = :'tenant' AND t.role = 'site';
-- every creation is audited, with who did it
SELECT action, actor = session_user AS by_me, count(*) FROM bc_join.audit_log
GROUP BY 1, 2 ORDER BY 1;
-- the clock: transaction start plus the test offset
BEGIN;
SELECT bc_join.compute_now() = now() AS clock_is_now;
SET LOCAL bc_join.clock_offset = '2h';
SELECT bc_join.compute_now() - now() AS offset;
COMMIT;
SELECT bc_join.compute_now() = now() AS clock_back;
-- the root tenant exists for unauthenticated refusals
SELECT id, name FROM bc_join.tenants WHERE id = 'root';
