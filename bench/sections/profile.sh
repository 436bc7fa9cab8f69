# bench/sections/profile.sh: section 5, a profile: callgrind instruction
# counts of joins and of the plain-SQL transaction in a single backend
# (postgres --single).  BENCH_PROFILE_JOINS=0 skips it.  Sourced by bench/run.

PROFILE_OK=0

profile_run() {
  if [ "$PROFILE_JOINS" -gt 0 ]; then
    log "profile: callgrind over $PROFILE_JOINS joins and $PROFILE_JOINS plain-SQL transactions (postgres --single)"
    ensure_sql $((PROFILE_JOINS + 10))
    # One statement a line (single-user mode); the first call of each kind
    # (keys parsed, plans prepared) is spread over the run.  The answer is
    # converted to text as for a client (jsonb's output function) and only its
    # size printed: octet_length reads the size, where length() would count
    # the characters of 4 kB, work a client's join does not do.
    for ((i = 0; i < PROFILE_JOINS; i++)); do
      echo "SELECT octet_length(bc_join(r.req)::text) FROM bench.requests r WHERE r.id = (SELECT nextval('bench.seq'));"
    done >"$W/cg/join.sql"
    # The ceiling's statements from bench/ceiling.pgbench, :r a distinct literal each time.
    awk -v n="$PROFILE_JOINS" -v nreq="$((SQL_NEXT - 1))" -v ntok="$TOKENS" '
      /^\\startpipeline/ { on = 1; next } /^\\endpipeline/ { on = 0; next } on { st[++k] = $0 }
      END { for (i = 1; i <= n; i++) for (j = 1; j <= k; j++) { l = st[j]; gsub(/:r::bigint/, sprintf("%.0f", 7000000000000 + i) "::bigint", l)
        gsub(/:nreq::bigint/, nreq "::bigint", l); gsub(/:ntok::bigint/, ntok "::bigint", l); print l } }' \
      bench/ceiling.pgbench >"$W/cg/ceiling.sql"
    stop_pg
    chown -R postgres "$W/cg"
    for what in join ceiling; do
      as_pg valgrind --tool=callgrind --callgrind-out-file="$W/cg/$what.out" \
        --toggle-collect=PortalRun --toggle-collect=StartTransactionCommand \
        --toggle-collect=CommitTransactionCommand \
        "$BIN/postgres" --single -D "$DATA" bench <"$W/cg/$what.sql" >"$W/cg/$what.log" 2>&1 \
        || { tail -20 "$W/cg/$what.log" >&2; die "callgrind $what"; }
    done
    grep -q 'ERROR' "$W/cg/join.log" "$W/cg/ceiling.log" && INVALID+=("errors in the profiled statements: see $W/cg/*.log")
    IR_JOIN=$(awk '/^summary:/ { print $2 }' "$W/cg/join.out")
    IR_CEIL=$(awk '/^summary:/ { print $2 }' "$W/cg/ceiling.out")
    IRJ=$(awk -v a="$IR_JOIN" -v n="$PROFILE_JOINS" 'BEGIN { printf "%.0f", a / n }')
    IRC=$(awk -v a="$IR_CEIL" -v n="$PROFILE_JOINS" 'BEGIN { printf "%.0f", a / n }')
    callgrind_annotate --inclusive=yes "$W/cg/join.out" >"$W/cg/join.txt" 2>/dev/null
    PROFILE_OK=1
    start_pg
  fi
}

profile_report() {
  echo
  if [ "$PROFILE_OK" = 1 ]; then
    echo "### 5. Profile (callgrind, instructions)"
    echo
    echo "\`postgres --single\` under \`valgrind --tool=callgrind\`, $PROFILE_JOINS joins, then $PROFILE_JOINS plain-SQL transactions (the statements of \`bench/ceiling.pgbench\`, one a line); counted inside PortalRun and the transaction start and commit (not parse and plan, as with prepared statements). **$(awk -v x="$IRJ" 'BEGIN { printf "%.2f", x / 1e6 }') M instructions per join, $(awk -v x="$IRC" 'BEGIN { printf "%.2f", x / 1e6 }') M per plain-SQL transaction** ($(awk -v a="$IRJ" -v b="$IRC" 'BEGIN { printf "%.1f", a / b }')×)."
    echo
    echo "| function (inclusive) | instructions per join | share of a join |"
    echo "| --- | ---: | ---: |"
    awk -v n="$PROFILE_JOINS" -v tot="$IR_JOIN" '
      BEGIN { want["bc_join_request"]; want["bc_parse_join_request"]; want["bc_parse_csr"]; want["bc_csr_parse"]
              want["d2i_X509_REQ"]; want["bc_csr_spki_sha256"]; want["i2d_PUBKEY"]; want["bc_run_round"]; want["join_round"]
              want["bc_jwe_open"]; want["bc_pkey_from_jwk"]; want["ecdh_p256"]; want["EVP_PKEY_public_check"]
              want["EVP_PKEY_derive_set_peer_ex"]; want["bc_check_join_token"]; want["bc_validate_result"]
              want["bc_csr_verify_pop"]; want["bc_admit"]; want["bc_issue_and_record"]; want["bc_issue_node_cert"]
              want["bc_issue_leaf"]; want["bc_cert_issue"]; want["bc_cert_issue_der"]; want["X509_set_pubkey"]; want["X509_sign"]; want["X509_sign_ctx"]
              want["bc_issued_response"]; want["bc_signed_response"]; want["bc_jws_sign_es256"]; want["bc_spi_exec"]
              want["SPI_execute_plan"]; want["OSSL_DECODER_CTX_new_for_pkey"]; want["OSSL_ENCODER_CTX_new_for_pkey"]
              want["CommitTransactionCommand"]; want["XLogFlush"]; want["bc_emit_event"]; want["bc_audit"]; want["bc_jsonb"]
              want["bc_csr_pubkey"]; want["bc_csr_set_cert_pubkey"]; want["add_conf_extension"]; want["X509V3_EXT_conf_nid"]
              want["jsonb_in"]; want["json_loads"]; want["EVP_PKEY_fromdata"]; want["EVP_PKEY_derive"]
              want["EVP_DigestSign"]; want["EVP_DigestVerify"]; want["ASN1_item_verify_ctx"]; want["X509_REQ_verify"] }
      /^ *[0-9,]+ \(/ { ir = $1; gsub(",", "", ir); f = $0; sub(/.*:/, "", f); sub(/ .*/, "", f)
        if ((f in want) && !(f in seen)) { seen[f] = 1; printf "| `%s` | %.0f k | %.1f%% |\n", f, ir / n / 1000, 100 * ir / tot } }' "$W/cg/join.txt"
    echo
  fi
}
