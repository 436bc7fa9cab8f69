#!/bin/sh
# Extra checks (fd reuse, SIGKILLed client, UNIMPLEMENTED, 50 connections,
# default permissions).  Run inside the chroot as root: sh run_extra.sh
cd "$(dirname "$0")"; mkdir -p results
make -s all || exit 1
SOCK=/run/bcd-proto/workload.sock
SERVER=${SERVER:-./wl_server}
$SERVER -s $SOCK -r 2 -o 2> results/server_extra.log &
SRV=$!; sleep 0.5
python3 test_extra.py $SOCK $SRV
sleep 0.3; kill -TERM $SRV; wait $SRV
echo "== server (selected)"
grep -E "ACCEPT|FetchJWTSVID on|killme|cancelled|shutting|UNIMPL|Bundles" results/server_extra.log | grep -v "conn#[1-9][0-9]\b" | head -14; echo "(distinct conns seen: $(grep -c ACCEPT results/server_extra.log))"
echo "== default mode (no -o): permissions and a nobody client"
$SERVER -s $SOCK 2> results/server_perm.log &
SRV=$!; sleep 0.5
ls -ld /run/bcd-proto $SOCK
setpriv --reuid=nobody --regid=nogroup --clear-groups python3 -c "
import sys;sys.path.insert(0,'py');import grpc,workload_pb2 as pb,workload_pb2_grpc as g
try:
  g.SpiffeWorkloadAPIStub(grpc.insecure_channel('unix://$SOCK')).FetchJWTSVID(pb.JWTSVIDRequest(audience=['a']),metadata=[('workload.spiffe.io','true')],timeout=3)
except grpc.RpcError as e: print('nobody on 0600 socket:', e.code(), e.details()[:80])"
kill -TERM $SRV; wait $SRV
