#!/usr/bin/python3
"""x509pop.t: the built-in x509pop attestor, every refusal and both branches.

External PKIs (made here with python3-cryptography: chains, RSA 1024/2048
and a modulus over 8192 bits, P-384, P-521, a CA leaf, a leaf without
digitalSignature, five intermediates, an oversized certificate, PS256 with
a 20-byte salt) and the node CA's own certificates (a node joined by token,
its certificate expired by bc_join.clock_offset: within and beyond the
grace; revoked by an operator for each RFC 5280 reason, by serial and by
node, which never reclaims; superseded by the service's own reclaim;
retired; bound to a TPM).  The JWS is made by
hand here, and by python3-jwcrypto for ES256, ES384, RS256 and PS256
(interop).  Needs the environment test/run-all sets (PGHOST, PGPORT, BCJ_*)."""
import base64, datetime, hashlib, json, os, secrets, shutil, subprocess, sys, time
import psycopg2
from cryptography import x509
from cryptography.x509.oid import NameOID
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa, padding
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from jwcrypto import jwk, jws as jjws

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import bctest
tap = bctest.Tap()
ok, eq = tap.ok, tap.eq

bcd, keys = os.environ["BCJ_BCD"], os.environ["BCJ_SERVICE_KEYS"]
sdb = bctest.SharedDb("x509pop")
scratch, admin, db, c, one = sdb.scratch, sdb.admin, sdb.db, sdb.cur, sdb.one
t1, s1, p1 = sdb.tenant('t1')
t2, s2, p2 = sdb.tenant('t2')
offset = 0

def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()
def b64ud(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
def der(cert):
    return cert.public_bytes(serialization.Encoding.DER)
def pem(cert):
    return cert.public_bytes(serialization.Encoding.PEM).decode()

def new_csr():
    """A fresh P-256 key's CSR: (base64url DER, csrSha256)."""
    k = ec.generate_private_key(ec.SECP256R1())
    csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([])).sign(k, hashes.SHA256())
    d = csr.public_bytes(serialization.Encoding.DER)
    return b64u(d), b64u(hashlib.sha256(d).digest())

def cert(pub, cn, issuer=None, ikey=None, ca=False, ku=True, days=2, big=0, ku_value=None):
    """A certificate for public key pub, issued by (issuer, ikey) or self-signed (ikey then signs)."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = datetime.datetime.utcnow()
    b = (x509.CertificateBuilder().subject_name(name)
         .issuer_name(issuer.subject if issuer is not None else name)
         .public_key(pub).serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(minutes=5))
         .not_valid_after(now + datetime.timedelta(days=days))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ku:
        b = b.add_extension(x509.KeyUsage(
            digital_signature=not ca if ku_value is None else ku_value, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False,
            key_cert_sign=ca, crl_sign=ca, encipher_only=False, decipher_only=False), critical=True)
    b = b.add_extension(x509.SubjectKeyIdentifier.from_public_key(pub), critical=False)
    if issuer is not None:
        b = b.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.public_key()),
                            critical=False)
    if big:
        b = b.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("h%05d.example" % i) for i in range(big)]), critical=False)
    return b.sign(ikey, hashes.SHA256())

def sign(key, alg, data, salt=32):
    if alg in ("ES256", "ES384"):
        h, n = (hashes.SHA256(), 32) if alg == "ES256" else (hashes.SHA384(), 48)
        r, s = decode_dss_signature(key.sign(data, ec.ECDSA(h)))
        return r.to_bytes(n, "big") + s.to_bytes(n, "big")
    if alg == "RS256":
        return key.sign(data, padding.PKCS1v15(), hashes.SHA256())
    return key.sign(data, padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=salt),
                    hashes.SHA256())

def payload(csr_sha, node_id="", iat=None, purpose="x509pop"):
    return {"purpose": purpose, "nodeId": node_id, "csrSha256": csr_sha,
            "iat": int(time.time()) + offset if iat is None else iat}

def make_jws(key, alg, chain, body, header=None, salt=32, x5c=None):
    h = header if header is not None else {
        "alg": alg, "x5c": x5c if x5c is not None else [base64.b64encode(der(x)).decode() for x in chain]}
    hb = b64u(json.dumps(h, separators=(",", ":")).encode())
    pb = b64u(body if isinstance(body, bytes) else json.dumps(body).encode())
    si = hb + "." + pb
    return si + "." + b64u(sign(key, alg, si.encode(), salt))

def seal(token, csr_b64):
    """token sealed (by jwcrypto) to the service's encryption key for this CSR."""
    from jwcrypto import jwe
    from jwcrypto.common import json_encode
    with open(keys) as f:
        enc = json.load(f)["encryptionKey"]
    sha = b64u(hashlib.sha256(b64ud(csr_b64)).digest())
    e = jwe.JWE(token.encode(), protected=json_encode({"alg": "ECDH-ES", "enc": "A256GCM", "csrSha256": sha}))
    e.add_recipient(jwk.JWK(**enc))
    return e.serialize(compact=True)

