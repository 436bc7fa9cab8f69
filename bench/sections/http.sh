# bench/sections/http.sh: section 3, a real peer: cfssl serve (P-256 CA)
# signing the same CSRs over HTTPS, without and with its certificate database
# on the same cluster, and bc-gateway's POST /v1/join, driven by wrk
# (bench/bodies.lua).  BENCH_HTTP=0 skips it.  Sourced by bench/run.

declare -gA CF_TPS CF_P50 CF_P99 CFDB_TPS CFDB_P50 CFDB_P99 GW_TPS GW_P50 GW_P99 PF_G CFDB_BAD GW_BAD
GW_PERF_OK=0
# gw_perf_split FILE RATE: PF_G[part] = µs of the machine per request through
# the gateway, by process (and for bc-gateway by library), as perf_split does.
gw_perf_split() {
  local k v
  while read -r k v; do PF_G[$k]=$v; done < <(perf report -i "$1" --sort comm,dso --stdio 2>/dev/null | awk -v tps="$2" '
    /^ *[0-9.]+%/ { p = $1; sub("%", "", p); comm = $2; dso = $3
      if (comm == "swapper") k = "idle"
      else if (comm == "wrk") k = "load"
      else if (comm == "postgres") k = (dso ~ /kernel/) ? "pg_kernel" : "pg"
      else if (comm == "bc-gateway") {
        if (dso ~ /^libcrypto|^libssl/) k = "gw_tls"
        else if (dso ~ /^libevent/) k = "gw_event"
        else if (dso ~ /^libpq/) k = "gw_pq"
        else if (dso ~ /kernel/) k = "gw_kernel"
        else if (dso == "bc-gateway") k = "gw_own"
        else k = "gw_libc"
      }
      else k = "other"
      t[k] += p; all += p }
    END { for (k in t) printf "%s %.0f\n", k, t[k] / all * 1e6 / tps }')
}
# wrkrun NAME URL BODIES CLIENTS SECS: sets TPS P50 P99 (ms), and RUN_OK (0
# when the run is in INVALID: its numbers are no result).
wrkrun() {
  local name=$1 url=$2 bodies=$3 c=$4 secs=$5 d=$W/runs/$1 t line non200 wrapped
  RUN_OK=1
  t=$(( c < NPROC ? c : NPROC ))
  mkdir -p "$d"
  sqlb -c "CHECKPOINT" >/dev/null
  BENCH_BODIES=$bodies BENCH_THREADS=$t wrk -t "$t" -c "$c" -d "${secs}s" --timeout 30s \
    -s "$ROOT/bench/bodies.lua" "$url" >"$d/out" 2>&1 || { cat "$d/out" >&2; die "wrk $name"; }
  TPS=$(sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p' "$d/out")
  line=$(grep '^bench:' "$d/out")
  P50=$(echo "$line" | sed 's/.*p50_us=\([0-9]*\).*/\1/' | awk '{ print $1 / 1000 }')
  P99=$(echo "$line" | sed 's/.*p99_us=\([0-9]*\).*/\1/' | awk '{ print $1 / 1000 }')
  non200=$(echo "$line" | sed 's/.*non200=\([0-9]*\).*/\1/')
  wrapped=$(echo "$line" | sed 's/.*wrapped=\([0-9]*\).*/\1/')
  if [ "$non200" != 0 ] || grep -q 'Socket errors' "$d/out"; then
    INVALID+=("$name: $non200 answers other than 200, $(grep 'Socket errors' "$d/out" || echo 'no socket errors')")
    RUN_OK=0
    log "WARNING $name: $non200 answers other than 200"
  fi
  if [ "$wrapped" != 0 ] && [ "${6:-}" = once ]; then
    INVALID+=("$name: bodies ran out and were sent again")
    RUN_OK=0
    log "WARNING $name: bodies ran out"
  fi
  log "$name: $TPS req/s, p50 $(fmt "$P50") ms, p99 $(fmt "$P99") ms"
}
wait_port() {
  local i
  for i in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  die "nothing listens on 127.0.0.1:$1"
}
stop_pid() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }


http_run() {
  [ "$HTTP" = 1 ] || return 0
  GATEWAY=""
  if [ -x build/bc-gateway ] && build/bc-gateway --help >/dev/null 2>&1; then
    GATEWAY=$ROOT/build/bc-gateway
  fi
  log "HTTP peers: TLS certificate, cfssl CA (P-256), bodies"
  CF=$W/cfssl
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$CF/tls.key" \
    -out "$CF/tls.crt" -days 2 -subj /CN=127.0.0.1 -addext "subjectAltName=IP:127.0.0.1" 2>/dev/null
  echo '{"CN":"bench cfssl CA","key":{"algo":"ecdsa","size":256}}' >"$CF/ca-csr.json"
  (cd "$CF" && cfssl gencert -initca ca-csr.json 2>/dev/null | cfssljson -bare ca)
  echo '{"signing":{"default":{"expiry":"24h","usages":["digital signature","client auth","server auth"]}}}' >"$CF/config.json"
  echo "{\"driver\":\"postgres\",\"data_source\":\"host=$SOCK port=$PORT user=postgres dbname=cfssl sslmode=disable\"}" >"$CF/db.json"
  psql -qAtX -v ON_ERROR_STOP=1 -d cfssl -f bench/cfssl-certdb.sql

  # Bodies: the gateway's joins each once; cfssl signs the same CSRs.
  nhttp=0
  for c in $HTTP_CLIENTS; do nhttp=$((nhttp + $(per_run "$SECS"))); done
  nhttp=$((nhttp + $(per_run "$SECS")))   # the profiled run below
  log "making $nhttp join requests for the HTTP runs"
  gen "$HTTP_NEXT" "$nhttp" "$W/req/http"
  cut -f2 "$W/req/http.rows" >"$W/req/http.join"
  rm -f "$W/req/http.rows"

  cfssl_serve() {
    cfssl serve -address 127.0.0.1 -port "$CFPORT" -ca "$CF/ca.pem" -ca-key "$CF/ca-key.pem" \
      -config "$CF/config.json" -tls-cert "$CF/tls.crt" -tls-key "$CF/tls.key" -loglevel 2 "$@" \
      >>"$CF/serve.log" 2>&1 &
    CFPID=$!; PIDS+=("$CFPID")
    wait_port "$CFPORT"
  }
  cfssl_serve
  for c in $HTTP_CLIENTS; do
    wrkrun "cfssl-c$c" "https://127.0.0.1:$CFPORT/api/v1/cfssl/sign" "$W/req/http.cfssl" "$c" "$SECS"
    CF_TPS[$c]=$TPS CF_P50[$c]=$P50 CF_P99[$c]=$P99
  done
  stop_pid "$CFPID"
  cfssl_serve -db-config "$CF/db.json"
  for c in $HTTP_CLIENTS; do
    wrkrun "cfssl-db-c$c" "https://127.0.0.1:$CFPORT/api/v1/cfssl/sign" "$W/req/http.cfssl" "$c" "$SECS"
    CFDB_TPS[$c]=$TPS CFDB_P50[$c]=$P50 CFDB_P99[$c]=$P99 CFDB_BAD[$c]=$((1 - RUN_OK))
  done
  stop_pid "$CFPID"
  CF_ROWS=$(psql -qAtX -d cfssl -c "SELECT count(*) FROM certificates")
  [ "$CF_ROWS" -gt 0 ] || INVALID+=("cfssl with -db-config wrote no certificate rows")

  if [ -n "$GATEWAY" ]; then
    maxc=0; for c in $HTTP_CLIENTS; do [ "$c" -gt "$maxc" ] && maxc=$c; done
    "$GATEWAY" --tls-cert "$CF/tls.crt" --tls-key "$CF/tls.key" --listen "127.0.0.1:$GWPORT" \
      --db "host=$SOCK port=$PORT user=postgres dbname=bench" --db-pool "$maxc" --db-queue 4096 \
      --log-level warn >>"$W/gateway.log" 2>&1 &
    GWPID=$!; PIDS+=("$GWPID")
    wait_port "$GWPORT"
    # Each run takes the bodies after the ones already sent.
    off=0
    for c in $HTTP_CLIENTS; do
      tail -n +"$((off + 1))" "$W/req/http.join" >"$W/req/http.join.next"
      sqlb -c "SELECT bc_join.attestor_stats_reset()" >/dev/null
      wrkrun "gateway-c$c" "https://127.0.0.1:$GWPORT/v1/join" "$W/req/http.join.next" "$c" "$SECS" once
      GW_TPS[$c]=$TPS GW_P50[$c]=$P50 GW_P99[$c]=$P99 GW_BAD[$c]=$((1 - RUN_OK))
      used=$(sqlb -c "SELECT coalesce(sum(calls), 0) FROM bc_join.attestor_statistics")
      off=$((off + used))
    done
    # Where a request's machine time goes on the gateway path (the same
    # split as section 6 for SQL): perf record -a during one more run.
    if [ "${BENCH_PERF:-1}" = 1 ] && command -v perf >/dev/null && perf record -a -o /dev/null -- true >/dev/null 2>&1; then
      PF_G_N=${BEST_C:-${BENCH_PERF_CLIENTS:-8}}
      tail -n +"$((off + 1))" "$W/req/http.join" >"$W/req/http.join.next"
      mkdir -p "$W/runs/perf-gateway"
      # perf samples every CPU for as long as its command (sleep) runs: the whole wrk run.
      perf record -a -F 999 -o "$W/runs/perf-gateway/perf.data" -- sleep "$SECS" \
        >/dev/null 2>"$W/runs/perf-gateway/err" &
      perfpid=$!
      sleep 0.2
      wrkrun "perf-gateway-c$PF_G_N" "https://127.0.0.1:$GWPORT/v1/join" "$W/req/http.join.next" "$PF_G_N" "$SECS" once
      wait "$perfpid" || true
      echo "$TPS" >"$W/runs/perf-gateway/tps"
      PF_G_TPS=$(cat "$W/runs/perf-gateway/tps" 2>/dev/null || true)
      if [ -n "$PF_G_TPS" ]; then
        gw_perf_split "$W/runs/perf-gateway/perf.data" "$PF_G_TPS"
        GW_PERF_OK=1
        log "gateway path under perf: $PF_G_TPS joins/s at $PF_G_N clients"
      else
        log "WARNING the gateway's perf run failed: $(tail -3 "$W/runs/perf-gateway/err")"
      fi
      rm -f "$W/runs/perf-gateway/perf.data"
    fi
    stop_pid "$GWPID"
  fi
}

http_report() {
  if [ "$HTTP" = 1 ]; then
    echo "### 3. A real peer: cfssl over HTTPS"
    echo
    echo "wrk (\`bench/bodies.lua\`, each body once) against \`cfssl serve\` (golang-cfssl $(dpkg-query -W -f='${Version}' golang-cfssl), P-256 CA, \`/api/v1/cfssl/sign\` of the same CSRs the joins carry) without and with \`-db-config\` (its \`certificates\` table in the same cluster)$( [ -n "$GATEWAY" ] && echo ", and bc-gateway's \`POST /v1/join\` (pool of $maxc connections)"). All over TLS 1.3 with keep-alive, logs at warning level."
    echo
    if [ -n "$GATEWAY" ]; then
      echo "| clients | cfssl req/s | p50 / p99 ms | cfssl + db req/s | p50 / p99 ms | gateway joins/s | p50 / p99 ms | SQL joins/s | gateway / cfssl + db |"
      echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
      for c in $HTTP_CLIENTS; do
        echo "| $c | $(fmt "${CF_TPS[$c]}") | $(fmt "${CF_P50[$c]}") / $(fmt "${CF_P99[$c]}") | $(fmt "${CFDB_TPS[$c]}") | $(fmt "${CFDB_P50[$c]}") / $(fmt "${CFDB_P99[$c]}") | $(fmt "${GW_TPS[$c]}") | $(fmt "${GW_P50[$c]}") / $(fmt "${GW_P99[$c]}") | $(fmt "${J_TPS[$c]:-}") | $(ratio "${GW_TPS[$c]}" "${CFDB_TPS[$c]}") |"
      done
      echo
      echo "Gateway joins / SQL joins: $(for c in $HTTP_CLIENTS; do printf '%s at %s, ' "$(ratio "${GW_TPS[$c]}" "${J_TPS[$c]:-}")" "$c"; done | sed 's/, $//')."
      echo
      http_cfssl_report
      if [ "$GW_PERF_OK" = 1 ]; then
        echo
        echo "Where a join's machine time goes through the gateway: \`perf record -a -F 999\` during one more $SECS s run at $PF_G_N clients ($(fmt "$PF_G_TPS") joins/s); each part's share of the samples × 1 / rate (both cores). The SQL join's own split is section 6."
        echo
        echo "| µs of the machine per join through the gateway | |"
        echo "| --- | ---: |"
        total=0
        for k in pg pg_kernel gw_tls gw_event gw_pq gw_own gw_libc gw_kernel load other idle; do
          case $k in
            pg) label="postgres (the join itself, user space)" ;;
            pg_kernel) label="postgres in the kernel (sockets, WAL, fsync)" ;;
            gw_tls) label="bc-gateway: OpenSSL (TLS records, handshakes)" ;;
            gw_event) label="bc-gateway: libevent (HTTP parsing, buffers, epoll)" ;;
            gw_pq) label="bc-gateway: libpq" ;;
            gw_own) label="bc-gateway: its own code" ;;
            gw_libc) label="bc-gateway: the C library and others" ;;
            gw_kernel) label="bc-gateway in the kernel (TCP, epoll)" ;;
            load) label="wrk (the load tool, TLS client, same cores)" ;;
            other) label="other processes" ;;
            idle) label="idle" ;;
          esac
          v=${PF_G[$k]:-0}; total=$((total + v))
          echo "| $label | $v |"
        done
        echo "| **a join through the gateway** | **$total** |"
      fi
    else
      echo "bc-gateway did not build or run: our joins are through SQL (section 1)."
      echo
      echo "| clients | cfssl req/s | p50 / p99 ms | cfssl + db req/s | p50 / p99 ms | SQL joins/s | SQL joins / cfssl + db |"
      echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
      for c in $HTTP_CLIENTS; do
        echo "| $c | $(fmt "${CF_TPS[$c]}") | $(fmt "${CF_P50[$c]}") / $(fmt "${CF_P99[$c]}") | $(fmt "${CFDB_TPS[$c]}") | $(fmt "${CFDB_P50[$c]}") / $(fmt "${CFDB_P99[$c]}") | $(fmt "${J_TPS[$c]:-}") | $(ratio "${J_TPS[$c]:-}" "${CFDB_TPS[$c]}") |"
      done
    fi
    echo
  fi
}

