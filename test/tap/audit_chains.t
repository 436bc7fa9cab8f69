#!/usr/bin/env bash
# audit_chains.t: the issuance log is 16 hash chains, so that concurrent
# transactions do not queue behind one lock through their commits.
#
# - 8 transactions each append a row and stay open 2 s, all at once, each
#   under lock_timeout = 1 s: all 8 succeed, in 8 different chains (with one
#   chain, 7 of them timed out waiting for the first);
# - with all 16 chains held (for 5 s), a 17th waits (its lock_timeout fires), and
#   appends once they commit;
# - the chains hold (verify_audit_log, tools/bc-audit-verify with a signed
#   anchor naming every chain's head);
# - a row removed in the middle of one chain is named with its chain, in SQL
#   and offline; the last row of a chain removed after an anchor is not seen
#   by the chains alone but is by the anchor (bc_join.audit_anchor_problems,
#   tools/bc-audit-verify: the log is behind it).
# Needs the environment test/run-all sets (PGHOST, PGPORT, BCJ_*).
set -u
. "$(dirname "$0")/../lib/tap.sh"
DB=bcj_audit_chains
sql() { psql -qAtX -v ON_ERROR_STOP=1 -d "$DB" "$@"; }
TOP=$(cd "$(dirname "$0")/../.." && pwd)
S=$(mktemp -d)
chmod 0755 "$S"   # the server reads the anchor (pg_read_file)
trap 'rm -rf "$S"' EXIT

echo "1..16"
psql -qAtX -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" >/dev/null
sql -c "CREATE EXTENSION bc_join"
tenant=$(sql -c "SELECT bc_join.create_tenant('t')")
sql -c "SELECT bc_join.service_keys()" >"$S/keys.json"

