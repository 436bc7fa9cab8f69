-- join_token.sql: joins with the built-in join-token attestor, admissions and
-- every refusal.  Requests are made by the real agent command (bcd
-- join-request) and responses checked by bcd verify-response and openssl.
\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only on
\getenv bcd BCJ_BCD
\getenv keys BCJ_SERVICE_KEYS
\getenv scratch BCJ_SCRATCH
\getenv ca BCJ_NODE_CA
\set d :scratch/pgtap_join
\set mk `mkdir -p :d`

BEGIN;
SELECT plan(80);

-- A tenant, a site, a pool; a second tenant to see where events land.
SELECT bc_join.create_tenant('acme') AS tenant \gset
SELECT bc_join.create_site(:'tenant', 'dc-1') AS site \gset
SELECT bc_join.create_pool(:'tenant', :'site', 'gpu') AS pool \gset

-- What a refusal must leave behind: nothing but its event.
CREATE TEMP TABLE counts AS
	SELECT (SELECT count(*) FROM bc_join.nodes) AS nodes,
		   (SELECT count(*) FROM bc_join.node_certs) AS certs,
		   (SELECT count(*) FROM bc_join.events WHERE type = 'node.joined') AS joined;
CREATE FUNCTION pg_temp.nothing_written() RETURNS boolean LANGUAGE sql AS $$
	SELECT (SELECT count(*) FROM bc_join.nodes) = c.nodes
	   AND (SELECT count(*) FROM bc_join.node_certs) = c.certs
	   AND (SELECT count(*) FROM bc_join.events WHERE type = 'node.joined') = c.joined
	FROM counts c $$;
\ir lib/fixture.sql
CREATE FUNCTION pg_temp.uses_left(tok text) RETURNS integer LANGUAGE sql AS $$
	SELECT uses_left FROM bc_join.join_tokens WHERE id = split_part(tok, '.', 1) $$;

------------------------------------------------------------------ admission
SELECT bc_join.create_join_token(:'tenant', :'pool', uses => 2) AS tok \gset
SELECT ok(:'tok' ~ '^jt_[0-9a-f]{32}\.[A-Za-z0-9_-]{43}$', 'a join token is <id>.<secret>');
SELECT ok(NOT EXISTS (SELECT 1 FROM bc_join.join_tokens t
					  WHERE t.secret_sha256 = convert_to(split_part(:'tok', '.', 2), 'UTF8')
						 OR t.id = :'tok'),
		  'only a hash of the secret is stored');

\set req `:bcd join-request --service-keys :keys --token :'tok' --out-dir :d/good --claims '{"hostname":"gpu-01","serial":"SN1"}'`
SELECT bc_join(:'req') AS resp \gset
SELECT is(:'resp'::jsonb->>'status', 'issued', 'a good join is issued');
SELECT ok(:'resp'::jsonb->>'response' ~ '^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$',
		  'the response is a JWS compact serialization');

\set verified `echo :'resp' | :bcd verify-response --service-keys :keys --dir :d/good --response - 2>&1; echo "exit=$?"`
SELECT id AS node_id, tenant_id FROM bc_join.nodes ORDER BY created_at DESC, id LIMIT 1 \gset n_
SELECT is(split_part(:'verified', E'\n', 1),
		  format('spiffe://test.bc-join.local/tenant/%s/node/%s', :'tenant', :'n_node_id'),
		  'bcd verifies the response and prints the node''s SPIFFE ID');
SELECT ok(:'verified' ~ 'exit=0$', 'bcd verify-response exits 0');
SELECT is(:'n_tenant_id'::text, :'tenant', 'the node belongs to the token''s tenant');

\set osslverify `openssl verify -CAfile :ca :d/good/node-chain.pem 2>&1`
SELECT is(:'osslverify'::text, :'d' || '/good/node-chain.pem: OK', 'openssl verify -CAfile node-ca.crt accepts the certificate');
\set certkey `openssl x509 -in :d/good/node-chain.pem -noout -pubkey`
\set csrkey `openssl pkey -in :d/good/node.key -pubout`
SELECT is(:'certkey'::text, :'csrkey', 'the certificate carries the CSR''s key');
\set san `openssl x509 -in :d/good/node-chain.pem -noout -ext subjectAltName | tail -n 1 | tr -d ' '`
SELECT is(:'san'::text, format('URI:spiffe://test.bc-join.local/tenant/%s/node/%s', :'tenant', :'n_node_id'),
		  'the certificate''s only SAN is the SPIFFE URI');
