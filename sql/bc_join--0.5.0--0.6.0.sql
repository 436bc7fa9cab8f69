-- bc_join 0.5.0 -> 0.6.0 (ALTER EXTENSION bc_join UPDATE).
-- Every change made to sql/bc_join.sql for 0.6.0 has its equivalent here
-- (docs/development.md, "Changing the schema"); test/tools/upgrade-check
-- proves a 0.5.0 database updated by this script equals a fresh 0.6.0.
\echo Use "ALTER EXTENSION bc_join UPDATE" to load this file. \quit

-- #46 federation
/* ------------------------------------- #46: federation with other trust domains (docs/operator.md) */

/*
 * Another trust domain's bundle (SPIFFE Federation): the operator names the
 * domain, where its bundle endpoint is and how it is authenticated
 * (add_federation); bc-join-federate, a program run on a trusted host as a
 * member of bc_join_federation, fetches what is due (federation_due) and
 * hands the body to the database, which judges it (store_fetched_bundle):
 * the gateway never fetches.  Agents take the bundles signed by the signing
 * keys (signed_trust_bundles, GET /v1/trust-bundles).
 */
DO $roles$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'bc_join_federation') THEN
		CREATE ROLE bc_join_federation NOLOGIN;
	END IF;
END
$roles$;

CREATE TABLE bc_join.federated_trust_domains (
	trust_domain text PRIMARY KEY CHECK (trust_domain ~ '^[a-z0-9._-]{1,255}$'),
	endpoint_url text CHECK (endpoint_url ~ '^https://[^/?#@[:space:]]+(/[^#[:space:]]*)?$'),
	profile text NOT NULL CHECK (profile IN ('https_web', 'https_spiffe', 'static')),
	endpoint_spiffe_id text CHECK (endpoint_spiffe_id ~ '^spiffe://[a-z0-9._-]{1,255}(/[A-Za-z0-9._-]+)*$'),
	bundle jsonb,								-- the accepted bundle (JWK Set), NULL before the first
	sequence bigint CHECK (sequence >= 0),	-- its spiffe_sequence (NULL: it had none)
	refresh_hint integer CHECK (refresh_hint BETWEEN 60 AND 86400),	-- its spiffe_refresh_hint, clamped
	fetched_at timestamptz,					-- the last fetch that was not refused
	updated_at timestamptz,					-- when the bundle last changed
	next_fetch_at timestamptz,				-- NULL: static, never fetched
	last_error text,
	last_error_at timestamptz,
	added_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	added_by text NOT NULL DEFAULT session_user,
	CHECK ((profile = 'static') = (endpoint_url IS NULL)),
	CHECK ((profile = 'https_spiffe') = (endpoint_spiffe_id IS NOT NULL))
);
COMMENT ON TABLE bc_join.federated_trust_domains IS
	'Federated trust domains: the bundle endpoint (URL, profile https_web, https_spiffe with the endpoint''s SPIFFE ID, or static) and the last bundle accepted, its spiffe_sequence and clamped refresh hint, when it was fetched, changed and is due, and the last refusal or fetch error.';

SELECT pg_catalog.pg_extension_config_dump('bc_join.federated_trust_domains', '');

-- Internal: why another domain's bundle (text) may not be stored, NULL when
-- it may (src/common/spiffe_bundle.c, OpenSSL and jansson).
CREATE FUNCTION bc_join.federated_bundle_problem(bundle text) RETURNS text
	AS 'MODULE_PATHNAME', 'bc_federated_bundle_problem'
	LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION bc_join.federated_bundle_problem(text) IS
	'Internal: NULL when a federated bundle may be stored, else why not: over 256 KiB or 64 keys, not a JWK Set, spiffe_sequence or spiffe_refresh_hint not an integer up to 2^53, an x509-svid key whose x5c is not exactly one DER CA certificate holding the JWK''s key, a jwt-svid key without kid.';

-- Internal: the seconds until a domain's next fetch: a quarter of its
-- refresh hint, at least 60 s; 300 s without a hint.
CREATE FUNCTION bc_join.federation_interval(refresh_hint integer) RETURNS interval
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	SET search_path = pg_catalog, pg_temp
	AS $$ SELECT make_interval(secs => CASE WHEN refresh_hint IS NULL THEN 300
											ELSE greatest(60, refresh_hint / 4) END) $$;
