#!/usr/bin/python3
"""workload_jwt.t: JWT-SVIDs of bcd's Workload API, bounded and checked (issue 42, items 4, 5, 7).

Through the real gateway and one bcd daemon (--max-provisioning 2, the socket 0666 so
that uid 65534 reaches it too), with a gRPC client made at test time from
src/agent/workload/workload.proto:
- malformed audiences (none, 9, a duplicate, an empty one, 257 bytes, a control
  character, DEL, a NUL byte, which protobuf-c would cut the string at: "svc-a\0evil"
  asked as "svc-a") are INVALID_ARGUMENT with a message naming what is wrong, and
  nothing reaches the service (no jwt-svid proof spent); 8 audiences of 256
  printable bytes are issued;
- 1,000 concurrent FetchJWTSVID for one audience over 16 connections: every call
  answered OK or RESOURCE_EXHAUSTED (none UNAVAILABLE, none left hanging), every OK
  the same token, a handful of JWT-SVIDs issued by the service (jwt-svid proofs in
  bc_join.attestation_uses), bcd's threads (/proc/PID/task) and its connections to
  the gateway (/proc/net/tcp) bounded;
- the cached JWT-SVID is answered again (same token, nothing issued), the same for
  the audiences in another order; bcd logs that it is kept for half its life;
- one uid asking 60 new audiences at once: a burst is issued, the rest
  RESOURCE_EXHAUSTED naming the rate limit; another uid is served at once; the
  first is served again a second later;
- ValidateJWTSVID of tokens minted (python3-jwcrypto) with the jwt-svid key of the
  test's key directory: sub in this trust domain verifies; sub in another trust
  domain, in one whose name merely starts with ours, or not a SPIFFE ID: refused
  INVALID_ARGUMENT saying so; an expired token and an unknown kid: refused; a valid
  token's request with a NUL in its audience or after its token, or with its audience
  given twice (the last one valid): INVALID_ARGUMENT, never validated as another;
- FetchX509Bundles and FetchJWTBundles keyed by the trust domain's SPIFFE ID
  (spiffe://agent.bc-join.test); X509SVID.bundle still the root's DER;
- the service refusing (bc_join.sessions_per_node reached) is UNAVAILABLE with a
  message that says the service refused and where the reason is; the gateway stopped
  is UNAVAILABLE saying the gateway does not answer, while a cached JWT-SVID is still
  served; asked again at once, bcd answers from the failure's backoff without
  asking the service;
- bcd stopped while a call waits for a fetch (a "gateway" that never answers): the
  call is answered UNAVAILABLE (bcd is stopping) and bcd exits 0 at once (no leak
  under ASan).
"""
import json
import os
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentlib  # noqa: E402
import sessionlib as sl  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
HDR = [("workload.spiffe.io", "true")]
TD_ID = "spiffe://" + agentlib.TRUST_DOMAIN
# The flood's connections: 16 calls at once on each (bcd's bound), the rest queued by the client.
NCHAN = 16

# Run as uid 65534: FetchJWTSVID for each audience in argv[3:]; one "CODE token-or-details" per line.
NOBODY_CLIENT = r'''
import sys
sys.path.insert(0, sys.argv[1])
import grpc, workload_pb2 as pb, workload_pb2_grpc as pbg
stub = pbg.SpiffeWorkloadAPIStub(grpc.insecure_channel("unix://" + sys.argv[2]))
for aud in sys.argv[3:]:
    try:
        r = stub.FetchJWTSVID(pb.JWTSVIDRequest(audience=[aud]),
                              metadata=[("workload.spiffe.io", "true")], timeout=30)
        print("OK " + r.svids[0].spiffe_id)
    except grpc.RpcError as e:
        print(e.code().name + " " + (e.details() or ""))
'''


def run_as(uid, py, wsock, *auds):
    """NOBODY_CLIENT as uid for auds: its lines (or its stderr's tail)."""
    r = subprocess.run(["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid, "--clear-groups",
                        sys.executable, "-c", NOBODY_CLIENT, py, wsock] + list(auds),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60,
                       env=dict(os.environ, PYTHONHOME="/usr"))
    return r.stdout.splitlines() or [r.stderr[-500:]]


