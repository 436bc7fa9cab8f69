#!/usr/bin/python3
"""anchor.t: GET /v1/audit-anchor publishes the issuance log's signed head.

A real cluster and the ASan gateway; two nodes joined through it.  Shows:
the answer is {"anchor": JWS} by the pinned signing key (its kid), purpose
bc_join/audit-anchor, naming the log's current head (id and hash as the
database has them), Cache-Control max-age=60; tools/bc-audit-verify accepts
an export with that anchor, and fails once the newest row is cut off (which
the chain alone cannot show); a later join moves the published head
on; POST is 405; the rate limiter applies (429); /metrics counts it; exit 0.

GET /v1/service-keys is cached as the CRL is (#26.7): 30 requests are one call
of bc_join.signed_service_keys() in the database (pg_stat_user_functions) and
one fetch in /metrics, each answered with Cache-Control max-age no longer
than --service-keys-max-age; a key rotation (bc-join-keygen --stage) is
served within that interval (2 s here).
"""
import base64
import hashlib
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gwlib  # noqa: E402


def b64url(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def join(env, g, name, token):
    req, _ = env.join_request(name, token)
    code, _, b = env.curl(g, "/v1/join", data_file=req)
    return code


def verify(env, csv, anchor_path):
    r = subprocess.run([os.path.join(gwlib.TOP, "tools/bc-audit-verify"), csv, "--anchor", anchor_path,
                        "--service-keys", env.service_keys],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode, r.stdout


def export(env, name):
    path = os.path.join(env.dir, name)
    with open(path, "w") as f:
        f.write(env.psql("COPY (SELECT * FROM bc_join.audit_export) TO STDOUT CSV HEADER"))
        f.write("\n")
    return path


def body(tap, env):
    if env.psql("SELECT to_regprocedure('bc_join.audit_anchor()') IS NOT NULL") != "t":
        tap.skip("anchor", "bc_join.audit_anchor() is not in the installed extension")
        return
    g = env.gateway("main", "--db-pool", "2")
    token = env.token(uses=3)
    tap.ok(join(env, g, "n1", token) == 200 and join(env, g, "n2", token) == 200,
           "two nodes joined through the gateway")

    code, h, b = env.curl(g, "/v1/audit-anchor")
    doc = json.loads(b) if code == 200 else {}
    tap.ok(code == 200 and set(doc) == {"anchor"}, "GET /v1/audit-anchor answers {\"anchor\": JWS}", (code, b))
    tap.eq(h.get("cache-control"), "max-age=60", "cacheable for a minute")
    jws = doc.get("anchor", "..")
    head, payload = json.loads(b64url(jws.split(".")[0])), json.loads(b64url(jws.split(".")[1]))
    keys = json.load(open(env.service_keys))
    tap.eq(payload.get("purpose"), "bc_join/audit-anchor", "an audit anchor")
    last = env.psql("SELECT id || ' ' || encode(hash, 'hex') FROM bc_join.audit_log ORDER BY id DESC LIMIT 1")
    tap.eq("%s %s" % (payload.get("headId"), payload.get("headHash")), last,
           "naming the log's current head (id, hash)")
    sk = keys["signingKey"]
    kid = base64.urlsafe_b64encode(hashlib.sha256(json.dumps(
        {"crv": sk["crv"], "kty": sk["kty"], "x": sk["x"], "y": sk["y"]},
        separators=(",", ":"), sort_keys=True).encode()).digest()).rstrip(b"=").decode()
    tap.ok(head.get("alg") == "ES256" and head.get("kid") == kid,
           "signed ES256 with the pinned signing key's kid (RFC 7638)", (head, kid))
    anchor_path = os.path.join(env.dir, "anchor.jws")
    with open(anchor_path, "w") as f:
        f.write(jws)
    rc, out = verify(env, export(env, "audit.csv"), anchor_path)
    tap.ok(rc == 0, "tools/bc-audit-verify accepts the export with the published anchor "
           "(the JWS verifies with the pinned service-keys.json)", out)
    del keys

    # The newest row cut off: the chain still links, only the anchor tells.
    env.psql("ALTER TABLE bc_join.audit_log DISABLE TRIGGER audit_append_only; "
             "DELETE FROM bc_join.audit_log WHERE id = (SELECT max(id) FROM bc_join.audit_log); "
             "ALTER TABLE bc_join.audit_log ENABLE TRIGGER audit_append_only")
    cut = export(env, "cut.csv")
    r = subprocess.run([os.path.join(gwlib.TOP, "tools/bc-audit-verify"), cut],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tap.ok(r.returncode == 0, "the newest row cut off: the rest still chains (nothing else would notice)", r.stdout)
    rc, out = verify(env, cut, anchor_path)
    tap.ok(rc == 1, "but the published anchor names a head the history no longer has: bc-audit-verify fails", out)

    tap.eq(join(env, g, "n3", token), 200, "a third join")
    code, _, b = env.curl(g, "/v1/audit-anchor")
    p2 = json.loads(b64url(json.loads(b)["anchor"].split(".")[1])) if code == 200 else {}
    tap.ok(code == 200 and int(p2.get("headId", 0)) > int(payload.get("headId", 0)),
           "the published head moves on with the log", (payload, p2))

    code, h, _ = env.curl(g, "/v1/audit-anchor", data="{}")
    tap.ok(code == 405 and h.get("allow") == "GET", "POST /v1/audit-anchor is 405, Allow: GET", (code, h))
    # GET /v1/service-keys: bc_join.signed_service_keys(), each JWS by the key its kid names
    code, h, b = env.curl(g, "/v1/service-keys")
    doc = json.loads(b) if code == 200 else {}
    published = json.loads(env.psql("SELECT bc_join.service_keys()"))
    kids = [json.loads(b64url(j.split(".")[0])).get("kid") for j in doc.get("keys", [])]
    tap.ok(code == 200 and set(doc) == {"keys"} and kids == [k["kid"] for k in published["signingKeys"]],
           "GET /v1/service-keys answers {\"keys\": [JWS]}, one per signing key, by kid", (code, b[:300]))
    rolled = json.loads(b64url(doc["keys"][0].split(".")[1])) if kids else {}
    tap.ok(rolled.get("signingKeys") == published["signingKeys"] and "issuedAt" in rolled,
           "the signed document is service_keys() with issuedAt", rolled)
    code, h, _ = env.curl(g, "/v1/service-keys", data="{}")
    tap.ok(code == 405 and h.get("allow") == "GET", "POST /v1/service-keys is 405, Allow: GET", (code, h))
    text = env.curl(g, "/metrics")[2].decode()
    tap.ok(gwlib.metric(text, "bc_gateway_requests_total",
                        [("endpoint", "audit_anchor"), ("outcome", "issued")]) >= 2.0,
           "/metrics counts the anchors served", text[-800:])
    tap.eq(g.stop(), 0, "the gateway exits 0 (LeakSanitizer included)")

    # -- the signed service keys, cached: one database call for many requests -------------
    env.psql("ALTER DATABASE %s SET track_functions = 'all'" % env.db)

    def signed_calls():
        return int(env.psql("SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions "
                            "WHERE schemaname = 'bc_join' AND funcname = 'signed_service_keys'"))

    def settled_calls(at_least):
        deadline = time.time() + 15      # a backend reports its counts within a second or so of idling
        n = signed_calls()
        while time.time() < deadline and n < at_least:
            time.sleep(0.5)
            n = signed_calls()
        time.sleep(1.5)
        return signed_calls()

    calls0 = settled_calls(0)
    cg = env.gateway("cached", "--service-keys-max-age", "60")
    answers = [env.curl(cg, "/v1/service-keys") for _ in range(30)]
    tap.ok(all(a[0] == 200 and json.loads(a[2]) == json.loads(answers[0][2]) for a in answers),
           "30 GETs of /v1/service-keys: 200, the same signed document", [a[0] for a in answers])
    ages = [int(a[1].get("cache-control", "max-age=-1").split("=")[1]) for a in answers]
    tap.ok(all(0 <= x <= 60 for x in ages) and ages[-1] <= ages[0],
           "Cache-Control max-age: what is left of --service-keys-max-age", ages[:3] + ages[-3:])
    tap.eq(settled_calls(calls0 + 1) - calls0, 1,
           "one call of bc_join.signed_service_keys() in the database for all 30 (pg_stat_user_functions)")
    text = env.curl(cg, "/metrics")[2].decode()
    tap.ok(gwlib.metric(text, "bc_gateway_service_keys_fetches_total", [("result", "ok")]) == 1.0 and
           gwlib.metric(text, "bc_gateway_service_keys_answers_total", [("result", "served")]) == 30.0,
           "/metrics: one fetch, 30 answers served from the cache", text[-900:])
    tap.eq(cg.stop(), 0, "that gateway exits 0")

    # -- a rotation is served within --service-keys-max-age ------------------------------
    rg = env.gateway("rotating", "--service-keys-max-age", "2")

    def served_kids():
        code, _, b = env.curl(rg, "/v1/service-keys")
        return [json.loads(b64url(j.split(".")[0])).get("kid") for j in json.loads(b)["keys"]] if code == 200 else None

    before = served_kids()
    subprocess.run([os.path.join(gwlib.TOP, "tools/bc-join-keygen"), "--stage", env.keys], check=True,
                   stdout=subprocess.DEVNULL)
    t0 = time.time()
    published = [k["kid"] for k in json.loads(env.psql("SELECT bc_join.service_keys()"))["signingKeys"]]
    seen = served_kids()
    while seen != published and time.time() - t0 < 10:
        time.sleep(0.2)
        seen = served_kids()
    waited = time.time() - t0
    tap.ok(len(before) == 1 and len(published) == 2 and seen == published and waited < 2 + 1.5,
           "bc-join-keygen --stage: the gateway serves the new set within its 2 s (%.1f s)" % waited,
           (before, published, seen, waited))
    tap.eq(rg.stop(), 0, "that gateway exits 0")

    limited = env.gateway("limited", "--rate-limit", "1", "--rate-burst", "1")
    codes = [env.curl(limited, "/v1/audit-anchor")[0] for _ in range(4)]
    tap.ok(codes[0] == 200 and 429 in codes, "the rate limiter applies to it (429)", codes)
    codes = [env.curl(limited, "/v1/service-keys")[0] for _ in range(4)]
    tap.ok(429 in codes, "and to GET /v1/service-keys", codes)
    tap.eq(limited.stop(), 0, "that gateway exits 0")


gwlib.main(body)
