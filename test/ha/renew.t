#!/usr/bin/python3
"""renew.t: the real agent keeps renewing across a failover.

On tools/ha-throwaway's formation, one bc-gateway with the multi-host
conninfo and one node joined by bcd: a loop runs `bcd renew --once` again and
again while the primary (node1) is lost by SIGKILL.  Checks: every renewal bcd
reported done (its new serial) is on the promoted node2, the node's one live
certificate there is the one bcd stored, and renewals resume through the same
gateway.  Run by test/ha-run.
"""
import os
import re
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "agent"))
sys.path.insert(0, HERE)
import agentlib  # noqa: E402
import halib  # noqa: E402
from bctest import run  # noqa: E402
from halib import HA  # noqa: E402


class HAAgentEnv(halib.HAMixin, agentlib.Env):
    """agentlib's Env on a pg_auto_failover formation."""


def leaf_serial(state):
    out = subprocess.run(["openssl", "x509", "-in", os.path.join(state, "node-chain.pem"),
                          "-noout", "-serial"], stdout=subprocess.PIPE, text=True).stdout
    return out.strip().split("=", 1)[-1].lower().rjust(32, "0")


def body(tap, env):
    state = os.path.join(env.dir, "state")
    r = env.bcd("run", *env.run_args(state, token_file=env.token_file("n1"), extra=["--once"]))
    tap.ok(r.returncode == 0 and r.stdout.startswith("spiffe://"), "bcd joins through the gateway",
           r.stdout + r.stderr)
    node = r.stdout.splitlines()[0].rsplit("/", 1)[-1] if r.stdout else "?"

    done = []           # (time, serial) of each renewal bcd reported
    tries = []          # (time, exit code)
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            t = time.time()
            p = env.bcd("renew", "--once", *env.run_args(state, extra=["--max-retry-after", "1"]),
                        timeout=60)
            tries.append((t, p.returncode))
            if p.returncode == 0:
                m = re.search(r"\b([0-9a-f]{32})\b", p.stdout.lower())
                done.append((time.time(), m.group(1) if m else leaf_serial(state)))
            else:
                time.sleep(0.3)

    th = threading.Thread(target=loop, daemon=True)
    th.start()
    deadline = time.time() + 60
    while len(done) < 5 and time.time() < deadline:
        time.sleep(0.2)
    tap.ok(len(done) >= 5, "renewals run before the failover (%d)" % len(done))
    subprocess.run([HA, "kill", env.ha, "node1"], check=True, stdout=subprocess.DEVNULL)
    t_kill = time.time()
    tap.ok(env.wait_state("node2", "wait_primary|primary", 120), "node2 is promoted", env.state())
    deadline = time.time() + 90
    while time.time() < deadline and not [s for t, s in done if t > t_kill + 0.5]:
        time.sleep(0.2)
    after = [t for t, s in done if t > t_kill + 0.5]
    tap.ok(bool(after), "renewals resume after the failover, same gateway")
    time.sleep(2)
    stop.set()
    th.join(90)
    if after:
        tap.note("kill -> first renewal done after it: %.1f s; %d renewals, %d failed tries"
                 % (min(after) - t_kill, len(done), sum(1 for _, rc in tries if rc != 0)))
    env.pgenv = env.node_env("node2")
    serials = ",".join("'%s'" % s for _, s in done)
    found = int(env.psql("SELECT count(*) FROM bc_join.node_certs WHERE serial IN (%s)" % serials))
    tap.eq(found, len(done), "every renewal bcd reported is on the new primary")
    live = env.psql("SELECT string_agg(serial, ',') FROM bc_join.node_certs "
                    "WHERE node_id = '%s' AND revoked_at IS NULL" % node)
    tap.eq(live, leaf_serial(state), "the node's one live certificate is the one bcd stored")


if __name__ == "__main__":
    env = HAAgentEnv()

    def setup(e):
        e.start_cluster("ha-agents")
        e.make_tls()
        e.gateway("--retry-after", "1", "--db-wait-timeout", "2s", "--db-pool", "2")

    run(env, setup, body)
