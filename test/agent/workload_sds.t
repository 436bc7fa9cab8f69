#!/usr/bin/python3
"""workload_sds.t: Envoy's SDS v3 on bcd's Workload API socket (docs/agent.md, "Envoy: SDS").

No Envoy here: its stand-in is test/agent/sds_client.js, @grpc/grpc-js (a gRPC
independent of the C core bcd and python3-grpcio share) with Envoy's UPSTREAM
protos (@grpc/grpc-js-xds's deps/envoy-api), never bcd's sds.proto.  Through the
real gateway and one bcd daemon (--status-interval 1), two workloads (two
executables, two --workload-rule's):
1. StreamSecrets on `unix:` with no workload.spiffe.io header; a first request
   with a realistic node over 64 KiB (Envoy resends its extensions), names
   default + ROOTCA: version "1", a nonce of 8 hex, the SVID as a TlsCertificate
   (PEM chain, PKCS#8 PEM key), ROOTCA as Envoy's SPIFFE validator (the trust
   domain without scheme, its roots in PEM);
2. an ACK is not answered; a NACK is logged and its version not sent again; a
   request with a stale nonce is ignored (even with new names);
3. changed names are answered (the SVID by its SPIFFE ID, named so); an unknown
   ID ends the stream with INVALID_ARGUMENT (SPIRE's message); a wrong type_url,
   17 names, 11 requests in a second: refused;
4. the node asks for rootCA validation (disable_spiffe_cert_validation):
   trusted_ca and the node CA's CRL (only_verify_leaf_cert_crl); the first
   workload's session certificate revoked: it gets a new SVID pushed, the other
   the new CRL listing the old serial, each a new version;
   (with BCJ_SDS_RENEWAL=1, at bc_join.session_ttl 30: a renewed SVID is pushed
   15 s later; left out by default, for the suite's time);
5. a new stream starts at version "1"; FetchSecrets answers version "" and no
   nonce; DeltaSecrets is UNIMPLEMENTED; a caller no rule names gets
   PERMISSION_DENIED;
6. the two workloads' PEMs from SDS to files: `openssl s_server -Verify 2 -CAfile`
   <-> `s_client`: "Verify return code: 0" and each side sees the other's URI SAN.
"""
import json
import os
import select
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentlib  # noqa: E402
import sessionlib as sl  # noqa: E402
from bctest import TOP, free_port  # noqa: E402

WKT = "/usr/lib/python3/dist-packages/grpc_tools/_proto"
SECRET = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
SPIFFE_CFG = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.SPIFFECertValidatorConfig"
TD = agentlib.TRUST_DOMAIN


class Client:
    """One sds_client.js process run by exe (a link to node): commands in, answers out."""

    def __init__(self, env, exe, sock):
        self.err = open(os.path.join(env.dir, "sds-%s.log" % os.path.basename(exe)), "ab")
        self.p = subprocess.Popen([exe, os.path.join(agentlib.HERE, "sds_client.js"), sock, WKT],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err)
        env.procs.append(self)

    def __call__(self, timeout=15, **cmd):
        self.p.stdin.write((json.dumps(cmd) + "\n").encode())
        self.p.stdin.flush()
        r, _, _ = select.select([self.p.stdout], [], [], timeout)
        line = self.p.stdout.readline() if r else b""
        return json.loads(line) if line else {"error": "no answer from sds_client.js"}

    def stop(self, sig=None, timeout=5):
        if self.p.poll() is None:
            self.p.stdin.close()
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.err.close()


def node(rootca=False, big=True):
    """A node as Envoy 1.29 sends it: id, cluster, build version, metadata, and
    (big) 700 extensions, as Envoy lists every extension compiled in."""
    n = {"id": "sidecar~10.0.0.1~web.default~cluster.local", "cluster": "web",
         "user_agent_name": "envoy",
         "user_agent_build_version": {"version": {"major_number": 1, "minor_number": 29,
                                                  "patch": 4}},
         "metadata": {"fields": {"ISTIO_VERSION": {"stringValue": "1.21.0"}}}}
    if rootca:
        n["metadata"]["fields"]["disable_spiffe_cert_validation"] = {"boolValue": True}
    if big:
        n["extensions"] = [{"name": "envoy.filters.http.test_extension_number_%04d" % i,
                            "category": "envoy.filters.http",
                            "type_urls": ["type.googleapis.com/envoy.extensions.filters.http."
                                          "test_extension_number_%04d.v3.Config" % i]}
                           for i in range(700)]
    return n


