#!/usr/bin/python3
"""ocsp_verify.t: what bcd takes as news of a revocation (src/agent/core/revcheck.c, run on
files by build/ocsp-verify; docs/agent.md, "Revocation"), against answers and CRLs nobody
here wrote: OCSP answers made by the openssl CLI's index.txt responder (`openssl ocsp
-index -reqin -respout`) to the very request bcd sends, CRLs made by python3-cryptography.
No server; seconds.

- the request: one SHA-256 CertID, no nonce (openssl ocsp -reqin -req_text);
- good, revoked (keyCompromise, cACompromise) and unknown answers of a delegated responder
  (id-kp-OCSPSigning, OCSP No Check) issued by the node CA: taken, with the reason;
- refused: a signer without id-kp-OCSPSigning, a responder of another root (the same
  names), a flipped signature byte, an answer about another certificate, an answer older
  than one taken before (a replay), garbage, an unsigned tryLater;
- CRLs: one signed by the node CA taken (and the leaf found on it with its reason); one of
  another CA with the node CA's name, one with a flipped byte, one with bytes after it:
  refused.
"""
import datetime
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from bctest import TOP, Tap  # noqa: E402

TOOL = os.environ.get("BCJ_OCSP_VERIFY", os.path.join(TOP, "build/ocsp-verify"))


def sh(*args):
    """Run a command; CompletedProcess with text output."""
    return subprocess.run(list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def openssl(*args):
    """The openssl CLI; raise on failure."""
    r = sh("openssl", *args)
    if r.returncode != 0:
        raise RuntimeError("openssl %s: %s" % (" ".join(args), r.stdout))
    return r.stdout


class PKI:
    """Certificates made by the openssl CLI in d."""

    def __init__(self, d):
        self.d = d

    def p(self, name):
        return os.path.join(self.d, name)

    def make(self, name, issuer, ext, subj=None):
        """A P-256 key and certificate name (issuer None: self-signed) with ext lines."""
        e = self.p(name + ".ext")
        with open(e, "w") as f:
            f.write(ext)
        subj = subj or "/CN=" + name
        if issuer is None:
            openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-days", "2", "-subj", subj, "-keyout", self.p(name + ".key"),
                    "-out", self.p(name + ".pem"), "-extensions", "x", "-config", self.cnf(ext))
            return
        openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-subj", subj, "-keyout", self.p(name + ".key"), "-out", self.p(name + ".csr"))
        openssl("x509", "-req", "-in", self.p(name + ".csr"), "-CA", self.p(issuer + ".pem"),
                "-CAkey", self.p(issuer + ".key"), "-set_serial", str(int.from_bytes(os.urandom(8), "big")),
                "-days", "2", "-extfile", e, "-out", self.p(name + ".pem"))

    def cnf(self, ext):
        """A config with [x] = ext, for req -x509."""
        c = self.p("req-%d.cnf" % abs(hash(ext)))
        with open(c, "w") as f:
            f.write("[req]\ndistinguished_name=dn\n[dn]\n[x]\n" + ext)
        return c

    def serial(self, name):
        return openssl("x509", "-in", self.p(name + ".pem"), "-noout", "-serial").strip().split("=")[1]

    def subject(self, name):
        return openssl("x509", "-in", self.p(name + ".pem"), "-noout", "-subject",
                       "-nameopt", "compat").strip().split("=", 1)[1].strip()


CA = "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n"
LEAF = "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
RSP = ("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
       "extendedKeyUsage=OCSPSigning\n1.3.6.1.5.5.7.48.1.5=ASN1:NULL\n")
NO_EKU = "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"


