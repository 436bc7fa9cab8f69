"""agentlib.py: what the agent's TAP scripts share.

A throwaway PostgreSQL cluster with the real bc_join extension
(tools/bc-join-keygen, tools/pg-throwaway), a throwaway TLS CA made with the
openssl CLI that signs the gateway's certificate (bcd pins that CA), the
real bc-gateway, and real bcd processes (the ASan + UBSan build unless
BCJ_BCD says otherwise), all on 127.0.0.1 in one temporary directory that
Env.cleanup() removes after stopping everything it started.
Debian's /usr/bin/python3 (python3-cryptography, python3-jwcrypto).
"""
import hashlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
HERE = os.path.dirname(os.path.abspath(__file__))
TRUST_DOMAIN = "agent.bc-join.test"

# The replacing join-token attestor of the brief: every join waits for an
# operator's approval, and the result restricts the node to two kinds.
APPROVAL_ATTESTOR = r"""
CREATE FUNCTION public.approval_token_verify(evidence jsonb, context jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
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


class Tap:
    """Minimal TAP producer; the plan is printed at the end."""

    def __init__(self):
        self.n = 0
        self.failed = 0

    def ok(self, cond, name, diag=None):
        self.n += 1
        print("%s %d - %s" % ("ok" if cond else "not ok", self.n, name), flush=True)
        if not cond:
            self.failed += 1
            if diag is not None:
                for line in str(diag).splitlines()[-30:]:
                    print("#   " + line, flush=True)
        return cond

    def eq(self, got, want, name, diag=None):
        return self.ok(got == want, name,
                       "got %r, expected %r%s" % (got, want, "\n" + str(diag) if diag else ""))

    def skip(self, name, reason):
        self.n += 1
        print("ok %d - %s # SKIP %s" % (self.n, name, reason), flush=True)

    def note(self, msg):
        print("# " + msg, flush=True)

    def done(self):
        print("1..%d" % self.n, flush=True)
        return 1 if self.failed else 0


def free_port():
    """A TCP port in 20000-60000 that is free on 127.0.0.1 right now."""
    for _ in range(200):
        port = random.randint(20000, 60000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port")


def wait_port(port, proc, what, timeout=20):
    """Wait until 127.0.0.1:port accepts connections (proc must stay alive)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("%s exited at start" % what)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("%s did not listen" % what)


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


class Env:
    """A temporary directory, a cluster with the extension, a TLS CA, processes."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="bcj-agent-")
        os.chmod(self.dir, 0o755)
        self.procs = []
        self.pg = os.path.join(self.dir, "pg")
        self.keys = os.path.join(self.dir, "keys")
        self.pgport = free_port()
        self.bcd_bin = os.environ.get("BCJ_BCD", os.path.join(TOP, "build/asan/bcd"))
        self.gw_bin = os.environ.get("BCJ_GATEWAY", os.path.join(TOP, "build/bc-gateway"))
        self.started = False
        self.nbcd = 0

    # -- the database -----------------------------------------------------
    def start_cluster(self):
        subprocess.run([os.path.join(TOP, "tools/bc-join-keygen"), self.keys],
                       check=True, stdout=subprocess.DEVNULL)
        out = subprocess.run([os.path.join(TOP, "tools/pg-throwaway"), "start", self.pg,
                              str(self.pgport), self.keys, TRUST_DOMAIN],
                             check=True, stdout=subprocess.PIPE, text=True).stdout
        self.pgenv = dict(kv.split("=", 1) for kv in out.split())
        self.started = True
        self.psql("CREATE DATABASE agent", db="postgres")
        self.psql("CREATE EXTENSION bc_join")
        self.psql("CREATE ROLE gw_login LOGIN IN ROLE bc_join_gateway")
        self.psql("GRANT USAGE ON SCHEMA bc_join TO bc_join_gateway")
        self.tenant = self.psql("SELECT bc_join.create_tenant('agents')")
        self.site = self.psql("SELECT bc_join.create_site('%s', 'dc')" % self.tenant)
        self.pool = self.psql("SELECT bc_join.create_pool('%s', '%s', 'p')" % (self.tenant, self.site))
        self.service_keys = os.path.join(self.dir, "service-keys.json")
        with open(self.service_keys, "w") as f:
            f.write(self.psql("SELECT bc_join.service_keys()") + "\n")
        self.conninfo = "host=%s port=%d dbname=agent user=gw_login" % (
            os.path.join(self.pg, "sock"), self.pgport)

    def psql(self, sql, db="agent", check=True):
        """Run sql as the superuser; its output, trimmed."""
        envv = dict(os.environ)
        envv.update(self.pgenv)
        r = subprocess.run(["psql", "-qAtX", "-v", "ON_ERROR_STOP=1", "-d", db, "-c", sql],
                           env=envv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if check and r.returncode != 0:
            raise RuntimeError("psql failed: %s\n%s" % (sql, r.stderr))
        return r.stdout.strip()

    def has_function(self, name):
        """True when the installed extension has the function (regprocedure text)."""
        return self.psql("SELECT to_regprocedure('%s') IS NOT NULL" % name) == "t"

    def token(self, uses=1):
        """A fresh join token of the test tenant and pool."""
        return self.psql("SELECT bc_join.create_join_token('%s', '%s', uses => %d)"
                         % (self.tenant, self.pool, uses))

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

    def cleanup(self):
        """Stop every process, the cluster; remove the directory (unless BCJ_KEEP)."""
        for p in reversed(self.procs):
            p.stop(signal.SIGTERM, 15)
        if self.started:
            subprocess.run([os.path.join(TOP, "tools/pg-throwaway"), "stop", self.pg], check=False)
        if os.environ.get("BCJ_KEEP"):
            print("# kept " + self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


def main(body):
    """Run body(tap, env) with cleanup on every path; exit with TAP's verdict."""
    tap = Tap()
    env = Env()
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))
    try:
        env.start_cluster()
        env.make_tls()
        env.gateway()
        body(tap, env)
    except Exception:
        import traceback
        tap.ok(False, "script ran to the end", traceback.format_exc())
    finally:
        env.cleanup()
    sys.exit(tap.done())
