# bench/sections/hwkeys.sh: section 9, what keys in hardware cost
# (docs/operator.md, "Keys in hardware"): joins per second through SQL
# (bench/join.pgbench) with the same kind of key directory three times over,
# side by side in one run: file keys, every key in a swtpm (behind
# tpm2-abrmd, tools/bc-join-keygen --tpm) and every key in a SoftHSM2 token
# (--pkcs11), each in a database of its own (ALTER DATABASE ... SET
# bc_join.key_dir), its requests sealed to its own encryption key.  The
# cluster is restarted once first, with the TPM's bus and the token's
# configuration in its environment and bc_join.tpm_tcti and
# bc_join.pkcs11_module set, so it runs last.  Sourced by bench/run.
#   BENCH_HW_CLIENTS   client counts ("1 4")
#   BENCH_HW_SECS      seconds per point (BENCH_SECS)

declare -gA HW_TPS HW_P50 HW_P99 HW_BAD HW_NEXT HW_EST
declare -ga HW_RETRIED=()
HW_CLIENTS=${BENCH_HW_CLIENTS:-"1 4"}
HW_SECS=${BENCH_HW_SECS:-$SECS}
HW_KINDS="file tpm pkcs11"
HW_OK=0

# hw_pg CMD...: as postgres from the top of the tree (relative paths: the
# checkout's parents may be closed to postgres).
hw_pg() { runuser -u postgres -- "$@"; }