\set serialbits `openssl x509 -in :d/good/node-chain.pem -noout -serial | cut -d= -f2`
SELECT ok(length(:'serialbits') BETWEEN 30 AND 32, 'the serial carries 128 random bits');
\set sigalg `openssl x509 -in :d/good/node-chain.pem -noout -text | grep -m1 'Signature Algorithm' | tr -d ' '`
SELECT is(:'sigalg'::text, 'SignatureAlgorithm:ecdsa-with-SHA256', 'signed ECDSA with SHA-256');

SELECT is(n.state, 'adopting', 'the node is adopting') FROM bc_join.nodes n WHERE n.id = :'n_node_id';
SELECT is(n.identity_generation, 1, 'identity generation 1') FROM bc_join.nodes n WHERE n.id = :'n_node_id';
SELECT is(n.pool_id || ' ' || n.site_id, :'pool' || ' ' || :'site', 'the node sits in the token''s pool and site')
	FROM bc_join.nodes n WHERE n.id = :'n_node_id';
SELECT is(n.trust, 'tenant-owned', 'a node of a tenant''s own site is tenant-owned')
	FROM bc_join.nodes n WHERE n.id = :'n_node_id';
SELECT ok(c.not_after - c.not_before <= interval '86460 seconds'
		  AND c.not_after > bc_join.compute_now() + interval '23 hours',
		  'the lifetime is the service TTL, at most 86,400 s')
	FROM bc_join.node_certs c WHERE c.node_id = :'n_node_id';
SELECT is(c.serial, lpad(lower(:'serialbits'), 32, '0'), 'the certificate row records the serial')
	FROM bc_join.node_certs c WHERE c.node_id = :'n_node_id';
\set spkihash `openssl pkey -in :d/good/node.key -pubout -outform DER | openssl dgst -sha256 -hex | awk '{print $2}'`
SELECT is(encode(c.spki_sha256, 'hex'), :'spkihash', 'the certificate row records the key''s SPKI hash')
	FROM bc_join.node_certs c WHERE c.node_id = :'n_node_id';
SELECT is(pg_temp.uses_left(:'tok'), 1, 'one use of the token is spent');
SELECT is(e.payload->>'attestor', 'join-token', 'node.joined records the attestor')
	FROM bc_join.events e WHERE e.type = 'node.joined' AND e.payload->>'nodeId' = :'n_node_id';
SELECT is(e.payload->>'nodeKey', 'unattested', 'node.joined records nodeKey (unattested without proof)')
	FROM bc_join.events e WHERE e.type = 'node.joined' AND e.payload->>'nodeId' = :'n_node_id';
SELECT is(e.tenant_id, :'tenant', 'node.joined lands in the tenant''s stream')
	FROM bc_join.events e WHERE e.type = 'node.joined' AND e.payload->>'nodeId' = :'n_node_id';
SELECT is(a.detail->>'nodeKey', 'unattested', 'an audit row records the join')
	FROM bc_join.audit_log a WHERE a.action = 'node.join' AND a.node_id = :'n_node_id';
SELECT is(n.claims->>'serial', 'SN1', 'the claims are kept with the node')
	FROM bc_join.nodes n WHERE n.id = :'n_node_id';

-- A ramdisk never gets more than 7,200 s.
SELECT bc_join.create_join_token(:'tenant', :'pool', role => 'ramdisk') AS rtok \gset
\set rreq `:bcd join-request --service-keys :keys --token :'rtok' --role ramdisk --out-dir :d/ramdisk`
SELECT is(bc_join(:'rreq')->>'status', 'issued', 'a ramdisk token admits a ramdisk');
SELECT is(c.not_after - c.not_before, interval '7260 seconds', 'a ramdisk certificate lives at most 7,200 s')
	FROM bc_join.node_certs c JOIN bc_join.nodes n ON n.id = c.node_id WHERE n.role = 'ramdisk';

