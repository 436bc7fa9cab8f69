# bench/lib.sh: what every section of bench/run shares, sourced by bench/run
# (never run by itself): the settings, the build (make, make install), the
# keys (tools/bc-join-keygen), the throwaway cluster (tools/pg-throwaway, set
# to durability as in production), the bench databases, the prepared join
# requests (bench/genreq.c), one pgbench run, and the report's number formats.
#
# A section is bench/sections/NAME.sh defining NAME_run (measure) and
# NAME_report (its part of the tables, on stdout); bench/run sources them all.
# Everything here expects the working directory to be the top of the tree.
QUICK=${BENCH_QUICK:-0}
if [ "$QUICK" = 1 ]; then
  SECS=${BENCH_SECS:-5}
  GROWTH=${BENCH_GROWTH:-"1000 100000"}
  PRUNE_ROWS=${BENCH_PRUNE_ROWS:-100000}
  PRUNE_SECS=${BENCH_PRUNE_SECS:-20}
  PROFILE_JOINS=${BENCH_PROFILE_JOINS:-50}
  STEADY_SECS=${BENCH_STEADY_SECS:-10}
  ATT_JOINS=${BENCH_ATT_JOINS:-5}
  SESS_N=${BENCH_SESS_N:-40}
  UPDATE_DOC=${BENCH_UPDATE_DOC:-0}
else
  SECS=${BENCH_SECS:-20}
  GROWTH=${BENCH_GROWTH:-"1000 100000 1000000"}
  PRUNE_ROWS=${BENCH_PRUNE_ROWS:-1000000}
  PRUNE_SECS=${BENCH_PRUNE_SECS:-60}
  PROFILE_JOINS=${BENCH_PROFILE_JOINS:-300}
  STEADY_SECS=${BENCH_STEADY_SECS:-120}
  ATT_JOINS=${BENCH_ATT_JOINS:-20}
  SESS_N=${BENCH_SESS_N:-200}
  UPDATE_DOC=${BENCH_UPDATE_DOC:-1}
fi
CLIENTS=${BENCH_CLIENTS:-"1 2 4 8 16"}
SESS_CLIENTS=${BENCH_SESS_CLIENTS:-"1 16"}
if [ "$QUICK" = 1 ]; then HTTP_CLIENTS=${BENCH_HTTP_CLIENTS:-"1 8"}; else HTTP_CLIENTS=${BENCH_HTTP_CLIENTS:-$CLIENTS}; fi
TOKENS=${BENCH_TOKENS:-64}
GCLIENTS=${BENCH_GROWTH_CLIENTS:-8}
HTTP=${BENCH_HTTP:-1}
PORT=${BENCH_PORT:-24329}    # below the kernel's ephemeral range (32768-60999): no client socket holds one
CFPORT=$((PORT + 1))
GWPORT=$((PORT + 2))
NPROC=$(nproc)
STARTED_AT=$(date -u +%Y-%m-%dT%H:%MZ)
T_START=$(date +%s)

log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }

if [ "$(id -u)" -ne 0 ]; then
  die "run as root (the cluster runs as the postgres OS user)"
fi

# A PG_CONFIG in the environment picks the PostgreSQL: make honours it, and
# its bindir goes first in PATH for pg_config, psql, pgbench and
# tools/pg-throwaway.
if [ -n "${PG_CONFIG:-}" ]; then
  PATH="$("$PG_CONFIG" --bindir):$PATH"
  export PG_CONFIG PATH
fi