# hold N: N sessions each append a row tagged with its number and stay open
# HOLD seconds, each under lock_timeout LT; each writes "ok" or its error.
hold() {
  local tag=$1 count=$2 secs=$3 lt=$4 i
  for i in $(seq 1 "$count"); do
    sql -c "SET lock_timeout = '$lt'" -c "BEGIN" \
        -c "INSERT INTO bc_join.audit_log (action, tenant_id, detail) VALUES ('test.$tag', '$tenant', '{\"i\": $i}')" \
        -c "SELECT pg_sleep($secs)" -c "COMMIT" >"$S/$tag.$i" 2>&1 && echo ok >>"$S/$tag.$i" &
  done
}
# The chains held: bc_join's lock tags show in pg_locks as advisory, objsubid 3 (src/ext/locks.c);
# this database's only (the other TAP scripts run beside this one on the same cluster).
held() { sql -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1651138915 AND objsubid = 3 AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"; }

hold a 8 2 1s
wait
ok "$(cat "$S"/a.* | grep -c '^ok$')" 8 "8 transactions append at once, each open 2 s under lock_timeout 1 s: none waits"
ok "$(sql -c "SELECT count(DISTINCT chain) FROM bc_join.audit_log WHERE action = 'test.a'")" 8 \
  "their rows are in 8 different chains"

hold b 16 5 10s
for _ in $(seq 1 100); do [ "$(held)" -ge 16 ] && break; sleep 0.05; done
ok "$(held)" 16 "16 open transactions hold the 16 chains"
late=$(sql -c "SET lock_timeout = '300ms'" -c "INSERT INTO bc_join.audit_log (action, tenant_id) VALUES ('test.late', '$tenant')" 2>&1)
ok "$(echo "$late" | grep -c 'lock timeout')" 1 "a 17th waits for a chain (its lock_timeout fires)"
sql -c "INSERT INTO bc_join.audit_log (action, tenant_id) VALUES ('test.later', '$tenant')"
ok "$(sql -c "SELECT count(*) FROM bc_join.audit_log WHERE action = 'test.later'")" 1 \
  "and appends once its chain is free"
wait
ok "$(cat "$S"/b.* | grep -c '^ok$') $(sql -c "SELECT count(*) FROM bc_join.audit_log WHERE action IN ('test.b', 'test.later')")" "16 17" \
  "the 16 holders committed (16 + 1 rows)"

sql -c "INSERT INTO bc_join.audit_log (action, tenant_id) SELECT 'test.c', '$tenant' FROM generate_series(1, 3)"
ok "$(sql -c "SELECT bc_join.verify_audit_log()")" t "verify_audit_log(): every chain holds"
sql -c "\\copy (SELECT * FROM bc_join.audit_export) TO '$S/log.csv' CSV HEADER"
sql -c "SELECT bc_join.audit_anchor()" >"$S/anchor.jws"
chmod 0644 "$S/anchor.jws"
out=$("$TOP/tools/bc-audit-verify" "$S/log.csv" --anchor "$S/anchor.jws" --service-keys "$S/keys.json" 2>&1)
ok "$(echo "$out" | grep -c '^ok: .* (16 chains)')" 1 "tools/bc-audit-verify: the export holds in 16 chains, with the anchor ($out)"
ok "$(cut -d. -f2 "$S/anchor.jws" | tr '_-' '/+' | base64 -d 2>/dev/null | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["heads"]))')" 16 \
  "the anchor names the last row of each of the 16 chains"

# a chain with at least 3 rows, its middle row and the one after it
read -r ch mid next <<<"$(sql -F ' ' -c "SELECT chain, (array_agg(id ORDER BY id))[2], (array_agg(id ORDER BY id))[3] FROM bc_join.audit_log GROUP BY chain HAVING count(*) >= 3 ORDER BY chain LIMIT 1")"
got=$(sql -F ' ' -c "BEGIN" -c "ALTER TABLE bc_join.audit_log DISABLE TRIGGER audit_append_only" \
          -c "DELETE FROM bc_join.audit_log WHERE id = $mid" \
          -c "SELECT id, problem FROM bc_join.audit_log_problems()" \
          -c "\\copy (SELECT * FROM bc_join.audit_export) TO '$S/removed.csv' CSV HEADER" -c "ROLLBACK")
ok "$(echo "$got" | grep -c "^$next does not link to the row before it in chain $ch:")" 1 \
  "a row removed inside chain $ch: the next row of that chain is named, with its chain"
out=$("$TOP/tools/bc-audit-verify" "$S/removed.csv" 2>&1)
ok "$(echo "$out" | grep -c "^row $next: does not link to the row before it in chain $ch")" 1 "offline too ($out)"

last=$(sql -c "SELECT max(id) FROM bc_join.audit_log WHERE chain = $ch")
got=$(sql -c "BEGIN" -c "ALTER TABLE bc_join.audit_log DISABLE TRIGGER audit_append_only" \
          -c "DELETE FROM bc_join.audit_log WHERE id = $last" \
          -c "SELECT bc_join.verify_audit_log()" \
          -c "\\copy (SELECT * FROM bc_join.audit_export) TO '$S/tail.csv' CSV HEADER" -c "ROLLBACK")
ok "$got" t "the last row of a chain removed: the chains alone still hold"
out=$("$TOP/tools/bc-audit-verify" "$S/tail.csv" --anchor "$S/anchor.jws" --service-keys "$S/keys.json" 2>&1; echo "exit=$?")
ok "$(echo "$out" | grep -c -e "the anchor names row $last" -e '^exit=1$')" 2 "but offline the anchor published before names it: the log is behind it"
got=$(sql -F ' ' -c "BEGIN" -c "ALTER TABLE bc_join.audit_log DISABLE TRIGGER audit_append_only" \
          -c "DELETE FROM bc_join.audit_log WHERE id = $last" \
          -c "SELECT bc_join.verify_audit_log(pg_read_file('$S/anchor.jws'))" \
          -c "SELECT chain, id, problem FROM bc_join.audit_anchor_problems(pg_read_file('$S/anchor.jws'))" -c "ROLLBACK")
ok "$(echo "$got" | head -1)" "f" "and in SQL: verify_audit_log(anchor) is false"
ok "$(echo "$got" | grep -c "^$ch $last the log is behind the anchor of .*: chain $ch ends at row [0-9]*, the anchor names row $last")" 1 \
  "audit_anchor_problems() says the log is behind the anchor in chain $ch"
ok "$(sql -c "SELECT bc_join.verify_audit_log()")" t "the untouched log still holds"

psql -qAtX -d postgres -c "DROP DATABASE $DB" >/dev/null
[ "$failed" -eq 0 ]
