#!/usr/bin/python3
"""replay.t: a captured JoinRequest cannot drain a token, and one CSR key
admits one join.

The same request sent six times against a 10-use token makes one node and
spends one use; each repeat, verified again (the same token and secret,
sealed to this CSR), is answered with the certificate already issued (a
relay that lost the answer burns nothing), and the audit log gets one note
for the certificate, however many repeats follow.  A repeat without the
evidence (the CSR alone), with another token of the tenant, or with the
token sealed to another CSR, is refused join:key-reused and writes nothing
to the log.  Sixteen concurrent replays of one request: exactly one
certificate, one use.  A new CSR for the same key, or the same CSR once its
certificate is no longer current, is refused join:key-reused and spends
nothing.  Needs the environment test/run-all sets (PGHOST, PGPORT, BCJ_*)."""
import json, os, shutil, subprocess, sys, threading
import psycopg2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import bctest
tap = bctest.Tap()
ok = tap.ok

bcd, keys = os.environ["BCJ_BCD"], os.environ["BCJ_SERVICE_KEYS"]
sdb = bctest.SharedDb("replay")
scratch, admin, db, c, one = sdb.scratch, sdb.admin, sdb.db, sdb.cur, sdb.one
t, s, p = sdb.tenant('r')

def request(token, d):
    return subprocess.run([bcd, "join-request", "--service-keys", keys, "--token", token,
                           "--out-dir", os.path.join(scratch, d)],
                          capture_output=True, text=True, check=True).stdout
def join(req, cur=c):
    cur.execute("SELECT bc_join(%s::jsonb)", (req,))
    return cur.fetchone()[0]
def serial(resp):
    if resp.get("status") != "issued":
        return None
    body = resp["response"].split(".")[1]
    return json.loads(__import__("base64").urlsafe_b64decode(body + "=" * (-len(body) % 4)))["serial"]
def uses_left(tok):
    return one("SELECT uses_left FROM bc_join.join_tokens WHERE id = split_part(%s, '.', 1)", tok)
def count(sql, *args):
    return one("SELECT count(*) FROM " + sql, *args)
def last_refusal():
    return one("SELECT payload->>'refusal' FROM bc_join.events WHERE type = 'security.join.refused' ORDER BY id DESC LIMIT 1")

# -- six sequential replays of one request against a 10-use token
tok = one("SELECT bc_join.create_join_token(%s, %s, uses => 10)", t, p)
req = request(tok, "m1")
answers = [join(req) for _ in range(6)]
serials = {serial(a) for a in answers}
ok(all(a["status"] == "issued" for a in answers) and len(serials) == 1 and None not in serials,
   "six sends of one request are each answered with the same certificate", answers)
ok(count("bc_join.nodes") == 1 and count("bc_join.node_certs") == 1,
   "one node and one certificate", (count("bc_join.nodes"), count("bc_join.node_certs")))
ok(uses_left(tok) == 9, "one use spent, not six", uses_left(tok))
ok(count("bc_join.events WHERE type = 'node.joined'") == 1, "one node.joined event")
ok(count("bc_join.audit_log WHERE action = 'node.join.repeated'") == 1,
   "the repeats leave one note in the audit log for the certificate, not one each")
first_serial = serials.pop()

# -- a repeat must present the evidence again
def audit_rows():
    return count("bc_join.audit_log")
def last_detail():
    return one("SELECT payload->'detail' FROM bc_join.events WHERE type = 'security.join.refused' "
               "ORDER BY id DESC LIMIT 1")
tok_other = one("SELECT bc_join.create_join_token(%s, %s, uses => 10)", t, p)
log0, left0 = audit_rows(), uses_left(tok)
bare = json.loads(req)
del bare["sealedToken"]
r = join(json.dumps(bare))
ok(r["status"] == "refused" and last_refusal() == "join:key-reused",
   "the CSR of a current certificate alone (no evidence) is refused join:key-reused", (r, last_refusal()))
d = last_detail()
ok(d == {"repeatOf": first_serial, "refusal": "join-token:no-evidence"},
   "the refusal names the certificate and the attestor's own reason", d)
other = request(tok_other, "m1")        # the same key and CSR, another token of the tenant
ok(json.loads(other)["csr"] == json.loads(req)["csr"], "(the same CSR with another token)")
r = join(other)
ok(r["status"] == "refused" and last_refusal() == "join:key-reused" and
   last_detail().get("refusal") == "join:repeat-subject",
   "the same CSR with another valid token is refused join:key-reused (another subject)", (r, last_detail()))
