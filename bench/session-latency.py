#!/usr/bin/python3
"""session-latency.py: how long one session provisioning takes, as a hook sees it.

Used by bench/sections/sessions.sh.  C client threads speak bcd's socket
protocol (docs/sessions.md, "The socket") to a running `bcd run`: each sends
one {"op":"credential"} line for a session name of its own (never asked
before, so every request is one whole provisioning: a new key and CSR, the
proof, POST /v1/session through the gateway, bc_join.issue_session, the
answer verified, the key and certificate written into the caller's
directory) and waits for the answer line, which bcd sends only once both
files are in place.  The time of one request is from the send to that
answer; the files are checked to be there.  Prints one JSON line:
{"clients", "n", "failed", "p50_ms", "p99_ms", "mean_ms", "wall_s"}.

  session-latency.py --socket PATH --dir BASE --clients C --requests N --prefix P
"""
import argparse
import json
import os
import socket
import sys
import threading
import time


def ask(sock_path, session, d):
    """One credential request; (seconds, answer dict or None)."""
    line = json.dumps({"op": "credential", "session": session, "dir": d}).encode() + b"\n"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(120)
    s.connect(sock_path)
    t0 = time.monotonic()
    s.sendall(line)
    data = b""
    while not data.endswith(b"\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    t = time.monotonic() - t0
    s.close()
    try:
        return t, json.loads(data)
    except ValueError:
        return t, None


def pct(sorted_v, p):
    """The p-th percentile (nearest rank) of sorted values."""
    if not sorted_v:
        return float("nan")
    i = max(1, min(len(sorted_v), int(len(sorted_v) * p / 100.0 + 0.999999)))
    return sorted_v[i - 1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--dir", required=True, help="a 0700 directory under bcd's runtime directory")
    ap.add_argument("--clients", type=int, required=True)
    ap.add_argument("--requests", type=int, required=True)
    ap.add_argument("--prefix", required=True)
    a = ap.parse_args()
    times, failed, lock = [], [], threading.Lock()
    nxt = [0]

    def worker(k):
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= a.requests:
                return
            d = os.path.join(a.dir, "%s-%d" % (a.prefix, i))
            os.mkdir(d, 0o700)
            t, ans = ask(a.socket, "%s-%d" % (a.prefix, i), d)
            ok = ans is not None and ans.get("ok") and os.path.isfile(ans.get("keyPath", "")) \
                and os.path.isfile(ans.get("certPath", ""))
            with lock:
                (times if ok else failed).append(t if ok else ans)

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(a.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    v = sorted(times)
    print(json.dumps({"clients": a.clients, "n": len(v), "failed": len(failed),
                      "first_failure": failed[0] if failed else None,
                      "p50_ms": round(1000 * pct(v, 50), 2), "p99_ms": round(1000 * pct(v, 99), 2),
                      "mean_ms": round(1000 * sum(v) / len(v), 2) if v else None,
                      "wall_s": round(wall, 2)}))
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
