#!/usr/bin/env bash
# approval.t: a join request that starts waiting is announced with NOTIFY on
# channel bc_join_requests (payload: the request id), so a tool can watch;
# nothing is announced for a request that is rolled back.
# Needs the environment test/run-all sets (PGHOST, PGPORT, BCJ_*).
set -u
n=0 failed=0
ok() { n=$((n + 1)); if [ "$1" = "$2" ]; then echo "ok $n - $3"; else echo "not ok $n - $3"; echo "#   got '$1', expected '$2'"; failed=$((failed + 1)); fi; }
sql() { psql -qAtX -v ON_ERROR_STOP=1 -d bcj_approval "$@"; }

echo "1..4"
S="$BCJ_SCRATCH/approval"
rm -rf "$S"; mkdir -p "$S"
psql -qAtX -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS bcj_approval" -c "CREATE DATABASE bcj_approval" >/dev/null
sql -c "CREATE EXTENSION bc_join"
tenant=$(sql -c "SELECT bc_join.create_tenant('watch')")
site=$(sql -c "SELECT bc_join.create_site('$tenant', 'dc')")
pool=$(sql -c "SELECT bc_join.create_pool('$tenant', '$site', 'p')")
sql -v tenant="$tenant" -v pool="$pool" <<'SQL'
CREATE FUNCTION public.approve_me_verify(evidence jsonb, context jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = public, pg_catalog, pg_temp AS $f$
DECLARE
	deferral jsonb := bc_join.await_approval('approve-me', current_setting('bcj.tenant'), context);
BEGIN
	IF deferral IS NOT NULL THEN
		RETURN deferral;
	END IF;
	RETURN jsonb_build_object('tenantId', current_setting('bcj.tenant'), 'role', 'node',
							  'poolId', current_setting('bcj.pool'));
END $f$;
SELECT bc_join.register_attestor('approve-me', '1', ARRAY['node'], 'public.approve_me_verify(jsonb,jsonb)');
ALTER DATABASE bcj_approval SET bcj.tenant = :'tenant';
ALTER DATABASE bcj_approval SET bcj.pool = :'pool';
SQL

req=$("$BCJ_BCD" join-request --service-keys "$BCJ_SERVICE_KEYS" --attestor approve-me --out-dir "$S/m")
other=$("$BCJ_BCD" join-request --service-keys "$BCJ_SERVICE_KEYS" --attestor approve-me --out-dir "$S/o")

# A watcher listens while one request waits and another is rolled back.
psql -X -d bcj_approval >"$S/watch.out" 2>&1 <<'SQL' &
LISTEN bc_join_requests;
SELECT pg_sleep(2);
SELECT 1;
SQL
watcher=$!
sleep 0.5
status=$(sql -v req="$req" <<'SQL'
SELECT bc_join(:'req')->>'status';
SQL
)
sql -v req="$other" >/dev/null <<'SQL'
BEGIN;
SELECT bc_join(:'req');
ROLLBACK;
SQL
wait "$watcher"

rid=$(sql -c "SELECT id FROM bc_join.join_requests WHERE state = 'pending'")
ok "$status" pending "the join waits for approval"
ok "$(grep -c 'Asynchronous notification "bc_join_requests"' "$S/watch.out")" 1 "exactly one notification reached the watcher"
ok "$(grep -o 'with payload "[^"]*"' "$S/watch.out")" "with payload \"$rid\"" "its payload is the waiting request's id"
ok "$(sql -c "SELECT count(*) FROM bc_join.join_requests")" 1 "the rolled-back request left nothing"
[ "$failed" -eq 0 ]
