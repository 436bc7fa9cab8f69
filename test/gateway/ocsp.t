#!/usr/bin/python3
"""ocsp.t: the gateway's OCSP responder (POST /v1/ocsp, GET /v1/ocsp/<request>).

A real cluster with the real extension (bc_join.ocsp_response()), two nodes
joined through the ASan gateway with the real agent, and two OCSP clients
nobody here wrote: the openssl CLI (`openssl ocsp -url`) and Debian's
python3-cryptography (x509.ocsp: OCSPRequestBuilder, load_der_ocsp_response),
POSTing with urllib.  Shows: good (the response verifies against the node CA,
its nonce echoed), unknown, revoked the moment bc_join.revoke_certificate
commits (the answer was cached; no wait, no restart); the GET form with RFC
5019's caching headers and a 304 for If-None-Match; a second identical
request does not reach the database (the gateway's counters and
pg_stat_user_functions agree); concurrent requests for one CertID share one
call; a tampered request is answered malformedRequest by the gateway without a
database call; a body over 4096 bytes is 413; --ocsp-cache-entries bounds
the cache (least recently used evicted); the rate limit applies; with the
database stopped a request is answered tryLater (the kept answer is not
served once the listening connection is gone);
LeakSanitizer-clean exits.
"""
import base64
import os
import re
import ssl
import subprocess
import sys
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gwlib  # noqa: E402
from gwlib import openssl  # noqa: E402

from cryptography import x509  # noqa: E402  (Debian's python3-cryptography)
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509 import ocsp as pyocsp  # noqa: E402


def ocsp(env, g, *args):
    """openssl ocsp against the gateway (issuer: the node CA), verified with the node CA chain."""
    return openssl("ocsp", "-issuer", env.inter, "-CAfile", env.ca,
                   "-url", g.url("/v1/ocsp"), *args)


def reqout(env, name, *args):
    """A DER OCSPRequest written by openssl ocsp -reqout; its bytes."""
    path = os.path.join(env.dir, name + ".req.der")
    rc, out = openssl("ocsp", "-issuer", env.inter, "-reqout", path, *args)
    if rc != 0:
        raise RuntimeError("openssl ocsp -reqout: " + out)
    with open(path, "rb") as f:
        return f.read()


def post(env, g, der):
    return env.curl(g, "/v1/ocsp", data=der, headers=["Content-Type: application/ocsp-request"])


def respin(env, name, der, *args):
    """openssl ocsp -respin on der (verified with the node CA unless -noverify is given)."""
    path = os.path.join(env.dir, name + ".resp.der")
    with open(path, "wb") as f:
        f.write(der)
    return openssl("ocsp", "-respin", path, "-issuer", env.inter, "-CAfile", env.ca, *args)


def calls(text):
    return gwlib.metric(text, "bc_gateway_ocsp_calls_total", [("result", "ok")]) or 0.0


def cache(text, result):
    return gwlib.metric(text, "bc_gateway_ocsp_cache_total", [("result", result)]) or 0.0