def body(tap, d):
    k = PKI(d)
    k.make("root", None, CA, "/CN=bc_join test root")
    k.make("inter", "root", CA, "/CN=bc_join test node CA")
    for leaf in ("good", "revoked", "cacomp", "stranger"):
        k.make(leaf, "inter", LEAF)
    k.make("rsp", "inter", RSP)
    k.make("noeku", "inter", NO_EKU)
    # another root with the same names: its node CA and responder look alike
    k.make("root2", None, CA, "/CN=bc_join test root")
    k.make("inter2", "root2", CA, "/CN=bc_join test node CA")
    k.make("rsp2", "inter2", RSP)
    with open(k.p("cas.pem"), "w") as f:  # what bcd passes: its chain after the leaf
        f.write(open(k.p("inter.pem")).read())
    exp = (datetime.datetime.utcnow() + datetime.timedelta(days=2)).strftime("%y%m%d%H%M%SZ")
    rev = (datetime.datetime.utcnow() - datetime.timedelta(minutes=5)).strftime("%y%m%d%H%M%SZ")
    with open(k.p("index.txt"), "w") as f:
        f.write("V\t%s\t\t%s\tunknown\t%s\n" % (exp, k.serial("good"), k.subject("good")))
        f.write("R\t%s\t%s,keyCompromise\t%s\tunknown\t%s\n" % (exp, rev, k.serial("revoked"),
                                                                 k.subject("revoked")))
        f.write("R\t%s\t%s,CACompromise\t%s\tunknown\t%s\n" % (exp, rev, k.serial("cacomp"),
                                                                k.subject("cacomp")))

    def request(leaf):
        out = k.p(leaf + ".req")
        r = sh(TOOL, "request", k.p(leaf + ".pem"), k.p("inter.pem"), out)
        return out if r.returncode == 0 else None

    def respond(leaf, signer="rsp", ca="inter", extra=()):
        out = k.p("%s-%s.resp" % (leaf, signer))
        openssl("ocsp", "-index", k.p("index.txt"), "-rsigner", k.p(signer + ".pem"),
                "-rkey", k.p(signer + ".key"), "-CA", k.p(ca + ".pem"), "-reqin", request(leaf),
                "-respout", out, "-ndays", "1", "-resp_key_id", *extra)
        return out

    def verify(resp, leaf, newest=None):
        args = [TOOL, "response", resp, k.p(leaf + ".pem"), k.p("inter.pem"), k.p("root.pem"),
                k.p("cas.pem")] + ([str(newest)] if newest is not None else [])
        r = sh(*args)
        return r.returncode, r.stdout

    req = request("good")
    t = sh("openssl", "ocsp", "-reqin", req, "-req_text").stdout
    tap.ok("Hash Algorithm: sha256" in t and "Nonce" not in t and t.count("Certificate ID:") == 1,
           "the request: one SHA-256 CertID, no nonce", t)

    good_resp = k.p("good-first.resp")
    shutil.copy(respond("good"), good_resp)
    rc, out = verify(good_resp, "good")
    tap.ok(rc == 0 and out.startswith("good"), "openssl's responder says good: taken", out)
    this_update = int(out.split("thisUpdate ")[1]) if rc == 0 else 0
    rc, out = verify(respond("revoked"), "revoked")
    tap.ok(rc == 0 and out.startswith("revoked keyCompromise"), "revoked, keyCompromise: taken", out)
    rc, out = verify(respond("cacomp"), "cacomp")
    tap.ok(rc == 0 and out.startswith("revoked cACompromise"), "revoked, cACompromise: taken", out)
    rc, out = verify(respond("stranger"), "stranger")
    tap.ok(rc == 0 and out.startswith("unknown"), "a serial the responder does not know: unknown", out)

    rc, out = verify(respond("good", "noeku"), "good")
    tap.ok(rc == 1 and "id-kp-OCSPSigning" in out,
           "a signer of the node CA without id-kp-OCSPSigning: refused", out)
    rc, out = verify(respond("good", "rsp2", "inter"), "good")
    tap.ok(rc == 1 and "pinned root" in out,
           "a responder of another root with the same names: refused", out)
    good = open(respond("good"), "rb").read()
    flipped = k.p("flipped.resp")
    from cryptography.x509 import ocsp
    sig = ocsp.load_der_ocsp_response(good).signature  # located by a parser, flipped by us
    i = good.find(sig) + len(sig) // 2
    with open(flipped, "wb") as f:
        f.write(good[:i] + bytes([good[i] ^ 1]) + good[i + 1:])
    rc, out = verify(flipped, "good")
    tap.ok(rc == 1 and "signature" in out, "a flipped byte in the signature: refused", out)
    rc, out = verify(respond("good"), "stranger")
    tap.ok(rc == 1 and "CertID" in out, "an answer about another certificate: refused", out)
    rc, out = verify(good_resp, "good", this_update + 1)
    tap.ok(rc == 1 and "replay" in out, "an answer older than one taken before: refused", out)
    rc, out = verify(good_resp, "good", this_update)
    tap.ok(rc == 0, "an answer as new as the one taken before: taken", out)
    with open(k.p("garbage.resp"), "wb") as f:
        f.write(os.urandom(200))
    rc, out = verify(k.p("garbage.resp"), "good")
    tap.ok(rc == 1 and "not one DER OCSP response" in out, "garbage: refused", out)
    with open(k.p("trylater.resp"), "wb") as f:
        f.write(bytes.fromhex("30030a0103"))  # OCSPResponse { responseStatus tryLater }
    rc, out = verify(k.p("trylater.resp"), "good")
    tap.ok(rc == 1 and "trylater" in out.lower(), "an unsigned tryLater: refused", out)
    with open(k.p("trailing.resp"), "wb") as f:
        f.write(good + b"\x00")
    rc, out = verify(k.p("trailing.resp"), "good")
    tap.ok(rc == 1, "an answer with a byte after it: refused", out)

    # CRLs (python3-cryptography: Debian's /usr/bin/python3)
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import NameOID  # noqa: F401

    def crl(issuer):
        key = serialization.load_pem_private_key(open(k.p(issuer + ".key"), "rb").read(), None)
        ca = x509.load_pem_x509_certificate(open(k.p(issuer + ".pem"), "rb").read())
        leaf = x509.load_pem_x509_certificate(open(k.p("revoked.pem"), "rb").read())
        now = datetime.datetime.utcnow()
        entry = (x509.RevokedCertificateBuilder().serial_number(leaf.serial_number)
                 .revocation_date(now).add_extension(x509.CRLReason(x509.ReasonFlags.key_compromise),
                                                     False).build())
        b = (x509.CertificateRevocationListBuilder().issuer_name(ca.subject)
             .last_update(now).next_update(now + datetime.timedelta(hours=1))
             .add_revoked_certificate(entry))
        der = b.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.DER)
        return der

    def crl_verify(der, name):
        path = k.p(name + ".crl")
        with open(path, "wb") as f:
            f.write(der)
        r = sh(TOOL, "crl", path, k.p("root.pem"), k.p("cas.pem"), k.p("revoked.pem"))
        return r.returncode, r.stdout

    ours = crl("inter")
    rc, out = crl_verify(ours, "ours")
    tap.ok(rc == 0 and "listed keyCompromise" in out,
           "a CRL of the node CA: taken, the revoked leaf on it with its reason", out)
    rc, out = crl_verify(crl("inter2"), "theirs")
    tap.ok(rc == 1, "a CRL of another root's CA with the node CA's name: refused", out)
    rc, out = crl_verify(ours[:-3] + bytes([ours[-3] ^ 1]) + ours[-2:], "flipped")
    tap.ok(rc == 1, "a CRL with a flipped signature byte: refused", out)
    rc, out = crl_verify(ours + b"\x00", "trailing")
    tap.ok(rc == 1 and "not one DER CRL" in out, "a CRL with a byte after it: refused", out)


tap = Tap()
d = tempfile.mkdtemp(prefix="bcj-ocsp-")
try:
    body(tap, d)
except Exception:  # report
    import traceback
    tap.ok(False, "script ran to the end", traceback.format_exc())
finally:
    if not os.environ.get("BCJ_KEEP"):
        shutil.rmtree(d, ignore_errors=True)
sys.exit(tap.done())
