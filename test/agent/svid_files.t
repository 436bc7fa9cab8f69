#!/usr/bin/python3
"""svid_files.t: files mode (#46.5; docs/agent.md, "Files mode").

One bcd daemon (--status-interval 1) keeps two identities in two directories
(--svid-files 'DIR=>session=S'): the server's, reloaded by a wrapper script that runs
`nginx -s reload` (--svid-files-reload), and a client's.  Debian's nginx, run with its own
prefix, configuration and pid file in the test's directory on a port below the ephemeral
range, reads ssl_certificate, ssl_certificate_key and ssl_client_certificate from the
server's directory and requires a client certificate:
- svid.pem (leaf and intermediates, no root), svid_key.pem 0600, svid_bundle.pem (the
  trust domain's root), crl.pem once the CRL is held; no temporary file left behind (one
  an earlier bcd left is removed at start);
- `openssl s_client` with the client's SVID: "Verify return code: 0" against
  svid_bundle.pem, the server's certificate is svid.pem's (its serial, its URI SAN), and
  nginx answers SUCCESS with the client certificate, whose URI SAN is the client
  workload's SPIFFE ID;
- a renewal (bc_join.revoke_certificate of the server's SVID: bcd provisions it again at
  once): new files, the reload run and done, and s_client then sees the new serial;
- bc_join.revoke_node: svid_key.pem and svid.pem are removed from both directories (as
  the Workload API ends its streams);
- a symbolic link planted as svid_key.pem before the start is replaced by the key, its
  target left untouched;
- refused at start (bcd exits non-zero, saying why): a DIR writable by others, a DIR
  under /tmp (a directory above it writable by others), and a reload executable
  writable by others.

Federated trust domains (#46, item 5): the database federates with a second trust domain,
b.bc-join.test, as `static` (a root and a workload certificate of B made here with
OpenSSL); the gateway serves its signed /v1/trust-bundles at most 1 s old
(--service-keys-max-age 1).  A third directory, 'FED=>session=client,context=c1,
federates=b.bc-join.test' (the client's identity again), with its own reload:
- FED/federated/b.bc-join.test.pem holds B's root alone: B's workload certificate
  verifies against it (openssl verify) and not against svid_bundle.pem, which holds the
  own root only; the reload runs once, after the SVID's files and B's file are written;
- a symbolic link planted there as b.bc-join.test.pem is replaced, its target untouched;
  a file of a domain not in the set (c.bc-join.test.pem) and a temporary file an earlier
  bcd left are removed;
- the directories without federates= get no federated/ file (one an earlier configuration
  left in the client's directory is removed);
- B's bundle emptied in the database (set_federated_bundle, keys []): bcd takes up the new
  generation, removes federated/b.bc-join.test.pem and runs the reload again, no restart;
- refused at start: federates= naming a trust domain that cannot be a file name ("..").
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentlib  # noqa: E402
import sessionlib  # noqa: E402

NGINX = "/usr/sbin/nginx"

NGINX_CONF = """
daemon off;
master_process on;
worker_processes 1;
pid {p}/nginx.pid;
error_log {p}/error.log info;
events {{ worker_connections 32; }}
http {{
  access_log off;
  client_body_temp_path {p}/body;
  proxy_temp_path {p}/proxy;
  fastcgi_temp_path {p}/fastcgi;
  uwsgi_temp_path {p}/uwsgi;
  scgi_temp_path {p}/scgi;
  server {{
    listen 127.0.0.1:{port} ssl;
    ssl_certificate {d}/svid.pem;
    ssl_certificate_key {d}/svid_key.pem;
    ssl_client_certificate {d}/svid_bundle.pem;
    ssl_verify_client on;
    ssl_verify_depth 4;
    location / {{ return 200 "$ssl_client_verify $ssl_client_escaped_cert\\n"; }}
  }}
}}
"""


def trusted_dir():
    """A directory only root can change, every directory above it too (/run):
    bcd refuses a reload executable under /tmp, where env.dir is."""
    d = tempfile.mkdtemp(prefix="bcj-files-", dir="/run")
    os.chmod(d, 0o755)
    return d


def write_exe(path, text, mode=0o755):
    """An executable file; its path."""
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


def load_pems(data):
    """Every certificate of PEM text (bytes)."""
    from cryptography import x509
    end = b"-----END CERTIFICATE-----"
    return [x509.load_pem_x509_certificate(part + end) for part in data.split(end)
            if b"-----BEGIN CERTIFICATE-----" in part]


def uri_san(cert):
    """The URI SANs of a certificate."""
    from cryptography import x509
    try:
        return cert.extensions.get_extension_for_class(
            x509.SubjectAlternativeName).value.get_values_for_type(x509.UniformResourceIdentifier)
    except x509.ExtensionNotFound:
        return []


def s_client(port, cli, ca):
    """openssl s_client with the client's SVID, a GET; (output, server leaf or None)."""
    r = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % port,
                        "-cert", os.path.join(cli, "svid.pem"),
                        "-key", os.path.join(cli, "svid_key.pem"),
                        "-cert_chain", os.path.join(cli, "svid.pem"),
                        "-CAfile", ca, "-verify_return_error", "-showcerts", "-ign_eof"],
                       input=b"GET / HTTP/1.0\r\n\r\n", stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=20)
    out = r.stdout.decode("utf-8", "replace")
    certs = load_pems(r.stdout)
    return out, certs[0] if certs else None


