#!/usr/bin/python3
"""socket_hardening.t: bcd's local socket fails safe, and refuses legibly.

Shows: a host without a node credential (bcd still joining) refuses every
hook at once with no-node-credential and exit 77; a caller of another uid
is refused by the peer check (SO_PEERCRED: root connecting to the socket of
a bcd run as nobody gets forbidden; root's own bcd credential and bcd status
refuse a socket in another user's directory, untrusted-socket, 77), and a
third user cannot reach it at all (69); an attacker who binds and listens on
the socket path first makes bcd refuse to start and leave it in place; a socket directory another user
owns, or a symbolic link, is refused and left untouched; bcd's own
directory with mode 0777 is set back to 0700 (and logged); under umask 0000
the socket is still 0600; with XDG_RUNTIME_DIR unset the default socket is
STATE/run/bcd.sock inside the 0700 state directory; a stale socket (nobody
listens: ECONNREFUSED) is removed and bound again; a file that is not a
socket is never replaced.

--socket PATH (#26.7): bcd changes the mode only of a directory it creates.
A --socket in an existing 0755 directory (a home directory, say) is served
and the directory keeps its mode; one in a missing directory is created 0700;
one in our own 0777 directory is refused and the directory left as it is.
"""
import os
import shutil
import socket
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentlib  # noqa: E402
import sessionlib as sl  # noqa: E402
from agentlib import mode  # noqa: E402

NOBODY = 65534
DAEMON_UID = 1     # "daemon" on Debian: a third user


def dead_gateway():
    """A gateway URL nobody listens on: bcd keeps joining (backing off), never joined."""
    return "https://127.0.0.1:%d" % agentlib.free_port()


def args_for(env, state, token, extra=()):
    """bcd run options against the dead gateway."""
    return env.run_args(state, gateway=dead_gateway(), token_file=token, extra=list(extra))


def run_as(env, rt, cmd, uid):
    """Run a command as uid; CompletedProcess with text."""
    def preexec():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60,
                          env=sl.bcd_env(env, rt), preexec_fn=preexec)


def start_fails(tap, env, name, rt, state, token, what):
    """Start bcd expecting it to refuse; (exit status, log)."""
    p = sl.start_daemon(env, name, rt, args_for(env, state, token))
    rc, _ = p.wait(30)
    return rc, p.text()


def no_credential(tap, env):
    """Still joining: every hook refused at once, legibly."""
    rt = sl.runtime_dir(env, "rt-join")
    state = os.path.join(env.dir, "state-join")
    sock = os.path.join(rt, "bcd", "bcd.sock")
    d = sl.start_daemon(env, "bcd-joining", rt, args_for(env, state, env.token_file("j")))
    tap.ok(sl.wait_socket(d, sock), "bcd listens while it is still joining", d.text())
    hd = os.path.join(rt, "h")
    os.mkdir(hd, 0o700)
    t0 = time.time()
    hooks = [sl.hook_bg(env, rt, sock, "s%d" % (i % 4), hd) for i in range(20)]
    res = [(p.wait(60), p.communicate()[1].decode()) for p in hooks]
    tap.ok(all(rc == sl.EX_NOPERM and err.startswith(
        "bcd credential: no-node-credential: this host holds no node credential") for rc, err in res),
        "20 hooks at once: every one refused no-node-credential, exit 77", res[:2])
    tap.ok(time.time() - t0 < 30, "at once, not queued (%.1f s)" % (time.time() - t0))
    tap.eq(os.listdir(hd), [], "nothing is delivered")
    st = sl.status(env, rt, sock)
    tap.ok(st is not None and not st["nodeCredential"]["present"] and
           st["answers"]["no-node-credential"] == 20 and st["provisionings"] == 0,
           "bcd status: no node credential, 20 refusals, no provisioning", st)
    rc, _ = d.stop()
    tap.eq(rc, 0, "SIGTERM while joining: exit 0", d.text())


