#!/usr/bin/env bash
# audit_plan.t: the issuance log's chain finds the last row by its primary
# key whatever the statistics were when a backend first planned the trigger's
# query.  A backend that planned it while the log held a row or two (a fresh
# install, the gateway's connections) used to keep a sequential scan and sort
# in its cached plan, so that every later insert read the whole log (joins
# slowing down as the log grows, a bulk load quadratic).  Here one backend
# plans it on a just-analyzed, nearly empty log and then inserts 300 rows in
# one statement: the trigger's lookups do no sequential scan of the log.
# Needs the environment test/run-all sets (PGHOST, PGPORT, BCJ_*).
set -u
n=0 failed=0
ok() { n=$((n + 1)); if [ "$1" = "$2" ]; then echo "ok $n - $3"; else echo "not ok $n - $3"; echo "#   got '$1', expected '$2'" >&2; failed=$((failed + 1)); fi; }
sql() { psql -qAtX -v ON_ERROR_STOP=1 -d bcj_audit_plan "$@"; }

echo "1..3"
psql -qAtX -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS bcj_audit_plan" -c "CREATE DATABASE bcj_audit_plan" >/dev/null
sql -c "CREATE EXTENSION bc_join"
tenant=$(sql -c "SELECT bc_join.create_tenant('t')")
sql -c "ANALYZE bc_join.audit_log"
ok "$(sql -c "SELECT reltuples < 10 FROM pg_class WHERE oid = 'bc_join.audit_log'::regclass")" t \
  "the log is analyzed nearly empty"
# One backend: the first insert plans the trigger's query on those statistics,
# the second inserts 300 rows through the cached plan.
out=$(sql -c "SELECT bc_join.create_site('$tenant', 'dc')" \
          -c "BEGIN" \
          -c "INSERT INTO bc_join.audit_log (action, tenant_id, detail) SELECT 'test.row', '$tenant', '{}' FROM generate_series(1, 300)" \
          -c "SELECT pg_stat_get_xact_numscans('bc_join.audit_log'::regclass)" \
          -c "COMMIT" | tail -1)
ok "$([ "${out:-999}" -lt 10 ] && echo few || echo "$out")" few \
  "300 inserts through a plan made on a nearly empty log scan it sequentially fewer than 10 times"
ok "$(sql -c "SELECT bc_join.verify_audit_log()")" t "and the chain holds"
psql -qAtX -d postgres -c "DROP DATABASE bcj_audit_plan" >/dev/null
[ "$failed" -eq 0 ]
