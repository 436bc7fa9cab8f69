#!/usr/bin/python3
"""spiffe.t: the gateway's SPIFFE endpoints (#33).

A real cluster and the ASan gateway; a node joined through it.  Shows:
GET /v1/spiffe-bundle over the gateway's TLS answers bc_join.spiffe_bundle()
as application/json with Cache-Control max-age (the SPIFFE federation
https_web profile): an x509-svid key whose x5c is the node CA root, the
jwt-svid key with the kid service_keys() publishes, spiffe_sequence and
spiffe_refresh_hint 300; POST is 405; it is cached (30 GETs, one fetch in
/metrics) and a new jwt-svid.key shows within --service-keys-max-age (2 s
here).  POST /v1/jwt-svid is relayed as /v1/session is: a proof by the node
key gets a JWT-SVID (the answer signed by the pinned signing key, the token by
the bundle's jwt-svid key, its sub the session's SPIFFE ID, its aud the
audience asked for); the same proof again is refused.  Exit 0.
"""
import base64
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gwlib  # noqa: E402

from jwcrypto import jwk, jws, jwt  # noqa: E402


def b64url(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def last_cert_der(pem_path):
    pem = open(pem_path).read()
    last = pem[pem.rindex("-----BEGIN CERTIFICATE-----"):]
    return subprocess.run(["openssl", "x509", "-outform", "DER"], input=last.encode(),
                          check=True, stdout=subprocess.PIPE).stdout


def sign(key_path, payload):
    tool = os.environ.get("BCJ_JOSE_TOOL", os.path.join(gwlib.TOP, "build/jose-tool"))
    return subprocess.run([tool, "sign", key_path], input=payload.encode(), check=True,
                          stdout=subprocess.PIPE).stdout.decode().strip()


def body(tap, env):
    if env.psql("SELECT to_regprocedure('bc_join.spiffe_bundle()') IS NOT NULL") != "t":
        tap.skip("spiffe", "bc_join.spiffe_bundle() is not in the installed extension")
        return
    g = env.gateway("main")

    # -- the bundle ------------------------------------------------------------------------
    code, h, b = env.curl(g, "/v1/spiffe-bundle")
    doc = json.loads(b) if code == 200 else {}
    tap.ok(code == 200 and h.get("content-type", "").startswith("application/json"),
           "GET /v1/spiffe-bundle over TLS: 200, application/json", (code, h))
    tap.ok(h.get("cache-control", "").startswith("max-age="), "with Cache-Control max-age", h)
    tap.eq(doc, json.loads(env.psql("SELECT bc_join.spiffe_bundle()")), "it is bc_join.spiffe_bundle()")
    x = [k for k in doc.get("keys", []) if k.get("use") == "x509-svid"]
    j = [k for k in doc.get("keys", []) if k.get("use") == "jwt-svid"]
    root = last_cert_der(os.path.join(env.keys, "node-ca.crt"))
    tap.ok(len(x) == 1 and base64.b64decode(x[0]["x5c"][0]) == root and
           x[0]["kty"] == "EC" and x[0]["crv"] == "P-256" and "x" in x[0] and "y" in x[0],
           "an x509-svid key: the node CA root (x5c, standard base64 DER) as an EC P-256 JWK", x)
    published = json.loads(env.psql("SELECT bc_join.service_keys()"))["jwtKeys"]
    tap.ok(len(j) == 1 and len(published) == 1 and j[0]["kid"] == published[0]["kid"] and
           j[0]["x"] == published[0]["x"] and j[0]["y"] == published[0]["y"],
           "the jwt-svid key: jwt-svid.key's, with the kid service_keys() publishes", (j, published))
    tap.ok(isinstance(doc.get("spiffe_sequence"), int) and doc.get("spiffe_refresh_hint") == 300,
           "spiffe_sequence (an integer) and spiffe_refresh_hint 300", doc)
    code, h, _ = env.curl(g, "/v1/spiffe-bundle", data="{}")
    tap.ok(code == 405 and h.get("allow") == "GET", "POST /v1/spiffe-bundle is 405, Allow: GET", (code, h))

    # -- a JWT-SVID through the gateway ------------------------------------------------------
    req, d = env.join_request("n1", env.token())
    code, _, b = env.curl(g, "/v1/join", data_file=req)
    joined = json.loads(b64url(json.loads(b)["response"].split(".")[1])) if code == 200 else {}
    tap.eq(code, 200, "a node joined through the gateway")
    payload = json.dumps({"purpose": "jwt-svid", "serial": joined.get("serial"),
                          "iat": int(float(env.psql("SELECT extract(epoch FROM bc_join.compute_now())"))),
                          "audience": ["spiffe://test.bc-join.local/svc/db"], "session": "sess-gw"})
    proof = sign(os.path.join(d, "node.key"), payload)
    code, h, b = env.curl(g, "/v1/jwt-svid", data=json.dumps({"proof": proof}))
    ans = json.loads(b) if code == 200 else {}
    tap.ok(code == 200 and ans.get("status") == "issued", "POST /v1/jwt-svid: issued", (code, b[:300]))
    keys = json.load(open(env.service_keys))
    sig = jws.JWS()
    sig.deserialize(ans.get("response", ""))
    sig.verify(jwk.JWK(**keys["signingKey"]))
    inner = json.loads(sig.payload)
    tap.ok(inner.get("purpose") == "jwt-svid" and inner.get("spiffeId", "").startswith(joined.get("spiffeId", "?")),
           "the answer is signed by the pinned signing key and names the session's SPIFFE ID", inner)
    ks = jwk.JWKSet()
    ks.add(jwk.JWK(**{m: j[0][m] for m in ("kty", "crv", "x", "y", "kid")}))
    tok = jwt.JWT(jwt=inner.get("token", ""), key=ks, algs=["ES256"])
    claims = json.loads(tok.claims)
    tap.ok(claims.get("sub") == inner.get("spiffeId") and claims.get("aud") == ["spiffe://test.bc-join.local/svc/db"]
           and claims["exp"] - claims["iat"] == 300,
           "the JWT-SVID verifies with the bundle's jwt-svid key: sub, aud, 300 s", claims)
    code, _, b = env.curl(g, "/v1/jwt-svid", data=json.dumps({"proof": proof}))
    tap.ok(code != 200 and json.loads(b).get("status") == "refused", "the same proof again: refused", (code, b))
    tap.eq(env.psql("SELECT payload->>'refusal' FROM bc_join.events WHERE type = 'security.join.refused' "
                    "ORDER BY id DESC LIMIT 1"), "jwt-svid:reused", "recorded jwt-svid:reused")
    tap.eq(g.stop(), 0, "the gateway exits 0")

    # -- cached, and a new key shows within --service-keys-max-age ----------------------------
    cg = env.gateway("cached", "--service-keys-max-age", "60")
    answers = [env.curl(cg, "/v1/spiffe-bundle") for _ in range(30)]
    tap.ok(all(a[0] == 200 and a[2] == answers[0][2] for a in answers),
           "30 GETs of /v1/spiffe-bundle: 200, the same document", [a[0] for a in answers])
    _, _, text = env.curl(cg, "/metrics")
    text = text.decode()
    tap.ok(gwlib.metric(text, "bc_gateway_spiffe_bundle_fetches_total", [("result", "ok")]) == 1.0 and
           gwlib.metric(text, "bc_gateway_spiffe_bundle_answers_total", [("result", "served")]) == 30.0,
           "/metrics: one fetch, 30 answers served from the cache", text[-900:])
    tap.eq(cg.stop(), 0, "that gateway exits 0")

    rg = env.gateway("rotating", "--service-keys-max-age", "2")

    def served_kid():
        code, _, b = env.curl(rg, "/v1/spiffe-bundle")
        return [k.get("kid") for k in json.loads(b)["keys"] if k.get("use") == "jwt-svid"] if code == 200 else None

    before = served_kid()
    os.unlink(os.path.join(env.keys, "jwt-svid.key"))
    subprocess.run([os.path.join(gwlib.TOP, "tools/bc-join-keygen"), "--add-jwt-key", env.keys], check=True,
                   stdout=subprocess.DEVNULL)
    t0 = time.time()
    now = [k["kid"] for k in json.loads(env.psql("SELECT bc_join.service_keys()"))["jwtKeys"]]
    seen = served_kid()
    while seen != now and time.time() - t0 < 10:
        time.sleep(0.2)
        seen = served_kid()
    waited = time.time() - t0
    tap.ok(before != now and seen == now and waited < 2 + 1.5,
           "a new jwt-svid.key: the gateway serves it within its 2 s (%.1f s)" % waited, (before, now, seen))
    tap.eq(rg.stop(), 0, "that gateway exits 0")


gwlib.main(body)
