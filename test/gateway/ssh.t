#!/usr/bin/python3
"""ssh.t: the gateway's SSH routes (#47).

A real cluster with the real extension and the ASan gateway (--service-keys-max-age
120, so only the notification can refresh a copy within this script); a node joined
through it.  Shows: POST /v1/ssh/host is relayed (a proof by the node key over an
ssh-keygen ed25519 host key gets a host certificate that ssh-keygen -L reads, signed
by the key /v1/ssh/host-ca serves; an unknown member is 400 INVALID_INPUT); GET
/v1/ssh/krl is application/octet-stream, equal to bc_join.ssh_krl() to the byte,
read by ssh-keygen -Q -l, with an ETag (304 for If-None-Match) and from the cache
(one fetch for several GETs); GET /v1/ssh/signed is signed by the pinned signing key
and its krlSha256 is the SHA-256 of the raw KRL; GET /v1/ssh/host-ca and
/v1/ssh/user-ca are text/plain, equal to bc_join.ssh_host_ca()/ssh_user_ca(), each
line read by ssh-keygen -l; after bc_join.revoke_ssh_certificate commits the
next GET of /v1/ssh/krl (within 1 s; the copy is 120 s young) lists that serial,
ssh-keygen -Q refuses the certificate, the ETag changed and /v1/ssh/signed names the
new KRL's hash; the gateway exits 0.
"""
import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gwlib  # noqa: E402
from gwlib import b64url  # noqa: E402

from jwcrypto import jwk, jws  # noqa: E402

HOSTNAME = "web1.hosts.example.org"


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def sign(key_path, payload):
    tool = os.environ.get("BCJ_JOSE_TOOL", os.path.join(gwlib.TOP, "build/jose-tool"))
    return subprocess.run([tool, "sign", key_path], input=payload.encode(), check=True,
                          stdout=subprocess.PIPE).stdout.decode().strip()


