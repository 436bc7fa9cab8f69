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
