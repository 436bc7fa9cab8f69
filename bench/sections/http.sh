# bench/sections/http.sh: section 3, a real peer: cfssl serve (P-256 CA)
# signing the same CSRs over HTTPS, without and with its certificate database
# on the same cluster, and bc-gateway's POST /v1/join, driven by wrk
# (bench/bodies.lua).  BENCH_HTTP=0 skips it.  Sourced by bench/run.

declare -gA CF_TPS CF_P50 CF_P99 CFDB_TPS CFDB_P50 CFDB_P99 GW_TPS GW_P50 GW_P99
# wrkrun NAME URL BODIES CLIENTS SECS: sets TPS P50 P99 (ms).
wrkrun() {
  local name=$1 url=$2 bodies=$3 c=$4 secs=$5 d=$W/runs/$1 t line non200 wrapped
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
    log "WARNING $name: $non200 answers other than 200"
  fi
  if [ "$wrapped" != 0 ] && [ "${6:-}" = once ]; then
    INVALID+=("$name: bodies ran out and were sent again")
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
    CFDB_TPS[$c]=$TPS CFDB_P50[$c]=$P50 CFDB_P99[$c]=$P99
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
      GW_TPS[$c]=$TPS GW_P50[$c]=$P50 GW_P99[$c]=$P99
      used=$(sqlb -c "SELECT coalesce(sum(calls), 0) FROM bc_join.attestor_statistics")
      off=$((off + used))
    done
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
