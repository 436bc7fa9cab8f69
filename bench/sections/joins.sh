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
  joins_limit_report
}

# joins_limit_report: issue 49's first target, joins ≥ 95% of the physical
# limit at every client count, and where it is missed by how many µs of the
# machine and why, from this run's numbers only.  The limit is the ceiling's
# transaction plus the four EC operations at openssl speed's rate (section 2,
# CRYPTO_US): 1 / (1/ceiling + CRYPTO_US).  Why: at 1 client the EC arithmetic
# on one core; the instructions a join runs beyond the ceiling's transaction
# and the four EC calls (section 5, when it ran); the split of join − ceiling
# by part (section 6, at the client count it ran at).  A missing input is n/a.
joinparts() { local out="" p; for p in "$@"; do out+="${out:+; }$p"; done; printf '%s' "$out"; }
joins_limit_report() {
  local c v lim ju lu gap need why ec="" beyond="" perf_c="" met="" missed="" bad="" parts
  echo "**Against the physical limit (issue 49: ≥ 95% at every client count).** The limit: this point's ceiling transaction plus the four EC operations at \`openssl speed\`'s rate ($( [ -n "${CRYPTO_US:-}" ] && echo "section 2: $CRYPTO_US µs of the machine" || echo "section 2, not in this run: n/a")), 1 / (1/ceiling + that). µs of the machine = 1,000,000 / rate (both cores); \"95% needs\": how many µs a join must lose to reach 95% of the limit (a join's µs − the limit's µs / 0.95)."
  echo
  # Section 5: the instructions of the four EC calls (inclusive; EVP_DigestSign twice).
  if [ "${PROFILE_OK:-0}" = 1 ] && [ -s "$W/cg/join.txt" ]; then
    ec=$(awk -v n="$PROFILE_JOINS" '
      BEGIN { want["EVP_DigestVerify"]; want["EVP_PKEY_derive"]; want["EVP_DigestSign"] }
      /^ *[0-9,]+ \(/ { ir = $1; gsub(",", "", ir); f = $0; sub(/.*:/, "", f); sub(/ .*/, "", f)
        if ((f in want) && !(f in seen)) { seen[f] = 1; s += ir; k++ } }
      END { if (k == 3) printf "%.0f", s / n }' "$W/cg/join.txt")
    [ -z "$ec" ] || beyond=$(awk -v j="$IRJ" -v c="$IRC" -v e="$ec" 'BEGIN { printf "%.0f", (j - c - e) / 1000 }')
  fi
  [ "${PERF_OK:-0}" = 1 ] && perf_c=${PF_C_N:-}
  echo "| clients | joins/s | limit joins/s | joins / limit | a join, µs of the machine | the limit's µs | gap µs | 95% needs | why |"
  echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
  for c in $CLIENTS; do
    if [ -n "${P_BAD[$c]:-}" ]; then
      echo "| $c | invalid (see below) | n/a | n/a | n/a | n/a | n/a | n/a | n/a: the point is not valid |"
      bad+="${bad:+, }$c"
      continue
    fi
    read -r lim ju lu gap need < <(awk -v j="${J_TPS[$c]:-}" -v t="${C_TPS[$c]:-}" -v u="${CRYPTO_US:-}" 'BEGIN {
      ju = (j + 0 > 0) ? 1e6 / j : "nan"
      if (u == "" || t + 0 <= 0 || j + 0 <= 0) { print "nan", ju, "nan", "nan", "nan"; exit }
      lu = 1e6 / t + u
      print 1e6 / lu, ju, lu, ju - lu, ju - lu / 0.95 }')
    parts=()
    # 1 client: one backend, nothing overlaps: the EC arithmetic on one core.
    if [ "$c" = 1 ] && [ "$lim" != nan ]; then
      parts+=("$(awk -v j="${J_TPS[$c]}" -v t="${C_TPS[$c]}" -v u="$CRYPTO_US" 'BEGIN { o = 1 / (1 / t + 2 * u * 1e-6)
        printf "1 client: nothing overlaps, one backend runs the four EC operations on one core, 2 × %.1f = %.1f µs of the machine against the limit'"'"'s %.1f (both cores); the one-core limit 1 / (1/ceiling + 2 × %.1f µs) is %.0f joins/s, this join %.0f%% of it", u, 2 * u, u, u, o, 100 * j / o }')")
    fi
    [ -z "$beyond" ] || parts+=("$beyond k instructions a join beyond the limit's work (section 5)")
    if [ -n "$perf_c" ] && [ "$c" = "$perf_c" ]; then
      parts+=("$(awk -v jo="${PF_J[ossl]:-0}" -v co="${PF_C[ossl]:-0}" -v jp="${PF_J[pg]:-0}" -v cp="${PF_C[pg]:-0}" \
          -v jl="${PF_J[libc]:-0}" -v cl="${PF_C[libc]:-0}" -v jk="${PF_J[kernel]:-0}" -v ck="${PF_C[kernel]:-0}" \
          -v jb="${PF_J[ours]:-0}" -v cb="${PF_C[ours]:-0}" -v jt="$PF_J_TPS" -v ct="$PF_C_TPS" -v u="${CRYPTO_US:-}" -v c="$c" 'BEGIN {
        printf "section 6 at %s clients, join − ceiling %+.0f µs: OpenSSL %+d", c, 1e6 / jt - 1e6 / ct, jo - co
        if (u != "") printf " (%.0f of it the EC arithmetic at openssl speed'"'"'s rate)", u
        printf ", PostgreSQL %+d, the C library %+d, the kernel %+d, bc_join and jansson %+d", jp - cp, jl - cl, jk - ck, jb - cb }')")
    fi
    if [ "$lim" = nan ]; then
      why="n/a (no limit: section 2 did not run)"
      [ "${#parts[@]}" -eq 0 ] || why="no limit (section 2 did not run); $(joinparts "${parts[@]}")"
      v=n/a
    elif awk -v x="$need" 'BEGIN { exit !(x <= 0) }'; then
      why=met; v=met; met+="${met:+, }$c"
    else
      v="$(fmt "$need") µs less"
      missed+="${missed:+, }$c:$need"
      if [ "${#parts[@]}" -eq 0 ]; then why="n/a (section 5 not in this run; $( [ -n "$perf_c" ] && echo "section 6 ran at $perf_c clients only" || echo "section 6 neither"))"; else why=$(joinparts "${parts[@]}"); fi
    fi
    echo "| $c | $(fmt "${J_TPS[$c]:-}") | $(fmt "$lim") | $(ratio "${J_TPS[$c]:-}" "$( [ "$lim" = nan ] || echo "$lim")") | $(fmt "$ju") | $(fmt "$lu") | $(fmt "$gap") | $v | $why |"
  done
  echo
  if [ -n "$beyond" ]; then
    echo "Section 5's instructions: $(awk -v x="$IRJ" 'BEGIN { printf "%.2f", x / 1e6 }') M a join − $(awk -v x="$IRC" 'BEGIN { printf "%.2f", x / 1e6 }') M the ceiling's transaction − $(awk -v x="$ec" 'BEGIN { printf "%.2f", x / 1e6 }') M the four EC calls (\`EVP_DigestVerify\`, \`EVP_PKEY_derive\`, \`EVP_DigestSign\` twice, inclusive) = $beyond k a join the limit does not count."
    echo
  fi
  if [ -z "${CRYPTO_US:-}" ]; then
    echo "Target: n/a: section 2 (the crypto) did not run in this run, so there is no physical limit to compare with (add \`crypto\` to \`--only\`)$( [ -z "$bad" ] || echo "; invalid at: $bad clients")."
  else
    echo "Target met at: ${met:-none}$( [ -z "$met" ] || echo " clients"); missed at: $( [ -z "$missed" ] && echo none || echo "$missed" | sed 's/:[^,]*//g')$( [ -z "$missed" ] || { printf ' (by '; echo "$missed" | tr ',' '\n' | sed 's/^ *//' | while IFS=: read -r c v; do printf '%s µs of the machine a join at %s client%s, ' "$(fmt "$v")" "$c" "$( [ "$c" = 1 ] || echo s)"; done | sed 's/, $//'; printf ')'; } )$( [ -z "$bad" ] || echo "; invalid at: $bad clients")."
  fi
  echo
}
