-- provisioned.sql: the provisioned attestor, a one-time token for a node
-- that exists: a re-imaged machine comes back as that node (generation + 1,
-- tenant, site, pool and role kept), the token spent with the certificate;
-- every refusal.  Requests are made by the real agent command.
\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only on
\getenv bcd BCJ_BCD
\getenv keys BCJ_SERVICE_KEYS
\getenv scratch BCJ_SCRATCH
\set d :scratch/pgtap_provisioned
\set mk `rm -rf :d && mkdir -p :d`

BEGIN;
SELECT plan(61);

SELECT bc_join.create_tenant('acme') AS tenant \gset
SELECT bc_join.create_site(:'tenant', 'dc-1') AS site \gset
SELECT bc_join.create_pool(:'tenant', :'site', 'workers') AS pool \gset
\ir lib/fixture.sql
CREATE FUNCTION pg_temp.spent(tok text) RETURNS boolean LANGUAGE sql AS $$
	SELECT spent_at IS NOT NULL FROM bc_join.provisioning_tokens WHERE id = split_part(tok, '.', 1) $$;

-- Two nodes join with join tokens.
SELECT bc_join.create_join_token(:'tenant', :'pool', uses => 2) AS jtok \gset
\set j1 `:bcd join-request --service-keys :keys --token :'jtok' --out-dir :d/n1`
\set j2 `:bcd join-request --service-keys :keys --token :'jtok' --out-dir :d/n2`
SELECT pg_temp.payload(bc_join(:'j1'))->>'nodeId' AS node \gset
SELECT pg_temp.payload(bc_join(:'j2'))->>'nodeId' AS node2 \gset
SELECT serial AS oldserial FROM bc_join.node_certs WHERE node_id = :'node' \gset
\set ev `printf '{"nodeId":"%s"}' :'node' > :d/ev.json && echo :d/ev.json`

------------------------------------------------------------ the token
SELECT bc_join.create_provisioning_token(:'node') AS ptok \gset
SELECT ok(:'ptok' ~ '^pt_[0-9a-f]{32}\.[A-Za-z0-9_-]{43}$', 'a provisioning token is <id>.<secret>');
SELECT ok(NOT EXISTS (SELECT 1 FROM bc_join.provisioning_tokens t
					  WHERE t.secret_sha256 = convert_to(split_part(:'ptok', '.', 2), 'UTF8')),
		  'only a hash of the secret is stored');
SELECT is((SELECT count(*) FROM bc_join.audit_log WHERE action = 'provisioning_token.create'
		   AND node_id = :'node'), 1::bigint, 'its creation is audited');
SELECT is(t.expires_at - t.created_at, interval '1 hour', 'it lives an hour by default')
	FROM bc_join.provisioning_tokens t WHERE t.id = split_part(:'ptok', '.', 1);
SELECT throws_ok($$SELECT bc_join.create_provisioning_token('node_nope')$$, '22023', 'no node has this id',
				 'only for a node that exists');
SELECT throws_ok(format('SELECT bc_join.create_provisioning_token(%L, %L)', :'node', '0 s'), '22023', NULL,
				 'a ttl must be positive');
CREATE ROLE pgtap_prov_op IN ROLE bc_join_operator;
CREATE ROLE pgtap_prov_gw IN ROLE bc_join_gateway;
SET ROLE pgtap_prov_op;
SELECT lives_ok(format('SELECT bc_join.create_provisioning_token(%L)', :'node2'), 'an operator makes one');
SELECT throws_ok('SELECT secret_sha256 FROM bc_join.provisioning_tokens', '42501', NULL,
				 'but cannot read the hashes');
RESET ROLE;
SET ROLE pgtap_prov_gw;
SELECT throws_ok(format('SELECT bc_join.create_provisioning_token(%L)', :'node'), '42501', NULL,
				 'the gateway cannot make one');
RESET ROLE;

