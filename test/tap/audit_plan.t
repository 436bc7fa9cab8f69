#!/usr/bin/env bash
# audit_plan.t: appending to the issuance log reads nothing of the log.  The
# chains' last rows are bc_join.audit_chains (16 rows), so an insert costs
# the same on an empty log and on one of millions, whatever plan a
# long-lived backend cached: once, a trigger that looked the chain's last
# row up in the log kept a sequential scan planned on a nearly empty log in
# the gateway's backends, and every later insert read the whole log.  Here:
# 300 inserts in one statement on a just-analyzed, nearly empty log, then
# one insert on the generic plan into a log of 20,000 rows: neither scans
# or fetches a tuple of bc_join.audit_log.
# Needs the environment test/run-all sets (PGHOST, PGPORT, BCJ_*).
set -u
n=0 failed=0
ok() { n=$((n + 1)); if [ "$1" = "$2" ]; then echo "ok $n - $3"; else echo "not ok $n - $3"; echo "#   got '$1', expected '$2'" >&2; failed=$((failed + 1)); fi; }
sql() { psql -qAtX -v ON_ERROR_STOP=1 -d bcj_audit_plan "$@"; }

echo "1..4"
psql -qAtX -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS bcj_audit_plan" -c "CREATE DATABASE bcj_audit_plan" >/dev/null
sql -c "CREATE EXTENSION bc_join"
tenant=$(sql -c "SELECT bc_join.create_tenant('t')")
sql -c "ANALYZE bc_join.audit_log"
out=$(sql -c "SELECT bc_join.create_site('$tenant', 'dc')" \
          -c "BEGIN" \
          -c "INSERT INTO bc_join.audit_log (action, tenant_id, detail) SELECT 'test.row', '$tenant', '{}' FROM generate_series(1, 300)" \
          -c "SELECT pg_stat_get_xact_numscans('bc_join.audit_log'::regclass) || ' ' || pg_stat_get_xact_tuples_fetched('bc_join.audit_log'::regclass)" \
          -c "COMMIT" | tail -1)
ok "$out" "0 0" "300 inserts on a nearly empty, just-analyzed log scan and fetch nothing of it"
ok "$(sql -c "SELECT bc_join.verify_audit_log()")" t "and the chain holds"

sql -c "INSERT INTO bc_join.audit_log (action, tenant_id, detail) SELECT 'test.bulk', '$tenant', '{}' FROM generate_series(1, 20000)" \
    -c "ANALYZE bc_join.audit_log"
out=$(sql -c "SET plan_cache_mode = force_generic_plan" \
          -c "BEGIN" \
          -c "INSERT INTO bc_join.audit_log (action, tenant_id) VALUES ('test.more', '$tenant')" \
          -c "SELECT pg_stat_get_xact_numscans('bc_join.audit_log'::regclass) || ' ' || pg_stat_get_xact_tuples_fetched('bc_join.audit_log'::regclass)" \
          -c "COMMIT" | tail -1)
ok "$out" "0 0" "on the generic plan, an insert into a log of 20,000 rows reads none of them"
ok "$(sql -c "SELECT bc_join.verify_audit_log()")" t "and every chain holds"
psql -qAtX -d postgres -c "DROP DATABASE bcj_audit_plan" >/dev/null
[ "$failed" -eq 0 ]
