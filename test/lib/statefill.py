"""statefill.py: a bc_join database holding every kind of state, made through
the real entry points, and the checks that a copy of it (a restore, an
upgrade) is the same service.

Filler(...).fill() joins nodes by join token, by tpm (a swtpm with EK
certificates behind tpm2-abrmd, the evidence made by bcd itself), by
cloud-iid (AWS, the local stand-in CA of cloudfix.py), a site agent and a
ramdisk by discovery, reclaims a node by x509pop, renews, issues sessions,
queues, dispatches and completes commands, revokes a certificate, leaves a
join request pending and rejects another, registers a custom SQL attestor
and joins through it, prunes by retention, and appends to the issuance log
from several backends (so from several of its 16 chains).  Where the
extension has SSH (#47, 0.7.0) it gives a tenant SSH host and user names and
a pool a rule, certifies two SSH host keys of a node (bc_join.issue_ssh_host_cert,
a proof by the node's key) and a session's key (a session proof with
"sshUser": true), and revokes one host certificate (revoke_ssh_certificate:
ssh_krl_state's row).  Everything a later check needs (keys, tokens,
requests, serials) stays in the object.

The checks (Filler.check_*) run against any database that should be the
same service: rows table by table, the audit chains and an anchor published
before, a renewal of a node joined before, a token's remaining uses, used
evidence refused, a pending request approved and completed, the CRL, a
queued command dispatched once; and after an SSH fill, ssh_krl() the same
bytes, the revoked serial still listed (ssh-keygen -Q -l), the host key
certified before answered its same certificate, the revoked one's refused
(ssh-host:revoked), a session's user certificate by the pool's rule.  They
work with the 0.1.0 library as well (the fill of test/tap/upgrade.t runs on
it, without SSH).

Standard library, psycopg2, python3-cryptography and the repo's tools.
"""
import base64, datetime, hashlib, json, os, shutil, subprocess, tempfile, time

import psycopg2
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

import cloudfix

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# The tables whose rows are compared; a column list replaces '*' where a
# column's text depends on the reader (none today).
ORDER = {"audit_log": "chain, id", "events": "id", "refusal_rate": "attestor, refusal"}