-- The service TTL setting caps it too.
SET LOCAL bc_join.cert_ttl = 600;
SELECT bc_join.create_join_token(:'tenant', :'pool') AS ttok \gset
\set treq `:bcd join-request --service-keys :keys --token :'ttok' --out-dir :d/ttl`
SELECT is(bc_join(:'treq')->>'status', 'issued', 'a join under a shorter service TTL');
\set tspki `openssl pkey -in :d/ttl/node.key -pubout -outform DER | openssl dgst -sha256 -hex | awk '{print $2}'`
SELECT is(c.not_after - c.not_before, interval '660 seconds', 'bc_join.cert_ttl caps the lifetime')
	FROM bc_join.node_certs c WHERE c.spki_sha256 = decode(:'tspki', 'hex');
RESET bc_join.cert_ttl;

TRUNCATE counts;
INSERT INTO counts SELECT (SELECT count(*) FROM bc_join.nodes), (SELECT count(*) FROM bc_join.node_certs),
	(SELECT count(*) FROM bc_join.events WHERE type = 'node.joined');

------------------------------------------------------------------- refusals
-- spent: the token's second use went to the good join above; spend the last one.
\set req2 `:bcd join-request --service-keys :keys --token :'tok' --out-dir :d/second`
SELECT is(bc_join(:'req2')->>'status', 'issued', 'the token''s last use admits a second machine');
TRUNCATE counts;
INSERT INTO counts SELECT (SELECT count(*) FROM bc_join.nodes), (SELECT count(*) FROM bc_join.node_certs),
	(SELECT count(*) FROM bc_join.events WHERE type = 'node.joined');
