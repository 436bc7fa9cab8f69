#!/usr/bin/python3
"""workload_attest.t: the Workload API's selectors hold against another local user
(docs/security.md, "Workload attestation"; issue 42 items 1, 2, 3 and 7).

One bcd serves a 0666 socket in a shared directory with three rules:
exe:PY-ALLOWED (a copy of python), unit:U.service (U unique to this run) and
uid:0.  The attacker is uid 65534 (setpriv), as in workload_api.t.
- unit: a process in /system.slice/U.service (a real system unit's cgroup,
  made in the unified hierarchy) is served; uid 65534 making a cgroup named
  U.service inside its delegated user@65534.service subtree and moving
  itself there is refused, its unit logged as user@65534.service;
- exe (a): in `unshare -Urm` the system python bind-mounted over PY-ALLOWED
  and run as PY-ALLOWED: 100 connections, 0 SVIDs (another file, another
  mount namespace, logged); PY-ALLOWED itself is served;
- exe (b): 100 attempts of connect, fork, exec PY-ALLOWED while a child holds
  the connection and makes (or already made) the call, in four variants
  (close-on-exec descriptor; inherited by the exec; the accept queue stuffed
  with 100 connections first; the connection in flight in an SCM_RIGHTS
  message while the exec'd process holds an inherited copy): 0 SVIDs, and
  bcd logs why (another holder, another executable, no close-on-exec);
- the same with bcd's /proc fallback (BCD_NO_PEERPIDFD=1: a kernel without
  SO_PEERPIDFD) for 20 attempts;
- 260 idle connections of uid 65533 (no rule): root's caller is served at
  once; all but uid 65533's share are closed at once, the rest after the
  5 s deadline for a first call;
- 40 refused calls of uid 65532 are logged as at most 5 lines an interval
  and summary lines that count the rest exactly;
- bcd in a user namespace that maps root alone (as systemd's PrivateUsers=
  maps only the user and root): a uid:65534 rule does not serve uid 65533,
  which the kernel shows it as 65534, the overflow uid.
The second attack (issue 42 items 2, 3, 7 follow-up; build/wl-attack does
what Python cannot):
- exe masquerade: uid 65534 makes /proc/PID/exe name PY-ALLOWED without
  running it (prctl PR_SET_MM_MAP, its own executable copied to anonymous
  memory), in a user namespace of its own and from a CLONE_VM sibling that
  leaves the caller in bcd's: 0 SVIDs (another user namespace; the file not
  mapped); a rule with exe: alone on the 0666 socket is warned about at start;
- a thread holding the connection where /proc/PID/fd does not show it (a
  descriptor table of its own; a shared one behind an exited leader thread):
  refused;
- 1.2M descriptors of a uid with no rule: the unit's caller and root are
  answered at once (only the caller's uid's processes are read);
- a connect/close loop of a uid with no rule: root and the unit's caller make
  30 calls each, all answered;
- a stream refused before its first push is not counted open: no renewal of
  its identity follows (bc_join.session_ttl 30: half-life 15 s);
- a stream whose process root moves out of the unit ends (PERMISSION_DENIED)
  at the next renewal, which it is not sent.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentlib  # noqa: E402
import sessionlib as sl  # noqa: E402

UNIFIED = "/sys/fs/cgroup/unified"
ATTACK = os.environ.get("BCJ_WL_ATTACK", os.path.join(agentlib.TOP, "build/wl-attack"))
ATTACK_COPY = []   # wl-attack copied where every uid may run it (body)
NOBODY = 65534
SYS_PY = os.path.realpath("/usr/bin/python3")
ENVV = dict(os.environ, PYTHONHOME="/usr")

# A gRPC client: FetchX509SVID on N fresh connections; prints {code: count}.
# argv: stubs dir, socket, N, [cgroup directory to move into first]
CLIENT = r'''
import json, os, sys
if len(sys.argv) > 4:
    os.makedirs(sys.argv[4], exist_ok=True)
    with open(os.path.join(sys.argv[4], "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))
sys.path.insert(0, sys.argv[1])
import grpc, workload_pb2 as pb, workload_pb2_grpc as pbg
codes = {}
for i in range(int(sys.argv[3])):
    ch = grpc.insecure_channel("unix://" + sys.argv[2], options=[("grpc.use_local_subchannel_pool", 1)])
    try:
        r = next(pbg.SpiffeWorkloadAPIStub(ch).FetchX509SVID(
            pb.X509SVIDRequest(), metadata=[("workload.spiffe.io", "true")], timeout=20))
        code = "OK" if r.svids[0].spiffe_id.startswith("spiffe://") else "EMPTY"
    except grpc.RpcError as e:
        code = e.code().name
    codes[code] = codes.get(code, 0) + 1
    ch.close()
print(json.dumps(codes))
'''

# Exec after connect (item 2b), n attempts of one variant; prints {"svids": k, "attempts": n}.
# P connects; C (P's child) holds the connection; P execs the allowed file; C
# makes the call after the exec (or P made it before, "inflight") and reads
# the raw answer: an SVID is "spiffe://" in it (the answer's bytes, no parsing).
# argv: socket, allowed file, captured request bytes, variant, n
EXEC_ATTACK = r'''
import json, os, select, socket, sys, time
wsock, allowed, req_path, variant, n = sys.argv[1:6]
req = open(req_path, "rb").read()

def wait_exec(pid):
    end = time.time() + 5
    while time.time() < end:
        try:
            if os.readlink("/proc/%d/exe" % pid) == allowed:
                return True
        except OSError:
            pass
        time.sleep(0.001)
    return False

def read_answer(s):
    s.settimeout(3)
    buf = b""
    try:
        while b"spiffe://" not in buf:
            b = s.recv(65536)
            if not b:
                break
            buf += b
    except OSError:
        pass
    return buf

svids = 0
for i in range(int(n)):
    rd, wr = os.pipe()
    p = os.fork()
    if p == 0:
        os.close(rd)
        stuff = []
        if variant in ("stuffed", "inflight"):
            for _ in range(100):
                x = socket.socket(socket.AF_UNIX)
                try:
                    x.connect(wsock)
                except OSError:
                    x.close()
                    break
                stuff.append(x)
        s = socket.socket(socket.AF_UNIX)
        s.connect(wsock)
        if variant in ("inherit", "inflight"):
            s.set_inheritable(True)
        if variant == "inflight":
            a, b = socket.socketpair()
            s.sendall(req)
            socket.send_fds(a, [b"x"], [s.fileno()])
        c = os.fork()
        if c == 0:
            for x in stuff:
                x.close()
            ok = wait_exec(os.getppid())
            if variant == "inflight":
                s.close()
                time.sleep(0.2)
                _, fds, _, _ = socket.recv_fds(b, 1, 1)
                s = socket.socket(fileno=fds[0])
            else:
                s.sendall(req)
            got = ok and b"spiffe://" in read_answer(s)
            os.write(wr, b"1" if got else b"0")
            os._exit(0)
        os.execv(allowed, [allowed, "-S", "-c", "import time; time.sleep(6)"])
    os.close(wr)
    r, _, _ = select.select([rd], [], [], 15)
    res = os.read(rd, 1) if r else b"?"
    os.close(rd)
    svids += res == b"1"
    os.kill(p, 9)
    os.waitpid(p, 0)
print(json.dumps({"svids": svids, "attempts": int(n)}))
'''

# 260 idle connections (no call); prints "ready", then, on a line from stdin,
# how many bcd has closed (EOF) by now.
IDLE = r'''
import json, select, socket, sys
socks = []
for i in range(260):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    s.setblocking(False)
    socks.append(s)
closed = set()
print("ready", flush=True)
for line in sys.stdin:
    for i, s in enumerate(socks):
        if i in closed:
            continue
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    closed.add(i)
                    break
        except BlockingIOError:
            pass
        except OSError:
            closed.add(i)
    print(json.dumps({"closed": len(closed), "open": len(socks) - len(closed)}), flush=True)
'''


# FetchX509SVID on N fresh connections, timed; prints {"codes": {...}, "max_s": s,
# "total_s": s}.  With "retry", as SPIFFE clients do: a connect() refused (the
# listen queue full) is tried again after 50-250 ms until the call's deadline.
# argv: stubs dir, socket, N, ["retry"]
TIMED = r'''
import json, sys, time
sys.path.insert(0, sys.argv[1])
import grpc, workload_pb2 as pb, workload_pb2_grpc as pbg
retry = sys.argv[4:] == ["retry"]
opts = [("grpc.use_local_subchannel_pool", 1)]
if retry:
    opts += [("grpc.initial_reconnect_backoff_ms", 50), ("grpc.min_reconnect_backoff_ms", 50),
             ("grpc.max_reconnect_backoff_ms", 250)]
codes, worst, t0 = {}, 0.0, time.time()
for i in range(int(sys.argv[3])):
    ch = grpc.insecure_channel("unix://" + sys.argv[2], options=opts)
    t = time.time()
    try:
        r = next(pbg.SpiffeWorkloadAPIStub(ch).FetchX509SVID(
            pb.X509SVIDRequest(), metadata=[("workload.spiffe.io", "true")],
            timeout=10 if retry else 30, wait_for_ready=retry))
        code = "OK" if r.svids[0].spiffe_id.startswith("spiffe://") else "EMPTY"
    except grpc.RpcError as e:
        code = e.code().name
    worst = max(worst, time.time() - t)
    codes[code] = codes.get(code, 0) + 1
    ch.close()
print(json.dumps({"codes": codes, "max_s": round(worst, 2), "total_s": round(time.time() - t0, 2)}))
'''

# A stream refused at its first push (F5): the call's HEADERS sent (bcd binds
# the caller: it alone holds the connection), then a child forked that keeps
# the connection, then the request message: the push finds the child.
# argv: socket, captured request bytes; prints {"svid": b, "closed": b}.
LEAK = r'''
import json, os, socket, sys, time
data = open(sys.argv[2], "rb").read()
i = 24 if data.startswith(b"PRI * HTTP/2.0") else 0
cut = None
while i + 9 <= len(data):
    ln = int.from_bytes(data[i:i + 3], "big")
    if data[i + 3] == 1:
        cut = i + 9 + ln
        break
    i += 9 + ln
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(data[:cut])
time.sleep(0.5)
pid = os.fork()
if pid == 0:
    time.sleep(8)
    os._exit(0)
time.sleep(0.2)
s.sendall(data[cut:])
s.settimeout(10)
buf, closed = b"", False
try:
    while True:
        b = s.recv(65536)
        if not b:
            closed = True
            break
        buf += b
except OSError:
    pass
os.kill(pid, 9)
os.waitpid(pid, 0)
print(json.dumps({"svid": b"spiffe://" in buf, "closed": closed}))
'''

# One FetchX509SVID stream held (F6): prints a line per X509-SVID pushed
# ("svid TIME SERIAL"), then "end CODE" when the stream ends.
# argv: stubs dir, socket, seconds
WATCH = r'''
import sys, time
sys.path.insert(0, sys.argv[1])
import grpc, workload_pb2 as pb, workload_pb2_grpc as pbg
from cryptography import x509
ch = grpc.insecure_channel("unix://" + sys.argv[2])
try:
    for r in pbg.SpiffeWorkloadAPIStub(ch).FetchX509SVID(
            pb.X509SVIDRequest(), metadata=[("workload.spiffe.io", "true")],
            timeout=float(sys.argv[3])):
        d = r.svids[0].x509_svid
        leaf = x509.load_der_x509_certificate(d[:4 + int.from_bytes(d[2:4], "big")])
        print("svid %.3f %x" % (time.time(), leaf.serial_number), flush=True)
    print("end OK", flush=True)
except grpc.RpcError as e:
    print("end " + e.code().name, flush=True)
'''


def gen_stubs(env):
    """The workload.proto stubs (agentlib.workload_stubs)."""
    return agentlib.workload_stubs(env)


def capture_request(env, py):
    """The bytes a gRPC client sends for one FetchX509SVID, up to its request
    message: recorded from a listener that sends an empty HTTP/2 SETTINGS frame
    and nothing else.  A file readable by every uid."""
    path = os.path.join(env.dir, "capture.sock")
    lst = socket.socket(socket.AF_UNIX)
    lst.bind(path)
    lst.listen(1)
    got = []

    def serve():
        c, _ = lst.accept()
        c.sendall(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        c.settimeout(0.5)
        try:
            while True:
                b = c.recv(65536)
                if not b:
                    break
                got.append(b)
        except OSError:
            pass
        c.close()
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    subprocess.run([sys.executable, "-c", CLIENT, py, path, "1"], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=60)
    t.join(5)
    lst.close()
    out = os.path.join(env.dir, "request.bin")
    with open(out, "wb") as f:
        f.write(b"".join(got))
    os.chmod(out, 0o644)
    return out, b"FetchX509SVID" in b"".join(got)


def as_uid(uid, cmd, **kw):
    """cmd as uid (its group the same number, no others)."""
    return ["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid, "--clear-groups"] + cmd


def run_json(cmd, timeout=120, pre=None):
    """Run cmd; its last stdout line as JSON (or {"error": ...})."""
    if pre is not None:
        cmd = ["sh", "-c", pre + ' && exec "$@"', "sh"] + cmd
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=timeout, env=ENVV)
    except subprocess.TimeoutExpired:
        return {"error": "timed out"}
    lines = r.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, ValueError):
        return {"error": (r.stdout + r.stderr)[-2000:]}


class Cgroups:
    """Cgroups made for the script in the unified hierarchy, removed after: the
    unit U's (real), the leak test's unit L's, a user's delegated subtree with a
    look-alike of U in it, and a cgroup outside every unit."""

    def __init__(self, unit, leak_unit):
        self.made = []
        self.real = os.path.join(UNIFIED, "system.slice", unit)
        self.leak = os.path.join(UNIFIED, "system.slice", leak_unit)
        self.user = os.path.join(UNIFIED, "user.slice", "user-%d.slice" % NOBODY,
                                 "user@%d.service" % NOBODY)
        self.fake = os.path.join(self.user, "app.slice", unit)
        self.elsewhere = os.path.join(UNIFIED, "bcjt-elsewhere-%d" % os.getpid())

    def make(self):
        for d in (os.path.dirname(self.real), self.real, self.leak, self.elsewhere,
                  os.path.dirname(os.path.dirname(self.user)), os.path.dirname(self.user),
                  self.user):
            if not os.path.isdir(d):
                os.mkdir(d)
                self.made.append(d)
        # the user's delegated subtree, as systemd hands it to user@UID.service
        for name in ("", "cgroup.procs", "cgroup.subtree_control", "cgroup.threads"):
            os.chown(os.path.join(self.user, name), NOBODY, NOBODY)
        self.made += [os.path.dirname(self.fake), self.fake]

    def cleanup(self):
        for d in sorted(set(self.made), key=len, reverse=True):
            try:
                os.rmdir(d)
            except OSError:
                pass


def in_cgroup(d):
    """A shell command that moves the shell (and what it execs next) into cgroup d."""
    return "echo $$ > %s/cgroup.procs" % d


def unit_checks(tap, env, py, wsock, daemon, unit, cg):
    """Item 1: the delegated look-alike refused, the real unit served."""
    # root puts the attacker in its user manager's subtree (as systemd does); it
    # makes the look-alike there itself and moves itself into it
    fake = run_json(as_uid(NOBODY, [SYS_PY, "-c", CLIENT, py, wsock, "3", cg.fake]),
                    pre=in_cgroup(cg.user))
    tap.eq(fake, {"PERMISSION_DENIED": 3},
           "uid 65534 in a cgroup it named %s inside user@65534.service: refused" % unit)
    tap.ok(re.search(r"uid %d .*unit user@%d\.service\)" % (NOBODY, NOBODY), daemon.text()),
           "... its unit is user@65534.service, the unit that owns the subtree (logged)",
           daemon.text()[-3000:])
    real = run_json(as_uid(NOBODY, [SYS_PY, "-c", CLIENT, py, wsock, "2"]), pre=in_cgroup(cg.real))
    tap.eq(real, {"OK": 2}, "the same uid and executable in /system.slice/%s: served" % unit)


def exe_a_checks(tap, env, py, wsock, daemon, allowed):
    """Item 2a: a bind mount over the allowed path in a user + mount namespace."""
    ok = run_json(as_uid(NOBODY, [allowed, "-c", CLIENT, py, wsock, "2"]))
    tap.eq(ok, {"OK": 2}, "uid 65534 running PY-ALLOWED itself: served")
    r = subprocess.run(as_uid(NOBODY, ["unshare", "-Urm", "true"]), capture_output=True, text=True)
    if r.returncode != 0:
        tap.skip("exe: a bind mount in unshare -Urm refused", "unshare -Urm: " + r.stderr)
        return
    total = {}
    for _ in range(5):
        got = run_json(as_uid(NOBODY, ["unshare", "-Urm", "sh", "-c",
                                       'mount --bind "$0" "$1" && exec "$1" -c "$2" "$3" "$4" 20',
                                       SYS_PY, allowed, CLIENT, py, wsock]))
        for k, v in got.items():
            total[k] = total.get(k, 0) + (v if isinstance(v, int) else 1)
    tap.eq(total, {"PERMISSION_DENIED": 100},
           "the system python bind-mounted over PY-ALLOWED in unshare -Urm: 100 connections, 0 SVIDs")
    tap.ok("in another mount namespace" in daemon.text(),
           "... logged as a caller in another mount namespace", daemon.text()[-2000:])


def exe_b_checks(tap, env, wsock, daemon, allowed, req, counts, label=""):
    """Item 2b: exec after connect, each variant counts[variant] times."""
    total = 0
    for variant, n in counts:
        t = time.time()
        got = run_json(as_uid(NOBODY, [SYS_PY, "-c", EXEC_ATTACK, wsock, allowed, req, variant,
                                       str(n)]), timeout=300)
        tap.eq(got, {"svids": 0, "attempts": n},
               "%sexec after connect, %s: %d attempts, 0 SVIDs (%.1f s)" %
               (label, variant, n, time.time() - t))
        total += n
    return total


def warn_checks(tap, daemon, rule_alone, rule_paired):
    """F1: a rule that selects by exe: alone on a socket others reach is warned about."""
    text = daemon.text()
    tap.ok("rule '%s' selects by exe: without uid:, gid: or unit:" % rule_alone in text,
           "bcd warns at start that '%s' is no boundary between users on a 0666 socket" %
           rule_alone, text[-3000:])
    tap.ok("rule '%s' selects" % rule_paired not in text,
           "... and not about '%s' (paired with uid:)" % rule_paired, text[-3000:])


def masq_checks(tap, wsock, daemon, allowed, req):
    """F1: /proc/PID/exe made to name PY-ALLOWED without running it (prctl
    PR_SET_MM_MAP): in a user namespace of the caller's own, and from a
    CLONE_VM sibling that leaves the caller in bcd's.  Another uid each, so
    each one's refusals are logged in full."""
    for uid, variant, what in ((65531, "userns", "the caller in a user namespace of its own"),
                               (65530, "vm", "a CLONE_VM sibling did it, the caller in bcd's "
                                       "user namespace")):
        got = run_json(as_uid(uid, [ATTACK_COPY[0], "masq", variant, allowed, wsock,
                                    req, "10"]))
        want = {"masq": 0, "exe": allowed, "userns_same": variant == "vm", "svids": 0,
                "attempts": 10}
        tap.eq(got, want, "exe masquerade (prctl PR_SET_MM_MAP), %s: /proc/PID/exe names "
               "PY-ALLOWED, 10 attempts, 0 SVIDs" % what)
    text = daemon.text()
    tap.ok("in another user namespace" in text,
           "... logged: the first caller is in another user namespace", text[-3000:])
    tap.ok("does not map it" in text,
           "... logged: the second does not map the file it claims to run", text[-3000:])


