-- results.sql: what JoinService checks in every result after the attestor
-- (role, placement, trust, token expect, lifetime, allowed kinds, bind,
-- node key), reclaims, retirement, rate-bounded refusal events, pruning.
-- The "rules" attestor answers whatever result its evidence carries.
\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only on
\getenv bcd BCJ_BCD
\getenv keys BCJ_SERVICE_KEYS
\getenv scratch BCJ_SCRATCH
\set d :scratch/pgtap_results
\set mk `rm -rf :d && mkdir -p :d`

BEGIN;
SELECT plan(72);

SELECT bc_join.create_tenant('acme') AS tenant \gset
SELECT bc_join.create_site(:'tenant', 'dc-1') AS site \gset
SELECT bc_join.create_site(:'tenant', 'dc-2') AS site2 \gset
SELECT bc_join.create_pool(:'tenant', :'site', 'workers') AS pool \gset
SELECT bc_join.create_pool(:'tenant', :'site2', 'other-workers') AS pool2 \gset
SELECT bc_join.create_tenant('globex') AS other \gset
SELECT bc_join.create_site(:'other', 'g-1') AS osite \gset
SELECT bc_join.create_pool(:'other', :'osite', 'g-pool') AS opool \gset
SELECT bc_join.create_site('root', 'platform-1') AS psite \gset

CREATE FUNCTION public.rules_verify(evidence jsonb, context jsonb) RETURNS jsonb
LANGUAGE sql SET search_path = public, pg_catalog, pg_temp AS $$ SELECT convert_from(bc_join.b64url_decode(evidence->>'payload'), 'UTF8')::jsonb $$;
SELECT bc_join.register_attestor('rules', '1', ARRAY['node', 'site', 'ramdisk'], 'public.rules_verify(jsonb,jsonb)');

\set nreq `:bcd join-request --service-keys :keys --attestor rules --out-dir :d/n --claims '{"serial":"SN-1"}'`
\set sreq `:bcd join-request --service-keys :keys --attestor rules --out-dir :d/s --role site`
\set rreq `:bcd join-request --service-keys :keys --attestor rules --out-dir :d/r --role ramdisk`

-- One CSR key admits one join (join:key-reused), so every case below joins
-- with a fresh key: a pool of CSRs made by bcd, one taken per call.
\set npool `mkdir -p :d/pool; for i in $(seq 1 64); do :bcd join-request --service-keys :keys --attestor rules --out-dir :d/pool/n$i; done`
\set spool `for i in $(seq 1 8); do :bcd join-request --service-keys :keys --attestor rules --out-dir :d/pool/s$i --role site; done`
\set rpool `for i in $(seq 1 8); do :bcd join-request --service-keys :keys --attestor rules --out-dir :d/pool/r$i --role ramdisk; done`
CREATE TEMP TABLE csr_pool AS
	SELECT r::jsonb->>'role' AS role, r::jsonb->>'csr' AS csr
	FROM regexp_split_to_table(:'npool' || E'\n' || :'spool' || E'\n' || :'rpool', E'\n') r WHERE r <> '';
CREATE FUNCTION pg_temp.fresh_csr(role text) RETURNS text LANGUAGE sql AS $$
	DELETE FROM csr_pool WHERE ctid = (SELECT ctid FROM csr_pool p WHERE p.role = fresh_csr.role LIMIT 1)
	RETURNING csr $$;

-- Join req's own CSR with the attestor answering result.
CREATE FUNCTION pg_temp.j_own(req jsonb, result jsonb) RETURNS jsonb LANGUAGE sql AS $$
	SELECT bc_join(req || jsonb_build_object('attestation', bc_join.b64url_encode(convert_to(result::text, 'UTF8')))) $$;
-- The same with a fresh CSR of req's role.
CREATE FUNCTION pg_temp.j(req jsonb, result jsonb) RETURNS jsonb LANGUAGE sql AS $$
	SELECT pg_temp.j_own(req || jsonb_build_object('csr', pg_temp.fresh_csr(req->>'role')), result) $$;
