# bench/sections/credentials.sh: section 10, each credential's cost: a
# renewal, a session credential, a JWT-SVID and a quote (a continuous-
# attestation cycle, without and with an IMA increment), each in µs of the
# machine and WAL bytes per operation, at BENCH_CRED_NODES nodes, against its
# own limit: the same statements as plain SQL plus its crypto (bench/ossl-ops.c,
# section 2).  Sourced by bench/run.
#
# One database per node count (bench_cred<N>, setup_db's tenant, pool and
# tokens), holding exactly N nodes: N - BENCH_CRED_N - the warm-up's bulk-
# loaded by bench/load-nodes.sql, the rest joined through bc_join() by
# bench/credentials.py, which keeps their keys and makes every request in
# advance (a renewal's CSR and proof, a session's, a JWT-SVID's proof), then
# calls the function the gateway calls for it (bc_join.renew,
# issue_session, issue_jwt_svid) BENCH_CRED_N times over BENCH_CRED_CLIENTS
# warmed connections, and the limit's plain-SQL transactions
# (bench/cred-ceiling-KIND.pgbench) as many times, in four halves (call,
# limit, limit, call), kind by kind with the node counts one after the
# other (the databases are loaded first).  The CPU counted is every process of the cluster
# (/proc/PID/schedstat) and the load's; the WAL is the insert LSN's
# advance, full-page images apart.  The quote is bench/attest_cost.py on the
# same database (BENCH_ATTEST_DB, BENCH_CEILING=1): one TPM-bound node, a
# swtpm quoting every cycle, a real machine's event log, enforce mode;
# there the CPU counted is the backend's (the client's and the TPM's work is
# the host's).

if [ "$QUICK" = 1 ]; then
  CRED_N=${BENCH_CRED_N:-200}
  CRED_NODES=${BENCH_CRED_NODES:-"1000 20000"}
  CRED_CYCLES=${BENCH_CRED_CYCLES:-10}
else
  CRED_N=${BENCH_CRED_N:-1000}
  CRED_NODES=${BENCH_CRED_NODES:-"1000 1000000"}
  CRED_CYCLES=${BENCH_CRED_CYCLES:-40}
fi
CRED_CLIENTS=${BENCH_CRED_CLIENTS:-2}
CRED_KINDS="renew session jwt"
declare -gA CR          # CR[n,kind,field]
CRED_QUOTE=0

# cred_field FILE PATH: one number of a JSON line (jq path), "n/a" when absent.
cred_field() { jq -r "($2) // \"n/a\"" "$1" 2>/dev/null | head -1; }

