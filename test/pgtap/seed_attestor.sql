-- seed_attestor.sql: custom attestors written exactly as the seed's
-- "Attestors" page writes them (issue 42 item 9a), knowing nothing of
-- context.repeatOf or bc_join.use_once.  Their single-use step is the seed's
-- plain INSERT INTO attestation_uses ... ON CONFLICT DO NOTHING, refusing
-- unless one row went in; the same final round repeated with the same CSR
-- (a relay dropped the answer) is answered with the same certificate,
-- nothing spent twice, no new node or generation.
\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only on
\getenv bcd BCJ_BCD
\getenv keys BCJ_SERVICE_KEYS
\getenv scratch BCJ_SCRATCH
\set d :scratch/pgtap_seed_attestor
\set mk `rm -rf :d && mkdir -p :d && openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out :d/vendor.key 2>/dev/null`
\set vendorpub `openssl pkey -in :d/vendor.key -pubout`

BEGIN;
SELECT plan(32);

SELECT bc_join.create_tenant('acme') AS tenant \gset
SELECT bc_join.create_site(:'tenant', 'dc-1') AS site \gset
SELECT bc_join.create_pool(:'tenant', :'site', 'assets') AS pool \gset

\ir lib/fixture.sql
-- What a join leaves behind: nodes, certificates, generations, node.joined events, uses.
CREATE FUNCTION pg_temp.footprint() RETURNS text LANGUAGE sql AS $$
	SELECT (SELECT count(*) FROM bc_join.nodes) || ' nodes, ' ||
		   (SELECT count(*) FROM bc_join.node_certs) || ' certificates, generations ' ||
		   (SELECT coalesce(sum(identity_generation), 0) FROM bc_join.nodes) || ', ' ||
		   (SELECT count(*) FROM bc_join.events WHERE type = 'node.joined') || ' joined, uses ' ||
		   (SELECT coalesce(string_agg(attestor || '@' || used_at::text, ' ' ORDER BY attestor, subject), '')
			  FROM bc_join.attestation_uses WHERE attestor <> 'join') $$;

---------------------------------------------------- the seed's acme-asset
-- process.env.ACME_VENDOR_KEY_PEM
SET acme.vendor_key_pem TO :'vendorpub';
CREATE TABLE public.plg_acme_assets (asset_tag text PRIMARY KEY, tenant_id text NOT NULL, pool_id text NOT NULL);
INSERT INTO public.plg_acme_assets VALUES ('ASSET-0042', :'tenant', :'pool');

