#!/usr/bin/python3
"""hw_keys.t: the service's keys in hardware (docs/operator.md, "Keys in hardware").

A real swtpm behind tpm2-abrmd (test/lib/tpm-rm.sh) and a real SoftHSM2
token; tools/bc-join-keygen --tpm and --pkcs11 make every key of a key
directory there (TSS2 PRIVATE KEY files, pkcs11: references).  For each kind
the server, through src/ext/hwkeys.c: publishes the keys, admits a join with
a token sealed to the encryption key (ECDH in the hardware), its answer
signed by the signing key and its certificate issued by the node CA key
(both in the hardware) chaining to the offline root, a two-round join whose
state the challenge key sealed and opened, a CRL the node CA key signed;
rotation (--stage, --promote, --retire, --rotate-intermediate, and the
JWT-SVID key's --stage-jwt-key, --promote-jwt-key, --retire-jwt-key) makes the new
keys in the same hardware and the server takes them up; a persistent TPM key
by handle: reference works; ssh-user-ca.key there signs an OpenSSH user certificate
(a session asked with "sshUser": true) that ssh-keygen -L reads (#47).  The key directories copied where that TPM and
that token are not (another swtpm, another token with the same label and
PIN): every key of them is refused (INVALID_CONFIG), one at a time.

Outages (issue 42 item 6: a hardware outage is never a refusal), behind the
real gateway (one database connection, so the backend that loaded the keys
meets the outage) and bcd run: swtpm stops (tpm-rm.sh pause; tpm2-abrmd
stays and answers every command with a transport error).  Backends that
loaded the keys get INVALID_CONFIG (F0000), never a refusal, from opening a
challenge state sealed before, signing the CRL, signing the service keys,
loading the keys again; bcd's join with a valid token gets HTTP 500 and asks
again (403 would be final), no security.join.refused is written, the token's
use is not spent; swtpm comes back (a TPM reset, tpm-rm.sh resume) and bcd
joins through the same backend, which loaded its keys anew (in a fresh
library context: tpm2-tss cannot use an ESAPI context after a transport
failure).  Then the same with the PKCS#11 directory and the token's
directory made unreadable (chmod 000: SoftHSM2 answers
CKR_OBJECT_HANDLE_INVALID for the keys it handed out, as for a token that
went away): HTTP 500, no refusal, nothing spent; the backend whose token key
failed ends (libp11 keeps its objects for the life of the process) and bcd
joins through the gateway's next connection once the directory is readable.
Without the fix the TPM's failing ECDH was the refusal
join-token:malformed-seal and bcd gave up (exit 2).
Its own clusters (bctest.ClusterEnv), the TLS CA, gateway and bcd processes
of test/agent/agentlib.py.
"""
import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

import psycopg2
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from jwcrypto import jwk, jws

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "agent"))
from bctest import TOP, ClusterEnv, free_port, run  # noqa: E402
import agentlib  # noqa: E402

