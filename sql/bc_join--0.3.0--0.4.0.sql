-- bc_join 0.3.0 -> 0.4.0 (ALTER EXTENSION bc_join UPDATE).
-- Every change made to sql/bc_join.sql for 0.4.0 has its equivalent here
-- (docs/development.md, "Changing the schema"); test/tools/upgrade-check
-- proves a 0.3.0 database updated by this script equals a fresh 0.4.0.
\echo Use "ALTER EXTENSION bc_join UPDATE" to load this file. \quit

-- ======================================================================
-- Issue 42 item 9a (helper h5): repeats for attestors written as the seed
-- writes them.  A repeat hides the uses of its certificate's round (found
-- by attestation_uses.csr_sha256, indexed here) from the attestor, and
-- spend_join_token spends nothing in a repeat.
-- ======================================================================

CREATE INDEX attestation_uses_csr_idx ON bc_join.attestation_uses (csr_sha256)
	WHERE csr_sha256 IS NOT NULL;

CREATE OR REPLACE FUNCTION bc_join.spend_join_token(token_id text) RETURNS void
	LANGUAGE plpgsql
	SET search_path = pg_catalog, pg_temp
	AS $$
BEGIN
	IF bc_join.join_round_csr_sha256(true) IS NOT NULL THEN
		RETURN;
	END IF;
	UPDATE bc_join.join_tokens t SET uses_left = t.uses_left - 1
		WHERE t.id = spend_join_token.token_id AND t.uses_left > 0;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'join token % has no use left to spend', token_id
			USING HINT = 'Check the token with bc_join.check_join_token() in the same transaction first.';
	END IF;
END
$$;
COMMENT ON FUNCTION bc_join.spend_join_token(text) IS
	'Spends one use of a join token checked in this transaction (final round only; in a repeat of one, nothing: the certificate spent it); returns nothing.';
