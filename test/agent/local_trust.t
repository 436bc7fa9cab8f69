#!/usr/bin/python3
"""local_trust.t: neither end of bcd's socket trusts what it did not check.

Shows: bcd run refuses (exit 1, nothing created) a runtime directory another
user owns (mode 0777), our own one writable by group and others, and a
symbolic link another user owns; it takes a symbolic link of our own to our
own directory.  bcd credential (and bcd status) refuse, exit 77
(untrusted-socket), send nothing and print no path when the process
listening on the socket path is another uid (SO_PEERCRED), when the socket's
directory is another user's, and when it is writable by others.  A request
line over the 8 KiB bound is answered bad-request and the caller reads that
answer (it is not reset, even while it is still sending).  bcd's own socket
directory, anything under it and its state directory are refused as a
delivery directory (bad-dir, 65), nothing written there; an ordinary
directory next to them is still delivered to.
"""
import json
import os
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentlib  # noqa: E402
import sessionlib as sl  # noqa: E402

NOBODY = 65534

# A fake bcd: binds path as root (in root's own directory), becomes uid (its
# listener's credentials are taken at listen()), answers every connection
# with a delivery of the attacker's files and reports the bytes it was sent.
FAKE = r"""
import os, socket, sys
path, uid = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)
os.chmod(path, 0o666)
os.setgroups([]); os.setgid(uid); os.setuid(uid)
s.listen(8)
print("ready", flush=True)
s.settimeout(30)
while True:
    try:
        c, _ = s.accept()
    except socket.timeout:
        break
    c.settimeout(2)
    got = b""
    try:
        while b"\n" not in got:
            b = c.recv(65536)
            if not b:
                break
            got += b
    except socket.timeout:
        pass
    try:
        c.sendall(b'{"ok":true,"keyPath":"/tmp/evil.key","certPath":"/tmp/evil.crt",'
                  b'"notAfter":"2099-01-01T00:00:00Z","waiting":0}\n')
    except OSError:
        pass
    c.close()
    print("got %d" % len(got), flush=True)
"""


def fake_server(env, path, uid):
    """Start the fake bcd at path as uid; the Popen, once it listens."""
    p = subprocess.Popen(["/usr/bin/python3", "-c", FAKE, path, str(uid)], stdout=subprocess.PIPE,
                         text=True)
    if p.stdout.readline().strip() != "ready":
        raise RuntimeError("the fake server did not start")
    return p


def fake_report(p):
    """Stop the fake server; the byte counts it was sent, one per connection."""
    p.terminate()
    out, _ = p.communicate(timeout=10)
    return [int(x.split()[1]) for x in out.splitlines() if x.startswith("got ")]


def dead_gateway():
    """A gateway URL nobody listens on."""
    return "https://127.0.0.1:%d" % agentlib.free_port()


