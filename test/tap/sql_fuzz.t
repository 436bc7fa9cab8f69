#!/usr/bin/python3
"""sql_fuzz.t: mutated requests against bc_join(), bc_join.renew(),
bc_join.issue_session() and bc_join.issue_ssh_host_cert() (#47) on the real
cluster of test/run-all
(docs/security.md, "Fuzzing").

Valid requests are made fresh (a new P-256 key and CSR, a token sealed to
the service's encryption key, a proof signed by the node's current key),
then mutated: bit flips, truncation, wrong types, huge numbers, 30,000-deep
nesting, every bounded field at its bound and one past, duplicate keys,
unknown members, NUL escapes.  Each text is first cast to jsonb alone
(`SELECT $1::jsonb`): the cast may raise only 22P02, 22003, 22P05, 22021 or
54001.  What casts is then handed to the function, which must answer
"issued" or the one refusal, or raise 22023 or 0A000; nothing else.
Afterwards: no backend ended by a signal (or any non-zero exit) in the
server log, and the consistency invariants hold.

BCJ_SQL_FUZZ_N requests (default 5000), BCJ_SQL_FUZZ_SECONDS at most
(default 90), BCJ_SQL_FUZZ_SEED (default 16).
Needs the environment test/run-all sets (PGHOST, PGPORT, BCJ_*).
"""
import base64
import hashlib
import json
import os
import random
import re
import struct
import sys
import time

import psycopg2
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from jwcrypto import jwe, jwk

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from bctest import Tap  # noqa: E402

DB = "bcj_sql_fuzz"
N = int(os.environ.get("BCJ_SQL_FUZZ_N", "5000"))
SECONDS = float(os.environ.get("BCJ_SQL_FUZZ_SECONDS", "90"))
rng = random.Random(int(os.environ.get("BCJ_SQL_FUZZ_SEED", "16")))

CAST_OK = {"22P02", "22003", "22P05", "22021", "54001"}
FUNC_OK = {"22023", "0A000"}
REFUSAL = {"status": "refused", "error": {"code": "ACCESS_DENIED", "message": "Join refused"}}

# The bounds of bc_protocol.h.
CSR_B64_MAX = 8 * 1024
ATTESTATION_B64_MAX = 48 * 1024
SEALED_TOKEN_MAX = 4 * 1024
CLAIM_STRING_MAX = 256
CLAIM_ARRAY_MAX = 64
ATTESTOR_ID_MAX = 64
REQUEST_MAX = 64 * 1024
PROOF_MAX = 4096


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def b64u_dec(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def connect(db):
    c = psycopg2.connect(dbname=db)
    c.autocommit = True
    with c.cursor() as cur:
        cur.execute("SET statement_timeout = '20s'")
    return c


def new_csr():
    key = ec.generate_private_key(ec.SECP256R1())
    csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([])).sign(key, hashes.SHA256())
    der = csr.public_bytes(serialization.Encoding.DER)
    return key, der


def jws_es256(key, payload):
    head = b64u(json.dumps({"alg": "ES256"}).encode())
    body = b64u(json.dumps(payload, separators=(",", ":")).encode())
    der = key.sign((head + "." + body).encode(), ec.ECDSA(hashes.SHA256()))
    r, s = decode_dss_signature(der)
    return head + "." + body + "." + b64u(r.to_bytes(32, "big") + s.to_bytes(32, "big"))


