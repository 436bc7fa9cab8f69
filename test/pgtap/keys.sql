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
\set jwtjwk `:josetool jwk :keydir/jwt-svid.key`
\set jwtkid `:josetool thumbprint :keydir/jwt-svid.key`

BEGIN;
SELECT plan(16);

SELECT is(bc_join.signing_jwk(), :'sigjwk'::jsonb, 'signing_jwk() is the public half of signing.key');
SELECT is(bc_join.encryption_jwk(), :'encjwk'::jsonb, 'encryption_jwk() is the public half of encryption.key');
SELECT is(bc_join.node_ca_certificate(), :'capem' || E'\n', 'node_ca_certificate() is node-ca.crt');
SELECT is(bc_join.service_keys() - 'trustDomain' - 'issuedAt' - 'signed',
		  jsonb_build_object('signingKey', :'sigjwk'::jsonb, 'encryptionKey', :'encjwk'::jsonb,
							 'signingKeys', jsonb_build_array(:'sigjwk'::jsonb || jsonb_build_object('kid', :'sigkid')),
							 'encryptionKeys', jsonb_build_array(:'encjwk'::jsonb || jsonb_build_object('kid', :'enckid')),
							 'jwtKeys', jsonb_build_array(:'jwtjwk'::jsonb || jsonb_build_object('kid', :'jwtkid')),
							 'nodeCa', :'capem' || E'\n'),
		  'service_keys() bundles the public halves, the sets with their RFC 7638 kids (jwtKeys: jwt-svid.key)');
SELECT is(bc_join.service_keys()->>'trustDomain', 'test.bc-join.local', 'service_keys() names the trust domain');

-- The time agents pin (#26.4): issuedAt, and the document with it signed by the current key.
SELECT is(bc_join.service_keys()->>'issuedAt', to_char(bc_join.compute_now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
		  'service_keys() carries issuedAt, the service clock');
\set wsig `:josetool jwk :keydir/signing.key > :d/signing.jwk && echo ok`
SELECT bc_join.service_keys()->>'signed' \g (format=unaligned tuples_only=on) :d/signed.jws
\set signedpl `:josetool verify :d/signing.jwk < :d/signed.jws || echo does-not-verify`
SELECT is(convert_from(bc_join.b64url_decode(split_part(bc_join.service_keys()->>'signed', '.', 1)), 'UTF8')::jsonb->>'kid',
		  :'sigkid', 'signed is a JWS by the current signing key (its kid)');
SELECT is(:'signedpl'::jsonb, bc_join.service_keys() - 'signed',
		  'that verifies, and holds the very document with its issuedAt');
-- bcd believes the time only signed: a file whose issuedAt or keys differ from what
-- signed holds, or an issuedAt without signed, is refused; a file without either loads.
\set tok jt_00000000000000000000000000000000.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA
SELECT jsonb_set(bc_join.service_keys(), '{issuedAt}', '"2001-01-01T00:00:00Z"') \g (format=unaligned tuples_only=on) :d/backdated.json
SELECT bc_join.service_keys() - 'signed' \g (format=unaligned tuples_only=on) :d/unsigned.json
SELECT bc_join.service_keys() - 'signed' - 'issuedAt' \g (format=unaligned tuples_only=on) :d/old.json
\set backdated `out=$(:bcd join-request --service-keys :d/backdated.json --token :tok --out-dir :d/b1 2>&1 >/dev/null); rc=$?; echo "$out (rc=$rc)"`
\set unsigned `out=$(:bcd join-request --service-keys :d/unsigned.json --token :tok --out-dir :d/b2 2>&1 >/dev/null); rc=$?; echo "$out (rc=$rc)"`
\set old `:bcd join-request --service-keys :d/old.json --token :tok --out-dir :d/b3 >/dev/null 2>&1; echo "(rc=$?)"`
SELECT ok(:'backdated' LIKE '%the document "signed" holds is not the file''s%' AND :'backdated' NOT LIKE '%(rc=0)',
		  'bcd refuses a file whose issuedAt is not the one signed: ' || :'backdated');
SELECT ok(:'unsigned' LIKE '%issuedAt without "signed"%' AND :'unsigned' NOT LIKE '%(rc=0)',
		  'and one with an issuedAt that is not signed: ' || :'unsigned');
SELECT is(:'old'::text, '(rc=0)', 'a file without issuedAt and signed (made before 0.2.0) still loads');
SELECT ok(NOT (bc_join.signing_jwk() ? 'd') AND NOT (bc_join.encryption_jwk() ? 'd'),
		  'no JWK carries a private member');

-- Every private scalar, as hex and as base64url (a JWK's "d").
CREATE TEMP TABLE secrets AS
	SELECT lpad(right(h, 64), 64, '0') AS hex, rtrim(translate(encode(decode(lpad(right(h, 64), 64, '0'), 'hex'), 'base64'), E'+/\n', '-_'), '=') AS b64
	FROM unnest(string_to_array(:'privhex', ',')) h;
SELECT is((SELECT count(*) FROM secrets WHERE length(hex) = 64), 8::bigint, 'the test knows the eight private keys (jwt-svid.key, ocsp.key and the SSH CA keys too)');

-- Some data in every table: a join and a refusal.
SELECT bc_join.create_tenant('k') AS t \gset
SELECT bc_join.create_site(:'t', 's') AS s \gset
SELECT bc_join.create_pool(:'t', :'s', 'p') AS p \gset
SELECT bc_join.create_join_token(:'t', :'p') AS tok \gset
\set req `:bcd join-request --service-keys :keys --token :'tok' --out-dir :d/a`
SELECT bc_join(:'req') IS NOT NULL AS joined \gset
SELECT bc_join(:'req') IS NOT NULL AS refused \gset

-- Everything SQL can call without arguments, and every row of every table;
-- with an issuer, so that oidc_discovery() and jwks() answer too.
SET LOCAL bc_join.jwt_issuer = 'https://oidc.test.bc-join.local';
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
