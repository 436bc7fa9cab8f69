-- commands.sql: commands for a node, limited by its certificate's
-- allowed_kinds: refused at enqueue (22023) and checked again at dispatch
-- against the certificate whose key proves the fetch; fetch and completion
-- proofs (JWS by the node key) used once; the signed dispatch.
\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only on
\getenv bcd BCJ_BCD
\getenv keys BCJ_SERVICE_KEYS
\getenv scratch BCJ_SCRATCH
\getenv josetool BCJ_JOSE_TOOL
\set d :scratch/pgtap_commands
\set mk `rm -rf :d && mkdir -p :d`

BEGIN;
SELECT plan(15);

SELECT bc_join.create_tenant('acme') AS tenant \gset
SELECT bc_join.create_site(:'tenant', 'dc-1') AS site \gset
SELECT bc_join.create_pool(:'tenant', :'site', 'workers') AS pool \gset
CREATE FUNCTION pg_temp.payload(r jsonb) RETURNS jsonb LANGUAGE sql AS $$
	SELECT convert_from(bc_join.b64url_decode(split_part(r->>'response', '.', 2)), 'UTF8')::jsonb $$;

SELECT bc_join.create_join_token(:'tenant', :'pool') AS tok \gset
\set jreq `:bcd join-request --service-keys :keys --token :'tok' --out-dir :d/n`
SELECT bc_join(:'jreq') AS jr \gset
SELECT pg_temp.payload(:'jr')->>'serial' AS s1, pg_temp.payload(:'jr')->>'nodeId' AS node \gset

------------------------------------------------------------------ matching
SELECT ok(bc_join.kind_allowed(NULL, 'node.reboot'), 'NULL allowed_kinds allows every kind');
SELECT ok(bc_join.kind_allowed(ARRAY['diag.*'], 'diag.run') AND NOT bc_join.kind_allowed(ARRAY['diag.*'], 'diag'),
	'diag.* allows diag.run, not diag');
SELECT ok(NOT bc_join.kind_allowed(ARRAY['wipe'], 'disk.wipe') AND NOT bc_join.kind_allowed(ARRAY['disk'], 'disk.wipe')
	AND NOT bc_join.kind_allowed(ARRAY['disk.wip*'], 'disk.wipe'), 'matching is exact: wipe, disk and disk.wip* never allow disk.wipe');

------------------------------------------------------------------ enqueue
SELECT matches(bc_join.enqueue_command(:'node', 'node.reboot', '{}'), '^cmd_[0-9a-f]{32}$',
	'an unrestricted certificate takes any registered kind');
UPDATE bc_join.node_certs SET allowed_kinds =
	ARRAY['inventory.refresh', 'logs.collect', 'diag.*', 'disk.wipe', 'deploy.*', 'boot.kexec'] WHERE serial = :'s1';
SELECT bc_join.enqueue_command(:'node', 'disk.wipe', '{"disks": ["/dev/sda"]}') AS wipe \gset
SELECT is(state, 'queued', 'disk.wipe is allowed by the six ramdisk kinds and queued') FROM bc_join.commands WHERE id = :'wipe';
SELECT throws_ok(format('SELECT bc_join.enqueue_command(%L, %L, %L)', :'node', 'wipe', '{}'),
	'22023', 'wipe is no registered command kind', 'wipe is refused at enqueue');
SELECT throws_ok(format('SELECT bc_join.enqueue_command(%L, %L, %L)', :'node', 'node.reboot', '{}'),
	'22023', 'the node''s certificate does not allow command kind node.reboot', 'a kind the certificate does not allow is refused');
SELECT lives_ok(format('SELECT bc_join.enqueue_command(%L, %L, %L)', :'node', 'diag.run', '{}'),
	'a kind under a prefix.* glob is allowed');
UPDATE bc_join.node_certs SET allowed_kinds = ARRAY['wipe'] WHERE serial = :'s1';
SELECT throws_ok(format('SELECT bc_join.enqueue_command(%L, %L, %L)', :'node', 'disk.wipe', '{}'),
	'22023', 'the node''s certificate does not allow command kind disk.wipe', 'an allowed_kinds entry wipe never allows disk.wipe');
UPDATE bc_join.node_certs SET allowed_kinds =
	ARRAY['inventory.refresh', 'logs.collect', 'diag.*', 'disk.wipe', 'deploy.*', 'boot.kexec'] WHERE serial = :'s1';
SELECT throws_ok(format('SELECT bc_join.enqueue_command(%L, %L, %L)', :'node', 'disk.wipe', '[]'),
	'22023', 'the payload must be a JSON object of at most 16384 bytes', 'the payload is a JSON object');
SELECT throws_ok(format('SELECT bc_join.enqueue_command(%L, %L, %L)', 'node_nope', 'disk.wipe', '{}'),
	'22023', 'the node does not exist', 'an unknown node is refused');
UPDATE bc_join.node_certs SET revoked_at = bc_join.compute_now(), revocation_reason = 'test' WHERE serial = :'s1';
SELECT throws_ok(format('SELECT bc_join.enqueue_command(%L, %L, %L)', :'node', 'disk.wipe', '{}'),
	'22023', 'the node holds no live certificate', 'a node without a live certificate takes no command');
UPDATE bc_join.node_certs SET revoked_at = NULL, revocation_reason = NULL WHERE serial = :'s1';
SELECT is(count(*), 3::bigint, 'three commands queued') FROM bc_join.commands WHERE node_id = :'node';
SELECT is((SELECT expires_at - created_at FROM bc_join.commands WHERE id = :'wipe'), interval '1 hour',
	'a command expires after an hour');
SELECT is((SELECT tenant_id || ' ' || kind || ' ' || state FROM bc_join.command_status WHERE id = :'wipe'),
	:'tenant' || ' disk.wipe queued', 'operators see it in command_status');

SELECT * FROM finish();
ROLLBACK;
