#!/usr/bin/python3
"""bench/soak.py: the soak run of bench/soak (see there; docs/performance.md, "Soak").

On test/agent/agentlib.py's throwaway cluster, TLS CA and bc-gateway:
SOAK_AGENTS (8) bcd daemons with 60 s certificates (bc_join.cert_ttl at its
minimum; --renew-at 0.5), each with a hook asking for a session credential
in a loop (`bcd credential`, every SOAK_HOOK_PAUSE s), beside SOAK_BAD (2)
streams of malformed traffic to the gateway (bad JSON, huge numbers, deep
nesting, oversized bodies, unknown routes and methods, slow clients), sent
with X-Forwarded-For from a trusted proxy so the rate limit (--rate-limit
SOAK_RATE) bites them and not the agents.  RSS sampled every SOAK_SAMPLE s.
"""
import http.client
import json
import os
import random
import socket
import ssl
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test", "agent"))
import agentlib  # noqa: E402
import sessionlib as sl  # noqa: E402

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 300.0
AGENTS = int(os.environ.get("SOAK_AGENTS", "8"))
BAD = int(os.environ.get("SOAK_BAD", "2"))
RATE = int(os.environ.get("SOAK_RATE", "100"))
PAUSE = float(os.environ.get("SOAK_HOOK_PAUSE", "0.25"))
SAMPLE = float(os.environ.get("SOAK_SAMPLE", "10"))


