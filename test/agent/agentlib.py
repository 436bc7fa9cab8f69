"""agentlib.py: what the agent's TAP scripts share.

On test/lib/bctest.py's throwaway cluster with the real bc_join extension: a
throwaway TLS CA made with the openssl CLI that signs the gateway's
certificate (bcd pins that CA), the real bc-gateway, and real bcd processes
(the ASan + UBSan build unless BCJ_BCD says otherwise), all on 127.0.0.1 in
one temporary directory that Env.cleanup() removes after stopping
everything it started.
Debian's /usr/bin/python3 (python3-cryptography, python3-jwcrypto).
"""
import base64
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from bctest import TOP, ClusterEnv, Tap, free_port, run, wait_port  # noqa: E402,F401

HERE = os.path.dirname(os.path.abspath(__file__))
TRUST_DOMAIN = "agent.bc-join.test"

# The replacing join-token attestor of the brief: every join waits for an
# operator's approval, and the result restricts the node to two kinds.
APPROVAL_ATTESTOR = r"""
CREATE FUNCTION public.approval_token_verify(evidence jsonb, context jsonb) RETURNS jsonb LANGUAGE plpgsql SET search_path = public, pg_catalog, pg_temp AS $$
DECLARE t jsonb; d jsonb;
BEGIN
  IF evidence->>'token' IS NULL THEN PERFORM bc_join.refuse('join-token:no-evidence'); END IF;
  t := bc_join.check_join_token('join-token', evidence->>'token', context);
  d := bc_join.await_approval('join-token', t->>'tenantId', context, '{}', 1);
  IF d IS NOT NULL THEN RETURN d; END IF;
  PERFORM bc_join.spend_join_token(t->>'tokenId');
  RETURN jsonb_build_object('tenantId', t->>'tenantId', 'role', t->>'role', 'poolId', t->>'poolId', 'tokenId', t->>'tokenId',
                            'allowedKinds', jsonb_build_array('inventory.refresh','diag.*'));
END $$;
SELECT bc_join.register_attestor('join-token', '2', ARRAY['node'], 'public.approval_token_verify(jsonb,jsonb)');
"""


def sha256_file(path):
    """Hex SHA-256 of a file's bytes."""
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def mode(path):
    """Permission bits of path."""
    return os.stat(path).st_mode & 0o7777


