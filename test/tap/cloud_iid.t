#!/usr/bin/python3
"""cloud_iid.t: the cloud-iid attestor, every refusal per provider.

Local CAs and keys stand in for AWS's regional certificate, Azure's signer
chain and Google's JWKS (test/lib/cloudfix.py); the verification code is the
one real evidence meets.  Requests are made by the real agent command
(bcd join-request --attestor cloud-iid --attestation-file).  Proves: each
provider admits good evidence once and refuses it forever after
(already-admitted, its event naming provider, account and instance), a
reset lets the instance come back as the same node exactly once more, and
each check of docs/attestors.md refuses what breaks it with its reason; the
configuration is validated when written.  Needs the environment
test/run-all sets (PGHOST, PGPORT, BCJ_*)."""
import base64, json, os, shutil, signal, subprocess, sys, threading, time
import psycopg2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import bctest, cloudfix
tap = bctest.Tap()
ok, eq = tap.ok, tap.eq

bcd, keys = os.environ["BCJ_BCD"], os.environ["BCJ_SERVICE_KEYS"]
sdb = bctest.SharedDb("cloud_iid", "bcj_cloud")
scratch, admin, db, c, one = sdb.scratch, sdb.admin, sdb.db, sdb.cur, sdb.one
t, s, p = sdb.tenant('clouds', 'vms')
t2, s2, p2 = sdb.tenant('other', 'vms')
cl = cloudfix.Clouds(os.path.join(scratch, "ca"))
cl.configure(c, t, p)

request = cloudfix.Requests(bcd, keys, scratch).request
def csr_of(d):
    """(csrSha256, Azure nonce) of the CSR kept in d, made by a first request."""
    return cloudfix.csr_sha256(json.loads(request('{"provider":"aws"}', d)))
def join(req):
    c.execute("SELECT bc_join(%s::jsonb)", (req,))
    return c.fetchone()[0]
def last_refusal():
    return one("SELECT payload->>'refusal' FROM bc_join.events WHERE type = 'security.join.refused' "
               "ORDER BY id DESC LIMIT 1")
def refused(req, reason, name):
    r = join(req)
    got = last_refusal()
    ok(r.get("status") == "refused" and got == "cloud-iid:" + reason, name + ": refused " + reason,
       (r, got))
def node_of(r):
    body = r["response"].split(".")[1]
    return json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))["nodeId"]
def token():
    return one("SELECT bc_join.create_join_token(%s, %s)", t, p)

# ------------------------------------------------------------ configuration
def config_error(sql, args, code, name):
    try:
        c.execute(sql, args)
        ok(False, name)
    except psycopg2.Error as e:
        ok(e.pgcode == code, name, (e.pgcode, str(e)))
config_error("INSERT INTO bc_join.cloud_accounts (provider, account, tenant_id, pool_id) "
             "VALUES ('aws', '123456789012', %s, %s)", (t2, p2), "F0000",
             "a second mapping of an account is INVALID_CONFIG")
config_error("UPDATE bc_join.cloud_providers SET max_instance_age = '1 hour' WHERE provider = 'azure'",
             (), "F0000", "an instance age for azure is INVALID_CONFIG")
config_error("INSERT INTO bc_join.cloud_accounts (provider, account, tenant_id, pool_id, allow_unbound) "
             "VALUES ('gcp', 'proj-x', %s, %s, true)", (t, p), "F0000", "unbound admission is for aws alone")
config_error("INSERT INTO bc_join.cloud_accounts (provider, account, tenant_id, pool_id) "
             "VALUES ('gcp', 'proj-x', %s, %s)", (t, p2), "F0000", "a pool of another tenant is refused")
config_error("INSERT INTO bc_join.cloud_trust (provider, kind, material) VALUES ('aws', 'certificate', 'nope')",
             (), "22023", "trust material that is no certificate is refused")
config_error("INSERT INTO bc_join.cloud_trust (provider, kind, material) VALUES ('azure', 'root', %s)",
             (cl.pem("int"),), "22023", "an azure root must be self-signed")
config_error("INSERT INTO bc_join.cloud_trust (provider, kind, material) VALUES ('gcp', 'jwks', %s)",
             (json.dumps({"keys": [json.loads(cl.gec.export_public())]}),), "22023",
             "a JWKS without an RSA key is refused")

