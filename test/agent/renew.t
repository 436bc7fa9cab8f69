#!/usr/bin/python3
"""renew.t: bcd renews through POST /v1/renew (bc_join.renew()).

Shows: bcd renew --once replaces the key and certificate (new serial, the
same node id, allowedKinds carried forward, the old certificate revoked as
renewed, node.key still 0600); a superseded certificate (the old key and
chain put back after a renewal) and a revoked one are refused with exit 2
and nothing written; the daemon renews by itself at --renew-at of a short
lifetime, again and again, logging one line each, and stops on SIGTERM.
"""
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentlib  # noqa: E402
from agentlib import mode, sha256_file  # noqa: E402


def leaf_serial(state):
    """The serial of the stored leaf, 32 lower-case hex digits."""
    out = subprocess.run(["openssl", "x509", "-in", os.path.join(state, "node-chain.pem"),
                          "-noout", "-serial"], stdout=subprocess.PIPE, text=True).stdout
    return out.strip().split("=", 1)[-1].lower().rjust(32, "0")


def join_approved(tap, env, state):
    """Join state through the approval attestor; the node id."""
    bcd = env.bcd_bg("run", *env.run_args(state, token_file=env.token_file(os.path.basename(state)),
                                         extra=["--once", "--max-retry-after", "1"]))
    deadline = time.time() + 30
    while time.time() < deadline and env.psql(
            "SELECT count(*) FROM bc_join.pending_join_requests") != "1":
        time.sleep(0.2)
    env.psql("SELECT bc_join.approve_join_request(id) FROM bc_join.pending_join_requests")
    rc, out = bcd.wait(30)
    tap.ok(rc == 0 and out.startswith("spiffe://"), "joined (approved)", out + bcd.text())
    return out.splitlines()[0].rsplit("/", 1)[-1] if out else "?"