def gen_stubs(env):
    """The workload.proto stubs (agentlib.workload_stubs)."""
    return agentlib.workload_stubs(env)


def call(grpc, fn, req, timeout=30):
    """(code name, response or details) of one unary call."""
    try:
        return "OK", fn(req, metadata=HDR, timeout=timeout)
    except grpc.RpcError as e:
        return e.code().name, e.details() or ""


def issued(env):
    """JWT-SVIDs the service issued so far: their spent proofs."""
    return int(env.psql("SELECT count(*) FROM bc_join.attestation_uses WHERE attestor = 'jwt-svid'"))


def threads(pid):
    """Threads of process pid."""
    return len(os.listdir("/proc/%d/task" % pid))


def gateway_conns(pid, port):
    """TCP connections of process pid to 127.0.0.1:port (its fds' inodes in /proc/net/tcp)."""
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    n = 0
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            parts = line.split()
            rport = int(parts[2].split(":")[1], 16)
            # state 01: ESTABLISHED
            if rport == port and parts[3] == "01" and parts[9] in inodes:
                n += 1
    return n


def mint(key, kid, claims):
    """A JWT signed ES256 by key (a jwcrypto JWK) with kid."""
    from jwcrypto import jws
    from jwcrypto.common import json_encode
    t = jws.JWS(json.dumps(claims).encode())
    t.add_signature(key, alg="ES256", protected=json_encode({"alg": "ES256", "kid": kid, "typ": "JWT"}))
    return t.serialize(compact=True)


def audience_checks(tap, env, grpc, stub, pb):
    """Malformed audiences: INVALID_ARGUMENT naming the fault, nothing sent; the boundary issued."""
    before = issued(env)
    cases = (
        ("no audience", [], "audience must be specified"),
        ("9 audiences", ["a%d" % i for i in range(9)], "at most 8"),
        ("a duplicate", ["svc", "other", "svc"], "twice"),
        ("an empty audience", ["svc", ""], "empty"),
        ("257 bytes", ["x" * 257], "256"),
        ("a newline", ["svc\nx"], "printable"),
        ("DEL (0x7f)", ["svc\x7f"], "printable"),
        ("a non-ASCII letter", ["caf\u00e9"], "printable"),
        ("a NUL byte (U+0000) inside", ["svc-a\x00evil"], "NUL"),
        ("two audiences alike up to a NUL", ["svc-b\x00x", "svc-b\x00y"], "NUL"),
    )
    for name, aud, word in cases:
        code, det = call(grpc, stub.FetchJWTSVID, pb.JWTSVIDRequest(audience=aud))
        tap.ok(code == "INVALID_ARGUMENT" and word in str(det),
               "FetchJWTSVID with %s: INVALID_ARGUMENT saying '%s'" % (name, word), (code, det))
    tap.eq(issued(env), before, "... and none of them reached the service (no proof spent)")
    aud8 = [chr(0x20 + i) * 256 for i in range(0x21, 0x29)]
    code, r = call(grpc, stub.FetchJWTSVID, pb.JWTSVIDRequest(audience=aud8))
    tap.ok(code == "OK" and r.svids[0].svid, "8 audiences of 256 printable bytes: issued",
           (code, r if code != "OK" else ""))


