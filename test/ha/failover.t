#!/usr/bin/python3
"""failover.t: no acknowledged join is lost when the primary dies.

A pg_auto_failover formation (tools/ha-throwaway: monitor, primary node1,
synchronous standby node2, bc_join on both), one bc-gateway with the
multi-host conninfo (target_session_attrs=read-write), and a client loop
sending real joins (bcd join-request, one single-use token each) at a steady
rate, and beside it a second loop renewing one joined node's certificate and
asking session credentials for it (POST /v1/renew, /v1/session, proofs by its
current key), retrying a request whose answer was lost with the same CSR.  Round 1 SIGKILLs node1 (its keeper and postmaster: the node is lost),
waits for node2's promotion and checks that every request the client saw
answered `issued` (joins, renewals, sessions) has its certificate on the new
primary, that the invariants hold there (crash_safety.t's, sessions too),
that joins resume
through the same gateway process, and measures the failover time.  Then node1
is restarted (it rejoins as a standby) and round 2 fails back the other way.
Also: a join sent to the standby alone is 503 (25006), and /metrics names
the primary.  Takes 1-2 minutes: run by test/ha-run, not test/run-all.
"""
import base64
import hashlib
import json
import random
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gateway"))
import gwlib  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import halib  # noqa: E402
from gwlib import metric, run  # noqa: E402
from halib import HA  # noqa: E402
from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature  # noqa: E402
RATE_PAUSE = 0.1        # seconds between two requests of the client loop
# The consistency invariants of test/tap/sql_fuzz.t and crash_safety.t: each query counts violations.
INVARIANTS = [
    ("no node without a certificate",
     "SELECT count(*) FROM bc_join.nodes n WHERE NOT EXISTS "
     "(SELECT 1 FROM bc_join.node_certs c WHERE c.node_id = n.id)"),
    ("no certificate without its node",
     "SELECT count(*) FROM bc_join.node_certs c WHERE NOT EXISTS "
     "(SELECT 1 FROM bc_join.nodes n WHERE n.id = c.node_id)"),
    ("every token's spent uses equal its joins",
     "SELECT count(*) FROM bc_join.join_tokens t WHERE t.uses_total - t.uses_left <> "
     "(SELECT count(*) FROM bc_join.events e WHERE e.type = 'node.joined' AND e.payload->>'tokenId' = t.id)"),
    ("no node without its node.joined event",
     "SELECT count(*) FROM bc_join.nodes n WHERE NOT EXISTS (SELECT 1 FROM bc_join.events e "
     "WHERE e.type = 'node.joined' AND e.payload->>'nodeId' = n.id)"),
    ("at most one live certificate per node",
     "SELECT count(*) FROM (SELECT node_id FROM bc_join.node_certs WHERE revoked_at IS NULL "
     "AND not_after > now() GROUP BY node_id HAVING count(*) > 1) x"),
    ("every renewed certificate's predecessor is revoked",
     "SELECT count(*) FROM bc_join.node_certs o WHERE o.revoked_at IS NULL AND EXISTS "
     "(SELECT 1 FROM bc_join.node_certs n WHERE n.node_id = o.node_id AND n.issued_at > o.issued_at)"),
    ("no session without a certificate",
     "SELECT count(*) FROM bc_join.sessions s WHERE NOT EXISTS "
     "(SELECT 1 FROM bc_join.session_certs c WHERE c.session_id = s.id)"),
    ("every session certificate was asked with a certificate of its own node",
     "SELECT count(*) FROM bc_join.session_certs c JOIN bc_join.sessions s ON s.id = c.session_id "
     "WHERE NOT EXISTS (SELECT 1 FROM bc_join.node_certs n WHERE n.serial = c.node_serial "
     "AND n.node_id = s.node_id)"),
]


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def payload(answer):
    """The signed payload of an issued answer."""
    p = answer["response"].split(".")[1]
    return json.loads(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4)))


def new_csr():
    key = ec.generate_private_key(ec.SECP256R1())
    der = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([])).sign(
        key, hashes.SHA256()).public_bytes(serialization.Encoding.DER)
    return key, der