def join(csr_b64, evidence, role="node", token=None):
    """One round; (status, nodeId or None, the refusal recorded or None)."""
    req = {"csr": csr_b64, "role": role, "attestor": "x509pop",
           "attestation": b64u(evidence.encode() if isinstance(evidence, str) else evidence)}
    if token is not None:
        req["sealedToken"] = seal(token, csr_b64)
    c.execute("SELECT max(id) FROM bc_join.events")
    before = c.fetchone()[0] or 0
    c.execute("SELECT bc_join(%s::jsonb)", (json.dumps(req),))
    r = c.fetchone()[0]
    if r["status"] == "issued":
        p = json.loads(b64ud(r["response"].split(".")[1]))
        return "issued", p["nodeId"], None
    c.execute("SELECT payload->>'refusal' FROM bc_join.events WHERE id > %s "
              "AND type = 'security.join.refused' ORDER BY id DESC LIMIT 1", (before,))
    row = c.fetchone()
    return r["status"], None, row[0] if row else None

def refused(name, want, csr_b64, evidence, role="node"):
    st, _, why = join(csr_b64, evidence, role)
    return eq((st, why), ("refused", want), name)

def ext_jws(key, alg, chain, **kw):
    csr, sha = new_csr()
    return csr, make_jws(key, alg, chain, payload(sha, **kw))

# -- an external PKI: root -> intermediate -> leaf, added for t1's pool
root_k = ec.generate_private_key(ec.SECP256R1())
root = cert(root_k.public_key(), "root A", ikey=root_k, ca=True, days=30)
inter_k = ec.generate_private_key(ec.SECP384R1())
inter = cert(inter_k.public_key(), "inter A", root, root_k, ca=True, days=30)
leaf_k = ec.generate_private_key(ec.SECP256R1())
leaf = cert(leaf_k.public_key(), "leaf", inter, inter_k)

def raises(sql, *args):
    try:
        c.execute(sql, args)
        return None
    except psycopg2.Error as e:
        return e.pgcode
eq(raises("SELECT bc_join.add_x509pop_root(%s, %s, %s)", pem(leaf), t1, p1), "22023",
   "add_x509pop_root: a leaf is no root")
eq(raises("SELECT bc_join.add_x509pop_root(%s, %s, %s)", pem(root) + pem(inter), t1, p1), "22023",
   "add_x509pop_root: one certificate at a time")
eq(raises("SELECT bc_join.add_x509pop_root(%s, %s, %s)", pem(root), t1, p2), "22023",
   "add_x509pop_root: the pool must be the tenant's")
eq(raises("SELECT bc_join.add_x509pop_root(%s, %s, %s)", "junk", t1, p1), "22023",
   "add_x509pop_root: not PEM")
rid = one("SELECT bc_join.add_x509pop_root(%s, %s, %s)", pem(root), t1, p1)
ok(rid.startswith("x5r_"), "add_x509pop_root returns the root's id")
eq(raises("SELECT bc_join.add_x509pop_root(%s, %s, %s)", pem(root), t2, p2), "22023",
   "add_x509pop_root: one root, one tenant")
root2_k = ec.generate_private_key(ec.SECP256R1())
root2 = cert(root2_k.public_key(), "root B", ikey=root2_k, ca=True, days=30)
one("SELECT bc_join.add_x509pop_root(%s, %s, %s)", pem(root2), t2, p2)

# -- the external branch: admitted to the root's tenant and pool, then the same key comes back
csr, j = ext_jws(leaf_k, "ES256", [leaf, inter])
st, node_a, _ = join(csr, j)
eq(st, "issued", "ES256 leaf through an intermediate to root A: admitted")
eq(one("SELECT tenant_id || ' ' || pool_id FROM bc_join.nodes WHERE id = %s", node_a), t1 + " " + p1,
   "into root A's tenant and pool")
