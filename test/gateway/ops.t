#!/usr/bin/python3
"""ops.t: bc-gateway under operation: metrics, rate limits, a database that
goes away and comes back, and a graceful shutdown with a request in flight.

Real cluster, real extension, real agent, the ASan build of the gateway,
curl over TLS on 127.0.0.1 (127.0.0.2 plays the trusted load balancer).
"""
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gwlib  # noqa: E402


def metric(text, name, labels=None):
    """The value of one sample in a Prometheus text exposition, or None."""
    want = name
    if labels:
        want += "{" + ",".join('%s="%s"' % kv for kv in labels) + "}"
    for line in text.splitlines():
        if line.startswith(want + " "):
            return float(line.split()[-1])
    return None


def bulk(env, gw, n, path, data):
    """n POSTs over one curl process (kept-alive connection); their status codes."""
    cfg = os.path.join(env.dir, "bulk.curlrc")
    with open(cfg, "w") as f:
        for i in range(n):
            if i:
                f.write("next\n")
            f.write('url = "%s"\ncacert = "%s"\noutput = "/dev/null"\n'
                    'write-out = "%%{http_code}\\n"\nheader = "Content-Type: application/json"\n'
                    'header = "Expect:"\ndata-binary = "%s"\nsilent\n'
                    % (gw.url(path), env.cert, data.replace('"', '\\"')))
    r = subprocess.run(["curl", "-K", cfg], stdout=subprocess.PIPE, text=True, timeout=120)
    return [int(c) for c in r.stdout.split()]


def test_metrics(tap, env):
    g = env.gateway("metrics")
    token = env.token(uses=1)
    req, _ = env.join_request("m1", token)
    with open(req) as f:
        jr = json.load(f)
    del jr["sealedToken"]                        # refused: join-token:no-evidence
    unsealed = json.dumps(jr)
    jr["attestor"] = "no-such-attestor"         # 0A000 UNSUPPORTED
    unknown = json.dumps(jr)
    seq = [("/v1/join", unsealed, 403), ("/v1/join", unsealed, 403), ("/v1/join", "{}", 400),
           ("/v1/join", unknown, 404), ("/nowhere", "{}", 404)]
    codes = [env.curl(g, p, data=d)[0] for p, d, _ in seq]
    tap.eq(codes, [c for _, _, c in seq], "a known sequence: 403 403 400 404 404")
    code, h, b = env.curl(g, "/metrics")
    text = b.decode()
    tap.ok(code == 200 and h.get("content-type", "").startswith("text/plain"),
           "GET /metrics is 200 text/plain", (code, h))
    checks = [
        (("bc_gateway_requests_total", [("endpoint", "join"), ("outcome", "refused")]), 2),
        (("bc_gateway_requests_total", [("endpoint", "join"), ("outcome", "invalid")]), 1),
        (("bc_gateway_requests_total", [("endpoint", "join"), ("outcome", "issued")]), 0),
        (("bc_gateway_requests_total", [("endpoint", "join"), ("outcome", "unsupported")]), 1),
        (("bc_gateway_requests_total", [("endpoint", "renew"), ("outcome", "unsupported")]), 0),
        (("bc_gateway_requests_total", [("endpoint", "other"), ("outcome", "unsupported")]), 1),
        (("bc_gateway_request_duration_seconds_count", [("endpoint", "join")]), 4),
        (("bc_gateway_request_duration_seconds_bucket", [("endpoint", "join"), ("le", "+Inf")]), 4),
        (("bc_gateway_request_duration_seconds_bucket", [("endpoint", "join"), ("le", "10")]), 4),
        (("bc_gateway_request_duration_seconds_count", [("endpoint", "session")]), 0),
        (("bc_gateway_db_pool_size", None), 4),
        (("bc_gateway_db_pool_in_use", None), 0),
    ]
    for (name, labels), want in checks:
        tap.eq(metric(text, name, labels), want,
               "%s%s is %d" % (name, "{%s}" % ",".join("%s=%s" % kv for kv in labels) if labels else "", want))
    outcomes = set(re.findall(r'outcome="([a-z_]+)"', text))
    tap.eq(outcomes, {"issued", "pending", "challenge", "refused", "invalid", "unsupported",
                      "unavailable", "error", "too_large", "rate_limited", "timeout",
                      "attested", "quarantined"},
           "every outcome is exposed")
    tap.eq(g.stop(), 0, "metrics gateway exits 0 on SIGTERM")