def jws_es256(key, claims):
    head = b64u(json.dumps({"alg": "ES256"}).encode())
    body = b64u(json.dumps(claims, separators=(",", ":")).encode())
    r, s = decode_dss_signature(key.sign((head + "." + body).encode(), ec.ECDSA(hashes.SHA256())))
    return head + "." + body + "." + b64u(r.to_bytes(32, "big") + s.to_bytes(32, "big"))


class HAEnv(halib.HAMixin, gwlib.Env):
    """gwlib's Env on a pg_auto_failover formation."""

    def requests(self, n, tag):
        """n join requests, each with its own single-use token: [(path, csr sha256 hex)]."""
        toks = self.psql("SELECT bc_join.create_join_token('%s', '%s', uses => 1) "
                         "FROM generate_series(1, %d)" % (self.tenant, self.pool, n)).split()
        out = []
        for i, t in enumerate(toks):
            path, d = self.join_request("%s-%d" % (tag, i), t)
            with open(os.path.join(d, "node.csr.der"), "rb") as f:
                out.append((path, hashlib.sha256(f.read()).hexdigest()))
        return out


class Client(threading.Thread):
    """Send each request in turn; on 503 or a transport error retry it (same
    body) until it gets another answer.  Records (t, code, status) per try."""

    def __init__(self, env, gw, reqs):
        super().__init__(daemon=True)
        self.env, self.gw, self.reqs = env, gw, reqs
        self.tries = []             # (time, index, http code, status or None)
        self.answers = {}           # index -> (http code, status)
        self.stop_at = None

    def run(self):
        for i, (path, _) in enumerate(self.reqs):
            while True:
                t = time.time()
                try:
                    code, _, b = self.env.curl(self.gw, "/v1/join", data_file=path, max_time=8)
                except Exception:
                    code, b = 0, b""
                try:
                    status = json.loads(b).get("status")
                except ValueError:
                    status = None
                self.tries.append((t, i, code, status))
                if code not in (0, 503):
                    self.answers[i] = (code, status)
                    break
                time.sleep(0.2)
            time.sleep(RATE_PAUSE)

    def issued(self):
        return [i for i, (c, s) in self.answers.items() if c == 200 and s == "issued"]

    def first_issued_after(self, t):
        ts = [x[0] for x in self.tries if x[0] >= t and x[2] == 200 and x[3] == "issued"]
        return min(ts) if ts else None

    def last_issued_before(self, t):
        ts = [x[0] for x in self.tries if x[0] < t and x[2] == 200 and x[3] == "issued"]
        return max(ts) if ts else None


class ProofClient(threading.Thread):
    """One node's renewals and session requests through the gateway until
    stopped: each a new CSR, a proof by the node's current key; no answer or
    503: asked again with a fresh proof, a renewal with the same CSR (one
    whose answer was lost then gets the certificate already issued to that
    key), a session with a new one (as bcd does).
    Records every answer issued as (table, serial) and anything else."""

    def __init__(self, env, gw, key, serial):
        super().__init__(daemon=True)
        self.env, self.gw, self.key, self.serial = env, gw, key, serial
        self.issued = []            # ("node_certs" | "session_certs", serial)
        self.other = []
        self.counts = {"renew": 0, "session": 0, "retries": 0}
        self.stop_flag = False

    def run(self):
        while not self.stop_flag:
            what = "renew" if random.random() < 0.5 else "session"
            key, der = new_csr()
            while not self.stop_flag:
                if what == "session":
                    key, der = new_csr()    # as bcd: a session asked again is a new request
                claims = {"purpose": what, "serial": self.serial,
                          "csrSha256": b64u(hashlib.sha256(der).digest()), "iat": int(time.time())}
                if what == "session":
                    claims.update({"session": "s%d" % random.randrange(5), "context": "ha"})
                doc = json.dumps({"csr": b64u(der), "proof": jws_es256(self.key, claims)})
                try:
                    code, _, b = self.env.curl(self.gw, "/v1/" + what, data=doc, max_time=8)
                except Exception:
                    code, b = 0, b""
                if code in (0, 503):
                    self.counts["retries"] += 1
                    time.sleep(0.2)
                    continue
                try:
                    a = json.loads(b)
                except ValueError:
                    a = {}
                if code == 200 and a.get("status") == "issued":
                    p = payload(a)
                    self.issued.append(("node_certs" if what == "renew" else "session_certs", p["serial"]))
                    self.counts[what] += 1
                    if what == "renew":
                        self.key, self.serial = key, p["serial"]
                else:
                    self.other.append((what, code, b[:200]))
                break
            time.sleep(RATE_PAUSE)