csr, j = ext_jws(leaf_k, "ES256", [leaf, inter])
st, again, _ = join(csr, j)
ok(st == "issued" and again == node_a, "the bound leaf key comes back as its node", (st, again))
eq(one("SELECT identity_generation FROM bc_join.nodes WHERE id = %s", node_a), 2, "generation 2")
# A repeat presents the proof again: the same JWS, or a fresh one by the same leaf for this CSR.
uses0, log0 = one("SELECT count(*) FROM bc_join.attestation_uses"), one("SELECT count(*) FROM bc_join.audit_log")
st, rep, _ = join(csr, j)
ok(st == "issued" and rep == node_a, "the reclaim repeated with its JWS: answered", (st, rep))
sha_rep = b64u(hashlib.sha256(b64ud(csr)).digest())
st, rep, _ = join(csr, make_jws(leaf_k, "ES256", [leaf, inter], payload(sha_rep)))
ok(st == "issued" and rep == node_a, "and with a fresh proof by the same leaf: answered", (st, rep))
eq(one("SELECT identity_generation FROM bc_join.nodes WHERE id = %s", node_a), 2, "no new generation")
leaf2_k = ec.generate_private_key(ec.SECP256R1())
leaf2 = cert(leaf2_k.public_key(), "leaf 2", inter, inter_k)
refused("the same CSR with another leaf's valid proof: join:key-reused", "join:key-reused",
        csr, make_jws(leaf2_k, "ES256", [leaf2, inter], payload(sha_rep)))
refused("the same CSR without a proof: join:key-reused", "join:key-reused", csr, "not-a-jws")
eq((one("SELECT count(*) FROM bc_join.attestation_uses") - uses0,
    one("SELECT count(*) FROM bc_join.audit_log") - log0), (1, 1),
   "repeats spend nothing and log one note for the certificate (one mark)")
refused("the leaf alone: chain to nothing", "x509pop:untrusted-chain", *ext_jws(leaf_k, "ES256", [leaf]))

# -- a join token limited to other attestors is refused by x509pop too (ATTESTORS.md's
# general rule), in the token's tenant; one that names x509pop, or none, is left alone
# and never spent; a token whose secret does not match limits nothing
tpm_only = one("SELECT bc_join.create_join_token(%s, %s, expect => '{\"attestors\": [\"tpm\"]}')", t2, p2)
csr, j = ext_jws(leaf_k, "ES256", [leaf, inter])
c.execute("SELECT max(id) FROM bc_join.events")
ev0 = c.fetchone()[0] or 0
eq(join(csr, j, token=tpm_only)[::2], ("refused", "x509pop:token-attestor"),
   "a valid proof with a token limited to tpm: refused x509pop:token-attestor")
eq(one("SELECT tenant_id FROM bc_join.events WHERE id > %s AND type = 'security.join.refused' "
       "ORDER BY id DESC LIMIT 1", ev0), t2, "the refusal lands in the token's tenant")
eq(one("SELECT uses_left FROM bc_join.join_tokens WHERE id = %s", tpm_only.split(".")[0]), 1,
   "the limited token is not spent")
forged = tpm_only.split(".")[0] + "." + b64u(secrets.token_bytes(32))
csr, j = ext_jws(leaf_k, "ES256", [leaf, inter])
eq(join(csr, j, token=forged)[:2], ("issued", node_a),
   "the same token id with another secret limits nothing: admitted")
for name, expect in (("names x509pop", '{"attestors": ["tpm", "x509pop"]}'), ("names none", None)):
    t = one("SELECT bc_join.create_join_token(%s, %s, expect => %s)", t2, p2, expect)
    csr, j = ext_jws(leaf_k, "ES256", [leaf, inter])
    eq(join(csr, j, token=t)[:2], ("issued", node_a), "a token that " + name + ": admitted as before")
    eq(one("SELECT uses_left FROM bc_join.join_tokens WHERE id = %s", t.split(".")[0]), 1,
       "a token that " + name + ": not spent by x509pop")
leaf_b = cert(leaf_k.public_key(), "leaf in B", root2, root2_k)
refused("the same key under root B (tenant t2): bound elsewhere", "x509pop:bound-elsewhere",
        *ext_jws(leaf_k, "ES256", [leaf_b]))
refused("an external leaf naming a node", "x509pop:node-id",
        *ext_jws(leaf_k, "ES256", [leaf, inter], node_id=node_a))

