#!/usr/bin/python3
"""ca_compromise.py: how long a fleet takes to come back from a compromised CA.

Used by bench/ca-compromise (read its head).  test/tap/ca_compromise.t's steps
(docs/operator.md, "A compromised CA key") with real daemons: one throwaway
cluster, the real bc-gateway, BENCH_NODES nodes joined by join tokens under
intermediate A, each with its `bcd run` daemon (no Workload API, so the
revocation watch checks the node certificate by OCSP alone, every
--status-interval: BENCH_STATUS_INTERVAL, default bcd's default 10 s), the
daemons started one interval / N apart so their checks fall evenly over the
interval.  Once every daemon has had OCSP answer `good`:
`tools/bc-join-keygen --rotate-intermediate` (B issues from now on), then
`SELECT bc_join.mark_ca_compromised(A)`, t0 the moment it returns (autocommit).
Then SQL every 200 ms: the nodes holding a live certificate issued since the
marking (the operator's watch query), each node's own time from
bc_join.compromise_renewals.renewed_at - compromised_cas.marked_at; at the
end, every daemon's node-chain.pem is under B.  Prints a JSON line per node
and a markdown table; exit 1 when a node did not come back.
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import load_pems, row as table_row, setup_gateway, stopping  # noqa: E402
import agentlib  # noqa: E402
import bctest  # noqa: E402
import psycopg2  # noqa: E402

NODES = int(os.environ.get("BENCH_NODES", "20"))
INTERVAL = int(os.environ.get("BENCH_STATUS_INTERVAL", "10"))


def run(tap, env):
    db = psycopg2.connect(host=env.pgenv["PGHOST"], port=env.pgenv["PGPORT"], user=env.pgenv["PGUSER"],
                          dbname=env.db)
    db.autocommit = True
    cur = db.cursor()
    a_pem = open(os.path.join(env.keys, "node-ca.crt")).read().split("-----END CERTIFICATE-----")[0] \
        + "-----END CERTIFICATE-----\n"
    nodes = []
    for k in range(NODES):
        state = os.path.join(env.dir, "state%d" % k)
        r = env.bcd("run", *env.run_args(state, token_file=env.token_file("t%d" % k), extra=["--once"]))
        if r.returncode != 0:
            tap.ok(False, "node %d joins" % k, r.stderr)
            return
        nodes.append({"k": k, "id": r.stdout.splitlines()[0].rsplit("/", 1)[1], "state": state})
    for n in nodes:
        n["proc"] = env.bcd_bg("run", *env.run_args(n["state"], extra=["--status-interval", str(INTERVAL)]))
        time.sleep(INTERVAL / float(NODES))
    if not tap.ok(all(n["proc"].wait_log("revocation: OCSP says the node certificate", 3 * INTERVAL + 20)
                      for n in nodes), "every daemon has had OCSP answer good",
                  [n["proc"].text()[-800:] for n in nodes if "OCSP says" not in n["proc"].text()][:2]):
        return
    tap.ok(True, "%d nodes under A, their daemons at --status-interval %d; load %s"
           % (NODES, INTERVAL, open("/proc/loadavg").read().split()[:3]))
    # -- rotate to B, mark A compromised
    subprocess.run([os.path.join(bctest.TOP, "tools/bc-join-keygen"), "--rotate-intermediate", env.keys,
                    "--root-dir", env.keys + ".root"], check=True, stdout=subprocess.DEVNULL)
    cur.execute("SELECT bc_join.node_ca_certificate()")
    b_subject = load_pems(cur.fetchone()[0].encode())[0].subject
    cur.execute("SELECT bc_join.mark_ca_compromised(%s)", (a_pem,))
    revoked = cur.fetchone()[0]
    t0 = time.time()
    cur.execute("SELECT extract(epoch FROM marked_at) FROM bc_join.compromised_cas")
    marked = float(cur.fetchone()[0])
    back_at = {}
    deadline = t0 + 3 * INTERVAL + 60
    ids = [n["id"] for n in nodes]
    while time.time() < deadline and len(back_at) < NODES:
        cur.execute("SELECT DISTINCT l.node_id FROM bc_join.node_certs l WHERE l.node_id = ANY(%s) "
                    "AND l.revoked_at IS NULL AND l.not_after > now() "
                    "AND l.issued_at >= (SELECT marked_at FROM bc_join.compromised_cas)", (ids,))
        now = time.time()
        for (nid,) in cur.fetchall():
            back_at.setdefault(nid, now)
        time.sleep(0.2)
    t_all = max(back_at.values()) - t0 if len(back_at) == NODES else None
    cur.execute("SELECT o.node_id, extract(epoch FROM cr.renewed_at) FROM bc_join.compromise_renewals cr "
                "JOIN bc_join.node_certs o ON o.serial = cr.serial")
    renewed = dict((nid, float(t) - marked) for nid, t in cur.fetchall())
    under_b = 0
    rows = []
    for n in nodes:
        chain = load_pems(open(os.path.join(n["state"], "node-chain.pem"), "rb").read())
        b = len(chain) > 1 and chain[1].subject == b_subject
        under_b += b
        row = {"node": n["k"], "service": renewed.get(n["id"]),
               "seen": back_at[n["id"]] - t0 if n["id"] in back_at else None, "chain_under_b": b,
               "renewing_now": "renewing now" in n["proc"].text()}
        rows.append(row)
        print(json.dumps(row), flush=True)
    ok = t_all is not None and under_b == NODES and all(r["service"] is not None for r in rows)
    tap.ok(ok, "every one of the %d nodes renewed under B (%d revoked by the marking)" % (NODES, revoked),
           [r for r in rows if r["service"] is None or not r["chain_under_b"]][:5])
    v = [r["service"] for r in rows if r["service"] is not None]
    if not v:
        return
    print("\n| from mark_ca_compromised(A) to | p50 s | max s | min s | nodes |")
    print("| --- | ---: | ---: | ---: | ---: |")
    print(table_row("a node's renewal under B (compromise_renewals.renewed_at - marked_at)", v))
    print(table_row("a node's live certificate issued since the marking (SQL poll, 200 ms)",
                    [r["seen"] for r in rows if r["seen"] is not None]))
    print("| every node's live certificate under B | %s | | | %d |" % ("%.2f" % t_all if t_all else "-", NODES))
    print("\n%d bcd daemons at --status-interval %d s (OCSP only: no Workload API); %d certificates revoked by the "
          "marking; %d node-chain.pem under B; load after: %s"
          % (NODES, INTERVAL, revoked, under_b, " ".join(open("/proc/loadavg").read().split()[:3])))


if __name__ == "__main__":
    bctest.run(agentlib.Env(), setup_gateway, stopping(run))