\ir lib/fixture.sql
CREATE FUNCTION pg_temp.refused_as(req jsonb, result jsonb, reason text) RETURNS text LANGUAGE sql AS $$
	SELECT CASE WHEN pg_temp.j(req, result) = '{"status":"refused","error":{"code":"ACCESS_DENIED","message":"Join refused"}}'::jsonb
				THEN pg_temp.last_reason() ELSE 'admitted' END $$;

SELECT jsonb_build_object('tenantId', :'tenant', 'role', 'node', 'poolId', :'pool') AS base \gset

-------------------------------------------------------------------- role
SELECT is(pg_temp.refused_as(:'nreq', :'base'::jsonb || '{"role":"site"}', NULL), 'join:role',
		  'the result''s role must equal the request''s');

---------------------------------------------------------------- placement
SELECT pg_temp.count_nodes() AS n0 \gset
SELECT is(pg_temp.refused_as(:'nreq', :'base'::jsonb || '{"poolId":"pool_nope"}', NULL), 'join:pool-unknown',
		  'a pool must exist');
SELECT is(pg_temp.refused_as(:'nreq', :'base'::jsonb || jsonb_build_object('poolId', :'opool'), NULL), 'join:pool-tenant',
		  'a pool must belong to the tenant');
SELECT is(pg_temp.refused_as(:'nreq', :'base'::jsonb || jsonb_build_object('siteId', :'site2'), NULL), 'join:pool-site',
		  'a pool must sit in the site when both are given');
SELECT is(pg_temp.refused_as(:'sreq', jsonb_build_object('tenantId', :'tenant', 'role', 'site', 'poolId', :'pool'), NULL),
		  'join:site-pool', 'a site agent never takes a pool');
SELECT is(pg_temp.refused_as(:'nreq', jsonb_build_object('tenantId', :'tenant', 'role', 'node'), NULL), 'join:no-site',
		  'a site is required without a pool');
SELECT is(pg_temp.refused_as(:'nreq', jsonb_build_object('tenantId', :'tenant', 'role', 'node', 'siteId', 'site_nope'), NULL),
		  'join:site-unknown', 'the site must exist');
SELECT is(pg_temp.refused_as(:'nreq', jsonb_build_object('tenantId', :'tenant', 'role', 'node', 'siteId', :'osite'), NULL),
		  'join:site-tenant', 'the site must belong to the tenant');
SELECT is(pg_temp.count_nodes(), :'n0'::bigint, 'no refused result wrote a node');

SELECT is(pg_temp.payload(pg_temp.j(:'sreq', jsonb_build_object('tenantId', :'tenant', 'role', 'site', 'siteId', :'site')))->>'status',
		  'issued', 'a site agent joins a site');
SELECT is(pg_temp.payload(pg_temp.j(:'nreq', :'base'::jsonb || jsonb_build_object('siteId', :'site')))->>'status',
		  'issued', 'a pool and its own site are admitted');

--------------------------------------------------------------------- trust
SELECT pg_temp.payload(pg_temp.j(:'nreq', :'base'))->>'nodeId' AS tnode \gset
SELECT is(n.trust, 'tenant-owned', 'trust defaults to tenant-owned on a tenant''s own site') FROM bc_join.nodes n WHERE n.id = :'tnode';
SELECT pg_temp.payload(pg_temp.j(:'nreq', jsonb_build_object('tenantId', 'root', 'role', 'node', 'siteId', :'psite')))->>'nodeId' AS pnode \gset
SELECT is(n.trust, 'platform', 'and to platform on a platform site') FROM bc_join.nodes n WHERE n.id = :'pnode';
SELECT pg_temp.payload(pg_temp.j(:'nreq', :'base'::jsonb || '{"trust":"platform"}'))->>'nodeId' AS xnode \gset
SELECT is(n.trust, 'platform', 'an attestor may say the trust') FROM bc_join.nodes n WHERE n.id = :'xnode';
SELECT throws_ok(format('SELECT pg_temp.j(%L, %L)', :'nreq', :'base'::jsonb || '{"trust":"total"}'), 'F0000', NULL,
				 'an unknown trust is INVALID_CONFIG');

