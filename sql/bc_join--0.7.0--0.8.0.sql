-- bc_join 0.7.0 -> 0.8.0 (ALTER EXTENSION bc_join UPDATE).
-- Every change made to sql/bc_join.sql for 0.8.0 has its equivalent here
-- (docs/development.md, "Changing the schema"); test/tools/upgrade-check
-- proves a 0.7.0 database updated by this script equals a fresh 0.8.0.
\echo Use "ALTER EXTENSION bc_join UPDATE" to load this file. \quit

/* #48: the refusal NOTIFY on a per-tenant random channel */

-- Each existing tenant gets its own random channel (a volatile default is
-- evaluated per row); the column goes at the end, as in a fresh install.
ALTER TABLE bc_join.tenants
	ADD COLUMN refusal_channel text NOT NULL DEFAULT bc_join.new_id('bc_join_refusals');
COMMENT ON TABLE bc_join.tenants IS
	'The tenants; the tenant root exists from the start and receives the refusals no evidence authenticated; request_channel and refusal_channel are the random NOTIFY channels of the tenant''s waiting join requests and of its refused joins.';

CREATE OR REPLACE FUNCTION bc_join.tenants_restore_root() RETURNS trigger
	LANGUAGE plpgsql
	SET search_path = pg_catalog, pg_temp
	AS $$
BEGIN
	IF NEW.id = 'root' AND EXISTS (SELECT 1 FROM bc_join.tenants t WHERE t.id = 'root') THEN
		UPDATE bc_join.tenants t
			SET name = NEW.name, created_at = NEW.created_at, request_channel = NEW.request_channel,
				refusal_channel = NEW.refusal_channel
			WHERE t.id = 'root';
		RETURN NULL;
	END IF;
	RETURN NEW;
END
$$;

CREATE FUNCTION bc_join.refusal_channel(tenant_id text) RETURNS text
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
BEGIN
	PERFORM bc_join.check_tenant(refusal_channel.tenant_id, 'tenant');
	RETURN (SELECT t.refusal_channel FROM bc_join.tenants t WHERE t.id = refusal_channel.tenant_id);
END
$$;
COMMENT ON FUNCTION bc_join.refusal_channel(text) IS
	'Returns the random channel on which the tenant''s refused joins are notified as they are recorded as events (LISTEN on it; payload: event id, type, attestor, refusal, time, no evidence); to the tenant''s operators and the platform operator only.';
REVOKE ALL ON FUNCTION bc_join.refusal_channel(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bc_join.refusal_channel(text) TO bc_join_operator, bc_join_tenant_operator;

CREATE OR REPLACE FUNCTION bc_join.rotate_request_channel(tenant_id text) RETURNS text
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	chan text := bc_join.new_id('bc_join_requests');
BEGIN
	PERFORM bc_join.check_tenant(rotate_request_channel.tenant_id, 'tenant');
	UPDATE bc_join.tenants t SET request_channel = chan, refusal_channel = bc_join.new_id('bc_join_refusals')
		WHERE t.id = rotate_request_channel.tenant_id;
	IF NOT FOUND THEN
		PERFORM bc_join.invalid_input('the tenant does not exist');
	END IF;
	INSERT INTO bc_join.audit_log (action, tenant_id, detail)
		VALUES ('tenant.request_channel.rotate', rotate_request_channel.tenant_id, '{}');
	RETURN chan;
END
$$;
COMMENT ON FUNCTION bc_join.rotate_request_channel(text) IS
	'Gives the tenant a new random request channel and refusal channel and returns the request channel (the old ones are told nothing more): after revoking one of its operators, who knew the old ones; audited.';

/* #48: the service's numbers for Prometheus */

-- Built once here: on a large service this holds writes to the two tables
-- for the build (about a second per million certificates).
CREATE INDEX node_certs_live_idx ON bc_join.node_certs (not_after) WHERE revoked_at IS NULL;
CREATE INDEX session_certs_live_idx ON bc_join.session_certs (not_after) WHERE revoked_at IS NULL;

CREATE INDEX node_attestation_quarantined_idx ON bc_join.node_attestation (node_id)
	WHERE state = 'quarantined';
CREATE INDEX node_attestation_missed_idx ON bc_join.node_attestation (node_id)
	WHERE missed_reported_at IS NOT NULL;

CREATE FUNCTION bc_join.metrics() RETURNS text
	AS 'MODULE_PATHNAME', 'bc_metrics'
	LANGUAGE C VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	-- a few index-only scans: starting parallel workers costs more than they save
	SET max_parallel_workers_per_gather = 0;
COMMENT ON FUNCTION bc_join.metrics() IS
	'Returns the service''s numbers as Prometheus text (rounds and refusals by attestor and reason, pending join requests by tenant, live and expiring certificates, sessions, audit log and anchor times, key rotations, continuous-attestation failures, stale and quarantined nodes); to the gateway and the platform operator.';
REVOKE ALL ON FUNCTION bc_join.metrics() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bc_join.metrics() TO bc_join_gateway, bc_join_operator;
