-- keys.sql: the public halves are published through SQL; no private key is
-- ever readable through SQL, from any function or any table.
\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only on
\getenv bcd BCJ_BCD
\getenv keys BCJ_SERVICE_KEYS
\getenv scratch BCJ_SCRATCH
\getenv keydir BCJ_KEY_DIR
\getenv privhex BCJ_PRIVATE_HEX
\set d :scratch/pgtap_keys
\set mk `mkdir -p :d`
\getenv josetool BCJ_JOSE_TOOL
\set sigjwk `:josetool jwk :keydir/signing.key`
\set encjwk `:josetool jwk :keydir/encryption.key`
\set capem `cat :keydir/node-ca.crt`
\set sigkid `:josetool thumbprint :keydir/signing.key`
\set enckid `:josetool thumbprint :keydir/encryption.key`

BEGIN;
SELECT plan(10);

SELECT is(bc_join.signing_jwk(), :'sigjwk'::jsonb, 'signing_jwk() is the public half of signing.key');
SELECT is(bc_join.encryption_jwk(), :'encjwk'::jsonb, 'encryption_jwk() is the public half of encryption.key');
SELECT is(bc_join.node_ca_certificate(), :'capem' || E'\n', 'node_ca_certificate() is node-ca.crt');
SELECT is(bc_join.service_keys() - 'trustDomain',
		  jsonb_build_object('signingKey', :'sigjwk'::jsonb, 'encryptionKey', :'encjwk'::jsonb,
							 'signingKeys', jsonb_build_array(:'sigjwk'::jsonb || jsonb_build_object('kid', :'sigkid')),
							 'encryptionKeys', jsonb_build_array(:'encjwk'::jsonb || jsonb_build_object('kid', :'enckid')),
							 'nodeCa', :'capem' || E'\n'),
		  'service_keys() bundles the public halves, the sets with their RFC 7638 kids');
SELECT is(bc_join.service_keys()->>'trustDomain', 'test.bc-join.local', 'service_keys() names the trust domain');
SELECT ok(NOT (bc_join.signing_jwk() ? 'd') AND NOT (bc_join.encryption_jwk() ? 'd'),
		  'no JWK carries a private member');

-- Every private scalar, as hex and as base64url (a JWK's "d").
CREATE TEMP TABLE secrets AS
	SELECT lpad(right(h, 64), 64, '0') AS hex, rtrim(translate(encode(decode(lpad(right(h, 64), 64, '0'), 'hex'), 'base64'), E'+/\n', '-_'), '=') AS b64
	FROM unnest(string_to_array(:'privhex', ',')) h;
SELECT is((SELECT count(*) FROM secrets WHERE length(hex) = 64), 4::bigint, 'the test knows the four private keys');

-- Some data in every table: a join and a refusal.
SELECT bc_join.create_tenant('k') AS t \gset
SELECT bc_join.create_site(:'t', 's') AS s \gset
SELECT bc_join.create_pool(:'t', :'s', 'p') AS p \gset
SELECT bc_join.create_join_token(:'t', :'p') AS tok \gset
\set req `:bcd join-request --service-keys :keys --token :'tok' --out-dir :d/a`
SELECT bc_join(:'req') IS NOT NULL AS joined \gset
SELECT bc_join(:'req') IS NOT NULL AS refused \gset

-- Everything SQL can call without arguments, and every row of every table.
CREATE FUNCTION pg_temp.everything() RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE
	f regprocedure;
	r regclass;
	out text;
BEGIN
	FOR f IN SELECT p.oid FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
			 WHERE n.nspname = 'bc_join' AND p.pronargs = p.pronargdefaults
			   AND p.prorettype NOT IN ('void'::regtype, 'trigger'::regtype) AND NOT p.proretset
			   AND p.proname NOT IN ('random_secret', 'attestor_stats_reset')
	LOOP
		EXECUTE format('SELECT bc_join.%I()::text', (SELECT proname FROM pg_proc WHERE oid = f)) INTO out;
		RETURN NEXT f::text || ' ' || coalesce(out, '');
	END LOOP;
	FOR r IN SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			 WHERE n.nspname = 'bc_join' AND c.relkind = 'r'
	LOOP
		RETURN QUERY EXECUTE format('SELECT %L || '' '' || t::text FROM %s t', r::text, r);
	END LOOP;
END $$;
CREATE TEMP TABLE seen AS SELECT * FROM pg_temp.everything() e;
SELECT cmp_ok((SELECT count(*) FROM seen), '>', 10::bigint, 'functions and rows were read');
SELECT is((SELECT count(*) FROM seen, secrets
		   WHERE strpos(lower(seen.e), secrets.hex) > 0 OR strpos(seen.e, secrets.b64) > 0
			  OR strpos(seen.e, encode(decode(secrets.hex, 'hex'), 'escape')) > 0),
		  0::bigint, 'no function result and no row holds a private key');
SELECT is((SELECT count(*) FROM seen WHERE e LIKE '%PRIVATE KEY%'), 0::bigint, 'no PEM private key anywhere');

SELECT * FROM finish();
ROLLBACK;