def runtime_dirs(tap, env, token):
    """bcd run refuses a runtime directory it cannot trust."""
    def run_with(name, rt):
        envv = sl.bcd_env(env, None)
        envv["XDG_RUNTIME_DIR"] = rt
        p = sl.Proc(env, name, [env.bcd_bin, "run"] + env.run_args(
            os.path.join(env.dir, "state-" + name), gateway=dead_gateway(), token_file=token), envv)
        env.procs.append(p)
        return p

    rt = os.path.join(env.dir, "rt-foreign")
    os.mkdir(rt)
    os.chmod(rt, 0o777)
    os.chown(rt, NOBODY, NOBODY)
    p = run_with("bcd-rt-foreign", rt)
    rc, _ = p.wait(30)
    tap.ok(rc == 1 and "the runtime directory (XDG_RUNTIME_DIR) %s is owned by uid %d, not by uid 0"
           % (rt, NOBODY) in p.text() and "refusing to start" in p.text(),
           "a runtime directory another user owns (0777): bcd run refuses, exit 1", p.text())
    tap.eq(os.listdir(rt), [], "and creates nothing in it (no bcd/)")

    rt = os.path.join(env.dir, "rt-loose")
    os.mkdir(rt)
    os.chmod(rt, 0o777)
    p = run_with("bcd-rt-loose", rt)
    rc, _ = p.wait(30)
    tap.ok(rc == 1 and "is writable by its group or others (mode 0777)" in p.text() and
           os.listdir(rt) == [],
           "our own runtime directory with mode 0777: refused too, nothing created", p.text())

    target = os.path.join(env.dir, "rt-target")
    os.mkdir(target, 0o700)
    link = os.path.join(env.dir, "rt-foreign-link")
    os.symlink(target, link)
    os.lchown(link, NOBODY, NOBODY)
    p = run_with("bcd-rt-link", link)
    rc, _ = p.wait(30)
    tap.ok(rc == 1 and "is a symbolic link owned by uid %d" % NOBODY in p.text() and
           os.listdir(target) == [],
           "a runtime directory that is a symbolic link another user owns: refused, target untouched",
           p.text())

    link = os.path.join(env.dir, "rt-own-link")
    os.symlink(target, link)
    p = run_with("bcd-rt-ownlink", link)
    sock = os.path.join(link, "bcd", "bcd.sock")
    tap.ok(sl.wait_socket(p, sock), "a symbolic link of our own to our own 0700 directory is taken",
           p.text())
    rc, _ = p.stop()
    tap.eq(rc, 0, "stopped")


def impostors(tap, env):
    """bcd credential refuses a socket that is not its own bcd's."""
    rt = sl.runtime_dir(env, "rt-fake")
    os.mkdir(os.path.join(rt, "bcd"), 0o700)
    sock = os.path.join(rt, "bcd", "bcd.sock")
    hd = os.path.join(rt, "hooks")
    os.mkdir(hd, 0o700)
    fake = fake_server(env, sock, NOBODY)
    r = sl.hook(env, rt, sock, "s", hd)
    tap.ok(r.returncode == sl.EX_NOPERM and r.stderr.startswith("bcd credential: untrusted-socket: ") and
           "runs as uid %d, not as uid 0" % NOBODY in r.stderr,
           "a server of another uid on our socket path (our 0700 directory): untrusted-socket, exit 77",
           r.stdout + r.stderr)
    tap.ok(r.stdout == "" and "evil" not in r.stdout + r.stderr, "no key or certificate path printed",
           r.stdout)
    r = sl.hook(env, rt, sock, "s", hd, extra=["--json"])
    tap.ok(r.returncode == sl.EX_NOPERM and r.stdout == "", "nor with --json", r.stdout + r.stderr)
    st = subprocess.run([env.bcd_bin, "status", "--socket", sock], stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True, env=sl.bcd_env(env, rt))
    tap.ok(st.returncode == sl.EX_NOPERM and "untrusted-socket" in st.stderr and st.stdout == "",
           "bcd status refuses it too", st.stdout + st.stderr)
    got = fake_report(fake)
    tap.ok(len(got) == 3 and got == [0, 0, 0], "the impostor was sent nothing (bytes per connection)",
           got)

    rt = sl.runtime_dir(env, "rt-fakedir")
    d = os.path.join(rt, "bcd")
    os.mkdir(d, 0o700)
    sock = os.path.join(d, "bcd.sock")
    fake = fake_server(env, sock, NOBODY)
    os.chown(d, NOBODY, NOBODY)
    r = sl.hook(env, rt, sock, "s", hd)
    tap.ok(r.returncode == sl.EX_NOPERM and "bcd credential: untrusted-socket: the socket directory "
           "%s is owned by uid %d, not by uid 0" % (d, NOBODY) in r.stderr and r.stdout == "",
           "a socket directory another user owns: untrusted-socket, exit 77, nothing printed",
           r.stdout + r.stderr)
    tap.eq(fake_report(fake), [], "and the client did not even connect")

    rt = sl.runtime_dir(env, "rt-fakeloose")
    d = os.path.join(rt, "bcd")
    os.mkdir(d)
    os.chmod(d, 0o777)
    sock = os.path.join(d, "bcd.sock")
    fake = fake_server(env, sock, 0)
    r = sl.hook(env, rt, sock, "s", hd)
    tap.ok(r.returncode == sl.EX_NOPERM and "untrusted-socket: the socket directory %s is writable by "
           "its group or others (mode 0777)" % d in r.stderr and r.stdout == "",
           "a socket directory of ours that others can write: untrusted-socket, even when the "
           "listener is our uid", r.stdout + r.stderr)
    tap.eq(fake_report(fake), [], "and nothing was sent")