class World:
    """The tenant, the token, the service's encryption key, a node for proofs."""

    def __init__(self, conn):
        self.conn = conn
        keys = json.loads(self.one("SELECT bc_join.service_keys()::text"))
        self.enc = jwk.JWK(**keys["encryptionKey"])
        self.tenant = self.one("SELECT bc_join.create_tenant('sqlfuzz')")
        site = self.one("SELECT bc_join.create_site(%s, 'dc')", (self.tenant,))
        self.pool = self.one("SELECT bc_join.create_pool(%s, %s, 'p')", (self.tenant, site))
        self.token = self.one("SELECT bc_join.create_join_token(%s, %s, uses => 100000, ttl => '1 day')",
                              (self.tenant, self.pool))
        # one node whose key signs the proofs of renewals and sessions
        self.node_key, der = new_csr()
        r = json.loads(self.one("SELECT bc_join(%s::jsonb)::text", (json.dumps(self.join_doc(self.node_key, der)),)))
        assert r["status"] == "issued", r
        self.node_id = json.loads(b64u_dec(r["response"].split(".")[1]))["nodeId"]
        self.serial = self.live_serial()

    def one(self, sql, args=()):
        with self.conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchone()[0]

    def seal(self, csr_sha):
        t = jwe.JWE(self.token.encode(), protected=json.dumps(
            {"alg": "ECDH-ES", "enc": "A256GCM", "csrSha256": csr_sha}))
        t.add_recipient(self.enc)
        return t.serialize(compact=True)

    def join_doc(self, key=None, der=None):
        if key is None:
            key, der = new_csr()
        sha = b64u(hashlib.sha256(der).digest())
        return {"csr": b64u(der), "role": "node", "attestor": "join-token",
                "sealedToken": self.seal(sha),
                "claims": {"hostname": "h%d" % rng.randrange(10 ** 6), "arch": "x86_64",
                           "macs": ["00:11:22:33:44:55"], "gpuUuids": [], "serial": "S1",
                           "productUuid": "u"}}

    def proof_doc(self, purpose):
        key, der = new_csr()
        p = {"purpose": purpose, "serial": self.serial,
             "csrSha256": b64u(hashlib.sha256(der).digest()), "iat": int(time.time())}
        if purpose == "session":
            p["session"] = "s%d" % rng.randrange(100)
            p["context"] = "c"
        return {"csr": b64u(der), "proof": jws_es256(self.node_key, p)}, key

    def ssh_doc(self):
        """An issue_ssh_host_cert request (#47) for one Ed25519 host key, proven by the node key."""
        if not hasattr(self, "ssh_blob"):
            raw = ed25519.Ed25519PrivateKey.generate().public_key().public_bytes(
                serialization.Encoding.Raw, serialization.PublicFormat.Raw)
            self.ssh_blob = struct.pack(">I", 11) + b"ssh-ed25519" + struct.pack(">I", 32) + raw
        p = {"purpose": "ssh-host", "serial": self.serial, "iat": int(time.time()),
             "sshKeySha256": b64u(hashlib.sha256(self.ssh_blob).digest()), "hostname": "h.fuzz.example"}
        return {"sshPublicKey": base64.b64encode(self.ssh_blob).decode(),
                "proof": jws_es256(self.node_key, p)}, None

    def live_serial(self):
        return self.one("SELECT serial FROM bc_join.node_certs WHERE node_id = %s AND revoked_at IS NULL "
                        "ORDER BY issued_at DESC LIMIT 1", (self.node_id,))

    def renewed(self, key):
        """A renewal was issued: the new key and serial sign the next proofs."""
        self.node_key = key
        self.serial = self.live_serial()


def deep(n, leaf='"x"'):
    return "[" * n + leaf + "]" * n