def flood(tap, env, grpc, pb, pbg, wsock, daemon):
    """1,000 concurrent FetchJWTSVID for one audience; the token."""
    pid = daemon.proc.pid
    t0, c0, before = threads(pid), gateway_conns(pid, env.gw_port), issued(env)
    tap.note("before the flood: %d threads, %d gateway connections" % (t0, c0))
    chans = [grpc.insecure_channel("unix://" + wsock, options=[("grpc.use_local_subchannel_pool", 1)])
             for _ in range(NCHAN)]
    stubs = [pbg.SpiffeWorkloadAPIStub(c) for c in chans]
    peak = {"threads": t0, "conns": c0}
    done = threading.Event()

    def sample():
        while not done.is_set():
            try:
                peak["threads"] = max(peak["threads"], threads(pid))
                peak["conns"] = max(peak["conns"], gateway_conns(pid, env.gw_port))
            except OSError:
                pass
            time.sleep(0.02)
    th = threading.Thread(target=sample)
    th.start()
    t_start = time.time()
    futs = [stubs[i % NCHAN].FetchJWTSVID.future(pb.JWTSVIDRequest(audience=["flood"]), metadata=HDR,
                                               timeout=60) for i in range(1000)]
    codes, tokens, other = {}, set(), []
    for f in futs:
        try:
            tokens.add(f.result().svids[0].svid)
            codes["OK"] = codes.get("OK", 0) + 1
        except grpc.RpcError as e:
            codes[e.code().name] = codes.get(e.code().name, 0) + 1
            if e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                other.append(e.details())
    elapsed = time.time() - t_start
    done.set()
    th.join()
    for c in chans:
        c.close()
    tap.note("1,000 calls in %.1f s: %s; peak %d threads, %d gateway connections" %
             (elapsed, codes, peak["threads"], peak["conns"]))
    tap.ok(set(codes) <= {"OK", "RESOURCE_EXHAUSTED"} and codes.get("OK", 0) >= 1,
           "1,000 concurrent FetchJWTSVID: each answered OK or RESOURCE_EXHAUSTED (none "
           "UNAVAILABLE, none hanging)", (codes, other[:3]))
    tap.eq(len(tokens), 1, "every OK is the same JWT-SVID (one fetch, every waiter answered)")
    n = issued(env) - before
    tap.ok(n <= 3, "a handful of JWT-SVIDs issued by the service: %d" % n)
    tap.ok(peak["threads"] <= t0 + 8, "bcd's threads stay bounded: %d at most (%d before)" %
           (peak["threads"], t0))
    tap.ok(peak["conns"] <= 2 + 2, "bcd's connections to the gateway stay bounded by "
           "--max-provisioning 2 and the join loop's: %d at most" % peak["conns"])
    return tokens.pop() if tokens else None


def rate_checks(tap, env, grpc, pb, pbg, py, wsock):
    """One uid past its rate: RESOURCE_EXHAUSTED; another uid served; the first again later."""
    before = issued(env)
    chans = [grpc.insecure_channel("unix://" + wsock, options=[("grpc.use_local_subchannel_pool", 1)])
             for _ in range(4)]
    stubs = [pbg.SpiffeWorkloadAPIStub(c) for c in chans]
    t0 = time.time()
    futs = [stubs[i % 4].FetchJWTSVID.future(pb.JWTSVIDRequest(audience=["rate-%d" % i]), metadata=HDR,
                                              timeout=60) for i in range(60)]
    codes, details = {}, set()
    for f in futs:
        try:
            f.result()
            codes["OK"] = codes.get("OK", 0) + 1
        except grpc.RpcError as e:
            codes[e.code().name] = codes.get(e.code().name, 0) + 1
            details.add(e.details())
    elapsed = time.time() - t0
    for c in chans:
        c.close()
    n = issued(env) - before
    tap.note("60 new audiences at once in %.1f s: %s, %d issued" % (elapsed, codes, n))
    tap.ok(set(codes) == {"OK", "RESOURCE_EXHAUSTED"} and 10 <= codes["OK"] <= 20 + 2 * elapsed + 1
           and n == codes["OK"],
           "one uid asking 60 new audiences at once: a burst issued, the rest RESOURCE_EXHAUSTED",
           (codes, n))
    tap.ok(any("rate" in d for d in details), "... with a message naming the rate limit", details)
    lines = run_as(65534, py, wsock, "n-1", "n-2", "n-3")
    tap.ok(len(lines) == 3 and all(l.startswith("OK %s/" % TD_ID) for l in lines),
           "another uid (65534) is served at once: its own rate", lines)
    time.sleep(1.2)
    code, det = call(grpc, pbg.SpiffeWorkloadAPIStub(grpc.insecure_channel("unix://" + wsock)).FetchJWTSVID,
                     pb.JWTSVIDRequest(audience=["rate-later"]))
    tap.eq(code, "OK", "the first uid is served again a second later (its bucket refilled)", det)


