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

-- ======================================================================
-- Issue 42 item 9b (helper h5): cloud-iid as the seed describes it.  The
-- providers are rows of one registry, bc_join.cloud_providers: a format
-- among those the attestor verifies (aws-pkcs7, azure-pkcs7, gcp-jwt) and
-- the members account, instance and start are read from; aws, gcp and
-- azure take the pinned definitions of bc_join.cloud_builtin_provider().
-- Accounts name the roles they allow (node, site).  The configuration
-- triggers raise with their own rights (an operator who is no superuser
-- got "permission denied for function invalid_config").
-- ======================================================================

CREATE FUNCTION bc_join.cloud_builtin_provider(provider text)
	RETURNS TABLE (format text, account_member text, instance_member text, started_member text,
				   require_members text[], issuer text, nonce_member text, uuid_ids boolean)
	LANGUAGE sql IMMUTABLE STRICT
	SET search_path = pg_catalog, pg_temp
	AS $$
	SELECT b.format, b.account_member, b.instance_member, b.started_member, b.require_members,
		   b.issuer, b.nonce_member, b.uuid_ids
	FROM (VALUES
		('aws', 'aws-pkcs7', 'accountId', 'instanceId', 'pendingTime', ARRAY['region'],
		 NULL, NULL, false),
		('gcp', 'gcp-jwt', 'google.compute_engine.project_id', 'google.compute_engine.instance_id',
		 'google.compute_engine.instance_creation_timestamp', ARRAY[]::text[],
		 'https://accounts.google.com', NULL, false),
		('azure', 'azure-pkcs7', 'subscriptionId', 'vmId', NULL, ARRAY[]::text[],
		 NULL, 'nonce', true)
	) AS b(name, format, account_member, instance_member, started_member, require_members,
		   issuer, nonce_member, uuid_ids)
	WHERE b.name = cloud_builtin_provider.provider $$;
COMMENT ON FUNCTION bc_join.cloud_builtin_provider(text) IS
	'Returns the definition of a built-in cloud provider (aws, gcp, azure; no row for any other name): its document format and the members its account, instance and start are read from, as a cloud_providers row of that name holds them.';
