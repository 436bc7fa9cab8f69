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

-- issue 45: a compromised CA (helper c; docs/operator.md "A compromised CA key")
/*
 * An earlier intermediate whose key is known or suspected to be out:
 * mark_ca_compromised() records it and revokes (cACompromise) every live
 * node and session certificate it issued.  A node certificate so revoked
 * renews once, for a new key, from the current intermediate (bc_join.renew,
 * src/ext/renew.c); compromise_renewals records that renewal.  Nothing is
 * issued again from a CA recorded here (src/ext/compromise.c).
 */
CREATE TABLE bc_join.compromised_cas (
	certificate_sha256 bc_join.sha256 PRIMARY KEY,	-- SHA-256 of the DER below
	spki_sha256 bc_join.sha256 NOT NULL,		-- its key (nothing issues from that key again)
	subject text NOT NULL,						-- OpenSSL's one-line form, for people
	subject_name bytea NOT NULL,				-- the DER Name its certificates carry as issuer
	key_id bytea NOT NULL,						-- its subject key identifier (their authority key id)
	certificate bytea NOT NULL,					-- DER
	marked_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	marked_by text NOT NULL DEFAULT session_user,
	-- certificates mark_ca_compromised() revoked (every call for it added up)
	node_certificates bigint NOT NULL DEFAULT 0,
	session_certificates bigint NOT NULL DEFAULT 0
);
COMMENT ON TABLE bc_join.compromised_cas IS
	'Node CAs (earlier intermediates) marked compromised by mark_ca_compromised(): certificate, key, subject, key id, when and by whom, and how many node and session certificates the marking revoked; nothing issues from their keys again, and a node certificate they issued, revoked cACompromise, renews once.';
CREATE INDEX compromised_cas_spki_idx ON bc_join.compromised_cas (spki_sha256);

CREATE TABLE bc_join.compromise_renewals (
	serial text PRIMARY KEY REFERENCES bc_join.node_certs (serial) ON DELETE CASCADE,
	successor text NOT NULL,					-- the certificate the renewal issued
	renewed_at timestamptz NOT NULL DEFAULT bc_join.compute_now()
);
COMMENT ON TABLE bc_join.compromise_renewals IS
	'The one renewal each node certificate revoked for its CA''s compromise had: its serial, the serial issued, when; a second renewal from it is refused (renew:superseded).';

-- Internal: what mark_ca_compromised() needs of a PEM CA certificate; 22023
-- when it is none, 55000 when it is the current issuing CA or of its chain.
CREATE FUNCTION bc_join.compromised_ca_facts(ca_certificate text, OUT certificate bytea,
		OUT subject text, OUT subject_name bytea, OUT key_id bytea, OUT spki_sha256 bytea)
	AS 'MODULE_PATHNAME', 'bc_compromised_ca_facts'
	LANGUAGE C VOLATILE STRICT
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION bc_join.compromised_ca_facts(text) IS
	'Internal: the DER, subject, DER subject name, subject key id and key hash of a PEM CA certificate; refuses one that is no CA (22023) and the current issuing CA or its chain (55000).';

