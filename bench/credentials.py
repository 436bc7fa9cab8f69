#!/usr/bin/python3
"""credentials.py: what each credential costs the service (issue 49, done-when 3).

Used by bench/run's section `credentials` (bench/sections/credentials.sh),
on one of its databases (setup_db: tenant, pool, join tokens in bench.tokens;
nodes bulk-loaded by bench/load-nodes.sql).  For one kind of credential:

  N nodes joined through bc_join() (a P-256 key each, the token sealed to the
  CSR as bcd does) unless NODEFILE holds them already (their current keys,
  PEM; a renewal's new keys are written back), then N requests made in
  advance, one per node, into bench.creq (ids 1..N), each used once:
    renew    bc_join.renew: a new key's CSR, the proof signed by the node key
             over its current serial
    session  bc_join.issue_session: a new session key's CSR and the proof,
             a new session identity per request
    jwt      bc_join.issue_jwt_svid: the proof alone (an audience, a new
             session identity per request)
  CLIENTS connections (threads), each warmed up first (untimed calls and
  transactions: plans, keys, caches), then four timed halves of N/2: the
  calls (`EXECUTE call(id)`, prepared `SELECT fn(r.req) FROM bench.creq r
  WHERE r.id = $1`), the plain-SQL limit twice, the calls again, so a
  drifting machine weighs on both sides alike.  The limit is
  bench/cred-ceiling-KIND.pgbench: the statements the function runs, on the
  same nodes' rows, without the crypto and the C code; its statements
  prepared once per connection and sent as one string of EXECUTEs per
  transaction, one round trip as the call is.

For each half, after a CHECKPOINT: the CPU of the cluster (every process of
the postmaster: these backends, WAL writer, checkpointer, autovacuum; by
/proc/PID/schedstat, a child that ended by the postmaster's cutime+cstime)
and of this process (the load: its threads), and the WAL
(pg_current_wal_insert_lsn before and after; the full-page images apart by
pg_walinspect), per operation.  Prints one JSON line; exit 1 unless every
call answered "issued" (and bc_join.attestor_statistics agrees).

  credentials.py KIND N CLIENTS NODEFILE            (database: PGDATABASE)
"""
import base64
import hashlib
import json
import os
import random
import sys
import threading
import time

import psycopg2
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from jwcrypto import jwe, jwk

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICK = os.sysconf("SC_CLK_TCK")
FN = {"renew": "bc_join.renew", "session": "bc_join.issue_session", "jwt": "bc_join.issue_jwt_svid"}


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def unb64u(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def new_csr():
    key = ec.generate_private_key(ec.SECP256R1())
    csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([])).sign(key, hashes.SHA256())
    return key, csr.public_bytes(serialization.Encoding.DER)


def jws_es256(key, payload):
    head = b64u(json.dumps({"alg": "ES256"}).encode())
    body = b64u(json.dumps(payload, separators=(",", ":")).encode())
    r, s = decode_dss_signature(key.sign((head + "." + body).encode(), ec.ECDSA(hashes.SHA256())))
    return head + "." + body + "." + b64u(r.to_bytes(32, "big") + s.to_bytes(32, "big"))


def connect():
    c = psycopg2.connect(dbname=os.environ.get("PGDATABASE", "bench"))
    c.autocommit = True
    return c


def one(cur, sql, args=()):
    cur.execute(sql, args)
    return cur.fetchone()[0]


def spki_sha256(key):
    return hashlib.sha256(key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)).digest()


def join_nodes(cur, n, start):
    """N fresh nodes joined through bc_join() as bcd joins: [(key, node_id)]."""
    keys = json.loads(one(cur, "SELECT bc_join.service_keys()::text"))
    enc = jwk.JWK(**keys["encryptionKey"])
    cur.execute("SELECT token FROM bench.tokens ORDER BY n")
    tokens = [r[0] for r in cur.fetchall()]
    nodes = []
    for i in range(start, start + n):
        key, der = new_csr()
        sha = b64u(hashlib.sha256(der).digest())
        t = jwe.JWE(tokens[i % len(tokens)].encode(),
                    protected=json.dumps({"alg": "ECDH-ES", "enc": "A256GCM", "csrSha256": sha}))
        t.add_recipient(enc)
        doc = {"csr": b64u(der), "role": "node", "attestor": "join-token", "sealedToken": t.serialize(compact=True),
               "claims": {"hostname": "cred%d" % i, "arch": "x86_64", "macs": ["00:11:22:33:44:55"],
                          "gpuUuids": [], "serial": "S%d" % i, "productUuid": "u%d" % i}}
        r = json.loads(one(cur, "SELECT bc_join(%s::jsonb)::text", (json.dumps(doc),)))
        if r.get("status") != "issued":
            sys.exit("credentials.py: a join was not issued: %s" % r)
        nodes.append((key, json.loads(unb64u(r["response"].split(".")[1]))["nodeId"]))
    return nodes


