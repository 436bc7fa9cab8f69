-- fixture.sql: what the pgTAP suites share, included with \ir lib/fixture.sql
-- inside a suite's transaction (test/pgtap/*.sql; pg_prove runs only the
-- files directly under test/pgtap, never this one).
--
--   :refused               the one refusal every entry point answers
--   pg_temp.payload(r)     the signed payload of an answer's "response" (the agent
--                          verifies it; here it is read)
--   pg_temp.last_refusal() the last security.join.refused event: "<tenant> <reason>"
--   pg_temp.last_reason()  the same event's reason alone
--   pg_temp.count_nodes()  the nodes there are
\set refused '{"status":"refused","error":{"code":"ACCESS_DENIED","message":"Join refused"}}'
CREATE FUNCTION pg_temp.payload(r jsonb) RETURNS jsonb LANGUAGE sql AS $$
	SELECT convert_from(bc_join.b64url_decode(split_part(r->>'response', '.', 2)), 'UTF8')::jsonb $$;
CREATE FUNCTION pg_temp.last_refusal() RETURNS text LANGUAGE sql AS $$
	SELECT tenant_id || ' ' || (payload->>'refusal') FROM bc_join.events
	WHERE type = 'security.join.refused' ORDER BY id DESC LIMIT 1 $$;
CREATE FUNCTION pg_temp.last_reason() RETURNS text LANGUAGE sql AS $$
	SELECT payload->>'refusal' FROM bc_join.events
	WHERE type = 'security.join.refused' ORDER BY id DESC LIMIT 1 $$;
CREATE FUNCTION pg_temp.count_nodes() RETURNS bigint LANGUAGE sql AS $$ SELECT count(*) FROM bc_join.nodes $$;
