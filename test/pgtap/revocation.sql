-- revocation.sql: revoke_certificate and revoke_node (node and session
-- certificates, audited, evented), the revoked_certificates view, and the
-- node CA's CRL that openssl verify -crl_check uses to reject a revoked
-- certificate; the CRL distribution point when bc_join.crl_url is set.
-- Reasons are RFC 5280's CRLReason names, carried into each entry's
-- reasonCode (read back with openssl crl -text); the service's own reasons
-- and anything else are refused.
\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only on
\getenv bcd BCJ_BCD
\getenv keys BCJ_SERVICE_KEYS
\getenv scratch BCJ_SCRATCH
\getenv josetool BCJ_JOSE_TOOL
\getenv ca BCJ_NODE_CA
\set d :scratch/pgtap_revocation
\set mk `rm -rf :d && mkdir -p :d`

BEGIN;
SELECT plan(40);

SELECT bc_join.create_tenant('acme') AS tenant \gset
SELECT bc_join.create_site(:'tenant', 'dc-1') AS site \gset
SELECT bc_join.create_pool(:'tenant', :'site', 'workers') AS pool \gset
\ir lib/fixture.sql
CREATE FUNCTION pg_temp.leaf_pem(r jsonb) RETURNS text LANGUAGE sql AS $$
	SELECT '-----BEGIN CERTIFICATE-----' || E'\n' || (pg_temp.payload(r)->'certificateChain'->>0) || E'\n'
		   || '-----END CERTIFICATE-----' $$;
CREATE FUNCTION pg_temp.pp(serial text, req jsonb, session text) RETURNS text LANGUAGE sql AS $$
	SELECT jsonb_build_object('purpose', 'session', 'serial', serial,
		'csrSha256', bc_join.b64url_encode(sha256(bc_join.b64url_decode(req->>'csr'))),
		'iat', extract(epoch FROM bc_join.compute_now())::bigint, 'session', session)::text $$;

-- Two nodes join; the first gets a session certificate.
SELECT bc_join.create_join_token(:'tenant', :'pool', uses => 2) AS tok \gset
\set j1 `:bcd join-request --service-keys :keys --token :'tok' --out-dir :d/n1`
\set j2 `:bcd join-request --service-keys :keys --token :'tok' --out-dir :d/n2`
SELECT bc_join(:'j1') AS r1 \gset
SELECT bc_join(:'j2') AS r2 \gset
SELECT pg_temp.payload(:'r1')->>'serial' AS s1, pg_temp.payload(:'r1')->>'nodeId' AS node1,
	   pg_temp.payload(:'r2')->>'serial' AS s2, pg_temp.payload(:'r2')->>'nodeId' AS node2 \gset
\set sreq `:bcd join-request --service-keys :keys --out-dir :d/s1`
SELECT pg_temp.pp(:'s1', :'sreq', 'sess-1') AS p1 \gset
\set proof1 `printf %s :'p1' | :josetool sign :d/n1/node.key`
SELECT pg_temp.payload(bc_join.issue_session(jsonb_build_object('csr', :'sreq'::jsonb->>'csr', 'proof', :'proof1')))->>'serial' AS ss \gset
SELECT is(c.node_serial, :'s1', 'a session certificate records the node certificate it was asked with')
	FROM bc_join.session_certs c WHERE c.serial = :'ss';

\o :d/leaf1.pem
SELECT pg_temp.leaf_pem(:'r1');
\o :d/leaf2.pem
SELECT pg_temp.leaf_pem(:'r2');
\o :d/crl0.pem
SELECT bc_join.crl_pem();
\o
\set v0 `openssl verify -crl_check -CRLfile :d/crl0.pem -CAfile :ca :d/leaf1.pem 2>&1; echo "exit=$?"`
SELECT ok(:'v0' ~ 'leaf1.pem: OK' AND :'v0' ~ 'exit=0', 'before any revocation openssl verify -crl_check accepts the certificate');
\set crltext `openssl crl -in :d/crl0.pem -noout -text`
SELECT ok(:'crltext' ~ 'Next Update' AND :'crltext' ~ 'X509v3 CRL Number', 'the CRL has a nextUpdate and a CRL number');
\set crlv `openssl crl -in :d/crl0.pem -CAfile :ca -noout 2>&1`
SELECT is(:'crlv'::text, 'verify OK', 'openssl verifies its signature with the node CA');

------------------------------------------------------------ revoke one
SELECT ok(bc_join.revoke_certificate(:'s1', 'keyCompromise'), 'revoke_certificate revokes a node certificate');
SELECT ok(NOT bc_join.revoke_certificate(:'s1', 'keyCompromise'), 'a second time it says it was revoked already');
SELECT is(c.revocation_reason, 'keyCompromise', 'with its reason') FROM bc_join.node_certs c WHERE c.serial = :'s1';
SELECT ok(c.revoked_at IS NOT NULL, 'the session certificate asked with it is revoked too')
	FROM bc_join.session_certs c WHERE c.serial = :'ss';
