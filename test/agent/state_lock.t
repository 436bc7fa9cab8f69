#!/usr/bin/python3
"""state_lock.t: the commands that write a state directory honour its lock.

Shows: while bcd run holds a state directory (DIR/lock), bcd join-request
--out-dir DIR refuses at once (exit 1, naming the holder's pid) and leaves
node.key byte-identical and no CSR behind, and bcd verify-response --dir
DIR refuses too, node-chain.pem untouched; in a directory nobody holds
(even while that bcd runs) both work as before: join-request writes a key
and CSR, the service answers it, verify-response stores the chain; once bcd
run stopped, the state directory is free again.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentlib  # noqa: E402


def body(tap, env):
    """The script."""
    state = os.path.join(env.dir, "state")
    r = env.bcd("run", *env.run_args(state, token_file=env.token_file("a"), extra=["--once"]))
    tap.ok(r.returncode == 0, "the host joins (bcd run --once)", r.stderr)
    key = os.path.join(state, "node.key")
    chain = os.path.join(state, "node-chain.pem")
    keysum, chainsum = agentlib.sha256_file(key), agentlib.sha256_file(chain)
    daemon = env.bcd_bg("run", *env.run_args(state))
    tap.ok(daemon.wait_log("renewal in", 30), "bcd run holds the state directory", daemon.text())
    pid = daemon.proc.pid

    tok = env.token_file("b")
    t0 = time.time()
    r = env.bcd("join-request", "--service-keys", env.service_keys, "--token-file", tok,
                "--out-dir", state, timeout=20)
    tap.ok(r.returncode == 1 and "the state directory %s is in use by another bcd (pid %d)" % (state, pid)
           in r.stderr and r.stdout == "" and time.time() - t0 < 10,
           "bcd join-request --out-dir on it refuses at once, exit 1, naming bcd run's pid", r.stderr)
    tap.ok(agentlib.sha256_file(key) == keysum and not os.path.exists(os.path.join(state, "node.csr.der")),
           "node.key is byte-identical, no CSR written")

    resp = os.path.join(env.dir, "resp.json")
    with open(resp, "w") as f:
        f.write('{"status":"refused"}')
    r = env.bcd("verify-response", "--service-keys", env.service_keys, "--dir", state,
                "--response", resp, timeout=20)
    tap.ok(r.returncode == 1 and "the state directory %s is in use by another bcd (pid %d)" % (state, pid)
           in r.stderr, "bcd verify-response --dir on it refuses too, exit 1", r.stderr)
    tap.ok(agentlib.sha256_file(chain) == chainsum and agentlib.sha256_file(key) == keysum,
           "node-chain.pem and node.key untouched")

    # a directory nobody holds: both as before, while that bcd runs
    d = os.path.join(env.dir, "manual")
    r = env.bcd("join-request", "--service-keys", env.service_keys, "--token-file", tok, "--out-dir", d)
    tap.ok(r.returncode == 0 and r.stdout.startswith("{") and os.path.exists(os.path.join(d, "node.key"))
           and os.path.exists(os.path.join(d, "node.csr.der")),
           "bcd join-request --out-dir on a free directory writes the key and CSR", r.stderr)
    answer = env.psql("SELECT bc_join('%s'::jsonb)" % r.stdout.strip())
    with open(resp, "w") as f:
        f.write(answer)
    r = env.bcd("verify-response", "--service-keys", env.service_keys, "--dir", d, "--response", resp)
    tap.ok(r.returncode == 0 and r.stdout.startswith("spiffe://") and
           os.path.exists(os.path.join(d, "node-chain.pem")),
           "the service's answer verifies and bcd verify-response stores the chain", r.stdout + r.stderr)

    rc, _ = daemon.stop()
    tap.eq(rc, 0, "bcd run stopped")
    r = env.bcd("verify-response", "--service-keys", env.service_keys, "--dir", d, "--response", resp)
    tap.eq(r.returncode, 0, "verify-response again (the lock it took is gone with it)", r.stderr)
    r = env.bcd("run", *env.run_args(state, extra=["--once"]))
    tap.eq(r.returncode, 0, "and the state directory is free again for bcd run", r.stderr)
    tap.ok("Sanitizer" not in daemon.text(), "no sanitizer report", daemon.text())


agentlib.main(body)
