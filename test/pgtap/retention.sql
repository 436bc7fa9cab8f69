-- retention.sql: the prune functions delete rows past each retention in
-- batches and keep what must stay (a node's newest certificate, revoked ones
-- the CRL lists, pending join requests, the audit log); renewals and sessions
-- mark a node seen (last_seen_at, adopting -> active); stale_nodes lists the
-- live nodes not seen for bc_join.stale_after.  That a prune skips rows
-- another session holds is test/tap/retention.t.
\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only on
\getenv bcd BCJ_BCD
\getenv keys BCJ_SERVICE_KEYS
\getenv scratch BCJ_SCRATCH
\getenv josetool BCJ_JOSE_TOOL
\set d :scratch/pgtap_retention
\set mk `rm -rf :d && mkdir -p :d`

BEGIN;
SELECT plan(43);

SELECT bc_join.create_tenant('acme') AS tenant \gset
SELECT bc_join.create_site(:'tenant', 'dc-1') AS site \gset
SELECT bc_join.create_pool(:'tenant', :'site', 'workers') AS pool \gset

\ir lib/fixture.sql
-- a synthetic node certificate: issued and expiring days ago (negative: in the past)
CREATE FUNCTION pg_temp.cert(node text, issued_days numeric, expires_days numeric, revoked boolean DEFAULT false)
RETURNS text LANGUAGE sql AS $$
	INSERT INTO bc_join.node_certs (serial, node_id, identity_generation, not_before, not_after,
									spki_sha256, certificate, issued_at, revoked_at, revocation_reason)
	SELECT md5(random()::text), node, 1, t + (expires_days - 1) * interval '1 day', t + expires_days * interval '1 day',
		   sha256(convert_to(random()::text, 'UTF8')), '\x00', t + issued_days * interval '1 day',
		   CASE WHEN revoked THEN t + issued_days * interval '1 day' END,
		   CASE WHEN revoked THEN 'keyCompromise' END
	FROM bc_join.compute_now() t
	RETURNING serial $$;
CREATE FUNCTION pg_temp.session(node text, ref text, provisioned_days numeric) RETURNS text LANGUAGE sql AS $$
	INSERT INTO bc_join.sessions (id, node_id, tenant_id, session_ref, provisioned_at)
	SELECT bc_join.new_id('ses'), n.id, n.tenant_id, ref, bc_join.compute_now() + provisioned_days * interval '1 day'
	FROM bc_join.nodes n WHERE n.id = node RETURNING id $$;
CREATE FUNCTION pg_temp.session_cert(session text, expires_days numeric) RETURNS text LANGUAGE sql AS $$
	INSERT INTO bc_join.session_certs (serial, session_id, not_before, not_after, spki_sha256, certificate)
	SELECT md5(random()::text), session, t - interval '1 hour', t, sha256(convert_to(random()::text, 'UTF8')), '\x00'
	FROM (SELECT bc_join.compute_now() + expires_days * interval '1 day' AS t) x RETURNING serial $$;
CREATE FUNCTION pg_temp.request(state text, decided_days numeric, expires_days numeric) RETURNS text LANGUAGE sql AS $$
	INSERT INTO bc_join.join_requests (id, tenant_id, attestor, role, csr_sha256, state, created_at,
									   decided_at, consumed_at, expires_at)
	SELECT bc_join.new_id('jr'), 'root', 'approve-me', 'node', sha256(convert_to(random()::text, 'UTF8')), state,
		   t - interval '60 days', CASE WHEN state <> 'pending' THEN t + decided_days * interval '1 day' END,
		   CASE WHEN state = 'consumed' THEN t + decided_days * interval '1 day' END,
		   t + expires_days * interval '1 day'
	FROM bc_join.compute_now() t RETURNING id $$;

------------------------------------------------------------------ defaults
SELECT is(ARRAY[bc_join.setting_interval('retain_events'), bc_join.setting_interval('retain_expired_certificates'),
				bc_join.setting_interval('retain_sessions'), bc_join.setting_interval('retain_join_requests'),
				bc_join.setting_interval('stale_after')],
		  ARRAY['90 days', '30 days', '7 days', '30 days', '3 days']::interval[],
		  'the defaults: events 90 days, certificates 30 days past notAfter, sessions 7, join requests 30, stale after 3');
SELECT throws_ok($$SELECT bc_join.setting_interval('key_dir')$$, '22023', NULL, 'only the retention settings are read');

