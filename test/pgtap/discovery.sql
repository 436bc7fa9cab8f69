-- discovery.sql: the discovery attestor, a PXE-booted ramdisk vouched for by
-- its site agent: a ramdisk token and a site assertion (a JWS by the site
-- agent's node key over purpose, serial, siteId, mac, epoch, csrSha256, iat,
-- exp); role ramdisk, certTtlSeconds 7200 (set_discovery_site sets another),
-- the six kinds; every refusal; the epoch and its bump when the site agent
-- re-keys; approval modes; each machine remembered with the node it joined as.
\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only on
\getenv bcd BCJ_BCD
\getenv keys BCJ_SERVICE_KEYS
\getenv scratch BCJ_SCRATCH
\getenv josetool BCJ_JOSE_TOOL
\set d :scratch/pgtap_discovery
\set mk `rm -rf :d && mkdir -p :d`
\set dr test/tools/discovery-request.sh
\set mac1 'aa:bb:cc:00:00:01'
\set mac2 'aa:bb:cc:00:00:02'
\set mac3 'aa:bb:cc:00:00:03'

BEGIN;
SELECT plan(81);

SELECT bc_join.create_tenant('acme') AS tenant \gset
SELECT bc_join.create_site(:'tenant', 'dc-1') AS site \gset
SELECT bc_join.create_site(:'tenant', 'dc-2') AS site2 \gset
SELECT bc_join.create_pool(:'tenant', :'site', 'workers') AS pool \gset
\ir lib/fixture.sql
CREATE FUNCTION pg_temp.rtok() RETURNS text LANGUAGE sql AS $$
	SELECT bc_join.create_join_token(current_setting('t.tenant'), current_setting('t.pool'), role => 'ramdisk') $$;
SELECT set_config('t.tenant', :'tenant', true), set_config('t.pool', :'pool', true) \gset
SELECT extract(epoch FROM bc_join.compute_now())::bigint AS now \gset
SELECT :now + 600 AS exp \gset

-- The site agent of dc-1 joins (a site token), and a plain node of the pool.
SELECT bc_join.create_join_token(:'tenant', NULL, role => 'site', site_id => :'site') AS stok \gset
\set sreq `:bcd join-request --service-keys :keys --token :'stok' --out-dir :d/sa --role site`
SELECT pg_temp.payload(bc_join(:'sreq'))->>'serial' AS sa \gset
SELECT bc_join.create_join_token(:'tenant', :'pool') AS ntok \gset
\set nreq `:bcd join-request --service-keys :keys --token :'ntok' --out-dir :d/plain`
SELECT pg_temp.payload(bc_join(:'nreq'))->>'serial' AS plain \gset

------------------------------------------------------------ not enabled
SELECT pg_temp.rtok() AS t \gset
\set rq `:dr :bcd :josetool :keys :d/r0 :'t' :d/sa/node.key :sa :site :mac1 1 :now :exp`
SELECT is(bc_join(:'rq'), :'refused'::jsonb, 'a site without discovery enabled admits no ramdisk');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' discovery:site-not-enabled', 'recorded discovery:site-not-enabled');
SELECT bc_join.set_discovery_site(:'site');
SELECT is(epoch, 1::bigint, 'enabled: epoch 1') FROM bc_join.discovery_sites WHERE site_id = :'site';

------------------------------------------------------------ admitted
SELECT pg_temp.rtok() AS t \gset
\set rq `:dr :bcd :josetool :keys :d/r1 :'t' :d/sa/node.key :sa :site :mac1 1 :now :exp`
SELECT bc_join(:'rq') AS r1 \gset
SELECT is(:'r1'::jsonb->>'status', 'issued', 'a ramdisk with a ramdisk token and its site agent''s assertion joins');
SELECT pg_temp.payload(:'r1')->>'nodeId' AS rnode, pg_temp.payload(:'r1')->>'serial' AS rserial \gset
SELECT is(role || ' ' || site_id || ' ' || (pool_id IS NULL), 'ramdisk ' || :'site' || ' true', 'as a ramdisk of the site')
	FROM bc_join.nodes WHERE id = :'rnode';
SELECT is(allowed_kinds, ARRAY['inventory.refresh', 'logs.collect', 'diag.*', 'disk.wipe', 'deploy.*', 'boot.kexec'],
	'its certificate allows the six kinds') FROM bc_join.node_certs WHERE serial = :'rserial';
SELECT ok(not_after <= bc_join.compute_now() + interval '7200 seconds', 'for at most 7200 s')
	FROM bc_join.node_certs WHERE serial = :'rserial';