------------------------------------------------------- refusals, before
-- evidence that names another node
\set evo `printf '{"nodeId":"%s"}' :'node2' > :d/evo.json && echo :d/evo.json`
\set wrong `:bcd join-request --service-keys :keys --token :'ptok' --attestor provisioned --attestation-file :'evo' --out-dir :d/w`
SELECT is(bc_join(:'wrong'), :'refused'::jsonb, 'a token for another node: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' provisioned:wrong-node', 'refused wrong-node');
SELECT ok(NOT pg_temp.spent(:'ptok'), 'and the token is not spent');
-- a join token offered as a provisioning token, and the other way round
\set asjoin `:bcd join-request --service-keys :keys --token :'jtok' --attestor provisioned --attestation-file :'ev' --out-dir :d/aj`
SELECT is(bc_join(:'asjoin'), :'refused'::jsonb, 'a join token offered to provisioned: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root provisioned:join-token', 'refused join-token');
\set asprov `:bcd join-request --service-keys :keys --token :'ptok' --out-dir :d/ap`
SELECT is(bc_join(:'asprov'), :'refused'::jsonb, 'a provisioning token offered to join-token: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root join-token:provisioning-token', 'refused provisioning-token');
-- no token, a wrong secret, an unknown token
\set notok `:bcd join-request --service-keys :keys --attestor provisioned --attestation-file :'ev' --out-dir :d/nt`
SELECT is(bc_join(:'notok'), :'refused'::jsonb, 'no token: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root provisioned:no-token', 'refused no-token');
\set badsecret `:bcd join-request --service-keys :keys --token "$(echo :'ptok' | cut -d. -f1).AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" --attestor provisioned --attestation-file :'ev' --out-dir :d/bs`
SELECT is(bc_join(:'badsecret'), :'refused'::jsonb, 'a wrong secret: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root provisioned:secret', 'refused secret');
\set unknown `:bcd join-request --service-keys :keys --token pt_00000000000000000000000000000000.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA --attestor provisioned --attestation-file :'ev' --out-dir :d/un`
SELECT is(bc_join(:'unknown'), :'refused'::jsonb, 'an unknown token: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root provisioned:unknown', 'refused unknown');
-- malformed evidence
\set dup `printf '{"nodeId":"x","nodeId":"%s"}' :'node' > :d/dup.json && :bcd join-request --service-keys :keys --token :'ptok' --attestor provisioned --attestation-file :d/dup.json --out-dir :d/dup`
SELECT is(bc_join(:'dup'), :'refused'::jsonb, 'a duplicate nodeId: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root provisioned:malformed', 'refused malformed (duplicates are not read past)');
\set extra `printf '{"nodeId":"%s","role":"site"}' :'node' > :d/extra.json && :bcd join-request --service-keys :keys --token :'ptok' --attestor provisioned --attestation-file :d/extra.json --out-dir :d/extra`
SELECT is(bc_join(:'extra'), :'refused'::jsonb, 'an unknown member: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root provisioned:malformed', 'refused malformed');
\set num `printf '{"nodeId":42}' > :d/num.json && :bcd join-request --service-keys :keys --token :'ptok' --attestor provisioned --attestation-file :d/num.json --out-dir :d/num`
SELECT is(bc_join(:'num'), :'refused'::jsonb, 'a nodeId that is no string: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root provisioned:malformed', 'refused malformed');
SELECT ok(NOT pg_temp.spent(:'ptok'), 'no refusal spent the token');

------------------------------------------------------------- admitted
\set good `:bcd join-request --service-keys :keys --token :'ptok' --attestor provisioned --attestation-file :'ev' --out-dir :d/good`
SELECT bc_join(:'good') AS resp \gset
SELECT is(pg_temp.payload(:'resp')->>'nodeId', :'node', 'the machine comes back as the node the token names');
SELECT is(pg_temp.payload(:'resp')->>'identityGeneration', '2', 'identity generation + 1');
SELECT is(c.revocation_reason, 'reclaimed', 'its older certificate is revoked (reclaimed)') FROM bc_join.node_certs c WHERE c.serial = :'oldserial';
SELECT is(n.tenant_id || ' ' || n.pool_id || ' ' || n.site_id || ' ' || n.role,
		  :'tenant' || ' ' || :'pool' || ' ' || :'site' || ' node', 'tenant, pool, site and role are kept')
	FROM bc_join.nodes n WHERE n.id = :'node';
SELECT ok(pg_temp.spent(:'ptok'), 'the token is spent with the certificate');
SELECT is((SELECT count(*) FROM bc_join.audit_log WHERE action = 'provisioning_token.spend'), 1::bigint,
		  'the spending is audited');
SELECT is(e.payload->>'attestor' || ' ' || (e.payload->>'reclaim'), 'provisioned true', 'node.joined says so')
	FROM bc_join.events e WHERE e.type = 'node.joined' ORDER BY e.id DESC LIMIT 1;
\set v `echo :'resp' | :bcd verify-response --service-keys :keys --dir :d/good --response - >/dev/null; echo $?`
SELECT is(:'v'::int, 0, 'bcd verifies the answer');
SELECT is(pg_temp.payload(bc_join(:'good'))->>'serial', pg_temp.payload(:'resp')->>'serial',
		  'the same request again gets the same certificate (nothing spent twice)');
-- A repeat presents the evidence again; the log does not grow with repeats.
SELECT bc_join.create_provisioning_token(:'node') AS ptok2 \gset
SELECT count(*) AS log0 FROM bc_join.audit_log \gset
SELECT is(pg_temp.payload(bc_join(:'good'))->>'serial', pg_temp.payload(:'resp')->>'serial', 'and again');
SELECT is((SELECT count(*) FROM bc_join.audit_log), :'log0'::bigint, 'repeats add nothing to the issuance log');
SELECT is(bc_join(:'good'::jsonb - 'attestation'), :'refused'::jsonb, 'the repeat without its evidence: the one refusal');
SELECT ok(pg_temp.last_refusal() LIKE '% join:key-reused', 'refused join:key-reused');
\set good2 `:bcd join-request --service-keys :keys --token :'ptok2' --attestor provisioned --attestation-file :'ev' --out-dir :d/good`
SELECT is(bc_join(:'good2'), :'refused'::jsonb, 'the same CSR with another valid provisioning token for the node: the one refusal');
SELECT ok(pg_temp.last_refusal() LIKE '% join:key-reused', 'refused join:key-reused (another subject)');
SELECT ok(NOT pg_temp.spent(:'ptok2'), 'and that token is not spent');
\set good3 `:bcd join-request --service-keys :keys --token :'jtok' --attestor provisioned --attestation-file :'ev' --out-dir :d/good`
SELECT is(bc_join(:'good3'), :'refused'::jsonb, 'the same CSR with a join token: the one refusal');
SELECT is((SELECT payload->'detail'->>'refusal' FROM bc_join.events WHERE type = 'security.join.refused' ORDER BY id DESC LIMIT 1),
		  'provisioned:join-token', 'key-reused, the attestor''s reason in the detail');
SELECT is((SELECT count(*) FROM bc_join.audit_log), :'log0'::bigint, 'refused repeats add nothing to the log either');
\set again `:bcd join-request --service-keys :keys --token :'ptok' --attestor provisioned --attestation-file :'ev' --out-dir :d/again`
SELECT is(bc_join(:'again'), :'refused'::jsonb, 'another machine with the spent token: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' provisioned:spent', 'refused spent');

----------------------------------------------- expired, revoked, retired
SELECT bc_join.create_provisioning_token(:'node', '1 minute') AS xtok \gset
\set late `:bcd join-request --service-keys :keys --token :'xtok' --attestor provisioned --attestation-file :'ev' --out-dir :d/late`
SET LOCAL bc_join.clock_offset = 61;
SELECT is(pg_temp.payload(bc_join(:'late'))->>'status', NULL, 'an expired token is refused');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' provisioned:expired', 'refused expired');
RESET bc_join.clock_offset;
SELECT bc_join.create_provisioning_token(:'node') AS rtok \gset
SELECT ok(bc_join.revoke_provisioning_token(split_part(:'rtok', '.', 1)), 'a token can be revoked');
\set rev `:bcd join-request --service-keys :keys --token :'rtok' --attestor provisioned --attestation-file :'ev' --out-dir :d/rev`
SELECT is(pg_temp.payload(bc_join(:'rev'))->>'status', NULL, 'a revoked token is refused');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' provisioned:revoked', 'refused revoked');