class Proc:
    """A background process with its output in a log file."""

    def __init__(self, env, name, cmd, envv=None):
        self.log = os.path.join(env.dir, "%s.log" % name)
        self.logf = open(self.log, "ab")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.logf,
                                     env=envv or os.environ)
        self.rc = None
        self.out = ""

    def text(self):
        """The log so far."""
        with open(self.log, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def wait_log(self, needle, timeout=30, count=1):
        """Wait until needle appears count times in the log; True when it did."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.text().count(needle) >= count:
                return True
            if self.proc.poll() is not None:
                return self.text().count(needle) >= count
            time.sleep(0.1)
        return False

    def wait(self, timeout=60):
        """Wait for the exit; (exit status, stdout).  Killed after timeout."""
        if self.rc is None:
            try:
                out, _ = self.proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                out, _ = self.proc.communicate()
            self.rc = self.proc.returncode
            self.out = out.decode("utf-8", "replace")
            self.logf.close()
        return self.rc, self.out

    def stop(self, sig=signal.SIGTERM, timeout=30):
        """Signal the process (if running) and wait; (exit status, stdout)."""
        if self.rc is None and self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.wait(timeout)


class Env(ClusterEnv):
    """bctest's cluster (database agent), a TLS CA, processes."""

    def __init__(self):
        super().__init__("bcj-agent-", "agent", TRUST_DOMAIN)
        self.procs = []
        self.bcd_bin = os.environ.get("BCJ_BCD", os.path.join(TOP, "build/asan/bcd"))
        self.gw_bin = os.environ.get("BCJ_GATEWAY", os.path.join(TOP, "build/bc-gateway"))
        self.nbcd = 0

    def has_function(self, name):
        """True when the installed extension has the function (regprocedure text)."""
        return self.psql("SELECT to_regprocedure('%s') IS NOT NULL" % name) == "t"

    def token_file(self, name, uses=1):
        """A fresh join token written to a 0600 file; its path."""
        path = os.path.join(self.dir, "token-%s" % name)
        with open(path, "w") as f:
            f.write(self.token(uses) + "\n")
        os.chmod(path, 0o600)
        return path

    def register_approval_attestor(self):
        """Replace join-token with the approval attestor above."""
        self.psql(APPROVAL_ATTESTOR)

    # -- TLS: a CA that bcd pins, certificates it signs -------------------------
    def openssl(self, *args):
        """Run the openssl CLI quietly; raise on failure."""
        subprocess.run(["openssl"] + list(args), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def make_ca(self, name="tls-ca"):
        """A self-signed P-256 CA; (key path, certificate path)."""
        key = os.path.join(self.dir, name + ".key")
        crt = os.path.join(self.dir, name + ".crt")
        self.openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                     "-nodes", "-days", "1", "-subj", "/CN=" + name,
                     "-addext", "basicConstraints=critical,CA:TRUE",
                     "-addext", "keyUsage=critical,keyCertSign,cRLSign",
                     "-keyout", key, "-out", crt)
        return key, crt

    def server_cert(self, name, ca_key, ca_crt):
        """A TLS server certificate for 127.0.0.1 signed by the CA; (key, cert)."""
        key = os.path.join(self.dir, name + ".key")
        csr = os.path.join(self.dir, name + ".csr")
        crt = os.path.join(self.dir, name + ".crt")
        ext = os.path.join(self.dir, name + ".ext")
        with open(ext, "w") as f:
            f.write("subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n"
                    "extendedKeyUsage=serverAuth\n")
        self.openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                     "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", key, "-out", csr)
        self.openssl("x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key,
                     "-CAcreateserial", "-days", "1", "-extfile", ext, "-out", crt)
        return key, crt

    def make_tls(self):
        """The CA bcd pins and the gateway's certificate from it."""
        self.ca_key, self.ca = self.make_ca()
        self.gw_key, self.gw_cert = self.server_cert("gateway", self.ca_key, self.ca)

    # -- processes ------------------------------------------------------------
    def gateway(self, *args):
        """Start bc-gateway on a free port (becomes env.gw_url); its Proc."""
        self.gw_port = free_port()
        cmd = [self.gw_bin, "--listen", "127.0.0.1:%d" % self.gw_port,
               "--tls-cert", self.gw_cert, "--tls-key", self.gw_key,
               "--db", self.conninfo, "--log-level", "warn"] + list(args)
        p = Proc(self, "gateway", cmd)
        self.procs.append(p)
        wait_port(self.gw_port, p.proc, "bc-gateway")
        self.gw_url = "https://127.0.0.1:%d" % self.gw_port
        return p

    def mitm(self, mode, extra=(), name=None):
        """The tampering man in the middle (mitm.py) in front of the gateway; its URL."""
        port = free_port()
        if not hasattr(self, "mitm_cert"):
            self.mitm_key, self.mitm_cert = self.server_cert("mitm", self.ca_key, self.ca)
        cmd = ["/usr/bin/python3", os.path.join(HERE, "mitm.py"), "--port", str(port),
               "--cert", self.mitm_cert, "--key", self.mitm_key, "--upstream", self.gw_url,
               "--upstream-ca", self.ca, "--mode", mode] + list(extra)
        p = Proc(self, "mitm-" + (name or mode), cmd)
        self.procs.append(p)
        wait_port(port, p.proc, "mitm.py")
        return "https://127.0.0.1:%d" % port, p

    def bcd_env(self):
        """The environment of bcd: sanitizer options on.  XDG_RUNTIME_DIR is
        dropped, so every daemon's socket defaults to STATE/run/bcd.sock and
        daemons of different state directories never share one."""
        envv = dict(os.environ)
        envv.pop("XDG_RUNTIME_DIR", None)
        envv.pop("BCD_SOCKET", None)
        envv.setdefault("ASAN_OPTIONS", "detect_leaks=1")
        envv.setdefault("UBSAN_OPTIONS", "print_stacktrace=1")
        return envv

    def run_args(self, state, gateway=None, token_file=None, extra=()):
        """The common options of bcd run for state."""
        args = ["--gateway", gateway or self.gw_url, "--gateway-ca", self.ca,
                "--service-keys", self.service_keys, "--state-dir", state]
        if token_file:
            args += ["--token-file", token_file]
        return args + list(extra)

    def bcd(self, *args, timeout=90):
        """Run bcd to its end; CompletedProcess with text output."""
        try:
            return subprocess.run([self.bcd_bin] + list(args), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, timeout=timeout,
                                  env=self.bcd_env())
        except subprocess.TimeoutExpired as e:
            return subprocess.CompletedProcess(e.cmd, -9, e.stdout or "", "timed out")

    def bcd_bg(self, *args):
        """Start bcd in the background; a Proc."""
        self.nbcd += 1
        p = Proc(self, "bcd-%d" % self.nbcd, [self.bcd_bin] + list(args), self.bcd_env())
        self.procs.append(p)
        return p

    def stop_processes(self):
        for p in reversed(self.procs):
            p.stop(signal.SIGTERM, 15)


