#!/usr/bin/python3
"""resilience.t: bcd waits out an unavailable service and survives interrupted writes.

Shows: with the database down the gateway answers 503 with Retry-After and
bcd waits (Retry-After clamped to --max-retry-after) and joins once the
database is back; with the gateway down (connection refused) bcd backs off
exponentially and joins once it listens; on start, an interrupted credential
update is finished when both new halves were written and undone when only
the key was, so node.key always matches node-chain.pem.
"""
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentlib  # noqa: E402
from agentlib import sha256_file  # noqa: E402


def pg(env, action):
    """Start or stop the throwaway cluster."""
    args = [os.path.join(agentlib.TOP, "tools/pg-throwaway"), action, env.pg]
    if action == "start":
        args += [str(env.pgport), env.keys, agentlib.TRUST_DOMAIN]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)


def waits(text):
    """The backoff waits bcd logged, in seconds."""
    return [float(w) for w in re.findall(r"trying again in ([0-9.]+) s", text)]


def body(tap, env):
    """The script."""
    # -- the database is down: 503 + Retry-After ----------------------------------------
    tok = env.token_file("db")
    pg(env, "stop")
    state = os.path.join(env.dir, "state-db")
    bcd = env.bcd_bg("run", *env.run_args(state, token_file=tok,
                                         extra=["--once", "--max-retry-after", "2"]))
    tap.ok(bcd.wait_log("HTTP 503", 30, count=2), "with the database down bcd gets 503 and asks again",
           bcd.text())
    w = waits(bcd.text())
    tap.ok(len(w) >= 2 and all(x >= 2.0 for x in w[:2]) and all(x <= 2.2 for x in w[:2]),
           "it honours Retry-After, clamped to --max-retry-after 2 (waits %s)" % w[:2], bcd.text())
    pg(env, "start")
    rc, out = bcd.wait(60)
    tap.ok(rc == 0 and out.startswith("spiffe://"), "once the database is back bcd joins",
           out + bcd.text())

    # -- the gateway is down: exponential backoff -------------------------------------------
    gw = env.procs[0]
    gw.stop()
    state = os.path.join(env.dir, "state-gw")
    bcd = env.bcd_bg("run", *env.run_args(state, token_file=env.token_file("gw"), extra=["--once"]))
    tap.ok(bcd.wait_log("trying again", 20, count=3), "with the gateway down bcd keeps trying",
           bcd.text())
    w = waits(bcd.text())
    tap.ok(len(w) >= 3 and 0.9 <= w[0] <= 1.1 and 1.8 <= w[1] <= 2.2 and 3.6 <= w[2] <= 4.4,
           "backing off 1 s, 2 s, 4 s (+-10%%): %s" % w[:3], bcd.text())
    port = env.gw_port
    cmd = [env.gw_bin, "--listen", "127.0.0.1:%d" % port, "--tls-cert", env.gw_cert,
           "--tls-key", env.gw_key, "--db", env.conninfo, "--log-level", "warn"]
    g2 = agentlib.Proc(env, "gateway2", cmd)
    env.procs.append(g2)
    agentlib.wait_port(port, g2.proc, "bc-gateway")
    rc, out = bcd.wait(60)
    tap.ok(rc == 0 and out.startswith("spiffe://"), "once the gateway listens bcd joins", out + bcd.text())

    # -- an interrupted credential update ----------------------------------------------------
    a = os.path.join(env.dir, "state-db")
    b = os.path.join(env.dir, "state-gw")
    b_key, b_chain = sha256_file(os.path.join(b, "node.key")), sha256_file(os.path.join(b, "node-chain.pem"))
    shutil.copy2(os.path.join(a, "node.key"), os.path.join(b, "node.key.new"))
    r = env.bcd("run", *env.run_args(b, extra=["--once"]))
    tap.ok(r.returncode == 0 and "undid an interrupted credential update" in r.stderr and
           not os.path.exists(os.path.join(b, "node.key.new")),
           "only node.key.new on disk: the update is undone", r.stderr)
    tap.eq((sha256_file(os.path.join(b, "node.key")), sha256_file(os.path.join(b, "node-chain.pem"))),
           (b_key, b_chain), "and the credential is the old one")
    shutil.copy2(os.path.join(a, "node.key"), os.path.join(b, "node.key.new"))
    shutil.copy2(os.path.join(a, "node-chain.pem"), os.path.join(b, "node-chain.pem.new"))
    with open(os.path.join(b, "node.key.tmp.ABCDEF"), "w") as f:
        f.write("half")
    r = env.bcd("run", *env.run_args(b, extra=["--once"]))
    ra = env.bcd("run", *env.run_args(a, extra=["--once"]))
    tap.ok(r.returncode == 0 and "finished an interrupted credential update" in r.stderr and
           r.stdout == ra.stdout, "both halves on disk: the update is finished", r.stdout + r.stderr)
    tap.ok(sorted(os.listdir(b)) == ["lock", "node-chain.pem", "node.key"],
           "no temporary or .new file is left", os.listdir(b))


agentlib.main(body)