def test_rate_limit(tap, env):
    g = env.gateway("ratelimit", "--rate-limit", "0.2/s", "--rate-burst", "10",
                    "--trusted-proxy", "127.0.0.2/32", "--log-level", "warn")
    t0 = time.time()
    codes = bulk(env, g, 1000, "/v1/join", "{}")
    took = time.time() - t0
    limited = codes.count(429)
    passed = [c for c in codes if c != 429]
    # burst 10 plus 0.2/s while the loop runs
    allowed = 10 + int(0.2 * took) + 1
    tap.ok(len(codes) == 1000 and len(passed) <= allowed and limited >= 1000 - allowed
           and set(passed) <= {400},
           "1000 requests from 127.0.0.1: %d answered (at most %d), %d got 429 (%.1f s)"
           % (len(passed), allowed, limited, took), (len(codes), sorted(set(codes))))
    code, h, b = env.curl(g, "/v1/join", data="{}")
    tap.ok(code == 429 and h.get("retry-after", "").isdigit() and
           json.loads(b)["error"]["code"] == "RATE_LIMITED", "a 429 carries Retry-After", (code, h, b))
    code, _, _ = env.curl(g, "/v1/join", data="{}", headers=["X-Forwarded-For: 203.0.113.9"])
    tap.eq(code, 429, "X-Forwarded-For from an untrusted peer (127.0.0.1) is ignored")
    code, _, _ = env.curl(g, "/v1/join", data="{}", interface="127.0.0.2",
                          headers=["X-Forwarded-For: 203.0.113.7"])
    tap.eq(code, 400, "another client behind the trusted proxy 127.0.0.2 still gets through")
    code, _, _ = env.curl(g, "/v1/join", data="{}", interface="127.0.0.2",
                          headers=["X-Forwarded-For: 127.0.0.1, 203.0.113.8"])
    tap.eq(code, 400, "XFF is walked right to left: the right-most untrusted hop is the client")
    code, _, _ = env.curl(g, "/v1/join", data="{}", interface="127.0.0.2",
                          headers=["X-Forwarded-For: 203.0.113.8, 127.0.0.1"])
    tap.eq(code, 429, "a forged left-most hop does not help the limited client")
    code, _, _ = env.curl(g, "/v1/join", data="{}", interface="127.0.0.2")
    tap.eq(code, 400, "the proxy itself, without XFF, has its own bucket")
    code, _, b = env.curl(g, "/metrics")
    tap.eq(metric(b.decode(), "bc_gateway_requests_total", [("endpoint", "join"), ("outcome", "rate_limited")]),
           limited + 3, "the 429s are counted as rate_limited")
    code, _, _ = env.curl(g, "/healthz")
    tap.eq(code, 200, "/healthz is not rate limited")
    tap.eq(g.stop(), 0, "rate-limited gateway exits 0 on SIGTERM")


def test_database_outage(tap, env, g):
    code, _, _ = env.curl(g, "/v1/join", data="{}")
    tap.eq(code, 400, "before the outage the database answers")
    env.pg_stop()
    code, h, b = env.curl(g, "/v1/join", data="{}")
    j = json.loads(b) if b.startswith(b"{") else {}
    tap.ok(code == 503 and h.get("retry-after") == "3" and j.get("error", {}).get("code") == "UNAVAILABLE",
           "database stopped: 503 UNAVAILABLE with Retry-After", (code, h, b))
    code, h, b = env.curl(g, "/healthz")
    tap.ok(code == 503 and "retry-after" in h, "database stopped: /healthz is 503", (code, b))
    codes = [env.curl(g, "/v1/join", data="{}")[0] for _ in range(5)]
    tap.eq(codes, [503] * 5, "every request meanwhile gets 503, none hangs")
    env.pg_start()
    t0 = time.time()
    code = 0
    while time.time() - t0 < 15:
        code = env.curl(g, "/v1/join", data="{}")[0]
        if code == 400:
            break
        time.sleep(0.3)
    tap.eq(code, 400, "database started again: requests reach it (%.1f s), same process" % (time.time() - t0))
    tap.ok(g.proc.poll() is None, "the gateway was not restarted")
    code, _, _ = env.curl(g, "/healthz")
    tap.eq(code, 200, "/healthz is 200 again")
    token = env.token(uses=1)
    req, d = env.join_request("after", token)
    code, _, b = env.curl(g, "/v1/join", data_file=req)
    resp = os.path.join(env.dir, "resp-after.json")
    with open(resp, "wb") as f:
        f.write(b)
    tap.ok(code == 200 and env.verify(d, resp).returncode == 0, "a full join works after the outage", code)
    code, _, b = env.curl(g, "/metrics")
    tap.ok(metric(b.decode(), "bc_gateway_requests_total", [("endpoint", "join"), ("outcome", "unavailable")]) >= 6,
           "the 503s are counted as unavailable")


