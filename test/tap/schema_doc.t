#!/usr/bin/env bash
# schema_doc.t: docs/schema.md says what a fresh CREATE EXTENSION bc_join
# makes: its Tables, Views and Settings tables name every table, view and
# bc_join.* setting (and nothing else), and its generated part lists every
# function each role may run, with its comment, and every table, view and
# sequence it may read or write (test/tools/schema-doc check; `schema-doc
# write DB docs/schema.md` brings it up to date).  It also proves the check
# can fail: a copy of the page without one granted function and one table
# is refused, naming both.  Needs the environment test/run-all sets
# (PGHOST, PGPORT, BCJ_*).
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
. "$(dirname "$0")/../lib/tap.sh"

echo "1..4"
S="$BCJ_SCRATCH/schema_doc"
rm -rf "$S"; mkdir -p "$S"
psql -qAtX -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS bcj_schema_doc" \
  -c "CREATE DATABASE bcj_schema_doc" >/dev/null
psql -qAtX -d bcj_schema_doc -c "CREATE EXTENSION bc_join"
tool="$top/test/tools/schema-doc"

out=$("$tool" check bcj_schema_doc "$top/docs/schema.md" 2>&1); st=$?
ok "$st" 0 "docs/schema.md matches the catalog"
[ "$st" -eq 0 ] || echo "$out" | sed 's/^/# /'

# The same page without revoke_node (granted to operators) and without the table discovery_machines.
grep -v -e '^| `bc_join.revoke_node(' -e '^| `discovery_machines` |' "$top/docs/schema.md" >"$S/schema.md"
out=$("$tool" check bcj_schema_doc "$S/schema.md" 2>&1); st=$?
ok "$st" 1 "a page that misses a granted function and a table fails the check"
ok "$(echo "$out" | grep -c 'lacks: | `bc_join.revoke_node(node_id text, reason text)`')" 2 "naming the function (in the platform and the tenant operators' lists)"
ok "$(echo "$out" | grep -c '^## Tables misses discovery_machines$')" 1 "and the table"
[ "$failed" -eq 0 ]