def load_nodes(path):
    """The nodes of NODEFILE: [(key, node_id)] (their current keys)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [(serialization.load_pem_private_key(d["key"].encode(), None), d["node"]) for d in json.load(f)]


def save_nodes(path, nodes):
    with open(path + ".tmp", "w") as f:
        json.dump([{"node": nid, "key": k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()).decode()}
                   for k, nid in nodes], f)
    os.chmod(path + ".tmp", 0o600)
    os.rename(path + ".tmp", path)


def request(kind, key, serial, tag):
    """One request of KIND for the node whose key and serial are given."""
    p = {"purpose": {"renew": "renew", "session": "session", "jwt": "jwt-svid"}[kind],
         "serial": serial, "iat": int(time.time())}
    doc = {}
    newkey = None
    if kind in ("renew", "session"):
        newkey, der = new_csr()
        p["csrSha256"] = b64u(hashlib.sha256(der).digest())
        doc["csr"] = b64u(der)
    if kind == "session":
        p["session"] = "bench-%s" % tag
    if kind == "jwt":
        p["session"] = "bench-jwt-%s" % tag
        p["audience"] = ["bench.example"]
    doc["proof"] = jws_es256(key, p)
    return doc, newkey


def prepare(kind, n, nodefile):
    """N requests of KIND in bench.creq (ids 1..N), one per node of NODEFILE (nodes joined
    first while it holds fewer than N); after a renewal's the file holds the new keys."""
    db = connect()
    cur = db.cursor()
    nodes = load_nodes(nodefile)
    if len(nodes) < n:
        nodes += join_nodes(cur, n - len(nodes), len(nodes))
        save_nodes(nodefile, nodes)
    nodes = nodes[:n]
    cur.execute("CREATE TABLE IF NOT EXISTS bench.creq (id bigint PRIMARY KEY, req jsonb NOT NULL, "
                "serial text NOT NULL, node_id text NOT NULL, tenant_id text NOT NULL)")
    cur.execute("CREATE SEQUENCE IF NOT EXISTS bench.cseq")
    cur.execute("CREATE SEQUENCE IF NOT EXISTS bench.ccseq")
    cur.execute("TRUNCATE bench.creq")
    tenant = one(cur, "SELECT tenant_id FROM bc_join.nodes WHERE id = %s", (nodes[0][1],))
    rows, renewed = [], []
    for i, (key, nid) in enumerate(nodes):
        # the node's live certificate is the one of the key held here
        serial = one(cur, "SELECT serial FROM bc_join.node_certs WHERE node_id = %s AND spki_sha256 = %s "
                          "AND revoked_at IS NULL", (nid, psycopg2.Binary(spki_sha256(key))))
        doc, newkey = request(kind, key, serial, "%d-%d" % (i, int(time.time() * 1000)))
        rows.append((i + 1, json.dumps(doc), serial, nid, tenant))
        renewed.append((newkey if kind == "renew" else key, nid))
    cur.executemany("INSERT INTO bench.creq VALUES (%s, %s, %s, %s, %s)", rows)
    cur.execute("VACUUM ANALYZE bench.creq")
    if kind == "renew":
        save_nodes(nodefile, renewed + load_nodes(nodefile)[n:])
    print(json.dumps({"prepared": kind, "n": n}))


def postmaster_pid(cur):
    with open(os.path.join(one(cur, "SELECT current_setting('data_directory')"), "postmaster.pid")) as f:
        return int(f.readline())


def schedstat(pid):
    """ns on a CPU of PID (0 once it has gone)."""
    try:
        with open("/proc/%d/schedstat" % pid) as f:
            return int(f.read().split()[0])
    except (FileNotFoundError, ProcessLookupError):
        return 0


def cluster_cpu(pm):
    """{pid: ns} of the postmaster's live children, and the ns of the postmaster itself
    with the children it reaped (cutime + cstime)."""
    with open("/proc/%d/stat" % pm) as f:
        st = f.read().rsplit(")", 1)[1].split()
    reaped = (int(st[13]) + int(st[14])) * 1e9 / TICK + schedstat(pm)
    kids = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open("/proc/%s/stat" % p) as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pm:
                        kids[int(p)] = schedstat(int(p))
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                pass
    return kids, reaped