# ------------------------------------------------------------------- AWS
doc = cl.aws_document()
p7 = cl.aws_pkcs7(doc)
r = join(request(cl.aws_evidence(doc, p7), token=token()))
ok(r.get("status") == "issued", "aws: a signed document with a sealed join token is admitted", r)
aws_node = node_of(r)
ev = one("SELECT payload FROM bc_join.events WHERE type = 'node.joined' ORDER BY id DESC LIMIT 1")
eq(ev.get("detail"), {"provider": "aws", "account": "123456789012", "instance": "i-0123456789abcdef0",
                      "admission": "token"}, "aws: node.joined names the instance")
refused(request(cl.aws_evidence(doc, p7), token=token()), "already-admitted", "aws: the same instance again")
ev = one("SELECT payload FROM bc_join.events WHERE type = 'security.join.refused' ORDER BY id DESC LIMIT 1")
eq(ev.get("detail"), {"provider": "aws", "account": "123456789012", "instance": "i-0123456789abcdef0"},
   "aws: the already-admitted event names provider, account and instance")
ok(one("SELECT tenant_id FROM bc_join.events WHERE type = 'security.join.refused' ORDER BY id DESC LIMIT 1") == t,
   "aws: and lands in the account's tenant")

doc2 = cl.aws_document(instance="i-0000000000000002")
refused(request(cl.aws_evidence(doc2, cl.aws_pkcs7(doc2))), "no-token", "aws: no sealed join token")
refused(request(cl.aws_evidence(doc2, cl.aws_pkcs7(doc2, signer="evil", certs=True)), token=token()),
        "bad-signature", "aws: signed by a certificate in the bag, not a configured one")
refused(request(cl.aws_evidence(doc2, cl.aws_pkcs7(doc2, signer="evil")), token=token()),
        "bad-signature", "aws: signed by another key")
refused(request(cl.aws_evidence(doc2, p7), token=token()), "content-mismatch",
        "aws: a document substituted beside a valid pkcs7")
detached = subprocess.run(["openssl", "smime", "-sign", "-binary", "-md", "sha256", "-outform", "DER", "-nocerts",
                           "-signer", cl.p("aws.crt"), "-inkey", cl.p("aws.key")],
                          input=doc2, capture_output=True, check=True).stdout
refused(request(cl.aws_evidence(doc2, detached), token=token()), "malformed-pkcs7", "aws: detached content")
refused(request(cl.aws_evidence(doc2, cl.aws_pkcs7(doc2) + b"\0"), token=token()), "malformed-pkcs7",
        "aws: bytes after the PKCS#7")
# AWS signs rsa2048 with SHA-256 and RSA: every other digest openssl signs with is refused
for md in ("md5", "sha1", "sha224", "sha384", "sha512"):
    refused(request(cl.aws_evidence(doc2, cl.aws_pkcs7(doc2, md=md)), token=token()), "digest-algorithm",
            "aws: a PKCS#7 digest %s (openssl smime -md %s)" % (md, md))
doc3 = cl.aws_document(account="999999999999", instance="i-0000000000000003")
refused(request(cl.aws_evidence(doc3, cl.aws_pkcs7(doc3)), token=token()), "unknown-account",
        "aws: an account nobody mapped")
tok_other = one("SELECT bc_join.create_join_token(%s, %s)", t2, p2)
refused(request(cl.aws_evidence(doc2, cl.aws_pkcs7(doc2)), token=tok_other), "token-mismatch",
        "aws: a join token of another tenant")
c.execute("UPDATE bc_join.cloud_providers SET max_instance_age = '1 hour' WHERE provider = 'aws'")
old = cl.aws_document(instance="i-0000000000000004", pending=time.time() - 7200)
refused(request(cl.aws_evidence(old, cl.aws_pkcs7(old)), token=token()), "too-old", "aws: an instance too old")
c.execute("UPDATE bc_join.cloud_providers SET max_instance_age = NULL WHERE provider = 'aws'")
c.execute("UPDATE bc_join.cloud_accounts SET allow_unbound = true WHERE provider = 'aws'")
refused(request(cl.aws_evidence(old, cl.aws_pkcs7(old))), "unbound-stale",
        "aws: unbound admission more than 300 s after pendingTime")