-- A node joins with a token: seen when it joins, adopting.
SELECT bc_join.create_join_token(:'tenant', :'pool', uses => 2) AS tok \gset
\set jreq `:bcd join-request --service-keys :keys --token :'tok' --out-dir :d/n`
SELECT bc_join(:'jreq') AS jr \gset
SELECT pg_temp.payload(:'jr')->>'serial' AS s1, pg_temp.payload(:'jr')->>'nodeId' AS node \gset
SELECT is(n.state || ' ' || (n.last_seen_at = bc_join.compute_now()), 'adopting true',
		  'a node that joined is adopting, seen at its join') FROM bc_join.nodes n WHERE n.id = :'node';
-- and a second node (the token expires in an hour)
\set jreq2 `:bcd join-request --service-keys :keys --token :'tok' --out-dir :d/n2`
SELECT bc_join(:'jreq2') AS jr2 \gset
SELECT pg_temp.payload(:'jr2')->>'serial' AS n2s, pg_temp.payload(:'jr2')->>'nodeId' AS node2 \gset

-------------------------------------------------------------------- events
INSERT INTO bc_join.events (tenant_id, type, at)
	SELECT 'root', 'retention.test', bc_join.compute_now() - CASE WHEN i <= 3 THEN interval '91 days' ELSE interval '89 days' END
	FROM generate_series(1, 5) i;
SELECT count(*) AS audit_rows FROM bc_join.audit_log \gset
SELECT is(ARRAY[bc_join.prune_events(2), bc_join.prune_events(2), bc_join.prune_events(2)], ARRAY[2, 1, 0]::bigint[],
		  'prune_events deletes events older than 90 days, two, then the rest, then none');
SELECT is((SELECT count(*) FROM bc_join.events WHERE type = 'retention.test'), 2::bigint, 'younger events stay');
SELECT ok(EXISTS (SELECT 1 FROM bc_join.events WHERE type = 'node.joined' AND payload->>'nodeId' = :'node'),
		  'today''s events stay');
SET LOCAL bc_join.retain_events = '88d';
SELECT is(bc_join.prune_events(10), 2::bigint, 'bc_join.retain_events sets the retention');
RESET bc_join.retain_events;

-------------------------------------------------------------- certificates
-- node: s1 (live, its newest), two expired 31 days ago (one revoked), one
-- expired 29 days ago, one revoked and not expired.
SELECT pg_temp.cert(:'node', -33, -31) AS c_old1, pg_temp.cert(:'node', -33, -31, true) AS c_old2,
	   pg_temp.cert(:'node', -31, -29) AS c_young, pg_temp.cert(:'node', -0.5, 0.25, true) AS c_revoked \gset
-- another node whose only (newest) certificate expired 60 days ago
INSERT INTO bc_join.nodes (id, tenant_id, site_id, pool_id, role, trust, attestor)
	VALUES ('node_r3', :'tenant', :'site', :'pool', 'node', 'platform', 'join-token');
SELECT pg_temp.cert('node_r3', -61, -60) AS c_only \gset
SET LOCAL bc_join.x509pop_grace = '60d';
SELECT is(bc_join.prune_certificates(10), 0::bigint,
		  'within bc_join.x509pop_grace node certificates stay (x509pop reclaims by them)');
RESET bc_join.x509pop_grace;
-- a session certificate expired 31 days ago, of a session provisioned 32 days ago
SELECT pg_temp.session(:'node', 'ancient', -32) AS ses_ancient \gset
SELECT pg_temp.session_cert(:'ses_ancient', -31) AS sc_old \gset
SELECT is(ARRAY[bc_join.prune_certificates(2), bc_join.prune_certificates(2), bc_join.prune_certificates(2)],
		  ARRAY[2, 1, 0]::bigint[], 'prune_certificates: two node certificates, then the session one, then none');
SELECT is(ARRAY(SELECT serial FROM bc_join.node_certs WHERE serial IN (:'c_old1', :'c_old2')), '{}'::text[],
		  'node certificates expired more than 30 days ago go, revoked or not');
SELECT ok(NOT EXISTS (SELECT 1 FROM bc_join.session_certs WHERE serial = :'sc_old'), 'and session certificates');
SELECT ok(EXISTS (SELECT 1 FROM bc_join.node_certs WHERE serial = :'s1' AND revoked_at IS NULL),
		  'the node''s current live certificate stays');
SELECT ok(EXISTS (SELECT 1 FROM bc_join.node_certs WHERE serial = :'c_revoked'), 'a revoked certificate not yet expired stays');
SELECT ok(EXISTS (SELECT 1 FROM bc_join.revoked_certificates WHERE serial = :'c_revoked' AND NOT expired),
		  'and the CRL still lists it');
