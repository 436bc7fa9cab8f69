#!/usr/bin/python3
"""lock_isolation.t: a role that can only log in cannot stall or slow joins.

The issuance log's chains and the per-key join lock were advisory locks,
whose keyspace every role of the cluster shares: `SELECT
pg_advisory_lock(1650680370, c) FROM generate_series(0, 15) c` by any login
role stopped every join.  They are lock tags no SQL function makes now
(src/ext/locks.c: field4 = 3, where pg_advisory_* make 1 and 2).  Here a
role with LOGIN and nothing else holds every advisory key the old code used
(the 16 chain keys, and the key lock of the very CSR it joins with), and
every key SQL can make from the new tags' numbers; meanwhile joins run under
lock_timeout 2 s and statement_timeout 5 s, and a join's time is compared
with one made while nothing is held.
Needs the environment test/run-all sets (PGHOST, PGPORT, BCJ_*)."""
import base64, json, os, struct, subprocess, sys, time
import psycopg2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import bctest
tap = bctest.Tap()
ok, eq = tap.ok, tap.eq

bcd, keys = os.environ["BCJ_BCD"], os.environ["BCJ_SERVICE_KEYS"]
sdb = bctest.SharedDb("lock_isolation")
scratch, admin, db, c, one = sdb.scratch, sdb.admin, sdb.db, sdb.cur, sdb.one
t, s, p = sdb.tenant("locks")
admin.cursor().execute("DROP ROLE IF EXISTS bcj_nobody")
admin.cursor().execute("CREATE ROLE bcj_nobody LOGIN")


def request(token, d):
    return subprocess.run([bcd, "join-request", "--service-keys", keys, "--token", token,
                           "--out-dir", os.path.join(scratch, d)],
                          capture_output=True, text=True, check=True).stdout


def join(cur, req):
    cur.execute("SELECT bc_join(%s::jsonb)", (req,))
    return cur.fetchone()[0]


def timed_join(cur, name):
    tok = one("SELECT bc_join.create_join_token(%s, %s)", t, p)
    req = request(tok, name)
    t0 = time.monotonic()
    try:
        r = join(cur, req)
    except psycopg2.Error as e:
        return ("error: " + str(e).strip(), time.monotonic() - t0)
    return (r["status"], time.monotonic() - t0)


svc = psycopg2.connect(dbname=sdb.dbname)
svc.autocommit = True
sc = svc.cursor()
sc.execute("SET lock_timeout = '2s'")
sc.execute("SET statement_timeout = '5s'")
base = [timed_join(sc, "base%d" % i) for i in range(3)]
ok(all(st == "issued" for st, _ in base), "joins are issued while nothing is held", base)

# The attacker: LOGIN and nothing else.
evil = psycopg2.connect(dbname=sdb.dbname, user="bcj_nobody")
evil.autocommit = False
ec = evil.cursor()
ec.execute("SELECT count(*) FROM (SELECT pg_advisory_lock(1650680370, c) FROM generate_series(0, 15) c) x")
ok(ec.fetchone()[0] == 16, "the role without grants holds the 16 advisory keys the chains used")
# ... and the old per-key lock of the CSR the next join sends.
tok = one("SELECT bc_join.create_join_token(%s, %s)", t, p)
req = request(tok, "target")
spki = subprocess.run(["openssl", "req", "-inform", "DER", "-in", os.path.join(scratch, "target", "node.csr.der"),
                       "-noout", "-pubkey"], capture_output=True, check=True).stdout
der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "DER"], input=spki,
                     capture_output=True, check=True).stdout
import hashlib
k = struct.unpack("=i", hashlib.sha256(der).digest()[:4])[0]
ec.execute("SELECT pg_advisory_lock(1650680369, %s)", (k,))
ok(True, "and the advisory key the old per-key lock of that CSR used")

# ... and the same numbers as the extension's own lock tags (src/ext/locks.c:
# classid "bjac" for a chain, "bjkl" for a key), as far as SQL can name them.
ec.execute("SELECT count(*) FROM (SELECT pg_advisory_lock(1651138915, c) FROM generate_series(0, 15) c) x")
ec.fetchone()
ec.execute("SELECT pg_advisory_lock(1651141484, %s)", (k,))
ok(True, "and every key SQL can make with the numbers of the extension's own lock tags")
ec.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 3 AND pid = pg_backend_pid()")
eq(ec.fetchone()[0], 0, "none of them is one of the extension's locks (objsubid 3: no SQL function makes it)")

held = [timed_join(sc, "held%d" % i) for i in range(3)]
ok(all(st == "issued" for st, _ in held), "joins are issued while it holds them all (lock_timeout 2 s)", held)
r = None
t0 = time.monotonic()
try:
    r = join(sc, req)["status"]
except psycopg2.Error as e:
    r = "error: " + str(e)
eq(r, "issued", "the join of the very CSR whose old key lock it holds is issued")
slow = max(d for _, d in held)
fast = max(d for _, d in base)
ok(slow < max(1.0, 10 * fast), "and none waited: the slowest took %.3f s (%.3f s with nothing held)" % (slow, fast))

# The audit trail under the same locks.
ok(one("SELECT count(*) FROM bc_join.audit_log WHERE action = 'node.join'") >= 7,
   "their audit rows were appended", one("SELECT count(*) FROM bc_join.audit_log"))
ok(one("SELECT bc_join.verify_audit_log()"), "and the chains hold")
ec.execute("SELECT pg_advisory_unlock_all()")
evil.rollback()
evil.close()
svc.close()
db.close()
admin.cursor().execute("DROP DATABASE bcj_lock_isolation WITH (FORCE)")
admin.cursor().execute("DROP ROLE bcj_nobody")
sys.exit(tap.done())
