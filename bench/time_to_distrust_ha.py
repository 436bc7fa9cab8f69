#!/usr/bin/python3
"""time_to_distrust_ha.py: a revocation across a failover of the HA pair.

Used by bench/time-to-distrust-ha (read its head).  test/ha/failover.t's
fixture: a pg_auto_failover formation made by tools/ha-throwaway (monitor,
primary node1, synchronous standby node2, bc_join on both; the monitor's
health checks shortened for a test, docs/ha.md), one real bc-gateway with the
multi-host conninfo (target_session_attrs=read-write), as failover.t starts it
(--retry-after 1 --db-wait-timeout 2s --db-pool 2).  BENCH_HA_TRIALS nodes
joined through it first (`bcd run --once`, a join token each).  A trial, on
the next node: the gateway answers OCSP `good` for its certificate (now in the
gateway's per-CertID cache); `SELECT bc_join.revoke_node(node,
'keyCompromise')` on the primary, t0 the moment its COMMIT returns
(synchronous_commit on, the standby synchronous: the revocation is on both);
at once `tools/ha-throwaway kill` of the primary (its keeper and postmaster,
SIGKILL), waited until none of its processes is left (a backend outlives a
SIGKILLed postmaster briefly, and could still answer); from then POST /v1/ocsp through the same gateway every 50 ms
(python3-cryptography builds and parses) until it answers `revoked`, every
other answer counted (a `good` after t0 would be a stale answer served: the
trial fails), and the standby's promotion timed (pg_is_in_recovery() polled on
it every 50 ms) and the moment it takes read-write sessions (pg_auto_failover
keeps a promoted standby read-only, "incompatible with target_session_attrs =
read-write", until the monitor has it wait_primary: up to
primary_demote_timeout, 5 s in ha-throwaway's formation, after it noticed the
primary gone; the gateway's multi-host conninfo wants read-write).  Then the old primary is restarted (it rejoins as the
synchronous standby) and the next trial fails over the other way.  Prints a
JSON line per trial and a markdown table; exit 1 when a trial missed.
"""
import http.client
import json
import os
import ssl
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "test", "ha"))
from benchlib import load_pems, ocsp_answer, ocsp_post, ocsp_request, table  # noqa: E402
import agentlib  # noqa: E402
import bctest  # noqa: E402
import halib  # noqa: E402
import psycopg2  # noqa: E402

TRIALS = int(os.environ.get("BENCH_HA_TRIALS", "20"))


class HAEnv(halib.HAMixin, agentlib.Env):
    """agentlib's Env (TLS, gateway, bcd) on a pg_auto_failover formation."""


def ocsp_try(conn_box, env, ctx, req):
    """POST req to /v1/ocsp (a new connection after a failed one); the status or what failed."""
    try:
        if conn_box[0] is None:
            conn_box[0] = http.client.HTTPSConnection("127.0.0.1", env.gw_port, context=ctx, timeout=5)
        answer = ocsp_post(conn_box[0], req)
    except (OSError, http.client.HTTPException) as e:
        if conn_box[0] is not None:
            conn_box[0].close()
        conn_box[0] = None
        return "no answer (%s)" % type(e).__name__
    return ocsp_answer(*answer)


def postgres_pids(data):
    """The postmaster of the data directory and its children (the backends): pids."""
    with open(os.path.join(data, "postmaster.pid")) as f:
        pm = int(f.readline())
    out = [pm]
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pm:
                        out.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return out