SELECT ok(EXISTS (SELECT 1 FROM bc_join.node_certs WHERE serial = :'c_young'), 'one expired 29 days ago stays');
SELECT ok(EXISTS (SELECT 1 FROM bc_join.node_certs WHERE serial = :'c_only'), 'a node''s newest certificate stays, however old');

------------------------------------------------------------------ sessions
-- ancient: no certificate now; old: its certificate expired 8 days ago;
-- recent: 6 days ago; fresh: provisioned an hour ago, no certificate yet.
SELECT pg_temp.session(:'node', 'old', -10) AS ses_old, pg_temp.session(:'node', 'recent', -10) AS ses_recent,
	   pg_temp.session(:'node', 'fresh', -0.04) AS ses_fresh \gset
SELECT pg_temp.session_cert(:'ses_old', -8) AS sc_8, pg_temp.session_cert(:'ses_recent', -6) AS sc_6 \gset
SELECT is(ARRAY[bc_join.prune_sessions(1), bc_join.prune_sessions(1), bc_join.prune_sessions(1)], ARRAY[1, 1, 0]::bigint[],
		  'prune_sessions deletes sessions without a certificate for 7 days, one a call');
SELECT is(ARRAY(SELECT session_ref::text FROM bc_join.sessions WHERE node_id = :'node' ORDER BY 1), ARRAY['fresh', 'recent'],
		  'a session whose certificate expired 6 days ago stays, and one just provisioned');
SELECT ok(NOT EXISTS (SELECT 1 FROM bc_join.session_certs WHERE serial = :'sc_8'), 'a pruned session takes its certificates');

------------------------------------------------------------- join requests
SELECT pg_temp.request('rejected', -31, -40) AS jr_rej, pg_temp.request('consumed', -31, -40) AS jr_used,
	   pg_temp.request('pending', NULL, -31) AS jr_expired, pg_temp.request('approved', -40, -31) AS jr_unused,
	   pg_temp.request('pending', NULL, 0.1) AS jr_pending, pg_temp.request('rejected', -29, -40) AS jr_young \gset
SELECT is(ARRAY[bc_join.prune_join_requests(2), bc_join.prune_join_requests(2), bc_join.prune_join_requests(2)],
		  ARRAY[2, 2, 0]::bigint[], 'prune_join_requests: decided and expired requests older than 30 days, in batches');
SELECT is(ARRAY(SELECT id FROM bc_join.join_requests WHERE id IN (:'jr_rej', :'jr_used', :'jr_expired', :'jr_unused')),
		  '{}'::text[], 'rejected, consumed, expired pending and expired approved requests went');
SELECT ok(EXISTS (SELECT 1 FROM bc_join.join_requests WHERE id = :'jr_pending'), 'a pending request stays');
SELECT ok(EXISTS (SELECT 1 FROM bc_join.pending_join_requests WHERE id = :'jr_pending'), 'and waits for an operator');
SELECT ok(EXISTS (SELECT 1 FROM bc_join.join_requests WHERE id = :'jr_young'), 'one rejected 29 days ago stays');

-------------------------------------------------------------------- prune()
INSERT INTO bc_join.events (tenant_id, type, at) VALUES ('root', 'retention.test', bc_join.compute_now() - interval '100 days');
SELECT pg_temp.request('rejected', -50, -60) AS jr_more \gset
SELECT is(bc_join.prune(100) - 'attestationUses', '{"events": 1, "certificates": 0, "sessions": 0, "joinRequests": 1}',
		  'prune() runs every prune and returns the counts');
SELECT ok(bc_join.prune(100) ?& ARRAY['events', 'certificates', 'sessions', 'joinRequests', 'attestationUses'],
		  'with the attestation uses too');
SELECT is(bc_join.prune(100), '{"events": 0, "certificates": 0, "sessions": 0, "joinRequests": 0, "attestationUses": 0}',
		  'and all zero once nothing is past its retention');
SELECT is((SELECT count(*) FROM bc_join.audit_log), :'audit_rows'::bigint, 'no prune touches the audit log');
SELECT ok(bc_join.verify_audit_log(), 'which still verifies');
SELECT throws_ok('SELECT bc_join.prune(0)', '22023', NULL, 'a batch below 1 is refused');
SELECT throws_ok('SELECT bc_join.prune_events(1000001)', '22023', NULL, 'and one above 1000000');

--------------------------------------------------------------- last seen
CREATE FUNCTION pg_temp.renew_pp(serial text, req jsonb) RETURNS text LANGUAGE sql AS $$
	SELECT jsonb_build_object('purpose', 'renew', 'serial', serial,
							  'csrSha256', bc_join.b64url_encode(sha256(bc_join.b64url_decode(req->>'csr'))),
							  'iat', extract(epoch FROM bc_join.compute_now())::bigint)::text $$;