SELECT is(pg_temp.payload(:'r1')->'allowedKinds', '["inventory.refresh", "logs.collect", "diag.*", "disk.wipe", "deploy.*", "boot.kexec"]'::jsonb,
	'allowedKinds are in the signed answer');
SELECT is(payload->>'attestor', 'discovery', 'node.joined names the attestor')
	FROM bc_join.events WHERE type = 'node.joined' ORDER BY id DESC LIMIT 1;
SELECT is(uses_left, 0, 'the ramdisk token is spent') FROM bc_join.join_tokens WHERE id = split_part(:'t', '.', 1);
SELECT is(count(*), 1::bigint, 'the assertion is used, until it expires')
	FROM bc_join.attestation_uses WHERE attestor = 'discovery' AND expires_at = to_timestamp(:exp);
SELECT is(count(*), 1::bigint, 'the machine is remembered') FROM bc_join.discovery_machines WHERE mac = :'mac1';
SELECT is(last_node_id, :'rnode', 'with the node it joined as') FROM bc_join.discovery_machines WHERE mac = :'mac1';
SELECT lives_ok(format('SELECT bc_join.enqueue_command(%L, %L, %L)', :'rnode', 'disk.wipe', '{}'),
	'disk.wipe can be queued for it');
SELECT throws_ok(format('SELECT bc_join.enqueue_command(%L, %L, %L)', :'rnode', 'node.reboot', '{}'), '22023',
	'the node''s certificate does not allow command kind node.reboot', 'node.reboot cannot');
-- A repeat presents the evidence again: the same token and assertion, for the same machine.
SELECT is(pg_temp.payload(bc_join(:'rq'))->>'serial', :'rserial', 'the same request repeated gets the same certificate');
SELECT pg_temp.rtok() AS t9 \gset
SELECT count(*) AS log0 FROM bc_join.audit_log \gset
SELECT is(pg_temp.payload(bc_join(:'rq'))->>'serial', :'rserial', 'and again');
SELECT is((SELECT count(*) FROM bc_join.audit_log), :'log0'::bigint, 'a repeat adds nothing to the issuance log');
SELECT is(bc_join(:'rq'::jsonb - 'attestation'), :'refused'::jsonb, 'the CSR and token without the assertion: refused');
SELECT ok(pg_temp.last_refusal() LIKE '% join:key-reused', 'recorded join:key-reused');
\set rqm `:dr :bcd :josetool :keys :d/r1 :'t' :d/sa/node.key :sa :site :mac2 1 :now :exp`
SELECT is(bc_join(:'rqm'), :'refused'::jsonb, 'the same CSR and token with a valid assertion for another machine: refused');
SELECT ok(pg_temp.last_refusal() LIKE '% join:key-reused', 'recorded join:key-reused (another subject)');
\set rqt `:dr :bcd :josetool :keys :d/r1 :'t9' :d/sa/node.key :sa :site :mac1 1 :now :exp`
SELECT is(bc_join(:'rqt'), :'refused'::jsonb, 'the same CSR and machine with another ramdisk token: refused');
SELECT is(uses_left, 1, 'and that token is not spent') FROM bc_join.join_tokens WHERE id = split_part(:'t9', '.', 1);
SELECT is((SELECT count(*) FROM bc_join.audit_log), :'log0'::bigint, 'refused repeats add nothing to the log');

