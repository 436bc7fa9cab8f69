-- challenge_state.sql: seal_challenge_state / open_challenge_state, the
-- challenge state JoinService seals and checks for SQL attestors: bound to
-- the attestor, the CSR and the role, its notAfter the signed response's,
-- refused <attestor>:challenge-expired after it and
-- <attestor>:state-mismatch when tampered or for another CSR.
\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only on
\getenv bcd BCJ_BCD
\getenv keys BCJ_SERVICE_KEYS
\getenv scratch BCJ_SCRATCH
\set d :scratch/pgtap_challenge_state
\set mk `rm -rf :d && mkdir -p :d`

BEGIN;
SELECT plan(14);

SELECT bc_join.create_tenant('sealer') AS tenant \gset
SELECT bc_join.create_site(:'tenant', 'dc-1') AS site \gset
SELECT bc_join.create_pool(:'tenant', :'site', 'workers') AS pool \gset
CREATE TABLE public.plg_sealer_target (tenant_id text, pool_id text, bad_not_after boolean DEFAULT false);
INSERT INTO public.plg_sealer_target VALUES (:'tenant', :'pool');

\ir lib/fixture.sql

-- Round 1 seals a nonce; the agent answers with the state; round 2 opens it.
CREATE FUNCTION public.sealer_verify(evidence jsonb, context jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = public, pg_catalog, pg_temp AS $$
DECLARE
	t public.plg_sealer_target;
	na timestamptz := bc_join.compute_now() + interval '2 minutes';
	pt jsonb;
BEGIN
	SELECT * INTO t FROM public.plg_sealer_target;
	IF evidence->>'payload' IS NULL THEN
		RETURN jsonb_build_object('deferred', 'challenge',
			'challenge', bc_join.b64url_encode(convert_to(bc_join.seal_challenge_state('sealer',
				jsonb_build_object('nonce', gen_random_uuid()), na), 'UTF8')),
			'notAfter', CASE WHEN t.bad_not_after THEN na + interval '1 hour' END);
	END IF;
	pt := bc_join.open_challenge_state('sealer', convert_from(bc_join.b64url_decode(evidence->>'payload'), 'UTF8'));
	PERFORM bc_join.use_once('sealer', sha256(convert_to(pt->>'nonce', 'UTF8')));
	RETURN jsonb_build_object('tenantId', t.tenant_id, 'role', 'node', 'poolId', t.pool_id);
END $$;
SELECT bc_join.register_attestor('sealer', '1', ARRAY['node'], 'public.sealer_verify(jsonb,jsonb)');

-- Another attestor that tries to open sealer's state.
CREATE FUNCTION public.thief_verify(evidence jsonb, context jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = public, pg_catalog, pg_temp AS $$
BEGIN
	PERFORM bc_join.open_challenge_state('sealer', convert_from(bc_join.b64url_decode(evidence->>'payload'), 'UTF8'));
	RETURN NULL;
END $$;
SELECT bc_join.register_attestor('thief', '1', ARRAY['node'], 'public.thief_verify(jsonb,jsonb)');

\set req `:bcd join-request --service-keys :keys --attestor sealer --out-dir :d/a`
SELECT bc_join(:'req') AS r1 \gset
SELECT is(:'r1'::jsonb->>'status', 'challenge', 'round 1 defers with a sealed state');
SELECT pg_temp.payload(:'r1')->>'challenge' AS state \gset
SELECT is(pg_temp.payload(:'r1')->>'notAfter',
		  to_char((bc_join.compute_now() + interval '2 minutes') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
		  'the signed notAfter is the sealed state''s (the attestor gave none)');
SELECT ok(length(convert_from(bc_join.b64url_decode(:'state'), 'UTF8')) <= 1024, 'the state is at most 1,024 characters');

-- Tampered: one character changed.
SELECT convert_from(bc_join.b64url_decode(:'state'), 'UTF8') AS inner \gset
SELECT bc_join.b64url_encode(convert_to(overlay(:'inner' placing
		CASE WHEN substr(:'inner', 60, 1) = 'A' THEN 'B' ELSE 'A' END FROM 60 FOR 1), 'UTF8')) AS tampered \gset
SELECT is(bc_join(:'req'::jsonb || jsonb_build_object('attestation', :'tampered')), :'refused'::jsonb, 'a tampered state is refused');
SELECT is(pg_temp.last_reason(), 'sealer:state-mismatch', '... sealer:state-mismatch');

-- For another CSR.
\set oreq `:bcd join-request --service-keys :keys --attestor sealer --out-dir :d/o`
SELECT is(bc_join(:'oreq'::jsonb || jsonb_build_object('attestation', :'state')), :'refused'::jsonb, 'a state answered for another CSR is refused');
SELECT is(pg_temp.last_reason(), 'sealer:state-mismatch', '... sealer:state-mismatch');

-- After notAfter.
SET bc_join.clock_offset = 180;
SELECT is(bc_join(:'req'::jsonb || jsonb_build_object('attestation', :'state')), :'refused'::jsonb, 'an answer after notAfter is refused');
SELECT is(pg_temp.last_reason(), 'sealer:challenge-expired', '... sealer:challenge-expired');
RESET bc_join.clock_offset;

-- Another attestor cannot open it.
\set treq `:bcd join-request --service-keys :keys --attestor thief --out-dir :d/t`
SELECT throws_ok(format('SELECT bc_join(%L::jsonb || jsonb_build_object(''attestation'', %L))', :'treq', :'state'),
				 '55000', NULL, 'another attestor cannot open the state');

SELECT is(bc_join(:'req'::jsonb || jsonb_build_object('attestation', :'state'))->>'status', 'issued',
		  'the answer within notAfter is issued');

-- Outside a join round, and a deferral whose notAfter differs from its state's.
SELECT throws_ok($$SELECT bc_join.seal_challenge_state('sealer', '{}', now() + interval '1 minute')$$,
				 '55000', NULL, 'seal_challenge_state outside a join round');
SELECT throws_ok(format('SELECT bc_join.open_challenge_state(''sealer'', %L)', :'inner'),
				 '55000', NULL, 'open_challenge_state outside a join round');
UPDATE public.plg_sealer_target SET bad_not_after = true;
\set breq `:bcd join-request --service-keys :keys --attestor sealer --out-dir :d/b`
SELECT throws_ok(format('SELECT bc_join(%L::jsonb)', :'breq'), 'F0000', NULL,
				 'a challenge whose notAfter is not its sealed state''s is INVALID_CONFIG');

SELECT * FROM finish();
ROLLBACK;