r = join(request(cl.aws_evidence(doc2, cl.aws_pkcs7(doc2))))
ok(r.get("status") == "issued", "aws: an account opted in is admitted without a token", r)
ev = one("SELECT payload FROM bc_join.events WHERE type = 'node.joined' ORDER BY id DESC LIMIT 1")
ok(ev["detail"]["admission"] == "aws-unbound", "aws: recorded as aws-unbound in node.joined", ev)
c.execute("UPDATE bc_join.cloud_accounts SET allow_unbound = false WHERE provider = 'aws'")
refused(request('{"provider":"aws","document":"e30"}'), "malformed", "aws: pkcs7 missing")
refused(request('{"provider":"aws","pkcs7":"AA","document":"AA","document":"AA"}'), "malformed",
        "aws: a duplicate member")
refused(request('{"provider":"ibm","document":"AA"}'), "malformed", "an unknown provider")

# once forever, then a reset: the same node once more, and only once
eq(one("SELECT bc_join.reset_cloud_instance('aws', '123456789012', 'i-0123456789abcdef0')"), True,
   "reset_cloud_instance: the instance had been admitted")
ok(one("SELECT count(*) FROM bc_join.audit_log WHERE action = 'cloud_instance.reset'") == 1 and
   one("SELECT count(*) FROM bc_join.events WHERE type = 'cloud_instance.reset'") == 1,
   "reset_cloud_instance is audited and evented")
r = join(request(cl.aws_evidence(doc, p7), token=token()))
ok(r.get("status") == "issued" and node_of(r) == aws_node, "aws: after a reset the instance reclaims its node", r)
ok(one("SELECT identity_generation FROM bc_join.nodes WHERE id = %s", aws_node) == 2,
   "aws: as generation 2, no second node")
refused(request(cl.aws_evidence(doc, p7), token=token()), "already-admitted", "aws: and only once")

# ------------------------------------------------------------------- GCP
d = "gcp"
h, _ = csr_of(d)
refused(request(cl.gcp_evidence(cl.gcp_token(h, alg="none")), d), "wrong-alg", "gcp: alg none")
refused(request(cl.gcp_evidence(cl.gcp_token(h, alg="HS256")), d), "wrong-alg",
        "gcp: HS256 keyed with the public key")
refused(request(cl.gcp_evidence(cl.gcp_token(h, alg="ES256")), d), "wrong-alg", "gcp: ES256")
refused(request(cl.gcp_evidence(cl.gcp_token(h, kid="nope")), d), "unknown-key", "gcp: an unknown kid")

# One kid in two rows (Google's refreshed key set INSERTed beside the old one)
# is unknown-key, as two keys under one kid in one row are; and it is
# answered: the lookup once freed a key its memory context also freed, and
# the backend spun in EVP_PKEY_free for good (issue 26, point 2).
def join_within(req, seconds):
    """bc_join(req) on a connection of its own under a statement_timeout:
    (answer or None, what went wrong).  A backend that does not answer is
    killed so that the rest of the script runs (and reconnected)."""
    global db, c, admin
    conn = psycopg2.connect(dbname=sdb.dbname)
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("SELECT pg_backend_pid()")
    pid = cur.fetchone()[0]
    cur.execute("SET statement_timeout = '10s'")
    out = {}
    def run():
        try:
            cur.execute("SELECT bc_join(%s::jsonb)", (req,))
            out["answer"] = cur.fetchone()[0]
        except Exception as e:
            out["error"] = repr(e)
    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(seconds)
    if th.is_alive():
        try:
            admin.cursor().execute("SELECT pg_terminate_backend(%s)", (pid,))
        except psycopg2.Error:
            pass
        th.join(5)
        if th.is_alive():
            os.kill(pid, signal.SIGKILL)      # the postmaster restarts every backend
            time.sleep(5)
        for _ in range(60):
            try:
                db = psycopg2.connect(dbname=sdb.dbname)
                admin = sdb.admin = psycopg2.connect(dbname="postgres")
                break
            except psycopg2.Error:
                time.sleep(1)
        db.autocommit = admin.autocommit = True
        sdb.db = db
        c = sdb.cur = db.cursor()
        return None, "no answer in %d s (backend %d)" % (seconds, pid)
    conn.close()
    return out.get("answer"), out.get("error")

gcp_row = one("SELECT id FROM bc_join.cloud_trust WHERE provider = 'gcp'")
c.execute("INSERT INTO bc_join.cloud_trust (provider, kind, material) VALUES ('gcp', 'jwks', %s) RETURNING id",
          (cl.jwks(),))
