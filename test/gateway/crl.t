#!/usr/bin/python3
"""crl.t: GET /v1/crl serves the node CA's CRL from the gateway's cache.

A real cluster with the real extension, two nodes joined through the ASan
gateway with the real agent.  Shows: the CRL is DER, application/pkix-crl,
signed by the node CA (openssl crl -CAfile), with a Cache-Control max-age no
longer than until its nextUpdate; repeated GETs are answered from memory (the
gateway's fetch counter and pg_stat_user_functions stay put); a revocation in
psql reaches the gateway through LISTEN/NOTIFY and the next GET (within 1 s,
no restart) returns a CRL with which openssl verify -crl_check rejects the
revoked certificate while the other node's still verifies; an ETag, and
If-None-Match answered 304 until the CRL changes; concurrent GETs on
a cold cache share one fetch; POST is 405;
with the database stopped the cached CRL is still served; a CRL over
--crl-max-size is refused (503, logged); /metrics; exit 0.
"""
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gwlib  # noqa: E402
from gwlib import openssl  # noqa: E402


def save_crl(env, name, der):
    """Write der and its PEM; the PEM's path."""
    dpath = os.path.join(env.dir, name + ".der")
    ppath = os.path.join(env.dir, name + ".pem")
    with open(dpath, "wb") as f:
        f.write(der)
    rc, out = openssl("crl", "-inform", "DER", "-in", dpath, "-out", ppath)
    if rc != 0:
        raise RuntimeError("openssl crl: " + out)
    return dpath, ppath


def crl_number(env, name, der):
    """The CRL number of a DER CRL (openssl crl -crlnumber)."""
    d, _ = save_crl(env, name, der)
    rc, out = openssl("crl", "-inform", "DER", "-in", d, "-noout", "-crlnumber")
    m = re.search(r"crlNumber=0x([0-9A-Fa-f]+)", out)
    return int(m.group(1), 16) if rc == 0 and m else None


def verify(env, crl_pem, leaf):
    return openssl("verify", "-crl_check", "-CRLfile", crl_pem, "-CAfile", env.ca, leaf)


def crl_calls(env):
    """bc_join.crl()'s calls in pg_stat_user_functions (track_functions = all)."""
    v = env.psql("SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions "
                 "WHERE schemaname = 'bc_join' AND funcname = 'crl'")
    return int(v)


def calls_reach(env, want, timeout=15):
    """bc_join.crl()'s calls once they reach want (an idle backend flushes its
    statistics within PGSTAT_IDLE_INTERVAL, 10 s), or the last count seen."""
    deadline = time.time() + timeout
    while True:
        n = crl_calls(env)
        if n >= want or time.time() > deadline:
            return n
        time.sleep(0.3)


