#!/usr/bin/env bash
# retention.t: a prune never waits on a row another transaction holds (as a
# join, a renewal or a session holds its rows): with one row of each pruned
# table locked FOR UPDATE elsewhere, bc_join.prune() under lock_timeout = 1s
# returns at once without it, and takes it once the holder commits.
# Needs the environment test/run-all sets (PGHOST, PGPORT, BCJ_*).
set -u
. "$(dirname "$0")/../lib/tap.sh"
sql() { psql -qAtX -v ON_ERROR_STOP=1 -d bcj_retention "$@"; }

echo "1..5"
S="$BCJ_SCRATCH/retention"
rm -rf "$S"; mkdir -p "$S"
psql -qAtX -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS bcj_retention" -c "CREATE DATABASE bcj_retention" >/dev/null
sql -c "CREATE EXTENSION bc_join"
tenant=$(sql -c "SELECT bc_join.create_tenant('old')")
site=$(sql -c "SELECT bc_join.create_site('$tenant', 'dc')")
pool=$(sql -c "SELECT bc_join.create_pool('$tenant', '$site', 'p')")
# Two of everything past its retention: events, node certificates (each
# node keeps its newest), sessions, join requests.
sql >/dev/null <<SQL
INSERT INTO bc_join.events (tenant_id, type, at)
	SELECT '$tenant', 'old.' || i, now() - interval '100 days' FROM generate_series(1, 2) i;
INSERT INTO bc_join.nodes (id, tenant_id, site_id, pool_id, role, trust, attestor)
	VALUES ('node_old', '$tenant', '$site', '$pool', 'node', 'platform', 'join-token');
INSERT INTO bc_join.node_certs (serial, node_id, identity_generation, not_before, not_after, spki_sha256,
								certificate, issued_at)
	SELECT md5(i::text), 'node_old', 1, now() - interval '101 days', now() - interval '100 days',
		   sha256(convert_to(i::text, 'UTF8')), '\x00', now() - interval '101 days' + i * interval '1 hour'
	FROM generate_series(1, 3) i;
INSERT INTO bc_join.sessions (id, node_id, tenant_id, session_ref, provisioned_at)
	SELECT 'ses_' || i, 'node_old', '$tenant', 's' || i, now() - interval '100 days' FROM generate_series(1, 2) i;
INSERT INTO bc_join.join_requests (id, tenant_id, attestor, role, csr_sha256, state, decided_at, expires_at)
	SELECT 'jr_' || i, '$tenant', 'approve-me', 'node', sha256(convert_to(i::text, 'UTF8')), 'rejected',
		   now() - interval '100 days', now() - interval '99 days' FROM generate_series(1, 2) i;
SQL

# The holder: one row of each table locked, as a running join would.
sql >"$S/holder.out" 2>&1 <<'SQL' &
BEGIN;
SELECT id FROM bc_join.events WHERE type = 'old.1' FOR UPDATE;
SELECT serial FROM bc_join.node_certs WHERE serial = md5('1') FOR UPDATE;
SELECT id FROM bc_join.sessions WHERE id = 'ses_1' FOR UPDATE;
SELECT id FROM bc_join.join_requests WHERE id = 'jr_1' FOR UPDATE;
SELECT pg_sleep(4);
COMMIT;
SQL
holder=$!
held=no
for i in $(seq 1 100); do
  [ "$(sql -c "SELECT count(*) FROM pg_stat_activity WHERE datname = 'bcj_retention' AND query LIKE 'SELECT pg_sleep(4)%' AND state = 'active'")" = 1 ] && { held=yes; break; }
  sleep 0.05
done
ok "$held" yes "another transaction holds one row of each table"

start=$(date +%s%N)
got=$(sql -c "SET lock_timeout = '1s'" -c "SELECT bc_join.prune(100) - 'attestationUses'" 2>&1)
ms=$(( ($(date +%s%N) - start) / 1000000 ))
ok "$got" '{"events": 1, "sessions": 1, "certificates": 1, "joinRequests": 1}' \
   "with one row of each held elsewhere, prune() deletes the others and skips the held ones"
ok "$([ "$ms" -lt 1000 ] && echo fast || echo "$ms ms")" fast "and returns without waiting (under lock_timeout = 1s)"
wait "$holder"
ok "$(sql -c "SELECT bc_join.prune(100) - 'attestationUses'")" '{"events": 1, "sessions": 1, "certificates": 1, "joinRequests": 1}' \
   "once the holder commits, the next prune() takes them"
ok "$(sql -c "SELECT count(*) FROM bc_join.node_certs WHERE node_id = 'node_old'")" 1 "the node's newest certificate stays"
[ "$failed" -eq 0 ]