ok(uses_left(tok_other) == 10, "and the other token is not spent", uses_left(tok_other))
r = join(json.dumps(dict(json.loads(req), sealedToken=json.loads(request(tok, "m9"))["sealedToken"])))
ok(r["status"] == "refused" and last_detail().get("refusal") == "join-token:csr-binding",
   "the right token sealed to another CSR: refused join:key-reused (csr-binding)", last_detail())
for _ in range(5):
    join(req)
    join(json.dumps(bare))
ok(audit_rows() == log0, "repeats, refused or answered, add nothing to the issuance log",
   (audit_rows(), log0))
ok(uses_left(tok) == left0 and count("bc_join.attestation_uses WHERE attestor = 'join'") == 1,
   "nothing is spent by a repeat; one repeat mark for the certificate")

# -- the bcd that lost its answer verifies the repeat as its own
r = subprocess.run([bcd, "verify-response", "--service-keys", keys, "--dir", os.path.join(scratch, "m1"),
                    "--response", "-"], input=json.dumps(answers[-1]), capture_output=True, text=True)
ok(r.returncode == 0 and "/node/" in r.stdout, "bcd accepts a repeated answer", r.stdout + r.stderr)

# -- sixteen concurrent replays of a new request
tok2 = one("SELECT bc_join.create_join_token(%s, %s, uses => 10)", t, p)
req2 = request(tok2, "m2")
barrier = threading.Barrier(16)
results = [None] * 16
def racer(i):
    conn = psycopg2.connect(dbname="bcj_replay")
    conn.autocommit = True
    cur = conn.cursor()
    barrier.wait()
    try:
        results[i] = join(req2, cur)
    except Exception as e:
        results[i] = {"status": "error", "error": repr(e)}
    conn.close()
threads = [threading.Thread(target=racer, args=(i,)) for i in range(16)]
for th in threads: th.start()
for th in threads: th.join(60)
race_serials = {serial(a) for a in results}
ok(all(a and a["status"] == "issued" for a in results) and len(race_serials) == 1,
   "16 concurrent replays: every answer names the one certificate", results)
ok(count("bc_join.node_certs c JOIN bc_join.nodes n ON n.id = c.node_id WHERE c.serial = ANY(%s)",
         list(race_serials)) == 1 and count("bc_join.nodes") == 2,
   "exactly one certificate and one node issued for the race")
ok(uses_left(tok2) == 9, "and one use spent", uses_left(tok2))

# -- a new CSR for a key that already holds a certificate
d3 = os.path.join(scratch, "m3")
os.makedirs(d3, mode=0o700)
shutil.copy(os.path.join(scratch, "m1", "node.key"), os.path.join(d3, "node.key"))
subprocess.run(["openssl", "req", "-new", "-key", os.path.join(d3, "node.key"), "-subj", "/CN=again",
                "-outform", "DER", "-out", os.path.join(d3, "node.csr.der")], check=True, capture_output=True)
req3 = request(tok, "m3")
ok(json.loads(req3)["csr"] != json.loads(req)["csr"], "(a second CSR of the same key)")
nodes_before, left_before = count("bc_join.nodes"), uses_left(tok)
ok(join(req3)["status"] == "refused" and last_refusal() == "join:key-reused",
   "a new CSR for a key that holds a certificate is refused join:key-reused", last_refusal())
ok(count("bc_join.nodes") == nodes_before and uses_left(tok) == left_before, "and spends nothing")

# -- the same request once its certificate is no longer current
c.execute("UPDATE bc_join.node_certs SET revoked_at = now(), revocation_reason = 'keyCompromise' WHERE serial = %s",
          (first_serial,))
ok(join(req)["status"] == "refused" and last_refusal() == "join:key-reused",
   "a replay after the certificate was revoked is refused join:key-reused", last_refusal())
ok(uses_left(tok) == left_before and count("bc_join.node_certs") == 2, "and issues nothing")

# -- a one-use token: a lost answer does not burn it
tok4 = one("SELECT bc_join.create_join_token(%s, %s)", t, p)
req4 = request(tok4, "m4")
a4, b4 = join(req4), join(req4)
ok(serial(a4) is not None and serial(a4) == serial(b4),
   "a one-use token's request repeated after the use was spent gets its certificate again", (a4, b4))

db.close()
admin.cursor().execute("DROP DATABASE bcj_replay WITH (FORCE)")
sys.exit(tap.done())