dup_row = c.fetchone()[0]
r, err = join_within(request(cl.gcp_evidence(cl.gcp_token(h)), d), 30)
ok(r is not None and r.get("status") == "refused" and last_refusal() == "cloud-iid:unknown-key",
   "gcp: one kid in two rows of cloud_trust is unknown-key, answered within the statement timeout",
   (r, err, r is not None and last_refusal()))
r, err = join_within(request(cl.gcp_evidence(cl.gcp_token(h)), d), 30)
ok(r is not None and r.get("status") == "refused", "gcp: and the same backend answers again", (r, err))
c.execute("DELETE FROM bc_join.cloud_trust WHERE id = %s", (dup_row,))
c.execute("UPDATE bc_join.cloud_trust SET material = %s WHERE id = %s",
          (json.dumps({"keys": [json.loads(cl.gkey.export_public()),
                                dict(json.loads(cl.gother.export_public()), kid="g1")]}), gcp_row))
r, err = join_within(request(cl.gcp_evidence(cl.gcp_token(h)), d), 30)
ok(r is not None and r.get("status") == "refused" and last_refusal() == "cloud-iid:unknown-key",
   "gcp: two keys under one kid in one row is unknown-key", (r, err))
c.execute("UPDATE bc_join.cloud_trust SET material = %s WHERE id = %s", (cl.jwks(), gcp_row))
refused(request(cl.gcp_evidence(cl.gcp_token(h, key=cl.gother)), d), "bad-signature",
        "gcp: signed by another key under the kid")
refused(request(cl.gcp_evidence(cl.gcp_token(h, iss="https://evil.example")), d), "wrong-issuer",
        "gcp: another issuer")
refused(request(cl.gcp_evidence(cl.gcp_token(h, aud=cloudfix.GCP_AUDIENCE)), d), "wrong-audience",
        "gcp: the audience without the CSR")
refused(request(cl.gcp_evidence(cl.gcp_token("x" * 43)), d), "wrong-audience", "gcp: another CSR's audience")
refused(request(cl.gcp_evidence(cl.gcp_token(h, aud=[cloudfix.GCP_AUDIENCE + "#" + h])), d), "wrong-audience",
        "gcp: an audience array")
now = int(time.time())
refused(request(cl.gcp_evidence(cl.gcp_token(h, iat=now - 4000, exp=now - 400)), d), "expired", "gcp: expired")
refused(request(cl.gcp_evidence(cl.gcp_token(h, iat=now + 600)), d), "not-yet-valid", "gcp: issued in the future")
refused(request(cl.gcp_evidence(cl.gcp_token(h, iat=now - 10, exp=now + 7200)), d), "lifetime",
        "gcp: a lifetime over an hour")
refused(request(cl.gcp_evidence(cl.gcp_token(h, drop=("instance_id",))), d), "no-instance", "gcp: no instance_id")
refused(request(cl.gcp_evidence(cl.gcp_token(h, project="proj-nobody")), d), "unknown-account",
        "gcp: a project nobody mapped")
c.execute("UPDATE bc_join.cloud_providers SET max_instance_age = '1 hour' WHERE provider = 'gcp'")
refused(request(cl.gcp_evidence(cl.gcp_token(h, created=now - 7200)), d), "too-old", "gcp: an instance too old")
c.execute("UPDATE bc_join.cloud_providers SET max_instance_age = NULL WHERE provider = 'gcp'")
r = join(request(cl.gcp_evidence(cl.gcp_token(h)), d))
ok(r.get("status") == "issued", "gcp: a token for this CSR is admitted, no join token needed", r)
gcp_node = node_of(r)
d2 = "gcp2"
h2, _ = csr_of(d2)
refused(request(cl.gcp_evidence(cl.gcp_token(h2)), d2), "already-admitted", "gcp: the same instance, a new key")
c.execute("SELECT bc_join.reset_cloud_instance('gcp', 'proj-1', '4567890123456789012')")
r = join(request(cl.gcp_evidence(cl.gcp_token(h2)), d2))
ok(r.get("status") == "issued" and node_of(r) == gcp_node, "gcp: after a reset, its node again", r)

# ----------------------------------------------------------------- Azure
d = "az"
h, nonce = csr_of(d)
content = cl.azure_content(nonce)
refused(request(cl.azure_evidence(cl.azure_pkcs7(content, signer="azevil", bag=("signer", "azevil"))), d),
        "untrusted-signer", "azure: signed by a bag certificate that does not chain (a chaining one first)")
