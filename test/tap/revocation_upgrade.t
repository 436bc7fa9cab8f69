#!/usr/bin/env bash
# revocation_upgrade.t: ALTER EXTENSION bc_join UPDATE maps the free-text
# revocation reasons a 0.1.0 database holds onto 0.2.0's fixed set
# (docs/operator.md, "Revocation"): an operator's (audited
# certificate.revoke) to its RFC 5280 name, the service's to renewed,
# reclaimed, retired; an operator's 'retired' on a node that is not retired
# (which let the revoked certificate reclaim its node by x509pop) to
# cessationOfOperation.  The rows are written by 0.1.0's own SQL
# (revoke_certificate, retire_node) or as its C code wrote them.  Needs the
# environment test/run-all sets (PGHOST, PGPORT, BCJ_*).
set -u
. "$(dirname "$0")/../lib/tap.sh"
sql() { psql -qAtX -v ON_ERROR_STOP=1 -d bcj_revocation_upgrade "$@"; }

echo "1..17"
psql -qAtX -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS bcj_revocation_upgrade" \
  -c "CREATE DATABASE bcj_revocation_upgrade" >/dev/null
sql -c "CREATE EXTENSION bc_join VERSION '0.1.0'"

# Six nodes and their certificates, as 0.1.0 held them (c<N><k>: node N's k-th).
sql >/dev/null <<'SQL'
SELECT bc_join.create_tenant('old') AS t \gset
SELECT bc_join.create_site(:'t', 'dc') AS s \gset
SELECT bc_join.create_pool(:'t', :'s', 'p') AS p \gset
INSERT INTO bc_join.nodes (id, tenant_id, site_id, pool_id, role, trust, attestor, identity_generation)
	SELECT 'node_' || i, :'t', :'s', :'p', 'node', 'platform', 'join-token', CASE WHEN i = 4 THEN 2 ELSE 1 END
	FROM generate_series(1, 6) i;
CREATE FUNCTION pg_temp.cert(node int, k int, gen int DEFAULT 1) RETURNS void LANGUAGE sql AS $$
	INSERT INTO bc_join.node_certs (serial, node_id, identity_generation, not_before, not_after,
									spki_sha256, certificate)
	VALUES (lpad(node::text || k::text, 32, '0'), 'node_' || node, gen, now() - interval '1 hour',
			now() + interval '1 day', sha256(convert_to(node::text || '/' || k::text, 'UTF8')), '\x00') $$;
SELECT pg_temp.cert(1, 1), pg_temp.cert(2, 1), pg_temp.cert(3, 1), pg_temp.cert(3, 2),
	   pg_temp.cert(4, 1), pg_temp.cert(4, 2, 2), pg_temp.cert(5, 1), pg_temp.cert(5, 2),
	   pg_temp.cert(6, 1), pg_temp.cert(1, 2);
-- session certificates: one asked with c11, one of node 6, one (asked with c12) revoked by its own serial
INSERT INTO bc_join.sessions (id, node_id, tenant_id, session_ref) VALUES
	('ses_1', 'node_1', :'t', 'a'), ('ses_6', 'node_6', :'t', 'b'), ('ses_2', 'node_1', :'t', 'c');
INSERT INTO bc_join.session_certs (serial, session_id, not_before, not_after, spki_sha256, certificate, node_serial)
	VALUES (lpad('a1', 32, '0'), 'ses_1', now() - interval '1 hour', now() + interval '1 hour', sha256('\x01'), '\x00', lpad('11', 32, '0')),
		   (lpad('a6', 32, '0'), 'ses_6', now() - interval '1 hour', now() + interval '1 hour', sha256('\x06'), '\x00', lpad('61', 32, '0')),
		   (lpad('a2', 32, '0'), 'ses_2', now() - interval '1 hour', now() + interval '1 hour', sha256('\x02'), '\x00', lpad('12', 32, '0'));