# -- bounds, keys and header
chain6 = [leaf] + [inter] * 5
refused("five intermediates", "x509pop:too-many-intermediates", *ext_jws(leaf_k, "ES256", chain6))
csr, sha = new_csr()
eq(join(csr, make_jws(leaf_k, "ES256", [leaf] + [inter] * 4, payload(sha)))[1], node_a,
   "four intermediates are taken")
big_k = ec.generate_private_key(ec.SECP256R1())
big = cert(big_k.public_key(), "big", root, root_k, big=1100)
ok(len(der(big)) > 16384, "the oversized certificate is over 16,384 bytes", len(der(big)))
refused("an oversized certificate", "x509pop:oversized-certificate", *ext_jws(big_k, "ES256", [big]))
r1024 = rsa.generate_private_key(65537, 1024)
refused("RSA 1024 leaf", "x509pop:weak-key", *ext_jws(r1024, "RS256", [cert(r1024.public_key(), "w", root, root_k)]))
huge = rsa.RSAPublicNumbers(65537, (1 << 8199) | secrets.randbits(8199) | 1).public_key()
csr, sha = new_csr()
refused("an intermediate of an RSA modulus over 8192 bits", "x509pop:huge-key", csr,
        make_jws(leaf_k, "ES256", [leaf, cert(huge, "h", root, root_k, ca=True)], payload(sha)))
p521 = ec.generate_private_key(ec.SECP521R1())
csr, sha = new_csr()
refused("a P-521 leaf", "x509pop:key-type", csr,
        make_jws(leaf_k, "ES256", [cert(p521.public_key(), "p", root, root_k)], payload(sha)))
csr, sha = new_csr()
refused("ES384 over a P-256 leaf", "x509pop:alg-mismatch", csr,
        make_jws(inter_k, "ES384", [leaf, inter], payload(sha)))
x5c = [base64.b64encode(der(x)).decode() for x in (leaf, inter)]
for name, hdr in [("kid in the header", {"alg": "ES256", "x5c": x5c, "kid": "k"}),
                  ("jwk in the header", {"alg": "ES256", "x5c": x5c, "jwk": {}}),
                  ("crit in the header", {"alg": "ES256", "x5c": x5c, "crit": ["b64"]}),
                  ("x5c as base64url", {"alg": "ES256", "x5c": [b64u(der(leaf))]}),
                  ("alg none", {"alg": "none", "x5c": x5c})]:
    csr, sha = new_csr()
    refused(name, "x509pop:malformed", csr, make_jws(leaf_k, "ES256", None, payload(sha), header=hdr))
csr, sha = new_csr()
okjws = make_jws(leaf_k, "ES256", [leaf, inter], payload(sha))
h64, p64, s64 = okjws.split(".")
refused("the JSON serialization, with an unprotected header", "x509pop:malformed", csr,
        json.dumps({"protected": h64, "header": {"kid": "k"}, "payload": p64, "signature": s64}))
csr, sha = new_csr()
st, _, _ = join(csr, make_jws(leaf_k, "ES256", None, payload(sha),
                              header={"alg": "ES256", "typ": "JWT", "x5c": x5c}))
eq(st, "issued", "typ is allowed (the leaf key's node again)")
for name, body in [
        ("an unknown payload member", None),
        ("a duplicate payload member", b'{"purpose":"x509pop","purpose":"x509pop","nodeId":"","csrSha256":"%s","iat":%d}'),
        ("iat with a fraction", b'{"purpose":"x509pop","nodeId":"","csrSha256":"%s","iat":%d.5}'),
        ("iat as a string", b'{"purpose":"x509pop","nodeId":"","csrSha256":"%s","iat":"%d"}'),
        ("nodeId missing", b'{"purpose":"x509pop","csrSha256":"%s","iat":%d}')]:
    csr, sha = new_csr()
    if body is None:
        b = dict(payload(sha), extra=1)
    else:
        b = body % (sha.encode(), int(time.time()))
    refused(name, "x509pop:malformed", csr, make_jws(leaf_k, "ES256", [leaf, inter], b))
