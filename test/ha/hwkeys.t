#!/usr/bin/python3
"""hwkeys.t: HA with every node's keys in its own TPM, no secret shared.

tools/ha-throwaway start --tpm: a swtpm (behind tpm2-abrmd) per node, each
node's key directory of its own with its signing, challenge and node CA keys
in its TPM and its own intermediate under the one offline root, the other
node's public signing key published beside its own, and the one encryption
key in a SoftHSM2 token both reach (the stand-in for a network HSM; docs/ha.md,
"Keys in each node's TPM").  Each node runs in a mount namespace where
bc_join.key_dir, one path in the one configuration, is its own directory.

Checks: the two directories share no private key (every key of one is a TSS2
blob of its own TPM; the encryption key the same pkcs11: reference), both
nodes publish both signing keys and the same root.  The real agent (bcd)
joins through the gateway on node1 and takes a session credential; node1 is
lost by SIGKILL; on the promoted node2, with node2's own keys, bcd renews
(its answer signed by node2's key, which it pinned in the set; its
certificate from node2's intermediate), takes a new session credential and a
second host joins (its token sealed to the shared encryption key).  Every
certificate verifies under the one root with the intermediate of the node
that issued it.  Run by test/ha-run.
"""
import base64
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "agent"))
sys.path.insert(0, HERE)
import agentlib  # noqa: E402
import halib  # noqa: E402
import sessionlib as sl  # noqa: E402
from bctest import run  # noqa: E402
from halib import HA  # noqa: E402
from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives.serialization import Encoding  # noqa: E402
from jwcrypto import jwk, jws  # noqa: E402

PRIVATE = ("signing.key", "challenge.key", "node-ca.key")


class HAAgentEnv(halib.HAMixin, agentlib.Env):
    """agentlib's Env on a pg_auto_failover formation with a TPM per node."""


