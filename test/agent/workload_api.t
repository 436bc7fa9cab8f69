#!/usr/bin/python3
"""workload_api.t: bcd's SPIFFE Workload API (docs/agent.md, "The SPIFFE Workload API").

Shows, through the real gateway and a bcd daemon, with a gRPC client made
at test time by grpc_tools.protoc from src/agent/workload/workload.proto
(bc_join's own file, written from upstream's message and field numbers), run
in child processes (agentlib.Workload; this one forks, and must not hold gRPC):
- a rule with two selectors refused at start when the same selectors give
  two identities;
- FetchX509SVID streams an X509-SVID of the session the caller's rule names
  (uid:0 AND exe:this python): exactly one URI SAN, the SPIFFE ID; CA:FALSE;
  digitalSignature and no keyCertSign/cRLSign; its key is the certificate's;
  `openssl verify` against the bundle's roots; with bc_join.session_ttl 30
  a renewed SVID (another serial) is pushed on the same stream before the
  first one's notAfter;
- FetchX509Bundles: the trust domain's roots keyed by spiffe://TD, the same
  as the SVID's bundle;
- no "workload.spiffe.io: true" metadata: INVALID_ARGUMENT; a caller no rule
  names (another executable): PERMISSION_DENIED; a caller two rules with
  different identities name: PERMISSION_DENIED and a log line;
- bcd renews its node certificate (every few seconds) while the streams are open;
- the gateway stopped: a new stream still gets the last SVID;
- --workload-api-mode 0666 in a shared directory: uid 65534 gets its rule's SVID, root
  (no rule) PERMISSION_DENIED.
"""
import calendar
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentlib  # noqa: E402
import sessionlib as sl  # noqa: E402

# A client for another executable (a copy of python): status code name of one FetchX509SVID.
OTHER_CLIENT = r'''
import sys
sys.path.insert(0, sys.argv[1])
import grpc, workload_pb2 as pb, workload_pb2_grpc as pbg
stub = pbg.SpiffeWorkloadAPIStub(grpc.insecure_channel("unix://" + sys.argv[2]))
try:
    r = next(stub.FetchX509SVID(pb.X509SVIDRequest(), metadata=[("workload.spiffe.io", "true")],
                                timeout=30))
    print("OK " + r.svids[0].spiffe_id)
except grpc.RpcError as e:
    print(e.code().name)
'''


def gen_stubs(env):
    """The workload.proto stubs (agentlib.workload_stubs)."""
    return agentlib.workload_stubs(env)