REVOKE ALL ON FUNCTION bc_join.cloud_builtin_provider(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bc_join.cloud_builtin_provider(text) TO bc_join_operator;

ALTER TABLE bc_join.cloud_trust
	DROP CONSTRAINT cloud_trust_check,
	DROP CONSTRAINT cloud_trust_provider_check,
	ADD CONSTRAINT cloud_trust_provider_check CHECK (provider ~ '^[a-z][a-z0-9-]{0,31}$'),
	ADD CONSTRAINT cloud_trust_kind_check CHECK (kind IN ('certificate', 'root', 'intermediate', 'jwks'));
COMMENT ON TABLE bc_join.cloud_trust IS
	'What each cloud provider''s instance identity documents are verified with (AWS region certificates, Azure roots and intermediates, Google''s JWKS, a registered provider''s anchors); nothing is built in.';

ALTER TABLE bc_join.cloud_providers
	DROP CONSTRAINT cloud_providers_provider_check,
	ADD CONSTRAINT cloud_providers_provider_check CHECK (provider ~ '^[a-z][a-z0-9-]{0,31}$'),
	ADD COLUMN format text CHECK (format IN ('aws-pkcs7', 'azure-pkcs7', 'gcp-jwt')),
	ADD COLUMN account_member text,
	ADD COLUMN instance_member text,
	ADD COLUMN started_member text,
	ADD COLUMN require_members text[],
	ADD COLUMN issuer text,
	ADD COLUMN nonce_member text,
	ADD COLUMN uuid_ids boolean;
-- Every row of 0.3.0 is aws, gcp or azure: its definition, its audit columns as they were.
ALTER TABLE bc_join.cloud_providers DISABLE TRIGGER cloud_providers_check;
UPDATE bc_join.cloud_providers p
	SET (format, account_member, instance_member, started_member, require_members, issuer,
		 nonce_member, uuid_ids) =
		(SELECT b.format, b.account_member, b.instance_member, b.started_member, b.require_members,
				b.issuer, b.nonce_member, b.uuid_ids
		 FROM bc_join.cloud_builtin_provider(p.provider) b);
ALTER TABLE bc_join.cloud_providers ENABLE TRIGGER cloud_providers_check;
-- (defaults set after the columns are filled: a fresh install has no "missing values")
ALTER TABLE bc_join.cloud_providers
	ALTER COLUMN format SET NOT NULL,
	ALTER COLUMN account_member SET NOT NULL,
	ALTER COLUMN instance_member SET NOT NULL,
	ALTER COLUMN require_members SET DEFAULT '{}'::text[],
	ALTER COLUMN require_members SET NOT NULL,
	ALTER COLUMN uuid_ids SET DEFAULT false,
	ALTER COLUMN uuid_ids SET NOT NULL;
COMMENT ON TABLE bc_join.cloud_providers IS
	'The cloud providers the cloud-iid attestor accepts (aws, gcp, azure, or one defined here): the document format, the members its account and instance are read from, and its settings.';

ALTER TABLE bc_join.cloud_accounts
	DROP CONSTRAINT cloud_accounts_provider_check,
	ADD CONSTRAINT cloud_accounts_provider_check CHECK (provider ~ '^[a-z][a-z0-9-]{0,31}$'),
	ADD COLUMN roles text[] CHECK (cardinality(roles) BETWEEN 1 AND 2 AND roles <@ ARRAY['node', 'site']);
-- Every account of 0.3.0 admitted nodes only.
ALTER TABLE bc_join.cloud_accounts DISABLE TRIGGER cloud_accounts_check;
UPDATE bc_join.cloud_accounts SET roles = '{node}'::text[];
ALTER TABLE bc_join.cloud_accounts ENABLE TRIGGER cloud_accounts_check;
ALTER TABLE bc_join.cloud_accounts
	ALTER COLUMN roles SET DEFAULT '{node}'::text[],
	ALTER COLUMN roles SET NOT NULL;
COMMENT ON TABLE bc_join.cloud_accounts IS
	'Which tenant and pool a cloud account joins, and as which roles: exactly one mapping per provider and account.';

CREATE FUNCTION bc_join.cloud_trust_format_check() RETURNS trigger
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	f text;
BEGIN
	SELECT p.format INTO f FROM bc_join.cloud_providers p WHERE p.provider = NEW.provider;
	IF NOT FOUND THEN
		SELECT b.format INTO f FROM bc_join.cloud_builtin_provider(NEW.provider) b;
	END IF;
	IF f IS NULL THEN
		PERFORM bc_join.invalid_input(format('cloud provider %s is not registered: insert its row into bc_join.cloud_providers first',
											 NEW.provider));
	END IF;
	IF NOT (f = 'aws-pkcs7' AND NEW.kind = 'certificate'
			OR f = 'azure-pkcs7' AND NEW.kind IN ('root', 'intermediate')
			OR f = 'gcp-jwt' AND NEW.kind = 'jwks') THEN
		PERFORM bc_join.invalid_input(format('%s is a %s provider: its trust material is of kind %s, not %s',
			NEW.provider, f, CASE f WHEN 'aws-pkcs7' THEN 'certificate' WHEN 'azure-pkcs7' THEN 'root or intermediate'
							   ELSE 'jwks' END, NEW.kind));
	END IF;
	RETURN NEW;
END
$$;
CREATE TRIGGER cloud_trust_format_check BEFORE INSERT OR UPDATE ON bc_join.cloud_trust
	FOR EACH ROW EXECUTE FUNCTION bc_join.cloud_trust_format_check();
REVOKE ALL ON FUNCTION bc_join.cloud_trust_format_check() FROM PUBLIC;

CREATE OR REPLACE FUNCTION bc_join.cloud_providers_check() RETURNS trigger
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	b record;
	path constant text := '^[A-Za-z0-9_$-]{1,64}(\.[A-Za-z0-9_$-]{1,64}){0,7}$';
	own text[];
	m text;
BEGIN
	SELECT * INTO b FROM bc_join.cloud_builtin_provider(NEW.provider);
	IF FOUND THEN
		IF coalesce(NEW.format, b.format) IS DISTINCT FROM b.format
		   OR coalesce(NEW.account_member, b.account_member) IS DISTINCT FROM b.account_member
		   OR coalesce(NEW.instance_member, b.instance_member) IS DISTINCT FROM b.instance_member
		   OR coalesce(NEW.started_member, b.started_member) IS DISTINCT FROM b.started_member
		   OR coalesce(NEW.issuer, b.issuer) IS DISTINCT FROM b.issuer
		   OR coalesce(NEW.nonce_member, b.nonce_member) IS DISTINCT FROM b.nonce_member THEN
			PERFORM bc_join.invalid_config(format('%s is built in: its format and members are fixed (bc_join.cloud_builtin_provider(%L)); set only audience, domain and max_instance_age',
												  NEW.provider, NEW.provider));
		END IF;
		NEW.format := b.format;
		NEW.account_member := b.account_member;
		NEW.instance_member := b.instance_member;
		NEW.started_member := b.started_member;
		NEW.require_members := b.require_members;
		NEW.issuer := b.issuer;
		NEW.nonce_member := b.nonce_member;
		NEW.uuid_ids := b.uuid_ids;
	END IF;
	IF NEW.format IS NULL OR NEW.format NOT IN ('aws-pkcs7', 'azure-pkcs7', 'gcp-jwt') THEN
		PERFORM bc_join.invalid_config(format('cloud provider %s needs a format: aws-pkcs7, azure-pkcs7 or gcp-jwt', NEW.provider));
	END IF;
	-- the members read from the signed document, each once
	own := CASE NEW.format WHEN 'azure-pkcs7' THEN ARRAY['timeStamp.createdOn', 'timeStamp.expiresOn']
						   WHEN 'gcp-jwt' THEN ARRAY['iss', 'aud', 'iat', 'exp'] ELSE ARRAY[]::text[] END;
	IF NEW.account_member IS NULL OR NEW.instance_member IS NULL THEN
		PERFORM bc_join.invalid_config(format('cloud provider %s needs an account_member and an instance_member', NEW.provider));
	END IF;
	IF NEW.require_members IS NULL OR cardinality(NEW.require_members) > 8 THEN
		PERFORM bc_join.invalid_config('require_members holds at most 8 members');
	END IF;
	FOREACH m IN ARRAY ARRAY[NEW.account_member, NEW.instance_member, NEW.started_member, NEW.nonce_member]
					   || NEW.require_members LOOP
		IF m IS NULL THEN
			CONTINUE;
		END IF;
		IF m !~ path THEN
			PERFORM bc_join.invalid_config(format('%L is no member path: names of letters, digits, _, $ and -, joined by dots (at most 8)', m));
		END IF;
		IF m = ANY (own) THEN
			PERFORM bc_join.invalid_config(format('%L is read by the %s format itself', m, NEW.format));
		END IF;
		own := own || m;
	END LOOP;
	IF NEW.format = 'azure-pkcs7' AND NEW.started_member IS NOT NULL THEN
		PERFORM bc_join.invalid_config('an azure-pkcs7 document reads no instance start: started_member must be NULL');
	END IF;
	IF NEW.max_instance_age IS NOT NULL AND NEW.started_member IS NULL THEN
		PERFORM bc_join.invalid_config(format('%s has no instance age (no started_member): max_instance_age must be NULL', NEW.provider));
	END IF;
	IF NEW.max_instance_age IS NOT NULL AND NEW.max_instance_age <= interval '0' THEN
		PERFORM bc_join.invalid_config('max_instance_age must be positive');
	END IF;
	IF NEW.format = 'gcp-jwt' AND (NEW.audience IS NULL OR length(NEW.audience) NOT BETWEEN 1 AND 512
								   OR NEW.audience !~ '^[\x21-\x7e]+$') THEN
		PERFORM bc_join.invalid_config(format('%s needs an audience: 1 to 512 printable ASCII characters, no space', NEW.provider));
	END IF;
	IF NEW.format <> 'gcp-jwt' AND NEW.audience IS NOT NULL THEN
		PERFORM bc_join.invalid_config('only a gcp-jwt provider (gcp) has an audience');
	END IF;
	IF NEW.format = 'gcp-jwt' AND (NEW.issuer IS NULL OR length(NEW.issuer) NOT BETWEEN 1 AND 512
								   OR NEW.issuer !~ '^[\x21-\x7e]+$') THEN
		PERFORM bc_join.invalid_config(format('%s needs an issuer (the iss its tokens carry): 1 to 512 printable ASCII characters', NEW.provider));
	END IF;
	IF NEW.format <> 'gcp-jwt' AND NEW.issuer IS NOT NULL THEN
		PERFORM bc_join.invalid_config('only a gcp-jwt provider (gcp) has an issuer');
	END IF;
	IF NEW.format = 'azure-pkcs7' AND (NEW.domain IS NULL OR NEW.domain !~ '^[a-z0-9-]+(\.[a-z0-9-]+)+$') THEN
		PERFORM bc_join.invalid_config(format('%s needs a domain (like metadata.azure.com), lower case', NEW.provider));
	END IF;
	IF NEW.format <> 'azure-pkcs7' AND NEW.domain IS NOT NULL THEN
		PERFORM bc_join.invalid_config('only an azure-pkcs7 provider (azure) has a domain');
	END IF;
	IF NEW.format = 'azure-pkcs7' AND NEW.nonce_member IS NULL THEN
		PERFORM bc_join.invalid_config(format('%s needs a nonce_member (the member that binds the CSR)', NEW.provider));
	END IF;
	IF NEW.format <> 'azure-pkcs7' AND NEW.nonce_member IS NOT NULL THEN
		PERFORM bc_join.invalid_config('only an azure-pkcs7 provider (azure) has a nonce_member');
	END IF;
	-- An update records who and when; an insert has both from the column
	-- defaults, or keeps them as a restore brings them.
	IF TG_OP = 'UPDATE' THEN
		NEW.updated_at := bc_join.compute_now();
		NEW.updated_by := session_user;
	END IF;
	RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION bc_join.cloud_accounts_check() RETURNS trigger
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	f text;
	u boolean;
BEGIN
	IF EXISTS (SELECT 1 FROM bc_join.cloud_accounts a
			   WHERE a.provider = NEW.provider AND a.account = NEW.account AND a.id <> NEW.id) THEN
		PERFORM bc_join.invalid_config(format('%s account %s is mapped already: one account, one tenant and pool',
											  NEW.provider, NEW.account));
	END IF;
	IF NOT EXISTS (SELECT 1 FROM bc_join.pools p WHERE p.id = NEW.pool_id AND p.tenant_id = NEW.tenant_id) THEN
		PERFORM bc_join.invalid_config(format('pool %s is not a pool of tenant %s', NEW.pool_id, NEW.tenant_id));
	END IF;
	SELECT p.format, p.uuid_ids INTO f, u FROM bc_join.cloud_providers p WHERE p.provider = NEW.provider;
	IF NOT FOUND THEN
		SELECT b.format, b.uuid_ids INTO f, u FROM bc_join.cloud_builtin_provider(NEW.provider) b;
	END IF;
	IF NEW.allow_unbound AND f IS NOT NULL AND f <> 'aws-pkcs7' THEN
		PERFORM bc_join.invalid_config(format('allow_unbound is for providers whose documents bind nothing (aws-pkcs7: aws); %s binds the CSR',
											  NEW.provider));
	END IF;
	IF NEW.provider = 'aws' AND NEW.account !~ '^[0-9]{12}$' THEN
		PERFORM bc_join.invalid_config('an aws account is its 12-digit accountId');
	END IF;
	IF u AND NEW.account !~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
		PERFORM bc_join.invalid_config(format('a %s account is a lower-case UUID (its subscriptionId for azure)', NEW.provider));
	END IF;
	RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION bc_join.reset_cloud_instance(provider text, account text, instance text)
	RETURNS boolean
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	b bytea;
	n bigint;
	node text;
	tenant text;
	lower_ids boolean;
BEGIN
	SELECT p.uuid_ids INTO lower_ids FROM bc_join.cloud_providers p
		WHERE p.provider = reset_cloud_instance.provider;
	IF NOT FOUND THEN
		SELECT x.uuid_ids INTO lower_ids FROM bc_join.cloud_builtin_provider(reset_cloud_instance.provider) x;
	END IF;
	IF lower_ids IS NULL OR account IS NULL OR account = '' OR instance IS NULL OR instance = '' THEN
		PERFORM bc_join.invalid_input('reset_cloud_instance needs a provider (aws, gcp, azure or one of bc_join.cloud_providers), an account and an instance');
	END IF;
	IF lower_ids THEN
		-- UUIDs (azure's subscription and VM) as the bind holds them: lower case
		account := lower(account);
		instance := lower(instance);
	END IF;
	b := bc_join.cloud_instance_bind(provider, account, instance);
	SELECT nb.node_id, x.tenant_id INTO node, tenant
		FROM bc_join.node_bindings nb JOIN bc_join.nodes x ON x.id = nb.node_id
		WHERE nb.subject = b;
	IF tenant IS NULL THEN
		SELECT a.tenant_id INTO tenant FROM bc_join.cloud_accounts a
			WHERE a.provider = reset_cloud_instance.provider AND a.account = reset_cloud_instance.account
			LIMIT 1;
	END IF;
	-- a tenant operator resets the instances of its tenants' nodes and accounts only
	PERFORM bc_join.check_tenant(tenant, 'cloud instance');
	DELETE FROM bc_join.attestation_uses u WHERE u.attestor = 'cloud-iid' AND u.subject = b;
	GET DIAGNOSTICS n = ROW_COUNT;
	INSERT INTO bc_join.audit_log (action, tenant_id, node_id, detail)
		VALUES ('cloud_instance.reset', tenant, node,
				jsonb_build_object('provider', provider, 'account', account, 'instance', instance,
								   'wasAdmitted', n > 0));
	INSERT INTO bc_join.events (tenant_id, type, payload)
		VALUES (coalesce(tenant, 'root'), 'cloud_instance.reset',
				jsonb_build_object('provider', provider, 'account', account, 'instance', instance,
								   'nodeId', node, 'wasAdmitted', n > 0));
	RETURN n > 0;
END
$$;

COMMENT ON FUNCTION bc_join.register_cloud_resolver(regprocedure) IS
	'Registers the function (provider text, account text, context jsonb) RETURNS jsonb that maps a cloud account without a cloud_accounts row to {"tenantId", "poolId", "roles"?} (NULL removes it); superuser only.';

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

-- ======================================================================
-- Issue 44 (helper a2): continuous attestation.  Certificates revoked by a
-- quarantine carry the service's reason attestation-failed.
-- ======================================================================

ALTER TABLE bc_join.node_certs DROP CONSTRAINT node_certs_revocation_reason_check;
ALTER TABLE bc_join.node_certs ADD CONSTRAINT node_certs_revocation_reason_check CHECK (revocation_reason IN
		('unspecified', 'keyCompromise', 'cACompromise', 'affiliationChanged', 'superseded',
		 'cessationOfOperation', 'privilegeWithdrawn', 'aACompromise',
		 'renewed', 'reclaimed', 'retired', 'attestation-failed'));
ALTER TABLE bc_join.session_certs DROP CONSTRAINT session_certs_revocation_reason_check;
ALTER TABLE bc_join.session_certs ADD CONSTRAINT session_certs_revocation_reason_check CHECK (revocation_reason IN
		('unspecified', 'keyCompromise', 'cACompromise', 'affiliationChanged', 'superseded',
		 'cessationOfOperation', 'privilegeWithdrawn', 'aACompromise', 'retired', 'attestation-failed'));

/* ------------------------------------- #44: continuous attestation (docs/attestation.md) */

/*
 * A TPM-bound node (its certificate carries urn:bc:tpm-ak:) attests at the
 * interval its pool sets: bc_join.attest() (two rounds: a nonce, then a quote
 * by its AK over it with the event log and the IMA list) judges the quote,
 * the replayed logs and the policy below inside the transaction.  A failure
 * the TPM signed quarantines the node in that same transaction
 * (bc_join.quarantine_node: certificates revoked, event, audit, NOTIFY).
 */

-- Per pool: how often, over which PCRs, and whether the policy is enforced.
CREATE TABLE bc_join.attestation_settings (
	pool_id text PRIMARY KEY REFERENCES bc_join.pools (id) ON DELETE CASCADE,
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	interval_seconds integer NOT NULL DEFAULT 60 CHECK (interval_seconds BETWEEN 5 AND 3600),
	-- the PCRs quoted and replayed from the event log (PCR 10 is always
	-- quoted too, for IMA, and never replayed from the event log)
	pcrs integer[] NOT NULL DEFAULT '{0,1,2,3,4,5,6,7}'
		CHECK (cardinality(pcrs) BETWEEN 1 AND 24 AND pcrs <@ '{0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23}'),
	-- observe: what nodes measure is recorded (boot_observations,
	-- ima_observations), the policy is not applied; enforce: it is
	mode text NOT NULL DEFAULT 'observe' CHECK (mode IN ('observe', 'enforce')),
	-- a healthy node without a passing quote for this many intervals is missed
	missed_intervals integer NOT NULL DEFAULT 3 CHECK (missed_intervals BETWEEN 1 AND 1000),
	-- what attestation_sweep() does to a missed node: quarantine it (revoke)
	-- or only write the event
	on_missed text NOT NULL DEFAULT 'event' CHECK (on_missed IN ('revoke', 'event')),
	updated_at timestamptz NOT NULL DEFAULT bc_join.compute_now()
);
COMMENT ON TABLE bc_join.attestation_settings IS
	'Continuous attestation per pool (set_attestation_settings): interval, PCRs quoted, mode (observe or enforce), how many missed intervals and what a miss does; a pool without a row: 60 s, PCRs 0-7, observe, 3, event.';

-- Measured-boot policy rows: an event allowed on a PCR (every event replayed
-- on a selected PCR must match one in enforce mode).
CREATE TABLE bc_join.boot_policy (
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	pool_id text REFERENCES bc_join.pools (id) ON DELETE CASCADE,	-- NULL: every pool of the tenant
	pcr integer NOT NULL CHECK (pcr BETWEEN 0 AND 23),
	event_type text NOT NULL CHECK (event_type ~ '^(EV_[A-Z0-9_]+|0x[0-9a-f]{8})$'),
	digest bytea NOT NULL CHECK (length(digest) = 32),	-- the event's SHA-256 bank digest
	note text,
	created_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	created_by text NOT NULL DEFAULT session_user
);
COMMENT ON TABLE bc_join.boot_policy IS
	'Measured-boot policy: per tenant (pool_id NULL) or pool, the (PCR, event type, SHA-256 digest) an event of a node''s event log may have; in enforce mode every event on a quoted PCR must match a row.';
CREATE UNIQUE INDEX boot_policy_idx ON bc_join.boot_policy
	(tenant_id, coalesce(pool_id, ''), pcr, event_type, digest);

-- Runtime (IMA) allowlist: a file's digest allowed at a path.
CREATE TABLE bc_join.ima_policy (
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	pool_id text REFERENCES bc_join.pools (id) ON DELETE CASCADE,	-- NULL: every pool of the tenant
	path text NOT NULL CHECK (length(path) BETWEEN 1 AND 4095),
	digest bytea NOT NULL CHECK (length(digest) BETWEEN 20 AND 64),	-- the file digest IMA lists
	note text,
	created_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	created_by text NOT NULL DEFAULT session_user
);
COMMENT ON TABLE bc_join.ima_policy IS
	'Runtime (IMA) allowlist per tenant (pool_id NULL) or pool: a file digest allowed at a path; in enforce mode every IMA entry not excluded must match a row.';
CREATE UNIQUE INDEX ima_policy_idx ON bc_join.ima_policy (tenant_id, coalesce(pool_id, ''), path, digest);

-- Paths IMA may measure with any digest (a regular expression on the path).
CREATE TABLE bc_join.ima_excludes (
	tenant_id text NOT NULL REFERENCES bc_join.tenants (id),
	pool_id text REFERENCES bc_join.pools (id) ON DELETE CASCADE,	-- NULL: every pool of the tenant
	path_regex text NOT NULL CHECK (length(path_regex) BETWEEN 1 AND 1024),
	note text,
	created_at timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	created_by text NOT NULL DEFAULT session_user
);
COMMENT ON TABLE bc_join.ima_excludes IS
	'IMA paths excluded from the runtime policy per tenant (pool_id NULL) or pool: a POSIX regular expression matched against the measured path.';

-- What nodes measured (observe mode), to be promoted into boot_policy.
CREATE TABLE bc_join.boot_observations (
	node_id text NOT NULL REFERENCES bc_join.nodes (id) ON DELETE CASCADE,
	pcr integer NOT NULL,
	event_type text NOT NULL,
	digest bytea NOT NULL,
	first_seen timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	last_seen timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	seen integer NOT NULL DEFAULT 1,
	PRIMARY KEY (node_id, pcr, event_type, digest)
);
COMMENT ON TABLE bc_join.boot_observations IS
	'Measured-boot events nodes reported in observe mode (PCR, event type, SHA-256 digest), first and last seen and in how many hours (last_seen moves at most once an hour): promote_observations() turns them into boot_policy rows.';

-- What IMA measured on nodes (observe mode), to be promoted into ima_policy.
CREATE TABLE bc_join.ima_observations (
	node_id text NOT NULL REFERENCES bc_join.nodes (id) ON DELETE CASCADE,
	path text NOT NULL,
	digest bytea NOT NULL,
	first_seen timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	last_seen timestamptz NOT NULL DEFAULT bc_join.compute_now(),
	seen integer NOT NULL DEFAULT 1,
	PRIMARY KEY (node_id, path, digest)
);
COMMENT ON TABLE bc_join.ima_observations IS
	'Files IMA measured on nodes in observe mode (path, file digest), first and last seen and in how many hours (last_seen moves at most once an hour): promote_observations() turns them into ima_policy rows.';

-- Per node: where its attestation stands, and the TPM state it was last seen in.
CREATE TABLE bc_join.node_attestation (
	node_id text PRIMARY KEY REFERENCES bc_join.nodes (id) ON DELETE CASCADE,
	state text NOT NULL DEFAULT 'unattested' CHECK (state IN ('unattested', 'healthy', 'quarantined')),
	last_quote_at timestamptz,
	last_result text CHECK (last_result IN ('passed', 'failed', 'missed')),
	last_reason text,
	last_passed_at timestamptz,
	-- the TPM's clockInfo of the last accepted quote
	reset_count bigint,
	restart_count bigint,
	clock bigint,
	-- the IMA list: entries accepted so far, and PCR 10 (SHA-256) after them
	ima_offset bigint NOT NULL DEFAULT 0 CHECK (ima_offset >= 0),
	ima_pcr10 bytea,
	failures integer NOT NULL DEFAULT 0,
	quarantined_at timestamptz,
	quarantine_reason text,
	missed_reported_at timestamptz,
	readmitted_at timestamptz
);
COMMENT ON TABLE bc_join.node_attestation IS
	'Continuous attestation per node: state (unattested, healthy, quarantined), the last quote, its result and reason, the TPM resetCount/restartCount/clock of the last accepted quote, the IMA offset and running PCR 10, failures and quarantine.';

-- Set a pool's attestation settings (NULL keeps a value, or takes the default).
CREATE FUNCTION bc_join.set_attestation_settings(pool_id text, mode text DEFAULT NULL,
		interval_seconds integer DEFAULT NULL, pcrs integer[] DEFAULT NULL,
		missed_intervals integer DEFAULT NULL, on_missed text DEFAULT NULL)
	RETURNS bc_join.attestation_settings
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	tenant text := (SELECT p.tenant_id FROM bc_join.pools p WHERE p.id = set_attestation_settings.pool_id);
	r bc_join.attestation_settings;
BEGIN
	PERFORM bc_join.check_tenant(tenant, 'pool');
	IF tenant IS NULL THEN
		PERFORM bc_join.invalid_input('no pool has this id');
	END IF;
	INSERT INTO bc_join.attestation_settings AS s (pool_id, tenant_id, mode, interval_seconds, pcrs,
			missed_intervals, on_missed)
		VALUES (set_attestation_settings.pool_id, tenant, coalesce(set_attestation_settings.mode, 'observe'),
				coalesce(set_attestation_settings.interval_seconds, 60),
				coalesce(set_attestation_settings.pcrs, '{0,1,2,3,4,5,6,7}'),
				coalesce(set_attestation_settings.missed_intervals, 3),
				coalesce(set_attestation_settings.on_missed, 'event'))
		ON CONFLICT ON CONSTRAINT attestation_settings_pkey DO UPDATE SET
			mode = coalesce(set_attestation_settings.mode, s.mode),
			interval_seconds = coalesce(set_attestation_settings.interval_seconds, s.interval_seconds),
			pcrs = coalesce(set_attestation_settings.pcrs, s.pcrs),
			missed_intervals = coalesce(set_attestation_settings.missed_intervals, s.missed_intervals),
			on_missed = coalesce(set_attestation_settings.on_missed, s.on_missed),
			updated_at = bc_join.compute_now()
		RETURNING * INTO r;
	INSERT INTO bc_join.audit_log (action, tenant_id, detail)
		VALUES ('attestation.settings', tenant, to_jsonb(r) - 'updated_at');
	RETURN r;
END
$$;
COMMENT ON FUNCTION bc_join.set_attestation_settings(text, text, integer, integer[], integer, text) IS
	'Sets a pool''s continuous attestation (mode observe|enforce, interval 5-3600 s, PCRs, missed intervals, on_missed revoke|event); NULL keeps the current value (or the default); audited; returns the row.';

/*
 * Quarantine a node, in the caller's transaction: node_attestation says so,
 * every live certificate of the node and the session certificates asked with
 * them are revoked (reason attestation-failed), the event node.quarantined
 * carries what failed, an audit row, NOTIFY on the tenant's request channel
 * and on bc_join_crl.  Internal: bc_join.attest() and attestation_sweep()
 * call it; false when the node was quarantined already (only the failure is
 * recorded then).
 */
CREATE FUNCTION bc_join.quarantine_node(node_id text, reason text, detail jsonb)
	RETURNS boolean
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	tenant text;
	serials text[];
	sessions bigint := 0;
	was text;
BEGIN
	SELECT n.tenant_id INTO tenant FROM bc_join.nodes n WHERE n.id = quarantine_node.node_id FOR UPDATE;
	IF NOT FOUND THEN
		PERFORM bc_join.invalid_input('no node has this id');
	END IF;
	INSERT INTO bc_join.node_attestation AS a (node_id) VALUES (quarantine_node.node_id)
		ON CONFLICT ON CONSTRAINT node_attestation_pkey DO NOTHING;
	SELECT a.state INTO was FROM bc_join.node_attestation a WHERE a.node_id = quarantine_node.node_id FOR UPDATE;
	UPDATE bc_join.node_attestation a SET state = 'quarantined', last_result = 'failed',
		last_reason = quarantine_node.reason, failures = a.failures + 1,
		quarantined_at = CASE WHEN was = 'quarantined' THEN a.quarantined_at ELSE bc_join.compute_now() END,
		quarantine_reason = CASE WHEN was = 'quarantined' THEN a.quarantine_reason ELSE quarantine_node.reason END
		WHERE a.node_id = quarantine_node.node_id;
	IF was = 'quarantined' THEN
		RETURN false;
	END IF;
	WITH r AS (
		UPDATE bc_join.node_certs c SET revoked_at = bc_join.compute_now(), revocation_reason = 'attestation-failed'
			WHERE c.node_id = quarantine_node.node_id AND c.revoked_at IS NULL RETURNING c.serial)
	SELECT coalesce(array_agg(r.serial ORDER BY r.serial), '{}') INTO serials FROM r;
	UPDATE bc_join.session_certs sc SET revoked_at = bc_join.compute_now(), revocation_reason = 'attestation-failed'
		FROM bc_join.sessions s
		WHERE s.id = sc.session_id AND s.node_id = quarantine_node.node_id AND sc.revoked_at IS NULL;
	GET DIAGNOSTICS sessions = ROW_COUNT;
	INSERT INTO bc_join.events (tenant_id, type, payload)
		VALUES (tenant, 'node.quarantined',
				jsonb_build_object('nodeId', node_id, 'reason', reason, 'detail', detail,
								   'revokedSerials', to_jsonb(serials), 'sessionCertificates', sessions));
	INSERT INTO bc_join.audit_log (action, tenant_id, node_id, detail)
		VALUES ('node.quarantine', tenant, node_id,
				jsonb_build_object('reason', reason, 'detail', detail, 'revokedSerials', to_jsonb(serials),
								   'sessionCertificates', sessions));
	PERFORM pg_notify(t.request_channel, '') FROM bc_join.tenants t WHERE t.id = tenant;
	PERFORM pg_notify('bc_join_crl', '');
	RETURN true;
END
$$;
COMMENT ON FUNCTION bc_join.quarantine_node(text, text, jsonb) IS
	'Internal: quarantines a node in the caller''s transaction (its live node and session certificates revoked for attestation-failed, event node.quarantined with what failed, audit row, NOTIFY to the tenant''s request channel and bc_join_crl); false when it was quarantined already.';

-- Readmit a quarantined node after a quote that passed the current policy.
CREATE FUNCTION bc_join.readmit_node(node_id text) RETURNS void
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	a bc_join.node_attestation;
	tenant text := (SELECT n.tenant_id FROM bc_join.nodes n WHERE n.id = readmit_node.node_id);
BEGIN
	PERFORM bc_join.check_tenant(tenant, 'node');
	SELECT * INTO a FROM bc_join.node_attestation x WHERE x.node_id = readmit_node.node_id FOR UPDATE;
	IF NOT FOUND OR a.state <> 'quarantined' THEN
		PERFORM bc_join.invalid_input('the node is not quarantined');
	END IF;
	IF a.last_passed_at IS NULL OR a.last_passed_at <= a.quarantined_at OR a.last_result <> 'passed' THEN
		RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
			MESSAGE = 'the node has no passing quote since it was quarantined',
			DETAIL = 'A quarantined node keeps attesting; its latest quote must pass the current policy before it is readmitted.',
			HINT = 'Look at bc_join.attestation_state and the node''s node.quarantined and security.join.refused events.';
	END IF;
	UPDATE bc_join.node_attestation x SET state = 'healthy', readmitted_at = bc_join.compute_now(),
		failures = 0, quarantined_at = NULL, quarantine_reason = NULL, missed_reported_at = NULL
		WHERE x.node_id = readmit_node.node_id;
	INSERT INTO bc_join.events (tenant_id, type, payload)
		VALUES (tenant, 'node.readmitted', jsonb_build_object('nodeId', node_id,
				'quarantinedAt', a.quarantined_at, 'reason', a.quarantine_reason));
	INSERT INTO bc_join.audit_log (action, tenant_id, node_id, detail)
		VALUES ('node.readmit', tenant, node_id, jsonb_build_object('quarantinedAt', a.quarantined_at,
				'reason', a.quarantine_reason));
END
$$;
COMMENT ON FUNCTION bc_join.readmit_node(text) IS
	'Readmits a quarantined node whose latest quote, made after the quarantine, passed the current policy: healthy again, evented and audited; its revoked certificates stay revoked (it joins again by its attestor as the same node).';

-- Copy a pool's observations into its policy; returns how many rows were added.
CREATE FUNCTION bc_join.promote_observations(pool_id text) RETURNS integer
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	tenant text := (SELECT p.tenant_id FROM bc_join.pools p WHERE p.id = promote_observations.pool_id);
	nb integer;
	ni integer;
BEGIN
	PERFORM bc_join.check_tenant(tenant, 'pool');
	IF tenant IS NULL THEN
		PERFORM bc_join.invalid_input('no pool has this id');
	END IF;
	INSERT INTO bc_join.boot_policy (tenant_id, pool_id, pcr, event_type, digest, note)
		SELECT DISTINCT tenant, promote_observations.pool_id, o.pcr, o.event_type, o.digest, 'promoted'
		FROM bc_join.boot_observations o JOIN bc_join.nodes n ON n.id = o.node_id
		WHERE n.pool_id = promote_observations.pool_id AND length(o.digest) = 32
		ON CONFLICT DO NOTHING;
	GET DIAGNOSTICS nb = ROW_COUNT;
	INSERT INTO bc_join.ima_policy (tenant_id, pool_id, path, digest, note)
		SELECT DISTINCT tenant, promote_observations.pool_id, o.path, o.digest, 'promoted'
		FROM bc_join.ima_observations o JOIN bc_join.nodes n ON n.id = o.node_id
		WHERE n.pool_id = promote_observations.pool_id
		ON CONFLICT DO NOTHING;
	GET DIAGNOSTICS ni = ROW_COUNT;
	INSERT INTO bc_join.audit_log (action, tenant_id, detail)
		VALUES ('attestation.promote', tenant, jsonb_build_object('poolId', pool_id, 'bootPolicy', nb, 'imaPolicy', ni));
	RETURN nb + ni;
END
$$;
COMMENT ON FUNCTION bc_join.promote_observations(text) IS
	'Adds what the pool''s nodes were observed to measure (boot_observations, ima_observations) to the pool''s boot_policy and ima_policy (rows already there are kept); audited; returns how many rows were added.';

/*
 * Nodes that stopped attesting: a healthy node whose last passing quote is
 * older than missed_intervals x interval_seconds of its pool gets the event
 * node.attestation.missed (once per miss), and is quarantined when its pool
 * says on_missed = 'revoke'.  Run it from pg_cron every minute.
 */
CREATE FUNCTION bc_join.attestation_sweep() RETURNS integer
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp
	AS $$
DECLARE
	m record;
	n integer := 0;
BEGIN
	FOR m IN
		SELECT a.node_id, x.tenant_id, coalesce(s.on_missed, 'event') AS on_missed,
			   coalesce(s.interval_seconds, 60) AS iv, coalesce(s.missed_intervals, 3) AS k,
			   a.last_passed_at
		FROM bc_join.node_attestation a JOIN bc_join.nodes x ON x.id = a.node_id
		LEFT JOIN bc_join.attestation_settings s ON s.pool_id = x.pool_id
		WHERE a.state = 'healthy' AND x.state <> 'retired' AND a.missed_reported_at IS NULL
		  AND coalesce(a.last_passed_at, '-infinity') < bc_join.compute_now()
			  - make_interval(secs => coalesce(s.interval_seconds, 60) * coalesce(s.missed_intervals, 3))
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
	'Finds healthy nodes without a passing quote for missed_intervals intervals of their pool: event node.attestation.missed (once per miss), and quarantine when the pool says on_missed revoke; returns how many; run it from pg_cron every minute.';

/*
 * The attestation entry point (POST /v1/attest): round 1 {"proof"} answers
 * a nonce in a sealed state; round 2 {"proof", "state", "akPub", "quote",
 * "quoteSignature", "pcrValues", "eventLog"?, "ima"?} is judged: "attested",
 * "quarantined" (signed), or the one refusal.  See docs/protocol.md.
 */
CREATE FUNCTION bc_join.attest(request jsonb) RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_attest_request'
	LANGUAGE C VOLATILE STRICT SECURITY DEFINER
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION bc_join.attest(jsonb) IS
	'Continuous attestation of a TPM-bound node, proven by its node key (purpose attest): round 1 answers a nonce; round 2 judges the quote, the event log and IMA list replayed, the TPM clock and the pool''s policy, and quarantines the node in the same transaction when the TPM reported a failure; returns the signed answer or the one refusal.';

-- Each node's attestation as operators read it.
CREATE VIEW bc_join.attestation_state AS
	SELECT n.id AS node_id, n.tenant_id, n.pool_id, coalesce(a.state, 'unattested') AS state,
		   coalesce(s.mode, 'observe') AS mode, coalesce(s.interval_seconds, 60) AS interval_seconds,
		   a.last_quote_at, a.last_result, a.last_reason, a.last_passed_at, a.failures,
		   a.quarantined_at, a.quarantine_reason, a.readmitted_at, a.reset_count, a.restart_count,
		   a.ima_offset,
		   a.last_passed_at IS NOT NULL AND a.last_passed_at < bc_join.compute_now()
			   - make_interval(secs => coalesce(s.interval_seconds, 60) * coalesce(s.missed_intervals, 3)) AS overdue,
		   (SELECT count(*) FROM bc_join.boot_observations o WHERE o.node_id = n.id) AS boot_observed,
		   (SELECT count(*) FROM bc_join.boot_observations o WHERE o.node_id = n.id AND NOT EXISTS (
				SELECT 1 FROM bc_join.boot_policy p WHERE p.tenant_id = n.tenant_id
				AND (p.pool_id IS NULL OR p.pool_id = n.pool_id) AND p.pcr = o.pcr
				AND p.event_type = o.event_type AND p.digest = o.digest)) AS boot_observed_not_allowed,
		   (SELECT count(*) FROM bc_join.ima_observations o WHERE o.node_id = n.id) AS ima_observed,
		   (SELECT count(*) FROM bc_join.ima_observations o WHERE o.node_id = n.id AND NOT EXISTS (
				SELECT 1 FROM bc_join.ima_policy p WHERE p.tenant_id = n.tenant_id
				AND (p.pool_id IS NULL OR p.pool_id = n.pool_id) AND p.path = o.path
				AND p.digest = o.digest)) AS ima_observed_not_allowed
	FROM bc_join.nodes n
	LEFT JOIN bc_join.node_attestation a ON a.node_id = n.id
	LEFT JOIN bc_join.attestation_settings s ON s.pool_id = n.pool_id
	WHERE n.state <> 'retired';
COMMENT ON VIEW bc_join.attestation_state IS
	'Each live node''s continuous attestation: state, mode, last quote and its result and reason, last pass, failures, quarantine, TPM counters, IMA offset, overdue, and observed measurements against the allowed ones.';
ALTER VIEW bc_join.attestation_state SET (security_invoker = true);

ALTER TABLE bc_join.attestation_settings ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.attestation_settings
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR tenant_id IN (SELECT g.tenant_id FROM bc_join.tenant_operator_grants g));
ALTER TABLE bc_join.boot_policy ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.boot_policy
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR tenant_id IN (SELECT g.tenant_id FROM bc_join.tenant_operator_grants g));
ALTER TABLE bc_join.ima_policy ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.ima_policy
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR tenant_id IN (SELECT g.tenant_id FROM bc_join.tenant_operator_grants g));
ALTER TABLE bc_join.ima_excludes ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.ima_excludes
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR tenant_id IN (SELECT g.tenant_id FROM bc_join.tenant_operator_grants g));
ALTER TABLE bc_join.boot_observations ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.boot_observations
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR node_id IN (SELECT n.id FROM bc_join.nodes n));
ALTER TABLE bc_join.ima_observations ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.ima_observations
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR node_id IN (SELECT n.id FROM bc_join.nodes n));
ALTER TABLE bc_join.node_attestation ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_operator ON bc_join.node_attestation
	USING ((SELECT pg_catalog.pg_has_role('bc_join_operator', 'USAGE'))
		   OR node_id IN (SELECT n.id FROM bc_join.nodes n));