COMMENT ON FUNCTION bc_join.federation_interval(integer) IS
	'Internal: the time from one fetch of a federated bundle to the next: a quarter of the refresh hint, at least 60 s; 300 s without a hint.';

-- Internal: the most bytes federated_bundles() may have in all (every domain's
-- bundle, as jsonb text), so that GET /v1/trust-bundles passes every bound on
-- its way: signed by up to 3 signing keys (BC_KEYSET_MAX), each JWS of
-- {trustDomain (up to 255 bytes), issuedAt, bundles} base64url (4/3), the
-- document {"keys": [JWS, JWS, JWS]} within the gateway's 256 KiB for a
-- document (src/gateway/documents.c) and each JWS within the JOSE bound of
-- the extension and bcd (BC_JOSE_MAX, 256 KiB): 3 x (64,318 x 4/3 + 180)
-- + 16 = 257,830 <= 262,144.
CREATE FUNCTION bc_join.federated_bundles_max() RETURNS integer
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	SET search_path = pg_catalog, pg_temp
	AS $$ SELECT 64000 $$;
COMMENT ON FUNCTION bc_join.federated_bundles_max() IS
	'Internal: the most bytes the federated bundles may have in all (federated_bundles() as text, 64000), so that every agent takes the signed GET /v1/trust-bundles (3 signing keys, the gateway''s and the JOSE bounds of 256 KiB).';

