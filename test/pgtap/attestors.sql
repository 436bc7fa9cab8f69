-- attestors.sql: custom attestors as SQL functions, through the same dispatch
-- as the built-in one.  The acme-asset attestor is the example custom attestor
-- in PL/pgSQL: a vendor-signed asset tag bound to the CSR and a
-- lookup table of its own.
\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only on
\getenv bcd BCJ_BCD
\getenv keys BCJ_SERVICE_KEYS
\getenv scratch BCJ_SCRATCH
\set d :scratch/pgtap_attestors
\set mk `rm -rf :d && mkdir -p :d && openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out :d/vendor.key 2>/dev/null`
\set vendorpub `openssl pkey -in :d/vendor.key -pubout`

BEGIN;
SELECT plan(65);

SELECT bc_join.create_tenant('acme') AS tenant \gset
SELECT bc_join.create_site(:'tenant', 'dc-1') AS site \gset
SELECT bc_join.create_pool(:'tenant', :'site', 'assets') AS pool \gset

\ir lib/fixture.sql

------------------------------------------------------------ the acme-asset attestor
CREATE TABLE public.plg_acme_assets (asset_tag text PRIMARY KEY, tenant_id text NOT NULL, pool_id text NOT NULL);
CREATE TABLE public.plg_acme_config (vendor_key text NOT NULL);
INSERT INTO public.plg_acme_config VALUES (:'vendorpub');
INSERT INTO public.plg_acme_assets VALUES ('ASSET-0042', :'tenant', :'pool'), ('ASSET-0043', :'tenant', :'pool');

