#!/usr/bin/python3
"""oidc.t: OIDC discovery of the JWT-SVID issuer and the JWT key rollover (#46).

A real cluster, the ASan gateway over HTTPS with a certificate of a test CA,
a node joined through it, and an independent relying party: oidc-verify
(test/gateway/oidc-verify, Go with Debian's go-oidc and go-jose), which
starts from the issuer URL alone, as AWS IAM or Vault do.  Shows:
- bc_join.jwt_issuer takes an https origin only (a trailing slash, a path,
  a query, userinfo, http are refused); unset, GET
  /.well-known/openid-configuration and GET /v1/jwks are 503 with the reason
  in the gateway's log;
- set, both are served (application/json, Access-Control-Allow-Origin: *,
  public: GET, no rate limit) and equal bc_join.oidc_discovery() and
  bc_join.jwks(): the issuer, jwks_uri = issuer/v1/jwks, ES256, the jwt-svid
  keys only (alg ES256, use sig, kid);
- a JWT-SVID minted through the gateway carries iss and verifies with
  oidc-verify; a wrong audience and the issuer with a trailing slash are
  refused;
- --stage-jwt-key: both keys are published (jwks(), jwtKeys of
  service_keys(), the SPIFFE bundle), the current one first, and the current
  one still signs; --promote-jwt-key: the new kid signs, the old token still
  verifies against /v1/jwks; --retire-jwt-key: the old kid is gone and its
  token is refused, the new one's verifies.
Exit 0.
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gwlib  # noqa: E402

AUD = "sts.amazonaws.com"
VERIFY = os.environ.get("BCJ_OIDC_VERIFY", os.path.join(gwlib.TOP, "build/oidc-verify"))


def keygen(env, *args):
    subprocess.run([os.path.join(gwlib.TOP, "tools/bc-join-keygen")] + list(args) + [env.keys],
                   check=True, stdout=subprocess.DEVNULL)


def make_ca_cert(env):
    """A test CA and the gateway's certificate for 127.0.0.1 issued by it: the
    verifier trusts the CA alone (SSL_CERT_FILE), as a relying party trusts
    the Web PKI."""
    ca_key, ca = os.path.join(env.dir, "ca.key"), os.path.join(env.dir, "ca.crt")
    csr = os.path.join(env.dir, "gw.csr")
    ext = os.path.join(env.dir, "gw.ext")
    q = dict(check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-days", "1", "-subj", "/CN=oidc.t test CA", "-keyout", ca_key, "-out", ca,
                    "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign"], **q)
    subprocess.run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-subj", "/CN=127.0.0.1", "-keyout", env.key, "-out", csr], **q)
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n")
    subprocess.run(["openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
                    "-days", "1", "-sha256", "-extfile", ext, "-out", env.cert], **q)
    return ca


def body(tap, env):
    if env.psql("SELECT to_regprocedure('bc_join.jwks()') IS NOT NULL") != "t":
        tap.skip("oidc", "bc_join.jwks() is not in the installed extension")
        return
    if not os.access(VERIFY, os.X_OK):
        raise RuntimeError("no %s: make build/oidc-verify (golang-go, golang-github-coreos-go-oidc-dev)" % VERIFY)
    ca = make_ca_cert(env)
    g = env.gateway("oidc", "--service-keys-max-age", "1", "--retry-after", "1")
    env.cert = ca                    # curl trusts the CA from here on
    issuer = "https://127.0.0.1:%d" % g.port
    venv = dict(os.environ, SSL_CERT_FILE=ca)

    def verify(iss, aud, token):
        r = subprocess.run([VERIFY, iss, aud, token], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=venv, timeout=20)
        try:
            return json.loads(r.stdout)
        except ValueError:
            return {"ok": False, "raw": r.stdout + r.stderr}

    def served(path):
        code, h, b = env.curl(g, path)
        return code, h, (json.loads(b) if code == 200 else b)

    # -- the setting: an origin only -----------------------------------------------------------
    bad = ["http://127.0.0.1", issuer + "/", issuer + "/oidc", issuer + "?a=b", issuer + "#f",
           "https://user@127.0.0.1", "https://OIDC.example.org", "https://", "https://h:0", "https://h:65536"]
    def takes(value):
        r = subprocess.run(["psql", "-qAtX", "-v", "ON_ERROR_STOP=1", "-d", env.db, "-c",
                            "SET bc_join.jwt_issuer = '%s'" % value], env=dict(os.environ, **env.pgenv),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return r.returncode == 0 or "invalid value" not in r.stderr

    refused = [v for v in bad if not takes(v)]
    tap.eq(refused, bad, "bc_join.jwt_issuer refuses anything but an https origin")
    tap.eq(env.psql("SET bc_join.jwt_issuer = 'https://oidc.example.org:8443'; SHOW bc_join.jwt_issuer"),
           "https://oidc.example.org:8443", "and takes https://HOST:PORT")

    # -- unset: 503, the reason logged -----------------------------------------------------------
    code, h, _ = env.curl(g, "/.well-known/openid-configuration")
    code2, _, _ = env.curl(g, "/v1/jwks")
    tap.ok(code == 503 and code2 == 503 and h.get("access-control-allow-origin") == "*",
           "no issuer: discovery and JWKS are 503 (with the CORS header)", (code, code2, h))
    lines = g.log_lines()
    tap.ok(any(line.get("document") == "oidc_discovery" and line.get("sqlstate") == "F0000" and
               line.get("message") == "bc_join.jwt_issuer is not set"
               for line in lines) and
           any(line.get("endpoint") == "oidc_discovery" and line.get("status") == 503 and
               "jwt_issuer" in line.get("reason", "") for line in lines),
           "the gateway logs why: the fetch's error and the 503's reason",
           [line for line in lines if "oidc" in json.dumps(line)][-3:])

    env.psql("ALTER SYSTEM SET bc_join.jwt_issuer = '%s'" % issuer)
    env.psql("SELECT pg_reload_conf()")
    t0 = time.time()
    code = 0
    while code != 200 and time.time() - t0 < 5:
        time.sleep(0.3)
        code, h, disco = served("/.well-known/openid-configuration")

    # -- the documents -----------------------------------------------------------------------------
    tap.ok(code == 200 and h.get("content-type", "").startswith("application/json") and
           h.get("access-control-allow-origin") == "*" and h.get("cache-control", "").startswith("max-age="),
           "issuer set: discovery 200, application/json, CORS *, max-age", (code, h))
    tap.eq(disco, {"issuer": issuer, "jwks_uri": issuer + "/v1/jwks", "authorization_endpoint": "",
                   "response_types_supported": ["id_token"], "subject_types_supported": ["public"],
                   "id_token_signing_alg_values_supported": ["ES256"]},
           "the discovery document: issuer byte for byte, jwks_uri, ES256")
    tap.eq(disco, json.loads(env.psql("SELECT bc_join.oidc_discovery()")), "it is bc_join.oidc_discovery()")
    code, h, jwks = served("/v1/jwks")
    kid0 = [k["kid"] for k in json.loads(env.psql("SELECT bc_join.service_keys()"))["jwtKeys"]]
    tap.ok(code == 200 and h.get("access-control-allow-origin") == "*" and len(kid0) == 1 and
           [k.get("kid") for k in jwks.get("keys", [])] == kid0 and
           all(k.get("alg") == "ES256" and k.get("use") == "sig" and k.get("kty") == "EC" and
               "x5c" not in k for k in jwks["keys"]),
           "GET /v1/jwks: the jwt-svid key (kid, ES256, sig), no X.509 key", (code, h, jwks))
    code, h, _ = env.curl(g, "/v1/jwks", data="{}")
    tap.ok(code == 405 and h.get("allow") == "GET", "POST /v1/jwks is 405", (code, h))

    # -- a JWT-SVID through the gateway, verified from the issuer alone -------------------------
    _, d = env.join_request("n1", env.token())
    joined = {}

    def mint(aud=AUD):
        req = os.path.join(env.dir, "req-n1.json")
        if not joined:
            code, _, b = env.curl(g, "/v1/join", data_file=req)
            joined.update(json.loads(gwlib.b64url(json.loads(b)["response"].split(".")[1])) if code == 200 else {})
        payload = json.dumps({"purpose": "jwt-svid", "serial": joined.get("serial"),
                              "iat": int(float(env.psql("SELECT extract(epoch FROM bc_join.compute_now())"))),
                              "audience": [aud], "session": "oidc"})
        proof = subprocess.run([os.environ.get("BCJ_JOSE_TOOL", os.path.join(gwlib.TOP, "build/jose-tool")),
                                "sign", os.path.join(d, "node.key")], input=payload.encode(), check=True,
                               stdout=subprocess.PIPE).stdout.decode().strip()
        code, _, b = env.curl(g, "/v1/jwt-svid", data=json.dumps({"proof": proof}))
        if code != 200:
            raise RuntimeError("jwt-svid: %d %r" % (code, b))
        inner = json.loads(gwlib.b64url(json.loads(b)["response"].split(".")[1]))
        return inner["token"], inner["spiffeId"]

    def header_kid(token):
        return json.loads(gwlib.b64url(token.split(".")[0])).get("kid")

    t1, sub = mint()
    claims = json.loads(gwlib.b64url(t1.split(".")[1]))
    tap.eq(claims.get("iss"), issuer, "the JWT-SVID's iss is bc_join.jwt_issuer")
    v = verify(issuer, AUD, t1)
    tap.ok(v.get("ok") and v.get("sub") == sub and v.get("iss") == issuer,
           "oidc-verify, from the issuer alone over HTTPS: the JWT-SVID verifies, sub = its SPIFFE ID", v)
    v = verify(issuer, "other-audience", t1)
    tap.ok(not v.get("ok") and "audience" in v.get("error", ""), "a wrong audience is refused", v)
    v = verify(issuer + "/", AUD, t1)
    tap.ok(not v.get("ok") and v.get("stage") == "discovery" and "issuer did not match" in v.get("error", ""),
           "the issuer with a trailing slash is refused (not byte for byte)", v)

    # -- the rollover --------------------------------------------------------------------------------
    def published_after(want, what):
        """Wait (at most 3 s: the gateway's 1 s max-age) for /v1/jwks to list want."""
        t0 = time.time()
        kids = None
        while time.time() - t0 < 3:
            code, _, j = served("/v1/jwks")
            kids = [k.get("kid") for k in j.get("keys", [])] if code == 200 else code
            if kids == want:
                break
            time.sleep(0.2)
        return kids

    keygen(env, "--stage-jwt-key")
    sk = [k["kid"] for k in json.loads(env.psql("SELECT bc_join.service_keys()"))["jwtKeys"]]
    bundle = [k["kid"] for k in json.loads(env.psql("SELECT bc_join.spiffe_bundle()"))["keys"]
              if k.get("use") == "jwt-svid"]
    tap.ok(len(sk) == 2 and sk[0] == kid0[0] and bundle == sk and
           [k["kid"] for k in json.loads(env.psql("SELECT bc_join.jwks()"))["keys"]] == sk,
           "stage: jwtKeys, the SPIFFE bundle and jwks() list both keys, the current one first", (sk, bundle))
    kid1 = sk[1]
    tap.eq(published_after(sk, "staged"), sk, "stage: GET /v1/jwks lists both")
    t2, _ = mint()
    tap.eq(header_kid(t2), kid0[0], "stage: the current key still signs")

    keygen(env, "--promote-jwt-key")
    sk = [k["kid"] for k in json.loads(env.psql("SELECT bc_join.service_keys()"))["jwtKeys"]]
    tap.eq(sk, [kid1, kid0[0]], "promote: the new key first, the old one still published")
    published_after(sk, "promoted")
    t3, _ = mint()
    tap.eq(header_kid(t3), kid1, "promote: a new JWT-SVID is signed by the new kid")
    v1, v3 = verify(issuer, AUD, t1), verify(issuer, AUD, t3)
    tap.ok(v1.get("ok") and v3.get("ok") and v3.get("kid") == kid1,
           "promote: the old token still verifies against /v1/jwks, and the new one", (v1, v3))

    keygen(env, "--retire-jwt-key")
    tap.eq(published_after([kid1], "retired"), [kid1], "retire: GET /v1/jwks lists the new key only")
    tap.eq([k["kid"] for k in json.loads(env.psql("SELECT bc_join.service_keys()"))["jwtKeys"]], [kid1],
           "retire: jwtKeys lists the new key only")
    v1, v3 = verify(issuer, AUD, t1), verify(issuer, AUD, t3)
    tap.ok(not v1.get("ok") and v1.get("stage") == "verify" and v3.get("ok"),
           "retire: the retired key's token is refused, the new key's verifies", (v1, v3))
    tap.eq(g.stop(), 0, "the gateway exits 0")


gwlib.main(body)