def failover_round(tap, env, gw, victim, heir, name):
    """Joins at a steady rate, victim lost mid-way; the checks. Failover seconds or None."""
    reqs = env.requests(90, name)
    # One node joined now, renewed and asked for sessions all through the round.
    (jpath, jdir), = [env.join_request("%s-proofs" % name, env.psql(
        "SELECT bc_join.create_join_token('%s', '%s', uses => 1)" % (env.tenant, env.pool)))]
    code, _, b = env.curl(gw, "/v1/join", data_file=jpath)
    with open(os.path.join(jdir, "node.key"), "rb") as f:
        nkey = serialization.load_pem_private_key(f.read(), None)
    pc = ProofClient(env, gw, nkey, payload(json.loads(b))["serial"])
    c = Client(env, gw, reqs)
    c.start()
    pc.start()
    while len(c.issued()) < 20 and c.is_alive():
        time.sleep(0.1)
    tap.ok(len(c.issued()) >= 20, "%s: joins are issued before the failover" % name)
    subprocess.run([HA, "kill", env.ha, victim], check=True, stdout=subprocess.DEVNULL)
    t_kill = time.time()        # the node's processes are gone
    promoted = env.wait_state(heir, "wait_primary|primary", timeout=120)
    t_promoted = time.time()
    tap.ok(promoted, "%s: %s is promoted after %s is killed" % (name, heir, victim), env.state())
    c.join(timeout=180)
    tap.ok(not c.is_alive(), "%s: the client loop finished" % name)
    pc.stop_flag = True
    pc.join(timeout=60)
    tap.note("%s: renewals and sessions: %s" % (name, pc.counts))
    tap.ok(pc.counts["renew"] > 0 and pc.counts["session"] > 0 and pc.counts["retries"] > 0,
           "%s: renewals and session credentials were issued across the failover" % name, pc.counts)
    tap.ok(not pc.other, "%s: every renewal and session request was answered issued" % name, pc.other[:5])
    t_back = c.first_issued_after(t_kill)
    t_last = c.last_issued_before(t_kill)
    tap.ok(t_back is not None, "%s: joins resume through the same gateway process" % name)
    tap.ok(gw.proc.poll() is None, "%s: the gateway never exited" % name)
    codes = {}
    for _, _, code, _ in c.tries:
        codes[code] = codes.get(code, 0) + 1
    tap.note("%s: tries by HTTP code %s (0 = no answer)" % (name, codes))
    other = {i: a for i, a in c.answers.items() if a != (200, "issued")}
    # A retry of a join whose commit reached the standby but whose answer was
    # lost is refused (its single-use token is spent): allowed, and counted.
    tap.ok(all(a == (403, "refused") for a in other.values()),
           "%s: every answer is issued, or refused for a retried spent token" % name, other)
    tap.note("%s: %d issued, %d refused retries" % (name, len(c.issued()), len(other)))
    # Every acknowledged join is on the new primary.
    env.pgenv = env.node_env(heir)
    issued = c.issued()
    hexes = ",".join("'\\x%s'" % reqs[i][1] for i in issued)
    found = int(env.psql("SELECT count(*) FROM bc_join.node_certs WHERE join_csr_sha256::bytea IN (%s)"
                         % hexes)) if issued else 0
    tap.eq(found, len(issued), "%s: every join answered issued has its certificate on %s" % (name, heir))
    missing = [i for i in pc.issued
               if env.psql("SELECT count(*) FROM bc_join.%s WHERE serial = '%s'" % i) != "1"]
    tap.ok(pc.issued and not missing, "%s: every one of the %d renewals and sessions answered issued is on %s"
           % (name, len(pc.issued), heir), missing[:5])
    # The crash-safety invariants hold on the new primary.
    for what, q in INVARIANTS:
        tap.eq(env.psql(q), "0", "%s: on %s, %s" % (name, heir, what))
    tap.eq(env.psql("SELECT bc_join.verify_audit_log()"), "t", "%s: the issuance log chains on %s" % (name, heir))
    if t_back is None:
        return None
    fo = t_back - t_kill
    tap.note("%s: kill -> promotion seen %.1f s; kill -> first issued join %.1f s; "
             "last issued before the kill -> first after %.1f s"
             % (name, t_promoted - t_kill, fo, t_back - (t_last or t_kill)))
    return fo


