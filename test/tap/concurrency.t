#!/usr/bin/env bash
# concurrency.t: 16 joins at once on a 3-use token admit exactly 3; the other
# 13 get the one refusal, recorded as spent, and nothing else is written.
# Needs the environment test/run-all sets (PGHOST, PGPORT, BCJ_*).
set -u
. "$(dirname "$0")/../lib/tap.sh"
sql() { psql -qAtX -v ON_ERROR_STOP=1 -d bcj_concurrency "$@"; }

echo "1..8"
S="$BCJ_SCRATCH/concurrency"
rm -rf "$S"; mkdir -p "$S"
psql -qAtX -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS bcj_concurrency" -c "CREATE DATABASE bcj_concurrency" >/dev/null
sql -c "CREATE EXTENSION bc_join"
tenant=$(sql -c "SELECT bc_join.create_tenant('race')")
site=$(sql -c "SELECT bc_join.create_site('$tenant', 'dc')")
pool=$(sql -c "SELECT bc_join.create_pool('$tenant', '$site', 'p')")
token=$(sql -c "SELECT bc_join.create_join_token('$tenant', '$pool', uses => 3)")

for i in $(seq 1 16); do
  "$BCJ_BCD" join-request --service-keys "$BCJ_SERVICE_KEYS" --token "$token" --out-dir "$S/m$i" >"$S/req$i.json"
done

# A barrier: every client blocks on an advisory lock the gate holds, and the
# gate lets go only once all 16 wait, so the joins really race.
sql >"$S/gate.out" 2>&1 <<'SQL' &
SELECT pg_advisory_lock(4242);
DO $$
BEGIN
	FOR i IN 1..600 LOOP
		-- this database's waiters only: other scripts run beside this one on the same cluster
		EXIT WHEN (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
				   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())) >= 16;
		PERFORM pg_sleep(0.05);
	END LOOP;
END $$;
SELECT pg_advisory_unlock(4242);
SQL
gate=$!
sleep 0.5
for i in $(seq 1 16); do
  sql -v req="$(cat "$S/req$i.json")" >"$S/out$i" 2>&1 <<'SQL' &
SELECT pg_advisory_lock_shared(4242);
SELECT pg_advisory_unlock_shared(4242);
SELECT bc_join(:'req')->>'status';
SQL
done
wait

issued=$(cat "$S"/out* | grep -c '^issued$')
refused=$(cat "$S"/out* | grep -c '^refused$')
ok "$issued" 3 "exactly 3 of 16 concurrent joins are issued"
ok "$refused" 13 "the other 13 get the refusal"
ok "$(sql -c "SELECT count(*) FROM bc_join.nodes WHERE tenant_id = '$tenant'")" 3 "3 nodes exist"
ok "$(sql -c "SELECT count(*) FROM bc_join.node_certs c JOIN bc_join.nodes n ON n.id = c.node_id WHERE n.tenant_id = '$tenant'")" 3 "3 certificates exist"
ok "$(sql -c "SELECT uses_left FROM bc_join.join_tokens WHERE tenant_id = '$tenant'")" 0 "the token has no use left"
ok "$(sql -c "SELECT count(*) FROM bc_join.events WHERE tenant_id = '$tenant' AND payload->>'refusal' = 'join-token:spent'")" 13 "13 refusals recorded as spent in the tenant's stream"
ok "$(cat "$S"/out* | grep -vc -e '^issued$' -e '^refused$' -e '^t$' -e '^$')" 0 "no client saw an error"
ok "$(sql -c "SELECT bc_join.verify_audit_log()")" t "the issuance log still chains: the concurrent joins appended one after the other"
[ "$failed" -eq 0 ]
