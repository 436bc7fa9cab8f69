#!/usr/bin/python3
"""key_reload.t: the extension's side of key rotation, in one long-lived backend.

Shows: a backend takes up a changed key directory at its next transaction and
never in the middle of one (one transaction sees one set of keys); after
--promote, answers are signed by the new key (its kid) and a token sealed to
the previous encryption key still opens; after --retire it is refused as
unsealable; signed_service_keys() holds one JWS per signing key, each
verifying with the published key of its kid; a node-ca.crt that is not one
chain or whose first certificate is not node-ca.key's is INVALID_CONFIG,
and the directory put right is taken up again; a rotation of the
intermediate stopped between its renames still loads.
Its own cluster (bctest.ClusterEnv).
"""
import base64
import json
import os
import shutil
import subprocess
import sys

import psycopg2
from jwcrypto import jwk, jws

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from bctest import TOP, ClusterEnv, run  # noqa: E402

DB = "bcj_reload"
BCD = os.environ.get("BCJ_BCD", os.path.join(TOP, "build/bcd"))


def b64u_decode(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def keygen(*args):
    subprocess.run([os.path.join(TOP, "tools/bc-join-keygen")] + list(args), check=True,
                   stdout=subprocess.DEVNULL)


def setup(env):
    env.start_cluster("reload")


def body(tap, env):
    conn = psycopg2.connect(host=env.pgenv["PGHOST"], port=env.pgenv["PGPORT"],
                            user=env.pgenv["PGUSER"], dbname=DB)
    cur = conn.cursor()

    def one(sql, *args):
        cur.execute(sql, args)
        return cur.fetchone()[0]

    def kids():
        return [k["kid"] for k in one("SELECT bc_join.service_keys()")["signingKeys"]]

    def request(keys_file, name):
        d = os.path.join(env.dir, name)
        r = subprocess.run([BCD, "join-request", "--service-keys", keys_file, "--token", env.token(),
                            "--out-dir", d], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise RuntimeError("bcd join-request: " + r.stderr)
        return r.stdout.strip()

    kid0 = kids()
    conn.commit()
    old_keys = env.service_keys

    # -- a transaction keeps its keys; the next one takes the new ones up --------------------
    before = one("SELECT bc_join.service_keys()::text")
    keygen("--stage", env.keys)
    keygen("--promote", env.keys)
    tap.eq(one("SELECT bc_join.service_keys()::text"), before,
           "in the middle of a transaction the keys do not change under it")
    conn.commit()
    now = kids()
    conn.commit()
    tap.ok(len(now) == 2 and now[1] == kid0[0] and now[0] != kid0[0],
           "the next transaction of the same backend: the new key current, the old one previous", now)

    # -- answers by the new key; a token sealed to the previous encryption key opens --------
    req = request(old_keys, "a")
    r = one("SELECT bc_join(%s::jsonb)", req)
    conn.commit()
    hdr = json.loads(b64u_decode(r.get("response", "..").split(".")[0])) if "response" in r else {}
    tap.eq(r.get("status"), "issued", "a request sealed to the previous encryption key is admitted")
    tap.eq(hdr.get("kid"), now[0], "its answer names the new signing key")

    signed = one("SELECT bc_join.signed_service_keys()")
    conn.commit()
    published = {k["kid"]: k for k in one("SELECT bc_join.service_keys()")["signingKeys"]}
    conn.commit()
    good = 0
    for token in signed["keys"]:
        kid = json.loads(b64u_decode(token.split(".")[0]))["kid"]
        key = jwk.JWK(**{k: v for k, v in published[kid].items() if k != "kid"})
        s = jws.JWS()
        s.deserialize(token)
        s.verify(key)
        doc = json.loads(s.payload)
        good += doc.get("signingKeys") == list(published.values()) and "issuedAt" in doc
    tap.eq((len(signed["keys"]), good), (2, 2),
           "signed_service_keys(): one JWS per signing key, each verifying with its kid's key")

    # -- retired: the old seal no longer opens -----------------------------------------------
    keygen("--retire", env.keys)
    r = one("SELECT bc_join(%s::jsonb)", request(old_keys, "b"))
    refusal = one("SELECT payload->>'refusal' FROM bc_join.events WHERE type = 'security.join.refused' "
                  "ORDER BY at DESC, id DESC LIMIT 1")
    conn.commit()
    tap.eq((r.get("status"), refusal), ("refused", "join-token:unsealable"),
           "after --retire a token sealed to the old encryption key is refused as unsealable")
    tap.eq(kids(), [now[0]], "and only the current signing key is published")
    conn.commit()

    # -- a broken CA bundle is INVALID_CONFIG; put right, it is taken up again -------------
    ca = os.path.join(env.keys, "node-ca.crt")
    keep = os.path.join(env.dir, "node-ca.crt.keep")
    shutil.copy2(ca, keep)
    with open(ca) as f:
        pems = f.read().split("-----END CERTIFICATE-----\n")[:-1]
    certs = [p + "-----END CERTIFICATE-----\n" for p in pems]

    def replace_ca(text):
        tmp = os.path.join(env.keys, ".node-ca.crt.tmp")
        with open(tmp, "w") as f:
            f.write(text)
        shutil.copystat(keep, tmp)
        os.chown(tmp, os.stat(keep).st_uid, os.stat(keep).st_gid)
        os.rename(tmp, ca)

    def raised():
        try:
            one("SELECT bc_join.service_keys()")
            conn.commit()
            return None
        except psycopg2.Error as e:
            conn.rollback()
            return (e.pgcode, (e.diag.message_primary or ""), (e.diag.message_detail or ""))

    foreign = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                              "ec_paramgen_curve:P-256", "-nodes", "-keyout", "/dev/null",
                              "-subj", "/CN=not the root", "-days", "1"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    replace_ca(certs[0] + foreign)
    got = raised()
    tap.ok(got is not None and "INVALID_CONFIG" in got[2] and "not one chain" in got[1],
           "node-ca.crt whose second certificate did not issue the first: INVALID_CONFIG", got)
    replace_ca(certs[-1])
    got = raised()
    tap.ok(got is not None and "does not match" in got[1],
           "node-ca.crt without the intermediate (node-ca.key's): INVALID_CONFIG", got)
    replace_ca("".join(certs))
    tap.eq(raised(), None, "the directory put right: taken up again at the next transaction")

    # -- --rotate-intermediate stopped between its renames: the new key with
    # node-ca.next.crt beside the old node-ca.crt still loads, the next one issuing
    root = env.keys + ".root"
    key = os.path.join(env.keys, "node-ca.key")
    new_key = os.path.join(env.dir, "int2.key")
    csr = os.path.join(env.dir, "int2.csr")
    ext = os.path.join(env.dir, "int2.ext")
    crt = os.path.join(env.dir, "int2.crt")
    with open(ext, "w") as f:
        f.write("basicConstraints=critical,CA:TRUE,pathlen:0\nkeyUsage=critical,keyCertSign,cRLSign\n"
                "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid:always\n")
    for cmd in (["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", new_key],
                ["openssl", "req", "-new", "-key", new_key, "-subj", "/CN=second intermediate", "-out", csr],
                ["openssl", "x509", "-req", "-in", csr, "-CA", os.path.join(root, "root.crt"), "-CAkey",
                 os.path.join(root, "root.key"), "-days", "1", "-set_serial", "7", "-extfile", ext, "-out", crt]):
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(crt) as f, open(os.path.join(root, "root.crt")) as g:
        next_bundle = f.read() + g.read()
    nxt = os.path.join(env.keys, "node-ca.next.crt")
    with open(nxt, "w") as f:
        f.write(next_bundle)
    shutil.copystat(keep, nxt)
    os.chown(nxt, os.stat(keep).st_uid, os.stat(keep).st_gid)
    tmpk = os.path.join(env.keys, ".node-ca.key.tmp")
    shutil.copyfile(new_key, tmpk)
    shutil.copystat(key, tmpk)
    os.chown(tmpk, os.stat(key).st_uid, os.stat(key).st_gid)
    os.rename(tmpk, key)
    got = raised()
    pem = one("SELECT bc_join.node_ca_certificate()")
    conn.commit()
    tap.ok(got is None and "second intermediate" in subprocess.run(
        ["openssl", "x509", "-noout", "-subject"], input=pem, stdout=subprocess.PIPE, text=True).stdout,
        "the new node-ca.key beside node-ca.next.crt (a rotation stopped half-way): it loads, the next one issues",
        (got, pem[:80]))

    # -- jwt-svid.key is optional; --add-jwt-key adds one to an old directory ---------------
    jwt = os.path.join(env.keys, "jwt-svid.key")
    first = one("SELECT bc_join.service_keys()->'jwtKeys'")
    conn.commit()
    tap.ok(len(first) == 1 and first[0].get("crv") == "P-256" and len(first[0].get("kid", "")) == 43
           and "d" not in first[0],
           "a new directory has jwt-svid.key: service_keys() publishes its public JWK with its kid", first)
    os.unlink(jwt)
    got = raised()
    without = one("SELECT bc_join.service_keys()->'jwtKeys'")
    conn.commit()
    tap.eq((got, without), (None, []), "a directory without jwt-svid.key (as before #33) loads; jwtKeys is empty")
    keygen("--add-jwt-key", env.keys)
    added = one("SELECT bc_join.service_keys()->'jwtKeys'")
    conn.commit()
    st = os.stat(jwt)
    tap.ok(len(added) == 1 and added[0]["kid"] != first[0]["kid"] and (st.st_mode & 0o077) == 0
           and st.st_uid == os.stat(env.keys).st_uid,
           "--add-jwt-key adds a new jwt-svid.key (0600, the directory's owner), published at the next transaction",
           added)
    again = subprocess.run([os.path.join(TOP, "tools/bc-join-keygen"), "--add-jwt-key", env.keys],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tap.ok(again.returncode != 0 and "refusing to overwrite" in again.stderr
           and one("SELECT bc_join.service_keys()->'jwtKeys'") == added,
           "--add-jwt-key never overwrites an existing jwt-svid.key", again.stderr)
    conn.commit()
    conn.close()


if __name__ == "__main__":
    run(ClusterEnv("bcj-reload.", DB, "reload.bc-join.local"), setup, body)