def log(msg):
    print("[soak %s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


def rss(pid, field="VmRSS"):
    """kB of field in /proc/pid/status, 0 when gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def children(pid):
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open("/proc/%s/stat" % p) as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(p))
            except (OSError, ValueError, IndexError):
                pass
    return out


class Counter:
    def __init__(self):
        self.lock = threading.Lock()
        self.c = {}

    def add(self, k, n=1):
        with self.lock:
            self.c[k] = self.c.get(k, 0) + n


def bad_requests():
    """(method, path, body, headers) of the malformed kinds, and the kind's name."""
    k = random.randrange(9)
    if k == 0:
        return "bad-json", "POST", "/v1/join", b'{"csr": "abc", ', {}
    if k == 1:
        return "huge-number", "POST", "/v1/renew", b'{"csr":"AA","proof":1e1000000}', {}
    if k == 2:
        return "deep-nesting", "POST", "/v1/session", b"[" * 20000 + b"]" * 20000, {}
    if k == 3:
        return "oversized", "POST", "/v1/join", b'{"csr":"' + b"A" * (200 * 1024) + b'"}', {}
    if k == 4:
        return "unknown-route", "POST", "/v1/nope", b"{}", {}
    if k == 5:
        return "wrong-method", "GET", "/v1/join", None, {}
    if k == 6:
        return "not-json-type", "POST", "/v1/join", b"{}", {"Content-Type": "text/plain"}
    if k == 7:
        return "wrong-shape", "POST", "/v1/session", b'{"csr":[1,2],"proof":{}}', {}
    return "huge-content-length", "POST", "/v1/join", b"{}", {"Content-Length": "99999999999999999999"}


def bad_stream(env, ctx, until, by_kind, i):
    """Malformed requests as fast as they are answered, from client 10.9.9.<i>."""
    while time.time() < until:
        kind, method, path, body, hdrs = bad_requests()
        h = {"Content-Type": "application/json", "X-Forwarded-For": "10.9.9.%d" % i}
        h.update(hdrs)
        try:
            c = http.client.HTTPSConnection("127.0.0.1", env.gw_port, context=ctx, timeout=15)
            if "Content-Length" in hdrs:
                c.putrequest(method, path)
                for k, v in h.items():
                    c.putheader(k, v)
                c.endheaders()
                c.send(body)
            else:
                c.request(method, path, body=body, headers=h)
            st = c.getresponse().status
            c.close()
            by_kind.add("%s %d" % (kind, st))
        except (OSError, http.client.HTTPException) as e:
            by_kind.add("%s %s" % (kind, type(e).__name__))


def slow_clients(env, ctx, until, counts):
    """Connections that send a request a byte a second, or nothing after TLS."""
    while time.time() < until:
        socks = []
        for j in range(8):
            try:
                s = socket.create_connection(("127.0.0.1", env.gw_port), timeout=5)
                if j % 2:
                    s = ctx.wrap_socket(s, server_hostname="127.0.0.1")
                    s.sendall(b"POST /v1/join HTTP/1.1\r\nHost: x\r\n")
                socks.append(s)
            except OSError:
                counts.add("slow-client connect failed")
        t_end = min(until, time.time() + 40)
        while time.time() < t_end:
            for s in socks:
                try:
                    s.send(b"X")
                except OSError:
                    pass
            time.sleep(1)
        for s in socks:
            try:
                s.settimeout(1)
                got = s.recv(100)
                counts.add("slow-client answered %s" % (got.split(b" ")[1].decode() if got[:4] == b"HTTP" else "closed"))
            except (OSError, IndexError):
                counts.add("slow-client dropped")
            s.close()


def hook_loop(env, rt, sock, d, until, counts):
    n = 0
    while time.time() < until:
        r = sl.hook(env, rt, sock, "soak-%d" % (n % 4), d, timeout=60)
        counts.add("hook exit %d%s" % (r.returncode, "" if r.returncode == 0 else ": " + r.stderr.strip()[:120]))
        n += 1
        time.sleep(PAUSE)


def main():
    env = agentlib.Env()
    try:
        run(env)
    finally:
        env.cleanup()


def run(env):
    env.start_cluster("soak")
    env.make_tls()
    env.psql("ALTER DATABASE agent SET bc_join.cert_ttl = 60")
    gw = env.gateway("--rate-limit", str(RATE), "--trusted-proxy", "127.0.0.1/32",
                     "--db-statement-timeout", "20s")
    tok = env.token_file("soak", uses=AGENTS)
    agents = []
    for i in range(AGENTS):
        state = os.path.join(env.dir, "state%d" % i)
        r = env.bcd("run", *env.run_args(state, token_file=tok, extra=["--once"]))
        if r.returncode != 0:
            raise RuntimeError("agent %d did not join: %s" % (i, r.stderr))
        rt = sl.runtime_dir(env, "rt%d" % i)
        sock = os.path.join(rt, "bcd", "bcd.sock")
        d = sl.start_daemon(env, "bcd-soak-%d" % i, rt, env.run_args(state, extra=["--renew-at", "0.5"]))
        if not sl.wait_socket(d, sock):
            raise RuntimeError("bcd %d did not listen: %s" % (i, d.text()))
        hd = os.path.join(rt, "hooks")
        os.makedirs(hd, 0o700)
        agents.append((d, rt, sock, hd))
    log("%d agents joined and serving; running %.0f s" % (AGENTS, SECONDS))
    ctx = ssl.create_default_context(cafile=env.ca)
    counts, by_kind = Counter(), Counter()
    certs0 = int(env.psql("SELECT count(*) FROM bc_join.node_certs"))
    t0 = time.time()
    until = t0 + SECONDS
    threads = [threading.Thread(target=hook_loop, args=(env, rt, sock, hd, until, counts), daemon=True)
               for (_, rt, sock, hd) in agents]
    threads += [threading.Thread(target=bad_stream, args=(env, ctx, until, by_kind, i), daemon=True)
                for i in range(BAD)]
    threads.append(threading.Thread(target=slow_clients, args=(env, ctx, until, by_kind), daemon=True))
    for t in threads:
        t.start()
    with open(os.path.join(env.pg, "data", "postmaster.pid")) as f:
        pm = int(f.readline())
    samples = []
    while True:
        backends = children(pm)
        samples.append({"t": time.time() - t0, "gateway": rss(gw.proc.pid),
                        "bcd": sum(rss(a[0].proc.pid) for a in agents),
                        "bcd_max": max(rss(a[0].proc.pid) for a in agents),
                        "backends_anon": sum(rss(p, "RssAnon") for p in backends),
                        "backends": sum(rss(p) for p in backends), "nbackends": len(backends)})
        if time.time() >= until:
            break
        time.sleep(min(SAMPLE, max(0.1, until - time.time())))
    for t in threads:
        t.join(90)
    elapsed = time.time() - t0
    alive = [a[0].proc.poll() is None for a in agents]
    renewed = sum(a[0].text().count("renewed spiffe://") for a in agents)
    certs = int(env.psql("SELECT count(*) FROM bc_join.node_certs")) - certs0
    sessions = int(env.psql("SELECT count(*) FROM bc_join.session_certs"))
    refused = env.psql("SELECT coalesce(string_agg(payload->>'refusal' || ' ' || n, ', '), 'none') FROM "
                       "(SELECT payload, count(*) OVER (PARTITION BY payload->>'refusal') n, "
                       "row_number() OVER (PARTITION BY payload->>'refusal') r FROM bc_join.events "
                       "WHERE type = 'security.join.refused') x WHERE r = 1")
    gwlog = gw.text()
    levels, example = {}, {}
    for line in gwlog.splitlines():
        try:
            j = json.loads(line)
            key = "%s %s" % (j.get("level"), j.get("msg", j.get("message", ""))[:60])
        except ValueError:
            key = "non-json " + line[:60]
        levels[key] = levels.get(key, 0) + 1
        example.setdefault(key, line[:300])
    bcd_errs = sum(a[0].text().count("Sanitizer") for a in agents)
    out = []
    out.append("soak: %.0f s, %d agents (60 s certificates, --renew-at 0.5), %d malformed streams, rate limit %d/s"
               % (elapsed, AGENTS, BAD, RATE))
    hooks_ok = counts.c.get("hook exit 0", 0)
    out.append("served: %d session credentials to hooks (%.1f/s), %d session certificates issued, "
               "%d renewals logged by the daemons (%d node certificates issued); daemons alive %d/%d"
               % (hooks_ok, hooks_ok / elapsed, sessions, renewed, certs, sum(alive), AGENTS))
    out.append("hook outcomes: " + ", ".join("%s: %d" % kv for kv in sorted(counts.c.items())))
    total_bad = sum(by_kind.c.values())
    out.append("malformed traffic: %d requests/connections; answers by kind: " % total_bad +
               ", ".join("%s: %d" % kv for kv in sorted(by_kind.c.items())))
    out.append("refusals recorded (security.join.refused by reason): " + refused)
    out.append("gateway log lines by level and message: " +
               (", ".join("%s: %d" % kv for kv in sorted(levels.items())) or "none"))
    for k, v in sorted(example.items()):
        out.append("  e.g. " + v)
    out.append("sanitizer reports in bcd logs: %d" % bcd_errs)
    mid = samples[len(samples) // 2]
    first, last = samples[0], samples[-1]
    out.append("RSS (kB) first / middle / last sample (t = %.0f / %.0f / %.0f s), growth first->last:"
               % (first["t"], mid["t"], last["t"]))
    for k, name in (("gateway", "bc-gateway"), ("bcd", "bcd daemons (sum of %d)" % AGENTS),
                    ("bcd_max", "bcd daemon (largest)"), ("backends", "backends (sum, VmRSS incl. shared buffers touched)"),
                    ("backends_anon", "backends (sum, RssAnon: private memory)")):
        out.append("  %-55s %8d / %8d / %8d  %+d (%+.1f%%)" % (name, first[k], mid[k], last[k], last[k] - first[k],
                                                              100.0 * (last[k] - first[k]) / max(first[k], 1)))
    out.append("  backend processes: %d / %d / %d; middle->last growth: gateway %+d, bcd %+d, backends RssAnon %+d kB"
               % (first["nbackends"], mid["nbackends"], last["nbackends"], last["gateway"] - mid["gateway"],
                  last["bcd"] - mid["bcd"], last["backends_anon"] - mid["backends_anon"]))
    print("\n".join(out), flush=True)
    with open(os.path.join(env.dir, "..", "soak-samples.json") if os.environ.get("SOAK_SAMPLES_OUT") is None
              else os.environ["SOAK_SAMPLES_OUT"], "w") as f:
        json.dump(samples, f)


if __name__ == "__main__":
    main()