refused(request(cl.azure_evidence(cl.azure_pkcs7(content, signer="wrongdom", bag=("other", "wrongdom"))), d),
        "wrong-domain", "azure: a signer outside the configured domain")
for md in ("md5", "sha1", "sha384"):
    refused(request(cl.azure_evidence(cl.azure_pkcs7(content, md=md)), d), "digest-algorithm",
            "azure: a PKCS#7 digest %s (openssl smime -md %s)" % (md, md))
# A genuine document whose signer expired (valid one day; the service clock two days on) is
# told apart: signer-expired, not untrusted-signer; the same tampered is bad-signature, and
# an expired signer that does not chain at all is still untrusted-signer.
c.execute("SET bc_join.clock_offset = 172800")
old_doc = cl.azure_pkcs7(content, signer="daysigner", bag=("other", "daysigner"))
refused(request(cl.azure_evidence(old_doc), d), "signer-expired",
        "azure: a genuine document whose signer has expired")
tampered = bytearray(old_doc)
tampered[tampered.index(b'"nonce"') + 10] ^= 1
refused(request(cl.azure_evidence(bytes(tampered)), d), "bad-signature",
        "azure: the same with its content changed is tampered, not expired")
refused(request(cl.azure_evidence(cl.azure_pkcs7(content, signer="azevil", bag=("azevil",))), d),
        "untrusted-signer", "azure: a signer that does not chain, whatever its time")
refused(request(cl.azure_evidence(cl.azure_pkcs7(content)), d), "expired",
        "azure: a current signer's document two days old is the document expired")
c.execute("RESET bc_join.clock_offset")
bad = bytearray(cl.azure_pkcs7(content))
bad[-1] ^= 1
refused(request(cl.azure_evidence(bytes(bad)), d), "bad-signature", "azure: a bad signature")
good = cl.azure_pkcs7(content)
swapped = good.replace(nonce.encode(), ("0" * 32).encode())
refused(request(cl.azure_evidence(swapped), d), "bad-signature", "azure: substituted content")
refused(request(cl.azure_evidence(cl.azure_pkcs7(cl.azure_content("0" * 32))), d), "wrong-nonce",
        "azure: another CSR's nonce")
refused(request(cl.azure_evidence(cl.azure_pkcs7(cl.azure_content(nonce, created=now - 7200,
                                                                  expires=now - 3600))), d),
        "expired", "azure: an expired document")
refused(request(cl.azure_evidence(cl.azure_pkcs7(cl.azure_content(nonce, created=now + 600))), d),
        "not-yet-valid", "azure: a document from the future")
refused(request(cl.azure_evidence(cl.azure_pkcs7(cl.azure_content(nonce, vm="not-a-uuid"))), d),
        "malformed-document", "azure: a vmId that is no UUID")
refused(request(cl.azure_evidence(cl.azure_pkcs7(cl.azure_content(
    nonce, sub="00000000-0000-0000-0000-000000000000"))), d), "unknown-account", "azure: an unmapped subscription")
r = join(request(cl.azure_evidence(good), d))
ok(r.get("status") == "issued", "azure: the attested document for this CSR is admitted (unrelated cert first in the bag)", r)
az_node = node_of(r)
r2 = join(request(cl.azure_evidence(good), d))
ok(r2.get("status") == "issued" and node_of(r2) == az_node,
   "azure: the same request again is answered again (one key, one join)", r2)
d2 = "az2"
h2, nonce2 = csr_of(d2)
refused(request(cl.azure_evidence(cl.azure_pkcs7(cl.azure_content(nonce2))), d2), "already-admitted",
        "azure: the same VM, a new key")
c.execute("SELECT bc_join.reset_cloud_instance('azure', '8D10DA13-8125-4BA9-A717-BF7490507B3D', "
          "'0f2c4a8e-5b6d-4e7f-8a9b-0c1d2e3f4a5b')")
r = join(request(cl.azure_evidence(cl.azure_pkcs7(cl.azure_content(nonce2))), d2))
ok(r.get("status") == "issued" and node_of(r) == az_node, "azure: after a reset (ids in any case), its node again", r)
ok(one("SELECT count(*) FROM bc_join.nodes") == 4, "four nodes: aws twice, gcp, azure; no second node for a reset",
   one("SELECT count(*) FROM bc_join.nodes"))

