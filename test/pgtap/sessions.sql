-- sessions.sql: bc_join.issue_session(), a joined node asking for a session
-- credential with a proof by its node key.
\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only on
\getenv bcd BCJ_BCD
\getenv keys BCJ_SERVICE_KEYS
\getenv scratch BCJ_SCRATCH
\getenv josetool BCJ_JOSE_TOOL
\getenv ca BCJ_NODE_CA
\set d :scratch/pgtap_sessions
\set mk `rm -rf :d && mkdir -p :d`

BEGIN;
SELECT plan(46);

SELECT bc_join.create_tenant('acme') AS tenant \gset
SELECT bc_join.create_site(:'tenant', 'dc-1') AS site \gset
SELECT bc_join.create_pool(:'tenant', :'site', 'workers') AS pool \gset
\ir lib/fixture.sql
CREATE FUNCTION pg_temp.pp(serial text, req jsonb, session text, context text DEFAULT NULL, skew int DEFAULT 0)
RETURNS text LANGUAGE sql AS $$
	SELECT jsonb_strip_nulls(jsonb_build_object('purpose', 'session', 'serial', serial,
		'csrSha256', bc_join.b64url_encode(sha256(bc_join.b64url_decode(req->>'csr'))),
		'iat', extract(epoch FROM bc_join.compute_now())::bigint + skew,
		'session', session, 'context', context))::text $$;
CREATE FUNCTION pg_temp.ppc(serial text, req jsonb, session text, skew int, caller jsonb)
RETURNS text LANGUAGE sql AS $$
	SELECT (pg_temp.pp(serial, req, session, NULL, skew)::jsonb || jsonb_build_object('caller', caller))::text $$;
CREATE FUNCTION pg_temp.last_detail() RETURNS jsonb LANGUAGE sql AS $$
	SELECT payload->'detail' FROM bc_join.events
	WHERE type = 'security.join.refused' ORDER BY id DESC LIMIT 1 $$;
CREATE FUNCTION pg_temp.ask(req jsonb, proof text) RETURNS jsonb LANGUAGE sql AS $$
	SELECT bc_join.issue_session(jsonb_build_object('csr', req->>'csr', 'proof', proof)) $$;

SELECT bc_join.create_join_token(:'tenant', :'pool') AS tok \gset
\set jreq `:bcd join-request --service-keys :keys --token :'tok' --out-dir :d/n`
SELECT bc_join(:'jreq') AS jr \gset
SELECT pg_temp.payload(:'jr')->>'serial' AS ns, pg_temp.payload(:'jr')->>'nodeId' AS node,
	   pg_temp.payload(:'jr')->>'spiffeId' AS nodeid \gset

-------------------------------------------------------------- a session
\set s1 `:bcd join-request --service-keys :keys --out-dir :d/s1`
SELECT pg_temp.pp(:'ns', :'s1', 'sess-1', 'ctx-a') AS p1 \gset
\set proof1 `printf %s :'p1' | :josetool sign :d/n/node.key`
SELECT pg_temp.ask(:'s1', :'proof1') AS r1 \gset
SELECT is(:'r1'::jsonb->>'status', 'issued', 'a joined node gets a session credential');
SELECT pg_temp.payload(:'r1')->>'sessionId' AS sid \gset
SELECT is(pg_temp.payload(:'r1')->>'spiffeId', :'nodeid' || '/session/' || :'sid', 'its SPIFFE ID is under the node''s');
SELECT is(pg_temp.payload(:'r1')->>'session' || '/' || (pg_temp.payload(:'r1')->>'context'), 'sess-1/ctx-a',
		  'the answer names the session and context asked for');
SELECT ok(c.not_after - c.not_before <= interval '960 seconds', 'it lives bc_join.session_ttl (900 s) at most')
	FROM bc_join.session_certs c WHERE c.serial = pg_temp.payload(:'r1')->>'serial';
SELECT is(s.node_id || ' ' || s.session_ref || ' ' || s.context_ref, :'node' || ' sess-1 ctx-a',
		  'a row records for which node it was provisioned') FROM bc_join.sessions s WHERE s.id = :'sid';
SELECT is(s.provisioned_at, bc_join.compute_now(), 'and when') FROM bc_join.sessions s WHERE s.id = :'sid';
\set chain `printf '%s' :'r1' > :d/s1/resp.json; /usr/bin/python3 -c "import json,sys,base64; p=json.loads(base64.urlsafe_b64decode(json.load(open(sys.argv[1]))['response'].split('.')[1]+'==')); print(p['certificateChain'][0])" :d/s1/resp.json`
\set v `printf '%s' :'chain' | base64 -d | openssl x509 -inform DER -out :d/s1/leaf.pem && openssl verify -CAfile :ca :d/s1/leaf.pem`
SELECT is(:'v'::text, :'d' || '/s1/leaf.pem: OK', 'the node CA issued it');
\set leafkey `openssl x509 -in :d/s1/leaf.pem -noout -pubkey`
\set sesskey `openssl pkey -in :d/s1/node.key -pubout`
SELECT is(:'leafkey'::text, :'sesskey', 'it certifies the session key');
SELECT is(e.payload->>'sessionId', :'sid', 'session.provisioned is recorded')
	FROM bc_join.events e WHERE e.type = 'session.provisioned';

