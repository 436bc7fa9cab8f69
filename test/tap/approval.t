#!/usr/bin/env bash
# approval.t: a join request that starts waiting is announced with NOTIFY on
# its tenant's request channel (bc_join.request_channel(tenant): random, in
# the tenant's row), so a tool can watch; nothing is announced for a request
# that is rolled back, nothing on a channel every tenant shares (0.1.0's
# bc_join_requests) nor on one named after the tenant's id (0.2.0's and
# 0.3.0's bc_join_requests_<tenant id>: the id is in every certificate).
# LISTEN needs no grant, so the payloads carry nothing (no request id,
# serial or node id): a role with LOGIN and nothing else listens on those and
# bc_join_crl, learns only that something changed, and cannot learn the
# tenant's channel (request_channel() and the tenants table refuse it).  A
# rotated channel is told, the old one no more.  Needs the environment
# test/run-all sets (PGHOST, PGPORT, BCJ_*).
set -u
. "$(dirname "$0")/../lib/tap.sh"
sql() { psql -qAtX -v ON_ERROR_STOP=1 -d bcj_approval "$@"; }

echo "1..15"
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

# Two nodes joined by token, whose certificates are revoked and retired below.
tok=$(sql -c "SELECT bc_join.create_join_token('$tenant', '$pool', uses => 2)")
j1=$("$BCJ_BCD" join-request --service-keys "$BCJ_SERVICE_KEYS" --token "$tok" --out-dir "$S/n1")
j2=$("$BCJ_BCD" join-request --service-keys "$BCJ_SERVICE_KEYS" --token "$tok" --out-dir "$S/n2")
sql -v req="$j1" >/dev/null <<<"SELECT bc_join(:'req')"
sql -v req="$j2" >/dev/null <<<"SELECT bc_join(:'req')"
serial1=$(sql -c "SELECT c.serial FROM bc_join.node_certs c ORDER BY c.issued_at, c.serial LIMIT 1")
node2=$(sql -c "SELECT c.node_id FROM bc_join.node_certs c WHERE c.serial <> '$serial1'")

# The watcher: a role that may log in and nothing else (LISTEN needs no grant).
psql -qAtX -d postgres -c "SET client_min_messages = warning" -c "DROP ROLE IF EXISTS bcj_listener" \
  -c "CREATE ROLE bcj_listener LOGIN" >/dev/null
ok "$(sql -c "SELECT has_schema_privilege('bcj_listener', 'bc_join', 'USAGE')")" f "the listener has no right on the schema"
ok "$(psql -qAtX -U bcj_listener -d bcj_approval -c "SELECT bc_join.request_channel('$tenant')" 2>&1 | grep -c 'permission denied')" 1 \
  "the listener cannot ask for the tenant's request channel"
chan=$(sql -c "SELECT bc_join.request_channel('$tenant')")
ok "$(grep -cE '^bc_join_requests_[0-9a-f]{32}$' <<<"$chan")$(grep -c -- "$tenant" <<<"$chan")" 10 \
  "an operator's: bc_join_requests_ and 32 random hex digits, not the tenant's id"
# The stranger listens on every name it could derive while one request waits,
# another is rolled back, a certificate is revoked, a node retired; the
# tenant's operator listens on its channel.
psql -X -U bcj_listener -d bcj_approval -v chan="bc_join_requests_$tenant" >"$S/watch.out" 2>&1 <<'SQL' &
LISTEN bc_join_requests;
LISTEN :"chan";
LISTEN bc_join_crl;
SELECT pg_sleep(3);
SELECT 1;
SQL
watcher=$!
psql -X -d bcj_approval -v chan="$chan" >"$S/op.out" 2>&1 <<'SQL' &
LISTEN :"chan";
SELECT pg_sleep(3);
SELECT 1;
SQL
opwatcher=$!
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
sql -c "SELECT bc_join.revoke_certificate('$serial1', 'keyCompromise')" >/dev/null
sql -c "SELECT bc_join.retire_node('$node2')" >/dev/null
wait "$watcher" "$opwatcher"

rid=$(sql -c "SELECT id FROM bc_join.join_requests WHERE state = 'pending'")
ok "$status" pending "the join waits for approval"
ok "$(grep -c "Asynchronous notification \"$chan\"" "$S/op.out") $(grep -c 'Asynchronous notification' "$S/op.out")" "1 1" \
  "exactly one notification of a waiting request reached the operator, on its tenant's request channel"
ok "$(grep -c "Asynchronous notification \"bc_join_requests_$tenant\"" "$S/watch.out")" 0 "nothing on bc_join_requests_<tenant id>, a name any stranger derives"
ok "$(grep -c 'Asynchronous notification "bc_join_requests"' "$S/watch.out")" 0 "nothing on a channel every tenant's requests would reach"
ok "$(grep -c 'Asynchronous notification "bc_join_crl"' "$S/watch.out")" 2 "one of the revocation and one of the retirement"
ok "$(grep -c 'with payload' "$S/watch.out")" 0 "no notification carries a payload"
# The tenant's id is in the name of a channel the listener chose itself;
# anything else it was told must not name one.
told=$(sed "s/\"bc_join_requests_$tenant\"/\"bc_join_requests_<its tenant>\"/" "$S/watch.out")
leaks=0
for id in "$rid" "$serial1" "$node2" "$tenant"; do
  if [ -n "$id" ] && grep -qi -- "$id" <<<"$told"; then leaks=$((leaks + 1)); fi
done
ok "$leaks" 0 "the listener saw no request id, serial, node id or tenant id (but in the channel it named)"
ok "$(grep -c 'ERROR' "$S/watch.out")" 0 "LISTEN took no grant"
ok "$(sql -c "SELECT count(*) FROM bc_join.join_requests")" 1 "the rolled-back request left nothing"
ok "$(psql -qAtX -U bcj_listener -d bcj_approval -c "SELECT request_channel FROM bc_join.tenants" 2>&1 | grep -c 'permission denied')" 1 \
  "nor can it read the channel from the tenants table"

# Rotated (after an operator of the tenant was revoked): the new channel is told, the old no more.
new=$(sql -c "SELECT bc_join.rotate_request_channel('$tenant')")
psql -X -d bcj_approval -v old="$chan" -v new="$new" >"$S/rot.out" 2>&1 <<'SQL' &
LISTEN :"old";
LISTEN :"new";
SELECT pg_sleep(2);
SELECT 1;
SQL
rotwatcher=$!
sleep 0.5
third=$("$BCJ_BCD" join-request --service-keys "$BCJ_SERVICE_KEYS" --attestor approve-me --out-dir "$S/t")
sql -v req="$third" >/dev/null <<<"SELECT bc_join(:'req')"
wait "$rotwatcher"
ok "$(grep -c "Asynchronous notification \"$new\"" "$S/rot.out") $(grep -c "Asynchronous notification \"$chan\"" "$S/rot.out") $(sql -c "SELECT bc_join.request_channel('$tenant') = '$new'")" "1 0 t" \
  "rotate_request_channel(): a new random channel is told, the old one is not"
ok "$(sql -c "SELECT count(*) FROM bc_join.audit_log WHERE action = 'tenant.request_channel.rotate' AND tenant_id = '$tenant'")" 1 \
  "the rotation is in the audit log"
psql -qAtX -d postgres -c "DROP ROLE bcj_listener" >/dev/null
[ "$failed" -eq 0 ]
