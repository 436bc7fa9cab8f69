#!/usr/bin/python3
"""ssh_issue.t: OpenSSH certificates issued by the extension (issue 47; docs/operator.md
"21. SSH"), checked by OpenSSH's own ssh-keygen (-L verifies the CA's signature, -Q
reads the KRL) and python3-jwcrypto (the signed documents).

Shows: ssh_names are the platform operator's (a tenant operator's allow_ssh_names is
42501), host patterns of two tenants never overlap, nor do user patterns (root, prefix*,
*), allow_ssh_names refuses repeatable read (25000), malformed patterns are refused;
issue_ssh_host_cert certifies a host key (ssh-keygen made: Ed25519, ECDSA P-384) with the
pool rule's principals and no more (a name outside the tenant's ssh_names dropped, a
hostname claim outside host_hostname_patterns ignored, one inside taken), the node's
SPIFFE ID as key ID, valid from 60 s before to the node certificate's notAfter; a
principal the proof asks for and the rule lacks is ssh-host:principal; a repeat answers
the same serial; a fifth key is ssh-host:too-many-keys; a proof for another key is
ssh-host:key-binding; another node of the pool claiming a hostname the first's live host
certificate carries does not get it (ssh-host:principal when asked) until the first is
revoked, and of two claiming one at once the second waits and is refused; a reclaim's revocation of SSH certificates sends NOTIFY bc_join_crl; a session whose proof says "sshUser": true gets a user certificate
for its CSR's key (force-command, source-address, only permit-pty; the session's
validity), one without a rule gets none and ssh.user.refused; revoke_certificate of the
session and revoke_node revoke their SSH certificates (audit rows, verify_audit_log), and
ssh-keygen -Q on ssh_krl() finds them revoked, while a renewal's old host certificate
stays valid until the node is revoked (then it is revoked too); the KRL's version only grows and two calls give the same bytes;
signed_ssh() verifies with the signing key and carries the KRL's hash and the CA lines;
a tenant operator sees only its tenant's ssh_certs, ssh_settings and audit rows;
prune_certificates, once they have long expired, removes them (and the KRL lists them no
more); revoke_ssh_certificate; a key directory without the SSH CA keys is INVALID_CONFIG (a
session asking for SSH too, never a refusal) until bc-join-keygen --add-ssh-ca-keys adds them;
--stage-ssh-ca publishes the next CA keys after the current ones, --promote-ssh-ca makes them
sign (the old ones still published), --retire-ssh-ca drops the old ones.  Needs the environment test/run-all sets (PGHOST, PGPORT, BCJ_*).
"""
import base64
import hashlib
import importlib.machinery
import json
import os
import subprocess
import sys
import time

import psycopg2
from jwcrypto import jwk, jws as jjws

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import bctest  # noqa: E402

fz = importlib.machinery.SourceFileLoader(
    "sql_fuzz", os.path.join(os.path.dirname(os.path.abspath(__file__)), "sql_fuzz.t")).load_module()

t0 = time.time()
tap = bctest.Tap()
ok, eq = tap.ok, tap.eq
sdb = bctest.SharedDb("ssh_issue")
d, one, cur = sdb.scratch, sdb.one, sdb.cur
w = fz.World(sdb.db)
t1, pool = w.tenant, w.pool
t2, s2, p2 = sdb.tenant("ssh-other")


def code(sql, *args):
    """The SQLSTATE sql raises, or 'ok'."""
    try:
        cur.execute(sql, args)
        return "ok"
    except psycopg2.Error as e:
        return e.pgcode


def keygen(name, *args):
    """A key made by ssh-keygen: (private key path, public key blob)."""
    path = os.path.join(d, name)
    subprocess.run(["ssh-keygen", "-q", "-N", "", "-C", "", "-f", path] + list(args), check=True)
    with open(path + ".pub") as f:
        return path, base64.b64decode(f.read().split()[1])


def host_req(blob, hostname=None, principals=None, bind=None, key=None, serial=None):
    p = {"purpose": "ssh-host", "serial": serial or w.serial, "iat": int(time.time()),
         "sshKeySha256": fz.b64u(hashlib.sha256(bind or blob).digest())}
    if hostname is not None:
        p["hostname"] = hostname
    if principals is not None:
        p["principals"] = principals
    return {"sshPublicKey": base64.b64encode(blob).decode(), "proof": fz.jws_es256(key or w.node_key, p)}


def call(fn, req):
    return json.loads(one("SELECT bc_join.%s(%%s::jsonb)::text" % fn, json.dumps(req)))


