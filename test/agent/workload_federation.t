#!/usr/bin/python3
"""workload_federation.t: bcd's Workload API across two federated trust domains (issue 46, item 2).

Two JoinServices, A (agent.bc-join.test) and B (b.bc-join.test): two throwaway clusters,
two gateways (--service-keys-max-age 1), a bcd in each at --status-interval 1 (A's with
--keys-interval 1: it takes GET /v1/trust-bundles up every second). Each
database federates with the other's gateway over https_web (bc_join.add_federation with
https://<the other gateway>/v1/spiffe-bundle), and bc-join-federate --once, a login role of
bc_join_federation, fetches it (--ca-file: the CA of the other gateway's TLS certificate);
bcd takes the signed GET /v1/trust-bundles. A third key directory, C (c.bc-join.test), is
federated with no one. With gRPC clients made from src/agent/workload/workload.proto:
- A's workload (rule federates=b.bc-join.test) gets X509SVIDResponse.federated_bundles
  {spiffe://b.bc-join.test: B's root}, never merged into its own bundle; FetchX509Bundles
  and FetchJWTBundles carry both domains; the same for B's workload the other way;
- A's and B's workloads do mTLS with openssl s_server/s_client, each verifying the peer
  with the peer's domain's roots only (as A's and B's bcd handed them): "Verify return
  code: 0" on both sides;
- each side's ValidateJWTSVID accepts the other's JWT-SVID (fetched from its own bcd);
- C's token (minted with C's jwt-svid key) is refused by A, and C's certificate does not
  verify against the federated roots A's workload was given;
- a token of B's subject signed with C's key under B's kid: refused (the bundle is picked by
  the subject's trust domain, then the kid);
- a caller whose rule has no federates= (uid 65534 on A) sees A's bundle only and cannot
  validate B's token;
- Envoy's SDS (test/agent/sds_client.js, grpc-js on Envoy's upstream protos) on A's
  socket: ALL is one SPIFFE validator holding A's and B's roots, each its own trust domain;
  spiffe://b.bc-join.test holds B's alone;
- B's bundle changes (a new jwt-svid key in B's key directory: a new kid, a higher
  sequence) and A's fetcher runs again: A's FetchX509Bundles stream pushes the new
  generation without a restart.
"""
import base64
import json
import os
import queue
import select
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentlib  # noqa: E402
import sessionlib as sl  # noqa: E402
from bctest import ClusterEnv  # noqa: E402

HDR = [("workload.spiffe.io", "true")]
TD_A = agentlib.TRUST_DOMAIN
TD_B = "b.bc-join.test"
TD_C = "c.bc-join.test"
KEYGEN = os.path.join(agentlib.TOP, "tools", "bc-join-keygen")
# the ASan + UBSan build when there is one (make agent-test names it in BCJ_FEDERATE)
FEDERATE = os.environ.get("BCJ_FEDERATE") or next(
    (p for p in (os.path.join(agentlib.TOP, "build/asan/bc-join-federate"),
                 os.path.join(agentlib.TOP, "build/bc-join-federate")) if os.path.exists(p)),
    os.path.join(agentlib.TOP, "build/bc-join-federate"))

# Run as uid 65534 (its rule names no federated domain): bundles' keys, then a validation.
NOBODY_CLIENT = r'''
import sys, json
sys.path.insert(0, sys.argv[1])
import grpc, workload_pb2 as pb, workload_pb2_grpc as pbg
stub = pbg.SpiffeWorkloadAPIStub(grpc.insecure_channel("unix://" + sys.argv[2]))
md = [("workload.spiffe.io", "true")]
out = {}
out["x509"] = sorted(next(stub.FetchX509Bundles(pb.X509BundlesRequest(), metadata=md, timeout=30)).bundles)
out["jwt"] = sorted(next(stub.FetchJWTBundles(pb.JWTBundlesRequest(), metadata=md, timeout=30)).bundles)
out["fed"] = sorted(next(stub.FetchX509SVID(pb.X509SVIDRequest(), metadata=md, timeout=60)).federated_bundles)
try:
    stub.ValidateJWTSVID(pb.ValidateJWTSVIDRequest(audience="fed", svid=sys.argv[3]), metadata=md, timeout=10)
    out["validate"] = "OK"
except grpc.RpcError as e:
    out["validate"] = e.code().name + " " + (e.details() or "")
print(json.dumps(out))
'''