def other_uid(tap, env):
    """bcd run as nobody; root (another uid) is refused by SO_PEERCRED."""
    home = os.path.join(env.dir, "nobody")
    os.mkdir(home, 0o700)
    os.chown(home, NOBODY, NOBODY)
    rt = sl.runtime_dir(env, "rt-nobody", owner=NOBODY)
    token = os.path.join(home, "token")
    with open(token, "w") as f:
        f.write(env.token() + "\n")
    os.chown(token, NOBODY, NOBODY)
    sock = os.path.join(rt, "bcd", "bcd.sock")
    d = sl.start_daemon(env, "bcd-nobody", rt, args_for(env, os.path.join(home, "state"), token),
                        uid=NOBODY)
    tap.ok(sl.wait_socket(d, sock), "bcd runs as nobody", d.text())
    st = os.lstat(sock)
    tap.ok(st.st_uid == NOBODY and stat.S_IMODE(st.st_mode) == 0o600 and mode(os.path.dirname(sock)) == 0o700,
           "its socket is nobody's, 0600, in a 0700 directory")
    hd = os.path.join(rt, "h")
    os.mkdir(hd, 0o700)
    a = sl.raw(sock, b'{"op":"status"}\n')
    tap.ok(a is not None and a["error"] == "forbidden" and
           "serves uid %d only; the caller is uid 0" % NOBODY in a["message"],
           "root (another uid) reaches the socket but bcd refuses it: forbidden", a)
    r = sl.hook(env, rt, sock, "s", hd)
    tap.ok(r.returncode == sl.EX_NOPERM and r.stderr.startswith("bcd credential: untrusted-socket: ") and
           "is owned by uid %d, not by uid 0" % NOBODY in r.stderr and r.stdout == "",
           "and root's own client will not talk to a socket in another user's directory: "
           "untrusted-socket, exit 77", r.stderr)
    r = subprocess.run([env.bcd_bin, "status", "--socket", sock], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, env=sl.bcd_env(env, rt))
    tap.ok(r.returncode == sl.EX_NOPERM and "untrusted-socket" in r.stderr and r.stdout == "",
           "bcd status neither", r.stderr)
    tap.ok("refused a caller of uid 0" in d.text(), "bcd logs the refused uid", d.text())
    r = run_as(env, rt, [env.bcd_bin, "credential", "--session", "s", "--dir", "/tmp", "--socket", sock],
               DAEMON_UID)
    tap.ok(r.returncode == sl.EX_UNAVAILABLE and "bcd credential: no-daemon: " in r.stderr and
           "Permission denied" in r.stderr,
           "a third user cannot even reach it (0700 directory): no-daemon, exit 69", r.stderr)
    r = run_as(env, rt, [env.bcd_bin, "status", "--socket", sock], NOBODY)
    tap.ok(r.returncode == 0 and '"waiting":0' in r.stdout, "its own uid is served", r.stdout + r.stderr)
    rc, _ = d.stop()
    tap.eq(rc, 0, "stopped", d.text())


def attacker_first(tap, env, token):
    """Someone listens on the path before bcd starts."""
    rt = sl.runtime_dir(env, "rt-squat")
    os.mkdir(os.path.join(rt, "bcd"), 0o700)
    sock = os.path.join(rt, "bcd", "bcd.sock")
    squat = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    squat.bind(sock)
    squat.listen(8)
    ino = os.lstat(sock).st_ino
    rc, log = start_fails(tap, env, "bcd-squat", rt, os.path.join(env.dir, "state-squat"), token, "")
    tap.ok(rc == 1 and "another process listens on %s; refusing to start" % sock in log,
           "an attacker listening on the path first: bcd refuses to start (exit 1)", log)
    tap.ok(os.path.exists(sock) and os.lstat(sock).st_ino == ino,
           "and does not unlink it (the name is not handed to whoever binds next)")
    squat.close()

    rt = sl.runtime_dir(env, "rt-file")
    os.mkdir(os.path.join(rt, "bcd"), 0o700)
    path = os.path.join(rt, "bcd", "bcd.sock")
    with open(path, "w") as f:
        f.write("keep me\n")
    rc, log = start_fails(tap, env, "bcd-file", rt, os.path.join(env.dir, "state-file"), token, "")
    tap.ok(rc == 1 and "is not a socket; refusing to replace it" in log and open(path).read() == "keep me\n",
           "a file that is not a socket at the path: refused, left in place", log)


