#!/usr/bin/env bash
# tenant_operators.t: a tenant operator (#31) logged in as itself, trying
# what only a login of its own can try (test/pgtap/tenant_operators.sql runs
# everything else through SET ROLE from the superuser): SET ROLE and
# set_config('role') to any other role, SET SESSION AUTHORIZATION, objects of
# its own in pg_temp shadowing the extension's under any search_path, a
# SECURITY DEFINER function of its own, COPY, the planner's statistics
# (pg_stats), and LISTEN: a pending request of its tenant is told on the
# tenant's own channel, one of another tenant never reaches it.  Counts its
# attempts (docs/security.md).  Needs the environment test/run-all sets.
set -u
attempts=0
. "$(dirname "$0")/../lib/tap.sh"
db=bcj_tenant_ops
sql() { psql -qAtX -v ON_ERROR_STOP=1 -d "$db" "$@"; }
# as(role, statement...): run as that login role, the last line of output or the error
as() { local r=$1; shift; attempts=$((attempts + 1)); psql -qAtX -v VERBOSITY=terse -U "$r" -d "$db" "$@" 2>&1 | sed -e 's/^psql:[^:]*:[0-9]*: //' | tail -1; }

echo "1..24"
S="$BCJ_SCRATCH/tenant_operators"
rm -rf "$S"; mkdir -p "$S"
psql -qAtX -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" \
  -c "DROP ROLE IF EXISTS top_a" -c "DROP ROLE IF EXISTS top_b" -c "CREATE ROLE top_a LOGIN" -c "CREATE ROLE top_b LOGIN" >/dev/null
sql -c "CREATE EXTENSION bc_join"
ta=$(sql -c "SELECT bc_join.create_tenant('a')")
tb=$(sql -c "SELECT bc_join.create_tenant('b')")
sa=$(sql -c "SELECT bc_join.create_site('$ta', 'dc')")
sb=$(sql -c "SELECT bc_join.create_site('$tb', 'dc')")
sql -c "SELECT bc_join.grant_tenant_operator('top_a', '$ta'), bc_join.grant_tenant_operator('top_b', '$tb')" >/dev/null
sql -c "ANALYZE" >/dev/null

# SET ROLE: only to roles it is a member of
ok "$(as top_a -c "SET ROLE bc_join_operator")" 'ERROR:  permission denied to set role "bc_join_operator"' "SET ROLE bc_join_operator: refused"
ok "$(as top_a -c "SET ROLE top_b")" 'ERROR:  permission denied to set role "top_b"' "SET ROLE to the other tenant's operator: refused"
ok "$(as top_a -c "SET ROLE postgres")" 'ERROR:  permission denied to set role "postgres"' "SET ROLE to the superuser: refused"
ok "$(as top_a -c "SELECT set_config('role', 'bc_join_operator', false)")" 'ERROR:  permission denied to set role "bc_join_operator"' "set_config('role'): refused"
ok "$(as top_a -c "SET SESSION AUTHORIZATION top_b")" 'ERROR:  permission denied to set session authorization "top_b"' "SET SESSION AUTHORIZATION: refused"
# the group role it is a member of operates no tenant
ok "$(as top_a -c "SET ROLE bc_join_tenant_operator" -c "SELECT count(*) FROM bc_join.tenants")" 0 "SET ROLE bc_join_tenant_operator: no tenant's row"
ok "$(as top_a -c "SET ROLE bc_join_tenant_operator" -c "SELECT bc_join.create_site('$ta', 'x')")" \
  'ERROR:  no tenant with this id in the tenants you operate' "nor its own tenant's administration"
ok "$(as top_a -c "SELECT count(*) FROM bc_join.tenants")" 1 "as itself: its one tenant"

