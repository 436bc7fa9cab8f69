#!/usr/bin/env bash
# tpm-fixture.sh: real TPM 2.0 structures for test_tpm, made by swtpm through
# tpm2-tools 5.4 (no fake TPM).
#
#   tpm-fixture.sh setup DIR [PID] make DIR, a swtpm with EK certificates
#                                  (swtpm_setup --create-ek-cert, its local CA
#                                  kept under DIR), start it on a free TCP port
#                                  and write the files listed below into DIR;
#                                  with PID, the swtpm is also stopped once
#                                  that process is gone (a crashed test)
#   tpm-fixture.sh activate DIR EK CRED OUT
#                                  tpm2_activatecredential of CRED (the
#                                  badcc0de file) for the ECDSA AK under the EK
#                                  EK = rsa | ecc256 | ecc384; the secret goes to OUT
#   tpm-fixture.sh stop DIR        stop that swtpm
#
# Files (TPM2B_PUBLIC *.pub, TPMS_ATTEST *.attest, TPMT_SIGNATURE *.sig):
#   ekr.pub ekr.der ekr.crt     RSA-2048 EK, its SPKI (tpm2_readpublic -f der),
#                               its certificate (tpm2_nvread 0x01c00002)
#   ekc.pub ekc.der ekc.crt     ECC P-384 EK, likewise (0x01c00016)
#   ekp.pub                     ECC P-256 EK (low range template; swtpm has no
#                               certificate for it)
#   root.pem issuer.pem         swtpm's local CA: root and intermediate
#   ak.pub ak.name              ECDSA P-256/SHA-256 AK under the RSA EK (-n)
#   akr.pub akr.name            RSASSA/SHA-256 RSA-2048 AK under the RSA EK
#   akpss.pub                   an RSAPSS AK (must be refused)
#   node.pub node2.pub          P-256 ECDSA-SHA256 signing keys (owner primary)
#   nodenull.pub                P-256 signing key with scheme NULL
#   noderestricted.pub          P-256 restricted signing key (must be refused)
#   certify.attest/.sig         tpm2_certify of node by ak
#   certify2.attest/.sig        tpm2_certify of node2 by ak
#   certifyr.attest/.sig        tpm2_certify of node by akr
#   quote8.attest/.sig          tpm2_quote by ak, sha256:0-7, -q QUOTE_Q
#   quote10.attest/.sig         tpm2_quote by ak, sha256:0-9, -q QUOTE_Q
#   quoter.attest/.sig          tpm2_quote by akr, sha256:0-7, -q QUOTE_Q
#   port                        the swtpm TCP port
set -euo pipefail
free_port_cmd="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/tools/pg-throwaway"

QUOTE_Q=000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f

cmd="${1:-}"
dir="${2:-}"
[ -n "$cmd" ] && [ -n "$dir" ] || { sed -n '2,15p' "$0" >&2; exit 2; }

if [ "$cmd" != stop ]; then
  for t in swtpm swtpm_setup tpm2_createek tpm2_activatecredential; do
    command -v "$t" >/dev/null || { echo "tpm-fixture: $t is missing (tools/install-deps)" >&2; exit 1; }
  done
fi

export XDG_CONFIG_HOME="$dir/cfg"
tcti() { echo "swtpm:host=127.0.0.1,port=$(cat "$dir/port")"; }

# Flush every transient object and session: swtpm has no resource manager.
flush() { tpm2_flushcontext -t >/dev/null 2>&1 || true; tpm2_flushcontext -s >/dev/null 2>&1 || true; }

# Run one tpm2-tools command quietly, then flush what it left loaded.
t() {
  if ! "$@" >/dev/null 2>"$dir/last.err"; then
    echo "tpm-fixture: $*" >&2; cat "$dir/last.err" >&2; return 1
  fi
  flush
}

stop() {
  if [ -f "$dir/swtpm.pid" ]; then
    kill "$(cat "$dir/swtpm.pid")" 2>/dev/null || true
    rm -f "$dir/swtpm.pid"
  fi
}

start() {
  local port try
  for try in 1 2 3 4 5 6 7 8; do
    port=$("$free_port_cmd" free-port 2)
    if swtpm socket --tpm2 --tpmstate dir="$dir/state" \
         --server type=tcp,port=$port,bindaddr=127.0.0.1 \
         --ctrl type=tcp,port=$((port + 1)),bindaddr=127.0.0.1 \
         --flags not-need-init,startup-clear --daemon --pid file="$dir/swtpm.pid" \
         --log file="$dir/swtpm.log" 2>>"$dir/swtpm.err"; then
      echo "$port" > "$dir/port"
      export TPM2TOOLS_TCTI
      TPM2TOOLS_TCTI="$(tcti)"
      for _ in $(seq 50); do
        tpm2_getrandom 1 >/dev/null 2>&1 && return 0
        sleep 0.1
      done
      stop
    fi
  done
  echo "tpm-fixture: swtpm did not start" >&2
  return 1
}

