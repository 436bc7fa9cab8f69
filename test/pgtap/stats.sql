-- stats.sql: attestor statistics count rounds by attestor and outcome, time
-- them, survive rollbacks (shared memory) and reset.
\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only on
\getenv bcd BCJ_BCD
\getenv keys BCJ_SERVICE_KEYS
\getenv scratch BCJ_SCRATCH
\set d :scratch/pgtap_stats
\set mk `rm -rf :d && mkdir -p :d`

BEGIN;
SELECT plan(13);

SELECT bc_join.create_tenant('acme') AS tenant \gset
SELECT bc_join.create_site(:'tenant', 'dc-1') AS site \gset
SELECT bc_join.create_pool(:'tenant', :'site', 'workers') AS pool \gset
CREATE TABLE public.plg_probe (tenant_id text, pool_id text);
INSERT INTO public.plg_probe VALUES (:'tenant', :'pool');

-- Does what the claimed hostname says.
CREATE FUNCTION public.probe_verify(evidence jsonb, context jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = public, pg_catalog, pg_temp AS $$
DECLARE
	p public.plg_probe;
BEGIN
	SELECT * INTO p FROM public.plg_probe;
	CASE context->'claims'->>'hostname'
		WHEN 'approve' THEN RETURN '{"deferred":"approval","requestId":"jr_probe"}';
		WHEN 'challenge' THEN RETURN '{"deferred":"challenge","challenge":"bm9uY2U"}';
		WHEN 'refuse' THEN PERFORM bc_join.refuse('stats-probe:told-to');
		WHEN 'error' THEN RAISE EXCEPTION 'told to fail';
		ELSE NULL;
	END CASE;
	RETURN jsonb_build_object('tenantId', p.tenant_id, 'role', 'node', 'poolId', p.pool_id);
END $$;
SELECT bc_join.register_attestor('stats-probe', '1', ARRAY['node'], 'public.probe_verify(jsonb,jsonb)');

-- One CSR key admits one join, so each round joins with a fresh key.
\set req `:bcd join-request --service-keys :keys --attestor stats-probe --out-dir :d/m`
\set csrs `for i in $(seq 1 20); do :bcd join-request --service-keys :keys --attestor stats-probe --out-dir :d/p$i; done`
CREATE TEMP TABLE csr_pool AS
	SELECT r::jsonb->>'csr' AS csr FROM regexp_split_to_table(:'csrs', E'\n') r WHERE r <> '';
CREATE FUNCTION pg_temp.fresh_csr() RETURNS text LANGUAGE sql AS $$
	DELETE FROM csr_pool WHERE ctid = (SELECT ctid FROM csr_pool LIMIT 1) RETURNING csr $$;
CREATE FUNCTION pg_temp.run(host text, n int) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	FOR i IN 1..n LOOP
		BEGIN
			PERFORM bc_join(current_setting('bcj.req')::jsonb ||
							jsonb_build_object('claims', jsonb_build_object('hostname', host),
											   'csr', pg_temp.fresh_csr()));
		EXCEPTION WHEN raise_exception THEN
			NULL;			-- the error outcome fails the join, as it should
		END;
	END LOOP;
END $$;
SELECT set_config('bcj.req', :'req', true) IS NOT NULL AS set \gset

SELECT ok(bc_join.attestor_stats_reset() IS NOT NULL, 'the statistics reset');
SELECT is((SELECT count(*) FROM bc_join.attestor_statistics WHERE attestor = 'stats-probe'), 0::bigint,
		  'nothing counted after a reset');

SELECT pg_temp.run('admit', 3);
SELECT pg_temp.run('approve', 2);
SELECT pg_temp.run('challenge', 4);
SELECT pg_temp.run('refuse', 5);
SELECT pg_temp.run('error', 2);

SELECT is(array_agg(outcome || '=' || calls ORDER BY outcome),
		  ARRAY['admitted=3', 'deferred-approval=2', 'deferred-challenge=4', 'error=2', 'refused=5'],
		  'every round counted under its outcome')
	FROM bc_join.attestor_statistics WHERE attestor = 'stats-probe';
SELECT ok(bool_and(total_ms > 0 AND min_ms > 0 AND min_ms <= mean_ms AND mean_ms <= max_ms
				   AND p50_ms <= p99_ms AND p99_ms <= max_ms AND p50_ms > 0),
		  'with their timing') FROM bc_join.attestor_statistics WHERE attestor = 'stats-probe';
SELECT ok(bool_and((SELECT sum(value::bigint) FROM jsonb_each_text(histogram)) = calls),
		  'the histogram holds every round') FROM bc_join.attestor_statistics WHERE attestor = 'stats-probe';
SELECT is((SELECT count(*) FROM bc_join.attestor_statistics WHERE attestor = 'join-token'), 0::bigint,
		  'other attestors are counted apart');

-- the built-in counts too, and a renewal counts as "renew"
SELECT bc_join.create_join_token(:'tenant', :'pool') AS tok \gset
\set treq `:bcd join-request --service-keys :keys --token :'tok' --out-dir :d/t`
SELECT bc_join(:'treq') IS NOT NULL AS joined \gset
\set treq2 `:bcd join-request --service-keys :keys --token :'tok' --out-dir :d/t2`
SELECT bc_join(:'treq2') IS NOT NULL AS refused \gset
SELECT is(array_agg(outcome || '=' || calls ORDER BY outcome), ARRAY['admitted=1', 'refused=1'],
		  'the built-in join-token is counted the same way')
	FROM bc_join.attestor_statistics WHERE attestor = 'join-token';

-- counters are not transactional: a rolled-back round still counts
SAVEPOINT s;
SELECT pg_temp.run('admit', 1);
ROLLBACK TO SAVEPOINT s;
SELECT is(calls, 4::bigint, 'a rolled-back join still counts')
	FROM bc_join.attestor_statistics WHERE attestor = 'stats-probe' AND outcome = 'admitted';

-- input refused before any round is not a verification
SELECT throws_ok($$SELECT bc_join('{}')$$, '22023', NULL, 'malformed input raises');
SELECT is((SELECT sum(calls) FROM bc_join.attestor_statistics)::bigint, 19::bigint, 'and counts nowhere');

-- who may read it
CREATE ROLE pgtap_stats_operator IN ROLE bc_join_operator;
SET ROLE pgtap_stats_operator;
SELECT is((SELECT count(*) FROM bc_join.attestor_statistics), 7::bigint, 'the operator role reads the view');
RESET ROLE;
SELECT ok(bc_join.attestor_stats_reset() IS NOT NULL, 'reset again');
SELECT is((SELECT count(*) FROM bc_join.attestor_statistics), 0::bigint, 'and nothing is counted');

SELECT * FROM finish();
ROLLBACK;