------------------------------------------------------------ refusals
-- Each with a fresh token and ramdisk key.
SELECT pg_temp.rtok() AS t \gset
\set rq `:dr :bcd :josetool :keys :d/r2 '' :d/sa/node.key :sa :site :mac2 1 :now :exp`
SELECT is(bc_join(:'rq'), :'refused'::jsonb, 'no token: refused');
SELECT is(pg_temp.last_refusal(), 'root discovery:no-token', 'recorded discovery:no-token');
SELECT bc_join.create_join_token(:'tenant', :'pool') AS ntok2 \gset
\set rq `:dr :bcd :josetool :keys :d/r2 :'ntok2' :d/sa/node.key :sa :site :mac2 1 :now :exp`
SELECT is(bc_join(:'rq'), :'refused'::jsonb, 'a node token: refused');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' discovery:role', 'recorded discovery:role');
\set rq `:dr :bcd :josetool :keys :d/r2 :'t' :d/r2/node.key :sa :site :mac2 1 :now :exp`
SELECT is(bc_join(:'rq'), :'refused'::jsonb, 'an assertion not signed by the site agent''s key');
SELECT is(pg_temp.last_refusal(), 'root discovery:assertion-signature', 'recorded discovery:assertion-signature');
\set rq `:dr :bcd :josetool :keys :d/r2 :'t' :d/plain/node.key :plain :site :mac2 1 :now :exp`
SELECT is(bc_join(:'rq'), :'refused'::jsonb, 'an assertion by a node that is no site agent');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' discovery:not-site-agent', 'recorded discovery:not-site-agent');
\set rq `:dr :bcd :josetool :keys :d/r2 :'t' :d/sa/node.key :sa :site2 :mac2 1 :now :exp`
SELECT is(bc_join(:'rq'), :'refused'::jsonb, 'an assertion for another site');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' discovery:site-mismatch', 'recorded discovery:site-mismatch');
\set rq `:dr :bcd :josetool :keys :d/r2 :'t' :d/sa/node.key :sa :site :mac2 1 :now :exp :d/other`
SELECT is(bc_join(:'rq'), :'refused'::jsonb, 'an assertion for another CSR');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' discovery:csr-binding', 'recorded discovery:csr-binding');
SELECT :now - 700 AS old_iat, :now - 10 AS old_exp \gset
\set rq `:dr :bcd :josetool :keys :d/r2 :'t' :d/sa/node.key :sa :site :mac2 1 :old_iat :old_exp`
SELECT is(bc_join(:'rq'), :'refused'::jsonb, 'an expired assertion');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' discovery:assertion-expired', 'recorded discovery:assertion-expired');
SELECT :now + 4000 AS far \gset
\set rq `:dr :bcd :josetool :keys :d/r2 :'t' :d/sa/node.key :sa :site :mac2 1 :now :far`
SELECT is(bc_join(:'rq'), :'refused'::jsonb, 'an assertion living over an hour');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' discovery:malformed-assertion', 'recorded discovery:malformed-assertion');
\set rq `:dr :bcd :josetool :keys :d/r2 :'t' :d/sa/node.key :sa :site 'AA-BB' 1 :now :exp`
SELECT is(pg_temp.last_refusal(), :'tenant' || ' discovery:malformed-assertion', 'a malformed MAC: malformed-assertion')
	FROM (SELECT bc_join(:'rq')) x;
-- The same assertion, already used (its hash in attestation_uses).
\set rq `:dr :bcd :josetool :keys :d/r2 :'t' :d/sa/node.key :sa :site :mac2 1 :now :exp`
INSERT INTO bc_join.attestation_uses (attestor, subject, expires_at)
	SELECT 'discovery', sha256(convert_to(convert_from(bc_join.b64url_decode(:'rq'::jsonb->>'attestation'), 'UTF8')::jsonb->>'assertion', 'UTF8')),
		   to_timestamp(:exp);
SELECT is(bc_join(:'rq'), :'refused'::jsonb, 'a used assertion');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' discovery:reused', 'recorded discovery:reused');

-- Evidence that is no JSON object of {"assertion"}; an assertion that is no JWS.
\set bad `printf 'not json' > :d/bad.json && :bcd join-request --service-keys :keys --token :'t' --out-dir :d/r2 --role ramdisk --attestor discovery --attestation-file :d/bad.json`
SELECT is(bc_join(:'bad'), :'refused'::jsonb, 'evidence that is not JSON');
SELECT is(pg_temp.last_refusal(), 'root discovery:malformed', 'recorded discovery:malformed');
\set bad `printf '{"assertion":"x.y"}' > :d/bad.json && :bcd join-request --service-keys :keys --token :'t' --out-dir :d/r2 --role ramdisk --attestor discovery --attestation-file :d/bad.json`
SELECT is(bc_join(:'bad'), :'refused'::jsonb, 'an assertion that is no JWS');
SELECT is(pg_temp.last_refusal(), 'root discovery:malformed-proof', 'recorded discovery:malformed-proof');
-- A site agent of another tenant.
SELECT bc_join.create_tenant('other') AS tenant2 \gset
SELECT bc_join.create_site(:'tenant2', 'elsewhere') AS osite \gset
SELECT bc_join.create_join_token(:'tenant2', NULL, role => 'site', site_id => :'osite') AS otok \gset
\set oreq `:bcd join-request --service-keys :keys --token :'otok' --out-dir :d/osa --role site`
SELECT pg_temp.payload(bc_join(:'oreq'))->>'serial' AS osa \gset
\set rq `:dr :bcd :josetool :keys :d/r2 :'t' :d/osa/node.key :osa :site :mac2 1 :now :exp`
SELECT is(bc_join(:'rq'), :'refused'::jsonb, 'a site agent of another tenant');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' discovery:tenant-mismatch', 'recorded discovery:tenant-mismatch');

