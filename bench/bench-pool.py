#!/usr/bin/python3
"""bench-pool.py: the measurement behind docs/gateway.md's pool choice.

Starts a throwaway cluster and the optimised build/bc-gateway (one thread,
non-blocking libpq on the event loop), then drives it with C client threads
over kept-alive TLS connections:
  1. DB round trips that fail fast (400 INVALID_INPUT): the gateway's own cost;
  2. real joins (200 issued): the database's cost;
  3. /healthz latency while every pool connection is blocked on a row lock.
Prints requests/s, latency percentiles and the gateway's CPU per request.
Not a TAP script: run it by hand (`/usr/bin/python3 bench/bench-pool.py`).
"""
import http.client
import json
import os
import ssl
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "gateway"))
import gwlib  # noqa: E402


def cpu_seconds(pid):
    """utime + stime of a process, in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def drive(env, gw, bodies, conc):
    """POST every body to /v1/join with conc threads; (seconds, sorted latencies, codes)."""
    ctx = ssl.create_default_context(cafile=env.cert)
    lat, codes, lock = [], {}, threading.Lock()
    work = list(enumerate(bodies))

    def worker():
        c = http.client.HTTPSConnection("127.0.0.1", gw.port, context=ctx, timeout=60)
        while True:
            with lock:
                if not work:
                    break
                _, b = work.pop()
            t = time.perf_counter()
            c.request("POST", "/v1/join", body=b, headers={"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            dt = time.perf_counter() - t
            with lock:
                lat.append(dt)
                codes[r.status] = codes.get(r.status, 0) + 1
        c.close()
    threads = [threading.Thread(target=worker) for _ in range(conc)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0, sorted(lat), codes


def report(name, n, secs, lat, codes, cpu):
    def pct(p):
        return lat[min(len(lat) - 1, int(p * len(lat)))] * 1000
    print("%-34s n=%d %7.0f req/s  p50 %6.2f ms  p99 %6.2f ms  gateway CPU %5.0f us/req  %s"
          % (name, n, n / secs, pct(0.5), pct(0.99), cpu / n * 1e6, codes), flush=True)


def body(tap, env):
    os.environ["BCJ_GATEWAY"] = os.path.join(gwlib.TOP, "build/bc-gateway")
    pool = os.environ.get("POOL", "4")
    gw = env.gateway("bench", "--db-pool", pool, "--log-level", "warn")
    print("# bc-gateway --db-pool %s, %d CPUs" % (pool, os.cpu_count()))
    for conc in (4, 16, 64):
        n = 4000
        c0 = cpu_seconds(gw.proc.pid)
        secs, lat, codes = drive(env, gw, ["{}"] * n, conc)
        report("round trip (400), %d clients" % conc, n, secs, lat, codes, cpu_seconds(gw.proc.pid) - c0)

    n = 300
    token = env.token(uses=n)
    reqs = []
    for i in range(n):
        path, _ = env.join_request("b%d" % i, token)
        with open(path) as f:
            reqs.append(f.read())
    c0 = cpu_seconds(gw.proc.pid)
    secs, lat, codes = drive(env, gw, reqs, 16)
    report("join (200 issued), 16 clients", n, secs, lat, codes, cpu_seconds(gw.proc.pid) - c0)

    # every connection blocked on a row lock: the loop must still answer at once
    token = env.token(uses=1)
    envv = dict(os.environ)
    envv.update(env.pgenv)
    holder = subprocess.Popen(["psql", "-qAtX", "-d", "gw", "-c",
                               "BEGIN; SELECT 1 FROM bc_join.join_tokens WHERE id = '%s' FOR UPDATE; "
                               "SELECT pg_sleep(3); COMMIT;" % token.split(".")[0]],
                              env=envv, stdout=subprocess.DEVNULL)
    time.sleep(0.3)
    blocked = []
    for i in range(int(pool) + 2):
        path, _ = env.join_request("lk%d" % i, token)
        blocked.append(subprocess.Popen(["curl", "-s", "-o", "/dev/null", "--cacert", env.cert,
                                         "--data-binary", "@" + path, gw.url("/v1/join")]))
    time.sleep(0.5)
    worst = 0
    for _ in range(20):
        t = time.perf_counter()
        env.curl(gw, "/healthz")
        worst = max(worst, time.perf_counter() - t)
    print("/healthz with all %s connections blocked: worst of 20 = %.1f ms (curl process included)"
          % (pool, worst * 1000), flush=True)
    for p in blocked:
        p.wait()
    holder.wait()
    gw.stop()


gwlib.main(body)
