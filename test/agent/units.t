#!/usr/bin/python3
"""units.t: bcd's systemd user units verify and carry a well-kept service's hardening.

Shows: src/agent/systemd/bcd.socket and bcd.service (ExecStart pointed at the
built bcd, since systemd-analyze checks that the binary exists) pass
`systemd-analyze --user verify` with no warning at all (--man=no: the
Documentation= man pages exist only in the Debian packages), while a copy with an
unknown key warns and one with a missing binary fails (the check is live);
the socket is the one bcd and its clients default to (%t/bcd/bcd.sock), made
shut (DirectoryMode 0700, SocketMode 0600) and installed into the user's
sockets.target (a user unit: no lingering); the service has no [Install] of
its own (it starts from its socket only), passes no --socket (it takes the
one systemd passes) and carries the hardening: no new privileges, an empty
capability bounding set, ProtectSystem=strict, ProtectHome=read-only with
only its state directory and the runtime directory writable, PrivateTmp,
UMask=0077, address families, personality, W^X, native syscalls;
`systemd-analyze security` rates its exposure at most 3.0.  The TPM mode's
device is reachable: /dev/tpmrm0 bound into the private /dev (BindPaths=-) and
allowed (DeviceAllow=), nothing else.

The gateway's system unit (src/gateway/systemd/bc-gateway.service) passes
`systemd-analyze verify` with no warning, runs as its own user bc-gateway with
ProtectSystem=strict, no capabilities, Restart=on-failure and its options
from /etc/default/bc-gateway; its LimitNOFILE leaves room for the default
file's --max-connections plus --db-pool plus 32 (what bc-gateway reserves);
`systemd-analyze security` rates it at most 2.0.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentlib  # noqa: E402

UNITS = os.path.join(agentlib.TOP, "src", "agent", "systemd")
GW_UNITS = os.path.join(agentlib.TOP, "src", "gateway", "systemd")
GW_HARDENING = [
    "User=bc-gateway", "Group=bc-gateway", "EnvironmentFile=/etc/default/bc-gateway",
    "NoNewPrivileges=yes", "CapabilityBoundingSet=", "AmbientCapabilities=",
    "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "PrivateDevices=yes",
    "PrivateUsers=yes", "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
    "RestrictNamespaces=yes", "MemoryDenyWriteExecute=yes", "SystemCallArchitectures=native",
    "SystemCallFilter=@system-service", "Restart=on-failure", "WantedBy=multi-user.target",
]

HARDENING = [
    "NoNewPrivileges=yes", "CapabilityBoundingSet=", "AmbientCapabilities=",
    "ProtectSystem=strict", "ProtectHome=read-only", "ReadWritePaths=%S/bcd/node %t",
    "PrivateTmp=yes", "PrivateDevices=yes", "BindPaths=-/dev/tpmrm0", "DeviceAllow=/dev/tpmrm0 rw",
    "UMask=0077",
    "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6", "RestrictNamespaces=yes",
    "RestrictSUIDSGID=yes", "LockPersonality=yes", "MemoryDenyWriteExecute=yes",
    "SystemCallArchitectures=native", "SystemCallFilter=@system-service",
    "ProtectKernelTunables=yes", "ProtectKernelModules=yes", "ProtectControlGroups=yes",
    "StateDirectory=bcd/node", "StateDirectoryMode=0700",
]


def lines(path):
    """The unit's directive lines, comments dropped."""
    with open(path) as f:
        return [l.strip() for l in f if l.strip() and not l.lstrip().startswith("#")]


def analyze(tmp, rt, *args):
    """systemd-analyze --user ARGS in tmp with XDG_RUNTIME_DIR=rt; CompletedProcess."""
    envv = dict(os.environ)
    envv["XDG_RUNTIME_DIR"] = rt
    return subprocess.run(["systemd-analyze", "--user"] + list(args), cwd=tmp, env=envv,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)


def copy_units(tmp, bcd, extra=""):
    """bcd.socket and bcd.service in tmp, ExecStart pointed at bcd, extra appended to the service."""
    shutil.copy(os.path.join(UNITS, "bcd.socket"), tmp)
    with open(os.path.join(UNITS, "bcd.service")) as f:
        text = f.read().replace("/usr/local/bin/bcd", bcd)
    with open(os.path.join(tmp, "bcd.service"), "w") as f:
        f.write(text + extra)


