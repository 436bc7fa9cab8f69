-- jwt_svid.sql: bc_join.issue_jwt_svid(), a joined node asking for a
-- JWT-SVID with a proof by its node key (#33), and bc_join.spiffe_bundle().
\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only on
\getenv bcd BCJ_BCD
\getenv keys BCJ_SERVICE_KEYS
\getenv scratch BCJ_SCRATCH
\getenv josetool BCJ_JOSE_TOOL
\getenv keydir BCJ_KEY_DIR
\getenv ca BCJ_NODE_CA
\set d :scratch/pgtap_jwt_svid
\set mk `rm -rf :d && mkdir -p :d`
\set jwtjwk `:josetool jwk :keydir/jwt-svid.key`
\set jwtkid `:josetool thumbprint :keydir/jwt-svid.key`
-- the root: the last certificate of node-ca.crt, DER in standard base64
\set rootb64 `awk '/BEGIN CERT/{b=""} {b=b $0 "\n"} /END CERT/{last=b} END{printf "%s", last}' :ca | openssl x509 -outform DER | base64 -w0`
\set rootjwk `awk '/BEGIN CERT/{b=""} {b=b $0 "\n"} /END CERT/{last=b} END{printf "%s", last}' :ca | /usr/bin/python3 -c "import sys,json,base64; from cryptography import x509; n=x509.load_pem_x509_certificate(sys.stdin.buffer.read()).public_key().public_numbers(); e=lambda v: base64.urlsafe_b64encode(v.to_bytes(32,'big')).rstrip(b'=').decode(); print(json.dumps(dict(kty='EC',crv='P-256',x=e(n.x),y=e(n.y))))"`
\set seq `stat -c %Y :keydir :keydir/* | sort -n | tail -1`

BEGIN;
SELECT plan(44);

SELECT bc_join.create_tenant('acme') AS tenant \gset
SELECT bc_join.create_site(:'tenant', 'dc-1') AS site \gset
SELECT bc_join.create_pool(:'tenant', :'site', 'workers') AS pool \gset
\ir lib/fixture.sql
CREATE FUNCTION pg_temp.part(jws text, n int) RETURNS text LANGUAGE sql AS $$
	SELECT convert_from(bc_join.b64url_decode(split_part(jws, '.', n)), 'UTF8') $$;
CREATE FUNCTION pg_temp.pp(serial text, aud jsonb, session text, skew int DEFAULT 0,
						   purpose text DEFAULT 'jwt-svid', context text DEFAULT NULL)
RETURNS text LANGUAGE sql AS $$
	SELECT jsonb_strip_nulls(jsonb_build_object('purpose', purpose, 'serial', serial,
		'iat', extract(epoch FROM bc_join.compute_now())::bigint + skew,
		'audience', aud, 'session', session, 'context', context))::text $$;
CREATE FUNCTION pg_temp.ask(proof text) RETURNS jsonb LANGUAGE sql AS $$
	SELECT bc_join.issue_jwt_svid(jsonb_build_object('proof', proof)) $$;
CREATE TEMP TABLE stats0 AS
	SELECT outcome, calls FROM bc_join.attestor_statistics WHERE attestor = 'jwt-svid';

SELECT bc_join.create_join_token(:'tenant', :'pool') AS tok \gset
\set jreq `:bcd join-request --service-keys :keys --token :'tok' --out-dir :d/n`
SELECT bc_join(:'jreq') AS jr \gset
SELECT pg_temp.payload(:'jr')->>'serial' AS ns, pg_temp.payload(:'jr')->>'nodeId' AS node,
	   pg_temp.payload(:'jr')->>'spiffeId' AS nodeid \gset

------------------------------------------------------------- a JWT-SVID
SELECT pg_temp.pp(:'ns', '["spiffe://test.bc-join.local/svc/db", "https://api.example"]', 'sess-1', 0,
				  'jwt-svid', 'ctx-a') AS p1 \gset
\set proof1 `printf %s :'p1' | :josetool sign :d/n/node.key`
SELECT pg_temp.ask(:'proof1') AS r1 \gset
SELECT is(:'r1'::jsonb->>'status', 'issued', 'a joined node gets a JWT-SVID');
SELECT pg_temp.payload(:'r1') AS a1 \gset
SELECT :'a1'::jsonb->>'sessionId' AS sid, :'a1'::jsonb->>'token' AS tok1 \gset
SELECT is((SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(:'a1'::jsonb) k),
		  ARRAY['context', 'expiresAt', 'issuedAt', 'nodeId', 'proofSha256', 'purpose', 'session',
				'sessionId', 'spiffeId', 'status', 'tenantId', 'token'],
		  'the answer has exactly the members of INTERFACE.md');
SELECT is(:'a1'::jsonb->>'purpose', 'jwt-svid', 'purpose jwt-svid');
SELECT is(:'a1'::jsonb->>'proofSha256', bc_join.b64url_encode(sha256(convert_to(:'proof1', 'UTF8'))),
		  'bound to the proof by its SHA-256');
SELECT is(:'a1'::jsonb->>'nodeId' || ' ' || (:'a1'::jsonb->>'tenantId'), :'node' || ' ' || :'tenant', 'node and tenant');
SELECT is(:'a1'::jsonb->>'spiffeId', :'nodeid' || '/session/' || :'sid', 'its SPIFFE ID is the session''s, under the node''s');
SELECT is(:'a1'::jsonb->>'session' || '/' || (:'a1'::jsonb->>'context'), 'sess-1/ctx-a', 'session and context');
SELECT is(pg_temp.part(:'tok1', 1), '{"alg":"ES256","kid":"' || :'jwtkid' || '","typ":"JWT"}',
		  'the header is {"alg":"ES256","kid":<jwt-svid.key''s kid>,"typ":"JWT"}, byte for byte');
SELECT is(pg_temp.part(:'tok1', 2)::jsonb,
		  jsonb_build_object('sub', :'a1'::jsonb->>'spiffeId',
							 'aud', '["spiffe://test.bc-join.local/svc/db", "https://api.example"]'::jsonb,
							 'exp', floor(extract(epoch FROM bc_join.compute_now()))::bigint + 300,
							 'iat', floor(extract(epoch FROM bc_join.compute_now()))::bigint),
		  'the claims are exactly sub, aud (an array), exp (iat + 300), iat');
SELECT is(:'a1'::jsonb->>'expiresAt', to_char((bc_join.compute_now() + interval '300 s') AT TIME ZONE 'UTC',
		  'YYYY-MM-DD"T"HH24:MI:SS"Z"'), 'expiresAt is exp');
SELECT is(s.node_id || ' ' || s.session_ref || ' ' || s.context_ref, :'node' || ' sess-1 ctx-a',
		  'the session identity is reserved in bc_join.sessions') FROM bc_join.sessions s WHERE s.id = :'sid';
SELECT bc_join.spiffe_bundle() AS bundle \gset
\set bfile :d/bundle.json
\set tfile :d/token
\set w `printf '%s' :'bundle' > :bfile; printf '%s' :'tok1' > :tfile`
\set ver `/usr/bin/python3 -c "import json,sys; from jwcrypto import jwk, jwt; b=json.load(open(sys.argv[1])); k=[x for x in b['keys'] if x['use']=='jwt-svid'][0]; ks=jwk.JWKSet(); ks.add(jwk.JWK(**{m: k[m] for m in ('kty','crv','x','y','kid')})); t=jwt.JWT(jwt=open(sys.argv[2]).read(), key=ks, algs=['ES256'], check_claims={'exp': None}); print(json.loads(t.claims)['sub'])" :bfile :tfile 2>&1`
SELECT is(:'ver'::text, :'a1'::jsonb->>'spiffeId', 'jwcrypto verifies it with the bundle''s jwt-svid key');

-- the same session again: the same identity
SELECT pg_temp.pp(:'ns', '["x"]', 'sess-1', 1, 'jwt-svid', 'ctx-a') AS p2 \gset
\set proof2 `printf %s :'p2' | :josetool sign :d/n/node.key`
SELECT is(pg_temp.payload(pg_temp.ask(:'proof2'))->>'sessionId', :'sid', 'the same session keeps its identity');
SELECT is((SELECT count(*) FROM bc_join.sessions), 1::bigint, 'reserved once');

-- bc_join.jwt_svid_ttl
SET LOCAL bc_join.jwt_svid_ttl = 60;
SELECT pg_temp.pp(:'ns', '["x"]', 'sess-1', 2) AS p3 \gset
\set proof3 `printf %s :'p3' | :josetool sign :d/n/node.key`
SELECT pg_temp.part(pg_temp.payload(pg_temp.ask(:'proof3'))->>'token', 2)::jsonb AS c3 \gset
SELECT is((:'c3'::jsonb->>'exp')::bigint - (:'c3'::jsonb->>'iat')::bigint, 60::bigint, 'bc_join.jwt_svid_ttl 60: it lives 60 s');
RESET bc_join.jwt_svid_ttl;
SELECT throws_ok($$SET bc_join.jwt_svid_ttl = 59$$, '22023', NULL, 'bc_join.jwt_svid_ttl is at least 60');
SELECT throws_ok($$SET bc_join.jwt_svid_ttl = 3601$$, '22023', NULL, 'and at most 3600');

----------------------------------------------------------------- refusals
SELECT is(pg_temp.ask(:'proof1'), :'refused'::jsonb, 'a replayed proof: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' jwt-svid:reused', 'refused jwt-svid:reused');

CREATE FUNCTION pg_temp.bad_aud(aud jsonb, skew int) RETURNS text LANGUAGE sql AS $$
	SELECT pg_temp.pp(current_setting('bcj.ns'), aud, 'sess-aud', skew) $$;
SELECT set_config('bcj.ns', :'ns', true) IS NOT NULL AS x \gset
SELECT pg_temp.bad_aud('[]', 10) AS a0, pg_temp.bad_aud(to_jsonb(array['1','2','3','4','5','6','7','8','9']), 11) AS a9,
	   pg_temp.bad_aud('["a","a"]', 12) AS adup, pg_temp.bad_aud(to_jsonb(array[repeat('a', 257)]), 13) AS along,
	   pg_temp.bad_aud(to_jsonb(array[E'a\tb']), 14) AS actl, pg_temp.bad_aud(to_jsonb(array['é']), 15) AS autf,
	   pg_temp.bad_aud('"a"', 16) AS astr, pg_temp.bad_aud('[1]', 17) AS anum, pg_temp.bad_aud('[""]', 18) AS aempty \gset
\set pa0 `printf %s :'a0' | :josetool sign :d/n/node.key`
\set pa9 `printf %s :'a9' | :josetool sign :d/n/node.key`
\set padup `printf %s :'adup' | :josetool sign :d/n/node.key`
\set palong `printf %s :'along' | :josetool sign :d/n/node.key`
\set pactl `printf %s :'actl' | :josetool sign :d/n/node.key`
\set pautf `printf %s :'autf' | :josetool sign :d/n/node.key`
\set pastr `printf %s :'astr' | :josetool sign :d/n/node.key`
\set panum `printf %s :'anum' | :josetool sign :d/n/node.key`
\set paempty `printf %s :'aempty' | :josetool sign :d/n/node.key`
SELECT is(ARRAY[pg_temp.ask(:'pa0'), pg_temp.ask(:'pa9'), pg_temp.ask(:'padup'), pg_temp.ask(:'palong'),
				pg_temp.ask(:'pactl'), pg_temp.ask(:'pautf'), pg_temp.ask(:'pastr'), pg_temp.ask(:'panum'),
				pg_temp.ask(:'paempty')],
		  array_fill(:'refused'::jsonb, ARRAY[9]),
		  'an audience empty, of 9, with a duplicate, over 256, not printable ASCII, not an array of strings, or empty: the one refusal');
SELECT is((SELECT array_agg(payload->>'refusal') FROM (SELECT payload FROM bc_join.events
		   WHERE type = 'security.join.refused' ORDER BY id DESC LIMIT 9) e),
		  array_fill('jwt-svid:bad-audience'::text, ARRAY[9]), 'each refused jwt-svid:bad-audience');
SELECT is((SELECT count(*) FROM bc_join.sessions WHERE session_ref = 'sess-aud'), 0::bigint,
		  'a refused request reserves no session');
SELECT is((SELECT count(*) FROM bc_join.attestation_uses WHERE attestor = 'jwt-svid'), 3::bigint,
		  'and spends no proof (only the three issued are recorded)');
-- 256 printable characters and 8 audiences are fine
SELECT pg_temp.bad_aud(to_jsonb(array[repeat('~', 256), ' ', '2', '3', '4', '5', '6', '7']), 19) AS aok \gset
\set paok `printf %s :'aok' | :josetool sign :d/n/node.key`
SELECT is(pg_temp.ask(:'paok')->>'status', 'issued', '8 audiences, one of 256 printable characters: issued');

SELECT pg_temp.pp(:'ns', '["x"]', 'sess-2', 20, 'session') AS pw \gset
\set pwrong `printf %s :'pw' | :josetool sign :d/n/node.key`
SELECT is(pg_temp.ask(:'pwrong'), :'refused'::jsonb, 'a proof for another purpose: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' jwt-svid:malformed-proof', 'refused jwt-svid:malformed-proof');

SELECT pg_temp.pp(:'ns', '["x"]', 'sess-2', -400) AS pold, pg_temp.pp(:'ns', '["x"]', 'sess-2', 400) AS pnew \gset
\set prold `printf %s :'pold' | :josetool sign :d/n/node.key`
\set prnew `printf %s :'pnew' | :josetool sign :d/n/node.key`
SELECT is(ARRAY[pg_temp.ask(:'prold'), pg_temp.ask(:'prnew')], ARRAY[:'refused'::jsonb, :'refused'::jsonb],
		  'an iat 400 s past or ahead: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' jwt-svid:stale-proof', 'refused jwt-svid:stale-proof');

-- tampered: the payload changed after signing
SELECT pg_temp.pp(:'ns', '["x"]', 'sess-2', 21) AS pt \gset
\set prt `printf %s :'pt' | :josetool sign :d/n/node.key`
SELECT split_part(:'prt', '.', 1) || '.' ||
	   bc_join.b64url_encode(convert_to(replace(:'pt', 'sess-2', 'sess-9'), 'UTF8')) || '.' ||
	   split_part(:'prt', '.', 3) AS tampered \gset
SELECT is(pg_temp.ask(:'tampered'), :'refused'::jsonb, 'a tampered proof: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root jwt-svid:proof', 'refused jwt-svid:proof, root stream');

-- no CSR-less shortcut for sessions: issue_session still requires its CSR
SELECT throws_ok(format($$SELECT bc_join.issue_session(jsonb_build_object('proof', %L))$$, :'prt'),
				 '22023', NULL, 'issue_session without a CSR is still 22023');

-- near the node certificate's end, the JWT-SVID ends with it
SET LOCAL bc_join.clock_offset = 86300;
SELECT pg_temp.pp(:'ns', '["x"]', 'sess-1') AS pe \gset
\set pre `printf %s :'pe' | :josetool sign :d/n/node.key`
SELECT pg_temp.part(pg_temp.payload(pg_temp.ask(:'pre'))->>'token', 2)::jsonb AS ce \gset
SELECT ok(to_timestamp((:'ce'::jsonb->>'exp')::bigint) <= n.not_after, 'a JWT-SVID never outlives the node certificate')
	FROM bc_join.node_certs n WHERE n.serial = :'ns';
RESET bc_join.clock_offset;

-- superseded: the node's identity moved on
UPDATE bc_join.nodes SET identity_generation = identity_generation + 1 WHERE id = :'node';
SELECT pg_temp.pp(:'ns', '["x"]', 'sess-1', 22) AS ps \gset
\set prs `printf %s :'ps' | :josetool sign :d/n/node.key`
SELECT is(pg_temp.ask(:'prs'), :'refused'::jsonb, 'a superseded node certificate: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' jwt-svid:superseded', 'refused jwt-svid:superseded');
UPDATE bc_join.nodes SET identity_generation = identity_generation - 1 WHERE id = :'node';

SELECT bc_join.revoke_certificate(:'ns', 'keyCompromise') IS NOT NULL AS rv \gset
SELECT pg_temp.pp(:'ns', '["x"]', 'sess-1', 23) AS pr \gset
\set prr `printf %s :'pr' | :josetool sign :d/n/node.key`
SELECT is(pg_temp.ask(:'prr'), :'refused'::jsonb, 'a revoked node certificate: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' jwt-svid:revoked', 'refused jwt-svid:revoked');

SELECT is((SELECT array_agg(outcome || '=' || (s.calls - coalesce(z.calls, 0)) ORDER BY outcome)
		   FROM bc_join.attestor_statistics s LEFT JOIN stats0 z USING (outcome) WHERE s.attestor = 'jwt-svid'),
		  ARRAY['admitted=5', 'refused=16'], 'counted in attestor_statistics as attestor jwt-svid');

----------------------------------------------------------- no jwt-svid.key
\set nokey :d/keys-nojwt
\set cp `cp -a :keydir :nokey && rm :nokey/jwt-svid.key`
SET LOCAL bc_join.key_dir = :'nokey';
SELECT throws_ok(format($$SELECT bc_join.issue_jwt_svid(jsonb_build_object('proof', %L))$$, :'prr'),
				 'F0000', 'the key directory has no jwt-svid.key', 'without jwt-svid.key: INVALID_CONFIG');
SELECT is(jsonb_array_length(bc_join.spiffe_bundle()->'keys'), 1, 'and the bundle lists no jwt-svid key');
RESET bc_join.key_dir;

------------------------------------------------------------- the bundle
SELECT is((SELECT count(*) FROM jsonb_object_keys(bc_join.spiffe_bundle())), 3::bigint,
		  'the bundle is {keys, spiffe_sequence, spiffe_refresh_hint}');
SELECT is(bc_join.spiffe_bundle()->'keys'->0,
		  :'rootjwk'::jsonb || jsonb_build_object('use', 'x509-svid', 'x5c', jsonb_build_array(:'rootb64')),
		  'an x509-svid key: the node CA root, its JWK and x5c (standard base64 DER)');
SELECT is(bc_join.spiffe_bundle()->'keys'->1,
		  :'jwtjwk'::jsonb || jsonb_build_object('use', 'jwt-svid', 'kid', :'jwtkid'),
		  'the jwt-svid key: jwt-svid.key''s JWK with its kid');
SELECT ok((bc_join.spiffe_bundle()->>'spiffe_sequence')::bigint >= :'seq'::bigint
		  AND EXISTS (SELECT 1 FROM bc_join.own_bundle_sequences o
					  WHERE o.sequence = (bc_join.spiffe_bundle()->>'spiffe_sequence')::bigint),
		  'spiffe_sequence: the one own_bundle_sequences gave these keys, not below the key directory''s newest mtime');
SELECT is((bc_join.spiffe_bundle()->>'spiffe_refresh_hint')::int, 300, 'spiffe_refresh_hint: 300 s');

SELECT * FROM finish();
ROLLBACK;