def bad_dirs(tap, env, token):
    """The socket directory: another owner's or a symlink refused; ours with 0777 fixed."""
    rt = sl.runtime_dir(env, "rt-foreign")
    d = os.path.join(rt, "bcd")
    os.mkdir(d)
    os.chmod(d, 0o777)
    os.chown(d, NOBODY, NOBODY)
    rc, log = start_fails(tap, env, "bcd-foreign", rt, os.path.join(env.dir, "state-foreign"), token, "")
    tap.ok(rc == 1 and "is owned by uid %d, not by this bcd" % NOBODY in log,
           "a socket directory another user owns: bcd refuses to start", log)
    tap.ok(mode(d) == 0o777 and os.stat(d).st_uid == NOBODY and os.listdir(d) == [],
           "and leaves it untouched (nothing bound in it)")

    rt = sl.runtime_dir(env, "rt-link")
    target = os.path.join(env.dir, "elsewhere")
    os.mkdir(target, 0o700)
    os.symlink(target, os.path.join(rt, "bcd"))
    rc, log = start_fails(tap, env, "bcd-link", rt, os.path.join(env.dir, "state-link"), token, "")
    tap.ok(rc == 1 and "symbolic link is not accepted" in log and os.listdir(target) == [],
           "a socket directory that is a symbolic link: refused", log)

    rt = sl.runtime_dir(env, "rt-loose")
    d = os.path.join(rt, "bcd")
    os.mkdir(d)
    os.chmod(d, 0o777)
    sock = os.path.join(d, "bcd.sock")
    p = sl.start_daemon(env, "bcd-loose", rt, args_for(env, os.path.join(env.dir, "state-loose"), token))
    tap.ok(sl.wait_socket(p, sock) and mode(d) == 0o700 and "had mode 0777; set it to 0700" in p.text(),
           "our own socket directory with mode 0777: set back to 0700, and logged", p.text())
    rc, _ = p.stop()
    tap.eq(rc, 0, "stopped")


def socket_option_dirs(tap, env, token):
    """--socket PATH: only a directory bcd creates is bcd's to chmod."""
    rt = sl.runtime_dir(env, "rt-option")
    home = os.path.join(env.dir, "home-like")
    os.mkdir(home)
    os.chmod(home, 0o755)
    sock = os.path.join(home, "bcd.sock")
    p = sl.start_daemon(env, "bcd-home", rt, args_for(env, os.path.join(env.dir, "state-home"), token,
                                                      ["--socket", sock]))
    served = sl.wait_socket(p, sock)
    st = sl.status(env, rt, sock) if served else None
    p.stop()
    tap.ok(served and st is not None and mode(home) == 0o755 and "set it to 0700" not in p.text(),
           "--socket in an existing 0755 directory (~/bcd.sock): served, the directory keeps mode %04o"
           % mode(home), p.text()[-800:])

    made = os.path.join(env.dir, "made-by-bcd")
    sock = os.path.join(made, "bcd.sock")
    p = sl.start_daemon(env, "bcd-made", rt, args_for(env, os.path.join(env.dir, "state-made"), token,
                                                      ["--socket", sock]), umask=0o022)
    served = sl.wait_socket(p, sock)
    p.stop()
    tap.ok(served and mode(made) == 0o700 and mode(sock if os.path.exists(sock) else made) in (0o600, 0o700),
           "--socket in a missing directory: bcd creates it 0700", p.text()[-800:])

    loose = os.path.join(env.dir, "loose-option")
    os.mkdir(loose)
    os.chmod(loose, 0o777)
    p = sl.start_daemon(env, "bcd-loose-option", rt,
                        args_for(env, os.path.join(env.dir, "state-loose-option"), token,
                                 ["--socket", os.path.join(loose, "bcd.sock")]))
    rc, _ = p.wait(30)
    tap.ok(rc == 1 and "writable by its group or others (mode 0777)" in p.text() and mode(loose) == 0o777
           and os.listdir(loose) == [],
           "--socket in our own 0777 directory: refused, the directory left as it is (nothing bound)",
           p.text()[-800:])


