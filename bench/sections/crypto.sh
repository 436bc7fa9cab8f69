# bench/sections/crypto.sh: section 2, the crypto ceiling: openssl speed
# (ecdsap256, ecdhp256 over every core) and each operation as the extension
# calls it (bench/ossl-ops.c), one core.  Sourced by bench/run.
#
# Measured twice, at the start of the run and at its end, and the faster of
# the two kept for each number: a 3-second microbenchmark on this VM is now
# and then caught by a slow moment of the host (a third off, seen), and the
# faster run is the nearer to what the arithmetic costs.

SIGN_S=0 VERIFY_S=0 ECDH_S=0 CRYPTO_US="" CRYPTO_CEIL=""
crypto_run() {  # crypto_run start|end
  local s v e
  [ -x "$W/ossl-ops" ] || cc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra bench/ossl-ops.c -lcrypto -o "$W/ossl-ops"
  log "crypto alone ($1): openssl speed ecdsap256 ecdhp256 on $NPROC processes, bench/ossl-ops.c"
  openssl speed -seconds 3 -multi "$NPROC" ecdsap256 ecdhp256 >"$W/speed.$1.out" 2>/dev/null
  s=$(awk '/256 bits ecdsa \(nistp256\)/ { v = $(NF-1) } END { print v }' "$W/speed.$1.out")
  v=$(awk '/256 bits ecdsa \(nistp256\)/ { v = $NF } END { print v }' "$W/speed.$1.out")
  e=$(awk '/256 bits ecdh \(nistp256\)/ { v = $NF } END { print v }' "$W/speed.$1.out")
  SIGN_S=$(awk -v a="$SIGN_S" -v b="$s" 'BEGIN { print (b > a) ? b : a }')
  VERIFY_S=$(awk -v a="$VERIFY_S" -v b="$v" 'BEGIN { print (b > a) ? b : a }')
  ECDH_S=$(awk -v a="$ECDH_S" -v b="$e" 'BEGIN { print (b > a) ? b : a }')
  # A join's crypto: one ECDH (open the sealed token), one ECDSA verify (the
  # CSR's proof of possession), two ECDSA signs (the certificate, the response).
  CRYPTO_US=$(awk -v s="$SIGN_S" -v v="$VERIFY_S" -v e="$ECDH_S" 'BEGIN { printf "%.2f", 1e6 * (2 / s + 1 / v + 1 / e) }')
  CRYPTO_CEIL=$(awk -v u="$CRYPTO_US" 'BEGIN { printf "%.0f", 1e6 / u }')
  log "crypto ($1): $s sign/s, $v verify/s, $e ecdh/s on $NPROC cores; best so far: $CRYPTO_US us of the machine per join, ceiling $CRYPTO_CEIL joins/s"
  # Each operation through the calls the extension makes, one core.
  "$W/ossl-ops" "$( [ "$QUICK" = 1 ] && echo 1000 || echo 4000 )" >"$W/ossl-ops.$1.out" || die "bench/ossl-ops.c"
  if [ -f "$W/ossl-ops.out" ]; then
    paste "$W/ossl-ops.out" "$W/ossl-ops.$1.out" | awk -F'\t' -v OFS='\t' '
      function lo(a, b) { return (a == "-" || b == "-") ? a : ((b + 0 < a + 0) ? b : a) }
      { print $1, lo($2, $5), lo($3, $6) }' >"$W/ossl-ops.tmp" && mv "$W/ossl-ops.tmp" "$W/ossl-ops.out"
  else
    cp "$W/ossl-ops.$1.out" "$W/ossl-ops.out"
  fi
}

crypto_report() {
  echo "### 2. The crypto ceiling"
  echo
  echo "\`openssl speed -multi $NPROC ecdsap256 ecdhp256\`, the faster of two runs (at the start and at the end of this run): $(fmt "$SIGN_S") signs/s, $(fmt "$VERIFY_S") verifies/s, $(fmt "$ECDH_S") ECDH/s over $NPROC cores. A join needs 2 signs (certificate, response), 1 verify (the CSR's proof of possession) and 1 ECDH (the sealed token): $CRYPTO_US µs of the whole machine ($NPROC cores busy) per join, a ceiling of **$CRYPTO_CEIL joins/s**; the best join rate is $(ratio "$BEST" "$CRYPTO_CEIL") of it."
  echo
  echo "Each operation as the extension calls it, one core (\`bench/ossl-ops.c\`, the faster of the same two runs), and the same operation through OpenSSL's older EC_KEY interface (deprecated in 3.0, no provider machinery), for comparison:"
  echo
  echo "| operation | µs, as bc_join calls it | µs, EC_KEY interface |"
  echo "| --- | ---: | ---: |"
  awk -F'\t' '{ printf "| %s | %s | %s |\n", $1, $2, $3 }' "$W/ossl-ops.out"
  echo
}