-- Internal: whether ca (DER) issued certificate (DER): OpenSSL's
-- comparison (X509_check_issued's): the issuer name and the authority key identifier.
CREATE FUNCTION bc_join.issued_by(certificate bytea, ca bytea) RETURNS boolean
	AS 'MODULE_PATHNAME', 'bc_issued_by'
	LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION bc_join.issued_by(bytea, bytea) IS
	'Internal: true when the CA certificate (DER) issued the certificate (DER): its issuer name is the CA''s subject and its authority key identifier the CA''s subject key identifier (as X509_check_issued compares them).';

-- Mark an earlier intermediate (PEM) compromised: recorded, every live node
-- and session certificate it issued revoked cACompromise, one event per
-- tenant that had any (and one in root), an audit row, NOTIFY bc_join_crl.
-- Returns how many certificates it revoked.  Joins, renewals and sessions
-- wait while it runs (it holds node_certs and session_certs EXCLUSIVE), so
-- that none is issued from the CA meanwhile.
CREATE FUNCTION bc_join.mark_ca_compromised(ca_certificate text) RETURNS bigint
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	ca record;
	per jsonb;
	nodes bigint;
	sessions bigint;
BEGIN
	IF ca_certificate IS NULL THEN
		PERFORM bc_join.invalid_input('ca_certificate is required');
	END IF;
	SELECT * INTO ca FROM bc_join.compromised_ca_facts(ca_certificate);
	LOCK TABLE bc_join.node_certs, bc_join.session_certs IN EXCLUSIVE MODE;
	INSERT INTO bc_join.compromised_cas (certificate_sha256, spki_sha256, subject, subject_name,
										 key_id, certificate)
		VALUES (sha256(ca.certificate), ca.spki_sha256, ca.subject, ca.subject_name, ca.key_id,
				ca.certificate)
		ON CONFLICT (certificate_sha256) DO NOTHING;
	-- The DER name or key id in the certificate's bytes first (cheap), then OpenSSL.
	WITH n AS (
		UPDATE bc_join.node_certs c SET revoked_at = bc_join.compute_now(),
			revocation_reason = 'cACompromise'
		WHERE c.revoked_at IS NULL AND c.not_after > bc_join.compute_now()
		  AND (position(ca.subject_name IN c.certificate) > 0 OR position(ca.key_id IN c.certificate) > 0)
		  AND bc_join.issued_by(c.certificate, ca.certificate)
		RETURNING c.node_id),
	s AS (
		UPDATE bc_join.session_certs sc SET revoked_at = bc_join.compute_now(),
			revocation_reason = 'cACompromise'
		WHERE sc.revoked_at IS NULL AND sc.not_after > bc_join.compute_now()
		  AND (position(ca.subject_name IN sc.certificate) > 0 OR position(ca.key_id IN sc.certificate) > 0)
		  AND bc_join.issued_by(sc.certificate, ca.certificate)
		RETURNING sc.session_id),
	k AS (
		SELECT x.tenant_id, 'node' AS kind FROM n JOIN bc_join.nodes x ON x.id = n.node_id
		UNION ALL
		SELECT y.tenant_id, 'session' FROM s JOIN bc_join.sessions y ON y.id = s.session_id)
	SELECT coalesce(jsonb_object_agg(g.tenant_id, jsonb_build_object('nodeCertificates', g.nodes,
																	  'sessionCertificates', g.sessions)), '{}')
		INTO per
		FROM (SELECT k.tenant_id, count(*) FILTER (WHERE k.kind = 'node') AS nodes,
					 count(*) FILTER (WHERE k.kind = 'session') AS sessions
			  FROM k GROUP BY k.tenant_id) g;
	SELECT coalesce(sum((v->>'nodeCertificates')::bigint), 0),
		   coalesce(sum((v->>'sessionCertificates')::bigint), 0)
		INTO nodes, sessions FROM jsonb_each(per) e(t, v);
	UPDATE bc_join.compromised_cas x SET node_certificates = x.node_certificates + nodes,
		session_certificates = x.session_certificates + sessions
		WHERE x.certificate_sha256 = sha256(ca.certificate);
	INSERT INTO bc_join.events (tenant_id, type, payload)
		SELECT e.t, 'ca.compromised',
			   jsonb_build_object('subject', ca.subject, 'keyId', encode(ca.key_id, 'hex')) || e.v
		FROM jsonb_each(per) e(t, v) WHERE e.t <> 'root'
		UNION ALL
		SELECT 'root', 'ca.compromised',
			   jsonb_build_object('subject', ca.subject, 'keyId', encode(ca.key_id, 'hex'),
								  'nodeCertificates', nodes, 'sessionCertificates', sessions,
								  'tenants', (SELECT count(*) FROM jsonb_object_keys(per)));
	INSERT INTO bc_join.audit_log (action, detail)
		VALUES ('ca.compromised',
				jsonb_build_object('subject', ca.subject, 'keyId', encode(ca.key_id, 'hex'),
								   'spkiSha256', encode(ca.spki_sha256, 'hex'),
								   'certificateSha256', encode(sha256(ca.certificate), 'hex'),
								   'nodeCertificates', nodes, 'sessionCertificates', sessions,
								   'tenants', per));
	PERFORM pg_notify('bc_join_crl', '');
	RETURN nodes + sessions;
END
$$;
COMMENT ON FUNCTION bc_join.mark_ca_compromised(text) IS
	'Marks an earlier intermediate (PEM) compromised: recorded in compromised_cas, every live node and session certificate it issued revoked cACompromise (its node certificates may renew once, for a new key), evented, audited, NOTIFY bc_join_crl; refuses the current issuing CA (rotate first); returns how many certificates it revoked.';

SELECT pg_catalog.pg_extension_config_dump('bc_join.compromised_cas', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.compromise_renewals', '');

REVOKE ALL ON bc_join.compromised_cas, bc_join.compromise_renewals FROM PUBLIC;
REVOKE ALL ON FUNCTION bc_join.compromised_ca_facts(text), bc_join.issued_by(bytea, bytea),
	bc_join.mark_ca_compromised(text) FROM PUBLIC;
-- The whole fleet's CA: the operator's, never a tenant operator's.
GRANT EXECUTE ON FUNCTION bc_join.mark_ca_compromised(text) TO bc_join_operator;
GRANT SELECT ON bc_join.compromised_cas, bc_join.compromise_renewals TO bc_join_operator;

-- A service signing key (its RFC 7638 kid) marked compromised: service_keys()
-- and signed_service_keys() publish it no more, nothing signs or verifies
-- with it again (src/ext/compromise.c; the current one is refused).
CREATE TABLE bc_join.compromised_keys (
	kid text PRIMARY KEY CHECK (kid ~ '^[A-Za-z0-9_-]{43}$'),
	held boolean NOT NULL,						-- the key directory held it when it was marked
	marked_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	marked_by text NOT NULL DEFAULT session_user
);
COMMENT ON TABLE bc_join.compromised_keys IS
	'Service signing keys (RFC 7638 kids) marked compromised by mark_key_compromised(): whether the key directory held it, when and by whom; never published, signed or verified with again.';

CREATE FUNCTION bc_join.mark_key_compromised(kid text) RETURNS boolean
	AS 'MODULE_PATHNAME', 'bc_mark_key_compromised'
	LANGUAGE C VOLATILE STRICT SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION bc_join.mark_key_compromised(text) IS
	'Marks a service signing key (its kid) compromised: service_keys() and signed_service_keys() publish it no more, nothing signs or verifies with it again; refuses the current signing key (promote another first); evented and audited; returns false when it was marked already.';

SELECT pg_catalog.pg_extension_config_dump('bc_join.compromised_keys', '');
REVOKE ALL ON bc_join.compromised_keys FROM PUBLIC;
REVOKE ALL ON FUNCTION bc_join.mark_key_compromised(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bc_join.mark_key_compromised(text) TO bc_join_operator;
GRANT SELECT ON bc_join.compromised_keys TO bc_join_operator;
-- end of issue 45: a compromised CA
