#!/usr/bin/python3
"""join.t: bcd run joins through the real gateway and guards its state directory.

Shows: bcd run --once joins (SPIFFE ID and notAfter on stdout, node.key 0600,
DIR 0700, node-chain.pem verified by openssl against the node CA, join/
gone); a second --once uses the stored credential without joining; our own
state directory with a loose mode is set back to 0700, one owned by another
user is refused; a spent token is refused (exit 2, nothing written); a
daemon holds DIR/lock so a second bcd run on DIR exits non-zero at once;
SIGTERM stops the daemon promptly with exit 0.
"""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentlib  # noqa: E402
from agentlib import mode  # noqa: E402


def body(tap, env):
    """The script."""
    state = os.path.join(env.dir, "state")
    tok = env.token_file("a")
    r = env.bcd("run", *env.run_args(state, token_file=tok, extra=["--once"]))
    lines = r.stdout.splitlines()
    prefix = "spiffe://%s/tenant/%s/node/" % (agentlib.TRUST_DOMAIN, env.tenant)
    tap.ok(r.returncode == 0 and len(lines) == 2 and lines[0].startswith(prefix),
           "bcd run --once joins through the gateway and prints the SPIFFE ID", r.stdout + r.stderr)
    tap.ok(len(lines) == 2 and lines[1].endswith("Z"), "and the notAfter (RFC 3339)", r.stdout)
    tap.eq(mode(state), 0o700, "the state directory is created 0700")
    tap.eq(mode(os.path.join(state, "node.key")), 0o600, "node.key is 0600")
    tap.eq(mode(os.path.join(state, "node-chain.pem")), 0o644, "node-chain.pem is 0644")
    tap.ok(not os.path.exists(os.path.join(state, "join")), "the join key and CSR are gone (join/)")
    nodeca = os.path.join(env.dir, "node-ca.pem")
    with open(nodeca, "w") as f:
        f.write(env.psql("SELECT bc_join.service_keys()->>'nodeCa'"))
    v = subprocess.run(["openssl", "verify", "-CAfile", nodeca, os.path.join(state, "node-chain.pem")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tap.ok(v.returncode == 0, "openssl verify accepts the stored leaf against the node CA", v.stdout)
    pub = subprocess.run(["openssl", "pkey", "-in", os.path.join(state, "node.key"), "-pubout"],
                         stdout=subprocess.PIPE, text=True).stdout
    cpub = subprocess.run(["openssl", "x509", "-in", os.path.join(state, "node-chain.pem"),
                           "-noout", "-pubkey"], stdout=subprocess.PIPE, text=True).stdout
    tap.ok(pub != "" and pub == cpub, "the stored leaf certifies the stored node key")
    node_id = lines[0].rsplit("/", 1)[-1] if lines else ""
    tap.eq(env.psql("SELECT count(*) FROM bc_join.node_certs WHERE node_id = '%s'" % node_id), "1",
           "the service issued exactly one certificate for the node")
    with open(tok) as f:
        secret = f.read().strip()
    with open(os.path.join(state, "node.key")) as f:
        keypem = f.read()
    tap.ok(secret not in r.stderr + r.stdout and secret.split(".")[-1] not in r.stderr and
           keypem.splitlines()[1] not in r.stderr, "the log never shows the token or the key", r.stderr)

    # -- a stored credential is used as is ---------------------------------------
    os.chmod(state, 0o755)
    r2 = env.bcd("run", *env.run_args(state, extra=["--once"]))
    tap.ok(r2.returncode == 0 and r2.stdout == r.stdout,
           "a second --once (no token) prints the stored credential", r2.stdout + r2.stderr)
    tap.eq(mode(state), 0o700, "our own state directory's loose mode is set back to 0700")
    tap.ok("set it to 0700" in r2.stderr, "and bcd says so", r2.stderr)

    # -- another user's directory is refused -------------------------------------
    foreign = os.path.join(env.dir, "foreign")
    os.mkdir(foreign, 0o755)
    os.chown(foreign, 65534, 65534)
    r3 = env.bcd("run", *env.run_args(foreign, token_file=env.token_file("f"), extra=["--once"]))
    tap.ok(r3.returncode == 1 and "not by this bcd" in r3.stderr,
           "a state directory owned by another user is refused", r3.stderr)
    tap.ok(mode(foreign) == 0o755 and os.listdir(foreign) == [],
           "and left untouched (mode, contents)")

    # -- the one refusal is final ----------------------------------------------------
    spent = env.token_file("spent")
    other = os.path.join(env.dir, "other")
    r4 = env.bcd("run", *env.run_args(os.path.join(env.dir, "first"), token_file=spent, extra=["--once"]))
    tap.eq(r4.returncode, 0, "a join with a fresh token", r4.stderr)
    t0 = time.time()
    r5 = env.bcd("run", *env.run_args(other, token_file=spent, extra=["--once"]))
    tap.eq(r5.returncode, 2, "the same (spent) token again: exit 2", r5.stderr)
    tap.ok("refused" in r5.stderr and "final" in r5.stderr and time.time() - t0 < 20,
           "bcd says the refusal is final and does not retry", r5.stderr)
    tap.ok(not os.path.exists(os.path.join(other, "node.key")) and
           not os.path.exists(os.path.join(other, "node-chain.pem")),
           "nothing is written for a refused join")

    # -- one bcd per state directory -----------------------------------------------------
    daemon = env.bcd_bg("run", *env.run_args(state))
    tap.ok(daemon.wait_log("renewal in", 30), "bcd run (daemon) starts on the credential",
           daemon.text())
    t0 = time.time()
    r6 = env.bcd("run", *env.run_args(state, extra=["--once"]), timeout=20)
    tap.ok(r6.returncode == 1 and "another bcd holds " + state in r6.stderr and time.time() - t0 < 10,
           "a second bcd run on the same state directory exits 1 at once", r6.stderr)
    r7 = env.bcd("renew", "--once", *env.run_args(state), timeout=20)
    tap.ok(r7.returncode == 1 and "another bcd holds" in r7.stderr,
           "so does bcd renew", r7.stderr)
    t0 = time.time()
    rc, _ = daemon.stop(signal.SIGTERM, 20)
    tap.ok(rc == 0 and time.time() - t0 < 5,
           "SIGTERM stops the sleeping daemon promptly with exit 0 (ASan found nothing)",
           "rc %s after %.1f s\n%s" % (rc, time.time() - t0, daemon.text()))
    r8 = env.bcd("run", *env.run_args(state, extra=["--once"]))
    tap.eq(r8.returncode, 0, "once it exited, the state directory is free again", r8.stderr)

    # -- help ------------------------------------------------------------------------
    h = env.bcd("--help")
    tap.ok(h.returncode == 0 and "run" in h.stdout and "renew" in h.stdout, "bcd --help lists run and renew")
    h = env.bcd("run", "--help")
    tap.ok(h.returncode == 0 and all(o in h.stdout for o in (
        "--gateway ", "--gateway-ca", "--service-keys", "--state-dir", "--token ", "--token-file",
        "--role", "--attestor", "--claims", "--max-retry-after", "--renew-at", "--once", "--renew-now")),
        "bcd run --help explains every option")
    u = env.bcd("run", "--gateway", "http://x", "--gateway-ca", "x", "--service-keys", "x", "--state-dir", "x")
    tap.eq(u.returncode, 64, "a plain-http gateway is a usage error")


agentlib.main(body)