# The tables an SSH fill (#47) puts rows in.
SSH_TABLES = ("ssh_names", "ssh_settings", "ssh_certs", "ssh_krl_state")


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def b64ud(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def payload_of(answer):
    """The signed payload of a bc_join()-style answer, unverified (tests only)."""
    return json.loads(b64ud(answer["response"].split(".")[1]))


def jws_es256(key, body):
    """A JWS ES256 compact serialization over body (a dict) by a P-256 key."""
    h = b64u(json.dumps({"alg": "ES256"}, separators=(",", ":")).encode())
    p = b64u(json.dumps(body, separators=(",", ":")).encode())
    r, s = decode_dss_signature(key.sign((h + "." + p).encode(), ec.ECDSA(hashes.SHA256())))
    return h + "." + p + "." + b64u(r.to_bytes(32, "big") + s.to_bytes(32, "big"))


def new_csr():
    """A fresh P-256 key and its CSR: (key, DER, base64url DER, csrSha256)."""
    k = ec.generate_private_key(ec.SECP256R1())
    d = (x509.CertificateSigningRequestBuilder().subject_name(x509.Name([]))
         .sign(k, hashes.SHA256()).public_bytes(serialization.Encoding.DER))
    return k, d, b64u(d), b64u(hashlib.sha256(d).digest())


def ssh_host_key():
    """A fresh Ed25519 key's OpenSSH public key blob (as sshd's host key would be)."""
    line = ed25519.Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return base64.b64decode(line.split()[1])


def ssh_keygen(*args, data=None):
    """ssh-keygen args with data (text or bytes) in a file named by {} among them: (rc, output)."""
    with tempfile.NamedTemporaryFile(mode="wb" if isinstance(data, bytes) else "w", suffix="-cert.pub") as f:
        f.write(data)
        f.flush()
        r = subprocess.run(["ssh-keygen"] + [f.name if a == "{}" else a for a in args],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode, r.stdout


class Node:
    """A joined node as its agent knows it: id, current key and serial."""

    def __init__(self, name, node_id, key, serial, directory=None):
        self.name, self.id, self.key, self.serial, self.dir = name, node_id, key, serial, directory


class Filler:
    def __init__(self, dbname, pgenv, scratch, bcd, service_keys, note=print):
        self.dbname = dbname
        self.pgenv = dict(pgenv)
        self.scratch = scratch
        self.bcd = bcd
        self.keys = service_keys
        self.note = note
        os.makedirs(scratch, exist_ok=True)
        self.nodes = {}
        self.conns = []
        self.tpm_dir = None
        self.ssh = False

    # ------------------------------------------------------------ plumbing
    def connect(self, dbname=None):
        c = psycopg2.connect(dbname=dbname or self.dbname, host=self.pgenv["PGHOST"],
                             port=self.pgenv["PGPORT"], user=self.pgenv.get("PGUSER", "postgres"))
        c.autocommit = True
        return c

    def cur(self, i=0):
        """A cursor on the i-th connection (a backend of its own: its own audit chain)."""
        while len(self.conns) <= i:
            self.conns.append(self.connect())
        return self.conns[i].cursor()

    def one(self, sql, *args, i=0):
        c = self.cur(i)
        c.execute(sql, args)
        r = c.fetchone()
        return None if r is None else r[0]

    def close(self):
        for c in self.conns:
            c.close()
        self.conns = []

    def run(self, *args, **kw):
        env = dict(os.environ)
        env.update(self.pgenv)
        env.update(kw.pop("env", {}))
        return subprocess.run(args, capture_output=True, text=True, check=True, env=env, **kw).stdout

    def send(self, fn, req, i=0):
        """SELECT fn(req): the answer (a dict)."""
        c = self.cur(i)
        c.execute("SELECT %s(%%s::jsonb)" % fn, (req if isinstance(req, str) else json.dumps(req),))
        return c.fetchone()[0]

    def join_request(self, name, token=None, **opt):
        args = [self.bcd, "join-request", "--service-keys", self.keys,
                "--out-dir", os.path.join(self.scratch, name)]
        if token:
            args += ["--token", token]
        for k, v in opt.items():
            args += ["--" + k.replace("_", "-"), v]
        return self.run(*args)

    def sealed(self, token, csr_der):
        """The token sealed to the service's encryption key, bound to the CSR (jwcrypto)."""
        from jwcrypto import jwe, jwk
        from jwcrypto.common import json_encode
        with open(self.keys) as f:
            enc = json.load(f)["encryptionKey"]
        t = jwe.JWE(token.encode(), protected=json_encode(
            {"alg": "ECDH-ES", "enc": "A256GCM", "csrSha256": b64u(hashlib.sha256(csr_der).digest())}))
        t.add_recipient(jwk.JWK(**enc))
        return t.serialize(compact=True)

    def node_key(self, name):
        with open(os.path.join(self.scratch, name, "node.key"), "rb") as f:
            return serialization.load_pem_private_key(f.read(), None)

    def token(self, tenant, pool, uses=1, **kw):
        extra = "".join(", %s => %%s" % k for k in kw)
        return self.one("SELECT bc_join.create_join_token(%%s, %%s, uses => %%s%s)" % extra,
                        tenant, pool, uses, *kw.values())

    def last_refusal(self):
        return self.one("SELECT payload->>'refusal' FROM bc_join.events "
                        "WHERE type = 'security.join.refused' ORDER BY id DESC LIMIT 1")

    def token_join(self, name, token, i=0, **opt):
        """A join by token (bcd join-request); the Node, its answer stored by bcd."""
        req = self.join_request(name, token, **opt)
        ans = self.send("bc_join", req, i)
        if ans.get("status") != "issued":
            raise RuntimeError("join %s: %r (%s)" % (name, ans, self.last_refusal()))
        d = os.path.join(self.scratch, name)
        with open(os.path.join(d, "answer.json"), "w") as f:
            json.dump(ans, f)
        self.run(self.bcd, "verify-response", "--service-keys", self.keys, "--dir", d,
                 "--response", os.path.join(d, "answer.json"))
        pl = payload_of(ans)
        n = Node(name, pl["nodeId"], self.node_key(name), pl["serial"], d)
        self.nodes[name] = n
        return n

    # --------------------------------------------------- requests by a node key
    def renew(self, node, i=0):
        k, _, csr, sha = new_csr()
        proof = jws_es256(node.key, {"purpose": "renew", "serial": node.serial, "csrSha256": sha,
                                     "iat": int(time.time()) + self.offset()})
        ans = self.send("bc_join.renew", {"csr": csr, "proof": proof}, i)
        if ans.get("status") == "issued":
            node.key, node.serial = k, payload_of(ans)["serial"]
        return ans

    def session(self, node, session, context=None, i=0, ssh_user=False):
        _, _, csr, sha = new_csr()
        body = {"purpose": "session", "serial": node.serial, "csrSha256": sha,
                "iat": int(time.time()) + self.offset(), "session": session}
        if context:
            body["context"] = context
        if ssh_user:
            body["sshUser"] = True
        return self.send("bc_join.issue_session", {"csr": csr, "proof": jws_es256(node.key, body)}, i)

    def ssh_host(self, node, blob, hostname=None, i=0):
        """bc_join.issue_ssh_host_cert for an SSH public key blob, proven by the node's key."""
        body = {"purpose": "ssh-host", "serial": node.serial, "iat": int(time.time()) + self.offset(),
                "sshKeySha256": b64u(hashlib.sha256(blob).digest())}
        if hostname:
            body["hostname"] = hostname
        return self.send("bc_join.issue_ssh_host_cert", {"sshPublicKey": base64.b64encode(blob).decode(),
                                                         "proof": jws_es256(node.key, body)}, i)

    def fetch_commands(self, node, i=0):
        proof = jws_es256(node.key, {"purpose": "commands", "serial": node.serial,
                                     "iat": int(time.time()) + self.offset()})
        ans = self.send("bc_join.fetch_commands", {"proof": proof}, i)
        return payload_of(ans)["commands"] if ans.get("status") == "issued" else ans

    def complete_command(self, node, cid, status, result, i=0):
        raw = json.dumps(result).encode()
        proof = jws_es256(node.key, {"purpose": "complete", "serial": node.serial,
                                     "iat": int(time.time()) + self.offset(), "commandId": cid,
                                     "status": status, "resultSha256": b64u(hashlib.sha256(raw).digest())})
        return self.send("bc_join.complete_command", {"proof": proof, "result": b64u(raw)}, i)

    def offset(self):
        return 0

    # ------------------------------------------------------------ the fill
    def fill(self):
        one = self.one
        self.t1 = one("SELECT bc_join.create_tenant('acme')")
        self.s1 = one("SELECT bc_join.create_site(%s, 'dc1')", self.t1)
        self.p1 = one("SELECT bc_join.create_pool(%s, %s, 'gpu')", self.t1, self.s1)
        self.t2 = one("SELECT bc_join.create_tenant('globex')")
        self.s2 = one("SELECT bc_join.create_site(%s, 'dc2')", self.t2)
        self.p2 = one("SELECT bc_join.create_pool(%s, %s, 'cpu')", self.t2, self.s2)
        one("SELECT bc_join.register_command_kind('acme.reindex', 'an operator''s own kind')")

        # Token joins from several backends (several chains of the log); a
        # three-use token keeps two uses.
        self.tok3 = self.token(self.t1, self.p1, 3)
        self.token_join("n1", self.tok3, i=0)
        self.token_join("n2", self.token(self.t2, self.p2), i=1)
        self.token_join("n3", self.token(self.t1, self.p1, allow_reclaim=True), i=2)
        self.token_join("n4", self.token(self.t1, self.p1), i=3)
        # a refused join (a token of another tenant's pool does not exist for it)
        bad = self.send("bc_join", self.join_request("bad", self.tok3[:-2] + "xx"), 1)
        assert bad["status"] == "refused", bad

        # cloud-iid: an AWS instance admitted once, ever (with a sealed token).
        self.clouds = cloudfix.Clouds(os.path.join(self.scratch, "clouds"))
        self.clouds.configure(self.cur(), self.t1, self.p1)
        # a cloud registered in SQL (#42, 0.4.0): its row, anchors and an account of two roles
        if self.one("SELECT to_regprocedure('bc_join.cloud_builtin_provider(text)') IS NOT NULL"):
            self.clouds.acmecloud_register(self.cur())
            self.cur().execute("INSERT INTO bc_join.cloud_accounts (provider, account, tenant_id, pool_id, roles) "
                               "VALUES ('acmecloud', 'tenancy-7', %s, %s, ARRAY['node', 'site'])",
                               (self.t1, self.p1))
        self.aws_doc = self.clouds.aws_document(instance="i-0fedcba987654321f")
        self.aws_p7 = self.clouds.aws_pkcs7(self.aws_doc)
        ev = os.path.join(self.scratch, "aws-evidence.json")
        with open(ev, "w") as f:
            f.write(self.clouds.aws_evidence(self.aws_doc, self.aws_p7))
        self.aws_evidence = ev
        self.token_join("aws1", self.token(self.t1, self.p1), i=2, attestor="cloud-iid",
                        attestation_file=ev)

        # Retention: the events and expired uses of evidence so far pruned,
        # an hour of service clock later (a row pruned stays pruned).
        c = self.cur(4)
        c.execute("SET bc_join.clock_offset = 7200")
        c.execute("SET bc_join.retain_events = 3600")
        c.execute("SELECT bc_join.prune()")
        self.pruned = c.fetchone()[0]
        c.execute("RESET bc_join.clock_offset")
        c.execute("RESET bc_join.retain_events")
        assert self.pruned["events"] > 0, self.pruned

        # A renewal, sessions, commands.
        n1 = self.nodes["n1"]
        assert self.renew(n1, 1)["status"] == "issued"
        for sess, ctx, i in (("s-1", None, 0), ("s-1", "sub-a", 1), ("s-2", None, 2)):
            a = self.session(n1, sess, ctx, i)
            assert a["status"] == "issued", (a, self.last_refusal())
        self.done_cmd = one("SELECT bc_join.enqueue_command(%s, 'diag.ping', '{\"n\": 1}')", n1.id)
        got = self.fetch_commands(n1, 3)
        assert [x["id"] for x in got] == [self.done_cmd], got
        assert self.complete_command(n1, self.done_cmd, "done", {"exitCode": 0})["status"] == "issued"
        self.queued_cmd = one("SELECT bc_join.enqueue_command(%s, 'acme.reindex', '{\"n\": 2}')", n1.id)

        # A revoked certificate (and its node gone from the live set).
        n2 = self.nodes["n2"]
        assert one("SELECT bc_join.revoke_certificate(%s, 'keyCompromise')", n2.serial)

        # x509pop: n3 reclaimed with its node certificate, a new key.
        n3 = self.nodes["n3"]
        cert = bytes(one("SELECT certificate FROM bc_join.node_certs WHERE serial = %s", n3.serial))
        k, _, csr, sha = new_csr()
        h = b64u(json.dumps({"alg": "ES256", "x5c": [base64.b64encode(cert).decode()]}).encode())
        p = b64u(json.dumps({"purpose": "x509pop", "nodeId": n3.id, "csrSha256": sha,
                             "iat": int(time.time())}).encode())
        r, s = decode_dss_signature(n3.key.sign((h + "." + p).encode(), ec.ECDSA(hashes.SHA256())))
        jws = h + "." + p + "." + b64u(r.to_bytes(32, "big") + s.to_bytes(32, "big"))
        a = self.send("bc_join", {"csr": csr, "role": "node", "attestor": "x509pop",
                                  "attestation": b64u(jws.encode())}, 0)
        assert a["status"] == "issued" and payload_of(a)["nodeId"] == n3.id, (a, self.last_refusal())
        n3.key, n3.serial = k, payload_of(a)["serial"]

        # A custom SQL attestor (the seed's shape, trimmed) and a join through it.
        c = self.cur()
        c.execute("""
            CREATE SCHEMA IF NOT EXISTS acme;
            CREATE TABLE IF NOT EXISTS acme.assets (asset_tag text PRIMARY KEY, tenant_id text, pool_id text);
            CREATE OR REPLACE FUNCTION acme.verify(evidence jsonb, context jsonb) RETURNS jsonb
                LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $f$
            DECLARE a record;
            BEGIN
                SELECT * INTO a FROM acme.assets
                    WHERE asset_tag = convert_from(bc_join.b64url_decode(evidence->>'payload'), 'UTF8');
                IF NOT FOUND THEN PERFORM bc_join.refuse('acme-asset:unknown-asset'); END IF;
                RETURN jsonb_build_object('tenantId', a.tenant_id, 'role', 'node', 'poolId', a.pool_id,
                    'bind', bc_join.b64url_encode(sha256(convert_to(a.asset_tag, 'UTF8'))));
            END $f$""")
        c.execute("INSERT INTO acme.assets VALUES ('ASSET-0042', %s, %s)", (self.t1, self.p1))
        c.execute("SELECT bc_join.register_attestor('acme-asset', '1.0.0', ARRAY['node'], "
                  "'acme.verify(jsonb,jsonb)'::regprocedure)")
        _, _, csr, _ = new_csr()
        a = self.send("bc_join", {"csr": csr, "role": "node", "attestor": "acme-asset",
                                  "attestation": b64u(b"ASSET-0042")}, 1)
        assert a["status"] == "issued", (a, self.last_refusal())

        self.fill_config()
        self.fill_discovery()
        self.fill_tpm()
        self.fill_ssh()
        # A few more rows from other backends, then the anchor the world saw.
        for i in range(5):
            self.one("SELECT bc_join.create_site(%s, %s)", self.t2, "extra-%d" % i, i=i)
        self.anchor = self.one("SELECT bc_join.audit_anchor()")
        self.crl = self.crl_serials()
        if self.ssh:
            self.krl = bytes(self.one("SELECT bc_join.ssh_krl()"))

    def fill_ssh(self):
        """SSH (#47, 0.7.0; nothing before it): tenant acme's host and user names,
        pool gpu's rule, two host certificates of n1 (one revoked by the operator:
        ssh_krl_state's row) and a session's user certificate."""
        one = self.one
        self.ssh = one("SELECT to_regprocedure('bc_join.issue_ssh_host_cert(jsonb)') IS NOT NULL")
        if not self.ssh:
            return
        one("SELECT bc_join.allow_ssh_names(%s, 'host', ARRAY['*.acme.example'])", self.t1)
        one("SELECT bc_join.allow_ssh_names(%s, 'user', ARRAY['deploy', 'svc-*'])", self.t1)
        one("SELECT bc_join.set_ssh_settings(%s, host_principals => ARRAY['{node}.acme.example', '{hostname}'], "
            "host_hostname_patterns => ARRAY['*.acme.example'], user_principals => ARRAY['deploy', '{session}'], "
            "user_force_command => 'echo filled')", self.p1)
        n1 = self.nodes["n1"]
        self.ssh_key = ssh_host_key()
        a = self.ssh_host(n1, self.ssh_key, "web.acme.example", i=1)
        assert a.get("status") == "issued", (a, self.last_refusal())
        self.ssh_serial = payload_of(a)["sshSerial"]
        self.ssh_revoked_key = ssh_host_key()
        a = self.ssh_host(n1, self.ssh_revoked_key, i=2)
        assert a.get("status") == "issued", (a, self.last_refusal())
        self.ssh_revoked = payload_of(a)["sshSerial"]
        assert one("SELECT bc_join.revoke_ssh_certificate(%s, 'keyCompromise')", int(self.ssh_revoked))
        a = self.session(n1, "svc-fill", i=3, ssh_user=True)
        assert a.get("status") == "issued" and "sshCertificate" in payload_of(a), (a, self.last_refusal())

    def fill_config(self):
        """The rest of the operator's configuration: a provisioning token, the
        two resolvers, an external x509pop root, TPM enrollment, mode and PCR
        policy (tenant globex, so the tpm join of acme is not affected)."""
        one, c = self.one, self.cur()
        self.prov_token = one("SELECT bc_join.create_provisioning_token(%s)", self.nodes["n4"].id)
        c.execute("""
            CREATE SCHEMA IF NOT EXISTS acme;
            CREATE OR REPLACE FUNCTION acme.node_ref(node_ref text, context jsonb) RETURNS text
                LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $f$ SELECT node_ref $f$;
            CREATE OR REPLACE FUNCTION acme.cloud(provider text, account text, context jsonb)
                RETURNS jsonb LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $f$ SELECT NULL::jsonb $f$""")
        c.execute("SELECT bc_join.register_provisioning_resolver('acme.node_ref(text,jsonb)'::regprocedure)")
        c.execute("SELECT bc_join.register_cloud_resolver('acme.cloud(text,text,jsonb)'::regprocedure)")
        k = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "acme device CA")])
        now = datetime.datetime.utcnow()
        ca = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(k.public_key())
              .serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(minutes=5))
              .not_valid_after(now + datetime.timedelta(days=30))
              .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
              .sign(k, hashes.SHA256()))
        one("SELECT bc_join.add_x509pop_root(%s, %s, %s)",
            ca.public_bytes(serialization.Encoding.PEM).decode(), self.t2, self.p2)
        one("SELECT bc_join.enroll_tpm_ek(%s, %s, %s)", "ab" * 32, self.t2, self.p2)
        one("SELECT bc_join.set_tpm_enrollment_mode(%s, 'approval')", self.t2)
        one("SELECT bc_join.set_tpm_pcr_policy(%s, %s, 'sha256:0-7', decode(repeat('00', 32 * 8), 'hex'))",
            self.t2, self.p2)
        # an operator of tenant globex alone (#31, 0.2.0): its role is the cluster's, its grant a row
        c.execute("DO $r$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'bcj_fill_tenant_op') "
                  "THEN CREATE ROLE bcj_fill_tenant_op LOGIN; END IF; END $r$")
        if one("SELECT to_regprocedure('bc_join.grant_tenant_operator(regrole,text)') IS NOT NULL"):
            assert one("SELECT bc_join.grant_tenant_operator('bcj_fill_tenant_op', %s)", self.t2)

    def fill_discovery(self):
        one = self.one
        st = self.token(self.t1, None, role="site", site_id=self.s1)
        site = self.token_join("site1", st, role="site")
        one("SELECT bc_join.set_discovery_site(%s)", self.s1)
        self.ramdisk("r1", "02:00:00:00:00:01")
        one("SELECT bc_join.set_discovery_site(%s, 'always')", self.s1)
        a = self.ramdisk("r2", "02:00:00:00:00:02", expect="pending")
        self.pending = payload_of(a)["requestId"]
        a = self.ramdisk("r3", "02:00:00:00:00:03", expect="pending")
        self.rejected = payload_of(a)["requestId"]
        one("SELECT bc_join.reject_join_request(%s, 'not ours')", self.rejected)
        self.site = site

    def ramdisk(self, name, mac, expect="issued"):
        """A ramdisk's discovery join vouched for by site1; its request kept for a retry."""
        d = os.path.join(self.scratch, name)
        self.join_request(name, role="ramdisk", attestor="discovery")
        epoch = self.one("SELECT epoch FROM bc_join.discovery_sites WHERE site_id = %s", self.s1)
        ev = self.run(self.bcd, "sign-discovery-assertion", "--state-dir", self.nodes["site1"].dir,
                      "--service-keys", self.keys, "--site", self.s1, "--mac", mac,
                      "--epoch", str(epoch), "--csr", os.path.join(d, "node.csr.der"), "--ttl", "3600")
        with open(os.path.join(d, "evidence.json"), "w") as f:
            f.write(ev.strip())
        tok = self.token(self.t1, self.p1, role="ramdisk")
        req = self.join_request(name, tok, role="ramdisk", attestor="discovery",
                                attestation_file=os.path.join(d, "evidence.json"))
        with open(os.path.join(d, "request.json"), "w") as f:
            f.write(req)
        a = self.send("bc_join", req)
        assert a["status"] == expect, (name, a, self.last_refusal())
        return a

    def fill_tpm(self):
        """A node joined by tpm: swtpm behind tpm2-abrmd, bcd's own evidence, two rounds."""
        self.tpm_dir = os.path.join(self.scratch, "tpm")
        subprocess.run(["bash", os.path.join(TOP, "test/lib/tpm-rm.sh"), "start", self.tpm_dir,
                        str(os.getpid())], check=True, capture_output=True)
        tcti = open(os.path.join(self.tpm_dir, "tcti")).read().strip()
        env = {"DBUS_SESSION_BUS_ADDRESS": open(os.path.join(self.tpm_dir, "dbus-address")).read().strip(),
               "TSS2_LOG": "all+NONE"}
        for f in ("root.pem", "issuer.pem"):
            self.one("SELECT bc_join.add_tpm_ek_root(%s)", open(os.path.join(self.tpm_dir, f)).read())
        d = os.path.join(self.scratch, "tpm1")
        tok = self.token(self.t1, self.p1)
        ev = self.run(self.bcd, "tpm-evidence", "--out-dir", d, "--tcti", tcti, env=env).strip()
        csr = open(os.path.join(d, "node.csr.der"), "rb").read()
        req = lambda ev: {"csr": b64u(csr), "role": "node", "attestor": "tpm", "attestation": ev,
                          "sealedToken": self.sealed(tok, csr)}
        a = self.send("bc_join", req(ev))
        assert a["status"] == "challenge", (a, self.last_refusal())
        chf = os.path.join(d, "challenge.txt")
        with open(chf, "w") as f:
            f.write(payload_of(a)["challenge"])
        ev = self.run(self.bcd, "tpm-evidence", "--out-dir", d, "--tcti", tcti, "--challenge", chf,
                      env=env).strip()
        a = self.send("bc_join", req(ev))
        assert a["status"] == "issued", (a, self.last_refusal())
        self.tpm_node = payload_of(a)["nodeId"]

    def stop(self):
        self.close()
        if self.tpm_dir:
            subprocess.run(["bash", os.path.join(TOP, "test/lib/tpm-rm.sh"), "stop", self.tpm_dir],
                           capture_output=True)

    # ----------------------------------------------------------- snapshots
    def tables(self, c):
        c.execute("SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                  "WHERE n.nspname = 'bc_join' AND c.relkind = 'r' ORDER BY 1")
        return [r[0] for r in c.fetchall()]

    def snapshot(self, dbname=None):
        """Every row of every bc_join table as text, table by table, the root
        tenant's too (its created_at and request_channel kept by the dump)."""
        conn = self.connect(dbname)
        c = conn.cursor()
        c.execute("SET search_path = pg_catalog")   # regprocedure and the like print qualified
        snap = {}
        for t in self.tables(c):
            c.execute("SELECT * FROM bc_join.%s LIMIT 0" % t)
            cols = [d[0] for d in c.description]
            order = ORDER.get(t, ", ".join(str(i + 1) for i in range(len(cols))))
            c.execute("SELECT %s FROM bc_join.%s ORDER BY %s" % (
                ", ".join("%s::text" % psycopg2.extensions.quote_ident(x, c) for x in cols), t, order))
            snap[t] = (cols, c.fetchall())
        c.execute("SELECT sequence_name, last_value FROM (SELECT sequencename AS sequence_name, last_value "
                  "FROM pg_sequences WHERE schemaname = 'bc_join') s ORDER BY 1")
        snap[":sequences"] = ([], c.fetchall())
        conn.close()
        return snap

    def crl_serials(self, dbname=None):
        conn = self.connect(dbname)
        c = conn.cursor()
        c.execute("SELECT bc_join.crl()")
        der = bytes(c.fetchone()[0])
        conn.close()
        crl = x509.load_der_x509_crl(der)
        return sorted("%032x" % r.serial_number for r in crl)

    # --------------------------------------------------------------- checks
    @staticmethod
    def compare(tap, before, after, what, skip=(), columns_changed=()):
        """Table by table: the same columns and the same rows (columns_changed:
        (table, column) pairs an upgrade maps on purpose, left out here)."""
        bad = []
        for t, (cols, rows) in before.items():
            if t in skip:
                continue
            if t not in after:
                bad.append("%s: missing" % t)
                continue
            acols, arows = after[t]
            common = [x for x in cols if x in acols and (t, x) not in columns_changed]
            bi = [cols.index(x) for x in common]
            ai = [acols.index(x) for x in common]
            b = [tuple(r[i] for i in bi) for r in rows]
            a = [tuple(r[i] for i in ai) for r in arows]
            if b != a:
                diff = [r for r in b if r not in a][:2] + [r for r in a if r not in b][:2]
                bad.append("%s: %d rows before, %d after, e.g. %r" % (t, len(b), len(a), diff))
        counted = sum(len(v[1]) for k, v in before.items() if k not in skip)
        tap.ok(not bad, "%s: every row of every table equal (%d tables, %d rows)" %
               (what, len([k for k in before if k not in skip]), counted), "\n".join(bad))

    def check_ssh_rows(self, tap, snap, what):
        """After an SSH fill: every SSH table has rows in snap."""
        if self.ssh:
            empty = [t for t in SSH_TABLES if not snap.get(t, ([], []))[1]]
            tap.ok(not empty, what + ": the SSH tables have rows (%s)" % ", ".join(SSH_TABLES), empty)

    def check_krl(self, tap, what):
        """After an SSH fill: ssh_krl() the fill's bytes, the revoked serial in it."""
        if not self.ssh:
            return
        krl = bytes(self.one("SELECT bc_join.ssh_krl()"))
        tap.ok(krl == self.krl, what + ": ssh_krl() is the same bytes", (len(krl), len(self.krl)))
        rc, out = ssh_keygen("-Q", "-l", "-f", "{}", data=krl)
        tap.ok(rc == 0 and "serial: %s" % self.ssh_revoked in out,
               what + ": the SSH certificate revoked before is listed (ssh-keygen -Q -l)", out)

    def check_ssh(self, tap, what, node):
        """The SSH side as it was: the KRL, a host key's certificate, a revoked one's none."""
        self.check_krl(tap, what)
        a = self.ssh_host(node, self.ssh_key, "web.acme.example")
        tap.eq(payload_of(a).get("sshSerial") if a.get("status") == "issued" else (a, self.last_refusal()),
               self.ssh_serial, what + ": the host key certified before answers the same SSH certificate")
        a = self.ssh_host(node, self.ssh_revoked_key)
        tap.eq((a.get("status"), self.last_refusal()), ("refused", "ssh-host:revoked"),
               what + ": the host key whose certificate was revoked gets none (ssh-host:revoked)")

    def check_service(self, tap, what, dbname=None):
        """The copy answers as the original would (each check against dbname)."""
        saved = self.dbname
        if dbname:
            self.dbname = dbname
        self.close()
        one, ok, eq = self.one, tap.ok, tap.eq
        try:
            ok(one("SELECT bc_join.verify_audit_log()"), what + ": verify_audit_log() is true")
            ok(one("SELECT bc_join.verify_audit_log(%s)", self.anchor),
               what + ": the anchor published before still matches (verify_audit_log(anchor))")
            eq(self.crl_serials(), self.crl, what + ": the CRL lists the same serials")
            n1 = self.nodes["n1"]
            if self.ssh:
                self.check_ssh(tap, what, n1)
            a = self.renew(n1)
            eq(a.get("status"), "issued", what + ": a node joined before renews", self.last_refusal())
            a = self.session(n1, "s-after")
            eq(a.get("status"), "issued", what + ": and gets a session credential", self.last_refusal())
            if self.ssh:
                a = self.session(n1, "svc-after", ssh_user=True)
                rc, out = ssh_keygen("-L", "-f", "{}", data="ecdsa-sha2-nistp256-cert-v01@openssh.com %s\n" %
                                     payload_of(a).get("sshCertificate") if a.get("status") == "issued" else "")
                ok(rc == 0 and "user certificate" in out and "deploy" in out and "svc-after" in out and
                   "force-command echo filled" in out,
                   what + ": and with sshUser an SSH user certificate by the pool's rule (ssh-keygen -L)",
                   out or (a, self.last_refusal()))
            eq(one("SELECT uses_left FROM bc_join.join_tokens WHERE id = split_part(%s, '.', 1)", self.tok3), 2,
               what + ": the three-use token has 2 uses left")
            got = [self.token_join("%s-t%d" % (what, i), self.tok3).id for i in range(2)]
            eq(len(set(got)), 2, what + ": and admits exactly two more nodes")
            a = self.send("bc_join", self.join_request("%s-t3" % what, self.tok3))
            eq((a["status"], self.last_refusal()), ("refused", "join-token:spent"),
               what + ": then none (join-token:spent)")
            a = self.send("bc_join", self.join_request("%s-aws" % what, self.token(self.t1, self.p1),
                                                       attestor="cloud-iid",
                                                       attestation_file=self.aws_evidence))
            eq((a["status"], self.last_refusal()), ("refused", "cloud-iid:already-admitted"),
               what + ": the AWS instance admitted before is refused as used (attestation_uses)")
            one("SELECT bc_join.approve_join_request(%s)", self.pending)
            with open(os.path.join(self.scratch, "r2", "request.json")) as f:
                a = self.send("bc_join", f.read())
            eq(a.get("status"), "issued", what + ": the join request pending before is approved and completes",
               self.last_refusal())
            a = self.send("bc_join", open(os.path.join(self.scratch, "r3", "request.json")).read())
            eq(a.get("status"), "refused", what + ": the one rejected before stays refused")
            got = self.fetch_commands(n1)
            eq([x["id"] for x in got] if isinstance(got, list) else got, [self.queued_cmd],
               what + ": the queued command is dispatched")
            got = self.fetch_commands(n1)
            eq(got, [], what + ": once")
            eq(one("SELECT state FROM bc_join.commands WHERE id = %s", self.done_cmd), "done",
               what + ": the completed command stays done")
            ok(one("SELECT bc_join.verify_audit_log()"), what + ": and the log still holds after all that")
        finally:
            self.close()
            self.dbname = saved
