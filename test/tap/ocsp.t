#!/usr/bin/python3
"""ocsp.t: bc_join.ocsp_response() answering requests `openssl ocsp` makes,
checked by two clients nobody here wrote: `openssl ocsp -respin` (verifies
the signature and the delegated responder against the root and the
intermediate, the nonce against the request) and python3-cryptography's
OCSP parser (Debian 12's, under /usr/bin/python3).

Shows: certificates issued with bc_join.ocsp_url carry it as their
authorityInfoAccess OCSP URI; SHA-1 and SHA-256 CertIDs, with and without a
nonce (echoed), two certificates in one request answered in order; good,
then revoked with bc_join.revoke_certificate's time and reason; unknown
for a serial never issued, for a real serial under another CA's issuer
and for a request whose issuer hash was tampered with; malformedRequest
(unsigned) for garbage, a request whose DER was tampered with and one of
17 CertIDs; nextUpdate bc_join.ocsp_validity on; the responder certificate
(EKU OCSPSigning only, ocsp-nocheck, 24 h, issued by the intermediate);
the gateway role's call in a read-only transaction; bc_join.ocsp_url
refuses a URL with a space and, empty, writes no authorityInfoAccess; after
--rotate-intermediate a certificate of the old intermediate is still
answered (by the new responder, new ocsp.key) and one of the new verifies;
without ocsp.key INVALID_CONFIG naming bc-join-keygen --add-ocsp-key, which
puts it right.  Its own cluster (bctest.ClusterEnv).
"""
import datetime
import hashlib
import importlib.machinery
import json
import os
import re
import subprocess
import sys

import psycopg2
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509 import ocsp
from cryptography.x509.oid import AuthorityInformationAccessOID, ExtendedKeyUsageOID, ExtensionOID

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from bctest import TOP, ClusterEnv, run  # noqa: E402

fz = importlib.machinery.SourceFileLoader(
    "sql_fuzz", os.path.join(os.path.dirname(os.path.abspath(__file__)), "sql_fuzz.t")).load_module()

DB = "bcj_ocsp"
URL = "http://gw.example.test/v1/ocsp"


def setup(env):
    env.start_cluster("ocsp")