setup() {
  rm -rf "$dir"
  mkdir -p "$dir/state" "$dir/cfg" "$dir/certs"
  swtpm_setup --tpm2 --create-config-files overwrite,root >"$dir/setup.log" 2>&1
  swtpm_setup --tpm2 --tpmstate "$dir/state" --create-ek-cert --create-platform-cert \
    --lock-nvram --overwrite --pcr-banks sha256 --write-ek-cert-files "$dir/certs" \
    >>"$dir/setup.log" 2>&1
  cp "$dir/cfg/var/lib/swtpm-localca/swtpm-localca-rootca-cert.pem" "$dir/root.pem"
  cp "$dir/cfg/var/lib/swtpm-localca/issuercert.pem" "$dir/issuer.pem"
  start
  trap 'stop' ERR
  if [ -n "$watch" ]; then
    # A watchdog: stop this swtpm when the test process has gone, however it ended.
    ( while kill -0 "$watch" 2>/dev/null && [ -f "$dir/swtpm.pid" ]; do sleep 1; done; stop ) \
      </dev/null >/dev/null 2>&1 &
  fi
  cd "$dir"

  t tpm2_createek -G rsa -c ekr.ctx -u ekr.pub
  t tpm2_readpublic -c ekr.ctx -f der -o ekr.der
  t tpm2_nvread 0x01c00002 -o ekr.crt
  t tpm2_createek -G ecc384 -c ekc.ctx -u ekc.pub
  t tpm2_readpublic -c ekc.ctx -f der -o ekc.der
  t tpm2_nvread 0x01c00016 -o ekc.crt
  t tpm2_createek -G ecc -c ekp.ctx -u ekp.pub

  t tpm2_createak -C ekr.ctx -c ak.ctx -G ecc -g sha256 -s ecdsa -u ak.pub -n ak.name
  t tpm2_createak -C ekr.ctx -c akr.ctx -G rsa -g sha256 -s rsassa -u akr.pub -n akr.name
  t tpm2_createak -C ekr.ctx -c akpss.ctx -G rsa -g sha256 -s rsapss -u akpss.pub

  t tpm2_createprimary -C o -G ecc256 -c primary.ctx
  local attrs='fixedtpm|fixedparent|sensitivedataorigin|userwithauth|sign'
  t tpm2_create -C primary.ctx -G ecc256:ecdsa-sha256 -a "$attrs" -u node.pub -r node.priv
  t tpm2_create -C primary.ctx -G ecc256:ecdsa-sha256 -a "$attrs" -u node2.pub -r node2.priv
  t tpm2_create -C primary.ctx -G ecc256:null -a "$attrs" -u nodenull.pub -r nodenull.priv
  t tpm2_create -C primary.ctx -G ecc256:ecdsa-sha256:null -a "$attrs|restricted" \
    -u noderestricted.pub -r noderestricted.priv
  t tpm2_load -C primary.ctx -u node.pub -r node.priv -c node.ctx
  t tpm2_load -C primary.ctx -u node2.pub -r node2.priv -c node2.ctx

  t tpm2_certify -c node.ctx -C ak.ctx -g sha256 -o certify.attest -s certify.sig
  t tpm2_certify -c node2.ctx -C ak.ctx -g sha256 -o certify2.attest -s certify2.sig
  t tpm2_certify -c node.ctx -C akr.ctx -g sha256 -o certifyr.attest -s certifyr.sig

  t tpm2_quote -c ak.ctx -l sha256:0,1,2,3,4,5,6,7 -q "$QUOTE_Q" -m quote8.attest -s quote8.sig
  t tpm2_quote -c ak.ctx -l sha256:0,1,2,3,4,5,6,7,8,9 -q "$QUOTE_Q" -m quote10.attest -s quote10.sig
  t tpm2_quote -c akr.ctx -l sha256:0,1,2,3,4,5,6,7 -q "$QUOTE_Q" -m quoter.attest -s quoter.sig
}

activate() {
  local ek="$1" cred="$2" out="$3"
  TPM2TOOLS_TCTI="$(tcti)"
  export TPM2TOOLS_TCTI
  cd "$dir"
  flush
  case "$ek" in
    rsa|ecc256)
      # The low-range EKs have no userWithAuth: PolicySecret(endorsement).
      local ekctx=ekr.ctx
      [ "$ek" = rsa ] || ekctx=ekp.ctx
      tpm2_startauthsession --policy-session -S act.session >/dev/null
      tpm2_policysecret -S act.session -c e >/dev/null
      tpm2_activatecredential -c ak.ctx -C "$ekctx" -i "$cred" -o "$out" \
        -P session:act.session >/dev/null
      tpm2_flushcontext act.session >/dev/null 2>&1 || true
      ;;
    ecc384)
      tpm2_activatecredential -c ak.ctx -C ekc.ctx -i "$cred" -o "$out" >/dev/null
      ;;
    *) echo "tpm-fixture: unknown EK $ek" >&2; return 2 ;;
  esac
  flush
}

case "$cmd" in
  setup) watch="${3:-}"; setup ;;
  activate) [ $# -eq 5 ] || exit 2; activate "$3" "$4" "$5" ;;
  stop) stop ;;
  *) sed -n '2,15p' "$0" >&2; exit 2 ;;
esac
