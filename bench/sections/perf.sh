# bench/sections/perf.sh: section 6, where the machine's time goes: perf
# record -a during a join run and a ceiling run at the best client count of
# section 1 (BENCH_PERF_CLIENTS, default 8, when section 1 did not run), per
# transaction by process and library.  BENCH_PERF=0 skips it.  Sourced by
# bench/run.

# perf record -a samples every CPU (cpu-clock: this VM has no hardware
# counters) while pgbench runs; a process's and a library's share of the
# samples times the machine time of one transaction (1 / tps) is what that
# part costs per transaction.  Idle time is the kernel's swapper.
declare -gA PF_J PF_C
PERF_OK=0
perf_split() {  # perf_split FILE TPS ARRAYNAME
  local -n into=$3
  while read -r k v; do into[$k]=$v; done < <(perf report -i "$1" --sort comm,dso --stdio 2>/dev/null | awk -v tps="$2" '
    /^ *[0-9.]+%/ { p = $1; sub("%", "", p); comm = $2; dso = $3
      if (comm == "swapper") k = "idle"
      else if (comm == "pgbench") k = "load"
      else if (comm != "postgres") k = "other"
      else if (dso == "postgres") k = "pg"
      else if (dso ~ /^libcrypto|^libssl/) k = "ossl"
      else if (dso ~ /^bc_join|^libjansson/) k = "ours"
      else if (dso ~ /kernel/) k = "kernel"
      else k = "libc"
      t[k] += p; all += p }
    END { for (k in t) printf "%s %.0f\n", k, t[k] / all * 1e6 / tps }')
}

# perf_ossl_syms FILE TPS: the libcrypto functions of the server's samples
# (self time), as "µs-per-transaction symbol" lines, the largest first.
perf_ossl_syms() {
  local total
  total=$(perf report -i "$1" --sort comm --stdio 2>/dev/null | awk '/^ *[0-9.]+%/ { n++ } END { print n + 0 }')
  [ "$total" -gt 0 ] || return 0
  perf report -i "$1" --comms postgres --dsos libcrypto.so.3 --sort sym --stdio --percentage absolute 2>/dev/null |
    awk -v tps="$2" '/^ *[0-9.]+%/ { p = $1; sub("%", "", p); $1 = ""; $2 = ""; sub(/^ +/, "")
        us = p / 100 * 1e6 / tps
        if ($0 ~ /^0x/) { hidden += us; next }
        if (us >= 0.5) printf "%.1f %s\n", us, $0 }
      END { if (hidden > 0) printf "%.1f (internal functions without a symbol: the P-256 assembly, the providers)\n", hidden }' | sort -rn | head -20
}

perf_run() {
  if [ "${BENCH_PERF:-1}" = 1 ] && command -v perf >/dev/null && perf record -a -o /dev/null -- true >/dev/null 2>&1; then
    PF_C_N=${BEST_C:-${BENCH_PERF_CLIENTS:-8}}
    log "where the time goes: perf record -a during joins and the ceiling at $PF_C_N clients"
    for what in join ceiling; do
      ensure_sql "$(per_run "$SECS")"
      reset_nodes
      d=$W/runs/perf-$what
      mkdir -p "$d"
      sqlb -c "CHECKPOINT" >/dev/null
      (cd "$d" && perf record -a -F 999 -o "$d/perf.data" -- pgbench -n -M prepared -f "$ROOT/bench/$what.pgbench" \
        -c "$PF_C_N" -j "$(( PF_C_N < NPROC ? PF_C_N : NPROC ))" -T "$SECS" \
        -D nreq="$((SQL_NEXT - 1))" -D ntok="$TOKENS" bench >out 2>err) || { cat "$d/err" >&2; die "perf $what"; }
      tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$d/out")
      if [ "$what" = join ]; then PF_J_TPS=$tps; perf_split "$d/perf.data" "$tps" PF_J; else PF_C_TPS=$tps; perf_split "$d/perf.data" "$tps" PF_C; fi
      if [ "$what" = join ]; then perf_ossl_syms "$d/perf.data" "$tps" >"$W/perf-ossl-syms"; fi
      [ "${BENCH_KEEP:-0}" = 1 ] || rm -f "$d/perf.data"   # BENCH_KEEP=1 keeps it for perf report
    done
    PERF_OK=1
    reset_nodes
  fi
}

perf_report() {
  if [ "$PERF_OK" = 1 ]; then
    echo "### 6. Where the machine's time goes (perf)"
    echo
    echo "\`perf record -a -F 999\` (cpu-clock, every CPU) during $SECS s of joins and $SECS s of the plain-SQL ceiling at $PF_C_N clients: $(fmt "$PF_J_TPS") joins/s and $(fmt "$PF_C_TPS") ceiling tx/s in these runs. Each part's share of the samples × the machine time of one transaction (1 / rate, both cores):"
    echo
    echo "| µs of the machine per transaction | join | ceiling | join − ceiling |"
    echo "| --- | ---: | ---: | ---: |"
    for k in pg ossl ours libc kernel load other idle; do
      case $k in
        pg) label="PostgreSQL's own code (the \`postgres\` binary)" ;;
        ossl) label="OpenSSL (libcrypto) in the server" ;;
        ours) label="bc_join.so and libjansson" ;;
        libc) label="the C library in the server (malloc, memcpy, …)" ;;
        kernel) label="the kernel, for the server (sockets, WAL writes, fsync)" ;;
        load) label="pgbench (the load tool, same cores)" ;;
        other) label="other processes" ;;
        idle) label="idle" ;;
      esac
      j=${PF_J[$k]:-0} c=${PF_C[$k]:-0}
      echo "| $label | $j | $c | $((j - c)) |"
    done
    jt=$(awk -v t="$PF_J_TPS" 'BEGIN { printf "%.0f", 1e6 / t }'); ct=$(awk -v t="$PF_C_TPS" 'BEGIN { printf "%.0f", 1e6 / t }')
    echo "| **a transaction** | **$jt** | **$ct** | **$((jt - ct))** |"
    echo
    if [ -s "$W/perf-ossl-syms" ]; then
      echo "OpenSSL's part of the join run by function (self time; exported functions of 0.5 µs a join or more, and Debian's libcrypto's unexported ones as one line, since it ships no symbols for them):"
      echo
      echo "| libcrypto function | µs of the machine per join |"
      echo "| --- | ---: |"
      while read -r us sym; do echo "| \`$sym\` | $us |"; done <"$W/perf-ossl-syms"
      echo
    fi
    echo "For comparison, the EC arithmetic of a join at \`openssl speed\`'s rates (section 2): $CRYPTO_US µs; the physical limit here (this ceiling's transaction plus that arithmetic) is $(awk -v t="$PF_C_TPS" -v c="$CRYPTO_US" 'BEGIN { printf "%.0f", 1e6 / t + c }') µs a join, and 90% of it needs a join in $(awk -v t="$PF_C_TPS" -v c="$CRYPTO_US" 'BEGIN { printf "%.0f", (1e6 / t + c) / 0.9 }') µs."
    echo
  fi
}
