"""gwlib.py: what the gateway's TAP scripts share.

On test/lib/bctest.py's throwaway cluster with the real bc_join extension: a
throwaway TLS certificate (openssl CLI), real bc-gateway processes (the
ASan build unless BCJ_GATEWAY says otherwise) and curl over HTTPS on
127.0.0.1 with the certificate pinned.  Everything lives in one temporary
directory and is stopped by Env.cleanup().
Standard library only (Debian's /usr/bin/python3).
"""
import base64
import json
import os
import resource
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from bctest import TOP, ClusterEnv, Tap, free_port, run, wait_port  # noqa: E402,F401

TRUST_DOMAIN = "test.bc-join.local"


def metric(text, name, labels=None):
    """The value of one sample in a Prometheus text exposition, or None."""
    want = name
    if labels:
        want += "{" + ",".join('%s="%s"' % kv for kv in labels) + "}"
    for line in text.splitlines():
        if line.startswith(want + " "):
            return float(line.split()[-1])
    return None


def b64url(s):
    """The bytes of unpadded base64url text."""
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def openssl(*args):
    """The openssl CLI with args; (its exit code, stdout and stderr together)."""
    r = subprocess.run(["openssl"] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    return r.returncode, r.stdout


class Gateway:
    """One bc-gateway process with its log file."""

    def __init__(self, env, name, args, nofile=None):
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
        preexec = None
        if nofile is not None:      # RLIMIT_NOFILE of the gateway alone (ulimit -n)
            def preexec():
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
        self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=self.logf, env=envv,
                                     preexec_fn=preexec)
        self.rc = None
        wait_port(self.port, self.proc, "gateway", log=self.log_text)

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


class Env(ClusterEnv):
    """bctest's cluster (database gw), a TLS certificate, gateways."""

    def __init__(self):
        super().__init__("bcj-gw-", "gw", TRUST_DOMAIN)
        self.gateways = []
        self.bcd = os.environ.get("BCJ_BCD", os.path.join(TOP, "build/bcd"))

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

    def join_node(self, gw, name, token):
        """Join one node through gw with the real agent's request; (its serial,
        the path of its leaf certificate's PEM).  Raises when the join fails."""
        req, _ = self.join_request(name, token)
        code, _, b = self.curl(gw, "/v1/join", data_file=req)
        if code != 200:
            raise RuntimeError("join %s: %d %r" % (name, code, b))
        payload = json.loads(b64url(json.loads(b)["response"].split(".")[1]))
        der = base64.b64decode(payload["certificateChain"][0])
        pem = os.path.join(self.dir, "leaf-%s.pem" % name)
        with open(pem, "w") as f:
            f.write("-----BEGIN CERTIFICATE-----\n%s\n-----END CERTIFICATE-----\n"
                    % base64.encodebytes(der).decode().strip())
        return payload["serial"], pem

    def join_nodes(self, gw, *names):
        """Join a node per name through gw with one join token; join_node's
        (serial, leaf PEM path) of each."""
        token = self.token(uses=len(names))
        return [self.join_node(gw, name, token) for name in names]

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

    def gateway(self, name, *args, nofile=None):
        g = Gateway(self, name, args, nofile=nofile)
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

    def stop_processes(self):
        for g in self.gateways:
            g.stop(signal.SIGTERM, 15)


def main(body):
    """Run body(tap, env) with cleanup on every path; exit with TAP's verdict."""
    def setup(env):
        env.start_cluster("gw")
        env.make_cert()
    run(Env(), setup, body)