class EnvB(agentlib.Env):
    """A second JoinService: its own cluster, TLS CA, gateway, trust domain."""

    def __init__(self):
        ClusterEnv.__init__(self, "bcj-agentb-", "agent", TD_B)
        self.procs = []
        self.bcd_bin = os.environ.get("BCJ_BCD", os.path.join(agentlib.TOP, "build/asan/bcd"))
        self.gw_bin = os.environ.get("BCJ_GATEWAY", os.path.join(agentlib.TOP, "build/bc-gateway"))
        self.nbcd = 0


def split_der(blob):
    """Certificates concatenated in DER (cryptography objects)."""
    from cryptography import x509
    out, off = [], 0
    while off < len(blob):
        n = blob[off + 1]
        if n & 0x80:
            k = n & 0x7f
            end = off + 2 + k + int.from_bytes(blob[off + 2:off + 2 + k], "big")
        else:
            end = off + 2 + n
        out.append(x509.load_der_x509_certificate(blob[off:end]))
        off = end
    return out


def pem(certs):
    """PEM of cryptography certificates."""
    from cryptography.hazmat.primitives import serialization
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def write(path, data, mode=0o600):
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)
    return path


def svid_files(d, name, svid, fed_roots):
    """leaf, chain, key and the peer's roots of svid into files in d; their paths."""
    from cryptography.hazmat.primitives import serialization
    certs = split_der(svid.x509_svid)
    key = serialization.load_der_private_key(svid.x509_svid_key, None)
    return (write(os.path.join(d, name + "-leaf.pem"), pem(certs[:1])),
            write(os.path.join(d, name + "-chain.pem"), pem(certs[1:]) or pem(certs[:1])),
            write(os.path.join(d, name + "-key.pem"), key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption())),
            write(os.path.join(d, name + "-peer-roots.pem"), pem(fed_roots)))


