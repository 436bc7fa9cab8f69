"""sessionlib.py: what the session-credential TAP scripts share (on top of agentlib).

A runtime directory (XDG_RUNTIME_DIR of bcd and of its hooks) in the test's
temporary directory, bcd started on its own or through systemd-socket-activate
(which passes the listening socket with LISTEN_FDS/LISTEN_PID exactly as
systemd does, and execs bcd when the first caller connects), the hook client
`bcd credential`, `bcd status`, and a database row lock that holds
bc_join.issue_session (it takes FOR SHARE on the node certificate) so the
queue depth can be seen.
"""
import json
import os
import socket
import subprocess
import time

import agentlib

# sysexits of bcd credential (docs/sessions.md)
EX_USAGE, EX_DATAERR, EX_UNAVAILABLE, EX_SOFTWARE, EX_TEMPFAIL, EX_NOPERM = 64, 65, 69, 70, 75, 77


def runtime_dir(env, name="rt", owner=None):
    """A 0700 runtime directory in env.dir; its path."""
    rt = os.path.join(env.dir, name)
    os.mkdir(rt, 0o700)
    if owner is not None:
        os.chown(rt, owner, owner)
    return rt


def bcd_env(env, rt):
    """bcd's environment with XDG_RUNTIME_DIR set to rt (or unset when rt is None)."""
    envv = env.bcd_env()
    if rt is not None:
        envv["XDG_RUNTIME_DIR"] = rt
    return envv


class Proc(agentlib.Proc):
    """agentlib.Proc with a umask and, optionally, another uid for the child."""

    def __init__(self, env, name, cmd, envv, umask=0o077, uid=None):
        self.log = os.path.join(env.dir, "%s.log" % name)
        self.logf = open(self.log, "ab")

        def preexec():
            os.umask(umask)
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.logf, env=envv,
                                     preexec_fn=preexec)
        self.rc = None
        self.out = ""


def start_daemon(env, name, rt, args, activated=False, sock=None, umask=0o077, uid=None):
    """Start bcd run (args: its options) on its own or socket-activated; a Proc.

    With activated, systemd-socket-activate listens on sock (its directory made
    0700 first) and execs bcd when the first caller connects (same pid).  uid
    runs it as that user (its group the same number)."""
    cmd = [env.bcd_bin, "run"] + list(args)
    if activated:
        os.makedirs(os.path.dirname(sock), 0o700, exist_ok=True)
        envv = bcd_env(env, rt)
        # systemd-socket-activate passes only what -E names, as systemd passes a unit's
        # environment (a user manager sets XDG_RUNTIME_DIR for its services)
        keep = [v for v in ("XDG_RUNTIME_DIR", "ASAN_OPTIONS", "UBSAN_OPTIONS") if v in envv]
        cmd = ["systemd-socket-activate", "-l", sock] + sum([["-E", v] for v in keep], []) + cmd
    p = Proc(env, name, cmd, bcd_env(env, rt), umask, uid)
    env.procs.append(p)
    if activated and not p.wait_log("Listening on", 20):
        raise RuntimeError("systemd-socket-activate did not listen: " + p.text())
    return p


def wait_socket(p, sock, timeout=30):
    """Wait until bcd (started on its own) listens at sock; True when it does."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if p.proc.poll() is not None:
            return False
        if "listening on" in p.text() and os.path.exists(sock):
            return True
        time.sleep(0.05)
    return False


def hook(env, rt, sock, session, d, context=None, extra=(), timeout=120):
    """Run bcd credential; CompletedProcess with text output."""
    cmd = [env.bcd_bin, "credential", "--session", session, "--dir", d, "--socket", sock]
    if context is not None:
        cmd += ["--context", context]
    try:
        return subprocess.run(cmd + list(extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, timeout=timeout, env=bcd_env(env, rt))
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(e.cmd, -9, "", "timed out")


def hook_bg(env, rt, sock, session, d, context=None):
    """Start bcd credential --json in the background; a Popen."""
    cmd = [env.bcd_bin, "credential", "--session", session, "--dir", d, "--socket", sock, "--json"]
    if context is not None:
        cmd += ["--context", context]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=bcd_env(env, rt))


def status(env, rt, sock, prometheus=False):
    """bcd status as a dict (or the Prometheus text), None when it fails."""
    cmd = [env.bcd_bin, "status", "--socket", sock] + (["--prometheus"] if prometheus else [])
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=60, env=bcd_env(env, rt))
    if r.returncode != 0:
        return None
    return r.stdout if prometheus else json.loads(r.stdout)


def raw(sock, line, timeout=10):
    """Send one raw line on the socket; the answer line as a dict (None when none came)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(sock)
        s.sendall(line)
        buf = b""
        while b"\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    return json.loads(buf) if buf.strip() else None


class RowLock:
    """Holds FOR UPDATE on a node certificate row: bc_join.issue_session waits on it."""

    def __init__(self, env, serial):
        import psycopg2
        self.conn = psycopg2.connect(host=env.pgenv["PGHOST"], port=env.pgenv["PGPORT"],
                                     user=env.pgenv["PGUSER"], dbname="agent")
        cur = self.conn.cursor()
        cur.execute("SELECT serial FROM bc_join.node_certs WHERE serial = %s FOR UPDATE", (serial,))
        self.held = cur.fetchone() is not None

    def release(self):
        """Commit: the waiting provisionings go on."""
        if self.conn is not None:
            self.conn.commit()
            self.conn.close()
            self.conn = None


def poll_status(env, rt, sock, cond, timeout=60, seen=None):
    """Poll bcd status until cond(status) holds; the last status (None on timeout).

    Every status is appended to seen when given."""
    deadline = time.time() + timeout
    st = None
    while time.time() < deadline:
        st = status(env, rt, sock)
        if seen is not None and st is not None:
            seen.append(st)
        if st is not None and cond(st):
            return st
        time.sleep(0.1)
    return None