SELECT pg_catalog.pg_extension_config_dump('bc_join.attestation_settings', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.boot_policy', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.ima_policy', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.ima_excludes', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.boot_observations', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.ima_observations', '');
SELECT pg_catalog.pg_extension_config_dump('bc_join.node_attestation', '');

REVOKE ALL ON bc_join.attestation_settings, bc_join.boot_policy, bc_join.ima_policy, bc_join.ima_excludes,
	bc_join.boot_observations, bc_join.ima_observations, bc_join.node_attestation,
	bc_join.attestation_state FROM PUBLIC;
REVOKE ALL ON FUNCTION bc_join.set_attestation_settings(text, text, integer, integer[], integer, text),
	bc_join.quarantine_node(text, text, jsonb), bc_join.readmit_node(text),
	bc_join.promote_observations(text), bc_join.attestation_sweep(), bc_join.attest(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bc_join.attest(jsonb) TO bc_join_gateway;
GRANT EXECUTE ON FUNCTION bc_join.set_attestation_settings(text, text, integer, integer[], integer, text),
	bc_join.readmit_node(text), bc_join.promote_observations(text), bc_join.attestation_sweep()
	TO bc_join_operator;
GRANT EXECUTE ON FUNCTION bc_join.set_attestation_settings(text, text, integer, integer[], integer, text),
	bc_join.readmit_node(text), bc_join.promote_observations(text)
	TO bc_join_tenant_operator;
GRANT SELECT ON bc_join.attestation_settings, bc_join.node_attestation, bc_join.boot_observations,
	bc_join.ima_observations, bc_join.attestation_state TO bc_join_operator, bc_join_tenant_operator;
GRANT SELECT, INSERT, UPDATE, DELETE ON bc_join.boot_policy, bc_join.ima_policy, bc_join.ima_excludes
	TO bc_join_operator, bc_join_tenant_operator;
GRANT DELETE ON bc_join.boot_observations, bc_join.ima_observations TO bc_join_operator, bc_join_tenant_operator;
-- issue 44: event log replay
/*
 * The operator's view of a machine's measured-boot event log (TCG PC Client
 * crypto-agile format, as /sys/kernel/security/tpm0/binary_bios_measurements)
 * and IMA list (binary_runtime_measurements): parsed and replayed per bank by
 * the code the attestation uses (src/common/eventlog.c), so a log from a
 * machine in the field can be examined and turned into policy.  Reads and
 * writes no table; a malformed log is ERROR 22023 with the reason in the
 * detail.  NULL when both arguments are NULL; either may be NULL.
 */
CREATE FUNCTION bc_join.replay_event_log(log bytea, ima bytea DEFAULT NULL) RETURNS jsonb
	AS 'MODULE_PATHNAME', 'bc_replay_event_log_sql'
	LANGUAGE C IMMUTABLE PARALLEL SAFE
	SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION bc_join.replay_event_log(bytea, bytea) IS
	'Parses and replays a TCG crypto-agile event log and an IMA binary measurement list (either may be NULL); returns {algorithms, startupLocality, pcrs {bank {pcr: hex}}, events [{index, pcr, type, typeName, digests, dataHashed, dataSize, data}], ima {entries, pcr10 {bank: hex}, files [{pcr, template, path, alg, digest, templateHash, violation?}], violations}}; a malformed log is ERROR 22023.';
REVOKE ALL ON FUNCTION bc_join.replay_event_log(bytea, bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bc_join.replay_event_log(bytea, bytea) TO bc_join_operator, bc_join_tenant_operator;
