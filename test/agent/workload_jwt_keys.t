#!/usr/bin/python3
"""workload_jwt_keys.t: the jwt-svid keys roll over in a running bcd (issue 46, item 4).

One bcd at --status-interval 1 --keys-interval 1 (its revocation watch takes the signed
service keys up every second, not every 6 intervals as by default) behind a gateway whose
/v1/service-keys copy lives 1 s, the Workload
API's FetchJWTBundles stream open the whole time, with a gRPC client made at test time
from src/agent/workload/workload.proto:
- the stream's first message holds the key directory's jwt-svid key; a token fetched
  (FetchJWTSVID) carries its kid and validates (ValidateJWTSVID);
- tools/bc-join-keygen --stage-jwt-key: the stream pushes 2 keys within the keys
  interval (and the gateway's copy), same bcd pid; --promote-jwt-key: the new kid first, the old token still
  validates; --retire-jwt-key: the new key alone, the old token refused "unknown kid",
  and FetchJWTSVID for the same audience answers a new token of the new kid (the cached
  one of the retired key forgotten), which validates;
- bcd stops cleanly (ASan).
That a retired kid never returns (the whole rollover refused) is test/unit/test_bcd_keys.c's.
"""
import json
import os
import queue
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentlib  # noqa: E402
import sessionlib as sl  # noqa: E402

HDR = [("workload.spiffe.io", "true")]
TD_ID = "spiffe://" + agentlib.TRUST_DOMAIN
KEYGEN = os.path.join(agentlib.TOP, "tools", "bc-join-keygen")
# A rollover reaches bcd within the keys interval (1 s) plus the gateway's 1 s copy, a round's
# HTTPS exchanges and a loaded machine's delays.
ROLL_S = 6


def kid_of(token):
    """The kid of a JWS compact token's protected header."""
    import base64
    h = token.split(".")[0]
    return json.loads(base64.urlsafe_b64decode(h + "=" * (-len(h) % 4)))["kid"]


def jwt_kids(env):
    """The kids of the service's jwtKeys now, in order."""
    return [k["kid"] for k in json.loads(env.psql("SELECT bc_join.service_keys()->'jwtKeys'"))]


def body(tap, env):
    """The script."""
    if not env.has_function("bc_join.issue_jwt_svid(jsonb)"):
        tap.skip("JWT-SVIDs", "bc_join.issue_jwt_svid(jsonb) is not installed")
        return
    import grpc
    sys.path.insert(0, agentlib.workload_stubs(env))
    import workload_pb2 as pb
    import workload_pb2_grpc as pbg

    state = os.path.join(env.dir, "state")
    r = env.bcd("run", *env.run_args(state, token_file=env.token_file("j"), extra=["--once"]))
    tap.ok(r.returncode == 0, "the host joins", r.stderr)
    me = os.path.realpath("/proc/self/exe")
    rt = sl.runtime_dir(env)
    wsock = os.path.join(env.dir, "workload.sock")
    daemon = sl.start_daemon(env, "bcd-keys", rt, env.run_args(state, extra=[
        "--status-interval", "1", "--keys-interval", "1", "--workload-api", wsock,
        "--workload-rule", "uid:0,exe:%s=>session=wl-keys" % me]))
    deadline = time.time() + 20
    while not os.path.exists(wsock) and time.time() < deadline and daemon.proc.poll() is None:
        time.sleep(0.05)
    if not tap.ok(os.path.exists(wsock), "bcd serves the Workload API", daemon.text()[-2000:]):
        return
    pid = daemon.proc.pid
    stub = pbg.SpiffeWorkloadAPIStub(grpc.insecure_channel("unix://" + wsock))

    # the JWT bundle stream, read by a thread into a queue of (time, kids)
    pushes = queue.Queue()
    stream = stub.FetchJWTBundles(pb.JWTBundlesRequest(), metadata=HDR, timeout=120)

    def reader():
        try:
            for m in stream:
                pushes.put((time.time(), [k["kid"] for k in json.loads(m.bundles[TD_ID])["keys"]]))
        except grpc.RpcError:
            pass
    threading.Thread(target=reader, daemon=True).start()

    def next_push(timeout=ROLL_S):
        try:
            return pushes.get(timeout=timeout)
        except queue.Empty:
            return None, None

    def validate(tok, aud):
        try:
            r = stub.ValidateJWTSVID(pb.ValidateJWTSVIDRequest(audience=aud, svid=tok), metadata=HDR, timeout=10)
            return "OK", r.spiffe_id
        except grpc.RpcError as e:
            return e.code().name, e.details()

    def fetch(aud):
        return stub.FetchJWTSVID(pb.JWTSVIDRequest(audience=[aud]), metadata=HDR, timeout=30).svids[0].svid

    k1 = jwt_kids(env)
    _, first = next_push(10)
    tap.ok(len(k1) == 1 and first == k1, "FetchJWTBundles: the key directory's jwt-svid key", (first, k1))
    t1 = fetch("keys")
    tap.eq(kid_of(t1), k1[0], "a JWT-SVID fetched carries its kid")
    tap.eq(validate(t1, "keys")[0], "OK", "... and validates")

    if subprocess.run([KEYGEN, "--stage-jwt-key", env.keys], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode == 0 and len(jwt_kids(env)) == 2:
        k2 = [k for k in jwt_kids(env) if k != k1[0]][0]
        t0 = time.time()
        at, kids = next_push()
        tap.ok(kids is not None and sorted(kids) == sorted(k1 + [k2]) and daemon.proc.pid == pid,
               "staged: the stream pushes 2 keys in %.1f s, same bcd pid" % ((at or t0) - t0), kids)
        subprocess.run([KEYGEN, "--promote-jwt-key", env.keys], check=True, stdout=subprocess.DEVNULL)
        at, kids = next_push()
        tap.ok(kids is not None and kids[0] == k2 and k1[0] in kids,
               "promoted: the new kid first, the old one still listed", kids)
        tap.eq(validate(t1, "keys")[0], "OK", "... and the old key's token still validates")
        subprocess.run([KEYGEN, "--retire-jwt-key", env.keys], check=True, stdout=subprocess.DEVNULL)
        at, kids = next_push()
        tap.eq(kids, [k2], "retired: the stream pushes the new key alone")
        code, det = validate(t1, "keys")
        tap.ok(code == "INVALID_ARGUMENT" and "unknown kid" in str(det),
               "... and the retired key's token is refused: unknown kid", (code, det))
        t2 = fetch("keys")
        tap.ok(t2 != t1 and kid_of(t2) == k2 and validate(t2, "keys")[0] == "OK",
               "... FetchJWTSVID for the same audience: a new token of the new kid (the retired "
               "key's, cached, forgotten), which validates", kid_of(t2))
    else:
        tap.skip("the jwt-svid key rollover", "no --stage-jwt-key, or the extension lists one "
                 "jwt-svid key only (before 0.6.0)")

    stream.cancel()
    rc, _ = daemon.stop()
    tap.ok(rc == 0 and "Sanitizer" not in daemon.text(), "bcd stops cleanly", daemon.text()[-3000:])


def setup(env):
    """The cluster, the TLS CA and the gateway, whose copy of GET /v1/service-keys lives 1 s."""
    env.start_cluster("agents")
    env.make_tls()
    env.gateway("--service-keys-max-age", "1")


if __name__ == "__main__":
    agentlib.run(agentlib.Env(), setup, body)