def b64u_decode(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def read(path):
    with open(path) as f:
        return f.read()


def certs(path):
    """The certificates of a PEM file, in order."""
    with open(path) as f:
        blocks = re.findall(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----\n?", f.read(), re.S)
    return [x509.load_pem_x509_certificate(b.encode()) for b in blocks]


def issued_by(env, leaf_pem, node):
    """True when leaf_pem's first certificate was issued by node's intermediate and
    verifies under the root with it (openssl verify)."""
    inter = certs(os.path.join(env.ha, node, "keys", "node-ca.crt"))[0]
    leaf = certs(leaf_pem)[0]
    one = os.path.join(env.dir, "leaf-%s.pem" % node)
    with open(one, "wb") as f:
        f.write(leaf.public_bytes(Encoding.PEM))
    v = subprocess.run(["openssl", "verify", "-CAfile", os.path.join(env.ha, "root", "root.crt"),
                       "-untrusted", os.path.join(env.ha, node, "keys", "node-ca.crt"), one],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return leaf.issuer == inter.subject and v.returncode == 0, v.stdout.strip()


def body(tap, env):
    k1, k2 = (os.path.join(env.ha, n, "keys") for n in ("node1", "node2"))

    # -- no secret shared --------------------------------------------------------------
    for f in PRIVATE:
        a, b = read(os.path.join(k1, f)), read(os.path.join(k2, f))
        tap.ok(a.startswith("-----BEGIN TSS2 PRIVATE KEY-----") and
               b.startswith("-----BEGIN TSS2 PRIVATE KEY-----") and a != b,
               "%s: a key of each node's own TPM, not the same" % f)
    e1, e2 = read(os.path.join(k1, "encryption.key")), read(os.path.join(k2, "encryption.key"))
    tap.ok(e1 == e2 and e1.startswith("pkcs11:token=bcj;object=bcj-encryption-"),
           "encryption.key: on both nodes the one reference to one key in the shared token", e1)
    plain = [os.path.join(d, f) for d in (k1, k2) for f in os.listdir(d)
             if "PRIVATE KEY-----" in read(os.path.join(d, f)) and "TSS2" not in read(os.path.join(d, f))]
    tap.eq(plain, [], "no key directory holds a private key in a file")
    i1, i2 = certs(os.path.join(k1, "node-ca.crt")), certs(os.path.join(k2, "node-ca.crt"))
    root = certs(os.path.join(env.ha, "root", "root.crt"))[0]
    tap.ok(i1[0].subject != i2[0].subject and i1[0].public_key() != i2[0].public_key() and
           i1[-1] == root and i2[-1] == root,
           "each node its own intermediate, both under the one root")
    kid = {n: jwk.JWK.from_pem(read(os.path.join(env.ha, "hw", n + "-signing.pub")).encode()).thumbprint()
           for n in ("node1", "node2")}
    docs = {}
    for n in ("node1", "node2"):
        env.pgenv = env.node_env(n)
        docs[n] = json.loads(env.psql("SELECT bc_join.service_keys()"))
    env.use_primary()
    tap.eq([k["kid"] for k in docs["node1"]["signingKeys"]], [kid["node1"], kid["node2"]],
           "node1 publishes its own signing key, then node2's")
    tap.eq([k["kid"] for k in docs["node2"]["signingKeys"]], [kid["node2"], kid["node1"]],
           "node2 publishes its own signing key, then node1's")
    tap.ok(docs["node1"]["encryptionKeys"] == docs["node2"]["encryptionKeys"] and
           docs["node1"]["trustDomain"] == docs["node2"]["trustDomain"],
           "the same encryption key and trust domain on both")

    # -- on node1 ----------------------------------------------------------------------
    state = os.path.join(env.dir, "state")
    r = env.bcd("run", *env.run_args(state, token_file=env.token_file("a"), extra=["--once"]))
    tap.ok(r.returncode == 0 and r.stdout.startswith("spiffe://"), "bcd joins on node1", r.stdout + r.stderr)
    chain = os.path.join(state, "node-chain.pem")
    ok, why = issued_by(env, chain, "node1")
    tap.ok(ok, "its certificate is from node1's intermediate (its key in node1's TPM)", why)
    rt = sl.runtime_dir(env)
    sock = os.path.join(rt, "bcd", "bcd.sock")

    def session(name, node):
        d = sl.start_daemon(env, "bcd-" + name, rt, env.run_args(state))
        up = sl.wait_socket(d, sock)
        hd = os.path.join(rt, "hooks", name)
        os.makedirs(hd, 0o700)
        h = sl.hook(env, rt, sock, name, hd) if up else None
        crt = os.path.join(hd, name + ".crt")
        got = h is not None and h.returncode == 0 and os.path.exists(crt)
        ok, why = issued_by(env, crt, node) if got else (False, h.stderr if h else d.text())
        tap.ok(ok, "session %s: a credential from %s's intermediate" % (name, node), why)
        d.stop()
    session("s1", "node1")

    # -- node1 lost: node2 with its own keys -----------------------------------------
    subprocess.run([HA, "kill", env.ha, "node1"], check=True, stdout=subprocess.DEVNULL)
    tap.ok(env.wait_state("node2", "wait_primary|primary", 120), "node2 is promoted", env.state())
    env.pgenv = env.node_env("node2")
    before = certs(chain)[0].serial_number
    r = None
    for _ in range(30):     # the gateway finds the new primary
        r = env.bcd("renew", "--once", *env.run_args(state, extra=["--max-retry-after", "1"]), timeout=60)
        if r.returncode == 0:
            break
    tap.ok(r.returncode == 0 and certs(chain)[0].serial_number != before,
           "bcd renews on node2: node2's answer, signed by node2's key, is accepted", r.stdout + r.stderr)
    ok, why = issued_by(env, chain, "node2")
    tap.ok(ok, "the renewed certificate is from node2's intermediate", why)
    serial = "%032x" % certs(chain)[0].serial_number
    tap.eq(env.psql("SELECT count(*) FROM bc_join.node_certs WHERE serial = '%s' AND revoked_at IS NULL"
                    % serial), "1", "node2 recorded it")
    signed = json.loads(env.psql("SELECT bc_join.signed_service_keys()"))["keys"]
    pub2 = jwk.JWK.from_pem(read(os.path.join(env.ha, "hw", "node2-signing.pub")).encode())
    heads = [json.loads(b64u_decode(t.split(".")[0])) for t in signed]
    good = []
    for t in signed:
        try:
            j = jws.JWS()
            j.deserialize(t)
            j.verify(pub2)
            good.append(True)
        except Exception:       # noqa: BLE001
            good.append(False)
    tap.ok([h.get("kid") for h in heads] == [kid["node2"]] and good == [True],
           "node2 signs with its own TPM key only (signed_service_keys: one JWS, node2's kid, verifies)",
           heads)
    session("s2", "node2")
    state_b = os.path.join(env.dir, "state-b")
    r = env.bcd("run", *env.run_args(state_b, token_file=env.token_file("b"), extra=["--once"]))
    tap.ok(r.returncode == 0 and r.stdout.startswith("spiffe://"),
           "a second host joins on node2 (its token sealed to the shared encryption key)", r.stdout + r.stderr)
    ok, why = issued_by(env, os.path.join(state_b, "node-chain.pem"), "node2")
    tap.ok(ok, "its certificate is from node2's intermediate", why)
    for f in PRIVATE:
        tap.ok(read(os.path.join(k1, f)) != read(os.path.join(k2, f)),
               "%s: still each node's own after the failover (nothing copied)" % f)

    # -- node1 comes back: what pg_auto_failover copied to it holds nothing of node2's keys
    subprocess.run([HA, "restart", env.ha, "node1"], check=True)
    tap.ok(env.wait_state("node1", "secondary", 180), "node1 rejoins as a standby", env.state())
    env.pgenv = env.node_env("node1")
    again = json.loads(env.psql("SELECT bc_join.service_keys()"))
    tap.ok([k["kid"] for k in again["signingKeys"]] == [kid["node1"], kid["node2"]] and
           again["nodeCa"] == docs["node1"]["nodeCa"],
           "the rejoined node1 loads its own keys and intermediate again (one key_dir path, its own directory)")


if __name__ == "__main__":
    env = HAAgentEnv()

    def setup(e):
        e.start_cluster("ha-hw", tpm=True)
        e.make_tls()
        e.gateway("--retry-after", "1", "--db-wait-timeout", "2s", "--db-pool", "2")

    run(env, setup, body)