def keygen(*args, data=None):
    """ssh-keygen with args; (exit code, stdout and stderr together)."""
    r = subprocess.run(["ssh-keygen"] + list(args), input=data, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    return r.returncode, r.stdout.decode("utf-8", "replace")


def max_age(h):
    """The max-age of a Cache-Control header, or -1."""
    m = re.fullmatch(r"max-age=(\d+)", h.get("cache-control", ""))
    return int(m.group(1)) if m else -1


def krl_serials(path):
    """The serials ssh-keygen -Q -l lists in the KRL at path, or None when it cannot read it."""
    rc, out = keygen("-Q", "-l", "-f", path)
    if rc != 0 or "# KRL version" not in out:
        return None
    return {int(m) for m in re.findall(r"serial: (\d+)", out)}


def body(tap, env):
    db = env.connect()          # one connection for every query (a psql each costs seconds in all)
    if not db.one("SELECT to_regprocedure('bc_join.ssh_krl()') IS NOT NULL"):
        tap.skip("ssh", "bc_join.ssh_krl() is not in the installed extension")
        return
    db.one("SELECT bc_join.allow_ssh_names(%s, 'host', %s)", env.tenant, [HOSTNAME])
    db.one("SELECT bc_join.set_ssh_settings(%s, host_principals => %s)", env.pool, [HOSTNAME])
    g = env.gateway("main", "--service-keys-max-age", "120")

    # -- POST /v1/ssh/host, relayed -----------------------------------------------------------
    req, d = env.join_request("n1", env.token())
    code, _, b = env.curl(g, "/v1/join", data_file=req)
    joined = json.loads(b64url(json.loads(b)["response"].split(".")[1])) if code == 200 else {}
    tap.eq(code, 200, "a node joined through the gateway")
    hk = os.path.join(env.dir, "ssh_host_ed25519_key")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", hk], check=True)
    blob = base64.b64decode(open(hk + ".pub").read().split()[1])
    payload = json.dumps({"purpose": "ssh-host", "serial": joined.get("serial"),
                          "sshKeySha256": b64u(hashlib.sha256(blob).digest()),
                          "iat": int(db.one("SELECT extract(epoch FROM bc_join.compute_now())::bigint"))})
    request = {"sshPublicKey": base64.b64encode(blob).decode(), "proof": sign(os.path.join(d, "node.key"), payload)}
    code, _, b = env.curl(g, "/v1/ssh/host", data=json.dumps(dict(request, extra=1)))
    tap.ok(code == 400 and json.loads(b)["error"]["code"] == "INVALID_INPUT",
           "POST /v1/ssh/host with an unknown member: 400 INVALID_INPUT", (code, b))
    code, _, b = env.curl(g, "/v1/ssh/host", data=json.dumps(request))
    ans = json.loads(b) if code == 200 else {}
    keys = json.load(open(env.service_keys))
    inner = {}
    try:
        sig = jws.JWS()
        sig.deserialize(ans.get("response", ""))
        sig.verify(jwk.JWK(**keys["signingKey"]))
        inner = json.loads(sig.payload)
    except Exception as e:  # reported below
        inner = {"error": repr(e)}
    tap.ok(code == 200 and ans.get("status") == "issued" and inner.get("status") == "issued",
           "POST /v1/ssh/host: relayed, issued, signed by the pinned signing key", (code, b[:400], inner))
    cert = os.path.join(env.dir, "ssh_host_ed25519_key-cert.pub")
    with open(cert, "w") as f:
        f.write("ssh-ed25519-cert-v01@openssh.com %s\n" % inner.get("sshCertificate", ""))
    rc, shown = keygen("-L", "-f", cert)
    serial = int(inner.get("sshSerial", "0"))
    tap.ok(rc == 0 and "host certificate" in shown and "Serial: %d" % serial in shown and HOSTNAME in shown,
           "ssh-keygen -L reads the host certificate (serial %d, principal %s)" % (serial, HOSTNAME), shown)

    # -- the CA lines ------------------------------------------------------------------------
    ca_fp = None
    for path, fn in (("/v1/ssh/host-ca", "ssh_host_ca"), ("/v1/ssh/user-ca", "ssh_user_ca")):
        code, h, b = env.curl(g, path)
        text = b.decode("ascii", "replace")
        tap.ok(code == 200 and h.get("content-type", "").startswith("text/plain") and
               text == db.one("SELECT bc_join.%s()" % fn) and max_age(h) > 60,
               "GET %s: 200, text/plain, bc_join.%s(), max-age what is left of 120 s" % (path, fn), (code, h, text))
        lines = text.splitlines()
        read = []
        for i, line in enumerate(lines):
            p = os.path.join(env.dir, "%s-%d.pub" % (fn, i))
            with open(p, "w") as f:
                f.write(line + "\n")
            read.append(keygen("-l", "-f", p))
        tap.ok(lines and all(rc == 0 and "ECDSA" in out for rc, out in read),
               "each of its %d lines is a key ssh-keygen -l reads" % len(lines), read)
        if fn == "ssh_host_ca":
            ca_fp = read[0][1].split()[1] if read and read[0][0] == 0 else None
    tap.ok(ca_fp is not None and ("Signing CA: ECDSA %s" % ca_fp) in shown,
           "the host certificate is signed by the host CA's current key", (ca_fp, shown))

    # -- the KRL -------------------------------------------------------------------------------
    def get_krl(name, *headers):
        code, h, b = env.curl(g, "/v1/ssh/krl", headers=headers)
        p = os.path.join(env.dir, name)
        with open(p, "wb") as f:
            f.write(b)
        return code, h, b, p

    def db_krl():
        return bytes(db.one("SELECT bc_join.ssh_krl()"))

    code, h, raw, krl = get_krl("krl-1")
    tap.ok(code == 200 and h.get("content-type") == "application/octet-stream" and raw == db_krl() and
           0 < max_age(h) <= 60,
           "GET /v1/ssh/krl: 200, application/octet-stream, bc_join.ssh_krl() to the byte, max-age <= 60",
           (code, h, raw[:64]))
    first = krl_serials(krl)
    tap.ok(first is not None and serial not in first, "ssh-keygen -Q -l reads it; the serial is not in it",
           keygen("-Q", "-l", "-f", krl))
    tap.eq(keygen("-Q", "-f", krl, cert)[0], 0, "ssh-keygen -Q: the host certificate is not revoked")
    etag = h.get("etag")
    code, h2, b2, _ = get_krl("krl-304", "If-None-Match: %s" % etag)
    tap.ok(etag and code == 304 and b2 == b"" and h2.get("etag") == etag,
           "an ETag; If-None-Match with it: 304", (etag, code, h2))
    get_krl("krl-again")

    # -- the signed document ---------------------------------------------------------------
    def signed_payload():
        code, h, b = env.curl(g, "/v1/ssh/signed")
        doc = json.loads(b) if code == 200 else {}
        out = None
        for token in doc.get("keys", []):
            s = jws.JWS()
            s.deserialize(token)
            try:
                s.verify(jwk.JWK(**keys["signingKey"]))
                out = json.loads(s.payload)
            except Exception:  # another signing key's JWS
                continue
        return code, h, out

    code, h, sp = signed_payload()
    tap.ok(code == 200 and h.get("content-type", "").startswith("application/json") and sp is not None,
           "GET /v1/ssh/signed: 200, application/json, one JWS by the pinned signing key", (code, h, sp))
    sp = sp or {}
    tap.eq(sp.get("krlSha256"), b64u(hashlib.sha256(raw).digest()), "its krlSha256 is the raw KRL's SHA-256")
    host_ca = db.one("SELECT bc_join.ssh_host_ca()").splitlines()
    tap.ok([x.strip() for x in sp.get("hostCa", [])] == host_ca, "its hostCa lines are /v1/ssh/host-ca's",
           (sp.get("hostCa"), host_ca))

    def fetches():
        _, _, m = env.curl(g, "/metrics")
        m = m.decode()
        return (gwlib.metric(m, "bc_gateway_ssh_krl_fetches_total", [("result", "ok")]),
                gwlib.metric(m, "bc_gateway_ssh_signed_fetches_total", [("result", "ok")]))

    tap.eq(fetches(), (1.0, 1.0), "/metrics: three GETs of the KRL, one fetch; one of the signed document")

    # -- a revocation: the next GET has it ---------------------------------------------------
    tap.eq(db.one("SELECT bc_join.revoke_ssh_certificate(%s, 'keyCompromise')", serial), True,
           "bc_join.revoke_ssh_certificate(%d) committed" % serial)
    t0 = time.time()
    seen = None
    tries = 0
    while time.time() - t0 < 3:
        tries += 1
        code, h, raw2, krl2 = get_krl("krl-2")
        seen = krl_serials(krl2) if code == 200 else None
        if seen is not None and serial in seen:
            break
        time.sleep(0.1)
    waited = time.time() - t0
    tap.ok(seen is not None and serial in seen and waited < 1,
           "a GET of /v1/ssh/krl lists serial %d within 1 s (%.2f s, GET %d; the copy was 120 s young)"
           % (serial, waited, tries),
           (seen, waited))
    tap.ok(raw2 == db_krl() and keygen("-Q", "-f", krl2, cert)[0] == 1,
           "it is bc_join.ssh_krl(), and ssh-keygen -Q refuses the revoked certificate", keygen("-Q", "-f", krl2, cert))
    tap.ok(h.get("etag") and h.get("etag") != etag, "a new ETag", (etag, h.get("etag")))
    code, _, b3, _ = get_krl("krl-old-etag", "If-None-Match: %s" % etag)
    tap.ok(code == 200 and b3 == raw2, "If-None-Match with the old ETag: 200, the new KRL", code)
    code, h, sp2 = signed_payload()
    tap.ok(sp2 is not None and sp2.get("krlSha256") == b64u(hashlib.sha256(raw2).digest()),
           "/v1/ssh/signed names the new KRL's SHA-256", sp2)

    tap.eq(fetches(), (2.0, 2.0), "/metrics: after the notification, one more fetch of each")
    db.conn.close()
    tap.eq(g.stop(), 0, "the gateway exits 0")


gwlib.main(body)