def client_uri(out):
    """The URI SAN of the client certificate nginx echoes ($ssl_client_escaped_cert)."""
    for line in out.splitlines():
        if line.startswith("SUCCESS "):
            pems = load_pems(urllib.parse.unquote(line.split(" ", 1)[1]).encode())
            return uri_san(pems[0]) if pems else []
    return None


TD_B = "b.bc-join.test"


def b64u(data):
    """base64url without padding (RFC 7515)."""
    import base64
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def domain_b(tdir):
    """A root of trust domain B and a workload certificate it issued (OpenSSL through
    cryptography): (B's bundle as a JWK Set, root PEM path, leaf PEM path)."""
    import base64
    import datetime
    import json
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "B root")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                         critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
          .add_extension(x509.SubjectAlternativeName(
              [x509.UniformResourceIdentifier("spiffe://" + TD_B)]), critical=False)
          .sign(ca_key, hashes.SHA256()))
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf = (x509.CertificateBuilder().subject_name(x509.Name([]))
            .issuer_name(ca_name).public_key(leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(
                [x509.UniformResourceIdentifier("spiffe://%s/web" % TD_B)]), critical=True)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                           False)
            .sign(ca_key, hashes.SHA256()))
    nums = ca_key.public_key().public_numbers()
    bundle = {"keys": [{"use": "x509-svid", "kty": "EC", "crv": "P-256",
                        "x": b64u(nums.x.to_bytes(32, "big")), "y": b64u(nums.y.to_bytes(32, "big")),
                        "x5c": [base64.b64encode(ca.public_bytes(serialization.Encoding.DER))
                                .decode()]}],
              "spiffe_sequence": 1}
    ca_pem = os.path.join(tdir, "b-root.pem")
    leaf_pem = os.path.join(tdir, "b-leaf.pem")
    with open(ca_pem, "wb") as f:
        f.write(ca.public_bytes(serialization.Encoding.PEM))
    with open(leaf_pem, "wb") as f:
        f.write(leaf.public_bytes(serialization.Encoding.PEM))
    return json.dumps(bundle), ca_pem, leaf_pem