def holder_checks(tap, wsock, daemon, req, cg):
    """F4: a thread of another process holds the connection where /proc/PID/fd
    does not show it: its own descriptor table, or a shared one behind an
    exited leader thread.  The caller is a process of unit U (uid 65528)."""
    for variant, what in (("own-table", "a thread with a descriptor table of its own"),
                          ("leader-exit", "a thread sharing a table whose leader thread exited")):
        got = [run_json(as_uid(65528, [ATTACK_COPY[0], "holder", wsock, req, variant]),
                        pre=in_cgroup(cg.real)) for _ in range(3)]
        tap.eq(got, [{"svid": False}] * 3,
               "a connection of unit U's process also held by %s of another process: "
               "3 attempts, 0 SVIDs" % what)
    tap.ok(re.search(r"by uid 65528 .*its connection is also held by pid", daemon.text()),
           "... logged: also held by another process", daemon.text()[-3000:])


def timed(cmd, pre=None, out=None):
    """run_json(cmd) in a thread; out gets the result."""
    def go():
        out.append(run_json(cmd, timeout=180, pre=pre))
    t = threading.Thread(target=go)
    t.start()
    return t


def scan_checks(tap, py, wsock, cg):
    """F2: 1.2M descriptors of uid 65533 (no rule): the unit's caller (its rule
    binds it to its connection: a holder scan) and root beside it answered at once."""
    flood = subprocess.Popen(as_uid(65533, [ATTACK_COPY[0], "fdflood", "60", "19990", "60"]),
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        ready = flood.stdout.readline().strip()
        tap.eq(ready, "ready", "uid 65533 (no rule) holds 60 x 19,990 descriptors")
        unit_out, root_out = [], []
        t1 = timed(as_uid(NOBODY, [SYS_PY, "-c", TIMED, py, wsock, "2"]), in_cgroup(cg.real),
                   unit_out)
        time.sleep(0.3)
        t2 = timed([sys.executable, "-c", TIMED, py, wsock, "2"], None, root_out)
        t1.join()
        t2.join()
        for label, got in (("the unit's caller", unit_out[0]), ("root (uid:0)", root_out[0])):
            tap.ok(got.get("codes") == {"OK": 2} and got.get("max_s", 99) < 2.0,
                   "beside them, %s: 2 calls answered in under 2 s each (%s)" % (label, got), got)
    finally:
        os.killpg(flood.pid, signal.SIGKILL)
        flood.wait()


def churn_checks(tap, py, wsock, cg):
    """F3: one connect/close loop of uid 65533 (no rule): root and the unit's
    caller make 30 calls each meanwhile (each on a new connection, trying a
    refused connect() again as SPIFFE clients do, 10 s for each call), every
    one answered.  (One connect/close loop costs the kernel about what
    draining it costs bcd: a connect() of another caller may still find the
    listen queue full now and then, so the clients try again.)"""
    flood = subprocess.Popen(as_uid(65533, [ATTACK_COPY[0], "connflood", wsock, "1", "60"]),
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        time.sleep(1)
        unit_out, root_out = [], []
        t1 = timed(as_uid(NOBODY, [SYS_PY, "-c", TIMED, py, wsock, "30", "retry"]),
                   in_cgroup(cg.real), unit_out)
        t2 = timed([sys.executable, "-c", TIMED, py, wsock, "30", "retry"], None, root_out)
        t1.join()
        t2.join()
    finally:
        os.killpg(flood.pid, signal.SIGTERM)
    made = flood.communicate(timeout=30)[0].strip()
    tap.ok(made.startswith("{") and json.loads(made)["connects"] > 1000,
           "uid 65533 (no rule) connects and closes in a loop: %s" % made)
    for label, got in (("the unit's caller", unit_out[0]), ("root (uid:0)", root_out[0])):
        tap.eq(got.get("codes"), {"OK": 30}, "meanwhile %s: 30 calls, all answered, in %.1f s "
               "(slowest %.2f s)" % (label, got.get("total_s", -1), got.get("max_s", -1)), got)


class Watcher:
    """F6: a FetchX509SVID stream of a process of unit U (uid 65534), its lines
    read as they come (time received, line)."""

    def __init__(self, py, wsock, cg):
        cmd = ["sh", "-c", in_cgroup(cg.real) + ' && exec "$@"', "sh"] + \
            as_uid(NOBODY, [SYS_PY, "-c", WATCH, py, wsock, "45"])
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=ENVV)
        self.lines = []
        self.t = threading.Thread(target=self.read, daemon=True)
        self.t.start()

    def read(self):
        for line in self.p.stdout:
            self.lines.append((time.time(), line.strip()))

    def wait_line(self, prefix, timeout):
        end = time.time() + timeout
        while time.time() < end:
            if any(x.startswith(prefix) for _, x in self.lines):
                return True
            if self.p.poll() is not None:
                self.t.join(1)
                return any(x.startswith(prefix) for _, x in self.lines)
            time.sleep(0.05)
        return False

    def stop(self, sig=None, timeout=None):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()


class IdleCaller:
    """Item 3: 260 idle connections of a uid no rule names (65533), held in a
    process of that uid, asked how many bcd has closed so far."""

    def __init__(self, wsock, uid=65533):
        self.t0 = time.time()
        self.p = subprocess.Popen(as_uid(uid, [SYS_PY, "-c", IDLE, wsock]), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=ENVV)
        self.ready = self.p.stdout.readline().strip()

    def closed(self):
        """{"closed": n, "open": m} of its 260 connections now."""
        self.p.stdin.write("x\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())

    def stop(self, sig=None, timeout=None):
        """Kill it (agentlib's Proc.stop signature: env.cleanup stops it too)."""
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()


def body(tap, env):
    """The script."""
    if not env.has_function("bc_join.issue_session(jsonb)"):
        tap.skip("workload attestation", "bc_join.issue_session(jsonb) is not installed")
        return
    if not os.access(os.path.join(UNIFIED, "cgroup.procs"), os.W_OK):
        tap.skip("workload attestation", "no writable cgroup v2 hierarchy at " + UNIFIED)
        return
    if not tap.ok(os.access(ATTACK, os.X_OK), "%s is built (make build/wl-attack)" % ATTACK):
        return
    py = gen_stubs(env)
    # a session lives 30 s: renewed every 15 s while a stream wants it (F5, F6)
    env.psql("ALTER DATABASE agent SET bc_join.session_ttl = 30")
    env.gateway()                       # new connections: the setting in force
    state = os.path.join(env.dir, "state")
    r = env.bcd("run", *env.run_args(state, token_file=env.token_file("w"), extra=["--once"]))
    tap.ok(r.returncode == 0, "the host joins", r.stderr)
    bin_dir = os.path.join(env.dir, "bin")
    os.mkdir(bin_dir, 0o755)
    allowed = os.path.join(bin_dir, "py-allowed")
    shutil.copy(SYS_PY, allowed)
    os.chmod(allowed, 0o755)
    ATTACK_COPY.append(os.path.join(bin_dir, "wl-attack"))
    shutil.copy(ATTACK, ATTACK_COPY[0])
    os.chmod(ATTACK_COPY[0], 0o755)
    req, ok = capture_request(env, py)
    tap.ok(ok, "a FetchX509SVID request captured from a real gRPC client")
    unit = "bcjt%d.service" % os.getpid()
    leak_unit = "bcjt%d-leak.service" % os.getpid()
    shared = os.path.join(env.dir, "shared")
    os.mkdir(shared, 0o755)
    wsock = os.path.join(shared, "workload.sock")
    rt = sl.runtime_dir(env)
    rule_alone = "exe:%s=>session=wl-exe" % allowed
    rule_paired = "exe:%s,uid:%d=>session=wl-exe" % (allowed, NOBODY)
    rules = ["--workload-api", wsock, "--workload-api-mode", "0666",
             "--workload-rule", rule_alone, "--workload-rule", rule_paired,
             "--workload-rule", "unit:%s=>session=wl-unit" % unit,
             "--workload-rule", "unit:%s=>session=wl-leak" % leak_unit,
             "--workload-rule", "uid:0=>session=wl-root"]
    daemon = sl.start_daemon(env, "bcd-attest", rt, env.run_args(state, extra=rules))
    tap.ok(sl.wait_socket(daemon, os.path.join(rt, "bcd", "bcd.sock")) and
           daemon.wait_log("callers bound by", 10) and os.path.exists(wsock),
           "bcd serves a 0666 Workload API socket", daemon.text())
    tap.ok("bound by pidfd" in daemon.text(), "bcd binds callers by pidfd (SO_PEERPIDFD)",
           daemon.text())
    warn_checks(tap, daemon, rule_alone, rule_paired)
    cg = Cgroups(unit, leak_unit)
    try:
        cg.make()
        checks(tap, env, py, wsock, daemon, allowed, req, unit, cg, state, rt, rules)
    finally:
        cg.cleanup()
        env.psql("ALTER DATABASE agent RESET bc_join.session_ttl")


def checks(tap, env, py, wsock, daemon, allowed, req, unit, cg, state, rt, rules):
    """Everything after the first bcd serves."""
    # F6 begins: the first stream of unit U's identity, moved out of U by root once served
    watch = Watcher(py, wsock, cg)
    env.procs.append(watch)
    tap.ok(watch.wait_line("svid ", 30), "a process of unit U holds a FetchX509SVID stream and "
           "is sent an X509-SVID", watch.lines)
    with open(os.path.join(cg.elsewhere, "cgroup.procs"), "w") as f:
        f.write(str(watch.p.pid))
    moved = time.time()
    # F5 begins: a stream refused at its first push
    got = run_json(as_uid(65529, [SYS_PY, "-c", LEAK, wsock, req]), pre=in_cgroup(cg.leak))
    tap.eq(got, {"svid": False, "closed": True},
           "a stream of unit L whose connection a forked child holds by its first push: no "
           "SVID, the connection closed")
    leak_done = time.time()

    log_checks_started = time.time()
    got = run_json(as_uid(65532, [SYS_PY, "-c", CLIENT, py, wsock, "40"]))
    tap.eq(got, {"PERMISSION_DENIED": 40}, "uid 65532 (no rule): 40 calls refused")

    # item 3 begins: its idle connections wait for their deadline while the rest runs
    idle = IdleCaller(wsock)
    env.procs.append(idle)
    tap.eq(idle.ready, "ready", "uid 65533 (no rule) holds 260 idle connections")
    t = time.time()
    got = run_json([sys.executable, "-c", CLIENT, py, wsock, "3"], timeout=30)
    tap.eq(got, {"OK": 3}, "root's caller (uid:0 rule) is served beside them (%.1f s)" %
           (time.time() - t))
    first = idle.closed()
    tap.ok(first["closed"] >= 260 - 8 and first["open"] <= 8,
           "all but uid 65533's share of the slots without a rule (8) closed at once", first)

    t = time.time()
    unit_checks(tap, env, py, wsock, daemon, unit, cg)
    tap.note("unit: %.1f s" % (time.time() - t))
    t = time.time()
    masq_checks(tap, wsock, daemon, allowed, req)
    tap.note("exe masquerade: %.1f s" % (time.time() - t))
    t = time.time()
    holder_checks(tap, wsock, daemon, req, cg)
    tap.note("holders: %.1f s" % (time.time() - t))
    t = time.time()
    scan_checks(tap, py, wsock, cg)
    tap.note("descriptor flood: %.1f s" % (time.time() - t))
    t = time.time()
    churn_checks(tap, py, wsock, cg)
    tap.note("connection churn: %.1f s" % (time.time() - t))
    t = time.time()
    exe_a_checks(tap, env, py, wsock, daemon, allowed)
    tap.note("exe (a): %.1f s" % (time.time() - t))
    t = time.time()
    n = exe_b_checks(tap, env, wsock, daemon, allowed, req,
                     [("fork", 25), ("inherit", 25), ("stuffed", 25), ("inflight", 25)])
    tap.eq(n, 100, "exec after connect: 100 attempts in all")
    tap.note("exe (b): %.1f s" % (time.time() - t))
    text = daemon.text()
    # which check refuses an attempt depends on when bcd accepted it (before or after the
    # exec), and only the first refusals of an interval are logged one by one
    reasons = [why for why in ("is also held by pid", "no longer holds its connection",
                               "runs another executable than when it connected",
                               "without close-on-exec") if why in text]
    tap.ok(reasons, "bcd logs why: %s" % ", ".join(reasons), text[-3000:])
    ok = run_json(as_uid(NOBODY, [allowed, "-c", CLIENT, py, wsock, "2"]))
    tap.eq(ok, {"OK": 2}, "... and PY-ALLOWED is still served after the attacks")

    # F6: the moved process's stream ends at the renewal (at most 15 s after its SVID)
    watch.wait_line("end ", max(1, moved + 25 - time.time()))
    after = [x for when, x in watch.lines if x.startswith("svid ") and when > moved]
    ends = [x for _, x in watch.lines if x.startswith("end ")]
    tap.ok(not after and ends == ["end PERMISSION_DENIED"],
           "moved out of unit U by root: no X509-SVID pushed after, the stream ended "
           "PERMISSION_DENIED at the renewal", watch.lines)
    watch.stop()
    # F5: a refused stream is not counted open: its identity is not renewed (15 s)
    time.sleep(max(0, leak_done + 17 - time.time()))
    n = daemon.text().count("session wl-leak: X509-SVID")
    tap.eq(n, 1, "unit L's identity was provisioned once for the refused stream and not "
           "renewed after it (no stream open)")

    time.sleep(max(0, idle.t0 + 6.5 - time.time()))
    later = idle.closed()
    tap.eq(later["open"], 0, "uid 65533's other idle connections closed by the 5 s deadline for "
           "a first call", later)
    idle.stop()

    # the summary of uid 65532's refusals (its interval began with them)
    uid = 65532
    needle = "more refusals of uid %d" % uid
    daemon.wait_log(needle, max(1, log_checks_started + 15 - time.time()))
    text = daemon.text()
    full = len(re.findall(r"by uid %d gid %d, .*: no identity" % (uid, uid), text))
    summed = sum(int(x) for x in re.findall(r"(\d+) more refusals of uid %d in the last" % uid, text))
    tap.ok(0 < full <= 10 and full + summed == 40,
           "uid 65532's refusals logged: %d line by line (at most 5 an interval), %d counted in "
           "summary lines: 40 in all" % (full, summed), text[-3000:])
    daemon.stop()
    tap.eq(daemon.rc, 0, "bcd stops cleanly", daemon.text()[-2000:])

    # the /proc fallback: a kernel without SO_PEERPIDFD
    os.environ["BCD_NO_PEERPIDFD"] = "1"   # bcd's environment is a copy of this one
    try:
        daemon2 = sl.start_daemon(env, "bcd-attest2", rt, env.run_args(state, extra=rules))
    finally:
        del os.environ["BCD_NO_PEERPIDFD"]
    tap.ok(sl.wait_socket(daemon2, os.path.join(rt, "bcd", "bcd.sock")) and
           daemon2.wait_log("bound by /proc", 10), "BCD_NO_PEERPIDFD=1: bcd binds callers by /proc",
           daemon2.text())
    exe_b_checks(tap, env, wsock, daemon2, allowed, req, [("fork", 10), ("stuffed", 10)],
                 label="without a pidfd: ")
    ok = run_json(as_uid(NOBODY, [allowed, "-c", CLIENT, py, wsock, "2"]))
    tap.eq(ok, {"OK": 2}, "without a pidfd: PY-ALLOWED is served")
    daemon2.stop()
    tap.eq(daemon2.rc, 0, "the second bcd stops cleanly", daemon2.text()[-2000:])

    # bcd in a user namespace of its own that maps root alone (systemd's PrivateUsers= maps
    # the user and root): every other uid reaches it as the overflow uid 65534
    if subprocess.run(["unshare", "-Ur", "true"]).returncode != 0:
        tap.skip("a uid: selector never matches the overflow uid", "unshare -Ur fails here")
        return
    cmd = ["unshare", "-Ur", env.bcd_bin, "run"] + env.run_args(state, extra=[
        "--workload-api", wsock, "--workload-api-mode", "0666",
        "--workload-rule", "uid:%d=>session=wl-nobody" % NOBODY,
        "--workload-rule", "uid:0=>session=wl-root"])
    daemon3 = sl.Proc(env, "bcd-attest3", cmd, sl.bcd_env(env, rt))
    env.procs.append(daemon3)
    tap.ok(daemon3.wait_log("never match uid: or gid:", 30) and os.path.exists(wsock),
           "bcd in a user namespace mapping root alone says uid 65534 stands for every other user",
           daemon3.text())
    got = run_json(as_uid(65533, [SYS_PY, "-c", CLIENT, py, wsock, "2"]))
    tap.eq(got, {"PERMISSION_DENIED": 2},
           "uid 65533, which that bcd sees as 65534: refused by the uid:65534 rule")
    got = run_json([sys.executable, "-c", CLIENT, py, wsock, "1"], timeout=60)
    tap.eq(got, {"OK": 1}, "root, mapped: its uid:0 rule serves it")
    daemon3.stop()
    tap.eq(daemon3.rc, 0, "the third bcd stops cleanly", daemon3.text()[-2000:])


agentlib.main(body)