def long_line(tap, sock):
    """A line over the bound: bad-request, readable by a caller still sending."""
    for size, what in [(9000, "9000 bytes"), (512 * 1024, "512 KiB (more than the socket buffers)")]:
        ans, err = None, None
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(20)
                s.connect(sock)
                s.sendall(b'{"op":"status","x":"' + b"a" * size + b'"}\n')
                buf = b""
                while b"\n" not in buf:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
                ans = json.loads(buf) if buf.strip() else None
                s.settimeout(10)
                rest = s.recv(1)
        except OSError as e:
            err = "%s: %s" % (type(e).__name__, e)
        tap.ok(err is None and ans is not None and ans["error"] == "bad-request" and
               "over 8192 bytes" in ans["message"],
               "a request line of %s: the caller sends it all and reads bad-request (no reset)" % what,
               err or ans)
        tap.ok(err is None and rest == b"", "then bcd closes the connection (EOF)", err)


def deliveries(tap, env, rt, state, sock):
    """bcd's own directories are no delivery directory."""
    sd = os.path.dirname(sock)
    sub = os.path.join(sd, "sub")
    os.mkdir(sub, 0o700)
    before = sorted(os.listdir(sd))
    for what, dd in [("bcd's socket directory", sd), ("a directory under it", sub),
                     ("bcd's state directory", state)]:
        r = sl.hook(env, rt, sock, "node", dd)
        tap.ok(r.returncode == sl.EX_DATAERR and r.stderr.startswith("bcd credential: bad-dir: ") and
               "bcd's own" in r.stderr and r.stdout == "",
               "delivery into %s: bad-dir, exit 65" % what, r.stderr)
    tap.ok(sorted(os.listdir(sd)) == before and os.listdir(sub) == [] and
           not os.path.exists(os.path.join(state, "node.crt")),
           "and nothing was written there (node.key of the state directory untouched)",
           os.listdir(sd))
    hd = os.path.join(rt, "hooks", "s1")
    os.makedirs(hd, 0o700)
    r = sl.hook(env, rt, sock, "s1", hd)
    tap.ok(r.returncode == 0 and r.stdout.startswith(os.path.join(hd, "s1.key")),
           "an ordinary directory beside them is delivered to", r.stdout + r.stderr)


def body(tap, env):
    """The script."""
    token = env.token_file("trust")
    runtime_dirs(tap, env, token)
    impostors(tap, env)
    if not env.has_function("bc_join.issue_session(jsonb)"):
        tap.skip("deliveries", "bc_join.issue_session(jsonb) is not installed yet")
        return
    rt = sl.runtime_dir(env, "rt-live")
    state = os.path.join(rt, "state")
    r = env.bcd("run", *env.run_args(state, token_file=env.token_file("live"), extra=["--once"]))
    tap.ok(r.returncode == 0, "the host joins (bcd run --once), its state directory in the runtime "
           "directory", r.stderr)
    keysum = agentlib.sha256_file(os.path.join(state, "node.key"))
    sock = os.path.join(rt, "bcd", "bcd.sock")
    d = sl.start_daemon(env, "bcd-live", rt, env.run_args(state))
    tap.ok(sl.wait_socket(d, sock), "bcd run serves", d.text())
    long_line(tap, sock)
    tap.ok(sl.status(env, rt, sock) is not None, "bcd still serves after them")
    deliveries(tap, env, rt, state, sock)
    tap.eq(agentlib.sha256_file(os.path.join(state, "node.key")), keysum, "node.key is unchanged")
    rc, _ = d.stop()
    tap.ok(rc == 0 and "Sanitizer" not in d.text(), "stopped, no sanitizer report", d.text())


agentlib.main(body)