def verify(ca, leaf):
    """openssl verify of leaf against ca alone: (True when it verifies, output)."""
    r = subprocess.run(["openssl", "verify", "-CAfile", ca, leaf], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    return r.returncode == 0, r.stdout.decode("utf-8", "replace")


def body(tap, env):
    tdir = trusted_dir()
    try:
        script(tap, env, tdir)
    finally:
        shutil.rmtree(tdir, ignore_errors=True)


def script(tap, env, tdir):
    from cryptography import x509
    if not os.access(NGINX, os.X_OK):
        tap.skip("files mode with nginx", "no %s (Debian package nginx)" % NGINX)
        return
    federation = env.has_function("bc_join.add_federation(text,text,text,text,jsonb)")
    if federation:
        bundle_b, root_b, leaf_b = domain_b(tdir)
        env.psql("SELECT bc_join.add_federation('%s', NULL, 'static', NULL, '%s'::jsonb)"
                 % (TD_B, bundle_b))
    state = os.path.join(env.dir, "state")
    r = env.bcd("run", *env.run_args(state, token_file=env.token_file("f"), extra=["--once"]))
    if not tap.ok(r.returncode == 0, "the host joins", r.stdout + r.stderr):
        return
    node = r.stdout.splitlines()[0].rsplit("/", 1)[1]
    srv = os.path.join(tdir, "srv")
    cli = os.path.join(tdir, "cli")
    os.mkdir(srv, 0o700)
    os.mkdir(cli, 0o700)
    prefix = os.path.join(env.dir, "nginx")
    os.mkdir(prefix, 0o755)
    port = agentlib.free_port()
    conf = os.path.join(prefix, "nginx.conf")
    with open(conf, "w") as f:
        f.write(NGINX_CONF.format(p=prefix, d=srv, port=port))
    nginx = [NGINX, "-p", prefix, "-c", conf, "-e", os.path.join(prefix, "error.log")]
    reload = write_exe(os.path.join(tdir, "reload-nginx"),
                       "#!/bin/sh\nexec %s -s reload 2>&1\n" % " ".join(nginx))

    # refusals at start: a DIR writable by others, or under /tmp; a reload executable
    # writable by others
    bad = os.path.join(tdir, "open")
    os.mkdir(bad)
    os.chmod(bad, 0o777)
    r = env.bcd("run", *env.run_args(state, extra=["--svid-files", bad + "=>session=x"]), timeout=30)
    tap.ok(r.returncode != 0 and "%s is writable by others (mode 0777)" % bad in r.stderr,
           "a DIR writable by others: bcd refuses to start, saying so", (r.returncode, r.stderr))
    under_tmp = os.path.join(env.dir, "srv")
    os.mkdir(under_tmp, 0o700)
    r = env.bcd("run", *env.run_args(state, extra=["--svid-files", under_tmp + "=>session=x"]),
                timeout=30)
    tap.ok(r.returncode != 0 and "/tmp is writable by others" in r.stderr,
           "a DIR under /tmp (writable by others, a link could be swapped on the way): refused",
           (r.returncode, r.stderr))
    loose = write_exe(os.path.join(tdir, "loose"), "#!/bin/sh\nexit 0\n", 0o757)
    os.chmod(loose, 0o757)
    r = env.bcd("run", *env.run_args(state, extra=[
        "--svid-files", srv + "=>session=web", "--svid-files-reload", srv + "=" + loose]),
        timeout=30)
    tap.ok(r.returncode != 0 and "--svid-files-reload %s is refused" % loose in r.stderr and
           "writable by others" in r.stderr,
           "a reload executable writable by others: bcd refuses to start, saying so",
           (r.returncode, r.stderr))

    # a third directory, federated with B, the client's identity again: a link planted as
    # B's file, a domain's file no longer in the set, a temporary file an earlier bcd left
    fed = os.path.join(tdir, "fed")
    fed_sub = os.path.join(fed, "federated")
    os.mkdir(fed, 0o700)
    os.mkdir(fed_sub, 0o755)
    victim_b = os.path.join(env.dir, "victim-b")
    with open(victim_b, "w") as f:
        f.write("not a bundle\n")
    os.symlink(victim_b, os.path.join(fed_sub, TD_B + ".pem"))
    for stale in ("c.bc-join.test.pem", ".%s.pem.tmp.0011223344556677" % TD_B):
        with open(os.path.join(fed_sub, stale), "w") as f:
            f.write("stale\n")
    # what an earlier configuration with federates= left in a directory that has none now
    os.mkdir(os.path.join(cli, "federated"), 0o755)
    with open(os.path.join(cli, "federated", "old.bc-join.test.pem"), "w") as f:
        f.write("old\n")
    reload_fed = write_exe(os.path.join(tdir, "reload-fed"), "#!/bin/sh\nexit 0\n")
    fed_args = ["--svid-files", fed + "=>session=client,context=c1,federates=" + TD_B,
                "--svid-files-reload", fed + "=" + reload_fed] if federation else []

    # a symbolic link planted as svid_key.pem
    victim = os.path.join(env.dir, "victim")
    with open(victim, "w") as f:
        f.write("not a key\n")
    os.symlink(victim, os.path.join(srv, "svid_key.pem"))
    # what a bcd killed between a write and its rename leaves (a key among them)
    with open(os.path.join(srv, ".svid_key.pem.tmp.0011223344556677"), "w") as f:
        f.write("an old key\n")

    rt = sessionlib.runtime_dir(env)
    p = sessionlib.start_daemon(env, "bcd-files", rt, env.run_args(state, extra=[
        "--svid-files", srv + "=>session=web",
        "--svid-files", cli + "/=>session=client,context=c1",
        "--svid-files-reload", srv + "=" + reload,
        "--status-interval", "1"] + fed_args))
    t_start = time.time()
    ok = p.wait_log("files: %s: a new" % srv, 20) and p.wait_log("files: %s: a new" % cli, 10)
    tap.ok(ok, "bcd writes both directories", p.text())
    if not ok:
        return
    if federation:
        fed_ok = federated_first(tap, env, p, fed, cli, srv, reload_fed, victim_b, root_b, leaf_b)
        # B's bundle emptied: taken up by bcd's watch (every 6 status intervals), checked below
        env.psql("""SELECT bc_join.set_federated_bundle('%s', '{"keys": [], "spiffe_sequence": 2}')"""
                 % TD_B)
    else:
        tap.skip("federated/", "bc_join.add_federation is not installed")
    # federates= naming a trust domain that cannot be a file name (refused before the state
    # directory is locked: run while the daemon waits for the watch)
    r = env.bcd("run", *env.run_args(state, extra=[
        "--svid-files", srv + "=>session=web,federates=b.bc-join.test+.."]), timeout=30)
    tap.ok(r.returncode != 0 and "federates=: '..' cannot name a file" in r.stderr,
           "federates= naming '..': bcd refuses to start, saying so", (r.returncode, r.stderr))
    key = os.path.join(srv, "svid_key.pem")
    tap.ok(not os.path.islink(key) and open(victim).read() == "not a key\n",
           "the link planted as svid_key.pem is replaced, its target untouched")
    tap.eq(oct(agentlib.mode(key)), "0o600", "svid_key.pem is 0600")
    chain = load_pems(open(os.path.join(srv, "svid.pem"), "rb").read())
    roots = load_pems(open(os.path.join(srv, "svid_bundle.pem"), "rb").read())
    tap.ok(len(chain) >= 1 and all(c.issuer != c.subject for c in chain) and len(roots) == 1 and
           roots[0].issuer == roots[0].subject,
           "svid.pem: the leaf and its intermediates, no root; svid_bundle.pem: the root",
           ([c.subject for c in chain], [c.subject for c in roots]))
    spiffe_srv = uri_san(chain[0])
    spiffe_cli = uri_san(load_pems(open(os.path.join(cli, "svid.pem"), "rb").read())[0])
    tap.ok(len(spiffe_srv) == 1 and spiffe_srv[0].startswith("spiffe://" + agentlib.TRUST_DOMAIN)
           and len(spiffe_cli) == 1 and spiffe_cli != spiffe_srv,
           "each leaf has one URI SAN of the trust domain, the two identities apart",
           (spiffe_srv, spiffe_cli))
    deadline = time.time() + 10
    while not os.path.exists(os.path.join(srv, "crl.pem")) and time.time() < deadline:
        time.sleep(0.1)
    tap.ok(os.path.exists(os.path.join(srv, "crl.pem")), "crl.pem once bcd holds the CRL",
           p.text())
    tap.eq([n for n in os.listdir(srv) if n.startswith(".")], [],
           "no temporary file left (one an earlier bcd left removed at start)")

    ng = agentlib.Proc(env, "nginx", nginx)
    env.procs.append(ng)
    agentlib.wait_port(port, ng.proc, "nginx")
    out, leaf = s_client(port, cli, os.path.join(srv, "svid_bundle.pem"))
    tap.ok("Verify return code: 0 (ok)" in out and leaf is not None and
           leaf.serial_number == chain[0].serial_number and uri_san(leaf) == spiffe_srv,
           "s_client with the client's SVID: the server's SVID verifies against svid_bundle.pem "
           "(its serial, its URI SAN)", out)
    tap.eq(client_uri(out), spiffe_cli,
           "nginx verified the client (SUCCESS); its certificate's URI SAN is the client workload's")

    # a renewal: the server's SVID revoked, provisioned again at once, the reload run
    done = p.text().count("files: %s: reload %s done" % (srv, reload))
    env.psql("SELECT bc_join.revoke_certificate('%032x', 'superseded')" % chain[0].serial_number)
    t0 = time.time()
    tap.ok(p.wait_log("files: %s: reload %s done" % (srv, reload), 15, count=done + 1),
           "a new SVID: the files replaced and nginx -s reload run (%.1f s)" % (time.time() - t0),
           p.text()[-3000:])
    chain2 = load_pems(open(os.path.join(srv, "svid.pem"), "rb").read())
    new = None
    for _ in range(30):         # nginx's workers pick the new files up
        out, leaf = s_client(port, cli, os.path.join(srv, "svid_bundle.pem"))
        if leaf is not None and leaf.serial_number != chain[0].serial_number:
            new = leaf
            break
        time.sleep(0.2)
    tap.ok(new is not None and new.serial_number == chain2[0].serial_number and
           "Verify return code: 0 (ok)" in out and uri_san(new) == spiffe_srv,
           "after the renewal s_client sees the new serial (the same SPIFFE ID)", out)
    crl = x509.load_pem_x509_crl(open(os.path.join(srv, "crl.pem"), "rb").read())
    tap.ok(crl.get_revoked_certificate_by_serial_number(chain[0].serial_number) is not None,
           "crl.pem lists the old serial")
    if federation and fed_ok:
        # B's bundle now empty: its file removed, the reload run again, no restart
        gone = "files: %s/federated: nothing written; removed: %s.pem" % (fed, TD_B)
        done = "files: %s: reload %s done" % (fed, reload_fed)
        ok = p.wait_log(gone, max(1.0, t_start + 12 - time.time()))
        deadline = time.time() + 5
        while ok and done not in p.text()[p.text().find(gone):] and time.time() < deadline:
            time.sleep(0.05)
        text = p.text()
        tap.ok(ok and not os.path.lexists(os.path.join(fed_sub, TD_B + ".pem")) and
               done in text[text.find(gone):],
               "B's bundle emptied: federated/%s.pem removed and the reload run (%.1f s after "
               "the start)" % (TD_B, time.time() - t_start), text[-3000:])
    # the node revoked: as the Workload API's streams end, the key and certificate go
    env.psql("SELECT bc_join.revoke_node('%s', 'keyCompromise')" % node)
    t0 = time.time()
    tap.ok(p.wait_log("files: %s: svid_key.pem and svid.pem removed: this node's certificate"
                      % srv, 15) and not os.path.exists(key) and
           not os.path.exists(os.path.join(srv, "svid.pem")) and
           not os.path.exists(os.path.join(cli, "svid_key.pem")),
           "revoke_node: svid_key.pem and svid.pem removed from both directories (%.1f s)"
           % (time.time() - t0), p.text()[-3000:])
    ng.stop()
    rc, _ = p.stop()
    tap.ok(rc == 0 and "Sanitizer" not in p.text(), "bcd stops cleanly (no sanitizer report)",
           p.text()[-3000:])


def federated_first(tap, env, p, fed, cli, srv, reload_fed, victim_b, root_b, leaf_b):
    """The federated directory's first write; True when it was made."""
    from cryptography import x509
    fed_sub = os.path.join(fed, "federated")
    b_file = os.path.join(fed_sub, TD_B + ".pem")
    written = "files: %s/federated: %s.pem written" % (fed, TD_B)
    ok = p.wait_log(written, 10) and p.wait_log("files: %s: reload %s done" % (fed, reload_fed), 10)
    tap.ok(ok, "bcd writes federated/%s.pem and runs FED's reload" % TD_B, p.text()[-3000:])
    if not ok:
        return False
    text = p.text()
    tap.ok(0 <= text.find("files: %s: a new X509-SVID" % fed) < text.find(written) <
           text.find("files: %s: reload" % fed),
           "the reload runs once, after the SVID's files and B's file are written", text[-3000:])
    roots = load_pems(open(b_file, "rb").read())
    root = x509.load_pem_x509_certificate(open(root_b, "rb").read())
    tap.ok(not os.path.islink(b_file) and open(victim_b).read() == "not a bundle\n" and
           oct(agentlib.mode(b_file)) == "0o644",
           "the link planted as federated/%s.pem is replaced (0644), its target untouched" % TD_B)
    tap.ok(len(roots) == 1 and roots[0] == root, "federated/%s.pem holds B's root alone" % TD_B,
           [c.subject for c in roots])
    ok_b, out_b = verify(b_file, leaf_b)
    ok_own, out_own = verify(os.path.join(fed, "svid_bundle.pem"), leaf_b)
    tap.ok(ok_b and not ok_own,
           "B's workload certificate verifies against federated/%s.pem, not against "
           "svid_bundle.pem (never merged)" % TD_B, (out_b, out_own))
    own = load_pems(open(os.path.join(fed, "svid_bundle.pem"), "rb").read())
    tap.ok(len(own) == 1 and own[0] != root and
           own == load_pems(open(os.path.join(srv, "svid_bundle.pem"), "rb").read()),
           "FED's svid_bundle.pem holds the own root only")
    tap.eq(sorted(os.listdir(fed_sub)), [TD_B + ".pem"],
           "a domain's file no longer in the set and a temporary file an earlier bcd left: removed")
    st = os.stat(fed_sub)
    tap.ok(st.st_uid == os.geteuid() and not st.st_mode & 0o022,
           "federated/ is bcd's uid's, writable by neither group nor others")
    tap.ok(os.listdir(os.path.join(cli, "federated")) == [] and
           not os.path.lexists(os.path.join(srv, "federated")),
           "the directories without federates= get no federated/ file (an earlier "
           "configuration's removed)", (os.listdir(os.path.join(cli, "federated")),))
    return True


def setup(env):
    """As agentlib.main's, with the gateway's signed documents at most 1 s old."""
    env.start_cluster("agents")
    env.make_tls()
    env.gateway("--service-keys-max-age", "1")


agentlib.run(agentlib.Env(), setup, body)