def main(body):
    """Run body(tap, env) with cleanup on every path; exit with TAP's verdict."""
    def setup(env):
        env.start_cluster("agents")
        env.make_tls()
        env.gateway()
    run(Env(), setup, body)


def workload_stubs(env):
    """The Python gRPC stubs of bcd's src/agent/workload/workload.proto, made by
    Debian's grpc_tools.protoc in env.dir/py (readable by every uid, for
    clients run as another user); that directory."""
    proto_dir = os.path.join(TOP, "src", "agent", "workload")
    wkt = "/usr/lib/python3/dist-packages/grpc_tools/_proto"
    out = os.path.join(env.dir, "py")
    os.makedirs(out)
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", proto_dir, "-I", wkt,
                    "--python_out", out, "--grpc_python_out", out, "workload.proto"], check=True)
    os.chmod(env.dir, 0o755)
    os.chmod(out, 0o755)
    return out


class WorkloadError(Exception):
    """A Workload API call that did not end OK: .code, the status' name
    ("PERMISSION_DENIED"), and .details (grpc.RpcError's, by name)."""

    def __init__(self, code, details=""):
        super().__init__("%s %s" % (code, details))
        self.code = code
        self.details = details


class Workload:
    """A Workload API client on socket sock: gRPC (Debian's python3-grpcio, the stubs
    of workload_stubs in the directory stubs) in wl_client.py, a child process, and
    never in the script's own: a script that imports grpc may hang in its next fork
    under Python 3.13 (wl_client.py says why).  The script builds and reads the
    messages itself (self.pb, workload_pb2: python3-protobuf alone).  Calls raise
    WorkloadError as the stub's raise grpc.RpcError; a helper that fails or does not
    answer raises RuntimeError (the script fails).  Stopped with env's processes."""

    def __init__(self, env, stubs, sock, options=()):
        if stubs not in sys.path:
            sys.path.insert(0, stubs)
        import workload_pb2
        self.pb = workload_pb2
        self.service = workload_pb2.DESCRIPTOR.services_by_name["SpiffeWorkloadAPI"]
        env.nwl = getattr(env, "nwl", 0) + 1
        self.log = os.path.join(env.dir, "wl-client-%d.log" % env.nwl)
        with open(self.log, "ab") as logf:
            self.proc = subprocess.Popen(
                [sys.executable, os.path.join(HERE, "wl_client.py"), stubs, sock,
                 json.dumps([list(o) for o in options])],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=logf)
        self.buf = b""
        self.nstream = 0
        self.rc = None
        env.procs.append(self)

    def ask(self, cmd, timeout):
        """One command, its answer (a dict); RuntimeError when none comes within timeout."""
        try:
            self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
            self.proc.stdin.flush()
        except OSError as e:
            raise RuntimeError("wl_client.py: %s (%s)" % (e, self.text()[-2000:]))
        deadline = time.time() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline - time.time()
            r = select.select([fd], [], [], max(0, left))[0] if left > 0 else []
            b = os.read(fd, 1 << 20) if r else b""
            if not b:
                self.proc.kill()
                raise RuntimeError("wl_client.py: %s after %s (%s)" % (
                    "no answer in %d s" % timeout if not r else "ended", cmd.get("op"),
                    self.text()[-2000:]))
            self.buf += b
        line, self.buf = self.buf.split(b"\n", 1)
        a = json.loads(line)
        if a["code"] == "HELPER":
            raise RuntimeError("wl_client.py: " + a["details"])
        if "response" in a:
            a["response"] = base64.b64decode(a["response"])
        return a

    def text(self):
        """The helper's stderr so far."""
        with open(self.log, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def _cmd(self, op, method, request, metadata, timeout):
        return {"op": op, "method": method, "metadata": metadata, "timeout": timeout,
                "request": base64.b64encode(request.SerializeToString()).decode()}

    def _message(self, method, a):
        """The response message of answer a, or WorkloadError."""
        if a["code"] == "OK":
            out = self.service.methods_by_name[method].output_type.name
            return getattr(self.pb, out).FromString(a["response"])
        raise WorkloadError(a["code"], a.get("details", ""))

    def call(self, method, request, metadata=True, timeout=10):
        """A unary call (FetchJWTSVID, ValidateJWTSVID): its response."""
        return self._message(method, self.ask(self._cmd("call", method, request, metadata, timeout),
                                              timeout + 30))

    def stream(self, method, request, metadata=True, timeout=90):
        """A server stream (FetchX509SVID, FetchX509Bundles, FetchJWTBundles): a
        WorkloadStream, which next() and for take its messages from."""
        self.nstream += 1
        cmd = self._cmd("open", method, request, metadata, timeout)
        cmd["stream"] = self.nstream
        self.ask(cmd, 30)
        return WorkloadStream(self, self.nstream, method, timeout)

    def first(self, method, request, metadata=True, timeout=10):
        """The first message of a new stream (next(stub.Method(...))); the stream
        is cancelled after it."""
        s = self.stream(method, request, metadata, timeout)
        try:
            return next(s)
        finally:
            s.cancel()

    def stop(self, sig=signal.SIGTERM, timeout=15):
        """Close the channel and end the helper; (exit status, "")."""
        if self.rc is None:
            if self.proc.poll() is None:
                try:
                    self.ask({"op": "close"}, timeout)
                except RuntimeError:
                    pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.rc = self.proc.returncode
        return self.rc, ""


class WorkloadStream:
    """A server stream of a Workload: an iterator of its messages that raises
    WorkloadError when the stream ends with another status than OK."""

    def __init__(self, wl, sid, method, timeout):
        self.wl, self.sid, self.method, self.timeout = wl, sid, method, timeout

    def __iter__(self):
        return self

    def __next__(self):
        a = self.wl.ask({"op": "next", "stream": self.sid}, (self.timeout or 600) + 30)
        if a["code"] == "END":
            raise StopIteration
        return self.wl._message(self.method, a)

    def cancel(self):
        """Cancel the stream (grpc's cancel: it ends CANCELLED)."""
        self.wl.ask({"op": "cancel", "stream": self.sid}, 30)

    def cancel_in(self, seconds):
        """Cancel the stream seconds from now (threading.Timer(seconds, stream.cancel)
        in the helper); None: not any more."""
        self.wl.ask({"op": "cancel_in", "stream": self.sid, "seconds": seconds}, 30)
