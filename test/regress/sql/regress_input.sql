-- regress_input: malformed join requests raise 22023 (INVALID_INPUT), an
-- unknown attestor 0A000 (UNSUPPORTED), and none of them writes anything.
\set VERBOSITY default
\set SHOW_CONTEXT never
\getenv bcd BCJ_BCD
\getenv scratch BCJ_SCRATCH
\if :{?scratch}
\else
\warn 'regress_input: BCJ_SCRATCH is not set; run it through make installcheck or test/run-all'
\quit
\endif
\set d :scratch/regress_input
\set mk `mkdir -p :d`
-- The keys an agent pins, from this server.
\set keys :d/service-keys.json
SELECT bc_join.service_keys() \g (format=unaligned tuples_only=on) :keys
-- A well-formed request (its token is unknown; input checks come first).
\set req `:bcd join-request --service-keys :keys --token jt_00000000000000000000000000000000.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA --out-dir :d/ok`
-- A CSR with an RSA key, which the service does not certify.
\set rsacsr `openssl req -new -newkey rsa:2048 -nodes -keyout /dev/null -subj /CN=rsa -outform DER 2>/dev/null | basenc --base64url -w0 | tr -d =`
CREATE TEMP TABLE before AS
	SELECT (SELECT count(*) FROM bc_join.events) AS events,
		   (SELECT count(*) FROM bc_join.nodes) AS nodes,
		   (SELECT count(*) FROM bc_join.audit_log) AS audit;
-- Each call's SQLSTATE and message.
CREATE FUNCTION pg_temp.try(req jsonb) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	PERFORM bc_join(req);
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ' ' || SQLERRM;
END $$;
-- The whole error, once each.
SELECT bc_join('[]');
SELECT bc_join(:'req'::jsonb || '{"attestor":"no-such-attestor"}');
-- Shapes
SELECT pg_temp.try(NULL);
SELECT pg_temp.try('"a string"');
SELECT pg_temp.try('{}');
SELECT pg_temp.try(:'req'::jsonb - 'csr');
SELECT pg_temp.try(:'req'::jsonb - 'role');
SELECT pg_temp.try(:'req'::jsonb || '{"role":"admin"}');
SELECT pg_temp.try(:'req'::jsonb || '{"role":5}');
SELECT pg_temp.try(:'req'::jsonb || '{"extra":1}');
SELECT pg_temp.try(:'req'::jsonb || '{"attestor":"Bad Id"}');
SELECT pg_temp.try(:'req'::jsonb || jsonb_build_object('attestor', repeat('a', 65)));
-- csr
SELECT pg_temp.try(:'req'::jsonb || '{"csr":""}');
SELECT pg_temp.try(:'req'::jsonb || '{"csr":"!!!!"}');
SELECT pg_temp.try(:'req'::jsonb || '{"csr":"AAAA"}');
SELECT pg_temp.try(:'req'::jsonb || '{"csr":"QUJD="}');
SELECT pg_temp.try(:'req'::jsonb || jsonb_build_object('csr', :'rsacsr'));
SELECT pg_temp.try(:'req'::jsonb || jsonb_build_object('csr', (:'req'::jsonb->>'csr') || 'AAAA'));
SELECT pg_temp.try(:'req'::jsonb || jsonb_build_object('csr', repeat('A', 9000)));
-- claims
SELECT pg_temp.try(:'req'::jsonb || '{"claims":[]}');
SELECT pg_temp.try(:'req'::jsonb || '{"claims":{"color":"red"}}');
SELECT pg_temp.try(:'req'::jsonb || '{"claims":{"macs":"02:00:00:00:00:01"}}');
SELECT pg_temp.try(:'req'::jsonb || '{"claims":{"serial":["a"]}}');
SELECT pg_temp.try(:'req'::jsonb || '{"claims":{"macs":[["a"]]}}');
SELECT pg_temp.try(:'req'::jsonb || '{"claims":{"hostname":{"a":1}}}');
SELECT pg_temp.try(:'req'::jsonb || jsonb_build_object('claims', jsonb_build_object('hostname', repeat('h', 257))));
SELECT pg_temp.try(:'req'::jsonb || jsonb_build_object('claims', jsonb_build_object('macs',
	(SELECT jsonb_agg(i::text) FROM generate_series(1, 65) i))));
-- evidence
SELECT pg_temp.try(:'req'::jsonb || '{"sealedToken":"a.b.c"}');
SELECT pg_temp.try(:'req'::jsonb || '{"sealedToken":"a.b.c.d.e+"}');
SELECT pg_temp.try(:'req'::jsonb || jsonb_build_object('sealedToken', repeat('a', 5000)));
SELECT pg_temp.try(:'req'::jsonb || '{"attestation":"***"}');
SELECT pg_temp.try(:'req'::jsonb || '{"attestation":"A"}');
SELECT pg_temp.try(:'req'::jsonb || jsonb_build_object('attestation', repeat('A', 50000)));
-- over 64 KiB in all
SELECT pg_temp.try(:'req'::jsonb || jsonb_build_object('attestation', repeat('A', 40000),
	'sealedToken', repeat('a', 4000), 'claims',
	(SELECT jsonb_object_agg(k, repeat('x', 256)) FROM unnest(ARRAY['hostname','serial','arch','productUuid']) k)
	|| jsonb_build_object('macs', (SELECT jsonb_agg(repeat('m', 256)) FROM generate_series(1, 64)),
						  'gpuUuids', (SELECT jsonb_agg(repeat('g', 256)) FROM generate_series(1, 64)))));
-- optional fields given as null are absent; the request stays well-formed
SELECT pg_temp.try(:'req'::jsonb || '{"attestor":null,"attestation":null,"claims":null}');
SELECT pg_temp.try(:'req'::jsonb || '{"attestor":""}');
-- unknown attestor
SELECT pg_temp.try(:'req'::jsonb || '{"attestor":"acme-asset"}');
-- Nothing written by any of them but the two refusals of the well-formed ones.
SELECT (SELECT count(*) FROM bc_join.nodes) - nodes AS new_nodes,
	   (SELECT count(*) FROM bc_join.audit_log) - audit AS new_audit,
	   (SELECT count(*) FROM bc_join.events) - events AS new_events
FROM before;
SELECT tenant_id, payload->>'refusal' AS refusal FROM bc_join.events ORDER BY id;