# hw_gen DB N: N more requests for DB, sealed to DB's encryption key.
hw_gen() {
  local db=$1 n=$2 start=${HW_NEXT[$1]} k per s m pids=()
  per=$(( (n + NPROC - 1) / NPROC ))
  for ((k = 0; k < NPROC; k++)); do
    s=$((start + k * per)); m=$per
    [ $((s + m)) -gt $((start + n)) ] && m=$((start + n - s))
    [ "$m" -gt 0 ] || continue
    "$W/genreq" "$W/hw/sk-$db.json" "$W/hw/tokens-$db" "$s" "$m" "$W/hw/req-$db.part$k" & pids+=($!)
  done
  for k in "${pids[@]}"; do wait "$k" || die "genreq"; done
  cat "$W/hw/req-$db".part*.rows >"$W/hw/req-$db.rows"
  rm -f "$W/hw/req-$db".part*
  DB=$db sqlb -c "\\copy bench.requests FROM '$W/hw/req-$db.rows'"
  rm -f "$W/hw/req-$db.rows"
  HW_NEXT[$db]=$((start + n))
}
# hw_refill N: pgrun's refill for HW_DB (NREQ follows).
hw_refill() {
  # pgrun asks by its own estimate, which a run short of requests inflates: by this kind's.
  local n=$1 cap=$(( HW_EST[${HW_DB#hw_}] * 4 * (HW_SECS + 2) ))
  [ "$n" -le "$cap" ] || n=$cap
  HW_EST[${HW_DB#hw_}]=$(( HW_EST[${HW_DB#hw_}] * 2 ))
  hw_gen "$HW_DB" "$n"
  NREQ=$((HW_NEXT[$HW_DB] - 1))
  DB=$HW_DB reset_nodes
}

hwkeys_run() {
  local H=$W/hw kind db c tcti est left need
  for t in swtpm tpm2-abrmd softhsm2-util pkcs11-tool; do
    command -v "$t" >/dev/null || { log "hwkeys: no $t (tools/install-deps); skipped"; return 0; }
  done
  [ -r /usr/lib/softhsm/libsofthsm2.so ] || { log "hwkeys: no SoftHSM2 module; skipped"; return 0; }
  log "hwkeys: a swtpm behind tpm2-abrmd, a SoftHSM2 token, a key directory in each"
  mkdir -p "$H"; chown postgres "$H"
  # The TPM's bus and the token belong to postgres, as the server that uses them.
  hw_pg bash test/lib/tpm-rm.sh start "$H/tpm" >/dev/null
  PIDS+=("$(cat "$H/tpm/tabrmd.pid")" "$(cat "$H/tpm/swtpm.pid")" "$(cat "$H/tpm/dbus.pid")")
  tcti=$(cat "$H/tpm/tcti")
  export DBUS_SESSION_BUS_ADDRESS TPM2OPENSSL_TCTI=$tcti SOFTHSM2_CONF=$H/softhsm2.conf
  DBUS_SESSION_BUS_ADDRESS=$(cat "$H/tpm/dbus-address")
  mkdir -p "$H/tokens"
  printf 'directories.tokendir = %s\nobjectstore.backend = file\nlog.level = ERROR\n' "$H/tokens" >"$SOFTHSM2_CONF"
  chown -R postgres "$H"
  hw_pg softhsm2-util --init-token --free --label bench --pin 1234 --so-pin 5678 >/dev/null
  hw_pg tools/bc-join-keygen "$H/keys-tpm" --tpm >/dev/null
  hw_pg tools/bc-join-keygen "$H/keys-pkcs11" --pkcs11 --token-label bench --pin 1234 >/dev/null 2>&1
  psql -qAtX -v ON_ERROR_STOP=1 -d postgres \
    -c "ALTER SYSTEM SET bc_join.tpm_tcti = '$tcti'" \
    -c "ALTER SYSTEM SET bc_join.pkcs11_module = '/usr/lib/softhsm/libsofthsm2.so'" >/dev/null
  stop_pg
  start_pg
  for kind in $HW_KINDS; do
    db=hw_$kind
    setup_db "$db" "$H/tokens-$db"
    if [ "$kind" = file ]; then
      psql -qAtX -d postgres -c "ALTER DATABASE $db SET bc_join.key_dir = '$W/keys'" >/dev/null
    else
      psql -qAtX -d postgres -c "ALTER DATABASE $db SET bc_join.key_dir = '$H/keys-$kind'" >/dev/null
    fi
    DB=$db sqlb -c "SELECT bc_join.service_keys()" >"$H/sk-$db.json"
    HW_NEXT[$db]=1
    hw_gen "$db" 1
    DB=$db make_sample
  done
  HW_OK=1
  HW_LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
  # The first guesses: file keys and SoftHSM2 (software in the backend) as fast as
  # the joins section found, swtpm well under (a TPM signs in milliseconds).
  HW_EST[file]=$(( EST > 0 ? EST : 2000 )) HW_EST[pkcs11]=$(( EST > 0 ? EST : 2000 )) HW_EST[tpm]=150
  for c in $HW_CLIENTS; do
    for kind in $HW_KINDS; do
      db=hw_$kind
      # Enough requests for the point at the rate guessed (pgrun refills and runs
      # again when they were too few, but a short run is no measure of the rate).
      est=${HW_EST[$kind]}
      left=$(DB=$db sqlb -c "SELECT $((HW_NEXT[$db] - 1)) - (SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM bench.seq)")
      need=$(( est * (HW_SECS + 2) - left ))
      [ "$need" -le 0 ] || hw_gen "$db" "$need"
      DB=$db reset_nodes
      HW_DB=$db DB=$db NREQ=$((HW_NEXT[$db] - 1)) PGRUN_REFILL=hw_refill PGRUN_SOFT=1 \
        pgrun "hw-$kind-c$c" "$ROOT/bench/join.pgbench" "$c" "$HW_SECS"
      # SoftHSM2's file store read by several processes at once now and then
      # fails a backend's first key load ("object not found", "User PIN not
      # initialized": its token files read while another process rewrites them,
      # softhsm/SoftHSMv2#757, open).  Such a point is made once more, and the
      # report says so; a second failure stands as the run's problem.
      if [ "$RUN_OK" != 1 ] && [ "$kind" = pkcs11 ] && [ "${#INVALID[@]}" -gt 0 ] &&
         [[ "${INVALID[-1]}" == *"could not load a bc_join key"* ]]; then
        HW_RETRIED+=("$c")
        unset 'INVALID[-1]'
        log "hwkeys pkcs11 c$c: a backend could not load the SoftHSM2 key at its start; the point once more"
        DB=$db reset_nodes
        HW_DB=$db DB=$db NREQ=$((HW_NEXT[$db] - 1)) PGRUN_REFILL=hw_refill PGRUN_SOFT=1 \
          pgrun "hw-$kind-c$c-again" "$ROOT/bench/join.pgbench" "$c" "$HW_SECS"
      fi
      HW_TPS[$kind,$c]=$TPS HW_P50[$kind,$c]=$P50 HW_P99[$kind,$c]=$P99
      [ "$RUN_OK" = 1 ] || HW_BAD[$kind,$c]=1
      [ "$TPS" = n/a ] || HW_EST[$kind]=$(awk -v t="$TPS" -v e="${HW_EST[$kind]}" 'BEGIN { r = int(t * 2 + 50); print (r > e) ? r : e }')
      log "hwkeys $kind c$c: $(fmt "$TPS") joins/s, p50 $(fmt "$P50") ms, p99 $(fmt "$P99") ms"
    done
  done
  HW_LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)
}

hwkeys_report() {
  local c kind row
  echo "### 9. Keys in hardware"
  echo
  if [ "$HW_OK" != 1 ]; then
    echo "Not run (no swtpm, tpm2-abrmd or SoftHSM2)."
    echo
    return
  fi
  echo "pgbench \`bench/join.pgbench\`, $HW_SECS s per point, one database per kind of key directory (\`ALTER DATABASE ... SET bc_join.key_dir\`), each from 1,000 joined nodes, its requests sealed to its own encryption key. Every key of the directory (signing, encryption, node CA, challenge) is of that kind; a token join makes three private-key operations with them: ECDH with \`encryption.key\` (opening the sealed token), ECDSA with \`node-ca.key\` (the certificate), ECDSA with \`signing.key\` (the answer). swtpm runs behind tpm2-abrmd (one TPM for every backend, as a real TPM is); SoftHSM2 runs inside each backend (the token's files shared)."
  echo
  row="| clients |"; for kind in $HW_KINDS; do row="$row $kind joins/s | p50 ms | p99 ms |"; done; echo "$row"
  row="| ---: |"; for kind in $HW_KINDS; do row="$row ---: | ---: | ---: |"; done; echo "$row"
  for c in $HW_CLIENTS; do
    row="| $c |"
    for kind in $HW_KINDS; do
      if [ -n "${HW_BAD[$kind,$c]:-}" ]; then row="$row invalid | | |"; continue; fi
      row="$row $(fmt "${HW_TPS[$kind,$c]}") | $(fmt "${HW_P50[$kind,$c]}") | $(fmt "${HW_P99[$kind,$c]}") |"
    done
    echo "$row"
  done
  echo
  if [ "${#HW_RETRIED[@]}" -gt 0 ]; then
    echo "SoftHSM2 at ${HW_RETRIED[*]} client(s): a backend could not load the key at its start (SoftHSM2's token files read by several processes while one rewrites them, softhsm/SoftHSMv2#757); that point was made once more and its second run is the one above."
    echo
  fi
  echo "Load average of the machine (1, 5, 15 min) when the section began: $HW_LOAD0; when it ended: $HW_LOAD1 (on $NPROC cores: anything above $NPROC is other work competing with the run; compare the kinds with each other, within one run)."
  echo
  c=${HW_CLIENTS%% *}
  echo "At $c client(s), what the hardware adds to one join (p50 against the file keys' p50), for its three operations: swtpm $(awk -v a="${HW_P50[tpm,$c]}" -v b="${HW_P50[file,$c]}" 'BEGIN { printf "%.1f", a - b }') ms, SoftHSM2 $(awk -v a="${HW_P50[pkcs11,$c]}" -v b="${HW_P50[file,$c]}" 'BEGIN { printf "%.1f", a - b }') ms."
  echo
}