# http_cfssl_report: issue 49's second target, the gateway ≥ 1.0× cfssl serve
# with its database at every client count, as the time a request spends in
# the system (clients / rate, Little's law, µs of wall time), and where it is
# missed, how much of it the SQL join alone (section 1, same client count)
# already is and how much the relay adds.  A missing input is n/a.
http_cfssl_report() {
  local c g f q sqlus short sqlx relay why v met="" missed="" bad=""
  echo "**Against cfssl + its database (issue 49: ≥ 1.0× at every client count).** A request's time in the system, µs of wall time = clients / rate (Little's law); the SQL join alone is section 1's point at the same client count (clients / SQL joins/s); the relay's part = through the gateway − the SQL join alone."
  echo
  echo "| clients | gateway req/s | cfssl + db req/s | gateway / cfssl + db | a request through the gateway, µs | cfssl + db's µs | short by µs | the SQL join alone, µs | why |"
  echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
  for c in $HTTP_CLIENTS; do
    if [ "${GW_BAD[$c]:-0}" = 1 ] || [ "${CFDB_BAD[$c]:-0}" = 1 ]; then
      echo "| $c | $( [ "${GW_BAD[$c]:-0}" = 1 ] && echo 'invalid (see below)' || fmt "${GW_TPS[$c]:-}") | $( [ "${CFDB_BAD[$c]:-0}" = 1 ] && echo 'invalid (see below)' || fmt "${CFDB_TPS[$c]:-}") | n/a | n/a | n/a | n/a | n/a | n/a: the point is not valid |"
      bad+="${bad:+, }$c"
      continue
    fi
    q=""
    [ -z "${P_BAD[$c]:-}" ] && [ -n "${J_TPS[$c]:-}" ] && q=${J_TPS[$c]}
    read -r g f short sqlx relay < <(awk -v c="$c" -v gw="${GW_TPS[$c]:-}" -v cf="${CFDB_TPS[$c]:-}" -v j="$q" 'BEGIN {
      g = (gw + 0 > 0) ? 1e6 * c / gw : "nan"; f = (cf + 0 > 0) ? 1e6 * c / cf : "nan"
      s = (g == "nan" || f == "nan") ? "nan" : g - f
      q = (j + 0 > 0) ? 1e6 * c / j : "nan"
      x = (q == "nan" || f == "nan") ? "nan" : q - f
      r = (q == "nan" || g == "nan") ? "nan" : g - q
      print g, f, s, x, r }')
    sqlus=$(awk -v c="$c" -v j="$q" 'BEGIN { print (j + 0 > 0) ? 1e6 * c / j : "nan" }')
    if [ "$short" = nan ]; then
      v=n/a; why="n/a (a rate is missing)"
    elif awk -v x="$short" 'BEGIN { exit !(x <= 0) }'; then
      v=met; why=met; met+="${met:+, }$c"
    else
      v=$(fmt "$short"); missed+="${missed:+, }$c:$short"
      if [ "$sqlx" = nan ]; then
        why="n/a: section 1 did not run at $c clients in this run, nothing to split the $(fmt "$short") µs by"
      elif awk -v x="$sqlx" 'BEGIN { exit !(x > 0) }'; then
        why="the SQL join alone is $(fmt "$sqlx") µs over cfssl + db before any relay; the relay's part $(fmt "$relay") µs; the larger: $(awk -v x="$sqlx" -v r="$relay" 'BEGIN { print (x >= r) ? "the SQL join" : "the relay" }')"
      else
        why="the SQL join alone is $(fmt "$(awk -v x="$sqlx" 'BEGIN { print -x }')") µs under cfssl + db's; the relay's part, $(fmt "$relay") µs, is the larger: all of the shortfall"
      fi
    fi
    echo "| $c | $(fmt "${GW_TPS[$c]:-}") | $(fmt "${CFDB_TPS[$c]:-}") | $(ratio "${GW_TPS[$c]:-}" "${CFDB_TPS[$c]:-}") | $(fmt "$g") | $(fmt "$f") | $v | $(fmt "$sqlus") | $why |"
  done
  echo
  echo "Target met at: ${met:-none}$( [ -z "$met" ] || echo " clients"); missed at: $( [ -z "$missed" ] && echo none || echo "$missed" | sed 's/:[^,]*//g')$( [ -z "$missed" ] || { printf ' (short by '; echo "$missed" | tr ',' '\n' | sed 's/^ *//' | while IFS=: read -r c v; do printf '%s µs a request at %s client%s, ' "$(fmt "$v")" "$c" "$( [ "$c" = 1 ] || echo s)"; done | sed 's/, $//'; printf ')'; } )$( [ -z "$bad" ] || echo "; invalid at: $bad clients")."
}
