"""gwlib.py: what the gateway's TAP scripts share.

A throwaway PostgreSQL cluster with the real bc_join extension
(tools/pg-throwaway), a throwaway TLS certificate (openssl CLI), real
bc-gateway processes (the ASan build unless BCJ_GATEWAY says otherwise) and
curl over HTTPS on 127.0.0.1 with the certificate pinned.  Everything lives
in one temporary directory and is stopped by Env.cleanup().
Standard library only (Debian's /usr/bin/python3).
"""
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
TRUST_DOMAIN = "test.bc-join.local"


class Tap:
    """Minimal TAP producer; the plan is printed at the end."""

    def __init__(self):
        self.n = 0
        self.failed = 0

    def ok(self, cond, name, diag=None):
        self.n += 1
        if cond:
            print("ok %d - %s" % (self.n, name), flush=True)
        else:
            self.failed += 1
            print("not ok %d - %s" % (self.n, name), flush=True)
            if diag is not None:
                for line in str(diag).splitlines()[:20]:
                    print("#   " + line, flush=True)
        return cond

    def eq(self, got, want, name):
        return self.ok(got == want, name, "got %r, expected %r" % (got, want))

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


class Gateway:
    """One bc-gateway process with its log file."""

    def __init__(self, env, name, args):
        self.env = env
        self.port = free_port()
        self.log = os.path.join(env.dir, "gateway-%s.log" % name)
        binary = os.environ.get("BCJ_GATEWAY", os.path.join(TOP, "build/asan/bc-gateway"))
        cmd = [binary, "--listen", "127.0.0.1:%d" % self.port,
               "--tls-cert", env.cert, "--tls-key", env.key,
               "--db", env.conninfo] + list(args)
        envv = dict(os.environ)
        envv.setdefault("ASAN_OPTIONS", "detect_leaks=1")
        envv.setdefault("UBSAN_OPTIONS", "print_stacktrace=1")
        self.logf = open(self.log, "ab")
        self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=self.logf, env=envv)
        self.rc = None
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("gateway exited at start:\n" + self.log_text())
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("gateway did not listen")

    def url(self, path):
        return "https://127.0.0.1:%d%s" % (self.port, path)

    def log_text(self):
        with open(self.log, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def log_lines(self):
        out = []
        for line in self.log_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"_raw": line})
        return out

    def stop(self, sig=signal.SIGTERM, timeout=30):
        """Signal the process (once) and wait; its exit status."""
        if self.rc is not None:
            return self.rc
        if self.proc.poll() is None and not getattr(self, "signalled", False):
            self.signalled = True
            self.proc.send_signal(sig)
        try:
            self.rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.rc = self.proc.wait()
        self.logf.close()
        return self.rc