-- Internal: judge bundle for trust_domain (row locked) and store it;
-- {stored, changed, sequence, next_fetch_at} or {stored: false, refused}.
-- The caller decides what a refusal does (the fetcher's: recorded; the
-- operator's: an error).
CREATE FUNCTION bc_join.federation_accept(trust_domain text, bundle text, fetched boolean) RETURNS jsonb
	LANGUAGE plpgsql
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	r bc_join.federated_trust_domains;
	b jsonb;
	problem text;
	seq bigint;
	hint integer;
	now timestamptz := bc_join.compute_now();
	nxt timestamptz;
	changed boolean;
	total bigint;
BEGIN
	-- one store at a time: the total below holds for what is committed
	LOCK TABLE bc_join.federated_trust_domains IN SHARE ROW EXCLUSIVE MODE;
	SELECT * INTO r FROM bc_join.federated_trust_domains f
		WHERE f.trust_domain = federation_accept.trust_domain FOR UPDATE;
	IF NOT FOUND THEN
		PERFORM bc_join.invalid_input(format('trust domain %s is not federated', federation_accept.trust_domain));
	END IF;
	nxt := CASE WHEN r.profile = 'static' THEN NULL
				ELSE now + bc_join.federation_interval(r.refresh_hint) END;
	problem := bc_join.federated_bundle_problem(coalesce(bundle, ''));
	IF problem IS NULL THEN
		BEGIN
			b := bundle::jsonb;
		EXCEPTION WHEN data_exception THEN
			problem := 'the bundle is not JSON PostgreSQL takes: ' || SQLERRM;
		END;
	END IF;
	IF problem IS NULL THEN
		seq := (b->>'spiffe_sequence')::bigint;
		IF r.bundle IS NOT NULL AND r.sequence IS NOT NULL AND seq IS NULL THEN
			problem := format('the bundle has no spiffe_sequence, the stored one has %s', r.sequence);
		ELSIF r.bundle IS NOT NULL AND seq < r.sequence THEN
			problem := format('spiffe_sequence %s is lower than the stored %s', seq, r.sequence);
		ELSIF r.bundle IS NOT NULL AND seq = r.sequence AND b <> r.bundle THEN
			problem := format('spiffe_sequence %s is the stored one, but the content differs', seq);
		END IF;
	END IF;
	IF problem IS NULL THEN
		-- every domain's bundle goes to agents in one signed document: its bound
		SELECT octet_length(coalesce(jsonb_object_agg('spiffe://' || f.trust_domain,
				CASE WHEN f.trust_domain = r.trust_domain THEN b ELSE f.bundle END), '{}')::text)
			INTO total
			FROM bc_join.federated_trust_domains f
			WHERE f.bundle IS NOT NULL OR f.trust_domain = r.trust_domain;
		IF total > bc_join.federated_bundles_max() THEN
			problem := format('the federated bundles would be %s bytes in all with this one, over %s (what agents take in one signed document)',
							  total, bc_join.federated_bundles_max());
		END IF;
	END IF;
	IF problem IS NOT NULL THEN
		RETURN jsonb_build_object('stored', false, 'refused', problem, 'sequence', r.sequence,
								  'next_fetch_at', nxt);
	END IF;
	IF b ? 'spiffe_refresh_hint' THEN
		hint := least(greatest((b->>'spiffe_refresh_hint')::numeric, 60), 86400)::integer;
	END IF;
	nxt := CASE WHEN r.profile = 'static' THEN NULL ELSE now + bc_join.federation_interval(hint) END;
	changed := r.bundle IS DISTINCT FROM b;
	UPDATE bc_join.federated_trust_domains f
		SET bundle = b, sequence = seq, refresh_hint = hint,
			fetched_at = CASE WHEN fetched THEN now ELSE f.fetched_at END,
			updated_at = CASE WHEN changed THEN now ELSE f.updated_at END,
			next_fetch_at = nxt, last_error = NULL, last_error_at = NULL
		WHERE f.trust_domain = r.trust_domain;
	IF changed THEN
		INSERT INTO bc_join.events (tenant_id, type, payload)
			VALUES ('root', 'federation.bundle.updated',
					jsonb_build_object('trustDomain', r.trust_domain, 'sequence', seq,
									   'previousSequence', r.sequence,
									   'keys', jsonb_array_length(b->'keys'),
									   'by', CASE WHEN fetched THEN 'fetch' ELSE session_user::text END));
		PERFORM pg_notify('bc_join_federation', r.trust_domain);
	END IF;
	RETURN jsonb_build_object('stored', true, 'changed', changed, 'sequence', seq, 'next_fetch_at', nxt);
END
$$;
COMMENT ON FUNCTION bc_join.federation_accept(text, text, boolean) IS
	'Internal: judges a federated bundle (federated_bundle_problem; its spiffe_sequence neither lower than the stored one nor equal with other content, present once the stored one had one; every domain''s bundle with it at most federated_bundles_max() bytes) and stores it with its clamped hint and next fetch; a change is evented (federation.bundle.updated) and notified on bc_join_federation; returns {stored, changed, sequence, next_fetch_at} or {stored: false, refused, sequence, next_fetch_at} without storing anything.';

-- Federate with another trust domain (its bundle endpoint, or a bundle by hand).
CREATE FUNCTION bc_join.add_federation(trust_domain text, bundle_endpoint_url text DEFAULT NULL,
									   profile text DEFAULT 'https_web',
									   endpoint_spiffe_id text DEFAULT NULL,
									   bundle jsonb DEFAULT NULL) RETURNS void
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	td text := add_federation.trust_domain;
	own text := current_setting('bc_join.trust_domain', true);
	id_td text;
	res jsonb;
BEGIN
	IF td IS NULL OR length(td) > 255 OR td !~ '^[a-z0-9_-]+(\.[a-z0-9_-]+)*$' THEN
		PERFORM bc_join.invalid_input('trust_domain must be a trust domain name: labels of lower-case letters, digits, "-" and "_" joined by single dots, at most 255 characters, without spiffe://');
	END IF;
	IF td = own THEN
		PERFORM bc_join.invalid_input('trust_domain is this service''s own trust domain');
	END IF;
	IF profile IS NULL OR profile NOT IN ('https_web', 'https_spiffe', 'static') THEN
		PERFORM bc_join.invalid_input('profile must be https_web, https_spiffe or static');
	END IF;
	IF profile = 'static' THEN
		IF bundle_endpoint_url IS NOT NULL OR endpoint_spiffe_id IS NOT NULL OR bundle IS NULL THEN
			PERFORM bc_join.invalid_input('a static federation takes a bundle, and no endpoint URL or SPIFFE ID');
		END IF;
	ELSE
		IF bundle_endpoint_url IS NULL OR bundle_endpoint_url !~ '^https://[^/?#@[:space:]]+(/[^#[:space:]]*)?$' THEN
			PERFORM bc_join.invalid_input('bundle_endpoint_url must be an https:// URL without userinfo or fragment');
		END IF;
	END IF;
	IF profile = 'https_web' AND endpoint_spiffe_id IS NOT NULL THEN
		PERFORM bc_join.invalid_input('endpoint_spiffe_id belongs to the https_spiffe profile');
	END IF;
	IF profile = 'https_spiffe' THEN
		IF endpoint_spiffe_id IS NULL OR endpoint_spiffe_id !~ '^spiffe://[a-z0-9._-]{1,255}(/[A-Za-z0-9._-]+)*$' THEN
			PERFORM bc_join.invalid_input('the https_spiffe profile needs endpoint_spiffe_id, a SPIFFE ID');
		END IF;
		id_td := substring(endpoint_spiffe_id FROM '^spiffe://([^/]+)');
		IF id_td = own THEN
			PERFORM bc_join.invalid_input('endpoint_spiffe_id is in this service''s own trust domain');
		END IF;
		IF bundle IS NULL AND (id_td = td OR NOT EXISTS (
				SELECT 1 FROM bc_join.federated_trust_domains f
				WHERE f.trust_domain = id_td AND f.bundle IS NOT NULL)) THEN
			PERFORM bc_join.invalid_input(format('the https_spiffe profile needs a bundle of %s to authenticate the endpoint (bundle, or a federation with it first)', id_td));
		END IF;
	END IF;
	LOCK TABLE bc_join.federated_trust_domains IN SHARE ROW EXCLUSIVE MODE;	-- federation_accept's
	IF EXISTS (SELECT 1 FROM bc_join.federated_trust_domains f WHERE f.trust_domain = td) THEN
		PERFORM bc_join.invalid_input(format('trust domain %s is federated already (remove_federation first)', td));
	END IF;
	-- Every bcd holds at most 64 federated domains (BCD_TRUST_DOMAINS_MAX) and refuses
	-- a document with more, so the database never publishes more.
	IF (SELECT count(*) FROM bc_join.federated_trust_domains) >= 64 THEN
		PERFORM bc_join.invalid_input('64 trust domains are federated already, the most every bcd holds (remove_federation first)');
	END IF;
	INSERT INTO bc_join.federated_trust_domains (trust_domain, endpoint_url, profile, endpoint_spiffe_id,
												 bundle, next_fetch_at)
		VALUES (td, bundle_endpoint_url, profile, endpoint_spiffe_id, NULL,
				CASE WHEN profile <> 'static' THEN bc_join.compute_now() END);
	IF bundle IS NOT NULL THEN
		-- The first bundle: static's, or the bootstrap of an endpoint.
		res := bc_join.federation_accept(td, bundle::text, false);
		IF NOT (res->>'stored')::boolean THEN
			PERFORM bc_join.invalid_input('the bundle is refused: ' || (res->>'refused'));
		END IF;
		IF profile <> 'static' THEN
			UPDATE bc_join.federated_trust_domains f SET next_fetch_at = bc_join.compute_now()
				WHERE f.trust_domain = td;
		END IF;
	END IF;
	INSERT INTO bc_join.audit_log (action, detail)
		VALUES ('federation.added',
				jsonb_build_object('trustDomain', td, 'profile', profile, 'endpointUrl', bundle_endpoint_url,
								   'endpointSpiffeId', endpoint_spiffe_id, 'bundle', bundle IS NOT NULL));
	INSERT INTO bc_join.events (tenant_id, type, payload)
		VALUES ('root', 'federation.added',
				jsonb_build_object('trustDomain', td, 'profile', profile, 'endpointUrl', bundle_endpoint_url));
	PERFORM pg_notify('bc_join_federation', td);
END
$$;
COMMENT ON FUNCTION bc_join.add_federation(text, text, text, text, jsonb) IS
	'Federates with another trust domain (a name without spiffe://, never the own one): its bundle endpoint URL (https, no userinfo) with profile https_web (Web PKI and host name), or https_spiffe with the endpoint''s SPIFFE ID and a bundle to authenticate it (unless the ID''s domain is federated with a bundle already); or a static bundle and no URL; a bundle given is judged as a fetched one; audited, evented, notified on bc_join_federation.';

-- An operator's bundle for a federated domain (a static one's update, an
-- endpoint's new bootstrap): judged as a fetched one; returns its sequence.
CREATE FUNCTION bc_join.set_federated_bundle(trust_domain text, bundle jsonb) RETURNS bigint
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	res jsonb;
BEGIN
	IF bundle IS NULL THEN
		PERFORM bc_join.invalid_input('bundle is required');
	END IF;
	res := bc_join.federation_accept(set_federated_bundle.trust_domain, bundle::text, false);
	IF NOT (res->>'stored')::boolean THEN
		PERFORM bc_join.invalid_input('the bundle is refused: ' || (res->>'refused'));
	END IF;
	INSERT INTO bc_join.audit_log (action, detail)
		VALUES ('federation.bundle.set',
				jsonb_build_object('trustDomain', set_federated_bundle.trust_domain,
								   'sequence', res->'sequence', 'bundleSha256',
								   encode(sha256(convert_to(bundle::text, 'UTF8')), 'hex')));
	RETURN (res->>'sequence')::bigint;
END
$$;
COMMENT ON FUNCTION bc_join.set_federated_bundle(text, jsonb) IS
	'Sets a federated trust domain''s bundle by hand (a static domain''s, or a new bootstrap of an endpoint''s), judged as a fetched bundle (refused with the reason: INVALID_INPUT); audited; returns its spiffe_sequence.';

-- Stop federating with a trust domain; false when it was not federated.
CREATE FUNCTION bc_join.remove_federation(trust_domain text) RETURNS boolean
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
BEGIN
	DELETE FROM bc_join.federated_trust_domains f WHERE f.trust_domain = remove_federation.trust_domain;
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	INSERT INTO bc_join.audit_log (action, detail)
		VALUES ('federation.removed', jsonb_build_object('trustDomain', remove_federation.trust_domain));
	INSERT INTO bc_join.events (tenant_id, type, payload)
		VALUES ('root', 'federation.removed', jsonb_build_object('trustDomain', remove_federation.trust_domain));
	PERFORM pg_notify('bc_join_federation', remove_federation.trust_domain);
	RETURN true;
END
$$;
COMMENT ON FUNCTION bc_join.remove_federation(text) IS
	'Stops federating with a trust domain: its row and bundle go, agents drop it with the next signed_trust_bundles(); audited, evented, notified on bc_join_federation; false when it was not federated.';

-- What bc-join-federate fetches now: each domain due, and for https_spiffe
-- the bundle that authenticates its endpoint (the latest accepted bundle of
-- the endpoint ID's trust domain: self-serving rotates with it).
CREATE FUNCTION bc_join.federation_due()
	RETURNS TABLE (trust_domain text, endpoint_url text, profile text, endpoint_spiffe_id text,
				   endpoint_bundle jsonb)
	LANGUAGE sql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
	SELECT f.trust_domain, f.endpoint_url, f.profile, f.endpoint_spiffe_id,
		   (SELECT e.bundle FROM bc_join.federated_trust_domains e
			 WHERE f.profile = 'https_spiffe'
			   AND e.trust_domain = substring(f.endpoint_spiffe_id FROM '^spiffe://([^/]+)'))
	FROM bc_join.federated_trust_domains f
	WHERE f.profile <> 'static' AND f.next_fetch_at <= bc_join.compute_now()
	ORDER BY f.next_fetch_at, f.trust_domain
$$;
COMMENT ON FUNCTION bc_join.federation_due() IS
	'For bc-join-federate (bc_join_federation): the federated trust domains whose bundle is due, with endpoint URL, profile, endpoint SPIFFE ID and, for https_spiffe, the bundle of the endpoint ID''s trust domain that authenticates it.';

-- bc-join-federate's result for a domain: the body it fetched, or why it
-- has none (error); the database judges the body.
CREATE FUNCTION bc_join.store_fetched_bundle(trust_domain text, bundle text, error text DEFAULT NULL)
	RETURNS jsonb
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	r bc_join.federated_trust_domains;
	res jsonb;
	why text;
	now timestamptz := bc_join.compute_now();
BEGIN
	SELECT * INTO r FROM bc_join.federated_trust_domains f
		WHERE f.trust_domain = store_fetched_bundle.trust_domain FOR UPDATE;
	IF NOT FOUND OR r.profile = 'static' THEN
		PERFORM bc_join.invalid_input(format('trust domain %s is not federated through a bundle endpoint',
											 store_fetched_bundle.trust_domain));
	END IF;
	IF error IS NULL THEN
		res := bc_join.federation_accept(r.trust_domain, bundle, true);
		IF (res->>'stored')::boolean THEN
			RETURN res;
		END IF;
		why := res->>'refused';
		INSERT INTO bc_join.events (tenant_id, type, payload)
			VALUES ('root', 'federation.bundle.refused',
					jsonb_build_object('trustDomain', r.trust_domain, 'reason', why,
									   'storedSequence', r.sequence,
									   'bytes', octet_length(coalesce(bundle, ''))));
	ELSE
		why := 'fetch failed: ' || left(error, 1000);
		res := jsonb_build_object('stored', false, 'error', left(error, 1000), 'sequence', r.sequence,
								  'next_fetch_at', now + bc_join.federation_interval(r.refresh_hint));
		INSERT INTO bc_join.events (tenant_id, type, payload)
			VALUES ('root', 'federation.fetch.failed',
					jsonb_build_object('trustDomain', r.trust_domain, 'error', left(error, 1000)));
	END IF;
	UPDATE bc_join.federated_trust_domains f
		SET last_error = why, last_error_at = now,
			next_fetch_at = now + bc_join.federation_interval(r.refresh_hint)
		WHERE f.trust_domain = r.trust_domain;
	RETURN res;
END
$$;
COMMENT ON FUNCTION bc_join.store_fetched_bundle(text, text, text) IS
	'For bc-join-federate (bc_join_federation): the body fetched for a trust domain, judged by the database: stored when it passes (returns {stored, changed, sequence, next_fetch_at}), else refused, the old bundle kept, last_error set and evented federation.bundle.refused (returns {stored: false, refused, ...}); with error (the fetch failed) only last_error and federation.fetch.failed.';

-- The accepted bundles, {"spiffe://<td>": bundle}, for signed_trust_bundles().
CREATE FUNCTION bc_join.federated_bundles() RETURNS jsonb
	LANGUAGE sql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
	SELECT coalesce(jsonb_object_agg('spiffe://' || f.trust_domain, f.bundle ORDER BY f.trust_domain), '{}')
	FROM bc_join.federated_trust_domains f WHERE f.bundle IS NOT NULL
$$;
COMMENT ON FUNCTION bc_join.federated_bundles() IS
	'Returns the federated trust domains'' accepted bundles, {"spiffe://<td>": bundle} (public: what signed_trust_bundles() signs).';

-- The federated bundles as agents take them: {"keys": [JWS...]}.
CREATE FUNCTION bc_join.signed_trust_bundles() RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_signed_trust_bundles' LANGUAGE C STABLE;
COMMENT ON FUNCTION bc_join.signed_trust_bundles() IS
	'Returns {keys: [JWS...]}: {trustDomain, issuedAt, bundles: {"spiffe://<td>": bundle}} (every federated domain''s accepted bundle) signed by each signing key, as signed_service_keys(); the gateway''s GET /v1/trust-bundles.';

-- The own bundle's spiffe_sequence by its keys (D3): HA nodes with the same
-- keys publish the same sequence (the key directories' mtimes differ), and
-- a bundle with new keys a higher one than any before, so a federated peer
-- (which refuses a lower sequence) takes every rollover and no failover
-- looks like a step back.
CREATE TABLE bc_join.own_bundle_sequences (
	keys_sha256 bytea PRIMARY KEY CHECK (octet_length(keys_sha256) = 32),
	sequence bigint NOT NULL UNIQUE CHECK (sequence > 0 AND sequence <= 9007199254740992),
	first_served_at timestamptz NOT NULL DEFAULT bc_join.compute_now()
);
COMMENT ON TABLE bc_join.own_bundle_sequences IS
	'The spiffe_sequence of each set of keys spiffe_bundle() published (SHA-256 of its keys member): the same keys, the same sequence on every node; new keys the Unix seconds of the service clock or one more than the highest before, whichever is higher.';

SELECT pg_catalog.pg_extension_config_dump('bc_join.own_bundle_sequences', '');

-- The sequence of the keys whose hash is keys_sha256, recorded the first
-- time (spiffe_bundle() calls it from C).
CREATE FUNCTION bc_join.own_bundle_sequence(keys_sha256 bytea) RETURNS bigint
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	s bigint;
BEGIN
	SELECT o.sequence INTO s FROM bc_join.own_bundle_sequences o WHERE o.keys_sha256 = own_bundle_sequence.keys_sha256;
	IF FOUND THEN
		RETURN s;
	END IF;
	IF current_setting('transaction_read_only') = 'on' THEN
		RAISE EXCEPTION USING ERRCODE = 'config_file_error',
			MESSAGE = 'the SPIFFE bundle has keys without a sequence yet, and this transaction cannot record one',
			DETAIL = 'INVALID_CONFIG: a bundle''s spiffe_sequence is recorded (bc_join.own_bundle_sequences) the first time it is published, on the primary.',
			HINT = 'Call bc_join.spiffe_bundle() once on the primary (the gateway does).';
	END IF;
	-- One writer at a time: the re-check below sees what another recorded.
	LOCK TABLE bc_join.own_bundle_sequences IN SHARE ROW EXCLUSIVE MODE;
	SELECT o.sequence INTO s FROM bc_join.own_bundle_sequences o WHERE o.keys_sha256 = own_bundle_sequence.keys_sha256;
	IF FOUND THEN
		RETURN s;
	END IF;
	SELECT greatest(coalesce(max(o.sequence), 0) + 1, floor(extract(epoch FROM bc_join.compute_now()))::bigint)
		INTO s FROM bc_join.own_bundle_sequences o;
	INSERT INTO bc_join.own_bundle_sequences (keys_sha256, sequence) VALUES (own_bundle_sequence.keys_sha256, s);
	RETURN s;
END
$$;
COMMENT ON FUNCTION bc_join.own_bundle_sequence(bytea) IS
	'Internal (spiffe_bundle()): the spiffe_sequence of a set of keys (SHA-256 of the bundle''s keys member), recorded the first time: the service clock''s Unix seconds or one more than the highest recorded, whichever is higher; INVALID_CONFIG in a read-only transaction (a standby) for keys not recorded yet.';
REVOKE ALL ON bc_join.own_bundle_sequences FROM PUBLIC;
REVOKE ALL ON FUNCTION bc_join.own_bundle_sequence(bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bc_join.own_bundle_sequence(bytea)
	TO bc_join_gateway, bc_join_operator, bc_join_tenant_operator;
GRANT SELECT ON bc_join.own_bundle_sequences TO bc_join_operator;

-- Operators' view of the federations.
CREATE VIEW bc_join.federations AS
	SELECT f.trust_domain, f.profile, f.endpoint_url, f.endpoint_spiffe_id, f.sequence, f.refresh_hint,
		   jsonb_array_length(f.bundle->'keys') AS keys,
		   (SELECT count(*) FROM jsonb_array_elements(f.bundle->'keys') k WHERE k->>'use' = 'x509-svid') AS x509_keys,
		   (SELECT count(*) FROM jsonb_array_elements(f.bundle->'keys') k WHERE k->>'use' = 'jwt-svid') AS jwt_keys,
		   f.fetched_at, f.updated_at, f.next_fetch_at, f.last_error, f.last_error_at, f.added_at, f.added_by,
		   f.bundle
	FROM bc_join.federated_trust_domains f;
COMMENT ON VIEW bc_join.federations IS
	'The federated trust domains: profile, endpoint, sequence, hint, how many keys (x509-svid, jwt-svid; 0 keys: every SVID of the domain refused), when fetched, changed and due, the last error, and the bundle.';

REVOKE ALL ON bc_join.federated_trust_domains, bc_join.federations FROM PUBLIC;
REVOKE ALL ON FUNCTION bc_join.federated_bundle_problem(text), bc_join.federation_interval(integer),
	bc_join.federation_accept(text, text, boolean), bc_join.federated_bundles_max(),
	bc_join.add_federation(text, text, text, text, jsonb), bc_join.set_federated_bundle(text, jsonb),
	bc_join.remove_federation(text), bc_join.federation_due(),
	bc_join.store_fetched_bundle(text, text, text), bc_join.federated_bundles(),
	bc_join.signed_trust_bundles() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bc_join.add_federation(text, text, text, text, jsonb),
	bc_join.set_federated_bundle(text, jsonb), bc_join.remove_federation(text),
	bc_join.federated_bundles(), bc_join.signed_trust_bundles() TO bc_join_operator;
GRANT SELECT ON bc_join.federated_trust_domains, bc_join.federations TO bc_join_operator;
GRANT EXECUTE ON FUNCTION bc_join.federated_bundles(), bc_join.signed_trust_bundles() TO bc_join_gateway;
GRANT USAGE ON SCHEMA bc_join TO bc_join_federation;
GRANT EXECUTE ON FUNCTION bc_join.federation_due(), bc_join.store_fetched_bundle(text, text, text)
	TO bc_join_federation;
COMMENT ON FUNCTION bc_join.spiffe_bundle() IS
	'Returns the trust domain''s SPIFFE bundle, {keys, spiffe_sequence, spiffe_refresh_hint}: an x509-svid key (with x5c) for each root of the node CA chain and the jwt-svid key (with its kid) when key_dir has jwt-svid.key; spiffe_sequence is the one own_bundle_sequence() gave these keys (the same on every HA node, higher for new keys).';
-- spiffe_bundle() records the sequence of keys it has not published before
-- (own_bundle_sequence): it writes, so it is no longer STABLE.
ALTER FUNCTION bc_join.spiffe_bundle() VOLATILE;
-- end of #46 federation

-- #46 oidc: OIDC discovery of the JWT-SVID issuer and the JWKS of its keys.
CREATE FUNCTION bc_join.oidc_discovery() RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_oidc_discovery' LANGUAGE C STABLE;
COMMENT ON FUNCTION bc_join.oidc_discovery() IS
	'Returns the OpenID Provider metadata of the JWT-SVID issuer, {issuer, jwks_uri, authorization_endpoint, response_types_supported, subject_types_supported, id_token_signing_alg_values_supported}: issuer is bc_join.jwt_issuer (the iss of JWT-SVIDs), jwks_uri issuer/v1/jwks; INVALID_CONFIG when bc_join.jwt_issuer is not set.';

CREATE FUNCTION bc_join.jwks() RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_jwks' LANGUAGE C STABLE;
COMMENT ON FUNCTION bc_join.jwks() IS
	'Returns {keys}: every jwt-svid key of the key directory (jwt-svid.key first, then jwt-svid.next.key and jwt-svid.previous.key) as a public JWK with kid, alg ES256 and use sig, never an X.509 key; INVALID_CONFIG without bc_join.jwt_issuer or jwt-svid.key.';

REVOKE ALL ON FUNCTION bc_join.oidc_discovery(), bc_join.jwks() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bc_join.oidc_discovery(), bc_join.jwks()
	TO bc_join_gateway, bc_join_operator, bc_join_tenant_operator;

-- jwtKeys lists every jwt-svid key now (jwt-svid.next.key, .previous.key).
COMMENT ON FUNCTION bc_join.service_keys() IS
	'Returns everything an agent pins in one document, {trustDomain, signingKey, encryptionKey, signingKeys, encryptionKeys, jwtKeys, nodeCa, issuedAt, signed}, to hand to bcd as --service-keys; jwtKeys are the jwt-svid keys'' public JWKs with their kids, jwt-svid.key''s first (the one that signs), then jwt-svid.next.key''s and jwt-svid.previous.key''s (empty without jwt-svid.key); signed is the document with issuedAt signed by the current signing key.';
-- end of #46 oidc