def db_calls(env, want, timeout=10):
    """bc_join.ocsp_response()'s calls in pg_stat_user_functions, read once the
    gateway's backends are gone (a backend flushes its statistics as it exits)
    and the count reached want or stayed put for a second."""
    deadline = time.time() + timeout
    while time.time() < deadline and env.psql(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = 'gw_login'") != "0":
        time.sleep(0.1)
    last, since = None, time.time()
    while True:
        n = int(env.psql("SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions "
                         "WHERE schemaname = 'bc_join' AND funcname = 'ocsp_response'"))
        if n != last:
            last, since = n, time.time()
        if n >= want or time.time() - since > 1.0 or time.time() > deadline:
            return n
        time.sleep(0.1)


def py_request(leaf_pem, issuer_pem, nonce=None):
    """A SHA-256 CertID request by python3-cryptography (optionally with a nonce)."""
    with open(leaf_pem, "rb") as f:
        leaf = x509.load_pem_x509_certificate(f.read())
    with open(issuer_pem, "rb") as f:
        issuer = x509.load_pem_x509_certificate(f.read())
    b = pyocsp.OCSPRequestBuilder().add_certificate(leaf, issuer, hashes.SHA256())
    if nonce is not None:
        b = b.add_extension(x509.OCSPNonce(nonce), critical=False)
    return b.build().public_bytes(serialization.Encoding.DER), leaf, issuer


def py_post(env, g, der):
    """POST with urllib over TLS (the gateway's certificate pinned); the parsed response and its headers."""
    ctx = ssl.create_default_context(cafile=env.cert)
    rq = urllib.request.Request(g.url("/v1/ocsp"), data=der, method="POST",
                                headers={"Content-Type": "application/ocsp-request"})
    with urllib.request.urlopen(rq, context=ctx, timeout=30) as r:
        return pyocsp.load_der_ocsp_response(r.read()), r.headers


def py_verified(resp, issuer):
    """Whether resp is signed by its included responder certificate, which the issuer signed and may sign OCSP."""
    try:
        signer = resp.certificates[0]
        eku = signer.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        issuer.public_key().verify(signer.signature, signer.tbs_certificate_bytes,
                                   ec.ECDSA(signer.signature_hash_algorithm))
        signer.public_key().verify(resp.signature, resp.tbs_response_bytes,
                                   ec.ECDSA(resp.signature_hash_algorithm))
        return x509.oid.ExtendedKeyUsageOID.OCSP_SIGNING in eku
    except Exception:  # noqa: BLE001 (any failure: not verified)
        return False


def body(tap, env):
    env.ca = os.path.join(env.keys, "node-ca.crt")
    # the issuing intermediate: the first certificate of node-ca.crt
    env.inter = os.path.join(env.dir, "node-ca-intermediate.pem")
    with open(env.ca) as f:
        pem = f.read()
    with open(env.inter, "w") as f:
        f.write(pem[:pem.index("-----END CERTIFICATE-----") + 26])
    env.psql("ALTER DATABASE gw SET track_functions = 'all'")
    g = env.gateway("main", "--db-pool", "2")
    m = lambda: env.curl(g, "/metrics")[2].decode()  # noqa: E731

    (s1, leaf1), (s2, leaf2) = env.join_nodes(g, "n1", "n2")
    tap.ok(s1 != s2, "two nodes joined through the gateway")

    # -- openssl ocsp: good, with its nonce echoed ------------------------------------------
    rc, out = ocsp(env, g, "-cert", leaf1, "-resp_text")
    tap.ok(rc == 0 and "Response verify OK" in out and re.search(r"leaf-n1\.pem: good", out),
           "openssl ocsp -url: node 1 is good, the response verifies against the node CA", out)
    tap.ok("OCSP Nonce" in out and "WARNING: no nonce" not in out,
           "the request's nonce is echoed (openssl checks it)", out)
    tap.ok(re.search(r"Next Update: ", out) is not None, "thisUpdate and nextUpdate are there", out)

    # -- unknown ----------------------------------------------------------------------------
    rc, out = ocsp(env, g, "-serial", "0x0123456789abcdef")
    tap.ok(rc == 0 and "Response verify OK" in out and re.search(r"0x0123456789abcdef: unknown", out),
           "a serial the node CA never issued is unknown", out)

    # -- the cache: one CertID, no nonce -------------------------------------------------
    t0 = m()
    rc, out = ocsp(env, g, "-cert", leaf2, "-no_nonce")
    rc2, out2 = ocsp(env, g, "-cert", leaf2, "-no_nonce")
    t1 = m()
    tap.ok(rc == 0 and "leaf-n2.pem: good" in out and rc2 == 0 and "leaf-n2.pem: good" in out2,
           "node 2 (no nonce) is good, twice", (out, out2))
    tap.ok(calls(t1) - calls(t0) == 1 and cache(t1, "hit") - cache(t0, "hit") == 1,
           "the second identical request is answered from the cache: one database call, one hit",
           (calls(t0), calls(t1), cache(t1, "hit")))

    # the GET form (RFC 5019) of the same request: the same cache, the caching headers
    der2 = reqout(env, "n2", "-cert", leaf2, "-no_nonce")
    path = "/v1/ocsp/" + urllib.parse.quote(base64.b64encode(der2).decode(), safe="")
    code, h, resp = env.curl(g, path)
    rc, out = respin(env, "get", resp, "-cert", leaf2)
    tap.ok(code == 200 and h.get("content-type") == "application/ocsp-response" and
           rc == 0 and "Response verify OK" in out and "leaf-n2.pem: good" in out,
           "GET /v1/ocsp/<url-encoded base64>: application/ocsp-response, good, verified", (code, h, out))
    mm = re.fullmatch(r"max-age=(\d+), public, no-transform, must-revalidate", h.get("cache-control", ""))
    tap.ok(mm is not None and 0 < int(mm.group(1)) <= 60 and "last-modified" in h and "expires" in h
           and re.fullmatch(r'"[0-9a-f]{32}"', h.get("etag", "")),
           "Cache-Control max-age <= 60, public, no-transform, must-revalidate; Last-Modified, Expires, ETag", h)
    code, h304, b304 = env.curl(g, path, headers=["If-None-Match: " + h.get("etag", "")])
    tap.ok(code == 304 and b304 == b"", "If-None-Match with its ETag: 304", (code, h304))
    t2 = m()
    tap.ok(calls(t2) == calls(t1), "the GETs reached no database either", (calls(t1), calls(t2)))

    # -- revoked as soon as it commits ----------------------------------------------------
    tap.eq(env.psql("SELECT bc_join.revoke_certificate('%s', 'keyCompromise')" % s2), "t",
           "revoke_certificate(node 2, keyCompromise) in psql")
    rc, out = ocsp(env, g, "-cert", leaf2, "-no_nonce")
    tap.ok(rc == 0 and "Response verify OK" in out and "leaf-n2.pem: revoked" in out and
           "Reason: keyCompromise" in out and "Revocation Time:" in out,
           "the very next request (its answer was cached as good): revoked, keyCompromise, with its time", out)
    code, _, resp = env.curl(g, path)
    rc, out = respin(env, "get-revoked", resp, "-cert", leaf2)
    tap.ok(code == 200 and "leaf-n2.pem: revoked" in out, "the GET form says revoked too", out)
    tap.ok(cache(m(), "hit") >= 1 and gwlib.metric(m(), "bc_gateway_ocsp_cache_invalidations_total") >= 1,
           "the notification dropped the cache (bc_gateway_ocsp_cache_invalidations_total)")

    # -- a second client: python3-cryptography ---------------------------------------------
    nonce = os.urandom(16)
    der, _, issuer = py_request(leaf1, env.inter, nonce)
    resp, hh = py_post(env, g, der)
    ext = [e.value.nonce for e in resp.extensions if isinstance(e.value, x509.OCSPNonce)]
    tap.ok(resp.response_status == pyocsp.OCSPResponseStatus.SUCCESSFUL and
           resp.certificate_status == pyocsp.OCSPCertStatus.GOOD and
           resp.serial_number == int(s1, 16) and isinstance(resp.hash_algorithm, hashes.SHA256),
           "python3-cryptography, SHA-256 CertID: node 1 good, its serial echoed",
           (resp.response_status, s1))
    tap.ok(ext == [nonce], "its nonce echoed", ext)
    tap.ok(py_verified(resp, issuer), "signed by an OCSPSigning responder the node CA issued (verified in python)")
    tap.ok(resp.next_update is not None and resp.this_update <= resp.next_update,
           "thisUpdate <= nextUpdate", (resp.this_update, resp.next_update))
    tap.eq(hh.get("Cache-Control"), "no-store", "an answer with a nonce is not cacheable: no-store")
    der, _, issuer = py_request(leaf2, env.inter)
    resp, _ = py_post(env, g, der)
    tap.ok(resp.certificate_status == pyocsp.OCSPCertStatus.REVOKED and
           resp.revocation_reason == x509.ReasonFlags.key_compromise and
           resp.revocation_time is not None and py_verified(resp, issuer),
           "python3-cryptography: node 2 revoked, keyCompromise, verified",
           (resp.certificate_status, resp.revocation_reason))

    # -- one database call per CertID in flight -------------------------------------------
    env.psql("NOTIFY bc_join_crl")
    der1 = reqout(env, "n1", "-cert", leaf1, "-no_nonce")
    dpath = os.path.join(env.dir, "n1.req.der")
    t3 = m()
    procs = [subprocess.Popen(["curl", "-sS", "--cacert", env.cert, "-H", "Content-Type: application/ocsp-request",
                               "--data-binary", "@" + dpath, g.url("/v1/ocsp")],
                              stdout=subprocess.PIPE) for _ in range(8)]
    outs = [p.communicate()[0] for p in procs]
    t4 = m()
    tap.ok(len(set(outs)) == 1 and len(outs[0]) > 100 and calls(t4) - calls(t3) == 1,
           "8 concurrent requests for one CertID after a notification: one database call, one answer",
           (calls(t3), calls(t4), cache(t4, "shared"), [len(o) for o in outs]))

    # -- malformed: answered by the gateway, no database call ------------------------------
    bad = bytearray(der1)
    bad[1] ^= 0x01              # the outer SEQUENCE's length
    code, h, resp = post(env, g, bytes(bad))
    rc, out = respin(env, "bad", resp, "-noverify")
    code2, _, resp2 = env.curl(g, "/v1/ocsp/" + urllib.parse.quote(
        base64.b64encode(bytes(bad)).decode(), safe=""))
    code3, _, resp3 = env.curl(g, "/v1/ocsp/not%20base64%21")
    t5 = m()
    tap.ok(code == 200 and "malformedrequest" in out.lower() and resp2 == resp and resp3 == resp,
           "a tampered request (POST and GET) and a path that is not base64: malformedRequest", (code, out))
    tap.ok(calls(t5) == calls(t4) and cache(t5, "malformed") - cache(t4, "malformed") == 3,
           "without a database call", (calls(t4), calls(t5)))
    code, _, _ = post(env, g, b"\x30" + b"\x00" * 4999)
    tap.eq(code, 413, "a body over 4096 bytes is 413")
    code, h, _ = env.curl(g, "/v1/ocsp")
    tap.ok(code == 405 and h.get("allow") == "POST", "GET /v1/ocsp without a request: 405, Allow: POST")

    text = m()
    tap.eq(gwlib.metric(text, "bc_gateway_requests_total", [("endpoint", "ocsp_get"), ("outcome", "invalid")]),
           2.0, "bc_gateway_requests_total counts OCSP requests (the two malformed GETs: invalid)")
    tap.eq(g.stop(), 0, "the gateway exits 0 (LeakSanitizer included)")
    # pg_stat_user_functions agrees with the gateway's count of calls (its backends flush on exit)
    tap.eq(db_calls(env, int(calls(text))), int(calls(text)),
           "pg_stat_user_functions: bc_join.ocsp_response() called exactly as often as the gateway says")

    # -- the rate limit applies ----------------------------------------------------------
    rl = env.gateway("rl", "--rate-limit", "1", "--rate-burst", "2")
    codes = [post(env, rl, der1)[0] for _ in range(2)] + [env.curl(rl, path)[0]]
    tap.eq(codes, [200, 200, 429], "--rate-limit 1 --rate-burst 2: the third OCSP request is 429")
    tap.eq(rl.stop(), 0, "that gateway exits 0")

    # -- bounded: --ocsp-cache-entries 1 keeps one CertID ---------------------------------
    small = env.gateway("small", "--ocsp-cache-entries", "1")
    env.curl(small, "/healthz")     # a connection up and listening: answers from now on are kept
    codes = [post(env, small, d)[0] for d in (der1, der2, der2, der1)]
    text = env.curl(small, "/metrics")[2].decode()
    tap.ok(codes == [200] * 4 and cache(text, "hit") == 1.0 and cache(text, "miss") == 3.0 and
           gwlib.metric(text, "bc_gateway_ocsp_cache_entries") == 1.0 and
           gwlib.metric(text, "bc_gateway_ocsp_cache_evictions_total") == 2.0,
           "--ocsp-cache-entries 1: node 1, node 2 (node 1 evicted), node 2 again (a hit), node 1 (a miss)",
           text[-900:])

    # -- the database gone: tryLater, never the kept answer (the listening connection is gone) --
    env.pg_stop()
    time.sleep(0.5)
    code, _, resp = post(env, small, der1)
    rc, out = respin(env, "down", resp, "-noverify")
    tap.ok(code == 200 and "trylater" in out.lower(),
           "the database stopped: node 1 (kept a moment ago) is answered tryLater, unsigned", (code, out))
    tap.eq(small.stop(), 0, "that gateway exits 0")

def setup(env):
    """Keys with ocsp.key (bc-join-keygen makes it; --add-ocsp-key for an older directory), the cluster, TLS."""
    subprocess.run([os.path.join(gwlib.TOP, "tools/bc-join-keygen"), env.keys],
                   check=True, stdout=subprocess.DEVNULL)
    if not os.path.exists(os.path.join(env.keys, "ocsp.key")):
        subprocess.run([os.path.join(gwlib.TOP, "tools/bc-join-keygen"), "--add-ocsp-key", env.keys],
                       check=True, stdout=subprocess.DEVNULL)
    env.start_cluster("gw", make_keys=False)
    env.make_cert()


gwlib.run(gwlib.Env(), setup, body)
