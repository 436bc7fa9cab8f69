#!/usr/bin/python3
"""registry_flood.t: a stranger naming attestor ids nobody registered cannot
crash, hang or bloat a backend.

One session drives 100,000 bc_join() calls, each naming an id never
registered, while a second session runs ANALYZE and DDL on an unrelated
table in a loop (each sends relcache invalidations, which used to free the
registry cache under a running lookup).  Afterwards: no backend terminated
by a signal in the server log, the calling backend's private memory did not
grow with the ids, and a cancel request ends a call that is busy doing this.
Needs the environment test/run-all sets (PGHOST, PGPORT, BCJ_*)."""
import json, os, subprocess, sys, threading, time
import psycopg2

N_CALLS = 100_000
BATCH = 10_000
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import bctest
tap = bctest.Tap()
ok = tap.ok


# A watchdog: a backend spinning in a cyclic cache list ignores every cancel,
# so a broken build must fail this script, not hang the run.
def watchdog():
    time.sleep(240)
    print("not ok - the flood did not finish in 240 s (a backend spins?)", flush=True)
    os._exit(1)
threading.Thread(target=watchdog, daemon=True).start()
log_path = os.environ.get("BCJ_SERVER_LOG")
log_start = os.path.getsize(log_path) if log_path and os.path.exists(log_path) else 0
scratch = os.path.join(os.environ["BCJ_SCRATCH"], "registry_flood")
subprocess.run(["rm", "-rf", scratch], check=True)
os.makedirs(scratch)
admin = psycopg2.connect(dbname="postgres")
admin.autocommit = True
admin.cursor().execute("DROP DATABASE IF EXISTS bcj_flood")
admin.cursor().execute("CREATE DATABASE bcj_flood")

a = psycopg2.connect(dbname="bcj_flood")
a.autocommit = True
ca = a.cursor()
ca.execute("CREATE EXTENSION bc_join")
ca.execute("SELECT bc_join.create_tenant('f')"); t = ca.fetchone()[0]
ca.execute("SELECT bc_join.create_site(%s, 's')", (t,)); s = ca.fetchone()[0]
ca.execute("SELECT bc_join.create_pool(%s, %s, 'p')", (t, s)); p = ca.fetchone()[0]
ca.execute("SELECT bc_join.create_join_token(%s, %s)", (t, p)); tok = ca.fetchone()[0]
req = subprocess.run([os.environ["BCJ_BCD"], "join-request", "--service-keys",
                      os.environ["BCJ_SERVICE_KEYS"], "--token", tok, "--out-dir",
                      os.path.join(scratch, "m")], capture_output=True, text=True, check=True).stdout
# A registered attestor too, so the cache has something to keep and rebuild.
ca.execute("""CREATE FUNCTION public.flood_verify(evidence jsonb, context jsonb) RETURNS jsonb
              LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
              AS $$ BEGIN PERFORM bc_join.refuse('flood:no'); RETURN NULL; END $$""")
ca.execute("SELECT bc_join.register_attestor('flood', '1', ARRAY['node'], 'public.flood_verify(jsonb,jsonb)')")
ca.execute("""CREATE FUNCTION public.flood(req jsonb, first integer, count integer) RETURNS integer
              LANGUAGE plpgsql AS $$
              DECLARE unsupported integer := 0;
              BEGIN
                FOR i IN first .. first + count - 1 LOOP
                  BEGIN
                    PERFORM bc_join(jsonb_set(req, '{attestor}', to_jsonb('nobody-' || i)));
                  EXCEPTION WHEN feature_not_supported THEN
                    unsupported := unsupported + 1;
                  END;
                END LOOP;
                RETURN unsupported;
              END $$""")
ca.execute("SELECT pg_backend_pid()"); pid = ca.fetchone()[0]

def private_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    return -1

