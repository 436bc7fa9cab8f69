#!/usr/bin/python3
"""crash_safety.t: joins, renewals and session requests run concurrently
while backends, and once the postmaster itself, are killed with SIGKILL
(docs/security.md, "Crash safety").

Its own cluster (bctest.ClusterEnv: the postmaster restarts every backend
after a SIGKILL, which would disturb the suites sharing test/run-all's).
Four clients join, renew their own node and ask for session credentials
(bc_join.issue_session) in a loop for BCJ_CRASH_SECONDS (default 20); a
killer sends SIGKILL to a random client backend of pg_stat_activity every
0.2 to 0.8 s, and once, half way, to the postmaster, then starts the
cluster again (crash recovery from the WAL); clients reconnect and carry on
(a renewal whose answer was lost is settled by looking at which key the
live certificate certifies).  Afterwards, on the recovered cluster: the
consistency invariants of sql_fuzz.t, every renewed certificate's
predecessor revoked, and the session invariants (no session without its
certificate and its session.provisioned event, every session certificate
asked with a certificate of its own node).
"""
import hashlib
import importlib.machinery
import json
import os
import random
import signal
import sys
import threading
import time

import psycopg2
from cryptography.hazmat.primitives import serialization

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from bctest import ClusterEnv, run  # noqa: E402

fz = importlib.machinery.SourceFileLoader(
    "sql_fuzz", os.path.join(os.path.dirname(os.path.abspath(__file__)), "sql_fuzz.t")).load_module()

SECONDS = float(os.environ.get("BCJ_CRASH_SECONDS", "20"))
DB = "bcj_crash"


def spki_sha(key):
    return hashlib.sha256(key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)).hexdigest()


def lost(conn, e):
    """Whether e is the connection going away (a killed backend, the restart)."""
    return conn.closed or e.pgcode is None or e.pgcode.startswith(("57P", "08"))


def reconnect(deadline):
    """A connection, retried while the server restarts."""
    while True:
        try:
            return fz.connect(DB)
        except psycopg2.OperationalError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)


