#!/usr/bin/python3
"""token_wipe.t: the join token a round opened leaves no trace in the backend,
however the round ends.

A sealed join token is opened inside the join's round (src/ext/join.c); its
plaintext lives in the backend only as the request's token, which the one
subtransaction runner (src/ext/round.c) wipes wherever a round ends: an
answer, a refusal, and an error that fails the join (here lock_timeout,
55P03, while another session holds the token's row), in a first round and in
a repeat (the same request again, src/ext/join.c's repeat). After each, the
backend's private writable memory (/proc/PID/mem, read as root) is searched
for the token's secret; a value the backend holds on purpose is found there
first, so the search is shown to see that memory.
Needs the environment test/run-all sets (PGHOST, PGPORT, BCJ_*) and root."""
import os, re, secrets, subprocess, sys
import psycopg2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import bctest
tap = bctest.Tap()
ok, eq = tap.ok, tap.eq

if os.geteuid() != 0:
    print("1..0 # SKIP reading a backend's memory needs root")
    sys.exit(0)

bcd, keys = os.environ["BCJ_BCD"], os.environ["BCJ_SERVICE_KEYS"]
sdb = bctest.SharedDb("token_wipe")
scratch, one = sdb.scratch, sdb.one
t, s, p = sdb.tenant("wipe")


def request(token, d):
    return subprocess.run([bcd, "join-request", "--service-keys", keys, "--token", token,
                           "--out-dir", os.path.join(scratch, d)],
                          capture_output=True, text=True, check=True).stdout


def private_memory_has(pid, needle):
    """True when needle is in one of pid's private writable mappings."""
    with open("/proc/%d/maps" % pid) as maps, open("/proc/%d/mem" % pid, "rb", 0) as mem:
        for line in maps:
            m = re.match(r"([0-9a-f]+)-([0-9a-f]+) rw-p ", line)
            if not m:
                continue
            lo, hi = int(m.group(1), 16), int(m.group(2), 16)
            try:
                mem.seek(lo)
                if needle in mem.read(hi - lo):
                    return True
            except OSError:
                continue
    return False


def backend():
    """A session of its own (a fresh backend), with its pid."""
    conn = psycopg2.connect(dbname=sdb.dbname)
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("SELECT pg_backend_pid()")
    return conn, cur, cur.fetchone()[0]


def join_while_locked(cur, req, token):
    """bc_join(req) while another session holds the token's row: the error."""
    holder = psycopg2.connect(dbname=sdb.dbname)
    hc = holder.cursor()
    hc.execute("SELECT 1 FROM bc_join.join_tokens WHERE id = split_part(%s, '.', 1) FOR UPDATE", (token,))
    try:
        cur.execute("SET lock_timeout = '200ms'")
        cur.execute("SELECT bc_join(%s::jsonb)", (req,))
        return "answered: %s" % cur.fetchone()[0]
    except psycopg2.Error as e:
        return e.pgcode
    finally:
        holder.rollback()
        holder.close()


def secret(token):
    return token.rsplit(".", 1)[1].encode()


# The search sees the backend's memory: a value the backend holds is found.
conn, cur, pid = backend()
marker = "bcjmarker" + secrets.token_hex(16)
cur.execute("SELECT set_config('bcj.marker', %s, false)", (marker,))
ok(private_memory_has(pid, marker.encode()), "a value the backend holds is found in its memory")
ok(not private_memory_has(pid, ("bcjmarker" + secrets.token_hex(16)).encode()),
   "and one it never saw is not")
conn.close()

# An answer: the join is issued.
tok = one("SELECT bc_join.create_join_token(%s, %s, uses => 5)", t, p)
req = request(tok, "m1")
conn, cur, pid = backend()
cur.execute("SELECT bc_join(%s::jsonb)", (req,))
eq(cur.fetchone()[0]["status"], "issued", "a join is issued")
ok(not private_memory_has(pid, secret(tok)), "the token's secret is not in the backend's memory after it")

# A repeat answered: the same request again.
cur.execute("SELECT bc_join(%s::jsonb)", (req,))
eq(cur.fetchone()[0]["status"], "issued", "the same request again is answered with the certificate (a repeat)")
ok(not private_memory_has(pid, secret(tok)), "the token's secret is not in the backend's memory after the repeat")
conn.close()

# A repeat that fails: the token's row is held by another session.
conn, cur, pid = backend()
eq(join_while_locked(cur, req, tok), "55P03", "a repeat that cannot lock the token fails the join (55P03)")
ok(not private_memory_has(pid, secret(tok)), "the token's secret is not in the backend's memory after the repeat failed")
conn.close()

# A refusal: the token is revoked.
tok = one("SELECT bc_join.create_join_token(%s, %s)", t, p)
req = request(tok, "m2")
one("SELECT bc_join.revoke_join_token(split_part(%s, '.', 1))", tok)
conn, cur, pid = backend()
cur.execute("SELECT bc_join(%s::jsonb)", (req,))
eq(cur.fetchone()[0]["status"], "refused", "a join with a revoked token is refused")
ok(not private_memory_has(pid, secret(tok)), "the token's secret is not in the backend's memory after the refusal")
conn.close()

# An error: the token's row is held by another session.
tok = one("SELECT bc_join.create_join_token(%s, %s)", t, p)
req = request(tok, "m3")
conn, cur, pid = backend()
eq(join_while_locked(cur, req, tok), "55P03", "a join that cannot lock its token fails (55P03)")
ok(not private_memory_has(pid, secret(tok)), "the token's secret is not in the backend's memory after the join failed")
cur.execute("SELECT bc_join(%s::jsonb)", (req,))
eq(cur.fetchone()[0]["status"], "issued", "the same session joins with it once the row is free")
conn.close()

sys.exit(tap.done())