credentials_run() {
  local n db bulk k f out
  # the crypto's figures: section 2's, else a run of bench/ossl-ops.c now
  [ -s "$W/ossl-ops.out" ] || crypto_run start
  for n in $CRED_NODES; do
    db=bench_cred$n
    bulk=$(( n - CRED_N - 4 * CRED_CLIENTS ))
    [ "$bulk" -ge 0 ] || bulk=0
    log "credentials: $db: $n nodes ($bulk bulk-loaded, the rest joined by bench/credentials.py)"
    setup_db "$db" "$W/tokens.$db"
    gdb_ensure "$db" 1
    DB=$db make_sample
    DB=$db sqlb -c "SET session_replication_role = replica" \
      -c "TRUNCATE bc_join.nodes, bc_join.events, bc_join.audit_log CASCADE" >/dev/null
    if [ "$bulk" -gt 0 ]; then
      DB=$db sqlb -v start=1 -v n="$bulk" -f bench/load-nodes.sql >/dev/null
    fi
  done
  # Kind by kind, every node count one after the other: the VM's speed drifts
  # over minutes (and other work on it comes and goes), so the points of one
  # kind are measured as close together as they can be.
  for k in $CRED_KINDS; do
    for n in $CRED_NODES; do
      db=bench_cred$n
      out=$W/runs/cred-$k-$n.json
      PGDATABASE=$db /usr/bin/python3 bench/credentials.py "$k" "$CRED_N" "$CRED_CLIENTS" "$W/cred-nodes.$db" \
        >"$out.all" 2>"$out.err" || { cat "$out.err" >&2; die "credentials: $k at $n nodes"; }
      grep '"kind"' "$out.all" >"$out"
      for f in call.machine_us call.load_us call.backends_us call.wal_b call.fpi_b call.per_s \
               ceiling.machine_us ceiling.load_us ceiling.backends_us ceiling.wal_b ceiling.fpi_b; do
        CR[$n,$k,$f]=$(cred_field "$out" ".$f")
      done
      log "credentials: $k at $n nodes: ${CR[$n,$k,call.machine_us]} µs of the machine, ${CR[$n,$k,call.wal_b]} B of WAL; plain SQL ${CR[$n,$k,ceiling.machine_us]} µs, ${CR[$n,$k,ceiling.wal_b]} B"
    done
  done
  for n in $CRED_NODES; do
    db=bench_cred$n
    CR[$n,total]=$(DB=$db sqlb -c "SELECT count(*) FROM bc_join.nodes")
    # the quote: one TPM-bound node of this database, a swtpm quoting each cycle
    if command -v swtpm >/dev/null && command -v tpm2_quote >/dev/null && [ -x build/bcd ] && [ -x build/jose-tool ]; then
      out=$W/runs/cred-quote-$n.json
      PGDATABASE=$db BENCH_ATTEST_DB=$db BENCH_CEILING=1 BENCH_CYCLES=$CRED_CYCLES \
        /usr/bin/python3 bench/attest_cost.py >"$out.all" 2>"$out.err" || { cat "$out.err" >&2; die "credentials: quote at $n nodes"; }
      grep '"variant"' "$out.all" >"$out"
      for k in none ima; do
        CR[$n,quote-$k,call.machine_us]=$(jq -r "select(.variant == \"$k\") | .cycle_cpu_ms * 1000" "$out")
        CR[$n,quote-$k,call.wal_b]=$(jq -r "select(.variant == \"$k\") | .wal_p50_kB * 1024" "$out")
        CR[$n,quote-$k,ceiling.machine_us]=$(jq -r "select(.variant == \"ceiling-$k\") | .cycle_cpu_ms * 1000" "$out")
        CR[$n,quote-$k,ceiling.wal_b]=$(jq -r "select(.variant == \"ceiling-$k\") | .wal_p50_kB * 1024" "$out")
      done
      CR[$n,quote,events]=$(jq -r 'select(.variant == "ceiling-none") | .bev' "$out")
      CRED_QUOTE=1
      log "credentials: quote at $n nodes: ${CR[$n,quote-none,call.machine_us]} µs (${CR[$n,quote-ima,call.machine_us]} with IMA); plain SQL ${CR[$n,quote-none,ceiling.machine_us]} µs"
    else
      log "credentials: no swtpm, tpm2-tools, build/bcd or build/jose-tool: no quote"
    fi
  done
  # the databases go: a million nodes are gigabytes no later section needs
  for n in $CRED_NODES; do psql -qAtX -d postgres -c "DROP DATABASE bench_cred$n" >/dev/null; done
}

# cred_nofpi WAL FPI: WAL less its full-page images.
cred_nofpi() { awk -v a="$1" -v b="$2" 'BEGIN { if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/) print "n/a"; else printf "%.0f", a - b }'; }
# cred_fmt X: fmt, or "-" for a figure this kind does not have.
cred_fmt() { if [ -z "$1" ]; then echo -; else fmt "$1"; fi; }
# cred_op NAME: µs of one crypto operation as bc_join calls it (bench/ossl-ops.c's line NAME...).
cred_op() { awk -F'\t' -v p="$1" 'index($1, p) == 1 { print $2; exit }' "$W/ossl-ops.out"; }