class Env:
    """A temporary directory, a cluster with the extension, a TLS certificate."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="bcj-gw-")
        os.chmod(self.dir, 0o755)
        self.gateways = []
        self.pg = os.path.join(self.dir, "pg")
        self.keys = os.path.join(self.dir, "keys")
        self.pgport = free_port()
        self.bcd = os.environ.get("BCJ_BCD", os.path.join(TOP, "build/bcd"))
        self.started = False

    # -- the database ---------------------------------------------------
    def start_cluster(self):
        subprocess.run([os.path.join(TOP, "tools/bc-join-keygen"), self.keys],
                       check=True, stdout=subprocess.DEVNULL)
        self.pg_start()
        self.started = True
        self.psql("CREATE DATABASE gw", db="postgres")
        self.psql("CREATE EXTENSION bc_join")
        self.psql("CREATE ROLE gw_login LOGIN IN ROLE bc_join_gateway")
        # The extension grants bc_join_gateway USAGE on the schema (so that a
        # missing bc_join.issue_session is 42883, not 42501); nothing to add.
        self.tenant = self.psql("SELECT bc_join.create_tenant('gw')")
        self.site = self.psql("SELECT bc_join.create_site('%s', 'dc')" % self.tenant)
        self.pool = self.psql("SELECT bc_join.create_pool('%s', '%s', 'p')" % (self.tenant, self.site))
        self.service_keys = os.path.join(self.dir, "service-keys.json")
        with open(self.service_keys, "w") as f:
            f.write(self.psql("SELECT bc_join.service_keys()") + "\n")
        self.conninfo = "host=%s port=%d dbname=gw user=gw_login" % (
            os.path.join(self.pg, "sock"), self.pgport)

    def pg_start(self):
        """Start (or restart) the cluster; a few tries, then the server log's tail."""
        for attempt in range(3):
            r = subprocess.run([os.path.join(TOP, "tools/pg-throwaway"), "start", self.pg,
                                str(self.pgport), self.keys, TRUST_DOMAIN],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if r.returncode == 0:
                self.pgenv = dict(kv.split("=", 1) for kv in r.stdout.split())
                return
            time.sleep(1)
        raise RuntimeError("cannot start the cluster:\n" + r.stderr)

    def pg_stop(self):
        subprocess.run([os.path.join(TOP, "tools/pg-throwaway"), "stop", self.pg], check=False)

    def psql(self, sql, db="gw", check=True):
        envv = dict(os.environ)
        envv.update(self.pgenv)
        r = subprocess.run(["psql", "-qAtX", "-v", "ON_ERROR_STOP=1", "-d", db, "-c", sql],
                           env=envv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if check and r.returncode != 0:
            raise RuntimeError("psql failed: %s\n%s" % (sql, r.stderr))
        return r.stdout.strip()

    def token(self, uses=1):
        return self.psql("SELECT bc_join.create_join_token('%s', '%s', uses => %d)"
                         % (self.tenant, self.pool, uses))

    def join_request(self, name, token):
        """A JoinRequest made by the real agent; (path of the request file, its dir)."""
        d = os.path.join(self.dir, "host-" + name)
        out = subprocess.run([self.bcd, "join-request", "--service-keys", self.service_keys,
                              "--token", token, "--out-dir", d],
                             check=True, stdout=subprocess.PIPE).stdout
        path = os.path.join(self.dir, "req-%s.json" % name)
        with open(path, "wb") as f:
            f.write(out)
        return path, d

    def verify(self, d, response_path):
        return subprocess.run([self.bcd, "verify-response", "--service-keys", self.service_keys,
                               "--dir", d, "--response", response_path],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    # -- TLS and the gateway ----------------------------------------------
    def make_cert(self):
        self.cert = os.path.join(self.dir, "tls.crt")
        self.key = os.path.join(self.dir, "tls.key")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", self.key, "-out", self.cert],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def gateway(self, name, *args):
        g = Gateway(self, name, args)
        self.gateways.append(g)
        return g

    def curl(self, gw, path, data=None, data_file=None, headers=(), method=None,
             interface=None, max_time=30):
        """One HTTPS request with curl; (status, headers dict, body bytes)."""
        self.ncurl = getattr(self, "ncurl", 0) + 1
        hdr = os.path.join(self.dir, "curl%d.hdr" % self.ncurl)
        body = os.path.join(self.dir, "curl%d.body" % self.ncurl)
        cmd = ["curl", "-sS", "--cacert", self.cert, "-o", body, "-D", hdr,
               "-w", "%{http_code}", "--max-time", str(max_time), "-H", "Expect:"]
        if interface:
            cmd += ["--interface", interface]
        for h in headers:
            cmd += ["-H", h]
        if data is not None:
            dpath = os.path.join(self.dir, "curl%d.data" % self.ncurl)
            with open(dpath, "wb") as f:
                f.write(data if isinstance(data, bytes) else data.encode())
            data_file = dpath
        if data_file is not None:
            cmd += ["-H", "Content-Type: application/json", "--data-binary", "@" + data_file]
        if method:
            cmd += ["-X", method]
        cmd.append(gw.url(path))
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        code = int(r.stdout.strip() or "0")
        hdrs = {}
        if os.path.exists(hdr):
            with open(hdr, "rb") as f:
                for line in f.read().decode("latin-1").splitlines()[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        hdrs[k.strip().lower()] = v.strip()
            os.unlink(hdr)
        data_out = b""
        if os.path.exists(body):
            with open(body, "rb") as f:
                data_out = f.read()
            os.unlink(body)
        return code, hdrs, data_out

    def cleanup(self):
        for g in self.gateways:
            g.stop(signal.SIGTERM, 15)
        if self.started:
            self.pg_stop()
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
        env.make_cert()
        body(tap, env)
    except Exception as e:  # report, then clean up
        import traceback
        tap.ok(False, "script ran to the end", traceback.format_exc())
        _ = e
    finally:
        env.cleanup()
    sys.exit(tap.done())