# The second session: ANALYZE and DDL on an unrelated table, in a loop.
stop = threading.Event()
churn_rounds = [0]
churn_error = []
def churn():
    try:
        b = psycopg2.connect(dbname="bcj_flood")
        b.autocommit = True
        cb = b.cursor()
        while not stop.is_set():
            cb.execute("ANALYZE")
            cb.execute("CREATE TABLE IF NOT EXISTS public.unrelated (x int)")
            cb.execute("ALTER TABLE public.unrelated ADD COLUMN y int")
            cb.execute("DROP TABLE public.unrelated")
            cb.execute("ANALYZE bc_join.attestors")
            churn_rounds[0] += 1
        b.close()
    except Exception as e:
        churn_error.append(repr(e))
th = threading.Thread(target=churn, daemon=True)
th.start()

unsupported = 0
rss = []
error = None
t0 = time.time()
try:
    ca.execute("SET statement_timeout = '120s'")
    for first in range(0, N_CALLS, BATCH):
        ca.execute("SELECT public.flood(%s::jsonb, %s, %s)", (req, first, BATCH))
        unsupported += ca.fetchone()[0]
        rss.append(private_kb(pid))
        if first == 0:
            # a registered id still works while the cache churns
            ca.execute("SELECT bc_join(jsonb_set(%s::jsonb, '{attestor}', '\"flood\"'))->>'status'", (req,))
            registered_status = ca.fetchone()[0]
except Exception as e:
    error = repr(e)
elapsed = time.time() - t0
stop.set()
th.join(30)

ok(error is None and unsupported == N_CALLS,
   "%d unknown ids each answered UNSUPPORTED while another session churned (%d rounds)"
   % (N_CALLS, churn_rounds[0]),
   "error %s, %d UNSUPPORTED, %.1f s, churn %s" % (error, unsupported, elapsed, churn_error))
ok(error is None and registered_status == "refused",
   "the registered attestor is still found between the floods")
growth = (rss[-1] - rss[0]) if len(rss) >= 2 else None
ok(growth is not None and growth < 4096,
   "the backend's private memory stays bounded (%s kB grown from the first to the last 10,000)" % growth,
   "RssAnon per batch, kB: %s" % rss)

# A cancel request ends a call busy naming unknown ids.
c = psycopg2.connect(dbname="bcj_flood")
c.autocommit = True
cc = c.cursor()
cc.execute("SELECT pg_backend_pid()"); cpid = cc.fetchone()[0]
result = {}
def long_call():
    try:
        cc.execute("SET statement_timeout = '300s'")
        cc.execute("SELECT public.flood(%s::jsonb, 0, 100000000)", (req,))
        result["end"] = "returned"
    except psycopg2.errors.QueryCanceled:
        result["end"] = "canceled"
    except Exception as e:
        result["end"] = repr(e)
    result["at"] = time.time()
lt = threading.Thread(target=long_call, daemon=True)
lt.start()
time.sleep(1.5)
ca.execute("SELECT pg_cancel_backend(%s)", (cpid,))
sent = time.time()
lt.join(10)
ok(result.get("end") == "canceled" and result["at"] - sent < 5,
   "pg_cancel_backend ends a running call within 5 s", "got %s" % result)
if "end" not in result:
    ca.execute("SELECT pg_terminate_backend(%s)", (cpid,))

# The server log: no backend terminated by a signal, no restart.
log = ""
if log_path and os.path.exists(log_path):
    with open(log_path, errors="replace") as f:
        f.seek(log_start)
        log = f.read()
ok(log_path is not None and os.path.exists(log_path), "the server log is readable", "BCJ_SERVER_LOG=%s" % log_path)
bad = [l for l in log.splitlines() if "terminated by signal" in l or "was terminated" in l
       or "all server processes terminated" in l or "crash" in l.lower()]
ok(not bad, "no backend terminated by a signal during the flood", "\n".join(bad[:10]))
ca.execute("SELECT 1")
ok(ca.fetchone()[0] == 1, "the session that flooded still works")

for conn in (a, c):
    try: conn.close()
    except Exception: pass
try:
    admin.cursor().execute("DROP DATABASE bcj_flood WITH (FORCE)")
except Exception:
    pass
sys.exit(tap.done())
