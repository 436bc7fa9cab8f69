-- bc_join 0.3.0 -> 0.4.0 (ALTER EXTENSION bc_join UPDATE).
-- Every change made to sql/bc_join.sql for 0.4.0 has its equivalent here
-- (docs/development.md, "Changing the schema"); test/tools/upgrade-check
-- proves a 0.3.0 database updated by this script equals a fresh 0.4.0.
\echo Use "ALTER EXTENSION bc_join UPDATE" to load this file. \quit

/* ------------- #42.7: the request channel of a tenant no stranger can name */

-- A random channel per tenant, readable by its operators (its row) alone;
-- every existing tenant gets its own (the default is volatile: one per row).
ALTER TABLE bc_join.tenants
	ADD COLUMN request_channel text NOT NULL DEFAULT bc_join.new_id('bc_join_requests');
COMMENT ON TABLE bc_join.tenants IS
	'The tenants; the tenant root exists from the start and receives the refusals no evidence authenticated; request_channel is the random NOTIFY channel of the tenant''s waiting join requests.';

/*
 * Record a join request waiting for an operator, for the CSR of context, and
 * tell watchers: NOTIFY on the tenant's request_channel (no payload: "look";
 * bc_join.request_channel(tenant) names it to the tenant's operators), and a
 * join_request.pending event in the tenant's stream.  Returns the id.  At
 * most bc_join.pending_requests_per_token requests wait for one token (the
 * tokenId of detail, which the attestor checked) and
 * bc_join.pending_requests_per_tenant for one tenant; beyond that the join
 * is refused '<attestor>:pending-token-limit' or ':pending-tenant-limit'.
 */
CREATE OR REPLACE FUNCTION bc_join.create_join_request(tenant_id text, attestor text, context jsonb,
											detail jsonb DEFAULT '{}')
	RETURNS text
	LANGUAGE plpgsql
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	rid text := bc_join.new_id('jr');
	token text := nullif(create_join_request.detail->>'tokenId', '');
	per_token integer := coalesce(nullif(current_setting('bc_join.pending_requests_per_token', true), ''),
								  '10')::integer;
	per_tenant integer := coalesce(nullif(current_setting('bc_join.pending_requests_per_tenant', true), ''),
								   '1000')::integer;
