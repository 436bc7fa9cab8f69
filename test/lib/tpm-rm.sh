#!/usr/bin/env bash
# tpm-rm.sh: a swtpm with EK certificates behind a TPM resource manager
# (tpm2-abrmd on a private D-Bus session bus), the way bcd needs a TPM: the
# tpm2-openssl provider keeps a TCTI connection of its own beside bcd's ESAPI
# one, and swtpm serves one connection at a time.
#
#   tpm-rm.sh start DIR [PID]   make DIR: swtpm_setup --create-ek-cert (its
#                               local CA under DIR), swtpm on a free TCP port (below the ephemeral range),
#                               dbus-daemon --session, tpm2-abrmd --session;
#                               with PID, all three are stopped once that
#                               process is gone (a crashed test)
#   tpm-rm.sh stop DIR          stop them
#
# Files: DIR/tcti (the TCTI string for bcd --tcti and tpm2-tools -T),
# DIR/dbus-address (DBUS_SESSION_BUS_ADDRESS for them), DIR/root.pem and
# DIR/issuer.pem (swtpm's EK CA: root and intermediate), DIR/port.
set -euo pipefail
free_port_cmd="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/tools/pg-throwaway"

cmd="${1:-}"
dir="${2:-}"
[ -n "$cmd" ] && [ -n "$dir" ] || { sed -n '2,16p' "$0" >&2; exit 2; }

stop() {
  local f
  for f in tabrmd.pid swtpm.pid dbus.pid; do
    if [ -f "$dir/$f" ]; then
      kill "$(cat "$dir/$f")" 2>/dev/null || true
      rm -f "$dir/$f"
    fi
  done
}

start() {
  local port try name
  for t in swtpm swtpm_setup tpm2-abrmd dbus-daemon tpm2_getrandom; do
    command -v "$t" >/dev/null || { echo "tpm-rm: $t is missing (tools/install-deps)" >&2; exit 1; }
  done
  rm -rf "$dir"
  mkdir -p "$dir/state" "$dir/cfg" "$dir/certs"
  export XDG_CONFIG_HOME="$dir/cfg"
  swtpm_setup --tpm2 --create-config-files overwrite,root >"$dir/setup.log" 2>&1
  swtpm_setup --tpm2 --tpmstate "$dir/state" --create-ek-cert --create-platform-cert \
    --lock-nvram --overwrite --pcr-banks sha256 --write-ek-cert-files "$dir/certs" \
    >>"$dir/setup.log" 2>&1
  cp "$dir/cfg/var/lib/swtpm-localca/swtpm-localca-rootca-cert.pem" "$dir/root.pem"
  cp "$dir/cfg/var/lib/swtpm-localca/issuercert.pem" "$dir/issuer.pem"
  trap 'stop' ERR
  for try in 1 2 3 4 5 6 7 8; do
    port=$("$free_port_cmd" free-port 2)
    if swtpm socket --tpm2 --tpmstate dir="$dir/state" \
         --server type=tcp,port=$port,bindaddr=127.0.0.1 \
         --ctrl type=tcp,port=$((port + 1)),bindaddr=127.0.0.1 \
         --flags not-need-init,startup-clear --daemon --pid file="$dir/swtpm.pid" \
         --log file="$dir/swtpm.log" 2>>"$dir/swtpm.err"; then
      break
    fi
    port=""
  done
  [ -n "$port" ] || { echo "tpm-rm: swtpm did not start" >&2; exit 1; }
  echo "$port" > "$dir/port"
  dbus-daemon --session --fork --print-address=3 --print-pid=4 \
    3>"$dir/dbus-address" 4>"$dir/dbus.pid"
  export DBUS_SESSION_BUS_ADDRESS
  DBUS_SESSION_BUS_ADDRESS=$(cat "$dir/dbus-address")
  name="com.intel.tss2.Tabrmd.bcj$$"
  tpm2-abrmd --session --allow-root --tcti="swtpm:host=127.0.0.1,port=$port" \
    --dbus-name="$name" </dev/null >"$dir/tabrmd.log" 2>&1 &
  echo $! > "$dir/tabrmd.pid"
  echo "tabrmd:bus_name=$name,bus_type=session" > "$dir/tcti"
  for _ in $(seq 100); do
    tpm2_getrandom -T "$(cat "$dir/tcti")" 1 >/dev/null 2>&1 && break
    sleep 0.05
  done
  tpm2_getrandom -T "$(cat "$dir/tcti")" 1 >/dev/null 2>&1 \
    || { echo "tpm-rm: tpm2-abrmd does not answer" >&2; cat "$dir/tabrmd.log" >&2; stop; exit 1; }
  if [ -n "$watch" ]; then
    ( while kill -0 "$watch" 2>/dev/null && [ -f "$dir/swtpm.pid" ]; do sleep 1; done; stop ) \
      </dev/null >/dev/null 2>&1 &
  fi
}

case "$cmd" in
  start) watch="${3:-}"; start ;;
  stop) stop ;;
  *) sed -n '2,16p' "$0" >&2; exit 2 ;;
esac