# ------------------------------------------------------------- packages
# Bench-only packages, not in tools/install-deps, so the test install stays lean.
bench_pkgs=(wrk golang-cfssl valgrind linux-perf)
bench_packages() {
  local p missing=()
  for p in "${bench_pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    log "installing bench packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# ------------------------------------------------------------------ build
# bench_build: tools/install-deps, make world (the extension and the
# programs), make install (BENCH_NO_BUILD=1: use what is installed).  A tree
# that does not build is not measured.
bench_build() {
  [ "${BENCH_NO_BUILD:-0}" != 1 ] || return 0
  local makelog=${TMPDIR:-/tmp}/bc_join-bench-make.log
  log "building and installing (tools/install-deps, make world, make install)"
  bash tools/install-deps >/dev/null
  if make -s world >"$makelog" 2>&1 && make -s install >>"$makelog" 2>&1; then
    rm -f "$makelog"
  else
    tail -30 "$makelog" >&2
    die "make world or make install failed: see $makelog"
  fi
}

# ---------------------------------------------------------------- scratch
PIDS=()
as_pg() { (cd / && runuser -u postgres -- "$@"); }
# bench_scratch: the scratch directory $W, removed on exit unless kept.
bench_scratch() {
  if [ -n "${BENCH_DIR:-}" ]; then
    W=$BENCH_DIR
    rm -rf "$W"
    mkdir -p "$W"
  else
    W=$(mktemp -d /tmp/bc_join-bench.XXXXXX)
  fi
  chmod 0755 "$W"
  mkdir -p "$W/req" "$W/runs" "$W/cfssl" "$W/cg"
  BIN=$(pg_config --bindir)
  DATA=$W/pg/data
  SOCK=$W/pg/sock
  unset PGDATABASE PGSERVICE PGOPTIONS
  trap bench_cleanup EXIT
  trap 'exit 130' INT TERM
}
bench_cleanup() {
  local rc=$? p
  set +e
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  [ -z "${W:-}" ] || tools/pg-throwaway stop "$W/pg" >/dev/null 2>&1
  [ -z "${FLEET_HA_DIR:-}" ] || tools/ha-throwaway stop "$FLEET_HA_DIR" >/dev/null 2>&1
  if [ "${BENCH_KEEP:-0}" = 1 ] || [ $rc -ne 0 ]; then
    log "scratch kept in $W"
  else
    rm -rf "$W"
  fi
  exit $rc
}

# ------------------------------------------------------ keys and cluster
# start_pg / stop_pg: the cluster of tools/pg-throwaway in $W/pg.
start_pg() {
  local env_line
  env_line=$(tools/pg-throwaway start "$W/pg" "$PORT" "$W/keys" bench.example) || die "cluster start"
  export $env_line
}
stop_pg() { tools/pg-throwaway stop "$W/pg"; }
# bench_cluster: keys (tools/bc-join-keygen) and a cluster (tools/pg-throwaway)
# made durable as in production: every commit is flushed before it returns.
bench_cluster() {
  log "keys and a throwaway cluster in $W (fsync on, synchronous_commit on)"
  bash tools/bc-join-keygen "$W/keys" >/dev/null
  start_pg
  psql -qAtX -v ON_ERROR_STOP=1 -d postgres >/dev/null <<'SQL'
ALTER SYSTEM SET max_connections = 100;
ALTER SYSTEM SET fsync = on;
ALTER SYSTEM SET synchronous_commit = on;
ALTER SYSTEM SET full_page_writes = on;
ALTER SYSTEM SET shared_buffers = '2GB';
ALTER SYSTEM SET max_wal_size = '16GB';
ALTER SYSTEM SET checkpoint_timeout = '1h';
SQL
  stop_pg
  start_pg
  [ "$(psql -qAtX -d postgres -c "SELECT current_setting('fsync') || current_setting('shared_buffers')")" = on2GB ] \
    || die "the cluster did not take the bench settings"
}

# sqlb: psql on the database $DB (bench unless set).
sqlb() { psql -qAtX -v ON_ERROR_STOP=1 -d "${DB:-bench}" "$@"; }
# setup_db DB TOKENFILE: a database with the extension, a tenant, site and
# pool, $TOKENS join tokens (written to TOKENFILE) and the bench schema.
setup_db() {
  psql -qAtX -v ON_ERROR_STOP=1 -d postgres -c "CREATE DATABASE $1"
  DB=$1 sqlb -v ntok="$TOKENS" <<'SQL' >/dev/null
CREATE EXTENSION bc_join;
CREATE EXTENSION pg_walinspect;     -- the WAL of a run split into records and full-page images
CREATE SCHEMA bench;
SELECT bc_join.create_tenant('bench') AS t \gset
SELECT bc_join.create_site(:'t', 'dc1') AS s \gset
SELECT bc_join.create_pool(:'t', :'s', 'workers') AS p \gset
CREATE TABLE bench.tokens (n int PRIMARY KEY, token text NOT NULL, id text NOT NULL);
INSERT INTO bench.tokens (n, token, id)
  SELECT g - 1, tok, split_part(tok, '.', 1)
  FROM generate_series(1, :ntok) g,
       LATERAL (SELECT bc_join.create_join_token(:'t', :'p', uses => 1000000, ttl => '7 days')
                WHERE g IS NOT NULL) x(tok);    -- g: one call per row, not one for all
CREATE TABLE bench.requests (id bigint PRIMARY KEY, req jsonb NOT NULL);
CREATE SEQUENCE bench.seq;
CREATE SEQUENCE bench.cseq;
SQL
  [ "$(DB=$1 sqlb -c "SELECT count(DISTINCT id) FROM bench.tokens")" = "$TOKENS" ] || die "$1: not $TOKENS distinct tokens"
  DB=$1 sqlb -c "SELECT token FROM bench.tokens ORDER BY n" >"$2"
  chmod 0600 "$2"
}

# bench_databases: the cfssl database, the bench database and its tokens, the
# service keys, bench/genreq.c built, and a first join (the ceiling's sample).
bench_databases() {
  psql -qAtX -v ON_ERROR_STOP=1 -d postgres -c "CREATE DATABASE cfssl"
  setup_db bench "$W/tokens"
  head -1 "$W/tokens" >"$W/token1"
  sqlb -c "SELECT bc_join.service_keys()" >"$W/service-keys.json"
  log "building bench/genreq.c"
  cc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Isrc/common bench/genreq.c src/common/*.c \
    $(pkg-config --cflags --libs tss2-mu) -lssl -lcrypto -ljansson -o "$W/genreq"
  SQL_TOKENS=$W/tokens
  ensure_sql 1
  make_sample
}

# --------------------------------------------------------------- requests

SQL_NEXT=1            # next request id for the SQL table (contiguous from 1)
HTTP_NEXT=1000000000  # ids of the gateway's bodies, never in the table
# gen START COUNT OUT: COUNT requests over NPROC processes, concatenated into OUT.rows/OUT.cfssl
gen() {
  local start=$1 count=$2 out=$3 tokens=${4:-$W/tokens} k per s n pids=()
  per=$(( (count + NPROC - 1) / NPROC ))
  for ((k = 0; k < NPROC; k++)); do
    s=$((start + k * per)); n=$per
    [ $((s + n)) -gt $((start + count)) ] && n=$((start + count - s))
    [ "$n" -gt 0 ] || continue
    "$W/genreq" "$W/service-keys.json" "$tokens" "$s" "$n" "$out.part$k" & pids+=($!)
  done
  for k in "${pids[@]}"; do wait "$k" || die "genreq"; done
  cat "$out".part*.rows >"$out.rows"
  cat "$out".part*.cfssl >"$out.cfssl"
  rm -f "$out".part*
}
# Requests left in bench.requests for the SQL runs.
sql_left() {
  sqlb -c "SELECT $((SQL_NEXT - 1)) - (SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM bench.seq)"
}
# ensure_sql N: at least N unused requests in bench.requests.
# ensure_sql N TOKENFILE: the same, all sealed with the tokens of TOKENFILE
# (requests left over from another token file are skipped first).
SQL_TOKENS=""
ensure_sql() {
  local need=$1 tokens=${2:-$W/tokens} left add
  if [ "$tokens" != "$SQL_TOKENS" ]; then
    sqlb -c "SELECT setval('bench.seq', $((SQL_NEXT - 1)))" >/dev/null
    SQL_TOKENS=$tokens
  fi
  left=$(sql_left)
  [ "$left" -ge "$need" ] && return 0
  add=$((need - left))
  log "making $add join requests (fresh key and CSR each)"
  gen "$SQL_NEXT" "$add" "$W/req/sql$SQL_NEXT" "$tokens"
  sqlb -c "\\copy bench.requests FROM '$W/req/sql$SQL_NEXT.rows'"
  rm -f "$W/req/sql$SQL_NEXT".*
  SQL_NEXT=$((SQL_NEXT + add))
}
# The highest rate seen so far sizes the next batch of requests.
EST=${BENCH_EST_RATE:-2000}
note_rate() { EST=$(awk -v e="$EST" -v r="$1" 'BEGIN { r = r * 1.5 + 100; print (r > e) ? int(r) : e }'); }
per_run() { echo $(( EST * ($1 + 2) )); }

# A first join makes the sample the plain-SQL ceiling copies its sizes from
# (in the database $DB).
make_sample() {
  sqlb -c "SELECT bc_join(r.req)->>'status' FROM bench.requests r WHERE r.id = (SELECT nextval('bench.seq'))" | grep -qx issued \
    || die "${DB:-bench}: the first join was not issued"
  sqlb <<'SQL'
CREATE TABLE bench.sample AS
  SELECT n.tenant_id, n.site_id, n.pool_id, n.trust, n.claims, c.certificate, e.payload
  FROM bc_join.nodes n
  JOIN bc_join.node_certs c ON c.node_id = n.id
  JOIN bc_join.events e ON e.type = 'node.joined' AND e.payload->>'nodeId' = n.id
  LIMIT 1;
SQL
}

# ------------------------------------------------------------ measuring
# reset_nodes: every point of section 1 and of perf starts from the same state,
# 1,000 joined nodes (bulk-loaded) and freshly vacuumed token rows.
reset_nodes() {
  # the issuance log is append-only: its trigger is off for this session alone
  sqlb -c "SET session_replication_role = replica" -c "TRUNCATE bc_join.nodes, bc_join.events, bc_join.audit_log CASCADE"
  sqlb -v start=1 -v n=1000 -f bench/load-nodes.sql >/dev/null
  sqlb -c "VACUUM bc_join.join_tokens" >/dev/null
}
# pct FILE P: the P-th percentile (nearest rank) of the sorted numbers in FILE.
pct() { awk -v p="$2" '{ a[NR] = $1 } END { if (NR == 0) { print "nan"; exit } i = int(NR * p / 100 + 0.999999); if (i < 1) i = 1; if (i > NR) i = NR; print a[i] }' "$1"; }
fmt() { awk -v x="$1" 'BEGIN { if (x == "nan" || x == "") print "n/a"; else { a = (x < 0) ? -x : x; printf "%.*f", (a >= 100 ? 0 : (a >= 10 ? 1 : 2)), x } }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a !~ /^-?[0-9.]+$/ || b !~ /^-?[0-9.]+$/ || b + 0 == 0) print "n/a"; else printf "%.0f%%", 100 * a / b }'; }
INVALID=()
declare -gA BAD_RUN      # BAD_RUN[name]=reason: the run's numbers are no result

# pgrun_refill N: at least N unused requests in the main database, its nodes
# back to the 1,000 of every point (what a point made again starts from).  A
# section with databases of its own sets PGRUN_REFILL to its own (growth).
pgrun_refill() {
  ensure_sql "$1" "${SQL_TOKENS:-$W/tokens}"
  reset_nodes
}

# pgrun NAME SCRIPT CLIENTS SECS: one pgbench run; sets TPS P50 P99 (ms) and
# RUN_OK (1, or 0 when the run is not valid: it is then in BAD_RUN and
# INVALID, and its numbers must not stand in a table as a result).  A join
# run that used up the prepared requests (it measured the empty statement
# at the end) is made again once with a pool sized from the rate it showed.
pgrun() {
  local name=$1 script=$2 c=$3 secs=$4 d=$W/runs/$1 j before admitted other processed avail=""
  RUN_OK=1
  # what is left in this run's database: NREQ (or SQL_NEXT - 1) less what bench.seq handed out
  [ "$script" = "$ROOT/bench/join.pgbench" ] && avail=$(sqlb -c "SELECT ${NREQ:-$((SQL_NEXT - 1))} - (SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM bench.seq)")
  j=$(( c < NPROC ? c : NPROC ))
  mkdir -p "$d"
  sqlb -c "CHECKPOINT" -c "SELECT bc_join.attestor_stats_reset()" >/dev/null
  before=$(sqlb -c "SELECT count(*) FROM bc_join.nodes")
  lsn0=$(sqlb -c "SELECT pg_current_wal_insert_lsn()")
  if ! (cd "$d" && pgbench -n -M prepared -f "$script" -c "$c" -j "$j" -T "$secs" -l --log-prefix=tx \
    -D nreq="${NREQ:-$((SQL_NEXT - 1))}" -D ntok="${NTOK:-$TOKENS}" "${DB:-bench}" >out 2>err); then
    cat "$d/err" >&2
    # PGRUN_SOFT=1 (the hwkeys section): a failed point is a problem of this run,
    # reported, not the end of it (the sections before it are not lost)
    [ "${PGRUN_SOFT:-0}" = 1 ] || die "pgbench $name"
    INVALID+=("$name: pgbench failed: $(grep -m1 -E 'ERROR|DETAIL' "$d/err" | cut -c1-300)")
    BAD_RUN[$name]="pgbench failed"
    RUN_OK=0 TPS=n/a P50=n/a P99=n/a WALKB=n/a
    rm -f "$d"/tx.*
    log "WARNING $name: pgbench failed (see the report's problems)"
    return
  fi
  TPS=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$d/out")
  processed=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$d/out")
  WALKB=$(sqlb -c "SELECT round(pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '$lsn0') / greatest($processed, 1) / 1024.0, 1)")
  # of which full-page images (the first change of each page after the checkpoint above), and in B-trees
  read -r FPIKB BTFPIKB < <(sqlb -F' ' -c "SELECT round(coalesce(sum(fpi_size), 0) / greatest($processed, 1) / 1024.0, 1),
      round(coalesce(sum(fpi_size) FILTER (WHERE \"resource_manager/record_type\" = 'Btree'), 0) / greatest($processed, 1) / 1024.0, 1)
      FROM pg_get_wal_stats('$lsn0', pg_current_wal_flush_lsn())" 2>/dev/null || echo "n/a n/a")
  cat "$d"/tx.* | awk '{ print $3 / 1000 }' | sort -n >"$d/lat"
  P50=$(pct "$d/lat" 50); P99=$(pct "$d/lat" 99)
  rm -f "$d"/tx.*
  if [ "$script" = "$ROOT/bench/join.pgbench" ]; then
    note_rate "$TPS"
    if [ "$processed" -gt "$avail" ] && [ -z "${PGRUN_AGAIN:-}" ]; then
      log "$name: $processed transactions but only $avail requests were prepared: again with more"
      "${PGRUN_REFILL:-pgrun_refill}" "$(( $(per_run "$secs") * 2 ))"
      PGRUN_AGAIN=1 pgrun "$@"
      return
    fi
    read -r admitted other < <(sqlb -F' ' -c "SELECT coalesce(sum(calls) FILTER (WHERE outcome = 'admitted'), 0), coalesce(sum(calls) FILTER (WHERE outcome <> 'admitted'), 0) FROM bc_join.attestor_statistics")
    if [ "$admitted" != "$processed" ] || [ "$other" != 0 ]; then
      INVALID+=("$name: $processed transactions, $admitted joins issued, $other other outcomes")
      BAD_RUN[$name]="$processed transactions, $admitted joins issued"
      RUN_OK=0
      log "WARNING $name: $processed transactions but $admitted issued, $other other"
    fi
  else
    # Every ceiling transaction found its token and inserted its node.
    if [ "$(sqlb -c "SELECT count(*) - $before FROM bc_join.nodes")" != "$processed" ]; then
      INVALID+=("$name: $processed transactions but another number of nodes inserted")
      BAD_RUN[$name]="node count does not match the transactions"
      RUN_OK=0
      log "WARNING $name: node count does not match the transactions"
    fi
  fi
  log "$name: $TPS tx/s, p50 $(fmt "$P50") ms, p99 $(fmt "$P99") ms ($processed transactions, $WALKB kB of WAL each)"
}

# ------------------------------------------------------------- the report
# report_head: the opening marker, the command line and the machine.
report_head() {
  echo "<!-- bench:begin (written by bench/run; do not edit by hand) -->"
  echo
  echo "Run of $STARTED_AT, $(( ($(date +%s) - T_START) / 60 )) minutes: \`$( [ "$QUICK" = 1 ] && echo 'BENCH_QUICK=1 ')bash bench/run$( [ -n "$ONLY" ] && echo " --only $ONLY")\`$( [ "$QUICK" = 1 ] && echo ' (quick mode: short runs, not the numbers to quote)')."
  echo
  echo "| machine | |"
  echo "| --- | --- |"
  echo "| CPU | $(lscpu | sed -n 's/^Model name: *//p' | head -1), $NPROC cores |"
  echo "| memory | $(free -g | awk '/^Mem:/ { print $2 }') GiB |"
  echo "| system | $(. /etc/os-release; echo "$PRETTY_NAME"), Linux $(uname -r) |"
  echo "| PostgreSQL | $("$BIN/postgres" --version | awk '{ print $3 }'): fsync on, synchronous_commit on, full_page_writes on, shared_buffers 2GB, checkpoint before each point |"
  echo "| OpenSSL | $(openssl version | awk '{ print $2 }') |"
  echo "| per point | $SECS s; requests over $TOKENS tokens; load tool on the same 2 cores |"
  echo
}
# report_end: what was not valid in this run, and the closing marker.
report_end() {
  if [ "${#INVALID[@]}" -gt 0 ]; then
    echo "**Problems in this run** (the numbers above they touch are not valid):"
    echo
    for x in "${INVALID[@]}"; do echo "- $x"; done
    echo
  fi
  echo "<!-- bench:end -->"
}
# bench_finish: print the report $R, write it into docs/performance.md when
# UPDATE_DOC is 1, and fail when a point was not valid.
bench_finish() {
  cat "$R"
  if [ "$UPDATE_DOC" = 1 ]; then
    DOC=docs/performance.md
    if [ -f "$DOC" ] && grep -q '<!-- bench:begin' "$DOC" && grep -q '<!-- bench:end -->' "$DOC"; then
      awk -v rf="$R" '
        /<!-- bench:begin/ { while ((getline l < rf) > 0) print l; skip = 1; next }
        /<!-- bench:end -->/ { skip = 0; next }
        !skip { print }' "$DOC" >"$DOC.tmp" && mv "$DOC.tmp" "$DOC"
      log "tables written into $DOC"
    else
      log "no bench markers in $DOC: tables left in $R only"
      BENCH_KEEP=1
    fi
  fi
  if [ "${BENCH_KEEP:-0}" = 1 ]; then cp "$R" "$W/results.kept.md"; fi
  log "done in $(( ($(date +%s) - T_START) / 60 )) min"
  [ "${#INVALID[@]}" -eq 0 ]
}