------------------------------------------------------------ resolver
CREATE TABLE public.plg_assets (tag text, node_id text);
INSERT INTO public.plg_assets VALUES ('asset-42', :'node');
CREATE FUNCTION public.asset_node(node_ref text, context jsonb) RETURNS text LANGUAGE sql
	SET search_path = public, pg_catalog, pg_temp
	AS $$ SELECT node_id FROM plg_assets WHERE tag = node_ref $$;
CREATE FUNCTION public.asset_node_loose(node_ref text, context jsonb) RETURNS text LANGUAGE sql
	AS $$ SELECT node_id FROM plg_assets WHERE tag = node_ref $$;
CREATE FUNCTION public.asset_node_int(node_ref int, context jsonb) RETURNS text LANGUAGE sql
	SET search_path = public, pg_catalog, pg_temp
	AS $$ SELECT NULL::text $$;
SELECT throws_ok($$SELECT bc_join.register_provisioning_resolver('public.asset_node_int(int,jsonb)')$$,
				 '22023', 'resolve must be a function (node_ref text, context jsonb) RETURNS text',
				 'a resolver of another signature is refused');
SELECT throws_ok($$SELECT bc_join.register_provisioning_resolver('public.asset_node_loose(text,jsonb)')$$,
				 '22023', 'the resolver public.asset_node_loose(text,jsonb) has no SET search_path of its own',
				 'a resolver without its own search_path is refused');
CREATE FUNCTION pg_temp.resolver_hint() RETURNS text LANGUAGE plpgsql AS $$
DECLARE h text;
BEGIN
	PERFORM bc_join.register_provisioning_resolver('public.asset_node_loose(text,jsonb)');
	RETURN NULL;
EXCEPTION WHEN invalid_parameter_value THEN
	GET STACKED DIAGNOSTICS h = PG_EXCEPTION_HINT;
	RETURN h;
END $$;
SELECT is(pg_temp.resolver_hint(),
		  'Run: ALTER FUNCTION public.asset_node_loose(text,jsonb) SET search_path = public, pg_catalog, pg_temp;',
		  'the refusal''s hint is the ALTER FUNCTION that mends it');
SELECT is((SELECT count(*) FROM bc_join.provisioning_resolver), 0::bigint, 'a refused resolver is not registered');
SELECT lives_ok($$SELECT bc_join.register_provisioning_resolver('public.asset_node(text,jsonb)')$$,
				'a resolver registers');
SELECT bc_join.create_provisioning_token(:'node') AS stok \gset
\set eva `printf '{"nodeId":"asset-42"}' > :d/eva.json && echo :d/eva.json`
\set viares `:bcd join-request --service-keys :keys --token :'stok' --attestor provisioned --attestation-file :'eva' --out-dir :d/res`
SELECT is(pg_temp.payload(bc_join(:'viares'))->>'nodeId', :'node', 'the resolver maps the agent''s nodeId to the node');

SELECT * FROM finish();
ROLLBACK;