class Client(threading.Thread):
    def __init__(self, world, until):
        super().__init__(daemon=True)
        self.w = world
        self.until = until
        self.conn = reconnect(until + 60)
        self.counts = {"joined": 0, "renewed": 0, "sessions": 0, "lost": 0, "other": 0}
        self.errors = []
        self.node_id = None
        self.node_key = None
        self.issued = []    # (table, serial) of every answer "issued" seen

    def call(self, fn, doc):
        with self.conn.cursor() as cur:
            cur.execute("SELECT %s(%%s::jsonb)::text" % fn, (json.dumps(doc),))
            r = json.loads(cur.fetchone()[0])
        if r.get("status") == "issued":
            serial = json.loads(fz.b64u_dec(r["response"].split(".")[1]))["serial"]
            self.issued.append(("session_certs" if fn == "bc_join.issue_session" else "node_certs", serial))
        return r

    def one(self, sql, args=()):
        with self.conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchone()

    def settle(self, new_key):
        """After a lost renewal: take the new key if its certificate is the live one."""
        row = self.one("SELECT encode(spki_sha256::bytea, 'hex') FROM bc_join.node_certs "
                       "WHERE node_id = %s AND revoked_at IS NULL ORDER BY issued_at DESC LIMIT 1",
                       (self.node_id,))
        if row is not None and row[0] == spki_sha(new_key):
            self.node_key = new_key

    def run(self):
        w = self.w
        while time.time() < self.until:
            new_key = None
            try:
                if self.node_id is None or random.random() < 0.4:
                    key, der = fz.new_csr()
                    r = self.call("public.bc_join", w.join_doc(key, der))
                    if r.get("status") == "issued":
                        self.counts["joined"] += 1
                        if self.node_id is None:
                            self.node_id = json.loads(fz.b64u_dec(r["response"].split(".")[1]))["nodeId"]
                            self.node_key = key
                    else:
                        self.counts["other"] += 1
                elif random.random() < 0.5:
                    serial = self.live_serial()
                    doc = self.proof(serial, "session")[0]
                    r = self.call("bc_join.issue_session", doc)
                    if r.get("status") == "issued":
                        self.counts["sessions"] += 1
                    else:
                        self.counts["other"] += 1
                        self.errors.append("issue_session answered %s" % json.dumps(r)[:200])
                else:
                    serial = self.one("SELECT serial FROM bc_join.node_certs WHERE node_id = %s "
                                      "AND revoked_at IS NULL ORDER BY issued_at DESC LIMIT 1",
                                      (self.node_id,))[0]
                    doc, new_key = self.proof(serial)
                    r = self.call("bc_join.renew", doc)
                    if r.get("status") == "issued":
                        self.counts["renewed"] += 1
                        self.node_key = new_key
                    else:
                        self.counts["other"] += 1
                        self.errors.append("renew answered %s" % json.dumps(r)[:200])
            except psycopg2.Error as e:
                if not lost(self.conn, e):
                    self.errors.append("%s: %s" % (e.pgcode, str(e)[:200]))
                    self.counts["other"] += 1
                    continue
                self.counts["lost"] += 1
                self.conn = reconnect(time.time() + 60)
                if new_key is not None:
                    self.settle(new_key)

    def live_serial(self):
        return self.one("SELECT serial FROM bc_join.node_certs WHERE node_id = %s "
                        "AND revoked_at IS NULL ORDER BY issued_at DESC LIMIT 1", (self.node_id,))[0]

    def proof(self, serial, purpose="renew"):
        key, der = fz.new_csr()
        p = {"purpose": purpose, "serial": serial,
             "csrSha256": fz.b64u(hashlib.sha256(der).digest()), "iat": int(time.time())}
        if purpose == "session":
            p["session"] = "s%d" % random.randrange(20)
            p["context"] = random.choice(["a", "b"])
        return {"csr": fz.b64u(der), "proof": fz.jws_es256(self.node_key, p)}, key


def kill_postmaster(tap, env):
    """SIGKILL the postmaster, wait for its orphaned backends to go, start the
    cluster again (crash recovery); True once it accepts connections."""
    with open(os.path.join(env.pg, "data", "postmaster.pid")) as f:
        pm = int(f.readline())
    kids = [p for p in os.listdir("/proc") if p.isdigit() and _ppid(p) == pm]
    os.kill(pm, signal.SIGKILL)
    tap.note("SIGKILL to the postmaster (pid %d, %d children left orphaned)" % (pm, len(kids)))
    deadline = time.time() + 30
    while time.time() < deadline and any(os.path.exists("/proc/" + p) for p in kids + [str(pm)]):
        time.sleep(0.1)
    try:
        env.pg_start()
    except RuntimeError as e:
        tap.note(str(e))
        return False
    return True