DB = "bcj_hw"
BCD = os.environ.get("BCJ_BCD", os.path.join(TOP, "build/bcd"))
# Relative to TOP, the working directory of as_pg: the postgres user may not
# search the checkout's parents (/root), but runs from inside it.
RM = "test/lib/tpm-rm.sh"
KEYGEN = "tools/bc-join-keygen"
P11MOD = "/usr/lib/softhsm/libsofthsm2.so"
PIN = "4711"
KEYS = ("signing.key", "encryption.key", "challenge.key", "node-ca.key", "jwt-svid.key", "ocsp.key",
        "ssh-host-ca.key", "ssh-user-ca.key")


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def b64u_decode(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def as_pg(cmd, envv=None, check=True):
    """Run cmd as the postgres OS user (who owns the TPM's bus and the token)."""
    r = subprocess.run(["runuser", "-u", "postgres", "--"] + cmd, env=envv, cwd=TOP,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("%s: exit %d\n%s" % (" ".join(cmd), r.returncode, r.stderr))
    return r


class HwEnv(agentlib.Env):
    """bctest's cluster, with agentlib's TLS CA, gateway and bcd processes."""

    def __init__(self):
        ClusterEnv.__init__(self, "bcj-hw.", DB, "hw.bc-join.local")
        self.procs = []
        self.bcd_bin = BCD
        self.gw_bin = os.environ.get("BCJ_GATEWAY", os.path.join(TOP, "build/bc-gateway"))
        self.nbcd = 0
        self.hw = os.path.join(self.dir, "hw")
        self.tpms = []
        self.other_pg = None

    def tpm(self, name):
        """A swtpm with its resource manager as postgres; (tcti, DBUS address)."""
        d = os.path.join(self.hw, name)
        # No watched PID: as postgres, kill -0 of this root process fails at once.
        as_pg(["bash", RM, "start", d])
        self.tpms.append(d)
        with open(os.path.join(d, "tcti")) as f, open(os.path.join(d, "dbus-address")) as g:
            return f.read().strip(), g.read().strip()

    def hsm(self, name):
        """A SoftHSM2 token directory with token 'bcj' (PIN) in it; its SOFTHSM2_CONF."""
        d = os.path.join(self.hw, name)
        os.makedirs(os.path.join(d, "tokens"))
        conf = os.path.join(d, "softhsm2.conf")
        with open(conf, "w") as f:
            f.write("directories.tokendir = %s\nobjectstore.backend = file\nlog.level = ERROR\n"
                    % os.path.join(d, "tokens"))
        subprocess.run(["chown", "-R", "postgres", d], check=True)
        envv = dict(os.environ, SOFTHSM2_CONF=conf)
        as_pg(["softhsm2-util", "--init-token", "--free", "--label", "bcj", "--pin", PIN,
               "--so-pin", "0815"], envv)
        return conf

    def stop_processes(self):
        agentlib.Env.stop_processes(self)
        tokens = os.path.join(self.hw, "hsm", "tokens")
        if os.path.isdir(tokens):
            os.chmod(tokens, 0o700)
        if self.other_pg:
            subprocess.run([os.path.join(TOP, "tools/pg-throwaway"), "stop", self.other_pg], check=False)
        for d in self.tpms:
            subprocess.run(["bash", RM, "stop", d], check=False, cwd=TOP,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def setup(env):
    os.makedirs(env.hw)
    subprocess.run(["chown", "postgres", env.hw], check=True)
    env.tcti, bus = env.tpm("tpm")
    env.softhsm = env.hsm("hsm")
    os.environ["DBUS_SESSION_BUS_ADDRESS"] = bus
    os.environ["SOFTHSM2_CONF"] = env.softhsm
    os.environ["TPM2OPENSSL_TCTI"] = env.tcti     # for bc-join-keygen's rotations
    env.kd = {}
    for kind, args in (("file", []), ("tpm", ["--tpm", "--tcti", env.tcti]),
                       ("pkcs11", ["--pkcs11", "--token-label", "bcj", "--pin", PIN])):
        env.kd[kind] = os.path.join(env.hw, "keys-" + kind)
        as_pg([KEYGEN, env.kd[kind]] + args)
    # The cluster's own key directory: the file one (start_cluster's tenant, pool).
    env.keys = env.kd["file"]
    env.pg_start()
    env.started = True
    env.psql("ALTER SYSTEM SET bc_join.tpm_tcti = '%s'" % env.tcti, db="postgres")
    env.psql("ALTER SYSTEM SET bc_join.pkcs11_module = '%s'" % P11MOD, db="postgres")
    env.pg_stop()
    env.pg_start()
    env.psql("CREATE DATABASE %s" % env.db, db="postgres")
    env.psql("CREATE EXTENSION bc_join")
    env.tenant = env.psql("SELECT bc_join.create_tenant('hw')")
    env.site = env.psql("SELECT bc_join.create_site('%s', 'dc')" % env.tenant)
    env.pool = env.psql("SELECT bc_join.create_pool('%s', '%s', 'p')" % (env.tenant, env.site))
    # The challenge key's use: a two-round SQL attestor that seals and opens state.
    env.psql("""
CREATE FUNCTION public.hw_sealer(evidence jsonb, context jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = public, pg_catalog, pg_temp AS $$
DECLARE pt jsonb;
BEGIN
  IF evidence->>'payload' IS NULL THEN
    RETURN jsonb_build_object('deferred', 'challenge',
      'challenge', bc_join.b64url_encode(convert_to(bc_join.seal_challenge_state('hwseal',
        jsonb_build_object('nonce', gen_random_uuid()), bc_join.compute_now() + interval '2 minutes'), 'UTF8')));
  END IF;
  pt := bc_join.open_challenge_state('hwseal', convert_from(bc_join.b64url_decode(evidence->>'payload'), 'UTF8'));
  PERFORM bc_join.use_once('hwseal', sha256(convert_to(pt->>'nonce', 'UTF8')));
  RETURN jsonb_build_object('tenantId', '%s', 'role', 'node', 'poolId', '%s');
END $$""" % (env.tenant, env.pool))
    env.psql("SELECT bc_join.register_attestor('hwseal', '1', ARRAY['node'], 'public.hw_sealer(jsonb,jsonb)')")


def body(tap, env):
    sql = env.connect(DB)
    conn, cur, one = sql.conn, sql.cur, sql.one

    def raised(sql):
        try:
            one(sql)
            return None
        except psycopg2.Error as e:
            return (e.pgcode, e.diag.message_primary or "", e.diag.message_detail or "")

    def keygen(*args):
        r = as_pg([KEYGEN] + list(args), check=False)
        if r.returncode != 0:
            raise RuntimeError("bc-join-keygen %s: %s" % (" ".join(args), r.stderr))

    def bcd_request(keys_file, name, *extra):
        d = os.path.join(env.dir, "req-" + name)
        r = subprocess.run([BCD, "join-request", "--service-keys", keys_file, "--out-dir", d] + list(extra),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise RuntimeError("bcd join-request: " + r.stderr)
        return r.stdout.strip()

    def write_keys(name):
        path = os.path.join(env.dir, name + ".json")
        with open(path, "w") as f:
            f.write(json.dumps(one("SELECT bc_join.service_keys()")) + "\n")
        return path

    def verified_payload(resp, published):
        """The JWS payload of resp, verified with the published key its kid names."""
        token = resp["response"]
        kid = json.loads(b64u_decode(token.split(".")[0]))["kid"]
        key = {k["kid"]: k for k in published["signingKeys"]}[kid]
        s = jws.JWS()
        s.deserialize(token)
        s.verify(jwk.JWK(**{k: v for k, v in key.items() if k != "kid"}))
        return kid, json.loads(s.payload)

    def chains(payload, kd, root=None):
        """The issued leaf verifies under the offline root with the bundle's intermediate."""
        chain = payload.get("certificateChain") or []
        if not chain:
            return False
        leaf = os.path.join(env.dir, "leaf.pem")
        with open(leaf, "w") as f:
            f.write("-----BEGIN CERTIFICATE-----\n%s\n-----END CERTIFICATE-----\n" % chain[0])
        v = subprocess.run(["openssl", "verify", "-CAfile", os.path.join(root or kd + ".root", "root.crt"),
                            "-untrusted", os.path.join(kd, "node-ca.crt"), leaf],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return v.returncode == 0

    def token():
        return env.psql("SELECT bc_join.create_join_token('%s', '%s')" % (env.tenant, env.pool))

    def p11_objects():
        r = as_pg(["pkcs11-tool", "--module", P11MOD, "--token-label", "bcj", "--login", "--pin", PIN,
                   "--list-objects", "--type", "privkey"], check=False)
        return sorted(line.split(":", 1)[1].strip() for line in r.stdout.splitlines()
                      if line.strip().startswith("label:"))

    def ssh_user_cert(node_key_path, node_serial):
        """The sshCertificate of a session asked with "sshUser": true, proven by the node key."""
        with open(node_key_path, "rb") as f:
            nk = jwk.JWK.from_pem(f.read())
        sk = ec.generate_private_key(ec.SECP256R1())
        der = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([])).sign(
            sk, hashes.SHA256()).public_bytes(serialization.Encoding.DER)
        claims = {"purpose": "session", "serial": node_serial, "iat": int(time.time()), "session": "hw",
                  "csrSha256": b64u(hashlib.sha256(der).digest()), "sshUser": True}
        s = jws.JWS(json.dumps(claims))
        s.add_signature(nk, alg="ES256", protected=json.dumps({"alg": "ES256"}))
        r = one("SELECT bc_join.issue_session(%s::jsonb)",
                json.dumps({"csr": b64u(der), "proof": s.serialize(compact=True)}))
        if r.get("status") != "issued":
            return None
        return json.loads(b64u_decode(r["response"].split(".")[1])).get("sshCertificate")

    one("SELECT bc_join.allow_ssh_names(%s, 'user', ARRAY['hw'])", env.tenant)
    one("SELECT bc_join.set_ssh_settings(%s, user_principals => ARRAY['hw'])", env.pool)

    # Plain files as they always were: PEM loads (the cluster's own directory), DER does not.
    der = os.path.join(env.hw, "keys-der")
    as_pg(["cp", "-a", env.kd["file"], der])
    as_pg(["sh", "-c", "openssl pkey -in %s/signing.key -outform DER -out %s/.d && mv %s/.d %s/signing.key"
           % (der, der, der, der)])
    cur.execute("SET bc_join.key_dir = %s", (der,))
    got = raised("SELECT bc_join.service_keys()")
    tap.ok(got is not None and "no PEM private key" in got[2],
           "a plain signing.key in DER is refused, as before: no PEM private key", got)
    cur.execute("SET bc_join.key_dir = %s", (env.kd["file"],))
    tap.eq(raised("SELECT bc_join.service_keys()"), None, "the PEM file directory loads through the same path")

    for kind in ("tpm", "pkcs11"):
        kd = env.kd[kind]
        with open(os.path.join(kd, "signing.key")) as f:
            text = f.read()
        tap.ok(("TSS2 PRIVATE KEY" in text) if kind == "tpm" else
               (text.startswith("pkcs11:token=bcj;object=") and "BEGIN" not in text),
               "%s: bc-join-keygen wrote %s" % (kind, "TSS2 PRIVATE KEY files" if kind == "tpm"
                                                  else "pkcs11: references"), text[:60])
        cur.execute("SET bc_join.key_dir = %s", (kd,))
        got = raised("SELECT bc_join.service_keys()")
        tap.eq(got, None, "%s: the server loads every key of the directory" % kind)
        if got is not None:
            continue
        keys_file = write_keys(kind)
        published = one("SELECT bc_join.service_keys()")

        # Sealed token (ECDH), signed answer, certificate from the node CA key.
        r = one("SELECT bc_join(%s::jsonb)", bcd_request(keys_file, kind + "-t", "--token", token()))
        tap.eq(r.get("status"), "issued", "%s: a join with a token sealed to the encryption key is admitted"
               % kind, r)
        if r.get("status") == "issued":
            kid, payload = verified_payload(r, published)
            tap.eq(kid, published["signingKeys"][0]["kid"],
                   "%s: its answer verifies with the published signing key" % kind)
            tap.ok(chains(payload, kd), "%s: its certificate (node CA key in hardware) chains to the root" % kind)

        # The challenge key seals round 1's state and opens it in round 2.
        req = bcd_request(keys_file, kind + "-c", "--attestor", "hwseal")
        r1 = one("SELECT bc_join(%s::jsonb)", req)
        state = None
        if r1.get("status") == "challenge":
            state = json.loads(b64u_decode(r1["response"].split(".")[1])).get("challenge")
        r2 = one("SELECT bc_join(%s::jsonb || jsonb_build_object('attestation', %s::text))", req, state) \
            if state else {}
        tap.eq((r1.get("status"), r2.get("status")), ("challenge", "issued"),
               "%s: a two-round join, its state sealed and opened by the challenge key" % kind, (r1, r2))

        # A CRL signed by the node CA key.
        crl = os.path.join(env.dir, kind + ".crl")
        with open(crl, "w") as f:
            f.write(one("SELECT bc_join.crl_pem()"))
        v = subprocess.run(["openssl", "crl", "-in", crl, "-noout", "-CAfile", os.path.join(kd, "node-ca.crt")],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        tap.ok(v.returncode == 0 and "verify OK" in v.stdout, "%s: the CRL verifies under node-ca.crt" % kind,
               v.stdout)

        # An OCSP answer signed by ocsp.key, its responder certificate by node-ca.key.
        inter = os.path.join(env.dir, kind + "-inter.pem")
        subprocess.run(["openssl", "x509", "-in", os.path.join(kd, "node-ca.crt"), "-out", inter], check=True)
        oreq = os.path.join(env.dir, kind + ".ocsp-req")
        subprocess.run(["openssl", "ocsp", "-issuer", inter, "-serial", "0x1", "-reqout", oreq],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(oreq, "rb") as f:
            qder = f.read()
        oresp = os.path.join(env.dir, kind + ".ocsp-resp")
        with open(oresp, "wb") as f:
            f.write(bytes(one("SELECT bc_join.ocsp_response(%s)", psycopg2.Binary(qder))))
        v = subprocess.run(["openssl", "ocsp", "-reqin", oreq, "-respin", oresp, "-CAfile",
                            os.path.join(kd, "node-ca.crt"), "-resp_text"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        tap.ok(v.returncode == 0 and "Response verify OK" in v.stdout and "Cert Status: unknown" in v.stdout,
               "%s: an OCSP answer signed by ocsp.key through a responder certificate node-ca.key issued verifies"
               % kind, v.stdout[-800:])

        # An SSH user certificate (#47) signed by ssh-user-ca.key in the hardware, which
        # ssh-keygen -L reads (it verifies the CA's signature) naming the published CA.
        if r.get("status") == "issued":
            cert_b64 = ssh_user_cert(os.path.join(env.dir, "req-" + kind + "-t", "node.key"), payload["serial"])
            cf = os.path.join(env.dir, kind + "-ssh-cert.pub")
            with open(cf, "w") as f:
                f.write("ecdsa-sha2-nistp256-cert-v01@openssh.com %s\n" % cert_b64)
            caf = os.path.join(env.dir, kind + "-ssh-user-ca.pub")
            with open(caf, "w") as f:
                f.write(one("SELECT bc_join.ssh_user_ca()"))
            v = subprocess.run(["ssh-keygen", "-L", "-f", cf], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
            fp = subprocess.run(["ssh-keygen", "-l", "-f", caf], stdout=subprocess.PIPE, text=True).stdout.split()
            tap.ok(v.returncode == 0 and "user certificate" in v.stdout and len(fp) > 1 and
                   ("Signing CA: ECDSA " + fp[1]) in v.stdout and "                hw" in v.stdout,
                   "%s: an SSH user certificate signed by ssh-user-ca.key in the hardware: ssh-keygen -L reads it, "
                   "signed by the CA ssh_user_ca() publishes" % kind, v.stdout)

        # Rotation in the same hardware.
        before = p11_objects() if kind == "pkcs11" else None
        keygen("--stage", kd)
        keygen("--promote", kd)
        with open(os.path.join(kd, "signing.key")) as f:
            new_text = f.read()
        now = [k["kid"] for k in one("SELECT bc_join.service_keys()")["signingKeys"]]
        tap.ok(len(now) == 2 and now[1] == published["signingKeys"][0]["kid"] and new_text != text and
               (("TSS2" in new_text) if kind == "tpm" else new_text.startswith("pkcs11:")),
               "%s: --stage/--promote: a new signing key in the same hardware is current, the old one previous"
               % kind, now)
        if kind == "pkcs11":
            tap.eq(len(p11_objects()), len(before) + 2, "pkcs11: the staged keys are objects of the token")
            r = as_pg(["pkcs11-tool", "--module", P11MOD, "--token-label", "bcj", "--login", "--pin", PIN,
                       "--list-objects", "--type", "privkey"])
            access = [line.split(":", 1)[1].strip() for line in r.stdout.splitlines()
                      if line.strip().startswith("Access:")]
            tap.ok(len(access) == len(before) + 2 and
                   all("never extractable" in a and "local" in a and "sensitive" in a for a in access),
                   "pkcs11: every private key was made in the token and can never leave it "
                   "(local, sensitive, never extractable)", access)
        r = one("SELECT bc_join(%s::jsonb)", bcd_request(keys_file, kind + "-old", "--token", token()))
        tap.ok(r.get("status") == "issued" and
               json.loads(b64u_decode(r["response"].split(".")[0]))["kid"] == now[0],
               "%s: a token sealed to the previous encryption key opens; the new key signs" % kind, r)
        old_seal = bcd_request(keys_file, kind + "-old2", "--token", token())
        keygen("--retire", kd)
        r = one("SELECT bc_join(%s::jsonb)", old_seal)
        refusal = one("SELECT payload->>'refusal' FROM bc_join.events WHERE type = 'security.join.refused' "
                      "ORDER BY at DESC, id DESC LIMIT 1")
        tap.eq((r.get("status"), refusal), ("refused", "join-token:unsealable"),
               "%s: --retire: a token sealed to the retired key is refused unsealable" % kind)
        if kind == "pkcs11":
            tap.eq(len(p11_objects()), len(before), "pkcs11: --retire deleted the retired keys from the token")

        # The JWT-SVID key rolls on its own (#46), in the hardware jwt-svid.key is in.
        jwt_before = [k["kid"] for k in one("SELECT bc_join.service_keys()")["jwtKeys"]]
        keygen("--stage-jwt-key", kd)
        with open(os.path.join(kd, "jwt-svid.next.key")) as f:
            staged_text = f.read()
        staged = [k["kid"] for k in one("SELECT bc_join.service_keys()")["jwtKeys"]]
        keygen("--promote-jwt-key", kd)
        promoted = [k["kid"] for k in one("SELECT bc_join.service_keys()")["jwtKeys"]]
        keygen("--retire-jwt-key", kd)
        retired = [k["kid"] for k in one("SELECT bc_join.service_keys()")["jwtKeys"]]
        tap.ok(len(jwt_before) == 1 and len(staged) == 2 and staged[0] == jwt_before[0] and
               promoted == [staged[1], jwt_before[0]] and retired == [staged[1]] and
               (("TSS2" in staged_text) if kind == "tpm" else staged_text.startswith("pkcs11:")),
               "%s: --stage-jwt-key/--promote-jwt-key/--retire-jwt-key: a new jwt-svid key in the same "
               "hardware, published beside the current one, current, the old one gone" % kind,
               (jwt_before, staged, promoted, retired))
        if kind == "pkcs11":
            tap.eq(len(p11_objects()), len(before), "pkcs11: --retire-jwt-key deleted the retired key from the token")

        old_ca = one("SELECT bc_join.node_ca_certificate()")
        keygen("--rotate-intermediate", kd, "--root-dir", kd + ".root")
        new_ca = one("SELECT bc_join.node_ca_certificate()")
        keys_file = write_keys(kind + "-2")
        r = one("SELECT bc_join(%s::jsonb)", bcd_request(keys_file, kind + "-i", "--token", token()))
        ok = r.get("status") == "issued"
        if ok:
            _, payload = verified_payload(r, one("SELECT bc_join.service_keys()"))
            ok = chains(payload, kd)
        tap.ok(new_ca != old_ca and ok and kind in ("tpm", "pkcs11") and
               ("TSS2" in open(os.path.join(kd, "node-ca.key")).read()) == (kind == "tpm"),
               "%s: --rotate-intermediate: a new node CA key in the hardware issues, chaining to the same root"
               % kind, r)

    # -- HA: another node's signing key published beside this node's own ------------------
    # (docs/ha.md, "Keys in each node's TPM"): --public prints a hardware key's public half.
    cur.execute("SET bc_join.key_dir = %s", (env.kd["tpm"],))
    pubs = {}
    for kind in ("tpm", "pkcs11"):
        pubs[kind] = as_pg([KEYGEN, "--public", env.kd[kind]]).stdout
    own = [k["kid"] for k in one("SELECT bc_join.service_keys()")["signingKeys"]]
    tap.eq([jwk.JWK.from_pem(pubs["tpm"].encode()).thumbprint()], own,
           "--public prints the TPM signing key's public half (its kid the published one)")
    peer_kid = jwk.JWK.from_pem(pubs["pkcs11"].encode()).thumbprint()
    peer = os.path.join(env.kd["tpm"], "signing.peer-node2.pub")
    with open(peer, "w") as f:
        f.write(pubs["pkcs11"])
    os.chmod(peer, 0o644)
    shutil.chown(peer, "postgres")
    doc = one("SELECT bc_join.service_keys()")
    signed = one("SELECT bc_join.signed_service_keys()")
    tap.ok([k["kid"] for k in doc["signingKeys"]] == own + [peer_kid] and
           len(signed["keys"]) == 1 and json.loads(b64u_decode(signed["keys"][0].split(".")[0]))["kid"] == own[0],
           "signing.peer-node2.pub (the token's key): published after the node's own, never signing",
           (doc["signingKeys"], len(signed["keys"])))
    r = one("SELECT bc_join(%s::jsonb)", bcd_request(write_keys("tpm-peer"), "tpm-peer", "--token", token()))
    tap.ok(r.get("status") == "issued" and
           json.loads(b64u_decode(r["response"].split(".")[0]))["kid"] == own[0],
           "with a peer key published, the node's own key signs its answers", r)
    os.unlink(peer)
    # A second node's directory: keys of its own in the TPM, an intermediate of its own
    # under the same offline root (--use-root); it issues certificates chaining to that root.
    kd2 = os.path.join(env.hw, "keys-tpm-node2")
    as_pg([KEYGEN, kd2, "--tpm", "--root-dir", env.kd["tpm"] + ".root", "--use-root"])
    with open(os.path.join(kd2, "node-ca.crt")) as f, open(os.path.join(env.kd["tpm"], "node-ca.crt")) as g:
        b2, b1 = f.read(), g.read()
    end = "-----END CERTIFICATE-----\n"
    first2, root2 = b2.split(end)[0], b2.split(end)[-2]
    first1, root1 = b1.split(end)[0], b1.split(end)[-2]
    cur.execute("SET bc_join.key_dir = %s", (kd2,))
    kid2 = one("SELECT bc_join.service_keys()")["signingKeys"][0]["kid"]
    r = one("SELECT bc_join(%s::jsonb)", bcd_request(write_keys("tpm-node2"), "tpm-node2", "--token", token()))
    ok = r.get("status") == "issued"
    if ok:
        _, payload = verified_payload(r, one("SELECT bc_join.service_keys()"))
        ok = chains(payload, kd2, env.kd["tpm"] + ".root") and subprocess.run(
            ["openssl", "verify", "-CAfile", os.path.join(env.kd["tpm"] + ".root", "root.crt"),
             os.path.join(kd2, "node-ca.crt")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    tap.ok(first2 != first1 and root2 == root1 and kid2 not in own and ok,
           "--use-root: a second node's own TPM keys and intermediate under the same root; it issues", r)
    cur.execute("SET bc_join.key_dir = %s", (env.kd["tpm"],))

    # -- a persistent TPM key by handle: reference (challenge.key) ------------------------
    kd = env.kd["tpm"]
    tctx = dict(os.environ, TPM2TOOLS_TCTI=env.tcti)
    w = os.path.join(env.hw, "handle")
    as_pg(["mkdir", "-p", w])
    handle = "0x81000123"
    for cmd in (["tpm2_createprimary", "-C", "o", "-g", "sha256", "-G", "ecc", "-c", w + "/p.ctx"],
                ["tpm2_create", "-C", w + "/p.ctx", "-G", "ecc256", "-u", w + "/k.pub", "-r", w + "/k.priv"],
                ["tpm2_load", "-C", w + "/p.ctx", "-u", w + "/k.pub", "-r", w + "/k.priv", "-c", w + "/k.ctx"],
                ["tpm2_evictcontrol", "-C", "o", "-c", w + "/k.ctx", handle],
                ["tpm2_flushcontext", "-t"]):
        as_pg(cmd, tctx)
    ref = os.path.join(kd, ".challenge.key.tmp")
    as_pg(["sh", "-c", "umask 077; echo 'handle:%s' > %s && mv %s %s" % (handle, ref, ref,
                                                                          os.path.join(kd, "challenge.key"))])
    keys_file = write_keys("tpm-h")
    req = bcd_request(keys_file, "tpm-h", "--attestor", "hwseal")
    r1 = one("SELECT bc_join(%s::jsonb)", req)
    state = json.loads(b64u_decode(r1["response"].split(".")[1])).get("challenge") \
        if r1.get("status") == "challenge" else None
    r2 = one("SELECT bc_join(%s::jsonb || jsonb_build_object('attestation', %s::text))", req, state) \
        if state else {}
    tap.eq((r1.get("status"), r2.get("status")), ("challenge", "issued"),
           "tpm: challenge.key as handle:%s (a persistent key) seals and opens" % handle, (r1, r2))

    # -- the directories where that TPM and that token are not -----------------------------
    # Another swtpm (its own seeds) and another token with the same label and PIN,
    # a second cluster using them; each hardware key, copied into an otherwise
    # good file directory, is refused.
    tcti2, bus2 = env.tpm("tpm2")
    conf2 = env.hsm("hsm2")
    elsewhere = os.path.join(env.hw, "elsewhere")
    as_pg(["mkdir", "-p", elsewhere])
    other = os.path.join(env.dir, "pg2")
    port2 = free_port()
    envv = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=bus2, SOFTHSM2_CONF=conf2)
    r = subprocess.run([os.path.join(TOP, "tools/pg-throwaway"), "start", other, str(port2),
                        env.kd["file"], env.trust_domain], env=envv,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise RuntimeError("second cluster: " + r.stderr)
    env.other_pg = other
    pg2 = dict(kv.split("=", 1) for kv in r.stdout.split())
    c2 = psycopg2.connect(host=pg2["PGHOST"], port=pg2["PGPORT"], user="postgres", dbname="postgres")
    c2.autocommit = True
    k2 = c2.cursor()
    k2.execute("ALTER SYSTEM SET bc_join.tpm_tcti = %s", (tcti2,))
    k2.execute("ALTER SYSTEM SET bc_join.pkcs11_module = %s", (P11MOD,))
    c2.close()
    subprocess.run([os.path.join(TOP, "tools/pg-throwaway"), "stop", other], check=True)
    r = subprocess.run([os.path.join(TOP, "tools/pg-throwaway"), "start", other, str(port2),
                        env.kd["file"], env.trust_domain], env=envv,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise RuntimeError("second cluster: " + r.stderr)
    c2 = psycopg2.connect(host=pg2["PGHOST"], port=pg2["PGPORT"], user="postgres", dbname="postgres")
    c2.autocommit = True
    k2 = c2.cursor()
    k2.execute("CREATE EXTENSION bc_join")

    def load_elsewhere(d):
        try:
            k2.execute("SET bc_join.key_dir = %s", (d,))
            k2.execute("SELECT bc_join.service_keys()")
            k2.fetchone()
            return None
        except psycopg2.Error as e:
            return (e.pgcode, e.diag.message_primary or "", e.diag.message_detail or "")

    tap.eq(load_elsewhere(env.kd["file"]), None, "elsewhere: the second cluster loads a file key directory")
    # Its own TPM and token do work there: what fails below is the hardware's absence.
    own = {}
    for kind, args, e in (("tpm", ["--tpm", "--tcti", tcti2], dict(envv, TPM2OPENSSL_TCTI=tcti2)),
                          ("pkcs11", ["--pkcs11", "--token-label", "bcj", "--pin", PIN], envv)):
        own[kind] = os.path.join(elsewhere, "own-" + kind)
        as_pg([KEYGEN, own[kind]] + args, e)
        tap.eq(load_elsewhere(own[kind]), None,
               "elsewhere: keys made in its own %s load there" % ("TPM" if kind == "tpm" else "token"))
    for kind in ("tpm", "pkcs11"):
        copy = os.path.join(elsewhere, kind)
        as_pg(["cp", "-a", env.kd[kind], copy])
        got = load_elsewhere(copy)
        tap.ok(got is not None and got[0] == "F0000" and "INVALID_CONFIG" in got[2],
               "elsewhere: the %s directory copied whole is INVALID_CONFIG" % kind, got)
        for name in KEYS:
            d = os.path.join(elsewhere, "%s-%s" % (kind, name.split(".")[0]))
            as_pg(["cp", "-a", env.kd["file"], d])
            as_pg(["cp", "-p", os.path.join(env.kd[kind], name), os.path.join(d, name)])
            got = load_elsewhere(d)
            tap.ok(got is not None and got[0] == "F0000" and name in got[1] + got[2],
                   "elsewhere: %s's %s is unusable (%s)" % (kind, name,
                                                          (got[2][:90] if got else "loaded")), got)
    c2.close()
    conn.close()
    outages(tap, env, token, bcd_request)


def outages(tap, env, token, bcd_request):
    """A hardware outage is never a refusal (see the head of the file)."""
    env.psql("CREATE ROLE gw_login LOGIN IN ROLE bc_join_gateway")
    env.conninfo = "host=%s port=%d dbname=%s user=gw_login" % (os.path.join(env.pg, "sock"), env.pgport, DB)
    env.make_tls()
    env.gateway("--db-pool", "1")
    tpmdir = os.path.join(env.hw, "tpm")

    def connect(key_dir):
        c = psycopg2.connect(host=env.pgenv["PGHOST"], port=env.pgenv["PGPORT"],
                             user=env.pgenv["PGUSER"], dbname=DB)
        c.autocommit = True
        c.cursor().execute("SET bc_join.key_dir = %s", (key_dir,))
        return c

    def one(c, sql, *args):
        k = c.cursor()
        k.execute(sql, args)
        return k.fetchone()[0]

    def raised(c, sql, *args):
        try:
            one(c, sql, *args)
            return None
        except psycopg2.Error as e:
            return e.pgcode

    su = connect(env.kd["file"])

    def refusals():
        return one(su, "SELECT count(*) FROM bc_join.events WHERE type = 'security.join.refused'")

    def uses_left(path):
        with open(path) as f:
            return one(su, "SELECT uses_left FROM bc_join.join_tokens WHERE id = %s", f.read().split(".")[0])

    def gw_backend():
        return one(su, "SELECT string_agg(pid::text, ',') FROM pg_stat_activity WHERE usename = 'gw_login'")

    def gateway_keys(kind):
        """The gateway's backends take kind's directory up (ALTER SYSTEM, reload); its service keys."""
        env.psql("ALTER SYSTEM SET bc_join.key_dir = '%s'" % env.kd[kind], db="postgres")
        env.psql("SELECT pg_reload_conf()", db="postgres")
        path = os.path.join(env.dir, "outage-%s.json" % kind)
        with open(path, "w") as f:
            f.write(json.dumps(one(su, "SELECT bc_join.service_keys()")) + "\n")
        env.service_keys = path
        return path

    def bcd_join(name):
        tok = os.path.join(env.dir, "token-" + name)
        with open(tok, "w") as f:
            f.write(token() + "\n")
        os.chmod(tok, 0o600)
        return env.bcd_bg("run", *env.run_args(os.path.join(env.dir, "state-" + name), token_file=tok,
                                              extra=["--once"])), tok

    # -- TPM ------------------------------------------------------------------------------
    su.cursor().execute("SET bc_join.key_dir = %s", (env.kd["tpm"],))
    keys_file = gateway_keys("tpm")
    bcd, _ = bcd_join("tpm-up")
    rc, out = bcd.wait(90)
    tap.ok(rc == 0 and out.startswith("spiffe://"), "outage: bcd joins through the gateway, keys in the TPM",
           bcd.text())
    backend = gw_backend()
    sealreq = bcd_request(keys_file, "outage-seal", "--attestor", "hwseal")
    r1 = one(su, "SELECT bc_join(%s::jsonb)", sealreq)
    state = json.loads(b64u_decode(r1["response"].split(".")[1])).get("challenge") \
        if r1.get("status") == "challenge" else None
    # Two more sessions whose backends hold the keys: one key operation each below.
    others = [connect(env.kd["tpm"]) for _ in range(2)]
    for c in others:
        one(c, "SELECT bc_join.service_keys() IS NOT NULL")
    before = refusals()

    as_pg(["bash", RM, "pause", tpmdir])
    tap.eq(raised(su, "SELECT bc_join(%s::jsonb || jsonb_build_object('attestation', %s::text))", sealreq, state),
           "F0000", "swtpm stopped: opening a challenge state sealed before (challenge.key) is INVALID_CONFIG, "
           "not a refusal")
    tap.eq(raised(others[0], "SELECT bc_join.crl()"), "F0000", "signing the CRL (node-ca.key) is INVALID_CONFIG")
    tap.eq(raised(others[1], "SELECT bc_join.signed_service_keys()"), "F0000",
           "signing the service keys (signing.key) is INVALID_CONFIG")
    tap.eq(raised(others[1], "SELECT bc_join.crl()"), "F0000",
           "and the backend's next call, loading the keys while the TPM is away, is INVALID_CONFIG too")
    bcd, tok = bcd_join("tpm-down")
    tap.ok(bcd.wait_log("HTTP 500", 30, count=2),
           "a valid join while the TPM is away: HTTP 500, and bcd asks again (a 403 would be final)", bcd.text())
    tap.eq((refusals(), uses_left(tok)), (before, 1), "no security.join.refused written, the token's use not spent")
    as_pg(["bash", RM, "resume", tpmdir])
    rc, out = bcd.wait(90)
    tap.ok(rc == 0 and out.startswith("spiffe://") and uses_left(tok) == 0,
           "swtpm back (a TPM reset): bcd joins, its token spent", bcd.text())
    tap.eq(gw_backend(), backend, "through the same backend: it loaded its keys anew where it was")
    tap.eq(one(su, "SELECT bc_join(%s::jsonb || jsonb_build_object('attestation', %s::text))->>'status'",
               sealreq, state), "issued", "the state sealed before the outage opens after it")

    # -- PKCS#11 ------------------------------------------------------------------------
    su.cursor().execute("SET bc_join.key_dir = %s", (env.kd["pkcs11"],))
    gateway_keys("pkcs11")
    bcd, _ = bcd_join("p11-up")
    rc, out = bcd.wait(90)
    tap.ok(rc == 0 and out.startswith("spiffe://"), "outage: bcd joins through the gateway, keys in the token",
           bcd.text())
    backend = gw_backend()
    tokens = os.path.join(env.hw, "hsm", "tokens")
    os.chmod(tokens, 0)
    bcd, tok = bcd_join("p11-down")
    tap.ok(bcd.wait_log("HTTP 500", 30, count=2),
           "the token's directory unreadable: HTTP 500, and bcd asks again", bcd.text())
    tap.eq((refusals(), uses_left(tok)), (before, 1), "no security.join.refused written, the token's use not spent")
    os.chmod(tokens, 0o700)
    rc, out = bcd.wait(90)
    tap.ok(rc == 0 and out.startswith("spiffe://") and uses_left(tok) == 0,
           "the token back: bcd joins, its token spent", bcd.text())
    now = gw_backend()
    tap.ok(now not in (None, backend),
           "through a new backend: the one whose token key failed ended (%s, now %s)" % (backend, now))
    tap.eq(refusals(), before, "no refusal was written all along")
    for c in others + [su]:
        c.close()


if __name__ == "__main__":
    run(HwEnv(), setup, body)
