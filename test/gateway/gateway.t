#!/usr/bin/python3
"""gateway.t: bc-gateway relays joins and maps every answer.

A real cluster with the real extension, the real agent (bcd), the ASan build
of bc-gateway behind real TLS, curl with the certificate pinned.  Shows: a
join (200, verify-response accepts it), the one refusal (403, identical body),
malformed input (400, no SQL, DETAIL or CONTEXT), an unknown attestor and the
functions that do not exist yet (404), an oversized body (413, and the gateway
keeps serving), slow clients cut off without blocking others, TLS 1.1 refused,
logs without secrets, and a clean exit 0 on SIGTERM.
"""
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gwlib  # noqa: E402

REFUSAL = {"status": "refused", "error": {"code": "ACCESS_DENIED", "message": "Join refused"}}


def slow_client(env, gw, payload, result, trickle=False):
    """Open TLS, send payload (an unfinished request), never finish; time until cut off."""
    ctx = ssl.create_default_context(cafile=env.cert)
    t0 = time.time()
    try:
        raw = socket.create_connection(("127.0.0.1", gw.port), timeout=30)
        s = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        s.sendall(payload)
        s.settimeout(0.5 if trickle else 30)
        while True:
            try:
                data = s.recv(4096)
                if not data:
                    break
            except socket.timeout:
                s.sendall(b"a")     # one more byte, never the end
                continue
            except (ssl.SSLError, OSError):
                break
        s.close()
    except (ssl.SSLError, OSError) as e:
        result["error"] = repr(e)
    result["seconds"] = time.time() - t0


