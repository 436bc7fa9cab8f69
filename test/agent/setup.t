#!/usr/bin/python3
"""setup.t: bcd setup apply writes bcd's user units and nothing else; bcd setup
check probes them without writing; bcd run refuses to start while lingering is
enabled for its user.

Shows: on an empty home, check exits 1 with exactly one line per problem
(bcd.socket missing, bcd.service missing, not enabled, bcd.env missing, the
socket not listening) and writes nothing; apply writes
~/.config/systemd/user/bcd.socket and bcd.service (0644, the source units with
ExecStart naming this bcd, byte for byte; what `bcd setup print` prints) and
the sockets.target.wants/bcd.socket link, reports them present and enabled,
and writes no other file (bcd.env is only mentioned); `systemd-analyze --user
verify` accepts what it wrote; a second apply rewrites nothing (same inodes);
an edited bcd.service is "not current" for check and rewritten by apply; with
XDG_CONFIG_HOME set the units go there.  With bcd.env present and bcd
socket-activated (systemd-socket-activate, as the user manager) on the
default socket, check exits 0: socket listening, daemon answering (a status
round trip), lingering off.  With /var/lib/systemd/linger/<user> present
(what loginctl enable-linger makes) bcd run exits 1 at once, naming the file
and `loginctl disable-linger`, and never listens; --allow-linger runs with a
WARNING; check reports lingering as a problem (exit 1); apply warns.  A bcd
socket-activated under lingering refuses the same way, so the hook is not
answered.
"""
import os
import shutil
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentlib  # noqa: E402
import sessionlib as sl  # noqa: E402

UNITS = os.path.join(agentlib.TOP, "src", "agent", "systemd")
LINGER_DIR = "/var/lib/systemd/linger"


def files_under(top):
    """Every file and link under top, relative, sorted."""
    out = []
    for d, dirs, files in os.walk(top):
        for n in files + [x for x in dirs if os.path.islink(os.path.join(d, x))]:
            out.append(os.path.relpath(os.path.join(d, n), top))
    return sorted(out)


def setup_cmd(env, envv, *args, timeout=60):
    """bcd setup ARGS; CompletedProcess with text."""
    return subprocess.run([env.bcd_bin, "setup"] + list(args), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=timeout, env=envv)


def problems(r):
    """The problem lines of bcd setup check."""
    return [l for l in r.stderr.splitlines() if l.startswith("bcd setup check: ")]


def want_unit(env, name):
    """The source unit with ExecStart naming this bcd."""
    with open(os.path.join(UNITS, name)) as f:
        return f.read().replace("ExecStart=/usr/local/bin/bcd ",
                                "ExecStart=%s " % os.path.realpath(env.bcd_bin))


