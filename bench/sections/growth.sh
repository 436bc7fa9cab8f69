# bench/sections/growth.sh: section 4, growth: joins and the ceiling with
# 1,000 / 100,000 / 1,000,000 nodes already joined (BENCH_GROWTH, bulk-loaded
# by bench/load-nodes.sql), one database per point.  Sourced by bench/run.

# One database per point (bench_g<N>, same cluster, same keys), each holding
# exactly N joined nodes before every run.  The points are measured in
# rounds, in one order and then the other (1k, 100k, 1M, 1M, 100k, 1k, ...),
# each run SECS / ROUNDS long, and averaged: the VM's speed drifts by tens of
# per cent over minutes, and interleaving lets that drift weigh on every
# point alike instead of reading as growth.
G_ROUNDS=${BENCH_GROWTH_ROUNDS:-2}
GSECS=$(( SECS / G_ROUNDS > 2 ? SECS / G_ROUNDS : 2 ))
declare -gA G_TPS G_P50 G_P99 G_WAL GC_TPS GC_WAL G_LOAD G_EV G_AU G_NEXT G_R G_FPI G_BTFPI G_ST
# gdb_ensure DB NEED: at least NEED unused requests in DB (sealed with its tokens).
gdb_ensure() {
  local db=$1 need=$2 left add next
  next=${G_NEXT[$db]:-1}
  left=$(DB=$db sqlb -c "SELECT $((next - 1)) - (SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM bench.seq)")
  [ "$left" -ge "$need" ] && return 0
  add=$((need - left))
  log "$db: making $add join requests"
  gen "$next" "$add" "$W/req/$db.$next" "$W/tokens.$db"
  DB=$db sqlb -c "\\copy bench.requests FROM '$W/req/$db.$next.rows'"
  rm -f "$W/req/$db.$next".*
  G_NEXT[$db]=$((next + add))
}
# gdb_restore DB: back to the bulk-loaded nodes alone (what runs added goes).
gdb_restore() {
  DB=$1 sqlb -c "SET session_replication_role = replica" \
    -c "DELETE FROM bc_join.nodes WHERE attestor <> 'bench-bulk'" \
    -c "DELETE FROM bc_join.events WHERE id > ${G_EV[$1]}" \
    -c "DELETE FROM bc_join.audit_log WHERE id > ${G_AU[$1]}" \
    -c "VACUUM ANALYZE bc_join.nodes, bc_join.node_certs, bc_join.events, bc_join.audit_log, bc_join.join_tokens" >/dev/null
}

# growth_refill N: pgrun's refill for the point's database G_DB (NREQ follows).
growth_refill() {
  gdb_ensure "$G_DB" "$1"
  gdb_restore "$G_DB"
  NREQ=$((G_NEXT[$G_DB] - 1))
}

