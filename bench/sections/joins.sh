# bench/sections/joins.sh: section 1, joins per second through SQL
# (bench/join.pgbench) against the plain-SQL ceiling of the same row work
# (bench/ceiling.pgbench) at each client count, p50/p99 latency and WAL per
# transaction, and the same with one token for every join.  Sourced by
# bench/run.

declare -gA J_TPS J_P50 J_P99 J_WAL C_TPS C_P50 C_P99 C_WAL P_BAD
HOT_C=${BENCH_HOT_CLIENTS:-8}
BEST_C="" BEST="" BEST_CEIL=""

# pgpair NAME SCRIPT CLIENTS: the two halves of one point (NAME-a, NAME-b,
# SECS/2 each) merged: TPS the mean of the two, P50/P99 over both latency logs.
# Each point runs join, ceiling, ceiling, join (ABBA), so that the VM's speed
# drifting during a point weighs on both sides alike.
HALF=$(( SECS / 2 > 1 ? SECS / 2 : 1 ))
pgmerge() {  # pgmerge NAME TPS_A TPS_B WAL_A WAL_B
  TPS=$(awk -v a="$2" -v b="$3" 'BEGIN { print (a + b) / 2 }')
  WALKB=$(awk -v a="$4" -v b="$5" 'BEGIN { printf "%.1f", (a + b) / 2 }')
  sort -n -m "$W/runs/$1-a/lat" "$W/runs/$1-b/lat" >"$W/runs/$1.lat"
  P50=$(pct "$W/runs/$1.lat" 50); P99=$(pct "$W/runs/$1.lat" 99)
}

joins_run() {
  for c in $CLIENTS; do
    ensure_sql "$(per_run "$SECS")"
    reset_nodes
    P_BAD[$c]=""
    pgrun "join-c$c-a" "$ROOT/bench/join.pgbench" "$c" "$HALF"; ja=$TPS jwa=$WALKB
    [ "$RUN_OK" = 1 ] || P_BAD[$c]=1
    reset_nodes
    pgrun "ceiling-c$c-a" "$ROOT/bench/ceiling.pgbench" "$c" "$HALF"; ca=$TPS cwa=$WALKB
    [ "$RUN_OK" = 1 ] || P_BAD[$c]=1
    reset_nodes
    pgrun "ceiling-c$c-b" "$ROOT/bench/ceiling.pgbench" "$c" "$HALF"; cb=$TPS cwb=$WALKB
    [ "$RUN_OK" = 1 ] || P_BAD[$c]=1
    reset_nodes
    pgrun "join-c$c-b" "$ROOT/bench/join.pgbench" "$c" "$HALF"; jb=$TPS jwb=$WALKB
    [ "$RUN_OK" = 1 ] || P_BAD[$c]=1
    pgmerge "join-c$c" "$ja" "$jb" "$jwa" "$jwb"
    J_TPS[$c]=$TPS J_P50[$c]=$P50 J_P99[$c]=$P99 J_WAL[$c]=$WALKB
    pgmerge "ceiling-c$c" "$ca" "$cb" "$cwa" "$cwb"
    C_TPS[$c]=$TPS C_P50[$c]=$P50 C_P99[$c]=$P99 C_WAL[$c]=$WALKB
    log "point c$c: joins $(fmt "${J_TPS[$c]}")/s (p99 $(fmt "${J_P99[$c]}") ms), ceiling $(fmt "${C_TPS[$c]}")/s: $(ratio "${J_TPS[$c]}" "${C_TPS[$c]}")"
  done
  # One token for every join: the token row is the one lock every join queues on.
  ensure_sql "$(per_run "$SECS")" "$W/token1"
  reset_nodes
  pgrun "join-1token-c$HOT_C" "$ROOT/bench/join.pgbench" "$HOT_C" "$SECS"
  H_TPS=$TPS H_P50=$P50 H_P99=$P99
  reset_nodes
  NTOK=1 pgrun "ceiling-1token-c$HOT_C" "$ROOT/bench/ceiling.pgbench" "$HOT_C" "$SECS"
  HC_TPS=$TPS HC_P50=$P50 HC_P99=$P99
  reset_nodes
  BEST_C=""; BEST=0; BEST_CEIL=0
  for c in $CLIENTS; do
    [ -z "${P_BAD[$c]}" ] || continue     # an invalid point is no result
    if awk -v a="${J_TPS[$c]}" -v b="$BEST" 'BEGIN { exit !(a > b) }'; then BEST=${J_TPS[$c]}; BEST_C=$c; fi
    if awk -v a="${C_TPS[$c]}" -v b="$BEST_CEIL" 'BEGIN { exit !(a > b) }'; then BEST_CEIL=${C_TPS[$c]}; fi
  done
}

joins_report() {
  echo "### 1. Joins through SQL, against the plain-SQL ceiling"
  echo
  echo "pgbench \`bench/join.pgbench\` (one \`SELECT bc_join(...)\` per transaction) and \`bench/ceiling.pgbench\` (the same row work as plain SQL, one pipelined transaction)."
  echo
  echo "Each point starts from 1,000 joined nodes and is run in four halves of $HALF s (join, ceiling, ceiling, join), the two runs of each side merged (rates averaged, latencies pooled), so that the VM's speed drifting during a point weighs on both sides alike."
  echo
  echo "| clients | joins/s | p50 ms | p99 ms | WAL kB/join | ceiling tx/s | ceiling p50 ms | ceiling p99 ms | ceiling WAL kB/tx | joins / ceiling | joins / crypto ceiling |"
  echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  for c in $CLIENTS; do
    if [ -n "${P_BAD[$c]}" ]; then
      echo "| $c | invalid (see below) | | | | | | | | | |"
      continue
    fi
    echo "| $c | $(fmt "${J_TPS[$c]}") | $(fmt "${J_P50[$c]}") | $(fmt "${J_P99[$c]}") | ${J_WAL[$c]} | $(fmt "${C_TPS[$c]}") | $(fmt "${C_P50[$c]}") | $(fmt "${C_P99[$c]}") | ${C_WAL[$c]} | $(ratio "${J_TPS[$c]}" "${C_TPS[$c]}") | $(ratio "${J_TPS[$c]}" "$CRYPTO_CEIL") |"
  done
  echo
  echo "With one token for all (every join locks and updates the same token row), $HOT_C clients: $(fmt "$H_TPS") joins/s (p50 $(fmt "$H_P50") ms, p99 $(fmt "$H_P99") ms) against a ceiling of $(fmt "$HC_TPS") tx/s (p50 $(fmt "$HC_P50") ms, p99 $(fmt "$HC_P99") ms): $(ratio "$H_TPS" "$HC_TPS")."
  echo
  echo "Best: $(fmt "$BEST") joins/s at $BEST_C clients = **$(ratio "$BEST" "${C_TPS[$BEST_C]}") of the ceiling at the same client count** ($(ratio "$BEST" "$BEST_CEIL") of the best ceiling, $(fmt "$BEST_CEIL") tx/s). p99 at 8 clients: **$( [ -n "${J_P99[8]:-}" ] && fmt "${J_P99[8]}" || echo n/a) ms**."
  echo
}