def main():
    """The script."""
    tap = agentlib.Tap()
    tmp = tempfile.mkdtemp(prefix="bcj-units-")
    try:
        rt = os.path.join(tmp, "rt")
        os.mkdir(rt, 0o700)
        bcd = os.environ.get("BCJ_BCD", os.path.join(agentlib.TOP, "build/asan/bcd"))
        copy_units(tmp, bcd)
        r = analyze(tmp, rt, "verify", "--man=no", "bcd.socket", "bcd.service")
        tap.ok(r.returncode == 0 and r.stdout.strip() == "" and r.stderr.strip() == "",
               "systemd-analyze --user verify bcd.socket bcd.service: no error, no warning",
               r.stdout + r.stderr)
        copy_units(tmp, bcd, "Bogus=yes\n")
        r = analyze(tmp, rt, "verify", "--man=no", "bcd.socket", "bcd.service")
        tap.ok("Unknown key 'Bogus'" in r.stderr, "(a unit with an unknown key does warn)", r.stderr)
        copy_units(tmp, "/nonexistent/bcd")
        r = analyze(tmp, rt, "verify", "--man=no", "bcd.socket", "bcd.service")
        tap.ok(r.returncode != 0, "(and a missing binary fails)", r.stderr)
        copy_units(tmp, bcd)
        r = analyze(tmp, rt, "security", "--offline=true", os.path.join(tmp, "bcd.service"))
        m = re.search(r"Overall exposure level for bcd.service: ([0-9.]+)", r.stdout + r.stderr)
        tap.ok(m is not None and float(m.group(1)) <= 3.0,
               "systemd-analyze security: exposure %s (at most 3.0)" % (m.group(1) if m else "?"),
               r.stdout[-2000:] + r.stderr)

        sock = lines(os.path.join(UNITS, "bcd.socket"))
        for want in ("ListenStream=%t/bcd/bcd.sock", "SocketMode=0600", "DirectoryMode=0700",
                     "Accept=no", "WantedBy=sockets.target"):
            tap.ok(want in sock, "bcd.socket: " + want)
        tap.ok(not any(l.startswith("WantedBy=default.target") or "linger" in l.lower() for l in sock),
               "bcd.socket: no default.target or lingering tricks")
        svc = lines(os.path.join(UNITS, "bcd.service"))
        for want in HARDENING:
            tap.ok(want in svc, "bcd.service: " + want)
        tap.ok("[Install]" not in svc, "bcd.service has no [Install]: it starts from its socket only")
        execs = [l for l in svc if l.startswith("ExecStart=")]
        tap.ok(len(execs) == 1 and " run " in execs[0] and "--socket" not in execs[0]
               and "--state-dir %S/bcd/node" in execs[0],
               "ExecStart runs bcd run on the state directory and takes the socket systemd passes", execs)
        tap.ok("Requires=bcd.socket" in svc, "bcd.service requires its socket")

        gw = os.environ.get("BCJ_GATEWAY", os.path.join(agentlib.TOP, "build/bc-gateway"))
        with open(os.path.join(GW_UNITS, "bc-gateway.service")) as f:
            text = f.read()
        with open(os.path.join(tmp, "bc-gateway.service"), "w") as f:
            f.write(text.replace("/usr/local/bin/bc-gateway", gw))
        r = subprocess.run(["systemd-analyze", "verify", "--man=no", "bc-gateway.service"], cwd=tmp,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        tap.ok(r.returncode == 0 and r.stdout.strip() == "" and r.stderr.strip() == "",
               "systemd-analyze verify bc-gateway.service: no error, no warning", r.stdout + r.stderr)
        r = subprocess.run(["systemd-analyze", "security", "--offline=true",
                            os.path.join(tmp, "bc-gateway.service")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        m = re.search(r"Overall exposure level for bc-gateway.service: ([0-9.]+)", r.stdout + r.stderr)
        tap.ok(m is not None and float(m.group(1)) <= 2.0,
               "systemd-analyze security bc-gateway.service: exposure %s (at most 2.0)"
               % (m.group(1) if m else "?"), r.stdout[-2000:] + r.stderr)
        gsvc = lines(os.path.join(GW_UNITS, "bc-gateway.service"))
        for want in GW_HARDENING:
            tap.ok(want in gsvc, "bc-gateway.service: " + want)
        tap.ok(not any(l.startswith(("CapabilityBoundingSet=C", "AmbientCapabilities=C", "DynamicUser"))
                       for l in gsvc), "bc-gateway.service keeps no capability")
        nofile = [int(l.split("=", 1)[1]) for l in gsvc if l.startswith("LimitNOFILE=")]
        opts = [l for l in lines(os.path.join(GW_UNITS, "bc-gateway.default"))
                if l.startswith("BC_GATEWAY_OPTIONS=")]
        mc = re.search(r"--max-connections (\d+)", opts[0] if opts else "")
        pool = re.search(r"--db-pool (\d+)", opts[0] if opts else "")
        tap.ok(len(nofile) == 1 and mc and pool and
               nofile[0] >= int(mc.group(1)) + int(pool.group(1)) + 32,
               "LimitNOFILE %s holds --max-connections + --db-pool + 32" % nofile, opts)
        r = subprocess.run([gw, "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        tap.ok(r.returncode == 0 and all(("--" + o) in r.stdout for o in
                                         ("listen", "tls-cert", "tls-key", "db", "max-connections", "db-pool")),
               "every option of the default file is one bc-gateway knows")

        envv = dict(os.environ)
        envv["XDG_RUNTIME_DIR"] = rt
        envv.pop("BCD_SOCKET", None)
        r = subprocess.run([bcd, "status"], env=envv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=30)
        tap.ok(r.returncode == 69 and os.path.join(rt, "bcd", "bcd.sock") in r.stderr,
               "the clients default to the unit's socket, $XDG_RUNTIME_DIR/bcd/bcd.sock", r.stderr)
    except Exception:
        import traceback
        tap.ok(False, "script ran to the end", traceback.format_exc())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(tap.done())


main()
