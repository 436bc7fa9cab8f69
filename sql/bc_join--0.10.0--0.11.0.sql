-- bc_join 0.10.0 -> 0.11.0 (ALTER EXTENSION bc_join UPDATE).
-- Every change made to sql/bc_join.sql for 0.11.0 has its equivalent here
-- (docs/development.md, "Changing the schema"); test/tools/upgrade-check
-- proves a 0.10.0 database updated by this script equals a fresh 0.11.0.
\echo Use "ALTER EXTENSION bc_join UPDATE" to load this file. \quit

-- add_tpm_ek_root's parameter takes the name CONTRACT.md gives it,
-- add_tpm_ek_root(pem text), so that a call in named notation
-- (add_tpm_ek_root(pem => ...)) works; it was certificate_pem.  A parameter
-- cannot be renamed in place (CREATE OR REPLACE refuses), so the function is
-- dropped and made again with its comment and grants; no object depends on
-- it.  The body is unchanged.
DROP FUNCTION bc_join.add_tpm_ek_root(text);
CREATE FUNCTION bc_join.add_tpm_ek_root(pem text) RETURNS text
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	c jsonb := bc_join.tpm_ek_certificate(pem);
BEGIN
	INSERT INTO bc_join.tpm_ek_certificates (sha256, certificate, is_root, subject)
		VALUES (decode(c->>'sha256', 'hex'), decode(c->>'der', 'hex'), (c->>'isRoot')::boolean, c->>'subject')
		ON CONFLICT (sha256) DO NOTHING;
	IF FOUND THEN
		INSERT INTO bc_join.audit_log (action, detail)
			VALUES ('tpm.ek_root.add', jsonb_build_object('sha256', c->>'sha256', 'subject', c->>'subject',
														  'root', (c->>'isRoot')::boolean));
	END IF;
	RETURN c->>'sha256';
END
$$;
COMMENT ON FUNCTION bc_join.add_tpm_ek_root(text) IS
	'Adds an EK root (self-signed) or intermediate certificate that tpm EK certificates may chain to; returns the hex SHA-256 of its DER.';
REVOKE ALL ON FUNCTION bc_join.add_tpm_ek_root(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bc_join.add_tpm_ek_root(text) TO bc_join_operator;

-- bc_join(NULL) raises 22023 INVALID_INPUT like any other malformed request
-- (CONTRACT.md); as a STRICT function it returned NULL without running.
ALTER FUNCTION public.bc_join(jsonb) CALLED ON NULL INPUT;