refused("purpose renew", "x509pop:purpose", *ext_jws(leaf_k, "ES256", [leaf, inter], purpose="renew"))
csr, _ = new_csr()
_, other_sha = new_csr()
refused("another CSR", "x509pop:csr-binding", csr, make_jws(leaf_k, "ES256", [leaf, inter], payload(other_sha)))
refused("iat 301 s ago", "x509pop:stale-iat", *ext_jws(leaf_k, "ES256", [leaf, inter], iat=int(time.time()) - 301))
refused("iat 301 s ahead", "x509pop:stale-iat", *ext_jws(leaf_k, "ES256", [leaf, inter], iat=int(time.time()) + 301))
c.execute("SET bc_join.x509pop_window = 600")
csr, sha = new_csr()
eq(join(csr, make_jws(leaf_k, "ES256", [leaf, inter], payload(sha, iat=int(time.time()) - 400)))[0],
   "issued", "bc_join.x509pop_window = 600 takes iat 400 s ago")
c.execute("RESET bc_join.x509pop_window")
csr, sha = new_csr()
forged = make_jws(leaf_k, "ES256", [leaf, inter], payload(sha))
forged = forged[:-4] + ("AAAA" if not forged.endswith("AAAA") else "BBBB")
refused("a bad signature", "x509pop:signature", csr, forged)
other_k = ec.generate_private_key(ec.SECP256R1())
refused("signed by another key", "x509pop:signature", *ext_jws(other_k, "ES256", [leaf, inter]))
nods_k = ec.generate_private_key(ec.SECP256R1())
refused("a leaf without digitalSignature", "x509pop:key-usage",
        *ext_jws(nods_k, "ES256", [cert(nods_k.public_key(), "n", root, root_k, ku_value=False)]))
refused("a leaf without keyUsage", "x509pop:key-usage",
        *ext_jws(nods_k, "ES256", [cert(nods_k.public_key(), "n", root, root_k, ku=False)]))
ca_k = ec.generate_private_key(ec.SECP256R1())
refused("a CA leaf", "x509pop:ca-leaf",
        *ext_jws(ca_k, "ES256", [cert(ca_k.public_key(), "ca", root, root_k, ca=True, ku_value=True)]))

# -- RSA and P-384 leaves; PS256's salt
r2048 = rsa.generate_private_key(65537, 2048)
rleaf = cert(r2048.public_key(), "rsa", root, root_k)
st, rnode, _ = join(*ext_jws(r2048, "RS256", [rleaf]))
eq(st, "issued", "RS256 with RSA 2048: admitted")
eq(join(*ext_jws(r2048, "PS256", [rleaf]))[1], rnode, "PS256 with the same key: its node")
csr, sha = new_csr()
refused("PS256 with a 20-byte salt", "x509pop:signature", csr,
        make_jws(r2048, "PS256", [rleaf], payload(sha), salt=20))
p384 = ec.generate_private_key(ec.SECP384R1())
eq(join(*ext_jws(p384, "ES384", [cert(p384.public_key(), "p384", root, root_k)]))[0], "issued",
   "ES384 with a P-384 leaf: admitted")

