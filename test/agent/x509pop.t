#!/usr/bin/python3
"""x509pop.t: a bcd that was away comes back as itself (x509pop), end to end.

Two bcd join by token with 60-second certificates (bc_join.cert_ttl through
ALTER DATABASE); the certificates then expire for real (one wait for both),
so bcd's clock and the service's agree.  bcd run --once without a token
re-joins by x509pop through the gateway with a new key and comes back as the
same node, identity generation + 1.  Beyond the grace (bc_join.x509pop_grace
= 0, ALTER SYSTEM) the service refuses the other: bcd exits 2 saying it needs
a join token; with one it joins as a new node.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentlib  # noqa: E402
from agentlib import sha256_file  # noqa: E402


def body(tap, env):
    env.psql("ALTER DATABASE agent SET bc_join.cert_ttl = 60")
    state = os.path.join(env.dir, "away")
    r = env.bcd("run", *env.run_args(state, token_file=env.token_file("away"), extra=["--once"]))
    tap.ok(r.returncode == 0 and "/node/" in r.stdout, "joined by token", r.stdout + r.stderr)
    node = r.stdout.split("\n")[0].rsplit("/", 1)[-1]
    old_key = sha256_file(os.path.join(state, "node.key"))
    late = os.path.join(env.dir, "late")    # away beyond the grace, below
    r = env.bcd("run", *env.run_args(late, token_file=env.token_file("late"), extra=["--once"]))
    tap.ok(r.returncode == 0 and "/node/" in r.stdout, "a second host joined by token", r.stdout + r.stderr)
    late_node = r.stdout.split("\n")[0].rsplit("/", 1)[-1]
    time.sleep(62)                       # both certificates expire, for bcd and for the service

    r = env.bcd("run", *env.run_args(state, extra=["--once"]))
    tap.ok(r.returncode == 0 and r.stdout.split("\n")[0].endswith("/node/" + node),
           "expired, no token: bcd run comes back as the same node by x509pop", r.stdout + r.stderr)
    tap.ok("by x509pop" in r.stderr, "and says so", r.stderr)
    tap.eq(env.psql("SELECT identity_generation || ' ' || attestor FROM bc_join.nodes WHERE id = '%s'"
                    % node), "2 x509pop", "identity generation + 1, reclaimed by x509pop")
    tap.ok(sha256_file(os.path.join(state, "node.key")) != old_key, "with a new node key")
    tap.eq(env.psql("SELECT count(*) FROM bc_join.events WHERE type = 'node.joined' "
                    "AND payload->>'nodeId' = '%s' AND payload->>'attestor' = 'x509pop'" % node), "1",
           "node.joined (reclaim) in the events")

    # the gateway keeps its sessions: a reload reaches them, ALTER DATABASE would not
    env.psql("ALTER SYSTEM SET bc_join.x509pop_grace = 0")
    env.psql("SELECT pg_reload_conf()")
    time.sleep(1)
    r = env.bcd("run", *env.run_args(late, extra=["--once"]))
    tap.eq(r.returncode, 2, "beyond the grace, no token: refused, exit 2", r.stderr)
    tap.ok("needs a join token" in r.stderr, "bcd says it needs a join token", r.stderr)
    tap.eq(env.psql("SELECT payload->>'refusal' FROM bc_join.events WHERE type = 'security.join.refused' "
                    "ORDER BY id DESC LIMIT 1"), "x509pop:beyond-grace",
           "the operator sees x509pop:beyond-grace in bc_join.events")
    r = env.bcd("run", *env.run_args(late, token_file=env.token_file("again"), extra=["--once"]))
    tap.ok(r.returncode == 0 and "/node/" in r.stdout and not r.stdout.split("\n")[0].endswith(late_node),
           "with a token: joins as a new node", r.stdout + r.stderr)


agentlib.main(body)