def certs(pem_text):
    """The certificates of a PEM text."""
    from cryptography import x509
    end = "-----END CERTIFICATE-----"
    return [x509.load_pem_x509_certificate((p + end).encode()) for p in pem_text.split(end)
            if "-----BEGIN CERTIFICATE-----" in p]


def uri_sans(cert):
    from cryptography import x509
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return san.get_values_for_type(x509.UniformResourceIdentifier)


def by_name(ans):
    """An answer's resources by name."""
    return {r.get("name"): r for r in ans.get("resources", [])}


def tls_of(res):
    """(chain PEM, key PEM) of a Secret resource, or (None, None)."""
    t = (res or {}).get("tls_certificate") or {}
    return ((t.get("certificate_chain") or {}).get("inline_bytes"),
            (t.get("private_key") or {}).get("inline_bytes"))


def spiffe_tds(res):
    """The SPIFFE validator's trust domains of a Secret resource: {name: PEM}, or None."""
    vc = (res or {}).get("validation_context") or {}
    cvc = vc.get("custom_validator_config") or {}
    cfg = cvc.get("typed_config") or {}
    if cvc.get("name") != "envoy.tls.cert_validator.spiffe" or cfg.get("@type") != SPIFFE_CFG:
        return None
    return {t.get("name"): (t.get("trust_bundle") or {}).get("inline_bytes")
            for t in cfg.get("trust_domains", [])}


def write(env, name, data):
    path = os.path.join(env.dir, name)
    with open(path, "w") as f:
        f.write(data)
    return path


def copy_node(env, name):
    """A copy of node (exe: matches the file, so a hard link would not do)."""
    path = os.path.join(env.dir, name)
    subprocess.run(["cp", "--reflink=auto", os.path.realpath(shutil.which("node")), path],
                   check=True)
    return path


