#!/usr/bin/python3
"""ca_compromise.t: a compromised intermediate is recoverable (issue 45, point 4;
docs/operator.md, "A compromised CA key").

Shows, with the real gateway and bcd on a cluster of its own: a node joined
(join token) under intermediate A, with a session certificate; after
bc-join-keygen --rotate-intermediate (B) and bc_join.mark_ca_compromised(A):
both certificates are revoked cACompromise, listed in revoked_certificates
and in the CRL, A is recorded (compromised_cas), audited and evented; marking
B (the current one) is refused; the node's renewal with the same key is
refused (renew:same-key); bcd renew --once (proven by the old key, a new
key) gets a certificate issued by B; a second renewal from the old
certificate is refused (renew:superseded); a certificate revoked
cACompromise by an operator under B stays refused (renew:revoked); whoever
holds A's key gets nothing: a certificate they mint with openssl, with the
serial of the real one and a key of their own (its proof: renew:proof,
session:proof; x509pop: x509pop:unknown-certificate), or with a fresh serial
(renew:unknown-certificate); the real revoked certificate reclaims nothing
(x509pop:revoked); a key directory put back to A issues nothing
(INVALID_CONFIG); pg_dump keeps the records.  Then a compromised service
signing key (bc_join.mark_key_compromised): the current one refused, the
previous one marked, published, signing and verifying no more, and a key
directory whose current key is the marked one signs nothing.
"""
import base64
import datetime
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.abspath(os.path.join(HERE, "..", ".."))
# bcd without the sanitizers unless told (test/agent runs the ASan build).
os.environ.setdefault("BCJ_BCD", os.path.join(TOP, "build/bcd"))
sys.path.insert(0, os.path.join(HERE, "..", "agent"))
import agentlib  # noqa: E402

import psycopg2  # noqa: E402
from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def jws_es256(key, payload):
    head = b64u(json.dumps({"alg": "ES256"}).encode())
    body = b64u(json.dumps(payload, separators=(",", ":")).encode())
    r, s = decode_dss_signature(key.sign((head + "." + body).encode(), ec.ECDSA(hashes.SHA256())))
    return head + "." + body + "." + b64u(r.to_bytes(32, "big") + s.to_bytes(32, "big"))


def csr_der(key):
    return x509.CertificateSigningRequestBuilder().subject_name(x509.Name([])).sign(
        key, hashes.SHA256()).public_bytes(serialization.Encoding.DER)


def request(proof_key, serial, new_key, purpose="renew"):
    """A RenewRequest (or session request) proven by proof_key for serial, asking for new_key."""
    der = csr_der(new_key)
    p = {"purpose": purpose, "serial": serial, "csrSha256": b64u(hashlib.sha256(der).digest()),
         "iat": int(time.time())}
    if purpose == "session":
        p.update({"session": "s1", "context": "c1"})
    return json.dumps({"csr": b64u(der), "proof": jws_es256(proof_key, p)})


def load_key(path):
    with open(path, "rb") as f:
        return serialization.load_pem_private_key(f.read(), None)


def load_cert(path):
    with open(path, "rb") as f:
        return x509.load_pem_x509_certificate(f.read())


