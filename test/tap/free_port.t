#!/usr/bin/env bash
# free_port.t: every port the suites pick for a server of their own (a
# cluster, a gateway, swtpm, mitm.py, a stand-in metadata service) is below
# the kernel's ephemeral range (net.ipv4.ip_local_port_range), where no
# outgoing connection can take it between the pick and the bind (a CI run
# under load once lost mitm.py's port that way), and is free when picked.
set -uo pipefail
cd "$(dirname "$0")/../.."
. test/lib/tap.sh
read -r eph_low eph_high </proc/sys/net/ipv4/ip_local_port_range

# tools/pg-throwaway free-port (run-all's cluster, the demo, tpm-rm.sh's swtpm)
worst=0
for _ in $(seq 20); do
  p=$(tools/pg-throwaway free-port 2) || { worst=99999; break; }
  [ $((p + 1)) -gt "$worst" ] && worst=$((p + 1))
done
ok_rc "$([ "$worst" -lt "$eph_low" ]; echo $?)" "pg-throwaway free-port 2: 20 picks, all below $eph_low (highest $worst)"

# bctest.free_port (every Python suite: clusters, gateways, mitm.py, HA)
out=$(/usr/bin/python3 - <<'PY'
import sys
sys.path.insert(0, "test/lib")
import bctest
print(max(bctest.free_port(3) + 2 for _ in range(300)))
PY
)
ok_rc "$([ -n "$out" ] && [ "$out" -lt "$eph_low" ]; echo $?)" "bctest.free_port(3): 300 picks, all below $eph_low (highest $out)"

# a taken port is never returned: hold one and ask for it many times over a range of one
held=$(/usr/bin/python3 - <<'PY'
import socket, sys
sys.path.insert(0, "test/lib")
import bctest
p = bctest.free_port()
s = socket.socket(); s.bind(("127.0.0.1", p)); s.listen()
import random
orig = random.randint
random.randint = lambda a, b: p if random.random() < 0.9 else orig(a, b)
got = [bctest.free_port() for _ in range(50)]
print("taken" if p in got else "never")
PY
)
ok_rc "$([ "$held" = never ]; echo $?)" "a port something listens on is never picked"

# no suite picks its own port in the ephemeral range any more
left=$(grep -rnE 'randint\((2|3|4|5)[0-9]{4}, *[0-9]{5}\)|RANDOM % 20000|free-port [0-9]+ [0-9]+ [0-9]+' \
  test tools --include='*.py' --include='*.t' --include='*.sh' --include='run-all' --include='demo' 2>/dev/null | grep -v free_port.t)
ok_rc "$([ -z "$left" ]; echo $?)" "no suite picks a port by a range of its own${left:+: $left}"

echo "1..$n"
[ "$failed" = 0 ]