def body(tap, env):
    from cryptography.hazmat.primitives import serialization
    from cryptography import x509
    if not env.has_function("bc_join.issue_session(jsonb)"):
        tap.skip("sds", "bc_join.issue_session(jsonb) is not installed")
        return
    if not os.path.isdir(os.path.join(TOP, "test", "node", "node_modules", "@grpc", "grpc-js-xds")):
        tap.ok(False, "test/node/node_modules: run tools/install-deps (npm ci --prefix test/node)")
        return
    renewal = os.environ.get("BCJ_SDS_RENEWAL") == "1"
    if renewal:
        # session certificates of 30 s (the shortest): renewed, and pushed, 15 s after each
        env.psql("ALTER DATABASE agent SET bc_join.session_ttl = 30")
        env.gateway()                   # new connections: the setting in force
    state = os.path.join(env.dir, "state")
    r = env.bcd("run", *env.run_args(state, token_file=env.token_file("s"), extra=["--once"]))
    if not tap.ok(r.returncode == 0, "the host joins", r.stderr):
        return
    r = env.bcd("run", *env.run_args(state, extra=["--sds-validation", "x509"]), timeout=30)
    tap.ok(r.returncode != 0 and "--sds-validation must be auto, spiffe or rootca" in r.stderr,
           "--sds-validation x509: a usage error", r.stderr)
    node_a, node_b = (copy_node(env, n) for n in ("node-a", "node-b"))
    node_none = os.path.realpath(shutil.which("node"))  # the original: no rule names it
    rt = sl.runtime_dir(env)
    sock = os.path.join(rt, "bcd", "bcd.sock")
    wsock = os.path.join(rt, "bcd", "workload.sock")
    daemon = sl.start_daemon(env, "bcd-sds", rt, env.run_args(state, extra=[
        "--workload-rule", "exe:%s=>session=sds-a" % node_a,
        "--workload-rule", "exe:%s=>session=sds-b" % node_b,
        "--status-interval", "1"]))
    if not tap.ok(sl.wait_socket(daemon, sock) and daemon.wait_log("workload api:", 10),
                  "bcd serves the Workload API", daemon.text()):
        return
    a = Client(env, node_a, wsock)
    b = Client(env, node_b, wsock)

    # 1. the first request: no header, a big node, default + ROOTCA
    o = a(op="open", s="s", req={"node": node(), "resource_names": ["default", "ROOTCA"]})
    tap.ok(o.get("ok") and o.get("bytes", 0) > 65536,
           "StreamSecrets opened (no workload.spiffe.io header), its first request with a node "
           "of 700 extensions: %s bytes (over 64 KiB)" % o.get("bytes"), o)
    t0 = time.time()
    r1 = a(op="recv", s="s", ms=15000)
    tap.note("first answer after %.1f s" % (time.time() - t0))
    res = by_name(r1)
    tap.ok(r1.get("version_info") == "1" and len(r1.get("nonce", "")) == 8 and
           all(c in "0123456789abcdef" for c in r1.get("nonce", "x")) and
           r1.get("type_url") == SECRET and sorted(res) == ["ROOTCA", "default"] and
           all(x.get("@type") == SECRET for x in r1.get("resources", [])),
           "answer: version 1, an 8-hex nonce, the Secret type, resources default and ROOTCA",
           {k: v for k, v in r1.items() if k != "resources"} if "resources" in r1 else r1)
    chain, key = tls_of(res.get("default"))
    leaf = certs(chain)[0] if chain and certs(chain) else None
    id_a = uri_sans(leaf)[0] if leaf is not None else ""
    tap.ok(leaf is not None and id_a.startswith("spiffe://%s/" % TD) and "/session/" in id_a,
           "default: a TlsCertificate whose PEM chain's leaf is the session's SVID", id_a)
    pk = serialization.load_pem_private_key(key.encode(), None) if key else None
    spki = lambda k: k.public_bytes(serialization.Encoding.DER,  # noqa: E731
                                    serialization.PublicFormat.SubjectPublicKeyInfo)
    tap.ok(pk is not None and key.startswith("-----BEGIN PRIVATE KEY-----") and
           spki(pk.public_key()) == spki(leaf.public_key()),
           "private_key: PKCS#8 PEM, the certificate's key")
    tds = spiffe_tds(res.get("ROOTCA"))
    tap.ok(tds is not None and list(tds) == [TD] and certs(tds[TD] or ""),
           "ROOTCA: Envoy's SPIFFE validator, trust domain %s (no scheme), its roots in PEM" % TD,
           res.get("ROOTCA"))
    bundle = write(env, "bundle.pem", tds[TD] if tds else "")
    leaf_pem = write(env, "a-leaf.pem", chain or "")
    v = subprocess.run(["openssl", "verify", "-CAfile", bundle, "-untrusted", leaf_pem, leaf_pem],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tap.ok(v.returncode == 0 and len(certs(chain or "")) >= 2,
           "openssl verify: the chain (leaf, then its CA: %d certificates) chains to ROOTCA's roots"
           % len(certs(chain or "")), v.stdout)

    # 2. ACK; names changed; NACK; stale nonce
    a(op="send", s="s", req={"version_info": "1", "response_nonce": r1["nonce"],
                             "resource_names": ["default", "ROOTCA"]})
    tap.eq(a(op="quiet", s="s", ms=300).get("n"), 0, "an ACK (version 1, its nonce) is not answered")
    # 3. names changed: answered
    a(op="send", s="s", req={"version_info": "1", "response_nonce": r1["nonce"],
                             "resource_names": ["default", "ROOTCA", id_a]})
    r2 = a(op="recv", s="s", ms=5000)
    res2 = by_name(r2)
    tap.ok(r2.get("version_info") == "2" and r2.get("nonce") != r1["nonce"] and
           sorted(res2) == sorted(["default", "ROOTCA", id_a]) and
           tls_of(res2.get(id_a)) == (chain, key),
           "names changed (+ its SPIFFE ID): answered, version 2, the SVID also named by its ID",
           sorted(res2))
    a(op="send", s="s", req={"version_info": "1", "response_nonce": r2.get("nonce", ""),
                             "resource_names": ["default", "ROOTCA", id_a],
                             "error_detail": {"code": 3, "message": "test: rejected on purpose"}})
    tap.eq(a(op="quiet", s="s", ms=300).get("n"), 0, "a NACK of version 2: version 2 is not sent again")
    tap.ok(daemon.wait_log("rejected version 2", 5) and
           "test: rejected on purpose" in daemon.text(), "... and bcd logs it", daemon.text())
    a(op="send", s="s", req={"version_info": "2", "response_nonce": "00000000",
                             "resource_names": ["default"]})
    tap.eq(a(op="quiet", s="s", ms=300).get("n"), 0,
           "a request with a stale nonce is ignored, even with new names")
    a(op="send", s="s", req={"version_info": "1", "response_nonce": r2.get("nonce", ""),
                             "resource_names": ["default"]})
    r3 = a(op="recv", s="s", ms=5000)
    tap.ok(r3.get("version_info") == "3" and sorted(by_name(r3)) == ["default"],
           "the same names with the current nonce: answered, version 3, default only",
           sorted(by_name(r3)))
    a(op="send", s="s", req={"version_info": "3", "response_nonce": r3.get("nonce", ""),
                             "resource_names": ["default"]})

    # unknown ID, wrong type_url, too many names, too many requests
    other = "spiffe://%s/not/mine" % TD
    a(op="open", s="u", req={"resource_names": ["default", other]})
    u = a(op="recv", s="u", ms=10000)
    tap.ok(u.get("end") == "INVALID_ARGUMENT" and u.get("details") ==
           "workload is not authorized for the requested identities [%s]" % other,
           "an ID not its own: INVALID_ARGUMENT, SPIRE's message naming it, the stream ends", u)
    a(op="open", s="t", req={"type_url": "type.googleapis.com/envoy.config.cluster.v3.Cluster"})
    tap.eq(a(op="recv", s="t", ms=5000).get("end"), "INVALID_ARGUMENT", "another type_url: INVALID_ARGUMENT")
    a(op="open", s="m", req={"resource_names": ["n%d" % i for i in range(17)]})
    tap.eq(a(op="recv", s="m", ms=5000).get("end"), "INVALID_ARGUMENT", "17 names: INVALID_ARGUMENT")
    a(op="open", s="f", req={"resource_names": ["ROOTCA"]})
    for i in range(11):
        a(op="send", s="f", req={"resource_names": ["ROOTCA"], "response_nonce": "%08x" % i})
    ends = [a(op="recv", s="f", ms=5000) for _ in range(2)]
    tap.ok(any(e.get("end") == "RESOURCE_EXHAUSTED" for e in ends),
           "12 requests within a second on one stream: RESOURCE_EXHAUSTED", ends)

    # 4. the other workload, rootCA mode, once bcd holds the CRL; a revocation pushes
    tap.ok(daemon.wait_log("revocation: a new CRL taken", 10), "bcd holds the node CA's CRL",
           daemon.text())
    b(op="open", s="s", req={"node": node(rootca=True, big=False),
                             "resource_names": ["default", "ROOTCA"]})
    rb1 = b(op="recv", s="s", ms=15000)
    rb = by_name(rb1)
    vc = (rb.get("ROOTCA") or {}).get("validation_context") or {}
    chain_b, key_b = tls_of(rb.get("default"))
    id_b = uri_sans(certs(chain_b)[0])[0] if chain_b else ""
    tap.ok(id_b.startswith("spiffe://%s/" % TD) and id_b != id_a,
           "the second workload: an SVID of its own session", (id_a, id_b))
    tap.ok(vc.get("trusted_ca", {}).get("inline_bytes") == (tds or {}).get(TD) and
           "custom_validator_config" not in vc and
           "BEGIN X509 CRL" in vc.get("crl", {}).get("inline_bytes", "") and
           vc.get("only_verify_leaf_cert_crl") is True,
           "disable_spiffe_cert_validation: ROOTCA as trusted_ca, with the CRL (PEM) and "
           "only_verify_leaf_cert_crl", {k: (v if k == "only_verify_leaf_cert_crl" else "...")
                                         for k, v in vc.items()})
    b(op="send", s="s", req={"version_info": "1", "response_nonce": rb1.get("nonce", ""),
                             "resource_names": ["default", "ROOTCA"]})
    serial_a = leaf.serial_number
    env.psql("SELECT bc_join.revoke_certificate('%032x', 'keyCompromise')" % serial_a)
    t0 = time.time()
    r4 = a(op="recv", s="s", ms=15000)
    chain4, key4 = tls_of(by_name(r4).get("default"))
    leaf4 = certs(chain4)[0] if chain4 else None
    tap.ok(r4.get("version_info") == "4" and leaf4 is not None and
           leaf4.serial_number != serial_a and uri_sans(leaf4) == [id_a] and key4 != key,
           "its session certificate revoked: a new SVID (another serial, key) pushed as "
           "version 4 within %.1f s" % (time.time() - t0), r4.get("version_info"))
    crl = None
    deadline = time.time() + 10
    while time.time() < deadline:
        rb2 = b(op="recv", s="s", ms=int((deadline - time.time()) * 1000) + 1)
        pem_crl = ((by_name(rb2).get("ROOTCA") or {}).get("validation_context") or {}) \
            .get("crl", {}).get("inline_bytes")
        if not pem_crl:
            break
        crl = x509.load_pem_x509_crl(pem_crl.encode())
        if crl.get_revoked_certificate_by_serial_number(serial_a) is not None:
            break
    tap.ok(crl is not None and crl.get_revoked_certificate_by_serial_number(serial_a) and
           int(rb2.get("version_info", "0")) >= 2 and tls_of(by_name(rb2).get("default"))[0] == chain_b,
           "the other workload (rootCA mode): the new CRL listing that serial pushed, its SVID "
           "unchanged", rb2.get("version_info"))

    # 5. reconnect; FetchSecrets; DeltaSecrets; a caller no rule names
    a(op="close", s="s")
    a(op="open", s="s2", req={"resource_names": ["default"]})
    r5 = a(op="recv", s="s2", ms=5000)
    tap.ok(r5.get("version_info") == "1" and tls_of(by_name(r5).get("default"))[0] == chain4,
           "a new stream: version 1 again (per stream), the current SVID", r5.get("version_info"))
    fe = a(op="fetch", req={"resource_names": ["ROOTCA"]})
    tap.ok(fe.get("version_info") == "" and fe.get("nonce") == "" and
           spiffe_tds(by_name(fe).get("ROOTCA")) == tds,
           "FetchSecrets: ROOTCA, version \"\" and no nonce", {k: v for k, v in fe.items()
                                                               if k != "resources"})
    fe = a(op="fetch", req={})
    res = by_name(fe)
    tap.ok(sorted(res) == ["ROOTCA", "default"] and tls_of(res.get("default"))[0] == chain4 and
           spiffe_tds(res.get("ROOTCA")) == tds,
           "FetchSecrets without names: everything (default, ROOTCA; no other domain)", sorted(res))
    fe = a(op="fetch", req={"resource_names": ["ALL", "spiffe://" + TD]})
    res = by_name(fe)
    tap.ok(spiffe_tds(res.get("ALL")) == tds and spiffe_tds(res.get("spiffe://" + TD)) == tds,
           "ALL and spiffe://%s: the SPIFFE validator with the domains this caller may see" % TD,
           sorted(res))
    old_envoy = node(big=False)
    old_envoy["user_agent_build_version"]["version"] = {"major_number": 1, "minor_number": 17,
                                                        "patch": 2}
    fe = a(op="fetch", req={"node": old_envoy, "resource_names": ["ROOTCA"]})
    vc = (by_name(fe).get("ROOTCA") or {}).get("validation_context") or {}
    tap.ok(vc.get("trusted_ca", {}).get("inline_bytes") == (tds or {}).get(TD) and
           "custom_validator_config" not in vc, "an Envoy 1.17.2 node: ROOTCA as trusted_ca",
           sorted(vc))
    fe = a(op="fetch", req={"node": old_envoy, "resource_names": ["ALL"]})
    tap.eq(fe.get("end"), "INTERNAL", "... and ALL, which needs the SPIFFE validator: INTERNAL "
           "(SPIRE's answer)", fe)
    tap.eq(a(op="delta").get("end"), "UNIMPLEMENTED", "DeltaSecrets: UNIMPLEMENTED")
    n = Client(env, node_none, wsock)
    n(op="open", s="s", req={"resource_names": ["default"]})
    tap.eq(n(op="recv", s="s", ms=5000).get("end"), "PERMISSION_DENIED",
           "a caller no rule names: PERMISSION_DENIED")

    # 6. mTLS with what SDS gave each workload
    a_crt, a_key = write(env, "a.crt", chain4 or ""), write(env, "a.key", key4 or "")
    b_crt, b_key = write(env, "b.crt", chain_b or ""), write(env, "b.key", key_b or "")
    port = free_port()
    srv = subprocess.Popen(["openssl", "s_server", "-accept", "127.0.0.1:%d" % port, "-naccept", "1",
                            "-cert", a_crt, "-cert_chain", a_crt, "-key", a_key, "-CAfile", bundle,
                            "-Verify", "2",
                            "-verify_return_error"],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    cli = None
    for _ in range(30):
        cli = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % port,
                              "-cert", b_crt, "-cert_chain", b_crt, "-key", b_key, "-CAfile", bundle,
                              "-verify_return_error", "-showcerts"],
                             input="", stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=10)
        if "connect:errno" not in cli.stdout and "Connection refused" not in cli.stdout:
            break
        time.sleep(0.1)
    try:
        srv_out, _ = srv.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        srv.kill()
        srv_out, _ = srv.communicate()
    peer = certs(cli.stdout)
    tap.ok("Verify return code: 0 (ok)" in cli.stdout and peer and uri_sans(peer[0]) == [id_a],
           "s_client (workload B's PEMs) verifies s_server (A's) with ROOTCA: the peer is %s" % id_a,
           cli.stdout[-1500:])
    seen = certs(srv_out)
    tap.ok(seen and uri_sans(seen[0]) == [id_b] and "ERROR" not in srv_out,
           "s_server -Verify 2 verified the client's SVID: the peer is %s" % id_b, srv_out[-1500:])

    # a renewal at half life, pushed: 15 s at the shortest session_ttl, so only when asked
    # (BCJ_SDS_RENEWAL=1); a new SVID's push is the same path as the revocation's above
    if renewal:
        t0 = time.time()
        got = None
        while time.time() - t0 < 30:
            m = b(op="recv", s="s", ms=30000)
            c = tls_of(by_name(m).get("default"))[0]
            if "end" in m or m.get("timeout") or (c and c != chain_b):
                got = m
                break
        c = tls_of(by_name(got or {}).get("default"))[0]
        leaf_b, new_b = certs(chain_b)[0], certs(c)[0] if c else None
        tap.ok(new_b is not None and new_b.serial_number != leaf_b.serial_number and
               uri_sans(new_b) == [id_b] and
               leaf_b.not_valid_after.replace(tzinfo=None).timestamp() > time.time() - 1,
               "the renewed SVID (another serial, the same ID) pushed on the stream before the "
               "first one's notAfter (%.1f s after asking)" % (time.time() - t0),
               {k: v for k, v in (got or {}).items() if k != "resources"})
        env.psql("ALTER DATABASE agent RESET bc_join.session_ttl")
    else:
        tap.skip("a renewal at half life pushed", "15 s at the shortest bc_join.session_ttl: "
                 "BCJ_SDS_RENEWAL=1 runs it")
    for c in (a, b, n):
        c.stop()
    daemon.stop()
    tap.eq(daemon.rc, 0, "bcd stops cleanly (SIGTERM)", daemon.text()[-3000:])


agentlib.main(body)