growth_run() {
  for n in $GROWTH; do
    db=bench_g$n
    setup_db "$db" "$W/tokens.$db"
    gdb_ensure "$db" 1
    DB=$db make_sample
    DB=$db sqlb -c "SET session_replication_role = replica" \
      -c "TRUNCATE bc_join.nodes, bc_join.events, bc_join.audit_log CASCADE" >/dev/null
    t0=$(date +%s.%N)
    DB=$db sqlb -v start=1 -v n="$n" -f bench/load-nodes.sql >/dev/null
    G_LOAD[$n]=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
    [ "$(DB=$db sqlb -c "SELECT count(*) FROM bc_join.nodes")" = "$n" ] || die "growth: not $n nodes after loading"
    G_EV[$db]=$(DB=$db sqlb -c "SELECT coalesce(max(id), 0) FROM bc_join.events")
    G_AU[$db]=$(DB=$db sqlb -c "SELECT coalesce(max(id), 0) FROM bc_join.audit_log")
    log "growth: $db holds $n nodes (loaded, VACUUM ANALYZE, in ${G_LOAD[$n]} s)"
  done
  ORDER_FWD=$GROWTH
  ORDER_REV=$(echo "$GROWTH" | tr ' ' '\n' | tac | tr '\n' ' ')
  for ((r = 1; r <= G_ROUNDS; r++)); do
    if [ $((r % 2)) = 1 ]; then order=$ORDER_FWD; else order=$ORDER_REV; fi
    for n in $order; do
      db=bench_g$n
      gdb_ensure "$db" $((EST * (GSECS + 2)))
      gdb_restore "$db"
      G_DB=$db DB=$db NREQ=$((G_NEXT[$db] - 1)) PGRUN_REFILL=growth_refill pgrun "growth-$n-r$r" "$ROOT/bench/join.pgbench" "$GCLIENTS" "$GSECS"
      G_R[$n,$r]=$TPS G_R[w$n,$r]=$WALKB G_R[f$n,$r]=$FPIKB G_R[b$n,$r]=$BTFPIKB
      gdb_restore "$db"
      DB=$db NREQ=$((G_NEXT[$db] - 1)) pgrun "growth-ceiling-$n-r$r" "$ROOT/bench/ceiling.pgbench" "$GCLIENTS" "$GSECS"
      G_R[c$n,$r]=$TPS G_R[cw$n,$r]=$WALKB
    done
  done
  for n in $GROWTH; do
    js="" cs="" jw="" cw="" jf="" jb="" lats=()
    for ((r = 1; r <= G_ROUNDS; r++)); do
      js+="${G_R[$n,$r]} " cs+="${G_R[c$n,$r]} " jw+="${G_R[w$n,$r]} " cw+="${G_R[cw$n,$r]} "
      jf+="${G_R[f$n,$r]} " jb+="${G_R[b$n,$r]} "
      lats+=("$W/runs/growth-$n-r$r/lat")
    done
    # the mean of the rounds; n/a when a round has no number (never a 0 standing in for it)
    mean() { echo "$1" | awk '{ s = 0; for (i = 1; i <= NF; i++) { if ($i !~ /^[0-9.]+$/) { print "n/a"; exit } s += $i } printf "%.1f", s / NF }'; }
    G_TPS[$n]=$(mean "$js") GC_TPS[$n]=$(mean "$cs") G_WAL[$n]=$(mean "$jw") GC_WAL[$n]=$(mean "$cw")
    G_FPI[$n]=$(mean "$jf") G_BTFPI[$n]=$(mean "$jb")
    sort -n -m "${lats[@]}" >"$W/runs/growth-$n.lat"
    G_P50[$n]=$(pct "$W/runs/growth-$n.lat" 50) G_P99[$n]=$(pct "$W/runs/growth-$n.lat" 99)
    log "growth: $n nodes: joins $(fmt "${G_TPS[$n]}")/s over rounds ($js), ceiling $(fmt "${GC_TPS[$n]}")/s ($cs)"
  done
  G_FIRST=${GROWTH%% *}
  G_LAST=${GROWTH##* }
  # One checkpoint cycle at the smallest and the largest point: a CHECKPOINT
  # (pgrun's), then STEADY_SECS of joins with no other, the WAL counted over
  # the whole of it.  What a server whose checkpoints come every STEADY_SECS
  # writes per join: each page touched pays its full image once per cycle,
  # not once per short run as in the rounds above.
  if [ "$STEADY_SECS" -gt 0 ]; then
    for n in $G_FIRST $G_LAST; do
      db=bench_g$n
      gdb_ensure "$db" "$(awk -v r="${G_TPS[$n]}" -v e="$EST" -v s="$STEADY_SECS" 'BEGIN { if (r !~ /^[0-9.]+$/) r = e; printf "%.0f", r * 1.3 * s + 1000 }')"
      gdb_restore "$db"
      G_DB=$db DB=$db NREQ=$((G_NEXT[$db] - 1)) PGRUN_REFILL=growth_refill pgrun "growth-steady-$n" "$ROOT/bench/join.pgbench" "$GCLIENTS" "$STEADY_SECS"
      G_ST[t$n]=$TPS G_ST[w$n]=$WALKB G_ST[f$n]=$FPIKB
      [ "$RUN_OK" = 1 ] || G_ST[t$n]=n/a
      gdb_restore "$db"
      log "growth: one checkpoint cycle of $STEADY_SECS s at $n nodes: $(fmt "$TPS") joins/s, $WALKB kB of WAL a join ($FPIKB of full-page images)"
    done
    [ "$G_FIRST" = "$G_LAST" ] && G_ST[done]=0 || G_ST[done]=1
  fi
}

growth_report() {
  local n rounds nofpi nofpi0
  echo "### 4. Growth"
  echo
  echo "$GCLIENTS clients; one database per point holding exactly that many joined nodes before every run (each with its certificate, \`node.joined\` event and audit row, bulk-loaded by \`bench/load-nodes.sql\`; what a run adds is deleted and vacuumed away before the next). The points are measured in $G_ROUNDS rounds of $GSECS s per run, in one order and then the other, and averaged, so that the VM's speed drifting over the minutes of the section weighs on every point alike."
  echo
  echo "| nodes already joined | joins/s | p50 ms | p99 ms | WAL kB/join | ceiling tx/s | ceiling WAL kB/tx | joins / ceiling | joins vs $(printf "%'d" "$G_FIRST") | ceiling vs $(printf "%'d" "$G_FIRST") | joins vs $(printf "%'d" "$G_FIRST"), each round |"
  echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  for n in $GROWTH; do
    rounds=""
    for ((r = 1; r <= G_ROUNDS; r++)); do rounds+="$(ratio "${G_R[$n,$r]}" "${G_R[$G_FIRST,$r]}") "; done
    echo "| $(printf "%'d" "$n") | $(fmt "${G_TPS[$n]}") | $(fmt "${G_P50[$n]}") | $(fmt "${G_P99[$n]}") | ${G_WAL[$n]} | $(fmt "${GC_TPS[$n]}") | ${GC_WAL[$n]} | $(ratio "${G_TPS[$n]}" "${GC_TPS[$n]}") | $(ratio "${G_TPS[$n]}" "${G_TPS[$G_FIRST]}") | $(ratio "${GC_TPS[$n]}" "${GC_TPS[$G_FIRST]}") | ${rounds% } |"
  done
  echo
  echo "The WAL of the join runs split (pg_walinspect, \`pg_get_wal_stats\` over each run): every point starts after a \`CHECKPOINT\`, so the first change of each page writes a full-page image; with more nodes the joins of a short run land on more distinct index pages (the certificate's random serial and SPKI hash, unique by design), each paying its image once per checkpoint."
  echo
  echo "| nodes already joined | WAL kB/join | of which full-page images | of which in B-tree indexes | without full-page images | vs $(printf "%'d" "$G_FIRST") |"
  echo "| ---: | ---: | ---: | ---: | ---: | ---: |"
  for n in $GROWTH; do
    nofpi=$(awk -v a="${G_WAL[$n]}" -v b="${G_FPI[$n]}" 'BEGIN { if (b !~ /^[0-9.]+$/) print "n/a"; else printf "%.1f", a - b }')
    nofpi0=$(awk -v a="${G_WAL[$G_FIRST]}" -v b="${G_FPI[$G_FIRST]}" 'BEGIN { if (b !~ /^[0-9.]+$/) print "n/a"; else printf "%.1f", a - b }')
    echo "| $(printf "%'d" "$n") | ${G_WAL[$n]} | ${G_FPI[$n]} | ${G_BTFPI[$n]} | $nofpi | $(ratio "$nofpi" "$nofpi0") |"
  done
  if [ "${G_ST[done]:-0}" = 1 ]; then
    echo
    echo "One checkpoint cycle: $STEADY_SECS s of joins after a \`CHECKPOINT\`, the WAL counted over the whole cycle, at the smallest and the largest point: what a server writes per join when its checkpoints come every $STEADY_SECS s, $( awk -v s="$STEADY_SECS" 'BEGIN { printf "%.1f", 300 / s }')× as often as with PostgreSQL's default \`checkpoint_timeout\` of 5 minutes (this cluster's \`max_wal_size\` of 16 GB and \`checkpoint_timeout\` of 1 h keep any other checkpoint out of the cycle). Each page the joins touch pays its full image once a cycle, not once a short run as in the rounds above."
    echo
    echo "| nodes already joined | joins/s | WAL kB/join over the cycle | of which full-page images | rate vs $(printf "%'d" "$G_FIRST") | WAL vs $(printf "%'d" "$G_FIRST") |"
    echo "| ---: | ---: | ---: | ---: | ---: | ---: |"
    for n in $G_FIRST $G_LAST; do
      echo "| $(printf "%'d" "$n") | $(fmt "${G_ST[t$n]}") | ${G_ST[w$n]} | ${G_ST[f$n]} | $(ratio "${G_ST[t$n]}" "${G_ST[t$G_FIRST]}") | $(ratio "${G_ST[w$n]}" "${G_ST[w$G_FIRST]}") |"
    done
  fi
}