def svid_checks(tap, svid, label):
    """The X509-SVID profile checks; (leaf, chain certs, roots)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    certs = x509.load_der_x509_certificates(svid.x509_svid) \
        if hasattr(x509, "load_der_x509_certificates") else split_der(svid.x509_svid)
    roots = split_der(svid.bundle)
    leaf = certs[0]
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    uris = san.get_values_for_type(x509.UniformResourceIdentifier)
    tap.eq(uris, [svid.spiffe_id], "%s: exactly one URI SAN, the SPIFFE ID" % label)
    bc = leaf.extensions.get_extension_for_class(x509.BasicConstraints).value
    ku = leaf.extensions.get_extension_for_class(x509.KeyUsage).value
    tap.ok(not bc.ca and ku.digital_signature and not ku.key_cert_sign and not ku.crl_sign,
           "%s: CA:FALSE, digitalSignature, no keyCertSign or cRLSign" % label)
    key = serialization.load_der_private_key(svid.x509_svid_key, None)
    pub = lambda k: k.public_bytes(serialization.Encoding.DER,  # noqa: E731
                                   serialization.PublicFormat.SubjectPublicKeyInfo)
    tap.ok(pub(key.public_key()) == pub(leaf.public_key()),
           "%s: x509_svid_key (PKCS#8 DER) is the certificate's key" % label)
    return leaf, certs, roots


def split_der(blob):
    """Certificates concatenated in DER."""
    from cryptography import x509
    out, off = [], 0
    while off < len(blob):
        # DER SEQUENCE: 0x30, then the length
        n = blob[off + 1]
        if n & 0x80:
            k = n & 0x7f
            body = int.from_bytes(blob[off + 2:off + 2 + k], "big")
            end = off + 2 + k + body
        else:
            end = off + 2 + n
        out.append(x509.load_der_x509_certificate(blob[off:end]))
        off = end
    return out


def openssl_verify(env, certs, roots, name):
    """openssl verify of certs[0] (the others untrusted) against roots; (ok, output)."""
    from cryptography.hazmat.primitives import serialization
    pem = lambda cs: b"".join(c.public_bytes(serialization.Encoding.PEM) for c in cs)  # noqa: E731
    paths = {}
    for k, cs in (("leaf", certs[:1]), ("untrusted", certs[1:]), ("roots", roots)):
        paths[k] = os.path.join(env.dir, "%s-%s.pem" % (name, k))
        with open(paths[k], "wb") as f:
            f.write(pem(cs))
    cmd = ["openssl", "verify", "-CAfile", paths["roots"]]
    if certs[1:]:
        cmd += ["-untrusted", paths["untrusted"]]
    r = subprocess.run(cmd + [paths["leaf"]], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    return r.returncode == 0, r.stdout


def jwt_checks(tap, env, wl, pb, spiffe_id):
    """FetchJWTSVID, FetchJWTBundles, ValidateJWTSVID."""
    import json
    from jwcrypto import jwk, jws
    try:
        wl.call("FetchJWTSVID", pb.JWTSVIDRequest(), timeout=10)
        code = "OK"
    except agentlib.WorkloadError as e:
        code = e.code
    tap.eq(code, "INVALID_ARGUMENT", "FetchJWTSVID without an audience: INVALID_ARGUMENT")
    try:
        r = wl.call("FetchJWTSVID", pb.JWTSVIDRequest(audience=["svc-a", "svc-b"]), timeout=30)
        svid = r.svids[0]
    except agentlib.WorkloadError as e:
        tap.ok(False, "FetchJWTSVID", "%s %s" % (e.code, e.details))
        return
    tap.eq(svid.spiffe_id, spiffe_id, "FetchJWTSVID: a JWT-SVID of the same session identity")
    b = wl.first("FetchJWTBundles", pb.JWTBundlesRequest(), timeout=10)
    jwks = json.loads(b.bundles["spiffe://" + agentlib.TRUST_DOMAIN])
    tap.ok(len(jwks.get("keys", [])) >= 1 and all(k.get("kid") for k in jwks["keys"]),
           "FetchJWTBundles: the trust domain's JWKS of jwt-svid keys, with kids", jwks)
    tok = jws.JWS()
    tok.deserialize(svid.svid)
    hdr = json.loads(tok.objects["protected"])
    key = [k for k in jwks["keys"] if k["kid"] == hdr.get("kid")]
    ok = False
    if key:
        try:
            # "use": "jwt-svid" (the SPIFFE bundle's word) is not one jwcrypto takes for "sig"
            tok.verify(jwk.JWK(**{k: v for k, v in key[0].items() if k != "use"}), alg="ES256")
            ok = True
        except Exception as e:  # noqa: BLE001
            tap.note("verify: %s" % e)
    claims = json.loads(tok.payload) if ok else {}
    tap.ok(ok and hdr.get("typ") == "JWT" and claims.get("sub") == spiffe_id and
           claims.get("aud") == ["svc-a", "svc-b"] and claims.get("exp", 0) > time.time(),
           "the JWT-SVID verifies (jwcrypto) with the bundle's key: ES256, typ JWT, sub, aud, exp",
           (hdr, claims))
    v = wl.call("ValidateJWTSVID", pb.ValidateJWTSVIDRequest(audience="svc-b", svid=svid.svid),
                timeout=10)
    tap.ok(v.spiffe_id == spiffe_id and v.claims["sub"] == spiffe_id and
           list(v.claims["aud"]) == ["svc-a", "svc-b"],
           "ValidateJWTSVID: its SPIFFE ID and claims (a Struct)", v)
    bad = svid.svid[:-4] + ("AAAA" if not svid.svid.endswith("AAAA") else "BBBB")
    for name, aud, token in (("another audience", "svc-c", svid.svid),
                             ("a bad signature", "svc-a", bad),
                             ("not a JWT", "svc-a", "x.y")):
        try:
            wl.call("ValidateJWTSVID", pb.ValidateJWTSVIDRequest(audience=aud, svid=token), timeout=10)
            code = "OK"
        except agentlib.WorkloadError as e:
            code = e.code
        tap.eq(code, "INVALID_ARGUMENT", "ValidateJWTSVID, %s: INVALID_ARGUMENT" % name)
    # a message over 256 KiB: refused by gRPC before bcd parses it; the next call is answered
    try:
        wl.call("ValidateJWTSVID", pb.ValidateJWTSVIDRequest(audience="svc-a", svid="A" * 270000),
                timeout=10)
        code = "OK"
    except agentlib.WorkloadError as e:
        code = e.code
    tap.eq(code, "RESOURCE_EXHAUSTED", "a 270 kB request: RESOURCE_EXHAUSTED")
    v = wl.call("ValidateJWTSVID", pb.ValidateJWTSVIDRequest(audience="svc-a", svid=svid.svid),
                timeout=10)
    tap.eq(v.spiffe_id, spiffe_id, "... and the next call is answered")


def body(tap, env):
    """The script."""
    if not env.has_function("bc_join.issue_session(jsonb)"):
        tap.skip("workload api", "bc_join.issue_session(jsonb) is not installed")
        return
    # gRPC only in child processes (agentlib.Workload, OTHER_CLIENT): this one forks on
    py = gen_stubs(env)
    sys.path.insert(0, py)
    import workload_pb2 as pb

    env.psql("ALTER DATABASE agent SET bc_join.session_ttl = 30")
    # a 60 s node certificate, renewed by the daemon at --renew-at 0.1: bcd renews its
    # node credential every few seconds while the streams are open
    env.psql("ALTER DATABASE agent SET bc_join.cert_ttl = 60")
    gw = env.gateway()                  # new connections: the setting in force
    state = os.path.join(env.dir, "state")
    r = env.bcd("run", *env.run_args(state, token_file=env.token_file("w"), extra=["--once"]))
    tap.ok(r.returncode == 0, "the host joins", r.stderr)

    me = os.path.realpath("/proc/self/exe")
    other = os.path.join(env.dir, "py-other")
    none = os.path.join(env.dir, "py-none")
    for p in (other, none):
        shutil.copy(me, p)
        os.chmod(p, 0o755)

    # two rules, the same selectors (in another order), two identities: refused at start
    r = env.bcd("run", *env.run_args(state, extra=[
        "--workload-rule", "uid:0,exe:%s=>session=a" % me,
        "--workload-rule", "exe:%s,uid:0=>session=b" % me]), timeout=30)
    tap.ok(r.returncode != 0 and "the same selectors give different" in r.stderr,
           "duplicate selectors with different identities: bcd refuses to start", r.stderr)

    rt = sl.runtime_dir(env)
    sock = os.path.join(rt, "bcd", "bcd.sock")
    wsock = os.path.join(rt, "bcd", "workload.sock")
    daemon = sl.start_daemon(env, "bcd-wl", rt, env.run_args(state, extra=[
        "--workload-rule", "uid:0,exe:%s=>session=wl-web" % me,
        "--workload-rule", "exe:%s=>session=wl-x" % other,
        "--workload-rule", "uid:0,exe:%s=>session=wl-y,context=c1" % other,
        "--renew-at", "0.1"]))
    # (bcd logs "listening on" for bcd.sock, then makes workload.sock and logs "workload api:")
    tap.ok(sl.wait_socket(daemon, sock) and daemon.wait_log("workload api:", 10) and
           os.path.exists(wsock),
           "bcd serves its socket and the Workload API next to it", daemon.text())
    tap.eq(agentlib.mode(wsock) if os.path.exists(wsock) else None, 0o600,
           "workload.sock is 0600 (its directory 0700, as bcd.sock's)")

    # the client runs this python (its exe is the rule's)
    wl = agentlib.Workload(env, py, wsock, options=[("grpc.use_local_subchannel_pool", 1)])

    # no metadata: INVALID_ARGUMENT
    try:
        wl.first("FetchX509SVID", pb.X509SVIDRequest(), metadata=False, timeout=10)
        code = "OK"
    except agentlib.WorkloadError as e:
        code = e.code
    tap.eq(code, "INVALID_ARGUMENT", "no workload.spiffe.io metadata: INVALID_ARGUMENT")

    # the stream, across a renewal
    t0 = time.time()
    stream = wl.stream("FetchX509SVID", pb.X509SVIDRequest(), timeout=90)
    first = next(stream)
    tap.note("first X509-SVID after %.1f s" % (time.time() - t0))
    tap.eq(len(first.svids), 1, "FetchX509SVID: one SVID")
    s1 = first.svids[0]
    tap.ok(s1.spiffe_id.startswith("spiffe://%s/" % agentlib.TRUST_DOMAIN) and
           "/session/" in s1.spiffe_id, "the SPIFFE ID is a session's of this node", s1.spiffe_id)
    leaf1, certs1, roots = svid_checks(tap, s1, "first SVID")
    ok, out = openssl_verify(env, certs1, roots, "svid1")
    tap.ok(ok, "openssl verify: the SVID chains to the bundle's roots", out)

    bundles = wl.first("FetchX509Bundles", pb.X509BundlesRequest(), timeout=10)
    tap.eq(dict(bundles.bundles), {"spiffe://" + agentlib.TRUST_DOMAIN: s1.bundle},
           "FetchX509Bundles: the trust domain's roots (keyed by its SPIFFE ID), the SVID's bundle")

    second = next(stream)
    t2 = time.time()
    s2 = second.svids[0]
    leaf2, certs2, _ = svid_checks(tap, s2, "renewed SVID")
    na1 = leaf1.not_valid_after.replace(tzinfo=None)
    tap.ok(leaf2.serial_number != leaf1.serial_number and s2.x509_svid_key != s1.x509_svid_key,
           "a renewed SVID (new serial, new key) is pushed on the same stream")
    tap.ok(calendar.timegm(na1.timetuple()) > t2,
           "it arrives before the first one's notAfter (%s), %.1f s after the first" %
           (na1, t2 - t0))
    tap.eq(s2.spiffe_id, s1.spiffe_id, "the same session identity")
    tap.ok(daemon.text().count("renewed spiffe://") >= 1,
           "bcd renewed its node certificate while the stream was open, and the stream goes on",
           daemon.text())
    ok, out = openssl_verify(env, certs2, roots, "svid2")
    tap.ok(ok, "openssl verify: the renewed SVID chains to the bundle's roots", out)
    stream.cancel()

    # callers no rule names, and callers two rules name differently
    envv = dict(os.environ, PYTHONHOME="/usr")

    def other_client(exe):
        r = subprocess.run([exe, "-c", OTHER_CLIENT, py, wsock], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=30, env=envv)
        return r.stdout.strip() or r.stderr
    tap.eq(other_client(none), "PERMISSION_DENIED", "a caller no rule names: PERMISSION_DENIED")
    tap.eq(other_client(other), "PERMISSION_DENIED",
           "a caller two rules name with different identities: PERMISSION_DENIED")
    tap.ok(daemon.wait_log("both match and give different identities", 10),
           "... and bcd logs the ambiguity", daemon.text())

    if env.has_function("bc_join.issue_jwt_svid(jsonb)"):
        jwt_checks(tap, env, wl, pb, s1.spiffe_id)
    else:
        tap.skip("FetchJWTSVID, ValidateJWTSVID, FetchJWTBundles",
                 "bc_join.issue_jwt_svid(jsonb) is not installed (the service half of #33)")

    # the gateway stopped: the last SVID is still served
    gw.stop()
    s3 = wl.first("FetchX509SVID", pb.X509SVIDRequest(), timeout=10).svids[0]
    tap.ok(s3.x509_svid == s2.x509_svid, "the gateway stopped: a new stream gets the last SVID")


    daemon.stop()
    tap.eq(daemon.rc, 0, "bcd stops cleanly (SIGTERM)", daemon.text())
    wl.stop()

    # --workload-api-mode 0666 in a directory every user reaches: the rules decide by uid
    env.gateway()
    shared = os.path.join(env.dir, "shared")
    os.mkdir(shared)
    os.chmod(shared, 0o755)
    wsock2 = os.path.join(shared, "workload.sock")
    daemon2 = sl.start_daemon(env, "bcd-wl2", rt, env.run_args(state, extra=[
        "--workload-api", wsock2, "--workload-api-mode", "0666",
        "--workload-rule", "uid:65534=>session=wl-nobody"]))
    tap.ok(sl.wait_socket(daemon2, sock) and daemon2.wait_log("workload api:", 10) and
           os.path.exists(wsock2) and
           agentlib.mode(wsock2) == 0o666, "--workload-api-mode 0666: the socket is 0666",
           daemon2.text())
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        sys.executable, "-c", OTHER_CLIENT, py, wsock2],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60,
                       env=envv)
    out = r.stdout.strip() or r.stderr
    tap.ok(out.startswith("OK spiffe://%s/" % agentlib.TRUST_DOMAIN) and "/session/" in out,
           "uid 65534 (another user) gets its rule's session SVID", out)
    r = subprocess.run([me, "-c", OTHER_CLIENT, py, wsock2], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=30, env=envv)
    tap.eq(r.stdout.strip() or r.stderr, "PERMISSION_DENIED",
           "root, whom no rule of this daemon names: PERMISSION_DENIED")
    daemon2.stop()
    tap.eq(daemon2.rc, 0, "the second bcd stops cleanly", daemon2.text())
    env.psql("ALTER DATABASE agent RESET bc_join.session_ttl")
    env.psql("ALTER DATABASE agent RESET bc_join.cert_ttl")


agentlib.main(body)
