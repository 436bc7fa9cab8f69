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
\set jwk `jq -c .signingKey :keys > :d/signing.jwk`

BEGIN;
SELECT plan(42);

SELECT bc_join.create_tenant('acme') AS tenant \gset
SELECT bc_join.create_site(:'tenant', 'dc-1') AS site \gset
SELECT bc_join.create_pool(:'tenant', :'site', 'workers') AS pool \gset
\ir lib/fixture.sql
CREATE FUNCTION pg_temp.now_s() RETURNS bigint LANGUAGE sql AS $$
	SELECT extract(epoch FROM bc_join.compute_now())::bigint $$;
-- The payload of a fetch proof for serial (purpose commands).
CREATE FUNCTION pg_temp.fetch_pp(serial text, purpose text DEFAULT 'commands') RETURNS text LANGUAGE sql AS $$
	SELECT jsonb_build_object('purpose', purpose, 'serial', serial, 'iat', pg_temp.now_s())::text $$;
-- The payload of a completion proof and its result.
CREATE FUNCTION pg_temp.complete_pp(serial text, id text, status text, result text) RETURNS text LANGUAGE sql AS $$
	SELECT jsonb_build_object('purpose', 'complete', 'serial', serial, 'iat', pg_temp.now_s(), 'commandId', id,
		'status', status, 'resultSha256', bc_join.b64url_encode(sha256(convert_to(result, 'UTF8'))))::text $$;
CREATE FUNCTION pg_temp.complete(proof text, result text) RETURNS jsonb LANGUAGE sql AS $$
	SELECT bc_join.complete_command(jsonb_build_object('proof', proof,
		'result', bc_join.b64url_encode(convert_to(result, 'UTF8')))) $$;

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
UPDATE bc_join.node_certs SET revoked_at = bc_join.compute_now(), revocation_reason = 'keyCompromise' WHERE serial = :'s1';
SELECT throws_ok(format('SELECT bc_join.enqueue_command(%L, %L, %L)', :'node', 'disk.wipe', '{}'),
	'22023', 'the node holds no live certificate', 'a node without a live certificate takes no command');
UPDATE bc_join.node_certs SET revoked_at = NULL, revocation_reason = NULL WHERE serial = :'s1';
SELECT is(count(*), 3::bigint, 'three commands queued') FROM bc_join.commands WHERE node_id = :'node';
SELECT is((SELECT expires_at - created_at FROM bc_join.commands WHERE id = :'wipe'), interval '1 hour',
	'a command expires after an hour');
SELECT is((SELECT tenant_id || ' ' || kind || ' ' || state FROM bc_join.command_status WHERE id = :'wipe'),
	:'tenant' || ' disk.wipe queued', 'operators see it in command_status');

------------------------------------------------- a renewal narrows the kinds
\set r2 `:bcd join-request --service-keys :keys --out-dir :d/k2`
SELECT jsonb_build_object('purpose', 'renew', 'serial', :'s1',
	'csrSha256', bc_join.b64url_encode(sha256(bc_join.b64url_decode(:'r2'::jsonb->>'csr'))),
	'iat', pg_temp.now_s())::text AS rpp \gset
\set rproof `printf %s :'rpp' | :josetool sign :d/n/node.key`
SELECT pg_temp.payload(bc_join.renew(jsonb_build_object('csr', :'r2'::jsonb->>'csr', 'proof', :'rproof')))->>'serial' AS s2 \gset
SELECT is(allowed_kinds, ARRAY['inventory.refresh', 'logs.collect', 'diag.*', 'disk.wipe', 'deploy.*', 'boot.kexec'],
	'the renewal carried the kinds forward') FROM bc_join.node_certs WHERE serial = :'s2';
-- The new certificate allows fewer kinds (as a narrower renewal would).
UPDATE bc_join.node_certs SET allowed_kinds = ARRAY['inventory.refresh', 'disk.wipe'] WHERE serial = :'s2';

------------------------------------------------------------------ fetch
SELECT pg_temp.fetch_pp(:'s2') AS fpp \gset
\set fproof `printf %s :'fpp' | :josetool sign :d/k2/node.key`
SELECT bc_join.fetch_commands(jsonb_build_object('proof', :'fproof')) AS f1 \gset
SELECT is(:'f1'::jsonb->>'status', 'issued', 'a fetch proven by the current key is answered');
SELECT is(pg_temp.payload(:'f1') - 'iat' - 'commands',
	jsonb_build_object('purpose', 'commands', 'nodeId', :'node', 'serial', :'s2'), 'for this node and certificate');
SELECT is((SELECT jsonb_agg(c->>'kind') FROM jsonb_array_elements(pg_temp.payload(:'f1')->'commands') c),
	'["disk.wipe"]'::jsonb, 'only disk.wipe is handed out: the new certificate allows neither node.reboot nor diag.run');
SELECT is(pg_temp.payload(:'f1')->'commands'->0->'payload', '{"disks": ["/dev/sda"]}'::jsonb, 'with its payload');
SELECT is((SELECT state || ' ' || attempts || ' ' || dispatched_serial FROM bc_join.commands WHERE id = :'wipe'),
	'dispatched 1 ' || :'s2', 'it is dispatched to that certificate');
