# bench/sections/attestors.sh: section 7, what an attestor costs.  BENCH_ATT_JOINS
# hosts (default 20; quick 5) each join through the real bcd and bc-gateway on
# the bench cluster with a join token, then renew once, then the same count
# join by TPM (two rounds, a swtpm with EK certificates behind tpm2-abrmd,
# the node key made in it), one after the other; then the same count join
# with 60-second certificates, wait for them to expire, and come back as
# themselves by x509pop (no token).  For each: the time at the
# client per join (everything: key, CSR, TPM work, TLS, both rounds) and the
# service's time per round from bc_join.attestor_statistics (the time inside
# bc_join() for that attestor and outcome).  Sourced by bench/run.

# ms_per T0 T1 N: milliseconds per one of N things done between T0 and T1 (date +%s.%N).
ms_per() { awk -v a="$1" -v b="$2" -v n="$3" 'BEGIN { printf "%.1f", 1000 * (b - a) / n }'; }

attestors_run() {
  ATT_OK=0
  if ! command -v swtpm >/dev/null || ! command -v tpm2-abrmd >/dev/null || [ ! -x build/bc-gateway ]; then
    log "attestors: no swtpm, tpm2-abrmd or bc-gateway; skipped"
    return 0
  fi
  local A=$W/att n=$ATT_JOINS i t0 t1 gwport=$((PORT + 3)) gwpid
  mkdir -p "$A"
  log "attestors: $n token joins, $n renewals and $n tpm joins through bcd and the gateway"
  setup_db attest "$A/tokens"
  DB=attest sqlb -c "CREATE ROLE bench_gw LOGIN IN ROLE bc_join_gateway" 2>/dev/null ||
    DB=attest sqlb -c "GRANT bc_join_gateway TO bench_gw" >/dev/null
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$A/tls.key" \
    -out "$A/tls.crt" -days 2 -subj /CN=127.0.0.1 -addext "subjectAltName=IP:127.0.0.1" 2>/dev/null
  "$ROOT/build/bc-gateway" --tls-cert "$A/tls.crt" --tls-key "$A/tls.key" --listen "127.0.0.1:$gwport" \
    --db "host=$PGHOST port=$PGPORT dbname=attest user=bench_gw" --log-level warn >>"$W/gateway-att.log" 2>&1 &
  gwpid=$!; PIDS+=("$gwpid")
  for _ in $(seq 100); do curl -sf --cacert "$A/tls.crt" "https://127.0.0.1:$gwport/healthz" >/dev/null && break; sleep 0.1; done
  DB=attest sqlb -c "SELECT bc_join.service_keys()" >"$A/keys.json"
  local common=(--gateway "https://127.0.0.1:$gwport" --gateway-ca "$A/tls.crt" --service-keys "$A/keys.json")
  head -1 "$A/tokens" >"$A/token"
  DB=attest sqlb -c "SELECT bc_join.attestor_stats_reset()" >/dev/null

  t0=$(date +%s.%N)
  for i in $(seq "$n"); do
    "$ROOT/build/bcd" run --once "${common[@]}" --state-dir "$A/tok$i" --token-file "$A/token" >/dev/null 2>>"$A/bcd.log" \
      || die "attestors: token join $i"
  done
  t1=$(date +%s.%N)
  ATT_TOKEN_MS=$(ms_per "$t0" "$t1" "$n")
  t0=$(date +%s.%N)
  for i in $(seq "$n"); do
    "$ROOT/build/bcd" renew --once "${common[@]}" --state-dir "$A/tok$i" >/dev/null 2>>"$A/bcd.log" \
      || die "attestors: renewal $i"
  done
  t1=$(date +%s.%N)
  ATT_RENEW_MS=$(ms_per "$t0" "$t1" "$n")

  bash "$ROOT/test/lib/tpm-rm.sh" start "$A/tpm" $$ >/dev/null || die "attestors: the swtpm and its resource manager"
  export DBUS_SESSION_BUS_ADDRESS="$(cat "$A/tpm/dbus-address")" TSS2_LOG=all+NONE
  DB=attest sqlb -c "SELECT bc_join.add_tpm_ek_root(pg_read_file('$A/tpm/root.pem'))" \
    -c "SELECT bc_join.add_tpm_ek_root(pg_read_file('$A/tpm/issuer.pem'))" >/dev/null
  # one EK, so the same node each time: a token allowing reclaim, each join a reclaim
  DB=attest sqlb -c "SELECT bc_join.create_join_token(t.id, p.id, uses => 1000000, allow_reclaim => true)
                      FROM bc_join.tenants t JOIN bc_join.pools p ON p.tenant_id = t.id WHERE t.name = 'bench'" >"$A/tpm-token"
  t0=$(date +%s.%N)
  for i in $(seq "$n"); do
    "$ROOT/build/bcd" run --once "${common[@]}" --attestor tpm --tcti "$(cat "$A/tpm/tcti")" \
      --state-dir "$A/tpm$i" --token-file "$A/tpm-token" >/dev/null 2>>"$A/bcd.log" || die "attestors: tpm join $i"
  done
  t1=$(date +%s.%N)
  ATT_TPM_MS=$(ms_per "$t0" "$t1" "$n")
  bash "$ROOT/test/lib/tpm-rm.sh" stop "$A/tpm" || true
  kill "$gwpid" 2>/dev/null; wait "$gwpid" 2>/dev/null || true

  # x509pop: hosts whose 60-second certificates expired come back as themselves
  # (bcd run --once with no token: the expired certificate proves the new key).
  DB=attest sqlb -c "ALTER DATABASE attest SET bc_join.cert_ttl = 60" >/dev/null
  "$ROOT/build/bc-gateway" --tls-cert "$A/tls.crt" --tls-key "$A/tls.key" --listen "127.0.0.1:$gwport" \
    --db "host=$PGHOST port=$PGPORT dbname=attest user=bench_gw" --log-level warn >>"$W/gateway-att.log" 2>&1 &
  gwpid=$!; PIDS+=("$gwpid")
  for _ in $(seq 100); do curl -sf --cacert "$A/tls.crt" "https://127.0.0.1:$gwport/healthz" >/dev/null && break; sleep 0.1; done
  for i in $(seq "$n"); do
    "$ROOT/build/bcd" run --once "${common[@]}" --state-dir "$A/xp$i" --token-file "$A/token" >/dev/null 2>>"$A/bcd.log" \
      || die "attestors: join $i before its x509pop reclaim"
  done
  log "attestors: waiting 62 s for the $n 60-second certificates to expire"
  sleep 62
  t0=$(date +%s.%N)
  for i in $(seq "$n"); do
    "$ROOT/build/bcd" run --once "${common[@]}" --state-dir "$A/xp$i" >/dev/null 2>>"$A/bcd.log" \
      || die "attestors: x509pop reclaim $i"
  done
  t1=$(date +%s.%N)
  ATT_X509POP_MS=$(ms_per "$t0" "$t1" "$n")
  DB=attest sqlb -c "ALTER DATABASE attest RESET bc_join.cert_ttl" >/dev/null
  kill "$gwpid" 2>/dev/null; wait "$gwpid" 2>/dev/null || true

  DB=attest sqlb -F ' ' -c "SELECT attestor, outcome, calls, round(mean_ms::numeric, 2) FROM bc_join.attestor_statistics" >"$A/stats"
  svc() { awk -v a="$1" -v o="$2" '$1 == a && $2 == o { print $4 }' "$A/stats"; }
  ATT_SVC_TOKEN=$(svc join-token admitted)
  ATT_SVC_RENEW=$(svc renew admitted)
  ATT_SVC_TPM1=$(svc tpm deferred-challenge)
  ATT_SVC_TPM2=$(svc tpm admitted)
  ATT_SVC_X509POP=$(svc x509pop admitted)
  ATT_SVC_TPM=$(awk -v a="$ATT_SVC_TPM1" -v b="$ATT_SVC_TPM2" 'BEGIN { if (a == "" || b == "") print ""; else printf "%.2f", a + b }')
  ATT_OK=1
  log "attestors: per join at the client: token $ATT_TOKEN_MS ms, renewal $ATT_RENEW_MS ms, tpm $ATT_TPM_MS ms, x509pop reclaim $ATT_X509POP_MS ms; in the service: token $ATT_SVC_TOKEN ms, renewal $ATT_SVC_RENEW ms, tpm $ATT_SVC_TPM1 + $ATT_SVC_TPM2 ms, x509pop $ATT_SVC_X509POP ms"
}

