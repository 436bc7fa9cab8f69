#!/usr/bin/python3
"""ssh-sessions.py: what an SSH user certificate costs a session (issue 47, D2).

bc_join.issue_session called directly (no gateway, no bcd: the service's own
cost) by C client threads, one connection each (warmed up first, untimed),
over N requests per mode made before each block's clock starts (a new P-256
key and CSR each, the node key's proof, for one of 16 session identities
per mode, reserved by the warm-up: so the node's session bound, whose count
grows with every new identity, stays out of the comparison): once with
proofs without "sshUser", once with "sshUser": true and a pool rule that
gives principals, so that every session credential also gets an OpenSSH
user certificate (one more ECDSA signature by ssh-user-ca.key, the rule's
principals, an ssh_certs row and its hash-chained audit row).  The modes
alternate in four blocks each.  Prints one JSON line per mode: {"mode",
"clients", "n", "failed", "per_s"}.

  ssh-sessions.py [--clients C] [--requests N]
Runs on the cluster the PG* environment names (its own database
bcj_bench_ssh, dropped first), with the key directory of that cluster.
"""
import argparse
import hashlib
import importlib.machinery
import json
import os
import sys
import threading
import time

import psycopg2

HERE = os.path.dirname(os.path.abspath(__file__))
fz = importlib.machinery.SourceFileLoader("sql_fuzz", os.path.join(HERE, "..", "test", "tap", "sql_fuzz.t")).load_module()
DB = "bcj_bench_ssh"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--requests", type=int, default=1000)
    a = ap.parse_args()
    admin = psycopg2.connect(dbname="postgres")
    admin.autocommit = True
    admin.cursor().execute("DROP DATABASE IF EXISTS " + DB)
    admin.cursor().execute("CREATE DATABASE " + DB)
    # the per-node bounds lifted, as bench/sections/sessions.sh does
    admin.cursor().execute("ALTER DATABASE %s SET bc_join.new_sessions_per_minute = 1000000" % DB)
    admin.cursor().execute("ALTER DATABASE %s SET bc_join.sessions_per_node = 1000000" % DB)
    db = psycopg2.connect(dbname=DB)
    db.autocommit = True
    db.cursor().execute("CREATE EXTENSION bc_join")
    w = fz.World(db)
    w.one("SELECT bc_join.allow_ssh_names(%s, 'user', ARRAY['deploy', 's*'])", (w.tenant,))
    w.one("SELECT bc_join.set_ssh_settings(%s, user_principals => ARRAY['deploy', '{session}'])", (w.pool,))

    # The modes alternate in blocks, so that both meet the same number of
    # sessions already held by the node (the bound's count reads them).
    walls = {"plain": 0.0, "ssh": 0.0}
    failed = {"plain": 0, "ssh": 0}
    block = max(1, a.requests // 4)
    lock = threading.Lock()
    conns = []
    for _ in range(a.clients):
        c = psycopg2.connect(dbname=DB)
        c.autocommit = True
        conns.append(c)
    for rnd in range(-1, 4):    # round -1 warms each connection up (plans, keys), untimed
        for mode in ("plain", "ssh"):
            reqs = []
            for i in range(block if rnd >= 0 else 16):
                _, der = fz.new_csr()
                p = {"purpose": "session", "serial": w.serial, "iat": int(time.time()),
                     "csrSha256": fz.b64u(hashlib.sha256(der).digest()),
                     "session": "s%s%d" % (mode[0], i % 16)}
                if mode == "ssh":
                    p["sshUser"] = True
                reqs.append(json.dumps({"csr": fz.b64u(der), "proof": fz.jws_es256(w.node_key, p)}))

            def client(part, c, mode=mode):
                cur = c.cursor()
                bad = 0
                for r in part:
                    cur.execute("SELECT bc_join.issue_session(%s::jsonb)::text", (r,))
                    ans = json.loads(cur.fetchone()[0])
                    pl = json.loads(fz.b64u_dec(ans["response"].split(".")[1])) if "response" in ans else {}
                    if ans.get("status") != "issued" or (mode == "ssh") != ("sshCertificate" in pl):
                        bad += 1
                with lock:
                    failed[mode] += bad

            parts = [reqs[i::a.clients] for i in range(a.clients)]
            threads = [threading.Thread(target=client, args=(p, conns[i])) for i, p in enumerate(parts)]
            t0 = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if rnd >= 0:
                walls[mode] += time.monotonic() - t0
    for mode in ("plain", "ssh"):
        print(json.dumps({"mode": mode, "clients": a.clients, "n": 4 * block, "failed": failed[mode],
                          "per_s": round(4 * block / walls[mode], 1)}), flush=True)
    for c in conns:
        c.close()
    db.close()
    admin.cursor().execute("DROP DATABASE " + DB)
    return 0


if __name__ == "__main__":
    sys.exit(main())