CREATE FUNCTION pg_temp.session_pp(serial text, req jsonb, session text) RETURNS text LANGUAGE sql AS $$
	SELECT jsonb_build_object('purpose', 'session', 'serial', serial,
		'csrSha256', bc_join.b64url_encode(sha256(bc_join.b64url_decode(req->>'csr'))),
		'iat', extract(epoch FROM bc_join.compute_now())::bigint, 'session', session)::text $$;

-- an hour later the node renews
SET LOCAL bc_join.clock_offset = 3600;
\set r1 `:bcd join-request --service-keys :keys --out-dir :d/k2`
SELECT pg_temp.renew_pp(:'s1', :'r1') AS pp \gset
\set proof `printf %s :'pp' | :josetool sign :d/n/node.key`
SELECT bc_join.renew(jsonb_build_object('csr', :'r1'::jsonb->>'csr', 'proof', :'proof')) AS rr \gset
SELECT is(:'rr'::jsonb->>'status', 'issued', 'the node renews an hour later');
SELECT pg_temp.payload(:'rr')->>'serial' AS s2 \gset
SELECT is(n.last_seen_at, bc_join.compute_now(), 'a renewal moves last_seen_at') FROM bc_join.nodes n WHERE n.id = :'node';
SELECT is(n.state, 'active', 'and makes the adopting node active') FROM bc_join.nodes n WHERE n.id = :'node';

-- the second node asks for a session 100 s later
SET LOCAL bc_join.clock_offset = 3700;
\set q1 `:bcd join-request --service-keys :keys --out-dir :d/q1`
SELECT pg_temp.session_pp(:'n2s', :'q1', 'sess-1') AS sp \gset
\set sproof `printf %s :'sp' | :josetool sign :d/n2/node.key`
SELECT is(bc_join.issue_session(jsonb_build_object('csr', :'q1'::jsonb->>'csr', 'proof', :'sproof'))->>'status', 'issued',
		  'the second node gets a session');
SELECT is(n.state || ' ' || (n.last_seen_at = bc_join.compute_now()), 'active true',
		  'a session moves last_seen_at and makes the node active') FROM bc_join.nodes n WHERE n.id = :'node2';
SET LOCAL bc_join.clock_offset = 3730;
\set q2 `:bcd join-request --service-keys :keys --out-dir :d/q2`
SELECT pg_temp.session_pp(:'n2s', :'q2', 'sess-2') AS sp2 \gset
\set sproof2 `printf %s :'sp2' | :josetool sign :d/n2/node.key`
SELECT is(bc_join.issue_session(jsonb_build_object('csr', :'q2'::jsonb->>'csr', 'proof', :'sproof2'))->>'status', 'issued',
		  'another session 30 s later');
SELECT is(n.last_seen_at, bc_join.compute_now() - interval '30 seconds',
		  'does not write last_seen_at again: sessions move it at most once a minute') FROM bc_join.nodes n WHERE n.id = :'node2';

-------------------------------------------------------------- stale nodes
-- three days and 50 s after the renewal: the first node (seen at +3600 s) and
-- node_r3 (seen at +0) are stale, the second (seen at +3700 s) is not.
SET LOCAL bc_join.clock_offset = 262850;
SELECT is(ARRAY(SELECT id FROM bc_join.stale_nodes WHERE tenant_id = :'tenant'), ARRAY['node_r3', :'node'],
		  'stale_nodes lists the live nodes not seen for 3 days, longest unseen first');
SELECT is(s.last_not_after, c.not_after, 'with their newest certificate''s notAfter')
	FROM bc_join.stale_nodes s JOIN bc_join.node_certs c ON c.serial = :'s2' WHERE s.id = :'node';
SELECT is(s.unseen_for, interval '3 days 50 seconds', 'and how long they went unseen')
	FROM bc_join.stale_nodes s WHERE s.id = :'node';
SELECT bc_join.retire_node('node_r3');
SELECT is(ARRAY(SELECT id FROM bc_join.stale_nodes WHERE tenant_id = :'tenant'), ARRAY[:'node'], 'a retired node is not listed');
SET LOCAL bc_join.stale_after = '4d';
SELECT is(ARRAY(SELECT id FROM bc_join.stale_nodes WHERE tenant_id = :'tenant'), '{}'::text[], 'bc_join.stale_after sets the bound');

SELECT * FROM finish();
ROLLBACK;