def _ppid(pid):
    try:
        with open("/proc/%s/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def setup(env):
    env.start_cluster("crash")
    os.environ.update(env.pgenv)
    os.environ["PGDATABASE"] = env.db


def body(tap, env):
    conn = fz.connect(DB)
    w = fz.World(conn)
    conn.close()
    until = time.time() + SECONDS
    clients = [Client(w, until) for _ in range(4)]
    for c in clients:
        c.start()
    kills = 0
    killer = reconnect(until + 60)
    postmaster_at = time.time() + SECONDS / 2
    postmaster_killed = restarted = False
    while time.time() < until:
        time.sleep(random.uniform(0.2, 0.8))
        if not postmaster_killed and time.time() >= postmaster_at:
            postmaster_killed = True
            restarted = kill_postmaster(tap, env)
            killer = reconnect(time.time() + 60)
            continue
        try:
            with killer.cursor() as cur:
                cur.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s AND "
                            "backend_type = 'client backend' AND pid <> pg_backend_pid()", (DB,))
                pids = [r[0] for r in cur.fetchall()]
            if pids:
                os.kill(random.choice(pids), signal.SIGKILL)
                kills += 1
        except psycopg2.Error as e:
            if not lost(killer, e):
                raise
            killer = reconnect(time.time() + 60)
        except ProcessLookupError:
            pass
    for c in clients:
        c.join(120)
    tap.ok(postmaster_killed and restarted, "the postmaster was killed and the cluster recovered")
    with open(os.path.join(env.pg, "server.log"), errors="replace") as f:
        log = f.read()
    tap.ok("not properly shut down; automatic recovery in progress" in log and "redo done" in log,
           "the restart replayed the WAL (crash recovery)", log[-2000:])
    counts = {}
    for c in clients:
        for k, v in c.counts.items():
            counts[k] = counts.get(k, 0) + v
    tap.note("%d SIGKILLs; clients: %s" % (kills, ", ".join("%s %d" % kv for kv in sorted(counts.items()))))
    tap.ok(kills > 0 and counts["lost"] > 0, "backends were killed and clients lost connections")
    tap.ok(counts["joined"] > 0 and counts["renewed"] > 0 and counts["sessions"] > 0,
           "joins, renewals and session credentials were issued meanwhile")
    errs = [e for c in clients for e in c.errors]
    tap.ok(not errs, "no client saw an answer other than issued or a lost connection", "\n".join(errs[:10]))
    alive = [c for c in clients if c.is_alive()]
    if alive:
        tap.note("%d client(s) still running after 120 s" % len(alive))
    issued = [i for c in clients for i in c.issued]
    checks = fz.invariants() + [
            ("every renewed certificate's predecessor is revoked",
             "SELECT count(*) FROM bc_join.node_certs o WHERE o.revoked_at IS NULL AND EXISTS "
             "(SELECT 1 FROM bc_join.node_certs n WHERE n.node_id = o.node_id AND n.issued_at > o.issued_at)"),
            ("no session without a certificate",
             "SELECT count(*) FROM bc_join.sessions s WHERE NOT EXISTS "
             "(SELECT 1 FROM bc_join.session_certs c WHERE c.session_id = s.id)"),
            ("every session has exactly one session.provisioned event",
             "SELECT count(*) FROM bc_join.sessions s WHERE (SELECT count(*) FROM bc_join.events e "
             "WHERE e.type = 'session.provisioned' AND e.payload->>'sessionId' = s.id) <> 1"),
            ("every session certificate was asked with a certificate of its own node",
             "SELECT count(*) FROM bc_join.session_certs c JOIN bc_join.sessions s ON s.id = c.session_id "
             "WHERE NOT EXISTS (SELECT 1 FROM bc_join.node_certs n WHERE n.serial = c.node_serial "
             "AND n.node_id = s.node_id)")]

    def measure():
        """Every check's value, on a fresh connection (the recovered cluster
        may still be finishing its restart: a lost connection is retried)."""
        check = reconnect(time.time() + 60)
        try:
            w.conn = check
            missing = [i for i in issued
                       if w.one("SELECT count(*) FROM bc_join.%s WHERE serial = %%s" % i[0], (i[1],)) != 1]
            return missing, [w.one(sql) for _, sql in checks]
        finally:
            check.close()

    deadline = time.time() + 60
    while True:
        try:
            missing, values = measure()
            break
        except (psycopg2.OperationalError, psycopg2.InterfaceError) as e:
            if time.time() > deadline:
                raise
            tap.note("checking the recovered database: %s; again" % str(e).strip()[:200])
            time.sleep(0.5)
    tap.ok(issued and not missing, "every one of the %d answers issued is in the recovered database "
           "(a commit acknowledged before the crash is kept)" % len(issued), missing[:5])
    for (name, _), value in zip(checks, values):
        tap.eq(value, 0, name)


if __name__ == "__main__":
    run(ClusterEnv("bcj-crash.", DB, "crash.bc-join.local"), setup, body)