-- the same session again: the same identity, a new certificate
\set s2 `:bcd join-request --service-keys :keys --out-dir :d/s2`
SELECT pg_temp.pp(:'ns', :'s2', 'sess-1', 'ctx-a', 1) AS p2 \gset
\set proof2 `printf %s :'p2' | :josetool sign :d/n/node.key`
SELECT is(pg_temp.payload(pg_temp.ask(:'s2', :'proof2'))->>'sessionId', :'sid', 'the same session keeps its identity');
SELECT is((SELECT count(*) FROM bc_join.sessions), 1::bigint, 'reserved once');
SELECT is((SELECT count(*) FROM bc_join.session_certs), 2::bigint, 'with a certificate per request');
-- another context is another identity
SELECT pg_temp.pp(:'ns', :'s2', 'sess-1', 'ctx-b', 2) AS p3 \gset
\set proof3 `printf %s :'p3' | :josetool sign :d/n/node.key`
SELECT isnt(pg_temp.payload(pg_temp.ask(:'s2', :'proof3'))->>'sessionId', :'sid', 'another context is another session identity');

----------------------------------------------------------------- refusals
SELECT is(pg_temp.ask(:'s2', :'proof2'), :'refused'::jsonb, 'a replayed proof: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' session:reused', 'refused reused');

-- a session's key never joins: one key, one certificate, session certificates too
SELECT bc_join.create_join_token(:'tenant', :'pool') AS tok2 \gset
\set jreq2 `:bcd join-request --service-keys :keys --token :'tok2' --out-dir :d/s1`
SELECT is(bc_join(:'jreq2'), :'refused'::jsonb, 'a join with a session certificate''s key: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root join:key-reused', 'refused join:key-reused');
SELECT is((SELECT uses_left FROM bc_join.join_tokens WHERE id = split_part(:'tok2', '.', 1)), 1, 'its token is not spent');

SELECT pg_temp.pp(:'ns', :'s2', 'sess-2', NULL, 3) AS p4 \gset
\set proof4 `printf %s :'p4' | :josetool sign :d/s1/node.key`
SELECT is(pg_temp.ask(:'s2', :'proof4'), :'refused'::jsonb, 'a proof not by the node key: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root session:proof', 'refused proof, root stream');

SELECT pg_temp.pp(:'ns', :'s2', 'bad selector!', NULL, 4) AS p5 \gset
\set proof5 `printf %s :'p5' | :josetool sign :d/n/node.key`
SELECT is(pg_temp.ask(:'s2', :'proof5'), :'refused'::jsonb, 'a malformed selector: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' session:malformed-selector', 'refused malformed-selector');

-- near the node certificate's end, the session ends with it
SET LOCAL bc_join.clock_offset = 86300;
SELECT pg_temp.pp(:'ns', :'s2', 'sess-3', NULL) AS p6 \gset
\set proof6 `printf %s :'p6' | :josetool sign :d/n/node.key`
SELECT pg_temp.ask(:'s2', :'proof6') AS r6 \gset
SELECT ok(c.not_after <= n.not_after, 'a session never outlives the node certificate')
	FROM bc_join.session_certs c, bc_join.node_certs n
	WHERE c.serial = pg_temp.payload(:'r6')->>'serial' AND n.serial = :'ns';
SET LOCAL bc_join.clock_offset = 86500;
SELECT pg_temp.pp(:'ns', :'s2', 'sess-4', NULL) AS p7 \gset
\set proof7 `printf %s :'p7' | :josetool sign :d/n/node.key`
SELECT is(pg_temp.ask(:'s2', :'proof7'), :'refused'::jsonb, 'an expired node certificate: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' session:expired', 'refused expired');
RESET bc_join.clock_offset;

-- an unsigned proof holding 1e1000000 is refused, never raised
SELECT is(pg_temp.ask(:'s2', 'eyJhbGciOiJFUzI1NiJ9.' ||
		  bc_join.b64url_encode(convert_to(format('{"serial":"%s","session":"x","iat":1e1000000}',
												  pg_temp.payload(:'jr')->>'serial'), 'UTF8')) || '.' || repeat('A', 86)),
		  :'refused'::jsonb, 'an unsigned proof holding 1e1000000: the one refusal, not 22003');
SELECT is(pg_temp.last_refusal(), 'root session:malformed-proof', 'refused malformed-proof before its signature');

-------------------------------------------- the caller bcd saw (#26.8)
SELECT pg_temp.ppc(:'ns', :'s2', 'sess-c', 10,
	'{"pid": 4242, "exe": "/usr/bin/hook", "unit": "hook@1.service", "cgroup": "/user.slice/hook@1.service", "x": 1}') AS pc \gset
\set proofc `printf %s :'pc' | :josetool sign :d/n/node.key`
SELECT pg_temp.ask(:'s2', :'proofc') AS rc \gset
SELECT is(:'rc'::jsonb->>'status', 'issued', 'a proof with the caller bcd saw: issued');
SELECT is(c.caller, '{"pid": 4242, "exe": "/usr/bin/hook", "unit": "hook@1.service", "cgroup": "/user.slice/hook@1.service"}'::jsonb,
		  'session_certs.caller records the claim (its four members only)')
	FROM bc_join.session_certs c WHERE c.serial = pg_temp.payload(:'rc')->>'serial';
SELECT is(e.payload->'caller'->>'exe', '/usr/bin/hook', 'and session.provisioned carries it')
	FROM bc_join.events e WHERE e.type = 'session.provisioned' AND e.payload->>'session' = 'sess-c';
SELECT is(c.caller, NULL, 'a proof without one: NULL (a bcd before 0.2.0)')
	FROM bc_join.session_certs c WHERE c.serial = pg_temp.payload(:'r1')->>'serial';
SELECT pg_temp.ppc(:'ns', :'s2', 'sess-c', 11, '"pid 4242"') AS pc2 \gset
\set proofc2 `printf %s :'pc2' | :josetool sign :d/n/node.key`
SELECT is(pg_temp.ask(:'s2', :'proofc2'), :'refused'::jsonb, 'a caller that is not an object: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' session:malformed-proof', 'refused malformed-proof');
SELECT pg_temp.ppc(:'ns', :'s2', 'sess-c', 12, '{"pid": 0, "exe": "/x"}') AS pc3 \gset
\set proofc3 `printf %s :'pc3' | :josetool sign :d/n/node.key`
SELECT is(pg_temp.ask(:'s2', :'proofc3'), :'refused'::jsonb, 'a caller pid out of range: the one refusal');

---------------------------------------- a node's bounds on sessions (#26.8)
-- held now: sess-1/ctx-a, sess-1/ctx-b, sess-3, sess-c
SELECT is((SELECT count(*) FROM bc_join.sessions WHERE node_id = :'node'), 4::bigint, 'the node holds four sessions');
SET LOCAL bc_join.sessions_per_node = 5;
SELECT pg_temp.pp(:'ns', :'s2', 'sess-l1', NULL, 13) AS pl1 \gset
\set proofl1 `printf %s :'pl1' | :josetool sign :d/n/node.key`
SELECT is(pg_temp.ask(:'s2', :'proofl1')->>'status', 'issued', 'bc_join.sessions_per_node 5: the fifth is issued');
SELECT pg_temp.pp(:'ns', :'s2', 'sess-l2', NULL, 14) AS pl2 \gset
\set proofl2 `printf %s :'pl2' | :josetool sign :d/n/node.key`
SELECT is(pg_temp.ask(:'s2', :'proofl2'), :'refused'::jsonb, 'a sixth: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' session:too-many', 'refused session:too-many');
SELECT is(pg_temp.last_detail(), jsonb_build_object('nodeId', :'node', 'setting', 'bc_join.sessions_per_node', 'limit', 5),
		  'the event names the node and the setting');
SELECT is((SELECT count(*) FROM bc_join.sessions WHERE node_id = :'node'), 5::bigint, 'nothing reserved for it');
SELECT pg_temp.pp(:'ns', :'s2', 'sess-1', 'ctx-a', 15) AS pl3 \gset
\set proofl3 `printf %s :'pl3' | :josetool sign :d/n/node.key`
SELECT is(pg_temp.ask(:'s2', :'proofl3')->>'status', 'issued', 'a session it holds is still issued at the cap');
SET LOCAL bc_join.sessions_per_node = 100;
SET LOCAL bc_join.new_sessions_per_minute = 5;
SELECT is(pg_temp.ask(:'s2', :'proofl2'), :'refused'::jsonb,
		  'bc_join.new_sessions_per_minute 5: a sixth new one within the minute is refused');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' session:too-fast', 'refused session:too-fast');
SET LOCAL bc_join.new_sessions_per_minute = 6;
SELECT pg_temp.pp(:'ns', :'s2', 'sess-l2', NULL, 16) AS pl4 \gset
\set proofl4 `printf %s :'pl4' | :josetool sign :d/n/node.key`
SELECT is(pg_temp.ask(:'s2', :'proofl4')->>'status', 'issued', 'within both: issued');
RESET bc_join.sessions_per_node;
RESET bc_join.new_sessions_per_minute;

-- a retired node has no session
SELECT bc_join.retire_node(:'node');
SELECT pg_temp.pp(:'ns', :'s2', 'sess-5', NULL, 5) AS p8 \gset
\set proof8 `printf %s :'p8' | :josetool sign :d/n/node.key`
SELECT is(pg_temp.ask(:'s2', :'proof8'), :'refused'::jsonb, 'a retired node: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' session:revoked', 'refused revoked (retiring revokes)');

SELECT * FROM finish();
ROLLBACK;