def body(tap, env):
    conn = psycopg2.connect(host=env.pgenv["PGHOST"], port=env.pgenv["PGPORT"],
                            user=env.pgenv["PGUSER"], dbname=env.db)
    conn.autocommit = True
    cur = conn.cursor()

    def one(sql, *args):
        cur.execute(sql, args)
        return cur.fetchone()[0]

    def refusal():
        return one("SELECT payload->>'refusal' FROM bc_join.events WHERE type = 'security.join.refused' "
                   "ORDER BY id DESC LIMIT 1")

    def call(fn, doc):
        r = one("SELECT %s(%%s::jsonb)" % fn, doc)
        return r.get("status"), (refusal() if r.get("status") == "refused" else None)

    def sql_error(sql, *args):
        try:
            cur.execute(sql, args)
            return None
        except psycopg2.Error as e:
            return e.pgcode, e.diag.message_primary or "", e.diag.message_hint or ""

    # -- a node under intermediate A, and a session certificate ------------------------------
    state = os.path.join(env.dir, "state")
    r = env.bcd("run", *env.run_args(state, token_file=env.token_file("a"), extra=["--once"]))
    tap.ok(r.returncode == 0 and r.stdout.startswith("spiffe://"), "the node joined (join token)",
           r.stdout + r.stderr)
    node_key = load_key(os.path.join(state, "node.key"))
    old = load_cert(os.path.join(state, "node-chain.pem"))
    serial = "%032x" % old.serial_number
    a_pem = open(os.path.join(env.keys, "node-ca.crt")).read().split("-----END CERTIFICATE-----")[0] \
        + "-----END CERTIFICATE-----\n"
    a_cert = x509.load_pem_x509_certificate(a_pem.encode())
    # What an attacker holding A's key has (the rotation below removes it from the directory).
    a_key_path = os.path.join(env.dir, "stolen-a.key")
    shutil.copy2(os.path.join(env.keys, "node-ca.key"), a_key_path)
    a_key = load_key(a_key_path)
    status, _ = call("bc_join.issue_session", request(node_key, serial, ec.generate_private_key(ec.SECP256R1()),
                                                      "session"))
    session_serial = one("SELECT serial FROM bc_join.session_certs WHERE node_serial = %s", serial)
    tap.ok(status == "issued" and session_serial, "a session certificate under A", status)

    # -- rotate to B; B cannot be marked; A can -------------------------------------------------
    subprocess.run([os.path.join(TOP, "tools/bc-join-keygen"), "--rotate-intermediate", env.keys,
                    "--root-dir", env.keys + ".root"],
                   check=True, stdout=subprocess.DEVNULL)
    b_pem = one("SELECT bc_join.node_ca_certificate()")
    b_cert = x509.load_pem_x509_certificate(b_pem.encode())
    tap.ok(b_cert.subject != a_cert.subject, "the intermediate rotated: B has a name of its own")
    got = sql_error("SELECT bc_join.mark_ca_compromised(%s)", b_pem)
    tap.ok(got is not None and got[0] == "55000" and "current issuing CA" in got[1]
           and "--rotate-intermediate" in got[2], "marking B, the current issuing CA, is refused", got)
    root_pem = open(os.path.join(env.keys + ".root", "root.crt")).read()
    got = sql_error("SELECT bc_join.mark_ca_compromised(%s)", root_pem)
    tap.ok(got is not None and got[0] == "55000", "so is marking the root of the current chain", got)
    got = sql_error("SELECT bc_join.mark_ca_compromised(%s)", "not a certificate")
    tap.ok(got is not None and got[0] == "22023", "and something that is no certificate (22023)", got)
    tap.eq(one("SELECT has_function_privilege('bc_join_tenant_operator', "
               "'bc_join.mark_ca_compromised(text)', 'EXECUTE')"), False,
           "a tenant operator cannot mark a CA (the operator's alone)")

    cur.execute("LISTEN bc_join_crl")
    n = one("SELECT bc_join.mark_ca_compromised(%s)", a_pem)
    tap.eq(n, 2, "marking A revokes its node and its session certificate: 2")
    conn.poll()
    tap.ok(any(x.channel == "bc_join_crl" for x in conn.notifies), "NOTIFY bc_join_crl")
    cur.execute("SELECT serial, kind, reason FROM bc_join.revoked_certificates ORDER BY kind")
    tap.eq(cur.fetchall(), [(serial, "node", "cACompromise"), (session_serial, "session", "cACompromise")],
           "both are listed in revoked_certificates, cACompromise")
    crl = subprocess.run(["openssl", "crl", "-inform", "DER", "-noout", "-text"],
                         input=bytes(one("SELECT bc_join.crl()")), capture_output=True).stdout.decode()
    listed = {int(x, 16) for x in re.findall(r"Serial Number: ([0-9A-F]+)", crl)}
    tap.ok(listed == {int(serial, 16), int(session_serial, 16)} and crl.count("CA Compromise") == 2,
           "the CRL lists both, reason CA Compromise", crl)
    cur.execute("SELECT subject, node_certificates, session_certificates FROM bc_join.compromised_cas")
    rows = cur.fetchall()
    tap.ok(len(rows) == 1 and "CN" in rows[0][0] and rows[0][1:] == (1, 1),
           "A is recorded in compromised_cas with what it revoked", rows)
    tap.eq(one("SELECT detail->>'nodeCertificates' || '/' || (detail->>'sessionCertificates') FROM bc_join.audit_log "
               "WHERE action = 'ca.compromised'"), "1/1", "an audit row ca.compromised")
    tap.eq(one("SELECT count(*) FROM bc_join.events WHERE type = 'ca.compromised' AND tenant_id IN (%s, 'root')",
               env.tenant), 2, "an event in the node's tenant and one in root")
    tap.eq(one("SELECT bc_join.mark_ca_compromised(%s)", a_pem), 0, "marking A again revokes nothing more")

    # -- whoever holds A's key gets nothing ----------------------------------------------------
    spiffe = old.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.UniformResourceIdentifier)[0]
    with open(os.path.join(env.dir, "a.pem"), "w") as f:
        f.write(a_pem)
    with open(os.path.join(env.dir, "forge.ext"), "w") as f:
        f.write("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                "subjectAltName=URI:%s\nauthorityKeyIdentifier=keyid:always\n" % spiffe)

    def forge(serial_int, name):
        """A node certificate minted with A's key by openssl, for a key of the attacker's own."""
        key, csr, crt = (os.path.join(env.dir, name + x) for x in (".key", ".csr", ".crt"))
        env.openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-subj", "/CN=" + old.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value,
                    "-keyout", key, "-out", csr)
        env.openssl("x509", "-req", "-in", csr, "-CA", os.path.join(env.dir, "a.pem"), "-CAkey", a_key_path,
                    "-set_serial", "0x%032x" % serial_int, "-days", "1", "-extfile",
                    os.path.join(env.dir, "forge.ext"), "-out", crt)
        return load_key(key), load_cert(crt)
    mine, forged = forge(old.serial_number, "forged")
    v = subprocess.run(["openssl", "verify", "-partial_chain", "-CAfile", os.path.join(env.dir, "a.pem"),
                        os.path.join(env.dir, "forged.crt")], capture_output=True)
    tap.ok(v.returncode == 0, "a certificate minted with A's key, the real serial, another key verifies under A",
           v.stdout + v.stderr)
    tap.eq(call("bc_join.renew", request(mine, serial, ec.generate_private_key(ec.SECP256R1()))),
           ("refused", "renew:proof"), "its renewal gets nothing (renew:proof)")
    tap.eq(call("bc_join.issue_session", request(mine, serial, ec.generate_private_key(ec.SECP256R1()), "session")),
           ("refused", "session:proof"), "nor a session (session:proof)")
    fresh_key, fresh = forge(int.from_bytes(os.urandom(16), "big") >> 1, "fresh")
    tap.eq(call("bc_join.renew", request(fresh_key, "%032x" % fresh.serial_number,
                                         ec.generate_private_key(ec.SECP256R1()))),
           ("refused", "renew:unknown-certificate"), "one with a fresh serial: renew:unknown-certificate")

    def x509pop(key, chain):
        """An x509pop JoinRequest reclaiming the node with chain[0], signed by key."""
        der = csr_der(ec.generate_private_key(ec.SECP256R1()))
        head = b64u(json.dumps({"alg": "ES256", "x5c": [base64.b64encode(
            c.public_bytes(serialization.Encoding.DER)).decode() for c in chain]}).encode())
        body = b64u(json.dumps({"purpose": "x509pop", "nodeId": spiffe.rsplit("/", 1)[1],
                                "csrSha256": b64u(hashlib.sha256(der).digest()), "iat": int(time.time())}).encode())
        r, s_ = decode_dss_signature(key.sign((head + "." + body).encode(), ec.ECDSA(hashes.SHA256())))
        jws = head + "." + body + "." + b64u(r.to_bytes(32, "big") + s_.to_bytes(32, "big"))
        return json.dumps({"csr": b64u(der), "role": "node", "attestor": "x509pop", "attestation": b64u(jws.encode())})
    tap.eq(call("bc_join", x509pop(mine, [forged, a_cert])), ("refused", "x509pop:unknown-certificate"),
           "x509pop with it (it chains to the root through A): x509pop:unknown-certificate")
    tap.eq(call("bc_join", x509pop(fresh_key, [fresh, a_cert])), ("refused", "x509pop:unknown-certificate"),
           "and with the fresh serial")
    tap.eq(call("bc_join", x509pop(node_key, [old, a_cert])), ("refused", "x509pop:revoked"),
           "the node's own revoked certificate reclaims nothing either (x509pop:revoked)")

    # -- the one renewal: a new key, from B ----------------------------------------------------
    tap.eq(call("bc_join.renew", request(node_key, serial, node_key)), ("refused", "renew:same-key"),
           "the renewal of the revoked certificate with the same key is refused (renew:same-key)")
    r = env.bcd("renew", "--once", *env.run_args(state))
    new = load_cert(os.path.join(state, "node-chain.pem"))
    tap.ok(r.returncode == 0 and new.serial_number != old.serial_number, "bcd renew --once renews it",
           r.stdout + r.stderr)
    tap.eq(new.issuer, b_cert.subject, "the new certificate is issued by B")
    tap.ok(new.public_key().public_numbers() != old.public_key().public_numbers(), "for a new key")
    tap.eq(one("SELECT successor FROM bc_join.compromise_renewals WHERE serial = %s", serial),
           "%032x" % new.serial_number, "the renewal is recorded (compromise_renewals)")
    tap.eq(one("SELECT revocation_reason FROM bc_join.node_certs WHERE serial = %s", serial), "cACompromise",
           "the old certificate stays revoked cACompromise")
    tap.eq(call("bc_join.renew", request(node_key, serial, ec.generate_private_key(ec.SECP256R1()))),
           ("refused", "renew:superseded"), "a second renewal from the old certificate is refused (superseded)")
    # docs/operator.md's query: of the nodes the marking revoked, how many are back (under B)
    cur.execute("""
        SELECT count(DISTINCT r.node_id) AS revoked,
               count(DISTINCT r.node_id) FILTER (WHERE EXISTS (
                   SELECT 1 FROM bc_join.node_certs l
                   WHERE l.node_id = r.node_id AND l.revoked_at IS NULL
                     AND l.not_after > bc_join.compute_now() AND l.issued_at >= m.marked_at)) AS back,
               max(cr.renewed_at) - m.marked_at AS slowest_so_far
        FROM bc_join.compromised_cas m
        JOIN bc_join.node_certs r ON r.revoked_at = m.marked_at AND r.revocation_reason = 'cACompromise'
        LEFT JOIN bc_join.compromise_renewals cr ON cr.serial = r.serial
        GROUP BY m.subject, m.marked_at""")
    watch = cur.fetchall()
    tap.ok(len(watch) == 1 and watch[0][:2] == (1, 1) and watch[0][2] is not None,
           "the operator's watch query: 1 node revoked, 1 back under B", watch)
    new_key = load_key(os.path.join(state, "node.key"))
    status, _ = call("bc_join.issue_session", request(new_key, "%032x" % new.serial_number,
                                                      ec.generate_private_key(ec.SECP256R1()), "session"))
    tap.eq(status, "issued", "the new certificate asks for sessions")

    # -- a key directory put back to A issues nothing ----------------------------------------
    ca_key, crt = os.path.join(env.keys, "node-ca.key"), os.path.join(env.keys, "node-ca.crt")
    saved = {p: (open(p).read(), os.stat(p)) for p in (ca_key, crt)}
    chain_b = saved[crt][0]
    root_tail = chain_b[chain_b.index("-----END CERTIFICATE-----") + len("-----END CERTIFICATE-----\n"):]

    def put(path, data):
        st = saved[path][1]
        tmp = os.path.join(env.keys, ".ca-compromise.tmp")
        with open(tmp, "w") as f:
            f.write(data)
        os.chmod(tmp, st.st_mode & 0o777)
        os.chown(tmp, st.st_uid, st.st_gid)
        os.rename(tmp, path)
    put(ca_key, open(a_key_path).read())
    put(crt, a_pem + root_tail)
    time.sleep(0.2)
    before = one("SELECT count(*) FROM bc_join.session_certs")
    got = sql_error("SELECT bc_join.issue_session(%s::jsonb)",
                    request(new_key, "%032x" % new.serial_number, ec.generate_private_key(ec.SECP256R1()), "session"))
    tap.ok(got is not None and got[0] == "F0000" and "marked compromised" in got[1]
           and one("SELECT count(*) FROM bc_join.session_certs") == before,
           "a key directory put back to A issues nothing: INVALID_CONFIG naming the compromise", got)
    put(crt, saved[crt][0])
    put(ca_key, saved[ca_key][0])
    time.sleep(0.2)

    # -- any other revoked certificate stays refused -------------------------------------------
    one("SELECT bc_join.revoke_certificate(%s, 'cACompromise')", "%032x" % new.serial_number)
    tap.eq(call("bc_join.renew", request(new_key, "%032x" % new.serial_number,
                                         ec.generate_private_key(ec.SECP256R1()))),
           ("refused", "renew:revoked"), "a certificate of B revoked cACompromise by an operator: renew:revoked")

    # -- a compromised service signing key ---------------------------------------------------
    def kids():
        return [k["kid"] for k in one("SELECT bc_join.service_keys()")["signingKeys"]]

    def keygen(*args):
        subprocess.run([os.path.join(TOP, "tools/bc-join-keygen")] + list(args), check=True,
                       stdout=subprocess.DEVNULL)
    kid0 = kids()[0]
    anchor = one("SELECT bc_join.audit_anchor()")
    keygen("--stage", env.keys)
    keygen("--promote", env.keys)
    kid1 = kids()[0]
    tap.ok(kid1 != kid0 and kids() == [kid1, kid0], "--promote: a new current signing key, the old one previous")
    got = sql_error("SELECT bc_join.mark_key_compromised(%s)", kid1)
    tap.ok(got is not None and got[0] == "55000" and "current signing key" in got[1] and "--promote" in got[2],
           "marking the current signing key is refused", got)
    got = sql_error("SELECT bc_join.mark_key_compromised(%s)", "not a kid")
    tap.ok(got is not None and got[0] == "22023", "a kid that is no RFC 7638 thumbprint: 22023", got)
    tap.ok(sql_error("SELECT bc_join.audit_anchor_payload(%s)", anchor) is None,
           "an audit anchor signed by the previous key verifies before the marking")
    tap.eq(one("SELECT bc_join.mark_key_compromised(%s)", kid0), True, "the previous key is marked compromised")
    tap.eq(one("SELECT bc_join.mark_key_compromised(%s)", kid0), False, "marking it again: false")
    tap.eq(kids(), [kid1], "service_keys() publishes it no more")
    signed = one("SELECT bc_join.signed_service_keys()")["keys"]
    heads = [json.loads(base64.urlsafe_b64decode(t.split(".")[0] + "==")) for t in signed]
    doc = json.loads(base64.urlsafe_b64decode(signed[0].split(".")[1] + "==")) if signed else {}
    tap.ok([h.get("kid") for h in heads] == [kid1] and [k["kid"] for k in doc.get("signingKeys", [])] == [kid1],
           "signed_service_keys(): signed by the current key alone, listing it alone", heads)
    got = sql_error("SELECT bc_join.audit_anchor_payload(%s)", anchor)
    tap.ok(got is not None and got[0] == "22023", "the anchor it signed verifies no more", got)
    tap.eq(one("SELECT count(*) FROM bc_join.audit_log WHERE action = 'signing_key.compromised' "
               "AND detail->>'kid' = %s AND (detail->>'held')::boolean", kid0), 1,
           "an audit row signing_key.compromised (held: true)")
    tap.eq(one("SELECT count(*) FROM bc_join.events WHERE type = 'signing_key.compromised' AND tenant_id = 'root'"),
           1, "and an event in root")
    # The marked key made current again (a directory restored): nothing signs with it.
    cur_path, prev_path = os.path.join(env.keys, "signing.key"), os.path.join(env.keys, "signing.previous.key")
    tmp = os.path.join(env.keys, ".swap")
    os.rename(cur_path, tmp)
    os.rename(prev_path, cur_path)
    os.rename(tmp, prev_path)
    time.sleep(0.2)
    got = sql_error("SELECT bc_join.service_keys()")
    jr = env.bcd("join-request", "--service-keys", env.service_keys, "--token", env.token(),
                 "--out-dir", os.path.join(env.dir, "jr")).stdout.strip()
    got2 = sql_error("SELECT bc_join(%s::jsonb)", jr)
    got3 = sql_error("SELECT bc_join.audit_anchor()")
    tap.ok(all(g is not None and g[0] == "F0000" and "marked compromised" in g[1] for g in (got, got2, got3)),
           "a key directory whose current signing key is the marked one signs nothing "
           "(service_keys(), a join's answer, an audit anchor: INVALID_CONFIG)", (got, got2, got3))
    os.rename(cur_path, tmp)
    os.rename(prev_path, cur_path)
    os.rename(tmp, prev_path)
    time.sleep(0.2)
    tap.eq(kids(), [kid1], "put right: the current key signs again")

    # -- a dump keeps the record (pg_dump dumps the rows of an extension's table only when it is marked)
    envv = dict(os.environ)
    envv.update(env.pgenv)
    dump = subprocess.run(["pg_dump", "--data-only", "-t", "bc_join.compromised_cas", "-t",
                           "bc_join.compromise_renewals", "-t", "bc_join.compromised_keys", "-d", env.db],
                          env=envv, capture_output=True, text=True)
    copied = {}
    for block in dump.stdout.split("\nCOPY ")[1:]:
        copied[block.split(" ", 1)[0]] = len(block.split("\n\\.")[0].splitlines()) - 1
    tap.eq(copied, {"bc_join.compromised_cas": 1, "bc_join.compromise_renewals": 1, "bc_join.compromised_keys": 1},
           "pg_dump keeps the rows of compromised_cas, compromise_renewals and compromised_keys", dump.stderr)
    conn.close()


if __name__ == "__main__":
    agentlib.main(body)