BEGIN
	-- One request made at a time per tenant (the token's row is locked already), so the bounds hold.
	PERFORM 1 FROM bc_join.tenants t WHERE t.id = create_join_request.tenant_id FOR NO KEY UPDATE;
	IF token IS NOT NULL AND (SELECT count(*) FROM (
			SELECT 1 FROM bc_join.join_requests q
			WHERE q.token_id = token AND q.state = 'pending' AND q.expires_at > bc_join.compute_now()
			LIMIT per_token) x) >= per_token THEN
		PERFORM bc_join.refuse(create_join_request.attestor || ':pending-token-limit',
							   create_join_request.tenant_id);
	END IF;
	IF (SELECT count(*) FROM (
			SELECT 1 FROM bc_join.join_requests q
			WHERE q.tenant_id = create_join_request.tenant_id AND q.state = 'pending'
			  AND q.expires_at > bc_join.compute_now()
			LIMIT per_tenant) x) >= per_tenant THEN
		PERFORM bc_join.refuse(create_join_request.attestor || ':pending-tenant-limit',
							   create_join_request.tenant_id);
	END IF;
	INSERT INTO bc_join.join_requests (id, tenant_id, attestor, role, csr_sha256, claims, detail,
									   expires_at, token_id)
		VALUES (rid, create_join_request.tenant_id, create_join_request.attestor,
				context->>'role', bc_join.b64url_decode(context->>'csrSha256'),
				coalesce(context->'claims', '{}'), coalesce(create_join_request.detail, '{}'),
				bc_join.compute_now() +
					coalesce(nullif(current_setting('bc_join.join_request_ttl', true), ''), '1d')::interval,
				token);
	INSERT INTO bc_join.events (tenant_id, type, payload)
		VALUES (create_join_request.tenant_id, 'join_request.pending',
				jsonb_build_object('requestId', rid, 'attestor', create_join_request.attestor,
								   'role', context->>'role', 'csrSha256', context->>'csrSha256'));
	-- told on the tenant's own channel only, its random request_channel
	-- (LISTEN needs no grant: a channel every tenant's requests reach, or one
	-- named after the tenant's id, which every certificate of the tenant
	-- shows, would tell any role that can log in when the tenant's requests
	-- begin waiting)
	PERFORM pg_notify(t.request_channel, '') FROM bc_join.tenants t
		WHERE t.id = create_join_request.tenant_id;
	RETURN rid;
END
$$;
COMMENT ON FUNCTION bc_join.create_join_request(text, text, jsonb, jsonb) IS
	'Records a join request for the CSR of context that waits for an operator (refused beyond bc_join.pending_requests_per_token for detail''s tokenId, or bc_join.pending_requests_per_tenant), notifies the tenant''s random request_channel and its event stream, and returns the request id.';

-- The NOTIFY channel of a tenant's waiting join requests, for its operators.
CREATE FUNCTION bc_join.request_channel(tenant_id text) RETURNS text
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
BEGIN
	PERFORM bc_join.check_tenant(request_channel.tenant_id, 'tenant');
	RETURN (SELECT t.request_channel FROM bc_join.tenants t WHERE t.id = request_channel.tenant_id);
END
$$;
COMMENT ON FUNCTION bc_join.request_channel(text) IS
	'Returns the random channel on which the tenant''s waiting join requests are notified (LISTEN on it); to the tenant''s operators and the platform operator only.';

-- A new channel for a tenant's requests (after an operator of it was revoked).
CREATE FUNCTION bc_join.rotate_request_channel(tenant_id text) RETURNS text
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	chan text := bc_join.new_id('bc_join_requests');
BEGIN
	PERFORM bc_join.check_tenant(rotate_request_channel.tenant_id, 'tenant');
	UPDATE bc_join.tenants t SET request_channel = chan WHERE t.id = rotate_request_channel.tenant_id;
	IF NOT FOUND THEN
		PERFORM bc_join.invalid_input('the tenant does not exist');
	END IF;
	INSERT INTO bc_join.audit_log (action, tenant_id, detail)
		VALUES ('tenant.request_channel.rotate', rotate_request_channel.tenant_id, '{}');
	RETURN chan;
END
$$;
COMMENT ON FUNCTION bc_join.rotate_request_channel(text) IS
	'Gives the tenant a new random request channel and returns it (the old one is told nothing more): after revoking one of its operators, who knew the old one; audited.';
REVOKE ALL ON FUNCTION bc_join.request_channel(text), bc_join.rotate_request_channel(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bc_join.request_channel(text), bc_join.rotate_request_channel(text)
	TO bc_join_operator, bc_join_tenant_operator;

/* ------------------ #42.8: the root tenant's row kept by pg_dump, restored whole */

/*
 * The root tenant's row in a dump (#42.8): pg_dump keeps every row of
 * tenants, the root's too, and a restore's CREATE EXTENSION has made its own
 * root row already.  The dumped row replaces it, every column as it was
 * (created_at, request_channel), instead of conflicting: an INSERT of 'root'
 * while a root row exists updates that row and inserts nothing.  Only the
 * extension's owner and the superuser insert into tenants directly (every
 * other tenant comes from create_tenant(), with a new id).  A new column of
 * tenants goes here too (test/tap/dump_restore.t compares every column).
 */
CREATE FUNCTION bc_join.tenants_restore_root() RETURNS trigger
	LANGUAGE plpgsql
	SET search_path = pg_catalog, pg_temp
	AS $$
BEGIN
	IF NEW.id = 'root' AND EXISTS (SELECT 1 FROM bc_join.tenants t WHERE t.id = 'root') THEN
		UPDATE bc_join.tenants t
			SET name = NEW.name, created_at = NEW.created_at, request_channel = NEW.request_channel
			WHERE t.id = 'root';
		RETURN NULL;
	END IF;
	RETURN NEW;
END
$$;
COMMENT ON FUNCTION bc_join.tenants_restore_root() IS
	'Internal trigger: an INSERT of the root tenant while one exists (a restore after CREATE EXTENSION made its own) replaces that row''s columns and inserts nothing.';
CREATE TRIGGER restore_root BEFORE INSERT ON bc_join.tenants
	FOR EACH ROW WHEN (NEW.id = 'root') EXECUTE FUNCTION bc_join.tenants_restore_root();
REVOKE ALL ON FUNCTION bc_join.tenants_restore_root() FROM PUBLIC;
-- Every row of tenants is dumped now, the root's too.
SELECT pg_catalog.pg_extension_config_dump('bc_join.tenants', '');

/* ------------ #42.8: check_evidence(), evidence checked as a join would, nothing written */

/*
 * The operator's diagnostic (#42.8): evidence captured from a machine (a
 * cloud's signed document, TPM evidence, ...) verified by the attestor's own
 * code, as a join round verifies it, at the time `at` (default: now), in a
 * subtransaction always rolled back: nothing is admitted, written or spent,
 * and no refusal is recorded.  csr: the DER CSR the evidence was made for,
 * when there is one (checks that bind the evidence to it are listed as
 * unchecked without it); no sealed join token is taken (checks a token
 * satisfies are listed as unchecked).  The platform operator's alone: it
 * reads every tenant's configuration.
 */
CREATE FUNCTION bc_join.check_evidence(attestor text, evidence bytea, at timestamptz DEFAULT NULL,
									   csr bytea DEFAULT NULL, role text DEFAULT 'node')
	RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_check_evidence_sql'
	LANGUAGE C VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION bc_join.check_evidence(text, bytea, timestamptz, bytea, text) IS
	'Verifies an attestor''s evidence bytes as a join round would, at the time at (default now; the CSR it was made for if given), admitting, writing and spending nothing; returns {ok, attestor, at, outcome (result, challenge, approval, refused), refusal, result, read (what the attestor read: account, instance, EK, AK ...), unchecked (what needs the CSR or a token)}.';
REVOKE ALL ON FUNCTION bc_join.check_evidence(text, bytea, timestamptz, bytea, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bc_join.check_evidence(text, bytea, timestamptz, bytea, text) TO bc_join_operator;
