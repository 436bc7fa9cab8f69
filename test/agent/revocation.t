#!/usr/bin/python3
"""revocation.t: withdrawn trust reaches bcd and what it serves (issue 45; docs/agent.md,
"Revocation").

Through the real gateway, one bcd daemon with --status-interval 1, a Workload API rule
and --hook-crl:
- a FetchX509SVID stream carries the node CA's CRL (X509SVIDResponse.crl, DER):
  `openssl crl -CAfile` verifies it against the node CA; FetchX509Bundles carries the
  same CRL; a hook with `bcd credential --crl` gets crl.pem, the same CRL;
- bc_join.revoke_certificate of the session certificate the stream serves: a new SVID
  (another serial) is pushed on the same stream with a CRL listing the old serial;
  `openssl verify -crl_check -CRLfile` says the old one is revoked, the new one is not;
- bc_join.revoke_node: within a few status intervals bcd logs REVOKED, a hook is refused
  (77) with a message naming the revocation, the stream ends PERMISSION_DENIED naming it,
  `bcd status` says revoked (serial, reason, time);
- with the gateway's OCSP responder installed (bc_join.ocsp_response and POST /v1/ocsp):
  a second bcd without the CRL (no Workload API, no --hook-crl) learns its revocation by
  OCSP alone (skipped before then).
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentlib  # noqa: E402
import sessionlib  # noqa: E402


def wait_for(cond, timeout):
    """Poll cond until true; True when it became true within timeout seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.2)
    return False


def write(path, data):
    """Write bytes to path; the path."""
    with open(path, "wb") as f:
        f.write(data)
    return path