SELECT is(e.payload->>'serial' || ' ' || (e.payload->>'sessionCertificates'), :'s1' || ' 1',
		  'certificate.revoked is evented in the tenant''s stream')
	FROM bc_join.events e WHERE e.type = 'certificate.revoked' AND e.tenant_id = :'tenant';
SELECT is((SELECT count(*) FROM bc_join.audit_log WHERE action = 'certificate.revoke'
		   AND detail->>'serial' = :'s1'), 1::bigint, 'and audited');
SELECT is(ARRAY(SELECT kind || ':' || serial FROM bc_join.revoked_certificates ORDER BY kind),
		  ARRAY['node:' || :'s1', 'session:' || :'ss'], 'revoked_certificates lists both');
\o :d/crl1.pem
SELECT bc_join.crl_pem();
\o
-- RFC 5280 5.2.3: a CRL made after a revocation has a higher number than the one made
-- before it, even in the same transaction (whose clock does not move)
\set n0 `openssl crl -in :d/crl0.pem -noout -crlnumber | sed 's/^crlNumber=0x//'`
\set n1 `openssl crl -in :d/crl1.pem -noout -crlnumber | sed 's/^crlNumber=0x//'`
SELECT cmp_ok(('x' || lpad(:'n1', 16, '0'))::bit(64)::bigint, '>', ('x' || lpad(:'n0', 16, '0'))::bit(64)::bigint,
			  'the CRL made after the revocation, in the same transaction, has a higher CRL number');
\set v1 `openssl verify -crl_check -CRLfile :d/crl1.pem -CAfile :ca :d/leaf1.pem 2>&1; echo "exit=$?"`
SELECT ok(:'v1' ~ 'certificate revoked' AND :'v1' ~ 'exit=2', 'openssl verify -crl_check rejects the revoked certificate');
\set v2 `openssl verify -crl_check -CRLfile :d/crl1.pem -CAfile :ca :d/leaf2.pem 2>&1; echo "exit=$?"`
SELECT ok(:'v2' ~ 'leaf2.pem: OK' AND :'v2' ~ 'exit=0', 'and still accepts another node''s');
\set crl1text `openssl crl -in :d/crl1.pem -noout -text`
SELECT ok(:'crl1text' ~ ltrim(upper(:'s1'), '0') AND :'crl1text' ~ 'Key Compromise', 'the CRL names the serial and the reason');
SELECT ok(:'crl1text' ~ ltrim(upper(:'ss'), '0'), 'and the session certificate');

SELECT throws_ok($$SELECT bc_join.revoke_certificate('00000000000000000000000000000000', 'unspecified')$$, '22023',
				 'no certificate has this serial', 'an unknown serial is INVALID_INPUT');
SELECT throws_ok(format('SELECT bc_join.revoke_certificate(%L, %L)', :'s2', ''), '22023', NULL,
				 'a revocation needs a reason');

-------------------------------------------------- reasons: the fixed set
-- Everything but RFC 5280's names an operator may give is refused, before anything is written.
SELECT throws_ok(format('SELECT bc_join.revoke_certificate(%L, %L)', :'s2', r), '22023',
				 'a revocation reason is one of unspecified, keyCompromise, cACompromise, affiliationChanged, superseded, cessationOfOperation, privilegeWithdrawn, aACompromise',
				 format('reason %L is refused', r))
	FROM unnest(ARRAY['retired', 'renewed', 'reclaimed', 'removeFromCRL', 'key-compromise',
					  'keycompromise', 'compromised']) r;
SELECT throws_ok(format('SELECT bc_join.revoke_certificate(%L, NULL)', :'s2'), '22023', NULL,
				 'a NULL reason is refused');
SELECT throws_ok(format('SELECT bc_join.revoke_certificate(%L, %L)', :'s2', 'certificateHold'), '22023',
				 'certificateHold is not taken: a revocation is final, nothing releases a hold',
				 'certificateHold is refused: nothing here releases a hold');
SELECT throws_ok(format('SELECT bc_join.revoke_node(%L, %L)', :'node2', 'retired'), '22023', NULL,
				 'revoke_node refuses the service''s own reasons too');
SELECT is((SELECT revoked_at FROM bc_join.node_certs WHERE serial = :'s2'), NULL,
		  'nothing was revoked by the refused reasons');
SELECT throws_ok($$UPDATE bc_join.node_certs SET revocation_reason = 'free text'$$, '23514', NULL,
				 'the table takes no other reason either');