def body(tap, env):
    env.ca = os.path.join(env.keys, "node-ca.crt")
    env.psql("ALTER DATABASE gw SET track_functions = 'all'")
    env.psql("ALTER DATABASE gw SET bc_join.crl_validity = 120")
    g = env.gateway("main", "--db-pool", "2")
    m = lambda: env.curl(g, "/metrics")[2].decode()  # noqa: E731

    (s1, leaf1), (s2, leaf2) = env.join_nodes(g, "n1", "n2")
    tap.ok(s1 != s2, "two nodes joined through the gateway")

    # -- the CRL -----------------------------------------------------------------
    code, h, der0 = env.curl(g, "/v1/crl")
    tap.eq(code, 200, "GET /v1/crl is 200")
    tap.eq(h.get("content-type"), "application/pkix-crl", "Content-Type: application/pkix-crl")
    d0, p0 = save_crl(env, "crl0", der0)
    rc, out = openssl("crl", "-inform", "DER", "-in", d0, "-CAfile", env.ca, "-noout")
    tap.ok(rc == 0 and "verify OK" in out, "openssl crl -CAfile <node CA> verifies it", out)
    rc, out = openssl("crl", "-inform", "DER", "-in", d0, "-noout", "-nextupdate")
    nu = subprocess.run(["date", "-d", out.split("=", 1)[1].strip(), "+%s"],
                        stdout=subprocess.PIPE, text=True).stdout.strip()
    mm = re.fullmatch(r"max-age=(\d+)", h.get("cache-control", ""))
    tap.ok(mm is not None and 0 < int(mm.group(1)) <= int(nu) - int(time.time()) + 1,
           "Cache-Control max-age is no longer than until nextUpdate", (h, out))
    rc, out = verify(env, p0, leaf1)
    tap.ok(rc == 0 and ": OK" in out, "before any revocation openssl verify -crl_check accepts node 1", out)

    # -- served from memory ---------------------------------------------------------
    tap.eq(gwlib.metric(m(), "bc_gateway_crl_fetches_total", [("result", "ok")]), 1.0,
           "one fetch so far (bc_gateway_crl_fetches_total)")
    calls0 = calls_reach(env, 1)
    tap.eq(calls0, 1, "pg_stat_user_functions: bc_join.crl() called once")
    same = all(env.curl(g, "/v1/crl")[2] == der0 for _ in range(20))
    tap.ok(same, "20 more GETs return the same bytes")
    text = m()
    tap.eq(gwlib.metric(text, "bc_gateway_crl_fetches_total", [("result", "ok")]), 1.0,
           "still one fetch after 20 GETs")
    tap.eq(gwlib.metric(text, "bc_gateway_crl_requests_total", [("result", "served")]), 21.0,
           "bc_gateway_crl_requests_total{result=served} counts them")
    age = gwlib.metric(text, "bc_gateway_crl_age_seconds")
    tap.ok(age is not None and 0 <= age < 60, "bc_gateway_crl_age_seconds is exposed", age)

    # -- ETag, If-None-Match: 304 (what bcd polls with) --------------------------------
    etag = h.get("etag", "")
    code, h304, b304 = env.curl(g, "/v1/crl", headers=["If-None-Match: " + etag])
    tap.ok(re.fullmatch(r'"[0-9a-f]{32}"', etag) and code == 304 and b304 == b"" and
           h304.get("etag") == etag, "an ETag; If-None-Match with it: 304 without a body", (etag, code, h304))

    # -- a revocation reaches the cache ------------------------------------------------
    tap.eq(env.psql("SELECT bc_join.revoke_certificate('%s', 'keyCompromise')" % s1), "t",
           "revoke_certificate(node 1, keyCompromise) in psql")
    t0 = time.time()
    der1 = der0
    while der1 == der0 and time.time() - t0 < 1.0:
        code, _, der1 = env.curl(g, "/v1/crl")
    took = time.time() - t0
    tap.ok(der1 != der0 and took < 1.0, "a new CRL is served within 1 s (%.3f s)" % took)
    _, p1 = save_crl(env, "crl1", der1)
    rc, out = verify(env, p1, leaf1)
    tap.ok(rc != 0 and "certificate revoked" in out,
           "openssl verify -crl_check rejects the revoked certificate", out)
    rc, out = verify(env, p1, leaf2)
    tap.ok(rc == 0 and ": OK" in out, "the other node's certificate still verifies", out)
    code, h2, b2 = env.curl(g, "/v1/crl", headers=["If-None-Match: " + etag])
    tap.ok(code == 200 and b2 == der1 and h2.get("etag") not in ("", etag),
           "the old ETag gets the new CRL (200, another ETag)", (code, h2))
    tap.eq(gwlib.metric(m(), "bc_gateway_crl_fetches_total", [("result", "ok")]), 2.0,
           "exactly one more fetch for the revocation")
    n0, n1 = crl_number(env, "num0", der0), crl_number(env, "num1", der1)
    tap.ok(n0 is not None and n1 is not None and n1 > n0,
           "the new CRL's number is greater than the old one's (RFC 5280 5.2.3)", (n0, n1))
    # 2 calls in all: the 20 GETs above cost none (waiting for 3 shows none is pending)
    tap.eq(calls_reach(env, 3, timeout=12), 2,
           "pg_stat_user_functions: bc_join.crl() called twice in all, as the gateway counts")

    # -- method ------------------------------------------------------------------------
    code, h, _ = env.curl(g, "/v1/crl", data="{}")
    tap.ok(code == 405 and h.get("allow") == "GET", "POST /v1/crl is 405 with Allow: GET", (code, h))

    # -- the database down -------------------------------------------------------------
    env.pg_stop()
    time.sleep(0.5)
    code, h, der2 = env.curl(g, "/v1/crl")
    tap.ok(code == 200 and der2 == der1, "with the database stopped the cached CRL is served",
           (code, h))
    code, _, _ = env.curl(g, "/healthz")
    tap.eq(code, 503, "(the database really is down: /healthz is 503)")
    env.pg_start()
    code, _, der3 = env.curl(g, "/v1/crl")
    _, p3 = save_crl(env, "crl3", der3) if code == 200 else (None, None)
    rc, out = verify(env, p3, leaf1) if p3 else (0, "")
    tap.ok(code == 200 and "certificate revoked" in out,
           "database back: the CRL is fetched again and still revokes node 1", (code, out))
    lines = g.log_lines()
    tap.ok(any(l.get("msg") == "crl fetch failed" for l in lines) or
           gwlib.metric(m(), "bc_gateway_crl_fetches_total", [("result", "error")]) >= 1.0,
           "the failed fetch while down was logged and counted")
    tap.eq(g.stop(), 0, "the gateway exits 0 (LeakSanitizer included)")

    # -- concurrent GETs on a cold cache share one fetch ---------------------------
    cold = env.gateway("cold")
    procs = [subprocess.Popen(["curl", "-sS", "--cacert", env.cert, "-o", os.devnull,
                               "-w", "%{http_code}", cold.url("/v1/crl")],
                              stdout=subprocess.PIPE, text=True) for _ in range(10)]
    codes = [p.communicate()[0] for p in procs]
    text = env.curl(cold, "/metrics")[2].decode()
    tap.ok(codes == ["200"] * 10 and
           gwlib.metric(text, "bc_gateway_crl_fetches_total", [("result", "ok")]) == 1.0,
           "10 concurrent GETs on a cold cache: all 200, one fetch", (codes, text[-600:]))
    tap.eq(cold.stop(), 0, "that gateway exits 0")

    # -- a CRL over the cap ---------------------------------------------------------
    small = env.gateway("small", "--crl-max-size", "64")
    code, h, b = env.curl(small, "/v1/crl")
    tap.ok(code == 503 and "retry-after" in h, "a CRL over --crl-max-size is refused: 503", (code, b))
    errs = [l for l in small.log_lines() if l.get("msg") == "crl fetch failed"]
    tap.ok(errs and errs[0].get("level") == "error" and "crl-max-size" in errs[0].get("reason", ""),
           "and logged at error", errs)
    tap.eq(small.stop(), 0, "that gateway exits 0 too")

    # -- a revocation within the second of the last CRL: a greater CRL number --------
    # (thisUpdate has whole seconds; the number must still tell the two CRLs apart)
    while time.time() % 1 > 0.3:
        time.sleep(0.05)
    hx = "SELECT encode(bc_join.crl(), 'hex')"
    before = bytes.fromhex(env.psql(hx))
    env.psql("SELECT bc_join.revoke_certificate('%s', 'superseded')" % s2)
    after = bytes.fromhex(env.psql(hx))
    nb, na = crl_number(env, "same-second0", before), crl_number(env, "same-second1", after)
    tap.ok(after != before and nb is not None and na is not None and na > nb,
           "a CRL made in the same second as the previous one, one revocation later: "
           "a greater CRL number", (nb, na))


gwlib.main(body)