------------------------------------------------------------- token expect
SELECT split_part(bc_join.create_join_token(:'tenant', :'pool', expect => '{"serial":"SN-2"}'), '.', 1) AS xtok \gset
SELECT is(pg_temp.refused_as(:'nreq', :'base'::jsonb || jsonb_build_object('tokenId', :'xtok'), NULL), 'join:expect',
		  'a tokenId makes JoinService enforce the token''s expect binding');
SELECT split_part(bc_join.create_join_token(:'tenant', :'pool', expect => '{"serial":"SN-1"}'), '.', 1) AS xtok2 \gset
SELECT is(pg_temp.payload(pg_temp.j(:'nreq', :'base'::jsonb || jsonb_build_object('tokenId', :'xtok2')))->>'status', 'issued',
		  'claims that match the binding are admitted');

------------------------------------------------------------------ lifetime
CREATE FUNCTION pg_temp.lifetime(r jsonb) RETURNS interval LANGUAGE sql AS $$
	SELECT c.not_after - c.not_before FROM bc_join.node_certs c WHERE c.serial = pg_temp.payload(r)->>'serial' $$;
SELECT is(pg_temp.lifetime(pg_temp.j(:'nreq', :'base'::jsonb || '{"certTtlSeconds":600}')), interval '660 seconds',
		  'certTtlSeconds caps the lifetime');
SELECT is(pg_temp.lifetime(pg_temp.j(:'nreq', :'base'::jsonb || '{"certTtlSeconds":999999}')), interval '86460 seconds',
		  'never above the service TTL');
SELECT is(pg_temp.lifetime(pg_temp.j(:'rreq', jsonb_build_object('tenantId', :'tenant', 'role', 'ramdisk', 'poolId', :'pool',
																  'certTtlSeconds', 20000))),
		  interval '7260 seconds', 'never above 7,200 s for a ramdisk');
SELECT throws_ok(format('SELECT pg_temp.j(%L, %L)', :'nreq', :'base'::jsonb || '{"certTtlSeconds":0}'), 'F0000', NULL,
				 'a certTtlSeconds below 1 is INVALID_CONFIG');

------------------------------------------------------------- allowed kinds
SELECT pg_temp.j(:'rreq', jsonb_build_object('tenantId', :'tenant', 'role', 'ramdisk', 'poolId', :'pool',
											 'allowedKinds', ARRAY['inventory.refresh', 'disk.wipe', 'deploy.*'])) AS kr \gset
SELECT is(c.allowed_kinds, ARRAY['inventory.refresh', 'disk.wipe', 'deploy.*'], 'allowedKinds are stored on the certificate row')
	FROM bc_join.node_certs c WHERE c.serial = pg_temp.payload(:'kr')->>'serial';
SELECT is(pg_temp.payload(:'kr')->'allowedKinds', '["inventory.refresh", "disk.wipe", "deploy.*"]'::jsonb,
		  'and named in the signed response');
SELECT throws_ok(format('SELECT pg_temp.j(%L, %L)', :'nreq', :'base'::jsonb || '{"allowedKinds":["wipe"]}'), 'F0000',
				 NULL, 'a kind nobody registered is INVALID_CONFIG (matching is exact)');
SELECT throws_ok(format('SELECT pg_temp.j(%L, %L)', :'nreq', :'base'::jsonb || '{"allowedKinds":["nothing.*"]}'), 'F0000',
				 NULL, 'a glob that names no registered kind is INVALID_CONFIG');
SELECT throws_ok(format('SELECT pg_temp.j(%L, %L)', :'nreq', :'base'::jsonb || '{"allowedKinds":["disk.*.x"]}'), 'F0000',
				 NULL, 'a malformed glob is INVALID_CONFIG');
SELECT throws_ok(format('SELECT pg_temp.j(%L, %L)', :'nreq', :'base'::jsonb || '{"allowedKinds":"disk.wipe"}'), 'F0000',
				 NULL, 'allowedKinds must be an array');
SELECT bc_join.register_command_kind('gpu.reset', 'reset a GPU');
SELECT is(pg_temp.payload(pg_temp.j(:'nreq', :'base'::jsonb || '{"allowedKinds":["gpu.reset"]}'))->>'status', 'issued',
		  'a newly registered kind is allowed');
