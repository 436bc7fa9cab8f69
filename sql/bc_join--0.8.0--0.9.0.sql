-- bc_join 0.8.0 -> 0.9.0 (ALTER EXTENSION bc_join UPDATE).
-- Every change made to sql/bc_join.sql for 0.9.0 has its equivalent here
-- (docs/development.md, "Changing the schema"); test/tools/upgrade-check
-- proves a 0.8.0 database updated by this script equals a fresh 0.9.0.
\echo Use "ALTER EXTENSION bc_join UPDATE" to load this file. \quit

-- are_agent_roles in C (src/ext/util.c): the same answers, without a SQL body
-- that every statement writing nodes, join_tokens, join_requests or pools
-- read, analysed and planned again for its CHECK constraint.  The
-- constraints call it by its oid and stay as they are.
CREATE OR REPLACE FUNCTION bc_join.are_agent_roles(roles text[]) RETURNS boolean
	AS 'MODULE_PATHNAME', 'bc_are_agent_roles'
	LANGUAGE C IMMUTABLE PARALLEL SAFE;

-- The CHECK constraints with a list of words on the tables a join, renewal,
-- session, quote or SSH certificate writes: `col = ANY ('{...}'::text[])`
-- instead of `col IN (...)`.  The same rows pass.  PostgreSQL reads a
-- table's CHECK expressions from the catalog and plans them again for every
-- statement that writes it; an IN list is stored as one constant per word,
-- folded into an array at every statement, and node_certs' was long enough to
-- be stored compressed.  The array literal is stored folded, in a third of
-- the text (docs/performance.md, "The join's own work, step by step").
ALTER TABLE bc_join.nodes DROP CONSTRAINT nodes_state_check,
	ADD CONSTRAINT nodes_state_check CHECK (state = ANY ('{adopting,active,retired}'::text[]));
ALTER TABLE bc_join.nodes DROP CONSTRAINT nodes_trust_check,
	ADD CONSTRAINT nodes_trust_check CHECK (trust = ANY ('{platform,tenant-owned}'::text[]));
ALTER TABLE bc_join.node_certs DROP CONSTRAINT node_certs_revocation_reason_check,
	ADD CONSTRAINT node_certs_revocation_reason_check CHECK (revocation_reason = ANY ('{unspecified,keyCompromise,cACompromise,affiliationChanged,superseded,cessationOfOperation,privilegeWithdrawn,aACompromise,renewed,reclaimed,retired,attestation-failed}'::text[]));
ALTER TABLE bc_join.session_certs DROP CONSTRAINT session_certs_revocation_reason_check,
	ADD CONSTRAINT session_certs_revocation_reason_check CHECK (revocation_reason = ANY ('{unspecified,keyCompromise,cACompromise,affiliationChanged,superseded,cessationOfOperation,privilegeWithdrawn,aACompromise,retired,attestation-failed}'::text[]));
ALTER TABLE bc_join.join_requests DROP CONSTRAINT join_requests_state_check,
	ADD CONSTRAINT join_requests_state_check CHECK (state = ANY ('{pending,approved,rejected,consumed}'::text[]));
ALTER TABLE bc_join.node_attestation DROP CONSTRAINT node_attestation_state_check,
	ADD CONSTRAINT node_attestation_state_check CHECK (state = ANY ('{unattested,healthy,quarantined}'::text[]));
ALTER TABLE bc_join.node_attestation DROP CONSTRAINT node_attestation_last_result_check,
	ADD CONSTRAINT node_attestation_last_result_check CHECK (last_result = ANY ('{passed,failed,missed}'::text[]));
ALTER TABLE bc_join.ssh_certs DROP CONSTRAINT ssh_certs_revocation_reason_check,
	ADD CONSTRAINT ssh_certs_revocation_reason_check CHECK (revocation_reason = ANY ('{unspecified,keyCompromise,cACompromise,affiliationChanged,superseded,cessationOfOperation,privilegeWithdrawn,aACompromise,reclaimed,retired,attestation-failed}'::text[]));
ALTER TABLE bc_join.ssh_certs DROP CONSTRAINT ssh_certs_kind_check,
	ADD CONSTRAINT ssh_certs_kind_check CHECK (kind = ANY ('{host,user}'::text[]));