def body(tap, env):
    gw = env.gateway("ha", "--retry-after", "1", "--db-wait-timeout", "2s", "--db-pool", "2")
    code, _, _ = env.curl(gw, "/healthz")
    tap.eq(code, 200, "the gateway reaches the formation through the multi-host conninfo")

    # -- the standby alone: a clean 503 ----------------------------------------
    standby_ci = "host=127.0.0.1 port=%d dbname=bcj user=gw_login" % env.ports["node2"]
    env.conninfo, multi = standby_ci, env.conninfo
    standby = env.gateway("standby-only", "--retry-after", "1")
    env.conninfo = multi
    (path, _), = env.requests(1, "sb")
    code, h, b = env.curl(standby, "/v1/join", data_file=path)
    tap.ok(code == 503 and h.get("retry-after") == "1", "a join sent to the standby is 503 with Retry-After",
           (code, h, b))
    r = subprocess.run(["psql", "-qAtX", "-v", "VERBOSITY=verbose", "-h", "127.0.0.1",
                        "-p", str(env.ports["node2"]), "-U", "postgres", "-d", "bcj",
                        "-c", "SELECT public.bc_join(pg_read_file('%s')::jsonb)" % path],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tap.ok("25006" in r.stderr, "bc_join() on the standby raises 25006", r.stderr)
    code, _, b = env.curl(gw, "/v1/join", data_file=path)
    tap.ok(code == 200 and json.loads(b)["status"] == "issued",
           "the same request through the multi-host gateway is issued (the standby wrote nothing)", b)
    standby.stop()

    _, _, m = env.curl(gw, "/metrics")
    tap.eq(metric(m.decode(), "bc_gateway_db_primary",
                  [("host", "127.0.0.1"), ("port", str(env.ports["node1"]))]), 1.0,
           "/metrics names node1 as the primary")

    fo1 = failover_round(tap, env, gw, "node1", "node2", "round 1")
    _, _, m = env.curl(gw, "/metrics")
    tap.eq(metric(m.decode(), "bc_gateway_db_primary",
                  [("host", "127.0.0.1"), ("port", str(env.ports["node2"]))]), 1.0,
           "/metrics names node2 as the primary after the failover", m.decode()[-400:])

    # -- node1 rejoins as a standby, then the failover back ---------------------
    subprocess.run([HA, "restart", env.ha, "node1"], check=True)
    ok = env.wait_state("node1", "secondary", timeout=180) and env.wait_state("node2", "primary", timeout=60)
    tap.ok(ok, "the old primary rejoins as a synchronous standby", env.state())
    if not ok:
        return
    fo2 = failover_round(tap, env, gw, "node2", "node1", "round 2")
    tap.note("failover time (kill -> first issued join): round 1 %s s, round 2 %s s"
             % ("%.1f" % fo1 if fo1 else "-", "%.1f" % fo2 if fo2 else "-"))


if __name__ == "__main__":
    env = HAEnv()

    def setup(e):
        e.make_cert()
        e.start_cluster("ha-tenant")

    run(env, setup, body)
