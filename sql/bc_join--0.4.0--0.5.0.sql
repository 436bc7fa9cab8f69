-- bc_join 0.4.0 -> 0.5.0 (ALTER EXTENSION bc_join UPDATE).
-- Every change made to sql/bc_join.sql for 0.5.0 has its equivalent here
-- (docs/development.md, "Changing the schema"); test/tools/upgrade-check
-- proves a 0.4.0 database updated by this script equals a fresh 0.5.0.
\echo Use "ALTER EXTENSION bc_join UPDATE" to load this file. \quit

-- Issue 45: the node CA's OCSP responder.
CREATE FUNCTION bc_join.ocsp_response(request bytea) RETURNS bytea
	AS 'MODULE_PATHNAME', 'bc_ocsp_response' LANGUAGE C VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION bc_join.ocsp_response(bytea) IS
	'Returns the DER OCSP response (RFC 6960) to a DER OCSP request: per CertID good, revoked (time and reason as in the CRL) or unknown, nextUpdate bc_join.ocsp_validity seconds on, the nonce echoed, signed by ocsp.key; malformedRequest (unsigned) for a malformed request.';
REVOKE ALL ON FUNCTION bc_join.ocsp_response(bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bc_join.ocsp_response(bytea) TO bc_join_gateway, bc_join_operator;