SELECT is((SELECT string_agg(state || ':' || (result->>'reason') || ':' || (result->>'serial'), ',' ORDER BY kind)
	FROM bc_join.commands WHERE node_id = :'node' AND kind <> 'disk.wipe'),
	'failed:kind-not-allowed:' || :'s2' || ',failed:kind-not-allowed:' || :'s2',
	'the commands queued before the kinds narrowed fail, with the reason');
SELECT is((SELECT jsonb_array_length(payload->'commandIds') FROM bc_join.events WHERE type = 'command.refused'
	ORDER BY id DESC LIMIT 1), 2, 'command.refused names them');
\set sig `printf %s :'f1' | jq -r .response | :josetool verify :d/signing.jwk | jq -c .nodeId`
SELECT is(:'sig', '"' || :'node' || '"', 'the answer is a JWS by the service signing key');

SELECT is(bc_join.fetch_commands(jsonb_build_object('proof', :'fproof'))->>'status', 'refused', 'a replayed fetch proof is refused');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' commands:reused', 'recorded commands:reused');
SELECT pg_temp.fetch_pp(:'s1') AS opp \gset
\set oproof `printf %s :'opp' | :josetool sign :d/n/node.key`
SELECT is(bc_join.fetch_commands(jsonb_build_object('proof', :'oproof'))->>'status', 'refused', 'the renewed certificate fetches nothing');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' commands:revoked', 'recorded commands:revoked');
SELECT pg_temp.fetch_pp(:'s2', 'session') AS spp \gset
\set sproof `printf %s :'spp' | :josetool sign :d/k2/node.key`
SELECT is(bc_join.fetch_commands(jsonb_build_object('proof', :'sproof'))->>'status', 'refused', 'a proof for another purpose is refused');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' commands:malformed-proof', 'recorded commands:malformed-proof');
SELECT throws_ok($$SELECT bc_join.fetch_commands('{"proof": "x", "csr": "y"}')$$, '22023',
	'invalid join request: unknown field "csr"', 'a fetch carries only its proof');
SELECT pg_temp.fetch_pp(:'s2') AS fpp2 \gset
\set fproof2 `printf %s :'fpp2' | :josetool sign :d/k2/node.key`
SELECT is(pg_temp.payload(bc_join.fetch_commands(jsonb_build_object('proof', :'fproof2')))->'commands', '[]'::jsonb,
	'a dispatched command is not handed out again within its lease');

------------------------------------------------------------------ complete
\set res '{"exitCode":0,"output":"wiped /dev/sda\\n","truncated":false}'
SELECT pg_temp.complete_pp(:'s2', :'wipe', 'done', :'res') AS cpp \gset
\set cproof `printf %s :'cpp' | :josetool sign :d/k2/node.key`
SELECT pg_temp.complete(:'cproof', :'res') AS c1 \gset
SELECT is(pg_temp.payload(:'c1'), jsonb_build_object('purpose', 'complete', 'nodeId', :'node', 'commandId', :'wipe',
	'state', 'done'), 'a completion is answered, signed');
SELECT is((SELECT state || ' ' || exit_code || ' ' || (result->>'output') FROM bc_join.command_status WHERE id = :'wipe'),
	E'done 0 wiped /dev/sda\n', 'the operator sees the outcome in command_status');
SELECT is(pg_temp.complete(:'cproof', :'res')->>'status', 'refused', 'a replayed completion proof is refused');
SELECT pg_temp.complete_pp(:'s2', :'wipe', 'done', :'res') AS cpp2 \gset
\set cproof2 `printf %s :'cpp2' | :josetool sign :d/k2/node.key`
SELECT is(pg_temp.complete(:'cproof2', :'res')->>'status', 'issued', 'the same completion, newly proven, is answered again');
SELECT pg_temp.complete_pp(:'s2', :'wipe', 'failed', :'res') AS cpp3 \gset
\set cproof3 `printf %s :'cpp3' | :josetool sign :d/k2/node.key`
SELECT is(pg_temp.complete(:'cproof3', :'res')->>'status', 'refused', 'a completed command takes no other outcome');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' complete:not-dispatched', 'recorded complete:not-dispatched');
SELECT pg_temp.complete_pp(:'s2', :'wipe', 'done', '{"exitCode":1}') AS cpp4 \gset
\set cproof4 `printf %s :'cpp4' | :josetool sign :d/k2/node.key`
SELECT is(pg_temp.complete(:'cproof4', :'res')->>'status', 'refused', 'a result other than the one proven is refused');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' complete:result-binding', 'recorded complete:result-binding');

------------------------------------------------------------------ expiry
SELECT bc_join.enqueue_command(:'node', 'inventory.refresh', '{}') AS inv \gset
UPDATE bc_join.commands SET created_at = created_at - interval '2 hours', expires_at = expires_at - interval '2 hours'
	WHERE id = :'inv';
SELECT pg_temp.fetch_pp(:'s2') AS fpp3 \gset
\set fproof3 `printf %s :'fpp3' | :josetool sign :d/k2/node.key`
SELECT is(pg_temp.payload(bc_join.fetch_commands(jsonb_build_object('proof', :'fproof3')))->'commands', '[]'::jsonb,
	'an expired command is not handed out');
SELECT is(state, 'expired', 'it is marked expired') FROM bc_join.commands WHERE id = :'inv';

SELECT * FROM finish();
ROLLBACK;