def body(tap, env):
    """The script."""
    if not env.has_function("bc_join.renew(jsonb)"):
        tap.skip("renewal", "bc_join.renew(jsonb) is not in the installed extension yet")
        return
    env.register_approval_attestor()
    state = os.path.join(env.dir, "state")
    node_id = join_approved(tap, env, state)
    files = [os.path.join(state, n) for n in ("node.key", "node-chain.pem")]
    first = leaf_serial(state)

    # -- (c) a renewal keeps the node id and the allowed kinds ----------------------------
    keep = os.path.join(env.dir, "keep")
    os.mkdir(keep, 0o700)
    for f in files:
        shutil.copy2(f, keep)
    before = [sha256_file(f) for f in files]
    r = env.bcd("renew", "--once", *env.run_args(state))
    lines = r.stdout.splitlines()
    tap.ok(r.returncode == 0 and len(lines) == 2 and len(lines[0]) == 32 and lines[0] != first,
           "bcd renew --once prints a new serial and notAfter", r.stdout + r.stderr)
    new = lines[0] if lines else "?"
    tap.eq(leaf_serial(state), new, "node-chain.pem holds the new certificate")
    tap.ok(all(sha256_file(f) != h for f, h in zip(files, before)), "both the key and the chain changed")
    tap.eq(mode(files[0]), 0o600, "the new node.key is 0600")
    tap.eq(env.psql("SELECT node_id || ' ' || array_to_string(allowed_kinds, ',') FROM bc_join.node_certs "
                    "WHERE serial = '%s'" % new), node_id + " inventory.refresh,diag.*",
           "the new certificate row keeps the node id and the allowed kinds")
    tap.eq(env.psql("SELECT revocation_reason FROM bc_join.node_certs WHERE serial = '%s'" % first),
           "renewed", "the old certificate is revoked as renewed")
    tap.ok("renewed spiffe://" in r.stderr and "replaces " + first in r.stderr,
           "the renewal is logged in one line", r.stderr)
    pub = subprocess.run(["openssl", "pkey", "-in", files[0], "-pubout"], stdout=subprocess.PIPE, text=True).stdout
    cpub = subprocess.run(["openssl", "x509", "-in", files[1], "-noout", "-pubkey"],
                          stdout=subprocess.PIPE, text=True).stdout
    tap.ok(pub != "" and pub == cpub, "the new certificate certifies the new key")

    # -- (d) a superseded certificate is refused -------------------------------------------
    renewed = os.path.join(env.dir, "renewed")
    os.mkdir(renewed, 0o700)
    for f in files:
        shutil.copy2(f, renewed)
        shutil.copy2(os.path.join(keep, os.path.basename(f)), f)
    before = [sha256_file(f) for f in files]
    r = env.bcd("renew", "--once", *env.run_args(state))
    tap.ok(r.returncode == 2 and "refused" in r.stderr and r.stdout == "",
           "renewing with the superseded certificate: refused, exit 2", r.stdout + r.stderr)
    tap.eq([sha256_file(f) for f in files], before, "and nothing is written")
    tap.eq(env.psql("SELECT count(*) FROM bc_join.node_certs WHERE node_id = '%s'" % node_id), "2",
           "and nothing is issued")

    # -- (d) a revoked certificate is refused ----------------------------------------------
    for f in files:
        shutil.copy2(os.path.join(renewed, os.path.basename(f)), f)
    env.psql("UPDATE bc_join.node_certs SET revoked_at = now() WHERE serial = '%s'" % new)
    before = [sha256_file(f) for f in files]
    r = env.bcd("renew", "--once", *env.run_args(state))
    tap.ok(r.returncode == 2 and "refused" in r.stderr and r.stdout == "",
           "renewing a revoked certificate: refused, exit 2", r.stdout + r.stderr)
    tap.eq([sha256_file(f) for f in files], before, "and nothing is written")

    # -- the daemon renews by itself --------------------------------------------------------
    state2 = os.path.join(env.dir, "state2")
    node2 = join_approved(tap, env, state2)
    env.psql("ALTER DATABASE agent SET bc_join.cert_ttl = 60")
    env.gateway()       # new sessions see the 60 s lifetime
    daemon = env.bcd_bg("run", *env.run_args(state2, extra=["--renew-now", "--renew-at", "0.1"]))
    tap.ok(daemon.wait_log("renewed spiffe://", 60, count=3),
           "the daemon renews at --renew-at of each lifetime, again and again", daemon.text())
    t0 = time.time()
    rc, out = daemon.stop(signal.SIGTERM, 20)
    tap.ok(rc == 0 and time.time() - t0 < 5, "SIGTERM: exit 0 promptly", daemon.text())
    live = env.psql("SELECT string_agg(serial, ',') FROM bc_join.node_certs "
                    "WHERE node_id = '%s' AND revoked_at IS NULL" % node2)
    tap.eq(live, leaf_serial(state2), "the one live certificate of the node is the stored one")
    renewals = [l for l in daemon.text().splitlines() if "renewed spiffe://" in l]
    tap.ok(all("BEGIN" not in l and "jt_" not in l for l in daemon.text().splitlines()),
           "the log never shows a key or token")
    tap.ok(len(renewals) >= 3, "one log line per renewal (%d)" % len(renewals))
    r = env.bcd("run", *env.run_args(state2, extra=["--once"]))
    tap.ok(r.returncode == 0 and r.stdout.startswith("spiffe://") and r.stdout.split("\n")[0].endswith(node2),
           "the renewed credential is still the same node", r.stdout + r.stderr)

    # -- a renewal whose answer is lost: the retry asks for the same key ------------------
    url, relay = env.mitm("lose-first")
    certs_before = int(env.psql("SELECT count(*) FROM bc_join.node_certs WHERE node_id = '%s'" % node2))
    r = env.bcd("renew", "--once", *env.run_args(state2, gateway=url))
    lines = r.stdout.splitlines()
    tap.ok(r.returncode == 0 and len(lines) == 2 and "no answer" in r.stderr,
           "a renewal whose first answer was lost succeeds on the retry", r.stdout + r.stderr)
    tap.eq(env.psql("SELECT count(*) FROM bc_join.node_certs WHERE node_id = '%s'" % node2),
           str(certs_before + 1), "one certificate was issued for the two attempts")
    tap.eq(leaf_serial(state2), lines[0] if lines else "?",
           "the stored certificate is the one issued in the lost answer")
    tap.eq(env.psql("SELECT string_agg(serial, ',') FROM bc_join.node_certs "
                    "WHERE node_id = '%s' AND revoked_at IS NULL" % node2), leaf_serial(state2),
           "and it is the node's one live certificate")
    tap.ok(not os.path.exists(os.path.join(state2, "renew")), "the pending renewal key is gone once stored")


agentlib.main(body)