def mtls(env, a, b):
    """openssl s_server (-www) with a's files, s_client with b's, each trusting the peer's
    roots only; (client verified the server, server verified the client, outputs)."""
    from bctest import free_port
    port = free_port()
    leaf_a, chain_a, key_a, roots_a = a
    leaf_b, chain_b, key_b, roots_b = b
    srv = subprocess.Popen(["openssl", "s_server", "-accept", "127.0.0.1:%d" % port, "-naccept", "1",
                            "-cert", leaf_a, "-cert_chain", chain_a, "-key", key_a,
                            "-CAfile", roots_a, "-Verify", "1", "-verify_return_error", "-www"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    # s_server prints "ACCEPT" once it listens, after a line or two of its settings
    # ("verify depth is 1, ...", "Using default temp DH parameters"): wait for that line,
    # not the first one, or s_client may connect before anything listens (seen in CI)
    first = ""
    for _ in range(20):
        line = srv.stdout.readline().decode("utf-8", "replace")
        first += line
        if line == "" or line.strip() == "ACCEPT":
            break
    cli = subprocess.run(["openssl", "s_client", "-ign_eof", "-connect", "127.0.0.1:%d" % port,
                          "-cert", leaf_b, "-cert_chain", chain_b, "-key", key_b,
                          "-CAfile", roots_b, "-verify_return_error", "-verify", "1"],
                         input=b"GET / HTTP/1.0\r\n\r\n", stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, timeout=20)
    try:
        sout = first + srv.communicate(timeout=10)[0].decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        srv.kill()
        sout = first + srv.communicate()[0].decode("utf-8", "replace")
    cout = cli.stdout.decode("utf-8", "replace")
    # -www answers a page that shows the client's certificate once the server verified it
    return ("Verify return code: 0" in cout, "Client certificate" in cout and
            "verify error" not in sout, cout, sout)


def sds_fetch(env, exe, sock, names):
    """FetchSecrets of names through sds_client.js run by exe: its answer (JSON)."""
    wkt = "/usr/lib/python3/dist-packages/grpc_tools/_proto"
    p = subprocess.Popen([exe, os.path.join(agentlib.HERE, "sds_client.js"), sock, wkt],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdin.write((json.dumps({"op": "fetch", "req": {"resource_names": names}}) + "\n").encode())
    p.stdin.flush()
    r, _, _ = select.select([p.stdout], [], [], 20)
    line = p.stdout.readline() if r else b""
    p.stdin.close()
    try:
        p.wait(5)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    return json.loads(line) if line else {"error": p.stderr.read().decode()[-1000:]}


def spiffe_tds(res):
    """The SPIFFE validator's trust domains of an SDS Secret: {name: certificates' DER}, or None."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    cfg = (((res or {}).get("validation_context") or {}).get("custom_validator_config") or {})
    if cfg.get("name") != "envoy.tls.cert_validator.spiffe":
        return None
    end = "-----END CERTIFICATE-----"
    out = {}
    for t in (cfg.get("typed_config") or {}).get("trust_domains", []):
        pem_text = (t.get("trust_bundle") or {}).get("inline_bytes") or ""
        out[t.get("name")] = b"".join(
            x509.load_pem_x509_certificate((c + end).encode()).public_bytes(serialization.Encoding.DER)
            for c in pem_text.split(end) if "-----BEGIN CERTIFICATE-----" in c)
    return out


def mint(keyfile, kid, sub, aud, alg="ES256"):
    """A JWT signed by the PEM key in keyfile, with kid."""
    from jwcrypto import jwk, jws
    from jwcrypto.common import json_encode
    with open(keyfile, "rb") as f:
        k = jwk.JWK.from_pem(f.read())
    now = int(time.time())
    t = jws.JWS(json.dumps({"sub": sub, "aud": [aud], "exp": now + 300, "iat": now}).encode())
    t.add_signature(k, alg=alg, protected=json_encode({"alg": alg, "kid": kid, "typ": "JWT"}))
    return t.serialize(compact=True), k


def fed_login(env):
    """A login role of bc_join_federation in env's database; its connection string."""
    env.psql("CREATE ROLE fed_login LOGIN IN ROLE bc_join_federation")
    return "host=%s port=%d dbname=%s user=fed_login" % (os.path.join(env.pg, "sock"), env.pgport, env.db)


def federate(env, ca_file):
    """bc-join-federate --once against env's database: {trust domain: the database's answer}, and
    stderr."""
    r = subprocess.run([FEDERATE, "--db", env.fed_conninfo, "--once", "--ca-file", ca_file],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    out = {}
    for line in r.stdout.splitlines():
        try:
            o = json.loads(line)
            out[o.get("trustDomain")] = o.get("result", {})
        except ValueError:
            out.setdefault("_raw", []).append(line)
    return out, "rc %d: %s" % (r.returncode, r.stderr[-1500:])


def join(env, name):
    """Join env's host (state-NAME); raise when it does not."""
    state = os.path.join(env.dir, "state-" + name)
    r = env.bcd("run", *env.run_args(state, token_file=env.token_file(name), extra=["--once"]))
    if r.returncode != 0:
        raise RuntimeError("the host of %s does not join: %s" % (name, r.stderr[-2000:]))


def in_parallel(*fns):
    """Run the functions in threads; re-raise the first failure."""
    errs = []

    def wrap(fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            errs.append(e)
    ts = [threading.Thread(target=wrap, args=(fn,)) for fn in fns]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errs:
        raise errs[0]


def start(env, name, rules, extra=()):
    """Start the joined host's bcd with the rules; (daemon, workload socket)."""
    state = os.path.join(env.dir, "state-" + name)
    rt = sl.runtime_dir(env, "rt-" + name)
    shared = os.path.join(env.dir, "shared-" + name)
    os.mkdir(shared)
    os.chmod(shared, 0o755)
    wsock = os.path.join(shared, "workload.sock")
    args = ["--status-interval", "1", "--workload-api", wsock] + list(extra)
    for rule in rules:
        args += ["--workload-rule", rule]
    d = sl.start_daemon(env, "bcd-" + name, rt, env.run_args(state, extra=args))
    deadline = time.time() + 20
    while not os.path.exists(wsock) and time.time() < deadline and d.proc.poll() is None:
        time.sleep(0.05)
    if not os.path.exists(wsock):
        raise RuntimeError("bcd %s does not serve: %s" % (name, d.text()[-3000:]))
    return d, wsock


def body(tap, env):
    """The script."""
    if not env.has_function("bc_join.add_federation(text,text,text,text,jsonb)"):
        tap.skip("federation", "bc_join.add_federation is not installed")
        return
    envb = EnvB()
    try:
        run(tap, env, envb)
    finally:
        envb.cleanup()


def run(tap, env, envb):
    import grpc
    t0 = time.time()
    keys_c = os.path.join(env.dir, "keys-c")
    out = {}

    def domain_b():
        envb.start_cluster("agents-b")
        envb.make_tls()
        envb.gateway("--service-keys-max-age", "1")
        envb.fed_conninfo = fed_login(envb)
        join(envb, "b")

    def domain_a():
        out["py"] = agentlib.workload_stubs(env)
        # domain C: a key directory only, federated with no one
        subprocess.run([KEYGEN, keys_c], check=True, stdout=subprocess.DEVNULL)
        env.fed_conninfo = fed_login(env)
        join(env, "a")
    in_parallel(domain_a, domain_b)
    py = out["py"]
    sys.path.insert(0, py)
    import workload_pb2 as pb
    import workload_pb2_grpc as pbg
    bundle_a = env.psql("SELECT bc_join.spiffe_bundle()")
    bundle_b = envb.psql("SELECT bc_join.spiffe_bundle()")
    # each database federates with the other's gateway; the fetcher takes the bundles
    env.psql("SELECT bc_join.add_federation('%s', '%s/v1/spiffe-bundle', 'https_web')" % (TD_B, envb.gw_url))
    envb.psql("SELECT bc_join.add_federation('%s', '%s/v1/spiffe-bundle', 'https_web')" % (TD_A, env.gw_url))
    fetched = {}
    t_fetch = time.time()

    def fetch(e, ca, key):
        fetched[key] = federate(e, ca)
    in_parallel(lambda: fetch(env, envb.ca, "a"), lambda: fetch(envb, env.ca, "b"))
    tap.note("both fetchers ran in %.1f s" % (time.time() - t_fetch))
    stored = {"a": env.psql("SELECT bundle FROM bc_join.federated_trust_domains WHERE trust_domain = '%s'" % TD_B),
              "b": envb.psql("SELECT bundle FROM bc_join.federated_trust_domains WHERE trust_domain = '%s'"
                             % TD_A)}
    tap.ok(fetched["a"][0].get(TD_B, {}).get("stored") is True and
           json.loads(stored["a"] or "null") == json.loads(bundle_b),
           "A's bc-join-federate fetched B's gateway's /v1/spiffe-bundle (https_web) and A's database "
           "stored B's bundle", fetched["a"])
    tap.ok(fetched["b"][0].get(TD_A, {}).get("stored") is True and
           json.loads(stored["b"] or "null") == json.loads(bundle_a),
           "B's fetcher the same with A's gateway: B's database stored A's bundle", fetched["b"])

    me = os.path.realpath("/proc/self/exe")
    have_node = shutil.which("node") is not None and os.path.isdir(
        os.path.join(agentlib.TOP, "test", "node", "node_modules", "@grpc", "grpc-js-xds"))
    node_exe = os.path.join(env.dir, "node-a")
    rules_a = ["uid:0,exe:%s=>session=fa,federates=%s" % (me, TD_B), "uid:65534=>session=plain"]
    if have_node:
        # a copy of node (exe: matches the file): Envoy's stand-in, the same identity
        subprocess.run(["cp", os.path.realpath(shutil.which("node")), node_exe], check=True)
        rules_a.append("uid:0,exe:%s=>session=fa,federates=%s" % (node_exe, TD_B))
    # A's bcd takes the bundles up every second (--keys-interval 1), B's every 6 intervals (the default)
    da, wa = start(env, "a", rules_a, ["--workload-api-mode", "0666", "--keys-interval", "1"])
    db, wb = start(envb, "b", ["uid:0,exe:%s=>session=fb,federates=%s" % (me, TD_A)])
    sa = pbg.SpiffeWorkloadAPIStub(grpc.insecure_channel("unix://" + wa))
    sb = pbg.SpiffeWorkloadAPIStub(grpc.insecure_channel("unix://" + wb))
    tap.note("two domains up in %.1f s" % (time.time() - t0))

    # -- X.509: own and federated bundles, never merged ---------------------------------
    ra = next(sa.FetchX509SVID(pb.X509SVIDRequest(), metadata=HDR, timeout=60))
    rb = next(sb.FetchX509SVID(pb.X509SVIDRequest(), metadata=HDR, timeout=60))
    va, vb = ra.svids[0], rb.svids[0]
    tap.ok(va.spiffe_id.startswith("spiffe://%s/" % TD_A) and vb.spiffe_id.startswith("spiffe://%s/" % TD_B),
           "each bcd issues its own domain's X509-SVID", (va.spiffe_id, vb.spiffe_id))
    tap.ok(list(ra.federated_bundles) == ["spiffe://" + TD_B] and
           ra.federated_bundles["spiffe://" + TD_B] == vb.bundle,
           "A's workload: federated_bundles {spiffe://%s: B's root}" % TD_B, list(ra.federated_bundles))
    tap.ok(list(rb.federated_bundles) == ["spiffe://" + TD_A] and
           rb.federated_bundles["spiffe://" + TD_A] == va.bundle,
           "B's workload: federated_bundles {spiffe://%s: A's root}" % TD_A, list(rb.federated_bundles))
    tap.ok(va.bundle != vb.bundle and len(split_der(va.bundle)) == 1,
           "... never merged: the SVID's own bundle is A's root alone")
    xb = next(sa.FetchX509Bundles(pb.X509BundlesRequest(), metadata=HDR, timeout=10))
    tap.eq(sorted(xb.bundles), sorted(["spiffe://" + TD_A, "spiffe://" + TD_B]),
           "A's FetchX509Bundles: both domains, each keyed by its SPIFFE ID")
    jb = next(sa.FetchJWTBundles(pb.JWTBundlesRequest(), metadata=HDR, timeout=10))
    b_jwt = json.loads(bundle_b)
    b_kids = [k["kid"] for k in b_jwt["keys"] if k.get("use") == "jwt-svid"]
    tap.ok(sorted(jb.bundles) == sorted(["spiffe://" + TD_A, "spiffe://" + TD_B]) and
           [k["kid"] for k in json.loads(jb.bundles["spiffe://" + TD_B])["keys"]] == b_kids,
           "A's FetchJWTBundles: both domains, B's jwt-svid keys by kid", (list(jb.bundles), b_kids))

    # -- mTLS, each side verifying with the peer's domain's roots only --------------------
    fa = svid_files(env.dir, "a", va, split_der(ra.federated_bundles["spiffe://" + TD_B]))
    fb = svid_files(env.dir, "b", vb, split_der(rb.federated_bundles["spiffe://" + TD_A]))
    cli_ok, srv_ok, cout, sout = mtls(env, fa, fb)
    tap.ok(cli_ok and srv_ok, "mTLS A (s_server) <-> B (s_client): each verifies the other with the "
           "peer domain's roots only (Verify return code: 0)", (cout[-1500:], sout[-1500:]))

    # -- JWT-SVIDs across the domains ----------------------------------------------------
    tok_a = sa.FetchJWTSVID(pb.JWTSVIDRequest(audience=["fed"]), metadata=HDR, timeout=30).svids[0].svid
    tok_b = sb.FetchJWTSVID(pb.JWTSVIDRequest(audience=["fed"]), metadata=HDR, timeout=30).svids[0].svid

    def validate(stub, tok):
        try:
            r = stub.ValidateJWTSVID(pb.ValidateJWTSVIDRequest(audience="fed", svid=tok), metadata=HDR,
                                     timeout=10)
            return "OK", r.spiffe_id
        except grpc.RpcError as e:
            return e.code().name, e.details()
    tap.eq(validate(sb, tok_a), ("OK", va.spiffe_id), "B's ValidateJWTSVID accepts A's JWT-SVID")
    tap.eq(validate(sa, tok_b), ("OK", vb.spiffe_id), "A's ValidateJWTSVID accepts B's JWT-SVID")

    # -- domain C, federated with no one ---------------------------------------------------
    from jwcrypto import jwk
    with open(os.path.join(keys_c, "jwt-svid.key"), "rb") as f:
        kid_c = jwk.JWK.from_pem(f.read()).thumbprint()
    tok_c, _ = mint(os.path.join(keys_c, "jwt-svid.key"), kid_c, "spiffe://%s/x" % TD_C, "fed")
    code, det = validate(sa, tok_c)
    tap.ok(code == "INVALID_ARGUMENT" and TD_C in str(det), "C's token at A: refused (no bundle of C)",
           (code, det))
    forged, _ = mint(os.path.join(keys_c, "jwt-svid.key"), b_kids[0], vb.spiffe_id, "fed")
    code, det = validate(sa, forged)
    tap.ok(code == "INVALID_ARGUMENT" and "signature" in str(det),
           "B's subject signed by C's key under B's kid: refused (B's bundle, then the kid)", (code, det))
    # C's certificate: a leaf signed by C's node CA key, against the roots A's workload has for B
    ext = os.path.join(env.dir, "c.ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=URI:spiffe://%s/x\nbasicConstraints=critical,CA:FALSE\n" % TD_C)
    ckey, ccsr, ccrt = (os.path.join(env.dir, "c." + s) for s in ("key", "csr", "crt"))
    env.openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-subj", "/CN=c", "-keyout", ckey, "-out", ccsr)
    env.openssl("x509", "-req", "-in", ccsr, "-CA", os.path.join(keys_c, "node-ca.crt"),
                "-CAkey", os.path.join(keys_c, "node-ca.key"), "-CAcreateserial", "-days", "1",
                "-extfile", ext, "-out", ccrt)
    r = subprocess.run(["openssl", "verify", "-CAfile", fa[3], ccrt], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    r_own = subprocess.run(["openssl", "verify", "-CAfile", os.path.join(keys_c, "node-ca.crt"), ccrt],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tap.ok(r.returncode != 0 and r_own.returncode == 0,
           "C's certificate does not verify against the federated roots A's workload was given "
           "(it does against C's own)", (r.stdout, r_own.stdout))

    # -- a rule without federates= -----------------------------------------------------------
    rn = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                         sys.executable, "-c", NOBODY_CLIENT, py, wa, tok_b],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=90,
                        env=dict(os.environ, PYTHONHOME="/usr"))
    try:
        out = json.loads(rn.stdout)
    except ValueError:
        out = {"error": rn.stderr[-1500:]}
    tap.ok(out.get("x509") == ["spiffe://" + TD_A] and out.get("jwt") == ["spiffe://" + TD_A] and
           out.get("fed") == [], "a rule without federates=: A's bundle only, no federated_bundles", out)
    tap.ok(str(out.get("validate", "")).startswith("INVALID_ARGUMENT") and TD_B in out.get("validate", ""),
           "... and B's token is not validated for it", out.get("validate"))

    # -- Envoy's SDS: ALL and spiffe://<federated td> --------------------------------------
    if have_node:
        ans = sds_fetch(env, node_exe, wa, ["ALL", "spiffe://" + TD_B])
        res = {r.get("name"): r for r in ans.get("resources", [])}
        tap.ok(spiffe_tds(res.get("ALL")) == {TD_A: va.bundle, TD_B: vb.bundle},
               "SDS ALL: one SPIFFE validator, A's and B's roots each under its own trust domain",
               ans if "error" in ans else sorted(res))
        tap.ok(spiffe_tds(res.get("spiffe://" + TD_B)) == {TD_B: vb.bundle},
               "SDS spiffe://%s: B's roots alone" % TD_B, sorted(res))
    else:
        tap.skip("SDS with a federated domain", "no node or test/node/node_modules (tools/install-deps)")

    # -- B's bundle changes in A's database: pushed --------------------------------------------
    pushes = queue.Queue()
    stream = sa.FetchX509Bundles(pb.X509BundlesRequest(), metadata=HDR, timeout=60)

    def reader():
        try:
            for m in stream:
                pushes.put(sorted(m.bundles))
        except grpc.RpcError:
            pass
    threading.Thread(target=reader, daemon=True).start()
    pushes.get(timeout=10)
    # B's jwt-svid key replaced (renamed into place: the key directory changes, its keys are read
    # again): B's bundle has a new kid and a higher sequence; A's fetcher takes it (made due now)
    new_key = os.path.join(envb.keys, ".jwt-svid.key.new")
    env.openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", new_key)
    os.chmod(new_key, 0o600)
    if os.geteuid() == 0:       # the cluster runs as postgres (tools/pg-throwaway), else as us
        shutil.chown(new_key, "postgres")
    os.rename(new_key, os.path.join(envb.keys, "jwt-svid.key"))
    bundle_b2 = json.loads(envb.psql("SELECT bc_join.spiffe_bundle()"))
    env.psql("UPDATE bc_join.federated_trust_domains SET next_fetch_at = now()")
    t1 = time.time()
    res, err = federate(env, envb.ca)
    r = res.get(TD_B, {})
    tap.ok(r.get("stored") is True and r.get("changed") is True and
           r.get("sequence") == bundle_b2.get("spiffe_sequence") > json.loads(bundle_b)["spiffe_sequence"],
           "B's jwt-svid key replaced: A's second bc-join-federate --once stores B's new bundle (a higher "
           "sequence)", (res, err))
    try:
        got = pushes.get(timeout=9)
    except queue.Empty:
        got = None
    tap.ok(got is not None, "A's FetchX509Bundles stream pushes it in %.1f s, same bcd"
           % (time.time() - t1), da.text()[-1500:])
    code, det = validate(sa, tok_b)
    tap.ok(code == "INVALID_ARGUMENT" and "kid" in str(det),
           "... and B's token no longer validates at A (its jwt-svid key left B's bundle)", (code, det))
    stream.cancel()

    for name, d in (("A", da), ("B", db)):
        rc, _ = d.stop()
        tap.ok(rc == 0 and "Sanitizer" not in d.text(), "bcd %s stops cleanly" % name, d.text()[-2000:])
    tap.note("%.1f s in all" % (time.time() - t0))


def setup(env):
    """Domain A: the cluster, the TLS CA, the gateway (its document copies live 1 s)."""
    env.start_cluster("agents")
    env.make_tls()
    env.gateway("--service-keys-max-age", "1")


if __name__ == "__main__":
    agentlib.run(agentlib.Env(), setup, body)