def body(tap, env):
    g = env.gateway("main", "--io-timeout", "2s", "--request-timeout", "4s")

    code, _, b = env.curl(g, "/healthz")
    tap.ok(code == 200 and b == b"ok\n", "GET /healthz is 200 ok with the database up", (code, b))

    # -- a join through the gateway ------------------------------------------
    token = env.token(uses=1)
    req, d = env.join_request("h1", token)
    code, h, b = env.curl(g, "/v1/join", data_file=req)
    tap.eq(code, 200, "POST /v1/join with a good request is 200")
    tap.eq(h.get("content-type"), "application/json", "the answer is application/json")
    resp = os.path.join(env.dir, "resp-h1.json")
    with open(resp, "wb") as f:
        f.write(b)
    v = env.verify(d, resp)
    tap.ok(v.returncode == 0 and v.stdout.startswith("spiffe://" + gwlib.TRUST_DOMAIN + "/tenant/"),
           "bcd verify-response accepts the relayed answer", v.stdout + v.stderr)

    # -- the one refusal: another machine with the spent token ---------------------
    req2, _ = env.join_request("h2", token)
    code, h, b = env.curl(g, "/v1/join", data_file=req2)
    tap.eq(code, 403, "another request with the spent token is 403")
    tap.eq(json.loads(b), REFUSAL, "the 403 body is the one refusal")
    direct = env.psql("SELECT public.bc_join(pg_read_file('%s')::jsonb)" % req2)
    tap.eq(b.decode(), direct, "the 403 body is byte for byte what bc_join() returned")

    # -- malformed input ----------------------------------------------------------
    for name, data in (("an unknown member", '{"csr": "x", "role": "node", "bogus": 1}'),
                       ("invalid JSON", '{"csr": '),
                       ("a bad role", '{"csr": "AAAA", "role": "king"}')):
        code, _, b = env.curl(g, "/v1/join", data=data)
        j = json.loads(b) if b.startswith(b"{") else {}
        tap.ok(code == 400 and j.get("status") == "error" and
               j.get("error", {}).get("code") == "INVALID_INPUT" and
               isinstance(j["error"].get("message"), str) and j["error"]["message"],
               "%s is 400 INVALID_INPUT with the server's message" % name, (code, b))
        low = b.lower()
        tap.ok(not any(w in low for w in (b"detail", b"hint", b"context", b"select", b"bc_join(",
                                          b"line ", b"sql")),
               "%s: no SQL, DETAIL, HINT or CONTEXT in the body" % name, b)
    code, _, b = env.curl(g, "/v1/join", data=b'{"a":"\x00"}')
    tap.eq(code, 400, "a body with a NUL byte is 400, never truncated")
    code, _, b = env.curl(g, "/v1/join", data=b"", method="POST")
    tap.eq(code, 400, "an empty body is 400")

    # -- unknown attestor, functions that do not exist yet --------------------------
    with open(req) as f:
        jr = json.load(f)
    jr["attestor"] = "no-such-attestor"
    code, _, b = env.curl(g, "/v1/join", data=json.dumps(jr))
    tap.ok(code == 404 and json.loads(b)["error"]["code"] == "UNSUPPORTED",
           "an unknown attestor is 404 UNSUPPORTED", (code, b))
    # A relayed function that is not installed is 42883 -> 404; one that is
    # installed gets the body (here an invalid one -> 400).
    for path, fn in (("/v1/renew", "bc_join.renew(jsonb)"),
                     ("/v1/session", "bc_join.issue_session(jsonb)"),
                     ("/v1/attest", "bc_join.attest(jsonb)")):
        code, _, b = env.curl(g, path, data="{}")
        err = json.loads(b).get("error", {}) if b.startswith(b"{") else {}
        if env.psql("SELECT to_regprocedure('%s') IS NULL" % fn) == "t":
            tap.ok(code == 404 and err.get("code") == "UNSUPPORTED",
                   "POST %s before %s exists is 404 UNSUPPORTED" % (path, fn), (code, b))
        else:
            tap.ok(code == 400 and err.get("code") == "INVALID_INPUT",
                   "POST %s reaches %s (an empty request is 400)" % (path, fn), (code, b))
    code, _, b = env.curl(g, "/v2/join", data="{}")
    tap.eq(code, 404, "an unknown path is 404")
    code, h, b = env.curl(g, "/v1/join")
    tap.ok(code == 405 and h.get("allow") == "POST", "GET /v1/join is 405 with Allow: POST", (code, h))

    # -- oversized body --------------------------------------------------------------
    code, h, b = env.curl(g, "/v1/join", data=b"{" + b" " * 70000 + b"}")
    tap.eq(code, 413, "a body over 64 KiB is 413")
    code, _, b = env.curl(g, "/v1/join", data="{}")
    tap.eq(code, 400, "after a 413 the gateway keeps serving")
    code, _, b = env.curl(g, "/v1/join", data=b"{" + b" " * 65000 + b"}")
    tap.eq(code, 400, "a body just under 64 KiB still reaches the database")
    # /v1/attest alone takes bodies up to 8 MiB (a quote, the UEFI log, an IMA increment).
    code, _, b = env.curl(g, "/v1/attest", data=b"{" + b" " * 200000 + b"}")
    tap.ok(code in (400, 404), "a 200 KB body reaches bc_join.attest (400 or 404, not 413)", (code, b))
    code, _, b = env.curl(g, "/v1/attest", data=b"{" + b" " * (8 * 1024 * 1024) + b"}")
    tap.eq(code, 413, "a body over 8 MiB to /v1/attest is 413")
    code, _, b = env.curl(g, "/v1/renew", data=b"{" + b" " * 200000 + b"}")
    tap.eq(code, 413, "the same 200 KB body to /v1/renew is 413 (the route's own bound)")

    # -- slow clients: cut off, and nobody waits for them ------------------------------
    cases = (("half the headers", b"POST /v1/join HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-", False),
             ("half a body", b"POST /v1/join HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
              b"\r\nContent-Length: 100\r\n\r\n{\"csr\":", False),
             ("a trickle of one byte every 0.5 s", b"POST /v1/join HTTP/1.1\r\nX-Slow: ", True))
    results = []
    threads = []
    for name, payload, trickle in cases:
        r = {}
        t = threading.Thread(target=slow_client, args=(env, g, payload, r, trickle))
        t.start()
        threads.append(t)
        results.append((name, r, trickle))
    time.sleep(0.5)
    t0 = time.time()
    code, _, b = env.curl(g, "/v1/join", data="{}")
    took = time.time() - t0
    tap.ok(code == 400 and took < 1.5, "while 3 slow clients hang, another request is answered at once",
           (code, took))
    for t in threads:
        t.join(30)
    for name, r, trickle in results:
        secs = r.get("seconds", 99)
        if trickle:
            tap.ok(3.5 <= secs <= 7 and "error" not in r,
                   "%s is cut off by --request-timeout 4s (%.1f s)" % (name, secs), r)
        else:
            tap.ok(1.5 <= secs <= 5 and "error" not in r,
                   "%s is cut off by --io-timeout 2s (%.1f s)" % (name, secs), r)
    code, _, _ = env.curl(g, "/healthz")
    tap.eq(code, 200, "the gateway serves after the slow clients are gone")

    # -- TLS 1.1 refused, TLS 1.2 accepted -----------------------------------------------
    def s_client(*args):
        return subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % g.port,
                               "-CAfile", env.cert] + list(args),
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=20)
    r = s_client("-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0")
    tap.ok(r.returncode != 0 and "alert protocol version" in r.stdout,
           "a TLS 1.1 client gets the server's protocol_version alert", r.stdout[-800:])
    r = s_client("-tls1_2")
    tap.ok(r.returncode == 0 and "Protocol  : TLSv1.2" in r.stdout, "TLS 1.2 is accepted", r.stdout[-800:])
    code = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--cacert", env.cert,
                           "--tls-max", "1.1", g.url("/healthz")],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    tap.eq(code, "000", "curl --tls-max 1.1 gets no answer")

    # -- logs: JSON lines, the fields, never a secret ---------------------------------------
    rc = g.stop()
    tap.eq(rc, 0, "SIGTERM: the gateway exits 0 (and ASan/LSan found nothing)")
    text = g.log_text()
    lines = g.log_lines()
    tap.ok(all("_raw" not in j for j in lines), "every log line is one JSON object",
           [j for j in lines if "_raw" in j][:3])
    reqs = [j for j in lines if j.get("msg") == "request" and j.get("endpoint") == "join"]
    want = {"ts", "level", "msg", "endpoint", "status", "outcome", "client", "duration_ms", "bytes"}
    tap.ok(reqs and all(want <= set(j) for j in reqs), "request lines carry %s" % sorted(want),
           reqs[:1])
    with open(req) as f:
        jr = json.load(f)
    secrets = {"the token": token, "the token secret": token.split(".")[1],
               "the sealedToken": jr["sealedToken"], "the csr": jr["csr"][:64]}
    for name, sec in secrets.items():
        tap.ok(sec not in text, "the log does not contain %s" % name)
    tap.ok("Join refused" not in text and "unknown field" not in text,
           "the log holds neither answers nor server messages")


gwlib.main(body)