SELECT ok(c.allowed_kinds IS NULL, 'no allowedKinds: unrestricted') FROM bc_join.node_certs c
	WHERE c.serial = pg_temp.payload(pg_temp.j(:'nreq', :'base'))->>'serial';

-------------------------------------------------------------------- bind
SELECT bc_join.b64url_encode(sha256('serial:SN-1'::bytea)) AS bind \gset
SELECT pg_temp.payload(pg_temp.j(:'nreq', :'base'::jsonb || jsonb_build_object('bind', :'bind')))->>'nodeId' AS bnode \gset
SELECT is(b.node_id, :'bnode', 'bind is recorded in node_bindings') FROM bc_join.node_bindings b
	WHERE b.subject = sha256('serial:SN-1'::bytea);
SELECT is(pg_temp.refused_as(:'nreq', :'base'::jsonb || jsonb_build_object('bind', :'bind'), NULL), 'join:bound-elsewhere',
		  'a subject bound to another node is refused');
SELECT throws_ok(format('SELECT pg_temp.j(%L, %L)', :'nreq', :'base'::jsonb || '{"bind":"c2hvcnQ"}'), 'F0000', NULL,
				 'a bind that is not 32 bytes is INVALID_CONFIG');

----------------------------------------------------------------- node key
SELECT pg_temp.payload(pg_temp.j(:'nreq', :'base'::jsonb || '{"nodeKey":"tpm"}'))->>'nodeId' AS tpmnode \gset
SELECT is(e.payload->>'nodeKey', 'tpm', 'nodeKey tpm is recorded in node.joined')
	FROM bc_join.events e WHERE e.type = 'node.joined' AND e.payload->>'nodeId' = :'tpmnode';
SELECT is(a.detail->>'nodeKey', 'tpm', 'and in the audit row') FROM bc_join.audit_log a WHERE a.node_id = :'tpmnode';
SELECT is(n.node_key, 'tpm', 'and on the node') FROM bc_join.nodes n WHERE n.id = :'tpmnode';
SELECT is(e.payload->>'nodeKey', 'unattested', 'absent, it is unattested')
	FROM bc_join.events e WHERE e.type = 'node.joined' AND e.payload->>'nodeId' = :'bnode';
SELECT throws_ok(format('SELECT pg_temp.j(%L, %L)', :'nreq', :'base'::jsonb || '{"nodeKey":"hsm"}'), 'F0000', NULL,
				 'a nodeKey other than tpm is INVALID_CONFIG');

SELECT count(*) AS certs0 FROM bc_join.node_certs \gset
SELECT is(pg_temp.refused_as(:'nreq', :'base'::jsonb || '{"nodeKeyUri":"urn:bc:other-key:1"}', NULL),
		  'join:node-key-statement', 'a nodeKeyUri the service cannot prove at renewal is refused');
SELECT is(pg_temp.refused_as(:'nreq', :'base'::jsonb || '{"nodeKeyUri":"urn:bc:tpm-ak:sha256:abc"}', NULL),
		  'join:node-key-statement', 'so is a malformed tpm-ak statement');
SELECT is((SELECT count(*) FROM bc_join.node_certs), :'certs0'::bigint, 'before any certificate is issued');
SELECT 'urn:bc:tpm-ak:sha256:' || encode(sha256('ak'::bytea), 'hex') AS akuri \gset
SELECT is(pg_temp.refused_as(:'nreq', :'base'::jsonb || jsonb_build_object('nodeKey', 'tpm', 'nodeKeyUri', :'akuri'), NULL),
		  'join:node-key-statement',
		  'even a well-formed tpm-ak statement from a custom attestor is refused: only the built-in tpm proves one a renewal can prove again');
SELECT is((SELECT count(*) FROM bc_join.node_certs), :'certs0'::bigint, 'and no certificate is issued');
SELECT bc_join.register_attestor('tpm', '9', ARRAY['node'], 'public.rules_verify(jsonb,jsonb)');
SELECT is(pg_temp.refused_as(:'nreq'::jsonb || '{"attestor":"tpm"}', :'base'::jsonb || jsonb_build_object('nodeKey', 'tpm', 'nodeKeyUri', :'akuri'), NULL),
		  'join:node-key-statement', 'nor from a registered attestor that took the id tpm');