# search_path: objects of its own in pg_temp, named as the extension's
ok "$(as top_a <<SQL
CREATE TEMP TABLE tenant_operator_grants (role regrole, tenant_id text);
INSERT INTO tenant_operator_grants VALUES ('top_a', '$tb');
CREATE TEMP TABLE tenants (id text, name text);
INSERT INTO tenants VALUES ('$tb', 'b');
SET search_path = pg_temp, bc_join, pg_catalog;
SELECT string_agg(id, ',') FROM bc_join.tenants;
SQL
)" "$ta" "pg_temp shadows (tenant_operator_grants, tenants) first in search_path: the policy reads the extension's own"
ok "$(as top_a <<SQL
CREATE TEMP TABLE tenant_operator_grants (role regrole, tenant_id text);
INSERT INTO tenant_operator_grants VALUES ('top_a', '$tb');
CREATE FUNCTION pg_temp.check_tenant(text, text) RETURNS void LANGUAGE sql AS 'SELECT NULL';
CREATE FUNCTION pg_temp.pg_has_role(oid, name, text) RETURNS boolean LANGUAGE sql AS 'SELECT true';
SET search_path = pg_temp, bc_join, public, pg_catalog;
SELECT bc_join.create_site('$tb', 'evil');
SQL
)" 'ERROR:  no tenant with this id in the tenants you operate' "and the administrative functions check the real grants"
ok "$(as top_a <<SQL
CREATE FUNCTION pg_temp.peek() RETURNS bigint LANGUAGE sql SECURITY DEFINER AS 'SELECT count(*) FROM bc_join.sites';
SELECT pg_temp.peek();
SQL
)" 1 "a SECURITY DEFINER function of its own runs as itself: its one site"
ok "$(as top_a -c "COPY bc_join.sites TO STDOUT" | grep -c "$sb")" 0 "COPY TO: none of tenant B's rows"
ok "$(as top_a -c "COPY (SELECT * FROM bc_join.sites) TO STDOUT" | cut -f1)" "$sa" "COPY of a query: its own site alone"
ok "$(as top_a -c "SELECT count(*) FROM pg_stats WHERE schemaname = 'bc_join' AND tablename IN ('tenants', 'sites', 'nodes')")" 0 \
  "pg_stats shows no column statistics (most common values) of a table under row-level security"
ok "$(as top_a -c "SELECT count(*) FROM bc_join.tenant_operators")" 1 "tenant_operators: its own grant alone"
# the same refusal on every major, in PostgreSQL 16's words or 15's
got=$(as top_a -c "GRANT bc_join_tenant_operator TO top_b" | sed 's/permission denied to grant role/must have admin option on role/')
ok "$got" 'ERROR:  must have admin option on role "bc_join_tenant_operator"' \
  "it cannot hand the group role on"

# LISTEN: the tenant's own request channel, which it asks for; another
# tenant's request never reaches it, on no channel it could name
csr() { printf '%s' "$1" | openssl dgst -sha256 -binary | basenc --base64url | tr -d '='; }
cha=$(as top_a -c "SELECT bc_join.request_channel('$ta')")
ok "$(grep -cE '^bc_join_requests_[0-9a-f]{32}$' <<<"$cha")" 1 "request_channel(): its tenant's random channel"
ok "$(as top_a -c "SELECT bc_join.request_channel('$tb')")" 'ERROR:  no tenant with this id in the tenants you operate' \
  "but not tenant B's"
attempts=$((attempts + 1))
psql -X -U top_a -d "$db" >"$S/watch.out" 2>&1 <<SQL &
LISTEN $cha;
LISTEN bc_join_requests_$ta;
LISTEN bc_join_requests_$tb;
LISTEN bc_join_requests;
SELECT pg_sleep(3);
SELECT 1;
SQL
watcher=$!
sleep 0.7
sql -c "SELECT bc_join.create_join_request('$tb', 'approve-me', jsonb_build_object('role', 'node', 'csrSha256', '$(csr b)'))" >/dev/null
sql -c "SELECT bc_join.create_join_request('$ta', 'approve-me', jsonb_build_object('role', 'node', 'csrSha256', '$(csr a)'))" >/dev/null
wait "$watcher"
ok "$(grep -c "Asynchronous notification \"$cha\"" "$S/watch.out")" 1 "its tenant's request: told on its request channel"
ok "$(grep -c "Asynchronous notification" "$S/watch.out")" 1 "and nothing of tenant B's, on no channel (bc_join_requests_<tenant id>, 0.1.0's bc_join_requests)"
ok "$(grep -c "with payload" "$S/watch.out")" 0 "no payload"
ok "$(grep -c ERROR "$S/watch.out")" 0 "LISTEN took no grant"
ok "$(as top_a -c "SELECT count(*) FROM bc_join.pending_join_requests")" 1 "pending_join_requests: its tenant's request alone"
ok "$(as top_b -c "SELECT count(*) FROM bc_join.pending_join_requests")" 1 "and the other operator's: its own"

echo "# tenant operator login attempts: $attempts"
psql -qAtX -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE $db" -c "DROP ROLE top_a" -c "DROP ROLE top_b" >/dev/null
[ "$failed" -eq 0 ]