def mutate(doc, fields):
    """One mutated text of doc (a dict), and what was done."""
    text = json.dumps(doc)
    k = rng.randrange(16)
    f = rng.choice(fields)
    if k == 0:
        return text, "unmutated"
    if k == 1:  # bit flips, ASCII only (a psycopg2 parameter is text)
        b = bytearray(text.encode())
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(7)
            if b[i] == 0:
                b[i] = 0x20
        return b.decode(), "bit flips"
    if k == 2:
        return text[:rng.randrange(len(text))], "truncated"
    if k == 3:
        d = dict(doc)
        d[f] = rng.choice([0, -1, 1.5, True, None, [], {}, [d.get(f)], {"a": d.get(f)}, "", 2 ** 64])
        return json.dumps(d), "wrong type of " + f
    if k == 4:
        return text.replace(json.dumps(doc[f]), rng.choice(["1e1000000", "-1e1000000", "1" * 5000,
                                                            "0." + "0" * 5000 + "1", "1e-1000000"]), 1), \
            "huge number as " + f
    if k == 5:
        d = dict(doc)
        return json.dumps(d).replace(json.dumps(d[f]), deep(rng.choice([100, 1000, 30000])), 1), "deep " + f
    if k == 6:
        return deep(30000, text), "30000-deep request"
    if k == 7:  # a string field at its bound and one past
        bound = {"csr": CSR_B64_MAX, "attestation": ATTESTATION_B64_MAX, "sealedToken": SEALED_TOKEN_MAX,
                 "attestor": ATTESTOR_ID_MAX, "proof": PROOF_MAX, "role": 16}.get(f, 256)
        d = dict(doc)
        d[f] = rng.choice("Aa_-") * (bound + rng.choice([0, 1]))
        return json.dumps(d), "%s at its bound (+0/+1)" % f
    if k == 8 and "claims" in doc:
        d = json.loads(text)
        c = rng.choice(["hostname", "serial", "productUuid", "arch", "macs", "gpuUuids"])
        if c in ("macs", "gpuUuids"):
            d["claims"][c] = ["x"] * (CLAIM_ARRAY_MAX + rng.choice([0, 1]))
        else:
            d["claims"][c] = "h" * (CLAIM_STRING_MAX + rng.choice([0, 1]))
        return json.dumps(d), "claim %s at its bound (+0/+1)" % c
    if k == 9:  # the whole request at 64 KiB and one past
        pad = REQUEST_MAX - len(text) - len(',"zz":""') + rng.choice([0, 1])
        return text[:-1] + ',"zz":"' + "p" * max(pad, 0) + '"}', "request at 64 KiB (+0/+1)"
    if k == 10:
        return text[:-1] + ', %s: %s}' % (json.dumps(f), json.dumps(doc[f])), "duplicate " + f
    if k == 11:
        return text[:-1] + ', "%s": 1}' % rng.choice(["x", "CSR", "csr ", "__proto__", "role\\u0000"]), \
            "unknown member"
    if k == 12:
        d = dict(doc)
        if isinstance(d[f], str) and d[f]:
            i = rng.randrange(len(d[f]))
            return json.dumps(d).replace(json.dumps(d[f]), '"' + d[f][:i] + "\\u0000" + d[f][i:] + '"', 1), \
                "NUL escape in " + f
        return text.replace('"' + f + '"', '"' + f + '\\u0000"', 1), "NUL escape in a key"
    if k == 13:
        return rng.choice(['[]', '"x"', '1', 'null', 'true', '{}', '[' + text + ']', '{"": ""}',
                           '"\\ud800"', '{"csr": "\\udfff"}']), "not a request"
    if k == 14:  # a valid base64url of a mutated value (CSR, token, proof)
        d = dict(doc)
        if isinstance(d.get(f), str):
            try:
                raw = bytearray(b64u_dec(d[f].split(".")[0]))
                if raw:
                    raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
                    d[f] = b64u(bytes(raw)) + d[f][len(d[f].split(".")[0]):]
            except Exception:
                pass
        return json.dumps(d), "mutated bytes of " + f
    d = dict(doc)
    del d[f]
    return json.dumps(d), "without " + f