def validate_checks(tap, env, grpc, stub, pb, spiffe_id, channel):
    """ValidateJWTSVID of minted tokens: the trust domain, exp and kid decide."""
    from jwcrypto import jwk
    with open(os.path.join(env.keys, "jwt-svid.key"), "rb") as f:
        key = jwk.JWK.from_pem(f.read())
    with open(env.service_keys) as f:
        jwt_keys = json.load(f)["jwtKeys"]
    pub = json.loads(key.export_public())
    kid = [k["kid"] for k in jwt_keys if k["x"] == pub["x"] and k["y"] == pub["y"]]
    tap.eq(len(kid), 1, "the test key directory's jwt-svid.key is the one bcd pins")
    kid = kid[0] if kid else "?"
    now = int(time.time())
    rest = spiffe_id[len(TD_ID):]

    def validate(sub, exp=now + 300, k=key, kd=kid, aud="svc-v"):
        tok = mint(k, kd, {"sub": sub, "aud": [aud], "exp": exp, "iat": now})
        return call(grpc, stub.ValidateJWTSVID, pb.ValidateJWTSVIDRequest(audience="svc-v", svid=tok))

    code, r = validate(spiffe_id)
    tap.ok(code == "OK" and r.spiffe_id == spiffe_id,
           "a token minted with the jwt-svid key for this trust domain validates", (code, r))
    # the same valid token, asked in a request that protobuf-c would read as another
    tok = mint(key, kid, {"sub": spiffe_id, "aud": ["svc-v"], "exp": now + 300, "iat": now})
    raw = channel.unary_unary("/SpiffeWorkloadAPI/ValidateJWTSVID",
                              request_serializer=lambda b: b,
                              response_deserializer=pb.ValidateJWTSVIDResponse.FromString)
    twice = pb.ValidateJWTSVIDRequest(audience="other", svid=tok).SerializeToString() + \
        pb.ValidateJWTSVIDRequest(audience="svc-v").SerializeToString()
    for name, req in (
            ("its audience with a NUL after it (svc-v\\0evil)",
             pb.ValidateJWTSVIDRequest(audience="svc-v\x00evil", svid=tok).SerializeToString()),
            ("a NUL and more after the token",
             pb.ValidateJWTSVIDRequest(audience="svc-v", svid=tok + "\x00junk").SerializeToString()),
            ("its audience given twice, the last one valid", twice)):
        code, det = call(grpc, raw, req)
        tap.ok(code == "INVALID_ARGUMENT" and "malformed request" in str(det),
               "ValidateJWTSVID of a valid token with %s: INVALID_ARGUMENT" % name, (code, det))
    for name, sub, word in (
            ("in another trust domain", "spiffe://other.td" + rest, "trust domain"),
            ("in a trust domain whose name starts with ours", TD_ID + ".evil" + rest, "trust domain"),
            ("with userinfo before our trust domain", "spiffe://x@" + agentlib.TRUST_DOMAIN + rest,
             "SPIFFE ID"),
            ("with a port after our trust domain", TD_ID + ":443" + rest, "SPIFFE ID"),
            ("in upper case", TD_ID.upper() + rest, "SPIFFE ID"),
            ("with a dot segment", TD_ID + "/tenant/../node" + rest, "SPIFFE ID"),
            ("not a SPIFFE ID", "https://" + agentlib.TRUST_DOMAIN + rest, "SPIFFE ID")):
        code, det = validate(sub)
        tap.ok(code == "INVALID_ARGUMENT" and word in str(det),
               "a token of our key whose sub is %s: INVALID_ARGUMENT ('%s')" % (name, word), (code, det))
    code, det = validate(spiffe_id, exp=now - 5)
    tap.ok(code == "INVALID_ARGUMENT" and "expired" in str(det), "an expired token: INVALID_ARGUMENT",
           (code, det))
    other = jwk.JWK.generate(kty="EC", crv="P-256")
    code, det = validate(spiffe_id, k=other, kd=other.thumbprint())
    tap.ok(code == "INVALID_ARGUMENT" and "kid" in str(det), "a token of an unknown kid: INVALID_ARGUMENT",
           (code, det))
    code, det = validate(spiffe_id, k=other, kd=kid)
    tap.ok(code == "INVALID_ARGUMENT" and "signature" in str(det),
           "a token of another key under our kid: INVALID_ARGUMENT", (code, det))