CREATE FUNCTION public.acme_asset_verify(evidence jsonb, context jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = public, pg_catalog, pg_temp AS $$
DECLARE
	body jsonb;
	sig bytea;
	tag text;
	a public.plg_acme_assets;
BEGIN
	IF context->>'csrSha256' IS NULL THEN
		PERFORM bc_join.refuse('acme-asset:no-csr-binding');
	END IF;
	BEGIN
		body := convert_from(bc_join.b64url_decode(evidence->>'payload'), 'UTF8')::jsonb;
		sig := bc_join.b64url_decode(body->>'sig');
	EXCEPTION WHEN others THEN
		body := NULL;
	END;
	IF body IS NULL OR sig IS NULL OR jsonb_typeof(body->'assetTag') IS DISTINCT FROM 'string' THEN
		PERFORM bc_join.refuse('acme-asset:malformed');
	END IF;
	tag := body->>'assetTag';
	-- The vendor signed the asset tag together with this join's CSR.
	IF NOT bc_join.ecdsa_verify((SELECT vendor_key FROM public.plg_acme_config),
								convert_to(tag, 'UTF8') || bc_join.b64url_decode(context->>'csrSha256'),
								sig) THEN
		PERFORM bc_join.refuse('acme-asset:bad-signature');
	END IF;
	SELECT * INTO a FROM public.plg_acme_assets WHERE asset_tag = tag;
	IF NOT FOUND THEN
		PERFORM bc_join.refuse('acme-asset:unknown-asset');
	END IF;
	-- A captured proof admits one join at most.
	PERFORM bc_join.use_once('acme-asset', sha256(sig));
	RETURN jsonb_build_object('tenantId', a.tenant_id, 'role', 'node', 'poolId', a.pool_id,
							  'bind', bc_join.b64url_encode(sha256(convert_to(tag, 'UTF8'))));
END
$$;
SELECT lives_ok($$ SELECT bc_join.register_attestor('acme-asset', '1.0.0', ARRAY['node'],
					 'public.acme_asset_verify(jsonb,jsonb)') $$, 'acme-asset registers');
SELECT is(a.roles, ARRAY['node'], 'registered with its roles') FROM bc_join.attestors a WHERE a.id = 'acme-asset';
SELECT throws_ok($$ SELECT bc_join.register_attestor('Bad Id', '1', ARRAY['node'], 'public.acme_asset_verify(jsonb,jsonb)') $$,
				 '22023', NULL, 'a malformed attestor id is refused');
SELECT throws_ok($$ SELECT bc_join.register_attestor('x', '1', ARRAY['admin'], 'public.acme_asset_verify(jsonb,jsonb)') $$,
				 '22023', NULL, 'unknown roles are refused');
SELECT throws_ok($$ SELECT bc_join.register_attestor('x', '1', ARRAY['node'], 'pg_catalog.lower(text)') $$,
				 '22023', NULL, 'a verify function of another signature is refused');

-- written like the seed's example: unqualified names, no search_path of its own
CREATE TABLE public.plg_naive_assets (tenant_id text, pool_id text);
CREATE FUNCTION public.naive_verify(evidence jsonb, context jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE a plg_naive_assets;
BEGIN
	SELECT * INTO a FROM plg_naive_assets;
	RETURN jsonb_build_object('tenantId', a.tenant_id, 'role', 'node', 'poolId', a.pool_id);
END $$;
SELECT throws_ok($$ SELECT bc_join.register_attestor('naive', '1', ARRAY['node'], 'public.naive_verify(jsonb,jsonb)') $$,
				 '22023', 'the verify function public.naive_verify(jsonb,jsonb) has no SET search_path of its own',
				 'a verify function without its own search_path is refused');
CREATE FUNCTION pg_temp.register_hint() RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	PERFORM bc_join.register_attestor('naive', '1', ARRAY['node'], 'public.naive_verify(jsonb,jsonb)');
	RETURN NULL;
EXCEPTION WHEN invalid_parameter_value THEN
	DECLARE h text;
	BEGIN
		GET STACKED DIAGNOSTICS h = PG_EXCEPTION_HINT;
		RETURN h;
	END;
END $$;
SELECT pg_temp.register_hint() AS hint \gset
SELECT is(:'hint'::text, 'Run: ALTER FUNCTION public.naive_verify(jsonb,jsonb) SET search_path = public, pg_catalog, pg_temp;',
		  'with a HINT that shows the ALTER FUNCTION to run');
SELECT substr(:'hint', 6) AS fix \gset
:fix
INSERT INTO public.plg_naive_assets VALUES (:'tenant', :'pool');
SELECT lives_ok($$ SELECT bc_join.register_attestor('naive', '1', ARRAY['node'], 'public.naive_verify(jsonb,jsonb)') $$,
				'after the hint''s ALTER FUNCTION it registers');
\set nreq `:bcd join-request --service-keys :keys --attestor naive --out-dir :d/naive`
SELECT is(bc_join(:'nreq')->>'status', 'issued', 'and its unqualified names resolve at join time');
SELECT ok(bc_join.unregister_attestor('naive'), 'unregistered again');

-- admitted once
\set req1 `test/tools/acme-proof :bcd :keys :d/m1 ASSET-0042 :d/vendor.key`
SELECT bc_join(:'req1') AS resp1 \gset
SELECT is(:'resp1'::jsonb->>'status', 'issued', 'acme-asset admits a machine with a vendor proof bound to its CSR');
\set v1 `echo :'resp1' | :bcd verify-response --service-keys :keys --dir :d/m1 --response - >/dev/null; echo $?`
SELECT is(:'v1'::int, 0, 'bcd verifies the answer');
SELECT is(e.payload->>'attestor', 'acme-asset', 'node.joined names the custom attestor')
	FROM bc_join.events e WHERE e.type = 'node.joined' ORDER BY e.id DESC LIMIT 1;
SELECT is(n.pool_id, :'pool', 'the node joins the asset''s pool') FROM bc_join.nodes n ORDER BY n.created_at DESC LIMIT 1;
SELECT is((SELECT count(*) FROM bc_join.node_bindings b JOIN bc_join.nodes n ON n.id = b.node_id
		   WHERE b.subject = sha256('ASSET-0042'::bytea) AND b.attestor = 'acme-asset'), 1::bigint,
		  'the asset is bound to the node');
SELECT is((SELECT count(*) FROM bc_join.attestation_uses WHERE attestor = 'acme-asset'), 1::bigint,
		  'the proof is recorded as used');

-- refusals, each identical, each with its own reason
SELECT count(*) AS nodes_before FROM bc_join.nodes \gset
SELECT is(bc_join(:'req1')->>'status', 'issued',
		  'a replayed request is answered again, with the certificate its CSR holds');
SELECT is((SELECT count(*) FROM bc_join.attestation_uses WHERE attestor = 'acme-asset') || ' ' ||
		  (SELECT count(*) FROM bc_join.nodes), '1 ' || :'nodes_before',
		  'a replayed request spends and makes nothing again');
-- A repeat must present the evidence again, for the same asset.
SELECT count(*) AS log0 FROM bc_join.audit_log \gset
SELECT is(bc_join(:'req1')->>'status', 'issued', 'repeated again: answered');
SELECT is((SELECT count(*) FROM bc_join.audit_log), :'log0'::bigint, 'and the issuance log does not grow per repeat');
SELECT is(bc_join(:'req1'::jsonb - 'attestation'), :'refused'::jsonb, 'the CSR alone, without the proof: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root join:key-reused', 'refused join:key-reused');
SELECT is((SELECT payload->'detail'->>'refusal' FROM bc_join.events WHERE type = 'security.join.refused' ORDER BY id DESC LIMIT 1),
		  'acme-asset:malformed', 'the attestor ran, its reason in the detail');
\set req1b `test/tools/acme-proof :bcd :keys :d/m1 ASSET-0043 :d/vendor.key`
SELECT is(bc_join(:'req1b'), :'refused'::jsonb, 'the same CSR with another asset''s valid proof: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root join:key-reused', 'refused join:key-reused (another subject)');
SELECT is((SELECT count(*) FROM bc_join.attestation_uses WHERE attestor = 'acme-asset') || ' ' ||
		  (SELECT count(*) FROM bc_join.node_bindings WHERE subject = sha256('ASSET-0043'::bytea)),
		  '1 0', 'what a repeat''s attestor wrote is rolled back: no use, no binding');
SELECT is((SELECT count(*) FROM bc_join.audit_log), :'log0'::bigint, 'refused repeats leave the log as it was');

-- context.repeatOf tells a repeat from a replay; a token a result names is its subject.
CREATE FUNCTION public.tok_asset_verify(evidence jsonb, context jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = public, pg_catalog, pg_temp AS $$
DECLARE
	t jsonb := bc_join.check_join_token('tok-asset', evidence->>'token', context);
BEGIN
	IF context->'claims'->>'hostname' = 'peek' AND context ? 'repeatOf' THEN
		PERFORM bc_join.refuse('tok-asset:repeat-of-' || (context->'repeatOf'->>'serial'));
	END IF;
	-- spent in the round that issues; a repeat finds it spent by its certificate
	IF NOT context ? 'repeatOf' THEN
		PERFORM bc_join.spend_join_token(t->>'tokenId');
	END IF;
	RETURN jsonb_build_object('tenantId', t->>'tenantId', 'role', 'node', 'poolId', t->>'poolId',
							  'tokenId', t->>'tokenId');
END $$;
SELECT bc_join.register_attestor('tok-asset', '1', ARRAY['node'], 'public.tok_asset_verify(jsonb,jsonb)');
SELECT bc_join.create_join_token(:'tenant', :'pool', uses => 1) AS ta1 \gset
SELECT bc_join.create_join_token(:'tenant', :'pool', uses => 1) AS ta2 \gset
\set ta1req `:bcd join-request --service-keys :keys --attestor tok-asset --token :'ta1' --out-dir :d/ta --claims '{"hostname":"peek"}'`
SELECT bc_join(:'ta1req') AS taresp \gset
SELECT is(:'taresp'::jsonb->>'status', 'issued', 'a custom token attestor admits (no repeatOf in a first round)');
SELECT is(bc_join(:'ta1req'), :'refused'::jsonb, 'its verify runs again in a repeat, and sees context.repeatOf');
SELECT is((SELECT payload->'detail'->>'refusal' FROM bc_join.events WHERE type = 'security.join.refused' ORDER BY id DESC LIMIT 1),
		  'tok-asset:repeat-of-' || (convert_from(bc_join.b64url_decode(split_part(:'taresp'::jsonb->>'response', '.', 2)), 'UTF8')::jsonb->>'serial'),
		  'repeatOf names the certificate asked for');
\set ta1req2 `:bcd join-request --service-keys :keys --attestor tok-asset --token :'ta1' --out-dir :d/ta --claims '{"hostname":"again"}'`
SELECT is(bc_join(:'ta1req2')->>'status', 'issued', 'the same token again (its one use spent by this certificate): answered');
\set ta2req `:bcd join-request --service-keys :keys --attestor tok-asset --token :'ta2' --out-dir :d/ta --claims '{"hostname":"again"}'`
SELECT is(bc_join(:'ta2req'), :'refused'::jsonb, 'the same CSR with another valid token: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root join:key-reused', 'refused join:key-reused');
SELECT is(uses_left, 1, 'and that token is not spent') FROM bc_join.join_tokens WHERE id = split_part(:'ta2', '.', 1);
SELECT ok(bc_join.unregister_attestor('tok-asset'), 'tok-asset unregistered');

-- a join token limited to other attestors is refused before verify runs, also by an
-- attestor that never reads its token (ATTESTORS.md: every other attestor refuses it)
CREATE TABLE public.no_tok_target AS SELECT :'tenant'::text AS tenant_id, :'pool'::text AS pool_id;
CREATE FUNCTION public.no_tok_verify(evidence jsonb, context jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = public, pg_catalog, pg_temp AS $$
BEGIN
	RETURN (SELECT jsonb_build_object('tenantId', tenant_id, 'role', 'node', 'poolId', pool_id)
			FROM public.no_tok_target);
END $$;
SELECT bc_join.register_attestor('no-tok', '1', ARRAY['node'], 'public.no_tok_verify(jsonb,jsonb)');
SELECT bc_join.create_join_token(:'tenant', :'pool', expect => '{"attestors": ["tpm"]}') AS nt1 \gset
SELECT bc_join.create_join_token(:'tenant', :'pool', expect => '{"attestors": ["no-tok"]}') AS nt2 \gset
\set nt1req `:bcd join-request --service-keys :keys --attestor no-tok --token :'nt1' --out-dir :d/nt1`
SELECT is(bc_join(:'nt1req'), :'refused'::jsonb, 'a custom attestor offered a token limited to tpm: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' no-tok:token-attestor', 'refused no-tok:token-attestor, in the token''s tenant');
\set nt2req `:bcd join-request --service-keys :keys --attestor no-tok --token :'nt2' --out-dir :d/nt2`
SELECT is(bc_join(:'nt2req')->>'status', 'issued', 'a token that names it: its verify decides, and admits');
SELECT is(uses_left, 1, 'and neither token is spent (the attestor named none)') FROM bc_join.join_tokens WHERE id = split_part(:'nt1', '.', 1);
SELECT ok(bc_join.unregister_attestor('no-tok'), 'no-tok unregistered');
SELECT count(*) AS nodes_before FROM bc_join.nodes \gset

\set req2 `test/tools/acme-proof :bcd :keys :d/m2 ASSET-0043 :d/vendor.key :d/m1`
SELECT is(bc_join(:'req2'), :'refused'::jsonb, 'a proof for another CSR: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root acme-asset:bad-signature', 'a proof for another CSR: bad-signature');

\set req3 `test/tools/acme-proof :bcd :keys :d/m3 ASSET-9999 :d/vendor.key`
SELECT is(bc_join(:'req3'), :'refused'::jsonb, 'an unknown asset: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root acme-asset:unknown-asset', 'an unknown asset: unknown-asset');

\set req4 `test/tools/acme-proof :bcd :keys :d/m4 ASSET-0043 :d/vendor.key`
SELECT is(bc_join(jsonb_set(:'req4'::jsonb, '{role}', '"site"')), :'refused'::jsonb, 'the wrong role: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root acme-asset:role-not-admitted', 'the wrong role: refused before verify runs');

SELECT is(bc_join(jsonb_set(:'req4'::jsonb, '{attestation}', '"bm90IGpzb24"')), :'refused'::jsonb,
		  'a malformed proof: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root acme-asset:malformed', 'a malformed proof: malformed');

-- A fresh, valid proof for an asset already bound to a node: JoinService refuses.
\set req5 `test/tools/acme-proof :bcd :keys :d/m5 ASSET-0042 :d/vendor.key`
SELECT is(bc_join(:'req5'), :'refused'::jsonb, 'an asset bound to another node: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' join:bound-elsewhere', 'an asset bound to another node: bound-elsewhere');
SELECT is((SELECT count(*) FROM bc_join.attestation_uses WHERE attestor = 'acme-asset'), 1::bigint,
		  'a refused join leaves no use behind (the attestor''s writes rolled back)');
SELECT is(pg_temp.count_nodes(), :'nodes_before'::bigint, 'no refusal wrote a node');

-- A proof the vendor never signed is never accepted, whatever the CSR.
SELECT ok(NOT bc_join.ecdsa_verify(:'vendorpub', 'ASSET-0042'::bytea, '\x3006020101020101'::bytea),
		  'ecdsa_verify refuses a forged signature');

------------------------------------------------------- errors are not refusals
CREATE FUNCTION public.buggy_verify(evidence jsonb, context jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = public, pg_catalog, pg_temp AS $$ BEGIN RAISE EXCEPTION 'the attestor has a bug'; END $$;
SELECT bc_join.register_attestor('buggy', '1', ARRAY['node'], 'public.buggy_verify(jsonb,jsonb)');
SELECT count(*) AS events_before FROM bc_join.events \gset
SELECT throws_ok(format('SELECT bc_join(%L::jsonb)', jsonb_set(:'req4'::jsonb, '{attestor}', '"buggy"')),
				 'P0001', 'the attestor has a bug', 'an attestor''s own error fails the join');
SELECT is((SELECT count(*) FROM bc_join.events), :'events_before'::bigint, 'and is not recorded as a refusal');

CREATE FUNCTION public.null_verify(evidence jsonb, context jsonb) RETURNS jsonb
LANGUAGE sql SET search_path = public, pg_catalog, pg_temp AS $$ SELECT NULL::jsonb $$;
SELECT bc_join.register_attestor('nothing', '1', ARRAY['node'], 'public.null_verify(jsonb,jsonb)');
SELECT throws_ok(format('SELECT bc_join(%L::jsonb)', jsonb_set(:'req4'::jsonb, '{attestor}', '"nothing"')),
				 'F0000', NULL, 'an attestor answering NULL is INVALID_CONFIG');

-------------------------------------------- the attestor's rows are the join's
CREATE TABLE public.plg_scribe (note text);
CREATE FUNCTION public.scribe_verify(evidence jsonb, context jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = public, pg_catalog, pg_temp AS $$
BEGIN
	INSERT INTO public.plg_scribe VALUES (context->>'csrSha256');
	IF context->'claims'->>'hostname' = 'refuse-me' THEN
		PERFORM bc_join.refuse('scribe:asked-to', (SELECT tenant_id FROM public.plg_acme_assets LIMIT 1));
	END IF;
	RETURN jsonb_build_object('tenantId', (SELECT tenant_id FROM public.plg_acme_assets LIMIT 1),
							  'role', 'node', 'poolId', (SELECT pool_id FROM public.plg_acme_assets LIMIT 1));
END $$;
SELECT bc_join.register_attestor('scribe', '1', ARRAY['node'], 'public.scribe_verify(jsonb,jsonb)');
\set sreq `:bcd join-request --service-keys :keys --attestor scribe --out-dir :d/scribe --claims '{"hostname":"refuse-me"}'`
SELECT is(bc_join(:'sreq'), :'refused'::jsonb, 'a custom refusal: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' scribe:asked-to', 'a custom refusal lands in the tenant it names');
SELECT is((SELECT count(*) FROM public.plg_scribe), 0::bigint, 'a refused attestor''s own rows are rolled back');
\set sreq2 `:bcd join-request --service-keys :keys --attestor scribe --out-dir :d/scribe2 --claims '{"hostname":"welcome"}'`
SELECT is(bc_join(:'sreq2')->>'status', 'issued', 'the same attestor admits');
SELECT is((SELECT count(*) FROM public.plg_scribe), 1::bigint, 'an admitting attestor''s rows commit with the join');

---------------------------------------- a registered join-token replaces the built-in
SELECT bc_join.create_join_token(:'tenant', :'pool') AS tok \gset
\set treq `:bcd join-request --service-keys :keys --token :'tok' --out-dir :d/tok`
CREATE FUNCTION public.strict_token_verify(evidence jsonb, context jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = public, pg_catalog, pg_temp AS $$
BEGIN
	IF evidence->>'token' IS NOT NULL THEN
		PERFORM bc_join.refuse('join-token:replaced');
	END IF;
	PERFORM bc_join.refuse('join-token:no-token');
	RETURN NULL;
END $$;
SELECT bc_join.register_attestor('join-token', '2.0.0', ARRAY['node'], 'public.strict_token_verify(jsonb,jsonb)');
SELECT is(bc_join(:'treq'), :'refused'::jsonb, 'a registered join-token replaces the built-in');
SELECT is(pg_temp.last_refusal(), 'root join-token:replaced', 'and receives the opened sealed token as evidence.token');
SELECT ok(bc_join.unregister_attestor('join-token'), 'it can be unregistered');
SELECT is(bc_join(:'treq')->>'status', 'issued', 'and the built-in takes over again');

SELECT * FROM finish();
ROLLBACK;