-- an operator's revocations, by 0.1.0's revoke_certificate (audited)
SELECT bc_join.revoke_certificate(lpad('11', 32, '0'), 'key-compromise');
SELECT bc_join.revoke_certificate(lpad('21', 32, '0'), 'retired');
SELECT bc_join.revoke_certificate(lpad('31', 32, '0'), 'Certificate Hold');
SELECT bc_join.revoke_certificate(lpad('32', 32, '0'), 'the box was lost');
SELECT bc_join.revoke_certificate(lpad('42', 32, '0'), 'superseded');
SELECT bc_join.revoke_certificate(lpad('a2', 32, '0'), 'PRIVILEGE_WITHDRAWN');
-- the service's own, as 0.1.0's C code wrote them (no audit row of certificate.revoke)
UPDATE bc_join.node_certs SET revoked_at = now(), revocation_reason = 'superseded' WHERE serial = lpad('41', 32, '0');
UPDATE bc_join.node_certs SET revoked_at = now(), revocation_reason = 'renewed' WHERE serial = lpad('51', 32, '0');
UPDATE bc_join.node_certs SET revoked_at = now(), revocation_reason = 'retired' WHERE serial = lpad('52', 32, '0');
SELECT bc_join.retire_node('node_6');
SQL
ok "$(sql -c "SELECT count(*) FROM bc_join.node_certs WHERE revoked_at IS NOT NULL")" 9 "0.1.0 holds nine revoked node certificates"

sql -c "ALTER EXTENSION bc_join UPDATE"
default=$(sed -n "s/^default_version *= *'\([^']*\)'.*/\1/p" "$(dirname "$0")/../../bc_join.control")
ok "$(sql -c "SELECT extversion FROM pg_extension WHERE extname = 'bc_join'")" "$default" "updated through 0.2.0 to $default"
r() { sql -c "SELECT coalesce(revocation_reason, '-') FROM bc_join.$1 WHERE serial = lpad('$2', 32, '0')"; }
ok "$(r node_certs 11)" keyCompromise "an operator's key-compromise becomes keyCompromise"
ok "$(r session_certs a1)" keyCompromise "and so does the session certificate revoked with it"
ok "$(r node_certs 21)" cessationOfOperation "an operator's retired on a live node becomes cessationOfOperation"
ok "$(r node_certs 31)" unspecified "an operator's Certificate Hold becomes unspecified (a hold is not taken)"
ok "$(r node_certs 32)" unspecified "an operator's free text becomes unspecified"
ok "$(r node_certs 42)" superseded "an operator's superseded stays superseded"
ok "$(r session_certs a2)" privilegeWithdrawn "an operator's PRIVILEGE_WITHDRAWN on a session certificate becomes privilegeWithdrawn"
ok "$(r node_certs 41)" reclaimed "the service's superseded (a reclaim) becomes reclaimed"
ok "$(r node_certs 51)" renewed "the service's renewed stays"
ok "$(r node_certs 52)" cessationOfOperation "a retired on a node that is not retired becomes cessationOfOperation"
ok "$(r node_certs 61) $(r session_certs a6)" "retired retired" "retire_node's retired stays on the retired node"
ok "$(r node_certs 12)" - "an unrevoked certificate has no reason"
ok "$(sql -c "SELECT detail->>'reason' FROM bc_join.audit_log WHERE action = 'certificate.revoke' AND detail->>'serial' = lpad('31', 32, '0')")" \
   "Certificate Hold" "the audit row keeps the text as the operator gave it"
ok "$(sql -c "SELECT count(*) FROM pg_constraint WHERE conname IN ('node_certs_revocation_reason_check', 'session_certs_revocation_reason_check') AND convalidated")" \
   2 "both tables hold only the fixed set from now on"
ok "$(sql -c "SELECT count(*) FROM pg_proc WHERE proname = 'revocation_reason_from_0_1_0'")" 0 "the mapping function is gone"
[ "$failed" -eq 0 ]
