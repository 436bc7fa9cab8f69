#!/usr/bin/env python3
"""Extra checks: fd-number reuse, abrupt client death, many connections,
unimplemented method.  Run as root inside the chroot with the server running
on argv[1] (see run_extra.sh)."""
import os, sys, time, signal, subprocess
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "py"))
import grpc, workload_pb2 as pb, workload_pb2_grpc as pbg
sock = sys.argv[1]
HDR = [("workload.spiffe.io", "true")]

def one_jwt(tag):
    ch = grpc.insecure_channel("unix://" + sock)
    r = pbg.SpiffeWorkloadAPIStub(ch).FetchJWTSVID(pb.JWTSVIDRequest(audience=[tag]), metadata=HDR, timeout=5)
    ch.close()
    return r.svids[0].spiffe_id

# 1. sequential connections from different uids: same fd number gets reused
if len(sys.argv) > 2 and sys.argv[2] == "child":  # re-exec as another uid
    print("child uid=%d got %s" % (os.getuid(), one_jwt("seq")), flush=True); sys.exit(0)
for u in ("nobody", "daemon", "root"):
    cmd = ["python3", __file__, sock, "child"]
    if u != "root":
        cmd = ["setpriv", "--reuid=" + u, "--regid=" + ("nogroup" if u == "nobody" else u), "--clear-groups"] + cmd
    subprocess.run(cmd, check=True)
    time.sleep(0.3)

# 2. abrupt death of a streaming client (SIGKILL, no cancel, no GOAWAY)
code = ("import sys;sys.path.insert(0,'py');import grpc,workload_pb2 as pb,workload_pb2_grpc as g;"
        "s=g.SpiffeWorkloadAPIStub(grpc.insecure_channel('unix://%s')).FetchX509SVID(pb.X509SVIDRequest(),"
        "metadata=[('workload.spiffe.io','true')]);print('killme got',next(s).svids[0].spiffe_id,flush=True);"
        "import time;time.sleep(100)" % sock)
p = subprocess.Popen(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "python3", "-c", code],
                     stdout=subprocess.PIPE, text=True)
print(p.stdout.readline().strip(), flush=True)
os.kill(p.pid, signal.SIGKILL); p.wait()
print("killed streaming client pid", p.pid, flush=True)
time.sleep(0.5)

# 3. unknown method -> UNIMPLEMENTED (raw generic call)
ch = grpc.insecure_channel("unix://" + sock)
try:
    ch.unary_unary("/SpiffeWorkloadAPI/FetchJWTBundles")(b"", metadata=HDR, timeout=5)
except grpc.RpcError as e:
    print("FetchJWTBundles ->", e.code(), repr(e.details()), flush=True)

# 4. many concurrent connections (one grpc_server each): count server threads
# NB: without use_local_subchannel_pool, grpcio shares ONE connection for all
# channels to the same target in a process.
chans = [grpc.insecure_channel("unix://" + sock, options=[("grpc.use_local_subchannel_pool", 1)]) for _ in range(50)]
for c in chans:
    pbg.SpiffeWorkloadAPIStub(c).FetchJWTSVID(pb.JWTSVIDRequest(audience=["m"]), metadata=HDR, timeout=5)
srv = sys.argv[2]  # server pid
st = open("/proc/%s/status" % srv).read()
th = [l for l in st.splitlines() if l.startswith(("Threads", "VmRSS"))]
fds = len(os.listdir("/proc/%s/fd" % srv))
print("with 50 extra live connections: server", th, "fds=%d" % fds, flush=True)
for c in chans:
    c.close()
time.sleep(0.5)
st = open("/proc/%s/status" % srv).read()
print("after closing them: server", [l for l in st.splitlines() if l.startswith(("Threads", "VmRSS"))],
      "fds=%d" % len(os.listdir("/proc/%s/fd" % srv)), flush=True)