def ceiling_statements(path):
    """The statements of a bench/cred-ceiling-KIND.pgbench script, between \\startpipeline
    and \\endpipeline, for PREPARE: :r is $1, the request's id (bench.ccseq there) $2, and
    what the script looks up by it in bench.creq (pgbench has no variables from a pipelined
    query) is a parameter as it is in the function: its node $3, serial $4, tenant $5."""
    out, on = [], False
    cur = "currval('bench.ccseq')"
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line == "\\startpipeline":
                on = True
            elif line == "\\endpipeline":
                on = False
            elif on and line and not line.startswith("--"):
                line = line.rstrip(";").replace("(SELECT nextval('bench.ccseq'))", "$2::bigint")
                for col, par in (("node_id", "$3::text"), ("serial", "$4::text"), ("tenant_id", "$5::text")):
                    line = line.replace("(SELECT %s FROM bench.creq WHERE id = %s)" % (col, cur), par)
                if "bench.creq" in line and "$2::bigint" not in line:
                    sys.exit("credentials.py: %s: a lookup left in bench.creq: %s" % (path, line))
                out.append(line.replace(":r", "$1"))
    return out


class Client:
    """One connection: the call prepared as `call`, the ceiling's statements as c0, c1, ..."""

    def __init__(self, fn):
        self.db = connect()
        self.cur = self.db.cursor()
        self.cur.execute("PREPARE call(bigint) AS SELECT %s(r.req)::text FROM bench.creq r WHERE r.id = $1" % fn)
        self.pid = one(self.cur, "SELECT pg_backend_pid()")
        self.bad = []

    def prepare_ceiling(self, stmts):
        self.tx = []
        for k, st in enumerate(stmts):
            if st.upper() in ("BEGIN", "COMMIT") or st.upper().startswith(("SAVEPOINT", "RELEASE")):
                self.tx.append(st)
                continue
            # the parameters up to the last one it uses ($1 r, $2 id, $3 node, $4 serial, $5 tenant)
            used = max([i for i in range(1, 6) if "$%d" % i in st] or [0])
            types = ["bigint", "bigint", "text", "text", "text"][:used]
            names = ["%(r)s", "%(id)s", "%(node)s", "%(serial)s", "%(tenant)s"][:used]
            self.cur.execute("PREPARE c%d(%s) AS %s" % (k, ", ".join(types), st) if used else
                             "PREPARE c%d AS %s" % (k, st))
            self.tx.append("EXECUTE c%d(%s)" % (k, ", ".join(names)) if used else "EXECUTE c%d" % k)
        self.ceiling = "; ".join(self.tx)

    def calls(self, ids):
        for i in ids:
            self.cur.execute("EXECUTE call(%s)", (i,))
            r = json.loads(self.cur.fetchone()[0])
            if r.get("status") != "issued":
                self.bad.append(r)

    def ceilings(self, ids):
        for i in ids:
            node, serial, tenant = self.rows[i]
            self.cur.execute(self.ceiling, {"r": random.randrange(1, 1 << 62), "id": i, "node": node,
                                            "serial": serial, "tenant": tenant})


