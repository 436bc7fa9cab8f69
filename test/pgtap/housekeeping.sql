-- housekeeping.sql: refusal events are rate-bounded per attestor and reason,
-- with a count of what was suppressed; prune_attestation_uses deletes expired
-- single-use rows in batches and keeps the rows without expiry.
\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only on
\getenv bcd BCJ_BCD
\getenv keys BCJ_SERVICE_KEYS
\getenv scratch BCJ_SCRATCH
\set d :scratch/pgtap_housekeeping
\set mk `rm -rf :d && mkdir -p :d`

BEGIN;
SELECT plan(18);

-- A request whose token nobody issued: refused join-token:unknown every time.
\set req `:bcd join-request --service-keys :keys --token jt_00000000000000000000000000000001.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA --out-dir :d/a`
CREATE FUNCTION pg_temp.refuse_n(n int) RETURNS bigint LANGUAGE sql AS $$
	SELECT count(*) FROM generate_series(1, n) i
	WHERE bc_join(current_setting('bcj.req')::jsonb)->>'status' = 'refused' $$;
SELECT set_config('bcj.req', :'req', true) IS NOT NULL AS set \gset
CREATE FUNCTION pg_temp.recorded() RETURNS bigint LANGUAGE sql AS $$
	SELECT count(*) FROM bc_join.events WHERE type = 'security.join.refused'
	AND payload->>'refusal' = 'join-token:unknown' $$;

------------------------------------------------------- rate-bounded events
SELECT is(pg_temp.refuse_n(65), 65::bigint, '65 refusals in a minute are all refused');
SELECT is(pg_temp.recorded(), 60::bigint, 'at most 60 a minute are recorded by default');
SELECT is(r.suppressed, 5::bigint, 'the other 5 are counted') FROM bc_join.refusal_rate r WHERE r.refusal = 'join-token:unknown';

SET LOCAL bc_join.clock_offset = 61;
SELECT is(pg_temp.refuse_n(1), 1::bigint, 'a minute later');
SELECT is(pg_temp.recorded(), 61::bigint, 'the next refusal is recorded again');
SELECT is(e.payload->>'suppressedBefore', '5', 'and reports what the minute before suppressed')
	FROM bc_join.events e WHERE e.type = 'security.join.refused' ORDER BY e.id DESC LIMIT 1;

-- another reason has its own budget
SELECT is(bc_join(:'req'::jsonb - 'sealedToken')->>'status', 'refused', 'another reason');
SELECT is((SELECT count(*) FROM bc_join.events WHERE payload->>'refusal' = 'join-token:no-evidence'), 1::bigint,
		  'is recorded on its own budget');

-- JoinService's own join:* reasons count apart for each attestor
CREATE FUNCTION public.hk_admit(evidence jsonb, context jsonb) RETURNS jsonb LANGUAGE sql
	SET search_path = pg_catalog, pg_temp
	AS $$ SELECT jsonb_build_object('tenantId', 'root', 'role', 'node', 'siteId', 'nowhere') $$;
SELECT bc_join.register_attestor('hk-a', '1', ARRAY['node'], 'public.hk_admit(jsonb,jsonb)');
SELECT bc_join.register_attestor('hk-b', '1', ARRAY['node'], 'public.hk_admit(jsonb,jsonb)');
\set hreq `:bcd join-request --service-keys :keys --attestor hk-a --out-dir :d/h`
SELECT count(*) FILTER (WHERE bc_join(:'hreq')->>'status' = 'refused') AS ha FROM generate_series(1, 61) \gset
SELECT is(bc_join(:'hreq'::jsonb || '{"attestor":"hk-b"}')->>'status', 'refused', 'hk-b refused for the same reason');
SELECT is(ARRAY(SELECT payload->>'attestor' || ' ' || count(*) FROM bc_join.events
				WHERE type = 'security.join.refused' AND payload->>'refusal' = 'join:site-unknown'
				GROUP BY payload->>'attestor' ORDER BY 1),
		  ARRAY['hk-a 60', 'hk-b 1'], 'after 61 of hk-a''s join:site-unknown, hk-b''s is still recorded');

SET LOCAL bc_join.clock_offset = 200;
SET LOCAL bc_join.refusal_events_per_minute = 2;
SELECT is(pg_temp.refuse_n(5), 5::bigint, 'with a bound of 2');
SELECT is(pg_temp.recorded(), 63::bigint, 'two more are recorded');
SET LOCAL bc_join.refusal_events_per_minute = 0;
SELECT is(pg_temp.refuse_n(5), 5::bigint, 'with no bound');
SELECT is(pg_temp.recorded(), 68::bigint, 'every refusal is recorded');
RESET bc_join.clock_offset;

------------------------------------------------------------------- prune
INSERT INTO bc_join.attestation_uses (attestor, subject, expires_at)
	SELECT 'prune-test', sha256(convert_to(i::text, 'UTF8')),
		   CASE WHEN i <= 12 THEN bc_join.compute_now() - interval '1 second'
				WHEN i <= 15 THEN bc_join.compute_now() + interval '1 hour' END
	FROM generate_series(1, 19) i;
SELECT is(ARRAY[bc_join.prune_attestation_uses(5), bc_join.prune_attestation_uses(5),
				bc_join.prune_attestation_uses(5), bc_join.prune_attestation_uses(5)],
		  ARRAY[5, 5, 2, 0]::bigint[], 'prune deletes expired rows in batches until none is left');
SELECT is((SELECT count(*) FROM bc_join.attestation_uses WHERE attestor = 'prune-test'), 7::bigint,
		  'rows not yet expired and rows without expiry stay');
SELECT is((SELECT count(*) FROM bc_join.attestation_uses WHERE attestor = 'prune-test' AND expires_at IS NULL), 4::bigint,
		  'rows without expiry are kept forever');
SELECT throws_ok('SELECT bc_join.prune_attestation_uses(0)', '22023', NULL, 'a batch below 1 is refused');

SELECT * FROM finish();
ROLLBACK;