def umask_and_defaults(tap, env, token):
    """umask 0000; XDG_RUNTIME_DIR unset; a stale socket."""
    rt = sl.runtime_dir(env, "rt-umask")
    sock = os.path.join(rt, "bcd", "bcd.sock")
    p = sl.start_daemon(env, "bcd-umask", rt, args_for(env, os.path.join(env.dir, "state-umask"), token),
                        umask=0)
    tap.ok(sl.wait_socket(p, sock) and mode(sock) == 0o600 and mode(os.path.dirname(sock)) == 0o700,
           "under umask 0000 the socket is 0600 and its directory 0700 (%o, %o)"
           % (mode(sock) if os.path.exists(sock) else 0, mode(os.path.dirname(sock))), p.text())
    p.stop()

    state = os.path.join(env.dir, "state-noxdg")
    sock = os.path.join(state, "run", "bcd.sock")
    p = sl.start_daemon(env, "bcd-noxdg", None, args_for(env, state, token), umask=0)
    tap.ok(sl.wait_socket(p, sock) and mode(state) == 0o700 and mode(os.path.dirname(sock)) == 0o700
           and mode(sock) == 0o600, "XDG_RUNTIME_DIR unset: STATE/run/bcd.sock, 0600 inside 0700 "
           "directories (never /tmp)", p.text())
    r = subprocess.run([env.bcd_bin, "status"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, env=sl.bcd_env(env, None))
    tap.ok(r.returncode == sl.EX_USAGE and "XDG_RUNTIME_DIR is unset" in r.stderr,
           "a client without XDG_RUNTIME_DIR must name the socket (usage, 64)", r.stderr)
    tap.ok(sl.status(env, None, sock) is not None, "and reaches it with --socket")
    p.stop()

    rt = sl.runtime_dir(env, "rt-stale")
    os.mkdir(os.path.join(rt, "bcd"), 0o700)
    sock = os.path.join(rt, "bcd", "bcd.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(sock)
    s.close()       # the file stays; nobody listens: ECONNREFUSED
    p = sl.start_daemon(env, "bcd-stale", rt, args_for(env, os.path.join(env.dir, "state-stale"), token))
    tap.ok(sl.wait_socket(p, sock) and "removed the stale socket %s" % sock in p.text() and
           sl.status(env, rt, sock) is not None,
           "a stale socket (ECONNREFUSED) is removed and bound again", p.text())
    rc, _ = p.stop()
    tap.ok(rc == 0 and not os.path.exists(sock), "and removed when bcd stops")


def reachable_by_all(env):
    """Run bcd from a copy in the 0755 test directory, with that as the working
    directory: the other users this script runs it as may not be able to reach
    the checkout (a clone under a 0700 temporary directory, as CI may make)."""
    bindir = os.path.join(env.dir, "bin")
    os.makedirs(bindir, exist_ok=True)
    os.chmod(bindir, 0o755)
    shutil.copy2(env.bcd_bin, os.path.join(bindir, "bcd"))
    env.bcd_bin = os.path.join(bindir, "bcd")
    os.chdir(env.dir)


def body(tap, env):
    """The script."""
    reachable_by_all(env)
    no_credential(tap, env)
    other_uid(tap, env)
    token = env.token_file("hardening")
    attacker_first(tap, env, token)
    bad_dirs(tap, env, token)
    socket_option_dirs(tap, env, token)
    umask_and_defaults(tap, env, token)


agentlib.main(body)
