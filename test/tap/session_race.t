#!/usr/bin/python3
"""session_race.t: two first requests for one new session identity at once.

Transaction A makes the first request of a session (issue_session or
issue_jwt_svid) and stays open; B makes a request for the same node, session
and context, and waits on A's reserved row (bc_join.sessions); A commits.
Under READ COMMITTED B is issued with A's session id (it read the row again in
a new snapshot: src/ext/session.c, bc_reserve_session), never an internal
error "session ... vanished while reserving it".  Under REPEATABLE READ B
gets a serialization failure (40001), which a client retries.
Needs the environment test/run-all sets (PGHOST, PGPORT, BCJ_*)."""
import hashlib
import importlib.machinery
import json
import os
import sys
import threading
import time

import psycopg2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import bctest  # noqa: E402

fz = importlib.machinery.SourceFileLoader(
    "sql_fuzz", os.path.join(os.path.dirname(os.path.abspath(__file__)), "sql_fuzz.t")).load_module()

tap = bctest.Tap()
ok, eq = tap.ok, tap.eq
sdb = bctest.SharedDb("session_race")
w = fz.World(sdb.db)


def request(purpose, session_ref):
    """(SQL function, request) of a session credential or a JWT-SVID, proven by the node key."""
    p = {"purpose": purpose, "serial": w.serial, "iat": int(time.time()),
         "session": session_ref, "context": "ctx"}
    if purpose == "jwt-svid":
        p["audience"] = ["race.example"]
        return "issue_jwt_svid", {"proof": fz.jws_es256(w.node_key, p)}
    _, der = fz.new_csr()
    p["csrSha256"] = fz.b64u(hashlib.sha256(der).digest())
    return "issue_session", {"csr": fz.b64u(der), "proof": fz.jws_es256(w.node_key, p)}


def call(cur, fn_req):
    """The session id of an issued answer, else the answer; ('error', SQLSTATE, message) on an error."""
    fn, req = fn_req
    try:
        cur.execute("SELECT bc_join.%s(%%s::jsonb)::text" % fn, (json.dumps(req),))
    except psycopg2.Error as e:
        return ("error", e.pgcode, str(e).strip())
    r = json.loads(cur.fetchone()[0])
    if r.get("status") != "issued":
        return r
    return json.loads(fz.b64u_dec(r["response"].split(".")[1]))["sessionId"]


def race(first, second, session_ref, isolation="READ COMMITTED"):
    """A makes `first` and holds its transaction; B makes `second` and waits on A's
    row; A commits.  (A's answer, B's answer)."""
    a = psycopg2.connect(dbname=sdb.dbname)
    b = psycopg2.connect(dbname=sdb.dbname)
    b.set_session(isolation_level=isolation)
    bcur = b.cursor()
    bcur.execute("SELECT pg_backend_pid()")    # B's transaction (and, under RR, its snapshot) begins before A's row
    b_pid = bcur.fetchone()[0]
    got_a = call(a.cursor(), request(first, session_ref))
    got_b = []
    t = threading.Thread(target=lambda: got_b.append(call(bcur, request(second, session_ref))))
    t.start()
    waiting = False
    for _ in range(200):
        # waiting for A's transaction, inside the insert into bc_join.sessions
        waiting = sdb.one("SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock' "
                          "AND wait_event = 'transactionid' AND EXISTS (SELECT 1 FROM pg_locks "
                          "WHERE pid = %s AND relation = 'bc_join.sessions'::regclass AND mode = 'RowExclusiveLock')",
                          b_pid, b_pid) == 1
        if waiting or not t.is_alive():
            break
        time.sleep(0.05)
    ok(waiting, "%s/%s (%s): B waits on A's uncommitted session row" % (first, second, isolation))
    a.commit()
    t.join(30)
    b.rollback() if got_b and isinstance(got_b[0], tuple) else b.commit()
    a.close()
    b.close()
    return got_a, (got_b[0] if got_b else None)


# The node was seen just now (bc_node_seen writes its row at most once a minute):
# B then waits on A nowhere before the insert of the session row.
ok(isinstance(call(sdb.cur, request("session", "warm-up")), str), "a first session marks the node seen")

for first, second, ref in (("session", "session", "race-s"), ("jwt-svid", "jwt-svid", "race-j"),
                           ("session", "jwt-svid", "race-m")):
    ga, gb = race(first, second, ref)
    ok(isinstance(ga, str) and ga.startswith("ses"), "%s: A is issued a new session" % ref, ga)
    eq(gb, ga, "%s: B, once A committed, is issued the same session id (no internal error)" % ref)
    eq(sdb.one("SELECT count(*) FROM bc_join.sessions WHERE session_ref = %s", ref), 1,
       "%s: one session identity reserved" % ref)

ga, gb = race("session", "session", "race-rr", "REPEATABLE READ")
ok(isinstance(ga, str), "race-rr: A is issued", ga)
eq(gb[:2] if isinstance(gb, tuple) else gb, ("error", "40001"),
   "race-rr: B under REPEATABLE READ gets a serialization failure (40001), not an internal error", gb)
got = call(sdb.cur, request("session", "race-rr"))
eq(got, ga, "race-rr: B's retry is issued A's session id")

sdb.db.close()
sdb.admin.cursor().execute("DROP DATABASE bcj_session_race WITH (FORCE)")
sys.exit(tap.done())
