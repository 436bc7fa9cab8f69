-- request_size.sql: "a request over 64 KiB is INVALID_INPUT" (CONTRACT.md) counts the
-- request's bytes as compact JSON text, not its jsonb's: a request of exactly 65,536
-- bytes is not refused for its size, one of 65,537 is; whitespace a sender adds is not
-- counted (jsonb keeps none); escapes are (a string of control characters is small in
-- jsonb and six times larger as text).  Renewals, sessions, SSH and command results
-- are bounded by the same function (bc_jsonb_text_over, src/ext/json.c).
\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only on
\getenv bcd BCJ_BCD
\getenv keys BCJ_SERVICE_KEYS
\getenv scratch BCJ_SCRATCH
\set d :scratch/pgtap_request_size
\set mk `rm -rf :d && mkdir -p :d`
\set req `:bcd join-request --service-keys :keys --out-dir :d/a`

BEGIN;
SELECT plan(9);

SELECT set_config('t.csr', :'req'::jsonb->>'csr', true) IS NOT NULL AS ok \gset
-- Each call's SQLSTATE and message, or that it answered.
CREATE FUNCTION pg_temp.outcome(r text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	PERFORM bc_join(r::jsonb);
	RETURN 'answered';
EXCEPTION WHEN others THEN
	RETURN SQLSTATE || ' ' || SQLERRM;
END $$;
-- {"csr":…,"role":"node","attestation":"AAA…"} written compactly, pad bytes of attestation,
-- then ws spaces after it (still one JSON text).
CREATE FUNCTION pg_temp.req(pad int, ws int DEFAULT 0) RETURNS text LANGUAGE sql AS $$
	SELECT format('{"csr":"%s","role":"node","attestation":"%s"}%s',
				  current_setting('t.csr'), repeat('A', pad), repeat(' ', ws)) $$;
SELECT 65536 - octet_length(pg_temp.req(0)) AS pad \gset
\set over '22023 invalid join request: the request is over 65536 bytes'

SELECT is(octet_length(pg_temp.req(:pad)), 65536, 'the request below is 65,536 bytes of compact JSON');
SELECT isnt(pg_temp.outcome(pg_temp.req(:pad)), :'over', '65,536 bytes: not refused for its size (its attestation is, later)');
SELECT is(pg_temp.outcome(pg_temp.req(:pad + 1)), :'over', '65,537 bytes: over 64 KiB');
SELECT is(pg_temp.outcome(pg_temp.req(:pad, 70000)), pg_temp.outcome(pg_temp.req(:pad)),
		  'the same request followed by 70,000 spaces: whitespace is not the request''s');
SELECT is(pg_temp.outcome(format('{"csr":"%s","role":"node","attestation":"%s"}', current_setting('t.csr'),
								 repeat('\u0041', :pad))),
		  pg_temp.outcome(pg_temp.req(:pad)), 'needless escapes (\u0041 for A) are not counted either');
-- claims of control characters: 64 MACs of 256 U+0001 are 16 kB of jsonb and 98 kB as text
SELECT is(pg_temp.outcome(format('{"csr":"%s","role":"node","claims":{"macs":%s}}', current_setting('t.csr'),
								 (SELECT jsonb_agg(repeat(chr(1), 256)) FROM generate_series(1, 64))::text)),
		  :'over', 'a request whose escapes make it over 64 KiB as text is over');
SELECT ok(pg_column_size(format('{"csr":"%s","role":"node","claims":{"macs":%s}}', current_setting('t.csr'),
								(SELECT jsonb_agg(repeat(chr(1), 256)) FROM generate_series(1, 64))::text)::jsonb) < 65536,
		  'though its jsonb is under 64 KiB');
-- numbers count as numeric_out writes them; a jsonb over 8 x 64 KiB is over at once
SELECT is(pg_temp.outcome(format('{"csr":"%s","role":"node","claims":{"n":%s}}', current_setting('t.csr'),
								 (SELECT jsonb_agg(0) FROM generate_series(1, 40000))::text)),
		  :'over', '40,000 zeros in an array (80 kB as text): over');
SELECT is(pg_temp.outcome(repeat(' ', 0) || (SELECT jsonb_agg(repeat('x', 100))::text FROM generate_series(1, 6000))),
		  :'over', 'a 600 kB array: over, before its shape is looked at');

SELECT * FROM finish();
ROLLBACK;
