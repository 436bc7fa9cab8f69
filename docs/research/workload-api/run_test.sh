#!/bin/sh
# Two-uid concurrency test.  Run inside the chroot as root:  sh run_test.sh
set -u
cd "$(dirname "$0")"; mkdir -p results
SOCK=/run/bcd-proto/workload.sock
SERVER=${SERVER:-./wl_server}
make -s all || exit 1
$SERVER -s $SOCK -r 3 -o 2> results/server.log &
SRV=$!
sleep 0.5
# three clients at once: root, nobody, daemon (distinct uids)
python3 wl_client.py $SOCK root   > results/c_root.log 2>&1 &
A=$!
setpriv --reuid=nobody --regid=nogroup --clear-groups python3 wl_client.py $SOCK nobody > results/c_nobody.log 2>&1 &
B=$!
setpriv --reuid=daemon --regid=daemon --clear-groups python3 wl_client.py $SOCK daemon > results/c_daemon.log 2>&1 &
C=$!
rc=0
wait $A || rc=1; wait $B || rc=1; wait $C || rc=1
sleep 0.5
kill -TERM $SRV; wait $SRV
echo "== clients"; cat results/c_root.log results/c_nobody.log results/c_daemon.log
echo "== server"; cat results/server.log
echo "== overall: $([ $rc = 0 ] && echo PASS || echo FAIL)"
exit $rc