\set req3 `:bcd join-request --service-keys :keys --token :'tok' --out-dir :d/spent`
SELECT is(bc_join(:'req3'), :'refused'::jsonb, 'spent: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' join-token:spent', 'spent: recorded in the tenant''s stream');
SELECT ok(pg_temp.nothing_written(), 'spent: nothing written');
SELECT is(pg_temp.uses_left(:'tok'), 0, 'spent: uses stay at 0');

-- expired: the test clock moves past the token's hour.
SELECT bc_join.create_join_token(:'tenant', :'pool') AS etok \gset
\set ereq `:bcd join-request --service-keys :keys --token :'etok' --out-dir :d/expired`
SET LOCAL bc_join.clock_offset = '3601';
SELECT is(bc_join(:'ereq'), :'refused'::jsonb, 'expired: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' join-token:expired', 'expired: its own reason');
SELECT ok(pg_temp.nothing_written(), 'expired: nothing written');
SELECT is(pg_temp.uses_left(:'etok'), 1, 'expired: the use is not spent');
SET LOCAL bc_join.clock_offset = '3599';
SELECT is(bc_join(:'ereq')->>'status', 'issued', 'a second before expiry the same request is admitted');
RESET bc_join.clock_offset;
TRUNCATE counts;
INSERT INTO counts SELECT (SELECT count(*) FROM bc_join.nodes), (SELECT count(*) FROM bc_join.node_certs),
	(SELECT count(*) FROM bc_join.events WHERE type = 'node.joined');

-- wrong secret: the right token id, another secret.  The tenant is not
-- authenticated, so the event goes to the root tenant.
SELECT bc_join.create_join_token(:'tenant', :'pool') AS wtok \gset
SELECT split_part(:'wtok', '.', 1) || '.' || bc_join.random_secret() AS wrongtok \gset
\set wreq `:bcd join-request --service-keys :keys --token :'wrongtok' --out-dir :d/wrongsecret`
SELECT is(bc_join(:'wreq'), :'refused'::jsonb, 'wrong secret: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root join-token:secret', 'wrong secret: recorded in the root tenant''s stream');
SELECT ok(pg_temp.nothing_written(), 'wrong secret: nothing written');

-- unknown token id
SELECT 'jt_' || md5('nope') || '.' || bc_join.random_secret() AS unknowntok \gset
\set ureq `:bcd join-request --service-keys :keys --token :'unknowntok' --out-dir :d/unknown`
SELECT is(bc_join(:'ureq'), :'refused'::jsonb, 'unknown token: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root join-token:unknown', 'unknown token: its own reason, root stream');

-- sealed for another CSR: a token sealed to CSR A presented with CSR B.
SELECT bc_join.create_join_token(:'tenant', :'pool') AS stok \gset
\set sreqa `:bcd join-request --service-keys :keys --token :'stok' --out-dir :d/sealed-a`
\set sreqb `:bcd join-request --service-keys :keys --token :'stok' --out-dir :d/sealed-b`
SELECT is(bc_join(jsonb_set(:'sreqb'::jsonb, '{sealedToken}', :'sreqa'::jsonb->'sealedToken')),
		  :'refused'::jsonb, 'sealed for another CSR: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root join-token:csr-binding', 'sealed for another CSR: its own reason');
SELECT ok(pg_temp.nothing_written(), 'sealed for another CSR: nothing written');
SELECT is(pg_temp.uses_left(:'stok'), 1, 'sealed for another CSR: the use is not spent');

-- wrong role: a node token asked for a site.
\set rolereq `:bcd join-request --service-keys :keys --token :'stok' --role site --out-dir :d/role`
SELECT is(bc_join(:'rolereq'), :'refused'::jsonb, 'wrong role: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' join-token:role', 'wrong role: its own reason');
SELECT ok(pg_temp.nothing_written(), 'wrong role: nothing written');

-- expect mismatch: the token expects serial SN-7 and a MAC.
SELECT bc_join.create_join_token(:'tenant', :'pool', expect => '{"serial":"SN-7","macs":["02:00:00:00:00:07"]}') AS xtok \gset
\set xreq `:bcd join-request --service-keys :keys --token :'xtok' --out-dir :d/expect-bad --claims '{"serial":"SN-8","macs":["02:00:00:00:00:07"]}'`
SELECT is(bc_join(:'xreq'), :'refused'::jsonb, 'expect mismatch: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' join-token:expect', 'expect mismatch: its own reason');
SELECT ok(pg_temp.nothing_written(), 'expect mismatch: nothing written');
\set xreq2 `:bcd join-request --service-keys :keys --token :'xtok' --out-dir :d/expect-good --claims '{"serial":"SN-7","macs":["02:00:00:00:00:01","02:00:00:00:00:07"]}'`
SELECT is(bc_join(:'xreq2')->>'status', 'issued', 'the expected claims are admitted');
TRUNCATE counts;
INSERT INTO counts SELECT (SELECT count(*) FROM bc_join.nodes), (SELECT count(*) FROM bc_join.node_certs),
	(SELECT count(*) FROM bc_join.events WHERE type = 'node.joined');

-- no evidence: no sealed token at all.
SELECT is(bc_join(:'sreqb'::jsonb - 'sealedToken'), :'refused'::jsonb, 'no evidence: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root join-token:no-evidence', 'no evidence: its own reason');
SELECT ok(pg_temp.nothing_written(), 'no evidence: nothing written');

-- proof of possession: a CSR whose own signature does not verify, with the
-- token honestly sealed to it (made by jwcrypto), is refused after the token checks.
SELECT bc_join.create_join_token(:'tenant', :'pool') AS ptok \gset
\set preq `:bcd join-request --service-keys :keys --token :'ptok' --out-dir :d/pop | /usr/bin/python3 test/tools/bad_pop_request.py :keys :'ptok'`
SELECT is(bc_join(:'preq'), :'refused'::jsonb, 'a CSR without proof of possession: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' join:csr-signature', 'a CSR without proof of possession: its own reason');
SELECT ok(pg_temp.nothing_written(), 'a CSR without proof of possession: nothing written');
SELECT is(pg_temp.uses_left(:'ptok'), 1, 'a CSR without proof of possession: the use is not spent');

-- the CSR must be signed with ecdsa-with-SHA256: SHA-1 or SHA-384 signatures are no proof
\set sha1req `:bcd join-request --service-keys :keys --out-dir :d/sha1 >/dev/null && openssl req -new -key :d/sha1/node.key -sha1 -subj /CN=x -outform DER -out :d/sha1/node.csr.der && :bcd join-request --service-keys :keys --token :'ptok' --out-dir :d/sha1`
SELECT is(bc_join(:'sha1req'), :'refused'::jsonb, 'a CSR signed with SHA-1: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' join:csr-signature', 'a CSR signed with SHA-1: csr-signature');
\set sha384req `:bcd join-request --service-keys :keys --out-dir :d/sha384 >/dev/null && openssl req -new -key :d/sha384/node.key -sha384 -subj /CN=x -outform DER -out :d/sha384/node.csr.der && :bcd join-request --service-keys :keys --token :'ptok' --out-dir :d/sha384`
SELECT is(bc_join(:'sha384req'), :'refused'::jsonb, 'a CSR signed with SHA-384: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' join:csr-signature', 'a CSR signed with SHA-384: csr-signature');
SELECT is(pg_temp.uses_left(:'ptok'), 1, 'neither spends the use');

-- a sealed token's plaintext is compared whole: a NUL and junk after a good token is refused
\set nulreq `:bcd join-request --service-keys :keys --out-dir :d/nul | /usr/bin/python3 test/tools/reseal_token.py :keys "$(printf %s :'ptok' | od -An -tx1 | tr -d ' \n')006a756e6b"`
SELECT is(bc_join(:'nulreq'), :'refused'::jsonb, 'a token followed by a NUL and junk: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root join-token:malformed-seal', 'a token followed by a NUL and junk: malformed-seal');
\set goodreq `:bcd join-request --service-keys :keys --out-dir :d/nul | /usr/bin/python3 test/tools/reseal_token.py :keys "$(printf %s :'ptok' | od -An -tx1 | tr -d ' \n')"`
SELECT is(bc_join(:'goodreq')->>'status', 'issued', 'the same token sealed by jwcrypto without the junk is admitted');

-- a token limited to attestors: every other attestor, join-token included, refuses it
SELECT bc_join.create_join_token(:'tenant', :'pool', expect => '{"attestors": ["tpm"]}') AS ltok \gset
\set lreq `:bcd join-request --service-keys :keys --token :'ltok' --out-dir :d/limited`
SELECT is(bc_join(:'lreq'), :'refused'::jsonb, 'a token limited to tpm, stripped of its evidence: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' join-token:token-attestor', 'refused token-attestor');
SELECT is(pg_temp.uses_left(:'ltok'), 1, 'and not spent');
SELECT bc_join.create_join_token(:'tenant', :'pool', expect => '{"attestors": ["join-token", "tpm"], "hostname": "lim-1"}') AS ltok2 \gset
\set lreq2 `:bcd join-request --service-keys :keys --token :'ltok2' --out-dir :d/limited2 --hostname lim-1`
SELECT is(bc_join(:'lreq2')->>'status', 'issued', 'a token that lists join-token is admitted (and its claims still checked)');
SELECT throws_ok(format('SELECT bc_join.create_join_token(%L, %L, expect => %L)', :'tenant', :'pool', '{"attestors": []}'),
				 '22023', NULL, 'an empty attestors limit is refused at creation');

-- revoked
SELECT ok(bc_join.revoke_join_token(split_part(:'stok', '.', 1)), 'a token can be revoked');
SELECT is(bc_join(:'sreqa'), :'refused'::jsonb, 'revoked: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' join-token:revoked', 'revoked: its own reason');

-- A refusal event holds hashes, never the evidence.
SELECT ok(NOT EXISTS (SELECT 1 FROM bc_join.events e
					  WHERE e.type = 'security.join.refused'
						AND (e.payload ? 'sealedToken' OR e.payload::text LIKE '%' || split_part(:'stok', '.', 2) || '%'
							 OR e.payload::text LIKE '%' || (:'sreqa'::jsonb->>'sealedToken') || '%')),
		  'refusal events never carry the token or the sealed evidence');
SELECT is(array_agg(DISTINCT k ORDER BY k),
		  ARRAY['attestor', 'claimsSha256', 'csrSha256', 'csrSpkiSha256', 'refusal', 'role'],
		  'a refusal event carries the reason and hashes of the CSR and claims')
	FROM bc_join.events e, jsonb_object_keys(e.payload) k WHERE e.type = 'security.join.refused';

SELECT * FROM finish();
ROLLBACK;