------------------------------------------------------------- revoke a node
SELECT is(bc_join.revoke_node(:'node2', 'cessationOfOperation'), 1, 'revoke_node revokes the node''s live certificates');
SELECT is(c.revocation_reason, 'cessationOfOperation', 'with the reason') FROM bc_join.node_certs c WHERE c.serial = :'s2';
SELECT is(bc_join.revoke_node(:'node2', 'cessationOfOperation'), 0, 'nothing left to revoke the second time');

------------------------------------------------- reasons: the CRL's codes
-- One node certificate revoked for each reason an operator may give; the
-- CRL's entry carries its reasonCode, none for unspecified (RFC 5280 5.3.1).
SELECT bc_join.create_join_token(:'tenant', :'pool', uses => 8) AS tok8 \gset
\set mk `for i in 1 2 3 4 5 6 7 8; do :bcd join-request --service-keys :keys --token :'tok8' --out-dir :d/r$i > :d/r$i.req; done`
CREATE TEMP TABLE reasons (i int, reason text, crl_text text, serial text);
INSERT INTO reasons (i, reason, crl_text) VALUES
	(1, 'unspecified', NULL), (2, 'keyCompromise', 'Key Compromise'), (3, 'cACompromise', 'CA Compromise'),
	(4, 'affiliationChanged', 'Affiliation Changed'), (5, 'superseded', 'Superseded'),
	(6, 'cessationOfOperation', 'Cessation Of Operation'), (7, 'privilegeWithdrawn', 'Privilege Withdrawn'),
	(8, 'aACompromise', 'AA Compromise');
UPDATE reasons SET serial = pg_temp.payload(bc_join(pg_read_file(:'d' || '/r' || i || '.req')::jsonb))->>'serial';
SELECT is((SELECT count(*) FROM reasons r WHERE bc_join.revoke_certificate(r.serial, r.reason)), 8::bigint,
		  'each of the eight reasons revokes');
SELECT is(ARRAY(SELECT c.revocation_reason FROM reasons r JOIN bc_join.node_certs c USING (serial) ORDER BY r.i),
		  ARRAY(SELECT reason FROM reasons ORDER BY i), 'each with its reason');
\o :d/crl8.pem
SELECT bc_join.crl_pem();
\o
-- serial=reason code text, one line per entry that has one (openssl prints
-- the serial as the DER INTEGER: leading zeros compared away)
\set codes `openssl crl -in :d/crl8.pem -noout -text | awk '/Serial Number:/ {s = $3} r {sub(/^ +/, ""); print s "=" $0; r = 0} /CRL Reason Code/ {r = 1}'`
CREATE TEMP TABLE codes AS
	SELECT ltrim(split_part(l, '=', 1), '0') AS serial, split_part(l, '=', 2) AS crl_text
	FROM regexp_split_to_table(:'codes', E'\n') l;
SELECT is(ARRAY(SELECT r.reason || '=' || coalesce(c.crl_text, '(none)') FROM reasons r
				LEFT JOIN codes c ON c.serial = ltrim(upper(r.serial), '0') ORDER BY r.i),
		  ARRAY(SELECT r.reason || '=' || coalesce(r.crl_text, '(none)') FROM reasons r ORDER BY r.i),
		  'openssl crl -text reads each reason''s reasonCode back, none for unspecified');
\set crl8text `openssl crl -in :d/crl8.pem -noout -text`
SELECT ok(:'crl8text' ~ (SELECT ltrim(upper(serial), '0') FROM reasons WHERE i = 1), 'though the CRL lists it');

-------------------------------------------------------------- privileges
CREATE ROLE pgtap_rev_op IN ROLE bc_join_operator;
CREATE ROLE pgtap_rev_gw IN ROLE bc_join_gateway;
SET ROLE pgtap_rev_gw;
SELECT ok(length(bc_join.crl()) > 100, 'the gateway may read the CRL');
SELECT throws_ok(format('SELECT bc_join.revoke_certificate(%L, %L)', :'s1', 'x'), '42501', NULL,
				 'but not revoke');
RESET ROLE;

------------------------------------------------------ distribution point
SET LOCAL bc_join.crl_url = 'https://gw.example.org/v1/crl';
SELECT bc_join.create_join_token(:'tenant', :'pool') AS tok3 \gset
\set j3 `:bcd join-request --service-keys :keys --token :'tok3' --out-dir :d/n3`
\o :d/leaf3.pem
SELECT pg_temp.leaf_pem(bc_join(:'j3'));
\o
\set dp `openssl x509 -in :d/leaf3.pem -noout -ext crlDistributionPoints | tr -d ' \n'`
SELECT is(:'dp'::text, 'X509v3CRLDistributionPoints:FullName:URI:https://gw.example.org/v1/crl',
		  'with bc_join.crl_url set, issued certificates name the CRL distribution point');

SELECT * FROM finish();
ROLLBACK;
