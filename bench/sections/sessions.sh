# bench/sections/sessions.sh: section 8, how long a session credential takes
# (issue 26.8: "if provisioning turns out to be slow, measure it first").  A
# host joins the bench cluster through the real bc-gateway (bcd run --once),
# then `bcd run` serves its socket (--max-provisioning 4, the default), and
# bench/session-latency.py asks it for BENCH_SESS_N credentials (default 200;
# quick 40) at each client count of BENCH_SESS_CLIENTS ("1 16"), every request
# a session never asked before: one whole provisioning each, timed from the
# hook's request line to bcd's answer, which comes once the key and
# certificate are on disk in the hook's directory.  The service's own time per
# session round is bc_join.attestor_statistics' (attestor session).  The
# per-node session bounds are lifted in this database (bc_join.sessions_per_node
# and new_sessions_per_minute), or the run would measure them.  Sourced by
# bench/run.

sessions_run() {
  SESS_OK=0
  if [ ! -x build/bc-gateway ] || [ ! -x build/bcd ]; then
    log "sessions: no build/bc-gateway or build/bcd; skipped"
    return 0
  fi
  local S=$W/sess gwport=$((PORT + 4)) gwpid bcdpid c out
  mkdir -p "$S"
  log "sessions: $SESS_N provisionings at each of $SESS_CLIENTS concurrent hooks, through bcd and the gateway"
  setup_db sess "$S/tokens"
  DB=sess sqlb -c "CREATE ROLE bench_sess LOGIN IN ROLE bc_join_gateway" 2>/dev/null ||
    DB=sess sqlb -c "GRANT bc_join_gateway TO bench_sess" >/dev/null
  DB=sess sqlb -c "ALTER DATABASE sess SET bc_join.sessions_per_node = 100000000" \
    -c "ALTER DATABASE sess SET bc_join.new_sessions_per_minute = 100000000" >/dev/null
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$S/tls.key" \
    -out "$S/tls.crt" -days 2 -subj /CN=127.0.0.1 -addext "subjectAltName=IP:127.0.0.1" 2>/dev/null
  "$ROOT/build/bc-gateway" --tls-cert "$S/tls.crt" --tls-key "$S/tls.key" --listen "127.0.0.1:$gwport" \
    --db-pool 8 --db "host=$PGHOST port=$PGPORT dbname=sess user=bench_sess" --log-level warn \
    >>"$W/gateway-sess.log" 2>&1 &
  gwpid=$!; PIDS+=("$gwpid")
  for _ in $(seq 100); do curl -sf --cacert "$S/tls.crt" "https://127.0.0.1:$gwport/healthz" >/dev/null && break; sleep 0.1; done
  DB=sess sqlb -c "SELECT bc_join.service_keys()" >"$S/keys.json"
  head -1 "$S/tokens" >"$S/token"
  local common=(--gateway "https://127.0.0.1:$gwport" --gateway-ca "$S/tls.crt" --service-keys "$S/keys.json"
                --state-dir "$S/state")
  "$ROOT/build/bcd" run --once "${common[@]}" --token-file "$S/token" >/dev/null 2>>"$S/bcd.log" \
    || die "sessions: the host did not join"
  mkdir -p "$S/rt" && chmod 0700 "$S/rt"
  XDG_RUNTIME_DIR=$S/rt "$ROOT/build/bcd" run "${common[@]}" >>"$S/bcd.log" 2>&1 &
  bcdpid=$!; PIDS+=("$bcdpid")
  for _ in $(seq 100); do [ -S "$S/rt/bcd/bcd.sock" ] && break; sleep 0.1; done
  [ -S "$S/rt/bcd/bcd.sock" ] || die "sessions: bcd does not serve its socket"
  mkdir -p "$S/rt/hooks" && chmod 0700 "$S/rt/hooks"
  # warm: the gateway's pool, bcd's HTTPS connection
  /usr/bin/python3 bench/session-latency.py --socket "$S/rt/bcd/bcd.sock" --dir "$S/rt/hooks" \
    --clients 4 --requests 8 --prefix warm >/dev/null || die "sessions: warm-up failed ($S/bcd.log)"
  SESS_RESULTS=()
  for c in $SESS_CLIENTS; do
    DB=sess sqlb -c "SELECT bc_join.attestor_stats_reset()" >/dev/null
    out=$(/usr/bin/python3 bench/session-latency.py --socket "$S/rt/bcd/bcd.sock" --dir "$S/rt/hooks" \
            --clients "$c" --requests "$SESS_N" --prefix "c$c") || INVALID+=("sessions: a provisioning failed at $c clients: $out")
    local svc
    svc=$(DB=sess sqlb -c "SELECT round(sum(mean_ms * calls)::numeric / nullif(sum(calls), 0), 2)
                           FROM bc_join.attestor_statistics WHERE attestor = 'session' AND outcome = 'admitted'")
    SESS_RESULTS+=("$c $(printf '%s' "$out" | /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["n"], d["failed"], d["p50_ms"], d["p99_ms"], d["mean_ms"], d["wall_s"])') ${svc:-n/a}")
    log "sessions: $c concurrent: $out; service $svc ms per round"
  done
  kill "$bcdpid" "$gwpid" 2>/dev/null; wait "$bcdpid" "$gwpid" 2>/dev/null || true
  SESS_OK=1
}

sessions_report() {
  echo "### 8. How long a session credential takes"
  echo
  if [ "$SESS_OK" != 1 ]; then
    echo "Not measured: build/bc-gateway or build/bcd is missing."
    return
  fi
  echo "One host joined through the real \`bc-gateway\` on this cluster; \`bcd run\` (the optimised build, \`--max-provisioning 4\`, the default) serves its socket, and \`bench/session-latency.py\` asks it for $SESS_N session credentials at each count of concurrent hooks, each for a session never asked before: one whole provisioning per request (a new P-256 key and CSR, the proof by the node key, \`POST /v1/session\`, \`bc_join.issue_session\`, the answer verified, key and certificate written into the hook's directory), timed from the hook's request line to bcd's answer, which comes once both files are on disk. *Service* is the mean time inside \`issue_session\` (\`bc_join.attestor_statistics\`, attestor \`session\`). The per-node session bounds are lifted for the run."
  echo
  echo "| concurrent hooks | provisionings | p50 ms | p99 ms | mean ms | per second | service ms |"
  echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  local r c n f p50 p99 mean wall svc
  for r in "${SESS_RESULTS[@]}"; do
    read -r c n f p50 p99 mean wall svc <<<"$r"
    echo "| $c | $n$( [ "$f" != 0 ] && echo " ($f failed)") | $(fmt "$p50") | $(fmt "$p99") | $(fmt "$mean") | $(awk -v n="$n" -v w="$wall" 'BEGIN { printf "%.0f", n / w }') | $svc |"
  done
  echo
  echo "Beyond 4 concurrent hooks the others wait in bcd's FIFO (\`--max-provisioning\`): their time includes that wait."
}