def body(tap, env):
    user = "root" if os.getuid() == 0 else os.environ.get("USER", "")
    linger = os.path.join(LINGER_DIR, user)
    tap.ok(not os.path.exists(linger), "lingering is off for %s to begin with (%s absent)" % (user, linger))

    home = os.path.join(env.dir, "home")
    os.mkdir(home, 0o700)
    rt = sl.runtime_dir(env, "rt")
    envv = sl.bcd_env(env, rt)
    envv["HOME"] = home
    envv.pop("XDG_CONFIG_HOME", None)
    udir = os.path.join(home, ".config", "systemd", "user")

    r = setup_cmd(env, envv, "check")
    p = problems(r)
    tap.ok(r.returncode == 1 and len(p) == 5 and
           any("bcd.socket: missing" in l for l in p) and any("bcd.service: missing" in l for l in p) and
           any("bcd.socket: not enabled" in l for l in p) and any("bcd.env: " in l for l in p) and
           any("socket: not listening: %s/bcd/bcd.sock" % rt in l for l in p),
           "check on an empty home: exit 1, one line per problem (5)", r.stdout + r.stderr)
    tap.ok("lingering: off for %s" % user in r.stdout, "check: lingering off", r.stdout)
    tap.eq(files_under(home), [], "check wrote nothing")

    r = setup_cmd(env, envv, "apply")
    tap.ok(r.returncode == 0 and "bcd.socket: written: %s/bcd.socket" % udir in r.stdout and
           "bcd.service: written: %s/bcd.service" % udir in r.stdout and
           "bcd.socket: enabled now: " in r.stdout, "apply: both units written, bcd.socket enabled",
           r.stdout + r.stderr)
    tap.ok("note: %s/.config/bcd/bcd.env is missing" % home in r.stdout,
           "apply: says bcd.env is missing, and does not write it", r.stdout)
    tap.eq(files_under(home), [".config/systemd/user/bcd.service", ".config/systemd/user/bcd.socket",
                               ".config/systemd/user/sockets.target.wants/bcd.socket"],
           "apply wrote the two units and the enable link, nothing else")
    for name in ("bcd.socket", "bcd.service"):
        path = os.path.join(udir, name)
        with open(path) as f:
            text = f.read()
        tap.ok(text == want_unit(env, name) and stat.S_IMODE(os.stat(path).st_mode) == 0o644,
               "%s: the source unit, ExecStart naming this bcd, 0644" % name)
        r = setup_cmd(env, envv, "print", name)
        tap.ok(r.returncode == 0 and r.stdout == text, "bcd setup print %s prints the same" % name)
    link = os.path.join(udir, "sockets.target.wants", "bcd.socket")
    tap.eq(os.readlink(link), os.path.join(udir, "bcd.socket"), "the enable link names the unit")
    vr = dict(os.environ)
    vr["XDG_RUNTIME_DIR"] = rt
    r = subprocess.run(["systemd-analyze", "--user", "verify", "--man=no", os.path.join(udir, "bcd.socket"),
                        os.path.join(udir, "bcd.service")], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, env=vr, timeout=60)
    tap.ok(r.returncode == 0 and r.stderr.strip() == "", "systemd-analyze --user verify accepts what apply wrote",
           r.stdout + r.stderr)

    inodes = {n: os.stat(os.path.join(udir, n)).st_ino for n in ("bcd.socket", "bcd.service")}
    r = setup_cmd(env, envv, "apply")
    tap.ok(r.returncode == 0 and r.stdout.count("present and current") == 2 and
           "bcd.socket: enabled: " in r.stdout and "written" not in r.stdout,
           "a second apply: present, current, enabled; nothing written", r.stdout)
    tap.eq({n: os.stat(os.path.join(udir, n)).st_ino for n in inodes}, inodes, "(the same files)")

    with open(os.path.join(udir, "bcd.service"), "a") as f:
        f.write("Environment=EDITED=1\n")
    r = setup_cmd(env, envv, "check")
    tap.ok(r.returncode == 1 and any("bcd.service: %s/bcd.service is not current" % udir in l
                                     for l in problems(r)),
           "an edited bcd.service: check says it is not current", r.stderr)
    r = setup_cmd(env, envv, "apply")
    with open(os.path.join(udir, "bcd.service")) as f:
        tap.ok(r.returncode == 0 and "bcd.service: written" in r.stdout and f.read() == want_unit(env, "bcd.service"),
               "and apply writes it back", r.stdout)

    xdg = os.path.join(env.dir, "xdg")
    os.mkdir(xdg, 0o700)
    e2 = dict(envv)
    e2["XDG_CONFIG_HOME"] = xdg
    r = setup_cmd(env, e2, "apply")
    tap.ok(r.returncode == 0 and files_under(xdg) == ["systemd/user/bcd.service", "systemd/user/bcd.socket",
                                                      "systemd/user/sockets.target.wants/bcd.socket"],
           "with XDG_CONFIG_HOME the units go to $XDG_CONFIG_HOME/systemd/user", r.stdout + r.stderr)

    # bcd.env, and bcd socket-activated on the default socket (against a gateway
    # nobody listens on: still joining, but answering)
    os.makedirs(os.path.join(home, ".config", "bcd"), 0o700)
    with open(os.path.join(home, ".config", "bcd", "bcd.env"), "w") as f:
        f.write("BCD_OPTIONS=\n")
    sock = os.path.join(rt, "bcd", "bcd.sock")
    gw = "https://127.0.0.1:%d" % agentlib.free_port()
    args = env.run_args(os.path.join(env.dir, "state"), gateway=gw, token_file=env.token_file("t"))
    d = sl.start_daemon(env, "bcd-activated", rt, args, activated=True, sock=sock)
    r = setup_cmd(env, envv, "check")
    tap.ok(r.returncode == 0 and problems(r) == [] and "socket: listening: %s" % sock in r.stdout and
           "daemon: answering on %s" % sock in r.stdout and "bcd.env: present" in r.stdout,
           "everything in place, bcd socket-activated: check exits 0 (listening, answering, lingering off)",
           r.stdout + r.stderr)
    d.stop()

    # lingering
    os.makedirs(LINGER_DIR, exist_ok=True)
    open(linger, "w").close()
    try:
        rt2 = sl.runtime_dir(env, "rt-linger")
        sock2 = os.path.join(rt2, "bcd", "bcd.sock")
        args2 = env.run_args(os.path.join(env.dir, "state-linger"), gateway=gw, token_file=env.token_file("t2"))
        t0 = time.time()
        p = sl.start_daemon(env, "bcd-linger", rt2, args2)
        rc, _ = p.wait(30)
        tap.ok(rc == 1 and "lingering is enabled for %s (%s)" % (user, linger) in p.text() and
               "refusing to start" in p.text() and "loginctl disable-linger %s" % user in p.text(),
               "lingering enabled: bcd run exits 1 at once, naming the file and the fix (%.1f s)"
               % (time.time() - t0), p.text())
        tap.ok(not os.path.exists(sock2), "and never listened")
        p = sl.start_daemon(env, "bcd-linger-allowed", rt2, args2 + ["--allow-linger"])
        tap.ok(sl.wait_socket(p, sock2) and "bcd run: WARNING: lingering is enabled" in p.text(),
               "--allow-linger: it runs, with a WARNING", p.text())
        p.stop()
        r = setup_cmd(env, envv, "check", "--timeout", "3")
        tap.ok(r.returncode == 1 and any("lingering: enabled for %s (%s)" % (user, linger) in l and
                                         "loginctl disable-linger" in l for l in problems(r)),
               "check: lingering is a problem, exit 1", r.stdout + r.stderr)
        r = setup_cmd(env, envv, "apply")
        tap.ok(r.returncode == 0 and "lingering: enabled" in r.stderr, "apply warns about it", r.stderr)
        # socket-activated, as the user manager would start it: it refuses at the first connection
        d = sl.start_daemon(env, "bcd-linger-activated", rt2, args2, activated=True, sock=sock2)
        hd = os.path.join(rt2, "h")
        os.mkdir(hd, 0o700)
        h = sl.hook(env, rt2, sock2, "s", hd, extra=["--timeout", "5"], timeout=60)
        rc, _ = d.wait(30)
        tap.ok(h.returncode != 0 and os.listdir(hd) == [] and rc == 1 and "refusing to start" in d.text(),
               "socket-activated under lingering: bcd refuses at the first connection, the hook gets nothing "
               "(exit %d)" % h.returncode, h.stderr + d.text())
    finally:
        os.unlink(linger)
    tap.ok(not os.path.exists(linger), "(the linger file removed again)")
    shutil.rmtree(home, ignore_errors=True)


agentlib.main(body)