def payload(r):
    return json.loads(fz.b64u_dec(r["response"].split(".")[1])) if "response" in r else r


def last_refusal():
    return one("SELECT payload->>'refusal' FROM bc_join.events WHERE type = 'security.join.refused' "
               "ORDER BY id DESC LIMIT 1")


def keygen_l(cert_b64, name, key_type):
    """ssh-keygen -L of a certificate blob: (rc, output)."""
    path = os.path.join(d, name + "-cert.pub")
    with open(path, "w") as f:
        f.write("%s-cert-v01@openssh.com %s\n" % (key_type, cert_b64))
    r = subprocess.run(["ssh-keygen", "-L", "-f", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    return r.returncode, r.stdout, path


def principals_of(out):
    lines = out.splitlines()
    i = [n for n, l in enumerate(lines) if l.strip() == "Principals:"][0]
    got = []
    for l in lines[i + 1:]:
        if not l.startswith("                "):
            break
        got.append(l.strip())
    return got


def field(out, name):
    for l in out.splitlines():
        if l.strip().startswith(name + ":"):
            return l.split(":", 1)[1].strip()
    return None



node = w.node_id
node_h = node.replace("_", "-")

# -- names: the platform operator's, never overlapping ------------------------------
eq(one("SELECT bc_join.allow_ssh_names(%s, 'host', ARRAY['*.a.example', 'web.a.example', 'a.example'])", t1), 3,
   "allow_ssh_names gives a tenant three host patterns")
eq(one("SELECT bc_join.allow_ssh_names(%s, 'user', ARRAY['root', 'svc-*'])", t1), 2, "and two user patterns")
eq(one("SELECT bc_join.allow_ssh_names(%s, 'host', ARRAY['*.a.example'])", t1), 0, "a pattern given again is not new")
eq([code("SELECT bc_join.allow_ssh_names(%s, 'host', ARRAY[%s])", t2, p) for p in
    ("*.a.example", "db.a.example", "web.a.example", "a.example")], ["22023"] * 4,
   "another tenant's host pattern overlapping them is refused (same, under the wildcard, equal)")
eq(one("SELECT bc_join.allow_ssh_names(%s, 'host', ARRAY['*.b.example', 'x.y.a.example'])", t2), 2,
   "patterns that do not overlap (two labels under *.a.example) are another tenant's")
eq([code("SELECT bc_join.allow_ssh_names(%s, 'user', ARRAY[%s])", t2, p) for p in
    ("root", "ro*", "svc-backup", "svc-a*", "s*", "*")], ["22023"] * 6,
   "another tenant's user pattern overlapping them is refused (equal, a prefix* matching root, a name or "
   "prefix under svc-*, a shorter prefix, *): else its root logs in as root on the first tenant's hosts")
eq(one("SELECT bc_join.allow_ssh_names(%s, 'user', ARRAY['deploy', 'rt-*'])", t2), 2,
   "user names that overlap none (deploy, rt-*) are another tenant's")
rr = psycopg2.connect(dbname=sdb.dbname)
rr.set_session(isolation_level="REPEATABLE READ")
try:
    rr.cursor().execute("SELECT bc_join.allow_ssh_names(%s, 'user', ARRAY['ops'])", (t2,))
    rr_code = "ok"
except psycopg2.Error as e:
    rr_code = e.pgcode
rr.rollback()
rr.set_session(isolation_level="SERIALIZABLE")
rr.cursor().execute("SELECT bc_join.allow_ssh_names(%s, 'user', ARRAY['ops'])", (t2,))
rr.rollback()
rr.close()
eq(rr_code, "25000", "allow_ssh_names under repeatable read is refused (its snapshot predates its lock): 25000; "
   "serializable runs")
eq([code("SELECT bc_join.allow_ssh_names(%s, %s, ARRAY[%s])", t1, k, p) for k, p in
    (("host", "Web.a.example"), ("host", "10.0.0.1"), ("host", "*.*.a.example"), ("host", "a..example"),
     ("user", "ro ot"), ("user", "r*t"), ("nope", "x"))], ["22023"] * 7,
   "malformed patterns (upper case, an IP, two wildcards, an empty label, a space, an inner *) and kinds refused")
cur.execute("DROP ROLE IF EXISTS ssh_tenop")
cur.execute("CREATE ROLE ssh_tenop")
one("SELECT bc_join.grant_tenant_operator('ssh_tenop', %s)", t1)
cur.execute("SET ROLE ssh_tenop")
eq(code("SELECT bc_join.allow_ssh_names(%s, 'host', ARRAY['evil.example'])", t1), "42501",
   "a tenant operator cannot give its own tenant SSH names (42501)")
cur.execute("RESET ROLE")

# -- the rule ------------------------------------------------------------------------
eq(code("SELECT bc_join.set_ssh_settings(%s, host_principals => ARRAY['{bogus}.a.example'])", pool), "22023",
   "set_ssh_settings refuses an unknown placeholder")
eq(code("SELECT bc_join.set_ssh_settings(%s, user_source_address => '10.0.0.0/8,nonsense')", pool), "22023",
   "and a source-address that is no CIDR list")
eq(code("SELECT bc_join.set_ssh_settings(%s, user_extensions => ARRAY['permit-everything'])", pool), "22023",
   "and an unknown extension")
one("SELECT bc_join.set_ssh_settings(%s, host_principals => ARRAY['{node}.a.example', '{hostname}', "
    "'evil.b.example', 'web.a.example'], host_hostname_patterns => ARRAY['*.a.example'], "
    "user_principals => ARRAY['root', '{session}', 'admin'], user_force_command => 'echo forced', "
    "user_source_address => '127.0.0.1, 10.1.0.0/16')", pool)
eq(one("SELECT user_source_address FROM bc_join.ssh_settings WHERE pool_id = %s", pool), "127.0.0.1/32,10.1.0.0/16",
   "source-address stored as CIDRs")

# -- a host certificate --------------------------------------------------------------
ed_path, ed = keygen("host_ed25519", "-t", "ed25519")
r = call("issue_ssh_host_cert", host_req(ed, hostname="myhost.a.example"))
p = payload(r)
eq(r.get("status"), "issued", "an Ed25519 host key is certified", r)
rc, out, cert_path = keygen_l(p.get("sshCertificate", ""), "host_ed25519", "ssh-ed25519")
eq(rc, 0, "ssh-keygen -L reads it (and verifies the CA's signature)", out)
eq(principals_of(out) if rc == 0 else None, [node_h + ".a.example", "myhost.a.example", "web.a.example"],
   "principals: the rule's, in order, {node} written as a DNS label, the claimed hostname inside the "
   "pattern; evil.b.example (another tenant's name) dropped", out)
ok(rc == 0 and field(out, "Type").startswith("ssh-ed25519-cert-v01@openssh.com host certificate"),
   "a host certificate", out)
eq(field(out, "Key ID"), '"spiffe://test.bc-join.local/tenant/%s/node/%s"' % (t1, node),
   "key ID: the node's SPIFFE ID")
eq(field(out, "Serial"), p.get("sshSerial"), "serial as answered (sshSerial)")
na = one("SELECT floor(extract(epoch FROM not_after))::bigint FROM bc_join.node_certs WHERE serial = %s", w.serial)
va, vb = one("SELECT array[extract(epoch FROM valid_after)::bigint, extract(epoch FROM valid_before)::bigint] "
             "FROM bc_join.ssh_certs WHERE serial = %s", int(p["sshSerial"]))
ok(vb == na and abs(va - (time.time() - 60)) < 10, "valid from 60 s ago to the node certificate's notAfter "
   "(its whole seconds, as X.509 has it)",
   (va, vb, na))
ok("Critical Options: (none)" in out and "Extensions: (none)" in out, "no options, no extensions", out)
eq(p.get("sshKeySha256"), fz.b64u(hashlib.sha256(ed).digest()), "the answer names the key's SHA-256")
caf = os.path.join(d, "host_ca.pub")
with open(caf, "w") as f:
    f.write(one("SELECT bc_join.ssh_host_ca()"))
fp_ca = subprocess.run(["ssh-keygen", "-l", "-f", caf], stdout=subprocess.PIPE, text=True).stdout.split()[1]
ok(fp_ca in out, "signed by the key ssh_host_ca() publishes", out)

r2 = payload(call("issue_ssh_host_cert", host_req(ed, hostname="myhost.a.example")))
eq((r2.get("sshSerial"), r2.get("sshCertificate")), (p["sshSerial"], p["sshCertificate"]),
   "a repeat for the same key answers the same certificate")
ecp, ec384 = keygen("host_ecdsa384", "-t", "ecdsa", "-b", "384")
p3 = payload(call("issue_ssh_host_cert", host_req(ec384, hostname="other.example")))
rc, out3, _ = keygen_l(p3.get("sshCertificate", ""), "host_ecdsa384", "ecdsa-sha2-nistp384")
eq(principals_of(out3) if rc == 0 else out3, [node_h + ".a.example", "web.a.example"],
   "ECDSA P-384: a hostname claim outside host_hostname_patterns is ignored")
p4 = payload(call("issue_ssh_host_cert", host_req(keygen("k3", "-t", "ed25519")[1],
                                                    principals=["web.a.example"])))
rc, out4, _ = keygen_l(p4.get("sshCertificate", ""), "k3", "ssh-ed25519")
eq(principals_of(out4) if rc == 0 else out4, ["web.a.example"], "principals asked for (allowed): only those")
r5 = call("issue_ssh_host_cert", host_req(keygen("k4", "-t", "ed25519")[1], principals=["evil.b.example"]))
eq((r5.get("status"), last_refusal()), ("refused", "ssh-host:principal"),
   "a principal asked for and not allowed: the one refusal, ssh-host:principal")
ok(one("SELECT payload->'detail'->>'principal' FROM bc_join.events WHERE type = 'security.join.refused' "
       "ORDER BY id DESC LIMIT 1") == "evil.b.example", "the refusal event names the principal")
call("issue_ssh_host_cert", host_req(keygen("k5", "-t", "ed25519")[1]))
r6 = call("issue_ssh_host_cert", host_req(keygen("k6", "-t", "ed25519")[1]))
eq((r6.get("status"), last_refusal()), ("refused", "ssh-host:too-many-keys"),
   "a fifth key for one node certificate: ssh-host:too-many-keys")
r7 = call("issue_ssh_host_cert", host_req(ed, bind=ec384))
eq((r7.get("status"), last_refusal()), ("refused", "ssh-host:key-binding"),
   "a proof for another key: ssh-host:key-binding")
eq(code("SELECT bc_join.issue_ssh_host_cert(%s::jsonb)",
        json.dumps({"sshPublicKey": base64.b64encode(ed).decode(), "proof": "x", "extra": 1})), "22023",
   "an unknown member: INVALID_INPUT")
eq(one("SELECT count(*) FROM bc_join.audit_log WHERE action = 'ssh.host.issue' AND tenant_id = %s", t1), 4,
   "an audit row per host certificate (ssh.host.issue)")
eq(one("SELECT count(*) FROM bc_join.events WHERE type = 'ssh.certificate.issued' AND tenant_id = %s", t1), 4,
   "and an event ssh.certificate.issued")

# A claimed hostname another node's live host certificate carries is not given again.
n2key, n2der = fz.new_csr()
n2 = json.loads(one("SELECT bc_join(%s::jsonb)::text", json.dumps(w.join_doc(n2key, n2der))))
node2 = payload(n2).get("nodeId")
n2serial = one("SELECT serial FROM bc_join.node_certs WHERE node_id = %s AND revoked_at IS NULL", node2)
r8 = call("issue_ssh_host_cert", host_req(keygen("n2a", "-t", "ed25519")[1], hostname="myhost.a.example",
                                          principals=["myhost.a.example"], key=n2key, serial=n2serial))
eq((r8.get("status"), last_refusal()), ("refused", "ssh-host:principal"),
   "another node of the pool asking for a hostname a live host certificate of the first carries: "
   "ssh-host:principal")
p9 = payload(call("issue_ssh_host_cert", host_req(keygen("n2b", "-t", "ed25519")[1], hostname="myhost.a.example",
                                                  key=n2key, serial=n2serial)))
eq(p9.get("principals"), [node2.replace("_", "-") + ".a.example", "web.a.example"],
   "claiming it without asking: the certificate leaves it out", p9)


# -- a user certificate for a session -------------------------------------------------
def session(session_ref, ssh_user=True):
    key, der = fz.new_csr()
    p = {"purpose": "session", "serial": w.serial, "csrSha256": fz.b64u(hashlib.sha256(der).digest()),
         "iat": int(time.time()), "session": session_ref}
    if ssh_user is not None:
        p["sshUser"] = ssh_user
    return call("issue_session", {"csr": fz.b64u(der), "proof": fz.jws_es256(w.node_key, p)}), key


rs, skey = session("svc-backup")
ps = payload(rs)
eq(rs.get("status"), "issued", "a session with sshUser: true is issued")
rc, outu, upath = keygen_l(ps.get("sshCertificate", ""), "user", "ecdsa-sha2-nistp256")
eq(principals_of(outu) if rc == 0 else outu, ["root", "svc-backup"],
   "its user certificate: the rule's principals within the names ({session}; admin dropped)")
ok("force-command echo forced" in outu and "source-address 127.0.0.1/32,10.1.0.0/16" in outu,
   "force-command and source-address from the rule", outu)
ext = outu.split("Extensions:")[1].split()
eq(ext, ["permit-pty"], "only permit-pty (no agent forwarding)")
from cryptography.hazmat.primitives import serialization  # noqa: E402
kpath = os.path.join(d, "session.key")
with open(kpath, "wb") as f:
    f.write(skey.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                               serialization.NoEncryption()))
os.chmod(kpath, 0o600)
pub = subprocess.run(["ssh-keygen", "-y", "-f", kpath], stdout=subprocess.PIPE, text=True).stdout.split()[1]
eq(field(outu, "Public key").split()[-1] if field(outu, "Public key") else None,
   subprocess.run(["ssh-keygen", "-l", "-f", "/dev/stdin"], input="ecdsa-sha2-nistp256 " + pub,
                  stdout=subprocess.PIPE, text=True).stdout.split()[1],
   "it certifies the session's CSR key")
ses_serial, ses_na = one("SELECT array[serial, floor(extract(epoch FROM not_after))::bigint::text] "
                         "FROM bc_join.session_certs ORDER BY issued_at DESC LIMIT 1")
eq(one("SELECT extract(epoch FROM valid_before)::bigint::text FROM bc_join.ssh_certs WHERE serial = %s",
       int(ps["sshSerial"])), ses_na, "valid until the session certificate's notAfter")
ok(field(outu, "Key ID").startswith('"spiffe://test.bc-join.local/tenant/%s/node/%s/session/' % (t1, node)),
   "key ID: the session's SPIFFE ID", outu)
eq(one("SELECT count(*) FROM bc_join.audit_log WHERE action = 'ssh.user.issue' AND detail->>'serial' = %s",
       ps["sshSerial"]), 1, "audited (ssh.user.issue)")
rn, _ = session("plain", ssh_user=None)
ok(rn.get("status") == "issued" and "sshCertificate" not in payload(rn), "a session without sshUser: no certificate")
one("SELECT bc_join.set_ssh_settings(%s, user_principals => ARRAY['admin'])", pool)
rr, _ = session("svc-x")
ok(rr.get("status") == "issued" and "sshCertificate" not in payload(rr),
   "a rule whose names are none of the tenant's: the session is issued without one")
eq(one("SELECT payload->>'reason' FROM bc_join.events WHERE type = 'ssh.user.refused' ORDER BY id DESC LIMIT 1"),
   "no-principals", "and ssh.user.refused says no-principals")
one("SELECT bc_join.set_ssh_settings(%s, user_principals => ARRAY['root', '{session}'])", pool)

# -- the CA keys: without them INVALID_CONFIG; --add-ssh-ca-keys; a rollover ---------------
kd = os.path.join(d, "keys")
KG = os.path.join(bctest.TOP, "tools/bc-join-keygen")
subprocess.run([KG, kd], check=True, stdout=subprocess.DEVNULL)
for k in ("ssh-host-ca.key", "ssh-user-ca.key"):
    os.unlink(os.path.join(kd, k))
cur.execute("SET bc_join.key_dir = %s", (kd,))


def user_cert_ca(tag):
    """The fingerprint of the CA that signed a new session's user certificate (ssh-keygen -L)."""
    r, _ = session("svc-" + tag)
    rc, o, _ = keygen_l(payload(r).get("sshCertificate", ""), "u-" + tag, "ecdsa-sha2-nistp256")
    return field(o, "Signing CA").split()[1] if rc == 0 and field(o, "Signing CA") else o


def fingerprints(lines):
    f = os.path.join(d, "ca-lines.pub")
    with open(f, "w") as fh:
        fh.write(lines)
    return [l.split()[1] for l in subprocess.run(["ssh-keygen", "-l", "-f", f], stdout=subprocess.PIPE,
                                                 text=True).stdout.splitlines()]


eq((code("SELECT bc_join.issue_ssh_host_cert(%s::jsonb)", json.dumps(host_req(keygen("k7", "-t", "ed25519")[1]))),
    code("SELECT bc_join.ssh_host_ca()"),
    code("SELECT bc_join.ssh_user_ca()")), ("F0000", "F0000", "F0000"),
   "a key directory without the SSH CA keys: host issuance, ssh_host_ca(), ssh_user_ca() are INVALID_CONFIG")
try:
    session("svc-nokey")
    got = "ok"
except psycopg2.Error as e:
    got = e.pgcode
eq(got, "F0000", "and a session asking for SSH under a user rule is INVALID_CONFIG, never a refusal")
r = subprocess.run([KG, "--add-ssh-ca-keys", kd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
eq(r.returncode, 0, "bc-join-keygen --add-ssh-ca-keys", r.stdout)
ok(one("SELECT bc_join.ssh_host_ca()").startswith("ecdsa-sha2-nistp256 ") and
   one("SELECT bc_join.ssh_user_ca()").startswith("ecdsa-sha2-nistp256 "), "then both CAs are published")
r = subprocess.run([KG, "--add-ssh-ca-keys", kd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
ok(r.returncode != 0 and "refusing to overwrite" in r.stdout, "and it never overwrites them", r.stdout)
old_ca = fingerprints(one("SELECT bc_join.ssh_user_ca()"))
eq(user_cert_ca("a"), old_ca[0], "a user certificate is signed by the new ssh-user-ca.key")
subprocess.run([KG, "--stage-ssh-ca", kd], check=True, stdout=subprocess.DEVNULL)
staged = fingerprints(one("SELECT bc_join.ssh_user_ca()"))
ok(len(staged) == 2 and staged[0] == old_ca[0] and len(fingerprints(one("SELECT bc_join.ssh_host_ca()"))) == 2,
   "--stage-ssh-ca: the next CA keys are published after the current ones", staged)
eq(user_cert_ca("b"), old_ca[0], "and the current one still signs")
subprocess.run([KG, "--promote-ssh-ca", kd], check=True, stdout=subprocess.DEVNULL)
eq(fingerprints(one("SELECT bc_join.ssh_user_ca()")), [staged[1], old_ca[0]],
   "--promote-ssh-ca: the staged key is current (first), the old one previous (still published)")
eq(user_cert_ca("c"), staged[1], "and the promoted key signs")
subprocess.run([KG, "--retire-ssh-ca", kd], check=True, stdout=subprocess.DEVNULL)
eq(fingerprints(one("SELECT bc_join.ssh_user_ca()")), [staged[1]], "--retire-ssh-ca: the old key is gone")
cur.execute("RESET bc_join.key_dir")

# -- revocation and the KRL ------------------------------------------------------------
krl0 = bytes(one("SELECT bc_join.ssh_krl()"))
eq(krl0, bytes(one("SELECT bc_join.ssh_krl()")), "two calls of ssh_krl() give the same bytes")
krlf = os.path.join(d, "krl")


def krl_query(cert_file):
    with open(krlf, "wb") as f:
        f.write(bytes(one("SELECT bc_join.ssh_krl()")))
    return subprocess.run(["ssh-keygen", "-Q", "-f", krlf, cert_file], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True).returncode


eq(krl_query(upath), 0, "ssh-keygen -Q: the user certificate is not in the KRL yet")
ok(one("SELECT bc_join.revoke_certificate(%s, 'keyCompromise')", ses_serial), "revoke_certificate(session)")
eq(one("SELECT revocation_reason FROM bc_join.ssh_certs WHERE serial = %s", int(ps["sshSerial"])), "keyCompromise",
   "its SSH certificate is revoked with the same reason")
eq(krl_query(upath), 1, "ssh-keygen -Q: revoked by the KRL")
v1 = one("SELECT version FROM bc_join.ssh_krl_state")

# a renewal: the old host certificate stays valid
nkey, nder = fz.new_csr()
rp = {"purpose": "renew", "serial": w.serial, "csrSha256": fz.b64u(hashlib.sha256(nder).digest()),
      "iat": int(time.time())}
rnw = call("renew", {"csr": fz.b64u(nder), "proof": fz.jws_es256(w.node_key, rp)})
eq(rnw.get("status"), "issued", "the node renews")
w.renewed(nkey)
eq(krl_query(cert_path), 0, "the renewed node certificate's host certificate is not revoked")
pn = payload(call("issue_ssh_host_cert", host_req(ed, hostname="myhost.a.example")))
ok(pn.get("sshSerial") not in (None, p["sshSerial"]), "the new node certificate gets a new host certificate")
newhost = os.path.join(d, "host_new-cert.pub")
with open(newhost, "w") as f:
    f.write("ssh-ed25519-cert-v01@openssh.com %s\n" % pn.get("sshCertificate"))
# Two requests for one key at once: the second waits for the first and answers its certificate.
import threading  # noqa: E402
k8 = keygen("k8", "-t", "ed25519")[1]
c1 = psycopg2.connect(dbname=sdb.dbname)
c1.cursor().execute("BEGIN")
cx = c1.cursor()
cx.execute("SELECT bc_join.issue_ssh_host_cert(%s::jsonb)::text", (json.dumps(host_req(k8)),))
first = payload(json.loads(cx.fetchone()[0])).get("sshSerial")
second = {}


def other():
    c2 = psycopg2.connect(dbname=sdb.dbname)
    c2.autocommit = True
    k = c2.cursor()
    k.execute("SELECT bc_join.issue_ssh_host_cert(%s::jsonb)::text", (json.dumps(host_req(k8)),))
    second["serial"] = payload(json.loads(k.fetchone()[0])).get("sshSerial")
    c2.close()


th = threading.Thread(target=other)
th.start()
th.join(1.0)
waited = th.is_alive()
c1.commit()
th.join(10)
c1.close()
ok(waited and first is not None and second.get("serial") == first and
   one("SELECT count(*) FROM bc_join.ssh_certs WHERE key_sha256 = %s", hashlib.sha256(k8).digest()) == 1,
   "two requests for one key at once: the second waits for the first and answers the same certificate",
   (waited, first, second))
# Two nodes claiming one hostname at once: the second waits for the first and does not get it.
c1 = psycopg2.connect(dbname=sdb.dbname)
cx = c1.cursor()
cx.execute("SELECT bc_join.issue_ssh_host_cert(%s::jsonb)::text",
           (json.dumps(host_req(keygen("k9", "-t", "ed25519")[1], hostname="race.a.example")),))
race1 = payload(json.loads(cx.fetchone()[0])).get("principals")
race2 = {}


def other2():
    c2 = psycopg2.connect(dbname=sdb.dbname)
    c2.autocommit = True
    k = c2.cursor()
    k.execute("SELECT bc_join.issue_ssh_host_cert(%s::jsonb)::text",
              (json.dumps(host_req(keygen("n2r", "-t", "ed25519")[1], hostname="race.a.example",
                                   principals=["race.a.example"], key=n2key, serial=n2serial)),))
    race2["status"] = json.loads(k.fetchone()[0]).get("status")
    c2.close()


th = threading.Thread(target=other2)
th.start()
th.join(1.0)
waited = th.is_alive()
c1.commit()
th.join(10)
c1.close()
ok(waited and race1 is not None and "race.a.example" in race1 and race2.get("status") == "refused",
   "two nodes claiming one hostname at once: the second waits for the first's commit and is refused",
   (waited, race1, race2))
p3f = os.path.join(d, "p384-cert.pub")
with open(p3f, "w") as f:
    f.write("ecdsa-sha2-nistp384-cert-v01@openssh.com %s\n" % p3["sshCertificate"])
eq(krl_query(p3f), 0, "another host certificate of the renewed node certificate is not in the KRL either")
eq((one("SELECT bc_join.revoke_ssh_certificate(%s, 'keyCompromise')", int(p3["sshSerial"])),
    one("SELECT bc_join.revoke_ssh_certificate(%s, 'keyCompromise')", int(p3["sshSerial"]))), (True, False),
   "revoke_ssh_certificate revokes it (true), and again is false")
eq(krl_query(p3f), 1, "ssh-keygen -Q: now the KRL has it")
eq(one("SELECT payload->>'reason' FROM bc_join.events WHERE type = 'ssh.certificate.revoked' "
       "AND payload->>'serial' = %s", p3["sshSerial"]), "keyCompromise", "event ssh.certificate.revoked")
eq(one("SELECT bc_join.revoke_node(%s, 'cessationOfOperation')", node), 1, "revoke_node")
eq(krl_query(newhost), 1, "ssh-keygen -Q: the live host certificate is revoked")
eq(krl_query(cert_path), 1, "and so is the one of the certificate it renewed (the same host key, still valid)")
eq(one("SELECT count(*) FROM bc_join.ssh_certs WHERE node_id = %s AND revoked_at IS NULL", node), 0,
   "no SSH certificate of the revoked node is live")
v2 = one("SELECT version FROM bc_join.ssh_krl_state")
ok(v2 > v1 > 0, "the KRL version grew with each revocation", (v1, v2))
lst = subprocess.run(["ssh-keygen", "-Q", "-l", "-f", krlf], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                     text=True).stdout
ok("# KRL version %d" % v2 in lst and "serial: %s" % pn["sshSerial"] in lst and "serial: %s" % ps["sshSerial"] in lst,
   "ssh-keygen -Q -l lists the version and both serials", lst)
revs = one("SELECT count(*) FROM bc_join.audit_log WHERE action = 'ssh.certificate.revoke' AND tenant_id = %s", t1)
eq(revs, one("SELECT count(*) FROM bc_join.ssh_certs WHERE revoked_at IS NOT NULL AND tenant_id = %s", t1),
   "an audit row (ssh.certificate.revoke) per SSH certificate revoked")
ok(one("SELECT bc_join.verify_audit_log()"), "verify_audit_log() holds")
eq(code("SELECT bc_join.revoke_ssh_certificate(%s, 'certificateHold')", int(p3["sshSerial"])), "22023",
   "revoke_ssh_certificate refuses certificateHold")

# -- signed_ssh ------------------------------------------------------------------------
sk = json.loads(one("SELECT bc_join.service_keys()::text"))
doc = json.loads(one("SELECT bc_join.signed_ssh()::text"))
tok = jjws.JWS()
tok.deserialize(doc["keys"][0])
tok.verify(jwk.JWK(**sk["signingKey"]))
sp = json.loads(tok.payload)
with open(krlf, "rb") as f:
    krl_now = f.read()
eq((sp["krlVersion"], sp["krlSha256"]), (v2, fz.b64u(hashlib.sha256(krl_now).digest())),
   "signed_ssh() verifies with the signing key and names the KRL's version and SHA-256")
eq(sp["hostCa"], one("SELECT bc_join.ssh_host_ca()").splitlines(), "and the host CA lines")
eq(sp["userCa"], one("SELECT bc_join.ssh_user_ca()").splitlines(), "and the user CA lines")

# The first node revoked, its hostname is free for the other.
p10 = payload(call("issue_ssh_host_cert", host_req(keygen("n2c", "-t", "ed25519")[1], hostname="myhost.a.example",
                                                   principals=["myhost.a.example"], key=n2key, serial=n2serial)))
eq(p10.get("principals"), ["myhost.a.example"], "once the node holding it is revoked, another may claim the hostname",
   p10)
# A reclaim revokes the old node certificates by a plain UPDATE (admit.c, revoke_older):
# the cascade itself tells the gateway the KRL changed.
lc = psycopg2.connect(dbname=sdb.dbname)
lc.autocommit = True
lc.cursor().execute("LISTEN bc_join_crl")
cur.execute("UPDATE bc_join.node_certs SET revoked_at = bc_join.compute_now(), revocation_reason = 'reclaimed' "
            "WHERE node_id = %s AND revoked_at IS NULL", (node2,))
time.sleep(0.2)
lc.poll()
chans = [x.channel for x in lc.notifies]
lc.close()
eq((chans.count("bc_join_crl") > 0,
    one("SELECT count(*) FROM bc_join.ssh_certs WHERE node_id = %s AND revocation_reason = 'reclaimed'", node2)),
   (True, 2), "a reclaim revokes the node's host certificates (reclaimed) and sends NOTIFY bc_join_crl", chans)

# -- a tenant operator sees its own tenant's only -------------------------------------
one("SELECT bc_join.set_ssh_settings(%s, host_principals => ARRAY['x.b.example'])", p2)
cur.execute("SET ROLE ssh_tenop")
eq(one("SELECT count(DISTINCT tenant_id) || ':' || min(tenant_id) FROM bc_join.ssh_certificates"), "1:" + t1,
   "a tenant operator sees its tenant's SSH certificates only")
eq(one("SELECT count(*) FROM bc_join.ssh_settings WHERE tenant_id <> %s", t1), 0, "and its settings only")
eq(one("SELECT count(*) FROM bc_join.audit_log WHERE action LIKE 'ssh.%%' AND tenant_id <> %s", t1), 0,
   "and its SSH audit rows only")
eq(code("SELECT bc_join.set_ssh_settings(%s, host_principals => ARRAY['y.b.example'])", p2), "42501",
   "and cannot set another tenant's pool's rule")
cur.execute("RESET ROLE")

# -- retention: expired SSH certificates are pruned with the certificates ----------------
cur.execute("SET bc_join.clock_offset = %s", (400 * 86400,))
ok(one("SELECT bc_join.prune_certificates(100000)") > 0, "prune_certificates, 400 days on")
eq(one("SELECT count(*) FROM bc_join.ssh_certs"), 0, "has pruned every expired SSH certificate")
ok(one("SELECT version FROM bc_join.ssh_krl_state") > v2, "revoked ones among them: the KRL's version grew")
with open(krlf, "wb") as f:
    f.write(bytes(one("SELECT bc_join.ssh_krl()")))
lst = subprocess.run(["ssh-keygen", "-Q", "-l", "-f", krlf], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                     text=True).stdout
ok("serial:" not in lst, "and it lists no serial any more", lst)
cur.execute("RESET bc_join.clock_offset")
tap.note("%.1f s" % (time.time() - t0))
sys.exit(tap.done())
