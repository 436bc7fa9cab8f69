#!/usr/bin/python3
"""bodies.t: a stranger's large request bodies are bounded in total.

POST /v1/attest takes bodies up to 8 MiB, and libevent 2.1's body bound is
server-wide, so every route reads up to 8 MiB before the gateway's own check.
--max-large-body-bytes bounds what all connections hold beyond 80 KiB each
(headers and the default 64 KiB body): with it at 8 MiB, a 6 MiB body held
half-sent on one connection leaves too little for a second one, which is cut
without an answer (counted, logged); a 6 MiB body to a 64 KiB route is cut the
same way; once the first connection goes, the budget is back and a third 6 MiB
body reaches the database.  Raw TLS sockets, so a body can be held half-sent.
"""
import os
import socket
import ssl
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gwlib  # noqa: E402
from gwlib import metric  # noqa: E402

MiB = 1024 * 1024
BUDGET = 8 * MiB


def tls(env, g):
    ctx = ssl.create_default_context(cafile=env.cert)
    raw = socket.create_connection(("127.0.0.1", g.port), timeout=20)
    return ctx.wrap_socket(raw, server_hostname="127.0.0.1")


def head(path, length):
    return ("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Content-Length: %d\r\n\r\n" % (path, length)).encode()


def body(n):
    """A JSON object of n bytes."""
    return b'{"pad":"' + b"a" * (n - 10) + b'"}'


def send_all(s, data):
    """Send data and read an answer; (bytes sent, the answer or b'' when cut)."""
    sent = 0
    try:
        for i in range(0, len(data), 65536):
            s.sendall(data[i:i + 65536])
            sent = i + len(data[i:i + 65536])
        return sent, s.recv(4096)
    except (OSError, ssl.SSLError):
        return sent, b""


def metrics(env, g):
    code, _, b = env.curl(g, "/metrics")
    return b.decode() if code == 200 else ""


def wait_metric(env, g, name, pred, timeout=15):
    v = None
    t_end = time.time() + timeout
    while time.time() < t_end:
        v = metric(metrics(env, g), name)
        if v is not None and pred(v):
            return v
        time.sleep(0.2)
    return v


def run_body(tap, env):
    g = env.gateway("bodies", "--max-large-body-bytes", str(BUDGET))
    t = metrics(env, g)
    tap.eq(metric(t, "bc_gateway_large_body_budget_bytes"), float(BUDGET),
           "/metrics shows the budget")

    # 1: a 6 MiB attestation, 4 MiB of it sent, held
    s1 = tls(env, g)
    b6 = body(6 * MiB)
    s1.sendall(head("/v1/attest", len(b6)))
    for i in range(0, 4 * MiB, 65536):
        s1.sendall(b6[i:i + 65536])
    held = wait_metric(env, g, "bc_gateway_large_body_bytes", lambda v: v >= 3.5 * MiB)
    tap.ok(held is not None and 3.5 * MiB <= held <= 4 * MiB,
           "the half-sent 6 MiB body holds its bytes over 80 KiB of the budget", held)

    # 2: a second one does not fit: cut before its end, no answer
    s2 = tls(env, g)
    sent, ans = send_all(s2, head("/v1/attest", len(b6)) + b6)
    s2.close()
    tap.ok(not ans.startswith(b"HTTP/"), "a second 6 MiB body while the first is held is cut "
           "without an answer", (sent, ans[:200]))

    # a 6 MiB body to a 64 KiB route is under the same budget
    s3 = tls(env, g)
    sent, ans = send_all(s3, head("/v1/renew", len(b6)) + b6)
    s3.close()
    tap.ok(not ans.startswith(b"HTTP/"), "a 6 MiB body to /v1/renew is cut too", (sent, ans[:200]))

    t = metrics(env, g)
    tap.eq(metric(t, "bc_gateway_large_body_refused_total"), 2.0, "both are counted")

    # small requests are not affected while the budget is spent
    code, _, _ = env.curl(g, "/v1/renew", data=body(1000))
    tap.ok(code not in (0, 413, 503), "a small body is still answered while the budget is held",
           code)

    # the first goes away: its reservation is given back
    s1.close()
    left = wait_metric(env, g, "bc_gateway_large_body_bytes", lambda v: v == 0)
    tap.eq(left, 0.0, "the budget is back once the held connection is gone")

    # 3: a whole 6 MiB attestation now reaches the database (whatever it answers)
    code, _, b = env.curl(g, "/v1/attest", data=b6)
    tap.ok(code in (200, 400, 403, 404), "a third 6 MiB body reaches the relay", (code, b[:200]))
    left = wait_metric(env, g, "bc_gateway_large_body_bytes", lambda v: v == 0)
    tap.eq(left, 0.0, "... and gives its reservation back once answered")

    # a 1 MiB body to /v1/renew (within the budget) is still the JSON 413
    code, _, b = env.curl(g, "/v1/renew", data=body(MiB))
    tap.ok(code == 413 and b"\"status\":\"error\"" in b, "1 MiB to /v1/renew is still the JSON 413",
           (code, b[:200]))

    # a chunked 200 KiB body to /v1/renew: read within the budget, then the JSON 413
    code, _, b = env.curl(g, "/v1/renew", data=body(200 * 1024),
                          headers=("Transfer-Encoding: chunked",))
    tap.ok(code == 413 and b"\"status\":\"error\"" in b, "a chunked 200 KiB body to /v1/renew "
           "is the JSON 413", (code, b[:200]))
    left = wait_metric(env, g, "bc_gateway_large_body_bytes", lambda v: v == 0)
    tap.eq(left, 0.0, "... and gives its reservation back")

    tap.eq(g.stop(), 0, "the gateway exits 0 on SIGTERM (ASan/LSan clean)")
    cuts = [j for j in g.log_lines() if j.get("msg", "").startswith("large-body budget spent")]
    tap.ok(len(cuts) == 2 and all(j.get("level") == "warn" and j.get("client") == "127.0.0.1"
                                  for j in cuts), "each cut is logged once at warn", cuts)
    tap.ok(len(cuts) == 2 and all(j.get("bytes_in", 6 * MiB) < 5 * MiB for j in cuts),
           "... after less than 5 MiB of its 6 read (the budget's 4 MiB left and 80 KiB free)",
           [j.get("bytes_in") for j in cuts])


gwlib.main(run_body)
