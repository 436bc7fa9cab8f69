-- renew.sql: bc_join.renew(), a node proving its current key (a JWS over the
-- new CSR's hash, the serial and a fresh iat) and its new key (the CSR).
-- Proofs are signed by jose-tool (src/common) with the real node key.
\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only on
\getenv bcd BCJ_BCD
\getenv keys BCJ_SERVICE_KEYS
\getenv scratch BCJ_SCRATCH
\getenv josetool BCJ_JOSE_TOOL
\set d :scratch/pgtap_renew
\set mk `rm -rf :d && mkdir -p :d`

BEGIN;
SELECT plan(52);

SELECT bc_join.create_tenant('acme') AS tenant \gset
SELECT bc_join.create_site(:'tenant', 'dc-1') AS site \gset
SELECT bc_join.create_pool(:'tenant', :'site', 'workers') AS pool \gset

\ir lib/fixture.sql
-- The proof payload for renewing serial with the CSR of req, iat offset by skew seconds.
CREATE FUNCTION pg_temp.proof_payload(serial text, req jsonb, skew int DEFAULT 0) RETURNS text LANGUAGE sql AS $$
	SELECT jsonb_build_object('purpose', 'renew', 'serial', serial,
							  'csrSha256', bc_join.b64url_encode(sha256(bc_join.b64url_decode(req->>'csr'))),
							  'iat', extract(epoch FROM bc_join.compute_now())::bigint + skew)::text $$;
CREATE FUNCTION pg_temp.renew(req jsonb, proof text) RETURNS jsonb LANGUAGE sql AS $$
	SELECT bc_join.renew(jsonb_build_object('csr', req->>'csr', 'proof', proof)) $$;

-- A node joins with a token.
SELECT bc_join.create_join_token(:'tenant', :'pool') AS tok \gset
\set jreq `:bcd join-request --service-keys :keys --token :'tok' --out-dir :d/n`
SELECT bc_join(:'jreq') AS jr \gset
SELECT pg_temp.payload(:'jr')->>'serial' AS s1, pg_temp.payload(:'jr')->>'nodeId' AS node \gset
UPDATE bc_join.node_certs SET allowed_kinds = ARRAY['inventory.refresh', 'diag.*'] WHERE serial = :'s1';

------------------------------------------------------------------- renewal
\set r1 `:bcd join-request --service-keys :keys --out-dir :d/k2`
SELECT pg_temp.proof_payload(:'s1', :'r1') AS pp \gset
\set proof `printf %s :'pp' | :josetool sign :d/n/node.key`
SELECT pg_temp.renew(:'r1', :'proof') AS rr \gset
SELECT is(:'rr'::jsonb->>'status', 'issued', 'a node renews with a proof by its current key and a new key''s CSR');
SELECT is(pg_temp.payload(:'rr')->>'nodeId', :'node', 'the node id is kept');
SELECT pg_temp.payload(:'rr')->>'serial' AS s2 \gset
SELECT isnt(:'s2'::text, :'s1', 'a new certificate');
SELECT is(c.allowed_kinds, ARRAY['inventory.refresh', 'diag.*'], 'allowedKinds carry forward')
	FROM bc_join.node_certs c WHERE c.serial = :'s2';
SELECT is(pg_temp.payload(:'rr')->'allowedKinds', '["inventory.refresh", "diag.*"]'::jsonb, 'and are in the signed answer');
SELECT is(c.revocation_reason, 'renewed', 'the old certificate is revoked') FROM bc_join.node_certs c WHERE c.serial = :'s1';
\set spki `openssl pkey -in :d/k2/node.key -pubout -outform DER | openssl dgst -sha256 -hex | awk '{print $2}'`
SELECT is(encode(c.spki_sha256, 'hex'), :'spki', 'the new certificate certifies the new key') FROM bc_join.node_certs c WHERE c.serial = :'s2';
\set ok2 `echo :'rr' | :bcd verify-response --service-keys :keys --dir :d/k2 --response - | head -1`
SELECT is(:'ok2'::text, pg_temp.payload(:'jr')->>'spiffeId', 'bcd verifies it: the same SPIFFE ID');
SELECT is(e.tenant_id, :'tenant', 'node.renewed lands in the tenant''s stream')
	FROM bc_join.events e WHERE e.type = 'node.renewed' AND e.payload->>'serial' = :'s2';

-- the answer was lost: the same new key asks again with a fresh proof
SELECT pg_temp.proof_payload(:'s1', :'r1', 1) AS ppr \gset
\set again `printf %s :'ppr' | :josetool sign :d/n/node.key`
SELECT is(pg_temp.payload(pg_temp.renew(:'r1', :'again'))->>'serial', :'s2',
		  'a renewal repeated for the same new key (its answer lost) gets the same certificate');
SELECT is((SELECT count(*) FROM bc_join.node_certs WHERE node_id = :'node'), 2::bigint, 'and nothing new is issued');

------------------------------------------------------------------ refusals
-- the same proof again: used once
SELECT is(pg_temp.renew(:'r1', :'proof'), :'refused'::jsonb, 'a replayed proof: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' renew:reused', 'replayed: reused');

-- the superseded certificate renewing again, with a fresh proof
\set r2 `:bcd join-request --service-keys :keys --out-dir :d/k3`
SELECT pg_temp.proof_payload(:'s1', :'r2') AS pp2 \gset
\set proof2 `printf %s :'pp2' | :josetool sign :d/n/node.key`
SELECT is(pg_temp.renew(:'r2', :'proof2'), :'refused'::jsonb, 'a renewed (superseded) certificate: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' renew:revoked', 'refused revoked');

-- from here the current certificate is s2, its key k2
SELECT pg_temp.proof_payload(:'s2', :'r2') AS pp3 \gset
\set wrongkey `printf %s :'pp3' | :josetool sign :d/k3/node.key`
SELECT is(pg_temp.renew(:'r2', :'wrongkey'), :'refused'::jsonb, 'a proof by another key: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root renew:proof', 'refused proof, in the root stream');

\set otherfor `printf %s :'pp3' | :josetool sign :d/k2/node.key`
\set r3 `:bcd join-request --service-keys :keys --out-dir :d/k4`
SELECT is(pg_temp.renew(:'r3', :'otherfor'), :'refused'::jsonb, 'a proof for another CSR: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' renew:csr-binding', 'refused csr-binding');

SELECT pg_temp.proof_payload(:'s2', :'r2', -400) AS pp4 \gset
\set stale `printf %s :'pp4' | :josetool sign :d/k2/node.key`
SELECT is(pg_temp.renew(:'r2', :'stale'), :'refused'::jsonb, 'a stale proof: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' renew:stale-proof', 'refused stale-proof');

\set bad `:bcd join-request --service-keys :keys --out-dir :d/k5 | /usr/bin/python3 test/tools/bad_pop_request.py :keys -`
SELECT pg_temp.proof_payload(:'s2', :'bad') AS pp5 \gset
\set badproof `printf %s :'pp5' | :josetool sign :d/k2/node.key`
SELECT is(pg_temp.renew(:'bad', :'badproof'), :'refused'::jsonb, 'a new key without proof of possession: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' renew:csr-signature', 'refused csr-signature');

SELECT pg_temp.proof_payload(repeat('0', 32), :'r2') AS pp6 \gset
\set unknown `printf %s :'pp6' | :josetool sign :d/k2/node.key`
SELECT is(pg_temp.renew(:'r2', :'unknown'), :'refused'::jsonb, 'an unknown certificate: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root renew:unknown-certificate', 'refused unknown-certificate');

-- expired: the clock past notAfter (the proof made at that time)
SET LOCAL bc_join.clock_offset = 86401;
SELECT pg_temp.proof_payload(:'s2', :'r2') AS pp7 \gset
\set late `printf %s :'pp7' | :josetool sign :d/k2/node.key`
SELECT is(pg_temp.renew(:'r2', :'late'), :'refused'::jsonb, 'an expired certificate: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' renew:expired', 'refused expired');
RESET bc_join.clock_offset;

-- superseded by a reclaim (identity generation + 1)
UPDATE bc_join.nodes SET identity_generation = identity_generation + 1 WHERE id = :'node';
SELECT pg_temp.proof_payload(:'s2', :'r2', 1) AS pp8 \gset
\set gen `printf %s :'pp8' | :josetool sign :d/k2/node.key`
SELECT is(pg_temp.renew(:'r2', :'gen'), :'refused'::jsonb, 'a certificate of an older identity generation: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' renew:superseded', 'refused superseded');
UPDATE bc_join.nodes SET identity_generation = identity_generation - 1 WHERE id = :'node';

-- a node key statement the service cannot prove again
UPDATE bc_join.node_certs SET node_key_uri = 'urn:example:other-key' WHERE serial = :'s2';
SELECT pg_temp.proof_payload(:'s2', :'r2', 2) AS pp9 \gset
\set stmt `printf %s :'pp9' | :josetool sign :d/k2/node.key`
SELECT is(pg_temp.renew(:'r2', :'stmt'), :'refused'::jsonb, 'a certificate with a node key statement: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' renew:key-statement-unknown', 'refused key-statement-unknown');
-- a TPM AK statement is proven again only with the tpm member (test/tap/tpm.t renews with one)
UPDATE bc_join.node_certs SET node_key_uri = 'urn:bc:tpm-ak:sha256:' || repeat('a', 64) WHERE serial = :'s2';
SELECT is(pg_temp.renew(:'r2', :'stmt'), :'refused'::jsonb, 'a TPM-bound certificate renewed without the tpm member: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' renew:tpm-missing', 'refused tpm-missing');
SELECT throws_ok($$SELECT bc_join.renew('{"csr":"AA","proof":"a.b.c","tpm":"x"}')$$, '22023', NULL,
				 'a renewal''s tpm member must be an object');
SELECT throws_ok($$SELECT bc_join.issue_session('{"csr":"AA","proof":"a.b.c","tpm":{}}')$$, '22023', NULL,
				 'only a renewal may carry a tpm member');
UPDATE bc_join.node_certs SET node_key_uri = NULL WHERE serial = :'s2';

SELECT is((SELECT count(*) FROM bc_join.node_certs WHERE node_id = :'node'), 2::bigint, 'no refusal issued anything');
SELECT pg_temp.proof_payload(:'s2', :'r2', 3) AS ppa \gset
\set good `printf %s :'ppa' | :josetool sign :d/k2/node.key`
SELECT is(pg_temp.renew(:'r2', :'good')->>'status', 'issued', 'the current certificate renews again');

-- a proof whose payload is not JSON is refused like any bad proof, not raised
\set notjson `printf 'not json' | :josetool sign :d/k2/node.key`
SELECT is(pg_temp.renew(:'r2', :'notjson'), :'refused'::jsonb, 'a proof that is not JSON: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root renew:malformed-proof', 'refused malformed-proof');

-- nothing of an unsigned proof is interpreted: no number, no duplicate, no depth raises
CREATE FUNCTION pg_temp.unsigned(payload text) RETURNS text LANGUAGE sql AS $$
	SELECT 'eyJhbGciOiJFUzI1NiJ9.' || bc_join.b64url_encode(convert_to(payload, 'UTF8')) || '.' || repeat('A', 86) $$;
SELECT is(pg_temp.renew(:'r2', pg_temp.unsigned(format('{"serial":"%s","iat":1e1000000}', :'s2'))), :'refused'::jsonb,
		  'an unsigned proof holding 1e1000000: the one refusal, not 22003');
SELECT is(pg_temp.last_refusal(), 'root renew:malformed-proof', 'refused malformed-proof before its signature');
SELECT is(pg_temp.renew(:'r2', pg_temp.unsigned(format('{"serial":"%s","x":%s1%s}', :'s2', repeat('[', 1400), repeat(']', 1400)))),
		  :'refused'::jsonb, 'an unsigned proof nested 1,400 deep: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root renew:proof', 'refused proof (its signature)');
SELECT is(pg_temp.renew(:'r2', pg_temp.unsigned(format('{"serial":"%s","serial":"%s"}', repeat('0', 32), :'s2'))),
		  :'refused'::jsonb, 'a proof naming its serial twice: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root renew:malformed-proof', 'refused malformed-proof');
SELECT is(pg_temp.renew(:'r2', 'eyJhbGciOiJFUzI1NiJ9.' || bc_join.b64url_encode(
			  convert_to(format('{"serial":"%s","x":"', :'s2'), 'UTF8') || '\xff'::bytea || convert_to('"}', 'UTF8'))
			  || '.' || repeat('A', 86)),
		  :'refused'::jsonb, 'an unsigned proof that is not UTF-8: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root renew:malformed-proof', 'refused malformed-proof, before its signature');
SELECT (pg_temp.proof_payload(:'s2', :'r2', 4)::jsonb || '{"n":1e400}')::text AS ppn \gset
\set hugenum `printf %s :'ppn' | :josetool sign :d/k2/node.key`
SELECT is(pg_temp.renew(:'r2', :'hugenum'), :'refused'::jsonb, 'a signed proof with a huge number: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root renew:malformed-proof', 'refused malformed-proof, before its signature');

-------------------------------------------------------------------- input
SELECT throws_ok($$SELECT bc_join.renew('{"csr":"x"}')$$, '22023', NULL, 'a request without proof is INVALID_INPUT');
SELECT throws_ok($$SELECT bc_join.renew('{"csr":"x","proof":"y","extra":1}')$$, '22023', NULL, 'unknown fields are INVALID_INPUT');
SELECT throws_ok(format('SELECT bc_join.renew(%L)', jsonb_build_object('csr', :'r2'::jsonb->>'csr', 'proof', repeat('a', 5000))),
				 '22023', NULL, 'a proof over 4 KiB is INVALID_INPUT');

SELECT * FROM finish();
ROLLBACK;