def body(tap, env):
    d = env.dir
    sql = env.connect(DB)
    conn, one = sql.conn, sql.one

    def refused(setting, value):
        """The SQLSTATE with which set_config(setting, value) is refused; 'accepted' when it is not."""
        try:
            one("SELECT set_config(%s, %s, false)", setting, value)
            return "accepted"
        except psycopg2.Error as e:
            return e.pgcode

    def pem(path, der):
        with open(path, "wb") as f:
            f.write(x509.load_der_x509_certificate(der).public_bytes(serialization.Encoding.PEM))
        return path

    def certs_of(path):
        with open(path, "rb") as f:
            return x509.load_pem_x509_certificates(f.read()) if hasattr(x509, "load_pem_x509_certificates") \
                else [x509.load_pem_x509_certificate(b"-----BEGIN" + c) for c in f.read().split(b"-----BEGIN")[1:]]

    def request(name, *args):
        path = os.path.join(d, name + ".req")
        r = subprocess.run(["openssl", "ocsp"] + list(args) + ["-reqout", path],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise RuntimeError("openssl ocsp %s: %s" % (" ".join(args), r.stderr))
        with open(path, "rb") as f:
            return path, f.read()

    def answer(der):
        return bytes(one("SELECT bc_join.ocsp_response(%s)", psycopg2.Binary(der)))

    def openssl_check(name, reqpath, resp, cafile, verify=True):
        """openssl ocsp's verdict on resp (the request's nonce checked): (verified, statuses, text);
        verify=False: read only (-noverify)."""
        rp = os.path.join(d, name + ".resp")
        with open(rp, "wb") as f:
            f.write(resp)
        args = ["openssl", "ocsp", "-respin", rp, "-CAfile", cafile, "-resp_text"]
        if reqpath:
            args += ["-reqin", reqpath]
        if not verify:
            args += ["-noverify"]
        r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out = r.stdout
        ok = r.returncode == 0 and (not verify or "Response verify OK" in out) and \
            "nonce" not in out.lower().replace("ocsp nonce:", "")
        return ok, re.findall(r"Cert Status: (\w+)", out), out

    # -- certificates issued with bc_join.ocsp_url set ------------------------------------
    one("SELECT set_config('bc_join.ocsp_url', %s, false)", URL)
    w = fz.World(conn)              # a node joins: its certificate
    node_serial = w.serial
    doc, _ = w.proof_doc("session")
    r = json.loads(one("SELECT bc_join.issue_session(%s::jsonb)::text", json.dumps(doc)))
    tap.eq(r.get("status"), "issued", "a session certificate is issued", r)
    ses_serial = one("SELECT serial FROM bc_join.session_certs ORDER BY issued_at DESC LIMIT 1")
    node2 = json.loads(one("SELECT bc_join(%s::jsonb)::text", json.dumps(w.join_doc())))
    node2_serial = one("SELECT serial FROM bc_join.node_certs WHERE serial <> %s ORDER BY issued_at DESC LIMIT 1",
                       node_serial)
    tap.eq(node2.get("status"), "issued", "a second node joins")
    node_der = bytes(one("SELECT certificate FROM bc_join.node_certs WHERE serial = %s", node_serial))
    ses_der = bytes(one("SELECT certificate FROM bc_join.session_certs WHERE serial = %s", ses_serial))
    node2_der = bytes(one("SELECT certificate FROM bc_join.node_certs WHERE serial = %s", node2_serial))

    def aia(der):
        try:
            ext = x509.load_der_x509_certificate(der).extensions.get_extension_for_oid(
                ExtensionOID.AUTHORITY_INFORMATION_ACCESS)
        except x509.ExtensionNotFound:
            return None
        return [(a.access_method, a.access_location.value) for a in ext.value]

    tap.eq(aia(node_der), [(AuthorityInformationAccessOID.OCSP, URL)],
           "the node certificate names bc_join.ocsp_url as its OCSP responder")
    tap.eq(aia(ses_der), [(AuthorityInformationAccessOID.OCSP, URL)],
           "and so does the session certificate")

    chain = certs_of(os.path.join(env.keys, "node-ca.crt"))
    inter, root = chain[0], chain[-1]
    issuer = pem(os.path.join(d, "issuer.pem"), inter.public_bytes(serialization.Encoding.DER))
    cafile = os.path.join(d, "ca.pem")
    with open(cafile, "wb") as f:
        f.write(b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chain))
    node_pem = pem(os.path.join(d, "node.pem"), node_der)
    ses_pem = pem(os.path.join(d, "session.pem"), ses_der)
    node2_pem = pem(os.path.join(d, "node2.pem"), node2_der)

    # -- good: SHA-1 with a nonce, SHA-256 without, two in one request ---------------------
    q1, q1der = request("sha1", "-issuer", issuer, "-cert", node_pem)
    a1 = answer(q1der)
    ok, st, out = openssl_check("sha1", q1, a1, cafile)
    tap.ok(ok and st == ["good"], "openssl: SHA-1 CertID with a nonce: verify OK, good, the nonce matches", out)
    p1 = ocsp.load_der_ocsp_response(a1)
    req1 = ocsp.load_der_ocsp_request(q1der)
    def nonce(exts):
        try:
            return exts.get_extension_for_class(x509.OCSPNonce).value.nonce
        except x509.ExtensionNotFound:
            return None
    nonce_req = nonce(req1.extensions)
    nonce_resp = nonce(p1.extensions)
    tap.ok(p1.response_status == ocsp.OCSPResponseStatus.SUCCESSFUL and
           [s.certificate_status for s in p1.responses] == [ocsp.OCSPCertStatus.GOOD] and
           isinstance(p1.hash_algorithm, hashes.SHA1) and p1.serial_number == int(node_serial, 16) and
           p1.issuer_key_hash == req1.issuer_key_hash and nonce_req and nonce_resp == nonce_req,
           "python3-cryptography: successful, good, the SHA-1 CertID and the nonce echoed")
    tap.eq(p1.next_update - p1.this_update, datetime.timedelta(seconds=300),
           "nextUpdate is thisUpdate + bc_join.ocsp_validity (300 s by default)")

    q2, q2der = request("sha256", "-issuer", issuer, "-sha256", "-cert", node_pem, "-no_nonce")
    a2 = answer(q2der)
    ok, st, out = openssl_check("sha256", q2, a2, cafile)
    tap.ok(ok and st == ["good"], "openssl: SHA-256 CertID without a nonce: verify OK, good", out)
    p2 = ocsp.load_der_ocsp_response(a2)
    tap.ok(isinstance(p2.hash_algorithm, hashes.SHA256) and
           p2.issuer_key_hash == ocsp.load_der_ocsp_request(q2der).issuer_key_hash and
           len(p2.extensions) == 0,
           "python3-cryptography: the SHA-256 CertID echoed, no nonce in the answer")

    q3, q3der = request("two", "-issuer", issuer, "-cert", node_pem, "-cert", ses_pem)
    a3 = answer(q3der)
    ok, st, out = openssl_check("two", q3, a3, cafile)
    tap.ok(ok and st == ["good", "good"], "openssl: two certificates in one request, both good", out)
    p3 = ocsp.load_der_ocsp_response(a3)
    tap.eq([s.serial_number for s in p3.responses], [int(node_serial, 16), int(ses_serial, 16)],
           "python3-cryptography: one answer per CertID, in request order")

    # -- the responder and its certificate ----------------------------------------------
    rc = p1.certificates[0] if p1.certificates else None
    eku = rc.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value if rc else None
    ku = rc.extensions.get_extension_for_class(x509.KeyUsage) if rc else None
    nocheck = rc.extensions.get_extension_for_class(x509.OCSPNoCheck) if rc else None
    tap.ok(rc is not None and len(p1.certificates) == 2 and p1.certificates[1] == inter and
           rc.subject.rfc4514_string() == "CN=bc_join OCSP responder" and
           list(eku) == [ExtendedKeyUsageOID.OCSP_SIGNING] and ku.critical and ku.value.digital_signature and
           not nocheck.critical and rc.issuer == inter.subject and
           rc.not_valid_after - rc.not_valid_before == datetime.timedelta(hours=24),
           "the responder certificate: CN, EKU OCSPSigning only, digitalSignature, ocsp-nocheck, 24 h, "
           "the intermediate's, and the intermediate after it in certs", rc and rc.public_bytes(serialization.Encoding.PEM).decode())
    try:
        inter.public_key().verify(rc.signature, rc.tbs_certificate_bytes, ec.ECDSA(rc.signature_hash_algorithm))
        rc.public_key().verify(p1.signature, p1.tbs_response_bytes, ec.ECDSA(p1.signature_hash_algorithm))
        sig_ok = True
    except Exception as e:  # InvalidSignature
        sig_ok = repr(e)
    key_bits = rc.public_key().public_bytes(serialization.Encoding.X962,
                                            serialization.PublicFormat.UncompressedPoint)
    tap.ok(sig_ok is True and p1.responder_key_hash == hashlib.sha1(key_bits).digest() and
           p1.responder_name is None,
           "python3-cryptography: signed by the responder (byKey), whose certificate the intermediate signed",
           sig_ok)

    # -- unknown, malformed --------------------------------------------------------------
    other_key = os.path.join(d, "other.key")
    other = os.path.join(d, "other.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-keyout", other_key, "-subj", "/CN=another CA", "-days", "1", "-out", other],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    q4, q4der = request("unknown", "-issuer", issuer, "-serial", "0x" + os.urandom(16).hex(), "-no_nonce")
    ok, st, out = openssl_check("unknown", q4, answer(q4der), cafile)
    tap.ok(ok and st == ["unknown"], "a serial never issued: unknown", out)
    # (a strict client such as openssl does not take our responder's word for another
    # CA's CertID: "root ca not trusted"; the status is read without verifying)
    q5, q5der = request("other", "-issuer", other, "-serial", "0x" + node_serial, "-no_nonce")
    ok, st, out = openssl_check("other", q5, answer(q5der), cafile, verify=False)
    tap.ok(ok and st == ["unknown"], "a real serial under another CA's issuer: unknown", out)
    t = bytearray(q2der)
    i = t.index(ocsp.load_der_ocsp_request(q2der).issuer_key_hash)
    t[i] ^= 0x01
    ok, st, out = openssl_check("tampered-hash", None, answer(bytes(t)), cafile, verify=False)
    tap.ok(ok and st == ["unknown"], "a request whose issuer key hash was tampered with: unknown", out)

    def malformed(name, der):
        a = answer(der)
        rp = os.path.join(d, name + ".resp")
        with open(rp, "wb") as f:
            f.write(a)
        r = subprocess.run(["openssl", "ocsp", "-respin", rp, "-resp_text", "-noverify"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        p = ocsp.load_der_ocsp_response(a)
        return ("malformedrequest (1)" in r.stdout.lower() and
                p.response_status == ocsp.OCSPResponseStatus.MALFORMED_REQUEST and len(a) < 16), r.stdout

    ok, out = malformed("garbage", b"not an OCSP request")
    tap.ok(ok, "garbage: malformedRequest, unsigned (openssl and python3-cryptography)", out)
    t = bytearray(q1der)
    t[1] ^= 0x04                    # the outer SEQUENCE's length
    ok, out = malformed("tampered", bytes(t))
    tap.ok(ok, "a request whose DER was tampered with: malformedRequest", out)
    _, q17 = request("seventeen", "-issuer", issuer, "-no_nonce",
                     *sum([["-serial", str(i + 1)] for i in range(17)], []))
    ok, out = malformed("seventeen", q17)
    tap.ok(ok, "17 CertIDs (over 16): malformedRequest", out)

    # -- revoked ---------------------------------------------------------------------------
    one("SELECT bc_join.revoke_certificate(%s, 'keyCompromise')", node_serial)
    at = one("SELECT revoked_at FROM bc_join.node_certs WHERE serial = %s", node_serial)
    a6 = answer(q3der)
    ok, st, out = openssl_check("revoked", q3, a6, cafile)
    tap.ok(ok and st == ["revoked", "revoked"] and out.count("Revocation Reason: keyCompromise") == 2,
           "openssl: after revoke_certificate the node certificate and its session certificate: "
           "revoked, keyCompromise", out)
    p6 = ocsp.load_der_ocsp_response(a6)
    want = at.astimezone(datetime.timezone.utc).replace(tzinfo=None, microsecond=0)
    tap.ok(all(s.certificate_status == ocsp.OCSPCertStatus.REVOKED and
               s.revocation_reason == x509.ReasonFlags.key_compromise and s.revocation_time == want
               for s in p6.responses),
           "python3-cryptography: revoked at revoked_at, reason keyCompromise",
           [(s.certificate_status, s.revocation_reason, s.revocation_time, want) for s in p6.responses])

    # -- the gateway's role, read only; the validity setting -----------------------------
    gw = psycopg2.connect(host=env.pgenv["PGHOST"], port=env.pgenv["PGPORT"], user="gw_login", dbname=DB)
    gw.set_session(readonly=True)
    gcur = gw.cursor()
    gcur.execute("SELECT bc_join.ocsp_response(%s), current_setting('transaction_read_only')",
                 (psycopg2.Binary(q2der),))
    a7, ro = gcur.fetchone()
    gw.rollback()
    gw.close()
    tap.ok(ro == "on" and [s.certificate_status for s in ocsp.load_der_ocsp_response(bytes(a7)).responses]
           == [ocsp.OCSPCertStatus.REVOKED], "bc_join_gateway answers in a read-only transaction")
    one("SELECT set_config('bc_join.ocsp_validity', '60', false)")
    p8 = ocsp.load_der_ocsp_response(answer(q2der))
    tap.eq(p8.next_update - p8.this_update, datetime.timedelta(seconds=60), "bc_join.ocsp_validity = 60: nextUpdate 60 s on")
    tap.eq(refused("bc_join.ocsp_validity", "5"), "22023", "bc_join.ocsp_validity below 10 s is refused")
    one("SELECT set_config('bc_join.ocsp_validity', '300', false)")

    # -- a rotated intermediate ------------------------------------------------------------
    subprocess.run([os.path.join(TOP, "tools/bc-join-keygen"), "--rotate-intermediate", env.keys,
                    "--root-dir", env.keys + ".root"], check=True, stdout=subprocess.DEVNULL)
    new_inter = certs_of(os.path.join(env.keys, "node-ca.crt"))[0]
    q9, q9der = request("old-ca", "-issuer", issuer, "-sha256", "-cert", node2_pem)
    p9 = ocsp.load_der_ocsp_response(answer(q9der))
    rc9 = p9.certificates[0]
    try:
        new_inter.public_key().verify(rc9.signature, rc9.tbs_certificate_bytes, ec.ECDSA(hashes.SHA256()))
        rc9.public_key().verify(p9.signature, p9.tbs_response_bytes, ec.ECDSA(hashes.SHA256()))
        sig9 = True
    except Exception as e:
        sig9 = repr(e)
    tap.ok(sig9 is True and [s.certificate_status for s in p9.responses] == [ocsp.OCSPCertStatus.GOOD] and
           rc9.issuer == new_inter.subject and p9.responder_key_hash != p1.responder_key_hash and
           len(p9.certificates) == 2 and p9.certificates[1] == new_inter,
           "after --rotate-intermediate: the old intermediate's certificate is good, signed by a new "
           "responder (new ocsp.key) the new intermediate issued, which the answer carries (bcd, holding "
           "the root and the old intermediate, builds the responder's chain with it)", sig9)
    tap.eq(refused("bc_join.ocsp_url", "http://bad url/"), "22023", "bc_join.ocsp_url with a space is refused")
    one("SELECT set_config('bc_join.ocsp_url', '', false)")
    node3 = json.loads(one("SELECT bc_join(%s::jsonb)::text", json.dumps(w.join_doc())))
    node3_der = bytes(one("SELECT certificate FROM bc_join.node_certs ORDER BY issued_at DESC LIMIT 1"))
    tap.eq(aia(node3_der), None, "with bc_join.ocsp_url empty a certificate has no authorityInfoAccess")
    issuer2 = pem(os.path.join(d, "issuer2.pem"), new_inter.public_bytes(serialization.Encoding.DER))
    cafile2 = os.path.join(d, "ca2.pem")
    with open(cafile2, "wb") as f:
        f.write(new_inter.public_bytes(serialization.Encoding.PEM) + root.public_bytes(serialization.Encoding.PEM))
    q10, q10der = request("new-ca", "-issuer", issuer2, "-cert", pem(os.path.join(d, "node3.pem"), node3_der))
    ok, st, out = openssl_check("new-ca", q10, answer(q10der), cafile2)
    tap.ok(node3.get("status") == "issued" and ok and st == ["good"],
           "openssl: a certificate of the new intermediate: verify OK, good", out)

    # -- without ocsp.key ----------------------------------------------------------------
    os.rename(os.path.join(env.keys, "ocsp.key"), os.path.join(d, "ocsp.key.away"))
    try:
        answer(q2der)
        err = ("answered", "")
    except psycopg2.Error as e:
        err = (e.pgcode, e.diag.message_detail or "")
    tap.ok(err[0] == "F0000" and "bc-join-keygen --add-ocsp-key" in err[1],
           "without ocsp.key: INVALID_CONFIG naming bc-join-keygen --add-ocsp-key", err)
    subprocess.run([os.path.join(TOP, "tools/bc-join-keygen"), "--add-ocsp-key", env.keys], check=True,
                   stdout=subprocess.DEVNULL)
    p11 = ocsp.load_der_ocsp_response(answer(q2der))
    tap.ok(p11.response_status == ocsp.OCSPResponseStatus.SUCCESSFUL and
           p11.responder_key_hash not in (p1.responder_key_hash, p9.responder_key_hash),
           "bc-join-keygen --add-ocsp-key puts it right: answered with the new key")


run(ClusterEnv("/tmp/bcj-ocsp.", DB, "ocsp.bc-join.local"), setup, body)