------------------------------------------------------------ the epoch
SELECT is(bc_join.bump_site_epoch(:'site'), 2::bigint, 'bump_site_epoch moves the epoch on');
\set rq `:dr :bcd :josetool :keys :d/r3 :'t' :d/sa/node.key :sa :site :mac2 1 :now :exp`
SELECT is(bc_join(:'rq'), :'refused'::jsonb, 'an assertion of the old epoch');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' discovery:stale-epoch', 'recorded discovery:stale-epoch');
-- The site agent renews (re-keys): the epoch moves on again, the old certificate is revoked.
\set s2 `:bcd join-request --service-keys :keys --out-dir :d/sa2 --role site`
SELECT jsonb_build_object('purpose', 'renew', 'serial', :'sa',
	'csrSha256', bc_join.b64url_encode(sha256(bc_join.b64url_decode(:'s2'::jsonb->>'csr'))), 'iat', :now)::text AS rpp \gset
\set rproof `printf %s :'rpp' | :josetool sign :d/sa/node.key`
SELECT bc_join.renew(jsonb_build_object('csr', :'s2'::jsonb->>'csr', 'proof', :'rproof')) AS rr \gset
SELECT pg_temp.payload(:'rr')->>'serial' AS sa2 \gset
\set stored `echo :'rr' | :bcd verify-response --service-keys :keys --dir :d/sa2 --response - >/dev/null && echo ok`
SELECT is(epoch, 3::bigint, 're-keying the site agent bumps the epoch') FROM bc_join.discovery_sites WHERE site_id = :'site';
\set rq `:dr :bcd :josetool :keys :d/r3 :'t' :d/sa/node.key :sa :site :mac2 3 :now :exp`
SELECT is(bc_join(:'rq'), :'refused'::jsonb, 'an assertion by the site agent''s old key');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' discovery:revoked', 'recorded discovery:revoked');

------------------------------------------------------------ site_epoch
-- What a site agent asks (POST /v1/site-epoch): its site's epoch, signed.
CREATE FUNCTION pg_temp.epoch_pp(serial text) RETURNS text LANGUAGE sql AS $$
	SELECT jsonb_build_object('purpose', 'site-epoch', 'serial', serial,
		'iat', extract(epoch FROM bc_join.compute_now())::bigint)::text $$;
SELECT pg_temp.epoch_pp(:'sa2') AS epp \gset
\set eproof `printf %s :'epp' | :josetool sign :d/sa2/node.key`
SELECT bc_join.site_epoch(jsonb_build_object('proof', :'eproof')) AS e1 \gset
SELECT is(:'e1'::jsonb->>'status', 'issued', 'site_epoch answers the site agent');
SELECT is(pg_temp.payload(:'e1') - 'iat', jsonb_build_object('purpose', 'site-epoch', 'nodeId',
	(SELECT node_id FROM bc_join.node_certs WHERE serial = :'sa2'), 'serial', :'sa2', 'siteId', :'site', 'epoch', 3),
	'with its node, serial, site and the current epoch, signed');
\set mkjwk `jq .signingKey :keys > :d/signing.jwk && echo ok`
\set everified `printf %s :'e1' | jq -r .response | :josetool verify :d/signing.jwk | jq -r .epoch`
SELECT is(:'everified'::text, '3', 'the answer verifies with the pinned signing key');
SELECT is(bc_join.site_epoch(jsonb_build_object('proof', :'eproof')), :'refused'::jsonb, 'a replayed site-epoch proof is refused');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' site-epoch:reused', 'recorded site-epoch:reused');
SELECT pg_temp.epoch_pp(:'sa') AS epp \gset
\set eproof `printf %s :'epp' | :josetool sign :d/sa/node.key`
SELECT is(bc_join.site_epoch(jsonb_build_object('proof', :'eproof')), :'refused'::jsonb, 'the site agent''s renewed certificate is refused');
SELECT pg_temp.epoch_pp(:'plain') AS epp \gset
\set eproof `printf %s :'epp' | :josetool sign :d/plain/node.key`
SELECT is(bc_join.site_epoch(jsonb_build_object('proof', :'eproof')), :'refused'::jsonb, 'a plain node is no site agent');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' site-epoch:not-site-agent', 'recorded site-epoch:not-site-agent');
SELECT throws_ok($$SELECT bc_join.site_epoch('{"proof": "x", "result": "y"}')$$, '22023', NULL,
	'site_epoch takes only a proof');

