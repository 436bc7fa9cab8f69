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
#   tpm-rm.sh pause DIR         stop swtpm alone, as a TPM that goes away: tpm2-abrmd
#                               stays and answers every command with a transport error
#   tpm-rm.sh resume DIR        swtpm again on its port with its state (a TPM reset:
#                               what was loaded is gone, the keys' seeds are not); the
#                               dictionary-attack count the unorderly stop added is cleared
#
# Files: DIR/tcti (the TCTI string for bcd --tcti and tpm2-tools -T),
# DIR/dbus-address (DBUS_SESSION_BUS_ADDRESS for them), DIR/root.pem and
# DIR/issuer.pem (swtpm's EK CA: root and intermediate), DIR/port.
set -euo pipefail

# A port P with P and P+1 free, below the kernel's ephemeral range (what
# tools/pg-throwaway free-port does; this script runs as the postgres OS user,
# which may not reach the repository's tools/ when it lives under /root).
free_pair() {
  local eph_low p
  read -r eph_low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || eph_low=32768
  for _ in $(seq 200); do
    p=$((10000 + RANDOM % (eph_low - 10002)))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null &&
       ! (exec 3<>"/dev/tcp/127.0.0.1/$((p + 1))") 2>/dev/null; then
      echo "$p"; return 0
    fi
  done
  return 1
}

cmd="${1:-}"
dir="${2:-}"
[ -n "$cmd" ] && [ -n "$dir" ] || { sed -n '2,21p' "$0" >&2; exit 2; }

stop() {
  local f
  for f in tabrmd.pid swtpm.pid dbus.pid; do
    if [ -f "$dir/$f" ]; then
      kill "$(cat "$dir/$f")" 2>/dev/null || true
      rm -f "$dir/$f"
    fi
  done
}

# swtpm on DIR/port with DIR/state, in the background (its pid in DIR/swtpm.pid).
swtpm_on() {
  swtpm socket --tpm2 --tpmstate dir="$dir/state" \
    --server type=tcp,port=$1,bindaddr=127.0.0.1 \
    --ctrl type=tcp,port=$(($1 + 1)),bindaddr=127.0.0.1 \
    --flags not-need-init,startup-clear --daemon --pid file="$dir/swtpm.pid" \
    --log file="$dir/swtpm.log" 2>>"$dir/swtpm.err"
}

# pause: the watcher (start DIR PID) stops everything once swtpm.pid is gone, so
# the file stays; resume: a TPM stopped without TPM2_Shutdown counts one
# dictionary-attack failure when it starts again (swtpm locks out after 3), which
# a real outage would too; the test TPM's lockout authorization is empty.
pause() {
  if [ -f "$dir/swtpm.pid" ]; then kill "$(cat "$dir/swtpm.pid")" 2>/dev/null || true; fi
  for _ in $(seq 50); do
    (exec 3<>"/dev/tcp/127.0.0.1/$(cat "$dir/port")") 2>/dev/null || return 0
    sleep 0.1
  done
  echo "tpm-rm: swtpm does not stop" >&2; return 1
}

resume() {
  local tcti
  swtpm_on "$(cat "$dir/port")" || { echo "tpm-rm: swtpm did not start again" >&2; exit 1; }
  tcti=$(cat "$dir/tcti")
  export DBUS_SESSION_BUS_ADDRESS
  DBUS_SESSION_BUS_ADDRESS=$(cat "$dir/dbus-address")
  for _ in $(seq 100); do
    tpm2_dictionarylockout -T "$tcti" --clear-lockout >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "tpm-rm: the TPM does not answer again" >&2; exit 1
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
    port=$(free_pair)
    if swtpm_on "$port"; then
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
  pause) pause ;;
  resume) resume ;;
  *) sed -n '2,21p' "$0" >&2; exit 2 ;;
esac
