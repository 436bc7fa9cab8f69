#!/usr/bin/python3
"""registry.t: a backend that already joined through the built-in join-token
sees, at its next transaction, a join-token attestor another session
registered and committed (and the built-in again once it is unregistered):
the per-backend cache of the registry never outlives a change.  A rebuild
that fails (a statement timeout while the registry is locked) keeps the
cache stale: an attestor unregistered meanwhile never runs again."""
import json, os, subprocess, sys
import psycopg2

n = 0
failed = 0
def ok(cond, name, detail=""):
    global n, failed
    n += 1
    print(("ok %d - %s" if cond else "not ok %d - %s") % (n, name))
    if not cond:
        failed += 1
        for line in str(detail).splitlines():
            print("#   " + line)

print("1..8")
scratch = os.path.join(os.environ["BCJ_SCRATCH"], "registry")
subprocess.run(["rm", "-rf", scratch], check=True)
os.makedirs(scratch)
admin = psycopg2.connect(dbname="postgres")
admin.autocommit = True
admin.cursor().execute("DROP DATABASE IF EXISTS bcj_registry")
admin.cursor().execute("CREATE DATABASE bcj_registry")
a = psycopg2.connect(dbname="bcj_registry")
a.autocommit = True
b = psycopg2.connect(dbname="bcj_registry")
b.autocommit = True
ca, cb = a.cursor(), b.cursor()
ca.execute("CREATE EXTENSION bc_join")
ca.execute("SELECT bc_join.create_tenant('r')"); t = ca.fetchone()[0]
ca.execute("SELECT bc_join.create_site(%s, 's')", (t,)); s = ca.fetchone()[0]
ca.execute("SELECT bc_join.create_pool(%s, %s, 'p')", (t, s)); p = ca.fetchone()[0]
ca.execute("SELECT bc_join.create_join_token(%s, %s, uses => 10)", (t, p)); tok = ca.fetchone()[0]

def request(name):
    out = subprocess.run([os.environ["BCJ_BCD"], "join-request", "--service-keys",
                          os.environ["BCJ_SERVICE_KEYS"], "--token", tok, "--out-dir",
                          os.path.join(scratch, name)], capture_output=True, text=True, check=True)
    return out.stdout

def join(cur, name):
    cur.execute("SELECT bc_join(%s::jsonb)->>'status'", (request(name),))
    return cur.fetchone()[0]

ok(join(ca, "m1") == "issued", "session A joins through the built-in join-token")
cb.execute("""CREATE FUNCTION public.closed_verify(evidence jsonb, context jsonb) RETURNS jsonb
              LANGUAGE plpgsql SET search_path = public, pg_catalog, pg_temp AS $$ BEGIN PERFORM bc_join.refuse('join-token:closed'); RETURN NULL; END $$""")
cb.execute("SELECT bc_join.register_attestor('join-token', '2', ARRAY['node'], 'public.closed_verify(jsonb,jsonb)')")
ok(join(ca, "m2") == "refused", "after session B registers a join-token of its own, session A uses it")
ca.execute("SELECT payload->>'refusal' FROM bc_join.events WHERE type = 'security.join.refused' ORDER BY id DESC LIMIT 1")
ok(ca.fetchone()[0] == "join-token:closed", "refused by the registered attestor")
cb.execute("SELECT bc_join.unregister_attestor('join-token')")
ok(join(ca, "m3") == "issued", "once B unregisters it, A is back on the built-in")

# A failed rebuild keeps nothing: A caches a registered attestor, B
# unregisters it, A's next lookup times out while B holds the registry
# locked; afterwards the attestor must be unknown to A (0A000), not run.
cb.execute("""CREATE FUNCTION public.gone_verify(evidence jsonb, context jsonb) RETURNS jsonb
              LANGUAGE plpgsql SET search_path = public, pg_catalog, pg_temp AS $$ BEGIN PERFORM bc_join.refuse('x-gone:ran'); RETURN NULL; END $$""")
cb.execute("SELECT bc_join.register_attestor('x-gone', '1', ARRAY['node'], 'public.gone_verify(jsonb,jsonb)')")

def join_gone(cur, name):
    req = json.loads(request(name))
    req["attestor"] = "x-gone"
    try:
        cur.execute("SELECT bc_join(%s::jsonb)->>'status'", (json.dumps(req),))
        return cur.fetchone()[0]
    except psycopg2.Error as e:
        return e.pgcode

ok(join_gone(ca, "g1") == "refused", "session A runs the registered x-gone")
cb.execute("SELECT bc_join.unregister_attestor('x-gone')")
b.autocommit = False
cb.execute("LOCK TABLE bc_join.attestors IN ACCESS EXCLUSIVE MODE")
ca.execute("SET statement_timeout = '1s'")
got = join_gone(ca, "g2")
ok(got == "57014", "A's rebuild waits on the locked registry and is cancelled by its statement timeout", got)
b.rollback()
b.autocommit = True
ca.execute("RESET statement_timeout")
got = join_gone(ca, "g3")
ok(got == "0A000", "after the failed rebuild A reads the registry again: x-gone is unknown (0A000), never run", got)
ca.execute("SELECT count(*) FROM bc_join.events WHERE payload->>'refusal' = 'x-gone:ran'")
ok(ca.fetchone()[0] == 1, "x-gone ran once, while registered")
a.close(); b.close()
admin.cursor().execute("DROP DATABASE bcj_registry")
sys.exit(1 if failed else 0)
