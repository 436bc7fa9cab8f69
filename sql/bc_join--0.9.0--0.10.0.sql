-- bc_join 0.9.0 -> 0.10.0 (ALTER EXTENSION bc_join UPDATE).
-- Every change made to sql/bc_join.sql for 0.10.0 has its equivalent here
-- (docs/development.md, "Changing the schema"); test/tools/upgrade-check
-- proves a 0.9.0 database updated by this script equals a fresh 0.10.0.
\echo Use "ALTER EXTENSION bc_join UPDATE" to load this file. \quit

-- attestation_sweep() also finds the nodes that never attested: a live
-- certificate bound to a TPM AK (urn:bc:tpm-ak:, what POST /v1/attest
-- requires) and no passing quote for missed_intervals x interval_seconds of
-- the pool since it was issued.  Until 0.9.0 only a node that had passed
-- once was swept, so a host compromised before its first quote, or whose bcd
-- ran with --no-attest, kept its certificates until they expired.  Same
-- signature, owner and grants (CREATE OR REPLACE keeps them).
CREATE OR REPLACE FUNCTION bc_join.attestation_sweep() RETURNS integer
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	m record;
	n integer := 0;
BEGIN
	-- AK-bound nodes never attested: a row of their own first (unattested),
	-- so that the loop below reports them once, as it does the others
	INSERT INTO bc_join.node_attestation (node_id)
		SELECT c.node_id
		FROM bc_join.node_certs c
		WHERE c.revoked_at IS NULL AND c.not_after > bc_join.compute_now()
		  AND starts_with(c.node_key_uri, 'urn:bc:tpm-ak:')
		  AND NOT EXISTS (SELECT 1 FROM bc_join.node_attestation a WHERE a.node_id = c.node_id)
		GROUP BY c.node_id
		ORDER BY c.node_id
		ON CONFLICT ON CONSTRAINT node_attestation_pkey DO NOTHING;
	FOR m IN
		SELECT a.node_id, x.tenant_id, coalesce(s.on_missed, 'event') AS on_missed,
			   coalesce(s.interval_seconds, 60) AS iv, coalesce(s.missed_intervals, 3) AS k,
			   a.last_passed_at
		FROM bc_join.node_attestation a JOIN bc_join.nodes x ON x.id = a.node_id
		LEFT JOIN bc_join.attestation_settings s ON s.pool_id = x.pool_id
		WHERE x.state <> 'retired' AND a.missed_reported_at IS NULL
		  AND (a.state = 'healthy'
			   AND coalesce(a.last_passed_at, '-infinity') < bc_join.compute_now()
				   - make_interval(secs => coalesce(s.interval_seconds, 60) * coalesce(s.missed_intervals, 3))
			   OR a.state = 'unattested'
			   AND (SELECT max(c.issued_at) FROM bc_join.node_certs c
					WHERE c.node_id = a.node_id AND c.revoked_at IS NULL
					  AND c.not_after > bc_join.compute_now()
					  AND starts_with(c.node_key_uri, 'urn:bc:tpm-ak:'))
				   < bc_join.compute_now()
				   - make_interval(secs => coalesce(s.interval_seconds, 60) * coalesce(s.missed_intervals, 3)))
		ORDER BY a.node_id
		FOR UPDATE OF a SKIP LOCKED
	LOOP
		UPDATE bc_join.node_attestation a SET missed_reported_at = bc_join.compute_now(), last_result = 'missed',
			last_reason = 'missed-intervals'
			WHERE a.node_id = m.node_id;
		INSERT INTO bc_join.events (tenant_id, type, payload)
			VALUES (m.tenant_id, 'node.attestation.missed',
					jsonb_build_object('nodeId', m.node_id, 'lastPassedAt', m.last_passed_at,
									   'intervalSeconds', m.iv, 'missedIntervals', m.k, 'action', m.on_missed));
		IF m.on_missed = 'revoke' THEN
			PERFORM bc_join.quarantine_node(m.node_id, 'missed-intervals',
				jsonb_build_object('lastPassedAt', m.last_passed_at, 'intervalSeconds', m.iv, 'missedIntervals', m.k));
		END IF;
		n := n + 1;
	END LOOP;
	RETURN n;
END
$$;
COMMENT ON FUNCTION bc_join.attestation_sweep() IS
	'Finds healthy nodes without a passing quote for missed_intervals intervals of their pool, and nodes with a live certificate bound to a TPM AK that have not passed one for as long since it was issued: event node.attestation.missed (once per miss), and quarantine when the pool says on_missed revoke; returns how many; run it from pg_cron every minute.';