def timed(clients, what, ids, pm, adm):
    """WHAT ("calls" or "ceilings") over IDS spread over the clients, after a CHECKPOINT:
    the CPU of the cluster's processes and of this one, the WAL, per operation."""
    acur = adm.cursor()
    acur.execute("CHECKPOINT")
    lsn0 = one(acur, "SELECT pg_current_wal_insert_lsn()::text")
    parts = [ids[k::len(clients)] for k in range(len(clients))]
    kids0, reaped0 = cluster_cpu(pm)
    me0, t0 = time.process_time(), time.monotonic()
    th = [threading.Thread(target=getattr(c, what), args=(p,)) for c, p in zip(clients, parts)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall, me = time.monotonic() - t0, time.process_time() - me0
    kids1, reaped1 = cluster_cpu(pm)
    backends = sum(kids1.get(c.pid, 0) - kids0.get(c.pid, 0) for c in clients)
    # a child gone since is in reaped1 whole: its ns before are taken off
    service = reaped1 - reaped0 + sum(v - kids0.get(p, 0) for p, v in kids1.items()) - \
        sum(v for p, v in kids0.items() if p not in kids1)
    lsn1 = one(acur, "SELECT pg_current_wal_insert_lsn()::text")
    wal = float(one(acur, "SELECT pg_wal_lsn_diff(%s, %s)", (lsn1, lsn0)))
    fpi = float(one(acur, "SELECT coalesce(sum(fpi_size), 0) FROM pg_get_wal_stats(%s, pg_current_wal_flush_lsn())",
                    (lsn0,))) if wal > 0 else 0.0
    n = len(ids)
    return {"n": n, "per_s": n / wall, "service_us": service / 1e3 / n, "backends_us": backends / 1e3 / n,
            "load_us": me * 1e6 / n,
            "wal_b": wal / n, "fpi_b": fpi / n}


def measure(kind, n, nclients, nodefile):
    """KIND's N calls and N plain-SQL transactions, as call, ceiling, ceiling, call (N/2 each)."""
    warm = 4 * nclients
    prepare(kind, n + warm, nodefile)
    adm = connect()
    acur = adm.cursor()
    pm = postmaster_pid(acur)
    stmts = ceiling_statements(os.path.join(TOP, "bench", "cred-ceiling-%s.pgbench" % kind))
    clients = [Client(FN[kind]) for _ in range(nclients)]
    # warm every connection (plans, keys, caches) on the last requests, untimed, the
    # ceiling on the rows those calls used (a renewal's ceiling revokes the certificate)
    wids = list(range(n + 1, n + warm + 1))
    for k, c in enumerate(clients):
        c.calls(wids[k::nclients])
    # what the plain-SQL limit writes: the sizes of the rows these calls wrote
    acur.execute("DROP TABLE IF EXISTS bench.csample")
    acur.execute("""CREATE TABLE bench.csample AS SELECT
        (SELECT payload FROM bc_join.events WHERE type = %s ORDER BY id DESC LIMIT 1) AS payload,
        (SELECT certificate FROM bc_join.node_certs ORDER BY issued_at DESC LIMIT 1) AS certificate,
        (SELECT certificate FROM bc_join.session_certs ORDER BY issued_at DESC LIMIT 1) AS session_certificate,
        (SELECT detail FROM bc_join.audit_log WHERE action = 'node.renew' ORDER BY id DESC LIMIT 1) AS detail""",
                 ("node.renewed" if kind == "renew" else "session.provisioned",))
    acur.execute("SELECT id, node_id, serial, tenant_id FROM bench.creq")
    rows = {r[0]: r[1:] for r in acur.fetchall()}
    for k, c in enumerate(clients):
        c.rows = rows
        c.prepare_ceiling(stmts)
        c.ceilings(wids[k::nclients])
    acur.execute("SELECT bc_join.attestor_stats_reset()")
    half = n // 2
    a = list(range(1, half + 1))
    b = list(range(half + 1, 2 * half + 1))
    res = {"kind": kind, "clients": nclients,
           "call_a": timed(clients, "calls", a, pm, adm),
           "ceiling_a": timed(clients, "ceilings", a, pm, adm),
           "ceiling_b": timed(clients, "ceilings", a, pm, adm),
           "call_b": timed(clients, "calls", b, pm, adm)}
    for side in ("call", "ceiling"):
        x, y = res[side + "_a"], res[side + "_b"]
        res[side] = {k: round((x[k] + y[k]) / 2, 1) for k in x}
        res[side]["n"] = x["n"] + y["n"]
        res[side]["machine_us"] = round(res[side]["service_us"] + res[side]["load_us"], 1)
    for k in ("call_a", "call_b", "ceiling_a", "ceiling_b"):
        res[k] = {m: round(v, 1) for m, v in res[k].items()}
    issued = one(acur, "SELECT coalesce(sum(calls) FILTER (WHERE outcome = 'admitted'), 0) FROM bc_join.attestor_statistics")
    other = one(acur, "SELECT coalesce(sum(calls) FILTER (WHERE outcome <> 'admitted'), 0) FROM bc_join.attestor_statistics")
    bad = sum(len(c.bad) for c in clients)
    res["issued"], res["other"], res["not_issued"] = int(issued), int(other), bad
    print(json.dumps(res))
    if bad or issued != 2 * half or other:
        for c in clients:
            for r in c.bad[:3]:
                print("credentials.py: not issued: %s" % r, file=sys.stderr)
        sys.exit("credentials.py: %s: %d calls, %d issued, %d other outcomes" % (kind, 2 * half, issued, other))


if __name__ == "__main__":
    a = sys.argv[1:]
    if len(a) == 4 and a[0] in FN:
        measure(a[0], int(a[1]), int(a[2]), a[3])
    else:
        sys.exit(__doc__)