attestors_report() {
  echo "### 7. What an attestor costs"
  echo
  if [ "$ATT_OK" != 1 ]; then
    echo "Not measured: swtpm, tpm2-abrmd or bc-gateway is missing."
    return
  fi
  echo "$ATT_JOINS hosts, one after the other, through the real \`bcd\` and \`bc-gateway\` on this cluster: a join with a join token, a renewal of each (\`bcd renew --once\`), and a join by TPM (\`bcd run --once --attestor tpm\`: two rounds, a swtpm with EK certificates behind tpm2-abrmd, the node key made in the TPM; one EK, so each is a reclaim), and an x509pop reclaim (\`bcd run --once\` with no token on a state directory whose 60-second certificate expired: the old certificate proves a new key, the same node comes back). *Client* is the whole join at the host (key, CSR, TPM commands, TLS, every round); *service* is the time inside \`bc_join()\` for that attestor and outcome (\`bc_join.attestor_statistics\`, both rounds summed for tpm)."
  echo
  echo "| | client ms per join | service ms per join | service / token join |"
  echo "| --- | ---: | ---: | ---: |"
  echo "| token join | $ATT_TOKEN_MS | $ATT_SVC_TOKEN | 100% |"
  echo "| renewal | $ATT_RENEW_MS | $ATT_SVC_RENEW | $(ratio "$ATT_SVC_RENEW" "$ATT_SVC_TOKEN") |"
  echo "| tpm join (round 1 + round 2) | $ATT_TPM_MS | $ATT_SVC_TPM1 + $ATT_SVC_TPM2 = $ATT_SVC_TPM | $(ratio "$ATT_SVC_TPM" "$ATT_SVC_TOKEN") |"
  echo "| x509pop reclaim (an expired certificate, a new key) | $ATT_X509POP_MS | $ATT_SVC_X509POP | $(ratio "$ATT_SVC_X509POP" "$ATT_SVC_TOKEN") |"
  echo
  echo "The client column for tpm is mostly the TPM commands (a new AK and node key per host, Certify, ActivateCredential, Quote) on the software TPM through tpm2-abrmd; the service does its MakeCredential, EK chain and signature checks in the two rounds."
}