# -- a repeat needs the evidence again: a signed word for the same instance and CSR
h2, _ = csr_of("gcp2")
r = join(request(cl.gcp_evidence(cl.gcp_token(h2)), "gcp2"))
ok(r.get("status") == "issued" and node_of(r) == gcp_node,
   "gcp: the reclaim repeated with a token for the same instance and CSR: answered",
   (r, one("SELECT payload FROM bc_join.events WHERE type = 'security.join.refused' ORDER BY id DESC LIMIT 1")))
log0 = one("SELECT count(*) FROM bc_join.audit_log")
r = join(request(cl.gcp_evidence(cl.gcp_token(h2)), "gcp2"))
ok(r.get("status") == "issued" and one("SELECT count(*) FROM bc_join.audit_log") == log0,
   "gcp: and again, the issuance log unchanged", r)
refused_as = lambda req, name: ok(join(req).get("status") == "refused" and last_refusal() == "join:key-reused",
                                  name, last_refusal())
refused_as(request(cl.gcp_evidence(cl.gcp_token(h2, instance="4567890123456789999")), "gcp2"),
           "gcp: the same CSR with another instance's valid token: refused join:key-reused")
refused_as(request('{"provider":"gcp"}', "gcp2"), "gcp: the same CSR without the token: refused join:key-reused")
tk = token()
refused_as(request(cl.gcp_evidence(cl.gcp_token(h2)), "gcp2", token=tk),
           "gcp: the same evidence with a join token it was not admitted with: refused join:key-reused")
ok(one("SELECT uses_left FROM bc_join.join_tokens WHERE id = split_part(%s, '.', 1)", tk) == 1 and
   one("SELECT count(*) FROM bc_join.audit_log") == log0 + 1,
   "gcp: nothing spent; the log holds only the token's creation",
   one("SELECT count(*) FROM bc_join.audit_log") - log0)
ok(one("SELECT count(*) FROM bc_join.events WHERE type = 'security.join.refused' "
       "AND payload::text LIKE '%%BEGIN%%'") == 0, "no refusal event carries evidence")

# ---------------------------------------------------------- check_evidence()
# Evidence checked as a join checks it, at a given time, nothing written: real documents
# (test/lib/captured: an AWS rsa2048 answer and AWS's ap-southeast-2 certificate, Azure's
# documented sample) and the stand-ins.
cap = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib", "captured")
aws_doc = open(os.path.join(cap, "aws-identity-document.json"), "rb").read()
aws_p7 = base64.b64decode(open(os.path.join(cap, "aws-identity-rsa2048.b64")).read())
aws_ev = cl.aws_evidence(aws_doc, aws_p7)
c.execute("INSERT INTO bc_join.cloud_trust (provider, kind, material, note) VALUES ('aws', 'certificate', %s, "
          "'ap-southeast-2')", (open(os.path.join(cap, "aws-ap-southeast-2-rsa2048.crt")).read(),))
c.execute("INSERT INTO bc_join.cloud_accounts (provider, account, tenant_id, pool_id) "
          "VALUES ('aws', '189292791360', %s, %s)", (t, p))
def check(evidence, at=None, csr=None):
    return one("SELECT bc_join.check_evidence('cloud-iid', convert_to(%s, 'UTF8'), %s, %s)",
               evidence, at, csr)
def written():
    return [one("SELECT count(*) FROM bc_join.%s" % x) for x in ("attestation_uses", "nodes", "events",
                                                                 "audit_log", "node_bindings")]
before = written()
r = check(aws_ev, "2026-02-16T00:39:27Z")
ok(r["ok"] and r["outcome"] == "result" and r["result"]["tenantId"] == t and
   r["read"] == {"provider": "aws", "account": "189292791360", "instance": "i-0c5541936caf78c12",
                 "started": "2026-02-16T00:38:27Z"} and
   r["unchecked"] == ["a sealed join token of the account's tenant and pool (no sealed join token given)"],
   "check_evidence: a real AWS rsa2048 answer (BER, AWS's signed attributes) verifies with AWS's "
   "ap-southeast-2 certificate; account and instance read, the token it would need named unchecked", r)