SELECT bc_join.unregister_attestor('tpm');
SELECT pg_temp.j_own(:'nreq', :'base'::jsonb || jsonb_build_object('nodeKey', 'tpm')) AS akr \gset
SELECT is(c.node_key_uri, NULL, 'nodeKey tpm alone is issued, without a statement')
	FROM bc_join.node_certs c WHERE c.serial = pg_temp.payload(:'akr')->>'serial';

------------------------------------------------------------------- reclaim
UPDATE bc_join.nodes SET state = 'active' WHERE id = :'bnode';
SELECT serial AS oldserial FROM bc_join.node_certs WHERE node_id = :'bnode' \gset
SELECT pg_temp.j(:'nreq', jsonb_build_object('tenantId', :'tenant', 'role', 'node', 'nodeId', :'bnode', 'bind', :'bind')) AS rc \gset
SELECT is(pg_temp.payload(:'rc')->>'nodeId', :'bnode', 'a result with nodeId re-keys that node');
SELECT is(n.identity_generation, 2, 'identity generation + 1') FROM bc_join.nodes n WHERE n.id = :'bnode';
SELECT is(c.revocation_reason, 'reclaimed', 'the older certificate is revoked (reclaimed)') FROM bc_join.node_certs c WHERE c.serial = :'oldserial';
SELECT is(c.identity_generation, 2, 'the new certificate carries the new generation')
	FROM bc_join.node_certs c WHERE c.serial = pg_temp.payload(:'rc')->>'serial';
SELECT is(n.state || ' ' || n.pool_id || ' ' || n.site_id, 'active ' || :'pool' || ' ' || :'site',
		  'state, pool and site are kept') FROM bc_join.nodes n WHERE n.id = :'bnode';
SELECT is(e.payload->>'reclaim', 'true', 'node.joined says it was a reclaim')
	FROM bc_join.events e WHERE e.type = 'node.joined' AND e.payload->>'serial' = pg_temp.payload(:'rc')->>'serial';
SELECT is(pg_temp.refused_as(:'nreq', jsonb_build_object('tenantId', :'tenant', 'role', 'node', 'nodeId', :'bnode', 'poolId', :'pool2'), NULL),
		  'join:reclaim-pool', 'a reclaimed node keeps its pool');
SELECT is(pg_temp.refused_as(:'nreq', jsonb_build_object('tenantId', :'tenant', 'role', 'node', 'nodeId', :'bnode', 'siteId', :'site2'), NULL),
		  'join:reclaim-site', 'and its site');
SELECT is(pg_temp.refused_as(:'nreq', jsonb_build_object('tenantId', :'other', 'role', 'node', 'nodeId', :'bnode'), NULL),
		  'join:reclaim-tenant', 'and its tenant');
SELECT is(pg_temp.refused_as(:'sreq', jsonb_build_object('tenantId', :'tenant', 'role', 'site', 'nodeId', :'bnode'), NULL),
		  'join:reclaim-role', 'and its role');

-- through a token: only with allow_reclaim
SELECT split_part(bc_join.create_join_token(:'tenant', :'pool'), '.', 1) AS ntok \gset
SELECT split_part(bc_join.create_join_token(:'tenant', :'pool', allow_reclaim => true), '.', 1) AS rtok \gset
SELECT is(pg_temp.refused_as(:'nreq', jsonb_build_object('tenantId', :'tenant', 'role', 'node', 'nodeId', :'bnode', 'tokenId', :'ntok'), NULL),
		  'join:reclaim-not-allowed', 'a reclaim through a token needs allow_reclaim');
SELECT is(pg_temp.payload(pg_temp.j(:'nreq', jsonb_build_object('tenantId', :'tenant', 'role', 'node', 'nodeId', :'bnode', 'tokenId', :'rtok')))->>'identityGeneration',
		  '3', 'a token with allow_reclaim reclaims');

-- a trusted hardware key is not silently re-enrolled
SELECT is(pg_temp.refused_as(:'nreq', jsonb_build_object('tenantId', :'tenant', 'role', 'node', 'nodeId', :'tpmnode'), NULL),
		  'join:hardware-key-enrolled', 'a TPM node is not re-keyed by unproven evidence');