def body(tap, env):
    """The script."""
    if not env.has_function("bc_join.issue_jwt_svid(jsonb)"):
        tap.skip("JWT-SVIDs", "bc_join.issue_jwt_svid(jsonb) is not installed")
        return
    import grpc
    py = gen_stubs(env)
    sys.path.insert(0, py)
    import workload_pb2 as pb
    import workload_pb2_grpc as pbg

    state = os.path.join(env.dir, "state")
    r = env.bcd("run", *env.run_args(state, token_file=env.token_file("j"), extra=["--once"]))
    tap.ok(r.returncode == 0, "the host joins", r.stderr)
    me = os.path.realpath("/proc/self/exe")
    rt = sl.runtime_dir(env)
    sock = os.path.join(rt, "bcd", "bcd.sock")
    shared = os.path.join(env.dir, "shared")
    os.mkdir(shared)
    os.chmod(shared, 0o755)
    wsock = os.path.join(shared, "workload.sock")
    daemon = sl.start_daemon(env, "bcd-jwt", rt, env.run_args(state, extra=[
        "--max-provisioning", "2", "--workload-api", wsock, "--workload-api-mode", "0666",
        "--workload-rule", "uid:0,exe:%s=>session=wl-jwt" % me,
        "--workload-rule", "uid:65534=>session=wl-nobody",
        "--workload-rule", "uid:65533=>session=wl-late"]))
    # the hooks' socket is made (and logged) first, the Workload API's just after it
    up = sl.wait_socket(daemon, sock)
    deadline = time.time() + 10
    while up and not os.path.exists(wsock) and time.time() < deadline:
        time.sleep(0.05)
    tap.ok(up and os.path.exists(wsock), "bcd serves the Workload API", daemon.text())
    channel = grpc.insecure_channel("unix://" + wsock,
                                    options=[("grpc.use_local_subchannel_pool", 1)])
    stub = pbg.SpiffeWorkloadAPIStub(channel)

    svid = next(stub.FetchX509SVID(pb.X509SVIDRequest(), metadata=HDR, timeout=60)).svids[0]
    spiffe_id = svid.spiffe_id

    # -- bundles keyed by the trust domain's SPIFFE ID (item 7) ----------------------------
    xb = next(stub.FetchX509Bundles(pb.X509BundlesRequest(), metadata=HDR, timeout=10))
    tap.ok(list(xb.bundles) == [TD_ID] and xb.bundles[TD_ID] == svid.bundle,
           "FetchX509Bundles: keyed by the trust domain's SPIFFE ID, the SVID's bundle",
           list(xb.bundles))
    jb = next(stub.FetchJWTBundles(pb.JWTBundlesRequest(), metadata=HDR, timeout=10))
    tap.eq(list(jb.bundles), [TD_ID], "FetchJWTBundles: keyed by the trust domain's SPIFFE ID")
    from cryptography import x509
    tap.ok(x509.load_der_x509_certificate(svid.bundle).subject ==
           x509.load_der_x509_certificate(svid.bundle).issuer,
           "X509SVID.bundle is still the root's DER")

    # -- audiences (item 7) ---------------------------------------------------------------
    audience_checks(tap, env, grpc, stub, pb)

    # -- the flood, the cache (item 4) ----------------------------------------------------
    token = flood(tap, env, grpc, pb, pbg, wsock, daemon)
    before = issued(env)
    code, r = call(grpc, stub.FetchJWTSVID, pb.JWTSVIDRequest(audience=["flood"]))
    tap.ok(code == "OK" and r.svids[0].svid == token and r.svids[0].spiffe_id == spiffe_id,
           "the same audience again: the cached JWT-SVID", code)
    code, r1 = call(grpc, stub.FetchJWTSVID, pb.JWTSVIDRequest(audience=["svc-b", "svc-a"]))
    code2, r2 = call(grpc, stub.FetchJWTSVID, pb.JWTSVIDRequest(audience=["svc-a", "svc-b"]))
    tap.ok(code == code2 == "OK" and r1.svids[0].svid == r2.svids[0].svid,
           "audiences in another order: the same cached JWT-SVID", (code, code2))
    tap.eq(issued(env) - before, 1, "... and only the new audience set cost the service an issuance")
    tap.ok(daemon.wait_log("kept for", 5), "bcd logs how long a JWT-SVID is kept (half its life)",
           daemon.text()[-2000:])
    kept = [l for l in daemon.text().splitlines() if "kept for" in l]
    tap.note(kept[-1] if kept else "no 'kept for' line")
    st = sl.status(env, rt, sock)
    tap.ok(st is not None and st.get("jwtSvidFetches", {}).get("issued", 0) == issued(env),
           "bcd status counts the JWT-SVID fetches it made: as many as the service issued",
           st and st.get("jwtSvidFetches"))

    # -- the rate per uid (item 4) ----------------------------------------------------------
    rate_checks(tap, env, grpc, pb, pbg, py, wsock)

    # -- ValidateJWTSVID (item 5) ---------------------------------------------------------
    validate_checks(tap, env, grpc, stub, pb, spiffe_id, channel)

    # -- the service refuses, the gateway is down (item 7) ----------------------------------
    n_before = issued(env)
    env.psql("ALTER SYSTEM SET bc_join.sessions_per_node = 1")
    env.psql("SELECT pg_reload_conf()")
    time.sleep(0.5)
    # uid 65533's session is new to the node, which holds two already; asked twice in a row
    fetches = lambda: sum((sl.status(env, rt, sock) or {}).get("jwtSvidFetches", {}).values())  # noqa: E731
    f0 = fetches()
    out = run_as(65533, py, wsock, "late", "late")
    f1 = fetches()
    env.psql("ALTER SYSTEM RESET bc_join.sessions_per_node")
    env.psql("SELECT pg_reload_conf()")
    tap.ok(out[0].startswith("UNAVAILABLE") and "refused" in out[0] and "bc_join.events" in out[0],
           "the service refusing: UNAVAILABLE saying it refused and where the reason is", out)
    tap.ok(len(out) == 2 and out[1].startswith("UNAVAILABLE") and "asks again in" in out[1] and
           f1 - f0 == 1 and issued(env) == n_before,
           "asked again at once: bcd answers the same from its backoff, nothing asked of the service",
           (out, f1 - f0))
    for p in env.procs:
        if p.log.endswith("gateway.log"):
            p.stop()
    code, det = call(grpc, stub.FetchJWTSVID, pb.JWTSVIDRequest(audience=["gw-down"]))
    tap.ok(code == "UNAVAILABLE" and "gateway" in str(det),
           "the gateway stopped: UNAVAILABLE saying the gateway does not answer", (code, det))
    code, r = call(grpc, stub.FetchJWTSVID, pb.JWTSVIDRequest(audience=["flood"]))
    tap.ok(code == "OK" and r.svids[0].svid == token, "... while a cached JWT-SVID is still served", code)

    # a fetch in flight when bcd stops (a "gateway" that accepts and never answers)
    hole = socket.socket()
    hole.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    hole.bind(("127.0.0.1", env.gw_port))
    hole.listen(16)
    fut = stub.FetchJWTSVID.future(pb.JWTSVIDRequest(audience=["at-stop"]), metadata=HDR, timeout=30)
    time.sleep(1.0)
    t0 = time.time()
    daemon.stop()
    try:
        fut.result()
        code, det = "OK", ""
    except grpc.RpcError as e:
        code, det = e.code().name, e.details()
    hole.close()
    tap.ok(code == "UNAVAILABLE" and "stopping" in str(det),
           "a call waiting for a fetch when bcd stops: UNAVAILABLE, bcd is stopping", (code, det))
    tap.ok(daemon.rc == 0 and time.time() - t0 < 10,
           "bcd stops cleanly (SIGTERM) with a fetch in flight, in %.1f s" % (time.time() - t0),
           daemon.text()[-3000:])


agentlib.main(body)
