# bench/sections/prune.sh: section 4's last paragraph:
# bc_join.prune_attestation_uses() over BENCH_PRUNE_ROWS expired rows, called
# in a loop while a join run goes on; the join rate before, during and after.
# Sourced by bench/run.

prune_run() {
  log "prune: $PRUNE_ROWS expired attestation_uses rows"
  sqlb -v n="$PRUNE_ROWS" <<'SQL' >/dev/null
  INSERT INTO bc_join.attestation_uses (attestor, subject, used_at, expires_at)
    SELECT 'bench', sha256(('use-' || g)::bytea), now() - interval '2 days', now() - interval '1 day'
    FROM generate_series(1, :n) g;
  VACUUM ANALYZE bc_join.attestation_uses;
SQL
  ensure_sql $((EST * (PRUNE_SECS + 2)))
  PR=$W/runs/prune
  mkdir -p "$PR"
  sqlb -c "CHECKPOINT" -c "SELECT bc_join.attestor_stats_reset()" >/dev/null
  lead=$(( PRUNE_SECS / 6 > 2 ? PRUNE_SECS / 6 : 2 ))
  t0=$(date +%s.%N)
  (cd "$PR" && pgbench -n -M prepared -f "$ROOT/bench/join.pgbench" -c "$GCLIENTS" -j "$(( GCLIENTS < NPROC ? GCLIENTS : NPROC ))" \
    -T "$PRUNE_SECS" -P 1 bench >out 2>progress) &
  PGB=$!; PIDS+=("$PGB")
  sleep "$lead"
  ps=$(date +%s.%N)
  calls=0
  while n=$(sqlb -c "SELECT bc_join.prune_attestation_uses()"); [ "$n" -gt 0 ]; do calls=$((calls + 1)); done
  pe=$(date +%s.%N)
  wait "$PGB" || die "pgbench during the prune"
  left=$(sqlb -c "SELECT count(*) FROM bc_join.attestation_uses WHERE attestor = 'bench'")
  [ "$left" = 0 ] || INVALID+=("prune left $left rows")
  PRUNE_S=$(awk -v a="$ps" -v b="$pe" 'BEGIN { printf "%.1f", b - a }')
  # pgbench -P 1: "progress: T s, R tps, ..." for the second ending at T.
  read -r PR_BEFORE PR_DURING PR_AFTER < <(awk -v ps="$(awk -v a="$t0" -v b="$ps" 'BEGIN { print b - a }')" \
    -v pe="$(awk -v a="$t0" -v b="$pe" 'BEGIN { print b - a }')" '
    /^progress:/ { t = $2 + 0; r = $4 + 0
      if (t <= ps) { b += r; nb++ } else if (t - 1 >= pe) { a += r; na++ } else { d += r; nd++ } }
    END { printf "%s %s %s\n", nb ? b / nb : "nan", nd ? d / nd : "nan", na ? a / na : "nan" }' "$PR/progress")
  PRUNE_DONE_IN_RUN=$(awk -v a="$t0" -v b="$pe" -v s="$PRUNE_SECS" 'BEGIN { print (b - a <= s) ? "yes" : "no" }')
  log "prune: $PRUNE_ROWS rows in $PRUNE_S s ($calls calls); joins/s before $(fmt "$PR_BEFORE"), during $(fmt "$PR_DURING"), after $(fmt "$PR_AFTER")"
}

prune_report() {
  if ! bench_selected growth; then
    echo "### 4. Growth"
    echo
  fi
  echo
  echo "\`bc_join.prune_attestation_uses()\` (batches of 5,000) over $(printf "%'d" "$PRUNE_ROWS") expired rows, called in a loop from ${lead} s into a $PRUNE_SECS s join run at $GCLIENTS clients: done in **$PRUNE_S s** ($calls calls$( [ "$PRUNE_DONE_IN_RUN" = no ] && echo ', after the join run ended')); joins/s before $(fmt "$PR_BEFORE"), **during $(fmt "$PR_DURING")** ($(ratio "$PR_DURING" "$PR_BEFORE") of before), after $(fmt "$PR_AFTER")."
}
