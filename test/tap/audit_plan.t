#!/usr/bin/env bash
# audit_plan.t: the issuance log's chain finds the last row by its primary
# key whatever the statistics were when a backend first planned the trigger's
# query.  A backend that planned it while the log held a row or two (a fresh
# install, the gateway's connections) used to keep a sequential scan and sort
# in its cached plan, so that every later insert read the whole log (joins
# slowing down as the log grows, a bulk load quadratic).  Here one backend
# plans it on a just-analyzed, nearly empty log and then inserts 300 rows in
# one statement: the trigger's lookups do no sequential scan of the log.
# Then a backend on its cached generic plan appends to a chain with no rows
# while the log holds 20,000 in another: the lookup reads a handful of index
# entries, not the log backwards (an index on id alone once made the generic
# plan do that).
# Needs the environment test/run-all sets (PGHOST, PGPORT, BCJ_*).
set -u
. "$(dirname "$0")/../lib/tap.sh"
sql() { psql -qAtX -v ON_ERROR_STOP=1 -d bcj_audit_plan "$@"; }

echo "1..5"
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

# 20,000 rows in one chain (one transaction keeps one chain).
sql -c "INSERT INTO bc_join.audit_log (action, tenant_id, detail) SELECT 'test.bulk', '$tenant', '{}' FROM generate_series(1, 20000)" \
    -c "ANALYZE bc_join.audit_log"
full=$(sql -c "SELECT chain FROM bc_join.audit_log WHERE action = 'test.bulk' LIMIT 1")
# Another session holds that chain, so the next inserts land in chains with no
# rows.  Only bc_join's C code can take a chain's lock (src/ext/locks.c), so the
# holder is a session whose own insert lands in that chain: new sessions try
# until one does (its backend's pid picks the chain it tries first).
hold() {
  local i out
  for i in $(seq 1 400); do
    out=$(sql <<SQL
BEGIN;
INSERT INTO bc_join.audit_log (action, tenant_id) VALUES ('test.hold', '$tenant') RETURNING chain = $full AS mine \gset
\if :mine
SELECT pg_sleep(4);
COMMIT;
\else
ROLLBACK;
\echo again
\endif
SQL
)
    [ "$out" != again ] && return 0
  done
  return 1
}
hold >/dev/null &
holder=$!
# pg_locks shows bc_join's lock tags as advisory with objsubid 3, classid "bjac"
for _ in $(seq 1 400); do
  [ "$(sql -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1651138915 AND objid = $full AND objsubid = 3 AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")" = 1 ] && break
  sleep 0.05
done
out=$(sql -c "SET plan_cache_mode = force_generic_plan" \
          -c "BEGIN" \
          -c "INSERT INTO bc_join.audit_log (action, tenant_id) VALUES ('test.sparse', '$tenant')" \
          -c "SELECT pg_stat_get_xact_tuples_fetched('bc_join.audit_log'::regclass) || ' ' || (SELECT chain <> $full FROM bc_join.audit_log WHERE action = 'test.sparse')" \
          -c "COMMIT" | tail -1)
wait "$holder"
ok "${out#* }" true "a backend on the generic plan appends to a chain other than the full one"
ok "$([ "${out%% *}" -lt 50 ] && echo few || echo "${out%% *}")" few \
  "and finds that chain's last row without reading the 20,000 rows of the other (tuples fetched: ${out%% *})"
psql -qAtX -d postgres -c "DROP DATABASE bcj_audit_plan" >/dev/null
[ "$failed" -eq 0 ]