def openssl(*args):
    """Run the openssl CLI; (exit status, stdout + stderr)."""
    r = subprocess.run(["openssl"] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    return r.returncode, r.stdout


def split_der(blob):
    """Certificates concatenated in DER (python3-cryptography)."""
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


def load_pems(data):
    """Every certificate of PEM text (bytes)."""
    from cryptography import x509
    end = b"-----END CERTIFICATE-----"
    return [x509.load_pem_x509_certificate(part + end) for part in data.split(end)
            if b"-----BEGIN CERTIFICATE-----" in part]


def pem(certs):
    """PEM of certificates."""
    from cryptography.hazmat.primitives import serialization
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def body(tap, env):
    from cryptography import x509
    state = os.path.join(env.dir, "state")
    tok1 = env.token_file("n1")
    r = env.bcd("run", *env.run_args(state, token_file=tok1, extra=["--once"]))
    if not tap.ok(r.returncode == 0, "the node joins", r.stdout + r.stderr):
        return
    node = r.stdout.splitlines()[0].rsplit("/", 1)[1]
    rt = sessionlib.runtime_dir(env)
    sock = os.path.join(rt, "bcd", "bcd.sock")
    wsock = os.path.join(rt, "bcd", "workload.sock")
    # its token file holds the spent token: a revoked bcd does not join again by itself
    p = sessionlib.start_daemon(env, "bcd-rev", rt, env.run_args(state, token_file=tok1) + [
        "--workload-rule", "uid:0=>session=wl", "--status-interval", "1", "--hook-crl"])
    tap.ok(sessionlib.wait_socket(p, sock), "the daemon serves its sockets", p.text())
    tap.ok(p.wait_log("revocation: a new CRL taken", 20), "bcd takes the node CA's CRL", p.text())
    import ssl
    import urllib.error
    import urllib.request
    ctx = ssl.create_default_context(cafile=env.ca)
    etag = urllib.request.urlopen(env.gw_url + "/v1/crl", context=ctx).headers.get("ETag")
    if etag:
        tap.ok(p.wait_log("304 Not Modified", 10),
               "the gateway sends an ETag: bcd asks If-None-Match and gets 304", p.text())
    else:
        tap.skip("If-None-Match answered 304", "this gateway sends no ETag on /v1/crl")

    # the root and the node CA (the issuing intermediate) of the node's chain
    chain = load_pems(open(os.path.join(state, "node-chain.pem"), "rb").read())
    node_serial = "%032x" % chain[0].serial_number
    cas = write(os.path.join(env.dir, "cas.pem"), pem(chain[1:]))
    with open(env.service_keys) as f:
        import json
        root_pem = json.load(f)["nodeCa"].encode()
    roots = write(os.path.join(env.dir, "root.pem"),
                  pem(load_pems(root_pem)[-1:]))

    # gRPC in a child process (agentlib.Workload): this one forks on (psql, openssl, hooks)
    wl = agentlib.Workload(env, agentlib.workload_stubs(env), wsock)
    pb = wl.pb
    stream = wl.stream("FetchX509SVID", pb.X509SVIDRequest(), timeout=120)
    first = next(stream)
    tap.eq((len(first.svids), len(first.crl)), (1, 1),
           "FetchX509SVID: one X509-SVID and one CRL (X509SVIDResponse.crl)")
    crl1 = write(os.path.join(env.dir, "crl1.der"), first.crl[0])
    rc, out = openssl("crl", "-inform", "DER", "-in", crl1, "-CAfile", cas, "-noout")
    tap.ok(rc == 0 and "verify OK" in out, "openssl crl verifies the CRL with the node CA", out)
    b = wl.first("FetchX509Bundles", pb.X509BundlesRequest(), timeout=10)
    tap.eq(list(b.crl), list(first.crl), "FetchX509Bundles carries the same CRL (field 1)")

    sess = os.path.join(rt, "sess")
    os.makedirs(sess, mode=0o700)
    h = sessionlib.hook(env, rt, sock, "s1", sess, extra=["--crl"])
    lines = h.stdout.splitlines()
    tap.ok(h.returncode == 0 and len(lines) == 4 and lines[3] == os.path.join(sess, "crl.pem"),
           "bcd credential --crl: the key, the chain, notAfter and crl.pem", (h.stdout, h.stderr))
    if os.path.exists(os.path.join(sess, "crl.pem")):
        rc, der = 0, subprocess.run(["openssl", "crl", "-in", os.path.join(sess, "crl.pem"),
                                     "-outform", "DER"], stdout=subprocess.PIPE).stdout
        crl_now = wl.first("FetchX509Bundles", pb.X509BundlesRequest(), timeout=10).crl
        tap.ok(der in list(crl_now) + list(first.crl), "crl.pem is the CRL bcd holds (PEM)")
        tap.eq(oct(os.stat(os.path.join(sess, "crl.pem")).st_mode & 0o777), "0o600", "crl.pem is 0600")
    else:
        tap.ok(False, "crl.pem is the CRL bcd holds (PEM)")
        tap.ok(False, "crl.pem is 0600")

    # the served session's certificate revoked: a new SVID, the CRL listing the old one
    leaf0 = split_der(first.svids[0].x509_svid)
    old_serial = "%032x" % leaf0[0].serial_number
    env.psql("SELECT bc_join.revoke_certificate('%s', 'keyCompromise')" % old_serial)
    t0 = time.time()
    nxt = None
    pushed = 0
    stream.cancel_in(30)  # no new SVID in 30 s: the stream is given up
    try:
        for m in stream:
            pushed += 1
            if "%032x" % split_der(m.svids[0].x509_svid)[0].serial_number != old_serial:
                nxt = m
                break
    except agentlib.WorkloadError as e:
        tap.note("the stream: %s %s" % (e.code, e.details))
    stream.cancel_in(None)
    tap.ok(nxt is not None, "revoke_certificate of the served SVID: a new SVID (another serial) "
           "pushed on the same stream (%d message(s), %.1f s)" % (pushed, time.time() - t0))
    if nxt is None:
        return
    crl = x509.load_der_x509_crl(nxt.crl[0]) if len(nxt.crl) == 1 else None
    tap.ok(crl is not None and
           crl.get_revoked_certificate_by_serial_number(leaf0[0].serial_number) is not None,
           "the message of the new SVID carries a CRL listing the old serial")
    crl2 = write(os.path.join(env.dir, "crl2.pem"),
                 crl.public_bytes(__import__("cryptography.hazmat.primitives.serialization",
                                             fromlist=["Encoding"]).Encoding.PEM))
    old_pem = write(os.path.join(env.dir, "old.pem"), pem(leaf0[:1]))
    new_pem = write(os.path.join(env.dir, "new.pem"), pem(split_der(nxt.svids[0].x509_svid)[:1]))
    rc, out = openssl("verify", "-crl_check", "-CRLfile", crl2, "-CAfile", roots, "-untrusted",
                      cas, old_pem)
    tap.ok(rc != 0 and "revoked" in out, "openssl verify -crl_check: the old SVID is revoked", out)
    rc, out = openssl("verify", "-crl_check", "-CRLfile", crl2, "-CAfile", roots, "-untrusted",
                      cas, new_pem)
    tap.ok(rc == 0, "openssl verify -crl_check: the new SVID verifies", out)

    # the node revoked: within a few status intervals hooks refused, the stream ended, status
    st = sessionlib.status(env, rt, sock)
    tap.ok(st is not None and st.get("revoked") is False and st.get("crlHeld") is True,
           "bcd status: not revoked, a CRL held", st)
    env.psql("SELECT bc_join.revoke_node('%s', 'keyCompromise')" % node)
    t0 = time.time()
    tap.ok(p.wait_log("revocation: REVOKED", 15),
           "bcd logs REVOKED within %.1f s of revoke_node" % (time.time() - t0), p.text())
    code, details = None, ""
    try:
        for _ in stream:
            pass
    except agentlib.WorkloadError as e:
        code, details = e.code, e.details
    tap.ok(code == "PERMISSION_DENIED" and "revoked" in details and
           node_serial in details,
           "the stream ends PERMISSION_DENIED naming the revocation", (code, details))
    h = sessionlib.hook(env, rt, sock, "s2", sess)
    tap.ok(h.returncode == sessionlib.EX_NOPERM and "revoked" in h.stderr and
           node_serial in h.stderr and "keyCompromise" in h.stderr,
           "a hook is refused (77) with the revocation: serial and reason", (h.returncode, h.stderr))
    try:
        wl.first("FetchX509SVID", pb.X509SVIDRequest(), timeout=10)
        code = "OK"
    except agentlib.WorkloadError as e:
        code, details = e.code, e.details
    wl.stop()
    tap.ok(code == "PERMISSION_DENIED" and "revoked" in details,
           "a new FetchX509SVID: PERMISSION_DENIED naming the revocation", (code, details))
    st = sessionlib.status(env, rt, sock)
    rev = (st or {}).get("revoked") or {}
    tap.ok(rev.get("serial") == node_serial and rev.get("reason") == "keyCompromise" and
           rev.get("at"), "bcd status says revoked: serial, reason, time", st)
    prom = sessionlib.status(env, rt, sock, prometheus=True) or ""
    tap.ok("\nbcd_node_revoked 1\n" in prom, "bcd status --prometheus: bcd_node_revoked 1")
    tap.ok(p.wait_log("the node stays revoked until an operator lets it back", 5) and
           "joining again" not in p.text(),
           "it stays revoked: no join again with the token it held", p.text())
    # an operator's new token in the token file: the node comes back, served again
    with open(tok1, "w") as f:
        f.write(env.token(1) + "\n")
    t0 = time.time()
    back = sessionlib.poll_status(env, rt, sock, lambda s: s.get("revoked") is False, 20)
    tap.ok(back is not None and back["nodeCredential"]["serial"] != node_serial,
           "a new token in --token-file: bcd joins again within %.1f s, no longer revoked "
           "(another serial)" % (time.time() - t0), (back, p.text()[-2000:]))
    h = sessionlib.hook(env, rt, sock, "s3", sess)
    tap.ok(h.returncode == 0, "hooks are served again", (h.returncode, h.stderr))
    rc, _ = p.stop()
    tap.ok(rc == 0 and "Sanitizer" not in p.text(), "bcd stops cleanly (no sanitizer report)",
           p.text()[-3000:])

    # cACompromise: not the revoked state, a renewal at once (with a new key)
    state3 = os.path.join(env.dir, "state3")
    r = env.bcd("run", *env.run_args(state3, token_file=env.token_file("n3"), extra=["--once"]))
    if tap.ok(r.returncode == 0, "a third node joins", r.stdout + r.stderr):
        chain3 = load_pems(open(os.path.join(state3, "node-chain.pem"), "rb").read())
        serial3 = "%032x" % chain3[0].serial_number
        rt3 = sessionlib.runtime_dir(env, "rt3")
        p3 = sessionlib.start_daemon(env, "bcd-cacomp", rt3, env.run_args(state3) + [
            "--workload-api", "off", "--hook-crl", "--status-interval", "1"])
        sessionlib.wait_socket(p3, os.path.join(rt3, "bcd", "bcd.sock"))
        p3.wait_log("revocation: a new CRL taken", 15)
        env.psql("SELECT bc_join.revoke_certificate('%s', 'cACompromise')" % serial3)
        tap.ok(p3.wait_log("renewing now: the node certificate %s was revoked for a CA "
                           "compromise" % serial3, 15),
               "revoked cACompromise: bcd renews at once", p3.text())
        tap.ok(p3.wait_log("renew:", 15) and "REVOKED" not in p3.text(),
               "it asks the service for a renewal (a new key), and is not in the revoked state",
               p3.text())
        rc, _ = p3.stop()
        tap.ok(rc == 0 and "Sanitizer" not in p3.text(), "it stops cleanly", p3.text()[-3000:])

    # OCSP end to end, once the extension and the gateway have it
    why = None
    if not env.has_function("bc_join.ocsp_response(bytea)"):
        why = "bc_join.ocsp_response is not installed"
    elif not os.path.exists(os.path.join(env.keys, "ocsp.key")):
        why = "bc-join-keygen made no ocsp.key"
    else:
        rq = urllib.request.Request(env.gw_url + "/v1/ocsp", data=b"0", method="POST",
                                    headers={"Content-Type": "application/ocsp-request"})
        try:
            urllib.request.urlopen(rq, context=ctx)
        except urllib.error.HTTPError as e:
            if e.code == 404:
                why = "the gateway has no POST /v1/ocsp"
    if why:
        tap.skip("the OCSP self-check end to end", why)
    else:
        ocsp_end_to_end(tap, env)
    ca_compromise(tap, env)
    key_compromise(tap, env)


def ocsp_end_to_end(tap, env):
    """A bcd without the CRL learns its revocation by OCSP alone."""
    state2 = os.path.join(env.dir, "state2")
    r = env.bcd("run", *env.run_args(state2, token_file=env.token_file("n2"), extra=["--once"]))
    if not tap.ok(r.returncode == 0, "a second node joins", r.stdout + r.stderr):
        return
    node2 = r.stdout.splitlines()[0].rsplit("/", 1)[1]
    rt2 = sessionlib.runtime_dir(env, "rt2")
    sock2 = os.path.join(rt2, "bcd", "bcd.sock")
    p2 = sessionlib.start_daemon(env, "bcd-ocsp", rt2, env.run_args(state2) + [
        "--workload-api", "off", "--status-interval", "1"])
    tap.ok(sessionlib.wait_socket(p2, sock2) and p2.wait_log("OCSP says the node certificate", 15),
           "a bcd without the CRL: OCSP says its certificate is good", p2.text())
    env.psql("SELECT bc_join.revoke_node('%s', 'privilegeWithdrawn')" % node2)
    t0 = time.time()
    ok = wait_for(lambda: "as OCSP says" in p2.text(), 15)
    tap.ok(ok, "revoke_node: bcd learns it by OCSP within %.1f s" % (time.time() - t0), p2.text())
    sess2 = os.path.join(rt2, "sess")
    os.makedirs(sess2, mode=0o700)
    h = sessionlib.hook(env, rt2, sock2, "s1", sess2)
    tap.ok(h.returncode == sessionlib.EX_NOPERM and "said by OCSP" in h.stderr and
           "privilegeWithdrawn" in h.stderr, "its hooks are refused, naming OCSP and the reason",
           (h.returncode, h.stderr))
    rc, _ = p2.stop()
    tap.ok(rc == 0 and "Sanitizer" not in p2.text(), "it stops cleanly", p2.text()[-3000:])


def ca_compromise(tap, env):
    """The node CA's intermediate rotated, then marked compromised: bcd learns its
    certificate's cACompromise from a CRL signed by the new intermediate (which it takes
    from GET /v1/service-keys), renews at once with a new key, under the new intermediate."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    keygen = os.path.join(agentlib.TOP, "tools", "bc-join-keygen")
    if not env.has_function("bc_join.mark_ca_compromised(text)") or \
            "--rotate-intermediate" not in open(keygen).read():
        tap.skip("a CA compromise end to end", "no bc_join.mark_ca_compromised or keygen rotation")
        return
    state4 = os.path.join(env.dir, "state4")
    r = env.bcd("run", *env.run_args(state4, token_file=env.token_file("n4"), extra=["--once"]))
    if not tap.ok(r.returncode == 0, "a fourth node joins", r.stdout + r.stderr):
        return
    chain = load_pems(open(os.path.join(state4, "node-chain.pem"), "rb").read())
    old_serial = "%032x" % chain[0].serial_number
    spki = lambda c: c.public_key().public_bytes(  # noqa: E731
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    rt4 = sessionlib.runtime_dir(env, "rt4")
    sock4 = os.path.join(rt4, "bcd", "bcd.sock")
    p4 = sessionlib.start_daemon(env, "bcd-ca", rt4, env.run_args(state4) + [
        "--workload-api", "off", "--hook-crl", "--status-interval", "1"])
    sessionlib.wait_socket(p4, sock4)
    p4.wait_log("revocation: a new CRL taken", 15)
    subprocess.run([keygen, "--rotate-intermediate", env.keys, "--root-dir", env.keys + ".root"],
                   check=True, stdout=subprocess.DEVNULL)
    import ssl
    import urllib.error
    import urllib.request
    try:
        code = urllib.request.urlopen(env.gw_url + "/v1/service-keys", timeout=10,
                                      context=ssl.create_default_context(cafile=env.ca)).status
    except urllib.error.HTTPError as e:
        code = e.code
    tap.eq(code, 200, "GET /v1/service-keys answers (bcd takes the new intermediate from it; "
           "a 503 here is the gateway's role refused by signed_service_keys(), see the gateway log)")
    old_ca = chain[1].public_bytes(serialization.Encoding.PEM).decode()
    n = env.psql("SELECT bc_join.mark_ca_compromised($q$%s$q$)" % old_ca)
    t0 = time.time()
    tap.ok(n not in ("", "0"), "the old intermediate marked compromised: %s certificates revoked" % n)
    st = sessionlib.poll_status(env, rt4, sock4, lambda s: s.get("nodeCredential", {}).get(
        "serial") not in (None, old_serial), 20)
    tap.ok(st is not None and st.get("revoked") is False,
           "bcd renews within %.1f s: another serial, not revoked" % (time.time() - t0),
           (st, p4.text()[-3000:]))
    new = load_pems(open(os.path.join(state4, "node-chain.pem"), "rb").read())
    tap.ok(new[0].issuer != chain[0].issuer and spki(new[0]) != spki(chain[0]),
           "its new certificate is of the new intermediate, for a new key",
           (new[0].issuer, chain[0].issuer))
    sess = os.path.join(rt4, "sess")
    os.makedirs(sess, mode=0o700)
    h = sessionlib.hook(env, rt4, sock4, "s1", sess)
    tap.ok(h.returncode == 0, "hooks are served under the new intermediate", (h.returncode, h.stderr))
    rc, _ = p4.stop()
    tap.ok(rc == 0 and "Sanitizer" not in p4.text(), "it stops cleanly", p4.text()[-3000:])


def pinned(state):
    """The signing kids bcd keeps in its state directory ([] when none)."""
    import json
    path = os.path.join(state, "service-keys.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [k["kid"] for k in json.load(f)["set"]["signingKeys"]]


def key_compromise(tap, env):
    """A service signing key marked compromised (after --stage and --promote): a running
    bcd drops it within a few status intervals (the watch takes the service keys up every
    6 intervals), with no renewal and no unknown kid to make it look."""
    import json
    keygen = os.path.join(agentlib.TOP, "tools", "bc-join-keygen")
    if not env.has_function("bc_join.mark_key_compromised(text)"):
        tap.skip("a signing key compromise seen by bcd", "no bc_join.mark_key_compromised")
        return
    state5 = os.path.join(env.dir, "state5")
    r = env.bcd("run", *env.run_args(state5, token_file=env.token_file("n5"), extra=["--once"]))
    if not tap.ok(r.returncode == 0, "a fifth node joins", r.stdout + r.stderr):
        return
    rt5 = sessionlib.runtime_dir(env, "rt5")
    sock5 = os.path.join(rt5, "bcd", "bcd.sock")
    p5 = sessionlib.start_daemon(env, "bcd-keys", rt5, env.run_args(state5) + [
        "--workload-api", "off", "--status-interval", "1"])
    sessionlib.wait_socket(p5, sock5)
    kids = lambda: [k["kid"] for k in json.loads(env.psql("SELECT bc_join.service_keys()->'signingKeys'"))]  # noqa: E731
    before = kids()
    if not tap.ok(len(before) == 1, "one signing key to begin with", before):
        return
    old = before[0]
    subprocess.run([keygen, "--stage", env.keys], check=True, stdout=subprocess.DEVNULL)
    new = [k for k in kids() if k != old][0]
    tap.ok(wait_for(lambda: new in pinned(state5), 20),
           "bcd takes the staged signing key up by itself (no renewal)", (pinned(state5), p5.text()[-2000:]))
    subprocess.run([keygen, "--promote", env.keys], check=True, stdout=subprocess.DEVNULL)
    env.psql("SELECT bc_join.mark_key_compromised('%s')" % old)
    t0 = time.time()
    tap.ok(wait_for(lambda: old not in pinned(state5) and new in pinned(state5), 20),
           "the signing key marked compromised is dropped by the running bcd (%.1f s)" % (time.time() - t0),
           (old, pinned(state5), p5.text()[-2000:]))
    rc, _ = p5.stop()
    tap.ok(rc == 0 and "Sanitizer" not in p5.text(), "it stops cleanly", p5.text()[-3000:])


def setup(env):
    """The cluster, the TLS CA and the gateway, whose copy of GET /v1/service-keys lives 1 s
    (default 10 s: bcd takes a rotated intermediate from it)."""
    env.start_cluster("agents")
    env.make_tls()
    env.gateway("--service-keys-max-age", "1")


if __name__ == "__main__":
    agentlib.run(agentlib.Env(), setup, body)