------------------------------------------------------------ approval
SELECT bc_join.set_discovery_site(:'site', 'unknown-machines');
\set rq `:dr :bcd :josetool :keys :d/r4 :'t' :d/sa2/node.key :sa2 :site :mac2 3 :now :exp`
SELECT is(bc_join(:'rq')->>'status', 'pending', 'unknown-machines: an unknown MAC waits for an operator');
SELECT bc_join.approve_join_request(id) FROM bc_join.pending_join_requests WHERE attestor = 'discovery';
SELECT bc_join(:'rq') AS r4 \gset
SELECT is(:'r4'::jsonb->>'status', 'issued', 'once approved, the same request joins');
SELECT is(last_node_id, pg_temp.payload(:'r4')->>'nodeId', 'and the approved machine is remembered with its node')
	FROM bc_join.discovery_machines WHERE site_id = :'site' AND mac = :'mac2';
SELECT is(bc_join(:'rq')->>'status', 'issued', 'and repeated: answered again, its approval found consumed by its certificate');
SELECT is((SELECT count(*) FROM bc_join.join_requests WHERE attestor = 'discovery'), 1::bigint, 'no new join request for the repeat');
-- The site agent's own command signs this one: bcd sign-discovery-assertion.
SELECT pg_temp.rtok() AS t \gset
\set mk5 `:bcd join-request --service-keys :keys --out-dir :d/r5 --role ramdisk --attestor discovery >/dev/null && echo ok`
\set ev5 `:bcd sign-discovery-assertion --state-dir :d/sa2 --service-keys :keys --site :site --mac :mac1 --epoch 3 --csr :d/r5/node.csr.der > :d/r5/ev.json && echo :d/r5/ev.json`
\set rq `:bcd join-request --service-keys :keys --token :'t' --out-dir :d/r5 --role ramdisk --attestor discovery --attestation-file :ev5`
SELECT bc_join(:'rq') AS r5 \gset
SELECT is(:'r5'::jsonb->>'status', 'issued', 'a MAC the site has seen joins without waiting (bcd sign-discovery-assertion signed it)');
SELECT is(last_node_id, pg_temp.payload(:'r5')->>'nodeId', 'its next join moves last_node_id to the new node')
	FROM bc_join.discovery_machines WHERE site_id = :'site' AND mac = :'mac1';
SELECT bc_join.set_discovery_site(:'site', 'always');
SELECT pg_temp.rtok() AS t \gset
\set rq `:dr :bcd :josetool :keys :d/r6 :'t' :d/sa2/node.key :sa2 :site :mac1 3 :now :exp`
SELECT is(bc_join(:'rq')->>'status', 'pending', 'always: every machine waits');
SELECT bc_join.reject_join_request(id, 'not ours') FROM bc_join.pending_join_requests WHERE attestor = 'discovery';
SELECT is(bc_join(:'rq'), :'refused'::jsonb, 'a rejected machine is refused');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' discovery:rejected', 'recorded discovery:rejected');

------------------------------------------------------------ certificate lifetime
SELECT bc_join.set_discovery_site(:'site', 'none', NULL, 900);
SELECT is(cert_ttl_seconds || ' ' || array_length(allowed_kinds, 1), '900 6',
	'set_discovery_site sets the ramdisks'' certificate lifetime (the kinds kept)')
	FROM bc_join.discovery_sites WHERE site_id = :'site';
SELECT pg_temp.rtok() AS t \gset
\set rq `:dr :bcd :josetool :keys :d/r7 :'t' :d/sa2/node.key :sa2 :site :mac3 3 :now :exp`
SELECT bc_join(:'rq') AS r7 \gset
SELECT is(:'r7'::jsonb->>'status', 'issued', 'a ramdisk joins');
SELECT is(extract(epoch FROM c.not_after - bc_join.compute_now())::integer, 900,
	'its certificate lives 900 s') FROM bc_join.node_certs c WHERE c.serial = pg_temp.payload(:'r7')->>'serial';
SELECT bc_join.set_discovery_site(:'site', 'none');
SELECT is(cert_ttl_seconds, 900, 'without it, set_discovery_site keeps the lifetime')
	FROM bc_join.discovery_sites WHERE site_id = :'site';
SELECT throws_ok(format('SELECT bc_join.set_discovery_site(%L, %L, NULL, 59)', :'site', 'none'), '22023',
	'cert_ttl_seconds must be between 60 and 7200', 'under 60 s is refused');
SELECT throws_ok(format('SELECT bc_join.set_discovery_site(%L, %L, NULL, 7201)', :'site', 'none'), '22023',
	'cert_ttl_seconds must be between 60 and 7200', 'over 7200 s is refused');

SELECT * FROM finish();
ROLLBACK;
