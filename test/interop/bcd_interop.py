#!/usr/bin/python3
"""bcd_interop.py: bcd join-request and verify-response against an implementation
nobody here wrote (jwcrypto, python-cryptography).  The sealed token bcd makes is
opened by jwcrypto; responses signed by jwcrypto with certificates made by
python-cryptography are verified by bcd, and every forged, mis-bound or tampered
one is refused with nothing written.  Usage: bcd_interop.py PATH/TO/bcd
"""
import base64, datetime, hashlib, json, os, stat, subprocess, sys, tempfile
from jwcrypto import jwk, jws, jwe
from jwcrypto.common import json_encode
from cryptography import x509
from cryptography.x509.oid import NameOID, ExtendedKeyUsageOID
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

BCD = os.path.abspath(sys.argv[1])
T = tempfile.mkdtemp()
fails = 0
checks = 0
def ok(name, cond):
    global fails, checks
    checks += 1
    print(("PASS " if cond else "FAIL ") + name)
    if not cond: fails += 1
def b64u(b): return base64.urlsafe_b64encode(b).rstrip(b"=").decode()
def run(*args, stdin=None):
    p = subprocess.run([BCD] + list(args), input=stdin, capture_output=True)
    return p.returncode, p.stdout.decode(), p.stderr.decode()

def make_ca(cn):
    k = ec.generate_private_key(ec.SECP256R1())
    n = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = datetime.datetime.now(datetime.timezone.utc)
    c = (x509.CertificateBuilder().subject_name(n).issuer_name(n).public_key(k.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
         .not_valid_after(now + datetime.timedelta(days=30))
         .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
         .add_extension(x509.KeyUsage(False,False,False,False,False,True,True,False,False), critical=True)
         .add_extension(x509.SubjectKeyIdentifier.from_public_key(k.public_key()), critical=False)
         .sign(k, hashes.SHA256()))
    return k, c
ca_key, ca = make_ca("node CA")
other_ca_key, other_ca = make_ca("node CA")
sig = jwk.JWK.generate(kty="EC", crv="P-256")
enc = jwk.JWK.generate(kty="EC", crv="P-256")
sk = {"trustDomain": "example.org", "signingKey": sig.export_public(as_dict=True),
      "encryptionKey": enc.export_public(as_dict=True),
      "nodeCa": ca.public_bytes(serialization.Encoding.PEM).decode()}
skf = os.path.join(T, "sk.json"); open(skf, "w").write(json.dumps(sk))
D = os.path.join(T, "node")

rc, out, err = run("--help"); ok("bcd --help", rc == 0 and "join-request" in out)
rc, out, err = run("join-request", "--help"); ok("join-request --help", rc == 0 and "--service-keys" in out)
rc, out, err = run("join-request", "--service-keys", skf); ok("join-request usage error", rc == 64)
rc, out, err = run("join-request", "--service-keys", skf, "--token", "bcjt_abc", "--out-dir", D, "--hostname", "h1")
ok("join-request exit 0", rc == 0); print(err)
req = json.loads(out)
ok("request members", list(req) == ["csr", "role", "attestor", "sealedToken", "claims"])
ok("defaults", req["role"] == "node" and req["attestor"] == "join-token" and req["claims"]["hostname"] == "h1" and "arch" in req["claims"])
csr_der = open(os.path.join(D, "node.csr.der"), "rb").read()
ok("csr matches file", base64.urlsafe_b64decode(req["csr"] + "=" * (-len(req["csr"]) % 4)) == csr_der)
ok("dir 0700", stat.S_IMODE(os.stat(D).st_mode) == 0o700)
ok("key 0600", stat.S_IMODE(os.stat(os.path.join(D, "node.key")).st_mode) == 0o600)
t = jwe.JWE(); t.deserialize(req["sealedToken"], key=enc)
h = json.loads(t.objects["protected"])
csr_sha = b64u(hashlib.sha256(csr_der).digest())
ok("sealed token opens", t.payload == b"bcjt_abc" and h["csrSha256"] == csr_sha)
csr = x509.load_der_x509_csr(csr_der)
ok("csr signature valid", csr.is_signature_valid)

# token file + claims
tf = os.path.join(T, "tok"); open(tf, "w").write("bcjt_file\n")
D2 = os.path.join(T, "node2")
rc, out, err = run("join-request", "--service-keys", skf, "--token-file", tf, "--out-dir", D2, "--claims", '{"serial":"x"}', "--role", "ramdisk", "--attestor", "tpm")
r2 = json.loads(out); t = jwe.JWE(); t.deserialize(r2["sealedToken"], key=enc)
ok("token file newline stripped, claims replaced", rc == 0 and t.payload == b"bcjt_file" and r2["claims"] == {"serial": "x"} and r2["role"] == "ramdisk" and r2["attestor"] == "tpm")
rc, out, err = run("join-request", "--service-keys", skf, "--token", "x", "--out-dir", D2, "--claims", '[1]')
ok("claims non-object refused", rc == 1)
rc, out, err = run("join-request", "--service-keys", skf, "--token", "x", "--out-dir", D2, "--role", "admin")
ok("bad role refused", rc == 64)

def cert_for(pub, signer_key, signer, uri="spiffe://example.org/tenant/t1/node/n1"):
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(x509.Name([])).issuer_name(signer.subject)
            .public_key(pub).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1)).not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(uri)]), critical=True)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer_key.public_key()), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(pub), critical=False)
            .sign(signer_key, hashes.SHA256()))