def log_tail(path, offset):
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def main():
    tap = Tap()
    log = os.environ.get("BCJ_SERVER_LOG", "")
    log_off = os.path.getsize(log) if log and os.path.exists(log) else 0
    admin = connect("postgres")
    with admin.cursor() as cur:
        cur.execute("SET client_min_messages = warning")
        cur.execute("DROP DATABASE IF EXISTS " + DB)
        cur.execute("CREATE DATABASE " + DB)
    admin.close()
    conn = connect(DB)
    with conn.cursor() as cur:
        cur.execute("CREATE EXTENSION bc_join")
    w = World(conn)

    funcs = [("public.bc_join", lambda: (w.join_doc(), None),
              ["csr", "role", "attestor", "sealedToken", "claims"]),
             ("bc_join.renew", lambda: w.proof_doc("renew"), ["csr", "proof"]),
             ("bc_join.issue_session", lambda: w.proof_doc("session"), ["csr", "proof"]),
             ("bc_join.issue_ssh_host_cert", w.ssh_doc, ["sshPublicKey", "proof"])]
    # #47: the pool's SSH rule, so that a valid host certificate request is issued
    w.one("SELECT bc_join.allow_ssh_names(%s, 'host', ARRAY['*.fuzz.example'])", (w.tenant,))
    w.one("SELECT bc_join.set_ssh_settings(%s, host_principals => ARRAY['{hostname}'], "
          "host_hostname_patterns => ARRAY['*.fuzz.example'])", (w.pool,))
    seen = {}
    seen_fn = {}
    bad = []
    lost = 0
    done = 0
    start = time.time()
    for i in range(N):
        if time.time() - start > SECONDS:
            break
        fn, make, fields = funcs[0] if i % 6 < 2 else funcs[1] if i % 6 < 4 else funcs[2] if i % 6 < 5 \
            else funcs[3]
        doc, key = make()
        text, what = mutate(doc, fields)
        try:
            with conn.cursor() as cur:
                try:
                    cur.execute("SELECT %s::jsonb IS NOT NULL", (text,))
                except psycopg2.Error as e:
                    outcome = "cast " + str(e.pgcode)
                    if e.pgcode not in CAST_OK:
                        bad.append((fn, what, outcome, text[:200], str(e)[:200]))
                    seen[outcome] = seen.get(outcome, 0) + 1
                    done += 1
                    continue
                try:
                    cur.execute("SELECT %s(%%s::jsonb)::text" % fn, (text,))
                    r = json.loads(cur.fetchone()[0])
                    outcome = "status " + str(r.get("status"))
                    if r.get("status") == "issued":
                        if fn == "bc_join.renew":
                            w.renewed(key)
                    elif r != REFUSAL:
                        bad.append((fn, what, outcome, text[:200], json.dumps(r)[:200]))
                except psycopg2.Error as e:
                    outcome = "raised " + str(e.pgcode)
                    if e.pgcode not in FUNC_OK:
                        bad.append((fn, what, outcome, text[:200], str(e)[:300]))
                seen[outcome] = seen.get(outcome, 0) + 1
                per = fn.split(".")[-1] + " " + outcome
                seen_fn[per] = seen_fn.get(per, 0) + 1
                done += 1
        except (psycopg2.OperationalError, psycopg2.InterfaceError) as e:
            lost += 1
            bad.append((fn, what, "connection lost", text[:200], str(e)[:200]))
            time.sleep(1)
            conn = connect(DB)
            w.conn = conn
    secs = time.time() - start
    tap.note("%d requests in %.1f s: %s" % (done, secs, ", ".join("%s %d" % kv for kv in sorted(seen.items()))))
    tap.ok(done >= min(N, 1000), "at least %d mutated requests ran (%d)" % (min(N, 1000), done))
    tap.ok(not bad, "every answer is issued, the one refusal, 22023 or 0A000 (or a jsonb cast error)",
           "\n".join(repr(b) for b in bad[:15]))
    tap.ok(lost == 0, "no connection was lost")
    tail = log_tail(log, log_off) if log else ""
    crashes = [l for l in tail.splitlines()
               if re.search(r"terminated by signal|exited with exit code [1-9]|PANIC|was terminated by exception", l)]
    if log:
        tap.ok(not crashes, "no backend was ended by a signal (server log)", "\n".join(crashes[:10]))
    else:
        tap.skip("no backend was ended by a signal", "BCJ_SERVER_LOG is not set")
    tap.note("function answers: " + ", ".join("%s %d" % kv for kv in sorted(seen_fn.items())))
    for f in ("bc_join", "renew", "issue_session", "issue_ssh_host_cert"):
        tap.ok(seen_fn.get(f + " status issued", 0) > 0,
               "some %s requests were issued (the generator makes valid ones)" % f)
    for name, sql in invariants():
        n = w.one(sql)
        tap.eq(n, 0, name)
    conn.close()
    sys.exit(tap.done())


def invariants():
    """(name, a query counting the violations) of the consistency invariants."""
    return [
        ("no node without a certificate",
         "SELECT count(*) FROM bc_join.nodes n WHERE NOT EXISTS "
         "(SELECT 1 FROM bc_join.node_certs c WHERE c.node_id = n.id)"),
        ("no certificate without its node",
         "SELECT count(*) FROM bc_join.node_certs c WHERE NOT EXISTS "
         "(SELECT 1 FROM bc_join.nodes n WHERE n.id = c.node_id)"),
        ("every token's spent uses equal its joins",
         "SELECT count(*) FROM bc_join.join_tokens t WHERE t.uses_total - t.uses_left <> "
         "(SELECT count(*) FROM bc_join.events e WHERE e.type = 'node.joined' "
         "AND e.payload->>'tokenId' = t.id)"),
        ("no node without its node.joined event",
         "SELECT count(*) FROM bc_join.nodes n WHERE NOT EXISTS (SELECT 1 FROM bc_join.events e "
         "WHERE e.type = 'node.joined' AND e.payload->>'nodeId' = n.id)"),
        ("no node without its audit row",
         "SELECT count(*) FROM bc_join.nodes n WHERE NOT EXISTS (SELECT 1 FROM bc_join.audit_log a "
         "WHERE a.node_id = n.id AND a.action IN ('node.join', 'node.reclaim'))"),
        ("at most one live certificate per node",
         "SELECT count(*) FROM (SELECT node_id FROM bc_join.node_certs WHERE revoked_at IS NULL "
         "AND not_after > now() GROUP BY node_id HAVING count(*) > 1) x"),
    ]


if __name__ == "__main__":
    main()