# -- interop: python3-jwcrypto makes the JWS
for alg, key in [("ES256", ec.generate_private_key(ec.SECP256R1())),
                 ("ES384", ec.generate_private_key(ec.SECP384R1())),
                 ("RS256", rsa.generate_private_key(65537, 2048)),
                 ("PS256", rsa.generate_private_key(65537, 3072))]:
    lc = cert(key.public_key(), "jwcrypto " + alg, inter, inter_k)
    k = jwk.JWK.from_pem(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    csr, sha = new_csr()
    s = jjws.JWS(json.dumps(payload(sha)).encode())
    s.add_signature(k, None, json.dumps({"alg": alg, "x5c": [base64.b64encode(der(x)).decode()
                                                           for x in (lc, inter)]}))
    eq(join(csr, s.serialize(compact=True))[0], "issued", "jwcrypto %s JWS: admitted" % alg)

# -- replay: the signing input once, even when its CSR holds no certificate any more
csr, sha = new_csr()
rk = ec.generate_private_key(ec.SECP256R1())
rc = cert(rk.public_key(), "replay", root, root_k)
rj = make_jws(rk, "ES256", [rc], payload(sha))
st, rn, _ = join(csr, rj)
eq(st, "issued", "a JWS admits once")
eq(join(csr, rj)[1], rn, "the same request again: the same answer (nothing spent twice)")
eq(one("SELECT count(*) FROM bc_join.attestation_uses WHERE attestor = 'x509pop' AND subject = %s "
       "AND expires_at = to_timestamp(%s)",
       hashlib.sha256(rj.rsplit(".", 1)[0].encode()).digest(), json.loads(b64ud(rj.split(".")[1]))["iat"] + 300), 1,
   "its signing input is recorded as used until iat + the window")
one("SELECT bc_join.delete_node(%s)::text", rn)
refused("the same JWS once its node is gone", "x509pop:replay", csr, rj)

# -- the node branch: a node of t1 joined by token
tok = one("SELECT bc_join.create_join_token(%s, %s, allow_reclaim => true)", t1, p1)
nd = os.path.join(scratch, "n1")
req = subprocess.run([bcd, "join-request", "--service-keys", keys, "--token", tok, "--out-dir", nd],
                     capture_output=True, text=True, check=True).stdout
c.execute("SELECT bc_join(%s::jsonb)", (req,))
node = json.loads(b64ud(c.fetchone()[0]["response"].split(".")[1]))["nodeId"]
def node_cert(n):
    c.execute("SELECT certificate FROM bc_join.node_certs WHERE node_id = %s ORDER BY issued_at DESC LIMIT 1", (n,))
    return x509.load_der_x509_certificate(bytes(c.fetchone()[0]))
with open(os.path.join(nd, "node.key"), "rb") as f:
    nkey = serialization.load_pem_private_key(f.read(), None)
ncert = node_cert(node)
def node_jws(key=None, crt=None, **kw):
    csr, sha = new_csr()
    kw.setdefault("node_id", node)
    return csr, make_jws(key or nkey, "ES256", [crt or ncert], payload(sha, **kw))
refused("a node certificate naming another node", "x509pop:node-id", *node_jws(node_id="node_x"))
refused("a node certificate with an empty nodeId", "x509pop:node-id", *node_jws(node_id=""))
refused("a node certificate's proof for another CSR", "x509pop:csr-binding", new_csr()[0], node_jws()[1])

# expired an hour ago: within the grace
offset = 86400 + 3600
c.execute("SET bc_join.clock_offset = %s", (offset,))
ncsr, nj = node_jws()
st, same, _ = join(ncsr, nj)
ok(st == "issued" and same == node, "an hour after notAfter, within the grace: comes back as itself", (st, same))
st, rep, _ = join(ncsr, nj)
ok(st == "issued" and rep == node, "repeated: answered (the certificate it proved was superseded by this very one)",
   (st, rep))
eq(one("SELECT identity_generation FROM bc_join.nodes WHERE id = %s", node), 2, "generation + 1")
eq(one("SELECT attestor FROM bc_join.nodes WHERE id = %s", node), "x509pop", "reclaimed by x509pop")
eq(one("SELECT count(*) FROM bc_join.events WHERE type = 'node.joined' AND payload->>'nodeId' = %s "
       "AND (payload->>'reclaim')::boolean", node), 1, "node.joined says reclaim")
refused("the old certificate again: superseded", "x509pop:superseded", *node_jws())
eq(one("SELECT revocation_reason FROM bc_join.node_certs WHERE serial = %s", format(ncert.serial_number, "032x")),
   "reclaimed", "the reclaim revoked it for the service's own reason, reclaimed")
# a second node: TPM-bound, revoked, beyond the grace
c.execute("RESET bc_join.clock_offset")
offset = 0
tok2 = one("SELECT bc_join.create_join_token(%s, %s)", t1, p1)
nd2 = os.path.join(scratch, "n2")
req = subprocess.run([bcd, "join-request", "--service-keys", keys, "--token", tok2, "--out-dir", nd2],
                     capture_output=True, text=True, check=True).stdout
c.execute("SELECT bc_join(%s::jsonb)", (req,))
node2 = json.loads(b64ud(c.fetchone()[0]["response"].split(".")[1]))["nodeId"]
with open(os.path.join(nd2, "node.key"), "rb") as f:
    nkey2 = serialization.load_pem_private_key(f.read(), None)
ncert2 = node_cert(node2)
one("UPDATE bc_join.node_certs SET node_key_uri = 'urn:bc:tpm-ak:sha256:' || repeat('ab', 32) "
    "WHERE node_id = %s RETURNING 1", node2)
refused("a node whose certificate carries a TPM statement", "x509pop:tpm-bound",
        *node_jws(nkey2, ncert2, node_id=node2))
one("UPDATE bc_join.node_certs SET node_key_uri = NULL WHERE node_id = %s RETURNING 1", node2)
one("UPDATE bc_join.node_certs SET revoked_at = now(), revocation_reason = 'keyCompromise' "
    "WHERE node_id = %s RETURNING 1", node2)
refused("a revoked node certificate", "x509pop:revoked", *node_jws(nkey2, ncert2, node_id=node2))
one("UPDATE bc_join.node_certs SET revoked_at = NULL, revocation_reason = NULL WHERE node_id = %s RETURNING 1", node2)
# No operator revocation ever lets its certificate reclaim, whatever the reason, by serial or by node.
serial2 = one("SELECT serial FROM bc_join.node_certs WHERE node_id = %s", node2)
def unrevoke():
    one("UPDATE bc_join.node_certs SET revoked_at = NULL, revocation_reason = NULL WHERE node_id = %s RETURNING 1", node2)
for reason in ("unspecified", "keyCompromise", "cACompromise", "affiliationChanged", "superseded",
               "cessationOfOperation", "privilegeWithdrawn", "aACompromise"):
    eq(one("SELECT bc_join.revoke_certificate(%s, %s)", serial2, reason), True,
       "revoke_certificate(%s) revokes" % reason)
    refused("the certificate an operator revoked (%s) does not reclaim" % reason, "x509pop:revoked",
            *node_jws(nkey2, ncert2, node_id=node2))
    unrevoke()
    eq(one("SELECT bc_join.revoke_node(%s, %s)", node2, reason), 1, "revoke_node(%s) revokes" % reason)
    refused("nor the node's an operator revoked (%s)" % reason, "x509pop:revoked",
            *node_jws(nkey2, ncert2, node_id=node2))
    unrevoke()
for reason in ("retired", "renewed", "reclaimed", "certificateHold", "removeFromCRL", "key-compromise"):
    eq((raises("SELECT bc_join.revoke_certificate(%s, %s)", serial2, reason),
        raises("SELECT bc_join.revoke_node(%s, %s)", node2, reason)), ("22023", "22023"),
       "an operator cannot revoke for %r" % reason)
eq(one("SELECT revoked_at IS NULL FROM bc_join.node_certs WHERE serial = %s", serial2), True,
   "and nothing was revoked by them")
# A row the service never writes (retired, on a node that is not): still no reclaim.
one("UPDATE bc_join.node_certs SET revoked_at = now(), revocation_reason = 'retired' "
    "WHERE node_id = %s RETURNING 1", node2)
refused("a certificate revoked as retired on a node that is not", "x509pop:revoked",
        *node_jws(nkey2, ncert2, node_id=node2))
unrevoke()
eq(one("SELECT count(*) FROM bc_join.node_certs WHERE node_id = %s", node2), 1,
   "no operator revocation issued a certificate")
offset = 86400 + 31 * 86400
c.execute("SET bc_join.clock_offset = %s", (offset,))
refused("31 days after notAfter: beyond the grace", "x509pop:beyond-grace",
        *node_jws(nkey2, ncert2, node_id=node2))
c.execute("SET bc_join.x509pop_grace = '40d'")
eq(join(*node_jws(nkey2, ncert2, node_id=node2))[1], node2, "bc_join.x509pop_grace = 40d takes it back")
c.execute("RESET bc_join.x509pop_grace")
c.execute("RESET bc_join.clock_offset")
offset = 0
# a third node, retired
tok3 = one("SELECT bc_join.create_join_token(%s, %s)", t1, p1)
nd3 = os.path.join(scratch, "n3")
req = subprocess.run([bcd, "join-request", "--service-keys", keys, "--token", tok3, "--out-dir", nd3],
                     capture_output=True, text=True, check=True).stdout
c.execute("SELECT bc_join(%s::jsonb)", (req,))
node3 = json.loads(b64ud(c.fetchone()[0]["response"].split(".")[1]))["nodeId"]
with open(os.path.join(nd3, "node.key"), "rb") as f:
    nkey3 = serialization.load_pem_private_key(f.read(), None)
ncert3 = node_cert(node3)
one("SELECT bc_join.retire_node(%s)::text", node3)
refused("a retired node", "x509pop:retired", *node_jws(nkey3, ncert3, node_id=node3))
eq(one("SELECT count(*) FROM bc_join.events WHERE type = 'security.join.refused' "
       "AND payload->>'refusal' LIKE 'x509pop:%%' AND payload::text LIKE '%%BEGIN%%'"), 0,
   "no refusal event holds evidence")

sys.exit(tap.done())