c.execute("UPDATE bc_join.cloud_accounts SET allow_unbound = true WHERE account = '189292791360'")
r1 = check(aws_ev, "2026-02-16T00:39:27Z")
r2 = check(aws_ev)
ok(r1["ok"] and r1["unchecked"] == [] and r1["result"]["detail"]["admission"] == "aws-unbound" and
   not r2["ok"] and r2["refusal"] == "cloud-iid:unbound-stale",
   "check_evidence at a given time: the same account opted in to unbound admission is admitted a minute "
   "after pendingTime, refused unbound-stale now", (r1, r2))
c.execute("UPDATE bc_join.cloud_accounts SET allow_unbound = false WHERE account = '189292791360'")
ok(check(cl.aws_evidence(aws_doc.replace(b"t4g.small", b"t4g.large"), aws_p7), "2026-02-16T00:39:27Z")["refusal"]
   == "cloud-iid:content-mismatch", "check_evidence: the real document changed is content-mismatch")
bad = bytearray(aws_p7)
bad[-300] ^= 1
ok(check(cl.aws_evidence(aws_doc, bytes(bad)), "2026-02-16T00:39:27Z")["refusal"] == "cloud-iid:bad-signature",
   "check_evidence: its signature changed is bad-signature")
az_sample = base64.b64decode(open(os.path.join(cap, "azure-attested-sample.b64")).read())
r = check(cl.azure_evidence(az_sample), "2018-11-20T22:08:00Z")
ok(r["refusal"] == "cloud-iid:untrusted-signer",
   "check_evidence: Azure's documented sample, its self-signed signer not configured: untrusted-signer", r)
sample_signer = subprocess.run(["openssl", "pkcs7", "-inform", "DER", "-print_certs"], input=az_sample,
                               capture_output=True, check=True).stdout.decode()
c.execute("INSERT INTO bc_join.cloud_trust (provider, kind, material, note) VALUES ('azure', 'root', %s, "
          "'the documented sample''s signer') RETURNING id", (sample_signer,))
sample_row = c.fetchone()[0]
r1 = check(cl.azure_evidence(az_sample), "2018-11-20T22:08:00Z")
r2 = check(cl.azure_evidence(az_sample))
ok(r1["refusal"] == r2["refusal"] == "cloud-iid:wrong-domain",
   "check_evidence: with its signer configured, the sample passes the envelope and the chain (in 2018, and "
   "but for the time now) and stops at wrong-domain: its signer names the domain in its CN alone", (r1, r2))
c.execute("DELETE FROM bc_join.cloud_trust WHERE id = %s", (sample_row,))
# The stand-in Azure document of d (made for its CSR): without the CSR the nonce is unchecked.
def csr_der_of(req):
    s = json.loads(req)["csr"]
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
csr_der = csr_der_of(request('{"provider":"aws"}', "az-check"))
h, nonce = csr_of("az-check")
doc = cl.azure_evidence(cl.azure_pkcs7(cl.azure_content(nonce, vm="11111111-2222-4333-8444-555555555555")))
r1 = check(doc)
r2 = check(doc, None, psycopg2.Binary(csr_der))
ok(r1["ok"] and r1["unchecked"] == ["the nonce is the CSR's (no CSR given)"] and
   r2["ok"] and r2["unchecked"] == [] and r2["read"]["instance"] == "11111111-2222-4333-8444-555555555555",
   "check_evidence: a bound document without its CSR names the nonce unchecked; with it, everything is checked",
   (r1, r2))
r = check(doc, None, psycopg2.Binary(csr_der_of(request('{"provider":"aws"}'))))
ok(r["refusal"] == "cloud-iid:wrong-nonce", "check_evidence: with another CSR, wrong-nonce", r)
old_doc = cl.azure_evidence(cl.azure_pkcs7(cl.azure_content(nonce, vm="66666666-7777-4888-8999-aaaaaaaaaaaa"),
                                           signer="daysigner", bag=("daysigner",)))
r1 = check(old_doc, None, psycopg2.Binary(csr_der))
r2 = check(old_doc, one("SELECT now() + interval '2 days'"), psycopg2.Binary(csr_der))
ok(r1["ok"] and r2["refusal"] == "cloud-iid:signer-expired",
   "check_evidence at a given time: a document whose signer expires tomorrow passes now, is signer-expired "
   "two days on", (r1, r2))
ok(written() == before, "check_evidence wrote nothing: no use, node, event, audit row or binding", (before, written()))

c.execute("DELETE FROM bc_join.cloud_providers WHERE provider = 'azure'")
refused(request(cl.azure_evidence(good), "az3"), "provider-disabled", "azure: a provider not configured")
tap.done()
