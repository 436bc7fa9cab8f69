#!/usr/bin/env bash
# preload.t: a server started without bc_join in shared_preload_libraries
# says so in one ERROR (SQLSTATE F0000, INVALID_CONFIG, a hint naming the
# setting), at CREATE EXTENSION and at every call of a database that has the
# extension, again and again in one session, and never "FATAL: cannot create
# PGC_POSTMASTER variables after startup" (which ended the session). Then the
# same cluster restarted with it preloaded creates the extension. A cluster
# of its own (tools/pg-throwaway, then restarted preloading plpgsql alone).
set -u
. "$(dirname "$0")/../lib/tap.sh"
has() { n=$((n + 1)); if grep -q -- "$2" <<<"$1"; then echo "ok $n - $3"; else echo "not ok $n - $3"; sed 's/^/#   /' <<<"$1"; failed=$((failed + 1)); fi; }
lacks() { n=$((n + 1)); if grep -q -- "$2" <<<"$1"; then echo "not ok $n - $3"; sed 's/^/#   /' <<<"$1"; failed=$((failed + 1)); else echo "ok $n - $3"; fi; }

echo "1..9"
top=$(cd "$(dirname "$0")/../.." && pwd)
S="$BCJ_SCRATCH/preload"
rm -rf "$S"; mkdir -p "$S"; chmod 0755 "$S"
port=$("$top/tools/pg-throwaway" free-port 1)
env_line=$("$top/tools/pg-throwaway" start "$S/pg" "$port" "$BCJ_KEY_DIR" test.bc-join.local) || { echo "Bail out! no cluster"; exit 1; }
trap '"$top/tools/pg-throwaway" stop "$S/pg"' EXIT
export $env_line
q() { psql -X -d postgres -v VERBOSITY=verbose "$@" 2>&1; }

# A database with the extension while it is preloaded; then the server without it.
psql -qAtX -d postgres -c "CREATE DATABASE had" >/dev/null
psql -qAtX -d had -c "CREATE EXTENSION bc_join" >/dev/null
psql -qAtX -d postgres -c "ALTER SYSTEM SET shared_preload_libraries = 'plpgsql'" >/dev/null
"$top/tools/pg-throwaway" stop "$S/pg"
"$top/tools/pg-throwaway" start "$S/pg" "$port" "$BCJ_KEY_DIR" test.bc-join.local >/dev/null

out=$(q -c "CREATE EXTENSION bc_join" -c "CREATE EXTENSION bc_join" -c "SELECT 'still here'")
has "$out" 'ERROR:  F0000: bc_join must be loaded via "shared_preload_libraries"' \
  "CREATE EXTENSION without preloading: one ERROR, F0000, saying bc_join must be loaded via shared_preload_libraries"
has "$out" 'HINT:  Add bc_join to shared_preload_libraries in postgresql.conf and restart the server.' \
  "its hint says what to do"
lacks "$out" 'FATAL' "no FATAL (not 'cannot create PGC_POSTMASTER variables after startup')"
ok "$(grep -c 'must be loaded via' <<<"$out") $(grep -c 'still here' <<<"$out")" "2 1" \
  "a second try says the same, and the session goes on"
ok "$(psql -qAtX -d postgres -c "SELECT count(*) FROM pg_extension WHERE extname = 'bc_join'")" 0 \
  "nothing was created"

out=$(psql -X -d had -v VERBOSITY=verbose -c "SELECT bc_join.library_version()" -c "SELECT bc_join.compute_now() IS NOT NULL AS alive" 2>&1)
has "$out" 'ERROR:  F0000: bc_join must be loaded via "shared_preload_libraries"' \
  "a database that has the extension: its functions say the same"
lacks "$out" 'FATAL' "and no FATAL there either"

psql -qAtX -d postgres -c "ALTER SYSTEM RESET shared_preload_libraries" >/dev/null
"$top/tools/pg-throwaway" stop "$S/pg"
"$top/tools/pg-throwaway" start "$S/pg" "$port" "$BCJ_KEY_DIR" test.bc-join.local >/dev/null
ok "$(psql -qAtX -d postgres -c "CREATE EXTENSION bc_join" -c "SELECT extversion = bc_join.library_version() FROM pg_extension WHERE extname = 'bc_join'" 2>&1)" t \
  "restarted with bc_join preloaded, CREATE EXTENSION works"
ok "$(psql -qAtX -d had -c "SELECT bc_join.library_version() IS NOT NULL")" t \
  "and the database that had it works again"
[ "$failed" -eq 0 ]