-- The seed's acmeAssetAttestor.verify, line for line, with its single-use
-- step ("Single-use evidence") before the result: subject = sha256 of
-- `${provider}\0${accountId}\0${instanceId}`, here the vendor, the asset's
-- tenant and the asset tag.
CREATE FUNCTION public.seed_acme_verify(evidence jsonb, context jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = public, bc_join, pg_catalog, pg_temp AS $$
DECLARE
	vendor_key text := current_setting('acme.vendor_key_pem');
	body jsonb;
	statement bytea;
	sig bytea;
	asset record;
	subject bytea;
	used bigint;
BEGIN
	IF context->>'csrSha256' IS NULL THEN
		PERFORM refuse('acme-asset:no-csr-binding');
	END IF;
	BEGIN
		body := convert_from(b64url_decode(evidence->>'payload'), 'UTF8')::jsonb;
	EXCEPTION WHEN others THEN
		PERFORM refuse('acme-asset:malformed');
	END;
	IF jsonb_typeof(body->'assetTag') IS DISTINCT FROM 'string'
	   OR jsonb_typeof(body->'sig') IS DISTINCT FROM 'string' THEN
		PERFORM refuse('acme-asset:malformed');
	END IF;
	-- The vendor signed the asset tag together with this join's CSR, so a captured proof is useless.
	statement := convert_to(body->>'assetTag', 'UTF8') || b64url_decode(context->>'csrSha256');
	BEGIN
		sig := b64url_decode(body->>'sig');
	EXCEPTION WHEN others THEN
		sig := NULL;
	END;
	IF sig IS NULL OR NOT ecdsa_verify(vendor_key, statement, sig) THEN
		PERFORM refuse('acme-asset:bad-signature');
	END IF;

	SELECT tenant_id, pool_id INTO asset FROM plg_acme_assets WHERE asset_tag = body->>'assetTag';
	IF NOT FOUND THEN
		PERFORM refuse('acme-asset:unknown-asset');
	END IF;

	subject := sha256(convert_to('acme', 'UTF8') || '\x00'::bytea || convert_to(asset.tenant_id, 'UTF8')
					  || '\x00'::bytea || convert_to(body->>'assetTag', 'UTF8'));
	INSERT INTO attestation_uses (attestor, subject, expires_at) VALUES ('acme-asset', subject, NULL)
		ON CONFLICT DO NOTHING;
	GET DIAGNOSTICS used = ROW_COUNT;
	IF used <> 1 THEN
		PERFORM refuse('acme-asset:reused');
	END IF;

	RETURN jsonb_build_object('tenantId', asset.tenant_id, 'role', 'node', 'poolId', asset.pool_id,
							  'bind', b64url_encode(sha256(convert_to(body->>'assetTag', 'UTF8'))));
END $$;
SELECT lives_ok($$ SELECT bc_join.register_attestor('acme-asset', '1.0.0', ARRAY['node'],
					 'public.seed_acme_verify(jsonb,jsonb)') $$, 'the seed''s acme-asset registers unchanged');

\set req1 `test/tools/acme-proof :bcd :keys :d/m1 ASSET-0042 :d/vendor.key`
SELECT bc_join(:'req1') AS resp1 \gset
SELECT is(:'resp1'::jsonb->>'status', 'issued', 'acme-asset admits the asset');
SELECT pg_temp.footprint() AS fp1 \gset
SELECT is((SELECT count(*) FROM bc_join.attestation_uses WHERE attestor = 'acme-asset'
		   AND csr_sha256 = sha256(bc_join.b64url_decode(:'req1'::jsonb->>'csr'))), 1::bigint,
		  'its one use is recorded with the CSR of the certificate''s round');

-- The relay dropped the answer: the agent sends the same request again.
SELECT bc_join(:'req1') AS resp2 \gset
SELECT is(:'resp2'::jsonb->>'status', 'issued', 'the same request repeated: answered, not refused');
SELECT is(pg_temp.payload(:'resp2')->>'serial', pg_temp.payload(:'resp1')->>'serial', 'with the same certificate');
SELECT is(pg_temp.payload(:'resp2')->'certificateChain'->>0, pg_temp.payload(:'resp1')->'certificateChain'->>0,
		  'byte for byte');
SELECT is(pg_temp.payload(:'resp2')->>'nodeId', pg_temp.payload(:'resp1')->>'nodeId', 'for the same node');
SELECT isnt(pg_temp.payload(:'resp2')->>'issuedAt', NULL, 'in a newly signed response');
SELECT is(pg_temp.footprint(), :'fp1', 'nothing spent twice: no new node, certificate, generation, event or use');
\set v2 `echo :'resp2' | :bcd verify-response --service-keys :keys --dir :d/m1 --response - >/dev/null; echo $?`
SELECT is(:'v2'::int, 0, 'bcd verifies the repeated answer');
SELECT is(bc_join(:'req1')->>'status', 'issued', 'and once more');
SELECT is(pg_temp.footprint(), :'fp1', 'still nothing spent');
SELECT is((SELECT count(*) FROM bc_join.audit_log WHERE action = 'node.join.repeated'), 1::bigint,
		  'one note in the audit log, however often it is repeated');

-- Another machine (another key, another CSR) with the same proof: the
-- vendor signed the first CSR, so the signature fails before any use.
\set req2 `test/tools/acme-proof :bcd :keys :d/m2 ASSET-0042 :d/vendor.key :d/m1`
SELECT is(bc_join(:'req2'), :'refused'::jsonb, 'another CSR with the same proof: the one refusal');
SELECT is(pg_temp.last_reason(), 'acme-asset:bad-signature',
		  'refused acme-asset:bad-signature (the proof is bound to the first CSR)');
-- ... and with a fresh valid proof for the same asset: outside a repeat of
-- the certificate's own round the use is in sight, so the attestor's
-- plain INSERT finds it and refuses.
\set req3 `test/tools/acme-proof :bcd :keys :d/m3 ASSET-0042 :d/vendor.key`
SELECT is(bc_join(:'req3'), :'refused'::jsonb, 'another CSR with a fresh proof for the same asset: the one refusal');
SELECT is(pg_temp.last_reason(), 'acme-asset:reused', 'refused acme-asset:reused');
-- The first CSR with a proof made for it again (same asset): a repeat, answered.
\set req1c `test/tools/acme-proof :bcd :keys :d/m1 ASSET-0042 :d/vendor.key`
SELECT is(pg_temp.payload(bc_join(:'req1c'))->>'serial', pg_temp.payload(:'resp1')->>'serial',
		  'the first CSR with a new vendor proof for the same asset: the same certificate');
SELECT is(pg_temp.footprint(), :'fp1', 'nothing spent by the refusals or the repeats');

---------------------------------------- a seed-style challenge, then a repeat
-- Round 1 hands out a nonce bound to the CSR (its own table); round 2 uses
-- the answer once with the seed's plain INSERT.
CREATE TABLE public.plg_seed_chal (nonce bytea PRIMARY KEY, csr_sha256 text NOT NULL);
CREATE FUNCTION public.seed_chal_verify(evidence jsonb, context jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = public, bc_join, pg_catalog, pg_temp AS $$
DECLARE
	n bytea;
	used bigint;
BEGIN
	IF evidence->>'payload' IS NULL THEN
		n := sha256(convert_to(gen_random_uuid()::text, 'UTF8'));
		INSERT INTO plg_seed_chal VALUES (n, context->>'csrSha256');
		RETURN jsonb_build_object('deferred', 'challenge', 'challenge', b64url_encode(n),
								  'notAfter', compute_now() + interval '5 minutes');
	END IF;
	n := b64url_decode(evidence->>'payload');
	IF NOT EXISTS (SELECT 1 FROM plg_seed_chal c WHERE c.nonce = n AND c.csr_sha256 = context->>'csrSha256') THEN
		PERFORM refuse('seed-chal:unknown-challenge');
	END IF;
	INSERT INTO attestation_uses (attestor, subject, expires_at)
		VALUES ('seed-chal', sha256(convert_to(context->>'csrSpkiSha256', 'UTF8')), NULL)
		ON CONFLICT DO NOTHING;
	GET DIAGNOSTICS used = ROW_COUNT;
	IF used <> 1 THEN
		PERFORM refuse('seed-chal:reused');
	END IF;
	RETURN jsonb_build_object('tenantId', (SELECT tenant_id FROM plg_acme_assets LIMIT 1), 'role', 'node',
							  'poolId', (SELECT pool_id FROM plg_acme_assets LIMIT 1));
END $$;
SELECT bc_join.register_attestor('seed-chal', '1', ARRAY['node'], 'public.seed_chal_verify(jsonb,jsonb)');
\set creq `:bcd join-request --service-keys :keys --attestor seed-chal --out-dir :d/c`
SELECT pg_temp.payload(bc_join(:'creq'))->>'challenge' AS nonce1 \gset
SELECT bc_join(:'creq'::jsonb || jsonb_build_object('attestation', :'nonce1')) AS cresp \gset
SELECT is(:'cresp'::jsonb->>'status', 'issued', 'seed-chal: the answered challenge is issued');
SELECT pg_temp.footprint() AS fp2 \gset
SELECT is(pg_temp.payload(bc_join(:'creq'::jsonb || jsonb_build_object('attestation', :'nonce1')))->>'serial',
		  pg_temp.payload(:'cresp')->>'serial', 'seed-chal: the final round repeated: the same certificate');
-- The agent that lost the answer starts over: round 1 again, challenged again.
SELECT pg_temp.payload(bc_join(:'creq'))->>'challenge' AS nonce2 \gset
SELECT isnt(:'nonce2'::text, :'nonce1'::text, 'seed-chal: round 1 repeated is challenged again');
SELECT is(pg_temp.footprint(), :'fp2', 'and the use the certificate''s round spent is still there, as it was');
SELECT is(pg_temp.payload(bc_join(:'creq'::jsonb || jsonb_build_object('attestation', :'nonce2')))->>'serial',
		  pg_temp.payload(:'cresp')->>'serial', 'the new challenge answered: the same certificate');
SELECT is(pg_temp.footprint(), :'fp2', 'nothing spent twice');

------------------------------------------------- a token attestor, the seed's way
-- checkSingleUseToken in every round, spendToken at the end: no repeatOf.
CREATE FUNCTION public.seed_token_verify(evidence jsonb, context jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = public, pg_catalog, pg_temp AS $$
DECLARE
	t jsonb := bc_join.check_join_token('seed-token', evidence->>'token', context);
BEGIN
	PERFORM bc_join.spend_join_token(t->>'tokenId');
	RETURN jsonb_build_object('tenantId', t->>'tenantId', 'role', 'node', 'poolId', t->>'poolId',
							  'tokenId', t->>'tokenId');
END $$;
SELECT bc_join.register_attestor('seed-token', '1', ARRAY['node'], 'public.seed_token_verify(jsonb,jsonb)');
SELECT bc_join.create_join_token(:'tenant', :'pool', uses => 1) AS tk1 \gset
SELECT bc_join.create_join_token(:'tenant', :'pool', uses => 1) AS tk2 \gset
\set treq `:bcd join-request --service-keys :keys --attestor seed-token --token :'tk1' --out-dir :d/t`
SELECT bc_join(:'treq') AS tresp \gset
SELECT is(:'tresp'::jsonb->>'status', 'issued', 'seed-token: admitted, its one use spent');
SELECT pg_temp.footprint() AS fp3 \gset
SELECT is(pg_temp.payload(bc_join(:'treq'))->>'serial', pg_temp.payload(:'tresp')->>'serial',
		  'seed-token: the same request repeated (spendToken on a spent token): the same certificate');
SELECT is(pg_temp.footprint(), :'fp3', 'seed-token: nothing spent twice');
SELECT is(uses_left, 0, 'seed-token: the token spent once') FROM bc_join.join_tokens WHERE id = split_part(:'tk1', '.', 1);
\set treq2 `:bcd join-request --service-keys :keys --attestor seed-token --token :'tk2' --out-dir :d/t`
SELECT is(bc_join(:'treq2'), :'refused'::jsonb, 'seed-token: the same CSR with another valid token: the one refusal');
SELECT is(pg_temp.last_reason(), 'join:key-reused', 'refused join:key-reused (another token is another subject)');
SELECT is(uses_left, 1, 'seed-token: and that token is not spent') FROM bc_join.join_tokens WHERE id = split_part(:'tk2', '.', 1);

SELECT * FROM finish();
ROLLBACK;