def test_graceful_shutdown(tap, env, g):
    token = env.token(uses=1)
    token_id = token.split(".")[0]
    req, d = env.join_request("slow", token)
    # Another session holds the token's row lock: bc_join() blocks on it.
    envv = dict(os.environ)
    envv.update(env.pgenv)
    holder = subprocess.Popen(["psql", "-qAtX", "-d", "gw", "-c",
                               "BEGIN; SELECT id FROM bc_join.join_tokens WHERE id = '%s' FOR UPDATE; "
                               "SELECT pg_sleep(3); COMMIT;" % token_id],
                              env=envv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    resp = os.path.join(env.dir, "resp-slow.json")
    client = subprocess.Popen(["curl", "-sS", "--cacert", env.cert, "-o", resp, "-w", "%{http_code}",
                               "-H", "Content-Type: application/json", "-H", "Expect:",
                               "--data-binary", "@" + req, g.url("/v1/join")],
                              stdout=subprocess.PIPE, text=True)
    waiting = False
    for _ in range(50):
        if env.psql("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND application_name = 'bc-gateway'") == "1":
            waiting = True
            break
        time.sleep(0.1)
    tap.ok(waiting, "a join is in flight, blocked in the database")
    t0 = time.time()
    g.signalled = True
    g.proc.send_signal(15)
    time.sleep(0.5)
    refused = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--cacert", env.cert,
                              "--max-time", "5", g.url("/healthz")],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    tap.eq(refused, "000", "after SIGTERM no new connection is accepted")
    tap.ok(g.proc.poll() is None, "the gateway waits for the request in flight")
    code = client.communicate(timeout=30)[0]
    tap.eq(code, "200", "the in-flight join finishes with 200")
    tap.ok(env.verify(d, resp).returncode == 0, "and its answer verifies")
    rc = g.stop(timeout=15)
    tap.ok(rc == 0 and time.time() - t0 < 10, "the gateway exits 0 once it is answered (%.1f s)"
           % (time.time() - t0), rc)
    holder.wait(timeout=10)
    lines = g.log_lines()
    tap.ok(any(j.get("msg") == "shutting down" for j in lines) and
           any(j.get("msg") == "stopped" for j in lines), "shutdown is logged")


def hold_token_lock(env, token, seconds):
    """A psql session that holds the token's row lock for seconds: bc_join() blocks on it."""
    envv = dict(os.environ)
    envv.update(env.pgenv)
    p = subprocess.Popen(["psql", "-qAtX", "-d", "gw", "-c",
                          "BEGIN; SELECT id FROM bc_join.join_tokens WHERE id = '%s' FOR UPDATE; "
                          "SELECT pg_sleep(%s); COMMIT;" % (token.split(".")[0], seconds)],
                         env=envv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    return p


def test_timeouts(tap, env):
    g = env.gateway("timeouts", "--db-statement-timeout", "1s", "--shutdown-timeout", "1s")
    token = env.token(uses=2)
    req, _ = env.join_request("t1", token)
    holder = hold_token_lock(env, token, 4)
    t0 = time.time()
    code, h, b = env.curl(g, "/v1/join", data_file=req)
    took = time.time() - t0
    tap.ok(code == 503 and "retry-after" in h and 0.8 <= took <= 3,
           "a statement over --db-statement-timeout is 503 with Retry-After (%.1f s)" % took, (code, b))
    code, _, b = env.curl(g, "/metrics")
    tap.eq(metric(b.decode(), "bc_gateway_requests_total", [("endpoint", "join"), ("outcome", "timeout")]), 1,
           "and counted as timeout")
    req2, _ = env.join_request("t2", token)
    client = subprocess.Popen(["curl", "-sS", "--cacert", env.cert, "-o", "/dev/null", "-w", "%{http_code}",
                               "-H", "Expect:", "--data-binary", "@" + req2, g.url("/v1/join")],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    time.sleep(0.3)
    t0 = time.time()
    rc = g.stop(timeout=15)
    took = time.time() - t0
    code = client.communicate(timeout=30)[0]
    tap.ok(rc == 0 and took < 3, "--shutdown-timeout 1s: the gateway exits 0 without waiting for the "
           "database (%.1f s)" % took, rc)
    tap.eq(code, "503", "the abandoned request is answered 503, not dropped")
    holder.wait(timeout=10)


def body(tap, env):
    test_metrics(tap, env)
    test_rate_limit(tap, env)
    test_timeouts(tap, env)
    g = env.gateway("outage", "--retry-after", "3", "--db-pool", "2")
    test_database_outage(tap, env, g)
    test_graceful_shutdown(tap, env, g)


gwlib.main(body)