credentials_report() {
  local sign verify ecdh n k label crypto lim mach
  sign=$(cred_op "ECDSA sign")
  verify=$(cred_op "ECDSA verify")
  ecdh=$(cred_op "ECDH")
  # each credential's crypto (what it signs and verifies, src/ext): count of verify, sign, ECDH
  declare -A ops=([renew]="2 2 0" [session]="2 2 0" [jwt]="1 2 0" [quote-none]="3 2 2" [quote-ima]="3 2 2")
  echo "### 10. Each credential's cost"
  echo
  echo "What a fleet runs all day, one operation at a time, through the function the gateway calls for it: \`bench/credentials.py\` joins its nodes through \`bc_join()\`, keeps their keys and makes every request in advance (a renewal's new CSR and proof, a session's CSR and proof, a JWT-SVID's proof; each node one request per kind, a new session identity each), then calls \`bc_join.renew\`, \`issue_session\` and \`issue_jwt_svid\` $CRED_N times each over $CRED_CLIENTS warmed connections, and the limit's transactions as many times, in four halves (calls, limit, limit, calls), a \`CHECKPOINT\` before each. *µs of the machine* is the CPU of every process of the cluster (backends, WAL writer, checkpointer, autovacuum: \`/proc/PID/schedstat\`) and of the load (the driver's threads) per operation (*the backends*: the connections' own backends, the rest being the WAL writer, checkpointer and autovacuum; *the load*: the driver); *WAL* the insert LSN's advance per operation, and without the full-page images (the first change of each page after the checkpoint: with a million nodes a renewal touches index pages no other did since). The *limit* is the credential's own statements as plain SQL (\`bench/cred-ceiling-KIND.pgbench\`: the statements the function runs, read from it with \`auto_explain\`, on the same nodes' rows, sizes of real rows, prepared once, one round trip and a savepoint as the call) plus its crypto at \`bench/ossl-ops.c\`'s speed (section 2: $sign µs a sign, $verify µs a verify with its key import, $ecdh µs an ECDH)."
  echo
  echo "A quote is one continuous-attestation cycle (both rounds of \`bc_join.attest\`) of \`bench/attest_cost.py\` on the same database: one TPM-bound node, a swtpm quoting each cycle (not counted), a real machine's event log (106 events, ${CR[${CRED_NODES%% *},quote,events]:-n/a} of them in PCRs 0-7 against the boot policy), enforce mode, $CRED_CYCLES cycles per variant, without an IMA increment and with 50 new entries; its µs is the backend's CPU (the cluster's other processes are not counted there), its WAL the median cycle's (the cluster's other writers, autovacuum among them, fall into some cycles), its limit the two rounds' statements as plain SQL (the event and IMA lookups with the same arrays) plus its crypto."
  echo
  echo "| nodes | credential | µs of the machine | of which the backends / the load | plain SQL µs | its crypto µs | limit µs | limit / cost | WAL B/op | without full-page images | plain SQL WAL B | without full-page images | WAL / plain SQL, without images |"
  echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  for n in $CRED_NODES; do
    for k in renew session jwt quote-none quote-ima; do
      case $k in
        renew) label="renewal (\`bc_join.renew\`)" ;;
        session) label="session credential (\`issue_session\`)" ;;
        jwt) label="JWT-SVID (\`issue_jwt_svid\`)" ;;
        quote-none) [ "$CRED_QUOTE" = 1 ] || continue; label="quote, no IMA increment (\`attest\` ×2)" ;;
        quote-ima) [ "$CRED_QUOTE" = 1 ] || continue; label="quote, 50 new IMA entries" ;;
      esac
      read -r nv ns ne <<<"${ops[$k]}"
      crypto=$(awk -v a="$nv" -v b="$ns" -v c="$ne" -v v="$verify" -v s="$sign" -v e="$ecdh" 'BEGIN { printf "%.0f", a * v + b * s + c * e }')
      lim=$(awk -v a="${CR[$n,$k,ceiling.machine_us]}" -v b="$crypto" 'BEGIN { if (a !~ /^[0-9.]+$/) print "n/a"; else printf "%.0f", a + b }')
      mach=${CR[$n,$k,call.machine_us]}
      # WAL less its full-page images (the quote's: a median cycle, not after a checkpoint: none)
      cw=$(cred_nofpi "${CR[$n,$k,call.wal_b]}" "${CR[$n,$k,call.fpi_b]:-0}")
      lw=$(cred_nofpi "${CR[$n,$k,ceiling.wal_b]}" "${CR[$n,$k,ceiling.fpi_b]:-0}")
      if [ -n "${CR[$n,$k,call.backends_us]:-}" ]; then split="$(fmt "${CR[$n,$k,call.backends_us]}") / $(fmt "${CR[$n,$k,call.load_us]}")"; else split="the backend alone"; fi
      echo "| $(printf "%'d" "$n") | $label | $(fmt "$mach") | $split | $(fmt "${CR[$n,$k,ceiling.machine_us]}") | $crypto | $lim | $(ratio "$lim" "$mach") | $(fmt "${CR[$n,$k,call.wal_b]}") | $(fmt "$cw") | $(fmt "${CR[$n,$k,ceiling.wal_b]}") | $(fmt "$lw") | $(ratio "$cw" "$lw") |"
    done
  done
  echo
  echo "Crypto counted: a renewal and a session credential 2 verifies (the node key's proof, the new CSR) and 2 signs (the certificate, the answer); a JWT-SVID 1 verify (the proof) and 2 signs (the JWT, the answer); a quote 3 verifies (the proof in each round, the quote's signature by the AK), 2 signs (each round's answer) and 2 ECDH (round 1's state sealed, round 2's opened). The quote's limit leaves out the event log's parse and replay and the IMA list's (C work the plain SQL has no counterpart for)."
  echo
  echo "Nodes in each database after its renewals, sessions and JWT-SVIDs: $(for n in $CRED_NODES; do printf "%s; " "$(printf "%'d" "${CR[$n,total]:-0}")"; done | sed 's/; $//') (then the quote's node joins). The plain-SQL limit runs on the first half's nodes, after their calls; the quote's limit after its $CRED_CYCLES cycles per variant, on the same node."
  echo
}