def der64(c): return base64.b64encode(c.public_bytes(serialization.Encoding.DER)).decode()
def response(payload, key=sig, outer=True):
    s = jws.JWS(json.dumps(payload).encode()); s.add_signature(key, alg="ES256", protected=json_encode({"alg": "ES256"}))
    c = s.serialize(compact=True)
    return json.dumps({"status": payload.get("status"), "response": c}) if outer else c
leaf = cert_for(csr.public_key(), ca_key, ca)
base = {"status": "issued", "csrSha256": csr_sha, "issuedAt": "now", "nodeId": "n1", "tenantId": "t1", "role": "node",
        "certificateChain": [der64(leaf), der64(ca)], "notAfter": "2030-01-01T00:00:00Z"}
rf = os.path.join(T, "resp.json")
chain = os.path.join(D, "node-chain.pem")
def verify(resp, stdin=False):
    if os.path.exists(chain): os.unlink(chain)
    if stdin: return run("verify-response", "--service-keys", skf, "--dir", D, "--response", "-", stdin=resp.encode())
    open(rf, "w").write(resp)
    return run("verify-response", "--service-keys", skf, "--dir", D, "--response", rf)
rc, out, err = verify(response(base))
ok("issued accepted", rc == 0 and out == "spiffe://example.org/tenant/t1/node/n1\n2030-01-01T00:00:00Z\n"); print(err)
ok("chain written 0644", os.path.exists(chain) and stat.S_IMODE(os.stat(chain).st_mode) == 0o644)
p = subprocess.run(["openssl", "verify", "-CAfile", "/dev/stdin", chain], input=ca.public_bytes(serialization.Encoding.PEM), capture_output=True)
ok("openssl verify accepts node-chain.pem leaf", p.returncode == 0)
rc, out, err = verify(response(base, outer=False), stdin=True); ok("bare JWS on stdin accepted", rc == 0)
def bad(name, resp, code=1):
    rc, out, err = verify(resp)
    ok(name + " (rc %d: %s)" % (rc, err.strip()), rc == code and not os.path.exists(chain))
bad("wrong signing key", response(base, key=enc))
bad("other csrSha256", response(dict(base, csrSha256=b64u(b"x" * 32))))
other = ec.generate_private_key(ec.SECP256R1())
bad("cert for another key", response(dict(base, certificateChain=[der64(cert_for(other.public_key(), ca_key, ca))])))
bad("cert from another CA", response(dict(base, certificateChain=[der64(cert_for(csr.public_key(), other_ca_key, other_ca))])))
bad("SPIFFE ID of another node", response(dict(base, nodeId="n2")))
bad("other trust domain", response(dict(base, certificateChain=[der64(cert_for(csr.public_key(), ca_key, ca, "spiffe://evil.org/tenant/t1/node/n1"))])))
bad("bad base64 chain", response(dict(base, certificateChain=["!!!"])))
bad("tampered JWS", json.dumps({"status": "issued", "response": response(base, outer=False)[:-3] + "AAA"}))
bad("garbage", "not json")
rc, out, err = verify(response({"status": "pending", "csrSha256": csr_sha, "requestId": "r1", "retryAfterSeconds": 30}))
ok("pending exit 3", rc == 3 and out == "pending\nrequestId: r1\nretryAfterSeconds: 30\n" and not os.path.exists(chain))
rc, out, err = verify(response({"status": "challenge", "csrSha256": csr_sha, "challenge": "abc", "notAfter": "x"}))
ok("challenge exit 3", rc == 3 and out.startswith("challenge\nchallenge: abc\n"))
rc, out, err = verify(json.dumps({"status": "refused", "error": {"code": "ACCESS_DENIED", "message": "Join refused"}}))
ok("refused exit 2", rc == 2 and err == "refused: ACCESS_DENIED\n")
rc, out, err = run("verify-response", "--help"); ok("verify-response --help", rc == 0)
import shutil
shutil.rmtree(T, ignore_errors=True)
print(f"{checks - fails} passed, {fails} failed")
sys.exit(1 if fails else 0)
