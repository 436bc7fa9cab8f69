-- deferrals.sql: two-round joins.  An approval deferral an operator approves
-- (or rejects) in psql; a challenge bound to the CSR; deferral answers that
-- are malformed; single-use evidence consumed in a deferring round.
\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only on
\getenv bcd BCJ_BCD
\getenv keys BCJ_SERVICE_KEYS
\getenv scratch BCJ_SCRATCH
\set d :scratch/pgtap_deferrals
\set mk `rm -rf :d && mkdir -p :d`

BEGIN;
SELECT plan(60);

SELECT bc_join.create_tenant('acme') AS tenant \gset
SELECT bc_join.create_site(:'tenant', 'dc-1') AS site \gset
SELECT bc_join.create_pool(:'tenant', :'site', 'workers') AS pool \gset

\ir lib/fixture.sql
CREATE FUNCTION pg_temp.csr_sha256(req jsonb) RETURNS text LANGUAGE sql AS $$
	SELECT bc_join.b64url_encode(sha256(bc_join.b64url_decode(req->>'csr'))) $$;

-- An operator who is not a superuser.
CREATE ROLE pgtap_operator IN ROLE bc_join_operator;

------------------------------------------------------------------- approval
CREATE TABLE public.plg_approve_target (tenant_id text, pool_id text);
INSERT INTO public.plg_approve_target VALUES (:'tenant', :'pool');
CREATE FUNCTION public.approve_me_verify(evidence jsonb, context jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = public, pg_catalog, pg_temp AS $$
DECLARE
	t public.plg_approve_target;
	deferral jsonb;
BEGIN
	SELECT * INTO t FROM public.plg_approve_target;
	deferral := bc_join.await_approval('approve-me', t.tenant_id, context,
									   jsonb_build_object('note', 'an unknown machine'), 5);
	IF deferral IS NOT NULL THEN
		RETURN deferral;
	END IF;
	RETURN jsonb_build_object('tenantId', t.tenant_id, 'role', 'node', 'poolId', t.pool_id);
END $$;
SELECT bc_join.register_attestor('approve-me', '1', ARRAY['node'], 'public.approve_me_verify(jsonb,jsonb)');

\set areq `:bcd join-request --service-keys :keys --attestor approve-me --out-dir :d/a --claims '{"hostname":"gpu-17","serial":"SN-17","macs":["02:00:00:00:00:17"]}'`
SELECT pg_temp.count_nodes() AS nodes0 \gset
SELECT bc_join(:'areq') AS r1 \gset
SELECT is(:'r1'::jsonb->>'status', 'pending', 'round 1 defers for approval');
\set v1 `echo :'r1' | :bcd verify-response --service-keys :keys --dir :d/a --response - ; echo "exit=$?"`
SELECT ok(:'v1' ~ '^pending' AND :'v1' ~ 'exit=3$', 'bcd verifies the signed deferral and does not take it for a join');
SELECT pg_temp.payload(:'r1')->>'requestId' AS rid \gset
SELECT is(pg_temp.payload(:'r1')->>'retryAfterSeconds', '5', 'the deferral says when to retry');
SELECT is(pg_temp.payload(:'r1')->>'csrSha256', pg_temp.csr_sha256(:'areq'), 'the deferral is bound to the CSR');
SELECT is(r.state, 'pending', 'a pending join request waits') FROM bc_join.join_requests r WHERE r.id = :'rid';
SELECT is(pg_temp.count_nodes(), :'nodes0'::bigint, 'a deferral issues nothing');
SELECT is(e.tenant_id, :'tenant', 'join_request.pending lands in the tenant''s stream')
	FROM bc_join.events e WHERE e.type = 'join_request.pending' AND e.payload->>'requestId' = :'rid';

SET ROLE pgtap_operator;
SELECT is(p.tenant || ' | ' || p.attestor || ' | ' || p.claims,
		  'acme | approve-me | host=gpu-17 serial=SN-17 macs=02:00:00:00:00:17',
		  'pending_join_requests shows tenant, attestor and a claims summary')
	FROM bc_join.pending_join_requests p WHERE p.id = :'rid';
SELECT is(p.age, interval '0', 'and its age') FROM bc_join.pending_join_requests p WHERE p.id = :'rid';
RESET ROLE;

SELECT is(bc_join(:'areq')->>'status', 'pending', 'round 2, not yet decided: pending again');
SELECT is((SELECT count(*) FROM bc_join.join_requests WHERE attestor = 'approve-me'), 1::bigint,
		  'the retry waits on the same request');

SET ROLE pgtap_operator;
SELECT lives_ok(format('SELECT bc_join.approve_join_request(%L)', :'rid'), 'the operator approves in psql');
SELECT throws_ok(format('SELECT bc_join.approve_join_request(%L)', :'rid'), '22023', NULL,
				 'a decided request cannot be approved twice');
SELECT throws_ok('SELECT bc_join(''{}'')', '42501', NULL, 'the operator cannot call bc_join()');
RESET ROLE;
SELECT is(r.decided_by, session_user::text, 'the decision records who made it (the login role)')
	FROM bc_join.join_requests r WHERE r.id = :'rid';

SELECT bc_join(:'areq') AS r3 \gset
SELECT is(:'r3'::jsonb->>'status', 'issued', 'the retry after approval is issued');
SELECT is(r.state, 'consumed', 'and consumes the approved request') FROM bc_join.join_requests r WHERE r.id = :'rid';
\set v3 `echo :'r3' | :bcd verify-response --service-keys :keys --dir :d/a --response - >/dev/null; echo $?`
SELECT is(:'v3'::int, 0, 'the same key and CSR complete the join');
SELECT is(pg_temp.payload(bc_join(:'areq'))->>'serial', pg_temp.payload(:'r3')->>'serial',
		  'the retry repeated after the join gets the same certificate again');
SELECT is((SELECT count(*) FROM bc_join.node_certs c JOIN bc_join.nodes n ON n.id = c.node_id
		   WHERE n.attestor = 'approve-me'), 1::bigint, 'a consumed approval admits nothing more');

------------------------------------------------------------------- rejection
\set breq `:bcd join-request --service-keys :keys --attestor approve-me --out-dir :d/b`
SELECT pg_temp.payload(bc_join(:'breq'))->>'requestId' AS rid2 \gset
SET ROLE pgtap_operator;
SELECT throws_ok(format('SELECT bc_join.reject_join_request(%L, %L)', :'rid2', ''), '22023', NULL,
				 'a rejection needs a reason');
SELECT lives_ok(format('SELECT bc_join.reject_join_request(%L, %L)', :'rid2', 'not one of ours'),
				'the operator rejects in psql');
RESET ROLE;
SELECT is(bc_join(:'breq'), :'refused'::jsonb, 'the retry after rejection: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' approve-me:rejected', 'refused rejected, in the tenant''s stream');
SELECT is(r.reason, 'not one of ours', 'the reason is kept') FROM bc_join.join_requests r WHERE r.id = :'rid2';
SELECT is((SELECT count(*) FROM bc_join.pending_join_requests), 0::bigint, 'nothing waits any more');

------------------------------------------------------------------- challenge
CREATE TABLE public.plg_chal (nonce bytea PRIMARY KEY, csr_sha256 text NOT NULL);
CREATE FUNCTION public.echo_chal_verify(evidence jsonb, context jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = public, pg_catalog, pg_temp AS $$
DECLARE
	n bytea;
	c public.plg_chal;
BEGIN
	IF evidence->>'payload' IS NULL THEN
		-- round 1: a nonce bound to this CSR, kept in the attestor's own table
		n := sha256(convert_to(gen_random_uuid()::text, 'UTF8'));
		INSERT INTO public.plg_chal VALUES (n, context->>'csrSha256');
		RETURN jsonb_build_object('deferred', 'challenge', 'challenge', bc_join.b64url_encode(n),
								  'notAfter', bc_join.compute_now() + interval '5 minutes');
	END IF;
	SELECT * INTO c FROM public.plg_chal WHERE nonce = bc_join.b64url_decode(evidence->>'payload');
	IF NOT FOUND THEN
		PERFORM bc_join.refuse('echo-chal:unknown-challenge');
	END IF;
	IF c.csr_sha256 <> context->>'csrSha256' THEN
		PERFORM bc_join.refuse('echo-chal:csr-binding');
	END IF;
	DELETE FROM public.plg_chal WHERE nonce = c.nonce;
	PERFORM bc_join.use_once('echo-chal', sha256(c.nonce));
	RETURN jsonb_build_object('tenantId', (SELECT tenant_id FROM public.plg_approve_target),
							  'role', 'node', 'poolId', (SELECT pool_id FROM public.plg_approve_target));
END $$;
SELECT bc_join.register_attestor('echo-chal', '1', ARRAY['node'], 'public.echo_chal_verify(jsonb,jsonb)');

\set creq `:bcd join-request --service-keys :keys --attestor echo-chal --out-dir :d/c`
SELECT bc_join(:'creq') AS c1 \gset
SELECT is(:'c1'::jsonb->>'status', 'challenge', 'round 1 answers a challenge');
\set vc `echo :'c1' | :bcd verify-response --service-keys :keys --dir :d/c --response - ; echo "exit=$?"`
SELECT ok(:'vc' ~ '^challenge' AND :'vc' ~ 'exit=3$', 'bcd verifies the signed challenge');
SELECT pg_temp.payload(:'c1')->>'challenge' AS nonce \gset
SELECT is(pg_temp.payload(:'c1')->>'csrSha256', pg_temp.csr_sha256(:'creq'), 'the challenge is bound to the CSR');
SELECT is((SELECT count(*) FROM public.plg_chal), 1::bigint, 'a deferral commits the attestor''s own rows');

-- Another key answers this CSR's challenge: refused, and the challenge stays.
\set oreq `:bcd join-request --service-keys :keys --attestor echo-chal --out-dir :d/other`
SELECT is(bc_join(:'oreq'::jsonb || jsonb_build_object('attestation', :'nonce')), :'refused'::jsonb,
		  'a challenge answered for another CSR: the one refusal');
SELECT is(pg_temp.last_refusal(), 'root echo-chal:csr-binding', 'refused csr-binding');
SELECT is((SELECT count(*) FROM public.plg_chal), 1::bigint, 'the refused round changed nothing');

SELECT is(bc_join(:'creq'::jsonb || jsonb_build_object('attestation', :'nonce'))->>'status', 'issued',
		  'the right CSR answering its challenge is issued');
SELECT is((SELECT count(*) FROM bc_join.attestation_uses WHERE attestor = 'echo-chal'), 1::bigint,
		  'the answer is used once, in the final round');

-- The challenge's notAfter holds even where the attestor's own state does not look at it.
\set lreq `:bcd join-request --service-keys :keys --attestor echo-chal --out-dir :d/late`
SELECT bc_join(:'lreq') AS l1 \gset
SELECT pg_temp.payload(:'l1')->>'challenge' AS lnonce \gset
SELECT is((SELECT count(*) FROM bc_join.challenge_deadlines
		   WHERE attestor = 'echo-chal' AND csr_sha256 = bc_join.b64url_decode(pg_temp.csr_sha256(:'lreq'))
			 AND not_after = bc_join.compute_now() + interval '5 minutes'),
		  1::bigint, 'the deferral records its notAfter for this CSR');
SET LOCAL bc_join.clock_offset = 301;
SELECT is(bc_join(:'lreq'::jsonb || jsonb_build_object('attestation', :'lnonce')), :'refused'::jsonb,
		  'the challenge answered after its notAfter: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' echo-chal:challenge-expired', 'refused echo-chal:challenge-expired');
RESET bc_join.clock_offset;
SELECT is(bc_join(:'lreq'::jsonb || jsonb_build_object('attestation', :'lnonce'))->>'status', 'issued',
		  'the same answer within its notAfter is issued (the attestor''s row was kept by the rollback)');
SELECT ok(bc_join(:'lreq')->>'status' = 'challenge', 'a repeat may be challenged again (nothing spent)');

------------------------------------------------------ malformed deferrals
CREATE TABLE public.plg_answer (answer jsonb);
CREATE FUNCTION public.answer_verify(evidence jsonb, context jsonb) RETURNS jsonb
LANGUAGE sql SET search_path = public, pg_catalog, pg_temp AS $$ SELECT answer FROM public.plg_answer $$;
SELECT bc_join.register_attestor('answer', '1', ARRAY['node'], 'public.answer_verify(jsonb,jsonb)');
\set xreq `:bcd join-request --service-keys :keys --attestor answer --out-dir :d/x`
CREATE FUNCTION pg_temp.answer(a jsonb) RETURNS void LANGUAGE sql AS $$
	DELETE FROM public.plg_answer; INSERT INTO public.plg_answer VALUES (a) $$;

SELECT pg_temp.answer('{"deferred":"challenge","challenge":""}');
SELECT throws_ok(format('SELECT bc_join(%L::jsonb)', :'xreq'), 'F0000', NULL, 'an empty challenge is INVALID_CONFIG');
SELECT pg_temp.answer('{"deferred":"challenge"}');
SELECT throws_ok(format('SELECT bc_join(%L::jsonb)', :'xreq'), 'F0000', NULL, 'a challenge without bytes is INVALID_CONFIG');
SELECT pg_temp.answer('{"deferred":"approval"}');
SELECT throws_ok(format('SELECT bc_join(%L::jsonb)', :'xreq'), 'F0000', NULL, 'an approval without a request is INVALID_CONFIG');
SELECT pg_temp.answer('{"deferred":"later"}');
SELECT throws_ok(format('SELECT bc_join(%L::jsonb)', :'xreq'), 'F0000', NULL, 'an unknown deferral is INVALID_CONFIG');
SELECT pg_temp.answer('{"deferred":"approval","requestId":"jr_x","retryAfterSeconds":-5}');
SELECT is(pg_temp.payload(bc_join(:'xreq'))->>'retryAfterSeconds', '1', 'retryAfterSeconds is at least 1');
SELECT pg_temp.answer('{"deferred":"approval","requestId":"jr_x"}');
SELECT is(pg_temp.payload(bc_join(:'xreq'))->>'retryAfterSeconds', '30', 'retryAfterSeconds defaults to 30');

---------------------------- single-use evidence spent in a deferring round
CREATE FUNCTION public.greedy_verify(evidence jsonb, context jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = public, pg_catalog, pg_temp AS $$
BEGIN
	PERFORM bc_join.use_once('greedy', sha256(convert_to(context->>'csrSha256', 'UTF8')));
	RETURN '{"deferred":"approval","requestId":"jr_greedy"}';
END $$;
SELECT bc_join.register_attestor('greedy', '1', ARRAY['node'], 'public.greedy_verify(jsonb,jsonb)');
SELECT throws_ok(format('SELECT bc_join(%L::jsonb)', jsonb_set(:'xreq'::jsonb, '{attestor}', '"greedy"')),
				 'F0000', 'attestor "greedy" consumed single-use evidence in a round that deferred',
				 'using evidence once in a deferring round fails the join');
SELECT is((SELECT count(*) FROM bc_join.attestation_uses WHERE attestor = 'greedy'), 0::bigint,
		  'and the use is rolled back');

SELECT bc_join.create_join_token(:'tenant', :'pool') AS tok \gset
CREATE FUNCTION public.spender_verify(evidence jsonb, context jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = public, pg_catalog, pg_temp AS $$
DECLARE
	t jsonb := bc_join.check_join_token('spender', evidence->>'token', context);
BEGIN
	IF context->'claims'->>'hostname' = 'spend' THEN
		PERFORM bc_join.spend_join_token(t->>'tokenId');
	END IF;
	RETURN '{"deferred":"approval","requestId":"jr_spender"}';
END $$;
SELECT bc_join.register_attestor('spender', '1', ARRAY['node'], 'public.spender_verify(jsonb,jsonb)');
\set sreq `:bcd join-request --service-keys :keys --attestor spender --token :'tok' --out-dir :d/s --claims '{"hostname":"check"}'`
SELECT is(bc_join(:'sreq')->>'status', 'pending', 'checking a token in a deferring round is fine');
\set sreq2 `:bcd join-request --service-keys :keys --attestor spender --token :'tok' --out-dir :d/s --claims '{"hostname":"spend"}'`
SELECT throws_ok(format('SELECT bc_join(%L::jsonb)', :'sreq2'), 'F0000', NULL,
				 'spending a token in a deferring round fails the join');
SELECT is(t.uses_left, 1, 'and the use is not spent') FROM bc_join.join_tokens t WHERE t.id = split_part(:'tok', '.', 1);

--------------------------------------------------------------- expiry
\set ereq `:bcd join-request --service-keys :keys --attestor approve-me --out-dir :d/e`
SELECT pg_temp.payload(bc_join(:'ereq'))->>'requestId' AS rid3 \gset
SELECT is(p.expires_in, interval '1 day', 'a pending request shows when it expires: a day by default')
	FROM bc_join.pending_join_requests p WHERE p.id = :'rid3';
SET LOCAL bc_join.clock_offset = 86401;
SELECT is((SELECT count(*) FROM bc_join.pending_join_requests WHERE id = :'rid3'), 0::bigint,
		  'once expired it is no longer listed as pending');
SELECT throws_ok(format('SELECT bc_join.approve_join_request(%L)', :'rid3'), '22023',
				 'this join request expired: the agent must ask again', 'an expired request cannot be approved');
SELECT is(bc_join(:'ereq'), :'refused'::jsonb, 'the agent''s retry after expiry: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' approve-me:request-expired', 'refused request-expired');
RESET bc_join.clock_offset;
-- approved, but not used before it expired
SET LOCAL bc_join.join_request_ttl = 120;
\set freq `:bcd join-request --service-keys :keys --attestor approve-me --out-dir :d/f`
SELECT pg_temp.payload(bc_join(:'freq'))->>'requestId' AS rid4 \gset
SELECT is(p.expires_in, interval '2 minutes', 'bc_join.join_request_ttl sets the expiry')
	FROM bc_join.pending_join_requests p WHERE p.id = :'rid4';
SELECT lives_ok(format('SELECT bc_join.approve_join_request(%L)', :'rid4'), 'approved in time');
SET LOCAL bc_join.clock_offset = 121;
SELECT is(bc_join(:'freq'), :'refused'::jsonb, 'but retried too late: the one refusal');
SELECT is(pg_temp.last_refusal(), :'tenant' || ' approve-me:request-expired', 'refused request-expired');
RESET bc_join.clock_offset;
RESET bc_join.join_request_ttl;

SELECT * FROM finish();
ROLLBACK;