SELECT is(pg_temp.payload(pg_temp.j(:'nreq', jsonb_build_object('tenantId', :'tenant', 'role', 'node', 'nodeId', :'tpmnode', 'nodeKey', 'tpm')))->>'identityGeneration',
		  '2', 'but by a TPM-proven key');

--------------------------------------------------- retire and delete
SELECT lives_ok(format('SELECT bc_join.retire_node(%L)', :'bnode'), 'a node can be retired');
SELECT is((SELECT count(*) FROM bc_join.node_bindings WHERE node_id = :'bnode'), 0::bigint, 'retiring drops its bindings');
SELECT is((SELECT count(*) FROM bc_join.node_certs WHERE node_id = :'bnode' AND revoked_at IS NULL), 0::bigint,
		  'and revokes its certificates');
SELECT is(pg_temp.refused_as(:'nreq', jsonb_build_object('tenantId', :'tenant', 'role', 'node', 'nodeId', :'bnode'), NULL),
		  'join:reclaim-retired', 'a retired node is not reclaimed');
SELECT pg_temp.payload(pg_temp.j(:'nreq', :'base'::jsonb || jsonb_build_object('bind', :'bind')))->>'nodeId' AS bnode2 \gset
SELECT lives_ok(format('SELECT bc_join.delete_node(%L)', :'bnode2'), 'a node can be deleted');
SELECT is((SELECT count(*) FROM bc_join.node_bindings WHERE subject = sha256('serial:SN-1'::bytea)), 0::bigint,
		  'deleting drops its bindings');

------------------------------------------------------- malformed results
SELECT throws_ok(format('SELECT pg_temp.j(%L, %L)', :'nreq', :'base'::jsonb || '{"colour":"red"}'), 'F0000', NULL,
				 'an unknown result member is INVALID_CONFIG');
SELECT throws_ok(format('SELECT pg_temp.j(%L, %L)', :'nreq', '{"role":"node"}'), 'F0000', NULL,
				 'a result without tenantId is INVALID_CONFIG');

------------------------------------------------- one key, one certificate
SELECT pg_temp.count_nodes() AS nbefore \gset
SELECT is(pg_temp.payload(pg_temp.j_own(:'nreq', :'base'::jsonb || jsonb_build_object('nodeKey', 'tpm')))->>'serial',
		  pg_temp.payload(:'akr')->>'serial',
		  'the same request again is answered with the certificate its CSR was issued');
SELECT is(pg_temp.count_nodes(), :'nbefore'::bigint, 'and makes no node');
SELECT is((SELECT count(*) FROM bc_join.audit_log
		   WHERE action = 'node.join.repeated' AND detail->>'serial' = pg_temp.payload(:'akr')->>'serial'),
		  1::bigint, 'only a note in the audit log');
SELECT bc_join.register_attestor('rules2', '1', ARRAY['node'], 'public.rules_verify(jsonb,jsonb)');
SELECT is(pg_temp.j_own(:'nreq'::jsonb || '{"attestor":"rules2"}', :'base'), :'refused'::jsonb,
		  'the same CSR through another attestor is refused');
SELECT is(pg_temp.last_reason(), 'join:key-reused', 'as key-reused');
-- bindings are per attestor: rules2's result with rules' bind is no match
SELECT bc_join.b64url_encode(sha256('per-attestor'::bytea)) AS pbind \gset
SELECT pg_temp.payload(pg_temp.j(:'nreq', :'base'::jsonb || jsonb_build_object('bind', :'pbind')))->>'nodeId' AS pb1 \gset
SELECT isnt(pg_temp.payload(pg_temp.j(:'nreq'::jsonb || '{"attestor":"rules2"}', :'base'::jsonb || jsonb_build_object('bind', :'pbind')))->>'nodeId',
			:'pb1', 'the same bind from another attestor is its own binding: a new node, not bound-elsewhere');
SELECT is((SELECT count(*) FROM bc_join.node_bindings WHERE subject = sha256('per-attestor'::bytea)), 2::bigint,
		  'two bindings, one per attestor');

SELECT * FROM finish();
ROLLBACK;