def alive(pid):
    """True while pid is a process (not a zombie)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def setup(env):
    env.make_tls()
    env.start_cluster("ha-tenant")


def body(tap, env):
    env.gateway("--retry-after", "1", "--db-wait-timeout", "2s", "--db-pool", "2", *os.environ.get("BENCH_GW_ARGS", "").split())
    ctx = ssl.create_default_context(cafile=env.ca)
    conn_box = [None]
    # -- the nodes, one per trial, joined through the gateway before any failover
    nodes = []
    for k in range(TRIALS):
        state = os.path.join(env.dir, "state%d" % k)
        r = env.bcd("run", *env.run_args(state, token_file=env.token_file("t%d" % k), extra=["--once"]))
        if not r.returncode == 0:
            tap.ok(False, "node %d joins" % k, r.stderr)
            return
        chain = load_pems(open(os.path.join(state, "node-chain.pem"), "rb").read())
        nodes.append((r.stdout.splitlines()[0].rsplit("/", 1)[1], ocsp_request(chain[0], chain[1])))
    tap.ok(True, "%d nodes joined through the gateway" % len(nodes))
    settings = env.psql("SELECT 'bc_join.ocsp_validity ' || current_setting('bc_join.ocsp_validity')")
    trials, missed = [], []
    victim = env.use_primary()
    for k, (node, req) in enumerate(nodes):
        heir = "node2" if victim == "node1" else "node1"
        for _ in range(20):  # the kept connection may have been closed while the old primary rejoined
            before = ocsp_try(conn_box, env, ctx, req)
            if not before.startswith("no answer"):
                break
            time.sleep(0.1)
        vp = psycopg2.connect(host="127.0.0.1", port=env.ports[victim], user="postgres", dbname=env.db)
        cur = vp.cursor()
        cur.execute("SELECT current_setting('synchronous_commit'), current_setting('synchronous_standby_names'), "
                    "pg_is_in_recovery()")
        sync = cur.fetchone()
        vp.commit()
        hp = psycopg2.connect(host="127.0.0.1", port=env.ports[heir], user="postgres", dbname=env.db)
        hp.autocommit = True
        if before != "good" or sync[2] or not sync[1]:
            missed.append((k, "not ready", victim, before, sync))
            break
        seen = {}
        prom = {}
        stop = threading.Event()

        def promotion():
            hc = hp.cursor()
            while not stop.is_set():
                try:
                    hc.execute("SELECT pg_is_in_recovery(), current_setting('transaction_read_only')")
                    rec, ro = hc.fetchone()
                    if not rec and "t" not in prom:
                        prom["t"] = time.time()
                    if not rec and ro == "off":
                        prom["rw"] = time.time()
                        return
                except psycopg2.Error:
                    pass
                time.sleep(0.05)

        pt = threading.Thread(target=promotion, daemon=True)
        pt.start()
        # -- the revocation, committed on both; then the primary lost
        pids = postgres_pids(os.path.join(env.ha, victim, "data"))
        cur.execute("SELECT bc_join.revoke_node(%s, 'keyCompromise')", (node,))
        vp.commit()
        t0 = time.time()
        subprocess.run([halib.HA, "kill", env.ha, victim], check=True, stdout=subprocess.DEVNULL)
        t_kill = time.time()
        # a backend of a SIGKILLed postmaster lives on until it sees its postmaster gone (and
        # could answer meanwhile): the old primary is lost when none of its processes is left
        while time.time() < t_kill + 30 and any(alive(x) for x in pids):
            time.sleep(0.01)
        t_gone = time.time()
        vp.close()
        t_rev = None
        deadline = t_kill + 120
        while time.time() < deadline:
            st = ocsp_try(conn_box, env, ctx, req)
            now = time.time()
            seen[st] = seen.get(st, 0) + 1
            if st == "revoked":
                t_rev = now
                break
            time.sleep(0.05)
        pt.join(max(0.0, deadline - time.time()))
        stop.set()
        hp.close()
        row = {"trial": k, "from": victim, "to": heir, "kill": t_kill - t0, "gone": t_gone - t0,
               "promoted": prom["t"] - t0 if "t" in prom else None,
               "read_write": prom["rw"] - t0 if "rw" in prom else None,
               "revoked": t_rev - t0 if t_rev else None,
               "after_read_write": t_rev - prom["rw"] if t_rev and "rw" in prom else None,
               "answers": seen}
        print(json.dumps(row), flush=True)
        if t_rev is None or "good" in seen or "rw" not in prom or any(alive(x) for x in pids):
            missed.append((k, "revoked not answered, or good served after the commit, or no promotion", row))
            break
        trials.append(row)
        # -- the old primary rejoins as the synchronous standby; the next trial fails back
        subprocess.run([halib.HA, "restart", env.ha, victim], check=True)
        if not (env.wait_state(victim, "secondary", timeout=240) and env.wait_state(heir, "primary", timeout=60)):
            missed.append((k, "the old primary did not rejoin", env.state()))
            break
        env.use_primary()
        victim = heir

    tap.ok(not missed and len(trials) == TRIALS, "%d trials, revoked answered after every failover, "
           "never good after the commit" % len(trials), missed)
    if not trials:
        return
    table("across the failover", (("gone", "the COMMIT of revoke_node to the old primary's last process gone (SIGKILL at once)"),
             ("promoted", "the COMMIT to the standby's promotion (pg_is_in_recovery() false)"),
             ("read_write", "the COMMIT to the new primary taking read-write sessions (pg_auto_failover's wait_primary)"),
             ("revoked", "(d) the COMMIT to OCSP `revoked` at the same gateway, answered by the new primary"),
             ("after_read_write", "(d) the new primary read-write to OCSP `revoked` at the gateway")), trials)
    answers = {}
    for t in trials:
        for a, n in t["answers"].items():
            answers[a] = answers.get(a, 0) + n
    print("\nanswers between the kill and `revoked`, all trials: %s; %s; directions: %s"
          % (", ".join("%s %d" % x for x in sorted(answers.items())), settings,
             ", ".join(sorted(set("%s->%s" % (t["from"], t["to"]) for t in trials)))))


bctest.run(HAEnv(), setup, body)
